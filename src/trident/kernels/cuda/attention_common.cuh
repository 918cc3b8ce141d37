// Shared by the attention kernel files (attention.cu: FMA kernels and the launchers of attention_launch.h;
// attention_mma.cu: tensor-core kernels): geometry, numerics helpers and the launch helper. .cu files only.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "trident/kernels/cuda/attention_launch.h"
#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/philox.cuh"
#include "trident/kernels/dropout_rule.h"

namespace trident::kernels::cuda::attention_detail {

using i64 = std::int64_t;

// Dimensions and element offsets into q/out/dout [B, T, H, D], k/v [B, S, Hkv, D] and lse/Di [B, H, T].
struct Geometry {
  i64 B, T, S, H, Hkv, D, group, shift;  // query t sees keys s ≤ t + shift under causal (cpu::AttentionDims::shift)
  bool causal;
  i64 window;  // sliding window (0: unlimited; only with causal): query t sees keys (t + shift − window, t + shift]
  double scale;
  // Key-padding mask [B, S] (null: every key real) as raw bytes, key_mask_bytes per entry (8: i64, 4: i32,
  // 1: u8); an entry of 0 is a padding key.
  const unsigned char* key_mask;
  int key_mask_bytes;
  // Packed documents (null: none; causal): [B, T], the position of the first token of each query's
  // document; query t sees key s iff key_pos + s ≥ doc_starts[b, t] (key_pos: the position of key 0).
  const std::int32_t* doc_starts;
  i64 key_pos;
  // Dropout on the probabilities (cpu::AttentionDropout; false: none): probability (b, h, t, s) is kept,
  // times 1/(1 − p), iff the word of its global index is at least drop_threshold (kernels/dropout_rule.h).
  bool dropout;
  bool drop_all;
  std::uint32_t drop_threshold;
  double drop_scale;
  std::uint64_t drop_seed, drop_stream;
  i64 drop_b0, drop_h0, drop_heads;
  i64 drop_q0, drop_k0, drop_T, drop_S;  // the index grid (cpu::AttentionDropout's q/k offset and grid)

