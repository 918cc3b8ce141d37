#include "trident/data/tokenizer/bpe_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"
#include "trident/core/parallel.h"
#include "trident/data/tokenizer/added_vocabulary.h"
#include "trident/data/tokenizer/byte_level.h"
#include "trident/data/tokenizer/pre_tokenizer.h"
#include "trident/data/tokenizer/word_counts.h"

namespace trident::data {
namespace {

void count_words(std::string_view text, const AddedVocabulary& specials, const PreTokenizer& pre, WordCounts& counts) {
  PreTokenizer::Scratch scratch;
  std::vector<Segment> segments;
  std::vector<Piece> pieces;
  specials.split(text, segments);
  for (const Segment& s : segments) {
    if (s.token_id >= 0) continue;
    const std::string_view span = text.substr(s.begin, s.end - s.begin);
    pre.split(span, pieces, scratch);
    count_pieces(span, pieces, counts);
  }
}

AddedVocabulary special_vocabulary(const std::vector<std::string>& tokens) {
  std::vector<AddedToken> added;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    AddedToken t;
    t.id = static_cast<std::int32_t>(i);
    t.content = tokens[i];
    t.special = true;
    added.push_back(std::move(t));
  }
  return AddedVocabulary(std::move(added));
}

std::uint64_t key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : options_(std::move(options)) {
  for (std::size_t i = 0; i < options_.special_tokens.size(); ++i) {
    const auto& t = options_.special_tokens[i];
    TRIDENT_CHECK(!t.empty(), "special token {} is empty", i);
    for (std::size_t k = 0; k < i; ++k) {
      TRIDENT_CHECK(options_.special_tokens[k] != t, "special token '{}' is given twice", t);
    }
  }
  const auto floor = static_cast<std::int64_t>(options_.special_tokens.size()) + 256;
  TRIDENT_CHECK(options_.vocab_size >= floor,
                "vocabulary size {} is smaller than the {} special token(s) + 256 byte tokens = {}", options_.vocab_size,
                options_.special_tokens.size(), floor);
}

void BpeTrainer::feed(std::string_view text) {
  count_words(text, special_vocabulary(options_.special_tokens), PreTokenizer::gpt2(false), counts_);
}

void BpeTrainer::feed_file(const std::filesystem::path& path) {
  LineBlockReader reader(path);  // blocks cut at newlines: the counts do not depend on the thread count
  const AddedVocabulary specials = special_vocabulary(options_.special_tokens);
  const PreTokenizer pre = PreTokenizer::gpt2(false);
  const unsigned threads = options_.threads > 0 ? static_cast<unsigned>(options_.threads)
                                                : static_cast<unsigned>(num_threads());
  // Read a batch of blocks (one per thread), count them in parallel, repeat.
  std::uint64_t total = 0;
  while (!reader.done()) {
    std::vector<std::string> blocks;
    for (std::string block; blocks.size() < threads && reader.next(block);) {
      total += block.size();
      blocks.push_back(std::move(block));
    }
    std::vector<WordCounts> partial(blocks.size());
    std::vector<std::thread> pool;
    std::exception_ptr error;
    std::mutex error_mutex;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      pool.emplace_back([&, i] {
        try {
          count_words(blocks[i], specials, pre, partial[i]);
        } catch (...) {
          std::lock_guard lock(error_mutex);
          error = std::current_exception();
        }
      });
    }
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
    for (auto& p : partial) {
      for (auto& [w, c] : p) counts_[w] += c;
    }
  }
  if (options_.log) {
    options_.log(fmt::format("counted {}: {:.1f} MB, {} distinct words so far", path.string(), static_cast<double>(total) / 1e6,
                             counts_.size()));
  }
}

