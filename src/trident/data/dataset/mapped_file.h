// A read-only view of a whole file: memory-mapped, or read into memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace trident::data {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` (mmap = true) or reads it into memory; errors name the file.
  MappedFile(const std::filesystem::path& path, bool mmap);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }

 private:
  void release() noexcept;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  void* map_ = nullptr;  // non-null when mmapped
  std::vector<std::byte> owned_;
};

}  // namespace trident::data
