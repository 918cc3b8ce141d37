#include "trident/models/hf.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "trident/checkpoint/safetensors.h"
#include "trident/core/atomic_file.h"
#include "trident/core/memory.h"

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

template <typename T>
T get(const json& j, const std::string& key, const std::string& path) {
  TRIDENT_CHECK(j.contains(key) && !j[key].is_null(), "'{}': missing key '{}'", path, key);
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    TRIDENT_FAIL("'{}': key '{}' has the wrong type ({})", path, key, j[key].dump());
  }
}

// An optional key: `fallback` when absent or null; of the wrong type, an error naming the file and key.
template <typename T>
T get_or(const json& j, const std::string& key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return get<T>(j, key, path);
}

// A number of config.json's RoPE table `table`, named table.key in errors.
double rope_number(const json& r, const std::string& table, const char* key, const std::string& path) {
  TRIDENT_CHECK(r.contains(key) && r[key].is_number(), "'{}': {}.{} must be a number, got {}", path, table, key,
                r.contains(key) ? r[key].dump() : std::string("nothing"));
  return r[key].get<double>();
}

// RoPE's base and scaling. transformers before 5 writes them as rope_theta and rope_scaling {rope_type (or
// type), factor, ...}; transformers 5 as rope_parameters {rope_type, rope_theta, factor, ...}. Either is
// read; where both give a value they must agree. The rope_types built are default, linear and llama3.
RopeFrequencies read_rope(const json& j, const std::string& path) {
  RopeFrequencies rope;
  rope.theta = get_or<double>(j, "rope_theta", 10000.0, path);
  // transformers 4 reads a partial rotary factor at the top level, and transformers 5 moves it from there
  // into rope_parameters: either way it rotates only part of each head.
  TRIDENT_CHECK(
      !j.contains("partial_rotary_factor") || j["partial_rotary_factor"].is_null() || j["partial_rotary_factor"] == 1.0,
      "'{}': partial_rotary_factor {} is not supported (trident rotates the whole head)", path,
      j.contains("partial_rotary_factor") ? j["partial_rotary_factor"].dump() : "");
  std::string scaled_by;  // the table that set a scaling
  std::string theta_from = j.contains("rope_theta") && !j["rope_theta"].is_null() ? "rope_theta" : "";
  for (const std::string table : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(table) || j[table].is_null()) continue;
    const json& r = j[table];
    TRIDENT_CHECK(r.is_object(), "'{}': key '{}' must be an object, got {}", path, table, r.dump());
    if (r.contains("rope_theta") && !r["rope_theta"].is_null()) {
      const double theta = rope_number(r, table, "rope_theta", path);
      TRIDENT_CHECK(theta_from.empty() || theta == rope.theta, "'{}': {} {} and {}.rope_theta {} disagree", path,
                    theta_from, rope.theta, table, theta);
      rope.theta = theta;
      theta_from = table + ".rope_theta";
    }
    const std::string type = get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "default", path), path);
    TRIDENT_CHECK(!r.contains("partial_rotary_factor") || r["partial_rotary_factor"] == 1.0,
                  "'{}': {}.partial_rotary_factor {} is not supported (trident rotates the whole head)", path, table,
                  r.contains("partial_rotary_factor") ? r["partial_rotary_factor"].dump() : "");
    RopeFrequencies scaled{rope.theta};  // unscaled unless the table says otherwise
    if (type == "default") {
      // Nothing to build, but a table that says so contradicts one that scales (transformers lets
      // rope_scaling replace rope_parameters, so the two would be read differently).
    } else if (type == "linear") {
      scaled.scaling = RopeScaling::linear;
      scaled.factor = rope_number(r, table, "factor", path);
    } else if (type == "llama3") {
      scaled.scaling = RopeScaling::llama3;
      scaled.factor = rope_number(r, table, "factor", path);
      scaled.low_freq_factor = rope_number(r, table, "low_freq_factor", path);
      scaled.high_freq_factor = rope_number(r, table, "high_freq_factor", path);
      scaled.original_max_position = rope_number(r, table, "original_max_position_embeddings", path);
      // transformers 5 prefers a top-level original_max_position_embeddings to the table's (Phi-3 keeps it
      // there); transformers 4 reads the table's. Where both are given they must agree.
      TRIDENT_CHECK(
          !j.contains("original_max_position_embeddings") || j["original_max_position_embeddings"].is_null() ||
              j["original_max_position_embeddings"] == scaled.original_max_position,
          "'{}': original_max_position_embeddings {} and {}.original_max_position_embeddings {} disagree", path,
          j.contains("original_max_position_embeddings") ? j["original_max_position_embeddings"].dump() : "", table,
          scaled.original_max_position);
      TRIDENT_CHECK(scaled.low_freq_factor > 0 && scaled.high_freq_factor > scaled.low_freq_factor &&
                        scaled.original_max_position >= 1 && scaled.original_max_position < 1e15 &&
                        std::floor(scaled.original_max_position) == scaled.original_max_position,
                    "'{}': {} needs 0 < low_freq_factor < high_freq_factor and a whole positive "
                    "original_max_position_embeddings, got {}, {} and {}",
                    path, table, scaled.low_freq_factor, scaled.high_freq_factor, scaled.original_max_position);
    } else {
      TRIDENT_FAIL("'{}': {}.rope_type '{}' is not supported (default, linear or llama3)", path, table, type);
    }
    TRIDENT_CHECK(std::isfinite(scaled.factor) && scaled.factor > 0, "'{}': {}.factor {} must be positive", path, table,
                  scaled.factor);
    TRIDENT_CHECK(scaled_by.empty() || (scaled.scaling == rope.scaling && scaled.factor == rope.factor &&
                                        scaled.low_freq_factor == rope.low_freq_factor &&
                                        scaled.high_freq_factor == rope.high_freq_factor &&
                                        scaled.original_max_position == rope.original_max_position),
                  "'{}': {} and {} give different RoPE scalings", path, scaled_by, table);
    rope = scaled;
    scaled_by = table;
  }
  return rope;
}

