// Activations: one contiguous loop per op, split over the rank's threads in
// chunks of at least 16K elements. Each element is independent, so results do
// not depend on the thread count.
#include "trident/kernels/cpu/activation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/kernels/cpu/exp.h"

namespace trident::kernels::cpu {

namespace {

constexpr std::int64_t kGrain = 1 << 14;


template <typename A>
inline A sigmoid(A x) noexcept {
  return A(1) / (A(1) + exp_acc(-x));
}

// GELU, tanh approximation (GPT-2's gelu_new): 0.5 x (1 + tanh(u)) = x * sigmoid(2u).
struct GeluTanh {
  template <typename A>
  static constexpr A kSqrt2OverPi = static_cast<A>(0.79788456080286535588);
  template <typename A>
  static constexpr A kCubic = static_cast<A>(0.044715);

  template <typename A>
  static A forward(A x) noexcept {
    const A u = kSqrt2OverPi<A> * (x + kCubic<A> * x * x * x);
    return x * sigmoid(A(2) * u);
  }
  // d/dx [x s(2u)] = s + 2 x s (1 - s) u'(x), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
  // Beyond |x| = 40 the derivative is exactly 0 or 1 in f32 and f64; clamping
  // there keeps x^3 finite (no inf * 0).
  template <typename A>
  static A derivative(A x) noexcept {
    x = std::min(std::max(x, A(-40)), A(40));
    const A x2 = x * x;
    const A u = kSqrt2OverPi<A> * (x + kCubic<A> * x2 * x);
    const A du = kSqrt2OverPi<A> * (A(1) + A(3) * kCubic<A> * x2);
    const A s = sigmoid(A(2) * u);
    return s + A(2) * x * s * (A(1) - s) * du;
  }
};

// Exact GELU: x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2.
struct Gelu {
  template <typename A>
  static A forward(A x) noexcept {
    return A(0.5) * x * std::erfc(-x * static_cast<A>(std::numbers::sqrt2 / 2));
  }
  // Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
  template <typename A>
  static A derivative(A x) noexcept {
    const A cdf = A(0.5) * std::erfc(-x * static_cast<A>(std::numbers::sqrt2 / 2));
    const A pdf = static_cast<A>(0.39894228040143267794) * exp_acc(A(-0.5) * x * x);
    return cdf + x * pdf;
  }
};

// SiLU (swish): x sigmoid(x); derivative s (1 + x (1 - s)).
struct Silu {
  template <typename A>
  static A forward(A x) noexcept {
    return x * sigmoid(x);
  }
  template <typename A>
  static A derivative(A x) noexcept {
    const A s = sigmoid(x);
    return s * (A(1) + x * (A(1) - s));
  }
};

// tanh. f32: for |x| < 0.55 the Taylor series x - x^3/3 + 2x^5/15 - ... through
// x^17 (the first omitted term is below 1e-8 relative there); beyond, with
// e = exp(-2|x|) <= e^-1.1, (1 - e) / (1 + e) does not cancel. Both branches
// are computed on |x| and one selected, then the sign of x restored (so
// tanh(-0) = -0), so the loop vectorises. Within 1.6 ulp of the f64 tanh on a
// dense sweep of (1e-6, 12) (activation_test checks 2 ulp). f64: libm.
struct Tanh {
  template <typename A>
  static A forward(A x) noexcept {
    if constexpr (std::is_same_v<A, float>) {
      const float ax = std::fabs(x);
      const float x2 = x * x;
      float p = 6404582.0f / 10854718875.0f;
      p = p * x2 - 929569.0f / 638512875.0f;
      p = p * x2 + 21844.0f / 6081075.0f;
      p = p * x2 - 1382.0f / 155925.0f;
      p = p * x2 + 62.0f / 2835.0f;
      p = p * x2 - 17.0f / 315.0f;
      p = p * x2 + 2.0f / 15.0f;
      p = p * x2 - 1.0f / 3.0f;
      const float small = ax + ax * x2 * p;
      const float e = exp_f32(-2.0f * ax);
      const float large = (1.0f - e) / (1.0f + e);
      return std::copysign(ax < 0.55f ? small : large, x);  // NaN: ax < 0.55 is false, and large is NaN
    } else {
      return std::tanh(x);
    }
  }
  // From the output: 1 - y^2 = (1 - y)(1 + y).
  template <typename A>
  static A derivative_from_output(A y) noexcept {
    return (A(1) - y) * (A(1) + y);
  }
};

template <typename Act, typename T>
void forward_loop(const T* x, T* y, std::int64_t n) {
  parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) y[i] = store<T>(Act::forward(load(x[i])));
  });
}

