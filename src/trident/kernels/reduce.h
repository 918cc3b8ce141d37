// The reduce kernels' signatures, declared once for every backend: kernels/cpu/reduce.h
// and kernels/cuda/reduce.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/reduce.h; the CUDA notes in kernels/cuda/reduce.h). No include guard:
// it is included once per backend namespace, after the types it names.

// Sum of all n elements, returned as double.
double sum_all(DType dtype, const void* x, std::int64_t n);
// out[c] = sum_r x[r, c]  (out has `dtype`)
void sum_rows(DType dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols);
