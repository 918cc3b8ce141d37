// The activation kernels' signatures, declared once for every backend: kernels/cpu/activation.h
// and kernels/cuda/activation.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/activation.h; the CUDA notes in kernels/cuda/activation.h). No include guard:
// it is included once per backend namespace, after the types it names.

// y = act(x)
void activation_forward(Activation act, DType dtype, const void* x, void* y, std::int64_t n);
// dx = dy * act'(x)
void activation_backward(Activation act, DType dtype, const void* dy, const void* x, void* dx, std::int64_t n);

// y = tanh(x)
void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n);
// dx = dy * (1 - y^2), from the forward's output y
void tanh_backward(DType dtype, const void* dy, const void* y, void* dx, std::int64_t n);

// out = silu(gate) * up
void swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t n);
// dgate = dy * up * silu'(gate), dup = dy * silu(gate)
void swiglu_backward(DType dtype, const void* dy, const void* gate, const void* up, void* dgate, void* dup,
                     std::int64_t n);

// y[r, c] = gelu_tanh(x[r, c] + bias[c])
void bias_gelu_tanh_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t rows,
                            std::int64_t cols);
// dx[r, c] = dy[r, c] * gelu_tanh'(x[r, c] + bias[c])   (the bias gradient is the column sum of dx)
void bias_gelu_tanh_backward(DType dtype, const void* dy, const void* x, const void* bias, void* dx,
                             std::int64_t rows, std::int64_t cols);
