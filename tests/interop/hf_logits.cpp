// A helper for the model interop test (tests/interop/hf_models_interop.py):
//
//   hf_logits load HF_DIR IDS OUT [TP PP]
//                                    load a transformers save_pretrained directory,
//                                    write the fp32 logits of the token ids; under
//                                    mpirun with TP·PP ranks the model is split
//                                    tensor × pipeline parallel, each rank loading
//                                    only its slices (the last stage's TP rank 0 writes)
//   hf_logits checkpoint DIR IDS OUT load a trident checkpoint (any layout) on one
//                                    process, write the logits
//   hf_logits save ARCH HF_DIR IDS OUT
//                                    build a small random model (ARCH = a family with a -tiny preset,
//                                    llama3, or FAMILY-untied),
//                                    save it in Hugging Face layout, write its logits
//
// IDS is a comma-separated list (one sequence); OUT receives raw little-endian f32 [T, V].
// For encoders, TRIDENT_TOKEN_TYPES and TRIDENT_ATTENTION_MASK (comma-separated, like IDS) give
// the token types and the attention mask, and TRIDENT_OUTPUT=hidden writes the last hidden
// states [T, D] (BertModel's last_hidden_state) instead of the logits, TRIDENT_OUTPUT=pooled the
// pooled output [1, D] (its pooler_output; the model is built with a pooler).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/dist/mesh.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/models/hf.h"
#include "trident/train/trainer.h"

using namespace trident;

namespace {

std::vector<std::int64_t> parse_ids(const std::string& csv) {
  std::vector<std::int64_t> ids;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoll(item));
  return ids;
}

// The forward context with the encoder inputs the environment gives.
nn::ForwardContext context_for(std::int64_t T) {
  nn::ForwardContext ctx;
  for (auto [var, slot] : {std::pair{"TRIDENT_TOKEN_TYPES", &ctx.token_types}, {"TRIDENT_ATTENTION_MASK", &ctx.key_mask}}) {
    if (const char* v = std::getenv(var)) *slot = Tensor::from_vector(parse_ids(v), {1, T});
  }
  return ctx;
}

std::string output_kind() {
  const char* v = std::getenv("TRIDENT_OUTPUT");
  return v ? v : "logits";
}

models::TransformerSpec read_spec(const std::string& dir) {
  models::TransformerSpec spec = models::read_hf_config(dir + "/config.json");
  spec.pooler = output_kind() == "pooled";
  return spec;
}

// What TRIDENT_OUTPUT asks for, from the last hidden state h.
Tensor output_of(const models::TransformerLM& model, const autograd::Variable& h, const nn::ForwardContext& ctx) {
  const std::string kind = output_kind();
  const autograd::Variable out = kind == "hidden" ? h : kind == "pooled" ? model.pooled(h, ctx) : model.head(h, ctx);
  return out.data().to(DType::f32);
}

void write_logits(models::TransformerLM& model, const std::vector<std::int64_t>& ids, const std::string& out) {
  autograd::NoGradGuard no_grad;
  const auto T = static_cast<std::int64_t>(ids.size());
  const nn::ForwardContext ctx = context_for(T);
  const Tensor input = Tensor::from_vector(ids, {1, T});
  autograd::Variable h = model.stage_forward(input, autograd::Variable(), ctx);
  Tensor logits = output_of(model, h, ctx);
  std::ofstream f(out, std::ios::binary);
  f.write(static_cast<const char*>(logits.raw_data()), static_cast<std::streamsize>(logits.nbytes()));
}

