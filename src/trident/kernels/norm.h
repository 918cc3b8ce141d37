// The norm kernels' signatures, declared once for every backend: kernels/cpu/norm.h
// and kernels/cuda/norm.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/norm.h; the CUDA notes in kernels/cuda/norm.h). No include guard:
// it is included once per backend namespace, after the types it names.

// y = (x - mean) * rstd * weight + bias; bias may be null.
void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, void* y, void* mean,
                        void* rstd, std::int64_t rows, std::int64_t cols, double eps);
// dbias may be null (then it is not computed).
void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* mean,
                         const void* rstd, void* dx, void* dweight, void* dbias, std::int64_t rows, std::int64_t cols);

// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps).
void rms_norm_forward(DType dtype, const void* x, const void* weight, void* y, void* rstd, std::int64_t rows,
                      std::int64_t cols, double eps);
void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight, const void* rstd, void* dx,
                       void* dweight, std::int64_t rows, std::int64_t cols);
