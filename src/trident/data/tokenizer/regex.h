// A compiled PCRE2 regular expression with Unicode properties (UTF + UCP),
// JIT-compiled when the platform supports it. Used for the pre-tokenizers'
// split patterns (GPT-2's, and the `Split` patterns of tokenizer.json).
//
// A Regex is immutable after construction and may be shared by threads; each
// thread matches through its own Regex::Scratch (PCRE2 match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

class Regex {
 public:
  // Compiles `pattern`; throws trident::Error naming the pattern, the offset
  // and PCRE2's message when it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Per-thread matching state.
  class Scratch {
   public:
    Scratch();
    ~Scratch();
    Scratch(Scratch&&) noexcept;
    Scratch& operator=(Scratch&&) noexcept;

   private:
    friend class Regex;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };

  struct Match {
    std::size_t begin;
    std::size_t end;
  };
  // Appends the non-empty, non-overlapping matches in `subject`, left to
  // right, as byte ranges relative to `subject`. `subject` must be valid UTF-8.
  void find_all(std::string_view subject, std::vector<Match>& out, Scratch& scratch) const;

  const std::string& pattern() const noexcept { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace trident::data
