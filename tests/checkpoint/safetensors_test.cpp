#include "trident/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include "testing/helpers.h"

#include <filesystem>
#include <fstream>

namespace trident::checkpoint {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("trident-st-{}-{}", ::getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_raw(const std::string& name, const std::string& header, const std::string& data) {
    std::ofstream out(path(name), std::ios::binary);
    std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << data;
  }
  fs::path dir_;
};

TEST_F(Safetensors, ByteExactLayout) {
  SafetensorsWriter w;
  w.add("a", Tensor::from_vector<float>({1.0f, 2.0f}, {2}));
  w.add("b", Tensor::from_vector<std::int64_t>({7}, {1, 1}));
  w.write(path("x.safetensors"));
  std::ifstream in(path("x.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}})";
  std::string padded = json;
  while (padded.size() % 8) padded.push_back(' ');
  ASSERT_EQ(bytes.size(), 8 + padded.size() + 16);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), padded.size());
  EXPECT_EQ(bytes.substr(8, padded.size()), padded);
  float one;
  std::memcpy(&one, bytes.data() + 8 + padded.size(), 4);
  EXPECT_EQ(one, 1.0f);
  EXPECT_EQ(w.file_size(), bytes.size());
}

TEST_F(Safetensors, RoundTripWithMetadataAndViews) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::full({4}, 0.5, DType::bf16);
  w.add("layer.weight", a);
  w.add_lazy("layer.bias", DType::bf16, {4}, [&] { return b; });
  w.write(path("m.safetensors"));
  EXPECT_EQ(fs::file_size(path("m.safetensors")), w.file_size());

  auto f = SafetensorsFile::open(path("m.safetensors"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"layer.weight", "layer.bias"}));
  EXPECT_EQ(f.tensor("layer.weight").to_vector<double>(), a.to_vector<double>());
  EXPECT_EQ(f.tensor("layer.bias").dtype(), DType::bf16);
  EXPECT_EQ(f.tensor("layer.bias").to_vector<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  // A box: column 1..3 of row 1.
  Tensor box = f.read_box("layer.weight", {1, 1}, {1, 2});
  EXPECT_EQ(box.to_vector<double>(), (std::vector<double>{5, 6}));
  Tensor col = f.read_box("layer.weight", {0, 2}, {2, 1});
  EXPECT_EQ(col.to_vector<double>(), (std::vector<double>{3, 6}));
  EXPECT_FALSE(fs::exists(path("m.safetensors.tmp")));
}

TEST_F(Safetensors, ViewOutlivesFileObject) {
  SafetensorsWriter w;
  w.add("x", Tensor::from_vector<float>({3, 4}, {2}));
  w.write(path("v.safetensors"));
  Tensor t;
  { t = SafetensorsFile::open(path("v.safetensors")).tensor("x"); }
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3, 4}));
}

TEST_F(Safetensors, BadFilesNameFileAndProblem) {
  std::ofstream(path("short.safetensors")) << "abc";
  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("short.safetensors")); }).find("shorter than"), std::string::npos);

  write_raw("json.safetensors", "{not json", "");
  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("json.safetensors")); }).find("not valid JSON"), std::string::npos);

  write_raw("trunc.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  std::string msg = testing::error_message([&] { SafetensorsFile::open(path("trunc.safetensors")); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the data section"), std::string::npos) << msg;

  write_raw("size.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  msg = testing::error_message([&] { SafetensorsFile::open(path("size.safetensors")); });
  EXPECT_NE(msg.find("expected 12"), std::string::npos) << msg;

  write_raw("overlap.safetensors",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("overlap.safetensors")); }).find("overlap"), std::string::npos);

  write_raw("dtype.safetensors", R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0'));
  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("dtype.safetensors")); }).find("F8_E4M3"), std::string::npos);

  write_raw("len.safetensors", "", "");
  {
    std::ofstream out(path("len.safetensors"), std::ios::binary);
    std::uint64_t n = 1000;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  }
  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("len.safetensors")); }).find("header length 1000"), std::string::npos);

  EXPECT_NE(testing::error_message([&] { SafetensorsFile::open(path("missing.safetensors")); }).find("missing.safetensors"), std::string::npos);
}

// A shape whose byte count wraps around 2^64 must not pass as 0 bytes (reading it by its shape would
// run far past the mapping).
TEST_F(Safetensors, ByteCountThatOverflowsIsRejected) {
  write_raw("huge.safetensors", R"({"w":{"dtype":"F32","shape":[1152921504606846976,4],"data_offsets":[0,0]}})", "");
  const std::string msg = testing::error_message([&] { SafetensorsFile::open(path("huge.safetensors")); });
  EXPECT_NE(msg.find("huge.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1152921504606846976, 4]"), std::string::npos) << msg;
}

// 2^64 - 1 read as int64 is -1: [-1, -1] has "1 element" and would pass the byte count.
TEST_F(Safetensors, DimensionsMustBeNonNegativeInt64) {
  write_raw("wrap.safetensors",
            R"({"w":{"dtype":"F32","shape":[18446744073709551615,18446744073709551615],"data_offsets":[0,4]}})",
            std::string(4, '\0'));
  std::string msg = testing::error_message([&] { SafetensorsFile::open(path("wrap.safetensors")); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("non-negative"), std::string::npos) << msg;

  write_raw("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  msg = testing::error_message([&] { SafetensorsFile::open(path("neg.safetensors")); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("non-negative"), std::string::npos) << msg;
}

// An empty tensor sorted between two overlapping ones must not hide their overlap.
TEST_F(Safetensors, EmptyTensorDoesNotHideAnOverlap) {
  write_raw("hidden.safetensors",
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
            R"("c":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  const std::string msg = testing::error_message([&] { SafetensorsFile::open(path("hidden.safetensors")); });
  EXPECT_NE(msg.find("'a' and 'c' overlap"), std::string::npos) << msg;
}

TEST_F(Safetensors, MissingTensorAndBadBox) {
  SafetensorsWriter w;
  w.add("w", Tensor::zeros({2, 2}));
  w.write(path("w.safetensors"));
  auto f = SafetensorsFile::open(path("w.safetensors"));
  EXPECT_NE(testing::error_message([&] { f.info("v"); }).find("no tensor 'v'"), std::string::npos);
  EXPECT_NE(testing::error_message([&] { f.read_box("w", {1, 1}, {2, 1}); }).find("exceeds"), std::string::npos);
}

TEST_F(Safetensors, ProducerMismatchLeavesNoFile) {
  SafetensorsWriter w;
  w.add_lazy("w", DType::f32, {3}, [] { return Tensor::zeros({4}); });
  EXPECT_THROW(w.write(path("bad.safetensors")), Error);
  EXPECT_FALSE(fs::exists(path("bad.safetensors")));
  for (const auto& entry : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind " << entry.path();
}

}  // namespace
}  // namespace trident::checkpoint
