#include "trident/dist/communicator.h"

#include <fmt/format.h>

#include "trident/core/error.h"

namespace trident::dist {

namespace {
// Read and written by the thread that drives the communicators (one per process).
double blocked_total = 0;
}  // namespace

double blocked_seconds() { return blocked_total; }
void add_blocked_seconds(double seconds) { blocked_total += seconds; }

flight::Call Communicator::next_call(std::string_view op, const CollectiveOptions& options, std::int64_t bytes) {
  return flight::Call(op, options.context, group(), ++sequence_, rank(), size(), bytes);
}

std::string Communicator::describe(const std::string& op, const CollectiveOptions& options) {
  return flight::describe(next_call(op, options, 0));
}

const std::shared_ptr<const flight::Group>& Communicator::group() const {
  if (!group_) group_ = std::make_shared<const flight::Group>(flight::Group{name(), {}});
  return group_;
}

void Communicator::set_world_ranks(std::vector<int> world_ranks) {
  group_ = std::make_shared<const flight::Group>(flight::Group{name(), std::move(world_ranks)});
}

namespace {
// Checks one side's counts (`which`: "send_counts" or "recv_counts") against its tensor.
void check_counts(const std::string& group, int size, const std::vector<std::int64_t>& counts, const char* which,
                  const Tensor& t, const char* arg) {
  TRIDENT_CHECK(counts.size() == static_cast<std::size_t>(size),
                "all_to_all on {}: {} has {} entries, expected {} (one per rank)", group, which, counts.size(), size);
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    TRIDENT_CHECK(counts[r] >= 0, "all_to_all on {}: {}[{}] is {}, expected a count >= 0", group, which, r, counts[r]);
    total += counts[r];
  }
  TRIDENT_CHECK(total == t.numel(), "all_to_all on {}: {} sum to {}, but {} {} holds {} elements", group, which, total,
                arg, t.describe(), t.numel());
}
}  // namespace

void Communicator::check_all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts,
                                    const Tensor& output, const std::vector<std::int64_t>& recv_counts) const {
  check_defined(input, "all_to_all", "input");
  check_defined(output, "all_to_all", "output");
  TRIDENT_CHECK(input.dtype() == output.dtype(), "all_to_all on {}: input {} and output {} must have one dtype", name(),
                input.describe(), output.describe());
  check_counts(name(), size(), send_counts, "send_counts", input, "input");
  check_counts(name(), size(), recv_counts, "recv_counts", output, "output");
  const bool overlap = input.storage() == output.storage() && input.nbytes() > 0 && output.nbytes() > 0 &&
                       input.byte_offset() < output.byte_offset() + output.nbytes() &&
                       output.byte_offset() < input.byte_offset() + input.nbytes();
  TRIDENT_CHECK(!overlap, "all_to_all on {}: input {} and output {} share memory (all_to_all is not in place)", name(),
                input.describe(), output.describe());
}

std::int64_t Communicator::all_to_all_sent_bytes(const Tensor& input,
                                                 const std::vector<std::int64_t>& send_counts) const {
  std::int64_t elements = 0;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    if (static_cast<int>(r) != rank()) elements += send_counts[r];
  }
  return elements * static_cast<std::int64_t>(dtype_size(input.dtype()));
}

std::vector<std::int64_t> Communicator::all_to_all_counts(const std::vector<std::int64_t>& send_counts,
                                                          const CollectiveOptions& options) {
  const int n = size();
  TRIDENT_CHECK(send_counts.size() == static_cast<std::size_t>(n),
                "all_to_all_counts on {}: send_counts has {} entries, expected {} (one per rank)", name(),
                send_counts.size(), n);
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    TRIDENT_CHECK(send_counts[r] >= 0, "all_to_all_counts on {}: send_counts[{}] is {}, expected a count >= 0", name(),
                  r, send_counts[r]);
  }
  // One count to each rank, on the host (NCCL forwards host tensors to its MPI communicator).
  const Tensor input = Tensor::from_vector(send_counts, Shape{n});
  Tensor output = Tensor::zeros(Shape{n}, DType::i64);
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(n), 1);
  CollectiveOptions o = options;
  o.blocking = true;
  all_to_all(input, ones, output, ones, o)->wait();
  return output.to_vector<std::int64_t>();
}

void on_every_rank(Communicator& comm, const std::function<void()>& fn) {
  std::string error;
  try {
    fn();
  } catch (const Error& e) {
    error = e.message();
  } catch (const std::exception& e) {  // std::filesystem's errors, say
    error = e.what();
  }
  const double first = comm.all_reduce_scalar(error.empty() ? comm.size() : comm.rank(), ReduceOp::min);
  if (first >= comm.size()) return;
  const std::string message = comm.broadcast_text(error, static_cast<int>(first));
  TRIDENT_FAIL("{}", message);
}

}  // namespace trident::dist
