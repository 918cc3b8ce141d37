#include "trident/models/transformer_lm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "trident/autograd/autograd.h"
#include "trident/checkpoint/safetensors.h"
#include "trident/models/hf.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/shape.h"
#include "trident/optim/optimizer.h"
#include "testing/helpers.h"

namespace trident::models {
namespace {

TransformerSpec tiny(const std::string& arch, double dropout = 0.0) {
  TransformerSpec s = preset(arch + "-tiny");
  s.n_layer = 2;
  s.d_model = 16;
  s.n_head = 4;
  const bool multi_head = arch == "gpt2" || arch == "bert";  // no grouped-query attention
  s.n_kv_head = multi_head ? 4 : 2;
  s.d_ff = multi_head ? 64 : 40;
  if (s.sliding_window) s.sliding_window = 3;  // shorter than the sequences, so the window matters
  s.vocab_size = 23;
  s.max_seq_len = 16;
  s.dropout = dropout;
  s.attention_dropout = dropout;
  s.init_std = 0.3;  // large enough that every term of the gradient matters
  return s;
}

Tensor random_ids(std::mt19937_64& gen, std::int64_t B, std::int64_t T, std::int64_t V) {
  std::uniform_int_distribution<std::int64_t> d(0, V - 1);
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (auto& x : t.span<std::int64_t>()) x = d(gen);
  return t;
}

void randomise_norms(TransformerLM& m, std::mt19937_64& gen) {
  // Norm weights start at 1 and biases at 0; perturb them so their gradients are exercised.
  std::uniform_real_distribution<double> d(-0.5, 0.5);
  for (nn::Parameter* p : m.parameters()) {
    if (p->init.kind == nn::InitKind::normal) continue;
    for (double& x : p->var.data().span<double>()) x += d(gen);
  }
}

class WholeModelGradCheck : public ::testing::TestWithParam<std::pair<std::string, double>> {};

// f64 central differences along random directions in parameter space.
TEST_P(WholeModelGradCheck, MatchesFiniteDifferences) {
  auto [arch, dropout] = GetParam();
  TransformerLM model(tiny(arch, dropout));
  model.initialize(7, DType::f64);
  std::mt19937_64 gen(11);
  randomise_norms(model, gen);
  Tensor ids = random_ids(gen, 2, 5, 23), labels = random_ids(gen, 2, 5, 23);
  ForwardContext ctx;
  ctx.compute_dtype = DType::f64;
  // Training: a mixture of experts' loss has its load-balancing term.
  ctx.training = dropout > 0 || arch == "mixtral" || arch == "qwen2_moe";
  ctx.seed = 3;
  model.loss(ids, labels, ctx).backward();

  auto params = model.parameters();
  for (int trial = 0; trial < 3; ++trial) {
    std::normal_distribution<double> nd;
    std::vector<std::vector<double>> dir;
    double analytic = 0;
    for (nn::Parameter* p : params) {
      ASSERT_TRUE(p->var.grad().defined()) << p->name << " received no gradient";
      // Each parameter's direction from its own stream, so that a table's padding rows (drawn last)
      // shift no other parameter's direction.
      std::mt19937_64 pgen(static_cast<std::uint64_t>(trial) * 1000003u + dir.size());
      std::vector<double> u(static_cast<std::size_t>(p->var.numel()));
      for (auto& x : u) x = nd(pgen);
      auto g = p->var.grad().span<double>();
      for (std::size_t i = 0; i < u.size(); ++i) analytic += g[i] * u[i];
      dir.push_back(std::move(u));
    }
    auto shifted_loss = [&](double h) {
      for (std::size_t k = 0; k < params.size(); ++k) {
        auto x = params[k]->var.data().span<double>();
        for (std::size_t i = 0; i < x.size(); ++i) x[i] += h * dir[k][i];
      }
      autograd::NoGradGuard ng;
      double l = model.loss(ids, labels, ctx).data().item();
      for (std::size_t k = 0; k < params.size(); ++k) {
        auto x = params[k]->var.data().span<double>();
        for (std::size_t i = 0; i < x.size(); ++i) x[i] -= h * dir[k][i];
      }
      return l;
    };
    // Central differences at h and h/2, Richardson-extrapolated: the h² error term cancels, which the
    // large weights (init_std 0.3) make worth it along directions of a few thousand parameters.
    const double h = 1e-5;
    const auto central = [&](double step) { return (shifted_loss(step) - shifted_loss(-step)) / (2 * step); };
    const double numeric = (4 * central(h / 2) - central(h)) / 3;
    EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::fabs(numeric))) << "trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, WholeModelGradCheck,
                         ::testing::Values(std::pair{std::string("gpt2"), 0.0}, std::pair{std::string("llama"), 0.0},
                                           std::pair{std::string("mistral"), 0.0}, std::pair{std::string("qwen2"), 0.0},
                                           std::pair{std::string("mixtral"), 0.0},
                                           std::pair{std::string("qwen2_moe"), 0.0},
                                           std::pair{std::string("bert"), 0.0}, std::pair{std::string("gpt2"), 0.2},
                                           std::pair{std::string("bert"), 0.2}),
                         [](const auto& p) {
                           return p.param.first +
                                  (p.param.second > 0 ? "_dropout" : "");
                         });

TEST(TransformerLM, CanonicalNamesAndShapes) {
  TransformerLM gpt(preset("gpt2"));
  EXPECT_EQ(gpt.num_parameters(), 124439808);  // GPT-2 small, tied head
  auto params = gpt.parameters();
  EXPECT_EQ(params.front()->name, "transformer.wte.weight");
  const nn::Parameter* c_attn = gpt.find_parameter("transformer.h.3.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->global_shape, (Shape{768, 2304}));  // Conv1D [in, out]
  EXPECT_FALSE(gpt.find_parameter("transformer.h.0.attn.c_attn.bias")->weight_decay);
  EXPECT_EQ(gpt.find_parameter("lm_head.weight"), nullptr);

  TransformerSpec ls = preset("llama-tiny");
  TransformerLM llama(ls);
  ASSERT_NE(llama.find_parameter("model.layers.1.self_attn.k_proj.weight"), nullptr);
  EXPECT_EQ(llama.find_parameter("model.layers.1.self_attn.k_proj.weight")->global_shape,
            (Shape{ls.n_kv_head * ls.d_model / ls.n_head, ls.d_model}));
  EXPECT_NE(llama.find_parameter("lm_head.weight"), nullptr);
  EXPECT_NE(llama.find_parameter("model.norm.weight"), nullptr);
}

TEST(TransformerLM, SpecCountsTheParametersOfTheModel) {
  EXPECT_EQ(preset("gpt2").num_parameters(), 124439808);
  EXPECT_EQ(preset("bert-base").num_parameters(), 109514298);  // BertForMaskedLM of bert-base-uncased
  TransformerSpec untied = preset("gpt2-tiny");
  untied.tie_embeddings = false;
  TransformerSpec pooled = preset("bert-tiny");
  pooled.pooler = true;
  for (const TransformerSpec& s : {preset("gpt2-tiny"), untied, preset("llama-tiny"), tiny("llama"), pooled}) {
    EXPECT_EQ(s.num_parameters(), TransformerLM(s).num_parameters());
  }
  // Every family's count from its sizes (Family::block_parameters) against the layout it builds, tied and
  // untied, at every preset (a layout allocates nothing, so the 7B ones are cheap).
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    TransformerSpec s = preset(name);
    EXPECT_EQ(s.num_parameters(), TransformerLM(s).num_parameters());
    s.tie_embeddings = !s.tie_embeddings;
    EXPECT_EQ(s.num_parameters(), TransformerLM(s).num_parameters());
  }
}

TEST(TransformerLM, FamiliesNameTheirPartsAsTransformersDoes) {
  TransformerSpec b = preset("bert-tiny");
  TransformerLM bert(b);
  for (const char* name : {"bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.bias",
                           "bert.encoder.layer.1.attention.self.value.bias",
                           "bert.encoder.layer.1.attention.output.LayerNorm.weight",
                           "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias",
                           "cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.bias"}) {
    EXPECT_NE(bert.find_parameter(name), nullptr) << name;
  }
  EXPECT_EQ(bert.find_parameter("cls.predictions.bias")->global_shape, (Shape{b.vocab_size}));
  EXPECT_EQ(bert.find_parameter("cls.predictions.decoder.weight"), nullptr);  // tied to the word embeddings
  EXPECT_EQ(family("bert").hf_names("bert.embeddings.LayerNorm.weight"),
            (std::vector<std::string>{"bert.embeddings.LayerNorm.weight", "embeddings.LayerNorm.weight",
                                      "bert.embeddings.LayerNorm.gamma", "embeddings.LayerNorm.gamma"}));
  TransformerSpec q = preset("qwen2-tiny");
  TransformerLM qwen(q);
  ASSERT_NE(qwen.find_parameter("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(qwen.find_parameter("model.layers.0.self_attn.k_proj.bias")->global_shape, (Shape{q.n_kv_head * q.head_dim()}));
  EXPECT_EQ(qwen.find_parameter("model.layers.0.self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(qwen.find_parameter("lm_head.weight"), nullptr);  // qwen2-tiny ties, as Qwen2-0.5B does
  TransformerLM mistral(preset("mistral-tiny"));
  EXPECT_EQ(mistral.find_parameter("model.layers.1.self_attn.q_proj.bias"), nullptr);
  EXPECT_NE(mistral.find_parameter("lm_head.weight"), nullptr);
  EXPECT_EQ(preset("mistral-7b").num_parameters(), 7241732096);  // Mistral 7B v0.1
  EXPECT_EQ(preset("qwen2-0.5b").num_parameters(), 494032768);   // Qwen2-0.5B, tied
}

TEST(TransformerLM, InitIsAFunctionOfNameAndSeed) {
  TransformerLM a(tiny("llama")), b(tiny("llama"));
  a.initialize(5);
  b.initialize(5);
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    EXPECT_EQ(a.parameters()[i]->var.data().to_vector<float>(), b.parameters()[i]->var.data().to_vector<float>());
  }
  TransformerLM c(tiny("llama"));
  c.initialize(6);
  EXPECT_NE(a.parameters()[0]->var.data().to_vector<float>(), c.parameters()[0]->var.data().to_vector<float>());
}

// Padding the vocabulary tables (TransformerSpec::vocab_divisible_by) leaves the model's function alone:
// the same logits, loss and gradients (f64) with 23 rows or 32 (9 of them padding, whose gradients are
// zero), for tied and untied heads and BERT's head bias; ids of the padding are refused.
TEST(TransformerLM, VocabularyPaddingChangesNothing) {
  for (const std::string arch : {"gpt2", "llama", "bert", "mixtral"}) {
    SCOPED_TRACE(arch);
    std::mt19937_64 gen(3);
    Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
    TransformerSpec s = tiny(arch);
    s.vocab_divisible_by = 1;
    TransformerSpec p = s;
    p.vocab_divisible_by = 16;
    TransformerLM plain(s), padded(p);
    EXPECT_EQ(padded.padded_vocab_size(), 32);
    EXPECT_EQ(plain.padded_vocab_size(), 23);
    plain.initialize(2, DType::f64);
    padded.initialize(2, DType::f64);
    ForwardContext ctx;
    ctx.compute_dtype = DType::f64;
    ctx.training = true;
    EXPECT_EQ(padded.forward(ids, ctx).shape(), plain.forward(ids, ctx).shape());
    EXPECT_EQ(padded.forward(ids, ctx).data().to_vector<double>(), plain.forward(ids, ctx).data().to_vector<double>());
    Variable a = plain.loss(ids, labels, ctx), b = padded.loss(ids, labels, ctx);
    EXPECT_NEAR(a.data().item(), b.data().item(), 1e-13);
    a.backward();
    b.backward();
    ASSERT_EQ(plain.parameters().size(), padded.parameters().size());
    for (std::size_t i = 0; i < plain.parameters().size(); ++i) {
      const nn::Parameter &x = *plain.parameters()[i], &y = *padded.parameters()[i];
      SCOPED_TRACE(x.name);
      ASSERT_EQ(x.global_shape, y.global_shape);
      if (!x.var.grad().defined()) continue;  // an expert no token chose
      const std::vector<double> gx = x.var.grad().to_vector<double>(), gy = y.var.grad().to_vector<double>();
      ASSERT_EQ(y.local_shape()[0] == 32 ? gy.size() * 23 / 32 : gy.size(), gx.size());
      for (std::size_t k = 0; k < gy.size(); ++k) {
        if (k < gx.size()) {
          EXPECT_NEAR(gx[k], gy[k], 1e-12 * (1 + std::fabs(gx[k]))) << k;
        } else {
          EXPECT_EQ(gy[k], 0.0) << "padding row element " << k;
        }
      }
    }
    const Tensor pad_id = Tensor::from_vector(std::vector<std::int64_t>{1, 25}, {1, 2});
    EXPECT_NE(testing::error_message([&] { padded.forward(pad_id, ctx); }).find("id 25 "), std::string::npos);
  }
}

// Evaluation's prediction counts: the labelled positions (-100 left out) and those whose highest logit over
// the real vocabulary is the label. The padding columns of a padded table never win, even when every real
// logit is below their 0 (BERT's head bias pushed down here).
TEST(TransformerLM, PredictionsCountTheArgmaxOverTheRealVocabulary) {
  TransformerSpec s = tiny("bert");
  s.vocab_divisible_by = 16;  // 23 ids in 32 rows
  TransformerLM model(s);
  model.initialize(4);
  for (nn::Parameter* p : model.parameters()) {
    if (!p->name.ends_with("predictions.bias")) continue;
    std::vector<float> bias = p->var.data().to_vector<float>();
    ASSERT_EQ(bias.size(), 32u);
    for (std::size_t v = 0; v < 23; ++v) bias[v] = -5.0f;
    p->var.set_data(Tensor::from_vector(bias, Shape{32}));
  }
  std::mt19937_64 gen(11);
  const Tensor ids = random_ids(gen, 2, 6, 23);
  ForwardContext ctx;
  const std::vector<float> logits = model.forward(ids, ctx).data().to_vector<float>();  // [2, 6, 23]
  std::vector<std::int64_t> labels(12);
  std::int64_t want = 0;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const float* row = logits.data() + r * 23;
    const auto best = static_cast<std::int64_t>(std::max_element(row, row + 23) - row);
    ASSERT_LT(row[best], 0.0f);
    labels[r] = r % 3 == 0 ? -100 : r % 3 == 1 ? best : (best + 1) % 23;
    want += r % 3 == 1;
  }
  const Tensor label_tensor = Tensor::from_vector(labels, Shape{2, 6});
  nn::PredictionCounts counts;
  ctx.predictions = &counts;
  const double with_counts = model.loss(ids, label_tensor, ctx).data().item();
  EXPECT_EQ(counts.labelled, 8);
  EXPECT_EQ(counts.correct, want);
  ctx.predictions = nullptr;
  EXPECT_EQ(with_counts, model.loss(ids, label_tensor, ctx).data().item());  // counting changes no loss
}

TEST(TransformerLM, ActivationCheckpointingGivesIdenticalGradients) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "bert", "mixtral", "qwen2_moe"}) {
    std::mt19937_64 gen(1);
    Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = 9;
    TransformerLM plain(tiny(arch, 0.1)), ckpt(tiny(arch, 0.1));
    plain.initialize(1);
    ckpt.initialize(1);
    ckpt.set_activation_checkpointing(true);
    const double l1 = plain.loss(ids, labels, ctx).data().item();
    plain.loss(ids, labels, ctx).backward();
    Variable l2 = ckpt.loss(ids, labels, ctx);
    EXPECT_EQ(l1, l2.data().item());
    l2.backward();
    for (std::size_t i = 0; i < plain.parameters().size(); ++i) {
      const Tensor a = plain.parameters()[i]->var.grad(), b = ckpt.parameters()[i]->var.grad();
      // An expert no token chose in this batch gets no gradient (nn::MoE), with or without recomputation.
      ASSERT_EQ(a.defined(), b.defined()) << arch << " " << plain.parameters()[i]->name;
      if (a.defined()) {
        EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << plain.parameters()[i]->name;
      }
    }
  }
}

