// GEMM through oneDNN and OpenBLAS (see matmul.h for the contract).
//
// Both backends compute C in tiles fixed by the shape (tile_shape below), one
// tile per library call on one thread, the tiles spread over trident's threads:
// that keeps every result independent of the thread count.
// oneDNN: one matmul primitive per tile shape (dtypes, transposes, leading
// dimensions, alpha, beta), cached here because rebuilding one costs more than
// a small GEMM even when oneDNN's own primitive cache hits (bench/RESULTS.md).
// alpha is an output scale and beta a sum post-op, so C is rounded once.
// OpenBLAS: cblas_{s,d}gemm per tile with OpenBLAS's own threading off.
// A broadcast B with an untransposed A is folded into one GEMM of batch·M rows.
#include "trident/kernels/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {

// The f32 default, chosen from bench/matmul_bench at the LLM shapes on this
// project's CPU (bench/RESULTS.md, "Matmul"): oneDNN's AVX-512 brgemm runs at
// about twice Debian OpenBLAS 0.3.21's speed per core, whose Zen kernels are AVX2.
constexpr MatmulBackend kDefaultF32Backend = MatmulBackend::onednn;

// Both libraries change a GEMM's rounding with the number of threads they
// split it over: OpenBLAS's result at 2 threads differs from 1 thread, and
// oneDNN's brgemm blocks and splits K differently for weight-gradient shapes
// (small M·N, long K) at some thread counts (96×4096×80 at 4 threads, 16×100000×16 at 2). trident therefore splits C itself into
// tiles fixed by the shape alone and has each library compute a tile on one
// thread; the tiles are spread over num_threads() threads.
//
// Rows: one tile for up to 512 (all the tokens of a micro-batch, so each
// column of B is packed once: bf16 repacks B into pairs of K), else tiles of
// at most 512, a multiple of 64, all equal but the last (a weight gradient's
// 768 rows in two). Columns: tiles of 128 to 1024, a multiple of the
// libraries' 64-column blocks, all equal but the last, enough for at least 4
// tiles in all where 128-column tiles allow, and an even number of tiles where
// there are few, so that 2 threads share them evenly (bench/RESULTS.md,
// "Matmul tiles": wider, balanced tiles beat at least 8 narrow ones on this
// 2-vCPU machine; a 256-token GEMM now keeps at most 4 threads busy).
std::pair<std::int64_t, std::int64_t> tile_shape(std::int64_t m, std::int64_t n) {
  constexpr std::int64_t kMaxTileRows = 512, kMinTiles = 4, kFewTiles = 16;
  constexpr std::int64_t kMinCols = 128, kMaxCols = 1024, kBlock = 64;
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  auto width = [&](std::int64_t extent, std::int64_t parts) { return ceil_div(ceil_div(extent, parts), kBlock) * kBlock; };
  m = std::max<std::int64_t>(m, 1);
  n = std::max<std::int64_t>(n, 1);
  const std::int64_t tm = m <= kMaxTileRows ? m : width(m, ceil_div(m, kMaxTileRows));
  const std::int64_t tiles_m = ceil_div(m, tm);
  std::int64_t tn = std::clamp(width(n, ceil_div(kMinTiles, tiles_m)), kMinCols, kMaxCols);
  std::int64_t tiles_n = ceil_div(n, tn);
  tn = width(n, tiles_n);  // equal widths (a clamp to 1024 may have left a narrow last tile)
  const std::int64_t tiles = tiles_m * tiles_n;
  if (tiles > 1 && tiles < kFewTiles && tiles % 2 == 1) {
    const std::int64_t narrower = width(n, tiles_n + 1);
    if (narrower >= kMinCols && ceil_div(n, narrower) == tiles_n + 1) tn = narrower;
  }
  return {tm, std::min(tn, n)};
}

constexpr double kMinParallelFlops = 8e6;  // ~40 us of one core

// One tile of one batch entry: rows [i0, i0 + m) and columns [j0, j0 + n) of C.
struct Tile {
  std::int64_t batch, i0, j0, m, n;
};

