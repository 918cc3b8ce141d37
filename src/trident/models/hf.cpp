#include "trident/models/hf.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <variant>

#include "trident/checkpoint/safetensors.h"
#include "trident/checkpoint/torch_file.h"
#include "trident/core/atomic_file.h"
#include "trident/core/memory.h"
#include "trident/models/family.h"
#include "trident/models/hf_config.h"

namespace trident::models {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  TRIDENT_CHECK(in.good(), "cannot read '{}'", path);
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    TRIDENT_FAIL("'{}' is not valid JSON: {}", path, e.what());
  }
}

// A weight file of transformers' layouts: model.safetensors, its index, or a shard model-N-of-M.safetensors.
bool is_weight_file(const std::string& name) {
  return name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.starts_with("model-") && name.ends_with(".safetensors") && name.find("-of-") != std::string::npos);
}

// One weight file of a Hugging Face directory: safetensors, or PyTorch's zip (pytorch_model.bin).
using WeightFile = std::variant<checkpoint::SafetensorsFile, checkpoint::TorchFile>;

WeightFile open_weight_file(const std::string& path, bool pickled) {
  if (pickled) return checkpoint::TorchFile::open(path);
  return checkpoint::SafetensorsFile::open(path);
}

// Which file of DIR holds each tensor.
struct HfWeights {
  std::map<std::string, std::string> file_of;
  bool pickled = false;                                       // pytorch_model*.bin files
  std::map<std::string, std::shared_ptr<WeightFile>> opened;  // the single file, once read for its names
};

// transformers' order of preference: model.safetensors, model.safetensors.index.json, pytorch_model.bin,
// pytorch_model.bin.index.json. So safetensors wins over .bin files beside it, and a single file over an
// index (a sharded save followed by an unsharded one into the same directory removes the shards but
// leaves the index).
HfWeights find_hf_weights(const std::string& dir) {
  HfWeights w;
  for (const char* single : {"model.safetensors", "pytorch_model.bin"}) {
    const std::string path = (fs::path(dir) / single).string();
    if (!fs::exists(path)) continue;
    w.pickled = std::string_view(single).ends_with(".bin");
    auto f = std::make_shared<WeightFile>(open_weight_file(path, w.pickled));
    for (const auto& n : std::visit([](const auto& file) { return file.names(); }, *f)) w.file_of[n] = path;
    w.opened[path] = f;
    return w;
  }
  for (const char* index_name : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    const std::string index = (fs::path(dir) / index_name).string();
    if (!fs::exists(index)) continue;
    w.pickled = std::string_view(index_name).starts_with("pytorch_model");
    const json j = read_json(index);
    TRIDENT_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "'{}': missing weight_map", index);
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      TRIDENT_CHECK(it.value().is_string(), "'{}': weight_map.{} is {} (expected a file name)", index, it.key(),
                    it.value().dump());
      w.file_of[it.key()] = (fs::path(dir) / it.value().get<std::string>()).string();
    }
    return w;
  }
  TRIDENT_FAIL(
      "'{}' has no weights: expected model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
      "pytorch_model.bin.index.json",
      dir);
}

// Moves the finished export in `staging` to `dir`. A new `dir` is the staging directory renamed, whole
// at once. An existing one (it may hold files of the user's) is updated file by file: first the weight
// files the new export does not replace are removed, so none can shadow the new weights or be mixed in
// (a stale model.safetensors wins over a new index), then the new files are renamed over the old,
// config.json last. Only a crash during those renames can leave old and new files side by side.
void publish_export(const fs::path& staging, const fs::path& dir, const std::vector<std::string>& files) {
  if (!fs::exists(dir)) {
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path());
    fs::rename(staging, dir);
    fsync_directory(dir.has_parent_path() ? dir.parent_path() : fs::path("."));
    return;
  }
  TRIDENT_CHECK(fs::is_directory(dir), "Hugging Face export: '{}' exists and is not a directory", dir.string());
  const std::set<std::string> incoming(files.begin(), files.end());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (is_weight_file(name) && !incoming.count(name)) fs::remove(entry.path());
  }
  for (const std::string& f : files) {
    if (f != "config.json") fs::rename(staging / f, dir / f);
  }
  fs::rename(staging / "config.json", dir / "config.json");
  fsync_directory(dir);
  fs::remove_all(staging);
}

}  // namespace

