// Op-table cases for attention: causal and not, grouped-query heads, a KV
// cache (S > T), an additive mask, odd sizes, sliding windows (smaller
// than, equal to and larger than T, window 1, with a cache, GQA) and key-padding
// masks (samples padded differently: none, the last 3 keys, keys in the middle,
// the first keys, every key — so some rows see no key at all; i64, i32 and u8;
// with and without causal, a cache, a window and an additive mask), and dropout
// on the probabilities (a fixed mask: the generator is fixed, so the f64
// gradient check differentiates one function; whole and as a shard of a larger
// batch and head count; across a 64-key tile), and packed documents (each query
// sees its own document only: documents of one token, two, several, across a
// 64-key tile; with GQA, a window, key padding and dropout), against the naive f64
// softmax(scale·QKᵀ + mask)·V of attention_reference.h.
#include <cmath>
#include <limits>

#include "attention_reference.h"
#include "op_table.h"
#include "trident/autograd/autograd.h"
#include "trident/ops/attention.h"

namespace trident::testing {
namespace {

namespace ag = trident::autograd;

// How the keys of one sample are padded (key_mask 0).
enum class Pad { kNone, kLast3, kMiddle, kFirst2, kAll };

struct Config {
  std::string name;
  std::int64_t B, T, S, H, Hkv, D;
  bool causal;
  double scale;    // 0: 1/sqrt(D)
  bool with_mask;  // random additive mask [T, S] with a few -inf entries
  std::int64_t window = 0;
  std::vector<Pad> pads = {};  // per sample (B entries): a key-padding mask [B, S]; empty: none
  DType key_mask_dtype = DType::i64;
  // Dropout on the probabilities (0: none), this call's place among the global samples and heads.
  double dropout = 0;
  std::int64_t batch_offset = 0, head_offset = 0, heads = 0;  // heads 0: H
  // Packed documents (AttentionOptions::document_starts): per sample, its documents' lengths (summing
  // to T); empty: none.
  std::vector<std::vector<std::int32_t>> documents = {};
  // q and k as chunks of a sequence of seq_len (context parallelism): at positions q_pos and k_pos (−1:
  // bottom-right alignment); the documents' lengths then cover the whole sequence, and the dropout's
  // index runs over its grid.
  std::int64_t q_pos = -1, k_pos = -1, seq_len = 0;
  // Block-sparse attention: a random layout [layout_heads, ⌈T/block⌉ + 1, ⌈T/block⌉ + 1] (diagonal set), this
  // call's heads from layout_head_offset; block 0: none.
  std::int64_t block = 0, layout_heads = 1, layout_head_offset = 0;
};

// c as block-sparse attention in blocks of `block`, over a layout of `heads` heads from `offset`.
Config sparse(Config c, std::int64_t block, std::int64_t heads = 1, std::int64_t offset = 0) {
  c.block = block;
  c.layout_heads = heads;
  c.layout_head_offset = offset;
  return c;
}

// c as the chunk pair of q at q_pos and k at k_pos of a sequence of seq_len.
Config positioned(Config c, std::int64_t q_pos, std::int64_t k_pos, std::int64_t seq_len) {
  c.q_pos = q_pos;
  c.k_pos = k_pos;
  c.seq_len = seq_len;
  return c;
}

// c with packed documents of the given lengths per sample.
Config with_documents(Config c, std::vector<std::vector<std::int32_t>> lengths) {
  c.documents = std::move(lengths);
  return c;
}

// Document starts [B, T] (i32) of documents with these lengths per sample (covering `length` tokens),
// taken at the T positions from `from`.
Tensor document_starts_of(const std::vector<std::vector<std::int32_t>>& lengths, std::int64_t T,
                          std::int64_t length = 0, std::int64_t from = 0) {
  if (length == 0) length = T;
  std::vector<std::int32_t> starts;
  for (const auto& sample : lengths) {
    std::vector<std::int32_t> all;
    std::int32_t at = 0;
    for (std::int32_t n : sample) {
      for (std::int32_t i = 0; i < n; ++i) all.push_back(at);
      at += n;
    }
    TRIDENT_CHECK(at == length, "test documents of {} tokens in a sequence of {}", at, length);
    starts.insert(starts.end(), all.begin() + from, all.begin() + from + T);
  }
  return Tensor::from_vector<std::int32_t>(starts, {static_cast<std::int64_t>(lengths.size()), T});
}

const CounterRng kDropoutRng(77, "test/attention_dropout");

// c with dropout p, placed at batch_offset and head_offset among `heads` heads (0: c.H).
Config with_dropout(Config c, double p, std::int64_t batch_offset = 0, std::int64_t head_offset = 0,
                    std::int64_t heads = 0) {
  c.dropout = p;
  c.batch_offset = batch_offset;
  c.head_offset = head_offset;
  c.heads = heads;
  return c;
}

// The key-padding mask [B, S] of `pads` (1 = real key, 0 = padding) in `dtype`.
Tensor key_mask_of(const std::vector<Pad>& pads, std::int64_t S, DType dtype) {
  const auto B = static_cast<std::int64_t>(pads.size());
  std::vector<std::int64_t> m(static_cast<std::size_t>(B * S), 1);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      bool pad = false;
      switch (pads[static_cast<std::size_t>(b)]) {
        case Pad::kNone:
          break;
        case Pad::kLast3:
          pad = s >= S - 3;
          break;
        case Pad::kMiddle:
          pad = s >= S / 3 && s < S / 3 + 2;
          break;
        case Pad::kFirst2:
          pad = s < 2;
          break;
        case Pad::kAll:
          pad = true;
          break;
      }
      if (pad) m[static_cast<std::size_t>(b * S + s)] = 0;
    }
  return Tensor::from_vector<std::int64_t>(m, {B, S}).to(dtype);
}

// A random mask in [-1, 1) with roughly one entry in five hidden (-inf),
// keeping at least one visible key in every row.
Tensor random_mask(std::mt19937_64& gen, std::int64_t T, std::int64_t S) {
  Tensor m = random_tensor(gen, {T, S});
  auto x = m.span<double>();
  std::uniform_int_distribution<int> pick(0, 4);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t s = 0; s + 1 < S; ++s)  // the last key of a row stays visible
      if (pick(gen) == 0) x[static_cast<std::size_t>(t * S + s)] = -std::numeric_limits<double>::infinity();
  return m;
}

