// GEMM through cuBLASLt (see matmul.h for the contract).
//
// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a row-major buffer read column-major is
// its transpose: so cuBLASLt's A is our B and its B our A, each with its own transpose flag, and our C
// [M, N] is cuBLASLt's N×M column-major D (ld N). Our bias over columns n is then a bias over D's rows
// (EPILOGUE_BIAS), and Σ_k op(A)[m, k] of our A is a bias gradient of cuBLASLt's B (BGRADB, one value per
// column of D). Batches are strided (stride 0 for a broadcast operand); a broadcast B under an
// untransposed A is one tall GEMM of batch·M rows, as on the CPU.
//
// A plan (matmul descriptor, layouts and the heuristic's algorithm) is built once per key — shape, dtypes,
// transposes, batch and broadcast, beta = 0, epilogue, and the alignment of every pointer, because an
// algorithm chosen for 256-byte-aligned operands may not run on a view that starts mid-row — and reused.
// The epilogue pointers are attributes of the shared descriptor, so a plan is locked while they are set
// and the GEMM is queued. Epilogues cuBLASLt cannot fuse (no algorithm) are computed by the plain GEMM plus
// the kernels of matmul.cu, and the plan remembers that.
//
// cuBLASLt's fast Hopper kernels need dimensions that are multiples of 16 bytes: GPT-2's 50257-token
// vocabulary sends the LM head's three GEMMs to a generic align-1 kernel several times slower (measured on
// an H100: bench/RESULTS.md). Large GEMMs with such a dimension run padded instead (padded_gemm): on
// copies whose odd dimensions are rounded up, zeros where the padding is summed over (K); a copy costs a
// pass over a matrix, the GEMM it speeds up far more.
#include "trident/kernels/cuda/matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "trident/core/backend.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/matmul_launch.h"
#include "trident/kernels/cuda/scratch.h"
#include "trident/kernels/cuda/shape_launch.h"

namespace trident::kernels::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr std::size_t kMaxCachedPlans = 1024;

std::atomic<std::int64_t> g_heuristic_queries{0};

std::string describe(DType ab, DType cd, const GemmShape& s) {
  return fmt::format("{}x{}x{} GEMM (M x K x N; batch {}{}{}{}{}; {} -> {})", s.m, s.k, s.n, s.batch,
                     s.trans_a ? ", trans_a" : "", s.trans_b ? ", trans_b" : "", s.broadcast_a ? ", A broadcast" : "",
                     s.broadcast_b ? ", B broadcast" : "", dtype_name(ab), dtype_name(cd));
}

const char* epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none:
      return "none";
    case GemmEpilogue::bias:
      return "bias";
    case GemmEpilogue::bias_gelu_tanh:
      return "bias_gelu_tanh";
    case GemmEpilogue::bias_grad:
      return "bias_grad";
  }
  return "unknown";
}

// Context of a cuBLASLt failure: the call, the GEMM and the status.
struct Where {
  DType ab, cd;
  const GemmShape& shape;
  GemmEpilogue epilogue;
};

void check_lt(cublasStatus_t status, const char* call, const Where& w) {
  TRIDENT_CHECK(status == CUBLAS_STATUS_SUCCESS, "CUDA matmul: {} failed for a {}{}: {} ({})", call,
                describe(w.ab, w.cd, w.shape),
                w.epilogue == GemmEpilogue::none ? "" : fmt::format(" with epilogue {}", epilogue_name(w.epilogue)),
                cublasLtGetStatusName(status), cublasLtGetStatusString(status));
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      TRIDENT_FAIL("CUDA matmul: unsupported dtype {} (expected f32, f64, bf16 or f16)", dtype_name(dtype));
  }
}

// --- per device: handle and workspace ------------------------------------------------------------------

struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kWorkspaceBytes from the caching allocator
};

