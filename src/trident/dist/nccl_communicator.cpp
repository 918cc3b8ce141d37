#include "trident/dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "trident/core/error.h"
#include "trident/dist/watchdog.h"
#include "trident/kernels/cuda/device.h"
#include "trident/ops/elementwise.h"

namespace trident::dist {

namespace {

namespace kc = kernels::cuda;

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES);
constexpr std::int64_t kIdBytes = sizeof(ncclUniqueId);
// MPI tag of the point-to-point channels' unique ids on a communicator's private bootstrap.
constexpr int kChannelIdTag = 0x7A11;

void check_cuda(cudaError_t rc, const char* call) {
  TRIDENT_CHECK(rc == cudaSuccess, "CUDA: {} failed on {}: {} ({})", call, host_name(), cudaGetErrorString(rc),
                cudaGetErrorName(rc));
}
#define CUDA_CHECK(call) check_cuda((call), #call)

// NCCL's error string plus its last detailed message (ncclGetLastError ignores its argument).
std::string nccl_message(ncclResult_t rc, ncclComm_t comm) {
  std::string out = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') out += fmt::format(" ({})", last);
  return out;
}

void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm, const std::string& during) {
  TRIDENT_CHECK(rc == ncclSuccess, "NCCL: {} failed on {} during {}: {}", call, host_name(), during,
                nccl_message(rc, comm));
}

cudaStream_t compute_stream_of(int device) { return static_cast<cudaStream_t>(kc::compute_stream(device).native()); }

// One NCCL communicator and the stream its operations run on. Shared with the
// Works in flight and the watchdog, which may outlive the NcclCommunicator;
// `mutex` guards `comm` against an abort or a release from another thread.
struct CommHandle {
  explicit CommHandle(int dev) : device(dev) {
    kc::DeviceGuard guard(device);
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // High priority: communication kernels start as soon as their inputs are ready, ahead of queued compute.
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
  }
  ~CommHandle() { release(); }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;

  // The communicator for a new operation; throws once it was aborted or released.
  ncclComm_t live(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    TRIDENT_CHECK(comm != nullptr, "{}: the NCCL communicator was {}", what,
                  !aborted ? std::string("already destroyed")
                           : abort_reason.empty() ? std::string("aborted") : "aborted after: " + abort_reason);
    return comm;
  }

  // "" while healthy (or aborted on request), else NCCL's asynchronous error or
  // the failure it was aborted after. With wait_for_lock = false (the watchdog)
  // it answers "" rather than wait for another thread's abort or release.
  std::string async_error(bool wait_for_lock) {
    std::unique_lock<std::mutex> lock(mutex, std::defer_lock);
    if (wait_for_lock) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return "";
    }
    if (comm == nullptr) return aborted && !abort_reason.empty() ? "an earlier failure: " + abort_reason : "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return nccl_message(rc, comm);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return nccl_message(state, comm);
  }

  // `reason`: the failure that made this rank give up ("" when aborted on request).
  void abort(const std::string& reason) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (comm != nullptr) {
      try {
        abort_reason = reason;
      } catch (...) {  // out of memory: abort without the reason
      }
    }
    abort_locked();
  }
  void try_abort() noexcept {
    std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
    if (lock.owns_lock()) abort_locked();
  }

  // The normal end: NCCL finishes the operations in flight and frees the
  // communicator (its finalisation waits for the peers, so every rank must
  // release its communicators in the same order). A failed one is aborted.
  void release() noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (comm != nullptr) {
      int previous = 0;
      const bool restore = cudaGetDevice(&previous) == cudaSuccess;
      cudaSetDevice(device);
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        ncclCommAbort(comm);
      } else {
        ncclCommDestroy(comm);
      }
      comm = nullptr;
      if (restore) cudaSetDevice(previous);
    }
    if (stream != nullptr) {
      cudaStreamDestroy(stream);  // returns at once; CUDA frees it when its work is done
      stream = nullptr;
    }
  }

  int device;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  bool aborted = false;
  std::string abort_reason;
  std::mutex mutex;

 private:
  void abort_locked() noexcept {
    if (comm == nullptr) return;
    int previous = 0;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    cudaSetDevice(device);
    ncclCommAbort(comm);
    comm = nullptr;
    aborted = true;
    if (restore) cudaSetDevice(previous);
  }
};

