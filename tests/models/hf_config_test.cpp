// Hugging Face config.json <-> TransformerSpec: each family's keys read, refused when they would change
// the math without trident following, and written back the same (models/hf.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <string>
#include <tuple>

#include "testing/helpers.h"
#include "trident/models/family.h"
#include "trident/models/hf.h"
#include "trident/models/spec.h"

namespace trident::models {
namespace {

// A config.json with the given keys set over a minimal one of `model_type`; returns its path.
std::string write_config(const std::string& model_type, const nlohmann::json& extra) {
  nlohmann::json j = model_type == "gpt2"
                         ? nlohmann::json{{"model_type", "gpt2"}, {"n_layer", 2},     {"n_head", 4},
                                          {"n_embd", 16},         {"vocab_size", 23}, {"n_positions", 16}}
                         : nlohmann::json{{"model_type", model_type}, {"num_hidden_layers", 2},
                                          {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                          {"hidden_size", 16},        {"intermediate_size", 40},
                                          {"vocab_size", 23},         {"max_position_embeddings", 16}};
  j.update(extra);
  const auto path = std::filesystem::temp_directory_path() / fmt::format("trident-config-{}.json", ::getpid());
  std::ofstream(path) << j.dump();
  return path.string();
}

// transformers 5 writes RoPE's base inside "rope_parameters" (no top-level rope_theta); Llama 3's is 500000.
TEST(HfConfig, HuggingFaceConfigReadsRopeParameters) {
  const std::string path = write_config(
      "llama", {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}, {"head_dim", 4}});
  EXPECT_EQ(read_hf_config(path).rope.theta, 500000.0);
  EXPECT_EQ(read_hf_config(path).rope.scaling, RopeScaling::none);
  // The round trip through hf_config_json keeps it.
  TransformerSpec s = read_hf_config(path);
  std::ofstream(path) << hf_config_json(s);
  EXPECT_EQ(read_hf_config(path).rope.theta, 500000.0);
  std::filesystem::remove(path);
}

// bos_token_id and eos_token_id (one id, or Llama 3 instruct's list) survive the round trip through
// hf_config_json; absent, they stay absent (null), so transformers does not invent its defaults.
TEST(HfConfig, HuggingFaceConfigKeepsTheSpecialTokenIds) {
  for (const nlohmann::json& ids :
       {nlohmann::json{{"bos_token_id", 128000}, {"eos_token_id", 128001}},
        nlohmann::json{{"bos_token_id", 128000}, {"eos_token_id", {128001, 128008, 128009}}},
        nlohmann::json{{"bos_token_id", nullptr}, {"eos_token_id", nullptr}}}) {
    const std::string path = write_config("llama", ids);
    for (int round_trip = 0; round_trip < 2; ++round_trip) {
      const TransformerSpec s = read_hf_config(path);
      const nlohmann::json written = nlohmann::json::parse(hf_config_json(s));
      EXPECT_EQ(written["bos_token_id"], ids["bos_token_id"]);
      EXPECT_EQ(written["eos_token_id"], ids["eos_token_id"]);
      std::ofstream(path) << written.dump();
    }
    std::filesystem::remove(path);
  }
  const std::string bad = write_config("gpt2", {{"eos_token_id", "50256"}});
  EXPECT_NE(testing::error_message([&] { read_hf_config(bad); }).find("eos_token_id"), std::string::npos);
  std::filesystem::remove(bad);
}

// Llama 3.1's config.json (transformers 4: rope_theta + rope_scaling) and the same in transformers 5's
// rope_parameters give the same llama3 scaling, and hf_config_json writes it back; linear scaling too.
TEST(HfConfig, HuggingFaceConfigReadsRopeScaling) {
  const nlohmann::json llama31 = {{"rope_type", "llama3"},
                                  {"factor", 8.0},
                                  {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0},
                                  {"original_max_position_embeddings", 8192}};
  nlohmann::json v5 = llama31;
  v5["rope_theta"] = 500000.0;
  for (const nlohmann::json& extra :
       {nlohmann::json{{"rope_theta", 500000.0}, {"rope_scaling", llama31}}, nlohmann::json{{"rope_parameters", v5}},
        nlohmann::json{{"rope_theta", 500000.0}, {"rope_scaling", llama31}, {"rope_parameters", v5}}}) {
    const std::string path = write_config("llama", extra);
    for (int round_trip = 0; round_trip < 2; ++round_trip) {
      const TransformerSpec s = read_hf_config(path);
      EXPECT_EQ(s.rope.theta, 500000.0) << extra.dump();
      EXPECT_EQ(s.rope.scaling, RopeScaling::llama3) << extra.dump();
      EXPECT_EQ(s.rope.factor, 8.0);
      EXPECT_EQ(s.rope.low_freq_factor, 1.0);
      EXPECT_EQ(s.rope.high_freq_factor, 4.0);
      EXPECT_EQ(s.rope.original_max_position, 8192.0);
      std::ofstream(path) << hf_config_json(s);
    }
    std::filesystem::remove(path);
  }
  // The same keys outside the tables are accepted where they change nothing.
  nlohmann::json agreeing = {
      {"rope_scaling", llama31}, {"original_max_position_embeddings", 8192}, {"partial_rotary_factor", 1.0}};
  const std::string agreeing_path = write_config("llama", agreeing);
  EXPECT_EQ(read_hf_config(agreeing_path).rope.original_max_position, 8192.0);
  std::filesystem::remove(agreeing_path);
  const std::string linear = write_config("llama", {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  for (int round_trip = 0; round_trip < 2; ++round_trip) {
    const TransformerSpec s = read_hf_config(linear);
    EXPECT_EQ(s.rope.scaling, RopeScaling::linear);
    EXPECT_EQ(s.rope.factor, 2.0);
    std::ofstream(linear) << hf_config_json(s);
  }
  std::filesystem::remove(linear);
}

// A RoPE scaling trident does not build, or one with bad or contradicting values, is an error naming
// the file and the table.key: loading it unscaled would give other logits.
TEST(HfConfig, HuggingFaceConfigRopeScalingErrors) {
  const nlohmann::json llama31 = {{"rope_type", "llama3"},
                                  {"factor", 8.0},
                                  {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0},
                                  {"original_max_position_embeddings", 8192}};
  nlohmann::json swapped = llama31;
  swapped["low_freq_factor"] = 4.0;
  swapped["high_freq_factor"] = 1.0;
  nlohmann::json other_factor = llama31;
  other_factor["factor"] = 16.0;
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "rope_scaling.rope_type 'yarn'"},
      {{{"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 4.0}}}}, "rope_parameters.rope_type 'dynamic'"},
      {{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "rope_scaling.low_freq_factor"},
      {{{"rope_scaling", {{"rope_type", "linear"}}}}, "rope_scaling.factor"},
      {{{"rope_scaling", {{"rope_type", "linear"}, {"factor", -2.0}}}}, "rope_scaling.factor -2"},
      {{{"rope_scaling", swapped}}, "low_freq_factor < high_freq_factor"},
      {{{"rope_scaling", llama31}, {"rope_parameters", other_factor}}, "different RoPE scalings"},
      {{{"rope_theta", 10000.0}, {"rope_parameters", {{"rope_theta", 500000.0}}}}, "disagree"},
      {{{"rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}}},
       "rope_parameters.partial_rotary_factor"},
      {{{"rope_scaling", "llama3"}}, "key 'rope_scaling' must be an object"},
      // Keys transformers reads outside the tables: a top-level partial rotary factor (transformers 4's
      // place for it) and a top-level original context (which transformers 5 prefers to the table's).
      {{{"partial_rotary_factor", 0.5}}, "partial_rotary_factor 0.5 is not supported"},
      {{{"rope_scaling", llama31}, {"original_max_position_embeddings", 4096}},
       "original_max_position_embeddings 4096 and rope_scaling.original_max_position_embeddings 8192 disagree"},
      // A table that says "default" contradicts one that scales, and the two tables' bases must agree.
      {{{"rope_scaling", {{"rope_type", "default"}}}, {"rope_parameters", llama31}}, "different RoPE scalings"},
      {{{"rope_scaling", llama31}, {"rope_parameters", {{"rope_type", "default"}}}}, "different RoPE scalings"},
      {{{"rope_scaling", {{"rope_theta", 10000.0}}}, {"rope_parameters", {{"rope_theta", 500000.0}}}},
       "rope_scaling.rope_theta 10000 and rope_parameters.rope_theta 500000 disagree"},
  };
  for (const auto& [extra, expected] : bad) {
    const std::string path = write_config("llama", extra);
    const std::string message = testing::error_message([&] { read_hf_config(path); });
    EXPECT_NE(message.find(path), std::string::npos) << extra.dump() << ": " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << extra.dump() << ": " << message;
    std::filesystem::remove(path);
  }
}

// Every config.json key that changes the model's function is either implemented or an error naming the
// file and the key: ignoring one would load the weights into a different function (wrong logits).
TEST(HfConfig, HuggingFaceConfigKeysThatChangeTheMathAreNotIgnored) {
  const std::vector<std::pair<std::string, nlohmann::json>> unsupported = {
      {"llama", {{"hidden_act", "gelu"}}},
      {"llama", {{"attention_bias", true}}},
      {"llama", {{"mlp_bias", true}}},
      {"llama", {{"head_dim", 8}}},
      {"gpt2", {{"activation_function", "relu"}}},
      {"gpt2", {{"scale_attn_by_inverse_layer_idx", true}}},
      {"gpt2", {{"scale_attn_weights", false}}},
      {"mistral", {{"hidden_act", "gelu"}}},
      {"mistral", {{"sliding_window", -3}}},
      {"qwen2", {{"head_dim", 8}}},
      // Qwen2 layers that differ in their window (trident builds one window for every layer).
      {"qwen2", {{"max_window_layers", 1}, {"sliding_window", 4}, {"use_sliding_window", true}}},
      {"qwen2", {{"layer_types", {"full_attention", "sliding_attention"}}, {"sliding_window", 4}}},
      {"qwen2", {{"layer_types", {"sliding_attention", "dense"}}, {"sliding_window", 4}}},
  };
  for (const auto& [type, extra] : unsupported) {
    const std::string path = write_config(type, extra);
    const std::string message = testing::error_message([&] { read_hf_config(path); });
    EXPECT_NE(message.find(path), std::string::npos) << extra.dump() << ": " << message;
    EXPECT_NE(message.find(extra.begin().key()), std::string::npos) << extra.dump() << ": " << message;
    std::filesystem::remove(path);
  }
  // The defaults (as transformers writes them) and same-function spellings load.
  for (const auto& [type, extra] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"llama", {{"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false}, {"head_dim", 4}}},
           {"llama", {{"hidden_act", "swish"}}},
           {"gpt2",
            {{"scale_attn_by_inverse_layer_idx", false},
             {"scale_attn_weights", true},
             {"reorder_and_upcast_attn", false}}},
           {"gpt2", {{"activation_function", "gelu_pytorch_tanh"}, {"reorder_and_upcast_attn", true}}},
           {"mistral", {{"sliding_window", nullptr}}},
           {"mistral", {{"sliding_window", 4}, {"head_dim", 4}}},
           {"qwen2", {{"use_sliding_window", false}, {"sliding_window", 4096}, {"max_window_layers", 28}}},
           {"qwen2", {{"max_window_layers", 0}, {"sliding_window", 4}, {"use_sliding_window", true}}},
           {"qwen2", {{"layer_types", {"sliding_attention", "sliding_attention"}}, {"sliding_window", 4}}}}) {
    const std::string path = write_config(type, extra);
    EXPECT_EQ(testing::error_message([&] { read_hf_config(path); }), "") << extra.dump();
    std::filesystem::remove(path);
  }
}

// An optional key of the wrong type is an error naming the file and the key, as a required one is.
TEST(HfConfig, HuggingFaceConfigKeysOfTheWrongTypeNameTheFileAndKey) {
  for (const auto& [type, extra] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"gpt2", {{"n_inner", "256"}}},
                                                           {"gpt2", {{"layer_norm_epsilon", "1e-5"}}},
                                                           {"gpt2", {{"tie_word_embeddings", "false"}}},
                                                           {"llama", {{"rms_norm_eps", "1e-6"}}},
                                                           {"llama", {{"rope_theta", "500000"}}},
                                                           {"llama", {{"head_dim", "4"}}},
                                                           {"llama", {{"hidden_act", 1}}}}) {
    const std::string path = write_config(type, extra);
    const std::string message = testing::error_message([&] { read_hf_config(path); });
    EXPECT_NE(message.find(path), std::string::npos) << extra.dump() << ": " << message;
    EXPECT_NE(message.find(extra.begin().key()), std::string::npos) << extra.dump() << ": " << message;
    std::filesystem::remove(path);
  }
}

// Each family's options as read from config.json, and written back the same.
TEST(HfConfig, MistralAndQwen2ConfigsRoundTrip) {
  std::string path = write_config("mistral", {{"sliding_window", 4}, {"tie_word_embeddings", true}});
  TransformerSpec m = read_hf_config(path);
  EXPECT_EQ(m.family, "mistral");
  EXPECT_EQ(m.sliding_window, 4);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  path = write_config("qwen2", {{"max_window_layers", 0}, {"sliding_window", 6}, {"use_sliding_window", true}});
  TransformerSpec q = read_hf_config(path);
  EXPECT_EQ(q.family, "qwen2");
  EXPECT_EQ(q.sliding_window, 6);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.tie_embeddings);  // Qwen2Config's default
  for (const TransformerSpec& s : {m, q, preset("qwen2-tiny"), preset("mistral-7b")}) {
    std::ofstream(path) << hf_config_json(s);
    const TransformerSpec back = read_hf_config(path);
    EXPECT_EQ(back.family, s.family);
    EXPECT_EQ(back.sliding_window, s.sliding_window);
    EXPECT_EQ(back.qkv_bias, s.qkv_bias);
    EXPECT_EQ(back.tie_embeddings, s.tie_embeddings);
    EXPECT_EQ(back.rope.theta, s.rope.theta);
    EXPECT_EQ(back.num_parameters(), s.num_parameters());
  }
  std::filesystem::remove(path);
}

TEST(HfConfig, MixtralConfigRoundTrips) {
  std::string path = write_config("mixtral", {{"num_local_experts", 8}, {"num_experts_per_tok", 2},
                                              {"router_aux_loss_coef", 0.02}, {"sliding_window", nullptr}});
  TransformerSpec m = read_hf_config(path);
  EXPECT_EQ(m.family, "mixtral");
  EXPECT_EQ(m.n_experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.moe_aux_loss_coef, 0.02);
  EXPECT_EQ(m.sliding_window, 0);
  for (const TransformerSpec& s : {m, preset("mixtral-tiny"), preset("mixtral-8x7b")}) {
    std::ofstream(path) << hf_config_json(s);
    const TransformerSpec back = read_hf_config(path);
    EXPECT_EQ(back.n_experts, s.n_experts);
    EXPECT_EQ(back.experts_per_token, s.experts_per_token);
    EXPECT_EQ(back.moe_aux_loss_coef, s.moe_aux_loss_coef);
    EXPECT_EQ(back.num_parameters(), s.num_parameters());
  }
  EXPECT_EQ(preset("mixtral-8x7b").num_parameters(), 46702792704);  // Mixtral 8x7B's published count
  // Qwen2-MoE: experts moe_intermediate_size wide, a shared expert, top-k weights as the softmax gave them.
  path = write_config("qwen2_moe", {{"num_experts", 6}, {"num_experts_per_tok", 3}, {"moe_intermediate_size", 24},
                                    {"shared_expert_intermediate_size", 32}});
  TransformerSpec q = read_hf_config(path);
  EXPECT_EQ(q.family, "qwen2_moe");
  EXPECT_EQ(q.expert_d_ff(), 24);
  EXPECT_EQ(q.moe_shared_d_ff, 32);
  EXPECT_FALSE(q.moe_norm_topk_prob);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.active_parameters(), q.num_parameters() - 2 * 3 * 3 * 16 * 24);
  for (const TransformerSpec& s : {q, preset("qwen2_moe-tiny"), preset("qwen1.5-moe-a2.7b")}) {
    std::ofstream(path) << hf_config_json(s);
    const TransformerSpec back = read_hf_config(path);
    EXPECT_EQ(back.expert_d_ff(), s.expert_d_ff());
    EXPECT_EQ(back.moe_shared_d_ff, s.moe_shared_d_ff);
    EXPECT_EQ(back.moe_norm_topk_prob, s.moe_norm_topk_prob);
    EXPECT_EQ(back.num_parameters(), s.num_parameters());
  }
  // Qwen1.5-MoE-A2.7B: 14.3B parameters, 2.7B of them active (without the embeddings: 2.0B).
  EXPECT_NEAR(static_cast<double>(preset("qwen1.5-moe-a2.7b").num_parameters()), 14.3e9, 0.05e9);
  path = write_config("qwen2_moe", {{"num_experts", 6}, {"num_experts_per_tok", 3}, {"moe_intermediate_size", 24},
                                    {"shared_expert_intermediate_size", 32}, {"decoder_sparse_step", 2}});
  EXPECT_NE(testing::error_message([&] { read_hf_config(path); }).find("decoder_sparse_step=2 makes some layers dense"),
            std::string::npos);
  path = write_config("mixtral", {{"num_local_experts", 8}, {"num_experts_per_tok", 2}, {"router_jitter_noise", 0.1}});
  EXPECT_NE(testing::error_message([&] { read_hf_config(path); }).find("router_jitter_noise=0.1 is not supported"),
            std::string::npos);
  std::filesystem::remove(path);
}

// Dropout on the attention probabilities under each family's name: read, written back (export writes the
// value trained with), and defaulted as transformers' configs default it when absent.
TEST(HfConfig, AttentionDropoutRoundTripsUnderEachFamilysName) {
  for (const auto& [type, key, absent] : std::vector<std::tuple<std::string, std::string, double>>{
           {"bert", "attention_probs_dropout_prob", 0.1}, {"gpt2", "attn_pdrop", 0.0}, {"llama", "attention_dropout", 0.0},
           {"mistral", "attention_dropout", 0.0}, {"qwen2", "attention_dropout", 0.0}}) {
    SCOPED_TRACE(type);
    nlohmann::json extra = {{key, 0.25}};
    if (type == "bert") extra["intermediate_size"] = 64;
    std::string path = write_config(type, extra);
    TransformerSpec s = read_hf_config(path);
    EXPECT_EQ(s.attention_dropout, 0.25);
    s.attention_dropout = 0.125;
    const nlohmann::json written = nlohmann::json::parse(hf_config_json(s));
    EXPECT_EQ(written.at(key).get<double>(), 0.125);
    std::ofstream(path) << written.dump();
    EXPECT_EQ(read_hf_config(path).attention_dropout, 0.125);
    nlohmann::json without = written;
    without.erase(key);
    std::ofstream(path) << without.dump();
    EXPECT_EQ(read_hf_config(path).attention_dropout, absent);
    std::filesystem::remove(path);
  }
}

// Values a model cannot have are refused when config.json is read, naming the file (not at the first
// forward pass, after the run directory exists).
TEST(HfConfig, ImpossibleValuesNameTheFile) {
  for (const auto& [extra, expected] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"rope_theta", 0}}, "model.rope_theta must be a positive finite number, got 0"},
           {{{"rms_norm_eps", -1}}, "model.norm_eps must be a finite number >= 0, got -1"},
           {{{"num_key_value_heads", 3}}, "n_head=4 is not a multiple of n_kv_head=3"},
           {{{"attention_dropout", 1.5}}, "model.attention_dropout must be in [0, 1), got 1.5"}}) {
    const std::string path = write_config("llama", extra);
    const std::string message = testing::error_message([&] { read_hf_config(path); });
    EXPECT_NE(message.find("'" + path + "': "), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace trident::models
