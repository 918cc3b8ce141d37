// NcclCommunicator under mpirun (1, 2 and 4 ranks; rank r on cuda:r % GPUs):
// collectives and point-to-point transfers with exactly predictable answers
// (fill with the rank; expect n(n+1)/2), in every dtype. NCCL allows one rank
// per GPU, so without a GPU for every rank the GPU cases skip (all ranks decide
// together) and only two checks run: creation without a GPU is a clear error,
// and every pipeline schedule is safe under NCCL's point-to-point rules.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trident/dist/mesh.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/nccl_communicator.h"
#include "trident/kernels/cuda/device.h"
#include "trident/parallel/pipeline/schedule.h"
#include "testing/helpers.h"

namespace trident::dist {
namespace {

namespace kc = kernels::cuda;

std::shared_ptr<Communicator> world() { return mpi_world(60.0); }

struct GpuSetup {
  bool usable = false;
  std::string why;  // when not usable
};

// Whether every rank has a GPU of its own, decided by all ranks together.
const GpuSetup& gpu_setup() {
  static const GpuSetup setup = [] {
    auto w = world();
    const bool cuda = kc::initialize();
    const int devices = cuda ? kc::device_count() : 0;
    const bool mine = devices >= w->size();  // single-host test: rank r takes cuda:r
    GpuSetup s;
    s.usable = w->all_reduce_scalar(mine ? 1.0 : 0.0, ReduceOp::min) > 0;
    if (!cuda) {
      s.why = "no CUDA GPU here: " + kc::describe();
    } else if (!mine) {
      s.why = fmt::format("NCCL needs a GPU per rank: {} ranks, {} GPU(s)", w->size(), devices);
    } else {
      s.why = "another rank has no GPU of its own";
    }
    return s;
  }();
  return setup;
}

// Holds the world NcclCommunicator from the first GPU case to the end of the
// tests (before main finalises MPI); every rank destroys it at the same point.
class NcclEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { comm.reset(); }
  std::shared_ptr<NcclCommunicator> comm;
};
NcclEnvironment* const g_env =
    static_cast<NcclEnvironment*>(::testing::AddGlobalTestEnvironment(new NcclEnvironment));

bool power_of_two(int n) { return (n & (n - 1)) == 0; }
bool widened_dtype(DType d) { return d == DType::bf16 || d == DType::f16; }

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_setup().usable) GTEST_SKIP() << gpu_setup().why;
    if (!g_env->comm) g_env->comm = NcclCommunicator::create(world(), world()->rank() % kc::device_count(), 60.0);
    c = g_env->comm;
  }
  Device gpu() const { return Device::cuda(c->device()); }
  Tensor full(std::int64_t n, double value, DType dt) const { return Tensor::full({n}, value, dt).to(gpu()); }
  Tensor from(const std::vector<double>& v, DType dt) const {
    return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}).to(dt).to(gpu());
  }
  static std::vector<double> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).to_vector<double>(); }

  std::shared_ptr<NcclCommunicator> c;
};

class NcclDTypes : public Nccl, public ::testing::WithParamInterface<DType> {};

TEST_P(NcclDTypes, AllReduceSumMaxMinAvg) {
  const int n = c->size(), r = c->rank();
  const DType dt = GetParam();
  Tensor t = full(5, r + 1, dt);
  c->all_reduce(t)->wait();
  for (double v : values(t)) EXPECT_EQ(v, n * (n + 1) / 2);
  Tensor hi = full(3, r, dt);
  c->all_reduce(hi, {ReduceOp::max})->wait();
  for (double v : values(hi)) EXPECT_EQ(v, n - 1);
  Tensor lo = full(3, r + 1, dt);
  c->all_reduce(lo, {ReduceOp::min})->wait();
  for (double v : values(lo)) EXPECT_EQ(v, 1);
  if (is_floating(dt)) {
    // ncclAvg scales each input by 1/n before summing: exact for n a power of two.
    Tensor a = full(4, 2 * r, dt);
    c->all_reduce(a, {ReduceOp::avg})->wait();
    for (double v : values(a)) {
      if (power_of_two(n) || widened_dtype(dt)) {
        EXPECT_EQ(v, n - 1);
      } else {
        EXPECT_NEAR(v, n - 1, 1e-5 * n);
      }
    }
  }
}