// Created on first use on that device, never destroyed (kernels may be queued during static destruction,
// as with the compute streams). All GEMMs of a device share the workspace: they run on its one compute
// stream, so never at the same time.
DeviceContext& device_context(int device) {
  static std::mutex mutex;
  static auto* contexts = new std::map<int, DeviceContext>();
  std::lock_guard lock(mutex);
  auto it = contexts->find(device);
  if (it != contexts->end()) return it->second;
  DeviceContext ctx;
  const cublasStatus_t status = cublasLtCreate(&ctx.handle);
  TRIDENT_CHECK(status == CUBLAS_STATUS_SUCCESS, "CUDA matmul: cublasLtCreate failed on cuda:{}: {} ({})", device,
                cublasLtGetStatusName(status), cublasLtGetStatusString(status));
  try {
    ctx.workspace = backend_for(Device::cuda(device)).allocate(kWorkspaceBytes, device);
  } catch (...) {
    cublasLtDestroy(ctx.handle);
    throw;
  }
  return contexts->emplace(device, ctx).first->second;
}

// The largest power of two ≤ 256 dividing the address and, for a batched operand, its batch stride in
// bytes: every matrix of the batch starts at that alignment.
std::uint32_t alignment(const void* p, std::int64_t batch_stride_bytes) {
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p);
  if (batch_stride_bytes > 0) bits |= static_cast<std::uintptr_t>(batch_stride_bytes);
  std::uint32_t align = 256;
  while (align > 1 && bits % align != 0) align /= 2;
  return align;
}

// --- plans -----------------------------------------------------------------------------------------------

struct PlanKey {
  int device;
  DType ab, cd;
  std::int64_t batch, m, n, k;
  bool trans_a, trans_b, broadcast_a, broadcast_b, beta_zero;
  GemmEpilogue epilogue;
  std::uint32_t align_a, align_b, align_c, align_bias, align_aux;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  // cuBLASLt's A (our B), its B (our A), and C = D (our C).
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // cuBLASLt runs this key. False only where there is another way (see may_fall_back); it may turn false
  // on a call that cuBLASLt rejects, hence atomic.
  std::atomic<bool> available{false};
  std::mutex mutex;  // held while the per-call epilogue pointers are set and the GEMM is queued

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct Operands {
  const void* a;
  const void* b;
  void* c;
  const GemmEpilogueArgs& epilogue;
};

template <typename V>
void set_desc(Plan& plan, cublasLtMatmulDescAttributes_t attribute, const V& value, const Where& w) {
  check_lt(cublasLtMatmulDescSetAttribute(plan.desc, attribute, &value, sizeof(value)),
           "cublasLtMatmulDescSetAttribute", w);
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::bias_gelu_tanh:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::bias_grad:
      return CUBLASLT_EPILOGUE_BGRADB;
    case GemmEpilogue::none:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The epilogue's pointers: set when the plan is made (the heuristic reads their alignment) and on every call.
void set_epilogue_pointers(Plan& plan, const GemmEpilogueArgs& e, const Where& w) {
  switch (e.kind) {
    case GemmEpilogue::bias:
      set_desc(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias, w);
      break;
    case GemmEpilogue::bias_gelu_tanh:
      set_desc(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias, w);
      set_desc(plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.pre_activation, w);
      break;
    case GemmEpilogue::bias_grad:
      set_desc(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias_grad, w);
      break;
    case GemmEpilogue::none:
      break;
  }
}

cublasLtMatrixLayout_t make_layout(DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t batch,
                                   std::int64_t batch_stride, const Where& w) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&layout, cuda_type(dtype), static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(cols), rows),
           "cublasLtMatrixLayoutCreate", w);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    auto set = [&](cublasLtMatrixLayoutAttribute_t attribute, const auto& value) {
      const cublasStatus_t status = cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value));
      if (status != CUBLAS_STATUS_SUCCESS) cublasLtMatrixLayoutDestroy(layout);
      check_lt(status, "cublasLtMatrixLayoutSetAttribute", w);
    };
    set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
  }
  return layout;
}

bool may_fall_back(const PlanKey& key) {
  return key.epilogue != GemmEpilogue::none || key.broadcast_a || key.broadcast_b;
}

