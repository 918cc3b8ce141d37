// Reading and writing Hugging Face's config.json, for the families' own files
// (internal to the models module). Every error names the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "trident/core/error.h"
#include "trident/kernels/rope_frequencies.h"

namespace trident::models {

class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& json, std::string path) : json_(json), path_(std::move(path)) {}

  const std::string& path() const noexcept { return path_; }
  const nlohmann::json& json() const noexcept { return json_; }
  // The key is present and not null.
  bool has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }

  template <typename T>
  T get(const std::string& key) const {
    TRIDENT_CHECK(has(key), "'{}': missing key '{}'", path_, key);
    try {
      return json_[key].get<T>();
    } catch (const nlohmann::json::exception&) {
      TRIDENT_FAIL("'{}': key '{}' has the wrong type ({})", path_, key, json_[key].dump());
    }
  }
  // An optional key: `fallback` when absent or null.
  template <typename T>
  T get_or(const std::string& key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }
  // A boolean option trident does not build: an error when it is true.
  void require_false(const std::string& key, const std::string& why) const {
    TRIDENT_CHECK(!get_or<bool>(key, false), "'{}': {} true is not supported ({})", path_, key, why);
  }

  // RoPE's base and scaling, from transformers 4's rope_theta and rope_scaling or
  // transformers 5's rope_parameters (both read; where both give a value they must agree).
  RopeFrequencies rope() const;
  // The heads' width: head_dim when given must equal hidden_size / num_attention_heads.
  void check_head_dim(std::int64_t d_model, std::int64_t n_head) const;

 private:
  const nlohmann::json& json_;
  std::string path_;
};

class HfConfigWriter {
 public:
  explicit HfConfigWriter(nlohmann::json& json) : json_(json) {}
  template <typename T>
  void set(const std::string& key, T&& value) {
    json_[key] = std::forward<T>(value);
  }
  // rope_theta, and the scaling in transformers 4's layout (which transformers 5 also reads).
  void rope(const RopeFrequencies& rope);
  nlohmann::json& json() noexcept { return json_; }

 private:
  nlohmann::json& json_;
};

}  // namespace trident::models
