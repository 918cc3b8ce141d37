// trident.preprocess and trident.write_dataset: Megatron datasets (PREFIX.bin/.idx) from files, from a
// Python iterable of texts (data::preprocess: the same worker threads, framing and card as `trident
// preprocess`), or from token arrays a program made itself (data::IndexedDatasetBuilder).
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "trident/data/dataset/dataset_card.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/preprocess.h"

namespace trident::python {

namespace {

Dict summary_dict(const data::PreprocessSummary& s) {
  Dict d;
  d["documents"] = s.documents;
  d["tokens"] = s.tokens;
  d["empty_documents"] = s.empty_documents;
  d["bad_lines"] = s.bad_lines;
  d["input_bytes"] = s.input_bytes;
  d["seconds"] = s.seconds;
  d["workers"] = s.workers;
  return d;
}

// The ids of one document handed in from Python: a 1-D integer array (numpy, torch, ...) or a sequence.
std::vector<std::int32_t> document_ids(nb::handle item, std::uint64_t index) {
  std::vector<std::int32_t> ids;
  nb::ndarray<nb::ro, nb::device::cpu> array;
  if (nb::try_cast(item, array, false)) {
    const auto dt = array.dtype();
    if (array.ndim() != 1 || dt.code != static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) &&
                                 dt.code != static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)) {
      raise_data_error(fmt::format("sequences[{}]: expected a 1-D integer array of token ids, got {} dimension(s) "
                                   "of dtype code {} ({} bits)",
                                   index, array.ndim(), dt.code, dt.bits));
    }
    const bool is_signed = dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
    const auto* base = static_cast<const char*>(array.data());
    for (std::size_t i = 0; i < array.shape(0); ++i) {
      const char* p = base + static_cast<std::ptrdiff_t>(i) * array.stride(0) * (dt.bits / 8);
      std::int64_t v = 0;
      switch (dt.bits) {
        case 8: v = is_signed ? *reinterpret_cast<const std::int8_t*>(p) : *reinterpret_cast<const std::uint8_t*>(p); break;
        case 16: v = is_signed ? *reinterpret_cast<const std::int16_t*>(p) : *reinterpret_cast<const std::uint16_t*>(p); break;
        case 32: v = is_signed ? *reinterpret_cast<const std::int32_t*>(p) : *reinterpret_cast<const std::uint32_t*>(p); break;
        default: v = *reinterpret_cast<const std::int64_t*>(p); break;
      }
      if (v < 0 || v > INT32_MAX) raise_data_error(fmt::format("sequences[{}][{}]: token id {} is negative or too large", index, i, v));
      ids.push_back(static_cast<std::int32_t>(v));
    }
    return ids;
  }
  try {
    for (nb::handle v : nb::iter(item)) {
      const auto id = nb::cast<std::int64_t>(v);
      if (id < 0 || id > INT32_MAX) {
        raise_data_error(fmt::format("sequences[{}][{}]: token id {} is negative or too large", index, ids.size(), id));
      }
      ids.push_back(static_cast<std::int32_t>(id));
    }
  } catch (const nb::cast_error&) {
    raise_data_error(fmt::format("sequences[{}]: expected token ids (ints), got {}", index,
                                 nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(item.ptr())))).c_str()));
  }
  return ids;
}

}  // namespace

void bind_data(nb::module_& m) {
  m.def(
      "preprocess",
      [](const data::Tokenizer& tokenizer, const std::string& tokenizer_source, const std::string& output_prefix,
         const std::vector<std::string>& inputs, nb::object documents, const std::string& json_key, bool append_eod,
         std::optional<std::string> eod_token, bool add_special_tokens, bool encoder, bool skip_bad_lines, int workers,
         bool overwrite) {
        data::PreprocessOptions o;
        for (const std::string& f : inputs) o.inputs.emplace_back(f);
        o.output_prefix = output_prefix;
        o.json_key = json_key;
        o.append_eod = append_eod;
        o.eod_token = eod_token;
        o.add_special_tokens = add_special_tokens;
        o.encoder = encoder;
        o.skip_bad_lines = skip_bad_lines;
        o.tokenizer_source = tokenizer_source;
        o.workers = workers;
        o.overwrite = overwrite;
        nb::object iterator;
        std::uint64_t index = 0;
        if (!documents.is_none()) {
          iterator = nb::iter(documents);
          // On this thread, between the workers' batches: the GIL is taken for each document.
          o.documents = [&](std::string& text) {
            nb::gil_scoped_acquire locked;
            PyObject* next = PyIter_Next(iterator.ptr());
            if (next == nullptr) {
              if (PyErr_Occurred()) throw nb::python_error();
              return false;
            }
            const nb::object item = nb::steal(next);
            if (!nb::isinstance<nb::str>(item)) {
              raise_data_error(fmt::format("documents[{}]: expected a str, got {}", index,
                                           nb::str(item.type().attr("__name__")).c_str()));
            }
            text = nb::cast<std::string>(item);
            ++index;
            return true;
          };
        }
        data::PreprocessSummary s;
        {
          nb::gil_scoped_release unlocked;
          s = data::preprocess(tokenizer, o);
        }
        return summary_dict(s);
      },
      nb::arg("tokenizer"), nb::arg("tokenizer_source"), nb::arg("output_prefix"), nb::arg("inputs"),
      nb::arg("documents").none(), nb::arg("json_key"), nb::arg("append_eod"), nb::arg("eod_token").none(),
      nb::arg("add_special_tokens"), nb::arg("encoder"), nb::arg("skip_bad_lines"), nb::arg("workers"),
      nb::arg("overwrite"), "`trident preprocess`: files, or an iterable of texts (documents), to PREFIX.bin/.idx");
  m.def(
      "write_dataset",
      [](const std::string& prefix, nb::typed<nb::iterable, nb::any> sequences, std::int64_t vocab_size,
         std::optional<const data::Tokenizer*> tokenizer, const std::string& tokenizer_source, bool append_eod) {
        data::IndexedDatasetBuilder builder(prefix, data::best_fitting_dtype(vocab_size));
        std::uint64_t index = 0;
        for (nb::handle item : sequences) {
          const std::vector<std::int32_t> ids = document_ids(item, index);
          for (std::size_t i = 0; i < ids.size(); ++i) {
            if (ids[i] >= vocab_size) {
              raise_data_error(fmt::format("sequences[{}][{}]: token id {} is not below vocab_size {}", index, i,
                                           ids[i], vocab_size));
            }
          }
          if (!ids.empty()) builder.add_document(ids);
          ++index;
        }
        if (builder.documents() == 0) raise_data_error(fmt::format("{}: no documents to write (every sequence given was empty)", prefix));
        builder.finalize();
        if (tokenizer && *tokenizer) {
          const data::Tokenizer& t = **tokenizer;
          data::write_dataset_card(prefix, data::DatasetCard{false, append_eod, true, tokenizer_source, t.vocab_size(),
                                                             data::tokenizer_fingerprint(t), builder.documents(),
                                                             builder.tokens()});
        }
        Dict d;
        d["documents"] = builder.documents();
        d["tokens"] = builder.tokens();
        return d;
      },
      nb::arg("prefix"), nb::arg("sequences"), nb::arg("vocab_size"), nb::arg("tokenizer").none(),
      nb::arg("tokenizer_source"), nb::arg("append_eod"),
      "PREFIX.bin/.idx from token sequences (1-D integer arrays or lists), one document each; with the "
      "tokenizer, the dataset's card too");
}

}  // namespace trident::python