TEST_P(NcclDTypes, ReduceScatterAndAllGather) {
  const int n = c->size(), r = c->rank();
  const DType dt = GetParam();
  // Chunk k of rank r holds k + r; the reduction of chunk k is n·k + n(n−1)/2.
  std::vector<double> in;
  for (int k = 0; k < n; ++k)
    for (int e = 0; e < 2; ++e) in.push_back(k + r);
  const Tensor input = from(in, dt);
  Tensor out = full(2, -1, dt);
  c->reduce_scatter(input, out)->wait();
  for (double v : values(out)) EXPECT_EQ(v, n * r + n * (n - 1) / 2);
  const Tensor mine = full(3, r, dt);
  Tensor all = full(3 * n, -1, dt);
  c->all_gather(mine, all)->wait();
  const std::vector<double> got = values(all);
  for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i / 3);
}

TEST_P(NcclDTypes, BroadcastAndPointToPointInIssueOrder) {
  const int n = c->size(), r = c->rank();
  const DType dt = GetParam();
  Tensor b = full(4, r == n - 1 ? 42 : 0, dt);
  c->broadcast(b, n - 1)->wait();
  for (double v : values(b)) EXPECT_EQ(v, 42);
  if (n < 2) GTEST_SKIP() << "point-to-point needs two ranks";
  // A chain each way, three messages per step with distinct tags; matched in issue order.
  // Sends come first on every rank: the first transfers meet from the chain's end.
  for (const int step : {+1, -1}) {
    const int dst = r + step, src = r - step;
    std::vector<std::unique_ptr<Work>> sends;
    if (dst >= 0 && dst < n) {
      for (int k = 0; k < 3; ++k) sends.push_back(c->send(full(2, 10 * r + k, dt), dst, k));
    }
    if (src >= 0 && src < n) {
      for (int k = 0; k < 3; ++k) {
        Tensor in = full(2, -1, dt);
        c->recv(in, src, k)->wait();
        for (double v : values(in)) EXPECT_EQ(v, 10 * src + k) << "step " << step;
      }
    }
    for (auto& s : sends) s->wait();
  }
}

// all_to_all: rank r sends rank s (r + 2s) % 3 elements (some zero), element i of them 64r + 4s + i (exact in
// every dtype, u8 and bf16 included, up to 4 ranks).
std::int64_t a2a_count(int from, int to) {
  return (from + 2 * to) % 3;
}
double a2a_value(int from, int to, std::int64_t i) {
  return 64 * from + 4 * to + static_cast<double>(i);
}