// Runs run_tile(tile) for every tile of every batch entry, in parallel. Tiny
// GEMMs stay on one thread: a parallel region costs more than their work.
template <typename F>
void for_each_tile(const GemmShape& s, F&& run_tile) {
  const auto [tile_m, tile_n] = tile_shape(s.m, s.n);
  const std::int64_t tiles_m = (s.m + tile_m - 1) / tile_m, tiles_n = (s.n + tile_n - 1) / tile_n;
  const std::int64_t per_batch = tiles_m * tiles_n;
  const double tile_flops = 2.0 * static_cast<double>(std::min(tile_m, s.m) * std::min(tile_n, s.n) * s.k);
  const auto grain = static_cast<std::int64_t>(std::max(1.0, std::ceil(kMinParallelFlops / tile_flops)));
  parallel_for(0, s.batch * per_batch, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t t = lo; t < hi; ++t) {
      const std::int64_t i0 = (t % per_batch) / tiles_n * tile_m, j0 = t % tiles_n * tile_n;
      run_tile(Tile{t / per_batch, i0, j0, std::min(tile_m, s.m - i0), std::min(tile_n, s.n - j0)});
    }
  });
}

// Element offsets of a tile's first element of op(A), op(B) and C within one batch entry.
std::int64_t a_offset(const GemmShape& s, const Tile& t) { return s.trans_a ? t.i0 : t.i0 * s.k; }
std::int64_t b_offset(const GemmShape& s, const Tile& t) { return s.trans_b ? t.j0 * s.k : t.j0; }
std::int64_t c_offset(const GemmShape& s, const Tile& t) { return t.i0 * s.n + t.j0; }

// ---------------------------------------------------------------- oneDNN --

dnnl::memory::data_type dnnl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    default: TRIDENT_FAIL("matmul: oneDNN backend has no {} GEMM", dtype_name(dtype));
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A tile's primitive: m×n of C over all of K, addressing A, B and C with the
// full matrices' leading dimensions; built for a single thread.
struct TileKey {
  DType ab, cd;
  std::int64_t m, n, k, full_m, full_n;
  bool trans_a, trans_b;
  double alpha, beta;
  auto operator<=>(const TileKey&) const = default;
};

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

constexpr std::size_t kMaxCachedPrimitives = 512;

CachedMatmul make_primitive(const TileKey& t) {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md(dims{t.m, t.k}, dnnl_type(t.ab), t.trans_a ? dims{1, t.full_m} : dims{t.k, 1});
  const dnnl::memory::desc b_md(dims{t.k, t.n}, dnnl_type(t.ab), t.trans_b ? dims{1, t.k} : dims{t.full_n, 1});
  const dnnl::memory::desc c_md(dims{t.m, t.n}, dnnl_type(t.cd), dims{t.full_n, 1});
  dnnl::primitive_attr attr;
  // Scratchpads (bf16's repacked B, for one) are owned per executing thread.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (t.alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(t.alpha)});
  if (t.beta != 0.0) {
    dnnl::post_ops ops;
    ops.append_sum(static_cast<float>(t.beta));
    attr.set_post_ops(ops);
  }
  // oneDNN fixes a primitive's threading when it is created: with one thread
  // it neither splits K nor opens parallel regions of its own.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{threads};
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
  return {dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc()};
}

CachedMatmul cached_primitive(const TileKey& key) {
  static std::mutex mutex;
  static std::map<TileKey, CachedMatmul> cache;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  // A simple bound: a training run uses a few dozen shapes, so clearing is rare.
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  return cache.emplace(key, make_primitive(key)).first->second;
}

// This thread's scratchpad, grown to the largest size asked for (like oneDNN's own).
void* thread_scratchpad(std::size_t bytes) {
  struct Free {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local std::size_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset();
    capacity = (bytes + 4095) / 4096 * 4096;
    buffer.reset(std::aligned_alloc(4096, capacity));
    TRIDENT_CHECK(buffer != nullptr, "matmul: cannot allocate a {}-byte oneDNN scratchpad", capacity);
  }
  return buffer.get();
}

