// Kernel-level tests of the embedding lookup: the backward against an in-order
// f32 sum (bit-exact), bit-identical gradients for 1 and 2 threads, f32
// accumulation of bf16 gradients, and error messages naming the id and position.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "trident/autograd/autograd.h"
#include "trident/core/parallel.h"
#include "trident/ops/embedding.h"

namespace trident {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Tensor random(Shape shape, std::uint64_t seed, DType dtype = DType::f32) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& v : t.span<double>()) v = dist(gen);
  return t.to(dtype);
}

// Zipf-like ids: a few very frequent rows (as in text) and a long tail.
Tensor skewed_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed, DType dtype) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Tensor t = Tensor::empty(Shape{n}, DType::i64);
  for (auto& v : t.span<std::int64_t>()) {
    v = std::min<std::int64_t>(vocab - 1, static_cast<std::int64_t>(std::pow(u(gen), 3.0) * static_cast<double>(vocab)));
  }
  return t.to(dtype);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct ThreadGuard {
  int saved = num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

TEST(Embedding, ForwardGathersRowsForMultiDimensionalIds) {
  Tensor w = random({7, 5}, 1);
  Tensor ids = Tensor::from_vector<std::int32_t>({6, 0, 3, 3, 1, 6}, {2, 3});
  Tensor out = ops::embedding(w, ids);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 5}));
  const auto wv = w.to_vector<float>(), ov = out.to_vector<float>();
  const std::int32_t idv[] = {6, 0, 3, 3, 1, 6};
  for (int t = 0; t < 6; ++t)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(ov[static_cast<std::size_t>(t * 5 + c)], wv[static_cast<std::size_t>(idv[t] * 5 + c)]);
}

TEST(Embedding, BackwardEqualsInOrderSumAndIgnoresThreadCount) {
  ThreadGuard guard;
  const std::int64_t vocab = 97, dim = 45, n = 3000;
  for (DType id_dtype : {DType::i32, DType::i64}) {
    Tensor ids = skewed_ids(n, vocab, 7, id_dtype);
    Tensor dout = random({n, dim}, 8);
    set_num_threads(1);
    Tensor one = ops::embedding_backward(dout, ids, vocab);
    set_num_threads(2);
    Tensor two = ops::embedding_backward(dout, ids, vocab);
    EXPECT_TRUE(bit_equal(one, two)) << dtype_name(id_dtype);

    // Token-order f32 sums, written naively: the kernel must match them exactly.
    std::vector<float> expected(static_cast<std::size_t>(vocab * dim), 0.0f);
    const auto id = ids.to(DType::i64).to_vector<std::int64_t>();
    const auto g = dout.to_vector<float>();
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t c = 0; c < dim; ++c)
        expected[static_cast<std::size_t>(id[static_cast<std::size_t>(t)] * dim + c)] += g[static_cast<std::size_t>(t * dim + c)];
    EXPECT_EQ(two.to_vector<float>(), expected);
  }
}

TEST(Embedding, Bf16GradientsAccumulateInF32) {
  ThreadGuard guard;
  // 500 ones: a bf16 running sum would stall at 256 (256 + 1 rounds back to 256).
  const std::int64_t n = 500, dim = 3, vocab = 4;
  Tensor ids = Tensor::full(Shape{n}, 2.0, DType::i64);
  Tensor dout = Tensor::full(Shape{n, dim}, 1.0, DType::bf16);
  Tensor dw = ops::embedding_backward(dout, ids, vocab);
  ASSERT_EQ(dw.dtype(), DType::bf16);
  EXPECT_EQ(dw.to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 0, 0, 500, 500, 500, 0, 0, 0}));

  Tensor ids2 = skewed_ids(2000, 61, 3, DType::i64);
  Tensor dout2 = random({2000, 33}, 4, DType::bf16);
  set_num_threads(1);
  Tensor one = ops::embedding_backward(dout2, ids2, 61);
  set_num_threads(2);
  EXPECT_TRUE(bit_equal(one, ops::embedding_backward(dout2, ids2, 61)));
}

