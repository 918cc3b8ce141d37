#include "trident/data/tokenizer/bpe_model.h"

#include <xxhash.h>

#include <algorithm>
#include <functional>

#include "trident/core/error.h"
#include "trident/data/tokenizer/byte_level.h"

namespace trident::data {

std::size_t StringHash::operator()(std::string_view s) const noexcept { return XXH3_64bits(s.data(), s.size()); }

namespace {

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

std::uint64_t mix(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

void BpeModel::MergeMap::build(const std::vector<std::pair<std::uint64_t, MergeValue>>& entries) {
  std::size_t cap = 16;
  while (cap < entries.size() * 2) cap *= 2;
  keys.assign(cap, kEmpty);
  values.assign(cap, {});
  mask = cap - 1;
  for (const auto& [key, value] : entries) {
    std::uint64_t i = mix(key) & mask;
    while (keys[i] != kEmpty && keys[i] != key) i = (i + 1) & mask;
    keys[i] = key;
    values[i] = value;  // a repeated pair keeps its last rank, as Hugging Face's map does
  }
}

const BpeModel::MergeValue* BpeModel::MergeMap::find(std::uint64_t key) const noexcept {
  if (keys.empty()) return nullptr;
  std::uint64_t i = mix(key) & mask;
  while (true) {
    if (keys[i] == key) return &values[i];
    if (keys[i] == kEmpty) return nullptr;
    i = (i + 1) & mask;
  }
}

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::function<std::string(std::size_t)>& where, std::string_view vocab_where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  std::int32_t bound = 0;
  for (const auto& [token, id] : vocab_) {
    TRIDENT_CHECK(id >= 0, "vocabulary token '{}' has negative id {}", token, id);
    TRIDENT_CHECK(id < kMaxTokenId, "vocabulary token '{}' has id {}; ids must be below {} (tables are indexed by id)",
                  token, id, kMaxTokenId);
    bound = std::max(bound, id + 1);
  }
  id_to_token_.assign(static_cast<std::size_t>(bound), {});
  has_id_.assign(static_cast<std::size_t>(bound), false);
  bool shared_id = false;
  for (const auto& [token, id] : vocab_) {
    shared_id = shared_id || has_id_[id];
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
  if (shared_id) {
    // Name the smallest shared id and its first two tokens in byte order, whatever the hash order.
    std::vector<std::pair<std::int32_t, std::string_view>> by_id;
    by_id.reserve(vocab_.size());
    for (const auto& [token, id] : vocab_) by_id.emplace_back(id, token);
    std::sort(by_id.begin(), by_id.end());
    for (std::size_t i = 1; i < by_id.size(); ++i) {
      TRIDENT_CHECK(by_id[i].first != by_id[i - 1].first,
                    "{}: tokens '{}' and '{}' both have id {} (each id must be one token: decoding it would give "
                    "the wrong text)",
                    vocab_where, by_id[i - 1].second, by_id[i].second, by_id[i].first);
    }
  }
  auto name = [&](std::size_t i) { return where ? where(i) : fmt::format("merge {}", i); };
  std::vector<std::pair<std::uint64_t, MergeValue>> entries;
  entries.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    TRIDENT_CHECK(ia != vocab_.end(), "{}: merge part '{}' is not in the vocabulary", name(i), a);
    TRIDENT_CHECK(ib != vocab_.end(), "{}: merge part '{}' is not in the vocabulary", name(i), b);
    auto im = vocab_.find(a + b);
    TRIDENT_CHECK(im != vocab_.end(), "{}: merged token '{}' is not in the vocabulary", name(i), a + b);
    entries.push_back({pair_key(ia->second, ib->second), {static_cast<std::int32_t>(i), im->second}});
  }
  merges_.build(entries);
  merge_count_ = merges.size();
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    TRIDENT_CHECK(it != vocab_.end(), "unk_token '{}' is not in the vocabulary", *options_.unk_token);
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(byte_to_utf8(static_cast<std::uint8_t>(b)));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    auto fb = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_fallback_ids_[b] = fb == vocab_.end() ? -1 : fb->second;
  }
}

std::optional<std::int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(std::int32_t id) const noexcept {
  if (id < 0 || id >= id_bound() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view raw, bool byte_level, std::vector<std::int32_t>& symbols) const {
  symbols.clear();
  std::int32_t pending_unk = -1;  // an unknown run not yet emitted (fuse_unk)
  auto unknown = [&](std::string_view ch) {
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_fallback_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) symbols.push_back(byte_fallback_ids_[b]);
        return;
      }
    }
    if (unk_id_ < 0) return;  // no unknown token: the character is dropped
    if (pending_unk >= 0 && !options_.fuse_unk) symbols.push_back(pending_unk);
    pending_unk = unk_id_;
  };
  auto known = [&](std::int32_t id) {
    if (pending_unk >= 0) {
      symbols.push_back(pending_unk);
      pending_unk = -1;
    }
    symbols.push_back(id);
  };
  if (byte_level) {
    for (unsigned char b : raw) {
      if (byte_ids_[b] >= 0) {
        known(byte_ids_[b]);
      } else {
        unknown(byte_to_utf8(b));
      }
    }
  } else {
    std::size_t pos = 0;
    while (pos < raw.size()) {
      char32_t c = 0;
      std::size_t n = decode_utf8(raw, pos, c);
      if (n == 0) n = 1;  // a stray byte: its own (unknown) symbol
      const std::string_view ch = raw.substr(pos, n);
      auto it = vocab_.find(ch);
      if (it != vocab_.end()) {
        known(it->second);
      } else {
        unknown(ch);
      }
      pos += n;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void BpeModel::merge(std::vector<std::int32_t>& symbols, std::vector<std::int32_t>& out) const {
  const std::size_t n = symbols.size();
  if (n < 2 || merge_count_ == 0) {
    out.insert(out.end(), symbols.begin(), symbols.end());
    return;
  }
  struct Node {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  struct Cand {
    std::int32_t rank;
    std::int32_t pos;
    std::int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Node> nodes;
  thread_local std::vector<Cand> heap;
  nodes.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i] = {symbols[i], static_cast<std::int32_t>(i) - 1, i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1, true};
  }
  heap.clear();
  const auto push = [](const Cand& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (const MergeValue* m = merges_.find(pair_key(symbols[i], symbols[i + 1]))) {
      push({m->rank, static_cast<std::int32_t>(i), m->new_id});
    }
  }
  // Hugging Face's Word::merge_all: an entry is stale when its left symbol is
  // gone, has no right neighbour, or the current pair merges into another id.
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Cand top = heap.back();
    heap.pop_back();
    Node& left = nodes[top.pos];
    if (!left.alive || left.next < 0) continue;
    const Node right = nodes[left.next];
    const MergeValue* m = merges_.find(pair_key(left.id, right.id));
    if (m == nullptr || m->new_id != top.new_id) continue;
    nodes[left.next].alive = false;
    left.id = top.new_id;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeValue* p = merges_.find(pair_key(nodes[left.prev].id, left.id))) {
        push({p->rank, left.prev, p->new_id});
      }
    }
    if (left.next >= 0) {
      if (const MergeValue* p = merges_.find(pair_key(left.id, nodes[left.next].id))) {
        push({p->rank, top.pos, p->new_id});
      }
    }
  }
  for (std::int32_t i = 0; i >= 0; i = nodes[i].next) out.push_back(nodes[i].id);
}

void BpeModel::tokenize(std::string_view raw, bool byte_level, std::vector<std::int32_t>& out) const {
  if (raw.empty()) return;
  if (options_.ignore_merges) {
    auto it = byte_level ? vocab_.find(bytes_to_byte_level(raw)) : vocab_.find(raw);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<std::int32_t> symbols;
  initial_symbols(raw, byte_level, symbols);
  merge(symbols, out);
}

}  // namespace trident::data
