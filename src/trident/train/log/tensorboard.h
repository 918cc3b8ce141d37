// TensorBoard event files (log.tensorboard): the scalars of metrics.jsonl, written by MetricsLogger where it
// writes each JSON line, so the two always agree (docs/architecture.md §5).
//
// Each event is a protobuf `Event` (proto/tensorboard_event.proto, wire-compatible with TensorBoard's)
// framed as a TFRecord (tfrecord.h). One file per process start, named as TensorBoard names them; its
// first event is the file version.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace trident::train {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new event file in it,
  // events.out.tfevents.<unix seconds>.<host>.<pid>[.<run_tag>]. The seconds are later than those in every
  // event file already there, so the new file sorts after them (TensorBoard reads a directory's files in
  // name order), even on a host whose clock is behind. `run_tag` names the run (the trainer: a hash of
  // its run directory), so that a resume rewrites its own run's files and no one else's.
  explicit TensorBoardWriter(const std::string& dir, const std::string& run_tag = "");

  // This process's events begin at `step`: a SessionLog START event there, which makes TensorBoard's
  // reader drop what older files in the directory hold for steps >= `step` (a fresh run: step 0).
  void start_at(std::int64_t step);
  // A resume from the checkpoint of step `step` - 1: the steps from `step` on were done again, so they must
  // not show twice. start_at(step), and the older files of the same run tag are rewritten without those
  // steps (crash-safely: a new file renamed over the old one), for readers that do not purge. Files of
  // other runs, or without a tag, are left as they are (TensorBoard's START purge still hides their steps).
  void resume_at(std::int64_t step);
  // One event holding these scalars (TensorBoard keeps them as 32-bit floats), flushed at once.
  void scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);

  const std::string& path() const noexcept { return path_; }

 private:
  void write(const std::string& event);
  std::string dir_;
  std::string run_tag_;
  std::string path_;
  std::ofstream out_;
};

// The events of a file, decoded (tests; the rewrite of older files).
struct TensorBoardEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;    // the first event of a file
  bool session_start = false;  // a SessionLog START
  std::vector<std::pair<std::string, float>> scalars;
};
std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path);

}  // namespace trident::train