// How the watchdog ends the process after a failure of `comm` (null: none to abort yet).
WatchdogFailure nccl_failure(std::shared_ptr<CommHandle> comm) {
  WatchdogFailure f;
  f.name_host = true;
  f.consequence = "; aborting the NCCL communicator and ending this process";
  if (comm != nullptr) f.before_exit = [comm = std::move(comm)] { comm->try_abort(); };
  return f;
}

// An operation in flight: what it is, its deadline and the event recorded on the
// communicator's stream after it. The watchdog polls it every 100 ms; on a
// timeout or an NCCL error it prints one line, aborts the communicator and ends
// the process (see the header).
class WorkState final : public Watched {
 public:
  WorkState(std::string what, double timeout_s, int dev, std::shared_ptr<CommHandle> handle)
      : Watched(std::move(what), timeout_s, nccl_failure(handle)), device(dev), comm(std::move(handle)) {}
  ~WorkState() override {
    if (done != nullptr) cudaEventDestroy(done);
  }

  Status poll(std::string& failure) override {
    cudaSetDevice(device);
    const cudaError_t rc = cudaEventQuery(done);
    if (rc == cudaSuccess) return Status::done;
    // The process is exiting and the CUDA runtime is being torn down under the watchdog's detached
    // thread: stop watching, quietly, or a run that finished would end with its line and exit code 1.
    if (rc == cudaErrorCudartUnloading) return Status::exiting;
    if (rc != cudaErrorNotReady) {
      failure = fmt::format("CUDA reported {} ({}) while {} was in flight", cudaGetErrorString(rc),
                            cudaGetErrorName(rc), what());
      return Status::failed;
    }
    if (const std::string e = comm->async_error(false); !e.empty()) {
      failure = fmt::format("{} failed: NCCL reported {}", what(), e);
      return Status::failed;
    }
    return Status::running;
  }

  int device;
  cudaEvent_t done = nullptr;
  std::shared_ptr<CommHandle> comm;
};

// Guards one blocking host call (creation, split, a channel's first transfer) with the watchdog.
class Armed {
 public:
  Armed(std::string what, double timeout_s, std::shared_ptr<CommHandle> comm)
      : call_(std::move(what), timeout_s, nccl_failure(std::move(comm))) {}

 private:
  ArmedCall call_;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<WorkState> state, std::vector<Tensor> keep, std::function<void()> finish)
      : state_(std::move(state)), keep_(std::move(keep)), finish_(std::move(finish)) {}

  ~NcclWork() override {
    // Never waited: still order the compute stream after the operation before
    // its tensors go back to the caching allocator.
    if (!ordered_) {
      try {
        cudaStreamWaitEvent(compute_stream_of(state_->device), state_->done, 0);
      } catch (...) {  // nothing more can be done in a destructor
      }
    }
  }

  bool test() override {
    if (!error_.empty()) return true;
    const cudaError_t rc = cudaEventQuery(state_->done);
    if (rc == cudaSuccess) {
      order_compute();
      return true;
    }
    if (rc != cudaErrorNotReady) {
      error_ = fmt::format("{} failed: CUDA reported {} ({})", state_->what(), cudaGetErrorString(rc),
                           cudaGetErrorName(rc));
      return true;
    }
    return failed_async();
  }

  void wait() override {
    TRIDENT_CHECK(error_.empty(), "{}", error_);
    order_compute();
    TRIDENT_CHECK(!failed_async(), "{}", error_);
  }

  std::string error() const override { return error_; }

  // Blocks the host until the operation is done on the GPU (barrier, connect_p2p).
  void synchronize() {
    CUDA_CHECK(cudaEventSynchronize(state_->done));
    TRIDENT_CHECK(!failed_async(), "{}", error_);
  }

 private:
  // The compute stream waits for the operation (on the device), then the
  // completion step (rounding a widened result back into the caller's tensor) is
  // queued on it. Once only.
  void order_compute() {
    if (ordered_) return;
    kc::DeviceGuard guard(state_->device);
    CUDA_CHECK(cudaStreamWaitEvent(compute_stream_of(state_->device), state_->done, 0));
    ordered_ = true;
    if (finish_) finish_();
  }

  bool failed_async() {
    const std::string e = state_->comm->async_error(true);
    if (e.empty()) return false;
    error_ = fmt::format("{} failed: NCCL reported {}", state_->what(), e);
    state_->comm->abort(error_);  // its peers must not wait on this rank any longer
    return true;
  }

  std::shared_ptr<WorkState> state_;
  std::vector<Tensor> keep_;  // held until destruction: NCCL may use their memory until the event
  std::function<void()> finish_;
  bool ordered_ = false;
  std::string error_;
};

