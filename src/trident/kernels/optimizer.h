// The optimizer kernels' signatures, declared once for every backend: kernels/cpu/optimizer.h
// and kernels/cuda/optimizer.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/optimizer.h; the CUDA notes in kernels/cuda/optimizer.h). No include guard:
// it is included once per backend namespace, after the types it names.

// PyTorch's single-tensor AdamW (decoupled weight decay), element by element:
//   g  = grad * grad_scale
//   p  = p * (1 - lr * wd)
//   m  = lerp(m, g, 1 - beta1)                   (m + w (g - m), or g - (g - m)(1 - w) when w >= 0.5)
//   v  = v * beta2 + ((1 - beta2) g) g
//   p  = p + (-lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are formed in f64 and rounded to the parameter's type. `copy_dtype`
// is ignored when param_copy is null.
void adamw_step(DType param_dtype, DType grad_dtype, DType copy_dtype, void* param, const void* grad, void* exp_avg,
                void* exp_avg_sq, void* param_copy, std::int64_t n, const AdamWHyper& hyper);

// PyTorch's SGD: g = grad * grad_scale + wd p; with momentum, buf = g on the
// first step (init_buf) and buf * momentum + (1 - dampening) g after; nesterov
// uses g + momentum * buf, otherwise buf; p = p - lr g.
// momentum_buf (param's dtype) may be null when momentum == 0.
void sgd_step(DType param_dtype, DType grad_dtype, void* param, const void* grad, void* momentum_buf, bool init_buf,
              std::int64_t n, double lr, double momentum, double weight_decay, double dampening, bool nesterov,
              double grad_scale);

// sum of x[i]^2 in f64.
double sum_of_squares(DType dtype, const void* x, std::int64_t n);