TEST_P(NcclDTypes, AllToAllUnevenCountsNonBlockingAndBlocking) {
  const int n = c->size(), r = c->rank();
  const DType dt = GetParam();
  std::vector<std::int64_t> send, recv;
  std::vector<double> in, want;
  for (int s = 0; s < n; ++s) {
    send.push_back(a2a_count(r, s));
    recv.push_back(a2a_count(s, r));
    for (std::int64_t i = 0; i < a2a_count(r, s); ++i) in.push_back(a2a_value(r, s, i));
    for (std::int64_t i = 0; i < a2a_count(s, r); ++i) want.push_back(a2a_value(s, r, i));
  }
  EXPECT_EQ(c->all_to_all_counts(send), recv);  // over host()
  const Tensor input = from(in, dt);
  std::int64_t sent_elsewhere = 0;
  for (int s = 0; s < n; ++s) sent_elsewhere += s == r ? 0 : send[static_cast<std::size_t>(s)];
  for (bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "blocking" : "non-blocking");
    Tensor output = full(static_cast<std::int64_t>(want.size()), 7, dt);
    c->reset_traffic();
    CollectiveOptions o;
    o.blocking = blocking;
    o.context = "nccl all_to_all test";
    c->all_to_all(input, send, output, recv, o)->wait();
    EXPECT_EQ(values(output), want);
    EXPECT_EQ(c->traffic().all_to_all_bytes, sent_elsewhere * static_cast<std::int64_t>(dtype_size(dt)));
    EXPECT_EQ(c->traffic().calls, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, NcclDTypes,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64,
                                           DType::u8),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST_F(Nccl, Bf16ReducesWithF32Accumulation) {
  const int n = c->size();
  // 1 + (n−1)·2^-9: pairwise bf16 additions of 2^-9 to 1 would round away; f32 accumulation keeps them.
  Tensor t = full(1, c->rank() == 0 ? 1.0 : 0x1p-9, DType::bf16);
  c->all_reduce(t)->wait();
  EXPECT_EQ(values(t)[0], bf16_bits_to_float(double_to_bf16_bits(1.0 + (n - 1) * 0x1p-9)));
}

TEST_F(Nccl, RingShiftAfterConnect) {
  const int n = c->size(), r = c->rank();
  if (n < 2) GTEST_SKIP() << "point-to-point needs two ranks";
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Every rank sends before it receives: fine once the channels are connected.
  c->connect_p2p({next, prev});
  Tensor out = full(3, r, DType::f32), in = full(3, -1, DType::f32);
  auto s = c->send(out, next, 5);
  c->recv(in, prev, 5)->wait();
  s->wait();
  for (double v : values(in)) EXPECT_EQ(v, prev);
}

TEST_F(Nccl, TestReportsCompletionAndBarrierMeets) {
  Tensor t = full(1000, 1, DType::f32);
  auto w = c->all_reduce(t);
  while (!w->test()) {
  }
  w->wait();
  EXPECT_EQ(w->error(), "");
  EXPECT_EQ(values(t)[999], c->size());
  c->barrier();
  c->reset_traffic();
  Tensor u = full(5, 1, DType::f32);
  c->all_reduce(u, {ReduceOp::sum, 0, true})->wait();
  EXPECT_EQ(c->traffic().all_reduce_bytes, 20);
  EXPECT_EQ(c->traffic().calls, 1);
  // Host values go over host(), the MPI communicator of the same ranks.
  EXPECT_EQ(c->host()->rank(), c->rank());
  EXPECT_EQ(c->host()->all_reduce_scalar(1.0), c->size());
}

TEST_F(Nccl, SubgroupsFollowTheMesh) {
  const int n = c->size(), r = c->rank();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const Mesh mesh(n, 2, 1);
  auto tp = c->split(mesh.groups(GroupKind::tp), "tp");
  auto dp = c->split(mesh.groups(GroupKind::dp), "dp");
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(dp->size(), n / 2);
  EXPECT_NE(tp->name().find("tp group ["), std::string::npos) << tp->name();
  Tensor t = full(1, r, DType::f64);
  tp->all_reduce(t)->wait();
  const int base = r / 2 * 2;
  EXPECT_EQ(values(t)[0], base + base + 1);
  EXPECT_EQ(std::static_pointer_cast<NcclCommunicator>(tp)->host()->all_reduce_scalar(r), base + base + 1);
  Tensor d = full(2, r, DType::i64);
  dp->all_reduce(d, {ReduceOp::max})->wait();
  EXPECT_EQ(values(d)[0], n - 2 + r % 2);
  // Point-to-point inside the subgroup uses its numbering.
  Tensor x = full(2, tp->rank() == 0 ? r : -1, DType::f32);
  if (tp->rank() == 0) {
    tp->send(x, 1)->wait();
  } else {
    tp->recv(x, 0)->wait();
    EXPECT_EQ(values(x)[0], r - 1);
  }
  tp->barrier();
  dp->barrier();
}

TEST_F(Nccl, MisuseIsAClearError) {
  // Host tensors go over the MPI twin; mixing host and GPU tensors in one call is refused.
  const int n = c->size();
  Tensor host = Tensor::full({4}, c->rank() + 1.0);
  c->all_reduce(host)->wait();
  EXPECT_EQ(host.to_vector<float>(), std::vector<float>(4, static_cast<float>(n * (n + 1) / 2)));
  EXPECT_EQ(c->all_reduce_scalar(1.0), n);
  Tensor host_in = Tensor::zeros({4 * n}), gpu_out = full(4, 0, DType::f32);
  std::string m = testing::error_message([&] { c->reduce_scatter(host_in, gpu_out); });
  EXPECT_NE(m.find("reduce_scatter on world"), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("f32[{}] on cpu", 4 * n)), std::string::npos) << m;
  if (kc::device_count() > 1) {
    Tensor other = Tensor::zeros({4}, DType::f32, Device::cuda((c->device() + 1) % kc::device_count()));
    m = testing::error_message([&] { c->broadcast(other, 0); });
    EXPECT_NE(m.find("broadcast on world"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("cuda:{}", c->device())), std::string::npos) << m;
  }
  Tensor in = full(3, 0, DType::f32), out = full(2, 0, DType::f32);
  EXPECT_THROW(c->reduce_scatter(in, out), Error);
  Tensor gathered = full(3 * c->size() + 1, 0, DType::f32);
  EXPECT_THROW(c->all_gather(in, gathered), Error);
  Tensor bits = full(2, 0, DType::u16);
  m = testing::error_message([&] { c->all_reduce(bits); });
  EXPECT_NE(m.find("cannot reduce u16"), std::string::npos) << m;
  Tensor ints = full(2, 0, DType::i32);
  EXPECT_THROW(c->all_reduce(ints, {ReduceOp::avg}), Error);
  EXPECT_THROW(c->send(in, c->rank()), Error);
  c->barrier();  // every rank is back in step
}

