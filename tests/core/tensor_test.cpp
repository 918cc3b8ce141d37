#include "trident/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "trident/core/memory.h"

namespace trident {
namespace {

TEST(Tensor, EmptyIsAlignedAndAccounted) {
  const auto before = memory_stats(Device::cpu()).current;
  {
    Tensor t = Tensor::empty({3, 5}, DType::f32);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % kStorageAlignment, 0u);
    EXPECT_EQ(t.numel(), 15);
    EXPECT_EQ(t.nbytes(), 60u);
    EXPECT_EQ(memory_stats(Device::cpu()).current, before + 60);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current, before);
}

TEST(Tensor, MemoryCategories) {
  const auto before = memory_stats(Device::cpu());
  Tensor a;
  {
    MemoryCategoryScope scope(MemoryCategory::parameters);
    a = Tensor::empty({100}, DType::f64);
  }
  const auto after = memory_stats(Device::cpu());
  const auto idx = static_cast<std::size_t>(MemoryCategory::parameters);
  EXPECT_EQ(after.current_by_category[idx] - before.current_by_category[idx], 800);
  EXPECT_GE(after.peak_by_category[idx], after.current_by_category[idx]);
  Tensor b = Tensor::empty({10});
  EXPECT_EQ(b.storage()->category(), MemoryCategory::other);
}

TEST(Tensor, PeakTracksHighWaterMark) {
  reset_peak_memory(Device::cpu());
  const auto base = memory_stats(Device::cpu()).current;
  { Tensor big = Tensor::empty({1 << 20}, DType::u8); }
  const auto s = memory_stats(Device::cpu());
  EXPECT_EQ(s.current, base);
  EXPECT_GE(s.peak, base + (1 << 20));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor rows = t.slice0(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  rows.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[2], 42);
  Tensor row = t.select0(2);
  EXPECT_EQ(row.shape(), (Shape{2}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{4, 5}));
  Tensor v = t.view({2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  Tensor c = t.clone();
  c.data<float>()[0] = -1;
  EXPECT_EQ(t.data<float>()[0], 0);
}

TEST(Tensor, ConversionsRoundTrip) {
  Tensor t = Tensor::from_vector<double>({1.5, -2.25, 1e-3, 65504.0}, {4});
  Tensor h = t.to(DType::f16);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to(DType::f64).to_vector<double>()[3], 65504.0);
  Tensor b = t.to(DType::bf16).to(DType::f32);
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], 1.5f);
  Tensor i = t.to(DType::i64);
  EXPECT_EQ(i.to_vector<std::int64_t>()[1], -2);
  EXPECT_DOUBLE_EQ(Tensor::scalar(3.0).item(), 3.0);
  Tensor f = Tensor::full({3}, 2.5, DType::bf16);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
}

TEST(Tensor, BadInputNamesOpAndShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    (void)t.view({4, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("view"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos);
  }
  EXPECT_THROW((void)t.data<double>(), Error);
  EXPECT_THROW((void)t.slice0(1, 3), Error);
  EXPECT_THROW((void)t.to(Device::cuda(0)), Error);
  EXPECT_THROW((void)Tensor::from_vector<float>({1, 2}, {3}), Error);
  try {
    check_same_shape(t, Tensor::zeros({3, 2}), "add");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.message().c_str(), "add: shape mismatch [2, 3] vs [3, 2]");
  }
}

TEST(Tensor, ErrorCarriesRankAndLocation) {
  set_error_rank(3);
  try {
    TRIDENT_CHECK(false, "bad value {}", 7);
  } catch (const Error& e) {
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(e.message(), "bad value 7");
    EXPECT_NE(std::string(e.what()).find("[rank 3 on "), std::string::npos);
    EXPECT_NE(e.where().find("tensor_test.cpp:"), std::string::npos);
  }
  set_error_rank(-1);
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

TEST(HostCache, ReusesLargeBlocksAndReleases) {
  if (const char* v = std::getenv("TRIDENT_HOST_CACHE_MB"); v && std::string(v) == "0") {
    GTEST_SKIP() << "the host block cache is disabled (TRIDENT_HOST_CACHE_MB=0)";
  }
  release_host_cache();
  void* first = nullptr;
  {
    Tensor big = Tensor::empty({1 << 20}, DType::f32);  // 4 MiB
    first = big.raw_data();
  }
  EXPECT_GE(host_cache_bytes(), std::size_t{4} << 20);
  Tensor again = Tensor::empty({1 << 20}, DType::f32);
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(host_cache_bytes(), 0u);
  again = Tensor();
  release_host_cache();
  EXPECT_EQ(host_cache_bytes(), 0u);
}

}  // namespace
}  // namespace trident
