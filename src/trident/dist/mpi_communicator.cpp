#include "trident/dist/mpi_communicator.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <csignal>
#include <mutex>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>

#include "trident/core/convert.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/dist/done_work.h"
#include "trident/dist/flight_recorder.h"
#include "trident/dist/launcher.h"
#include "trident/dist/self_communicator.h"
#include "trident/dist/watchdog.h"
#include "trident/ops/elementwise.h"

namespace trident::dist {

namespace {

#define MPI_CHECK(call)                                                                          \
  do {                                                                                           \
    const int mpi_rc_ = (call);                                                                  \
    if (mpi_rc_ != MPI_SUCCESS) {                                                                \
      char mpi_msg_[MPI_MAX_ERROR_STRING];                                                       \
      int mpi_len_ = 0;                                                                          \
      MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                            \
      TRIDENT_FAIL("{} failed on {}: {}", #call, ::trident::host_name(), std::string(mpi_msg_, mpi_len_)); \
    }                                                                                            \
  } while (0)

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::u16: return MPI_UINT16_T;
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; reduced through f32
    case DType::f16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

bool widened(DType d) { return d == DType::bf16 || d == DType::f16; }

int count_of(const Tensor& t, const std::string& what) {
  TRIDENT_CHECK(t.numel() <= INT_MAX, "{}: {} elements exceed MPI's count limit", what, t.numel());
  return static_cast<int>(t.numel());
}

// A pending MPI request with a deadline and a completion step.
class MpiWork final : public Work {
 public:
  MpiWork(flight::Call call, flight::Ticket ticket, double timeout_s, std::function<void()> on_complete = {})
      : call_(std::move(call)), timeout_s_(timeout_s), on_complete_(std::move(on_complete)),
        start_(std::chrono::steady_clock::now()), ticket_(ticket) {}
  MPI_Request* request() { return &request_; }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    const int rc = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      error_ = fmt::format("{} failed: {}", flight::describe(call_), std::string(msg, len));
      done_ = true;
      return true;
    }
    if (flag) {
      done_ = true;
      flight::finished(ticket_);
      if (on_complete_) on_complete_();
    }
    return done_;
  }

  void wait() override {
    // Poll MPI_Test: yielding the CPU for the first 100 ms (cheap when
    // nothing else wants the core, fair when ranks outnumber cores), then sleeping with
    // back-off so a long wait for a slow peer costs no CPU.
    auto sleep = std::chrono::microseconds(50);
    const auto entered = std::chrono::steady_clock::now();
    struct Count {  // the time blocked here, however the wait ends
      std::chrono::steady_clock::time_point from;
      ~Count() { add_blocked_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count()); }
    } count{entered};
    bool noted = false;
    while (!test()) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (timeout_s_ > 0 && !noted && waited > timeout_s_ / 2) {
        flight::note_waiting(ticket_);
        noted = true;
      }
      if (timeout_s_ > 0 && waited > timeout_s_) {
        const std::string peers = flight::peers(ticket_, peer_wait_s(timeout_s_));
        error_ = fmt::format("{} timed out after {:.0f} s (a peer rank is stuck, dead or did not call it){}; this "
                             "rank's last collectives, oldest first:\n  {}",
                             flight::describe(call_), timeout_s_, peers, fmt::join(flight::report(), "\n  "));
        throw CollectiveTimeout(error_, fmt::format("{}:{}", __FILE__, __LINE__));
      }
      if (waited < 0.1) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
      }
    }
    TRIDENT_CHECK(error_.empty(), "{}", error_);
  }

  std::string error() const override { return error_; }

 private:
  flight::Call call_;
  double timeout_s_;
  std::function<void()> on_complete_;
  std::chrono::steady_clock::time_point start_;
  flight::Ticket ticket_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
  std::string error_;
};

