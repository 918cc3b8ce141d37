// The CUDA attention entry points (see attention.h): check what the kernels of attention.cu take, own the
// backward's Di workspace, and launch.
#include "trident/kernels/cuda/attention.h"

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/tensor.h"
#include "trident/kernels/cuda/attention_launch.h"
#include "trident/kernels/cuda/device.h"

namespace trident::kernels::cuda {

namespace {

void check_dims(const AttentionDims& d, std::string_view op) {
  TRIDENT_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxAttentionHeadDim,
                "CUDA {}: head_dim {} is not supported (the kernels take 1 to {})", op, d.head_dim,
                kMaxAttentionHeadDim);
  TRIDENT_CHECK(d.kv_heads >= 1 && d.heads % d.kv_heads == 0, "CUDA {}: heads {} must be a multiple of kv_heads {}", op,
                d.heads, d.kv_heads);
}

void check_key_mask(const AttentionDims& d, const void* key_mask, std::string_view op) {
  TRIDENT_CHECK(key_mask == nullptr || d.key_mask_dtype == DType::i64 || d.key_mask_dtype == DType::i32 ||
                    d.key_mask_dtype == DType::u8,
                "CUDA {}: key_mask dtype {} is not supported (i64, i32 or u8)", op, d.key_mask_dtype);
}

}  // namespace

void attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                       const void* mask, const void* key_mask, const std::int32_t* doc_starts, void* out, void* lse) {
  check_dims(dims, "attention");
  check_key_mask(dims, key_mask, "attention");
  launch_attention_forward(dtype, dims, q, k, v, mask, key_mask, doc_starts, out, lse);
}

void attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                        const void* mask, const void* key_mask, const std::int32_t* doc_starts, const void* out,
                        const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  check_dims(dims, "attention_backward");
  check_key_mask(dims, key_mask, "attention_backward");
  // Di = Σ_d dout·out per query row, [B, H, T] in the lse dtype; from the caching allocator, and freed
  // while the kernels may still run: the allocator hands the block out again only to work queued after
  // them on the same compute stream.
  const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor di = Tensor::empty({dims.batch, dims.heads, dims.q_len}, acc, Device::cuda(current_device()));
  launch_attention_backward(dtype, dims, q, k, v, mask, key_mask, doc_starts, out, lse, dout, dq, dk, dv,
                            di.raw_data());
}

void attention_merge(DType dtype, const AttentionMergeDims& dims, void* out, void* lse, const void* part_out,
                     const void* part_lse) {
  launch_attention_merge(dtype, dims, out, lse, part_out, part_lse);
}

}  // namespace trident::kernels::cuda
