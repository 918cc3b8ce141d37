// BERT (Hugging Face BertForMaskedLM; BertModel directories load too): an
// encoder. Learned absolute positions and token-type embeddings summed and
// layer-normed, post-LayerNorm blocks with bidirectional attention (padding
// keys hidden by the attention mask), an exact (erf) GELU MLP, everything with
// biases; the masked-LM head is a dense transform with GELU and LayerNorm,
// then a decoder tied to the word embeddings with a bias of its own. An
// optional pooler (tanh of a dense layer on the first token) as BertModel's.
#include "trident/autograd/autograd.h"
#include "trident/models/families/gpt_like.h"
#include "trident/models/family.h"
#include "trident/models/hf_config.h"
#include "trident/nn/transformer.h"

namespace trident::models {

namespace {

namespace ag = trident::autograd;

constexpr const char* kPrefix = "bert.";  // BertForMaskedLM's; BertModel's files lack it
constexpr const char* kHeadBias = "cls.predictions.bias";
constexpr const char* kDecoderBias = "cls.predictions.decoder.bias";

std::unique_ptr<nn::Layer> norm(const std::string& name, const TransformerSpec& s, const nn::TensorParallel& tp) {
  return std::make_unique<nn::LayerNorm>(name, s.d_model, s.norm_eps, true, tp);
}

nn::LinearOptions dense(const TransformerSpec& s) {
  return nn::LinearOptions{s.d_model, s.d_model, true, nn::WeightLayout::out_in, s.init_std};
}

std::unique_ptr<nn::Layer> block(const std::string& name, const TransformerSpec& s, std::int64_t layer,
                                 const ModelParallel& mp) {
  const nn::TensorParallel& tp = mp.tp;
  const std::string attention = nn::child_name(name, "attention");
  nn::SelfAttentionOptions a;
  a.d_model = s.d_model;
  a.n_head = s.n_head;
  a.n_kv_head = s.n_head;
  a.causal = false;
  a.qkv_bias = a.out_bias = true;
  a.layout = nn::WeightLayout::out_in;
  a.dropout = s.dropout;
  a.attention_dropout = s.attention_dropout;
  a.init_std = a.out_init_std = s.init_std;
  a.q = "self.query";
  a.k = "self.key";
  a.v = "self.value";
  a.out = "output.dense";
  set_sparse_attention(s, a);
  nn::FeedForwardOptions f;
  f.d_model = s.d_model;
  f.d_ff = s.d_ff;
  f.activation = nn::Activation::gelu;
  f.bias = true;
  f.layout = nn::WeightLayout::out_in;
  f.dropout = s.dropout;
  f.init_std = f.out_init_std = s.init_std;
  f.up = "intermediate.dense";
  f.down = "output.dense";
  return std::make_unique<nn::PostNormBlock>(
      name, std::make_unique<nn::SelfAttention>(attention, a, layer, tp, mp.cp),
      norm(nn::child_name(attention, "output.LayerNorm"), s, tp), std::make_unique<nn::FeedForward>(name, f, tp),
      norm(nn::child_name(name, "output.LayerNorm"), s, tp));
}

// The masked-LM head's transform: LayerNorm(gelu(dense(h))), per token, replicated under tensor parallelism.
class HeadTransform : public nn::Layer {
 public:
  HeadTransform(std::string prefix, const TransformerSpec& s, const nn::TensorParallel& tp) : Layer(std::move(prefix)) {
    dense_ = &add_module(std::make_unique<nn::Linear>(child_prefix("dense"), dense(s), tp));
    norm_ = &add_module(models::norm(child_prefix("LayerNorm"), s, tp));
  }
  autograd::Variable forward(const autograd::Variable& x, const nn::ForwardContext& ctx) const override {
    return norm_->forward(ag::gelu(dense_->forward(x, ctx)), ctx);
  }

