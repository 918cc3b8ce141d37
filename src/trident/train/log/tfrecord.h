// TFRecord, the framing of TensorBoard's event files: each record is
//   u64 length (little-endian) | u32 masked CRC32C of those 8 bytes | data | u32 masked CRC32C of data
// where a masked CRC is ((crc >> 15) | (crc << 17)) + 0xa282ead8 (so that the CRC of data holding CRCs is
// not itself a CRC). The checksum is CRC-32C (Castagnoli), computed by Boost.CRC.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trident::train::tfrecord {

std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);

// The bytes of one record holding `data`.
std::string frame(std::string_view data);

// The records of a file, in order. A last record cut short (a crash while it was written) ends the list
// and sets *truncated; a checksum that does not match throws, naming the file and the record's offset.
std::vector<std::string> read_records(const std::string& path, bool* truncated = nullptr);

}  // namespace trident::train::tfrecord
