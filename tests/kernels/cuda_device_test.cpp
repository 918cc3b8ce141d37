// The CUDA device backend (kernels/cuda/device.h): without a GPU only the
// first case runs (no device is a clean state, CUDA tensors a clear error);
// with one, memory round trips, the caching allocator's reuse, streams,
// events and pinned asynchronous copies.
#include "trident/kernels/cuda/device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/memory.h"
#include "trident/core/tensor.h"

namespace trident::kernels::cuda {
namespace {

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!initialize()) GTEST_SKIP() << "no CUDA GPU here: " << describe();
  }
};

TEST(CudaDeviceAbsent, NoGpuIsACleanStateAndCudaTensorsAClearError) {
  const std::string what = describe();
  EXPECT_NE(what.find("CUDA runtime"), std::string::npos) << what;
  if (device_count() > 0) GTEST_SKIP() << "a GPU is present: " << what;
  EXPECT_FALSE(initialize());
  try {
    (void)Tensor::zeros({4}, DType::f32, Device::cuda(0));
    FAIL() << "a CUDA tensor was allocated without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cuda:0 is not available"), std::string::npos) << e.message();
  }
}

TEST_F(CudaDevice, HostDeviceRoundTripAndZeroFill) {
  std::vector<float> v(1000);
  std::iota(v.begin(), v.end(), 0.5f);
  const Tensor host = Tensor::from_vector(v, {10, 100});
  const Tensor dev = host.to(Device::cuda(0));
  EXPECT_TRUE(dev.device().is_cuda());
  EXPECT_EQ(dev.to(Device::cpu()).to_vector<float>(), v);
  Tensor z = Tensor::zeros({10, 100}, DType::f32, Device::cuda(0));
  EXPECT_EQ(z.to(Device::cpu()).to_vector<float>(), std::vector<float>(1000, 0.0f));
  EXPECT_GT(memory_stats(Device::cuda(0)).current, 0);
}

TEST_F(CudaDevice, FreedBlocksAreReusedWithoutTheDriver) {
  { Tensor warm = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0)); }
  const std::int64_t before = allocator_stats(0).driver_allocations;
  for (int step = 0; step < 10; ++step) {
    Tensor a = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));  // the same rounded size each step
  }
  EXPECT_EQ(allocator_stats(0).driver_allocations, before);
  EXPECT_GE(allocator_stats(0).cached_bytes, std::int64_t{4} << 20);
  release_cached_memory(0);
  EXPECT_EQ(allocator_stats(0).cached_bytes, 0);
}

TEST_F(CudaDevice, StreamsEventsAndPinnedAsyncCopies) {
  Stream stream(0);
  const std::size_t n = 1 << 16;
  PinnedBuffer in(n * sizeof(float)), out(n * sizeof(float));
  auto* src = static_cast<float*>(in.data());
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 977);
  Tensor dev = Tensor::empty({static_cast<std::int64_t>(n)}, DType::f32, Device::cuda(0));
  Event start(0, true), stop(0, true);
  start.record(stream);
  copy_to_device_async(dev.raw_data(), in.data(), in.size(), stream);
  copy_to_host_async(out.data(), dev.raw_data(), out.size(), stream);
  stop.record(stream);
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
  Stream other(0);
  other.wait(stream);  // ordering only; must not fail
  other.synchronize();
}

}  // namespace
}  // namespace trident::kernels::cuda
