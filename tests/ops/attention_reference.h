// Naive f64 attention for tests: the full T×S score matrix per (batch, head),
// softmax(scale · Q·Kᵀ + mask)·V with the causal rule of ops::attention
// (key s visible to query t iff s ≤ t + S − T, and with a sliding window w > 0
// also s > t + S − T − w), the key-padding mask (key s of sample b hidden iff
// key_mask[b·S + s] == 0), packed documents (key s hidden from query t of
// sample b iff s < doc_starts[b·T + t]), dropout on the probabilities (each P times its
// factor in `keep`, see dropout_keep), and the textbook backward.
// Written independently of the blocked kernel (no online softmax, no tiles).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::testing {

// The factors ops::attention's dropout puts on the probabilities P[b, h, t, s] ([B, H, T, S]): 0 where
// rng.uniform(g) < p, else 1/(1 − p), at g = (((batch_offset + b)·heads + head_offset + h)·T + t)·S + s
// (ops::AttentionDropout's definition, computed here from CounterRng::uniform alone).
// With seq_len > 0 the index runs over the whole sequence's grid: t and s at q_offset + t and k_offset + s of
// seq_len each (ops::AttentionDropout::seq_len, for q and k chunks at those positions).
inline std::vector<double> dropout_keep(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t S, double p,
                                        const CounterRng& rng, std::int64_t batch_offset, std::int64_t head_offset,
                                        std::int64_t heads, std::int64_t seq_len = 0, std::int64_t q_offset = 0,
                                        std::int64_t k_offset = 0) {
  std::vector<double> keep(static_cast<std::size_t>(B * H * T * S));
  const std::int64_t grid_t = seq_len > 0 ? seq_len : T, grid_s = seq_len > 0 ? seq_len : S;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < S; ++s) {
          const auto g = static_cast<std::uint64_t>(
              (((batch_offset + b) * heads + head_offset + h) * grid_t + q_offset + t) * grid_s + k_offset + s);
          keep[static_cast<std::size_t>(((b * H + h) * T + t) * S + s)] = rng.uniform(g) < p ? 0.0 : 1.0 / (1.0 - p);
        }
  return keep;
}

struct NaiveAttention {
  std::int64_t B, T, S, H, Hkv, D;
  bool causal;
  double scale;  // resolved (never 0)
  std::vector<double> mask;  // [T, S] or empty
  std::int64_t window = 0;   // sliding window (causal only); 0 = unlimited
  std::vector<std::int64_t> key_mask = {};  // [B, S], 0 = padding key; or empty (every key real)
  std::vector<double> keep = {};  // [B, H, T, S]: dropout's factor on each probability (dropout_keep); empty: none
  std::vector<std::int64_t> doc_starts = {};  // [B, T]: each query's document's first key's position; empty: none
  std::int64_t q_pos = -1, k_pos = 0;  // q and k at these positions (q_pos −1: bottom-right, q at S − T)
  // Block-sparse attention: u8 [layout_heads, rows, cols] (empty: none); head h reads layout head 0 when
  // layout_heads = 1, else layout_head_offset + h; query t sees key s only where its block pair is set.
  std::vector<std::uint8_t> layout = {};
  std::int64_t layout_heads = 0, layout_rows = 0, layout_cols = 0, block = 0, layout_head_offset = 0;

  double keep_at(std::size_t i) const { return keep.empty() ? 1.0 : keep[i]; }

  bool visible(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t s) const {
    if (!key_mask.empty() && key_mask[static_cast<std::size_t>(b * S + s)] == 0) return false;
    if (!layout.empty()) {
      const std::int64_t hl = layout_heads == 1 ? 0 : layout_head_offset + h;
      if (layout[static_cast<std::size_t>((hl * layout_rows + t / block) * layout_cols + s / block)] == 0) return false;
    }
    const std::int64_t p = q_pos >= 0 ? q_pos + t : t + S - T;  // the query's position
    const std::int64_t kp = q_pos >= 0 ? k_pos + s : s;          // the key's
    if (!doc_starts.empty() && kp < doc_starts[static_cast<std::size_t>(b * T + t)]) return false;
    if (!causal) return true;
    return kp <= p && (window == 0 || kp > p - window);
  }

