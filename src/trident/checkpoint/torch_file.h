// PyTorch's checkpoint format (torch.save since PyTorch 1.6), read without running any of it:
// what transformers' pytorch_model.bin files are, read with torch.load(weights_only=True)'s guarantee.
//
// The file is a zip archive whose entries share one top-level folder ARCHIVE/ (the file's stem, or
// "archive"): ARCHIVE/data.pkl, a pickle of the state dict; ARCHIVE/data/KEY, the raw bytes of each
// storage; ARCHIVE/byteorder ("little" or "big"; absent in older files, which are little-endian);
// ARCHIVE/version. Entries are stored uncompressed; libzip reads the archive.
//
// The pickle is not run. A small interpreter executes only the opcodes a state dict's protocol-2
// pickle uses (and protocol 4's framing, short strings and memo/global forms), building plain values:
// None, booleans, integers, floats, strings, tuples, lists and dicts. The only globals it accepts are
//   collections.OrderedDict                        (an empty dict),
//   torch._utils._rebuild_tensor_v2 / _rebuild_parameter (a tensor: a view of a storage),
//   torch.<T>Storage for T in Float, Double, Half, BFloat16, Long, Int, Short, Char, Byte, Bool
//                                                  (a storage's element type, inside a persistent id).
// Any other global (os.system, builtins.eval, ...) is refused when the pickle names it, with one line
// naming the file and the global as module.name; no callable is ever invoked, no object constructed
// beyond those values. A tensor is a view: a storage key, an element offset, sizes and strides, so
// views of one storage (tied weights, slices, transposes) read correctly; the bounds of every view
// are checked against its storage's size before any byte is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::checkpoint {

// A storage's element type as torch names it ("FloatStorage"), its size, and trident's dtype for it
// (none for Short, Char and Bool: such tensors parse, but reading one is an error naming it).
struct TorchStorageType {
  std::string_view name;
  std::size_t element_size = 0;
  bool has_dtype = false;
  DType dtype = DType::f32;
};

// One entry of the pickled state dict: `name` is a view of storage `storage` (the archive entry
// data/<storage>), which holds `storage_numel` elements of `type`.
struct TorchTensorRecord {
  std::string name;
  std::string storage;
  const TorchStorageType* type = nullptr;
  std::int64_t storage_numel = 0;
  std::int64_t offset = 0;  // in elements
  Shape shape;
  std::vector<std::int64_t> stride;  // in elements, one per dimension
};

// Interprets `pickle` (a data.pkl) as a state dict — a dict or OrderedDict of tensor names to tensors —
// and returns its entries in the pickle's order. Every view is checked against its storage's element
// count. Errors (a refused global, an unknown opcode, a truncated stream, a value that is not a tensor)
// are one line naming `context` (the file) and what was met.
std::vector<TorchTensorRecord> parse_torch_pickle(std::span<const std::byte> pickle, std::string_view context);

// What a tensor of the file is.
struct TorchTensorInfo {
  std::string name;
  Shape shape;
  const TorchStorageType* type = nullptr;
};

class TorchFile {
 public:
  // Opens the archive, interprets its data.pkl and checks that every storage the state dict names is
  // an entry of the archive holding at least the bytes its tensors view. Errors name the file.
  static TorchFile open(const std::string& path);

  const std::string& path() const noexcept { return path_; }
  // Tensor names in the pickle's order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  TorchTensorInfo info(const std::string& name) const;

  // The whole tensor, a contiguous copy in its own dtype (byte-swapped from a big-endian file).
  Tensor tensor(const std::string& name) const;
  // Copy of the box at `offsets` with extent `shape` (e.g. this rank's shard).
  Tensor read_box(const std::string& name, const std::vector<std::int64_t>& offsets, const Shape& shape) const;

 private:
  struct Archive;
  const TorchTensorRecord& record(const std::string& name) const;
  std::string path_;
  std::shared_ptr<Archive> archive_;
  std::vector<TorchTensorRecord> records_;
  std::map<std::string, std::size_t> index_;
};

}  // namespace trident::checkpoint
