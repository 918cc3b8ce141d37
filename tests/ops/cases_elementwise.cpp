// Op-table cases for the elementwise, reduction and shape families.
#include "op_table.h"
#include "trident/autograd/autograd.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;
using ops::Op;

std::vector<double> zip(const Tensor& a, const Tensor& b, double (*f)(double, double)) {
  auto x = values(a), y = values(b);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = f(x[i], y[i]);
  return x;
}

// Naive reference permutation through explicit index arithmetic.
Tensor reference_permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  const Shape& s = x.shape();
  std::vector<std::int64_t> out_dims;
  for (auto d : dims) out_dims.push_back(s[static_cast<std::size_t>(d)]);
  Shape os(out_dims);
  auto in = values(x);
  std::vector<double> out(in.size());
  const std::size_t r = s.rank();
  for (std::int64_t o = 0; o < os.numel(); ++o) {
    std::vector<std::int64_t> idx(r);
    std::int64_t rem = o;
    for (std::size_t d = r; d-- > 0;) {
      idx[d] = rem % os[d];
      rem /= os[d];
    }
    std::vector<std::int64_t> in_idx(r);
    for (std::size_t d = 0; d < r; ++d) in_idx[static_cast<std::size_t>(dims[d])] = idx[d];
    std::int64_t lin = 0;
    for (std::size_t d = 0; d < r; ++d) lin = lin * s[d] + in_idx[d];
    out[static_cast<std::size_t>(o)] = in[static_cast<std::size_t>(lin)];
  }
  return tensor_from(out, os);
}

// Reference slice of a 3-D tensor along dim 1.
Tensor reference_slice_mid(const Tensor& x, std::int64_t start, std::int64_t end) {
  const Shape& s = x.shape();
  auto in = values(x);
  std::vector<double> out;
  for (std::int64_t a = 0; a < s[0]; ++a)
    for (std::int64_t b = start; b < end; ++b)
      for (std::int64_t c = 0; c < s[2]; ++c) out.push_back(in[static_cast<std::size_t>((a * s[1] + b) * s[2] + c)]);
  return tensor_from(out, {s[0], end - start, s[2]});
}

