// Collectives with exactly predictable answers (fill with the rank; expect
// n(n−1)/2), in every supported dtype. Runs under mpirun with 2, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <regex>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

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

TEST(Collectives, OnEveryRankThrowsTheLowestFailingRanksMessageEverywhere) {
  auto w = world();
  EXPECT_NO_THROW(on_every_rank(*w, [] {}));
  const int n = w->size();
  try {
    on_every_rank(*w, [&] {
      if (w->rank() >= n - 2) TRIDENT_FAIL("rank {} cannot write", w->rank());
    });
    FAIL() << "no error on rank " << w->rank();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("rank {} cannot write", std::max(n - 2, 0)));
  }
  w->barrier();  // nobody was left behind in a collective
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
      // The group's sequence number: the ranks' collectives so far, this one included.
      EXPECT_TRUE(std::regex_search(e.message(), std::regex("all_reduce #[0-9]+ on world \\(rank 0 of")))
          << e.message();
      EXPECT_NE(e.message().find("timed out"), std::string::npos) << e.message();
    }
    while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the late peers arrive
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    w->all_reduce(t)->wait();
  }
  w->barrier();
}

// all_to_all: rank r sends rank s (r + 2s) % 3 elements (some zero), element i of them r·1000 + s·10 + i.
std::int64_t a2a_count(int from, int to) {
  return (from + 2 * to) % 3;
}
double a2a_value(int from, int to, std::int64_t i) {
  return from * 1000 + to * 10 + static_cast<double>(i);
}

std::vector<std::int64_t> a2a_send_counts(int r, int n) {
  std::vector<std::int64_t> c;
  for (int s = 0; s < n; ++s) c.push_back(a2a_count(r, s));
  return c;
}
std::vector<std::int64_t> a2a_recv_counts(int r, int n) {
  std::vector<std::int64_t> c;
  for (int s = 0; s < n; ++s) c.push_back(a2a_count(s, r));
  return c;
}
std::int64_t total(const std::vector<std::int64_t>& counts) {
  std::int64_t t = 0;
  for (auto c : counts) t += c;
  return t;
}
Tensor a2a_input(int r, int n, DType dt) {
  std::vector<double> v;
  for (int s = 0; s < n; ++s)
    for (std::int64_t i = 0; i < a2a_count(r, s); ++i) v.push_back(a2a_value(r, s, i));
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}).to(dt);
}
// Checks every element rank r of `c` received; `output` came from a2a_input on each rank.
void expect_a2a_output(const Communicator& c, const Tensor& output, DType dt) {
  const int n = c.size(), r = c.rank();
  std::vector<double> want;
  for (int s = 0; s < n; ++s)
    for (std::int64_t i = 0; i < a2a_count(s, r); ++i) want.push_back(a2a_value(s, r, i));
  ASSERT_EQ(output.numel(), static_cast<std::int64_t>(want.size()));
  const auto got = output.to(DType::f64).to_vector<double>();
  // A copy: the bits sent arrive (bf16 holds the values rounded once, by a2a_input's conversion).
  const auto sent = Tensor::from_vector(want, {output.numel()}).to(dt).to(DType::f64).to_vector<double>();
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(got[k], sent[k]) << "element " << k << " on rank " << r << " of " << c.name();
    if (dt != DType::bf16) {
      EXPECT_EQ(got[k], want[k]) << "element " << k << " on rank " << r;
    }
  }
}

class AllToAll : public ::testing::TestWithParam<DType> {};

TEST_P(AllToAll, UnevenCountsArriveExactlyNonBlockingAndBlocking) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const DType dt = GetParam();
  const auto send = a2a_send_counts(r, n), recv = a2a_recv_counts(r, n);
  const Tensor input = a2a_input(r, n, dt);
  for (bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "blocking" : "non-blocking");
    Tensor output = Tensor::full({total(recv)}, -1, dt);
    w->reset_traffic();
    CollectiveOptions o;
    o.blocking = blocking;
    auto work = w->all_to_all(input, send, output, recv, o);
    if (blocking) {
      EXPECT_TRUE(work->test());  // already complete
    }
    work->wait();
    EXPECT_EQ(work->error(), "");
    expect_a2a_output(*w, output, dt);
    // Bytes sent to the other ranks: what this rank keeps for itself does not count.
    EXPECT_EQ(w->traffic().all_to_all_bytes,
              (total(send) - a2a_count(r, r)) * static_cast<std::int64_t>(dtype_size(dt)));
    EXPECT_EQ(w->traffic().calls, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AllToAll, ::testing::Values(DType::f32, DType::bf16, DType::f64, DType::i64),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(AllToAll, CountsExchangeFollowsTheFormula) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  EXPECT_EQ(w->all_to_all_counts(a2a_send_counts(r, n)), a2a_recv_counts(r, n));
  // Counts beyond 32 bits travel whole (the exchange itself is in i64).
  std::vector<std::int64_t> big;
  for (int s = 0; s < n; ++s) big.push_back((std::int64_t{1} << 40) + 100 * r + s);
  const auto got = w->all_to_all_counts(big);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s) EXPECT_EQ(got[static_cast<std::size_t>(s)], (std::int64_t{1} << 40) + 100 * s + r);
}