void onednn_gemm(DType ab, DType cd, const GemmShape& s, double alpha, const void* a, const void* b, double beta,
                 void* c) {
  const std::size_t ab_size = dtype_size(ab), c_size = dtype_size(cd);
  const std::int64_t sa = s.broadcast_a ? 0 : s.m * s.k, sb = s.broadcast_b ? 0 : s.k * s.n;
  // The (at most four) tile shapes' primitives are looked up before the
  // parallel region, so creation happens once and on this thread.
  const auto [tile_m, tile_n] = tile_shape(s.m, s.n);
  auto key = [&](std::int64_t m, std::int64_t n) {
    return TileKey{ab, cd, m, n, s.k, s.m, s.n, s.trans_a, s.trans_b, alpha, beta};
  };
  std::map<std::pair<std::int64_t, std::int64_t>, CachedMatmul> prims;
  try {
    for (std::int64_t m : {std::min(tile_m, s.m), s.m % tile_m}) {
      for (std::int64_t n : {std::min(tile_n, s.n), s.n % tile_n}) {
        if (m > 0 && n > 0 && !prims.count({m, n})) prims.emplace(std::pair{m, n}, cached_primitive(key(m, n)));
      }
    }
  } catch (const dnnl::error& e) {
    TRIDENT_FAIL("matmul: oneDNN cannot build a {}x{}x{} GEMM ({} -> {}): {} (status {})", s.m, s.k, s.n,
                 dtype_name(ab), dtype_name(cd), e.what(), static_cast<int>(e.status));
  }
  auto* a_bytes = static_cast<const char*>(a);
  auto* b_bytes = static_cast<const char*>(b);
  auto* c_bytes = static_cast<char*>(c);
  // Tiles run on OpenMP threads, where exceptions must not escape: the first
  // failure is kept and rethrown after the region.
  std::mutex failure_mutex;
  std::string failure;
  for_each_tile(s, [&](const Tile& t) {
    try {
      const CachedMatmul& mm = prims.at({t.m, t.n});
      auto& engine = cpu_engine();
      auto* pa = a_bytes + static_cast<std::size_t>(t.batch * sa + a_offset(s, t)) * ab_size;
      auto* pb = b_bytes + static_cast<std::size_t>(t.batch * sb + b_offset(s, t)) * ab_size;
      auto* pc = c_bytes + static_cast<std::size_t>(t.batch * s.m * s.n + c_offset(s, t)) * c_size;
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(mm.a, engine, const_cast<char*>(pa))},
                                                 {DNNL_ARG_WEIGHTS, dnnl::memory(mm.b, engine, const_cast<char*>(pb))},
                                                 {DNNL_ARG_DST, dnnl::memory(mm.c, engine, pc)}};
      if (const std::size_t bytes = mm.scratchpad.get_size()) {
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(mm.scratchpad, engine, thread_scratchpad(bytes)));
      }
      thread_local dnnl::stream stream(engine);
      mm.primitive.execute(stream, args);
      stream.wait();
    } catch (const std::exception& e) {
      std::lock_guard lock(failure_mutex);
      if (failure.empty()) failure = e.what();
    }
  });
  TRIDENT_CHECK(failure.empty(), "matmul: oneDNN failed on {}x{}x{} (batch {}, {} -> {}): {}", s.m, s.k, s.n, s.batch,
                dtype_name(ab), dtype_name(cd), failure);
}

// -------------------------------------------------------------- OpenBLAS --

void single_threaded_openblas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

