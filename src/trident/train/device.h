// The training device: the one file where a run's backend choice lives
// (docs/conventions.md#the-backend-choice-stays-in-one-place). Everything the trainer does
// differently on a GPU — which communicator its groups are split from, how
// batches reach the device, the peak MFU is measured against, waiting for
// queued work — is a function here; the CPU answers need no CUDA build.
#pragma once

#include <memory>

#include "trident/core/device.h"
#include "trident/core/dtype.h"
#include "trident/data/dataset/loader.h"
#include "trident/dist/communicator.h"
#include "trident/train/config/config.h"

namespace trident::train::detail {

// The communicator the dp/tp/pp/embedding groups of a run on `device` are
// split from: `world` itself for CPU tensors; for GPU tensors an NCCL
// communicator over the same ranks (host values still go over MPI), or a self
// communicator for a single rank. Several GPU ranks without NCCL are an error.
std::shared_ptr<dist::Communicator> group_parent(const std::shared_ptr<dist::Communicator>& world, Device device,
                                                 const Config& config);

// The matmul peak MFU is measured against: the CPU's, measured now, or the
// GPU's datasheet dense peak (bf16/f16 tensor cores, or f32).
double matmul_peak_gflops(Device device, DType compute);

// Waits until the work queued on `device` has finished (step timing); nothing on the CPU.
void synchronize(Device device);

// Moves batches to the training device: on a GPU through pinned staging
// buffers (an asynchronous DMA on the compute stream), on the CPU unchanged.
class BatchMover {
 public:
  explicit BatchMover(Device device);
  ~BatchMover();
  BatchMover(const BatchMover&) = delete;
  BatchMover& operator=(const BatchMover&) = delete;

  data::Batch operator()(data::Batch batch);

 private:
  struct Uploader;
  Device device_;
  std::unique_ptr<Uploader> uploader_;
};

}  // namespace trident::train::detail
