// The library's training API: a parallel layout as process groups, and a model split over it that a
// program drives with its own loop (zero_grad, forward and backward, the optimizer's step), as oslo and
// LiBai let a PyTorch user do. The trainer (train::train) runs on the same pieces: make_groups builds
// its groups, ParallelModel's step is the trainer's ModelRunner (train/model_runner.h), step_context
// is its forward context, and save_pretrained / from_pretrained are models/pretrained.h's.
//
//   auto world = dist::launched_by_mpi() ? dist::mpi_world() : dist::self_communicator();
//   auto model = train::ParallelModel::from_pretrained("gpt2-dir", world, {.tp = 2, .pp = 2}, {.seq_len = 64});
//   optim::AdamW opt(model->parameters(), {});
//   for (std::int64_t step = 1; ; ++step) {
//     opt.zero_grad();
//     const double loss = model->forward_backward(next_micro_batches());
//     opt.step(lr);
//   }
//   model->save_pretrained("out", {.merged = true});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/dist/communicator.h"
#include "trident/dist/group.h"
#include "trident/dist/mesh.h"
#include "trident/models/transformer_lm.h"
#include "trident/models/pretrained.h"
#include "trident/parallel/pipeline/schedule.h"

namespace trident::train {

// The parallel layout: dist::Layout, the sizes by name (world = dp · tp · pp · cp; dp = 0 infers it; ep out
// of the data-parallel ranks).
using Layout = dist::Layout;

// This rank's place in a layout and its process groups: a view of dist::Mesh (which documents which ranks
// form each), a communicator for each group kind a step uses, with its rank and size by name.
// A group of one rank is a self communicator, so code need not special-case absent dimensions.
struct ParallelGroups {
  std::shared_ptr<dist::Communicator> world;  // the self communicator for a single process
  std::shared_ptr<dist::Communicator> dp;
  std::shared_ptr<dist::Communicator> tp;  // the tensor-parallel group (one rank without TP)
  std::shared_ptr<dist::Communicator> pp;  // the pipeline group: this rank's pipeline, ranks by stage
  // First and last stage of this rank's pipeline (Megatron's embedding group), where tied input/output
  // embeddings live; one rank on middle stages.
  std::shared_ptr<dist::Communicator> embedding;
  // Expert parallelism: the ranks that split each MoE layer's experts, and the ranks holding the same
  // experts, over which their gradients reduce (the data-parallel group when ep = 1).
  std::shared_ptr<dist::Communicator> ep;
  std::shared_ptr<dist::Communicator> expert_dp;
  // Context parallelism: the ranks that split each sequence, and the ranks over which gradients reduce,
  // which hold the same parameters and different tokens: dp × cp (dense) and expert-dp × cp (experts).
  // Without cp they are the data-parallel and expert-dp groups themselves.
  std::shared_ptr<dist::Communicator> cp;
  std::shared_ptr<dist::Communicator> dp_cp;
  std::shared_ptr<dist::Communicator> expert_dp_cp;
  std::unique_ptr<dist::Mesh> mesh;
  int rank = 0;
  int dp_rank = 0;
  int dp_size = 1;
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
  int ep_rank = 0;
  int ep_size = 1;
  int expert_dp_rank = 0;
  int cp_rank = 0;
  int cp_size = 1;
  int dp_cp_rank = 0;
  int dp_cp_size = 1;
  int expert_dp_cp_rank = 0;

  // The communicator of `kind` (every kind of dist::kGroups but model_parallel, which no step uses).
  const std::shared_ptr<dist::Communicator>& group(dist::GroupKind kind) const;
  // `kind`'s group as a layer holds it (nn::TensorParallel, nn::ExpertParallel): none when it has one rank.
  dist::Group layer_group(dist::GroupKind kind) const;

