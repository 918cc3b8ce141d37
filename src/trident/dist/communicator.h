// Communicator: collectives and point-to-point transfers within a group of ranks.
//
// Modelled on c10d: every operation takes an options struct and returns a Work
// handle; wait() blocks until completion and throws trident::Error when the
// operation failed or exceeded its timeout (the message names the operation,
// the group and the rank), so a stuck peer becomes an error instead of a hang.
// Tensors are contiguous and must stay alive (and unmodified) until wait().
//
// Reductions of bf16/f16 tensors accumulate in f32 (the tensor is widened,
// reduced, and rounded once), never pairwise in 16 bits.
//
// Backends: MpiCommunicator (CPU tensors, this file's sibling); NcclCommunicator
// (CUDA tensors) with the same interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trident/dist/flight_recorder.h"
#include "trident/core/error.h"
#include "trident/core/tensor.h"

namespace trident::dist {

enum class ReduceOp { sum, avg, max, min };

struct CollectiveOptions {
  ReduceOp op = ReduceOp::sum;
  double timeout_s = 0;  // 0 = the communicator's default
  // The caller waits right away: the backend may use its blocking (often faster)
  // algorithm, with the timeout enforced by a watchdog that ends the process with
  // the same message instead of throwing. The returned Work is already complete.
  bool blocking = false;
  // Words the timeout message adds after the operation's name (e.g. "moe dispatch in model.layers.1.mlp"),
  // so a hang names its caller. Empty: nothing added. (Its `= {}` keeps brace-initialisations that stop
  // before it, such as {ReduceOp::max}, free of -Wmissing-field-initializers.)
  std::string context = {};
};

// A collective that did not complete within its timeout (a peer is stuck, dead or cut off). The command
// line ends the job at once on it: waiting for the other ranks to fail alike would only add its window.
class CollectiveTimeout : public Error {
 public:
  using Error::Error;
};

class Work {
 public:
  virtual ~Work() = default;
  // True when finished (successfully or not); never blocks.
  virtual bool test() = 0;
  // Blocks until finished; throws on failure or timeout.
  virtual void wait() = 0;
  // The failure message ("" while running or after success).
  virtual std::string error() const = 0;
};

// Bytes moved by this communicator, by operation (for benchmarks and tests).
struct TrafficCounters {
  std::int64_t all_reduce_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
  std::int64_t all_gather_bytes = 0;
  std::int64_t broadcast_bytes = 0;
  std::int64_t send_bytes = 0;
  std::int64_t recv_bytes = 0;
  std::int64_t all_to_all_bytes = 0;  // sent to the other ranks (not the part a rank keeps)
  std::int64_t calls = 0;
};

// Seconds this process has spent blocked on host communication (blocking MPI calls and Work::wait) since
// it started. A step's wall time minus this counter's change is the rank's own work, which the
// straggler report compares across ranks. (NCCL work runs on streams and is not counted.)
double blocked_seconds();
// Adds to the counter; the backends call it around every call that blocks the host.
void add_blocked_seconds(double seconds);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group in words, for errors: "dp group [0, 2]".
  virtual const std::string& name() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual std::unique_ptr<Work> all_reduce(Tensor& tensor, const CollectiveOptions& options = {}) = 0;
  // input holds size() equal chunks (flattened); rank r receives the reduction of chunk r into `output`.
  virtual std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output,
                                               const CollectiveOptions& options = {}) = 0;
  // output (size() × input.numel() elements) receives every rank's input, in rank order.
  virtual std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, const CollectiveOptions& options = {}) = 0;
  virtual std::unique_ptr<Work> broadcast(Tensor& tensor, int root, const CollectiveOptions& options = {}) = 0;
  virtual std::unique_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0, const CollectiveOptions& options = {}) = 0;
  virtual std::unique_ptr<Work> recv(Tensor& tensor, int src, int tag = 0, const CollectiveOptions& options = {}) = 0;
  virtual void barrier(const CollectiveOptions& options = {}) = 0;
  // Uneven all-to-all (MPI_Alltoallv): `input` holds, in rank order, send_counts[r] elements for rank r;
  // `output` receives recv_counts[r] elements from each rank r, in rank order. Counts are elements of
  // the tensors' dtype (any dtype: it is a copy); sum(send_counts) == input.numel(), sum(recv_counts) ==
  // output.numel(), both vectors have size() entries, and rank r's send_counts[s] equals rank s's
  // recv_counts[r] (exchange them first with all_to_all_counts). Zero counts are allowed.
  virtual std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts,
                                           Tensor& output, const std::vector<std::int64_t>& recv_counts,
                                           const CollectiveOptions& options = {}) = 0;

  // A communicator over a subset of this one's ranks (every rank of this
  // communicator must call it with the same list of groups; `ranks` of the
  // group containing this rank are in this communicator's numbering).
  virtual std::shared_ptr<Communicator> split(const std::vector<std::vector<int>>& groups, const std::string& label) = 0;

  const TrafficCounters& traffic() const noexcept { return traffic_; }
  void reset_traffic() noexcept { traffic_ = {}; }

  // Convenience: blocking forms.
  void all_reduce_sync(Tensor& tensor, CollectiveOptions options = {}) {
    options.blocking = true;
    all_reduce(tensor, options)->wait();
  }
  double all_reduce_scalar(double value, ReduceOp op = ReduceOp::sum);
  // Rank `root`'s `text` on every rank (the others' `text` is ignored): for a
  // choice one rank makes and all must follow, such as which checkpoint to load.
  std::string broadcast_text(const std::string& text, int root = 0);
  // Host-side count exchange: rank r's result[s] is rank s's send_counts[r] (blocking). Works for every
  // backend (NCCL may use its host/MPI path, as all_reduce_scalar does).
  std::vector<std::int64_t> all_to_all_counts(const std::vector<std::int64_t>& send_counts,
                                              const CollectiveOptions& options = {});

 protected:
  // The next collective as the flight recorder keeps it: the operation, the caller's context words, this
  // group, and the collective's sequence number on this communicator (every call takes the next: ranks of
  // one group that called the same collectives agree on it). flight::describe(call(...)) is how errors
  // name it: "all_to_all #12 (moe dispatch) on ep group [0, 1] (rank 0 of 2)".
  flight::Call next_call(std::string_view op, const CollectiveOptions& options, std::int64_t bytes);
  // flight::describe(next_call(op, options, 0)).
  std::string describe(const std::string& op, const CollectiveOptions& options);
  // This communicator's group for the flight recorder: its name and, once set_world_ranks() has been
  // called, its members' ranks in the job (the peer check needs them).
  const std::shared_ptr<const flight::Group>& group() const;
  void set_world_ranks(std::vector<int> world_ranks);
  // all_to_all's argument checks, shared by the backends (throw trident::Error before any transfer).
  void check_all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts, const Tensor& output,
                        const std::vector<std::int64_t>& recv_counts) const;
  // Bytes an all_to_all of these counts sends to the other ranks, for traffic().
  std::int64_t all_to_all_sent_bytes(const Tensor& input, const std::vector<std::int64_t>& send_counts) const;

  TrafficCounters traffic_;

 private:
  std::int64_t sequence_ = 0;  // collectives started on this communicator
  mutable std::shared_ptr<const flight::Group> group_;
};

// Runs `fn` on this rank; every rank of `comm` calls it. When `fn` throws (a trident::Error or another
// std::exception) on any rank, every rank throws trident::Error with the lowest failing rank's message,
// so one line is reported and no rank is left waiting in a later collective.
void on_every_rank(Communicator& comm, const std::function<void()>& fn);

}  // namespace trident::dist
