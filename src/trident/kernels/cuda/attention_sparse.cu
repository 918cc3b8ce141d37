// Block-sparse attention on the GPU (cpu::AttentionDims::layout; the contract is kernels/cpu/attention.h),
// with plain FMAs in the arithmetic type: one thread per query row (forward, dq) or per key (dk, dv), each
// visiting only the blocks its layout row (or column) selects, in order, with the CPU kernels' masks and
// dropout bits (attention_common.cuh's Geometry). Correct and deterministic; not tuned (no shared-memory
// tiles, no tensor cores): it is what the CUDA backend runs for model.sparse_attention, and the backend
// consistency table holds it to the CPU kernels.
#include "trident/kernels/cuda/attention_common.cuh"

namespace trident::kernels::cuda {

namespace {

using namespace attention_detail;

constexpr int kSparseThreads = 64;

struct SparseLayout {
  const std::uint8_t* blocks;
  i64 heads, rows, cols, block, head_offset, nqb, nkb;
  // Query block r of head h attends to key block c (the layout; under causal, c ≤ r).
  __device__ bool selected(bool causal, i64 h, i64 r, i64 c) const {
    if (causal && c > r) return false;
    const i64 hl = heads == 1 ? 0 : head_offset + h;
    return blocks[(hl * rows + r) * cols + c] != 0;
  }
};

template <typename T>
__device__ Acc<T> dot(const T* __restrict__ a, const T* __restrict__ b, i64 D) {
  Acc<T> s = 0;
  for (i64 d = 0; d < D; ++d) s += load(a + d) * load(b + d);
  return s;
}

template <typename T>
__global__ void __launch_bounds__(kSparseThreads)
    sparse_forward_kernel(Geometry g, SparseLayout L, const T* __restrict__ q, const T* __restrict__ k,
                          const T* __restrict__ v, T* __restrict__ out, Acc<T>* __restrict__ lse) {
  using A = Acc<T>;
  const i64 task = blockIdx.x, r = task % L.nqb, h = task / L.nqb % g.H, b = task / (L.nqb * g.H), hk = h / g.group;
  const i64 t_end = imin((r + 1) * L.block, g.T);
  for (i64 t = r * L.block + threadIdx.x; t < t_end; t += blockDim.x) {
    A acc[kMaxAttentionHeadDim];
    for (i64 d = 0; d < g.D; ++d) acc[d] = 0;
    A m = negative_infinity<A>(), l = 0;
    const T* qt = q + g.q_row(b, t, h);
    for (i64 c = 0; c < L.nkb; ++c) {
      if (!L.selected(g.causal, h, r, c)) continue;
      for (i64 s = c * L.block; s < imin((c + 1) * L.block, g.S); ++s) {
        if (!g.sees(b, t, s)) continue;
        const A score = dot(qt, k + g.kv_row(b, s, hk), g.D) * static_cast<A>(g.scale);
        const A mn = max_acc(m, score);
        const A alpha = exp_acc(m - mn), p = exp_acc(score - mn);
        l = l * alpha + p;
        const A pk = g.dropout ? p * g.keep<A>(b, h, t, s) : p;
        const T* vs = v + g.kv_row(b, s, hk);
        for (i64 d = 0; d < g.D; ++d) acc[d] = acc[d] * alpha + pk * load(vs + d);
        m = mn;
      }
    }
    T* o = out + g.q_row(b, t, h);
    for (i64 d = 0; d < g.D; ++d) store(o + d, l > A(0) ? acc[d] / l : A(0));
    lse[g.stat(b, h, t)] = l > A(0) ? m + log_acc(l) : negative_infinity<A>();
  }
}

template <typename T>
__global__ void __launch_bounds__(kSparseThreads)
    sparse_dq_kernel(Geometry g, SparseLayout L, const T* __restrict__ q, const T* __restrict__ k,
                     const T* __restrict__ v, const T* __restrict__ dout, const Acc<T>* __restrict__ lse,
                     const Acc<T>* __restrict__ di, T* __restrict__ dq) {
  using A = Acc<T>;
  const i64 task = blockIdx.x, r = task % L.nqb, h = task / L.nqb % g.H, b = task / (L.nqb * g.H), hk = h / g.group;
  const i64 t_end = imin((r + 1) * L.block, g.T);
  for (i64 t = r * L.block + threadIdx.x; t < t_end; t += blockDim.x) {
    A acc[kMaxAttentionHeadDim];
    for (i64 d = 0; d < g.D; ++d) acc[d] = 0;
    const A l = lse[g.stat(b, h, t)], d_i = di[g.stat(b, h, t)];
    const T* qt = q + g.q_row(b, t, h);
    const T* dot_ = dout + g.q_row(b, t, h);
    if (l != negative_infinity<A>()) {
      for (i64 c = 0; c < L.nkb; ++c) {
        if (!L.selected(g.causal, h, r, c)) continue;
        for (i64 s = c * L.block; s < imin((c + 1) * L.block, g.S); ++s) {
          if (!g.sees(b, t, s)) continue;
          const T* ks = k + g.kv_row(b, s, hk);
          const A p = exp_acc(dot(qt, ks, g.D) * static_cast<A>(g.scale) - l);
          const A kp = g.dropout ? g.keep<A>(b, h, t, s) : A(1);
          const A ds = p * (dot(dot_, v + g.kv_row(b, s, hk), g.D) * kp - d_i);
          for (i64 d = 0; d < g.D; ++d) acc[d] += ds * load(ks + d);
        }
      }
    }
    T* o = dq + g.q_row(b, t, h);
    for (i64 d = 0; d < g.D; ++d) store(o + d, acc[d] * static_cast<A>(g.scale));
  }
}

template <typename T>
__global__ void __launch_bounds__(kSparseThreads)
    sparse_dkv_kernel(Geometry g, SparseLayout L, const T* __restrict__ q, const T* __restrict__ k,
                      const T* __restrict__ v, const T* __restrict__ dout, const Acc<T>* __restrict__ lse,
                      const Acc<T>* __restrict__ di, T* __restrict__ dk, T* __restrict__ dv) {
  using A = Acc<T>;
  const i64 task = blockIdx.x, c = task % L.nkb, hk = task / L.nkb % g.Hkv, b = task / (L.nkb * g.Hkv);
  const i64 s_end = imin((c + 1) * L.block, g.S);
  for (i64 s = c * L.block + threadIdx.x; s < s_end; s += blockDim.x) {
    A ak[kMaxAttentionHeadDim], av[kMaxAttentionHeadDim];
    for (i64 d = 0; d < g.D; ++d) ak[d] = av[d] = 0;
    const T* ks = k + g.kv_row(b, s, hk);
    const T* vs = v + g.kv_row(b, s, hk);
    for (i64 h = hk * g.group; h < (hk + 1) * g.group; ++h) {
      for (i64 r = 0; r < L.nqb; ++r) {
        if (!L.selected(g.causal, h, r, c)) continue;
        for (i64 t = r * L.block; t < imin((r + 1) * L.block, g.T); ++t) {
          const A l = lse[g.stat(b, h, t)];
          if (l == negative_infinity<A>() || !g.sees(b, t, s)) continue;
          const T* qt = q + g.q_row(b, t, h);
          const T* dot_ = dout + g.q_row(b, t, h);
          const A p = exp_acc(dot(qt, ks, g.D) * static_cast<A>(g.scale) - l);
          const A kp = g.dropout ? g.keep<A>(b, h, t, s) : A(1);
          const A ds = p * (dot(dot_, vs, g.D) * kp - di[g.stat(b, h, t)]);
          const A z = p * kp;
          for (i64 d = 0; d < g.D; ++d) {
            av[d] += z * load(dot_ + d);
            ak[d] += ds * load(qt + d) * static_cast<A>(g.scale);
          }
        }
      }
    }
    for (i64 d = 0; d < g.D; ++d) {
      store(dk + g.kv_row(b, s, hk) + d, ak[d]);
      store(dv + g.kv_row(b, s, hk) + d, av[d]);
    }
  }
}

SparseLayout sparse_layout(const Geometry& g, const cpu::AttentionLayout& l) {
  return {l.blocks, l.heads, l.rows, l.cols, l.block, l.head_offset, (g.T + l.block - 1) / l.block,
          (g.S + l.block - 1) / l.block};
}

}  // namespace

void launch_block_sparse_forward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k,
                                 const void* v, const void* key_mask, void* out, void* lse) {
  const Geometry g = make_geometry(dims, key_mask, nullptr);
  const SparseLayout L = sparse_layout(g, dims.layout);
  if (g.B == 0 || g.H == 0 || g.T == 0) return;
  dispatch_floating(dtype, "attention (block-sparse)", [&](auto tag) {
    using T = decltype(tag);
    launch(sparse_forward_kernel<T>, g.B * g.H * L.nqb, kSparseThreads, 0, "attention (block-sparse)", g, L,
           static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out),
           static_cast<Acc<T>*>(lse));
  });
}