// More ranks on this node than cores. MPI libraries wait in their blocking calls by polling, and
// MPICH (ch4) does so without ever yielding the core: with 8 ranks on 2 cores a rank spinning in
// MPI_Allreduce takes the core from the peer it waits for (tensor-parallel training measured 7×
// slower than Open MPI, whose mpi_yield_when_idle yields). Oversubscribed, a blocking collective
// therefore runs as its non-blocking form under MpiWork::wait, which yields and then sleeps.
bool ranks_outnumber_cores() {
  static const bool outnumber = local_rank_count() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return outnumber;
}

// Whether a collective the caller waits for at once uses MPI's blocking call (see above).
bool blocking(const CollectiveOptions& o) { return o.blocking && !ranks_outnumber_cores(); }

class MpiCommunicator final : public Communicator {
 public:
  // `world_ranks`: the members' ranks in the job (empty: this is the world).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s, std::vector<int> world_ranks = {})
      : comm_(comm), name_(std::move(name)), timeout_s_(timeout_s) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    if (world_ranks.empty()) {
      world_ranks.resize(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) world_ranks[static_cast<std::size_t>(r)] = r;
    }
    set_world_ranks(std::move(world_ranks));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  std::unique_ptr<Work> all_reduce(Tensor& tensor, const CollectiveOptions& o) override {
    check_host(tensor, "all_reduce");
    traffic_.all_reduce_bytes += static_cast<std::int64_t>(tensor.nbytes());
    ++traffic_.calls;
    Tensor buffer = widened(tensor.dtype()) ? tensor.to(DType::f32) : tensor;
    TRIDENT_CHECK(o.op != ReduceOp::avg || is_floating(tensor.dtype()), "all_reduce avg on {} needs a floating dtype",
                  tensor.describe());
    Tensor target = tensor;
    const int n = size_;
    auto finish = [buffer, target, o, n]() mutable {
      if (o.op == ReduceOp::avg) ops::scale_(buffer, 1.0 / n);
      if (!buffer.is_same(target)) target.copy_from(buffer.to(target.dtype()));
    };
    if (blocking(o)) {
      return run_blocking("all_reduce", buffer.nbytes(), o, [&] {
        return MPI_Allreduce(MPI_IN_PLACE, buffer.raw_data(), count_of(buffer, "all_reduce"), mpi_type(buffer.dtype()),
                             mpi_op(o.op), comm_);
      }, finish);
    }
    auto work = make_work("all_reduce", buffer.nbytes(), o, finish);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer.raw_data(), count_of(buffer, "all_reduce"), mpi_type(buffer.dtype()),
                             mpi_op(o.op), comm_, work->request()));
    return waited(std::move(work), o);
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output, const CollectiveOptions& o) override {
    check_host(input, "reduce_scatter");
    check_host(output, "reduce_scatter");
    TRIDENT_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() * size_,
                  "reduce_scatter on {}: input {} must hold {} chunks the size of output {}", name_, input.describe(),
                  size_, output.describe());
    traffic_.reduce_scatter_bytes += static_cast<std::int64_t>(input.nbytes());
    ++traffic_.calls;
    Tensor in = widened(input.dtype()) ? input.to(DType::f32) : input;
    Tensor out = widened(output.dtype()) ? Tensor::empty(output.shape(), DType::f32) : output;
    Tensor target = output;
    const int n = size_;
    auto finish = [in, out, target, o, n]() mutable {
      if (o.op == ReduceOp::avg) ops::scale_(out, 1.0 / n);
      if (!out.is_same(target)) target.copy_from(out.to(target.dtype()));
    };
    if (blocking(o)) {
      return run_blocking("reduce_scatter", in.nbytes(), o, [&] {
        return MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), count_of(out, "reduce_scatter"),
                                        mpi_type(out.dtype()), mpi_op(o.op), comm_);
      }, finish);
    }
    auto work = make_work("reduce_scatter", in.nbytes(), o, finish);
    MPI_CHECK(MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(), count_of(out, "reduce_scatter"),
                                        mpi_type(out.dtype()), mpi_op(o.op), comm_, work->request()));
    return waited(std::move(work), o);
  }

  std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, const CollectiveOptions& o) override {
    check_host(input, "all_gather");
    check_host(output, "all_gather");
    TRIDENT_CHECK(input.dtype() == output.dtype() && output.numel() == input.numel() * size_,
                  "all_gather on {}: output {} must hold {} copies of input {}", name_, output.describe(), size_,
                  input.describe());
    traffic_.all_gather_bytes += static_cast<std::int64_t>(output.nbytes());
    ++traffic_.calls;
    Tensor in = input, out = output;
    if (blocking(o)) {
      return run_blocking("all_gather", out.nbytes(), o, [&] {
        return MPI_Allgather(in.raw_data(), count_of(in, "all_gather"), mpi_type(in.dtype()), out.raw_data(),
                             count_of(in, "all_gather"), mpi_type(in.dtype()), comm_);
      });
    }
    auto work = make_work("all_gather", out.nbytes(), o, [in, out] {});
    MPI_CHECK(MPI_Iallgather(in.raw_data(), count_of(in, "all_gather"), mpi_type(in.dtype()), out.raw_data(),
                             count_of(in, "all_gather"), mpi_type(in.dtype()), comm_, work->request()));
    return waited(std::move(work), o);
  }

  std::unique_ptr<Work> broadcast(Tensor& tensor, int root, const CollectiveOptions& o) override {
    check_host(tensor, "broadcast");
    TRIDENT_CHECK(root >= 0 && root < size_, "broadcast on {}: root {} outside the group of {}", name_, root, size_);
    traffic_.broadcast_bytes += static_cast<std::int64_t>(tensor.nbytes());
    ++traffic_.calls;
    Tensor t = tensor;
    auto work = make_work("broadcast", t.nbytes(), o, [t] {});
    MPI_CHECK(MPI_Ibcast(t.raw_data(), count_of(t, "broadcast"), mpi_type(t.dtype()), root, comm_, work->request()));
    return work;
  }

  std::unique_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& o) override {
    check_host(tensor, "send");
    TRIDENT_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send on {}: bad destination {}", name_, dst);
    traffic_.send_bytes += static_cast<std::int64_t>(tensor.nbytes());
    ++traffic_.calls;
    Tensor t = tensor;
    auto work = make_work(fmt::format("send to {} (tag {})", dst, tag), t.nbytes(), o, [t] {});
    MPI_CHECK(MPI_Isend(t.raw_data(), count_of(t, "send"), mpi_type(t.dtype()), dst, tag, comm_, work->request()));
    return work;
  }

  std::unique_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& o) override {
    check_host(tensor, "recv");
    TRIDENT_CHECK(src >= 0 && src < size_ && src != rank_, "recv on {}: bad source {}", name_, src);
    traffic_.recv_bytes += static_cast<std::int64_t>(tensor.nbytes());
    ++traffic_.calls;
    Tensor t = tensor;
    auto work = make_work(fmt::format("recv from {} (tag {})", src, tag), t.nbytes(), o, [t] {});
    MPI_CHECK(MPI_Irecv(t.raw_data(), count_of(t, "recv"), mpi_type(t.dtype()), src, tag, comm_, work->request()));
    return work;
  }

  void barrier(const CollectiveOptions& o) override {
    if (!ranks_outnumber_cores()) {
      run_blocking("barrier", 0, o, [&] { return MPI_Barrier(comm_); });
      return;
    }
    auto work = make_work("barrier", 0, o, [] {});
    MPI_CHECK(MPI_Ibarrier(comm_, work->request()));
    work->wait();
  }

  std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts, Tensor& output,
                                   const std::vector<std::int64_t>& recv_counts, const CollectiveOptions& o) override {
    check_all_to_all(input, send_counts, output, recv_counts);
    check_host(input, "all_to_all");
    check_host(output, "all_to_all");
    // MPI_Alltoallv takes int counts and displacements (the large-count MPI_Alltoallv_c is MPI 4.0).
    TRIDENT_CHECK(input.numel() <= INT_MAX && output.numel() <= INT_MAX,
                  "all_to_all on {}: input {} or output {} exceeds MPI's int count limit of {} elements (split the "
                  "exchange)",
                  name_, input.describe(), output.describe(), INT_MAX);
    // Send counts, send displacements, receive counts, receive displacements, side by side. The blocking
    // form (what nn::MoE uses, per layer and step) keeps them on the stack up to 64 ranks; the non-blocking
    // one holds them with the tensors until the operation completes.
    const auto n = static_cast<std::size_t>(size_);
    constexpr std::size_t kStackRanks = 64;
    std::array<int, 4 * kStackRanks> stack_layout;
    std::shared_ptr<std::vector<int>> heap_layout;
    int* sc = stack_layout.data();
    if (!blocking(o) || n > kStackRanks) {
      heap_layout = std::make_shared<std::vector<int>>(4 * n);
      sc = heap_layout->data();
    }
    int* const sd = sc + n;
    int* const rc = sc + 2 * n;
    int* const rd = sc + 3 * n;
    int send_offset = 0, recv_offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);  // each count <= its tensor's numel <= INT_MAX
      rc[r] = static_cast<int>(recv_counts[r]);
      sd[r] = send_offset;
      rd[r] = recv_offset;
      send_offset += sc[r];
      recv_offset += rc[r];
    }
    traffic_.all_to_all_bytes += all_to_all_sent_bytes(input, send_counts);
    ++traffic_.calls;
    const MPI_Datatype type = mpi_type(input.dtype());
    if (blocking(o)) {
      return run_blocking("all_to_all", input.nbytes(), o, [&] {
        return MPI_Alltoallv(input.raw_data(), sc, sd, type, output.raw_data(), rc, rd, type, comm_);
      });
    }
    Tensor in = input, out = output;
    auto work = make_work("all_to_all", in.nbytes(), o, [in, out, heap_layout] {});
    MPI_CHECK(MPI_Ialltoallv(in.raw_data(), sc, sd, type, out.raw_data(), rc, rd, type, comm_, work->request()));
    return waited(std::move(work), o);
  }

  std::shared_ptr<Communicator> split(const std::vector<std::vector<int>>& groups, const std::string& label) override {
    int color = -1, key = 0;
    std::vector<int> mine;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (std::size_t i = 0; i < groups[g].size(); ++i) {
        if (groups[g][i] == rank_) {
          TRIDENT_CHECK(color < 0, "split of {}: rank {} appears in two {} groups", name_, rank_, label);
          color = static_cast<int>(g);
          key = static_cast<int>(i);
          mine = groups[g];
        }
      }
    }
    TRIDENT_CHECK(color >= 0, "split of {}: rank {} is in no {} group", name_, rank_, label);
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    MPI_CHECK(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN));
    std::vector<int> world_ranks;
    for (int m : mine) world_ranks.push_back(group()->world_ranks[static_cast<std::size_t>(m)]);
    return std::make_shared<MpiCommunicator>(sub, fmt::format("{} group [{}]", label, fmt::join(mine, ", ")),
                                             timeout_s_, std::move(world_ranks));
  }

 private:
  void check_host(const Tensor& t, const char* op) const {
    check_defined(t, op, "tensor");
    TRIDENT_CHECK(t.device().is_cpu(), "{} on {}: MpiCommunicator moves CPU tensors, got {}", op, name_,
                  t.describe());
  }
  // Runs a blocking MPI call under the watchdog, then the completion step.
  // `call` returns the MPI status; `done` runs after it succeeds. Templates rather than std::function: the
  // call captures its arguments by reference, more than std::function holds without a heap allocation, and
  // this path is what a 64 KiB MoE all-to-all pays on every layer (bench/RESULTS.md, "Uneven all-to-all").
  // The clock is read twice per call: the start serves the flight recorder, the watchdog and the blocked time.
  template <typename Call, typename Done = std::nullptr_t>
  std::unique_ptr<Work> run_blocking(std::string_view op, std::int64_t bytes, const CollectiveOptions& o,
                                     const Call& call, Done&& done = nullptr) {
    // A call that outlives its deadline prints the line a timed-out Work would throw and ends the process,
    // which brings the job down (mpirun and srun end every rank when one exits).
    Watchdog& w = Watchdog::instance();
    const auto entered = std::chrono::steady_clock::now();
    const flight::Ticket ticket = flight::record(next_call(op, o, bytes), entered);
    w.arm_call(ticket, o.timeout_s > 0 ? o.timeout_s : timeout_s_, entered);
    const int rc = call();
    const auto left = std::chrono::steady_clock::now();
    add_blocked_seconds(std::chrono::duration<double>(left - entered).count());
    w.disarm();
    flight::finished(ticket, left);
    MPI_CHECK(rc);
    if constexpr (!std::is_same_v<std::decay_t<Done>, std::nullptr_t>) done();
    return std::make_unique<DoneWork>();
  }

  // A non-blocking operation run for a caller that asked for a blocking one (ranks outnumber cores):
  // complete on return, as a blocking call's Work is.
  static std::unique_ptr<Work> waited(std::unique_ptr<MpiWork> work, const CollectiveOptions& o) {
    if (o.blocking) work->wait();
    return work;
  }

  std::unique_ptr<MpiWork> make_work(std::string_view op, std::int64_t bytes, const CollectiveOptions& o,
                                     std::function<void()> done) {
    flight::Call call = next_call(op, o, bytes);
    const flight::Ticket ticket = flight::record(call);
    return std::make_unique<MpiWork>(std::move(call), ticket, o.timeout_s > 0 ? o.timeout_s : timeout_s_,
                                     std::move(done));
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_s_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

double Communicator::all_reduce_scalar(double value, ReduceOp op) {
  Tensor t = Tensor::full(Shape{1}, value, DType::f64);
  all_reduce(t, CollectiveOptions{op, 0, true})->wait();
  return t.item();
}

std::string Communicator::broadcast_text(const std::string& text, int root) {
  const bool is_root = rank() == root;
  const auto bytes = static_cast<std::int64_t>(
      all_reduce_scalar(is_root ? static_cast<double>(text.size()) : 0.0, ReduceOp::max));
  if (bytes == 0) return "";
  Tensor buffer = Tensor::zeros(Shape{bytes}, DType::u8);
  auto* chars = buffer.data<std::uint8_t>();
  if (is_root) std::copy(text.begin(), text.end(), chars);
  broadcast(buffer, root, CollectiveOptions{ReduceOp::sum, 0, true})->wait();
  return std::string(chars, chars + bytes);
}

int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(v); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return -1;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

namespace {
// The tasks of this srun step (0 outside one).
int srun_step_tasks() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  return tasks != nullptr && std::getenv("SLURM_STEP_ID") != nullptr ? std::atoi(tasks) : 0;
}

// The srun plug-in that starts ranks of the linked library, and the advice for one that did not.
std::string srun_plugin_advice() {
  const char* plugin = Launcher(mpi_family_of(mpi_library_version())).srun_plugin();
  return fmt::format("run srun --mpi={} (or set SLURM_MPI_TYPE={})", plugin, plugin);
}
}  // namespace

