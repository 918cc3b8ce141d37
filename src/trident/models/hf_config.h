// Reading and writing Hugging Face's config.json, for the families' own files
// (internal to the models module). Every error names the file and the key.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trident/core/error.h"
#include "trident/kernels/rope_frequencies.h"
#include "trident/models/spec.h"

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

// A config.json key that holds a TransformerSpec field: a family lists its keys once, and read_keys and
// write_keys read them in that order and write them all. Without a fallback the key is required; with one,
// an absent (or null) key is the fallback: a value, or one computed from the fields read before it.
struct HfKey {
  template <typename T>
  HfKey(std::string key, T TransformerSpec::*field)
      : name(std::move(key)),
        read([field, k = name](const HfConfigReader& c, TransformerSpec& s) { s.*field = c.get<T>(k); }),
        write(writer(name, field)) {}
  template <typename T, typename Fallback>
  HfKey(std::string key, T TransformerSpec::*field, Fallback fallback)
      : name(std::move(key)),
        read([field, k = name, fallback](const HfConfigReader& c, TransformerSpec& s) {
          if constexpr (std::is_invocable_v<Fallback, const TransformerSpec&>) {
            s.*field = c.get_or<T>(k, fallback(s));
          } else {
            s.*field = c.get_or<T>(k, static_cast<T>(fallback));
          }
        }),
        write(writer(name, field)) {}

  std::string name;
  std::function<void(const HfConfigReader&, TransformerSpec&)> read;
  std::function<void(const TransformerSpec&, HfConfigWriter&)> write;

 private:
  template <typename T>
  static std::function<void(const TransformerSpec&, HfConfigWriter&)> writer(const std::string& key,
                                                                              T TransformerSpec::*field) {
    return [field, key](const TransformerSpec& s, HfConfigWriter& c) { c.set(key, s.*field); };
  }
};

void read_keys(const HfConfigReader& c, TransformerSpec& s, const std::vector<HfKey>& keys);
void write_keys(const TransformerSpec& s, HfConfigWriter& c, const std::vector<HfKey>& keys);

}  // namespace trident::models
