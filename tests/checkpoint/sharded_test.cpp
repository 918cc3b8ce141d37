#include "trident/checkpoint/sharded.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "testing/helpers.h"

namespace trident::checkpoint {
namespace {

namespace fs = std::filesystem;

Tensor iota(Shape s) {
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v, std::move(s));
}

Tensor box_of(const Tensor& t, std::int64_t r0, std::int64_t c0, std::int64_t rows, std::int64_t cols) {
  const auto v = t.to_vector<float>();
  std::vector<float> out;
  for (std::int64_t r = r0; r < r0 + rows; ++r)
    for (std::int64_t c = c0; c < c0 + cols; ++c) out.push_back(v[static_cast<std::size_t>(r * t.size(1) + c)]);
  return Tensor::from_vector(out, {rows, cols});
}

class Sharded : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("trident-ckpt-{}-{}", ::getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // "Rank 0" holds columns [0, 3) of w, "rank 1" columns [3, 5) (a tensor-parallel split),
  // and both hold the replicated bias, which only rank 0 writes.
  std::string save(const std::string& name) {
    const std::string final_dir = (root_ / name).string();
    const std::string tmp = begin_checkpoint(final_dir);
    Tensor w = iota({4, 5});
    write_shard(tmp + "/shard-00000.safetensors",
                {{"model/w", {4, 5}, {0, 0}, box_of(w, 0, 0, 4, 3)}, {"model/b", {3}, {0}, iota({3})}});
    write_shard(tmp + "/shard-00001.safetensors", {{"model/w", {4, 5}, {0, 3}, box_of(w, 0, 3, 4, 2)}});
    // meta.json's step is the directory's (the reader checks that they agree).
    commit_checkpoint(tmp, final_dir, {{"step", std::stoll(name.substr(5))}},
                      {"shard-00000.safetensors", "shard-00001.safetensors"}, (root_ / "latest").string());
    return final_dir;
  }
  // A one-shard checkpoint whose shard `write_shard_file` writes (crafted files).
  std::string save_one(const std::string& name, const std::function<void(const std::string&)>& write_shard_file) {
    const std::string final_dir = (root_ / name).string();
    const std::string tmp = begin_checkpoint(final_dir);
    write_shard_file(tmp + "/shard-00000.safetensors");
    commit_checkpoint(tmp, final_dir, {}, {"shard-00000.safetensors"}, "");
    return final_dir;
  }
  std::string save_pieces(const std::string& name, const std::vector<TensorPiece>& pieces) {
    return save_one(name, [&](const std::string& shard) { write_shard(shard, pieces); });
  }
  // A shard holding one 4x5 tensor "model/w@0,0" whose metadata is `meta` (JSON text).
  std::string save_with_metadata(const std::string& name, const std::string& meta) {
    return save_one(name, [&](const std::string& shard) {
      SafetensorsWriter w;
      w.set_metadata("model/w@0,0", meta);
      w.add("model/w@0,0", iota({4, 5}));
      w.write(shard);
    });
  }
  fs::path root_;
};

TEST_F(Sharded, ReassemblesAnyBoxFromPieces) {
  const std::string dir = save("step_00000007");
  CheckpointReader r(dir);
  EXPECT_EQ(r.meta()["step"], 7);
  EXPECT_EQ(r.global_shape("model/w"), (Shape{4, 5}));
  EXPECT_EQ(r.read("model/w", DType::f32).to_vector<float>(), iota({4, 5}).to_vector<float>());
  // A row split (as a different layout would need) crossing both pieces.
  EXPECT_EQ(r.read("model/w", {1, 0}, {2, 5}, DType::f32).to_vector<float>(),
            box_of(iota({4, 5}), 1, 0, 2, 5).to_vector<float>());
  EXPECT_EQ(r.read("model/w", {2, 2}, {2, 2}, DType::f64).to_vector<double>(),
            box_of(iota({4, 5}), 2, 2, 2, 2).to(DType::f64).to_vector<double>());
  EXPECT_EQ(r.read("model/b", DType::f32).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(read_latest((root_ / "latest").string()), dir);
}

TEST_F(Sharded, MissingPiecesTensorsAndShapesAreNamed) {
  const std::string final_dir = (root_ / "step_1").string();
  const std::string tmp = begin_checkpoint(final_dir);
  write_shard(tmp + "/shard-00000.safetensors", {{"model/w", {4, 5}, {0, 0}, iota({4, 3})}});
  commit_checkpoint(tmp, final_dir, {}, {"shard-00000.safetensors"}, "");
  CheckpointReader r(final_dir);
  try {
    r.read("model/w", DType::f32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cover 12 of the 20"), std::string::npos) << e.message();
  }
  EXPECT_NE([&] { try { r.read("model/v", DType::f32); } catch (const Error& e) { return e.message(); } return std::string(); }()
                .find("no tensor 'model/v'"),
            std::string::npos);
  EXPECT_THROW(r.read("model/w", {0, 0}, {5, 1}, DType::f32), Error);
}

TEST_F(Sharded, PiecesOutsideTheGlobalShapeAreNamed) {
  // Rows [0, 3) and [3, 6) of a tensor of 4 rows: 3 + 1 elements of the pieces fall inside, as many
  // as the tensor has, yet the second piece does not fit.
  std::string dir = save_pieces("step_1", {{"model/b", {4}, {0}, iota({3})}, {"model/b", {4}, {3}, iota({3})}});
  std::string msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("shard-00000.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model/b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceeds its global shape [4]"), std::string::npos) << msg;

  dir = save_pieces("step_2", {{"model/b", {4}, {-1}, iota({3})}});
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("exceeds its global shape [4]"), std::string::npos) << msg;

  // Offsets of a lower rank than the global shape (read() would index past them).
  dir = save_with_metadata("step_3", R"({"key": "model/w", "global_shape": [4, 5], "offsets": [0]})");
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("'model/w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank"), std::string::npos) << msg;

