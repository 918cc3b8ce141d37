// Optimizer kernels. The f32 AdamW body is written with AVX-512 intrinsics:
// without -fno-math-errno the compiler keeps sqrt scalar (errno), which makes
// the plain loop compute-bound at several times the memory time; the portable
// scalar loop below is the fallback and handles f64, the tails and other
// dtype combinations. Both apply the same operations in the same order (the
// compiler may fuse multiply-adds differently in each, which is harmless: the
// 16-element blocking fixes which path updates an element for any thread count).
#include "trident/kernels/cpu/optimizer.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#ifdef __AVX512F__
// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsic
// headers as "maybe uninitialized" (GCC bug 105593); silence it for them only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/lane_sum.h"

namespace trident::kernels::cpu {

namespace {
constexpr std::int64_t kVec = 16;           // elements per block; blocks never straddle threads
constexpr std::int64_t kGrainBlocks = 1024;  // 16K elements per thread chunk, at least

// Runs body(lo, hi) over [0, n) split on 16-element block boundaries.
template <typename F>
void for_blocks(std::int64_t n, F&& body) {
  const std::int64_t blocks = (n + kVec - 1) / kVec;
  parallel_for(0, blocks, kGrainBlocks, [&](std::int64_t blo, std::int64_t bhi) {
    body(blo * kVec, std::min(n, bhi * kVec));
  });
}

// Widens any floating element to the arithmetic type P.
template <typename P, typename G>
inline P widen(G v) {
  if constexpr (std::is_same_v<G, bf16> || std::is_same_v<G, f16>) {
    return static_cast<P>(static_cast<float>(v));
  } else {
    return static_cast<P>(v);
  }
}

// Rounds the arithmetic value to the copy's type once (bf16 rounding is inline in
// core/dtype.h, so loops vectorise).
template <typename C, typename P>
inline C narrow(P v) {
  if constexpr (std::is_same_v<C, bf16> || std::is_same_v<C, f16>) {
    return C(v);  // single rounding from float or double
  } else {
    return static_cast<C>(v);
  }
}

struct NoCopy {};

// The per-step scalars, formed in f64 as PyTorch does and rounded to P.
template <typename P>
struct AdamWScalars {
  P grad_scale, decay, w1, one_minus_w1, beta2, c2, bc2_sqrt, eps, neg_step_size;
  bool small_weight;
  explicit AdamWScalars(const AdamWHyper& h) {
    const double t = static_cast<double>(h.step);
    const double bias_correction1 = h.bias_correction ? 1.0 - std::pow(h.beta1, t) : 1.0;
    const double bias_correction2 = h.bias_correction ? 1.0 - std::pow(h.beta2, t) : 1.0;
    grad_scale = static_cast<P>(h.grad_scale);
    decay = static_cast<P>(1.0 - h.lr * h.weight_decay);
    w1 = static_cast<P>(1.0 - h.beta1);
    one_minus_w1 = P(1) - w1;
    small_weight = std::fabs(1.0 - h.beta1) < 0.5;
    beta2 = static_cast<P>(h.beta2);
    c2 = static_cast<P>(1.0 - h.beta2);
    bc2_sqrt = static_cast<P>(std::sqrt(bias_correction2));
    eps = static_cast<P>(h.eps);
    neg_step_size = static_cast<P>(-(h.lr / bias_correction1));
  }
};

template <typename P, typename G, typename C>
void adamw_scalar(const AdamWScalars<P>& s, P* param, const G* grad, P* m_state, P* v_state, C* copy, std::int64_t lo,
                  std::int64_t hi) {
  for (std::int64_t i = lo; i < hi; ++i) {
    const P g = widen<P>(grad[i]) * s.grad_scale;
    P p = param[i] * s.decay;
    P m = m_state[i];
    m = s.small_weight ? m + s.w1 * (g - m) : g - (g - m) * s.one_minus_w1;
    P v = v_state[i] * s.beta2 + (s.c2 * g) * g;
    const P denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    p = p + (s.neg_step_size * m) / denom;
    param[i] = p;
    m_state[i] = m;
    v_state[i] = v;
    if constexpr (!std::is_same_v<C, NoCopy>) copy[i] = narrow<C>(p);
  }
}

#ifdef __AVX512F__
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
// bf16 bits of 16 floats, rounded to nearest even (NaNs stay quiet NaNs), as core/dtype.h.
inline __m256i to_bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet_nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet_nan);
  return _mm512_cvtepi32_epi16(bits);
}
inline void store16(bf16* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16_bits(v)); }
inline void store16(NoCopy*, __m512) {}

