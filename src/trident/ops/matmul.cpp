#include "trident/ops/matmul.h"

#include <vector>

#include "trident/kernels/cpu/matmul.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {

struct Plan {
  kernels::cpu::GemmShape gemm;
  Shape out_shape;
};

std::string transposes(bool trans_a, bool trans_b) {
  if (!trans_a && !trans_b) return "";
  return fmt::format(" (trans_a={}, trans_b={})", trans_a, trans_b);
}

Shape batch_dims(const Shape& s) { return Shape(std::vector<std::int64_t>(s.begin(), s.end() - 2)); }

Plan plan_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, std::string_view op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  TRIDENT_CHECK(a.rank() >= 2 && b.rank() >= 2, "{}: operands must have at least 2 dimensions, got a {} and b {}", op,
                a.shape(), b.shape());
  TRIDENT_CHECK(a.dtype() == b.dtype(), "{}: dtypes differ: a {} is {} but b {} is {}", op, a.shape(), a.dtype(),
                b.shape(), b.dtype());
  // f16 reaches here only to have its `out` checked: the entry points widen it to f32 first.
  TRIDENT_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64 || a.dtype() == DType::bf16 || a.dtype() == DType::f16,
                "{}: unsupported dtype {} for a {} and b {} (expected f32, f64, bf16 or f16)", op, a.dtype(), a.shape(),
                b.shape());
  check_same_device(a, b, op);

  Plan p;
  auto& g = p.gemm;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = trans_a ? a.size(-1) : a.size(-2);
  const std::int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  g.k = trans_b ? b.size(-1) : b.size(-2);
  g.n = trans_b ? b.size(-2) : b.size(-1);
  TRIDENT_CHECK(ka == g.k, "{}: inner dimensions differ: a {} (K={}) vs b {} (K={}){}", op, a.shape(), ka, b.shape(),
                g.k, transposes(trans_a, trans_b));

  const Shape ba = batch_dims(a.shape()), bb = batch_dims(b.shape());
  Shape out_batch;
  if (ba == bb) {
    out_batch = ba;
  } else if (b.rank() == 2) {
    out_batch = ba;
    g.broadcast_b = true;
  } else if (a.rank() == 2) {
    out_batch = bb;
    g.broadcast_a = true;
  } else {
    TRIDENT_FAIL("{}: batch dimensions differ: a {} vs b {} (they must be equal, or one operand 2-D)", op, a.shape(),
                 b.shape());
  }
  g.batch = out_batch.numel();
  p.out_shape = out_batch;
  p.out_shape.push_back(g.m);
  p.out_shape.push_back(g.n);
  if (g.broadcast_b && !trans_a && g.batch > 1) {
    // A weight shared by the batch entries of a row-major A: the entries are
    // just more rows of one GEMM (C's entries are consecutive rows too), which
    // packs the weight once instead of once per entry.
    g.m *= g.batch;
    g.batch = 1;
    g.broadcast_b = false;
  }
  return p;
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.storage() != y.storage()) return false;
  const std::size_t x0 = x.byte_offset(), y0 = y.byte_offset();
  return x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

}  // namespace

// This CPU has no f16 GEMM (no AVX512-FP16): f16 operands, exactly widened to
// f32, are multiplied in f32 and the result rounded once to f16 — fp16
// numerics for storage and loss scaling, at f32 speed. cuBLASLt multiplies
// f16 natively with the same numerics (f32 products and sums, one rounding).
static bool both_f16_on_cpu(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == DType::f16 && b.dtype() == DType::f16 && a.device().is_cpu() &&
         b.device().is_cpu();
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (both_f16_on_cpu(a, b)) return matmul(a.to(DType::f32), b.to(DType::f32), trans_a, trans_b).to(DType::f16);
  const Plan p = plan_matmul(a, b, trans_a, trans_b, "matmul");
  Tensor out = Tensor::empty(p.out_shape, a.dtype(), a.device());
  TRIDENT_KERNEL(a.device(), gemm, a.dtype(), a.dtype(), p.gemm, 1.0, a.raw_data(), b.raw_data(), 0.0, out.raw_data());
  return out;
}

