// Test helper: writes PyTorch zip checkpoints as torch.save lays them out (checkpoint/torch_file.h has
// the format): a protocol-2 pickle of a state dict built opcode by opcode, the storages as entries
// ARCHIVE/data/KEY stored uncompressed, ARCHIVE/byteorder and ARCHIVE/version. Tests link libzip
// (PkgConfig::LIBZIP) to use it.
#pragma once

#include <zip.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "trident/core/tensor.h"

namespace trident::testing {

// A pickle stream, one opcode at a time (the opcodes of Python's pickle module, protocol 2).
class PickleWriter {
 public:
  PickleWriter& proto() { return op("\x80\x02"); }
  PickleWriter& op(std::string_view bytes) {
    out_.append(bytes);
    return *this;
  }
  PickleWriter& global(std::string_view module, std::string_view name) {
    out_ += 'c';
    out_.append(module).append("\n").append(name).append("\n");
    return *this;
  }
  PickleWriter& str(std::string_view s) {  // BINUNICODE
    out_ += 'X';
    le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  PickleWriter& integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      le(static_cast<std::uint64_t>(v), 1);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      out_ += '\x8a';
      out_ += '\x08';
      le(static_cast<std::uint64_t>(v), 8);
    }
    return *this;
  }
  PickleWriter& int_tuple(const std::vector<std::int64_t>& v) {
    mark();
    for (std::int64_t x : v) integer(x);
    return op("t");
  }
  PickleWriter& mark() { return op("("); }
  PickleWriter& put(int i) {  // BINPUT
    out_ += 'q';
    out_ += static_cast<char>(i);
    return *this;
  }
  PickleWriter& get(int i) {  // BINGET
    out_ += 'h';
    out_ += static_cast<char>(i);
    return *this;
  }
  // The persistent id of a storage: ('storage', torch.TYPE, KEY, 'cpu', NUMEL), then BINPERSID.
  PickleWriter& storage(std::string_view type, std::string_view key, std::int64_t numel) {
    mark().str("storage").global("torch", type).str(key).str("cpu").integer(numel).op("t");
    return op("Q");
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()), as torch pickles a tensor.
  PickleWriter& tensor(std::string_view type, std::string_view key, std::int64_t numel, std::int64_t offset,
                       const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    storage(type, key, numel).integer(offset).int_tuple(size).int_tuple(stride).op("\x89");
    global("collections", "OrderedDict").op(")R");
    return op("tR");
  }
  const std::string& bytes() const { return out_; }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

// One tensor of a hand-made state dict: a view of storage `key`.
struct TorchView {
  std::string name;
  std::string type;  // "FloatStorage", ...
  std::string key;
  std::int64_t numel = 0;  // the storage's elements
  std::int64_t offset = 0;
  std::vector<std::int64_t> size, stride;
};

// The pickle torch.save writes for an OrderedDict state dict of `views` (with the `_metadata`
// attribute a module's state_dict() carries).
inline std::string state_dict_pickle(const std::vector<TorchView>& views) {
  PickleWriter w;
  w.proto().global("collections", "OrderedDict").put(0).op(")R").put(1).mark();
  for (const TorchView& v : views) w.str(v.name).tensor(v.type, v.key, v.numel, v.offset, v.size, v.stride);
  w.op("u");
  w.op("}").str("_metadata").get(0).op(")R").str("").op("}").str("version").integer(1).op("sss").op("b");
  return w.op(".").bytes();
}

// Writes a zip archive of `entries` (name → bytes), every entry stored uncompressed.
inline void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries) {
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  if (!z) throw std::runtime_error("write_zip: cannot create " + path);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = src ? zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (i < 0 || zip_set_file_compression(z, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0) != 0) {
      if (src && i < 0) zip_source_free(src);
      zip_discard(z);
      throw std::runtime_error("write_zip: cannot add " + name);
    }
  }
  if (zip_close(z) != 0) {
    zip_discard(z);
    throw std::runtime_error("write_zip: cannot write " + path);
  }
}

// A PyTorch checkpoint: ARCHIVE/data.pkl = `pickle`, ARCHIVE/data/KEY = each storage's bytes.
inline void write_torch_zip(const std::string& path, const std::string& pickle,
                            const std::map<std::string, std::string>& storages, const std::string& byteorder = "little",
                            const std::string& archive = "archive") {
  std::vector<std::pair<std::string, std::string>> entries = {{archive + "/data.pkl", pickle}};
  if (!byteorder.empty()) entries.emplace_back(archive + "/byteorder", byteorder);
  for (const auto& [key, bytes] : storages) entries.emplace_back(archive + "/data/" + key, bytes);
  entries.emplace_back(archive + "/version", "3\n");
  write_zip(path, entries);
}

inline std::string tensor_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

// torch.save(state_dict) of contiguous tensors, each with a storage of its own; a tensor listed in
// `tied` (name → name of another) is saved as a view of the other's storage instead, as a tied weight is.
inline void write_state_dict(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                             const std::map<std::string, std::string>& tied = {}) {
  static const std::map<DType, std::string> kTypes = {{DType::f32, "FloatStorage"}, {DType::bf16, "BFloat16Storage"},
                                                      {DType::f16, "HalfStorage"},  {DType::f64, "DoubleStorage"},
                                                      {DType::i64, "LongStorage"},  {DType::i32, "IntStorage"}};
  std::vector<TorchView> views;
  std::map<std::string, std::string> storages;
  std::map<std::string, std::string> key_of;
  for (const auto& [name, t] : tensors) {
    TorchView v{name, kTypes.at(t.dtype()), "", t.numel(), 0, t.shape().dims(), {}};
    std::int64_t s = 1;
    v.stride.assign(t.rank(), 1);
    for (std::size_t d = t.rank(); d-- > 0;) {
      v.stride[d] = s;
      s *= t.shape()[d];
    }
    auto it = tied.find(name);
    if (it != tied.end()) {
      v.key = key_of.at(it->second);
    } else {
      v.key = std::to_string(storages.size());
      storages[v.key] = tensor_bytes(t);
    }
    key_of[name] = v.key;
    views.push_back(v);
  }
  write_torch_zip(path, state_dict_pickle(views), storages);
}

}  // namespace trident::testing
