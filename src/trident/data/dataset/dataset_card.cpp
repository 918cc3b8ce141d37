// The dataset card (data/dataset/dataset_card.h).
#include "trident/data/dataset/dataset_card.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trident/core/atomic_file.h"
#include "trident/core/error.h"

namespace trident::data {

namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "trident-dataset-card-1";

template <typename T>
T field(const json& j, const char* key, const std::string& path) {
  TRIDENT_CHECK(j.contains(key), "'{}': missing key '{}'", path, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    TRIDENT_FAIL("'{}': key '{}' is {} (expected a {})", path, key, j.at(key).dump(),
                 std::is_same_v<T, bool> ? "boolean" : std::is_same_v<T, std::string> ? "string" : "number");
  }
}

}  // namespace

std::string tokenizer_fingerprint(const Tokenizer& tokenizer) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  const auto add = [&](const void* data, std::size_t bytes) { XXH64_update(state, data, bytes); };
  const std::int32_t n = tokenizer.vocab_size();
  add(&n, sizeof n);
  for (std::int32_t id = 0; id < n; ++id) {
    const std::string token = tokenizer.id_to_token(id).value_or(std::string());
    const std::uint64_t size = token.size();
    add(&size, sizeof size);
    add(token.data(), token.size());
  }
  for (const std::vector<std::int32_t>* ids : {&tokenizer.parts().prefix_ids, &tokenizer.parts().suffix_ids}) {
    const std::uint64_t size = ids->size();
    add(&size, sizeof size);
    add(ids->data(), ids->size() * sizeof(std::int32_t));
  }
  const XXH64_hash_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return fmt::format("{:016x}", static_cast<std::uint64_t>(h));
}

std::string dataset_card_path(const std::string& prefix) { return prefix + ".card.json"; }

void write_dataset_card(const std::string& prefix, const DatasetCard& card) {
  const json j = {{"format", kFormat},
                  {"framing", card.encoder ? "encoder" : "documents"},
                  {"append_eod", card.append_eod},
                  {"special_tokens", card.special_tokens},
                  {"tokenizer", card.tokenizer},
                  {"vocab_size", card.vocab_size},
                  {"tokenizer_fingerprint", card.tokenizer_fingerprint},
                  {"documents", card.documents},
                  {"tokens", card.tokens}};
  write_file_atomically(dataset_card_path(prefix), j.dump(2) + "\n");
}

std::optional<DatasetCard> read_dataset_card(const std::string& prefix) {
  const std::string path = dataset_card_path(prefix);
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  TRIDENT_CHECK(in, "'{}': cannot open the dataset card", path);
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    TRIDENT_FAIL("'{}': not a dataset card (invalid JSON: {})", path, e.what());
  }
  TRIDENT_CHECK(j.is_object() && j.value("format", std::string()) == kFormat,
                "'{}': not a dataset card of this trident (expected \"format\": \"{}\"); delete it or preprocess "
                "the dataset again",
                path, kFormat);
  DatasetCard card;
  const std::string framing = field<std::string>(j, "framing", path);
  TRIDENT_CHECK(framing == "encoder" || framing == "documents", "'{}': framing '{}' (expected encoder or documents)",
                path, framing);
  card.encoder = framing == "encoder";
  card.append_eod = field<bool>(j, "append_eod", path);
  card.special_tokens = field<bool>(j, "special_tokens", path);
  card.tokenizer = field<std::string>(j, "tokenizer", path);
  card.vocab_size = field<std::int64_t>(j, "vocab_size", path);
  card.tokenizer_fingerprint = field<std::string>(j, "tokenizer_fingerprint", path);
  card.documents = field<std::uint64_t>(j, "documents", path);
  card.tokens = field<std::uint64_t>(j, "tokens", path);
  return card;
}

}  // namespace trident::data
