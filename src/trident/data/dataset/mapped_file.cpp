#include "trident/data/dataset/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trident/core/error.h"

namespace trident::data {

MappedFile::MappedFile(const std::filesystem::path& path, bool mmap) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, "cannot open '{}': {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    TRIDENT_FAIL("cannot stat '{}': {}", path.string(), std::strerror(err));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    return;
  }
  if (mmap) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    TRIDENT_CHECK(p != MAP_FAILED, "cannot mmap '{}' ({} bytes): {}", path.string(), size_, std::strerror(err));
    map_ = p;
    data_ = static_cast<const std::byte*>(p);
    return;
  }
  owned_.resize(size_);
  std::size_t done = 0;
  while (done < size_) {
    const ssize_t n = ::read(fd, owned_.data() + done, size_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      TRIDENT_FAIL("error reading '{}' at byte {} of {}: {}", path.string(), done, size_,
                   n == 0 ? "unexpected end of file" : std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  data_ = owned_.data();
}

void MappedFile::release() noexcept {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  owned_.clear();
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    map_ = o.map_;
    size_ = o.size_;
    owned_ = std::move(o.owned_);
    data_ = map_ ? o.data_ : owned_.data();
    o.map_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace trident::data