OpCase make_case(const Config& c) {
  OpCase oc;
  oc.name = c.name;
  oc.op = ops::Op::attention;
  oc.make_inputs = [c](std::mt19937_64& g) {
    std::vector<Variable> in{param(g, {c.B, c.T, c.H, c.D}), param(g, {c.B, c.S, c.Hkv, c.D}),
                             param(g, {c.B, c.S, c.Hkv, c.D})};
    if (c.with_mask) in.push_back(constant(random_mask(g, c.T, c.S)));
    if (!c.pads.empty()) in.push_back(constant(key_mask_of(c.pads, c.S, c.key_mask_dtype)));
    if (!c.documents.empty())
      in.push_back(constant(c.q_pos >= 0 ? document_starts_of(c.documents, c.T, c.seq_len, c.q_pos)
                                         : document_starts_of(c.documents, c.T)));
    if (c.block > 0) {  // a layout one block larger than needed (the call uses its corner), diagonal set
      const std::int64_t nb = (c.T + c.block - 1) / c.block + 1;
      Tensor layout = random_ids(g, {c.layout_heads, nb, nb}, 2, DType::u8);
      for (std::int64_t h = 0; h < c.layout_heads; ++h)
        for (std::int64_t r = 0; r < nb; ++r) layout.data<std::uint8_t>()[(h * nb + r) * nb + r] = 1;
      in.push_back(constant(layout));
    }
    return in;
  };
  const std::size_t key_mask_at = c.with_mask ? 4 : 3;  // index of the key mask among the inputs
  const std::size_t documents_at = key_mask_at + (c.pads.empty() ? 0 : 1);
  const std::size_t layout_at = documents_at + (c.documents.empty() ? 0 : 1);
  oc.forward = [c, key_mask_at, documents_at, layout_at](const std::vector<Variable>& in) {
    ops::AttentionOptions o;
    o.causal = c.causal;
    o.scale = c.scale;
    o.window = c.window;
    if (c.with_mask) o.mask = in[3].data();
    if (!c.pads.empty()) o.key_mask = in[key_mask_at].data();
    if (!c.documents.empty()) o.document_starts = in[documents_at].data();
    o.query_position = c.q_pos;
    o.key_position = c.k_pos;
    o.dropout = {c.dropout, kDropoutRng, c.batch_offset, c.head_offset, c.heads, c.seq_len};
    if (c.block > 0) {
      o.block_layout = in[layout_at].data();
      o.block = c.block;
      o.layout_head_offset = c.layout_head_offset;
    }
    return ag::attention(in[0], in[1], in[2], o);
  };
  oc.reference = [c, key_mask_at, documents_at, layout_at](const std::vector<Tensor>& in) {
    NaiveAttention n{c.B, c.T, c.S, c.H, c.Hkv, c.D, c.causal,
                     c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D)), {}, c.window};
    if (c.with_mask) n.mask = values(in[3]);
    if (!c.pads.empty()) n.key_mask = in[key_mask_at].to(DType::i64).to_vector<std::int64_t>();
    if (!c.documents.empty()) n.doc_starts = in[documents_at].to(DType::i64).to_vector<std::int64_t>();
    if (c.q_pos >= 0) {
      n.q_pos = c.q_pos;
      n.k_pos = c.k_pos;
    }
    if (c.block > 0) {
      const Tensor& l = in[layout_at];
      n.layout = l.to_vector<std::uint8_t>();
      n.layout_heads = l.size(0);
      n.layout_rows = l.size(1);
      n.layout_cols = l.size(2);
      n.block = c.block;
      n.layout_head_offset = c.layout_head_offset;
    }
    if (c.dropout > 0)
      n.keep = dropout_keep(c.B, c.H, c.T, c.S, c.dropout, kDropoutRng, c.batch_offset, c.head_offset,
                            c.heads > 0 ? c.heads : c.H, c.seq_len, std::max<std::int64_t>(c.q_pos, 0),
                            std::max<std::int64_t>(c.k_pos, 0));
    return tensor_from(n.forward(values(in[0]), values(in[1]), values(in[2])), in[0].shape());
  };
  oc.dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::bf16, 1e-2}};
  if (!c.pads.empty()) oc.dtypes.emplace_back(DType::f16, 5e-3);
  return oc;
}