  // The stored tensor's shape must have the global shape's rank too.
  dir = save_with_metadata("step_4", R"({"key": "model/w", "global_shape": [20], "offsets": [0]})");
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("rank"), std::string::npos) << msg;

  dir = save_with_metadata("step_5", R"({"key": "model/w", "global_shape": [4, -5], "offsets": [0, 0]})");
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("global shape [4, -5]"), std::string::npos) << msg;
}

// Two overlapping pieces whose sizes add up to the tensor's would pass a count of covered elements
// while one element stays uninitialised.
TEST_F(Sharded, OverlappingPiecesAreRejected) {
  const std::string dir = save_pieces("step_1", {{"model/b", {4}, {0}, iota({3})}, {"model/b", {4}, {2}, iota({1})}});
  const std::string msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("'model/b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
}

// A global shape with more than 2^63 elements that no piece fills: an error, not a wrapped allocation.
TEST_F(Sharded, HugeGlobalShapeIsNotAllocated) {
  std::string dir = save_with_metadata(
      "step_1", R"({"key": "model/w", "global_shape": [4294967296, 4294967296], "offsets": [0, 0]})");
  std::string msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("global shape [4294967296, 4294967296]"), std::string::npos) << msg;
  dir = save_with_metadata("step_2",
                           R"({"key": "model/w", "global_shape": [4611686018427387904, 5], "offsets": [0, 0]})");
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("global shape [4611686018427387904, 5]"), std::string::npos) << msg;
  // Fewer than 2^63 elements, but more than 2^64 bytes in f32 (Tensor::empty would wrap): the missing
  // pieces are reported before the output is allocated.
  dir = save_pieces("step_3", {{"model/b", {4611686018427387904}, {0}, iota({1024})}});
  CheckpointReader r(dir);
  msg = testing::error_message([&] { r.read("model/b", DType::f32); });
  EXPECT_NE(msg.find("cover 1024 of the 4611686018427387904 elements"), std::string::npos) << msg;
}

