// CPU GEMM through real libraries: oneDNN (f32, bf16) and OpenBLAS (f32, f64).
//
// Shapes (row-major, all operands contiguous):
//   C[b] = alpha · op(A[b]) · op(B[b]) + beta · C[b]      for b < batch
//   op(A[b]) is M×K: A[b] is stored [M, K], or [K, M] when trans_a;
//   op(B[b]) is K×N: B[b] is stored [K, N], or [N, K] when trans_b;
//   C[b] is stored [M, N]. An operand with broadcast_a / broadcast_b set is a
//   single matrix used for every b (batch stride 0); C always has `batch` matrices.
// Numerics: f32 and f64 accumulate in their own type; bf16 inputs accumulate
// in f32 and C is f32 or bf16 (rounded once, after alpha/beta are applied).
// beta = 0 never reads C (it may hold garbage or NaN); beta = 1 accumulates,
// which is how backward adds into existing gradient buffers.
// Backends: f64 always OpenBLAS; bf16 always oneDNN; f32 uses the default
// measured for this CPU (see matmul.cpp) unless TRIDENT_MATMUL_BACKEND=onednn|openblas
// or the `backend` argument says otherwise.
// Threads and determinism: a result never depends on the thread count. Left
// to themselves both libraries change the rounding with it (oneDNN re-blocks K for
// weight-gradient shapes at some counts, OpenBLAS whenever it threads), so C is
// split into tiles fixed by the shape alone, each computed by the library on one
// thread, and the tiles are spread over trident's num_threads() threads
// (tests/ops/matmul_test.cpp compares 1–4 threads bit for bit).
// Thread safety: gemm may be called from several threads; the primitive cache is locked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trident/core/dtype_enum.h"

namespace trident::kernels::cpu {

enum class MatmulBackend { onednn, openblas };

std::string_view matmul_backend_name(MatmulBackend backend) noexcept;

struct GemmShape {
  std::int64_t batch = 1;
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool broadcast_a = false, broadcast_b = false;
};

#include "trident/kernels/matmul.h"

// gemm (kernels/matmul.h) on the given library; gemm without it uses
// matmul_backend(ab_dtype).
void gemm(DType ab_dtype, DType c_dtype, const GemmShape& shape, double alpha, const void* a, const void* b,
          double beta, void* c, std::optional<MatmulBackend> backend);

// The backend gemm uses for `ab_dtype` when none is passed: TRIDENT_MATMUL_BACKEND
// (read on every call, so tests and benchmarks can switch it) where the
// library supports the dtype, else the default.
MatmulBackend matmul_backend(DType ab_dtype);

// "oneDNN 2.6.3 (f32, bf16: avx512_core_bf16), OpenBLAS 0.3.21 (f64: Haswell)":
// the libraries' versions, which dtypes each serves, and the ISA oneDNN and the
// kernel family OpenBLAS picked at run time.
std::string matmul_backend_description();

// Runs square GEMMs of `dtype` (2048³, or 1024³ where one 2048³ takes too
// long) for about one second after a warm-up, and returns the best GFLOP/s of
// them: a peak is what the machine can do, and a busy moment only slows some
// of the runs (the median of a run on a shared core had read half the peak).
// The trainer reports MFU against this measured peak.
double measure_matmul_peak_gflops(DType dtype);

}  // namespace trident::kernels::cpu
