#include "trident/core/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "trident/core/error.h"

namespace trident {
namespace {

std::filesystem::path temp_name(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  return target.string() + fmt::format(".tmp.{}.{}", ::getpid(), counter.fetch_add(1));
}

}  // namespace

AtomicOutputFile::AtomicOutputFile(std::filesystem::path target) : target_(std::move(target)) {
  if (target_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target_.parent_path(), ec);
  }
  temp_ = temp_name(target_);
  file_ = std::fopen(temp_.c_str(), "wb");
  TRIDENT_CHECK(file_ != nullptr, "cannot create '{}': {}", temp_.string(), std::strerror(errno));
  static_cast<void>(std::setvbuf(file_, nullptr, _IOFBF, 1 << 20));
}

AtomicOutputFile::~AtomicOutputFile() {
  if (file_) std::fclose(file_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
}

void AtomicOutputFile::write(const void* data, std::size_t bytes) {
  TRIDENT_CHECK(file_ != nullptr && !committed_, "write to '{}' after commit", target_.string());
  if (bytes == 0) return;
  TRIDENT_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, "error writing '{}': {}", temp_.string(),
                std::strerror(errno));
}

void AtomicOutputFile::commit() {
  TRIDENT_CHECK(file_ != nullptr && !committed_, "'{}' committed twice", target_.string());
  TRIDENT_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, "error flushing '{}': {}", temp_.string(),
                std::strerror(errno));
  const int rc = std::fclose(file_);
  file_ = nullptr;
  TRIDENT_CHECK(rc == 0, "error closing '{}': {}", temp_.string(), std::strerror(errno));
  TRIDENT_CHECK(std::rename(temp_.c_str(), target_.c_str()) == 0, "cannot rename '{}' to '{}': {}", temp_.string(),
                target_.string(), std::strerror(errno));
  committed_ = true;
  fsync_directory(target_.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  AtomicOutputFile f(path);
  f.write(content);
  f.commit();
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the data itself is already fsync'd
  static_cast<void>(::fsync(fd));
  ::close(fd);
}

FileLock::FileLock(const std::filesystem::path& path) {
  if (path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
  }
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TRIDENT_CHECK(fd_ >= 0, "cannot open lock file '{}': {}", path.string(), std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    TRIDENT_FAIL("cannot lock '{}': {}", path.string(), std::strerror(err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

std::string read_whole_file(const std::filesystem::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "cannot open {} '{}'", what, path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  TRIDENT_CHECK(!in.bad(), "error reading {} '{}'", what, path.string());
  return std::move(ss).str();
}

}  // namespace trident