// attention_merge: accumulators out [B, T, H, D], lse [B, H, T] and a part [B, P, H, D], [B, H, P] at
// row_begin, with −inf in both lse (rows that saw no key yet, parts that see none, and rows where both are
// −inf and stay); the output is out and e^lse after the merge, flattened and concatenated.
OpCase merge_case(std::string name, std::int64_t B, std::int64_t T, std::int64_t P, std::int64_t row_begin,
                  std::int64_t H, std::int64_t D) {
  OpCase c;
  c.name = std::move(name);
  c.op = ops::Op::attention_merge;
  c.gradcheck = false;
  c.make_inputs = [=](std::mt19937_64& g) {
    Tensor lse = random_tensor(g, {B, H, T}, -2.0, 3.0), part_lse = random_tensor(g, {B, H, P}, -2.0, 3.0);
    auto* l = lse.data<double>();
    auto* pl = part_lse.data<double>();
    const double inf = std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < B * H * T; i += 3) l[i] = -inf;
    for (std::int64_t i = 0; i < B * H * P; i += 2) pl[i] = -inf;
    return std::vector<Variable>{constant(random_tensor(g, {B, T, H, D})), constant(lse),
                                 constant(random_tensor(g, {B, P, H, D})), constant(part_lse)};
  };
  c.forward = [row_begin](const std::vector<Variable>& in) {
    const DType acc = in[2].dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor out = in[0].data().to(acc).clone(), lse = in[1].data().to(acc).clone();
    ops::attention_merge(out, lse, in[2].data(), in[3].data().to(acc), row_begin);
    std::vector<double> flat = values(out);
    for (double l : values(lse)) flat.push_back(std::exp(l));  // −inf as 0, so the relative error is defined
    return Variable(tensor_from(flat, {static_cast<std::int64_t>(flat.size())}).to(acc), false);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> out = values(in[0]), lse = values(in[1]);
    const std::vector<double> part = values(in[2]), plse = values(in[3]);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < P; ++t) {
          double& l = lse[static_cast<std::size_t>((b * H + h) * T + row_begin + t)];
          const double pl = plse[static_cast<std::size_t>((b * H + h) * P + t)];
          if (l == -std::numeric_limits<double>::infinity() && pl == l) continue;
          const double m = std::max(l, pl), a = std::exp(l - m), w = std::exp(pl - m);
          for (std::int64_t d = 0; d < D; ++d) {
            double& o = out[static_cast<std::size_t>(((b * T + row_begin + t) * H + h) * D + d)];
            o = (a * o + w * part[static_cast<std::size_t>(((b * P + t) * H + h) * D + d)]) / (a + w);
          }
          l = m + std::log(a + w);
        }
    for (double l : lse) out.push_back(std::exp(l));
    return tensor_from(out, {static_cast<std::int64_t>(out.size())});
  };
  c.dtypes = {{DType::f64, 1e-14}, {DType::f32, 1e-6}, {DType::bf16, 1e-2}};
  return c;
}

