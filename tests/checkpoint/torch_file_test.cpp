// checkpoint/torch_file.h on hand-made archives: views of shared storages, dtypes, byte order, and
// every refusal — a global outside the allow-list, an unknown opcode, a truncated file or pickle, a
// storage missing from the archive, a view outside its storage — as one line naming the file.
#include "trident/checkpoint/torch_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "testing/torch_zip.h"
#include "trident/core/error.h"

namespace trident::checkpoint {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using testing::PickleWriter;
using testing::TorchView;

class TorchFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("trident-torch-{}-{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The error TorchFile::open(file) throws ("" when none).
  static std::string open_error(const std::string& file) {
    try {
      TorchFile::open(file);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }
  // The error reading tensor `name` of `f` throws ("" when none).
  static std::string read_error(const TorchFile& f, const std::string& name) {
    try {
      f.tensor(name);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }
  static std::string parse_error(const std::string& pickle) {
    try {
      parse_torch_pickle(std::as_bytes(std::span(pickle.data(), pickle.size())), "x.pkl");
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }
  fs::path dir_;
};

std::string floats(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * 4};
}

TEST_F(TorchFileTest, ReadsViewsOfSharedStoragesInEveryDtype) {
  std::vector<float> base(12);
  for (int i = 0; i < 12; ++i) base[i] = static_cast<float>(i) + 0.5f;
  const Tensor half = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f}, {3}).to(DType::f16);
  const Tensor bf = Tensor::from_vector<float>({0.5f, 8.0f}, {2}).to(DType::bf16);
  const std::vector<TorchView> views = {
      {"w", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}},
      {"tied", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}},  // a tied weight: the same storage
      {"rows", "FloatStorage", "0", 12, 4, {2, 4}, {4, 1}},  // rows 1..2: an offset view
      {"wt", "FloatStorage", "0", 12, 0, {4, 3}, {1, 4}},    // w.t(): a strided view
      {"col", "FloatStorage", "0", 12, 2, {3}, {4}},         // w[:, 2]
      {"scalar", "FloatStorage", "0", 12, 11, {}, {}},
      {"h", "HalfStorage", "1", 3, 0, {3}, {1}},
      {"b", "BFloat16Storage", "2", 2, 0, {2}, {1}},
  };
  testing::write_torch_zip(path("m.bin"), testing::state_dict_pickle(views),
                           {{"0", floats(base)}, {"1", testing::tensor_bytes(half)}, {"2", testing::tensor_bytes(bf)}},
                           "little", "pytorch_model");
  const TorchFile f = TorchFile::open(path("m.bin"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "tied", "rows", "wt", "col", "scalar", "h", "b"}));
  EXPECT_EQ(f.info("wt").shape, (Shape{4, 3}));
  EXPECT_EQ(f.tensor("w").to_vector<float>(), base);
  EXPECT_EQ(f.tensor("tied").to_vector<float>(), base);
  EXPECT_EQ(f.tensor("rows").to_vector<float>(), std::vector<float>(base.begin() + 4, base.end()));
  std::vector<float> transposed;
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 3; ++r) transposed.push_back(base[r * 4 + c]);
  EXPECT_EQ(f.tensor("wt").to_vector<float>(), transposed);
  EXPECT_EQ(f.tensor("col").to_vector<float>(), (std::vector<float>{2.5f, 6.5f, 10.5f}));
  EXPECT_EQ(f.tensor("scalar").to_vector<float>(), std::vector<float>{11.5f});
  EXPECT_EQ(f.tensor("h").dtype(), DType::f16);
  EXPECT_EQ(f.tensor("h").to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(f.tensor("b").dtype(), DType::bf16);
  EXPECT_EQ(f.tensor("b").to_vector<float>(), (std::vector<float>{0.5f, 8.0f}));
  // A box of the transposed view: rows 1..2, columns 1..2 of w.t().
  EXPECT_EQ(f.read_box("wt", {1, 1}, {2, 2}).to_vector<float>(),
            (std::vector<float>{base[5], base[9], base[6], base[10]}));
  EXPECT_NE(open_error(path("absent.bin")).find("no such file"), std::string::npos);
}

