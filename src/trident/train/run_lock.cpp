#include "trident/train/run_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "trident/core/error.h"

namespace trident::train::detail {

namespace fs = std::filesystem;

namespace {

// The holder's line from the lock file (it may be a moment before a new holder has written it).
std::string read_holder(const std::string& path) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[512];
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      std::string text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      for (char& c : text)
        if (c == '\n' || c == '\r') c = ' ';  // one line
      if (!text.empty()) return text;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "an unknown process (the lock file names none)";
}

}  // namespace

std::string RunDirLock::describe_self() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return fmt::format("pid {} on host {} since {}", static_cast<long>(::getpid()), host, when);
}

RunDirLock::RunDirLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TRIDENT_CHECK(!ec, "cannot create the run directory '{}': {}", dir, ec.message());
  const std::string path = (fs::path(dir) / "train.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TRIDENT_CHECK(fd >= 0, "cannot open the run directory's lock file '{}': {}", path, std::strerror(errno));
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // the whole file
  if (::fcntl(fd, F_SETLK, &fl) != 0) {
    const int err = errno;
    ::close(fd);
    TRIDENT_CHECK(err == EACCES || err == EAGAIN, "cannot lock the run directory's lock file '{}': {}", path,
                  std::strerror(err));
    TRIDENT_FAIL(
        "run directory '{}' is in use by another training: {} holds its lock ({}); wait for it to end or give "
        "another --run-dir",
        dir, read_holder(path), path);
  }
  fd_ = fd;
  const std::string me = describe_self() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    release();
    TRIDENT_FAIL("cannot write the run directory's lock file '{}': {}", path, std::strerror(err));
  }
}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunDirLock::~RunDirLock() { release(); }

void RunDirLock::release() noexcept {
  if (fd_ < 0) return;
  // The file stays (removing it would let a third process lock a new file while a second still waits
  // on the old one); closing releases the lock. An empty file says nobody holds it.
  if (::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace trident::train::detail
