#include "trident/ops/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "trident/kernels/cpu/attention.h"
#include "trident/ops/dispatch.h"

namespace trident::ops {

namespace {

DType lse_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

const void* raw_or_null(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}

const std::int32_t* document_starts(const AttentionOptions& o) {
  return o.document_starts.defined() ? o.document_starts.data<std::int32_t>() : nullptr;
}

// Each row of starts [B, T] a run of documents, query t at position q0 + t: each entry opens one (its own
// position) or continues the entry before it; the first entry is 0, or with positioned chunks (q0 > 0
// possible) any start up to q0 (a document begun before the chunk).
void check_document_rows(std::string_view op, const Tensor& starts, bool positioned, std::int64_t q0) {
  const std::int64_t B = starts.size(0), T = starts.size(1);
  const Tensor host = starts.to(Device::cpu());
  const auto* s = host.data<std::int32_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int32_t v = s[b * T + t];
      const bool ok = t == 0 ? (positioned ? v >= 0 && v <= q0 : v == 0) : v == q0 + t || v == s[b * T + t - 1];
      TRIDENT_CHECK(ok,
                    "{}: document_starts[{}, {}] = {} is not a document start (expected {}: each entry is its own "
                    "position, opening a document, or the entry before it)",
                    op, b, t, v,
                    t == 0 ? (positioned ? fmt::format("0 to {}", q0) : std::string("0"))
                           : fmt::format("{} or {}", q0 + t, s[b * T + t - 1]));
    }
  }
}

// Document starts [B, T] (AttentionOptions::document_starts): i32 on q's device, causal self-attention, and
// each row a run of documents: 0 first, then each entry either its own index (a document's first token)
// or the entry before it.
void check_document_starts(std::string_view op, const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  const Tensor& starts = options.document_starts;
  const std::int64_t B = q.size(0), T = q.size(1);
  TRIDENT_CHECK(starts.rank() == 2 && starts.size(0) == B && starts.size(1) == T,
                "{}: document_starts {} must have shape [B, T] = [{}, {}] (q {})", op, starts.shape(), B, T, q.shape());
  TRIDENT_CHECK(starts.dtype() == DType::i32, "{}: document_starts dtype {} (shape {}) must be i32", op,
                starts.dtype(), starts.shape());
  check_same_device(q, starts, op);
  const bool positioned = options.query_position >= 0;
  TRIDENT_CHECK(options.causal && (positioned || k.size(1) == T),
                "{}: document_starts need causal self-attention over the sample (causal = true, and S = T unless q and "
                "k are positioned), got causal = {} and S = {}, T = {}",
                op, options.causal, k.size(1), T);
  check_document_rows(op, starts, positioned, positioned ? options.query_position : 0);
}

// A block-sparse layout (AttentionOptions::block_layout): u8 [Hl, rows, cols] on q's device, covering the
// self-attention's T = S tokens in blocks, with the layer's heads; none of the options it does not combine with.
void check_block_layout(std::string_view op, const Tensor& q, const Tensor& k, const AttentionOptions& o) {
  const Tensor& l = o.block_layout;
  const std::int64_t T = q.size(1), H = q.size(2);
  TRIDENT_CHECK(l.rank() == 3 && l.dtype() == DType::u8, "{}: block_layout {} ({}) must be u8 [heads, rows, cols]", op,
                l.shape(), l.dtype());
  check_same_device(q, l, op);
  TRIDENT_CHECK(o.block >= 1, "{}: block {} must be positive with a block_layout", op, o.block);
  TRIDENT_CHECK(k.size(1) == T && o.query_position < 0,
                "{}: block-sparse attention is self-attention (S = T, unpositioned), got T = {}, S = {}", op, T,
                k.size(1));
  TRIDENT_CHECK(T <= l.size(1) * o.block && T <= l.size(2) * o.block,
                "{}: {} tokens exceed the block_layout {} of {}-token blocks", op, T, l.shape(), o.block);
  TRIDENT_CHECK(l.size(0) == 1 || (o.layout_head_offset >= 0 && o.layout_head_offset + H <= l.size(0)),
                "{}: heads [{}, {}) are not within the block_layout's {} heads", op, o.layout_head_offset,
                o.layout_head_offset + H, l.size(0));
  TRIDENT_CHECK(!o.mask.defined() && o.window == 0 && !o.document_starts.defined(),
                "{}: block-sparse attention takes no additive mask, window or document starts", op);
}

