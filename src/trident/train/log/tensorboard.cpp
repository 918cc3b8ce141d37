#include "trident/train/log/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tensorboard_event.pb.h"
#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/train/log/tfrecord.h"

namespace trident::train {

namespace fs = std::filesystem;
namespace pb = trident::tensorboard;

namespace {
constexpr std::string_view kPrefix = "events.out.tfevents.";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The unix seconds in an event file's name, or -1 for another file.
long long name_seconds(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string rest = name.substr(kPrefix.size());
  const auto dot = rest.find('.');
  try {
    return std::stoll(rest.substr(0, dot));
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<fs::path> event_files(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && name_seconds(entry.path().filename().string()) >= 0) out.push_back(entry.path());
  return out;
}

std::string hostname() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string serialized(const pb::Event& event) {
  std::string out;
  TRIDENT_CHECK(event.SerializeToString(&out), "internal: a TensorBoard event did not serialize");
  return out;
}

// Drops the summaries of steps >= `step` from an older event file (and a torn last record); a file that
// does not read, or is no event file, is left as it is: TensorBoard's own START purge still applies to it.
void drop_steps_from(const fs::path& file, std::int64_t step) {
  std::vector<std::string> records;
  bool truncated = false;
  try {
    records = tfrecord::read_records(file.string(), &truncated);
  } catch (const Error&) {
    return;
  }
  // Not an event file (its first record is not a file-version event): not ours to rewrite.
  pb::Event first;
  if (records.empty() || !first.ParseFromString(records.front()) || first.file_version().empty()) return;
  std::string kept;
  bool dropped = truncated;
  for (const std::string& record : records) {
    pb::Event event;
    if (event.ParseFromString(record) && event.has_summary() && event.step() >= step) {
      dropped = true;
      continue;
    }
    kept += tfrecord::frame(record);
  }
  if (dropped) write_file_atomically(file, kept);
}
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const std::string& run_tag)
    : dir_(dir), run_tag_(run_tag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TRIDENT_CHECK(!ec, "cannot create the TensorBoard directory '{}': {}", dir, ec.message());
  TRIDENT_CHECK(fs::is_directory(dir, ec), "the TensorBoard directory '{}' is not a directory", dir);
  long long seconds = static_cast<long long>(now_seconds());
  for (const fs::path& f : event_files(dir)) seconds = std::max(seconds, name_seconds(f.filename().string()) + 1);
  path_ = (fs::path(dir) / fmt::format("{}{}.{}.{}{}", kPrefix, seconds, hostname(), getpid(),
                                       run_tag.empty() ? "" : "." + run_tag))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  TRIDENT_CHECK(out_.good(), "cannot write the TensorBoard event file '{}': {}", path_, std::strerror(errno));
  pb::Event event;
  event.set_wall_time(now_seconds());
  event.set_file_version("brain.Event:2");
  write(serialized(event));
}

void TensorBoardWriter::resume_at(std::int64_t step) {
  const std::string own = "." + run_tag_;
  for (const fs::path& f : event_files(dir_))
    if (!run_tag_.empty() && f != fs::path(path_) && f.filename().string().ends_with(own)) drop_steps_from(f, step);
  start_at(step);
}

void TensorBoardWriter::start_at(std::int64_t step) {
  pb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  event.mutable_session_log()->set_status(pb::SessionLog::START);
  write(serialized(event));
}

void TensorBoardWriter::scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  pb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    pb::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write(serialized(event));
}

void TensorBoardWriter::write(const std::string& event) {
  out_ << tfrecord::frame(event);
  out_.flush();
  TRIDENT_CHECK(out_.good(), "cannot write the TensorBoard event file '{}': {}", path_, std::strerror(errno));
}

std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path) {
  std::vector<TensorBoardEvent> out;
  for (const std::string& record : tfrecord::read_records(path)) {
    pb::Event event;
    TRIDENT_CHECK(event.ParseFromString(record), "TensorBoard event file '{}': event {} is not an Event", path,
                  out.size());
    TensorBoardEvent e;
    e.wall_time = event.wall_time();
    e.step = event.step();
    e.file_version = event.file_version();
    e.session_start = event.has_session_log() && event.session_log().status() == pb::SessionLog::START;
    for (const pb::Summary::Value& v : event.summary().value()) e.scalars.emplace_back(v.tag(), v.simple_value());
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace trident::train
