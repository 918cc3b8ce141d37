// The elementwise kernels' signatures, declared once for every backend: kernels/cpu/elementwise.h
// and kernels/cuda/elementwise.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/elementwise.h; the CUDA notes in kernels/cuda/elementwise.h). No include guard:
// it is included once per backend namespace, after the types it names.

// out = a (op) b, all of `dtype`.
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, std::int64_t n);
// out = a * s
void scale(DType dtype, const void* a, double s, void* out, std::int64_t n);
// dst += alpha * src (dst and src of `dtype`)
void axpy(DType dtype, double alpha, const void* src, void* dst, std::int64_t n);
// out[r, c] = x[r, c] + bias[c] for r < rows, c < cols
void bias_add(DType dtype, const void* x, const void* bias, void* out, std::int64_t rows, std::int64_t cols);
