#include "trident/parallel/context/attention.h"

#include <fmt/format.h>

#include <array>
#include <limits>
#include <memory>
#include <vector>

#include "trident/autograd/function.h"
#include "trident/autograd/functions/attention.h"
#include "trident/core/error.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/shape.h"

namespace trident::parallel::context {

namespace {

using autograd::Variable;
using Grads = std::vector<Tensor>;

DType acc_dtype(DType d) {
  return d == DType::f64 ? DType::f64 : DType::f32;
}

// What both algorithms share: the checked shapes, the whole-sequence options and the collectives' options.
struct Setup {
  ContextAttention cp;
  ops::AttentionOptions whole;  // the whole sequence's options (key_mask and document_starts whole)
  std::int64_t B = 0, L = 0, H = 0, Hkv = 0, D = 0;
  dist::CollectiveOptions collective;

  dist::Communicator& comm() const { return *cp.group.group; }
  int rank() const { return cp.layout.rank; }
  int size() const { return cp.layout.size; }
  std::int64_t seq_len() const { return cp.layout.seq_len; }
};

Setup make_setup(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionOptions& options,
                 const ContextAttention& cp) {
  const std::string where = cp.site.empty() ? std::string("context-parallel attention")
                                            : fmt::format("context-parallel attention in {}", cp.site);
  const ChunkLayout& layout = cp.layout;
  TRIDENT_CHECK(
      cp.group.size() == layout.size && cp.group.rank() == layout.rank && layout.seq_len % (2 * layout.size) == 0,
      "{}: the group (rank {} of {}) and the chunk layout (rank {} of {}, seq_len {}) disagree", where, cp.group.rank(),
      cp.group.size(), layout.rank, layout.size, layout.seq_len);
  TRIDENT_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4 && k.shape() == v.shape() &&
                    q.size(1) == layout.local_len() && k.size(1) == layout.local_len() && q.size(0) == k.size(0) &&
                    q.size(3) == k.size(3),
                "{}: q {}, k {} and v {} must be this rank's {} tokens ([B, {}, H, D] and [B, {}, Hkv, D])", where,
                q.shape(), k.shape(), v.shape(), layout.local_len(), layout.local_len(), layout.local_len());
  TRIDENT_CHECK(!options.mask.defined(), "{}: an additive attention mask is not supported under context parallelism",
                where);
  TRIDENT_CHECK(options.query_position < 0 && options.key_position < 0 && options.dropout.seq_len == 0,
                "{}: the positions are set by the chunk layout, not given", where);
  const auto whole_rows = [&](const Tensor& t, const char* name) {
    TRIDENT_CHECK(!t.defined() || (t.rank() == 2 && t.size(0) == q.size(0) && t.size(1) == layout.seq_len),
                  "{}: {} {} must cover the whole sequence: [B, seq_len] = [{}, {}]", where, name, t.shape(), q.size(0),
                  layout.seq_len);
  };
  whole_rows(options.key_mask, "key_mask");
  whole_rows(options.document_starts, "document_starts");
  if (options.document_starts.defined()) ops::check_document_starts(options.document_starts, where);
  Setup s{cp, options, q.size(0), layout.chunk(), q.size(2), k.size(2), q.size(3), {}};
  s.collective.context = where;
  // The dropout's index names the layer's heads; 0 (q's H) becomes explicit, as the all-to-all narrows q.
  if (s.whole.dropout.heads == 0) s.whole.dropout.heads = s.H;
  return s;
}

// Rows [h·L, (h + 1)·L) of a local tensor [B, 2L, ...]: chunk r (h = 0) or its mirror (h = 1).
Tensor half(const Tensor& x, int h, std::int64_t L) {
  return ops::slice(x, 1, h * L, (h + 1) * L);
}

// ---------------------------------------------------------------------------------------------------------
// Ring
// ---------------------------------------------------------------------------------------------------------

// Sends `out` to the next rank of the ring while receiving `in` from the previous one: an all-to-all with one
// nonzero count each way, which NCCL runs as one grouped send/recv (a plain send/recv ring would deadlock
// on first use there, dist/nccl_communicator.h) and MPI as one non-blocking exchange.
std::unique_ptr<dist::Work> shift(const Setup& s, const Tensor& out, Tensor& in) {
  const int c = s.size(), next = (s.rank() + 1) % c, prev = (s.rank() + c - 1) % c;
  std::vector<std::int64_t> send(static_cast<std::size_t>(c), 0), recv(static_cast<std::size_t>(c), 0);
  send[static_cast<std::size_t>(next)] = out.numel();
  recv[static_cast<std::size_t>(prev)] = in.numel();
  return s.comm().all_to_all(out.flatten(), send, in, recv, s.collective);
}

// K and V halves of a block, packed for one message: [4, B, L, Hkv, D] = k chunk, k mirror, v chunk, v mirror.
Tensor pack_kv(const Tensor& k, const Tensor& v, std::int64_t L) {
  std::vector<Tensor> parts;
  for (const Tensor* t : {&k, &v})
    for (int h = 0; h < 2; ++h) {
      Tensor x = half(*t, h, L);
      parts.push_back(x.view({1, x.size(0), x.size(1), x.size(2), x.size(3)}));
    }
  return ops::concat(parts, 0);
}
Tensor kv_part(const Tensor& packed, int i) {
  return packed.select0(i);
}

// The global position of the first token of rank j's half h.
std::int64_t position_of(const Setup& s, int j, int h) {
  return ChunkLayout{j, s.size(), s.seq_len()}.half_position(h);
}

// Whether some query of the half at q_pos sees some key of the half at k_pos (halves of L tokens, at
// multiples of L): causal hides every key after every query; a window hides keys every query's window ends
// after.
bool sees(const Setup& s, std::int64_t q_pos, std::int64_t k_pos) {
  if (!s.whole.causal) return true;
  if (k_pos > q_pos) return false;
  return s.whole.window == 0 || k_pos + s.L - 1 > q_pos - s.whole.window;
}

// The options of the pair (query half at q_pos, key half at k_pos): positioned, the key mask's columns of the
// key half, the document starts of the query half's rows.
ops::AttentionOptions pair_options(const Setup& s, const std::array<Tensor, 2>& q_starts, int qh, std::int64_t q_pos,
                                   std::int64_t k_pos) {
  ops::AttentionOptions o = s.whole;
  o.query_position = q_pos;
  o.key_position = k_pos;
  o.dropout.seq_len = s.seq_len();
  if (s.whole.key_mask.defined()) o.key_mask = ops::slice(s.whole.key_mask, 1, k_pos, k_pos + s.L);
  o.document_starts = q_starts[static_cast<std::size_t>(qh)];
  return o;
}

std::array<Tensor, 2> query_starts(const Setup& s) {
  if (!s.whole.document_starts.defined()) return {};
  std::array<Tensor, 2> out;
  for (int h = 0; h < 2; ++h) {
    const std::int64_t p = position_of(s, s.rank(), h);
    out[static_cast<std::size_t>(h)] = ops::slice(s.whole.document_starts, 1, p, p + s.L);
  }
  return out;
}

struct RingResult {
  Tensor out;                 // [B, 2L, H, D], q's dtype: the merged attention of both query halves
  std::array<Tensor, 2> lse;  // per query half, acc dtype
};

// The ring's steps: at step t the rank holds the K/V block of rank i − t (kv, packed) and sends it on while
// `pair(kv, qh, kh, q_pos, k_pos)` runs for each of its query halves that sees one of the block's key
// halves; `end_step()` runs after the pairs, before the next block is waited for.
template <typename Pair, typename EndStep>
void ring_steps(const Setup& s, Tensor kv, Pair&& pair, EndStep&& end_step) {
  const int c = s.size(), i = s.rank();
  for (int step = 0; step < c; ++step) {
    const int j = (i - step + c) % c;  // the block at hand
    Tensor kv_next;
    std::unique_ptr<dist::Work> moving;
    if (step + 1 < c) {
      kv_next = Tensor::empty(kv.shape(), kv.dtype(), kv.device());
      moving = shift(s, kv, kv_next);
    }
    for (int qh = 0; qh < 2; ++qh) {
      const std::int64_t q_pos = position_of(s, i, qh);
      for (int kh = 0; kh < 2; ++kh) {
        const std::int64_t k_pos = position_of(s, j, kh);
        if (sees(s, q_pos, k_pos)) pair(kv, qh, kh, q_pos, k_pos);
      }
    }
    end_step();
    if (moving) {
      moving->wait();
      kv = kv_next;
    }
  }
}

RingResult ring_forward(const Setup& s, const Tensor& q, const Tensor& k, const Tensor& v) {
  const DType acc = acc_dtype(q.dtype());
  const std::array<Tensor, 2> q_starts = query_starts(s);
  std::array<Tensor, 2> out_acc, lse_acc;
  for (std::size_t h = 0; h < 2; ++h) {
    out_acc[h] = Tensor::zeros({s.B, s.L, s.H, s.D}, acc, q.device());
    lse_acc[h] = Tensor::full({s.B, s.H, s.L}, -std::numeric_limits<double>::infinity(), acc, q.device());
  }
  ring_steps(
      s, pack_kv(k, v, s.L),
      [&](const Tensor& kv, int qh, int kh, std::int64_t q_pos, std::int64_t k_pos) {
        auto [o, l] = ops::attention(half(q, qh, s.L), kv_part(kv, kh), kv_part(kv, 2 + kh),
                                     pair_options(s, q_starts, qh, q_pos, k_pos));
        const auto at = static_cast<std::size_t>(qh);
        ops::attention_merge(out_acc[at], lse_acc[at], o, l, 0);
      },
      [] {});
  RingResult r;
  r.out = ops::concat({ops::cast(out_acc[0], q.dtype()), ops::cast(out_acc[1], q.dtype())}, 1);
  r.lse = lse_acc;
  return r;
}

Grads ring_backward(const Setup& s, const Tensor& q, const Tensor& k, const Tensor& v, const RingResult& fwd,
                    const Tensor& dout) {
  const DType acc = acc_dtype(q.dtype());
  const std::array<Tensor, 2> q_starts = query_starts(s);
  std::array<Tensor, 2> dq_acc;
  for (auto& t : dq_acc) t = Tensor::zeros({s.B, s.L, s.H, s.D}, acc, q.device());
  const std::array<Tensor, 2> out = {half(fwd.out, 0, s.L), half(fwd.out, 1, s.L)};
  const Tensor kv = pack_kv(k, v, s.L);
  // The dK/dV accumulator of the block at hand ([4, B, L, Hkv, D] as kv): it travels with the block, each
  // rank adding its queries' share, and reaches the block's owner after c shifts.
  Tensor dkv = Tensor::zeros(kv.shape(), acc, q.device());
  ring_steps(
      s, kv,
      [&](const Tensor& block, int qh, int kh, std::int64_t q_pos, std::int64_t k_pos) {
        const auto at = static_cast<std::size_t>(qh);
        auto [dq, dk, dv] =
            ops::attention_backward(half(q, qh, s.L), kv_part(block, kh), kv_part(block, 2 + kh), out[at], fwd.lse[at],
                                    half(dout, qh, s.L), pair_options(s, q_starts, qh, q_pos, k_pos));
        ops::add_(dq_acc[at], dq.to(acc));
        Tensor dk_slot = kv_part(dkv, kh), dv_slot = kv_part(dkv, 2 + kh);
        ops::add_(dk_slot, dk.to(acc));
        ops::add_(dv_slot, dv.to(acc));
      },
      [&] {
        Tensor dkv_in = Tensor::empty(dkv.shape(), dkv.dtype(), dkv.device());
        shift(s, dkv, dkv_in)->wait();
        dkv = dkv_in;
      });
  const auto both = [&](const Tensor& a, const Tensor& b, DType dtype) {
    return ops::concat({ops::cast(a, dtype), ops::cast(b, dtype)}, 1);
  };
  return {both(dq_acc[0], dq_acc[1], q.dtype()), both(kv_part(dkv, 0), kv_part(dkv, 1), k.dtype()),
          both(kv_part(dkv, 2), kv_part(dkv, 3), v.dtype())};
}

// ---------------------------------------------------------------------------------------------------------
// All-to-all (Ulysses)
// ---------------------------------------------------------------------------------------------------------

// Local rows [B, 2L, Hx, D] → this rank's head group of the whole sequence [B, seq_len, Hx/c, D]: head group
// r goes to rank r, and rank s's rows (its chunk s and mirror 2c − 1 − s) land at their global places.
Tensor gather_sequence(const Setup& s, const Tensor& x) {
  const int c = s.size();
  const std::int64_t Hx = x.size(2), h = Hx / c, L = s.L;
  // [B, 2L, c, h, D] → [c, B, 2L, h, D]: destination-major.
  Tensor send = ops::permute(x.view({s.B, 2 * L, c, h, s.D}), {2, 0, 1, 3, 4});
  Tensor recv = Tensor::empty(send.shape(), x.dtype(), x.device());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(c), send.numel() / c);
  dist::CollectiveOptions blocking = s.collective;
  blocking.blocking = true;
  s.comm().all_to_all(send.flatten(), counts, recv, counts, blocking)->wait();
  // recv[src] holds src's chunks: global chunk m < c is src m's first half, m ≥ c src 2c − 1 − m's second.
  std::vector<Tensor> chunks;
  for (int m = 0; m < 2 * c; ++m) {
    const int src = m < c ? m : 2 * c - 1 - m;
    chunks.push_back(half(recv.select0(src), m < c ? 0 : 1, L));
  }
  return ops::concat(chunks, 1);
}

