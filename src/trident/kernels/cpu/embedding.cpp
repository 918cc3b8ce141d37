// Embedding kernels. The backward is a gather in disguise: after a stable
// counting sort of token positions by id (O(num_ids + vocab), serial and cheap
// next to writing the [vocab, dim] gradient), every vocabulary row is the
// in-order sum of a known list of dout rows, so rows can be split among threads
// freely without changing any floating-point sum.
#include "trident/kernels/cpu/embedding.h"

#include <cstring>
#include <vector>

#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"

namespace trident::kernels::cpu {

namespace {
constexpr std::int64_t kGrain = 1 << 14;  // elements per thread chunk, at least

template <typename F>
void dispatch_ids(DType id_dtype, const char* op, F&& f) {
  switch (id_dtype) {
    case DType::i32: return f(std::int32_t{});
    case DType::i64: return f(std::int64_t{});
    default: TRIDENT_FAIL("{}: ids must be i32 or i64, got {}", op, id_dtype);
  }
}

std::int64_t row_grain(std::int64_t dim) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(dim, 1)); }
}  // namespace

void embedding_forward(DType dtype, DType id_dtype, const void* weight, const void* ids, void* out,
                       std::int64_t num_ids, std::int64_t dim) {
  const std::size_t row_bytes = static_cast<std::size_t>(dim) * dtype_size(dtype);
  const auto* w = static_cast<const char*>(weight);
  auto* o = static_cast<char*>(out);
  dispatch_ids(id_dtype, "embedding", [&](auto id_tag) {
    using I = decltype(id_tag);
    const auto* id = static_cast<const I*>(ids);
    parallel_for(0, num_ids, row_grain(dim), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t t = lo; t < hi; ++t) {
        std::memcpy(o + static_cast<std::size_t>(t) * row_bytes, w + static_cast<std::size_t>(id[t]) * row_bytes,
                    row_bytes);
      }
    });
  });
}

void embedding_backward(DType dtype, DType grad_dtype, DType id_dtype, const void* dout, const void* ids,
                        void* dweight, std::int64_t num_ids, std::int64_t vocab, std::int64_t dim, bool accumulate) {
  // offsets[v] .. offsets[v + 1]: positions in `order` of the tokens with id v, ascending.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(vocab) + 1, 0);
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_ids));
  dispatch_ids(id_dtype, "embedding_backward", [&](auto id_tag) {
    using I = decltype(id_tag);
    const auto* id = static_cast<const I*>(ids);
    for (std::int64_t t = 0; t < num_ids; ++t) ++offsets[static_cast<std::size_t>(id[t]) + 1];
    for (std::int64_t v = 0; v < vocab; ++v) offsets[static_cast<std::size_t>(v) + 1] += offsets[static_cast<std::size_t>(v)];
    std::vector<std::int64_t> cursor(offsets.begin(), offsets.end() - 1);
    for (std::int64_t t = 0; t < num_ids; ++t) order[static_cast<std::size_t>(cursor[static_cast<std::size_t>(id[t])]++)] = t;
  });
  // Accumulating touches only the rows some id refers to: a few hundred of a
  // 50k-row vocabulary per micro-batch.
  std::vector<std::int64_t> rows;
  if (accumulate) {
    for (std::int64_t v = 0; v < vocab; ++v)
      if (offsets[static_cast<std::size_t>(v)] != offsets[static_cast<std::size_t>(v) + 1]) rows.push_back(v);
  }
  const std::int64_t count = accumulate ? static_cast<std::int64_t>(rows.size()) : vocab;

  TRIDENT_DISPATCH_FLOAT(dtype, "embedding_backward", [&] {
    using A = acc_t<scalar_t>;
    auto run = [&](auto grad_tag) {
      using G = decltype(grad_tag);
      const auto* g = static_cast<const scalar_t*>(dout);
      auto* dw = static_cast<G*>(dweight);
      const std::size_t d = static_cast<std::size_t>(dim);
      parallel_for(0, count, row_grain(dim), [&](std::int64_t lo, std::int64_t hi) {
        std::vector<A> acc(d);
        for (std::int64_t i = lo; i < hi; ++i) {
          const std::int64_t v = accumulate ? rows[static_cast<std::size_t>(i)] : i;
          G* row = dw + static_cast<std::size_t>(v) * d;
          const std::int64_t b = offsets[static_cast<std::size_t>(v)], e = offsets[static_cast<std::size_t>(v) + 1];
          if (b == e) {
            std::memset(static_cast<void*>(row), 0, d * sizeof(G));  // all-zero bits are +0 in every float type
            continue;
          }
          const scalar_t* first = g + static_cast<std::size_t>(order[static_cast<std::size_t>(b)]) * d;
          for (std::size_t c = 0; c < d; ++c) acc[c] = load(first[c]);
          for (std::int64_t k = b + 1; k < e; ++k) {
            const scalar_t* src = g + static_cast<std::size_t>(order[static_cast<std::size_t>(k)]) * d;
            for (std::size_t c = 0; c < d; ++c) acc[c] += load(src[c]);
          }
          if (accumulate) {
            for (std::size_t c = 0; c < d; ++c) row[c] = store<G>(load(row[c]) + static_cast<acc_t<G>>(acc[c]));
          } else {
            for (std::size_t c = 0; c < d; ++c) row[c] = store<G>(static_cast<acc_t<G>>(acc[c]));
          }
        }
      });
    };
    if (grad_dtype == dtype) {
      run(scalar_t{});
    } else {
      TRIDENT_CHECK(grad_dtype == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16),
                    "embedding_backward: a {} gradient from {} dout (expected {}{})", grad_dtype, dtype, dtype,
                    dtype == DType::bf16 || dtype == DType::f16 ? " or f32" : "");
      run(float{});
    }
  });
}

std::int64_t find_invalid_id(DType id_dtype, const void* ids, std::int64_t num_ids, std::int64_t vocab,
                             std::int64_t* bad_id) {
  std::int64_t found = -1;
  dispatch_ids(id_dtype, "embedding", [&](auto id_tag) {
    using I = decltype(id_tag);
    const auto* id = static_cast<const I*>(ids);
    for (std::int64_t t = 0; t < num_ids; ++t) {
      const auto v = static_cast<std::int64_t>(id[t]);
      if (v < 0 || v >= vocab) {
        found = t;
        *bad_id = v;
        return;
      }
    }
  });
  return found;
}

}  // namespace trident::kernels::cpu
