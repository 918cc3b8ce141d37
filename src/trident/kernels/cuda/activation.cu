// Activation kernels: one functor per activation, run by detail::map
// (elementwise_map.cuh: grid-stride, 16-byte vectors when aligned; the fused
// bias is a [cols] input broadcast over rows). The formulas are the CPU
// kernel's (kernels/cpu/activation.cpp): GELU-tanh as x * sigmoid(2u), exact
// GELU through erfc, the same clamp at |x| = 40 in the GELU-tanh derivative.
// f32 uses the CUDA math library's expf/erfcf (within 2 ulp) where the CPU
// uses its own polynomial exp (about 1 ulp): results agree to a few ulp.
// tanh uses tanhf/tanh (within 2 ulp; the CPU's f32 tanh is its own
// polynomial/exp form, also within a few ulp); its backward takes the output y.
#include "trident/kernels/cuda/activation.h"

#include "trident/kernels/cuda/common.cuh"
#include "trident/kernels/cuda/elementwise_map.cuh"

namespace trident::kernels::cuda {

namespace {

template <typename A>
__device__ __forceinline__ A sigmoid(A x) {
  return A(1) / (A(1) + exp_acc(-x));
}

struct GeluTanh {
  template <typename A>
  __device__ static A forward(A x) {
    const A u = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
    return x * sigmoid(A(2) * u);
  }
  template <typename A>
  __device__ static A derivative(A x) {
    x = x < A(-40) ? A(-40) : (x > A(40) ? A(40) : x);  // NaN passes through, as std::min/max on the CPU
    const A x2 = x * x;
    const A u = A(0.79788456080286535588) * (x + A(0.044715) * x2 * x);
    const A du = A(0.79788456080286535588) * (A(1) + A(3) * A(0.044715) * x2);
    const A s = sigmoid(A(2) * u);
    return s + A(2) * x * s * (A(1) - s) * du;
  }
};

struct Gelu {
  template <typename A>
  __device__ static A forward(A x) {
    return A(0.5) * x * erfc_acc(-x * A(0.70710678118654752440));
  }
  template <typename A>
  __device__ static A derivative(A x) {
    const A cdf = A(0.5) * erfc_acc(-x * A(0.70710678118654752440));
    const A pdf = A(0.39894228040143267794) * exp_acc(A(-0.5) * x * x);
    return cdf + x * pdf;
  }
};

struct Silu {
  template <typename A>
  __device__ static A forward(A x) {
    return x * sigmoid(x);
  }
  template <typename A>
  __device__ static A derivative(A x) {
    const A s = sigmoid(x);
    return s * (A(1) + x * (A(1) - s));
  }
};

struct Tanh {
  template <typename A>
  __device__ static A forward(A x) {
    if constexpr (std::is_same_v<A, float>) {
      return tanhf(x);
    } else {
      return tanh(x);
    }
  }
};

// x = {x}
template <typename Act, typename A>
struct Forward {
  __device__ void operator()(const A* x, A* y) const { y[0] = Act::forward(x[0]); }
};
// x = {dy, x}
template <typename Act, typename A>
struct Backward {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * Act::derivative(x[1]); }
};
// x = {dy, y}: dx = dy (1 - y)(1 + y)
template <typename A>
struct TanhBackward {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * ((A(1) - x[1]) * (A(1) + x[1])); }
};
// x = {gate, up}
template <typename A>
struct SwigluForward {
  __device__ void operator()(const A* x, A* y) const { y[0] = Silu::forward(x[0]) * x[1]; }
};
// x = {dy, gate, up}; y = {dgate, dup}
template <typename A>
struct SwigluBackward {
  __device__ void operator()(const A* x, A* y) const {
    const A dv = x[0], gv = x[1];
    const A s = sigmoid(gv);
    y[0] = dv * x[2] * (s * (A(1) + gv * (A(1) - s)));
    y[1] = dv * gv * s;
  }
};
// x = {x, bias}
template <typename A>
struct BiasGeluForward {
  __device__ void operator()(const A* x, A* y) const { y[0] = GeluTanh::forward(x[0] + x[1]); }
};
// x = {dy, x, bias}
template <typename A>
struct BiasGeluBackward {
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * GeluTanh::derivative(x[1] + x[2]); }
};

template <typename F>
void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::gelu_tanh: return f(GeluTanh{});
    case Activation::gelu: return f(Gelu{});
    case Activation::silu: return f(Silu{});
  }
}

}  // namespace

void activation_forward(Activation act, DType dtype, const void* x, void* y, std::int64_t n) {
  dispatch_floating(dtype, "activation", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 1, 1> args{{static_cast<const T*>(x)}, {static_cast<T*>(y)}};
    with_activation(act, [&](auto a) { detail::map("activation", Forward<decltype(a), Acc<T>>{}, args, n); });
  });
}

void activation_backward(Activation act, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n) {
  dispatch_floating(dtype, "activation_backward", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(dy), static_cast<const T*>(x)}, {static_cast<T*>(dx)}};
    with_activation(act, [&](auto a) {
      detail::map("activation_backward", Backward<decltype(a), Acc<T>>{}, args, n);
    });
  });
}

void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n) {
  dispatch_floating(dtype, "tanh", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 1, 1> args{{static_cast<const T*>(x)}, {static_cast<T*>(y)}};
    detail::map("tanh", Forward<Tanh, Acc<T>>{}, args, n);
  });
}

void tanh_backward(DType dtype, const void* dy, const void* y, void* dx, std::int64_t n) {
  dispatch_floating(dtype, "tanh_backward", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(dy), static_cast<const T*>(y)}, {static_cast<T*>(dx)}};
    detail::map("tanh_backward", TanhBackward<Acc<T>>{}, args, n);
  });
}

void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t n) {
  dispatch_floating(dtype, "swiglu", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(gate), static_cast<const T*>(up)},
                                        {static_cast<T*>(out)}};
    detail::map("swiglu", SwigluForward<Acc<T>>{}, args, n);
  });
}

void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                     std::int64_t n) {
  dispatch_floating(dtype, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 3, 2> args{
        {static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up)},
        {static_cast<T*>(dgate), static_cast<T*>(dup)}};
    detail::map("swiglu_backward", SwigluBackward<Acc<T>>{}, args, n);
  });
}

void bias_gelu_tanh_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t rows,
                            std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "bias_gelu_tanh", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 2, 1> args{{static_cast<const T*>(x), static_cast<const T*>(bias)},
                                        {static_cast<T*>(y)}};
    detail::map<T, 2, 1, 0b10u>("bias_gelu_tanh", BiasGeluForward<Acc<T>>{}, args, rows * cols, cols);
  });
}

void bias_gelu_tanh_backward(DType dtype, const void* dy, const void* x, const void* bias, void* dx,
                             std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_floating(dtype, "bias_gelu_tanh_backward", [&](auto tag) {
    using T = decltype(tag);
    const detail::MapArgs<T, 3, 1> args{
        {static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(bias)}, {static_cast<T*>(dx)}};
    detail::map<T, 3, 1, 0b100u>("bias_gelu_tanh_backward", BiasGeluBackward<Acc<T>>{}, args, rows * cols, cols);
  });
}

}  // namespace trident::kernels::cuda
