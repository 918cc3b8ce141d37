#include "trident/models/hf_config.h"

#include <cmath>

namespace trident::models {



namespace {

// A number of config.json's RoPE table `table`, named table.key in errors.
double rope_number(const nlohmann::json& r, const std::string& table, const char* key, const std::string& path) {
  TRIDENT_CHECK(r.contains(key) && r[key].is_number(), "'{}': {}.{} must be a number, got {}", path, table, key,
                r.contains(key) ? r[key].dump() : std::string("nothing"));
  return r[key].get<double>();
}

}  // namespace

// RoPE's base and scaling. transformers before 5 writes them as rope_theta and rope_scaling {rope_type (or
// type), factor, ...}; transformers 5 as rope_parameters {rope_type, rope_theta, factor, ...}. Either is
// read; where both give a value they must agree. The rope_types built are default, linear and llama3.
RopeFrequencies HfConfigReader::rope() const {
  const nlohmann::json& j = json_;
  const std::string& path = path_;
  RopeFrequencies rope;
  rope.theta = get_or<double>("rope_theta", 10000.0);
  // transformers 4 reads a partial rotary factor at the top level, and transformers 5 moves it from there
  // into rope_parameters: either way it rotates only part of each head.
  TRIDENT_CHECK(
      !j.contains("partial_rotary_factor") || j["partial_rotary_factor"].is_null() || j["partial_rotary_factor"] == 1.0,
      "'{}': partial_rotary_factor {} is not supported (trident rotates the whole head)", path,
      j.contains("partial_rotary_factor") ? j["partial_rotary_factor"].dump() : "");
  std::string scaled_by;  // the table that set a scaling
  std::string theta_from = j.contains("rope_theta") && !j["rope_theta"].is_null() ? "rope_theta" : "";
  for (const std::string table : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(table) || j[table].is_null()) continue;
    const nlohmann::json& r = j[table];
    TRIDENT_CHECK(r.is_object(), "'{}': key '{}' must be an object, got {}", path, table, r.dump());
    if (r.contains("rope_theta") && !r["rope_theta"].is_null()) {
      const double theta = rope_number(r, table, "rope_theta", path);
      TRIDENT_CHECK(theta_from.empty() || theta == rope.theta, "'{}': {} {} and {}.rope_theta {} disagree", path,
                    theta_from, rope.theta, table, theta);
      rope.theta = theta;
      theta_from = table + ".rope_theta";
    }
    const std::string type = HfConfigReader(r, path).get_or<std::string>("rope_type", HfConfigReader(r, path).get_or<std::string>("type", "default"));
    TRIDENT_CHECK(!r.contains("partial_rotary_factor") || r["partial_rotary_factor"] == 1.0,
                  "'{}': {}.partial_rotary_factor {} is not supported (trident rotates the whole head)", path, table,
                  r.contains("partial_rotary_factor") ? r["partial_rotary_factor"].dump() : "");
    RopeFrequencies scaled{rope.theta};  // unscaled unless the table says otherwise
    if (type == "default") {
      // Nothing to build, but a table that says so contradicts one that scales (transformers lets
      // rope_scaling replace rope_parameters, so the two would be read differently).
    } else if (type == "linear") {
      scaled.scaling = RopeScaling::linear;
      scaled.factor = rope_number(r, table, "factor", path);
    } else if (type == "llama3") {
      scaled.scaling = RopeScaling::llama3;
      scaled.factor = rope_number(r, table, "factor", path);
      scaled.low_freq_factor = rope_number(r, table, "low_freq_factor", path);
      scaled.high_freq_factor = rope_number(r, table, "high_freq_factor", path);
      scaled.original_max_position = rope_number(r, table, "original_max_position_embeddings", path);
      // transformers 5 prefers a top-level original_max_position_embeddings to the table's (Phi-3 keeps it
      // there); transformers 4 reads the table's. Where both are given they must agree.
      TRIDENT_CHECK(
          !j.contains("original_max_position_embeddings") || j["original_max_position_embeddings"].is_null() ||
              j["original_max_position_embeddings"] == scaled.original_max_position,
          "'{}': original_max_position_embeddings {} and {}.original_max_position_embeddings {} disagree", path,
          j.contains("original_max_position_embeddings") ? j["original_max_position_embeddings"].dump() : "", table,
          scaled.original_max_position);
      TRIDENT_CHECK(scaled.low_freq_factor > 0 && scaled.high_freq_factor > scaled.low_freq_factor &&
                        scaled.original_max_position >= 1 && scaled.original_max_position < 1e15 &&
                        std::floor(scaled.original_max_position) == scaled.original_max_position,
                    "'{}': {} needs 0 < low_freq_factor < high_freq_factor and a whole positive "
                    "original_max_position_embeddings, got {}, {} and {}",
                    path, table, scaled.low_freq_factor, scaled.high_freq_factor, scaled.original_max_position);
    } else {
      TRIDENT_FAIL("'{}': {}.rope_type '{}' is not supported (default, linear or llama3)", path, table, type);
    }
    TRIDENT_CHECK(std::isfinite(scaled.factor) && scaled.factor > 0, "'{}': {}.factor {} must be positive", path, table,
                  scaled.factor);
    TRIDENT_CHECK(scaled_by.empty() || (scaled.scaling == rope.scaling && scaled.factor == rope.factor &&
                                        scaled.low_freq_factor == rope.low_freq_factor &&
                                        scaled.high_freq_factor == rope.high_freq_factor &&
                                        scaled.original_max_position == rope.original_max_position),
                  "'{}': {} and {} give different RoPE scalings", path, scaled_by, table);
    rope = scaled;
    scaled_by = table;
  }
  return rope;
}


void HfConfigReader::check_head_dim(std::int64_t d_model, std::int64_t n_head) const {
  if (n_head <= 0) return;  // validate() names the bad head count
  const std::int64_t head_dim = get_or<std::int64_t>("head_dim", d_model / n_head);
  TRIDENT_CHECK(head_dim == d_model / n_head, "'{}': head_dim {} differs from hidden_size / num_attention_heads = {}",
                path_, head_dim, d_model / n_head);
}

void HfConfigWriter::rope(const RopeFrequencies& r) {
  json_["rope_theta"] = r.theta;
  // The scaling in transformers 4's layout (as Llama 3.1's own config.json), which transformers 5 also reads.
  if (r.scaling == RopeScaling::linear) {
    json_["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else if (r.scaling == RopeScaling::llama3) {
    json_["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", r.factor},
                             {"low_freq_factor", r.low_freq_factor},
                             {"high_freq_factor", r.high_freq_factor},
                             {"original_max_position_embeddings", static_cast<std::int64_t>(r.original_max_position)}};
  }
}

void read_keys(const HfConfigReader& c, TransformerSpec& s, const std::vector<HfKey>& keys) {
  for (const HfKey& key : keys) key.read(c, s);
}

void write_keys(const TransformerSpec& s, HfConfigWriter& c, const std::vector<HfKey>& keys) {
  for (const HfKey& key : keys) key.write(s, c);
}

}  // namespace trident::models
