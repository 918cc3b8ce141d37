#include "trident/train/run_checkpoint.h"

#include <filesystem>
#include <fstream>

#include "trident/models/hf.h"

namespace trident::train::detail {

namespace fs = std::filesystem;

namespace {

checkpoint::TensorPiece whole(const std::string& key, const Tensor& data) {
  return {key, data.shape(), std::vector<std::int64_t>(data.rank(), 0), data};
}

std::string shard_file(int rank) { return fmt::format("shard-{:05d}.safetensors", rank); }

}  // namespace

std::string save_checkpoint(const std::string& root, const models::CausalLM& model, const ParallelState& par,
                            const RunState& state, const Config& config, const std::string& tokenizer_path) {
  const std::string final_dir = (fs::path(root) / fmt::format("step_{:08d}", state.step)).string();
  const std::string tmp = final_dir + ".tmp";
  if (par.is_root()) checkpoint::begin_checkpoint(final_dir);
  par.world->barrier();

  std::vector<checkpoint::TensorPiece> pieces;
  if (par.zero_stage < 3 && par.is_root()) {
    for (const nn::Parameter* p : model.parameters()) pieces.push_back(whole("model/" + p->name, p->var.data()));
  }
  if (par.zero) {
    for (const auto& [key, shard] : par.zero->owned_state()) {
      const std::string name = key.substr(key.find('/') + 1);
      const nn::Parameter* p = nullptr;
      for (const nn::Parameter* q : model.parameters())
        if (q->name == name) p = q;
      TRIDENT_CHECK(p != nullptr, "checkpoint: state '{}' belongs to no parameter", key);
      std::vector<std::int64_t> offsets(p->global_shape.rank(), 0);
      if (!offsets.empty()) offsets[0] = shard.row_offset;
      pieces.push_back({key, p->global_shape, offsets, shard.data});
    }
  } else if (par.is_root()) {
    for (const auto& [key, tensor] : par.optimizer->state()) pieces.push_back(whole(key, tensor));
  }
  checkpoint::write_shard((fs::path(tmp) / shard_file(par.rank)).string(), pieces);
  if (par.is_root()) {
    std::ofstream(fs::path(tmp) / "config.toml") << to_toml(config);
    std::ofstream(fs::path(tmp) / "config.json") << models::hf_config_json(model.spec());
    fs::copy_file(tokenizer_path, fs::path(tmp) / "tokenizer.json", fs::copy_options::overwrite_existing);
  }
  par.world->barrier();
  if (par.is_root()) {
    std::vector<std::string> files = {"config.toml", "config.json", "tokenizer.json"};
    for (int r = 0; r < par.world->size(); ++r) files.push_back(shard_file(r));
    nlohmann::json meta = {{"step", state.step},
                           {"consumed_samples", state.consumed_samples},
                           {"optimizer_step", par.optimizer_steps()},
                           {"loss_scale", state.loss_scale},
                           {"seed", config.train.seed},
                           {"layout",
                            {{"world_size", par.world->size()},
                             {"dp", par.dp_size},
                             {"tp", 1},
                             {"pp", 1},
                             {"zero_stage", par.zero_stage}}},
                           {"config", to_toml(config)}};
    checkpoint::commit_checkpoint(tmp, final_dir, meta, files, (fs::path(root) / "latest").string());
    checkpoint::prune_checkpoints(root, config.checkpoint.keep, final_dir);
  }
  par.world->barrier();
  return final_dir;
}

void load_model(const checkpoint::CheckpointReader& reader, models::CausalLM& model) {
  for (nn::Parameter* p : model.parameters()) {
    const std::string key = "model/" + p->name;
    TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no tensor '{}'", reader.dir(), p->name);
    TRIDENT_CHECK(reader.global_shape(key) == p->global_shape,
                  "checkpoint '{}': tensor '{}' has shape {} but the model expects {}", reader.dir(), p->name,
                  reader.global_shape(key), p->global_shape);
    p->var.data().copy_from(reader.read(key, p->var.dtype()));
  }
}

RunState load_optimizer_and_state(const checkpoint::CheckpointReader& reader, ParallelState& par) {
  const auto& meta = reader.meta();
  if (par.zero) {
    par.zero->load_state([&](const std::string& key, std::int64_t row_begin, std::int64_t rows) {
      TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no optimizer state '{}'", reader.dir(), key);
      const Shape& g = reader.global_shape(key);
      std::vector<std::int64_t> offsets(g.rank(), 0);
      Shape box = g;
      if (g.rank()) {
        offsets[0] = row_begin;
        box[0] = rows;
      }
      return reader.read(key, offsets, box, DType::f32);
    });
    par.zero->set_step(meta.value("optimizer_step", std::int64_t{0}));
  } else {
    std::map<std::string, Tensor> state;
    for (const auto& [key, tensor] : par.optimizer->state()) {
      TRIDENT_CHECK(reader.contains(key), "checkpoint '{}' has no optimizer state '{}'", reader.dir(), key);
      state[key] = reader.read(key, tensor.dtype());
    }
    par.optimizer->load_state(state);
    par.optimizer->set_step(meta.value("optimizer_step", std::int64_t{0}));
  }
  RunState rs;
  rs.step = meta.at("step").get<std::int64_t>();
  rs.consumed_samples = meta.at("consumed_samples").get<std::int64_t>();
  rs.loss_scale = meta.value("loss_scale", 0.0);
  return rs;
}

}  // namespace trident::train::detail
