// The model of a tokenizer: what turns one pre-token into ids. trident has
// two, as Hugging Face's tokenizer.json `model.type` names them: `BPE`
// (bpe_model.h) and `WordPiece` (wordpiece_model.h). The Tokenizer calls
// only this interface; nothing else branches on the kind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trident/data/tokenizer/bpe_model.h"
#include "trident/data/tokenizer/wordpiece_model.h"

namespace trident::data {

class Model {
 public:
  Model() = default;  // an empty BPE model
  Model(BpeModel m) : m_(std::move(m)) {}        // NOLINT(google-explicit-constructor)
  Model(WordPieceModel m) : m_(std::move(m)) {}  // NOLINT(google-explicit-constructor)

  // Encodes one pre-token; `byte_level` applies to BPE only.
  void tokenize(std::string_view raw, bool byte_level, std::vector<std::int32_t>& out) const {
    if (const auto* b = std::get_if<BpeModel>(&m_)) {
      b->tokenize(raw, byte_level, out);
    } else {
      std::get<WordPieceModel>(m_).tokenize(raw, out);
    }
  }
  const Vocab& vocab() const noexcept {
    return std::visit([](const auto& m) -> const Vocab& { return m.vocab(); }, m_);
  }
  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    return std::visit([&](const auto& m) { return m.token_to_id(token); }, m_);
  }
  std::int32_t id_bound() const noexcept {
    return std::visit([](const auto& m) { return m.id_bound(); }, m_);
  }
  const std::string* id_to_token(std::int32_t id) const noexcept {
    return std::visit([&](const auto& m) { return m.id_to_token(id); }, m_);
  }

  const BpeModel* bpe() const noexcept { return std::get_if<BpeModel>(&m_); }
  const WordPieceModel* wordpiece() const noexcept { return std::get_if<WordPieceModel>(&m_); }

 private:
  std::variant<BpeModel, WordPieceModel> m_;
};

}  // namespace trident::data
