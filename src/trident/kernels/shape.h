// The shape kernels' signatures, declared once for every backend: kernels/cpu/shape.h
// and kernels/cuda/shape.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/shape.h; the CUDA notes in kernels/cuda/shape.h). No include guard:
// it is included once per backend namespace, after the types it names.

// out = x permuted: out.shape[i] = in_shape[perm[i]].
void permute(std::size_t elem_size, const void* x, void* out, const Shape& in_shape,
             const std::vector<std::size_t>& perm);

// Views src as [outer, src_dim, inner] and dst as [outer, dst_dim, inner] and
// copies the block [:, src_start : src_start+len, :] to [:, dst_start : dst_start+len, :].
void copy_dim_block(std::size_t elem_size, const void* src, std::int64_t src_dim, std::int64_t src_start, void* dst,
                    std::int64_t dst_dim, std::int64_t dst_start, std::int64_t outer, std::int64_t inner,
                    std::int64_t len);
