// The attention kernels' signatures, declared once for every backend: kernels/cpu/attention.h
// and kernels/cuda/attention.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/attention.h; the CUDA notes in kernels/cuda/attention.h). No include guard:
// it is included once per backend namespace, after the types it names.

// out and lse from q, k, v (mask, key_mask and doc_starts may be null). Overwrites out and lse.
void attention_forward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                       const void* mask, const void* key_mask, const std::int32_t* doc_starts, void* out, void* lse);

// dq, dk, dv (dtypes of q, k, v; overwritten) from the forward's out and lse and
// the output gradient dout.
void attention_backward(DType dtype, const AttentionDims& dims, const void* q, const void* k, const void* v,
                        const void* mask, const void* key_mask, const std::int32_t* doc_starts, const void* out,
                        const void* lse, const void* dout, void* dq, void* dk, void* dv);

// Merges a partial attention into accumulators (AttentionMergeDims in kernels/cpu/attention.h). dtype is
// part_out's; out, lse and part_lse have its acc type.
void attention_merge(DType dtype, const AttentionMergeDims& dims, void* out, void* lse, const void* part_out,
                     const void* part_lse);