bool widened(DType d) { return d == DType::bf16 || d == DType::f16; }

// The NCCL type a reduction runs in (bf16/f16 were widened to f32 before).
ncclDataType_t reduce_type(DType d, const std::string& what) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::bf16:
    case DType::f16:
    case DType::u16: break;
  }
  TRIDENT_FAIL("{}: NCCL cannot reduce {} tensors", what, d);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

cudaEvent_t make_event(int device) {
  kc::DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

struct NcclCommunicator::Impl {
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    // Channels first, in (src, dst) order, then the group's communicator: the
    // same order on every rank, as NCCL's finalisation waits for the peers.
    // Destroyed while an error unwinds, this rank may be the only one leaving:
    // ncclCommDestroy would wait for peers that never come, until a peer's
    // timeout ends the job and this rank's error is never printed. Abort then.
    // (release() after abort() frees only the stream.)
    const bool unwinding = std::uncaught_exceptions() > 0;
    for (auto& [key, channel] : channels) {
      if (unwinding) channel->abort("");
      channel->release();
    }
    if (main) {
      if (unwinding) main->abort("");
      main->release();
    }
    if (ready != nullptr) cudaEventDestroy(ready);
  }

  std::string describe(const std::string& op) const {
    return fmt::format("{} on {} (rank {} of {})", op, name, rank, size);
  }

  void check_tensor(const Tensor& t, const char* op, const char* arg) const {
    check_defined(t, op, arg);
    TRIDENT_CHECK(t.device() == Device::cuda(device), "{} on {}: NcclCommunicator moves tensors on cuda:{}, but {} is {}{}",
                  op, name, device, arg, t.describe(),
                  t.device().is_cpu() ? " (a call's tensors must all be on the GPU, or all on the host)" : "");
  }

  using Launch = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  // Queues one NCCL call on `h`'s stream after the compute stream's work so far
  // and returns its Work (waited already when o.blocking).
  std::unique_ptr<NcclWork> enqueue(const std::shared_ptr<CommHandle>& h, const std::string& what,
                                    const CollectiveOptions& o, std::vector<Tensor> keep, const char* call,
                                    const Launch& launch, std::function<void()> finish = {}) {
    kc::DeviceGuard guard(device);
    ncclComm_t comm = h->live(what);
    // Inputs are final, and outputs no longer read, once the compute stream reaches this point.
    CUDA_CHECK(cudaEventRecord(ready, compute_stream_of(device)));
    CUDA_CHECK(cudaStreamWaitEvent(h->stream, ready, 0));
    const double timeout = o.timeout_s > 0 ? o.timeout_s : timeout_s;
    ncclResult_t rc = ncclSuccess;
    {
      // A communicator's first collective, and a channel's first transfer, connect to the peers on the host.
      Armed armed(what, timeout, h);
      rc = launch(comm, h->stream);
    }
    check_nccl(rc, call, comm, what);
    auto state = std::make_shared<WorkState>(what, timeout, device, h);
    state->done = make_event(device);
    CUDA_CHECK(cudaEventRecord(state->done, h->stream));
    Watchdog::instance().track(state);
    auto work = std::make_unique<NcclWork>(std::move(state), std::move(keep), std::move(finish));
    if (o.blocking) work->wait();
    return work;
  }

  // The two-rank communicator carrying transfers from `src` to `dst` (one of
  // them this rank), made at first use: the sender makes its unique id and
  // sends it over the bootstrap; both then join, the sender as rank 0.
  const std::shared_ptr<CommHandle>& channel(int src, int dst) {
    const std::pair<int, int> key{src, dst};
    if (auto it = channels.find(key); it != channels.end()) return it->second;
    const bool sending = src == rank;
    const int peer = sending ? dst : src;
    const std::string what = fmt::format(
        "connecting point-to-point {} → {} on {} (rank {} of {}; the first transfer in each direction of a pair "
        "waits for the peer's matching call)",
        src, dst, name, rank, size);
    Tensor id_bytes = Tensor::zeros({kIdBytes}, DType::u8);
    ncclUniqueId id{};
    try {
      if (sending) {
        check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, what);
        std::memcpy(id_bytes.raw_data(), &id, sizeof id);
        bootstrap->send(id_bytes, peer, kChannelIdTag)->wait();
      } else {
        bootstrap->recv(id_bytes, peer, kChannelIdTag)->wait();
        std::memcpy(&id, id_bytes.raw_data(), sizeof id);
      }
    } catch (const Error& e) {
      TRIDENT_FAIL("{}: {}", what, e.message());
    }
    auto h = std::make_shared<CommHandle>(device);
    kc::DeviceGuard guard(device);
    ncclComm_t comm = nullptr;
    ncclResult_t rc = ncclSuccess;
    {
      Armed armed(what, timeout_s, nullptr);
      rc = ncclCommInitRank(&comm, 2, id, sending ? 0 : 1);
    }
    check_nccl(rc, "ncclCommInitRank", comm, what);
    h->comm = comm;
    return channels.emplace(key, std::move(h)).first->second;
  }

  // A point-to-point transfer on the (rank → peer) or (peer → rank) channel.
  std::unique_ptr<NcclWork> p2p(const Tensor& t, int peer, bool sending, const std::string& what,
                                const CollectiveOptions& o) {
    const std::shared_ptr<CommHandle>& h = sending ? channel(rank, peer) : channel(peer, rank);
    Tensor data = t;
    const std::size_t bytes = t.nbytes();
    if (sending) {
      return enqueue(h, what, o, {data}, "ncclSend", [&](ncclComm_t c, cudaStream_t s) {
        return ncclSend(data.raw_data(), bytes, ncclUint8, 1, c, s);
      });
    }
    return enqueue(h, what, o, {data}, "ncclRecv", [&](ncclComm_t c, cudaStream_t s) {
      return ncclRecv(data.raw_data(), bytes, ncclUint8, 0, c, s);
    });
  }

  std::shared_ptr<Communicator> bootstrap;  // the same ranks, private to this communicator: carries unique ids
  int device = 0;
  double timeout_s = 300.0;
  std::string name;
  int rank = 0;
  int size = 1;
  std::shared_ptr<CommHandle> main;
  std::map<std::pair<int, int>, std::shared_ptr<CommHandle>> channels;  // (src, dst) → that direction's channel
  cudaEvent_t ready = nullptr;  // recorded on the compute stream before each operation
  Tensor barrier_buffer;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<Communicator> bootstrap, int device,
                                                           double timeout_s) {
  TRIDENT_CHECK(bootstrap != nullptr, "NcclCommunicator::create: no bootstrap communicator");
  TRIDENT_CHECK(timeout_s > 0, "NcclCommunicator on {}: the timeout must be positive, got {} s", bootstrap->name(),
                timeout_s);
  TRIDENT_CHECK(kc::initialize(), "NcclCommunicator on {}: no CUDA GPU on {} ({})", bootstrap->name(), host_name(),
                kc::describe());
  const int devices = kc::device_count();
  TRIDENT_CHECK(device >= 0 && device < devices, "NcclCommunicator on {}: rank {} asked for cuda:{}, but {} has {} GPU{}",
                bootstrap->name(), bootstrap->rank(), device, host_name(), devices, devices == 1 ? "" : "s");
  auto im = std::make_unique<Impl>();
  im->device = device;
  im->timeout_s = timeout_s;
  im->name = bootstrap->name();
  im->rank = bootstrap->rank();
  im->size = bootstrap->size();
  const std::string what = fmt::format("NCCL communicator creation on {} (rank {} of {}, cuda:{})", im->name, im->rank,
                                       im->size, device);

  Tensor id_bytes = Tensor::zeros({kIdBytes}, DType::u8);
  ncclUniqueId id{};
  if (im->rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, what);
    std::memcpy(id_bytes.raw_data(), &id, sizeof id);
  }
  bootstrap->broadcast(id_bytes, 0, CollectiveOptions{ReduceOp::sum, timeout_s, true})->wait();
  std::memcpy(&id, id_bytes.raw_data(), sizeof id);
  // A private copy of the bootstrap carries the channels' ids, apart from the caller's own messages.
  std::vector<int> everyone(static_cast<std::size_t>(im->size));
  std::iota(everyone.begin(), everyone.end(), 0);
  im->bootstrap = bootstrap->split({everyone}, im->name);

  im->main = std::make_shared<CommHandle>(device);
  kc::DeviceGuard guard(device);
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclSuccess;
  {
    Armed armed(what, timeout_s, nullptr);
    rc = ncclCommInitRank(&comm, im->size, id, im->rank);
  }
  check_nccl(rc, "ncclCommInitRank", comm, what);
  im->main->comm = comm;
  im->ready = make_event(device);
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(std::move(im)));
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
const std::string& NcclCommunicator::name() const { return impl_->name; }
int NcclCommunicator::device() const noexcept { return impl_->device; }
const std::shared_ptr<Communicator>& NcclCommunicator::host() const noexcept { return impl_->bootstrap; }