TEST(AllToAll, SubCommunicatorUsesItsOwnNumbering) {
  auto w = world();
  const int n = w->size();
  // Even and odd world ranks: {0, 2}, {1, 3} at 4 ranks; groups of one at 2.
  std::vector<std::vector<int>> groups(2);
  for (int i = 0; i < n; ++i) groups[static_cast<std::size_t>(i % 2)].push_back(i);
  if (groups[1].empty()) groups.pop_back();
  auto ep = w->split(groups, "ep");
  EXPECT_NE(ep->name().find("ep group ["), std::string::npos);
  const int m = ep->size(), r = ep->rank();
  EXPECT_EQ(r, w->rank() / 2);
  const auto send = a2a_send_counts(r, m);
  const auto recv = ep->all_to_all_counts(send);
  EXPECT_EQ(recv, a2a_recv_counts(r, m));
  for (DType dt : {DType::f32, DType::i64}) {
    Tensor output = Tensor::full({total(recv)}, -1, dt);
    ep->all_to_all(a2a_input(r, m, dt), send, output, recv)->wait();
    expect_a2a_output(*ep, output, dt);
  }
}

TEST(AllToAll, ZeroCountsEverywhereMoveNothing) {
  auto w = world();
  const int n = w->size();
  const std::vector<std::int64_t> zeros(static_cast<std::size_t>(n), 0);
  Tensor in = Tensor::empty({0}), out = Tensor::empty({0});
  w->reset_traffic();
  w->all_to_all(in, zeros, out, zeros)->wait();
  EXPECT_EQ(w->traffic().all_to_all_bytes, 0);
}

// Every rank makes the same mistake, so every rank throws before communicating and none waits.
TEST(AllToAll, WrongArgumentsAreErrorsNamingTheProblem) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const auto send = a2a_send_counts(r, n), recv = a2a_recv_counts(r, n);
  const Tensor input = a2a_input(r, n, DType::f32);
  Tensor output = Tensor::zeros({total(recv)});
  auto message = [&](const std::vector<std::int64_t>& s, const Tensor& in, Tensor& out,
                     const std::vector<std::int64_t>& q) -> std::string {
    try {
      w->all_to_all(in, s, out, q)->wait();
    } catch (const Error& e) {
      return e.message();
    }
    return "no error";
  };
  auto contains = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  std::vector<std::int64_t> short_send(send.begin(), send.end() - 1);
  std::string m = message(short_send, input, output, recv);
  EXPECT_TRUE(contains(m, fmt::format("all_to_all on world: send_counts has {} entries, expected {}", n - 1, n))) << m;
  std::vector<std::int64_t> long_recv = recv;
  long_recv.push_back(0);
  m = message(send, input, output, long_recv);
  EXPECT_TRUE(contains(m, fmt::format("recv_counts has {} entries, expected {}", n + 1, n))) << m;
  std::vector<std::int64_t> more = send;
  more[0] += 1;
  m = message(more, input, output, recv);
  EXPECT_TRUE(contains(m, fmt::format("send_counts sum to {}, but input", total(send) + 1))) << m;
  EXPECT_TRUE(contains(m, fmt::format("holds {} elements", input.numel()))) << m;
  Tensor bigger = Tensor::zeros({total(recv) + 2});
  m = message(send, input, bigger, recv);
  EXPECT_TRUE(contains(m, fmt::format("recv_counts sum to {}, but output", total(recv)))) << m;
  std::vector<std::int64_t> negative = send;
  negative[0] -= 1;
  negative[static_cast<std::size_t>(n - 1)] += 1;
  if (negative[0] >= 0) negative[0] = -1, negative[static_cast<std::size_t>(n - 1)] += send[0] + 1;
  m = message(negative, input, output, recv);
  EXPECT_TRUE(contains(m, "send_counts[0] is -1, expected a count >= 0")) << m;
  Tensor wrong_dtype = Tensor::zeros({total(recv)}, DType::f64);
  m = message(send, input, wrong_dtype, recv);
  EXPECT_TRUE(contains(m, "must have one dtype")) << m;
  EXPECT_THROW(w->all_to_all_counts(short_send), Error);
  // Nothing was left half-sent: a correct exchange still works.
  w->all_to_all(input, send, output, recv)->wait();
  expect_a2a_output(*w, output, DType::f32);
}

TEST(AllToAll, TimeoutNamesTheCallersContext) {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(n), 1);
  Tensor in = Tensor::full({n}, r), out = Tensor::zeros({n});
  if (r == 0) {
    CollectiveOptions o;
    o.timeout_s = 0.3;
    o.context = "moe dispatch in model.layers.1.mlp";
    auto work = w->all_to_all(in, ones, out, ones, o);
    try {
      work->wait();
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_TRUE(std::regex_search(
          e.message(), std::regex("all_to_all #[0-9]+ \\(moe dispatch in model\\.layers\\.1\\.mlp\\) on world \\(rank 0 of")))
          << e.message();
      EXPECT_NE(e.message().find("timed out after 0 s"), std::string::npos) << e.message();
    }
    while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the late peers arrive
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    w->all_to_all(in, ones, out, ones)->wait();
  }
  for (int s = 0; s < n; ++s) EXPECT_EQ(out.to_vector<float>()[static_cast<std::size_t>(s)], s);
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
