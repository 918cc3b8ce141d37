// The matmul kernels' signatures, declared once for every backend: kernels/cpu/matmul.h
// and kernels/cuda/matmul.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/matmul.h; the CUDA notes in kernels/cuda/matmul.h). No include guard:
// it is included once per backend namespace, after the types it names.

// C[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b] (kernels/cpu/matmul.h).
// `ab_dtype` is the dtype of A and B (f32, f64, bf16; f16 too on CUDA); `c_dtype`
// that of C (equal to ab_dtype, or f32 when ab_dtype is bf16 or f16). Arguments are
// already validated by ops::; pointers are not retained.
void gemm(DType ab_dtype, DType c_dtype, const GemmShape& shape, double alpha, const void* a, const void* b,
          double beta, void* c);

// out[r, :] = row[:] for r < rows: a bias broadcast into C before a beta = 1 GEMM.
void broadcast_rows(DType dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols);
