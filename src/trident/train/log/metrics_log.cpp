#include "trident/train/log/metrics_log.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "trident/core/error.h"

namespace trident::train {

namespace {

// `line` with the bare NaN, Infinity and -Infinity that some writers (Python's json) put in place of
// numbers made null, outside strings; nullopt when there are none.
std::optional<std::string> nonfinite_literals_as_null(const std::string& line) {
  std::string out;
  bool in_string = false, changed = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size())
        out += line[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    in_string = c == '"';
    bool replaced = false;
    for (const std::string_view word : {"-Infinity", "Infinity", "NaN"}) {
      if (line.compare(i, word.size(), word) == 0) {
        out += "null";
        i += word.size() - 1;
        changed = replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  if (!changed) return std::nullopt;
  return out;
}

// One key's values by step: the last written wins; nullopt: not finite.
using ByStep = std::map<std::int64_t, std::optional<double>>;

void read_value(const nlohmann::json& j, const char* key, std::int64_t step, ByStep& into, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  TRIDENT_CHECK(it->is_number() || it->is_null(), "{}: \"{}\" must be a number, got {}", where, key, it->dump());
  const double v = it->is_null() ? NAN : it->get<double>();
  into[step] = std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

MetricsCurve curve_of(const ByStep& by_step, const char* key, std::vector<std::string>& dropped) {
  MetricsCurve c;
  for (const auto& [step, v] : by_step) {
    if (v) {
      c.steps.push_back(step);
      c.values.push_back(*v);
    } else {
      dropped.push_back(fmt::format("{} at step {}", key, step));
    }
  }
  return c;
}

}  // namespace

MetricsLog read_metrics_log(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TRIDENT_CHECK(fs::exists(path, ec),
                "'{}': no such file (trident train writes its log.metrics_file, metrics.jsonl by default, into the "
                "run directory)",
                path);
  TRIDENT_CHECK(!fs::is_directory(path, ec), "'{}': is a directory, not a metrics file", path);
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in.good(), "'{}': cannot open the file", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TRIDENT_CHECK(!in.bad(), "'{}': error reading the file", path);

  MetricsLog log;
  log.path = path;
  ByStep loss, lr, val_loss;
  std::size_t start = 0;
  for (int number = 1; start < text.size(); ++number) {
    const std::size_t end = text.find('\n', start);
    const bool last_unterminated = end == std::string::npos;
    const std::string line = text.substr(start, last_unterminated ? std::string::npos : end - start);
    start = last_unterminated ? text.size() : end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("'{}' line {}", path, number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      if (const auto fixed = nonfinite_literals_as_null(line)) j = nlohmann::json::parse(*fixed, nullptr, false);
    }
    if (j.is_discarded() && last_unterminated) {
      log.unfinished_last_line = true;
      break;
    }
    TRIDENT_CHECK(!j.is_discarded(), "{}: not valid JSON: {}", where,
                  line.size() > 60 ? line.substr(0, 60) + "..." : line);
    TRIDENT_CHECK(j.is_object(), "{}: expected a JSON object, got {}", where, j.dump());
    const auto step = j.find("step");
    TRIDENT_CHECK(step != j.end(), "{}: no \"step\" key", where);
    TRIDENT_CHECK(step->is_number_integer() && step->get<std::int64_t>() >= 0,
                  "{}: \"step\" must be an integer >= 0, got {}", where, step->dump());
    const std::int64_t s = step->get<std::int64_t>();
    read_value(j, "loss", s, loss, where);
    read_value(j, "lr", s, lr, where);
    read_value(j, "val_loss", s, val_loss, where);
  }
  TRIDENT_CHECK(!loss.empty() || !val_loss.empty(), "'{}': no \"loss\" or \"val_loss\" value ({})", path,
                text.empty() ? "the file is empty" : "no logged step yet");
  log.loss = curve_of(loss, "loss", log.dropped);
  log.lr = curve_of(lr, "lr", log.dropped);
  log.val_loss = curve_of(val_loss, "val_loss", log.dropped);
  return log;
}

}  // namespace trident::train
