#include "trident/autograd/functions/matmul.h"

#include "trident/autograd/function.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/matmul.h"
#include "trident/ops/reduce.h"

namespace trident::autograd {

namespace {

using Grads = std::vector<Tensor>;

// Σ_i op(x[i]) · op(y[i]) over the shared batch dimensions of x and y: the
// gradient of an operand that was broadcast over the batch. When the sum runs
// over the stored rows of both (xᵀ·y), the batch folds into one GEMM;
// otherwise the batch entries accumulate into one buffer in a fixed order
// (in f32 for bf16, so the sum is rounded once).
Tensor batch_summed_matmul(const Tensor& x, const Tensor& y, bool tx, bool ty) {
  const std::int64_t xr = x.size(-2), xc = x.size(-1), yr = y.size(-2), yc = y.size(-1);
  const std::int64_t batch = x.shape().outer(x.rank() - 2);
  if (tx && !ty) return ops::matmul(x.view({batch * xr, xc}), y.view({batch * yr, yc}), true, false);
  const Tensor x3 = x.view({batch, xr, xc}), y3 = y.view({batch, yr, yc});
  const DType acc = (x.dtype() == DType::bf16 || x.dtype() == DType::f16) ? DType::f32 : x.dtype();
  Tensor out = Tensor::zeros({tx ? xc : xr, ty ? yr : yc}, acc, x.device());
  for (std::int64_t i = 0; i < batch; ++i) {
    ops::matmul_into(x3.select0(i), y3.select0(i), out, tx, ty, 1.0, i == 0 ? 0.0 : 1.0);
  }
  return ops::cast(out, x.dtype());
}

// op(x) · op(y), summed over the batch when the gradient's owner was a shared 2-D operand.
Tensor grad_product(const Tensor& x, const Tensor& y, bool tx, bool ty, bool summed) {
  return summed ? batch_summed_matmul(x, y, tx, ty) : ops::matmul(x, y, tx, ty);
}

// The same product added into a weight's gradient by its sink: one GEMM
// writing the master dtype when the batch folds into the rows, else computed
// as above and added.
void sink_product(const WeightGradSink& sink, const Tensor& x, const Tensor& y, bool tx, bool ty, bool summed) {
  if (!summed) return sink.add_product(x, y, tx, ty);
  if (tx && !ty) {
    const std::int64_t batch = x.shape().outer(x.rank() - 2);
    return sink.add_product(x.view({batch * x.size(-2), x.size(-1)}), y.view({batch * y.size(-2), y.size(-1)}), true,
                            false);
  }
  sink.add(batch_summed_matmul(x, y, tx, ty));
}

// A 2-D operand's gradient sink (a weight), else an empty one.
WeightGradSink sink_of_matrix(const Variable& v) {
  return v.shape().rank() == 2 ? WeightGradSink::of(v) : WeightGradSink();
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b, bool trans_a, bool trans_b) {
  const Tensor ad = a.data(), bd = b.data();
  Tensor out = ops::matmul(ad, bd, trans_a, trans_b);
  const bool a_shared = ad.rank() == 2 && bd.rank() > 2;
  const bool b_shared = bd.rank() == 2 && ad.rank() > 2;
  const WeightGradSink sink_a = sink_of_matrix(a), sink_b = sink_of_matrix(b);
  return make_result(std::move(out), {sink_a ? sink_a.edge() : a, sink_b ? sink_b.edge() : b}, "matmul",
                     [=](const GradContext& ctx) {
    const Tensor& g = ctx.grad();
    Tensor ga, gb;
    // C = op(A)·op(B): dop(A) = G·op(B)ᵀ and dop(B) = op(A)ᵀ·G, each written so
    // the result comes out in the operand's stored layout without a transpose copy.
    auto deliver = [](const WeightGradSink& sink, Tensor& slot, const Tensor& x, const Tensor& y, bool tx, bool ty,
                      bool summed) {
      if (sink) {
        sink_product(sink, x, y, tx, ty, summed);
      } else {
        slot = grad_product(x, y, tx, ty, summed);
      }
    };
    if (ctx.needs(0)) {
      if (trans_a) {
        deliver(sink_a, ga, bd, g, trans_b, true, a_shared);   // dA = op(B)·Gᵀ, stored [K, M]
      } else {
        deliver(sink_a, ga, g, bd, false, !trans_b, a_shared);  // dA = G·op(B)ᵀ
      }
    }
    if (ctx.needs(1)) {
      if (trans_b) {
        deliver(sink_b, gb, g, ad, true, trans_a, b_shared);  // dB = Gᵀ·op(A), stored [N, K]
      } else {
        deliver(sink_b, gb, ad, g, !trans_a, false, b_shared);  // dB = op(A)ᵀ·G
      }
    }
    return Grads{ga, gb};
  });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  const Tensor xd = x.data(), wd = weight.data();
  Tensor y = ops::linear(xd, wd, bias.defined() ? bias.data() : Tensor());
  const WeightGradSink sink = WeightGradSink::of(weight);
  std::vector<Variable> inputs{x, sink ? sink.edge() : weight};
  if (bias.defined()) inputs.push_back(bias);
  return make_result(std::move(y), inputs, "linear", [xd, wd, sink](const GradContext& ctx) {
    const std::int64_t in = wd.size(1), out = wd.size(0);
    const std::int64_t rows = xd.shape().outer(xd.rank() - 1);
    const Tensor g2 = ctx.grad().view({rows, out});
    Grads grads(ctx.needs_input_grad.size());
    if (ctx.needs(0)) grads[0] = ops::matmul(g2, wd).view(xd.shape());  // dx = dy·W
    if (ctx.needs(1)) {                                                  // dW = dyᵀ·x
      if (sink) {
        sink.add_product(g2, xd.view({rows, in}), true);
      } else {
        grads[1] = ops::matmul(g2, xd.view({rows, in}), true);
      }
    }
    if (grads.size() > 2 && ctx.needs(2)) grads[2] = ops::sum_to_last_dim(g2);  // db = Σ_rows dy
    return grads;
  });
}

}  // namespace trident::autograd
