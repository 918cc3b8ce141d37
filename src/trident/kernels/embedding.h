// The embedding kernels' signatures, declared once for every backend: kernels/cpu/embedding.h
// and kernels/cuda/embedding.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/embedding.h; the CUDA notes in kernels/cuda/embedding.h). No include guard:
// it is included once per backend namespace, after the types it names.

// out[t, :] = weight[ids[t], :]
void embedding_forward(DType dtype, DType id_dtype, const void* weight, const void* ids, void* out,
                       std::int64_t num_ids, std::int64_t dim);

// dweight (grad_dtype) = or += the scatter-add of dout (dtype) rows by id (see above).
void embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                        void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim, bool accumulate);

// Index of the first id outside [0, vocab), or -1 when all are valid; its value in *bad_id.
std::int64_t find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                             std::int64_t* bad_id);
