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

#include <memory>
#include <string>
#include <vector>

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
  std::int64_t calls = 0;
};

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

 protected:
  TrafficCounters traffic_;
};

}  // namespace trident::dist