TEST_F(Sharded, MalformedMetadataIsAnErrorThatNamesIt) {
  std::string dir = save_with_metadata("step_1", R"({"key": "model/w", "global_shape": [4, 5]})");
  std::string msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("shard-00000.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model/w@0,0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("offsets"), std::string::npos) << msg;

  dir = save_with_metadata("step_2", R"({"key": "model/w", "global_shape": "[4, 5]", "offsets": [0, 0]})");
  msg = testing::error_message([&] { CheckpointReader r(dir); });
  EXPECT_NE(msg.find("model/w@0,0"), std::string::npos) << msg;

  dir = save("step_00000003");
  std::ofstream(dir + "/meta.json") << R"({"format_version": "1", "files": {}})";
  EXPECT_NE(testing::error_message([&] { CheckpointReader r(dir); }).find("format version \"1\""), std::string::npos);
  std::ofstream(dir + "/meta.json") << R"({"format_version": 1, "files": {"config.toml": 7}})";
  EXPECT_NE(testing::error_message([&] { CheckpointReader r(dir); }).find("config.toml"), std::string::npos);
  std::ofstream(dir + "/meta.json") << R"([1])";
  EXPECT_NE(testing::error_message([&] { CheckpointReader r(dir); }).find("meta.json"), std::string::npos);

  // Resuming skips such checkpoints (to none here) instead of failing.
  std::vector<std::string> skipped;
  EXPECT_EQ(latest_valid_checkpoint(root_.string(), &skipped), "");
  EXPECT_EQ(skipped.size(), 3u) << fmt::format("{}", fmt::join(skipped, "\n"));
}

// A name that is not a step (here more digits than an int64 holds) is not a checkpoint.
TEST_F(Sharded, UnparsableStepNamesAreNotCheckpoints) {
  const std::string good = save("step_00000001");
  fs::create_directories(root_ / "step_99999999999999999999");
  fs::create_directories(root_ / "step_99999999999999999999.tmp");
  fs::remove(root_ / "latest");  // so the directories are scanned
  EXPECT_EQ(latest_valid_checkpoint(root_.string()), good);
  prune_checkpoints(root_.string(), 1, good);
  EXPECT_TRUE(fs::exists(good));
  EXPECT_TRUE(fs::exists(root_ / "step_99999999999999999999"));
}

// Any failure to open a candidate skips it, not only a trident::Error: here std::filesystem throws
// for a listed file name longer than the system allows.
TEST_F(Sharded, AnyFailureToOpenSkipsTheCheckpoint) {
  const std::string older = save("step_00000001");
  const std::string newer = save("step_00000002");
  std::ofstream(newer + "/meta.json") << R"({"format_version": 1, "files": {")" << std::string(300, 'a') << R"(": "0"}})";
  std::vector<std::string> skipped;
  EXPECT_EQ(latest_valid_checkpoint(root_.string(), &skipped), older);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step_00000002"), std::string::npos) << skipped[0];
}

TEST_F(Sharded, CorruptedShardIsDetectedByChecksum) {
  const std::string dir = save("step_00000007");
  const std::string shard = dir + "/shard-00001.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  try {
    CheckpointReader r(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("shard-00001.safetensors"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("corrupted"), std::string::npos) << e.message();
  }
}

TEST_F(Sharded, IncompleteCheckpointIsNeverLatest) {
  const std::string good = save("step_00000007");
  // A save that dies before commit leaves only a .tmp directory; latest still names the good one.
  const std::string tmp = begin_checkpoint((root_ / "step_00000008").string());
  write_shard(tmp + "/shard-00000.safetensors", {{"model/b", {3}, {0}, iota({3})}});
  EXPECT_EQ(read_latest((root_ / "latest").string()), good);
  EXPECT_FALSE(fs::exists(root_ / "step_00000008"));
  EXPECT_THROW(CheckpointReader{tmp}, Error);  // no meta.json
}

TEST_F(Sharded, LatestValidFallsBackPastCorruptOrMissingCheckpoints) {
  EXPECT_EQ(latest_valid_checkpoint(root_.string()), "");  // nothing saved yet
  const std::string older = save("step_00000001");
  const std::string newer = save("step_00000002");
  EXPECT_EQ(latest_valid_checkpoint(root_.string()), newer);
  // Leftovers of interrupted saves are never candidates.
  fs::create_directories(root_ / "step_00000009.tmp");
  fs::create_directories(root_ / "step_00000009.replaced");
  EXPECT_EQ(latest_valid_checkpoint(root_.string()), newer);
  {  // the newest one is corrupted: the previous one is picked, and the reason reported
    std::fstream f(newer + "/shard-00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x55');
  }
  std::vector<std::string> skipped;
  EXPECT_EQ(latest_valid_checkpoint(root_.string(), &skipped), older);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("shard-00000.safetensors"), std::string::npos) << skipped[0];
  // latest names a directory that is gone.
  fs::remove_all(newer);
  EXPECT_EQ(latest_valid_checkpoint(root_.string()), older);
}

TEST_F(Sharded, RecommittingAStepReplacesItWhole) {
  save("step_00000007");
  const std::string again = save("step_00000007");  // a resumed run redoing a step it had saved
  EXPECT_EQ(read_latest((root_ / "latest").string()), again);
  EXPECT_FALSE(fs::exists(again + ".replaced"));
  CheckpointReader r(again);
  EXPECT_EQ(r.read("model/w", DType::f32).to_vector<float>(), iota({4, 5}).to_vector<float>());
}

TEST_F(Sharded, PruneKeepsNewest) {
  save("step_00000001");
  save("step_00000002");
  const std::string last = save("step_00000003");
  prune_checkpoints(root_.string(), 2, last);
  EXPECT_FALSE(fs::exists(root_ / "step_00000001"));
  EXPECT_TRUE(fs::exists(root_ / "step_00000002"));
  EXPECT_TRUE(fs::exists(root_ / "step_00000003"));
}

TEST_F(Sharded, PruneOrdersStepsByNumberNotText) {
  // Past 8 digits the names no longer sort as text does: step_100000000 is the newest.
  save("step_99999998");
  save("step_99999999");
  const std::string last = save("step_100000000");
  prune_checkpoints(root_.string(), 2, "");
  EXPECT_FALSE(fs::exists(root_ / "step_99999998"));
  EXPECT_TRUE(fs::exists(root_ / "step_99999999"));
  EXPECT_TRUE(fs::exists(last));
}

TEST_F(Sharded, FileNamesInMetaJsonStayInTheCheckpointDirectory) {
  const std::string dir = save("step_00000007");
  // A file outside the checkpoint, listed with its right checksum, must not be read as part of it.
  const std::string outside = (root_ / "outside.safetensors").string();
  write_shard(outside, {{"model/w", {4, 5}, {0, 0}, iota({4, 5})}});
  for (const std::string& name : {std::string("../outside.safetensors"), outside}) {
    std::ifstream in(dir + "/meta.json");
    nlohmann::json meta = nlohmann::json::parse(in);
    in.close();
    meta["files"] = {{name, fmt::format("{:016x}", file_checksum(outside))}};
    std::ofstream(dir + "/meta.json") << meta.dump();
    try {
      CheckpointReader r(dir);
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("not a plain file name"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace trident::checkpoint