// Dropout on the attention probabilities changes training (each step and layer draws its own mask) and
// leaves evaluation exactly as without it.
TEST(TransformerLM, AttentionDropoutAppliesInTrainingOnly) {
  for (const std::string arch : {"gpt2", "llama", "bert", "mixtral"}) {
    SCOPED_TRACE(arch);
    std::mt19937_64 gen(8);
    Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
    TransformerSpec plain_spec = tiny(arch), dropped_spec = plain_spec;
    dropped_spec.attention_dropout = 0.3;
    TransformerLM plain(plain_spec), dropped(dropped_spec);
    plain.initialize(4);
    dropped.initialize(4);
    ForwardContext eval;
    EXPECT_EQ(plain.forward(ids, eval).data().to_vector<float>(), dropped.forward(ids, eval).data().to_vector<float>());
    ForwardContext train = eval;
    train.training = true;
    train.seed = 5;
    const double base = plain.loss(ids, labels, train).data().item();
    const double step1 = dropped.loss(ids, labels, train).data().item();
    EXPECT_NE(step1, base);
    EXPECT_EQ(dropped.loss(ids, labels, train).data().item(), step1);  // the same step draws the same masks
    train.step = 1;
    EXPECT_NE(dropped.loss(ids, labels, train).data().item(), step1);
  }
}