// The compute copy is only written here and next read by the following
// forward, long after this pass has streamed the whole model through the
// caches: a non-temporal store skips reading each line in first (2 of the
// ~32 bytes this step moves per parameter). Needs 32-byte alignment.
template <typename C>
inline void store16_streaming(C* p, __m512 v) {
  if constexpr (std::is_same_v<C, bf16>) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bf16_bits(v));
  } else {
    store16(p, v);
  }
}

// Full 16-element blocks of [lo, hi); returns where the scalar tail starts.
template <typename G, typename C>
std::int64_t adamw_avx512(const AdamWScalars<float>& s, float* param, const G* grad, float* m_state, float* v_state,
                          C* copy, std::int64_t lo, std::int64_t hi) {
  const __m512 grad_scale = _mm512_set1_ps(s.grad_scale), decay = _mm512_set1_ps(s.decay);
  const __m512 w1 = _mm512_set1_ps(s.w1), one_minus_w1 = _mm512_set1_ps(s.one_minus_w1);
  const __m512 beta2 = _mm512_set1_ps(s.beta2), c2 = _mm512_set1_ps(s.c2), bc2_sqrt = _mm512_set1_ps(s.bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(s.eps), neg_step_size = _mm512_set1_ps(s.neg_step_size);
  std::int64_t i = lo;
  bool stream_copy = false;
  if constexpr (std::is_same_v<C, bf16>) stream_copy = reinterpret_cast<std::uintptr_t>(copy + lo) % 32 == 0;
  for (; i + kVec <= hi; i += kVec) {
    const __m512 g = _mm512_mul_ps(load16(grad + i), grad_scale);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), decay);
    __m512 m = _mm512_loadu_ps(m_state + i);
    const __m512 diff = _mm512_sub_ps(g, m);
    m = s.small_weight ? _mm512_add_ps(m, _mm512_mul_ps(w1, diff)) : _mm512_sub_ps(g, _mm512_mul_ps(diff, one_minus_w1));
    const __m512 v =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v_state + i), beta2), _mm512_mul_ps(_mm512_mul_ps(c2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2_sqrt), eps);
    p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(neg_step_size, m), denom));
    _mm512_storeu_ps(param + i, p);
    _mm512_storeu_ps(m_state + i, m);
    _mm512_storeu_ps(v_state + i, v);
    if constexpr (!std::is_same_v<C, NoCopy>) {
      if (stream_copy) {
        store16_streaming(copy + i, p);
      } else {
        store16(copy + i, p);
      }
    }
  }
  if (stream_copy) _mm_sfence();  // order the streamed stores before the caller's later writes
  return i;
}
#endif

template <typename P, typename G, typename C>
void adamw_typed(const AdamWHyper& h, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, void* copy,
                 std::int64_t n) {
  const AdamWScalars<P> s(h);
  auto* p = static_cast<P*>(param);
  const auto* g = static_cast<const G*>(grad);
  auto* m = static_cast<P*>(exp_avg);
  auto* v = static_cast<P*>(exp_avg_sq);
  auto* c = static_cast<C*>(copy);
  for_blocks(n, [&](std::int64_t lo, std::int64_t hi) {
#ifdef __AVX512F__
    if constexpr (std::is_same_v<P, float> && (std::is_same_v<G, float> || std::is_same_v<G, bf16>) &&
                  (std::is_same_v<C, float> || std::is_same_v<C, bf16> || std::is_same_v<C, NoCopy>)) {
      lo = adamw_avx512<G, C>(s, p, g, m, v, c, lo, hi);
    }
#endif
    adamw_scalar<P, G, C>(s, p, g, m, v, c, lo, hi);
  });
}

