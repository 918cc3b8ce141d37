// What a configuration needs in memory, per rank, before anything is allocated.
//
// The arithmetic is in long double, so sizes no machine holds (n_layer = 10⁹,
// max_seq_len = 2⁶², micro_batch_size = 10¹²) give a huge estimate instead of
// wrapping around. The training command refuses a configuration whose estimate
// exceeds the memory present; a planning tool can print the same estimate.
//
// Per rank, with P the model's parameters and P_r = P / (tp · pp) this rank's share:
//   parameters  P_r · 4 bytes (f32 master weights), / dp under ZeRO-3
//   gradients   P_r · 4 bytes, / dp under ZeRO-2 and 3
//   optimizer   P_r · 8 bytes for AdamW's two moments (4 for SGD), / dp under ZeRO-1, 2 and 3
//   activations micro_batch · seq_len tokens, per layer of this rank's stage about
//               (10·d_model + 2·d_ff) values saved for the backward (flash attention keeps no
//               seq_len² scores), / tp; with activation checkpointing only the layer inputs
//               (d_model values) plus one layer's whole; times the micro-batches in flight
//               (min(pp, accumulation) under a pipeline schedule); plus the logits and their
//               gradient (2 · vocab_size f32 values per token) on the last stage.
// Values are 4 bytes in fp32 and 2 in bf16/fp16. It is an estimate (workspaces,
// communication buffers and the allocator's slack come on top), meant to catch
// sizes that cannot possibly fit, not to pack memory tightly.
#pragma once

#include <cstdint>
#include <string>

#include "trident/models/causal_lm.h"
#include "trident/train/config.h"

namespace trident::train {

struct MemoryLayout {
  std::int64_t dp = 1, tp = 1, pp = 1;
  std::int64_t zero_stage = 0;
  std::int64_t accumulation = 1;  // micro-batches per data-parallel rank per step
};

struct MemoryEstimate {
  long double parameter_count = 0;  // the whole model's
  long double parameters = 0;       // bytes on one rank
  long double gradients = 0;
  long double optimizer = 0;
  long double activations = 0;
  long double total() const { return parameters + gradients + optimizer + activations; }
  // "about 12.3 GiB (parameters 1.2 GiB, gradients …)"
  std::string describe() const;
};

// The layout of `config` in a job of `world_size` ranks (validate_config's rules; accumulation from the batch keys).
MemoryLayout memory_layout(const Config& config, int world_size);
// What one rank of `layout` needs to train `spec` as `config` says.
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
