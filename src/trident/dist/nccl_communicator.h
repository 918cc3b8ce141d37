// NcclCommunicator: the Communicator of CUDA tensors over NCCL (built when
// TRIDENT_CUDA is on; TRIDENT_HAVE_NCCL is then defined for users of dist).
//
// Creation: over a bootstrap communicator of the same ranks (the MPI world,
// or one of its splits). Rank 0 makes NCCL's unique id and broadcasts it over
// the bootstrap; every rank then joins on its GPU (`device`; one GPU per rank,
// as NCCL requires). split() is ncclCommSplit plus the bootstrap's own split.
// Every tensor must live on this communicator's device.
//
// Streams: each NCCL communicator has its own (high-priority) stream. An
// operation first makes that stream wait for everything queued so far on the
// device's compute stream (kernels::cuda::compute_stream), so it reads
// finished inputs, and returns at once; compute queued afterwards overlaps
// it. Work::test() asks whether it has finished on the GPU; Work::wait()
// makes the compute stream wait for it — on the device, the host does not
// block — and then reports NCCL's asynchronous errors. So after wait(), every
// kernel, copy and host read (Tensor::to(cpu), item()) of the device sees the
// result. A Work keeps its tensors alive until it is destroyed (and a Work
// destroyed unwaited orders the compute stream after it), so the caching
// allocator never hands their memory to another tensor while NCCL may still
// use it. `blocking` does the wait() before returning.
//
// Numerics: f32, f64, i32, i64 and u8 reduce natively; bf16 and f16 are
// widened to f32 on the device (ops::cast), reduced, and rounded once, as the
// Communicator contract requires. avg is NCCL's ncclAvg, which for floating
// types scales every input by 1/n before summing: exact when n is a power of
// two, otherwise within an ulp or so of sum/n. Moves (all_gather, broadcast,
// send/recv) take any dtype.
//
// Point-to-point: NCCL has no tags. Transfers from rank a to rank b are
// matched in the order they were issued (the k-th send from a to b fills b's
// k-th recv from a); `tag` is accepted and not checked. The pipeline
// executor's tags are satisfied by that order: for every schedule, the
// sequence of messages a sends to b equals the sequence b receives from a
// (tests/dist/nccl_communicator_test.cpp checks all schedules). Each direction
// of each pair gets its own two-rank NCCL communicator and stream, so a send
// from a to b never waits behind a transfer from b to a (one stream per pair
// would deadlock 1F1B, where both neighbours send before they receive). Such
// a channel is made at its first use, and that first send and first recv meet
// on the host: the sender's first send to b returns only once b has posted
// its first recv from it. Later transfers do not wait for the peer on the host. The pipeline
// schedules are safe under this rule (the test checks that too); a pattern in
// which every rank sends before it receives for the first time (a ring shift)
// is not, unless connect_p2p() made the channels first.
//
// Timeouts: wait() does not block, so a deadline (CollectiveOptions::timeout_s,
// else the communicator's default) is kept by a watchdog thread. When an
// operation is still unfinished at its deadline, or NCCL reports an error
// while it runs, the watchdog prints one line naming the operation, the group
// (with its ranks) and this rank, aborts the NCCL communicator and ends the
// process, which ends the job (mpirun and srun end every rank when one exits)
// — what MpiCommunicator's watchdog does for blocking MPI calls. Host calls
// that can wait for peers (creation, split, a channel's first transfer) are
// guarded the same way.
//
// Destruction finalises the NCCL communicators, which waits for the peers to
// do the same (every rank destroys its communicators in the same order). One
// destroyed while an exception unwinds is aborted instead: that rank may be
// failing alone, and must reach main()'s report, which ends the job.
//
// Host tensors (all_reduce_scalar(), the loss and grad-norm reductions, the
// trainer's agreement checks) go over host(), the MPI communicator of the same
// ranks in the same numbering — one communicator for both kinds of tensor, as
// PyTorch pairs gloo with NCCL. A call mixing a host and a GPU tensor, or a
// tensor on another GPU, is an error naming the operation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trident/dist/communicator.h"

namespace trident::dist {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`: every rank calls it with its own GPU.
  // `timeout_s` is the default deadline of every operation.
  static std::shared_ptr<NcclCommunicator> create(std::shared_ptr<Communicator> bootstrap, int device,
                                                  double timeout_s = 300.0);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  int device() const noexcept;

  std::unique_ptr<Work> all_reduce(Tensor& tensor, const CollectiveOptions& options = {}) override;
  std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output,
                                       const CollectiveOptions& options = {}) override;
  std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, const CollectiveOptions& options = {}) override;
  std::unique_ptr<Work> broadcast(Tensor& tensor, int root, const CollectiveOptions& options = {}) override;
  std::unique_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0, const CollectiveOptions& options = {}) override;
  std::unique_ptr<Work> recv(Tensor& tensor, int src, int tag = 0, const CollectiveOptions& options = {}) override;
  // Returns on the host once every rank has reached it (an all-reduce of one
  // element, waited for on the host).
  void barrier(const CollectiveOptions& options = {}) override;
  // ncclSend/ncclRecv to and from every peer in one NCCL group, on the communicator's stream (host
  // tensors: over host()). Counts are elements; any dtype (moved as bytes).
  std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<std::int64_t>& send_counts, Tensor& output,
                                   const std::vector<std::int64_t>& recv_counts,
                                   const CollectiveOptions& options = {}) override;
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int>>& groups, const std::string& label) override;

  // Makes the point-to-point channels to and from each of `peers` now (both
  // directions, with a one-byte transfer each way), so that no later send or
  // recv with them blocks the host. Every listed peer must call it with this
  // rank among its peers; pairs are connected in one global order, so any set
  // of calls that lists each pair on both sides completes.
  void connect_p2p(const std::vector<int>& peers);

  // The bootstrap's copy over the same ranks, in the same numbering, for host
  // tensors (all_reduce_scalar, config checks): an MPI communicator.
  const std::shared_ptr<Communicator>& host() const noexcept;

  // Aborts every NCCL communicator of this one (after a fatal error, so that
  // no operation of this rank keeps peers waiting); later operations throw,
  // and the watchdog stays quiet about the operations it cut short.
  void abort() noexcept;

  struct Impl;  // defined in nccl_communicator.cpp

 private:
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "NCCL 2.28.9" (the library loaded at run time), for `trident info`.
std::string nccl_library_version();

}  // namespace trident::dist
