// trident's errors as Python exceptions. The library throws one type, trident::Error, whose message is the
// line the `trident` command prints; the extension raises it as the subclass of trident.Error (the classes
// are python/trident/errors.py's) that names
// what was wrong, told apart by the key the message starts with and the module that threw it:
//   ConfigError      a config key or value (train/config/, the cross-field checks, `section.key: ...`)
//   DataError        data.* keys, datasets, tokenizers, arrays handed in from Python (data/)
//   CheckpointError  checkpoints and pretrained directories (checkpoint/, models/pretrained)
//   DistError        the distributed runtime (dist/); CollectiveTimeout when a peer never answered
// A signal during the set-up's long waits (trident::Interrupted) is KeyboardInterrupt.
#include <nanobind/nanobind.h>

#include <array>
#include <string>
#include <string_view>

#include "bindings.h"
#include "trident/core/error.h"
#include "trident/core/interrupt.h"

namespace trident::python {

namespace {

enum Kind { kError, kConfig, kData, kCheckpoint, kDist, kTimeout, kKinds };
std::array<PyObject*, kKinds> types{};

bool starts_with_key_of(std::string_view message, std::initializer_list<std::string_view> sections) {
  for (std::string_view s : sections) {
    if (message.starts_with(s) && message.size() > s.size() && message[s.size()] == '.') return true;
  }
  return false;
}

Kind kind_of(const Error& e) {
  const std::string_view where = e.where();
  const std::string_view message = e.message();
  const auto in = [&](std::string_view part) { return where.find(part) != std::string_view::npos; };
  const auto starts = [&](std::initializer_list<std::string_view> words) {
    for (std::string_view w : words)
      if (message.starts_with(w)) return true;
    return false;
  };
  if (in("/checkpoint/") || in("pretrained") || in("run_checkpoint") ||
      starts({"checkpoint.", "checkpoint '", "--checkpoint", "--resume"}))
    return kCheckpoint;
  // The arrays a program hands to a model: their shapes, ids and labels.
  if (starts_with_key_of(message, {"data"}) ||
      starts({"--data", "--text", "--input", "--tokenizer", "forward_backward:", "embedding: id", "ids:", "labels:",
              "attention_mask:", "vocab_parallel_cross_entropy: target", "cross_entropy: target"}) ||
      in("/data/") || in("setup_data"))
    return kData;
  if (in("/config/") || in("setup_validate") || message.starts_with("--set") || message.starts_with("unknown") ||
      starts_with_key_of(message, {"model", "train", "optim", "schedule", "dist", "log"}))
    return kConfig;
  if (in("/dist/")) return kDist;
  return kError;
}

// The exception classes, defined in Python (python/trident/errors.py), found when first needed: the
// extension is imported by the package, and stub generation imports it alone.
PyObject* type_of(Kind kind) {
  static constexpr std::array<const char*, kKinds> names = {"Error",           "ConfigError", "DataError",
                                                            "CheckpointError", "DistError",   "CollectiveTimeout"};
  if (types[kind] == nullptr) {
    PyObject* module = PyImport_ImportModule("trident.errors");
    PyObject* type = module != nullptr ? PyObject_GetAttrString(module, names[kind]) : nullptr;
    Py_XDECREF(module);
    if (type == nullptr) {
      PyErr_Clear();
      return PyExc_RuntimeError;
    }
    types[kind] = type;  // kept for the interpreter's life
  }
  return types[kind];
}

}  // namespace

void raise_data_error(const std::string& message) {
  PyErr_SetString(type_of(kData), message.c_str());
  throw nb::python_error();
}

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    } catch (const dist::CollectiveTimeout& e) {
      PyErr_SetString(type_of(kTimeout), e.message().c_str());
    } catch (const Error& e) {
      PyErr_SetString(type_of(kind_of(e)), e.message().c_str());
    }
  });
}

}  // namespace trident::python