std::shared_ptr<Plan> make_plan_or_throw(const PlanKey& key, const GemmShape& s, const Operands& ops,
                                         DeviceContext& ctx, const Where& w) {
  auto plan = std::make_shared<Plan>();
  const bool f64 = key.ab == DType::f64;
  check_lt(cublasLtMatmulDescCreate(&plan->desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                    f64 ? CUDA_R_64F : CUDA_R_32F),
           "cublasLtMatmulDescCreate", w);
  const std::int32_t op_a = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const std::int32_t op_b = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(*plan, CUBLASLT_MATMUL_DESC_TRANSA, op_a, w);
  set_desc(*plan, CUBLASLT_MATMUL_DESC_TRANSB, op_b, w);
  if (key.epilogue != GemmEpilogue::none) {
    const auto epilogue = static_cast<std::uint32_t>(lt_epilogue(key.epilogue));
    set_desc(*plan, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, w);
    if (key.epilogue == GemmEpilogue::bias_gelu_tanh) {
      const std::int64_t aux_ld = s.n, aux_stride = s.m * s.n;
      set_desc(*plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, w);
      if (s.batch > 1) set_desc(*plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride, w);
    }
    set_epilogue_pointers(*plan, ops.epilogue, w);
  }
  // Our B is stored [K, N] (cuBLASLt reads N×K, ld N) or, transposed, [N, K] (K×N, ld K); likewise A.
  plan->lt_a =
      make_layout(key.ab, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k, s.batch, s.broadcast_b ? 0 : s.k * s.n, w);
  plan->lt_b =
      make_layout(key.ab, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m, s.batch, s.broadcast_a ? 0 : s.m * s.k, w);
  plan->lt_c = make_layout(key.cd, s.n, s.m, s.batch, s.m * s.n, w);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", w);
  struct DestroyPref {
    cublasLtMatmulPreference_t p;
    ~DestroyPref() { cublasLtMatmulPreferenceDestroy(p); }
  } destroy_pref{pref};
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)),
             "cublasLtMatmulPreferenceSetAttribute", w);
  };
  const std::uint64_t workspace = kWorkspaceBytes;
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLASLt's A is our B
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.handle, plan->desc, plan->lt_a, plan->lt_b,
                                                               plan->lt_c, plan->lt_c, pref, 1, &result, &found);
  g_heuristic_queries.fetch_add(1, std::memory_order_relaxed);
  const bool ok = status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (ok) {
    plan->algo = result.algo;
    plan->available.store(true);
  } else if (!may_fall_back(key)) {
    // NOT_SUPPORTED is how the heuristic says that no algorithm fits: the alignments are the likely cause.
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) check_lt(status, "cublasLtMatmulAlgoGetHeuristic", w);
    TRIDENT_FAIL("CUDA matmul: cuBLASLt has no algorithm for a {} (alignments A {} B {} C {} bytes)",
                 describe(key.ab, key.cd, s), key.align_a, key.align_b, key.align_c);
  }
  return plan;
}

// A key that cuBLASLt refuses at any step (an attribute, the heuristic, the call) gives a plan that is not
// available where there is another way: an epilogue computed by separate kernels, or a broadcast operand
// (batch stride 0) multiplied one batch entry at a time. Any other failure is an error.
std::shared_ptr<Plan> make_plan(const PlanKey& key, const GemmShape& s, const Operands& ops, DeviceContext& ctx,
                                const Where& w) {
  if (!may_fall_back(key)) return make_plan_or_throw(key, s, ops, ctx, w);
  try {
    return make_plan_or_throw(key, s, ops, ctx, w);
  } catch (const std::exception&) {
    return std::make_shared<Plan>();
  }
}

std::shared_ptr<Plan> cached_plan(const PlanKey& key, const GemmShape& s, const Operands& ops, DeviceContext& ctx,
                                  const Where& w) {
  static std::mutex mutex;
  static auto* cache = new std::map<PlanKey, std::shared_ptr<Plan>>();  // never destroyed, like the handles
  std::lock_guard lock(mutex);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  // A simple bound: training uses a few dozen shapes; generation with a growing context adds one per length.
  if (cache->size() >= kMaxCachedPlans) cache->clear();
  auto plan = make_plan(key, s, ops, ctx, w);
  cache->emplace(key, plan);
  return plan;
}