// Into a gradient buffer: accumulate adds each used row's in-order sum (taken
// in f32 for bf16 dout, then added in the buffer's dtype) and leaves the other
// rows alone; overwrite is embedding_backward; f32 buffers take bf16 dout.
TEST(Embedding, BackwardIntoAddsUsedRowsOnlyInTheBufferDtype) {
  ThreadGuard guard;
  const std::int64_t vocab = 53, dim = 19, n = 700;
  Tensor ids = skewed_ids(n, vocab, 11, DType::i64);
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const DType grad_dtype = dtype == DType::bf16 ? DType::f32 : dtype;
    Tensor dout = random({n, dim}, 12, dtype);
    Tensor start = random({vocab, dim}, 13, grad_dtype);

    Tensor acc = start.clone();
    ops::embedding_backward_into(dout, ids, acc, true);
    // The row sums as embedding_backward takes them (f32 for bf16), widened, then added.
    const Tensor sums = ops::embedding_backward(dout.to(grad_dtype), ids, vocab);
    const auto s0 = start.to_vector<double>(), sv = sums.to_vector<double>(), av = acc.to_vector<double>();
    const auto id = ids.to_vector<std::int64_t>();
    std::vector<bool> used(static_cast<std::size_t>(vocab), false);
    for (std::int64_t v : id) used[static_cast<std::size_t>(v)] = true;
    for (std::int64_t v = 0; v < vocab; ++v) {
      for (std::int64_t c = 0; c < dim; ++c) {
        const auto i = static_cast<std::size_t>(v * dim + c);
        if (!used[static_cast<std::size_t>(v)]) {
          ASSERT_EQ(av[i], s0[i]) << dtype_name(dtype) << " row " << v << " must be untouched";
        } else if (grad_dtype == DType::f64) {
          ASSERT_EQ(av[i], s0[i] + sv[i]) << "row " << v;
        } else {
          ASSERT_EQ(av[i], static_cast<double>(static_cast<float>(s0[i]) + static_cast<float>(sv[i])))
              << dtype_name(dtype) << " row " << v;
        }
      }
    }
    set_num_threads(1);
    Tensor one = start.clone();
    ops::embedding_backward_into(dout, ids, one, true);
    EXPECT_TRUE(bit_equal(one, acc)) << dtype_name(dtype) << ": thread count changed the sum";
    set_num_threads(2);

    Tensor over = start.clone();
    ops::embedding_backward_into(dout, ids, over, false);
    EXPECT_TRUE(bit_equal(over, sums)) << dtype_name(dtype);  // rows rounded once, in the buffer's dtype
  }
  try {
    Tensor f64_buffer = Tensor::zeros({vocab, dim}, DType::f64);
    ops::embedding_backward_into(random({n, dim}, 1, DType::bf16), ids, f64_buffer, true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding_backward"), HasSubstr("f64"), HasSubstr("bf16 or f32")));
  }
}

TEST(Embedding, AutogradAccumulatesRepeatedIdsIntoWeightGradient) {
  autograd::Variable w(random({4, 2}, 5, DType::f64), true);
  Tensor ids = Tensor::from_vector<std::int64_t>({1, 3, 1, 1}, {4});
  autograd::sum(autograd::embedding(w, ids)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 3, 3, 0, 0, 1, 1}));
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndVocab) {
  Tensor w = random({5, 3}, 1);
  Tensor ids = Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 4, 9}, {2, 3});
  try {
    ops::embedding(w, ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding"), HasSubstr("id 9"), HasSubstr("[1, 2]"), HasSubstr("[0, 5)")));
  }
  Tensor negative = Tensor::from_vector<std::int32_t>({0, -1}, {2});
  try {
    ops::embedding(w, negative);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("id -1"), HasSubstr("[1]")));
  }
  try {
    ops::embedding_backward(random({2, 3}, 2), Tensor::from_vector<std::int64_t>({1, 5}, {2}), 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding_backward"), HasSubstr("id 5")));
  }
}

TEST(Embedding, BadShapesAndDtypesAreNamed) {
  Tensor ids = Tensor::from_vector<std::int64_t>({0, 1}, {2});
  try {
    ops::embedding(random({5}, 1), ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding"), HasSubstr("[5]")));
  }
  try {
    ops::embedding(random({5, 3}, 1), random({2}, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding"), HasSubstr("i32 or i64"), HasSubstr("f32")));
  }
  try {
    ops::embedding_backward(random({3, 4}, 1), ids, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), AllOf(HasSubstr("embedding_backward"), HasSubstr("[3, 4]"), HasSubstr("[2]")));
  }
}

}  // namespace
}  // namespace trident