std::vector<OpCase> make_attention_cases() {
  const std::vector<Config> configs = {
      {"attention_causal", 2, 5, 5, 2, 2, 4, true, 0, false},
      {"attention_noncausal_odd", 1, 5, 7, 2, 2, 3, false, 0, false},
      {"attention_gqa_h4_kv2", 1, 6, 6, 4, 2, 4, true, 0, false},
      {"attention_kv_cache_s_gt_t", 2, 3, 7, 2, 1, 4, true, 0, false},
      {"attention_mask_scale", 1, 5, 7, 2, 2, 5, false, 0.3, true},
      {"attention_mask_causal_gqa", 1, 7, 7, 4, 2, 6, true, 0, true},
      {"attention_window_lt_t", 2, 9, 9, 2, 2, 4, true, 0, false, 3},
      {"attention_window_eq_t", 1, 6, 6, 2, 2, 4, true, 0, false, 6},
      {"attention_window_gt_t", 1, 5, 5, 2, 1, 4, true, 0.4, false, 8},
      {"attention_window_1", 1, 5, 5, 2, 2, 3, true, 0, false, 1},
      {"attention_window_kv_cache", 2, 3, 8, 2, 1, 4, true, 0, false, 4},
      {"attention_window_gqa_mask", 1, 8, 8, 4, 2, 5, true, 0, true, 3},
      // Key padding (BERT's attention_mask). Sample 0 fully real, then the last 3 keys, two keys in the
      // middle, the first two keys (under causal: the first rows see no key) or every key padded.
      {"attention_key_mask_noncausal",
       4,
       6,
       6,
       2,
       2,
       4,
       false,
       0,
       false,
       0,
       {Pad::kNone, Pad::kLast3, Pad::kMiddle, Pad::kAll}},
      {"attention_key_mask_causal",
       4,
       7,
       7,
       2,
       1,
       4,
       true,
       0,
       false,
       0,
       {Pad::kNone, Pad::kLast3, Pad::kMiddle, Pad::kFirst2},
       DType::i32},
      {"attention_key_mask_kv_cache_causal",
       4,
       3,
       8,
       2,
       1,
       4,
       true,
       0,
       false,
       0,
       {Pad::kNone, Pad::kLast3, Pad::kMiddle, Pad::kAll},
       DType::u8},
      {"attention_key_mask_kv_cache_noncausal",
       3,
       3,
       8,
       2,
       2,
       4,
       false,
       0,
       false,
       0,
       {Pad::kLast3, Pad::kNone, Pad::kMiddle}},
      {"attention_key_mask_additive_mask_scale",
       3,
       5,
       7,
       2,
       2,
       5,
       false,
       0.3,
       true,
       0,
       {Pad::kMiddle, Pad::kLast3, Pad::kNone},
       DType::u8},
      {"attention_key_mask_window_gqa_mask",
       3,
       8,
       8,
       4,
       2,
       5,
       true,
       0,
       true,
       3,
       {Pad::kFirst2, Pad::kMiddle, Pad::kLast3},
       DType::i32},
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) cases.push_back(make_case(c));
  // Dropout on the probabilities: causal with GQA; BERT-like (not causal, key padding) as the shard of
  // samples 5..7 and heads 2..3 of 6; a sliding window with an additive mask and a KV cache (T < S); and
  // 66 keys (two key tiles, rows not a multiple of 4 keys long).
  const std::vector<Config> dropped = {
      with_dropout({"attention_dropout_causal_gqa", 2, 6, 6, 4, 2, 4, true, 0, false}, 0.3),
      with_dropout({"attention_dropout_key_mask_shard", 3, 7, 7, 2, 2, 4, false, 0, false, 0,
                    {Pad::kLast3, Pad::kNone, Pad::kMiddle}},
                   0.25, 5, 2, 6),
      with_dropout({"attention_dropout_window_mask_cache", 2, 5, 8, 2, 1, 5, true, 0, true, 3}, 0.5, 1, 0, 0),
      with_dropout({"attention_dropout_two_key_tiles", 1, 66, 66, 1, 1, 2, true, 0, false}, 0.2),
  };
  for (const Config& c : dropped) {
    cases.push_back(make_case(c));
    cases.back().dtypes = {{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::bf16, 1e-2}, {DType::f16, 5e-3}};
  }
  // Packed documents (Megatron's reset_attention_mask): one document, then documents of 1, 2 and 4
  // tokens, every token its own document; with GQA, a sliding window and key padding; dropout; and
  // documents across the 64-key tile boundary (3 + 62 | 4, 70 keys).
  const std::vector<Config> packed = {
      with_documents({"attention_documents", 3, 7, 7, 2, 2, 4, true, 0, false}, {{7}, {1, 2, 4}, {1, 1, 1, 1, 1, 1, 1}}),
      with_documents({"attention_documents_gqa_window_mask", 2, 8, 8, 4, 2, 5, true, 0, true, 3}, {{3, 5}, {6, 2}}),
      with_documents({"attention_documents_key_mask", 3, 7, 7, 2, 1, 4, true, 0, false, 0,
                      {Pad::kNone, Pad::kMiddle, Pad::kLast3}},
                     {{2, 5}, {4, 3}, {7}}),
      with_documents(with_dropout({"attention_documents_dropout", 2, 6, 6, 2, 2, 4, true, 0, false}, 0.3),
                     {{2, 4}, {5, 1}}),
      with_documents({"attention_documents_across_tiles", 1, 70, 70, 1, 1, 2, true, 0, false}, {{3, 62, 5}}),
  };
  for (const Config& c : packed) cases.push_back(make_case(c));
  // q and k as chunks of a longer sequence (context parallelism's chunk pairs): the diagonal pair, a pair
  // wholly visible, a window across the pair with GQA, documents that begin before the key chunk and end
  // inside the query chunk (rows that see no key of this pair), and dropout on the whole sequence's grid.
  const std::vector<Config> chunks = {
      positioned({"attention_chunk_diagonal", 2, 6, 6, 2, 2, 4, true, 0, false}, 6, 6, 24),
      positioned({"attention_chunk_full", 2, 5, 6, 2, 1, 4, true, 0, false}, 12, 0, 24),
      positioned({"attention_chunk_window_gqa_mask", 1, 6, 7, 4, 2, 5, true, 0, true, 5}, 10, 4, 24),
      positioned(with_documents({"attention_chunk_documents", 2, 6, 7, 2, 1, 4, true, 0, false},
                                {{3, 9, 8}, {1, 10, 1, 8}}),
                 8, 2, 20),
      positioned(with_dropout({"attention_chunk_dropout", 2, 6, 6, 2, 2, 4, true, 0, false}, 0.3, 1, 0, 0), 12, 6, 24),
  };
  for (const Config& c : chunks) cases.push_back(make_case(c));
  // Block-sparse attention (DeepSpeed's sparse_attention): causal and not, blocks of 2 and 3 (a partial last
  // block: T = 7), one layout for every head or one per head (GQA, this call's heads 2 and 3 of 5 under
  // tensor parallelism), key padding, dropout.
  const std::vector<Config> sparse_cases = {
      sparse({"attention_sparse_causal", 2, 8, 8, 2, 2, 4, true, 0, false}, 2),
      sparse({"attention_sparse_bidirectional_partial_block", 2, 7, 7, 2, 1, 4, false, 0, false}, 3),
      sparse({"attention_sparse_per_head_gqa", 1, 9, 9, 2, 1, 5, true, 0, false}, 3, 5, 2),
      sparse({"attention_sparse_key_mask", 3, 7, 7, 2, 2, 4, false, 0, false, 0, {Pad::kNone, Pad::kMiddle, Pad::kAll}},
             2, 2),
      sparse(with_dropout({"attention_sparse_dropout", 2, 8, 8, 2, 2, 4, true, 0, false}, 0.3), 2),
  };
  for (const Config& c : sparse_cases) cases.push_back(make_case(c));
  cases.push_back(merge_case("attention_merge_middle_rows", 2, 7, 3, 2, 2, 5));
  cases.push_back(merge_case("attention_merge_all_rows", 1, 4, 4, 0, 3, 33));
  return cases;
}

TRIDENT_OP_CASES(make_attention_cases);

}  // namespace
}  // namespace trident::testing
