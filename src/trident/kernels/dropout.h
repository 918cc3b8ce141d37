// The dropout kernels' signatures, declared once for every backend: kernels/cpu/dropout.h
// and kernels/cuda/dropout.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/dropout.h; the CUDA notes in kernels/cuda/dropout.h). No include guard:
// it is included once per backend namespace, after the types it names.

// y may alias x.
void dropout(DType dtype, const void* x, void* y, const Shape& local, double p, const CounterRng& rng,
             const GlobalSlice& slice);
