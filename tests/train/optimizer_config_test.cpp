// The train config supplies every optim.* value a registered optimizer reads
// (optim/registry.h, OptimizerDef::keys): a new optimizer's keys are read
// without the trainer naming it.
#include <gtest/gtest.h>

#include "trident/optim/registry.h"
#include "trident/train/config/config.h"

namespace trident::train {
namespace {

TEST(OptimizerConfig, EveryRegisteredOptimizerReadsItsKeysFromTheConfig) {
  const Config c = load_config("", {"optim.betas=[0.8, 0.9]", "optim.momentum=0.5", "optim.weight_decay=0"});
  EXPECT_EQ(optim_setting(c, "betas"), (std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(optim_setting(c, "momentum"), std::vector<double>{0.5});
  EXPECT_EQ(optim_setting(c, "weight_decay"), std::vector<double>{0.0});
  for (const optim::OptimizerDef& d : optim::optimizers()) {
    optim::Settings s;
    for (const std::string& key : d.keys) s[key] = optim_setting(c, key);
    EXPECT_EQ(d.from_settings(s).def().name, d.name);
  }
  EXPECT_EQ(optim::method_from_settings("sgd", {{"momentum", optim_setting(c, "momentum")},
                                                {"weight_decay", optim_setting(c, "weight_decay")}})
                .options<optim::SGDOptions>()
                .momentum,
            0.5);
}

}  // namespace
}  // namespace trident::train