// A weight file of transformers' layouts: model.safetensors, its index, or a shard model-N-of-M.safetensors.
bool is_weight_file(const std::string& name) {
  return name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.starts_with("model-") && name.ends_with(".safetensors") && name.find("-of-") != std::string::npos);
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
  const std::string type = get<std::string>(j, "model_type", path);
  TransformerSpec s;
  if (type == "gpt2") {
    s.arch = nn::Arch::gpt2;
    s.n_layer = get<std::int64_t>(j, "n_layer", path);
    s.n_head = s.n_kv_head = get<std::int64_t>(j, "n_head", path);
    s.d_model = get<std::int64_t>(j, "n_embd", path);
    s.d_ff = get_or<std::int64_t>(j, "n_inner", 4 * s.d_model, path);
    s.vocab_size = get<std::int64_t>(j, "vocab_size", path);
    s.max_seq_len = get<std::int64_t>(j, "n_positions", path);
    s.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, path);
    s.dropout = get_or<double>(j, "resid_pdrop", 0.0, path);
    s.init_std = get_or<double>(j, "initializer_range", 0.02, path);
    s.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", true, path);
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new", path);
    TRIDENT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
                  "'{}': activation_function '{}' is not supported (trident's GPT-2 uses gelu_new)", path, act);
    // GPT2Attention scales q·k by 1/sqrt(head_dim) only with scale_attn_weights, and further by 1/(layer + 1)
    // with scale_attn_by_inverse_layer_idx; trident's attention always uses 1/sqrt(head_dim).
    // (reorder_and_upcast_attn only changes the precision of the same product, and is accepted.)
    TRIDENT_CHECK(get_or<bool>(j, "scale_attn_weights", true, path),
                  "'{}': scale_attn_weights false (unscaled attention scores) is not supported", path);
    TRIDENT_CHECK(!get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false, path),
                  "'{}': scale_attn_by_inverse_layer_idx true is not supported", path);
  } else if (type == "llama") {
    s.arch = nn::Arch::llama;
    s.n_layer = get<std::int64_t>(j, "num_hidden_layers", path);
    s.n_head = get<std::int64_t>(j, "num_attention_heads", path);
    s.n_kv_head = get_or<std::int64_t>(j, "num_key_value_heads", s.n_head, path);
    s.d_model = get<std::int64_t>(j, "hidden_size", path);
    s.d_ff = get<std::int64_t>(j, "intermediate_size", path);
    s.vocab_size = get<std::int64_t>(j, "vocab_size", path);
    s.max_seq_len = get<std::int64_t>(j, "max_position_embeddings", path);
    s.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, path);
    s.init_std = get_or<double>(j, "initializer_range", 0.02, path);
    s.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false, path);
    const std::string act = get_or<std::string>(j, "hidden_act", "silu", path);
    TRIDENT_CHECK(act == "silu" || act == "swish",
                  "'{}': hidden_act '{}' is not supported (trident's LLaMA MLP is SwiGLU, hidden_act silu)", path, act);
    for (const char* bias : {"attention_bias", "mlp_bias"}) {
      TRIDENT_CHECK(!get_or<bool>(j, bias, false, path),
                    "'{}': {} true is not supported (trident's LLaMA has no biases)", path, bias);
    }
    s.rope = read_rope(j, path);
    if (s.n_head > 0) {  // else validate() names the bad head count
      const std::int64_t head_dim = get_or<std::int64_t>(j, "head_dim", s.d_model / s.n_head, path);
      TRIDENT_CHECK(head_dim == s.d_model / s.n_head,
                    "'{}': head_dim {} differs from hidden_size / num_attention_heads = {}", path, head_dim,
                    s.d_model / s.n_head);
    }
  } else {
    TRIDENT_FAIL("'{}': model_type '{}' is not supported (expected gpt2 or llama)", path, type);
  }
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) {
    s.bos_token_id = get<std::int64_t>(j, "bos_token_id", path);
  }
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& eos = j["eos_token_id"];  // one id, or a list (Llama 3 instruct)
    s.eos_token_ids = eos.is_array() ? get<std::vector<std::int64_t>>(j, "eos_token_id", path)
                                     : std::vector<std::int64_t>{get<std::int64_t>(j, "eos_token_id", path)};
  }
  s.validate();
  return s;
}