// Validates q, k, v and the options; returns the kernel's dimensions.
kernels::cpu::AttentionDims check_attention(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionOptions& options) {
  check_defined(q, op, "q");
  check_defined(k, op, "k");
  check_defined(v, op, "v");
  TRIDENT_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4,
                "{}: expected q [B, T, H, D] and k, v [B, S, Hkv, D], got q {}, k {}, v {}", op, q.shape(), k.shape(),
                v.shape());
  check_floating(q, op, "q");
  check_same_dtype(q, k, op);
  check_same_dtype(q, v, op);
  check_same_device(q, k, op);
  check_same_device(q, v, op);
  TRIDENT_CHECK(k.shape() == v.shape(), "{}: k {} and v {} must have the same shape [B, S, Hkv, D]", op, k.shape(),
                v.shape());
  TRIDENT_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3),
                "{}: batch and head dim of q {} and k {} differ (expected q [B, T, H, D], k [B, S, Hkv, D])", op,
                q.shape(), k.shape());
  TRIDENT_CHECK(q.size(3) > 0, "{}: head dim of q {} must be positive", op, q.shape());
  TRIDENT_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0,
                "{}: q heads H = {} must be a multiple of kv heads Hkv = {} (q {}, k {})", op, q.size(2), k.size(2),
                q.shape(), k.shape());
  const Tensor& mask = options.mask;
  if (mask.defined()) {
    TRIDENT_CHECK(mask.rank() == 2 && mask.size(0) == q.size(1) && mask.size(1) == k.size(1),
                  "{}: mask {} must have shape [T, S] = [{}, {}] (q {}, k {})", op, mask.shape(), q.size(1), k.size(1),
                  q.shape(), k.shape());
    TRIDENT_CHECK(mask.dtype() == q.dtype(), "{}: mask dtype {} (shape {}) must match q's dtype {}", op, mask.dtype(),
                  mask.shape(), q.dtype());
    check_same_device(q, mask, op);
  }
  const Tensor& key_mask = options.key_mask;
  if (key_mask.defined()) {
    TRIDENT_CHECK(key_mask.rank() == 2 && key_mask.size(0) == q.size(0) && key_mask.size(1) == k.size(1),
                  "{}: key_mask {} must have shape [B, S] = [{}, {}] (q {}, k {})", op, key_mask.shape(), q.size(0),
                  k.size(1), q.shape(), k.shape());
    TRIDENT_CHECK(key_mask.dtype() == DType::i64 || key_mask.dtype() == DType::i32 || key_mask.dtype() == DType::u8,
                  "{}: key_mask dtype {} (shape {}) must be i64, i32 or u8 (nonzero = real key, 0 = padding)", op,
                  key_mask.dtype(), key_mask.shape());
    check_same_device(q, key_mask, op);
  }
  TRIDENT_CHECK((options.query_position < 0) == (options.key_position < 0) &&
                    options.query_position >= -1 && options.key_position >= -1,
                "{}: query_position {} and key_position {} must both be positions (>= 0) or both -1 (bottom-right "
                "alignment)",
                op, options.query_position, options.key_position);
  if (options.document_starts.defined()) check_document_starts(op, q, k, options);
  if (options.block_layout.defined()) check_block_layout(op, q, k, options);
  TRIDENT_CHECK(std::isfinite(options.scale), "{}: scale {} must be finite", op, options.scale);
  TRIDENT_CHECK(options.window >= 0, "{}: window {} must be >= 0 (0 = unlimited, n = the n most recent keys)", op,
                options.window);
  TRIDENT_CHECK(options.window == 0 || options.causal,
                "{}: window {} needs causal = true (a sliding window is defined for causal attention only)", op,
                options.window);
  const AttentionDropout& drop = options.dropout;
  TRIDENT_CHECK(std::isfinite(drop.p) && drop.p >= 0.0 && drop.p < 1.0,
                "{}: dropout p must be in [0, 1), got {} (q {})", op, drop.p, q.shape());
  const std::int64_t heads = drop.heads > 0 ? drop.heads : q.size(2);
  TRIDENT_CHECK(drop.batch_offset >= 0 && drop.head_offset >= 0 && drop.head_offset + q.size(2) <= heads,
                "{}: dropout batch_offset {} and head_offset {} must be >= 0 with the {} heads of q {} within the "
                "layer's {} heads",
                op, drop.batch_offset, drop.head_offset, q.size(2), q.shape(), heads);
  kernels::cpu::AttentionDims dims;
  dims.batch = q.size(0);
  dims.q_len = q.size(1);
  dims.heads = q.size(2);
  dims.head_dim = q.size(3);
  dims.kv_len = k.size(1);
  dims.kv_heads = k.size(2);
  dims.causal = options.causal;
  dims.window = options.window;
  if (key_mask.defined()) dims.key_mask_dtype = key_mask.dtype();
  dims.scale = options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (options.block_layout.defined()) {
    const Tensor& l = options.block_layout;
    dims.layout = {l.data<std::uint8_t>(), l.size(0), l.size(1), l.size(2), options.block, options.layout_head_offset};
  }
  if (options.query_position >= 0) {
    dims.positioned = true;
    dims.q_pos = options.query_position;
    dims.k_pos = options.key_position;
  }
  TRIDENT_CHECK(drop.seq_len == 0 || (dims.positioned && dims.q_pos + dims.q_len <= drop.seq_len &&
                                      dims.k_pos + dims.kv_len <= drop.seq_len),
                "{}: dropout seq_len {} needs q and k positioned within it (query_position {} + T {}, key_position {} + "
                "S {})",
                op, drop.seq_len, options.query_position, dims.q_len, options.key_position, dims.kv_len);
  if (drop.p > 0) {
    dims.dropout = {drop.p, drop.rng.seed(), drop.rng.stream(), drop.batch_offset, drop.head_offset, heads};
    if (drop.seq_len > 0) {
      dims.dropout.q_offset = dims.q_pos;
      dims.dropout.k_offset = dims.k_pos;
      dims.dropout.q_grid = dims.dropout.k_grid = drop.seq_len;
    }
  }
  return dims;
}

}  // namespace