// bf16 training: after backward and an AdamW step every weight's bf16 copy is
// the one the update wrote (the next forward converts nothing), and equals a
// fresh conversion of the updated master weights.
TEST(TransformerLM, Bf16StepLeavesUpdatedComputeCopies) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "bert"}) {
    std::mt19937_64 gen(3);
    Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
    TransformerLM model(tiny(arch, 0.0));
    model.initialize(1);
    optim::AdamW opt(model.parameters(), optim::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
    ForwardContext ctx;
    ctx.training = true;
    ctx.compute_dtype = DType::bf16;
    model.loss(ids, labels, ctx).backward();
    opt.step(1e-2);
    for (const nn::Parameter* p : model.parameters()) {
      const Tensor copy = p->var.compute_copy();
      ASSERT_TRUE(copy.defined()) << p->name << ": AdamW dropped or did not write its bf16 copy";
      EXPECT_EQ(copy.to_vector<float>(), ops::cast(p->var.data(), DType::bf16).to_vector<float>()) << p->name;
    }
  }
}

// Pipeline stages chained by hand (the hidden state handed over as a new leaf,
// its gradient handed back) give the whole model's loss and gradients
// bit-for-bit; a tied model's last stage holds a copy of the token embedding
// whose gradient, added to the first stage's, is the whole model's.
TEST(TransformerLM, PipelineStagesChainedGiveTheWholeModel) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "bert"}) {
    TransformerSpec spec = tiny(arch, 0.1);
    spec.n_layer = 3;
    std::mt19937_64 gen(2);
    Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
    ForwardContext ctx;
    ctx.training = true;
    ctx.seed = 4;
    TransformerLM whole(spec);
    whole.initialize(3);
    Variable ref = whole.loss(ids, labels, ctx);
    ref.backward();
    for (const auto& counts : {std::vector<std::int64_t>{}, std::vector<std::int64_t>{2, 1}}) {
      const auto ranges = partition_layers(3, counts.empty() ? 3 : 2, counts);
      std::vector<std::unique_ptr<TransformerLM>> stages;
      for (const StageRange& r : ranges) {
        stages.push_back(std::make_unique<TransformerLM>(spec, nn::TensorParallel{}, r));
        stages.back()->initialize(3);
      }
      // Forward through the stages; each stage's input is a fresh leaf.
      std::vector<Variable> inputs, outputs;
      Variable h;
      for (auto& st : stages) {
        inputs.push_back(h.defined() ? Variable(h.data().clone(), true) : Variable());
        h = st->stage_forward(ids, inputs.back(), ctx);
        outputs.push_back(h);
      }
      Variable loss = stages.back()->logits_loss(stages.back()->head_local(h, ctx), labels);
      EXPECT_EQ(loss.data().item(), ref.data().item());
      // Backward, last stage first, handing each input's gradient to the stage before.
      loss.backward();
      for (std::size_t s = stages.size() - 1; s-- > 0;) outputs[s].backward(inputs[s + 1].grad());
      for (const nn::Parameter* p : whole.parameters()) {
        Tensor sum;
        for (auto& st : stages) {
          const nn::Parameter* q = st->find_parameter(p->name);
          if (!q) continue;
          sum = sum.defined() ? ops::add(sum, q->var.grad()) : q->var.grad();
        }
        ASSERT_TRUE(sum.defined()) << p->name;
        EXPECT_EQ(sum.to_vector<float>(), p->var.grad().to_vector<float>()) << p->name;
      }
      const bool tied = spec.tie_embeddings && stages.size() > 1;
      EXPECT_EQ(stages.back()->find_parameter(family(arch).names.token_embedding + ".weight") != nullptr, tied);
    }
  }
  EXPECT_NE(testing::error_message([] { partition_layers(5, 2); })
                .find("5 layers do not divide evenly over 2 pipeline stages; give the layers of each stage in "
                      "dist.pipeline_num_layers (e.g. [3, 2])"),
            std::string::npos);
  EXPECT_NE(testing::error_message([] {
              partition_layers(5, 2, {4, 2});
            }).find("sums to 6 but the model has n_layer=5"),
            std::string::npos);
}