template <typename T>
void blas_tile(const GemmShape& s, const Tile& t, double alpha, const T* a, const T* b, double beta, T* c) {
  const auto ta = s.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = s.trans_b ? CblasTrans : CblasNoTrans;
  const auto lda = static_cast<blasint>(s.trans_a ? s.m : s.k);
  const auto ldb = static_cast<blasint>(s.trans_b ? s.k : s.n);
  const auto m = static_cast<blasint>(t.m), n = static_cast<blasint>(t.n), k = static_cast<blasint>(s.k);
  const auto ldc = static_cast<blasint>(s.n);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c,
                ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <typename T>
void openblas_gemm(const GemmShape& s, double alpha, const T* a, const T* b, double beta, T* c) {
  single_threaded_openblas();
  const std::int64_t sa = s.broadcast_a ? 0 : s.m * s.k, sb = s.broadcast_b ? 0 : s.k * s.n;
  for_each_tile(s, [&](const Tile& t) {
    blas_tile<T>(s, t, alpha, a + t.batch * sa + a_offset(s, t), b + t.batch * sb + b_offset(s, t), beta,
                 c + t.batch * s.m * s.n + c_offset(s, t));
  });
}

// C = beta · C, for K = 0 (neither library is asked about empty sums).
void scale_c(DType cd, std::int64_t count, double beta, void* c) {
  TRIDENT_DISPATCH_FLOAT(cd, "matmul", [&] {
    auto* p = static_cast<scalar_t*>(c);
    for (std::int64_t i = 0; i < count; ++i) {
      p[i] = beta == 0.0 ? store<scalar_t>(acc_t<scalar_t>(0)) : store<scalar_t>(load(p[i]) * static_cast<acc_t<scalar_t>>(beta));
    }
  });
}

std::string_view isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown isa";
  }
}

}  // namespace

std::string_view matmul_backend_name(MatmulBackend backend) noexcept {
  return backend == MatmulBackend::onednn ? "onednn" : "openblas";
}

MatmulBackend matmul_backend(DType ab_dtype) {
  if (ab_dtype == DType::f64) return MatmulBackend::openblas;
  if (ab_dtype == DType::bf16) return MatmulBackend::onednn;
  if (const char* env = std::getenv("TRIDENT_MATMUL_BACKEND"); env && *env) {
    const std::string_view v(env);
    if (v == "onednn") return MatmulBackend::onednn;
    if (v == "openblas") return MatmulBackend::openblas;
    TRIDENT_FAIL("TRIDENT_MATMUL_BACKEND='{}' is not a matmul backend (expected onednn or openblas)", v);
  }
  return kDefaultF32Backend;
}

void gemm(DType ab, DType cd, const GemmShape& shape, double alpha, const void* a, const void* b, double beta, void* c,
          std::optional<MatmulBackend> backend) {
  GemmShape s = shape;
  if (s.batch <= 0 || s.m <= 0 || s.n <= 0) return;
  if (s.k == 0) {
    scale_c(cd, s.batch * s.m * s.n, beta, c);
    return;
  }
  // One matrix multiplying every batch entry of an untransposed A is one tall GEMM.
  if (s.broadcast_b && !s.broadcast_a && !s.trans_a && s.batch > 1) {
    s.m *= s.batch;
    s.batch = 1;
    s.broadcast_b = false;
  }
  if (s.batch == 1) s.broadcast_a = s.broadcast_b = false;
  TRIDENT_CHECK(s.m <= INT_MAX && s.n <= INT_MAX && s.k <= INT_MAX,
                "matmul: GEMM of {}x{}x{} exceeds the libraries' 32-bit dimensions", s.m, s.k, s.n);

  MatmulBackend which = backend.value_or(matmul_backend(ab));
  if (ab == DType::f64) which = MatmulBackend::openblas;  // oneDNN has no f64 GEMM
  if (ab == DType::bf16) which = MatmulBackend::onednn;   // nor OpenBLAS a bf16 -> bf16 one

  if (which == MatmulBackend::onednn) {
    onednn_gemm(ab, cd, s, alpha, a, b, beta, c);
  } else if (ab == DType::f32) {
    openblas_gemm<float>(s, alpha, static_cast<const float*>(a), static_cast<const float*>(b), beta, static_cast<float*>(c));
  } else {
    openblas_gemm<double>(s, alpha, static_cast<const double*>(a), static_cast<const double*>(b), beta,
                          static_cast<double*>(c));
  }
}

void gemm(DType ab, DType cd, const GemmShape& shape, double alpha, const void* a, const void* b, double beta,
          void* c) {
  gemm(ab, cd, shape, alpha, a, b, beta, c, std::nullopt);
}