// The logits of `ids` with the model split tp × pp over the MPI job.
void parallel_logits(const std::string& dir, int tp, int pp, const std::vector<std::int64_t>& ids,
                     const std::string& out) {
  auto world = dist::mpi_world(120.0);
  const dist::Mesh mesh(world->size(), tp, pp);
  auto tp_group = world->split(mesh.groups(dist::GroupKind::tp), "tp");
  auto pp_group = world->split(mesh.groups(dist::GroupKind::pp), "pp");
  const models::TransformerSpec spec = read_spec(dir);
  const int stage = pp_group->rank();
  models::TransformerLM model(spec, tp > 1 ? nn::TensorParallel{tp_group, false} : nn::TensorParallel{},
                         models::family(spec.family).partition(spec.n_layer, pp, {})[static_cast<std::size_t>(stage)]);
  model.initialize(0);
  models::load_hf_weights(model, dir);
  autograd::NoGradGuard no_grad;
  const auto T = static_cast<std::int64_t>(ids.size());
  const nn::ForwardContext ctx = context_for(T);
  autograd::Variable h;
  if (stage > 0) {
    Tensor in = Tensor::empty({1, T, spec.d_model}, DType::f32);
    pp_group->recv(in, stage - 1)->wait();
    h = autograd::Variable(in);
  }
  h = model.stage_forward(Tensor::from_vector(ids, {1, T}), h, ctx);
  if (stage + 1 < pp) {
    pp_group->send(h.data(), stage + 1)->wait();
  } else {
    Tensor logits = output_of(model, h, ctx);
    if (tp_group->rank() == 0) {
      std::ofstream f(out, std::ios::binary);
      f.write(static_cast<const char*>(logits.raw_data()), static_cast<std::streamsize>(logits.nbytes()));
    }
  }
  world->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "load" && argc == 7) {
      parallel_logits(argv[2], std::stoi(argv[5]), std::stoi(argv[6]), parse_ids(argv[3]), argv[4]);
      dist::finalize();
      return 0;
    }
    if (mode == "checkpoint" && argc == 5) {
      models::TransformerLM model(models::read_hf_config(std::string(argv[2]) + "/config.json"));
      model.initialize(0);
      train::load_checkpoint_weights(argv[2], model);
      write_logits(model, parse_ids(argv[3]), argv[4]);
      return 0;
    }
    if (mode == "load" && argc == 5) {
      models::TransformerLM model(read_spec(argv[2]));
      model.initialize(0);
      models::load_hf_weights(model, argv[2]);
      write_logits(model, parse_ids(argv[3]), argv[4]);
      return 0;
    }
    if (mode == "save" && argc == 6) {
      std::string arch = argv[2];
      const bool untied = arch.ends_with("-untied");  // e.g. bert-untied: the family's preset, head untied
      if (untied) arch.resize(arch.size() - std::string_view("-untied").size());
      models::TransformerSpec spec = models::preset((arch == "llama3" ? std::string("llama") : arch) + "-tiny");
      if (untied) spec.tie_embeddings = false;
      if (spec.sliding_window) spec.sliding_window = 5;  // shorter than the ids, so the window matters
      spec.vocab_size = 97;
      spec.max_seq_len = 32;
      if (arch == "llama3") {  // Llama 3.1's RoPE scaling, with an original context where all its cases occur
        spec.max_seq_len = 128;
        spec.rope = {500000.0, RopeScaling::llama3, 8.0, 1.0, 4.0, 64.0};
      }
      spec.init_std = 0.2;  // larger than the default so every term of the logits matters
      models::TransformerLM model(spec);
      model.initialize(11);
      // Norm weights and biases away from 1 and 0, so their layout is exercised too.
      for (nn::Parameter* p : model.parameters()) {
        if (p->init.kind == nn::InitKind::normal) continue;
        auto v = p->var.data().span<float>();
        for (std::size_t i = 0; i < v.size(); ++i) v[i] += 0.1f * static_cast<float>((i * 7919) % 13) / 13.0f - 0.05f;
      }
      models::save_hf(model, argv[3]);
      write_logits(model, parse_ids(argv[4]), argv[5]);
      return 0;
    }
    std::fprintf(stderr,
                 "usage: hf_logits load HF_DIR IDS OUT [TP PP] | hf_logits checkpoint DIR IDS OUT | "
                 "hf_logits save ARCH HF_DIR IDS OUT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_logits: %s\n", e.what());
    return 1;
  }
}