// Runs the GEMM (with `epilogue` fused) through cuBLASLt. Returns false, having queued nothing, when
// cuBLASLt refuses a key that has another way (may_fall_back).
bool run_lt(DType ab, DType cd, const GemmShape& s, double alpha, double beta, const Operands& ops,
            GemmEpilogue epilogue) {
  const Where w{ab, cd, s, epilogue};
  const int device = current_device();
  DeviceContext& ctx = device_context(device);
  const std::int64_t ab_size = static_cast<std::int64_t>(dtype_size(ab));
  const std::int64_t c_size = static_cast<std::int64_t>(dtype_size(cd));
  const bool batched = s.batch > 1;
  const GemmEpilogueArgs& e = ops.epilogue;
  const void* bias = epilogue == GemmEpilogue::bias_grad ? e.bias_grad : e.bias;
  const PlanKey key{
      device,
      ab,
      cd,
      s.batch,
      s.m,
      s.n,
      s.k,
      s.trans_a,
      s.trans_b,
      s.broadcast_a,
      s.broadcast_b,
      beta == 0.0,
      epilogue,
      alignment(ops.a, batched && !s.broadcast_a ? s.m * s.k * ab_size : 0),
      alignment(ops.b, batched && !s.broadcast_b ? s.k * s.n * ab_size : 0),
      alignment(ops.c, batched ? s.m * s.n * c_size : 0),
      epilogue == GemmEpilogue::none ? 256u : alignment(bias, 0),
      epilogue == GemmEpilogue::bias_gelu_tanh ? alignment(e.pre_activation, batched ? s.m * s.n * c_size : 0) : 256u};
  const GemmEpilogueArgs no_epilogue;
  const Operands plan_ops{ops.a, ops.b, ops.c, epilogue == GemmEpilogue::none ? no_epilogue : e};
  const std::shared_ptr<Plan> plan = cached_plan(key, s, plan_ops, ctx, w);
  if (!plan->available) return false;

  const auto stream = static_cast<cudaStream_t>(compute_stream(device).native());
  std::lock_guard lock(plan->mutex);
  if (epilogue != GemmEpilogue::none) set_epilogue_pointers(*plan, e, w);
  const float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  const bool f64 = ab == DType::f64;
  const void* p_alpha = f64 ? static_cast<const void*>(&alpha) : static_cast<const void*>(&alpha32);
  const void* p_beta = f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta32);
  const cublasStatus_t status =
      cublasLtMatmul(ctx.handle, plan->desc, p_alpha, ops.b, plan->lt_a, ops.a, plan->lt_b, p_beta, ops.c, plan->lt_c,
                     ops.c, plan->lt_c, &plan->algo, ctx.workspace, kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS && may_fall_back(key) &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    plan->available.store(false);  // rejected before anything was queued: take the other way from now on
    return false;
  }
  check_lt(status, "cublasLtMatmul", w);
  return true;
}

// rows × cols elements of `size` bytes from row pitch src_pitch to dst_pitch (elements).
void copy_pitched(const void* src, std::int64_t src_pitch, void* dst, std::int64_t dst_pitch, std::int64_t rows,
                  std::int64_t cols, std::int64_t size) {
  detail::RowCopyPlan plan;
  plan.rows = rows;
  plan.row_len = cols;
  plan.rank = 1;
  plan.dims[0] = rows;
  plan.src_strides[0] = src_pitch;
  plan.dst_pitch = dst_pitch;
  detail::launch_row_copy(static_cast<std::size_t>(size), src, dst, plan);
}

// The padded problem: M, N and K rounded up to 16 bytes of the narrower dtype. Only where the copies pay:
// batch 1, every dimension ≥ 256 (a copy is one pass over a matrix, the GEMM K passes' worth of work) and
// at least 2^26 multiply-adds; otherwise (or when nothing needs padding) the shape itself.
GemmShape padded_shape(DType ab, DType cd, const GemmShape& s) {
  constexpr std::int64_t kMinDim = 256, kMinWork = std::int64_t{1} << 26;
  if (s.batch != 1 || std::min({s.m, s.n, s.k}) < kMinDim || s.m * s.n * s.k < kMinWork) return s;
  const auto narrow = static_cast<std::int64_t>(std::min(dtype_size(ab), dtype_size(cd)));
  const std::int64_t unit = 16 / narrow;
  const auto up = [unit](std::int64_t x) { return (x + unit - 1) / unit * unit; };
  GemmShape p = s;
  p.m = up(s.m);
  p.n = up(s.n);
  p.k = up(s.k);
  return p;
}

bool same_size(const GemmShape& x, const GemmShape& y) { return x.m == y.m && x.n == y.n && x.k == y.k; }