  // P[b][h][t][s] (softmax probabilities, 0 where hidden; a row with no visible key is all 0).
  std::vector<double> probs(const std::vector<double>& q, const std::vector<double>& k) const {
    std::vector<double> p(static_cast<std::size_t>(B * H * T * S), 0.0);
    const double inf = std::numeric_limits<double>::infinity();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t hk = h / (H / Hkv);
        for (std::int64_t t = 0; t < T; ++t) {
          std::vector<double> row(static_cast<std::size_t>(S));
          double mx = -inf;
          for (std::int64_t s = 0; s < S; ++s) {
            double x = -inf;
            if (visible(b, h, t, s)) {
              double dot = 0;
              for (std::int64_t d = 0; d < D; ++d) dot += q[qi(b, t, h, d)] * k[ki(b, s, hk, d)];
              x = scale * dot + (mask.empty() ? 0.0 : mask[static_cast<std::size_t>(t * S + s)]);
            }
            row[static_cast<std::size_t>(s)] = x;
            mx = std::max(mx, x);
          }
          if (mx == -inf) continue;
          double sum = 0;
          for (double& x : row) sum += (x = std::exp(x - mx));
          for (std::int64_t s = 0; s < S; ++s) p[pi(b, h, t, s)] = row[static_cast<std::size_t>(s)] / sum;
        }
      }
    return p;
  }

  std::vector<double> forward(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v) const {
    const auto p = probs(q, k);
    std::vector<double> out(static_cast<std::size_t>(B * T * H * D), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t s = 0; s < S; ++s)
            for (std::int64_t d = 0; d < D; ++d)
              out[qi(b, t, h, d)] += p[pi(b, h, t, s)] * keep_at(pi(b, h, t, s)) * v[ki(b, s, h / (H / Hkv), d)];
    return out;
  }

  // dq, dk, dv for the output gradient dout (all f64 vectors in the tensors' layouts).
  void backward(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                const std::vector<double>& dout, std::vector<double>& dq, std::vector<double>& dk,
                std::vector<double>& dv) const {
    const auto p = probs(q, k);
    dq.assign(q.size(), 0.0);
    dk.assign(k.size(), 0.0);
    dv.assign(v.size(), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t hk = h / (H / Hkv);
        for (std::int64_t t = 0; t < T; ++t) {
          std::vector<double> dp(static_cast<std::size_t>(S));
          double rowdot = 0;  // Σ_s P·dP
          for (std::int64_t s = 0; s < S; ++s) {
            double x = 0;  // d out / d (P·keep)
            for (std::int64_t d = 0; d < D; ++d) x += dout[qi(b, t, h, d)] * v[ki(b, s, hk, d)];
            dp[static_cast<std::size_t>(s)] = keep_at(pi(b, h, t, s)) * x;
            rowdot += p[pi(b, h, t, s)] * dp[static_cast<std::size_t>(s)];
          }
          for (std::int64_t s = 0; s < S; ++s) {
            const double pv = p[pi(b, h, t, s)];
            const double ds = pv * (dp[static_cast<std::size_t>(s)] - rowdot);
            for (std::int64_t d = 0; d < D; ++d) {
              dv[ki(b, s, hk, d)] += pv * keep_at(pi(b, h, t, s)) * dout[qi(b, t, h, d)];
              dq[qi(b, t, h, d)] += scale * ds * k[ki(b, s, hk, d)];
              dk[ki(b, s, hk, d)] += scale * ds * q[qi(b, t, h, d)];
            }
          }
        }
      }
  }

  std::size_t qi(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * T + t) * H + h) * D + d);
  }
  std::size_t ki(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * S + s) * Hkv + h) * D + d);
  }
  std::size_t pi(std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t s) const {
    return static_cast<std::size_t>(((b * H + h) * T + t) * S + s);
  }
};

}  // namespace trident::testing
