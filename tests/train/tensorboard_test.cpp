// TensorBoard event files (log.tensorboard): the TFRecord framing and its CRC32C against published test
// vectors, a round trip of written records, and the event writer's file naming, START events and the
// rewrite of older files on resume. tests/interop/tensorboard_interop.py reads them with TensorBoard.
#include "trident/train/log/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "trident/core/error.h"
#include "trident/train/log/tfrecord.h"

namespace trident::train {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trident-tensorboard-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}


TEST(TfRecord, Crc32cKnownVectors) {
  // The check value of CRC-32C, and the vectors of RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(tfrecord::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tfrecord::crc32c(""), 0u);
  EXPECT_EQ(tfrecord::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tfrecord::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(tfrecord::crc32c(ascending), 0x46DD794Eu);
}

TEST(TfRecord, MaskedCrcRotatesAndAddsTheDelta) {
  EXPECT_EQ(tfrecord::masked_crc32c(""), 0xa282ead8u);  // crc 0
  const std::uint32_t crc = 0xE3069283u;
  EXPECT_EQ(tfrecord::masked_crc32c("123456789"),
            static_cast<std::uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
}

TEST(TfRecord, FrameLayout) {
  const std::string f = tfrecord::frame("abc");
  ASSERT_EQ(f.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(f.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));  // u64 little-endian length
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(f[at + i])) << (8 * i);
    return v;
  };
  EXPECT_EQ(u32(8), tfrecord::masked_crc32c(f.substr(0, 8)));
  EXPECT_EQ(f.substr(12, 3), "abc");
  EXPECT_EQ(u32(15), tfrecord::masked_crc32c("abc"));
}

TEST(TfRecord, RoundTripTruncationAndCorruption) {
  const fs::path dir = scratch("records");
  const std::vector<std::string> records = {"first", std::string(1000, 'x'), "", std::string("\0\1\2", 3)};
  std::string bytes;
  for (const auto& r : records) bytes += tfrecord::frame(r);
  write_bytes(dir / "r", bytes);
  bool truncated = true;
  EXPECT_EQ(tfrecord::read_records((dir / "r").string(), &truncated), records);
  EXPECT_FALSE(truncated);

  // A crash while the last record was written: the others read, and the cut is reported.
  for (std::size_t cut : {1, 5, 12, 14}) {
    write_bytes(dir / "t", bytes.substr(0, bytes.size() - cut));
    EXPECT_EQ(tfrecord::read_records((dir / "t").string(), &truncated),
              std::vector<std::string>(records.begin(), records.end() - 1))
        << cut;
    EXPECT_TRUE(truncated);
  }

  // A flipped byte in the data, or in a length, is an error naming the file and the record.
  std::string bad = bytes;
  bad[12 + 2] ^= 0x10;
  write_bytes(dir / "bad", bad);
  try {
    tfrecord::read_records((dir / "bad").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the data of the record at byte 0 fails its checksum"), std::string::npos)
        << e.what();
  }
  bad = bytes;
  bad[tfrecord::frame(records[0]).size()] ^= 1;  // the second record's length
  write_bytes(dir / "bad", bad);
  EXPECT_THROW(tfrecord::read_records((dir / "bad").string()), Error);
  fs::remove_all(dir);
}

TEST(TensorBoardWriter, NamesTheFileAndWritesVersionStartAndScalars) {
  const fs::path dir = scratch("writer") / "tb" / "nested";
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    w.start_at(0);
    w.scalars(1, {{"loss", 2.5}, {"lr", 1e-3}});
    // Each event is on disk once written (a crash loses nothing written before).
    EXPECT_EQ(read_tensorboard_events(path).size(), 3u);
    w.scalars(2, {{"loss", 2.25}});
  }
  EXPECT_TRUE(std::regex_match(fs::path(path).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.[0-9]{10}\..+\.[0-9]+)")))
      << path;
  const auto events = read_tensorboard_events(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[2].step, 1);
  ASSERT_EQ(events[2].scalars.size(), 2u);
  EXPECT_EQ(events[2].scalars[0], (std::pair<std::string, float>{"loss", 2.5f}));
  EXPECT_EQ(events[2].scalars[1], (std::pair<std::string, float>{"lr", 1e-3f}));
  EXPECT_EQ(events[3].step, 2);
  fs::remove_all(dir.parent_path().parent_path());
}

TEST(TensorBoardWriter, ANewFileSortsAfterOlderOnesEvenFromTheFuture) {
  const fs::path dir = scratch("order");
  write_bytes(dir / "events.out.tfevents.9999999999.otherhost.1", "");
  TensorBoardWriter w(dir.string());
  EXPECT_EQ(fs::path(w.path()).filename().string().rfind("events.out.tfevents.10000000000.", 0), 0u) << w.path();
  fs::remove_all(dir);
}

// A resume rewrites its own run's older files (the same tag) and no one else's: another run sharing the
// directory, an untagged file, or a stray file with the prefix keep every byte.
TEST(TensorBoardWriter, ResumeDropsTheRedoneStepsFromOlderFiles) {
  const fs::path dir = scratch("resume");
  auto fill = [&](const std::string& tag) {
    TensorBoardWriter w(dir.string(), tag);
    w.start_at(0);
    for (int step = 0; step <= 14; ++step) w.scalars(step, {{"loss", step}});
    return fs::path(w.path());
  };
  const fs::path other = fill("0badc0de"), untagged = fill(""), older = fill("12345678");
  EXPECT_TRUE(older.filename().string().ends_with(".12345678")) << older;
  write_bytes(dir / "events.out.tfevents.1.stray.12345678", "hello\n");
  std::map<fs::path, std::string> before;
  for (const fs::path& f : {other, untagged, dir / "events.out.tfevents.1.stray.12345678"}) before[f] = read_bytes(f);
  TensorBoardWriter second(dir.string(), "12345678");
  second.resume_at(11);  // the checkpoint of step 10
  second.scalars(11, {{"loss", 100}});
  for (const auto& [f, bytes] : before) EXPECT_EQ(read_bytes(f), bytes) << f;

  const auto kept = read_tensorboard_events(older.string());
  ASSERT_EQ(kept.size(), 2u + 11);  // version, START, steps 0..10
  EXPECT_EQ(kept[0].file_version, "brain.Event:2");
  EXPECT_EQ(kept.back().step, 10);
  const auto events = read_tensorboard_events(second.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 11);
  EXPECT_EQ(events[2].scalars.at(0).second, 100.0f);
  fs::remove_all(dir);
}

TEST(TensorBoardWriter, UnwritableDirectoryIsAClearError) {
  const fs::path dir = scratch("unwritable");
  write_bytes(dir / "file", "");
  try {
    TensorBoardWriter w((dir / "file" / "tb").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot create the TensorBoard directory '" + (dir / "file" / "tb").string() + "'"),
        std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident::train
