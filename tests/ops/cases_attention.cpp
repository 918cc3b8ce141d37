// Op-table cases for attention: causal and not, grouped-query heads, a KV
// cache (S > T), an additive mask, odd sizes and sliding windows (smaller
// than, equal to and larger than T, window 1, with a cache, GQA), against the naive f64
// softmax(scale·QKᵀ + mask)·V of attention_reference.h.
#include <cmath>
#include <limits>

#include "attention_reference.h"
#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

struct Config {
  std::string name;
  std::int64_t B, T, S, H, Hkv, D;
  bool causal;
  double scale;    // 0: 1/sqrt(D)
  bool with_mask;  // random additive mask [T, S] with a few -inf entries
  std::int64_t window = 0;
};

// A random mask in [-1, 1) with roughly one entry in five hidden (-inf),
// keeping at least one visible key in every row.
Tensor random_mask(std::mt19937_64& gen, std::int64_t T, std::int64_t S) {
  Tensor m = random_tensor(gen, {T, S});
  auto x = m.span<double>();
  std::uniform_int_distribution<int> pick(0, 4);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t s = 0; s + 1 < S; ++s)  // the last key of a row stays visible
      if (pick(gen) == 0) x[static_cast<std::size_t>(t * S + s)] = -std::numeric_limits<double>::infinity();
  return m;
}

OpCase make_case(const Config& c) {
  OpCase oc;
  oc.name = c.name;
  oc.op = ops::Op::attention;
  oc.make_inputs = [c](std::mt19937_64& g) {
    std::vector<Variable> in{param(g, {c.B, c.T, c.H, c.D}), param(g, {c.B, c.S, c.Hkv, c.D}),
                             param(g, {c.B, c.S, c.Hkv, c.D})};
    if (c.with_mask) in.push_back(constant(random_mask(g, c.T, c.S)));
    return in;
  };
  oc.forward = [c](const std::vector<Variable>& in) {
    ops::AttentionOptions o;
    o.causal = c.causal;
    o.scale = c.scale;
    o.window = c.window;
    if (c.with_mask) o.mask = in[3].data();
    return ag::attention(in[0], in[1], in[2], o);
  };
  oc.reference = [c](const std::vector<Tensor>& in) {
    NaiveAttention n{c.B, c.T, c.S, c.H, c.Hkv, c.D, c.causal,
                     c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D)), {}, c.window};
    if (c.with_mask) n.mask = values(in[3]);
    return tensor_from(n.forward(values(in[0]), values(in[1]), values(in[2])), in[0].shape());
  };
  oc.dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::bf16, 1e-2}};
  return oc;
}

std::vector<OpCase> make_attention_cases() {
  const std::vector<Config> configs = {
      {"attention_causal", 2, 5, 5, 2, 2, 4, true, 0, false},
      {"attention_noncausal_odd", 1, 5, 7, 2, 2, 3, false, 0, false},
      {"attention_gqa_h4_kv2", 1, 6, 6, 4, 2, 4, true, 0, false},
      {"attention_kv_cache_s_gt_t", 2, 3, 7, 2, 1, 4, true, 0, false},
      {"attention_mask_scale", 1, 5, 7, 2, 2, 5, false, 0.3, true},
      {"attention_mask_causal_gqa", 1, 7, 7, 4, 2, 6, true, 0, true},
      {"attention_window_lt_t", 2, 9, 9, 2, 2, 4, true, 0, false, 3},
      {"attention_window_eq_t", 1, 6, 6, 2, 2, 4, true, 0, false, 6},
      {"attention_window_gt_t", 1, 5, 5, 2, 1, 4, true, 0.4, false, 8},
      {"attention_window_1", 1, 5, 5, 2, 2, 3, true, 0, false, 1},
      {"attention_window_kv_cache", 2, 3, 8, 2, 1, 4, true, 0, false, 4},
      {"attention_window_gqa_mask", 1, 8, 8, 4, 2, 5, true, 0, true, 3},
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) cases.push_back(make_case(c));
  return cases;
}

TRIDENT_OP_CASES(make_attention_cases);

}  // namespace
}  // namespace trident::testing