template <typename Act, typename T>
void backward_loop(const T* dy, const T* x, T* dx, std::int64_t n) {
  parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) dx[i] = store<T>(load(dy[i]) * Act::derivative(load(x[i])));
  });
}

template <typename F>
void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::gelu_tanh: return f(GeluTanh{});
    case Activation::gelu: return f(Gelu{});
    case Activation::silu: return f(Silu{});
  }
}

// Rows per parallel chunk for the [rows, cols] kernels.
std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(cols, 1)); }

}  // namespace

void activation_forward(Activation act, DType dtype, const void* x, void* y, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "activation", [&] {
    with_activation(act, [&](auto a) {
      forward_loop<decltype(a)>(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), n);
    });
  });
}

void activation_backward(Activation act, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "activation_backward", [&] {
    with_activation(act, [&](auto a) {
      backward_loop<decltype(a)>(static_cast<const scalar_t*>(dy), static_cast<const scalar_t*>(x),
                                 static_cast<scalar_t*>(dx), n);
    });
  });
}

void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "tanh", [&] {
    forward_loop<Tanh>(static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), n);
  });
}

void tanh_backward(DType dtype, const void* dy, const void* y, void* dx, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "tanh_backward", [&] {
    const auto* pd = static_cast<const scalar_t*>(dy);
    const auto* py = static_cast<const scalar_t*>(y);
    auto* pdx = static_cast<scalar_t*>(dx);
    parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        pdx[i] = store<scalar_t>(load(pd[i]) * Tanh::derivative_from_output(load(py[i])));
      }
    });
  });
}

void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "swiglu", [&] {
    const auto* g = static_cast<const scalar_t*>(gate);
    const auto* u = static_cast<const scalar_t*>(up);
    auto* o = static_cast<scalar_t*>(out);
    parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) o[i] = store<scalar_t>(Silu::forward(load(g[i])) * load(u[i]));
    });
  });
}

void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                     std::int64_t n) {
  TRIDENT_DISPATCH_FLOAT(dtype, "swiglu_backward", [&] {
    using A = acc_t<scalar_t>;
    const auto* d = static_cast<const scalar_t*>(dy);
    const auto* g = static_cast<const scalar_t*>(gate);
    const auto* u = static_cast<const scalar_t*>(up);
    auto* dg = static_cast<scalar_t*>(dgate);
    auto* du = static_cast<scalar_t*>(dup);
    parallel_for(0, n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const A gv = load(g[i]), dv = load(d[i]);
        const A s = sigmoid(gv);
        dg[i] = store<scalar_t>(dv * load(u[i]) * (s * (A(1) + gv * (A(1) - s))));
        du[i] = store<scalar_t>(dv * gv * s);
      }
    });
  });
}

void bias_gelu_tanh_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t rows,
                            std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "bias_gelu_tanh", [&] {
    const auto* px = static_cast<const scalar_t*>(x);
    const auto* pb = static_cast<const scalar_t*>(bias);
    auto* py = static_cast<scalar_t*>(y);
    parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) {
        const scalar_t* xr = px + r * cols;
        scalar_t* yr = py + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = store<scalar_t>(GeluTanh::forward(load(xr[c]) + load(pb[c])));
      }
    });
  });
}

void bias_gelu_tanh_backward(DType dtype, const void* dy, const void* x, const void* bias, void* dx,
                             std::int64_t rows, std::int64_t cols) {
  TRIDENT_DISPATCH_FLOAT(dtype, "bias_gelu_tanh_backward", [&] {
    const auto* pd = static_cast<const scalar_t*>(dy);
    const auto* px = static_cast<const scalar_t*>(x);
    const auto* pb = static_cast<const scalar_t*>(bias);
    auto* pdx = static_cast<scalar_t*>(dx);
    parallel_for(0, rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t r = lo; r < hi; ++r) {
        const std::int64_t o = r * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
          pdx[o + c] = store<scalar_t>(load(pd[o + c]) * GeluTanh::derivative(load(px[o + c]) + load(pb[c])));
        }
      }
    });
  });
}

}  // namespace trident::kernels::cpu
