// Normalisation over the last dimension: LayerNorm (GPT-2) and RMSNorm (LLaMA).
//
// x has shape [..., C] (C >= 1); its leading dimensions are flattened into
// `rows` = x.numel() / C. weight and bias have shape [C] and x's dtype.
// dtypes: f32, f64, bf16, f16; bf16/f16 are computed in f32 and rounded once.
// The saved statistics mean and rstd have shape [rows] and dtype f32 (f64 for
// f64 input); backward recomputes the normalised input from them.
//
// Results never depend on the thread count: dweight/dbias are summed over rows
// in fixed row blocks combined in order (see kernels/cpu/norm.h).
#pragma once

#include "trident/core/tensor.h"

namespace trident::ops {

struct LayerNormOutput {
  Tensor y;     // x's shape and dtype
  Tensor mean;  // [rows]
  Tensor rstd;  // [rows], 1 / sqrt(var + eps) with the biased variance
};
struct LayerNormGrads {
  Tensor dx;       // x's shape
  Tensor dweight;  // [C]
  Tensor dbias;    // [C]
};

// y = (x - mean) / sqrt(var + eps) * weight + bias, statistics per row.
// `bias` may be undefined (no bias).
LayerNormOutput layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Gradients given dy (x's shape and dtype) and the forward's saved mean/rstd.
// dbias is the bias gradient (sum of dy over rows), meaningful only when the forward had a bias.
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd);

struct RmsNormOutput {
  Tensor y;     // x's shape and dtype
  Tensor rstd;  // [rows], 1 / sqrt(mean(x^2) + eps)
};
struct RmsNormGrads {
  Tensor dx;       // x's shape
  Tensor dweight;  // [C]
};

// y = x * rsqrt(mean(x^2) + eps) * weight. For bf16 the normalisation and the
// weight product are both done in f32 and y is rounded once (Hugging Face's
// LlamaRMSNorm rounds x * rstd to bf16 before the weight product; the results
// differ by at most one bf16 rounding).
RmsNormOutput rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd);

}  // namespace trident::ops