// One operand for the padded problem: the [rows, cols] matrix copied into [prows, pcols], or itself when
// the size is unchanged. `zero`: the padding is summed over (K), so it must hold zeros (0 · NaN is NaN);
// elsewhere it only produces rows or columns of C that are dropped.
const void* padded_operand(const void* src, std::int64_t rows, std::int64_t cols, std::int64_t prows,
                           std::int64_t pcols, std::int64_t size, bool zero, std::shared_ptr<Storage>& copy) {
  if (rows == prows && cols == pcols) return src;
  copy = detail::device_scratch(static_cast<std::size_t>(prows * pcols * size));
  void* dst = detail::scratch_data(copy);
  if (zero) {
    const auto stream = static_cast<cudaStream_t>(compute_stream(current_device()).native());
    const cudaError_t status = cudaMemsetAsync(dst, 0, static_cast<std::size_t>(prows * pcols * size), stream);
    TRIDENT_CHECK(status == cudaSuccess, "CUDA matmul: clearing a padded operand failed: {}",
                  cudaGetErrorString(status));
  }
  copy_pitched(src, cols, dst, pcols, rows, cols, size);
  return dst;
}

// The GEMM on padded copies (padded_shape), C copied back. False: not padded, nothing queued.
bool padded_gemm(DType ab, DType cd, const GemmShape& s, double alpha, const void* a, const void* b, double beta,
                 void* c) {
  const GemmShape p = padded_shape(ab, cd, s);
  if (same_size(p, s)) return false;
  const auto ab_size = static_cast<std::int64_t>(dtype_size(ab)), c_size = static_cast<std::int64_t>(dtype_size(cd));
  const bool zero_k = p.k != s.k;
  std::shared_ptr<Storage> a_copy, b_copy, c_copy;  // dropped after queuing: safe (scratch.h)
  a = s.trans_a ? padded_operand(a, s.k, s.m, p.k, p.m, ab_size, zero_k, a_copy)
                : padded_operand(a, s.m, s.k, p.m, p.k, ab_size, zero_k, a_copy);
  b = s.trans_b ? padded_operand(b, s.n, s.k, p.n, p.k, ab_size, zero_k, b_copy)
                : padded_operand(b, s.k, s.n, p.k, p.n, ab_size, zero_k, b_copy);
  void* out = c;
  if (p.m != s.m || p.n != s.n) {
    c_copy = detail::device_scratch(static_cast<std::size_t>(p.m * p.n * c_size));
    out = detail::scratch_data(c_copy);
    if (beta != 0.0) copy_pitched(c, s.n, out, p.n, s.m, s.n, c_size);
  }
  const GemmEpilogueArgs none;
  // Epilogue none, batch 1: cuBLASLt either runs it or throws.
  run_lt(ab, cd, p, alpha, beta, Operands{a, b, out, none}, GemmEpilogue::none);
  if (out != c) copy_pitched(out, p.n, c, s.n, s.m, s.n, c_size);
  return true;
}

// C = alpha·op(A)·op(B) + beta·C without epilogue (K = 0 leaves beta·C).
void plain_gemm(DType ab, DType cd, const GemmShape& s, double alpha, const void* a, const void* b, double beta,
                void* c) {
  if (s.k == 0) {
    launch_scale_matrix(cd, c, s.batch * s.m * s.n, beta);
    return;
  }
  if (padded_gemm(ab, cd, s, alpha, a, b, beta, c)) return;
  const GemmEpilogueArgs none;
  if (run_lt(ab, cd, s, alpha, beta, Operands{a, b, c, none}, GemmEpilogue::none)) return;
  // A broadcast operand cuBLASLt would not take with batch stride 0: one GEMM per batch entry.
  const auto ab_size = static_cast<std::int64_t>(dtype_size(ab)), c_size = static_cast<std::int64_t>(dtype_size(cd));
  GemmShape one = s;
  one.batch = 1;
  one.broadcast_a = one.broadcast_b = false;
  for (std::int64_t i = 0; i < s.batch; ++i) {
    const auto* ai = static_cast<const char*>(a) + (s.broadcast_a ? 0 : i * s.m * s.k * ab_size);
    const auto* bi = static_cast<const char*>(b) + (s.broadcast_b ? 0 : i * s.k * s.n * ab_size);
    auto* ci = static_cast<char*>(c) + i * s.m * s.n * c_size;
    run_lt(ab, cd, one, alpha, beta, Operands{ai, bi, ci, none}, GemmEpilogue::none);
  }
}

