// The op registry: the single list of every op trident implements.
//
// Adding an op means adding one line here; the static_assert below then fails
// until the count is updated, which is the reminder to follow the checklist in
// CONTRIBUTING.md (ops declaration, CPU kernel, CUDA kernel, autograd function,
// op-test-table case). The op test table (tests/ops) refuses to pass unless
// every differentiable op here has a gradient check and every op a reference check.
//
// `name` is the name the op's autograd function records (make_result): with
// autograd::set_verify_op_names(true) (the op test table turns it on) recording
// a name that is not listed here fails. Family `parallel`: the tensor- and
// vocabulary-parallel ops, whose inputs live on several ranks; they are checked
// by the multi-rank tests under tests/parallel and tests/nn, not by the op table.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trident::ops {

// X(name, family, differentiable)
#define TRIDENT_OP_LIST(X)               \
  X(matmul, matmul, true)                \
  X(linear, matmul, true)                \
  X(add, elementwise, true)              \
  X(sub, elementwise, true)              \
  X(mul, elementwise, true)              \
  X(scale, elementwise, true)            \
  X(bias_add, elementwise, true)         \
  X(cast, elementwise, true)             \
  X(sum, reduce, true)                   \
  X(mean, reduce, true)                  \
  X(gelu_tanh, activation, true)         \
  X(gelu, activation, true)              \
  X(silu, activation, true)              \
  X(swiglu, activation, true)            \
  X(tanh, activation, true)              \
  X(bias_gelu_tanh, activation, true)    \
  X(layer_norm, norm, true)              \
  X(rms_norm, norm, true)                \
  X(softmax, softmax, true)              \
  X(attention, attention, true)          \
  X(attention_merge, attention, false)   \
  X(embedding, embedding, true)          \
  X(cross_entropy, loss, true)           \
  X(dropout, dropout, true)              \
  X(rope, rope, true)                    \
  X(reshape, shape, true)                \
  X(permute, shape, true)                \
  X(transpose, shape, true)              \
  X(split, shape, true)                  \
  X(concat, shape, true)                 \
  X(slice, shape, true)                  \
  X(adamw, optimizer, false)             \
  X(adamw_step_multi, optimizer, false)  \
  X(sgd_step, optimizer, false)          \
  X(vocab_parallel_embedding, parallel, true)     \
  X(vocab_parallel_cross_entropy, parallel, true) \
  X(copy_to_tp, parallel, true)          \
  X(reduce_from_tp, parallel, true)      \
  X(scatter_to_tp, parallel, true)       \
  X(gather_from_tp, parallel, true)      \
  X(scatter_to_sp, parallel, true)       \
  X(gather_from_sp, parallel, true)      \
  X(reduce_scatter_to_sp, parallel, true) \
  X(expert_all_to_all, parallel, true)   \
  X(context_attention, parallel, true)

enum class Op : std::uint16_t {
#define TRIDENT_OP_ENUM(name, family, diff) name,
  TRIDENT_OP_LIST(TRIDENT_OP_ENUM)
#undef TRIDENT_OP_ENUM
};

struct OpInfo {
  Op op;
  std::string_view name;
  std::string_view family;  // kernel file: kernels/cpu/<family>.cpp
  bool differentiable;
};

inline constexpr std::array kOps = {
#define TRIDENT_OP_INFO(name, family, diff) OpInfo{Op::name, #name, #family, diff},
    TRIDENT_OP_LIST(TRIDENT_OP_INFO)
#undef TRIDENT_OP_INFO
};

// Update together with CONTRIBUTING.md's checklist and the op test table.
static_assert(kOps.size() == 45, "op registry changed: follow the add-an-op checklist in CONTRIBUTING.md");

constexpr const OpInfo& op_info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

// The registered op of that name, or null.
constexpr const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& info : kOps) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

}  // namespace trident::ops