TEST(TransformerLM, KVCacheMatchesFullForward) {
  for (const std::string arch : {"gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe"}) {
    TransformerLM model(tiny(arch));
    model.initialize(3, DType::f64);
    std::mt19937_64 gen(2);
    Tensor ids = random_ids(gen, 1, 7, 23);
    ForwardContext full;
    full.compute_dtype = DType::f64;
    autograd::NoGradGuard ng;
    auto expected = model.forward(ids, full).data().to_vector<double>();
    nn::KVCache cache(static_cast<std::size_t>(model.num_layers()));
    std::vector<double> got;
    // Prompt of 4 tokens, then one token at a time.
    for (auto [lo, hi] : {std::pair{0, 4}, std::pair{4, 5}, std::pair{5, 6}, std::pair{6, 7}}) {
      ForwardContext step = full;
      step.cache = &cache;
      step.position_offset = lo;
      Tensor chunk = ops::slice(ids, 1, lo, hi);
      auto out = model.forward(chunk, step).data().to_vector<double>();
      got.insert(got.end(), out.begin(), out.end());
      EXPECT_EQ(cache.length, hi);  // the next chunk's position_offset
    }
    // New tokens must continue the cached ones: any other position is an error, not silently wrong positions.
    ForwardContext wrong = full;
    wrong.cache = &cache;
    wrong.position_offset = 3;
    const std::string message = testing::error_message([&] { model.forward(ops::slice(ids, 1, 0, 1), wrong); });
    EXPECT_NE(message.find("position_offset 3"), std::string::npos) << message;
    EXPECT_NE(message.find("7 tokens"), std::string::npos) << message;
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-12) << i;
  }
}