void check_dtypes(DType ab, DType cd) {
  cuda_type(ab);
  const bool half = ab == DType::bf16 || ab == DType::f16;
  TRIDENT_CHECK(cd == ab || (half && cd == DType::f32),
                "CUDA matmul: C of dtype {} with A and B of dtype {} (expected {}{})", dtype_name(cd), dtype_name(ab),
                dtype_name(ab), half ? " or f32" : "");
}

}  // namespace

void gemm(DType ab_dtype, DType c_dtype, const GemmShape& shape, double alpha, const void* a, const void* b,
          double beta, void* c) {
  gemm_epilogue(ab_dtype, c_dtype, shape, alpha, a, b, beta, c, GemmEpilogueArgs{});
}

void gemm_epilogue(DType ab, DType cd, const GemmShape& shape, double alpha, const void* a, const void* b, double beta,
                   void* c, const GemmEpilogueArgs& e) {
  check_dtypes(ab, cd);
  const GemmEpilogue kind = e.kind;
  const bool with_bias = kind == GemmEpilogue::bias || kind == GemmEpilogue::bias_gelu_tanh;
  TRIDENT_CHECK(!with_bias || e.bias != nullptr, "CUDA matmul: epilogue {} without a bias", epilogue_name(kind));
  TRIDENT_CHECK(kind != GemmEpilogue::bias_gelu_tanh || e.pre_activation != nullptr,
                "CUDA matmul: epilogue bias_gelu_tanh without a pre_activation output");
  TRIDENT_CHECK(kind != GemmEpilogue::bias_grad || (e.bias_grad != nullptr && shape.batch == 1),
                "CUDA matmul: epilogue bias_grad needs a bias_grad output and batch 1 (got batch {})", shape.batch);

  GemmShape s = shape;
  if (s.batch <= 0 || s.m <= 0) return;
  if (s.n <= 0) {
    if (kind == GemmEpilogue::bias_grad) launch_sum_over_k(ab, cd, a, e.bias_grad, s.m, s.k, s.trans_a);
    return;
  }
  // One matrix multiplying every batch entry of an untransposed A is one tall GEMM.
  if (s.broadcast_b && !s.broadcast_a && !s.trans_a && s.batch > 1) {
    s.m *= s.batch;
    s.batch = 1;
    s.broadcast_b = false;
  }
  if (s.batch == 1) s.broadcast_a = s.broadcast_b = false;
  TRIDENT_CHECK(s.batch <= INT_MAX, "CUDA matmul: a {} has more batch entries than cuBLASLt's 32-bit count",
                describe(ab, cd, s));

  // cuBLASLt fuses where it has an algorithm; the GELU input matrix needs a leading dimension divisible by
  // 8, and the bias gradient is taken unscaled, so only alpha = 1 matches our contract there.
  // A GEMM with an odd dimension runs faster padded than fused (padded_gemm).
  const bool fusable = kind != GemmEpilogue::none && s.k > 0 && same_size(padded_shape(ab, cd, s), s) &&
                       (kind != GemmEpilogue::bias_gelu_tanh || s.n % 8 == 0) &&
                       (kind != GemmEpilogue::bias_grad || alpha == 1.0);
  if (fusable && run_lt(ab, cd, s, alpha, beta, Operands{a, b, c, e}, kind)) return;

  const std::int64_t rows = s.batch * s.m;
  switch (kind) {
    case GemmEpilogue::none:
      plain_gemm(ab, cd, s, alpha, a, b, beta, c);
      break;
    case GemmEpilogue::bias:
      launch_bias_into(cd, c, e.bias, c, rows, s.n, beta);
      plain_gemm(ab, cd, s, alpha, a, b, 1.0, c);
      break;
    case GemmEpilogue::bias_gelu_tanh:
      launch_bias_into(cd, c, e.bias, e.pre_activation, rows, s.n, beta);
      plain_gemm(ab, cd, s, alpha, a, b, 1.0, e.pre_activation);
      launch_gelu_tanh(cd, e.pre_activation, c, rows * s.n);
      break;
    case GemmEpilogue::bias_grad:
      plain_gemm(ab, cd, s, alpha, a, b, beta, c);
      launch_sum_over_k(ab, cd, a, e.bias_grad, s.m, s.k, s.trans_a);
      break;
  }
}

std::int64_t gemm_heuristic_queries() noexcept {
  return g_heuristic_queries.load(std::memory_order_relaxed);
}

}  // namespace trident::kernels::cuda