 private:
  nn::Linear* dense_ = nullptr;
  nn::Layer* norm_ = nullptr;
};

// BertModel's pooler: tanh(dense(h[:, 0])), the first ([CLS]) token's summary of the sequence. Not part
// of the masked-LM loss; it is carried through training, checkpoints and exports for the tasks that use it.
class Pooler : public nn::Layer {
 public:
  Pooler(std::string prefix, const TransformerSpec& s, const nn::TensorParallel& tp) : Layer(std::move(prefix)) {
    dense_ = &add_module(std::make_unique<nn::Linear>(child_prefix("dense"), dense(s), tp));
  }
  // h [B, T, D] → [B, D]
  autograd::Variable forward(const autograd::Variable& h, const nn::ForwardContext& ctx) const override {
    const std::int64_t B = h.shape()[0], D = h.shape()[2];
    return ag::tanh(dense_->forward(ag::reshape(ag::slice(h, 1, 0, 1), {B, D}), ctx));
  }

 private:
  nn::Linear* dense_ = nullptr;
};

TransformerSpec sized(std::int64_t L, std::int64_t H, std::int64_t D) {
  TransformerSpec s = gpt_like_spec("bert", L, H, D);
  s.vocab_size = 30522;  // bert-base-uncased's WordPiece vocabulary
  s.max_seq_len = 512;
  s.type_vocab_size = 2;
  s.norm_eps = 1e-12;
  s.qkv_bias = true;
  return s;
}

// BERT's config.json keys of the spec's fields, read in this order.
const std::vector<HfKey>& hf_keys() {
  using S = TransformerSpec;
  static const std::vector<HfKey> keys = {
      {"num_hidden_layers", &S::n_layer},
      {"num_attention_heads", &S::n_head},
      {"hidden_size", &S::d_model},
      {"intermediate_size", &S::d_ff, [](const S& s) { return 4 * s.d_model; }},
      {"vocab_size", &S::vocab_size},
      {"max_position_embeddings", &S::max_seq_len, std::int64_t{512}},
      {"type_vocab_size", &S::type_vocab_size, std::int64_t{2}},
      {"layer_norm_eps", &S::norm_eps, 1e-12},
      {"hidden_dropout_prob", &S::dropout, 0.1},
      {"attention_probs_dropout_prob", &S::attention_dropout, 0.1},
      {"initializer_range", &S::init_std, 0.02},
      {"tie_word_embeddings", &S::tie_embeddings, true},
  };
  return keys;
}

void read_config(const HfConfigReader& c, TransformerSpec& s) {
  read_keys(c, s, hf_keys());
  s.n_kv_head = s.n_head;
  const std::string act = c.get_or<std::string>("hidden_act", "gelu");
  TRIDENT_CHECK(act == "gelu", "'{}': hidden_act '{}' is not supported (trident's BERT uses the exact GELU, 'gelu')",
                c.path(), act);
  const std::string positions = c.get_or<std::string>("position_embedding_type", "absolute");
  TRIDENT_CHECK(positions == "absolute",
                "'{}': position_embedding_type '{}' is not supported (trident's BERT has absolute positions)",
                c.path(), positions);
  c.require_false("is_decoder", "trident's BERT is an encoder (bidirectional attention)");
  c.require_false("add_cross_attention", "trident's BERT has no cross-attention");
}

void write_config(const TransformerSpec& s, HfConfigWriter& c) {
  write_keys(s, c, hf_keys());
  c.set("hidden_act", "gelu");
  c.set("position_embedding_type", "absolute");
}

// "x.LayerNorm.weight" was "x.LayerNorm.gamma" in the original checkpoints (bert-base-uncased's among
// them), and ".bias" was ".beta"; transformers renames them on load, and so does trident.
std::vector<std::string> with_legacy_norm_names(std::vector<std::string> names) {
  const std::size_t n = names.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = names[i];  // a copy: push_back below may reallocate
    for (auto [now, old] : {std::pair{".LayerNorm.weight", ".LayerNorm.gamma"}, {".LayerNorm.bias", ".LayerNorm.beta"}}) {
      if (name.ends_with(now)) names.push_back(name.substr(0, name.size() - std::string_view(now).size()) + old);
    }
  }
  return names;
}

}  // namespace

