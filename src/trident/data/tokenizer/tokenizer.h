// Tokenizer: BPE and WordPiece that encode and decode exactly as Hugging Face
// `tokenizers` does for the same tokenizer.json; WordPiece (BERT) with
// BertNormalizer, BertPreTokenizer, the WordPiece decoder and pair templates
// with type ids, or from a bare vocab.txt (docs/data.md, "WordPiece"); BPE in
// both families:
//  - byte-level BPE (GPT-2, Llama 3, Qwen2): pre-tokenizer ByteLevel / Split /
//    Sequence, decoder ByteLevel, normalizer none or NFC (Qwen2's);
//  - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama, CodeLlama):
//    byte_fallback and fuse_unk, the normalizer Sequence[Prepend("▁"),
//    Replace(" ", "▁")] or a Metaspace pre-tokenizer, decoders Replace /
//    ByteFallback / Fuse / Strip / Metaspace;
// with added and special tokens and the post-processors ByteLevel /
// TemplateProcessing / Roberta / Bert / Sequence; or from GPT-2's vocab.json +
// merges.txt. Anything else in the file that would change the ids or the
// decoded text (another normalizer, BPE dropout, ...) is rejected with an
// error naming its JSON path, never silently ignored. Padding is ignored;
// `truncation` is loaded and applied by encode_pair and by an Encoder asked
// to (set_truncate) — preprocessing never truncates a document.
//
// Encoding pipeline (Hugging Face's): cut out added tokens with
// normalized=false -> per remaining span, normalize, cut out added tokens with
// normalized=true -> per remaining span, Metaspace's replacement and prefix or
// ByteLevel's prefix space -> pre-tokenize -> BPE per piece -> post-processor
// template (when add_special_tokens).
//
// Input text may be any bytes: invalid UTF-8 is encoded byte-level (see
// pre_tokenizer.h), and decode(encode(x)) == x for every byte string x when
// the tokenizer is byte-level and adds no special tokens. (SentencePiece-style
// tokenizers cover invalid bytes with byte fallback; their decoder, like
// Hugging Face's, turns invalid UTF-8 into U+FFFD.)
//
// A Tokenizer is an immutable, cheaply copyable handle; share it between
// threads freely. Encoding goes through an Encoder, a per-thread session that
// caches the ids of pieces it has seen (most words repeat).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trident/data/tokenizer/added_vocabulary.h"
#include "trident/data/tokenizer/bpe_model.h"
#include "trident/data/tokenizer/model.h"
#include "trident/data/tokenizer/decoder.h"
#include "trident/data/tokenizer/normalizer.h"
#include "trident/data/tokenizer/pre_tokenizer.h"

namespace trident::data {

// The names an end-of-document token goes by, in the order Tokenizer::eod_id()
// tries them: GPT-2/Qwen2, Llama 3, Llama 2/Mistral, Gemma.
std::span<const std::string_view> end_of_document_names() noexcept;
// The same names for messages: "<|endoftext|>, <|end_of_text|>, </s> or <eos>".
std::string end_of_document_names_text();

// One item of a post-processor template: special-token ids, or sequence A or B.
struct TemplateItem {
  enum class Kind { ids, sequence_a, sequence_b };
  Kind kind = Kind::ids;
  std::vector<std::int32_t> ids;  // ids only
  std::uint32_t type_id = 0;
};

// Hugging Face's `truncation` (applied before the template, whose tokens count).
struct Truncation {
  enum class Strategy { longest_first, only_first, only_second };
  std::size_t max_length = 512;
  Strategy strategy = Strategy::longest_first;
  bool left = false;  // direction "Left": keep the end
};

// Everything a tokenizer is made of; what the loaders produce.
struct TokenizerParts {
  Model model;  // BPE or WordPiece
  AddedVocabulary added;  // normalized tokens' patterns made with `normalizer`
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  // Post-processing of a single sequence: ids before and after it.
  std::vector<std::int32_t> prefix_ids;
  std::vector<std::int32_t> suffix_ids;
  // The pair template with type ids; empty: none was given (A and B are
  // joined, type ids 0 and 1).
  std::vector<TemplateItem> pair_template;
  std::optional<Truncation> truncation;
};

class Tokenizer {
 public:
  Tokenizer() = default;  // empty: every method but valid() throws
  explicit Tokenizer(TokenizerParts parts);

  // A tokenizer.json file; errors name the file and the JSON path.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // tokenizer.json content; `source` names it in errors.
  static Tokenizer from_json(std::string_view json_text, std::string_view source = "tokenizer.json");
  // GPT-2's files: "<|endoftext|>" (when in the vocabulary) becomes a special token.
  static Tokenizer from_gpt2_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // BERT's vocab.txt (one token per line, the id is the line number), read as
  // transformers' BertTokenizer(Fast) reads it: BertNormalizer (lowercase and
  // accent stripping as `do_lower_case`), BertPreTokenizer, WordPiece with
  // "[UNK]", "##" and 100 characters per word, the template [CLS] $A [SEP] /
  // [CLS] $A [SEP] $B:1 [SEP]:1, the WordPiece decoder, and [PAD] [UNK]
  // [CLS] [SEP] [MASK] as special tokens (those in the vocabulary).
  static Tokenizer from_wordpiece_vocab(const std::filesystem::path& vocab_txt, bool do_lower_case = true);
  // The tokenizer.json that from_wordpiece_vocab loads (what transformers'
  // BertTokenizerFast would save), with the vocabulary `tokens` (id = index;
  // a token listed twice keeps its last index).
  static std::string wordpiece_json(const std::vector<std::string>& tokens, bool do_lower_case,
                                    std::optional<bool> strip_accents = std::nullopt,
                                    bool tokenize_chinese_chars = true);
  // `path` is a tokenizer.json, a vocab.json with merges.txt beside it, a
  // WordPiece vocab.txt, or a directory holding one of them. For a vocab.txt,
  // `do_lower_case` when given, else "do_lower_case" of a
  // tokenizer_config.json beside it, else true (bert-base-uncased).
  static Tokenizer load(const std::filesystem::path& path, std::optional<bool> do_lower_case = std::nullopt);

