#include "trident/kernels/cuda/device.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trident/core/backend.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/kernels/cuda/elementwise.h"

namespace trident::kernels::cuda {

namespace {

void check(cudaError_t rc, const char* what) {
  TRIDENT_CHECK(rc == cudaSuccess, "CUDA: {} failed: {} ({})", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

using DeviceScope = DeviceGuard;

cudaStream_t native(const Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// One device's caching allocator (see device.h).
class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  static std::size_t rounded(std::size_t nbytes) {
    constexpr std::size_t kSmall = 512, kLarge = std::size_t{2} << 20, kLargeFrom = std::size_t{1} << 20;
    const std::size_t unit = nbytes >= kLargeFrom ? kLarge : kSmall;
    return std::max(unit, (nbytes + unit - 1) / unit * unit);
  }

  void* allocate(std::size_t nbytes) {
    const std::size_t size = rounded(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<std::int64_t>(size);
      return p;
    }
    DeviceScope scope(device_);
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, size);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state
      release_locked();
      rc = cudaMalloc(&p, size);
    }
    TRIDENT_CHECK(rc == cudaSuccess,
                  "CUDA: out of memory on cuda:{} allocating {} bytes ({} reserved, {} cached): {}", device_, nbytes,
                  stats_.reserved_bytes, stats_.cached_bytes, cudaGetErrorString(rc));
    ++stats_.driver_allocations;
    stats_.reserved_bytes += static_cast<std::int64_t>(size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return p;
  }

  void deallocate(void* ptr, std::size_t nbytes) noexcept {
    const std::size_t size = rounded(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      free_[size].push_back(ptr);
      stats_.cached_bytes += static_cast<std::int64_t>(size);
    } catch (...) {
      cudaFree(ptr);
      stats_.reserved_bytes -= static_cast<std::int64_t>(size);
    }
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_locked();
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  void release_locked() {
    DeviceScope scope(device_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) {
        cudaFree(p);
        stats_.reserved_bytes -= static_cast<std::int64_t>(size);
      }
      blocks.clear();
    }
    stats_.cached_bytes = 0;
  }

  int device_;
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

std::atomic<bool> g_poison{false};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int devices) {
    for (int d = 0; d < devices; ++d) allocators_.push_back(std::make_unique<DeviceAllocator>(d));
  }
  void* allocate(std::size_t nbytes, int index) override {
    void* p = allocator(index).allocate(nbytes);
    if (g_poison.load(std::memory_order_relaxed) && nbytes > 0) {
      DeviceScope scope(index);
      check(cudaMemsetAsync(p, 0xFF, nbytes, native(compute_stream(index))), "cudaMemsetAsync (poison)");
    }
    return p;
  }
  void deallocate(void* ptr, std::size_t nbytes, int index) noexcept override {
    if (index >= 0 && index < static_cast<int>(allocators_.size())) allocators_[static_cast<std::size_t>(index)]->deallocate(ptr, nbytes);
  }
  // Queued on the compute stream so copies are ordered with kernels; a copy to
  // the host waits for it (the caller reads the bytes next), and so does a copy
  // from the host (its pageable source may be freed as soon as we return).
  // Between two GPUs the source device's stream is drained first (its kernels
  // may still be writing src) and the copy is waited for (src's block may go
  // back to its device's cache and be rewritten as soon as we return).
  void copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes) override {
    if (nbytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
      compute_stream(src_device.index).synchronize();
      DeviceScope scope(dst_device.index);
      const Stream& stream = compute_stream(dst_device.index);
      check(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, native(stream)),
            "cudaMemcpyPeerAsync");
      stream.synchronize();
      return;
    }
    const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
    DeviceScope scope(index);
    const cudaMemcpyKind kind = dst_device.is_cuda() ? (src_device.is_cuda() ? cudaMemcpyDeviceToDevice
                                                                               : cudaMemcpyHostToDevice)
                                                     : cudaMemcpyDeviceToHost;
    const cudaStream_t stream = native(compute_stream(index));
    check(cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync");
    if (kind != cudaMemcpyDeviceToDevice) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  void fill_zero(void* ptr, std::size_t nbytes, int index) override {
    if (nbytes == 0) return;
    DeviceScope scope(index);
    check(cudaMemsetAsync(ptr, 0, nbytes, native(compute_stream(index))), "cudaMemsetAsync");
  }
  void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n, int index) override {
    TRIDENT_CHECK(is_floating(src_dtype) && is_floating(dst_dtype),
                  "CUDA: Tensor::to({}) of a {} tensor: only floating dtypes convert on the GPU (convert on the host)",
                  dst_dtype, src_dtype);
    DeviceScope scope(index);
    cast(src, src_dtype, dst, dst_dtype, n);
  }
  void synchronize(int index) override {
    DeviceScope scope(index);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  int device_count() const override { return static_cast<int>(allocators_.size()); }

  DeviceAllocator& allocator(int index) {
    TRIDENT_CHECK(index >= 0 && index < static_cast<int>(allocators_.size()),
                  "CUDA: no device cuda:{} ({} visible)", index, allocators_.size());
    return *allocators_[static_cast<std::size_t>(index)];
  }

 private:
  std::vector<std::unique_ptr<DeviceAllocator>> allocators_;
};

std::mutex g_init_mutex;
CudaBackend* g_backend = nullptr;  // never destroyed: tensors may outlive static destruction

}  // namespace

void throw_error(const std::string& message) { TRIDENT_FAIL("{}", message); }

void check_status(int status, const char* what) { check(static_cast<cudaError_t>(status), what); }

int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
}
DeviceGuard::~DeviceGuard() {
  int now = previous_;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

const Stream& compute_stream(int device) {
  // Every launch asks for its stream: each thread remembers the answers, so
  // only a thread's first call per device takes the lock.
  thread_local std::vector<const Stream*> known;
  const auto d = static_cast<std::size_t>(device);
  if (device >= 0 && d < known.size() && known[d]) return *known[d];
  static std::mutex mutex;
  static std::unordered_map<int, Stream*> streams;  // never destroyed: kernels may run during static destruction
  std::lock_guard<std::mutex> lock(mutex);
  Stream*& s = streams[device];
  if (!s) s = new Stream(device);
  if (device >= 0) {
    if (known.size() <= d) known.resize(d + 1, nullptr);
    known[d] = s;
  }
  return *s;
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for callers that only ask
    return 0;
  }
  return n;
}

