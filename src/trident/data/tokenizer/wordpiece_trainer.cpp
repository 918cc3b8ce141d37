#include "trident/data/tokenizer/wordpiece_trainer.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/normalizer.h"
#include "trident/data/tokenizer/pre_tokenizer.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/data/tokenizer/word_counts.h"

namespace trident::data {
namespace {

constexpr std::string_view kPrefix = "##";

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

WordPieceTrainer::WordPieceTrainer(WordPieceTrainerOptions options) : options_(std::move(options)) {
  TRIDENT_CHECK(options_.vocab_size > 0, "WordPiece trainer: vocab_size {} must be positive", options_.vocab_size);
}

void WordPieceTrainer::feed(std::string_view text) {
  BertNormalizerOptions norm;  // clean text, CJK spacing, strip accents, lowercase
  PreTokenizer pre;
  pre.add_bert();
  std::string normalized;
  bert_normalize(text, norm, normalized);
  std::vector<Piece> pieces;
  PreTokenizer::Scratch scratch;
  pre.split(normalized, pieces, scratch);
  count_pieces(normalized, pieces, counts_);
}

void WordPieceTrainer::feed_file(const std::filesystem::path& path) {
  LineBlockReader reader(path);
  for (std::string block; reader.next(block);) feed(block);
}

std::vector<std::string> WordPieceTrainer::train() const {
  std::vector<std::string> tokens(std::begin(kWordPieceSpecialTokens), std::end(kWordPieceSpecialTokens));
  Vocab ids;
  for (std::size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<std::int32_t>(i));
  auto id_of = [&](const std::string& t) {
    if (auto it = ids.find(t); it != ids.end()) return it->second;
    const auto id = static_cast<std::int32_t>(tokens.size());
    tokens.push_back(t);
    ids.emplace(t, id);
    return id;
  };
  // Words in a fixed order (sorted), so the result does not depend on hashing.
  const auto words_sorted = sorted_word_counts(counts_);
  // The alphabet in code-point order, each character and its "##" form.
  std::set<char32_t> alphabet;
  std::set<std::string> invalid;  // bytes that start no valid character (a word may hold any bytes)
  auto chars_of = [](std::string_view w) {
    std::vector<std::string> out;
    for (std::size_t pos = 0; pos < w.size();) {
      char32_t c = 0;
      std::size_t len = decode_utf8(w, pos, c);
      if (len == 0) len = 1;
      out.emplace_back(w.substr(pos, len));
      pos += len;
    }
    return out;
  };
  for (const auto& [w, c] : words_sorted) {
    for (const auto& ch : chars_of(w)) {
      char32_t cp = 0;
      if (decode_utf8(ch, 0, cp) == ch.size()) {
        alphabet.insert(cp);
      } else {
        invalid.insert(ch);
      }
    }
  }
  for (char32_t cp : alphabet) {
    std::string s;
    append_utf8(s, cp);
    id_of(s);
    id_of(std::string(kPrefix) + s);
  }
  for (const auto& s : invalid) {
    id_of(s);
    id_of(std::string(kPrefix) + s);
  }
  // Every character (and its ## form) must be a token, or a word of it would encode to [UNK]: a smaller
  // vocabulary is refused, as the BPE trainer refuses one below its 256 byte tokens.
  TRIDENT_CHECK(static_cast<std::int64_t>(tokens.size()) <= options_.vocab_size,
                "vocabulary size {} is smaller than the {} special tokens + the corpus's {} characters, each with "
                "its ## form, = {}",
                options_.vocab_size, std::size(kWordPieceSpecialTokens), alphabet.size() + invalid.size(),
                tokens.size());
  struct Word {
    std::vector<std::int32_t> symbols;
    std::int64_t count;
  };
  std::vector<Word> words;
  words.reserve(words_sorted.size());
  for (const auto& [w, c] : words_sorted) {
    Word word{{}, c};
    bool first = true;
    for (const auto& ch : chars_of(w)) {
      word.symbols.push_back(ids.at(first ? ch : std::string(kPrefix) + ch));
      first = false;
    }
    words.push_back(std::move(word));
  }
  std::unordered_map<std::uint64_t, std::int64_t> pair_counts;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
  auto add_pairs = [&](std::uint32_t wi, std::int64_t sign, bool index) {
    const Word& w = words[wi];
    for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const std::uint64_t k = pair_key(w.symbols[i], w.symbols[i + 1]);
      pair_counts[k] += sign * w.count;
      if (index) where[k].push_back(wi);
    }
  };
  for (std::uint32_t wi = 0; wi < words.size(); ++wi) add_pairs(wi, 1, true);
  // Max-heap of (count, smallest ids first); entries are checked against pair_counts when popped.
  using Entry = std::tuple<std::int64_t, std::int64_t, std::int64_t>;  // count, -a, -b
  std::priority_queue<Entry> heap;
  auto push = [&](std::uint64_t k) {
    const std::int64_t c = pair_counts[k];
    if (c > 0) heap.emplace(c, -static_cast<std::int64_t>(k >> 32), -static_cast<std::int64_t>(k & 0xffffffffu));
  };
  for (const auto& [k, c] : pair_counts) push(k);
  std::vector<std::uint32_t> last_seen(words.size(), ~0u);
  std::uint32_t merge_no = 0;
  while (static_cast<std::int32_t>(tokens.size()) < options_.vocab_size && !heap.empty()) {
    const auto [count, na, nb] = heap.top();
    heap.pop();
    const auto a = static_cast<std::int32_t>(-na), b = static_cast<std::int32_t>(-nb);
    const std::uint64_t key = pair_key(a, b);
    if (pair_counts[key] != count) continue;  // stale
    if (count < options_.min_frequency) break;
    std::string merged = tokens[a];
    const std::string& right = tokens[b];
    merged += std::string_view(right).substr(right.starts_with(kPrefix) ? kPrefix.size() : 0);
    const std::int32_t c = id_of(merged);
    ++merge_no;
    std::vector<std::uint32_t> affected;
    for (std::uint32_t wi : where[key]) {
      if (last_seen[wi] == merge_no) continue;
      last_seen[wi] = merge_no;
      affected.push_back(wi);
    }
    std::vector<std::uint64_t> touched;
    for (std::uint32_t wi : affected) {
      Word& w = words[wi];
      bool has = false;
      for (std::size_t i = 0; i + 1 < w.symbols.size() && !has; ++i) has = w.symbols[i] == a && w.symbols[i + 1] == b;
      if (!has) continue;
      for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) touched.push_back(pair_key(w.symbols[i], w.symbols[i + 1]));
      add_pairs(wi, -1, false);
      std::vector<std::int32_t> next;
      next.reserve(w.symbols.size());
      for (std::size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          next.push_back(c);
          ++i;
        } else {
          next.push_back(w.symbols[i]);
        }
      }
      w.symbols.swap(next);
      add_pairs(wi, 1, true);
      for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) touched.push_back(pair_key(w.symbols[i], w.symbols[i + 1]));
    }
    where.erase(key);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (std::uint64_t k : touched) push(k);
    if (options_.log && merge_no % 1000 == 0) {
      options_.log(fmt::format("merge {}: '{}' ({} times), vocabulary {}", merge_no, merged, count, tokens.size()));
    }
  }
  return tokens;
}

void write_wordpiece_tokenizer_json(const std::vector<std::string>& tokens, const std::filesystem::path& path) {
  write_file_atomically(path, Tokenizer::wordpiece_json(tokens, /*do_lower_case=*/true));
}

}  // namespace trident::data