  bool is_root() const noexcept { return rank == 0; }
  bool pipelined() const noexcept { return pp_size > 1; }
  // This rank feeds the pipeline its micro-batches (first stage) or computes the loss (last stage).
  bool first_stage() const noexcept { return pp_rank == 0; }
  bool last_stage() const noexcept { return pp_rank == pp_size - 1; }
};

// Splits `world` into the groups of `layout`. Every rank of `world` must call it (the splits are
// collective). Errors name the sizes (dist::Mesh). `parent`, when given, is what the groups are split
// from (the NCCL twin of `world` for GPU tensors); `world` itself otherwise.
ParallelGroups make_groups(std::shared_ptr<dist::Communicator> world, const Layout& layout,
                           std::shared_ptr<dist::Communicator> parent = nullptr);

// The forward context of micro-batch `m` (0-based) of optimizer step `step` (1-based) for the
// data-parallel rank `dp_rank` of `dp_size`, each micro-batch `micro_batch` samples: the global batch
// is m' × micro_batch × dp_size samples, ordered micro-batch first, then data-parallel rank, so
// dropout masks (drawn at global sample coordinates) are the same under every layout.
nn::ForwardContext step_context(std::uint64_t seed, std::int64_t step, std::int64_t m, std::int64_t micro_batches,
                                std::int64_t micro_batch, int dp_rank, int dp_size,
                                DType compute_dtype = DType::f32);

// One micro-batch of a causal LM: token ids and their labels (the next tokens; -100 is ignored), both
// i64 [micro_batch_size, seq_len]; optionally Hugging Face's attention_mask for right-padded samples
// ([micro_batch_size, seq_len], i64, i32 or u8; 0 = padding, which no query sees), whose labels the
// program sets to -100. The trainer's data.packing = false gives such batches (data::Batch::key_mask).
struct MicroBatch {
  Tensor ids;
  Tensor labels;
  Tensor attention_mask = {};
};

struct ParallelModelOptions {
  std::int64_t micro_batch_size = 1;  // with seq_len: the shape of every micro-batch (pipeline boundaries)
  std::int64_t seq_len = 0;           // 0: the model's max_seq_len
  std::uint64_t seed = 0;             // initial values and dropout masks
  int virtual_stages = 1;             // model chunks per rank (the interleaved schedule)
  parallel::pipeline::Schedule schedule = parallel::pipeline::Schedule::one_f_one_b;
  std::vector<std::int64_t> stage_layers = {};  // layers per pipeline stage (empty: even split)
  bool activation_checkpointing = false;
  bool sequence_parallel = false;     // Megatron's sequence parallelism (tp > 1; seq_len divisible by tp)
  // Under context parallelism (Layout::cp > 1; seq_len divisible by 2·cp): DeepSpeed-Ulysses' head
  // all-to-all instead of the ring (parallel/context/attention.h).
  bool context_all_to_all = false;
};

// A causal LM split over a layout: this rank builds only its pipeline stage's layers and its
// tensor-parallel shards. It owns its groups and chunks; it keeps no optimizer (the program makes one
// over parameters(): any optim::Optimizer that is not ZeRO-partitioned).
class ParallelModel {
 public:
  // Collective over `world` (it makes the groups): every rank calls it with the same arguments. The
  // parameters are initialised from options.seed, as in a fresh training run.
  ParallelModel(const models::TransformerSpec& spec, std::shared_ptr<dist::Communicator> world, const Layout& layout,
                const ParallelModelOptions& options = {});
  // The same, with the weights of DIR (models/pretrained.h: a Hugging Face directory or a sharded save
  // of any layout); each rank reads only its own boxes.
  static std::unique_ptr<ParallelModel> from_pretrained(const std::string& dir,
                                                        std::shared_ptr<dist::Communicator> world,
                                                        const Layout& layout, const ParallelModelOptions& options = {});
  ~ParallelModel();
  ParallelModel(const ParallelModel&) = delete;
  ParallelModel& operator=(const ParallelModel&) = delete;

  const models::TransformerSpec& spec() const noexcept;
  const ParallelGroups& groups() const noexcept;
  // This rank's model chunks (one, or virtual_stages under the interleaved schedule).
  std::vector<const models::TransformerLM*> chunks() const;
  // Every parameter this rank holds: what its optimizer updates.
  const std::vector<nn::Parameter*>& parameters() const noexcept;
  // Zeroes the gradients (lazily, Variable::zero_grad), as the optimizer's zero_grad does.
  void zero_grad();

  // One step's forward and backward: this data-parallel rank's micro-batches (at least one; a multiple
  // of pp under the interleaved schedule) of the global batch (in
  // step_context's order), plainly one after the other, or through the pipeline schedule's
  // instruction list when pp > 1 — every rank of a pipeline passes the same count; the middle stages'
  // ids and labels are not read, their attention masks are (every stage's attention hides the padding). Gradients accumulate in fp32 and are then reduced (summed over the
  // data-parallel group with an overlapped bucketed all-reduce; the tied embedding between the first
  // and last stage), so after it every replica holds the gradient of the global batch's mean loss.
  // `normalizer`: what each token-loss sum is divided by (0: the global batch's label count, counting
  // labels that are not -100). Returns that mean loss, the same on every rank. Collective over the world.
  double forward_backward(const std::vector<MicroBatch>& micro_batches, double normalizer = 0);
  // The whole model's gradient norm (shards summed over TP, stages over PP, each parameter once), the
  // same on every rank; for clipping (optim::clip_coefficient). Collective over the world.
  double grad_norm();
  // The number of forward_backward calls so far (the step dropout masks are drawn for).
  std::int64_t steps() const noexcept;

  // Saves the model as DIR (models::save_pretrained: merged, or sharded with one file per rank).
  // Collective over the world; returns DIR's files.
  std::vector<std::string> save_pretrained(const std::string& dir, const models::SaveOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident::train