TrainedBpe BpeTrainer::train() const {
  TrainedBpe out;
  out.special_tokens = options_.special_tokens;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> word_to_id;
  auto add_token = [&](const std::string& t) {
    auto [it, inserted] = word_to_id.emplace(t, static_cast<std::int32_t>(out.vocab.size()));
    if (inserted) out.vocab.push_back(t);
    return it->second;
  };
  for (const auto& t : options_.special_tokens) add_token(t);
  std::vector<std::pair<char32_t, std::uint8_t>> alphabet;
  for (int b = 0; b < 256; ++b) alphabet.emplace_back(byte_to_char(static_cast<std::uint8_t>(b)), static_cast<std::uint8_t>(b));
  std::sort(alphabet.begin(), alphabet.end());
  std::int32_t byte_id[256];
  for (const auto& [c, b] : alphabet) byte_id[b] = add_token(std::string(byte_to_utf8(b)));

  // Words in a fixed order (sorted), as id sequences.
  const auto sorted = sorted_word_counts(counts_);
  std::vector<std::vector<std::int32_t>> words(sorted.size());
  std::vector<std::int64_t> freq(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    for (unsigned char b : sorted[i].first) words[i].push_back(byte_id[b]);
    freq[i] = sorted[i].second;
  }

  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> where;
  for (std::size_t w = 0; w < words.size(); ++w) {
    for (std::size_t i = 0; i + 1 < words[w].size(); ++i) {
      const std::uint64_t k = key(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != static_cast<std::int32_t>(w)) list.push_back(static_cast<std::int32_t>(w));
    }
  }
  struct Entry {
    std::int64_t count;
    std::uint64_t pair;
    // Max-heap: most frequent first; on ties the smaller pair first.
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };
  std::vector<Entry> heap;
  for (const auto& [k, c] : pair_count) heap.push_back({c, k});
  std::make_heap(heap.begin(), heap.end());

  const std::int64_t min_count = std::max<std::int64_t>(options_.min_frequency, 1);
  std::unordered_map<std::uint64_t, std::int64_t> delta;
  std::vector<std::int32_t> merged;
  while (static_cast<std::int32_t>(word_to_id.size()) < options_.vocab_size && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Entry top = heap.back();
    heap.pop_back();
    const std::int64_t current = pair_count[top.pair];
    if (current != top.count) {  // stale: re-queue with the current count
      if (current > 0) {
        heap.push_back({current, top.pair});
        std::push_heap(heap.begin(), heap.end());
      }
      continue;
    }
    if (top.count < min_count) break;
    const auto a = static_cast<std::int32_t>(top.pair >> 32);
    const auto b = static_cast<std::int32_t>(top.pair & 0xffffffffu);
    const std::int32_t new_id = add_token(out.vocab[a] + out.vocab[b]);
    out.merges.emplace_back(out.vocab[a], out.vocab[b]);

    auto& list = where[top.pair];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    delta.clear();
    for (std::int32_t w : list) {
      auto& word = words[w];
      bool found = false;
      for (std::size_t i = 0; i + 1 < word.size() && !found; ++i) found = word[i] == a && word[i + 1] == b;
      if (!found) continue;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) delta[key(word[i], word[i + 1])] -= freq[w];
      merged.clear();
      for (std::size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          merged.push_back(new_id);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      word.swap(merged);
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        const std::uint64_t k = key(word[i], word[i + 1]);
        delta[k] += freq[w];
        if (word[i] == new_id || word[i + 1] == new_id) {
          auto& l = where[k];
          if (l.empty() || l.back() != w) l.push_back(w);
        }
      }
    }
    where.erase(top.pair);
    // Apply the changes in a fixed (sorted) order so the heap evolves identically every run.
    std::vector<std::pair<std::uint64_t, std::int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [k, d] : changes) {
      if (d == 0) continue;
      const std::int64_t c = (pair_count[k] += d);
      if (d > 0 && c > 0) {
        heap.push_back({c, k});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (options_.log && out.merges.size() % 1000 == 0) {
      options_.log(fmt::format("merges: {} (vocabulary {}/{})", out.merges.size(), word_to_id.size(),
                               options_.vocab_size));
    }
  }
  return out;
}

std::string tokenizer_json(const TrainedBpe& bpe) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = ojson::array();
  for (std::size_t i = 0; i < bpe.special_tokens.size(); ++i) {
    j["added_tokens"].push_back({{"id", i},
                                 {"content", bpe.special_tokens[i]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  ojson vocab = ojson::object();
  for (std::size_t i = 0; i < bpe.vocab.size(); ++i) vocab[bpe.vocab[i]] = i;
  model["vocab"] = std::move(vocab);
  ojson merges = ojson::array();
  // Byte-level tokens never contain a space, so the legacy "a b" form is unambiguous
  // and every tokenizers version reads it.
  for (const auto& [a, b] : bpe.merges) merges.push_back(a + " " + b);
  model["merges"] = std::move(merges);
  j["model"] = std::move(model);
  return j.dump(2) + "\n";
}

void write_tokenizer_json(const TrainedBpe& bpe, const std::filesystem::path& path) {
  write_file_atomically(path, tokenizer_json(bpe));
}

}  // namespace trident::data