TEST_F(TorchFileTest, BigEndianFilesAreSwapped) {
  std::string be;
  for (float v : {1.0f, -3.5f}) {
    const std::string b = floats({v});
    be.append(b.rbegin(), b.rend());
  }
  testing::write_torch_zip(path("be.bin"), testing::state_dict_pickle({{"x", "FloatStorage", "0", 2, 0, {2}, {1}}}),
                           {{"0", be}}, "big");
  EXPECT_EQ(TorchFile::open(path("be.bin")).tensor("x").to_vector<float>(), (std::vector<float>{1.0f, -3.5f}));
  // A file without byteorder (older PyTorch) is little-endian.
  testing::write_torch_zip(path("old.bin"), testing::state_dict_pickle({{"x", "FloatStorage", "0", 2, 0, {2}, {1}}}),
                           {{"0", floats({1.0f, -3.5f})}}, "");
  EXPECT_EQ(TorchFile::open(path("old.bin")).tensor("x").to_vector<float>(), (std::vector<float>{1.0f, -3.5f}));
  testing::write_torch_zip(path("odd.bin"), testing::state_dict_pickle({}), {}, "middle");
  EXPECT_NE(open_error(path("odd.bin")).find("byteorder is 'middle' (expected \"little\" or \"big\")"),
            std::string::npos)
      << open_error(path("odd.bin"));
}

TEST_F(TorchFileTest, RefusesEveryGlobalOutsideTheAllowList) {
  // pickle.dumps of an object whose __reduce__ returns (os.system, ("touch pwned",)).
  const std::string evil = PickleWriter().proto().global("os", "system").str("touch pwned").op("\x85R.").bytes();
  testing::write_torch_zip(path("evil.bin"), evil, {});
  const std::string msg = open_error(path("evil.bin"));
  EXPECT_NE(msg.find("'" + path("evil.bin") + "': refused global 'os.system' in the pickle"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_FALSE(fs::exists("pwned"));
  // The protocol-4 form (STACK_GLOBAL), and a global inside a tensor's arguments.
  const std::string eval =
      PickleWriter().op("\x80\x04").op("\x8c\x08").op("builtins").op("\x8c\x04").op("eval").op("\x93").bytes();
  EXPECT_NE(parse_error(eval + ".").find("refused global 'builtins.eval'"), std::string::npos) << parse_error(eval);
  const std::string nested = PickleWriter()
                                 .proto()
                                 .op("}")
                                 .str("w")
                                 .global("torch._utils", "_rebuild_tensor_v2")
                                 .mark()
                                 .global("subprocess", "Popen")
                                 .bytes();
  EXPECT_NE(parse_error(nested).find("refused global 'subprocess.Popen'"), std::string::npos) << parse_error(nested);
  // Allowed names used the wrong way are refused too: a storage type is not a function.
  const std::string call = PickleWriter().proto().global("torch", "FloatStorage").op(")R.").bytes();
  EXPECT_NE(parse_error(call).find("calls torch.FloatStorage, which is not a function"), std::string::npos)
      << parse_error(call);
}

TEST_F(TorchFileTest, UnknownOpcodesAndMalformedStreamsAreOneLine) {
  // INST ('i') and NEWOBJ (0x81) build arbitrary objects: not opcodes a state dict uses.
  EXPECT_NE(parse_error("\x80\x02"
                        "\x81.")
                .find("pickle opcode 0x81 at byte 2 is not one a state dict uses"),
            std::string::npos)
      << parse_error("\x80\x02\x81.");
  EXPECT_NE(parse_error("\x80\x02ios\nsystem\n.").find("opcode 0x69 at byte 2"), std::string::npos);
  EXPECT_NE(parse_error("\x80\x02X\x10\x00\x00\x00"
                        "abc"s)
                .find("the pickle is truncated"),
            std::string::npos);
  EXPECT_NE(parse_error("\x80\x02}").find("the pickle is truncated"), std::string::npos);
  EXPECT_NE(parse_error("\x80\x02]."), "");
  EXPECT_NE(parse_error("\x80\x02]").find("truncated"), std::string::npos);
  EXPECT_NE(parse_error("\x80\x02h\x05.").find("memo entry 5, which was never stored"), std::string::npos);
  EXPECT_NE(parse_error("\x80\x02s.").find("finds its stack empty"), std::string::npos);
  EXPECT_NE(parse_error("\x80\x02K\x01.").find("holds an int, not a state dict"), std::string::npos);
  const std::string not_tensor = PickleWriter().proto().op("}").str("a").integer(1).op("s.").bytes();
  EXPECT_NE(parse_error(not_tensor).find("entry 'a' of the state dict is an int"), std::string::npos);
  // A view reaching past its storage.
  const std::string past = testing::state_dict_pickle({{"w", "FloatStorage", "0", 12, 4, {3, 4}, {4, 1}}});
  EXPECT_NE(parse_error(past).find("reaches element 15 of storage '0', which holds 12"), std::string::npos)
      << parse_error(past);
}

TEST_F(TorchFileTest, DamagedArchivesAreNamed) {
  const std::string pickle = testing::state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {4}, {1}}});
  testing::write_torch_zip(path("ok.bin"), pickle, {{"0", floats({1, 2, 3, 4})}});
  // Truncated: half the file.
  const auto size = fs::file_size(path("ok.bin"));
  fs::copy_file(path("ok.bin"), path("half.bin"));
  fs::resize_file(path("half.bin"), size / 2);
  EXPECT_NE(open_error(path("half.bin")).find("half.bin' is a truncated or damaged zip archive"), std::string::npos)
      << open_error(path("half.bin"));
  // A truncated data.pkl inside a whole archive.
  testing::write_torch_zip(path("short.bin"), pickle.substr(0, pickle.size() - 20), {{"0", floats({1, 2, 3, 4})}});
  EXPECT_NE(open_error(path("short.bin")).find("short.bin': the pickle is truncated"), std::string::npos)
      << open_error(path("short.bin"));
  // A storage the pickle names but the archive lacks, and one shorter than its tensor.
  testing::write_torch_zip(path("missing.bin"), pickle, {});
  EXPECT_NE(open_error(path("missing.bin"))
                .find("tensor 'w' views storage '0', but the archive has no entry 'archive/data/0'"),
            std::string::npos)
      << open_error(path("missing.bin"));
  testing::write_torch_zip(path("small.bin"), pickle, {{"0", floats({1, 2})}});
  EXPECT_NE(open_error(path("small.bin")).find("holds 8 bytes, but tensor 'w' needs 16"), std::string::npos)
      << open_error(path("small.bin"));
  // Not a zip: torch.save's legacy format, and anything else.
  std::ofstream(path("legacy.bin"), std::ios::binary) << std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46", 8);
  EXPECT_NE(open_error(path("legacy.bin")).find("legacy format (PyTorch before 1.6)"), std::string::npos);
  std::ofstream(path("text.bin")) << "hello";
  EXPECT_NE(open_error(path("text.bin")).find("is not a PyTorch checkpoint"), std::string::npos);
  // A zip without data.pkl; a TorchScript archive.
  testing::write_zip(path("other.zip"), {{"a/readme.txt", "x"}});
  EXPECT_NE(open_error(path("other.zip")).find("has no ARCHIVE/data.pkl"), std::string::npos);
  testing::write_zip(path("script.pt"), {{"m/data.pkl", pickle}, {"m/constants.pkl", "x"}, {"m/code/m.py", "x"}});
  EXPECT_NE(open_error(path("script.pt")).find("TorchScript module"), std::string::npos);
}