bool srun_task_without_mpi() { return !launched_by_mpi() && srun_step_tasks() > 1; }

std::shared_ptr<Communicator> job_world(double timeout_s) {
  if (launched_by_mpi()) return mpi_world(timeout_s);
  TRIDENT_CHECK(!srun_task_without_mpi(),
                "srun started {} tasks without an MPI plug-in (SLURM_MPI_TYPE={}), so each would train alone as a job "
                "of one rank; {}",
                srun_step_tasks(), std::getenv("SLURM_MPI_TYPE") != nullptr ? std::getenv("SLURM_MPI_TYPE") : "none",
                srun_plugin_advice());
  return self_communicator();
}

namespace {
// Reserved for agree_on_failure: ranks that fail meet here, never on a communicator a healthy rank
// may be using (collectives on one communicator must come in the same order on every rank).
MPI_Comm g_failure_comm = MPI_COMM_NULL;
// Set when MPI_Init (started by agree_on_failure) did not return in time: MPI must not be called.
std::atomic<bool> g_mpi_unusable{false};
}  // namespace

namespace {
// srun starts every task itself; its --mpi plugin must speak the MPI library's process-management
// interface, or each task sees a job of its own and N copies train alone. That is refused at once.
void check_srun_plugin() {
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (tasks == nullptr || std::atoi(tasks) <= 1 || std::getenv("SLURM_STEP_ID") == nullptr) return;
  // mpirun or mpiexec started this rank: inside an allocation their daemons run as an srun step, whose
  // task count is theirs (one per host), not the job's.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("MPI_LOCALNRANKS") != nullptr) return;
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size != 1) return;
  const char* given = std::getenv("SLURM_MPI_TYPE");
  TRIDENT_FAIL("srun started {} tasks, but each sees a job of one rank: srun's --mpi plugin{} does not start ranks of "
               "the MPI library trident is built against ({}); {}",
               tasks, given != nullptr ? fmt::format(" ({})", given) : std::string(), mpi_library_version(),
               srun_plugin_advice());
}
}  // namespace