std::string hf_config_json(const TransformerSpec& s, DType dtype) {
  json j;
  const std::string torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  if (s.arch == nn::Arch::gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"activation_function", "gelu_new"},
         {"n_layer", s.n_layer},
         {"n_head", s.n_head},
         {"n_embd", s.d_model},
         {"n_inner", s.d_ff},
         {"n_positions", s.max_seq_len},
         {"n_ctx", s.max_seq_len},
         {"vocab_size", s.vocab_size},
         {"layer_norm_epsilon", s.norm_eps},
         {"resid_pdrop", s.dropout},
         {"embd_pdrop", s.dropout},
         {"attn_pdrop", 0.0},
         {"initializer_range", s.init_std},
         {"tie_word_embeddings", s.tie_embeddings},  // untied: GPT2LMHeadModel keeps its own lm_head.weight
         {"torch_dtype", torch_dtype}};
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"hidden_act", "silu"},
         {"num_hidden_layers", s.n_layer},
         {"num_attention_heads", s.n_head},
         {"num_key_value_heads", s.n_kv_head},
         {"hidden_size", s.d_model},
         {"intermediate_size", s.d_ff},
         {"max_position_embeddings", s.max_seq_len},
         {"vocab_size", s.vocab_size},
         {"rms_norm_eps", s.norm_eps},
         {"rope_theta", s.rope.theta},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"initializer_range", s.init_std},
         {"tie_word_embeddings", s.tie_embeddings},
         {"torch_dtype", torch_dtype}};
    // The scaling in transformers 4's layout (as Llama 3.1's own config.json), which transformers 5 also reads.
    if (s.rope.scaling == RopeScaling::linear) {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.rope.factor}};
    } else if (s.rope.scaling == RopeScaling::llama3) {
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", s.rope.factor},
          {"low_freq_factor", s.rope.low_freq_factor},
          {"high_freq_factor", s.rope.high_freq_factor},
          {"original_max_position_embeddings", static_cast<std::int64_t>(s.rope.original_max_position)}};
    }
  }
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
  const CausalLM layout(spec);  // names and global shapes only: nothing is allocated before initialize()
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
        writer.add_lazy(tensor, dtype, p->global_shape, [&source, tensor, dtype] { return source(tensor, dtype); });
        weight_map[tensor] = name;
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

