// The rope kernels' signatures, declared once for every backend: kernels/cpu/rope.h
// and kernels/cuda/rope.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/rope.h; the CUDA notes in kernels/cuda/rope.h). No include guard:
// it is included once per backend namespace, after the types it names.

void rope(DType dtype, const void* x, void* out, const std::int64_t* positions, std::int64_t batch, std::int64_t seq,
          std::int64_t heads, std::int64_t head_dim, const RopeFrequencies& freq, bool inverse);