  bool valid() const noexcept { return parts_ != nullptr; }

  // Convenience: encodes with a fresh Encoder (no cache across calls).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // A pair of sequences through the pair template ([CLS] A [SEP] B [SEP] for
  // BERT); `type_ids`, when given, receives each id's type (segment) id.
  std::vector<std::int32_t> encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true,
                                        std::vector<std::uint32_t>* type_ids = nullptr) const;
  // The text the ids stand for, through the decoder: for byte-level
  // tokenizers the bytes (Hugging Face's decode before its lossy UTF-8
  // conversion); unknown ids throw. Special tokens decode to their text
  // unless skip_special_tokens.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  // One past the largest id (model vocabulary and added tokens).
  std::int32_t vocab_size() const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;
  bool is_special(std::int32_t id) const;
  // The end-of-document token: the first of end_of_document_names() that exists.
  std::optional<std::int32_t> eod_id() const;

  const TokenizerParts& parts() const;

 private:
  std::shared_ptr<const TokenizerParts> parts_;
  // id -> index into parts_->added.tokens() (or -1), sized vocab_size().
  std::shared_ptr<const std::vector<std::int32_t>> added_by_id_;
  std::int32_t vocab_size_ = 0;
};

// Streaming detokenization (as Hugging Face tokenizers' DecodeStream): ids
// arrive one at a time, and step() returns the text each adds once it is
// final. Decoding each id alone is wrong for most decoders: a SentencePiece
// Strip or Metaspace decoder drops the leading space of a first token, and
// ByteFallback or byte-level tokens may hold part of a character. So each step
// decodes the context and every id so far and returns what extends the text
// returned before; text that ends in an incomplete UTF-8 sequence or U+FFFD
// waits for the next id (finish() returns whatever is still held). Each step
// costs a decode of the whole sequence, small next to a model's forward pass.
class DecodeStream {
 public:
  // `context`: ids already shown (a prompt), whose text step() never returns.
  DecodeStream(Tokenizer tokenizer, std::vector<std::int32_t> context);

  std::string step(std::int32_t id);
  std::string finish();

 private:
  std::string advance(bool final);

  Tokenizer tokenizer_;
  std::vector<std::int32_t> ids_;
  std::string shown_;  // the decoded text returned so far (the context's included)
};

// A per-thread encoding session with a cache of piece -> ids. Not thread-safe;
// create one per thread from the same Tokenizer.
class Encoder {
 public:
  // `cache_entries`: how many distinct pieces to remember before starting over.
  explicit Encoder(Tokenizer tokenizer, std::size_t cache_entries = 1 << 18);

  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out, bool add_special_tokens = true);
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true);
  // Appends the ids of the pair (a, b) to `out` (see Tokenizer::encode_pair).
  void encode_pair(std::string_view a, std::string_view b, std::vector<std::int32_t>& out,
                   bool add_special_tokens = true, std::vector<std::uint32_t>* type_ids = nullptr);

  const Tokenizer& tokenizer() const noexcept { return tokenizer_; }
  // Apply the tokenizer's `truncation` (when it has one) in encode() too;
  // encode_pair always applies it.
  void set_truncate(bool on) noexcept { truncate_ = on; }

 private:
  // The ids of `text` without the template (added tokens, normalizer, model).
  void encode_sequence(std::string_view text, std::vector<std::int32_t>& out);
  // A span between added tokens with normalized=false; `at_start`: it begins the input.
  void encode_plain(std::string_view text, bool at_start, std::vector<std::int32_t>& out);
  // A span between added tokens, normalized.
  void encode_span(std::string_view text, bool at_start, std::vector<std::int32_t>& out);

  struct CacheEntry {
    std::uint32_t offset;
    std::uint32_t length;
  };
  Tokenizer tokenizer_;
  const TokenizerParts* parts_;
  bool truncate_ = false;
  std::size_t cache_entries_;
  std::unordered_map<std::string, CacheEntry, StringHash, std::equal_to<>> cache_;
  std::vector<std::int32_t> arena_;
  std::vector<Segment> segments_;
  std::vector<Segment> normalized_segments_;
  std::vector<Piece> pieces_;
  PreTokenizer::Scratch scratch_;
  std::string normalized_;
  std::string prepared_;
};

// Encodes each text alone, as Hugging Face's encode_batch does: result i is the ids of texts[i]. The texts
// are split over `threads` threads (0: the hardware's), each with its own Encoder, in contiguous runs; a
// thread's first error is rethrown once every thread is done.
std::vector<std::vector<std::int32_t>> encode_batch(const Tokenizer& tokenizer, std::span<const std::string_view> texts,
                                                    bool add_special_tokens = true, int threads = 0);

}  // namespace trident::data