TransformerSpec read_hf_config(const std::string& path) {
  const json j = read_json(path);
  const HfConfigReader config(j, path);
  const std::string type = config.get<std::string>("model_type");
  const Family* f = family_for_model_type(type);
  if (!f) {
    std::string known;
    for (const Family* g : families()) known += (known.empty() ? "" : ", ") + g->hf_model_type;
    TRIDENT_FAIL("'{}': model_type '{}' is not supported (expected one of {})", path, type, known);
  }
  TransformerSpec s = f->defaults();
  s.family = f->name;
  f->read_hf_config(config, s);
  if (config.has("bos_token_id")) s.bos_token_id = config.get<std::int64_t>("bos_token_id");
  if (config.has("eos_token_id")) {
    const json& eos = j["eos_token_id"];  // one id, or a list (Llama 3 instruct)
    s.eos_token_ids = eos.is_array() ? config.get<std::vector<std::int64_t>>("eos_token_id")
                                     : std::vector<std::int64_t>{config.get<std::int64_t>("eos_token_id")};
  }
  try {
    s.validate();
  } catch (const Error& e) {  // trident's names for the file's values: say which file they came from
    TRIDENT_FAIL("'{}': {} (trident's name for the value this config.json gives)", path, e.message());
  }
  return s;
}

std::string hf_config_json(const TransformerSpec& s, DType dtype) {
  const Family& f = family(s.family);
  json j = {{"architectures", {f.hf_architecture}}, {"model_type", f.hf_model_type}};
  HfConfigWriter config(j);
  f.write_hf_config(s, config);
  j["torch_dtype"] = std::string(torch_dtype_name(dtype));
  // Without these transformers would assume its defaults (50256 for GPT-2, 1 and 2 for LLaMA).
  j["bos_token_id"] = s.bos_token_id ? json(*s.bos_token_id) : json(nullptr);
  j["eos_token_id"] = s.eos_token_ids.empty()       ? json(nullptr)
                      : s.eos_token_ids.size() == 1 ? json(s.eos_token_ids[0])
                                                    : json(s.eos_token_ids);
  return j.dump(2) + "\n";
}

std::vector<std::string> write_hf(const TransformerSpec& spec, const std::string& dir, DType dtype,
                                  const TensorSource& source, std::uint64_t max_shard_bytes,
                                  const std::vector<std::string>& extra_files) {
  TRIDENT_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                "Hugging Face export: dtype must be fp32, bf16 or fp16, got {}", dtype);
  TRIDENT_CHECK(max_shard_bytes > 0, "Hugging Face export: the shard size limit must be positive");
  // The model's parameters in order, cut into files of at most max_shard_bytes of tensor data
  // (a tensor larger than the limit gets a file of its own, as transformers does).
  const TransformerLM layout(spec);  // names and global shapes only: nothing is allocated before initialize()
  const Family& fam = family(spec.family);
  std::vector<std::vector<const nn::Parameter*>> files(1);
  std::uint64_t in_file = 0, total = 0;
  for (const nn::Parameter* p : layout.parameters()) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(p->global_shape.numel()) * dtype_size(dtype);
    if (!files.back().empty() && in_file + bytes > max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(p);
    in_file += bytes;
    total += bytes;
  }
  // Everything is written into a staging directory beside DIR first: an error (a tensor missing from
  // the source, a full disk) leaves DIR as it was.
  fs::path target = fs::path(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" names "out"
  const fs::path staging = target.string() + ".tmp";
  fs::remove_all(staging);  // an earlier export that died part-way
  fs::create_directories(staging);
  std::vector<std::string> written;
  try {
    json weight_map = json::object();
    for (std::size_t f = 0; f < files.size(); ++f) {
      const std::string name = files.size() == 1
                                   ? "model.safetensors"
                                   : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, files.size());
      checkpoint::SafetensorsWriter writer;
      writer.set_metadata("format", "pt");
      for (const nn::Parameter* p : files[f]) {
        const std::string tensor = p->name;
        for (const std::string& stored : fam.hf_export_names(tensor)) {
          writer.add_lazy(stored, dtype, p->global_shape, [&source, tensor, dtype] { return source(tensor, dtype); });
          weight_map[stored] = name;
        }
      }
      writer.write((staging / name).string());
      written.push_back(name);
    }
    if (files.size() > 1) {
      write_file_atomically(staging / "model.safetensors.index.json",
                            json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
      written.push_back("model.safetensors.index.json");
    }
    for (const std::string& extra : extra_files) {
      const std::string name = fs::path(extra).filename().string();
      TRIDENT_CHECK(!is_weight_file(name) && name != "config.json",
                    "Hugging Face export: extra file '{}' would replace the export's own '{}'", extra, name);
      write_file_atomically(staging / name, read_whole_file(extra, "file to export"));
      written.push_back(name);
    }
    write_file_atomically(staging / "config.json", hf_config_json(spec, dtype));
    written.push_back("config.json");
    publish_export(staging, target, written);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  return written;
}

void save_hf(const TransformerLM& model, const std::string& dir, DType dtype, std::uint64_t max_shard_bytes) {
  std::map<std::string, Tensor> by_name;
  for (const nn::Parameter* p : model.parameters()) by_name[p->name] = p->whole_value();
  TRIDENT_CHECK(model.is_whole(), "save_hf: the model is one pipeline stage; export through a checkpoint instead");
  write_hf(
      model.spec(), dir, dtype, [&](const std::string& name, DType dt) { return by_name.at(name).to(dt); },
      max_shard_bytes);
}

// The names under which a transformers file may hold `fam`'s canonical parameter `name`, in the order they
// are looked for: the family's Hugging Face names (GPT-2 files saved from GPT2Model name them without
// GPT2LMHeadModel's "transformer." prefix), each followed by its TensorFlow-era form where it has one (like
// transformers, for any model, a norm's LayerNorm.weight and .bias may be stored as LayerNorm.gamma and
// .beta, as in BERT's pytorch_model.bin on the Hub).
namespace {

std::vector<std::string> stored_names(const Family& fam, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& n : fam.hf_names(name)) {
    out.push_back(n);
    for (auto [now, then] : {std::pair{"LayerNorm.weight", "LayerNorm.gamma"}, {"LayerNorm.bias", "LayerNorm.beta"}}) {
      const std::string_view suffix = now;
      if (n.ends_with(suffix)) out.push_back(n.substr(0, n.size() - suffix.size()) + then);
    }
  }
  return out;
}

}  // namespace

