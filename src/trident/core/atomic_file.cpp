#include "trident/core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "trident/core/error.h"

namespace trident {
namespace {

constexpr std::string_view kTempInfix = ".tmp.";

std::filesystem::path temp_name(const std::filesystem::path& target) {
  static std::atomic<std::uint64_t> counter{0};
  return target.string() + fmt::format("{}{}.{}", kTempInfix, ::getpid(), counter.fetch_add(1));
}

}  // namespace

std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  std::vector<fs::path> removed;
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + std::string(kTempInfix);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // "<target>.tmp.<pid>.<counter>" (temp_name)
    const std::string rest = name.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos ||
        rest.find_first_not_of("0123456789.") != std::string::npos || rest.size() - dot < 2)
      continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) removed.push_back(it->path());
  }
  return removed;
}

AtomicOutputFile::AtomicOutputFile(std::filesystem::path target) : target_(std::move(target)) {
  if (target_.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target_.parent_path(), ec);
  }
  temp_ = temp_name(target_);
  file_ = std::fopen(temp_.c_str(), "wb");
  TRIDENT_CHECK(file_ != nullptr, "cannot write '{}': {}", target_.string(), std::strerror(errno));
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
  TRIDENT_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, "error writing '{}': {}", target_.string(),
                std::strerror(errno));
}

void AtomicOutputFile::commit() {
  TRIDENT_CHECK(file_ != nullptr && !committed_, "'{}' committed twice", target_.string());
  TRIDENT_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, "error writing '{}': {}",
                target_.string(), std::strerror(errno));
  const int rc = std::fclose(file_);
  file_ = nullptr;
  TRIDENT_CHECK(rc == 0, "error writing '{}': {}", target_.string(), std::strerror(errno));
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