std::shared_ptr<Communicator> mpi_world(double timeout_s) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  }
  check_srun_plugin();
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  if (g_failure_comm == MPI_COMM_NULL) {
    // Collective on the world, the first time on every rank (mpi_world is where each rank meets MPI).
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_failure_comm));
    MPI_CHECK(MPI_Comm_set_errhandler(g_failure_comm, MPI_ERRORS_RETURN));
    // For the flight recorder's peer check: every rank's host, and a token that tells this job's notes
    // from an earlier job's (rank 0's clock and pid).
    int rank = 0, size = 1;
    MPI_CHECK(MPI_Comm_rank(g_failure_comm, &rank));
    MPI_CHECK(MPI_Comm_size(g_failure_comm, &size));
    constexpr int kHostBytes = 64;
    std::vector<char> mine(kHostBytes, '\0'), all(static_cast<std::size_t>(kHostBytes) * static_cast<std::size_t>(size));
    std::memcpy(mine.data(), host_name().data(), std::min<std::size_t>(host_name().size(), kHostBytes - 1));
    MPI_CHECK(MPI_Allgather(mine.data(), kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR, g_failure_comm));
    std::uint64_t token = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
                          (static_cast<std::uint64_t>(getpid()) << 40);
    MPI_CHECK(MPI_Bcast(&token, 1, MPI_UINT64_T, 0, g_failure_comm));
    std::vector<std::string> hosts;
    for (int r = 0; r < size; ++r) {
      const char* h = all.data() + static_cast<std::size_t>(r) * kHostBytes;
      hosts.emplace_back(h, strnlen(h, kHostBytes));
    }
    flight::set_job(rank, token, std::move(hosts));
  }
  auto world = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, "world", timeout_s);
  set_error_rank(world->rank());
  return world;
}