TEST(TransformerLM, HuggingFaceRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("trident-hf-{}", ::getpid());
  // One file, then transformers' sharded layout (2 KB limit: several files and an index).
  for (auto [arch, limit] : std::vector<std::pair<std::string, std::uint64_t>>{
           {"gpt2", kDefaultMaxShardBytes}, {"llama", kDefaultMaxShardBytes}, {"mistral", kDefaultMaxShardBytes},
           {"qwen2", kDefaultMaxShardBytes}, {"gpt2", 2000}, {"qwen2", 2000}, {"llama", 2000}}) {
    TransformerLM model(tiny(arch));
    model.initialize(4);
    save_hf(model, dir.string(), DType::f32, limit);
    const bool sharded = limit < kDefaultMaxShardBytes;
    EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors.index.json"), sharded);
    EXPECT_EQ(std::filesystem::exists(dir / "model.safetensors"), !sharded);
    if (sharded) {  // every tensor mapped to an existing file, and more than one file
      std::ifstream in(dir / "model.safetensors.index.json");
      const auto index = nlohmann::json::parse(in);
      std::set<std::string> files;
      for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
      EXPECT_EQ(index.at("weight_map").size(), model.parameters().size());
      EXPECT_GE(files.size(), 2u);
      for (const auto& f : files) EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
    }
    TransformerSpec spec = read_hf_config((dir / "config.json").string());
    EXPECT_EQ(spec.n_kv_head, model.spec().n_kv_head);
    EXPECT_EQ(spec.d_ff, model.spec().d_ff);
    TransformerLM loaded(spec);
    loaded.initialize(99);
    load_hf_weights(loaded, dir.string());
    for (std::size_t i = 0; i < model.parameters().size(); ++i) {
      EXPECT_EQ(model.parameters()[i]->var.data().to_vector<float>(),
                loaded.parameters()[i]->var.data().to_vector<float>());
    }
  }
  {  // An untied GPT-2 keeps its own head through config.json (tie_word_embeddings = false).
    TransformerSpec untied = tiny("gpt2");
    untied.tie_embeddings = false;
    TransformerLM model(untied);
    model.initialize(6);
    const auto untied_dir = dir / "untied";
    save_hf(model, untied_dir.string());
    const TransformerSpec spec = read_hf_config((untied_dir / "config.json").string());
    EXPECT_FALSE(spec.tie_embeddings);
    TransformerLM loaded(spec);
    loaded.initialize(98);
    load_hf_weights(loaded, untied_dir.string());
    ASSERT_NE(loaded.find_parameter("lm_head.weight"), nullptr);
    EXPECT_EQ(loaded.find_parameter("lm_head.weight")->var.data().to_vector<float>(),
              model.find_parameter("lm_head.weight")->var.data().to_vector<float>());
  }
  {  // GPT2Model's names (OpenAI's GPT-2 on the Hub): no "transformer." prefix, plus attention-mask buffers.
    TransformerLM model(tiny("gpt2"));
    model.initialize(8);
    const auto bare_dir = dir / "bare";
    std::filesystem::create_directories(bare_dir);
    checkpoint::SafetensorsWriter w;
    for (const nn::Parameter* p : model.parameters()) {
      ASSERT_TRUE(p->name.starts_with("transformer.")) << p->name;
      w.add(p->name.substr(std::string_view("transformer.").size()), p->whole_value());
    }
    w.add("h.0.attn.bias", Tensor::zeros(Shape{1, 1, 4, 4}, DType::f32));
    w.write((bare_dir / "model.safetensors").string());
    TransformerLM loaded(tiny("gpt2"));
    loaded.initialize(97);
    load_hf_weights(loaded, bare_dir.string());
    for (std::size_t i = 0; i < model.parameters().size(); ++i) {
      EXPECT_EQ(model.parameters()[i]->var.data().to_vector<float>(),
                loaded.parameters()[i]->var.data().to_vector<float>());
    }
  }
  // A shape mismatch names the tensor and both shapes.
  TransformerSpec wrong = tiny("llama");
  wrong.d_ff = 48;
  TransformerLM other(wrong);
  other.initialize(1);
  try {
    load_hf_weights(other, dir.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[40, 16]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[48, 16]"), std::string::npos) << e.message();
  }
  std::filesystem::remove_all(dir);
}

// The files of a directory and their bytes.
std::map<std::string, std::string> directory_contents(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// A directory holding both model.safetensors and an index (transformers leaves the index behind when an
// unsharded save follows a sharded one) is read from the single file, as transformers reads it.
TEST(TransformerLM, HuggingFaceSingleFileWinsOverAStaleIndex) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("trident-hf-stale-{}", ::getpid());
  fs::remove_all(dir);
  TransformerLM a(tiny("llama")), b(tiny("llama"));
  a.initialize(1);
  b.initialize(2);
  save_hf(a, (dir / "a").string(), DType::f32, 2000);  // shards and an index
  save_hf(b, (dir / "b").string());
  fs::copy_file(dir / "b" / "model.safetensors", dir / "a" / "model.safetensors");
  ASSERT_TRUE(fs::exists(dir / "a" / "model.safetensors.index.json"));
  TransformerLM loaded(tiny("llama"));
  loaded.initialize(3);
  load_hf_weights(loaded, (dir / "a").string());
  for (std::size_t i = 0; i < b.parameters().size(); ++i) {
    EXPECT_EQ(loaded.parameters()[i]->var.data().to_vector<float>(), b.parameters()[i]->var.data().to_vector<float>())
        << b.parameters()[i]->name;
  }
  fs::remove_all(dir);
}

TEST(TransformerLM, HuggingFaceExportIsAllOrNothing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("trident-hf-export-{}", ::getpid());
  fs::remove_all(dir);
  TransformerLM model(tiny("gpt2"));
  model.initialize(4);
  save_hf(model, dir.string(), DType::f32, 2000);  // sharded: an index and several files
  std::ofstream(dir / "README.md") << "the user's own file\n";
  const auto before = directory_contents(dir);
  ASSERT_TRUE(before.count("model.safetensors.index.json"));

  // A source that fails part-way (a tensor missing from a checkpoint, a read error) leaves the
  // earlier export exactly as it was, and no staging directory behind.
  TransformerLM other(tiny("gpt2"));
  other.initialize(5);
  int served = 0;
  auto failing = [&](const std::string& name, DType dt) {
    if (++served == 5) TRIDENT_FAIL("no tensor '{}'", name);
    return other.find_parameter(name)->whole_value().to(dt);
  };
  EXPECT_THROW(write_hf(other.spec(), dir.string(), DType::f32, failing), Error);
  EXPECT_EQ(directory_contents(dir), before);
  EXPECT_FALSE(fs::exists(dir.string() + ".tmp"));

  // A complete export replaces the weights, removes the earlier export's shards and index (a reader
  // would mix them in), copies the extra files and keeps the user's own.
  const fs::path tokenizer = dir.string() + "-run/tokenizer.json";
  fs::create_directories(tokenizer.parent_path());
  std::ofstream(tokenizer) << "{}";
  const auto files =
      write_hf(other.spec(), dir.string() + "/", DType::f32,
               [&](const std::string& name, DType dt) { return other.find_parameter(name)->whole_value().to(dt); },
               kDefaultMaxShardBytes, {tokenizer.string()});
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors", "tokenizer.json", "config.json"}));
  EXPECT_EQ(directory_contents(dir).size(), 4u);  // the three files and README.md
  EXPECT_TRUE(fs::exists(dir / "README.md"));
  EXPECT_FALSE(fs::exists(dir.string() + ".tmp"));
  TransformerLM loaded(read_hf_config((dir / "config.json").string()));
  loaded.initialize(99);
  load_hf_weights(loaded, dir.string());
  for (std::size_t i = 0; i < other.parameters().size(); ++i) {
    EXPECT_EQ(other.parameters()[i]->var.data().to_vector<float>(),
              loaded.parameters()[i]->var.data().to_vector<float>());
  }
  fs::remove_all(dir);
  fs::remove_all(tokenizer.parent_path());
}

// Mixtral's loss is the LM loss plus each MoE layer's load-balancing loss (coefficient-scaled,
// transformers' per-layer value: top_k times nn::MoE's Switch form), and its FLOPs follow the active
// parameters.
TEST(TransformerLM, MixtralAddsTheLoadBalancingLossAndCountsActiveParameters) {
  TransformerSpec s = tiny("mixtral");
  EXPECT_EQ(s.active_parameters(), s.num_parameters() - s.n_layer * (s.n_experts - s.experts_per_token) * 3 *
                                                            s.d_model * s.d_ff);
  EXPECT_EQ(tiny("llama").active_parameters(), tiny("llama").num_parameters());
  std::mt19937_64 gen(5);
  Tensor ids = random_ids(gen, 2, 6, 23), labels = random_ids(gen, 2, 6, 23);
  s.moe_aux_loss_coef = 0;
  TransformerLM plain(s);
  plain.initialize(4, DType::f64);
  TransformerSpec with = s;
  with.moe_aux_loss_coef = 0.5;
  TransformerLM balanced(with);
  balanced.initialize(4, DType::f64);
  ForwardContext ctx;
  ctx.compute_dtype = DType::f64;
  ctx.training = true;  // (no dropout) the auxiliary losses are a training objective: evaluation leaves them out
  nn::AuxLosses sink;
  ctx.aux = &sink;
  const double lm = plain.loss(ids, labels, ctx).data().item();
  EXPECT_TRUE(sink.losses.empty());  // coefficient 0: no loss term
  ASSERT_EQ(sink.stats.size(), 2u);  // one entry per MoE layer
  sink.clear();
  const double total = balanced.loss(ids, labels, ctx).data().item();
  ASSERT_EQ(sink.losses.size(), 2u);
  double aux = 0;
  for (const Variable& l : sink.losses) aux += l.data().item();
  EXPECT_NEAR(total, lm + aux, 1e-12);
  // Per layer: 0.5 · top_k · E · Σ_e f_e·P_e, at least 0.5 · top_k (its minimum, at perfect balance).
  for (const Variable& l : sink.losses) EXPECT_GE(l.data().item(), 0.5 * static_cast<double>(s.experts_per_token) - 1e-12);
  // With a normalizer the micro-batch's aux loss counts by its share of the tokens.
  sink.clear();
  const double shared = balanced.loss(ids, labels, ctx, 48.0).data().item();
  const double lm_shared = plain.loss(ids, labels, ctx, 48.0).data().item();
  EXPECT_NEAR(shared, lm_shared + aux * 12.0 / 48.0, 1e-12);
  ctx.training = false;
  EXPECT_NEAR(balanced.loss(ids, labels, ctx).data().item(), lm, 1e-12);
  // A family without MoE layers refuses experts.
  TransformerSpec llama = tiny("llama");
  llama.n_experts = 4;
  EXPECT_NE(testing::error_message([&] { llama.validate(); }).find("model.n_experts=4: LLaMA has no mixture-of-experts layers"),
            std::string::npos);
  TransformerSpec k = tiny("mixtral");
  k.experts_per_token = 5;
  EXPECT_NE(testing::error_message([&] { k.validate(); }).find("model.experts_per_token=5 must be in [1, n_experts=4]"),
            std::string::npos);
}

TEST(TransformerLM, BadSpecsAreClearErrors) {
  TransformerSpec s = tiny("llama");
  s.n_kv_head = 3;
  EXPECT_THROW(TransformerLM{s}, Error);
  EXPECT_THROW(preset("gpt5"), Error);
}

}  // namespace
}  // namespace trident::models

