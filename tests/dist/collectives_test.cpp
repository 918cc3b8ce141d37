// Collectives with exactly predictable answers (fill with the rank; expect
// n(n−1)/2), in every supported dtype. Runs under mpirun with 2, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <thread>

#include "trident/dist/mesh.h"
#include "trident/dist/mpi_communicator.h"

namespace trident::dist {
namespace {

std::shared_ptr<Communicator> world() { return mpi_world(60.0); }

class Collectives : public ::testing::TestWithParam<DType> {};

TEST_P(Collectives, AllReduceSumAvgMax) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const DType dt = GetParam();
  Tensor t = Tensor::full({5}, r + 1, dt);
  w->all_reduce(t)->wait();
  for (double v : t.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, n * (n + 1) / 2);
  Tensor m = Tensor::full({3}, r, dt);
  w->all_reduce(m, {ReduceOp::max})->wait();
  for (double v : m.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, n - 1);
  if (is_floating(dt)) {
    Tensor a = Tensor::full({4}, 2 * r, dt);
    w->all_reduce(a, {ReduceOp::avg})->wait();
    for (double v : a.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, n - 1);
  }
}

TEST_P(Collectives, ReduceScatterAndAllGather) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const DType dt = GetParam();
  // input chunk c of rank r holds c + r; the reduction of chunk c is n·c + n(n−1)/2.
  std::vector<double> in;
  for (int c = 0; c < n; ++c)
    for (int k = 0; k < 2; ++k) in.push_back(c + r);
  Tensor input = Tensor::from_vector(in, {2 * n}).to(dt);
  Tensor out = Tensor::empty({2}, dt);
  w->reduce_scatter(input, out)->wait();
  for (double v : out.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, n * r + n * (n - 1) / 2);
  Tensor mine = Tensor::full({3}, r, dt);
  Tensor all = Tensor::empty({3 * n}, dt);
  w->all_gather(mine, all)->wait();
  auto got = all.to(DType::f64).to_vector<double>();
  for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i / 3);
}

TEST_P(Collectives, BroadcastAndSendRecvRing) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const DType dt = GetParam();
  Tensor b = Tensor::full({4}, r == n - 1 ? 42 : 0, dt);
  w->broadcast(b, n - 1)->wait();
  for (double v : b.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, 42);
  // Each rank sends its rank to the next; non-blocking pairs cannot deadlock.
  Tensor out = Tensor::full({2}, r, dt), in = Tensor::zeros({2}, dt);
  auto s = w->send(out, (r + 1) % n, 7);
  auto q = w->recv(in, (r + n - 1) % n, 7);
  q->wait();
  s->wait();
  for (double v : in.to(DType::f64).to_vector<double>()) EXPECT_EQ(v, (r + n - 1) % n);
}

INSTANTIATE_TEST_SUITE_P(DTypes, Collectives,
                         ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(Collectives, BroadcastTextGivesTheRootsText) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  // Each rank offers a text of a different length; only the root's arrives, whole, everywhere.
  const std::string tail("\n\0x", 3);  // any bytes, a NUL included
  const std::string mine = std::string(static_cast<std::size_t>(3 * r + 1), static_cast<char>('a' + r)) + tail;
  EXPECT_EQ(w->broadcast_text(mine, n - 1),
            std::string(static_cast<std::size_t>(3 * (n - 1) + 1), static_cast<char>('a' + n - 1)) + tail);
  EXPECT_EQ(w->broadcast_text(r == 0 ? "" : "ignored"), "");
}

TEST(Collectives, Bf16ReducesWithF32Accumulation) {
  auto w = world();
  const int n = w->size();
  // 1 + n·2^-9: pairwise bf16 additions of 2^-9 to 1 would round away; f32 accumulation keeps them
  // (for n >= 4 the total 2^-7·(n/4) is representable in bf16).
  Tensor t = Tensor::full({1}, w->rank() == 0 ? 1.0 : 0x1p-9, DType::bf16);
  w->all_reduce(t)->wait();
  const double expected = bf16_bits_to_float(double_to_bf16_bits(1.0 + (n - 1) * 0x1p-9));
  EXPECT_EQ(t.to(DType::f64).item(), expected);
}

TEST(Collectives, SubgroupsFollowTheMesh) {
  auto w = world();
  const int n = w->size();
  if (n % 2 != 0) GTEST_SKIP();
  Mesh mesh(n, 2, 1);
  auto tp = w->split(mesh.groups(GroupKind::tp), "tp");
  auto dp = w->split(mesh.groups(GroupKind::dp), "dp");
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(dp->size(), n / 2);
  Tensor t = Tensor::full({1}, w->rank(), DType::f64);
  tp->all_reduce(t)->wait();
  const int base = w->rank() / 2 * 2;
  EXPECT_EQ(t.item(), base + base + 1);
  EXPECT_NE(tp->name().find("tp group ["), std::string::npos);
}

TEST(Collectives, TimeoutNamesOperationGroupAndRank) {
  auto w = world();
  Tensor t = Tensor::full({1}, 1.0);
  if (w->rank() == 0) {
    auto work = w->all_reduce(t, {ReduceOp::sum, 0.3});
    try {
      work->wait();
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("all_reduce on world (rank 0 of"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("timed out"), std::string::npos) << e.message();
    }
    while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the late peers arrive
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    w->all_reduce(t)->wait();
  }
  w->barrier();
}

TEST(Collectives, WrongSizesAreErrors) {
  auto w = world();
  Tensor in = Tensor::zeros({3}), out = Tensor::zeros({2});
  EXPECT_THROW(w->reduce_scatter(in, out), Error);
  EXPECT_THROW(w->all_gather(in, in), Error);
}

}  // namespace
}  // namespace trident::dist