void abort_job(int exit_code) {
  if (g_mpi_unusable) std::_Exit(exit_code);  // the launcher ends the job on this exit status
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

namespace {
// Polls `request` until it completes (true) or `deadline` passes (false; the request stays pending).
bool complete_by(MPI_Request& request, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int flag = 0;
    if (MPI_Test(&request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (flag) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// FNV-1a: the same on every rank and host, unlike std::hash.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

namespace {
FailureAgreement agree_on_started_mpi(std::string_view message, double window_s);
}  // namespace

namespace {
// The line a rank waiting in agree_on_failure prints if the launcher ends the job first (SIGTERM).
char g_last_words[2048];
std::size_t g_last_words_size = 0;
volatile int g_last_words_status = 1;
extern "C" void on_term_while_agreeing(int) {
  (void)!::write(STDERR_FILENO, g_last_words, g_last_words_size);
  ::_exit(g_last_words_status);
}
}  // namespace

void set_last_words(std::string_view line, int exit_code) {
  g_last_words_size = std::min(line.size(), sizeof(g_last_words));
  std::memcpy(g_last_words, line.data(), g_last_words_size);
  g_last_words_status = exit_code;
  std::signal(SIGTERM, on_term_while_agreeing);
}

FailureAgreement agree_on_failure(std::string_view message, double window_s) {
  if (!launched_by_mpi()) return {};
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return {false, true, true};
  if (!initialized) {
    // Failed before meeting MPI (command line, config file). The ranks of a command that uses MPI
    // start it in mpi_world, so this one starts it too and they can meet. But the others may never
    // start it (a command without MPI), and MPI_Init would then wait for them forever: it runs in a
    // thread of its own, and a rank whose MPI_Init has not returned in time reports alone.
    struct State {
      std::mutex mutex;
      std::condition_variable done_cv;
      bool done = false;
      FailureAgreement result{false, true, true};
    };
    auto state = std::make_shared<State>();
    std::thread([state, text = std::string(message), window_s] {
      FailureAgreement r{false, true, true};
      try {
        int provided = 0;
        // SERIALIZED: this thread starts MPI, the main thread may finalize it afterwards.
        if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS) {
          (void)mpi_world();
          r = agree_on_started_mpi(text, window_s);
        }
      } catch (const Error&) {
      }
      std::lock_guard<std::mutex> lock(state->mutex);
      state->result = r;
      state->done = true;
      state->done_cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(state->mutex);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(window_s + 10.0));
    if (!state->done_cv.wait_until(lock, deadline, [&] { return state->done; })) {
      g_mpi_unusable = true;
      return {false, true, true};
    }
    return state->result;
  }
  return agree_on_started_mpi(message, window_s);
}

namespace {
FailureAgreement agree_on_started_mpi(std::string_view message, double window_s) {
  if (g_failure_comm == MPI_COMM_NULL) return {false, true, true};  // MPI started by someone else
  int rank = 0, size = 1;
  MPI_Comm_rank(g_failure_comm, &rank);
  MPI_Comm_size(g_failure_comm, &size);
  if (size == 1) return {};
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(window_s));
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(g_failure_comm, &barrier) != MPI_SUCCESS || !complete_by(barrier, deadline)) {
    return {false, true, true};
  }
  // Every rank failed. The same message everywhere? (max of h and of ~h: both are this rank's only
  // when every rank has the same h.)
  const std::uint64_t h = fnv1a(message);
  std::uint64_t mine[2] = {h, ~h}, most[2] = {0, 0};
  MPI_Request reduce = MPI_REQUEST_NULL;
  const auto reduce_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  if (MPI_Iallreduce(mine, most, 2, MPI_UINT64_T, MPI_MAX, g_failure_comm, &reduce) != MPI_SUCCESS ||
      !complete_by(reduce, reduce_deadline)) {
    return {false, true, true};
  }
  const bool same = most[0] == h && most[1] == ~h;
  return {true, !same || rank == 0, !same};
}
}  // namespace

void finalize_and_exit(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_mpi_unusable) std::_Exit(exit_code);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // A finalize that waits forever on a peer must not become the hang it was meant to avoid.
    std::thread([exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      std::_Exit(exit_code);
    }).detach();
    MPI_Finalize();
  }
  std::_Exit(exit_code);
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  std::string v(buf, static_cast<std::size_t>(len));
  if (auto nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);
  std::replace(v.begin(), v.end(), '\t', ' ');  // "MPICH Version:\t4.0.2"
  v.erase(std::unique(v.begin(), v.end(), [](char a, char b) { return a == ' ' && b == ' '; }), v.end());
  return v;
}

void finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace trident::dist