namespace trident::models {
namespace {

// Packed documents (data.reset_attention_mask and reset_position_ids): one sample holding three documents
// gives, token for token, the logits each document gives run alone, and the same gradients as the three
// run alone (f64) — with learned positions (GPT-2), RoPE with grouped-query attention (LLaMA), a sliding
// window (Mistral) and QKV biases (Qwen2).
class PackedDocuments : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedDocuments, EqualTheDocumentsRunAlone) {
  const std::string arch = GetParam();
  TransformerLM model(tiny(arch));
  model.initialize(5, DType::f64);
  std::mt19937_64 gen(21);
  randomise_norms(model, gen);
  const std::vector<std::int64_t> lengths = {5, 1, 6};
  const std::int64_t T = 12, V = 23;
  const Tensor ids = random_ids(gen, 1, T, V);
  std::vector<std::int32_t> starts;
  for (std::int64_t at = 0; std::int64_t n : lengths) {
    for (std::int64_t i = 0; i < n; ++i) starts.push_back(static_cast<std::int32_t>(at));
    at += n;
  }
  // The objective: logits weighted at random, so that every logit's gradient enters.
  Tensor weights = Tensor::empty({1, T, V}, DType::f64);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (double& x : weights.span<double>()) x = d(gen);

  ForwardContext packed;
  packed.compute_dtype = DType::f64;
  packed.document_starts = Tensor::from_vector<std::int32_t>(starts, {1, T});
  packed.document_attention = packed.document_positions = true;
  const Variable logits = model.forward(ids, packed);
  model.zero_grad();
  autograd::sum(autograd::mul(logits, Variable(weights))).backward();
  std::vector<Tensor> packed_grads;
  for (nn::Parameter* p : model.parameters()) packed_grads.push_back(p->var.grad().clone());

