// What a configuration needs in memory, per rank, before anything is allocated: the one memory model
// that the training command's check and `trident plan` share (docs/parallelism.md#memory-and-planning).
//
// The arithmetic is in long double, so sizes no machine holds (n_layer = 10⁹,
// max_seq_len = 2⁶², micro_batch_size = 10¹²) give a huge estimate instead of
// wrapping around. The training command refuses a configuration whose estimate
// exceeds the memory present; `trident plan` prints it per rank.
//
// Per rank of pipeline stage r, with P_r the parameters it holds (its layers, the embeddings on the
// first stage, the head — and a tied embedding's copy — on the last; attention, MLP and vocabulary
// split by tp, experts by ep):
//   weights     P_r · 4 bytes of f32 weights (the master copy under bf16/fp16), / dp under ZeRO-3,
//               plus P_r · 2 bytes of bf16/fp16 compute copies (one cached copy per weight)
//   gradients   P_r · 4 bytes, / dp under ZeRO-2/3 (which still build each micro-batch's whole gradient
//               before reduce-scattering it: a transient of P_r · 4 and the largest tensor's buffers;
//               under ZeRO-3 it coexists with the recomputation of the first block)
//   optimizer   P_r · the registered optimizer's state bytes (AdamW 8, SGD 4), / dp under ZeRO-1/2/3
//   activations per micro-batch, micro_batch · seq_len tokens × the stage's layers × the values a
//               block saves (models::Family::block_activations: the replicated part / tp only under
//               sequence parallelism, the rest / tp), in the compute dtype; with activation
//               checkpointing (and under ZeRO-3, which recomputes its units) only each layer's input
//               (d_model values) plus one layer recomputed and its backward's working values; times
//               the micro-batches in flight (GPipe: all m; 1F1B: min(pp − r, m); interleaved: the
//               warm-up forwards plus one, in chunks); plus, on the last stage, the logits and their
//               gradient (2 · vocab / tp values per token).
// Experts' state is divided over the expert-data-parallel group (dp / ep) instead of dp. Under context
// parallelism (cp) each rank holds seq_len / cp tokens of each sample, ZeRO partitions over dp × cp (the
// ranks that reduce the same gradients), and a layer's backward holds the attention's travelling buffers
// beside its working values: the ring's two K/V blocks and two f32 dK/dV accumulators, and f32 dq; the
// all-to-all's whole-sequence q, k, v, out and their gradients over its heads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trident/models/transformer_lm.h"
#include "trident/train/config/config.h"

namespace trident::train {

struct MemoryLayout {
  std::int64_t dp = 1, tp = 1, pp = 1, ep = 1;
  std::int64_t cp = 1;              // dist.context_parallel_size: each rank holds seq_len / cp tokens
  bool cp_all_to_all = false;       // dist.context_parallel_algorithm = "all_to_all" (else the ring)
  std::int64_t virtual_stages = 1;  // dist.virtual_pipeline_size
  std::int64_t zero_stage = 0;
  std::int64_t accumulation = 1;    // micro-batches per data-parallel rank per step
  std::string schedule = "1f1b";    // gpipe | 1f1b | interleaved
  bool sequence_parallel = false;
  bool checkpointing = false;
  std::int64_t ranks() const { return dp * tp * pp * cp; }
  // "dp8 tp2 cp2 pp4 (1f1b) zero1 ckpt"
  std::string describe() const;
};

// One rank of one pipeline stage (every rank of a stage holds the same).
struct StageMemory {
  int stage = 0;
  std::int64_t layers = 0;
  long double parameter_count = 0;  // parameters this rank holds (before ZeRO-3 sharding)
  long double weights = 0;          // bytes of f32 weights (ZeRO-3: this rank's shard)
  long double compute_copies = 0;   // bytes of bf16/fp16 copies of the weights
  long double gradients = 0;
  long double optimizer = 0;
  long double activations_per_micro_batch = 0;            // saved for backward, one micro-batch
  long double activations_per_micro_batch_checkpointed = 0;  // the same with activation checkpointing
  long double activations_per_micro_batch_sequence_parallel = 0;  // without checkpointing, with sequence parallelism
  long double in_flight = 1;        // micro-batches whose activations are held at once
  long double activations = 0;      // saved activations of the micro-batches in flight
  // Short-lived: beside the activations, the logits and their gradient (last stage) or a recomputed
  // layer; after the backward, the reduce's buffers (ZeRO-2/3: the whole gradient before its scatter).
  long double working = 0;
  long double reduce = 0;
  long double states() const { return weights + compute_copies + gradients + optimizer; }
  long double transient() const { return activations + working > reduce ? activations + working : reduce; }
  long double total() const { return states() + transient(); }
};

struct MemoryEstimate {
  long double parameter_count = 0;  // the whole model's
  std::vector<StageMemory> stages;  // one per pipeline stage
  // The largest stage's parts, in bytes on one of its ranks.
  long double parameters = 0;  // weights and their compute copies
  long double gradients = 0;
  long double optimizer = 0;
  long double activations = 0;
  long double total() const { return parameters + gradients + optimizer + activations; }
  // "about 12.3 GiB (parameters 1.2 GiB, gradients …)"
  std::string describe() const;
};

// The layout of `config` in a job of `world_size` ranks (validate_config's rules; accumulation from the batch keys).
MemoryLayout memory_layout(const Config& config, int world_size);
// What each rank of `layout` needs to train `spec` as `config` says (its precision, optimizer, batch).
MemoryEstimate estimate_memory(const Config& config, const models::TransformerSpec& spec, const MemoryLayout& layout);
// Bytes as "12.3 GiB" (KiB to EiB, then powers of ten of EiB).
std::string format_bytes(long double bytes);
// The memory of this host (MemTotal of /proc/meminfo, else sysconf), in bytes; 0 when unknown.
long double host_memory_bytes();
// Throws one line naming the keys that size the estimate when it exceeds `available` bytes on `where`.
// `parameters_only`: compare only the parameters (a GPU run initialises its parameters in host memory and
// keeps everything else on the device, whose size this check does not know).
void check_memory_fits(const Config& config, const models::TransformerSpec& spec, const MemoryLayout& layout,
                       long double available, const std::string& where, bool parameters_only = false);

}  // namespace trident::train
