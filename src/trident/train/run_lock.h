// Internal to the train module: one training per run directory.
//
// Two trainings writing one run directory would interleave metrics.jsonl, and
// each would replace and prune the other's checkpoints. The writer (rank 0)
// therefore holds an exclusive fcntl lock on RUN_DIR/train.lock for the whole
// run. The kernel (or the NFS lock manager) releases it when the process ends,
// however it ends — SIGKILL included — so a stale lock never blocks a new run.
// The holder writes "pid P on host H since T" into the file, which names it
// when a second training is refused.
#pragma once

#include <string>

namespace trident::train::detail {

class RunDirLock {
 public:
  RunDirLock() = default;
  // Creates `dir` if needed and locks DIR/train.lock, or throws one line naming the holder.
  explicit RunDirLock(const std::string& dir);
  RunDirLock(RunDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  // "pid P on host H since T" for this process, as the lock file records it.
  static std::string describe_self();

 private:
  void release() noexcept;
  int fd_ = -1;
};

}  // namespace trident::train::detail