// A broadcast view (stride 0) claims more elements than its storage holds: it parses (BERT's
// position_ids buffer is an expanded view, of a size-1 dimension) but is not read beyond its storage.
TEST_F(TorchFileTest, BroadcastViewsLargerThanTheirStorageAreNotAllocated) {
  testing::write_torch_zip(path("wide.bin"),
                           testing::state_dict_pickle({{"ids", "FloatStorage", "0", 3, 0, {1, 3}, {0, 1}},
                                                       {"wide", "FloatStorage", "0", 3, 0, {1LL << 40, 3}, {0, 1}}}),
                           {{"0", floats({0, 1, 2})}});
  const TorchFile f = TorchFile::open(path("wide.bin"));
  EXPECT_EQ(f.tensor("ids").to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_NE(read_error(f, "wide").find("repeats the 3 elements of its storage (a broadcast view, stride [0, 1])"),
            std::string::npos)
      << read_error(f, "wide");
}

TEST_F(TorchFileTest, StoragesTridentHasNoDtypeForParseButDoNotRead) {
  testing::write_torch_zip(path("mask.bin"),
                           testing::state_dict_pickle({{"mask", "BoolStorage", "0", 4, 0, {2, 2}, {2, 1}},
                                                       {"w", "FloatStorage", "1", 1, 0, {1}, {1}}}),
                           {{"0", std::string("\1\0\0\1", 4)}, {"1", floats({2})}});
  const TorchFile f = TorchFile::open(path("mask.bin"));
  EXPECT_EQ(f.tensor("w").to_vector<float>(), std::vector<float>{2});
  EXPECT_NE(read_error(f, "mask").find("tensor 'mask' is stored as torch.BoolStorage, which trident does not read"),
            std::string::npos)
      << read_error(f, "mask");
}

}  // namespace
}  // namespace trident::checkpoint