bool initialize() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_backend) return true;
  const int n = device_count();
  if (n == 0) return false;
  g_backend = new CudaBackend(n);
  register_backend(DeviceType::cuda, g_backend);
  return true;
}

std::string describe() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  const auto version = [](int v) { return v ? fmt::format("{}.{}", v / 1000, v % 1000 / 10) : std::string("none"); };
  std::string out = fmt::format("CUDA runtime {}, driver {}, {} device(s)", version(runtime), version(driver),
                                device_count());
  for (int d = 0; d < device_count(); ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      out += fmt::format("; cuda:{} {} (sm_{}{}, {:.0f} GiB)", d, prop.name, prop.major, prop.minor,
                         static_cast<double>(prop.totalGlobalMem) / (1 << 30));
    }
  }
  return out;
}

double dense_peak_tflops(int device, bool bf16) {
  // NVIDIA's datasheet figures where known (they assume a lower clock than the
  // reported boost clock, so the formula below would overstate them by ~8%).
  struct Known {
    const char* name_part;
    double bf16, f32;
  };
  static constexpr Known kKnown[] = {
      {"H200", 989.4, 66.9},      {"H100 PCIe", 756.0, 51.2}, {"H100 NVL", 835.0, 60.0},
      {"H100", 989.4, 66.9},      {"A100", 312.0, 19.5},      {"L40S", 362.0, 91.6},
  };
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const std::string name = prop.name;
  for (const Known& k : kKnown) {
    if (name.find(k.name_part) != std::string::npos) return bf16 ? k.bf16 : k.f32;
  }
  int sms = 0, clock_khz = 0, major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  double per_clock = 0;
  if (major >= 9) {
    per_clock = bf16 ? 4096 : 256;
  } else if (major == 8 && minor == 0) {
    per_clock = bf16 ? 2048 : 128;
  } else {
    per_clock = bf16 ? 1024 : 128;
  }
  return sms * (clock_khz * 1e3) * per_clock / 1e12;
}

AllocatorStats allocator_stats(int device) {
  TRIDENT_CHECK(g_backend, "CUDA: the backend is not initialised (no GPU, or initialize() not called)");
  return g_backend->allocator(device).stats();
}

void set_allocation_poison(bool on) noexcept { g_poison.store(on, std::memory_order_relaxed); }

void release_cached_memory(int device) {
  if (g_backend) g_backend->allocator(device).release();
}

Stream::Stream(int device) : device_(device) {
  DeviceScope scope(device);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
Stream::Stream(Stream&& o) noexcept : device_(o.device_), stream_(o.stream_) { o.stream_ = nullptr; }
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    device_ = o.device_;
    stream_ = o.stream_;
    o.stream_ = nullptr;
  }
  return *this;
}
void Stream::synchronize() const { check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize"); }
void Stream::wait(const Stream& other) const {
  Event done(other.device());
  done.record(other);
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(done.native()), 0),
        "cudaStreamWaitEvent");
}

Event::Event(int device, bool timing) : device_(device) {
  DeviceScope scope(device);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}
Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
Event::Event(Event&& o) noexcept : device_(o.device_), event_(o.event_) { o.event_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    device_ = o.device_;
    event_ = o.event_;
    o.event_ = nullptr;
  }
  return *this;
}
void Event::record(const Stream& stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream.native())),
        "cudaEventRecord");
}
bool Event::query() const {
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (rc == cudaErrorNotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}
void Event::synchronize() const { check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize"); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(event_)),
        "cudaEventElapsedTime");
  return ms;
}

PinnedBuffer::PinnedBuffer(std::size_t nbytes) : size_(nbytes) {
  check(cudaMallocHost(&data_, nbytes == 0 ? 1 : nbytes), "cudaMallocHost");
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFreeHost(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
  }
  return *this;
}

void copy_to_device_async(void* device_dst, const void* host_src, std::size_t nbytes, const Stream& stream) {
  check(cudaMemcpyAsync(device_dst, host_src, nbytes, cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(stream.native())),
        "cudaMemcpyAsync (host to device)");
}
void copy_to_host_async(void* host_dst, const void* device_src, std::size_t nbytes, const Stream& stream) {
  check(cudaMemcpyAsync(host_dst, device_src, nbytes, cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(stream.native())),
        "cudaMemcpyAsync (device to host)");
}

}  // namespace trident::kernels::cuda