void save_hf(const CausalLM& model, const std::string& dir, DType dtype, std::uint64_t max_shard_bytes) {
  std::map<std::string, const nn::Parameter*> by_name;
  for (const nn::Parameter* p : model.parameters()) {
    TRIDENT_CHECK(p->shard.is_whole(), "save_hf: parameter '{}' is sharded; export through a checkpoint instead",
                  p->name);
    TRIDENT_CHECK(p->var.defined(), "save_hf: parameter '{}' is not initialised", p->name);
    by_name[p->name] = p;
  }
  TRIDENT_CHECK(model.is_whole(), "save_hf: the model is one pipeline stage; export through a checkpoint instead");
  write_hf(
      model.spec(), dir, dtype, [&](const std::string& name, DType dt) { return by_name.at(name)->var.data().to(dt); },
      max_shard_bytes);
}

void load_hf_weights(CausalLM& model, const std::string& dir) {
  // Which file holds each tensor: an index for sharded checkpoints, else the single file.
  std::map<std::string, std::string> file_of;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    const json j = read_json(index.string());
    TRIDENT_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "'{}': missing weight_map", index.string());
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      file_of[it.key()] = (fs::path(dir) / it.value().get<std::string>()).string();
    }
  } else {
    const fs::path single = fs::path(dir) / "model.safetensors";
    TRIDENT_CHECK(fs::exists(single), "'{}' has neither model.safetensors nor model.safetensors.index.json", dir);
    auto f = checkpoint::SafetensorsFile::open(single.string());
    for (const auto& n : f.names()) file_of[n] = single.string();
  }
  std::map<std::string, std::shared_ptr<checkpoint::SafetensorsFile>> open_files;
  auto file = [&](const std::string& path) -> const checkpoint::SafetensorsFile& {
    auto& slot = open_files[path];
    if (!slot) slot = std::make_shared<checkpoint::SafetensorsFile>(checkpoint::SafetensorsFile::open(path));
    return *slot;
  };
  // GPT-2 checkpoints saved from GPT2Model (OpenAI's weights on the Hub among
  // them) name the tensors without GPT2LMHeadModel's "transformer." prefix.
  constexpr std::string_view kGpt2Prefix = "transformer.";
  auto stored_name = [&](const std::string& name) {
    if (file_of.count(name) || model.spec().arch != nn::Arch::gpt2 || !name.starts_with(kGpt2Prefix)) return name;
    const std::string bare = name.substr(kGpt2Prefix.size());
    return file_of.count(bare) ? bare : name;
  };
  MemoryCategoryScope scope(MemoryCategory::parameters);
  for (nn::Parameter* p : model.parameters()) {
    const std::string name = stored_name(p->name);
    auto it = file_of.find(name);
    TRIDENT_CHECK(it != file_of.end(), "'{}': tensor '{}' not found (expected shape {})", dir, p->name,
                  p->global_shape);
    const auto& f = file(it->second);
    const auto& info = f.info(name);
    TRIDENT_CHECK(info.shape == p->global_shape, "'{}': tensor '{}' has shape {} but the model expects {}", it->second,
                  name, info.shape, p->global_shape);
    TRIDENT_CHECK(p->var.defined(), "load_hf_weights: parameter '{}' is not initialised", p->name);
    const DType dtype = p->var.dtype();
    Tensor local;
    if (p->shard.is_whole()) {
      local = f.tensor(name).to(dtype).clone();
    } else {
      local = Tensor::zeros(p->local_shape(), dtype);  // vocabulary padding rows stay zero
      for (const nn::ShardPiece& piece : p->shard.pieces) {
        nn::copy_box_into(local, f.read_box(name, piece.global_offsets, piece.extent).to(dtype), piece.local_offsets);
      }
    }
    p->var.set_data(local);
  }
}

}  // namespace trident::models
