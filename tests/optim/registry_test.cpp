// The optimizer registry (optim/registry.h): what each entry declares, how a
// Method is made from the optim.* values, and that RuleOptimizer keeps each
// entry's state under its declared names.
#include "trident/optim/registry.h"

#include <gtest/gtest.h>

#include "testing/helpers.h"
#include "trident/optim/optimizer.h"

namespace trident::optim {
namespace {

const Settings kSettings = {{"betas", {0.8, 0.9}},   {"eps", {1e-6}},           {"weight_decay", {0.05}},
                             {"momentum", {0.7}}, {"bias_correction", {1}}};

TEST(OptimizerRegistry, ListsAdamWAndSGDWithTheirStateAndKeys) {
  ASSERT_NE(find_optimizer("adamw"), nullptr);
  ASSERT_NE(find_optimizer("sgd"), nullptr);
  EXPECT_EQ(find_optimizer("lamb"), nullptr);
  const OptimizerDef& adamw = optimizer_def("adamw");
  ASSERT_EQ(adamw.states.size(), 2u);
  EXPECT_EQ(adamw.states[0].name, "exp_avg");
  EXPECT_EQ(adamw.states[1].name, "exp_avg_sq");
  EXPECT_EQ(adamw.state_bytes(DType::f32), 8u);
  EXPECT_EQ(adamw.state_bytes(DType::f64), 16u);
  EXPECT_EQ(optimizer_def("sgd").state_bytes(DType::f32), 4u);
  EXPECT_EQ(optimizer_def("sgd").states[0].name, "momentum");
  // Every key an entry reads is one the settings above (the train config's optim.* values) hold.
  for (const OptimizerDef& d : optimizers()) {
    for (const std::string& key : d.keys) EXPECT_EQ(kSettings.count(key), 1u) << d.name << " reads optim." << key;
    EXPECT_TRUE(d.from_settings && d.step) << d.name;
  }
}

TEST(OptimizerRegistry, AnUnknownNameListsTheRegisteredOnes) {
  EXPECT_EQ(testing::error_message([] { (void)optimizer_def("lamb"); }), "optim.name must be adamw or sgd, got 'lamb'");
}

TEST(OptimizerRegistry, MethodsComeFromTheKeysTheEntryReads) {
  const Method adamw = method_from_settings("adamw", kSettings);
  EXPECT_EQ(adamw.def().name, "adamw");
  const auto& a = adamw.options<AdamWOptions>();
  EXPECT_EQ(a.beta1, 0.8);
  EXPECT_EQ(a.beta2, 0.9);
  EXPECT_EQ(a.eps, 1e-6);
  EXPECT_EQ(a.weight_decay, 0.05);
  const Method sgd = method_from_settings("sgd", kSettings);
  EXPECT_EQ(sgd.options<SGDOptions>().momentum, 0.7);
  EXPECT_EQ(sgd.options<SGDOptions>().weight_decay, 0.05);
  EXPECT_THROW((void)sgd.options<AdamWOptions>(), Error);
  // An options struct names its entry.
  EXPECT_EQ(Method(SGDOptions{}).def().name, "sgd");
  EXPECT_NE(testing::error_message([] { (void)method_from_settings("adamw", {{"betas", {0.9}}}); }).find("optim.betas"),
            std::string::npos);
}

TEST(OptimizerRegistry, DeepSpeedTypesMapThroughTheRegistry) {
  ASSERT_NE(find_deepspeed_optimizer("Adam"), nullptr);
  EXPECT_EQ(find_deepspeed_optimizer("ADAMW")->name, "adamw");
  EXPECT_EQ(find_deepspeed_optimizer("Lamb"), nullptr);
  EXPECT_EQ(deepspeed_optimizers_note(), "trident's optimizer is AdamW (DeepSpeed's Adam and AdamW map onto it)");
}

class TwoParams : public nn::Module {
 public:
  TwoParams() : nn::Module("m") {
    w = &add_parameter("weight", Shape{2, 3}, nn::Init{nn::InitKind::normal, 1.0}, true);
    b = &add_parameter("bias", Shape{3}, nn::Init{nn::InitKind::zeros, 0}, false);
  }
  nn::Parameter* w;
  nn::Parameter* b;
};

// Checkpoints keep the names they had before the registry: "<state>/<parameter>".
TEST(OptimizerRegistry, RuleOptimizerKeepsEachStateUnderItsName) {
  for (const OptimizerDef& d : optimizers()) {
    TwoParams m;
    m.initialize(1, DType::f32);
    RuleOptimizer opt(m.parameters(), method_from_settings(d.name, kSettings));
    for (nn::Parameter* p : m.parameters()) p->var.set_grad(Tensor::full(p->var.shape(), 0.5, DType::f32));
    opt.step(0.1);
    const auto state = opt.state();
    EXPECT_EQ(state.size(), 2 * d.states.size()) << d.name;
    for (const StateSpec& s : d.states) {
      for (const nn::Parameter* p : m.parameters()) {
        ASSERT_EQ(state.count(s.name + "/" + p->name), 1u) << d.name;
        EXPECT_EQ(state.at(s.name + "/" + p->name).shape(), p->var.shape());
      }
    }
  }
}

// A rule that calls its kernel on raw pointers checks its tensors first.
TEST(OptimizerRegistry, CheckUpdateRefusesTensorsThatDoNotMatch) {
  const OptimizerDef& d = optimizer_def("adamw");
  nn::Parameter p;
  p.name = "w";
  Tensor w = Tensor::zeros({4}, DType::f32), g = Tensor::zeros({4}, DType::bf16);
  std::vector<Tensor> state = {Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32)};
  EXPECT_NO_THROW(check_update(d, {&p, &w, &g, state}));
  state[1] = Tensor::zeros({4}, DType::f64);
  EXPECT_EQ(testing::error_message([&] { check_update(d, {&p, &w, &g, state}); }),
            "adamw: exp_avg_sq of 'w' has dtype f64, expected f32");
  state[1] = Tensor::zeros({3}, DType::f32);
  EXPECT_NE(testing::error_message([&] { check_update(d, {&p, &w, &g, state}); }).find("must hold its 4 elements"),
            std::string::npos);
}

}  // namespace
}  // namespace trident::optim