void broadcast_rows(DType dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols) {
  const std::size_t bytes = static_cast<std::size_t>(cols) * dtype_size(dtype);
  parallel_for(0, rows, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t lo, std::int64_t hi) {
                 for (std::int64_t r = lo; r < hi; ++r) std::memcpy(static_cast<char*>(out) + static_cast<std::size_t>(r) * bytes, row, bytes);
               });
}

std::string matmul_backend_description() {
  const dnnl_version_t* v = dnnl_version();
  std::string blas = "OpenBLAS";
  if (const char* config = openblas_get_config()) {
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell MAX_THREADS=64": keep name and version.
    std::string_view c(config);
    const auto first = c.find(' ');
    const auto second = first == std::string_view::npos ? first : c.find(' ', first + 1);
    blas = std::string(c.substr(0, second));
  }
  // The kernel family OpenBLAS picked at load time (OPENBLAS_CORETYPE overrides it):
  // 0.3.21 does not know AMD family 26 and falls back to AVX2 "Haswell" kernels.
  const char* core = openblas_get_corename();
  const bool f32_onednn = matmul_backend(DType::f32) == MatmulBackend::onednn;
  return fmt::format("oneDNN {}.{}.{} ({}bf16: {}), {} ({}f64: {})", v->major, v->minor, v->patch,
                     f32_onednn ? "f32, " : "", isa_name(dnnl_get_effective_cpu_isa()), blas, f32_onednn ? "" : "f32, ",
                     core ? core : "unknown kernels");
}

double measure_matmul_peak_gflops(DType dtype) {
  TRIDENT_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16,
                "measure_matmul_peak_gflops: no GEMM for dtype {}", dtype_name(dtype));
  using clock = std::chrono::steady_clock;
  const DType cd = dtype == DType::bf16 ? DType::f32 : dtype;
  auto run = [&](std::int64_t n, int max_reps, double budget_s) {
    const auto elems = static_cast<std::size_t>(n * n);
    std::vector<std::byte> a(elems * dtype_size(dtype)), b(elems * dtype_size(dtype)), c(elems * dtype_size(cd));
    // Small non-zero values: the timing must not depend on zeros or denormals.
    TRIDENT_DISPATCH_FLOAT(dtype, "measure_matmul_peak_gflops", [&] {
      auto* pa = reinterpret_cast<scalar_t*>(a.data());
      auto* pb = reinterpret_cast<scalar_t*>(b.data());
      for (std::size_t i = 0; i < elems; ++i) {
        pa[i] = store<scalar_t>(static_cast<acc_t<scalar_t>>(static_cast<int>(i % 13) - 6) * acc_t<scalar_t>(0.01));
        pb[i] = store<scalar_t>(static_cast<acc_t<scalar_t>>(static_cast<int>(i % 7) - 3) * acc_t<scalar_t>(0.01));
      }
    });
    const GemmShape s{1, n, n, n};
    std::vector<double> gflops;
    const auto start = clock::now();
    for (int rep = 0; rep <= max_reps; ++rep) {
      const auto t0 = clock::now();
      gemm(dtype, cd, s, 1.0, a.data(), b.data(), 0.0, c.data());
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (rep > 0) gflops.push_back(2.0 * static_cast<double>(n * n) * static_cast<double>(n) / dt * 1e-9);  // rep 0 warms up
      if (rep >= 3 && std::chrono::duration<double>(clock::now() - start).count() > budget_s) break;
    }
    return *std::max_element(gflops.begin(), gflops.end());
  };
  // A short 1024³ probe decides whether ~1 s fits several 2048³ GEMMs (the
  // peak the benchmarks quote); on a slow or shared core it stays at 1024³.
  const double probe = run(1024, 50, 0.25);
  const double seconds_2048 = 2.0 * 2048.0 * 2048.0 * 2048.0 / (probe * 1e9);
  return seconds_2048 <= 0.25 ? run(2048, 50, 1.0) : run(1024, 200, 1.0);
}

}  // namespace trident::kernels::cpu