std::pair<Tensor, Tensor> attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  const auto dims = check_attention("attention", q, k, v, options);
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({dims.batch, dims.heads, dims.q_len}, lse_dtype(q.dtype()), q.device());
  TRIDENT_KERNEL(q.device(), attention_forward, q.dtype(), dims, q.raw_data(), k.raw_data(), v.raw_data(),
                 raw_or_null(options.mask), raw_or_null(options.key_mask), document_starts(options), out.raw_data(),
                 lse.raw_data());
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                      const Tensor& out, const Tensor& lse, const Tensor& dout,
                                                      const AttentionOptions& options) {
  constexpr std::string_view op = "attention_backward";
  const auto dims = check_attention(op, q, k, v, options);
  check_defined(out, op, "out");
  check_defined(lse, op, "lse");
  check_defined(dout, op, "dout");
  TRIDENT_CHECK(out.shape() == q.shape() && dout.shape() == q.shape(),
                "{}: out {} and dout {} must have q's shape {}", op, out.shape(), dout.shape(), q.shape());
  check_same_dtype(q, out, op);
  check_same_dtype(q, dout, op);
  TRIDENT_CHECK(lse.shape() == Shape({dims.batch, dims.heads, dims.q_len}),
                "{}: lse {} must have shape [B, H, T] = [{}, {}, {}]", op, lse.shape(), dims.batch, dims.heads,
                dims.q_len);
  check_dtype(lse, lse_dtype(q.dtype()), op, "lse");
  check_same_device(q, out, op);
  check_same_device(q, lse, op);
  check_same_device(q, dout, op);
  Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  Tensor dv = Tensor::empty(v.shape(), v.dtype(), v.device());
  TRIDENT_KERNEL(q.device(), attention_backward, q.dtype(), dims, q.raw_data(), k.raw_data(), v.raw_data(),
                 raw_or_null(options.mask), raw_or_null(options.key_mask), document_starts(options), out.raw_data(),
                 lse.raw_data(), dout.raw_data(), dq.raw_data(), dk.raw_data(), dv.raw_data());
  return {dq, dk, dv};
}

void check_document_starts(const Tensor& starts, std::string_view op) {
  check_defined(starts, op, "document_starts");
  TRIDENT_CHECK(starts.rank() == 2 && starts.dtype() == DType::i32,
                "{}: document_starts {} ({}) must be i32 [B, T]", op, starts.shape(), starts.dtype());
  check_document_rows(op, starts, false, 0);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                     std::int64_t row_begin) {
  constexpr std::string_view op = "attention_merge";
  check_defined(out, op, "out");
  check_defined(lse, op, "lse");
  check_defined(part_out, op, "part_out");
  check_defined(part_lse, op, "part_lse");
  TRIDENT_CHECK(part_out.rank() == 4 && out.rank() == 4,
                "{}: out {} and part_out {} must be [B, T, H, D] and [B, P, H, D]", op, out.shape(), part_out.shape());
  const std::int64_t B = out.size(0), T = out.size(1), H = out.size(2), D = out.size(3), P = part_out.size(1);
  TRIDENT_CHECK(part_out.size(0) == B && part_out.size(2) == H && part_out.size(3) == D,
                "{}: part_out {} must match out {} in B, H and D", op, part_out.shape(), out.shape());
  TRIDENT_CHECK(row_begin >= 0 && row_begin + P <= T,
                "{}: rows [{}, {}) of the part must lie within out's {} rows", op, row_begin, row_begin + P, T);
  TRIDENT_CHECK(lse.shape() == Shape({B, H, T}) && part_lse.shape() == Shape({B, H, P}),
                "{}: lse {} and part_lse {} must be [B, H, T] = [{}, {}, {}] and [B, H, P] = [{}, {}, {}]", op,
                lse.shape(), part_lse.shape(), B, H, T, B, H, P);
  const DType acc = lse_dtype(part_out.dtype());
  check_dtype(out, acc, op, "out");
  check_dtype(lse, acc, op, "lse");
  check_dtype(part_lse, acc, op, "part_lse");
  check_same_device(out, part_out, op);
  check_same_device(out, lse, op);
  check_same_device(out, part_lse, op);
  const kernels::cpu::AttentionMergeDims dims{B, T, P, row_begin, H, D};
  TRIDENT_KERNEL(out.device(), attention_merge, part_out.dtype(), dims, out.raw_data(), lse.raw_data(),
                 part_out.raw_data(), part_lse.raw_data());
}

}  // namespace trident::ops
