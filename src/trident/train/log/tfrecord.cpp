#include "trident/train/log/tfrecord.h"

#include <boost/crc.hpp>
#include <cstring>
#include <fstream>
#include <iterator>

#include "trident/core/error.h"

namespace trident::train::tfrecord {

namespace {
constexpr std::uint32_t kMaskDelta = 0xa282ead8u;

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
}  // namespace

std::uint32_t crc32c(std::string_view data) {
  // CRC-32C: polynomial 0x1EDC6F41, reflected in and out, initial value and final XOR all ones.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::vector<std::string> read_records(const std::string& path, bool* truncated) {
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "cannot read TFRecord file '{}'", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TRIDENT_CHECK(!in.bad(), "cannot read TFRecord file '{}': a read error", path);
  if (truncated) *truncated = false;
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t left = bytes.size() - at;
    if (left < 12) {  // cut short within the length or its checksum
      if (truncated) *truncated = true;
      break;
    }
    const std::uint64_t length = get_le(bytes.data() + at, 8);
    TRIDENT_CHECK(get_le(bytes.data() + at + 8, 4) == masked_crc32c(std::string_view(bytes).substr(at, 8)),
                  "TFRecord file '{}': the length of the record at byte {} fails its checksum", path, at);
    if (left < 16 || length > left - 16) {  // cut short within the data or its checksum
      if (truncated) *truncated = true;
      break;
    }
    const std::string_view data = std::string_view(bytes).substr(at + 12, length);
    TRIDENT_CHECK(get_le(bytes.data() + at + 12 + length, 4) == masked_crc32c(data),
                  "TFRecord file '{}': the data of the record at byte {} fails its checksum", path, at);
    records.emplace_back(data);
    at += 16 + length;
  }
  return records;
}

}  // namespace trident::train::tfrecord