// Calls f(T{}) for the floating dtypes.
template <typename F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    default: TRIDENT_FAIL("{}: unsupported dtype {}", op, dtype);
  }
}

template <typename F>
void dispatch_param(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: TRIDENT_FAIL("{}: parameters must be f32 or f64, got {}", op, dtype);
  }
}

template <typename P, typename G>
void sgd_typed(P* p, const G* grad, P* buf, bool init_buf, std::int64_t n, double lr, double momentum,
               double weight_decay, double dampening, bool nesterov, double grad_scale) {
  const P gs = static_cast<P>(grad_scale), wd = static_cast<P>(weight_decay), mom = static_cast<P>(momentum);
  const P damp = static_cast<P>(1.0 - dampening), neg_lr = static_cast<P>(-lr);
  const bool use_wd = weight_decay != 0, use_momentum = momentum != 0;
  for_blocks(n, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      P g = widen<P>(grad[i]) * gs;
      if (use_wd) g = g + wd * p[i];
      if (use_momentum) {
        const P b = init_buf ? g : buf[i] * mom + damp * g;
        buf[i] = b;
        g = nesterov ? g + mom * b : b;
      }
      p[i] = p[i] + neg_lr * g;
    }
  });
}
}  // namespace

void adamw_step(DType param_dtype, DType grad_dtype, DType copy_dtype, void* param, const void* grad, void* exp_avg,
                void* exp_avg_sq, void* param_copy, std::int64_t n, const AdamWHyper& hyper) {
  dispatch_param(param_dtype, "adamw_step", [&](auto p_tag) {
    using P = decltype(p_tag);
    dispatch_float(grad_dtype, "adamw_step", [&](auto g_tag) {
      using G = decltype(g_tag);
      if (param_copy == nullptr) {
        adamw_typed<P, G, NoCopy>(hyper, param, grad, exp_avg, exp_avg_sq, nullptr, n);
      } else {
        dispatch_float(copy_dtype, "adamw_step", [&](auto c_tag) {
          using C = decltype(c_tag);
          adamw_typed<P, G, C>(hyper, param, grad, exp_avg, exp_avg_sq, param_copy, n);
        });
      }
    });
  });
}

void sgd_step(DType param_dtype, DType grad_dtype, void* param, const void* grad, void* momentum_buf, bool init_buf,
              std::int64_t n, double lr, double momentum, double weight_decay, double dampening, bool nesterov,
              double grad_scale) {
  dispatch_param(param_dtype, "sgd_step", [&](auto p_tag) {
    using P = decltype(p_tag);
    dispatch_float(grad_dtype, "sgd_step", [&](auto g_tag) {
      using G = decltype(g_tag);
      sgd_typed<P, G>(static_cast<P*>(param), static_cast<const G*>(grad), static_cast<P*>(momentum_buf), init_buf, n,
                      lr, momentum, weight_decay, dampening, nesterov, grad_scale);
    });
  });
}

double sum_of_squares(DType dtype, const void* x, std::int64_t n) {
  constexpr std::int64_t kBlock = 4096;
  constexpr int kLanes = 32;  // four independent f64 vector chains hide the add latency
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  dispatch_float(dtype, "sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    const auto* p = static_cast<const T*>(x);
    parallel_for(0, blocks, 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t b = lo; b < hi; ++b) {
        const std::int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        partial[static_cast<std::size_t>(b)] =
            lane_sum<kLanes, LaneFold::in_order, double>(end - begin, [&](std::int64_t i) {
              const double v = widen<double>(p[begin + i]);
              return v * v;
            });
      }
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace trident::kernels::cpu
