#include "trident/data/normalizer.h"

#include "trident/core/error.h"

namespace trident::data {

void Normalizer::add_prepend(std::string prepend) {
  steps_.push_back({true, {}, std::move(prepend)});
}

void Normalizer::add_replace(std::string pattern, std::string content) {
  TRIDENT_CHECK(!pattern.empty(), "a Replace normalizer needs a non-empty pattern");
  steps_.push_back({false, std::move(pattern), std::move(content)});
}

void Normalizer::normalize(std::string_view text, std::string& out) const {
  out.assign(text);
  std::string next;
  for (const Step& s : steps_) {
    if (s.prepend) {
      if (!out.empty()) out.insert(0, s.content);
      continue;
    }
    std::size_t pos = out.find(s.pattern);
    if (pos == std::string::npos) continue;
    next.clear();
    std::size_t done = 0;
    for (; pos != std::string::npos; pos = out.find(s.pattern, done)) {
      next.append(out, done, pos - done);
      next += s.content;
      done = pos + s.pattern.size();
    }
    next.append(out, done);
    out.swap(next);
  }
}

}  // namespace trident::data