std::unique_ptr<Work> NcclCommunicator::all_reduce(Tensor& tensor, const CollectiveOptions& o) {
  if (tensor.device().is_cpu()) return impl_->bootstrap->all_reduce(tensor, o);  // host values: over MPI
  Impl& im = *impl_;
  im.check_tensor(tensor, "all_reduce", "tensor");
  TRIDENT_CHECK(o.op != ReduceOp::avg || is_floating(tensor.dtype()), "all_reduce avg on {} needs a floating dtype",
                tensor.describe());
  const std::string what = describe("all_reduce", o);
  traffic_.all_reduce_bytes += static_cast<std::int64_t>(tensor.nbytes());
  ++traffic_.calls;
  const Tensor buffer = widened(tensor.dtype()) ? ops::cast(tensor, DType::f32) : tensor;
  const ncclDataType_t type = reduce_type(buffer.dtype(), what);
  const std::size_t count = static_cast<std::size_t>(buffer.numel());
  std::function<void()> finish;
  if (!buffer.is_same(tensor)) {
    const Tensor target = tensor;
    finish = [buffer, target] { target.copy_from(ops::cast(buffer, target.dtype())); };
  }
  return im.enqueue(im.main, what, o, {tensor, buffer}, "ncclAllReduce", [&](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(buffer.raw_data(), buffer.raw_data(), count, type, nccl_op(o.op), c, s);
  }, std::move(finish));
}