void load_hf_weights(TransformerLM& model, const std::string& dir) {
  const HfWeights weights = find_hf_weights(dir);
  const std::map<std::string, std::string>& file_of = weights.file_of;
  std::map<std::string, std::shared_ptr<WeightFile>> open_files = weights.opened;
  auto file = [&](const std::string& path) -> const WeightFile& {
    auto& slot = open_files[path];
    if (!slot) slot = std::make_shared<WeightFile>(open_weight_file(path, weights.pickled));
    return *slot;
  };
  const Family& fam = model.family();
  auto stored_name = [&](const std::string& name) {
    for (const std::string& n : stored_names(fam, name))
      if (file_of.count(n)) return n;
    return fam.hf_names(name).front();
  };
  MemoryCategoryScope scope(MemoryCategory::parameters);
  for (nn::Parameter* p : model.parameters()) {
    const std::string name = stored_name(p->name);
    auto it = file_of.find(name);
    if (it == file_of.end() && fam.optional_in_hf(p->name)) continue;  // keeps its initial values
    TRIDENT_CHECK(it != file_of.end(), "'{}': tensor '{}' not found (expected shape {})", dir, p->name,
                  p->global_shape);
    const WeightFile& f = file(it->second);
    TRIDENT_CHECK(std::visit([&](const auto& w) { return w.contains(name); }, f),
                  "'{}': tensor '{}' is not in '{}', where the index places it", dir, name, it->second);
    const Shape shape = std::visit([&](const auto& w) { return w.info(name).shape; }, f);
    TRIDENT_CHECK(shape == p->global_shape, "'{}': tensor '{}' has shape {} but the model expects {}", it->second, name,
                  shape, p->global_shape);
    TRIDENT_CHECK(p->var.defined(), "load_hf_weights: parameter '{}' is not initialised", p->name);
    const DType dtype = p->var.dtype();
    Tensor local;
    if (p->shard.is_whole()) {
      local = std::visit([&](const auto& w) { return w.tensor(name); }, f).to(dtype).clone();
    } else {
      local = Tensor::zeros(p->local_shape(), dtype);  // vocabulary padding rows stay zero
      for (const nn::ShardPiece& piece : p->shard.pieces) {
        const Tensor box =
            std::visit([&](const auto& w) { return w.read_box(name, piece.global_offsets, piece.extent); }, f);
        nn::copy_box_into(local, box.to(dtype), piece.local_offsets);
      }
    }
    p->var.set_data(local);
  }
}

std::vector<std::string> unused_hf_tensors(const TransformerSpec& spec, const std::string& dir) {
  const HfWeights weights = find_hf_weights(dir);
  const TransformerLM whole(spec);  // its parameters' names and shapes only: nothing is allocated until initialize
  const Family& fam = whole.family();
  std::set<std::string> used;
  const auto use = [&](const std::string& name) {
    for (const std::vector<std::string>& names : {stored_names(fam, name), fam.hf_export_names(name)})
      used.insert(names.begin(), names.end());
  };
  for (const nn::Parameter* p : whole.parameters()) use(p->name);
  if (spec.tie_embeddings) use(fam.names.lm_head + ".weight");  // transformers ties it over the embedding's
  std::vector<std::string> unused;
  for (const auto& [name, file] : weights.file_of)
    if (!used.contains(name) && !fam.hf_buffer(name)) unused.push_back(name);
  return unused;
}

}  // namespace trident::models
