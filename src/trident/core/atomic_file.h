// Files that appear whole or not at all, and an inter-process lock.
//
// AtomicOutputFile writes to a temporary name beside the target and renames
// it over the target on commit() (after fsync), so a reader — another rank, a
// later run — never sees a half-written file; if the writer dies or throws,
// the temporary is removed and the target is untouched. After commit() returns
// the new contents survive a power cut (the directory entry is fsync'd too).
// FileLock holds an exclusive flock() on a lock file: it serialises processes
// (and threads) that build the same thing; the kernel releases it if the
// holder dies, so a crashed run never leaves a stale lock behind.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(std::filesystem::path target);
  ~AtomicOutputFile();  // removes the temporary unless committed
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, fsyncs and renames onto the target, then fsyncs its directory.
  void commit();

  const std::filesystem::path& target() const noexcept { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// Removes the temporaries of `target` that AtomicOutputFiles of processes no longer running on this host
// left behind (killed before they could remove them: SIGKILL, a power cut) and returns their paths. A
// temporary names its writer's process id; one whose process still runs is kept.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& target);

// Writes `content` to `path` through an AtomicOutputFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// fsyncs a directory, so that a rename or creation inside it survives a power cut.
void fsync_directory(const std::filesystem::path& dir);

class FileLock {
 public:
  // Blocks until the exclusive lock on `path` (created if missing) is held.
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Reads a whole file; errors name the file and `what` it is.
std::string read_whole_file(const std::filesystem::path& path, std::string_view what);

}  // namespace trident