std::unique_ptr<Work> NcclCommunicator::reduce_scatter(const Tensor& input, Tensor& output,
                                                       const CollectiveOptions& o) {
  if (input.device().is_cpu() && output.device().is_cpu()) return impl_->bootstrap->reduce_scatter(input, output, o);
  Impl& im = *impl_;
  im.check_tensor(input, "reduce_scatter", "input");
  im.check_tensor(output, "reduce_scatter", "output");
  TRIDENT_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() * im.size,
                "reduce_scatter on {}: input {} must hold {} chunks the size of output {}", im.name, input.describe(),
                im.size, output.describe());
  TRIDENT_CHECK(o.op != ReduceOp::avg || is_floating(input.dtype()), "reduce_scatter avg on {} needs a floating dtype",
                input.describe());
  const std::string what = describe("reduce_scatter", o);
  traffic_.reduce_scatter_bytes += static_cast<std::int64_t>(input.nbytes());
  ++traffic_.calls;
  const bool wide = widened(input.dtype());
  const Tensor in = wide ? ops::cast(input, DType::f32) : input;
  const Tensor out = wide ? Tensor::empty(output.shape(), DType::f32, Device::cuda(im.device)) : output;
  const ncclDataType_t type = reduce_type(in.dtype(), what);
  const std::size_t count = static_cast<std::size_t>(out.numel());
  std::function<void()> finish;
  if (wide) {
    const Tensor target = output;
    finish = [out, target] { target.copy_from(ops::cast(out, target.dtype())); };
  }
  return im.enqueue(im.main, what, o, {input, output, in, out}, "ncclReduceScatter", [&](ncclComm_t c, cudaStream_t s) {
    return ncclReduceScatter(in.raw_data(), out.raw_data(), count, type, nccl_op(o.op), c, s);
  }, std::move(finish));
}

