// tokenizer_bench: single-thread encode throughput of trident's tokenizer.
//
//   tokenizer_bench --tokenizer data/kjv/tokenizer.json --input data/kjv/kjv.txt [--repeat 5]
//
// Encodes the input (a) as one text and (b) line by line (one document per
// line), each `repeat` times with a fresh Encoder (so the word cache starts
// cold every run), and prints the median MB/s of each as JSON:
//   {"bytes": N, "tokens": T, "whole_mb_s": X, "lines_mb_s": Y}
// bench/tokenizer_bench.py runs this beside Hugging Face `tokenizers` and
// prints the ratio (the number is meaningful only next to the peer's).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "trident/core/atomic_file.h"
#include "trident/data/tokenizer/tokenizer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, input_path;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--tokenizer") tokenizer_path = argv[i + 1];
    if (a == "--input") input_path = argv[i + 1];
    if (a == "--repeat") repeat = std::max(1, std::stoi(argv[i + 1]));
  }
  if (tokenizer_path.empty() || input_path.empty()) {
    fmt::print(stderr, "usage: tokenizer_bench --tokenizer T --input FILE [--repeat N]\n");
    return 2;
  }
  try {
    const auto tok = trident::data::Tokenizer::load(tokenizer_path);
    const std::string text = trident::read_whole_file(input_path, "input");
    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      lines.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end + 1;
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::vector<double> whole, per_line;
    std::size_t tokens = 0;
    std::vector<std::int32_t> ids;
    for (int r = 0; r < repeat; ++r) {
      {
        trident::data::Encoder enc(tok);
        ids.clear();
        const auto t0 = std::chrono::steady_clock::now();
        enc.encode(text, ids, false);
        whole.push_back(mb / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        tokens = ids.size();
      }
      {
        trident::data::Encoder enc(tok);
        const auto t0 = std::chrono::steady_clock::now();
        for (auto line : lines) {
          ids.clear();
          enc.encode(line, ids, false);
        }
        per_line.push_back(mb / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    fmt::print("{{\"bytes\": {}, \"tokens\": {}, \"whole_mb_s\": {:.2f}, \"lines_mb_s\": {:.2f}}}\n", text.size(), tokens,
               median(whole), median(per_line));
  } catch (const std::exception& e) {
    fmt::print(stderr, "tokenizer_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