Family bert_family() {
  Family f;
  f.name = "bert";
  f.display_name = "BERT";
  f.hf_model_type = "bert";
  f.hf_architecture = "BertForMaskedLM";
  f.objective = Objective::masked_lm;
  f.names.token_embedding = "bert.embeddings.word_embeddings";
  f.names.position_embedding = "bert.embeddings.position_embeddings";
  f.names.token_type_embedding = "bert.embeddings.token_type_embeddings";
  f.names.embed_norm = "bert.embeddings.LayerNorm";
  f.names.embed_dropout = "bert.embeddings.dropout";
  f.names.layers = "bert.encoder.layer";
  f.names.final_norm = "";  // post-norm: the last block ends normalised
  f.names.head_transform = "cls.predictions.transform";
  f.names.lm_head = "cls.predictions.decoder";
  f.names.head_bias = kHeadBias;
  f.names.pooler = "bert.pooler";
  f.defaults = [] { return sized(0, 0, 0); };
  f.presets = {
      {"bert-base", [] { return sized(12, 12, 768); }},
      {"bert-large", [] { return sized(24, 16, 1024); }},
      {"bert-tiny",
       [] {
         TransformerSpec s = sized(2, 4, 64);
         s.vocab_size = 512;
         s.max_seq_len = 128;
         return s;
       }},
  };
  f.default_d_ff = [](std::int64_t d) { return 4 * d; };
  f.validate = [](const TransformerSpec& s) {
    TRIDENT_CHECK(s.n_kv_head == s.n_head, "model: BERT has no grouped-query attention (n_kv_head={} but n_head={})",
                  s.n_kv_head, s.n_head);
    TRIDENT_CHECK(s.sliding_window == 0, "model.sliding_window={}: BERT attends to every token of its sample",
                  s.sliding_window);
  };
  f.block_parameters = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model), F = static_cast<long double>(s.d_ff);
    return 4 * (D * D + D) + 2 * (2 * D) + (D * F + F) + (F * D + D);
  };
  f.other_parameters = [](const TransformerSpec& s) {
    const long double D = static_cast<long double>(s.d_model);
    const long double types = static_cast<long double>(s.type_vocab_size) * D;
    const long double transform = D * D + D + 2 * D;
    return types + 2 * D + transform + static_cast<long double>(s.vocab_size) + (s.pooler ? D * D + D : 0);
  };
  f.read_hf_config = read_config;
  f.write_hf_config = write_config;
  f.make_norm = norm;
  f.make_block = block;
  f.make_head_transform = [](const std::string& name, const TransformerSpec& s, const nn::TensorParallel& tp) {
    return std::make_unique<HeadTransform>(name, s, tp);
  };
  f.make_pooler = [](const std::string& name, const TransformerSpec& s, const nn::TensorParallel& tp) {
    return std::make_unique<Pooler>(name, s, tp);
  };
  f.hf_names = [](const std::string& name) {
    std::vector<std::string> names{name};
    if (name.starts_with(kPrefix)) names.push_back(name.substr(std::string_view(kPrefix).size()));  // BertModel
    // The decoder's bias is the one transformers applies; tied, it is cls.predictions.bias itself.
    if (name == kHeadBias) names.insert(names.begin(), kDecoderBias);
    return with_legacy_norm_names(std::move(names));
  };
  f.hf_export_names = [](const std::string& name) {
    if (name == kHeadBias) return std::vector<std::string>{kHeadBias, kDecoderBias};
    return std::vector<std::string>{name};
  };
  // A BertModel directory has no MLM head: it starts from its initial values.
  f.optional_in_hf = [](const std::string& name) { return name.starts_with("cls."); };
  return f;
}

}  // namespace trident::models