TEST_F(Nccl, AllToAllOnASubgroupAndItsErrors) {
  const int n = c->size(), r = c->rank();
  // Even and odd ranks ({0, 2}, {1, 3} at 4 ranks): the subgroup's numbering.
  std::vector<std::vector<int>> groups(2);
  for (int i = 0; i < n; ++i) groups[static_cast<std::size_t>(i % 2)].push_back(i);
  if (groups[1].empty()) groups.pop_back();
  auto ep = c->split(groups, "ep");
  const int m = ep->size(), e = ep->rank();
  std::vector<std::int64_t> send;
  std::vector<double> in, want;
  for (int s = 0; s < m; ++s) {
    send.push_back(s + 1);  // s + 1 elements to rank s, valued 10e + s
    for (int i = 0; i <= s; ++i) in.push_back(10 * e + s);
    for (int i = 0; i <= e; ++i) want.push_back(10 * s + e);
  }
  const auto recv = ep->all_to_all_counts(send);
  EXPECT_EQ(recv, std::vector<std::int64_t>(static_cast<std::size_t>(m), e + 1));
  Tensor output = full(static_cast<std::int64_t>(want.size()), -1, DType::f32);
  ep->all_to_all(from(in, DType::f32), send, output, recv)->wait();
  EXPECT_EQ(values(output), want);
  // Host tensors go over host(); mixing host and GPU tensors, wrong count vectors and sums are refused
  // (every rank alike, before anything is sent).
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(n), 1);
  Tensor host_in = Tensor::full({n}, r), host_out = Tensor::zeros({n});
  c->all_to_all(host_in, ones, host_out, ones)->wait();
  for (int s = 0; s < n; ++s) EXPECT_EQ(host_out.to_vector<float>()[static_cast<std::size_t>(s)], s);
  Tensor gpu_out = full(n, 0, DType::f32);
  std::string msg = testing::error_message([&] { c->all_to_all(host_in, ones, gpu_out, ones); });
  EXPECT_NE(msg.find("all_to_all on world"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on cpu"), std::string::npos) << msg;
  const Tensor gpu_in = full(n, 0, DType::f32);
  msg = testing::error_message(
      [&] { c->all_to_all(gpu_in, std::vector<std::int64_t>(static_cast<std::size_t>(n + 1), 0), gpu_out, ones); });
  EXPECT_NE(msg.find(fmt::format("send_counts has {} entries, expected {}", n + 1, n)), std::string::npos) << msg;
  std::vector<std::int64_t> more = ones;
  more[0] = 2;
  msg = testing::error_message([&] { c->all_to_all(gpu_in, ones, gpu_out, more); });
  EXPECT_NE(msg.find(fmt::format("recv_counts sum to {}, but output", n + 1)), std::string::npos) << msg;
  ep->barrier();
  c->barrier();  // every rank is back in step
}

TEST(NcclWithoutGpu, CreationIsAClearError) {
  if (gpu_setup().usable || kc::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  try {
    (void)NcclCommunicator::create(world(), 0);
    FAIL() << "created an NCCL communicator without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("NcclCommunicator on world: no CUDA GPU"), std::string::npos) << e.message();
  }
}

// --- the point-to-point rules against every pipeline schedule (no GPU needed) ---
//
// NcclCommunicator's promise, as a model: transfers from a to b match in issue
// order; a recv waits for its send to be issued; a rank's first send to b waits
// until b has reached its first recv from a (the channel is made then); later
// sends never wait. Messages are named as the executor tags them (executor.cpp).

namespace pp = parallel::pipeline;

struct Transfer {
  bool send = false;
  int peer = 0;
  int micro_batch = 0, from_virtual_stage = 0;
  bool backward = false;
  bool same_message(const Transfer& o) const {
    return micro_batch == o.micro_batch && from_virtual_stage == o.from_virtual_stage && backward == o.backward;
  }
};

std::vector<Transfer> transfers(const std::vector<pp::Instruction>& list, int p, int rank) {
  std::vector<Transfer> out;
  const int next = (rank + 1) % p, prev = (rank + p - 1) % p;
  for (const pp::Instruction& i : list) {
    const int k = i.chunk * p + rank;
    switch (i.op) {
      case pp::Op::send_forward: out.push_back({true, next, i.micro_batch, k, false}); break;
      case pp::Op::recv_forward: out.push_back({false, prev, i.micro_batch, k - 1, false}); break;
      case pp::Op::send_backward: out.push_back({true, prev, i.micro_batch, k, true}); break;
      case pp::Op::recv_backward: out.push_back({false, next, i.micro_batch, k + 1, true}); break;
      default: break;
    }
  }
  return out;
}

// "" when the p lists run to their ends with every recv getting its own message.
std::string simulate(const std::vector<std::vector<Transfer>>& lists) {
  const int p = static_cast<int>(lists.size());
  std::vector<std::size_t> at(static_cast<std::size_t>(p), 0);
  std::map<std::pair<int, int>, std::vector<Transfer>> sent;  // (a, b) → sends issued by a to b
  std::map<std::pair<int, int>, std::size_t> received;
  const auto reached_first_recv = [&](int b, int a) {  // has b reached its first recv from a?
    for (std::size_t j = 0; j < lists[static_cast<std::size_t>(b)].size(); ++j) {
      const Transfer& t = lists[static_cast<std::size_t>(b)][j];
      if (!t.send && t.peer == a) return at[static_cast<std::size_t>(b)] >= j;
    }
    return false;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = lists[static_cast<std::size_t>(r)];
      std::size_t& pc = at[static_cast<std::size_t>(r)];
      while (pc < list.size()) {
        const Transfer& t = list[pc];
        if (t.send) {
          auto& q = sent[{r, t.peer}];
          if (q.empty() && !reached_first_recv(t.peer, r)) break;
          q.push_back(t);
        } else {
          const auto& q = sent[{t.peer, r}];
          std::size_t& k = received[{t.peer, r}];
          if (q.size() <= k) break;
          if (!q[k].same_message(t)) {
            return fmt::format("rank {}'s recv #{} from {} would get mb {} of virtual stage {} instead of mb {} of {}",
                               r, k, t.peer, q[k].micro_batch, q[k].from_virtual_stage, t.micro_batch,
                               t.from_virtual_stage);
          }
          ++k;
        }
        ++pc;
        moved = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (at[static_cast<std::size_t>(r)] < lists[static_cast<std::size_t>(r)].size()) {
      return fmt::format("deadlock: rank {} waits at transfer {} of {}", r, at[static_cast<std::size_t>(r)],
                         lists[static_cast<std::size_t>(r)].size());
    }
  }
  return "";
}

TEST(NcclPointToPointRules, EveryPipelineScheduleRunsAndMatches) {
  int checked = 0;
  for (const pp::Schedule s : {pp::Schedule::gpipe, pp::Schedule::one_f_one_b, pp::Schedule::interleaved}) {
    for (int p = 2; p <= 6; ++p) {
      for (int v = 1; v <= 3; ++v) {
        for (int m = 1; m <= 12; ++m) {
          if ((s == pp::Schedule::interleaved) != (v > 1) || (s == pp::Schedule::interleaved && m % p != 0)) continue;
          const pp::ScheduleOptions o{p, m, v};
          for (const bool forward_only : {false, true}) {
            std::vector<std::vector<Transfer>> lists;
            for (int r = 0; r < p; ++r) {
              lists.push_back(transfers(forward_only ? pp::build_forward_only(o, r) : pp::build(s, o, r), p, r));
            }
            const std::string error = simulate(lists);
            EXPECT_EQ(error, "") << pp::schedule_name(s) << " p=" << p << " v=" << v << " m=" << m
                                 << (forward_only ? " (forward only)" : "");
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// With one in-order stream per pair of ranks (both directions), the k-th
// transfers of a and b with each other must be a send and a recv, or both wait
// forever.
bool one_stream_per_pair_deadlocks(const std::vector<std::vector<Transfer>>& lists) {
  const int p = static_cast<int>(lists.size());
  for (int a = 0; a < p; ++a) {
    for (int b = a + 1; b < p; ++b) {
      std::vector<bool> from_a, from_b;  // send?
      for (const Transfer& t : lists[static_cast<std::size_t>(a)])
        if (t.peer == b) from_a.push_back(t.send);
      for (const Transfer& t : lists[static_cast<std::size_t>(b)])
        if (t.peer == a) from_b.push_back(t.send);
      for (std::size_t k = 0; k < std::min(from_a.size(), from_b.size()); ++k)
        if (from_a[k] == from_b[k]) return true;
    }
  }
  return false;
}

TEST(NcclPointToPointRules, OneStreamPerPairWouldDeadlockOneFOneB) {
  // Why each direction has its own channel: in 1F1B both neighbours send before they receive.
  const pp::ScheduleOptions o{2, 4, 1};
  std::vector<std::vector<Transfer>> lists;
  for (int r = 0; r < 2; ++r) lists.push_back(transfers(pp::build(pp::Schedule::one_f_one_b, o, r), 2, r));
  EXPECT_TRUE(one_stream_per_pair_deadlocks(lists));
  EXPECT_EQ(simulate(lists), "");
}

}  // namespace
}  // namespace trident::dist