// The inverse: this rank's head group of the whole sequence [B, seq_len, h, D] → local rows [B, 2L, c·h, D].
Tensor scatter_sequence(const Setup& s, const Tensor& y) {
  const int c = s.size();
  const std::int64_t h = y.size(2), L = s.L;
  std::vector<Tensor> blocks;  // destination-major: destination r's chunks, [1, B, 2L, h, D]
  for (int r = 0; r < c; ++r) {
    const ChunkLayout dest{r, c, s.seq_len()};
    blocks.push_back(dest.take(y, 1).view({1, s.B, 2 * L, h, s.D}));
  }
  Tensor send = ops::concat(blocks, 0);
  Tensor recv = Tensor::empty(send.shape(), y.dtype(), y.device());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(c), send.numel() / c);
  dist::CollectiveOptions blocking = s.collective;
  blocking.blocking = true;
  s.comm().all_to_all(send.flatten(), counts, recv, counts, blocking)->wait();
  // recv[g] holds head group g of this rank's rows: [c, B, 2L, h, D] → [B, 2L, c, h, D].
  return ops::permute(recv, {1, 2, 0, 3, 4}).view({s.B, 2 * L, c * h, s.D});
}

void check_heads(const Setup& s) {
  TRIDENT_CHECK(s.H % s.size() == 0 && s.Hkv % s.size() == 0,
                "dist.context_parallel_algorithm=all_to_all scatters the heads: the {} query heads ({} key/value "
                "heads) per tensor-parallel rank must divide by dist.context_parallel_size={} ({})",
                s.H, s.Hkv, s.size(), s.collective.context);
}

