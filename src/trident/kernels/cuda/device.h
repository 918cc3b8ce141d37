// The CUDA device backend: memory, copies, streams and events for core.
//
// Built when CMake finds nvcc (TRIDENT_CUDA=ON); it needs no GPU to build, and
// on a machine without one (or without a driver) device_count() is 0 and
// initialize() registers nothing, so CUDA tensors are a clear error and the
// `gpu` tests skip.
//
// Memory comes from a caching allocator, one per device: a freed block goes
// to a free list of its rounded size (512 B granularity below 1 MiB, 2 MiB
// above) and serves the next request of that size, so a training step that
// repeats the previous step's allocations makes no cudaMalloc (which
// synchronises the device) after the first step. allocator_stats() counts
// reserved and cached bytes and the cudaMalloc calls, which is how tests check
// that the step loop does not allocate. Under memory pressure the cache is
// returned to the driver and the allocation retried once before it fails with
// an error giving the request, the reserved and the cached bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trident::kernels::cuda {

// Errors for CUDA code that cannot use fmt (nvcc-compiled files, see common.cuh):
// both throw trident::Error with the message.
[[noreturn]] void throw_error(const std::string& message);
// Throws "CUDA: <what> failed: <description> (<name>)" unless status is cudaSuccess (0).
void check_status(int status, const char* what);

// GPUs visible to this process; 0 when CUDA has no device or no driver.
int device_count() noexcept;
// Registers the CUDA backend with core when a GPU is present (idempotent).
// Returns whether CUDA tensors can now be allocated.
bool initialize();
// "CUDA runtime 13.0, driver none, 0 devices" — for `trident info`.
std::string describe();

// The dense (no sparsity) tensor-core peak of `device` in TFLOP/s for bf16/f16
// inputs with f32 accumulation, or its f32 (non-TF32) CUDA-core peak: the
// datasheet figure for known GPUs (H100 SXM and H200: 989.4 bf16, 66.9 f32;
// A100: 312 / 19.5), otherwise SMs × clock × FLOPs per SM per clock of the
// architecture (Hopper 4096 bf16 / 256 f32, A100 2048 / 128, others 1024 / 128).
double dense_peak_tflops(int device, bool bf16);

struct AllocatorStats {
  std::int64_t reserved_bytes = 0;  // held from the driver (in use + cached)
  std::int64_t cached_bytes = 0;    // free blocks kept for reuse
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t driver_allocations = 0;  // cudaMalloc calls so far
};
AllocatorStats allocator_stats(int device);
// Returns every cached block of `device` to the driver.
void release_cached_memory(int device);
// Test aid: while on, every block handed out is first filled with 0xFF bytes
// (NaN in f32, bf16 and f16), so a kernel that leaves output elements unwritten
// is caught by the backend-consistency tests. Off by default.
void set_allocation_poison(bool on) noexcept;

// The device kernels run on: the calling thread's current CUDA device.
int current_device();
// Makes `device` the calling thread's current CUDA device for the lifetime of the guard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class Stream;
// The stream every trident kernel, copy and fill of `device` is queued on, in
// program order (created on first use, never destroyed). Work on other streams
// (NCCL's, the loader's copies) is ordered against it with events. Host-side
// reads of device memory (Tensor::to(cpu), item()) synchronise it.
const Stream& compute_stream(int device);

// A CUDA stream on one device (owning; movable).
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const noexcept { return device_; }
  void* native() const noexcept { return stream_; }  // cudaStream_t
  void synchronize() const;
  // Makes this stream wait (on the device) until everything queued on `other` so far is done.
  void wait(const Stream& other) const;

 private:
  int device_ = 0;
  void* stream_ = nullptr;
};

// A CUDA event for timing and cross-stream ordering (owning; movable).
class Event {
 public:
  explicit Event(int device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void* native() const noexcept { return event_; }  // cudaEvent_t
  void record(const Stream& stream);
  bool query() const;  // completed?
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded with timing = true).
  float elapsed_ms_since(const Event& start) const;

 private:
  int device_ = 0;
  void* event_ = nullptr;
};

// Page-locked host memory for fast, asynchronous host↔device copies (the
// data loader's staging buffers). Owning; movable.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t nbytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// Copies nbytes host → device (or device → host) on `stream` without waiting.
void copy_to_device_async(void* device_dst, const void* host_src, std::size_t nbytes, const Stream& stream);
void copy_to_host_async(void* host_dst, const void* device_src, std::size_t nbytes, const Stream& stream);

}  // namespace trident::kernels::cuda