std::unique_ptr<Work> NcclCommunicator::all_gather(const Tensor& input, Tensor& output, const CollectiveOptions& o) {
  if (input.device().is_cpu() && output.device().is_cpu()) return impl_->bootstrap->all_gather(input, output, o);
  Impl& im = *impl_;
  im.check_tensor(input, "all_gather", "input");
  im.check_tensor(output, "all_gather", "output");
  TRIDENT_CHECK(input.dtype() == output.dtype() && output.numel() == input.numel() * im.size,
                "all_gather on {}: output {} must hold {} copies of input {}", im.name, output.describe(), im.size,
                input.describe());
  traffic_.all_gather_bytes += static_cast<std::int64_t>(output.nbytes());
  ++traffic_.calls;
  const Tensor in = input, out = output;
  const std::size_t bytes = in.nbytes();  // moved as bytes: any dtype
  return im.enqueue(im.main, describe("all_gather", o), o, {in, out}, "ncclAllGather",
                    [&](ncclComm_t c, cudaStream_t s) {
                      return ncclAllGather(in.raw_data(), out.raw_data(), bytes, ncclUint8, c, s);
                    });
}

std::unique_ptr<Work> NcclCommunicator::broadcast(Tensor& tensor, int root, const CollectiveOptions& o) {
  if (tensor.device().is_cpu()) return impl_->bootstrap->broadcast(tensor, root, o);
  Impl& im = *impl_;
  im.check_tensor(tensor, "broadcast", "tensor");
  TRIDENT_CHECK(root >= 0 && root < im.size, "broadcast on {}: root {} outside the group of {}", im.name, root, im.size);
  traffic_.broadcast_bytes += static_cast<std::int64_t>(tensor.nbytes());
  ++traffic_.calls;
  const Tensor t = tensor;
  const std::size_t bytes = t.nbytes();
  return im.enqueue(im.main, describe(fmt::format("broadcast from {}", root), o), o, {t}, "ncclBroadcast",
                    [&](ncclComm_t c, cudaStream_t s) {
                      return ncclBroadcast(t.raw_data(), t.raw_data(), bytes, ncclUint8, root, c, s);
                    });
}