std::vector<OpCase> make_elementwise_cases() {
  std::vector<OpCase> cases;
  auto two = [](Shape s) {
    return [s](std::mt19937_64& g) { return std::vector<Variable>{param(g, s), param(g, s)}; };
  };
  cases.push_back({"add", Op::add, two({3, 5}), [](auto& in) { return ag::add(in[0], in[1]); },
                   [](auto& in) { return tensor_from(zip(in[0], in[1], [](double a, double b) { return a + b; }), in[0].shape()); }});
  cases.back().dtypes.push_back({DType::bf16, 1e-2});
  cases.push_back({"sub", Op::sub, two({4, 3}), [](auto& in) { return ag::sub(in[0], in[1]); },
                   [](auto& in) { return tensor_from(zip(in[0], in[1], [](double a, double b) { return a - b; }), in[0].shape()); }});
  cases.push_back({"mul", Op::mul, two({2, 3, 4}), [](auto& in) { return ag::mul(in[0], in[1]); },
                   [](auto& in) { return tensor_from(zip(in[0], in[1], [](double a, double b) { return a * b; }), in[0].shape()); }});
  cases.back().dtypes.push_back({DType::bf16, 1e-2});
  cases.push_back({"scale", Op::scale, [](auto& g) { return std::vector<Variable>{param(g, {7})}; },
                   [](auto& in) { return ag::scale(in[0], -2.5); },
                   [](auto& in) {
                     auto v = values(in[0]);
                     for (auto& x : v) x *= -2.5;
                     return tensor_from(v, in[0].shape());
                   }});
  cases.push_back({"bias_add", Op::bias_add,
                   [](auto& g) { return std::vector<Variable>{param(g, {2, 3, 4}), param(g, {4})}; },
                   [](auto& in) { return ag::bias_add(in[0], in[1]); },
                   [](auto& in) {
                     auto v = values(in[0]);
                     auto b = values(in[1]);
                     for (std::size_t i = 0; i < v.size(); ++i) v[i] += b[i % 4];
                     return tensor_from(v, in[0].shape());
                   }});
  // cast: through f32 and back, so the gradient check sees an f64 output.
  OpCase cast{"cast_roundtrip_f32", Op::cast, [](auto& g) { return std::vector<Variable>{param(g, {3, 4})}; },
              [](auto& in) { return ag::cast(ag::cast(in[0], DType::f32), in[0].dtype()); },
              [](auto& in) { return in[0].to(DType::f32).to(DType::f64); }};
  cast.fd_step = 1e-2;
  cast.grad_rtol = 1e-4;
  cases.push_back(cast);
  cases.push_back({"sum", Op::sum, [](auto& g) { return std::vector<Variable>{param(g, {5, 6})}; },
                   [](auto& in) { return ag::sum(in[0]); },
                   [](auto& in) {
                     double s = 0;
                     for (double x : values(in[0])) s += x;
                     return tensor_from({s}, Shape{});
                   }});
  cases.push_back({"mean", Op::mean, [](auto& g) { return std::vector<Variable>{param(g, {4, 6})}; },
                   [](auto& in) { return ag::mean(in[0]); },
                   [](auto& in) {
                     double s = 0;
                     for (double x : values(in[0])) s += x;
                     return tensor_from({s / 24.0}, Shape{});
                   }});
  cases.push_back({"reshape", Op::reshape, [](auto& g) { return std::vector<Variable>{param(g, {2, 6})}; },
                   [](auto& in) { return ag::mul(ag::reshape(in[0], {3, -1}), ag::reshape(in[0], {3, 4})); },
                   [](auto& in) {
                     auto v = values(in[0]);
                     for (auto& x : v) x *= x;
                     return tensor_from(v, {3, 4});
                   }});
  cases.push_back({"permute_3d", Op::permute, [](auto& g) { return std::vector<Variable>{param(g, {2, 3, 4})}; },
                   [](auto& in) { return ag::permute(in[0], {2, 0, 1}); },
                   [](auto& in) { return reference_permute(in[0], {2, 0, 1}); }});
  cases.push_back({"permute_4d_heads", Op::permute, [](auto& g) { return std::vector<Variable>{param(g, {2, 3, 2, 4})}; },
                   [](auto& in) { return ag::permute(in[0], {0, 2, 1, 3}); },
                   [](auto& in) { return reference_permute(in[0], {0, 2, 1, 3}); }});
  cases.push_back({"transpose", Op::transpose, [](auto& g) { return std::vector<Variable>{param(g, {2, 3, 4})}; },
                   [](auto& in) { return ag::transpose(in[0], -1, 0); },
                   [](auto& in) { return reference_permute(in[0], {2, 1, 0}); }});
  // split: pieces recombined in a different order, so each piece's gradient is routed correctly.
  cases.push_back({"split", Op::split, [](auto& g) { return std::vector<Variable>{param(g, {2, 7, 3})}; },
                   [](auto& in) {
                     auto p = ag::split(in[0], {2, 4, 1}, 1);
                     return ag::concat({p[2], ag::scale(p[0], 3.0), p[1]}, 1);
                   },
                   [](auto& in) {
                     Tensor a = reference_slice_mid(in[0], 0, 2), b = reference_slice_mid(in[0], 2, 6),
                            c = reference_slice_mid(in[0], 6, 7);
                     std::vector<double> out;
                     auto va = values(a), vb = values(b), vc = values(c);
                     for (std::int64_t i = 0; i < 2; ++i) {
                       for (int k = 0; k < 3; ++k) out.push_back(vc[static_cast<std::size_t>(i * 3 + k)]);
                       for (int k = 0; k < 6; ++k) out.push_back(3.0 * va[static_cast<std::size_t>(i * 6 + k)]);
                       for (int k = 0; k < 12; ++k) out.push_back(vb[static_cast<std::size_t>(i * 12 + k)]);
                     }
                     return tensor_from(out, {2, 7, 3});
                   }});
  cases.push_back({"concat_last", Op::concat,
                   [](auto& g) { return std::vector<Variable>{param(g, {3, 2}), param(g, {3, 5})}; },
                   [](auto& in) { return ag::concat({in[0], in[1]}, -1); },
                   [](auto& in) {
                     auto a = values(in[0]), b = values(in[1]);
                     std::vector<double> out;
                     for (int r = 0; r < 3; ++r) {
                       for (int c = 0; c < 2; ++c) out.push_back(a[static_cast<std::size_t>(r * 2 + c)]);
                       for (int c = 0; c < 5; ++c) out.push_back(b[static_cast<std::size_t>(r * 5 + c)]);
                     }
                     return tensor_from(out, {3, 7});
                   }});
  cases.push_back({"slice_mid", Op::slice, [](auto& g) { return std::vector<Variable>{param(g, {2, 6, 3})}; },
                   [](auto& in) { return ag::slice(in[0], 1, 1, 4); },
                   [](auto& in) { return reference_slice_mid(in[0], 1, 4); }});
  return cases;
}

TRIDENT_OP_CASES(make_elementwise_cases);

}  // namespace
}  // namespace trident::testing
