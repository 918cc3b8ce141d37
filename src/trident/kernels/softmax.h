// The softmax kernels' signatures, declared once for every backend: kernels/cpu/softmax.h
// and kernels/cuda/softmax.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/softmax.h; the CUDA notes in kernels/cuda/softmax.h). No include guard:
// it is included once per backend namespace, after the types it names.

// y = softmax(x) along each row.
void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols);
// dx = y * (dy - sum(dy * y)) along each row (the softmax Jacobian-vector product).
void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, std::int64_t cols);