std::unique_ptr<Work> NcclCommunicator::send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& o) {
  if (tensor.device().is_cpu()) return impl_->bootstrap->send(tensor, dst, tag, o);
  Impl& im = *impl_;
  im.check_tensor(tensor, "send", "tensor");
  TRIDENT_CHECK(dst >= 0 && dst < im.size && dst != im.rank, "send on {}: bad destination {} (rank {} of {})", im.name,
                dst, im.rank, im.size);
  traffic_.send_bytes += static_cast<std::int64_t>(tensor.nbytes());
  ++traffic_.calls;
  return im.p2p(tensor, dst, true, describe(fmt::format("send to {} (tag {})", dst, tag), o), o);
}

std::unique_ptr<Work> NcclCommunicator::recv(Tensor& tensor, int src, int tag, const CollectiveOptions& o) {
  if (tensor.device().is_cpu()) return impl_->bootstrap->recv(tensor, src, tag, o);
  Impl& im = *impl_;
  im.check_tensor(tensor, "recv", "tensor");
  TRIDENT_CHECK(src >= 0 && src < im.size && src != im.rank, "recv on {}: bad source {} (rank {} of {})", im.name, src,
                im.rank, im.size);
  traffic_.recv_bytes += static_cast<std::int64_t>(tensor.nbytes());
  ++traffic_.calls;
  return im.p2p(tensor, src, false, describe(fmt::format("recv from {} (tag {})", src, tag), o), o);
}

std::unique_ptr<Work> NcclCommunicator::all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts,
                                                   Tensor& output, const std::vector<std::int64_t>& recv_counts,
                                                   const CollectiveOptions& o) {
  if (input.device().is_cpu() && output.device().is_cpu()) {
    return impl_->bootstrap->all_to_all(input, send_counts, output, recv_counts, o);  // host values: over MPI
  }
  Impl& im = *impl_;
  check_all_to_all(input, send_counts, output, recv_counts);
  im.check_tensor(input, "all_to_all", "input");
  im.check_tensor(output, "all_to_all", "output");
  traffic_.all_to_all_bytes += all_to_all_sent_bytes(input, send_counts);
  ++traffic_.calls;
  const Tensor in = input, out = output;
  const std::size_t element = dtype_size(in.dtype());  // moved as bytes: any dtype
  // One send and one receive per peer with a nonzero count, grouped so that NCCL runs them together (and
  // the order of the peers cannot deadlock); this rank's own block goes through NCCL too.
  return im.enqueue(
      im.main, describe("all_to_all", o), o, {in, out}, "ncclGroupEnd", [&](ncclComm_t c, cudaStream_t s) {
        ncclResult_t rc = ncclGroupStart();
        if (rc != ncclSuccess) return rc;
        auto* send = static_cast<char*>(in.raw_data());
        auto* recv = static_cast<char*>(out.raw_data());
        for (int r = 0; r < im.size && rc == ncclSuccess; ++r) {
          const auto sent = static_cast<std::size_t>(send_counts[static_cast<std::size_t>(r)]) * element;
          const auto received = static_cast<std::size_t>(recv_counts[static_cast<std::size_t>(r)]) * element;
          if (sent > 0) rc = ncclSend(send, sent, ncclUint8, r, c, s);
          if (rc == ncclSuccess && received > 0) rc = ncclRecv(recv, received, ncclUint8, r, c, s);
          send += sent;
          recv += received;
        }
        const ncclResult_t end = ncclGroupEnd();  // always closes the group, even after a failed call in it
        return rc != ncclSuccess ? rc : end;
      });
}

void NcclCommunicator::barrier(const CollectiveOptions& o) {
  Impl& im = *impl_;
  if (!im.barrier_buffer.defined()) im.barrier_buffer = Tensor::zeros({1}, DType::i32, Device::cuda(im.device));
  const Tensor t = im.barrier_buffer;
  auto work = im.enqueue(im.main, describe("barrier", o), o, {t}, "ncclAllReduce", [&](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(t.raw_data(), t.raw_data(), 1, ncclInt32, ncclSum, c, s);
  });
  work->wait();
  work->synchronize();  // every rank has arrived once the all-reduce is done (the watchdog keeps the deadline)
}