void launch_block_sparse_backward(DType dtype, const cpu::AttentionDims& dims, const void* q, const void* k,
                                  const void* v, const void* key_mask, const void* lse, const void* dout,
                                  const void* di, void* dq, void* dk, void* dv) {
  const Geometry g = make_geometry(dims, key_mask, nullptr);
  const SparseLayout L = sparse_layout(g, dims.layout);
  if (g.B == 0 || g.H == 0) return;
  dispatch_floating(dtype, "attention_backward (block-sparse)", [&](auto tag) {
    using T = decltype(tag);
    using A = Acc<T>;
    launch(sparse_dq_kernel<T>, g.B * g.H * L.nqb, kSparseThreads, 0, "attention_backward (block-sparse dq)", g, L,
           static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
           static_cast<const T*>(dout), static_cast<const A*>(lse), static_cast<const A*>(di), static_cast<T*>(dq));
    launch(sparse_dkv_kernel<T>, g.B * g.Hkv * L.nkb, kSparseThreads, 0, "attention_backward (block-sparse dk, dv)",
           g, L, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
           static_cast<const T*>(dout), static_cast<const A*>(lse), static_cast<const A*>(di), static_cast<T*>(dk),
           static_cast<T*>(dv));
  });
}

}  // namespace trident::kernels::cuda
