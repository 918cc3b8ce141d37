// The op registry: the single list of every op trident implements.
//
// Adding an op means adding one line here; the static_assert below then fails
// until the count is updated, which is the reminder to follow the checklist in
// CONTRIBUTING.md (ops declaration, CPU kernel, CUDA kernel, autograd function,
// op-test-table case). The op test table (tests/ops) refuses to pass unless
// every differentiable op here has a gradient check and every op a reference check.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trident::ops {

// X(name, family, differentiable)
#define TRIDENT_OP_LIST(X)               \
  X(matmul, matmul, true)                \
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
  X(layer_norm, norm, true)              \
  X(rms_norm, norm, true)                \
  X(softmax, softmax, true)              \
  X(attention, attention, true)          \
  X(embedding, embedding, true)          \
  X(cross_entropy, loss, true)           \
  X(dropout, dropout, true)              \
  X(rope, rope, true)                    \
  X(reshape, shape, true)                \
  X(permute, shape, true)                \
  X(split, shape, true)                  \
  X(concat, shape, true)                 \
  X(slice, shape, true)                  \
  X(adamw, optimizer, false)

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
static_assert(kOps.size() == 27, "op registry changed: follow the add-an-op checklist in CONTRIBUTING.md");

constexpr const OpInfo& op_info(Op op) { return kOps[static_cast<std::size_t>(op)]; }

}  // namespace trident::ops