// The whole-sequence options of this rank's head group.
ops::AttentionOptions head_group_options(const Setup& s) {
  ops::AttentionOptions o = s.whole;
  o.dropout.head_offset += static_cast<std::int64_t>(s.rank()) * (s.H / s.size());
  return o;
}

}  // namespace

Variable context_attention(const Variable& q, const Variable& k, const Variable& v,
                           const ops::AttentionOptions& options, const ContextAttention& cp) {
  if (!cp.layout.active()) return autograd::attention(q, k, v, options);
  auto s = std::make_shared<const Setup>(make_setup(q.data(), k.data(), v.data(), options, cp));
  if (!cp.all_to_all) {
    // The backward keeps the output it returns (the saved and the returned tensor are one).
    auto fwd = std::make_shared<const RingResult>(ring_forward(*s, q.data(), k.data(), v.data()));
    return autograd::make_result(
        fwd->out, {q, k, v}, "context_attention",
        [s, fwd, qd = q.data(), kd = k.data(), vd = v.data()](const autograd::GradContext& ctx) {
          return ring_backward(*s, qd, kd, vd, *fwd, ctx.grad());
        });
  }
  check_heads(*s);
  Tensor qw = gather_sequence(*s, q.data()), kw = gather_sequence(*s, k.data()), vw = gather_sequence(*s, v.data());
  const ops::AttentionOptions o = head_group_options(*s);
  auto [ow, lse] = ops::attention(qw, kw, vw, o);
  Tensor out = scatter_sequence(*s, ow);
  return autograd::make_result(
      out, {q, k, v}, "context_attention", [s, o, qw, kw, vw, ow, lse](const autograd::GradContext& ctx) {
        Tensor dout = gather_sequence(*s, ctx.grad());
        auto [dq, dk, dv] = ops::attention_backward(qw, kw, vw, ow, lse, dout, o);
        return Grads{scatter_sequence(*s, dq), scatter_sequence(*s, dk), scatter_sequence(*s, dv)};
      });
}

}  // namespace trident::parallel::context
