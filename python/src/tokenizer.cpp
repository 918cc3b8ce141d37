// trident.Tokenizer: data::Tokenizer (Hugging Face tokenizer.json, GPT-2's vocab.json + merges.txt, BERT's
// vocab.txt), with encode_batch on several threads while the GIL is released.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace trident::python {

namespace {
nb::str text_of(const std::string& bytes) {
  // Byte-level decoders may end inside a character: shown as U+FFFD, as Hugging Face's decode does.
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (s == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(s);
}
}  // namespace

void bind_tokenizer(nb::module_& m) {
  nb::class_<data::Tokenizer>(m, "Tokenizer", "A tokenizer: byte-level BPE, WordPiece, SentencePiece-style BPE")
      .def_static(
          "from_file",
          [](const std::string& path, std::optional<bool> do_lower_case) {
            return data::Tokenizer::load(path, do_lower_case);
          },
          nb::arg("path"), nb::arg("do_lower_case") = nb::none(),
          "A tokenizer.json, a vocab.json with merges.txt beside it, a WordPiece vocab.txt, or a directory "
          "holding one")
      .def(
          "encode",
          [](const data::Tokenizer& t, std::string_view text, bool add_special_tokens) {
            return t.encode(text, add_special_tokens);
          },
          nb::arg("text"), nb::arg("add_special_tokens") = true, "The ids of `text`")
      .def(
          "encode_batch",
          [](const data::Tokenizer& t, const std::vector<std::string>& texts, bool add_special_tokens, int threads) {
            if (threads < 0) raise_data_error("encode_batch: threads=" + std::to_string(threads) + ": expected 0 (every core) or more");
            const std::vector<std::string_view> views(texts.begin(), texts.end());
            nb::gil_scoped_release unlocked;
            return data::encode_batch(t, views, add_special_tokens, threads);
          },
          nb::arg("texts"), nb::arg("add_special_tokens") = true, nb::arg("threads") = 0,
          "The ids of each text, encoded alone, on `threads` threads (0: every core) without the GIL")
      .def(
          "decode",
          [](const data::Tokenizer& t, const std::vector<std::int32_t>& ids, bool skip_special_tokens) {
            return text_of(t.decode(ids, skip_special_tokens));
          },
          nb::arg("ids"), nb::arg("skip_special_tokens") = false, "The text the ids stand for")
      .def_prop_ro("vocab_size", &data::Tokenizer::vocab_size, "One past the largest id")
      .def("token_to_id", &data::Tokenizer::token_to_id, nb::arg("token"))
      .def("id_to_token", &data::Tokenizer::id_to_token, nb::arg("id"))
      .def_prop_ro("eod_id", &data::Tokenizer::eod_id, "The end-of-document token's id, if it has one");
}

}  // namespace trident::python
