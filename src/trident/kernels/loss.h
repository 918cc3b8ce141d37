// The loss kernels' signatures, declared once for every backend: kernels/cpu/loss.h
// and kernels/cuda/loss.h include this file inside their namespace, and each
// backend defines the functions (the contract — shapes, numerics — is in
// kernels/cpu/loss.h; the CUDA notes in kernels/cuda/loss.h). No include guard:
// it is included once per backend namespace, after the types it names.

void cross_entropy_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* losses,
                           void* lse, std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index);

// lse and grad_losses are [rows] in acc_t of `dtype`.
void cross_entropy_backward(DType dtype, DType target_dtype, const void* logits, const void* targets, const void* lse,
                            const void* grad_losses, void* dlogits, std::int64_t rows, std::int64_t vocab,
                            std::int64_t ignore_index);

// Vocabulary-parallel cross-entropy (parallel/tensor/cross_entropy.h): one
// tensor-parallel rank's rows. logits [rows, cols] hold the global vocabulary
// ids [vocab_begin, vocab_begin + cols), of which the first `valid` are real and
// the rest padding (never read, zero gradient). Rows whose target is
// ignore_index are skipped. All per-row values are acc_t of `dtype`.
//
// Forward, one pass per row exactly like cross_entropy_forward's:
//   row_max[r]        = max over the valid columns (-inf when valid = 0; 0 for an ignored row),
//   target_logit[r]   = z[r, target − vocab_begin] if this slice owns the target, else 0,
//   sum_exp[r]        = Σ_valid exp(z − row_max[r]) (0 for an ignored row).
// The group's maximum M is not known yet; vocab_parallel_rebase_sums turns the
// sums into Σ exp(z − M) = sum_exp · exp(row_max − M) once it is, so the logits
// are read once whatever the group size.
void vocab_parallel_forward(DType dtype, DType target_dtype, const void* logits, const void* targets, void* row_max,
                            void* target_logit, void* sum_exp, std::int64_t rows, std::int64_t cols,
                            std::int64_t valid, std::int64_t vocab_begin, std::int64_t ignore_index);

// sum_exp[r] *= exp(row_max[r] − group_max[r]), in place; acc is f32 or f64.
void vocab_parallel_rebase_sums(DType acc, void* sum_exp, const void* row_max, const void* group_max,
                                std::int64_t rows);

// Writes (does not add into) dlogits [rows, cols] in the logits' dtype:
//   (exp(z − group_max)/group_sum − [j == target − vocab_begin]) · scale on valid columns,
//   0 on padding columns and on ignored rows, rounded once.
void vocab_parallel_backward(DType dtype, DType target_dtype, const void* logits, const void* targets,
                             const void* group_max, const void* group_sum, double scale, void* dlogits,
                             std::int64_t rows, std::int64_t cols, std::int64_t valid, std::int64_t vocab_begin,
                             std::int64_t ignore_index);

// Rows whose target is not ignore_index. If a target is neither ignore_index nor
// in [0, vocab), returns -1 and sets *bad_row / *bad_target to the first such row.
std::int64_t count_targets(DType target_dtype, const void* targets, std::int64_t rows, std::int64_t vocab,
                           std::int64_t ignore_index, std::int64_t* bad_row, std::int64_t* bad_target);
