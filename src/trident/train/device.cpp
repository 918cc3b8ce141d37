#include "trident/train/device.h"

#include "trident/core/backend.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/dist/self_communicator.h"
#include "trident/kernels/cpu/matmul.h"
#include "trident/train/trainer.h"

#if TRIDENT_HAVE_CUDA
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/upload.h"
#endif
#if TRIDENT_HAVE_NCCL
#include "trident/dist/nccl_communicator.h"
#endif

namespace trident::train {

Device training_device(const Config& c) {
  Device d;
  try {
    d = parse_device(c.train.device);
  } catch (const Error&) {
    TRIDENT_FAIL("train.device '{}' is not a device: expected cpu, cuda or cuda:N", c.train.device);
  }
  if (d.is_cpu()) return d;
#if TRIDENT_HAVE_CUDA
  TRIDENT_CHECK(kernels::cuda::initialize(), "train.device '{}': no CUDA GPU is visible here ({})", c.train.device,
                kernels::cuda::describe());
  const int n = kernels::cuda::device_count();
  if (c.train.device == "cuda") {  // one GPU per rank on the node, by local rank
    TRIDENT_CHECK(local_rank_count() <= n,
                  "train.device 'cuda': {} ranks on this node but {} GPU(s) visible ({}); start at most one rank per "
                  "GPU",
                  local_rank_count(), n, kernels::cuda::describe());
    d.index = local_rank();
  }
  TRIDENT_CHECK(d.index < n, "train.device '{}': only {} GPU(s) visible ({})", c.train.device, n,
                kernels::cuda::describe());
  return d;
#else
  TRIDENT_FAIL("train.device '{}' needs the CUDA backend, which this build does not have (configure where nvcc is "
               "installed; `trident info` shows the build)",
               c.train.device);
#endif
}

namespace detail {

std::shared_ptr<dist::Communicator> group_parent(const std::shared_ptr<dist::Communicator>& world, Device device,
                                                 const Config& config) {
  if (!device.is_cuda()) return world;
  // One GPU rank (under mpirun or srun too): its groups of one still move GPU
  // tensors (ZeRO's reduce-scatter), which an MPI communicator refuses.
  if (world->size() == 1) return dist::self_communicator();
#if TRIDENT_HAVE_NCCL
  return dist::NcclCommunicator::create(world, device.index, config.dist.timeout_s);
#else
  TRIDENT_FAIL("train.device '{}' with {} ranks needs NCCL, which this build does not have (`trident info` shows the "
               "build)",
               config.train.device, world->size());
#endif
}

double matmul_peak_gflops(Device device, DType compute) {
#if TRIDENT_HAVE_CUDA
  if (device.is_cuda()) return 1e3 * kernels::cuda::dense_peak_tflops(device.index, compute != DType::f32);
#endif
  return kernels::cpu::measure_matmul_peak_gflops(compute == DType::bf16 ? DType::bf16 : DType::f32);
}

void synchronize(Device device) {
  if (!device.is_cpu()) backend_for(device).synchronize(device.index);
}

#if TRIDENT_HAVE_CUDA
struct BatchMover::Uploader {
  explicit Uploader(int device) : pinned(device) {}
  kernels::cuda::PinnedUploader pinned;
};
#else
struct BatchMover::Uploader {};
#endif

BatchMover::BatchMover(Device device) : device_(device) {
#if TRIDENT_HAVE_CUDA
  if (device.is_cuda()) uploader_ = std::make_unique<Uploader>(device.index);
#endif
}

BatchMover::~BatchMover() = default;

data::Batch BatchMover::operator()(data::Batch batch) {
#if TRIDENT_HAVE_CUDA
  if (uploader_) {
    batch.tokens = uploader_->pinned.upload(batch.tokens);
    batch.labels = uploader_->pinned.upload(batch.labels);
    if (batch.key_mask.defined()) batch.key_mask = uploader_->pinned.upload(batch.key_mask);
    return batch;  // (document starts stay on the host: positions are computed there; attention copies them)
  }
#endif
  batch.tokens = batch.tokens.to(device_);
  batch.labels = batch.labels.to(device_);
  if (batch.key_mask.defined()) batch.key_mask = batch.key_mask.to(device_);
  return batch;
}

}  // namespace detail
}  // namespace trident::train