void matmul_into(const Tensor& a, const Tensor& b, Tensor& out, bool trans_a, bool trans_b, double alpha, double beta) {
  if (both_f16_on_cpu(a, b) && out.defined() && (out.dtype() == DType::f16 || out.dtype() == DType::f32)) {
    Tensor acc = out.dtype() == DType::f16 ? out.to(DType::f32) : out;
    matmul_into(a.to(DType::f32), b.to(DType::f32), acc, trans_a, trans_b, alpha, beta);
    if (!acc.is_same(out)) out.copy_from(acc.to(DType::f16));
    return;
  }
  const Plan p = plan_matmul(a, b, trans_a, trans_b, "matmul_into");
  check_defined(out, "matmul_into", "out");
  TRIDENT_CHECK(out.shape() == p.out_shape, "matmul_into: out has shape {} but a {} times b {}{} gives {}", out.shape(),
                a.shape(), b.shape(), transposes(trans_a, trans_b), p.out_shape);
  const bool half = a.dtype() == DType::bf16 || a.dtype() == DType::f16;
  TRIDENT_CHECK(out.dtype() == a.dtype() || (half && out.dtype() == DType::f32),
                "matmul_into: out {} is {} but a {} and b {} are {} (out must be {}{})", out.shape(), out.dtype(),
                a.shape(), b.shape(), a.dtype(), a.dtype(), half ? " or f32" : "");
  check_same_device(a, out, "matmul_into");
  TRIDENT_CHECK(!overlaps(out, a) && !overlaps(out, b), "matmul_into: out {} overlaps an input (a {}, b {})",
                out.shape(), a.shape(), b.shape());
  TRIDENT_KERNEL(a.device(), gemm, a.dtype(), out.dtype(), p.gemm, alpha, a.raw_data(), b.raw_data(), beta,
                 out.raw_data());
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (both_f16_on_cpu(x, weight)) {
    return linear(x.to(DType::f32), weight.to(DType::f32), bias.defined() ? bias.to(DType::f32) : bias)
        .to(DType::f16);
  }
  check_defined(x, "linear", "x");
  check_defined(weight, "linear", "weight");
  TRIDENT_CHECK(x.rank() >= 1 && weight.rank() == 2,
                "linear: expected x [..., in] and weight [out, in], got x {} and weight {}", x.shape(), weight.shape());
  const std::int64_t in = x.size(-1), out_features = weight.size(0);
  TRIDENT_CHECK(weight.size(1) == in, "linear: x {} has {} input features but weight {} expects {}", x.shape(), in,
                weight.shape(), weight.size(1));
  if (bias.defined()) {
    TRIDENT_CHECK(bias.rank() == 1 && bias.size(0) == out_features,
                  "linear: bias {} does not match weight {} (expected [{}])", bias.shape(), weight.shape(), out_features);
    TRIDENT_CHECK(bias.dtype() == x.dtype(), "linear: bias {} is {} but x {} is {}", bias.shape(), bias.dtype(),
                  x.shape(), x.dtype());
    check_same_device(x, bias, "linear");
  }
  const std::int64_t rows = x.shape().outer(x.rank() - 1);
  const Tensor x2 = x.view({rows, in});
  const Plan p = plan_matmul(x2, weight, false, true, "linear");

  std::vector<std::int64_t> dims(x.shape().begin(), x.shape().end() - 1);
  dims.push_back(out_features);
  Tensor y = Tensor::empty(Shape(dims), x.dtype(), x.device());
#if TRIDENT_HAVE_CUDA
  if (bias.defined() && x.device().is_cuda()) {  // one kernel: cuBLASLt adds the bias in its epilogue
    kernels::cuda::DeviceGuard guard(x.device().index);
    kernels::cuda::gemm_epilogue(x.dtype(), x.dtype(), p.gemm, 1.0, x2.raw_data(), weight.raw_data(), 0.0,
                                 y.raw_data(), {kernels::cuda::GemmEpilogue::bias, bias.raw_data()});
    return y;
  }
#endif
  double beta = 0.0;
  if (bias.defined()) {
    TRIDENT_KERNEL(x.device(), broadcast_rows, x.dtype(), bias.raw_data(), y.raw_data(), rows, out_features);
    beta = 1.0;
  }
  TRIDENT_KERNEL(x.device(), gemm, x.dtype(), x.dtype(), p.gemm, 1.0, x2.raw_data(), weight.raw_data(), beta,
                 y.raw_data());
  return y;
}

}  // namespace trident::ops