  __device__ i64 q_row(i64 b, i64 t, i64 h) const { return ((b * T + t) * H + h) * D; }
  __device__ i64 kv_row(i64 b, i64 s, i64 hk) const { return ((b * S + s) * Hkv + hk) * D; }
  __device__ i64 stat(i64 b, i64 h, i64 t) const { return (b * H + h) * T + t; }
  // Keys [kv_begin, kv_end) are visible to some query of the tile of nq rows from t0 of sample b (the CPU
  // kernels' Geometry and HiddenKeys: kernels/cpu/attention_tiles.h): from the first row's document on.
  __device__ i64 kv_begin(i64 b, i64 t0) const {
    i64 e = window <= 0 ? 0 : t0 + shift - window + 1;
    if (doc_starts != nullptr && t0 < T && doc_starts[b * T + t0] - key_pos > e) e = doc_starts[b * T + t0] - key_pos;
    return e < 0 ? 0 : (e > S ? S : e);
  }
  __device__ i64 kv_end(i64 t0, i64 nq) const {
    if (!causal) return S;
    const i64 e = t0 + nq + shift;
    return e < 0 ? 0 : (e > S ? S : e);
  }
  // Queries [q_begin, q_end) see some key of the tile of nk keys from s0.
  __device__ i64 q_begin(i64 s0) const {
    if (!causal) return 0;
    const i64 e = s0 - shift;
    return e < 0 ? 0 : (e > T ? T : e);
  }
  __device__ i64 q_end(i64 s0, i64 nk) const {
    if (window <= 0) return T;
    const i64 e = s0 + nk - 1 - shift + window;
    return e < 0 ? 0 : (e > T ? T : e);
  }
  // Query t sees key s (bottom-right aligned causal mask, sliding window; t and s may lie past the tensors).
  __device__ bool visible(i64 t, i64 s) const {
    return t < T && s < S && (!causal || (s <= t + shift && (window <= 0 || s > t + shift - window)));
  }
  // Key s (< S) of sample b is a real key, not padding.
  __device__ bool real_key(i64 b, i64 s) const {
    if (key_mask == nullptr) return true;
    const i64 at = b * S + s;
    switch (key_mask_bytes) {
      case 8:
        return reinterpret_cast<const long long*>(key_mask)[at] != 0;
      case 4:
        return reinterpret_cast<const int*>(key_mask)[at] != 0;
      default:
        return key_mask[at] != 0;
    }
  }
  // Query t of sample b sees key s: visible under causal and window, not padding, and of t's document.
  __device__ bool sees(i64 b, i64 t, i64 s) const {
    return visible(t, s) && real_key(b, s) && (doc_starts == nullptr || key_pos + s >= doc_starts[b * T + t]);
  }
  // The dropout's keep factor of probability (b, h, t, s) in A: 1/(1 − p) or 0, the CPU kernels' to the bit.
  template <typename A>
  __device__ A keep(i64 b, i64 h, i64 t, i64 s) const {
    const auto at = static_cast<std::uint64_t>(
        (((drop_b0 + b) * drop_heads + drop_h0 + h) * drop_T + drop_q0 + t) * drop_S + drop_k0 + s);
    return !drop_all && philox_word(at, drop_stream, drop_seed) >= drop_threshold ? static_cast<A>(drop_scale) : A(0);
  }
};

inline Geometry make_geometry(const cpu::AttentionDims& d, const void* key_mask, const std::int32_t* doc_starts) {
  const int bytes = d.key_mask_dtype == DType::i64 ? 8 : d.key_mask_dtype == DType::i32 ? 4 : 1;
  const DropRule rule = drop_rule(d.dropout.p);
  return Geometry{d.batch,
                  d.q_len,
                  d.kv_len,
                  d.heads,
                  d.kv_heads,
                  d.head_dim,
                  d.heads / d.kv_heads,
                  d.shift(),
                  d.causal,
                  d.causal ? d.window : 0,
                  d.scale,
                  static_cast<const unsigned char*>(key_mask),
                  bytes,
                  doc_starts,
                  d.key_position(),
                  d.dropout.p > 0,
                  rule.drop_all,
                  rule.threshold,
                  rule.scale,
                  d.dropout.seed,
                  d.dropout.stream,
                  d.dropout.batch_offset,
                  d.dropout.head_offset,
                  d.dropout.heads,
                  d.dropout.q_offset,
                  d.dropout.k_offset,
                  d.dropout.q_grid > 0 ? d.dropout.q_grid : d.q_len,
                  d.dropout.k_grid > 0 ? d.dropout.k_grid : d.kv_len};
}

template <typename T>
__device__ __forceinline__ Acc<T> mask_value(const T* mask, const Geometry& g, i64 t, i64 s) {
  return mask != nullptr ? load(mask + t * g.S + s) : Acc<T>(0);
}

template <typename A>
__device__ __forceinline__ A max_acc(A x, A y) {
  if constexpr (std::is_same_v<A, double>) {
    return fmax(x, y);
  } else {
    return fmaxf(x, y);
  }
}

template <typename A>
__device__ __forceinline__ A negative_infinity() {
  return -static_cast<A>(INFINITY);
}

__device__ __forceinline__ i64 imin(i64 a, i64 b) {
  return a < b ? a : b;
}
__device__ __forceinline__ i64 imax(i64 a, i64 b) {
  return a > b ? a : b;
}

// The query tile of this block among q_tiles tiles of `rows` queries per (b, h): blocks run the last tile
// first, so under causal masking the longest rows start first.
struct QueryTile {
  i64 b, h, hk, t0;
  int nq;  // real rows of the tile (fewer in the last one)
};
__device__ __forceinline__ QueryTile query_tile(const Geometry& g, int q_tiles, int rows) {
  const i64 block = blockIdx.x;
  const i64 qt = q_tiles - 1 - block % q_tiles;
  const i64 h = block / q_tiles % g.H, t0 = qt * rows;
  return QueryTile{block / q_tiles / g.H, h, h / g.group, t0, static_cast<int>(imin(rows, g.T - t0))};
}

// ======================================================================================================
// Launch helpers
// ======================================================================================================

template <typename F>
void dispatch_head_dim(i64 D, F&& f) {
  if (D <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (D <= 64) {
    f(std::integral_constant<int, 64>{});
  } else if (D <= kMaxAttentionHeadDim) {
    f(std::integral_constant<int, 128>{});
  } else {
    throw_error("CUDA attention: head_dim " + std::to_string(D) + " exceeds the kernels' maximum of " +
                std::to_string(kMaxAttentionHeadDim));
  }
}

inline unsigned grid_for(i64 blocks, const char* kernel) {
  if (blocks > 0x7fffffff) {
    throw_error(std::string("CUDA ") + kernel + ": " + std::to_string(blocks) +
                " thread blocks exceed the grid limit (2^31 - 1)");
  }
  return static_cast<unsigned>(blocks);
}

// Launches kernel<<<blocks, threads, smem>>> on the compute stream, raising its dynamic shared memory limit
// first where it needs more than the default 48 KB. A device whose opt-in limit is lower (99 KB on sm_86,
// sm_89 and sm_120, against the 104.5 KB of the bf16/f16 dK/dV kernel at head_dim > 64) is a clear error
// rather than cudaFuncSetAttribute's bare "invalid argument".
template <typename... P, typename... Args>
void launch(void (*kernel)(P...), i64 blocks, int threads, std::size_t smem, const char* name, Args... args) {
  if (blocks == 0) return;
  const unsigned grid = grid_for(blocks, name);
  if (smem > 48 * 1024) {
    int limit = 0;
    check_cuda(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()), name);
    if (smem > static_cast<std::size_t>(limit)) {
      throw_error(std::string("CUDA ") + name + ": the kernel needs " + std::to_string(smem) +
                  " bytes of shared memory per block, more than this device's limit of " + std::to_string(limit) +
                  " (a smaller head_dim needs less)");
    }
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), name);
  }
  kernel<<<grid, threads, smem, stream()>>>(args...);
  check_launch(name);
}

__host__ __device__ inline i64 ceil_div(i64 x, i64 m) {
  return (x + m - 1) / m;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// The tensor-core path (attention_mma.cu), instantiated for T = __nv_bfloat16 and __half.
template <typename T>
void forward_mma(const Geometry& g, const T* q, const T* k, const T* v, const T* mask, T* out, float* lse);
template <typename T>
void backward_mma(const Geometry& g, const T* q, const T* k, const T* v, const T* mask, const T* dout, const float* lse,
                  const float* di, T* dq, T* dk, T* dv);

}  // namespace trident::kernels::cuda::attention_detail