  ForwardContext alone;
  alone.compute_dtype = DType::f64;
  model.zero_grad();
  const std::vector<double> all = logits.data().to_vector<double>();
  for (std::int64_t at = 0; std::int64_t n : lengths) {
    const Variable part = model.forward(ops::slice(ids, 1, at, at + n), alone);
    autograd::sum(autograd::mul(part, Variable(ops::slice(weights, 1, at, at + n)))).backward();
    const std::vector<double> got = part.data().to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(all[static_cast<std::size_t>(at * V) + i], got[i], 1e-12) << arch << ": document at " << at;
    at += n;
  }
  // Without the documents the later ones would see the earlier (and count positions from the sample's start).
  const std::vector<double> across = model.forward(ids, alone).data().to_vector<double>();
  double moved = 0;
  for (std::size_t i = static_cast<std::size_t>(lengths[0] * V); i < all.size(); ++i)
    moved = std::max(moved, std::abs(across[i] - all[i]));
  EXPECT_GT(moved, 1e-3) << arch << ": packing changed nothing";
  for (std::size_t i = 0; i < packed_grads.size(); ++i) {
    const std::vector<double> a = packed_grads[i].to_vector<double>(), b = model.parameters()[i]->var.grad().to_vector<double>();
    for (std::size_t j = 0; j < a.size(); ++j)
      ASSERT_NEAR(a[j], b[j], 1e-10 * (1 + std::abs(b[j]))) << arch << ": " << model.parameters()[i]->name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PackedDocuments, ::testing::Values("gpt2", "llama", "mistral", "qwen2"));

}  // namespace
}  // namespace trident::models
