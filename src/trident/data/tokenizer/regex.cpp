#define PCRE2_CODE_UNIT_WIDTH 8
#include "trident/data/tokenizer/regex.h"

#include <pcre2.h>

#include "trident/core/error.h"

namespace trident::data {

struct Regex::Scratch::Impl {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* mctx = nullptr;
  Impl() {
    md = pcre2_match_data_create(1, nullptr);
    // Patterns with lookahead over long whitespace runs can need more than
    // PCRE2's 32 KiB default JIT stack.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    TRIDENT_CHECK(md && jit_stack && mctx, "PCRE2: out of memory creating match data");
    pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~Impl() {
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(md);
  }
};

Regex::Scratch::Scratch() : impl_(std::make_unique<Impl>()) {}
Regex::Scratch::~Scratch() = default;
Regex::Scratch::Scratch(Scratch&&) noexcept = default;
Regex::Scratch& Regex::Scratch::operator=(Scratch&&) noexcept = default;

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    TRIDENT_FAIL("invalid regular expression '{}' at offset {}: {}", pattern_, offset,
                 reinterpret_cast<const char*>(buf));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Regex::Regex(Regex&& o) noexcept : pattern_(std::move(o.pattern_)), code_(o.code_), jit_(o.jit_) { o.code_ = nullptr; }

Regex& Regex::operator=(Regex&& o) noexcept {
  if (this != &o) {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
    pattern_ = std::move(o.pattern_);
    code_ = o.code_;
    jit_ = o.jit_;
    o.code_ = nullptr;
  }
  return *this;
}

void Regex::find_all(std::string_view subject, std::vector<Match>& out, Scratch& scratch) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = scratch.impl_->md;
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  PCRE2_SIZE start = 0;
  while (start < subject.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, s, subject.size(), start, 0, md, scratch.impl_->mctx)
                        : pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      TRIDENT_FAIL("regular expression '{}' failed on a {}-byte input: {}", pattern_, subject.size(),
                   reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      out.push_back({ov[0], ov[1]});
      start = ov[1];
    } else {
      // Empty match: step over one UTF-8 character.
      start = ov[0] + 1;
      while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace trident::data