std::shared_ptr<Communicator> NcclCommunicator::split(const std::vector<std::vector<int>>& groups,
                                                      const std::string& label) {
  Impl& im = *impl_;
  int color = -1, key = 0;
  std::vector<int> mine;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].size(); ++i) {
      if (groups[g][i] == im.rank) {
        TRIDENT_CHECK(color < 0, "split of {}: rank {} appears in two {} groups", im.name, im.rank, label);
        color = static_cast<int>(g);
        key = static_cast<int>(i);
        mine = groups[g];
      }
    }
  }
  TRIDENT_CHECK(color >= 0, "split of {}: rank {} is in no {} group", im.name, im.rank, label);
  auto sub = std::make_unique<Impl>();
  sub->bootstrap = im.bootstrap->split(groups, label);
  sub->device = im.device;
  sub->timeout_s = im.timeout_s;
  sub->name = fmt::format("{} group [{}]", label, fmt::join(mine, ", "));
  sub->rank = sub->bootstrap->rank();
  sub->size = sub->bootstrap->size();
  TRIDENT_CHECK(sub->rank == key && sub->size == static_cast<int>(mine.size()),
                "split of {}: the bootstrap's {} has rank {} of {}, expected {} of {}", im.name, sub->name, sub->rank,
                sub->size, key, mine.size());
  const std::string what = im.describe(fmt::format("split into {} groups", label));
  sub->main = std::make_shared<CommHandle>(im.device);
  kc::DeviceGuard guard(im.device);
  ncclComm_t parent = im.main->live(what);
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclSuccess;
  {
    Armed armed(what, im.timeout_s, im.main);
    rc = ncclCommSplit(parent, color, key, &comm, nullptr);
  }
  check_nccl(rc, "ncclCommSplit", parent, what);
  TRIDENT_CHECK(comm != nullptr, "{}: ncclCommSplit returned no communicator", what);
  sub->main->comm = comm;
  sub->ready = make_event(im.device);
  return std::shared_ptr<Communicator>(new NcclCommunicator(std::move(sub)));
}

void NcclCommunicator::connect_p2p(const std::vector<int>& peers) {
  Impl& im = *impl_;
  std::vector<std::pair<int, int>> pairs;  // (lower rank, higher rank)
  for (int p : peers) {
    TRIDENT_CHECK(p >= 0 && p < im.size && p != im.rank, "connect_p2p on {}: bad peer {} (rank {} of {})", im.name, p,
                  im.rank, im.size);
    pairs.emplace_back(std::min(p, im.rank), std::max(p, im.rank));
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  // One global order of pairs, and within a pair lower → higher first, on both sides: no rank waits in a cycle.
  for (const auto& [lo, hi] : pairs) {
    im.channel(lo, hi);
    im.channel(hi, lo);
  }
  // NCCL connects a channel at its first transfer, which meets the peer on the host: one byte each way, same order.
  const Tensor out = Tensor::zeros({1}, DType::u8, Device::cuda(im.device));
  const Tensor in = Tensor::zeros({1}, DType::u8, Device::cuda(im.device));
  std::vector<std::unique_ptr<NcclWork>> works;
  for (const auto& [lo, hi] : pairs) {
    const bool lower = im.rank == lo;
    const int peer = lower ? hi : lo;
    const std::string what = im.describe(fmt::format("connect_p2p with {}", peer));
    works.push_back(im.p2p(lower ? out : in, peer, lower, what, {}));
    works.push_back(im.p2p(lower ? in : out, peer, !lower, what, {}));
  }
  for (auto& w : works) {
    w->wait();
    w->synchronize();
  }
}

void NcclCommunicator::abort() noexcept {
  for (auto& [key, channel] : impl_->channels) channel->abort("");
  if (impl_->main) impl_->main->abort("");
}

std::string nccl_library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (unknown version)";
  // NCCL_VERSION(X, Y, Z) = X·10000 + Y·100 + Z since 2.9.
  return fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

}  // namespace trident::dist
