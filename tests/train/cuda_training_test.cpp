// Training on a CUDA GPU (label gpu): the tiny GPT, LLaMA, Mixtral and
// Qwen2-MoE configurations follow the CPU run's losses (fp32, dropout on: the CUDA dropout draws the
// CPU's masks), bf16 and fp16 train, and a checkpoint written from the GPU
// resumes on the CPU. Without a GPU only the error cases run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "trident/autograd/autograd.h"
#include "trident/kernels/cuda/device.h"
#include "trident/kernels/cuda/matmul.h"
#include "trident/models/transformer_lm.h"
#include "trident/optim/optimizer.h"
#include "trident/train/trainer.h"
#include "corpus_suite.h"

namespace trident::train {
namespace {

class CudaTraining : public testing::CorpusSuite<CudaTraining> {
 public:
  static constexpr const char* kDir = "cuda-training";
};

std::string error_of(const TrainOptions& o) {
  try {
    (void)train(o);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST_F(CudaTraining, NoGpuOrABadDeviceIsAClearError) {
  EXPECT_NE(error_of(options("tpu", {"train.steps=1", "train.device=\"tpu\""}))
                .find("train.device 'tpu' is not a device: expected cpu, cuda or cuda:N"),
            std::string::npos);
  if (kernels::cuda::device_count() > 0) {
    const std::string far = error_of(options("far", {"train.steps=1", "train.device=\"cuda:99\""}));
    EXPECT_NE(far.find("train.device 'cuda:99': only"), std::string::npos) << far;
    GTEST_SKIP() << "a GPU is present: " << kernels::cuda::describe();
  }
  const std::string got = error_of(options("nogpu", {"train.steps=1", "train.device=\"cuda\""}));
  EXPECT_NE(got.find("train.device 'cuda': no CUDA GPU is visible here"), std::string::npos) << got;
}

class CudaTrainingOnGpu : public CudaTraining {
 protected:
  void SetUp() override {
    if (!kernels::cuda::initialize()) GTEST_SKIP() << "no CUDA GPU here: " << kernels::cuda::describe();
  }
};

// 20 fp32 steps of the tiny GPT-2 (packed, and one padded document per sample), LLaMA and both
// mixture-of-experts families (top-2 routing with the aux and z losses; Qwen2-MoE with capacity dispatch
// and a gated shared expert): every loss within 1e-4 of the CPU's.
TEST_F(CudaTrainingOnGpu, TinyModelsFollowTheCpuRun) {
  const std::vector<std::string> moe = {"model.n_kv_head=2", "model.d_ff=32", "model.n_experts=4",
                                        "model.experts_per_token=2", "model.moe_aux_loss_coef=0.05",
                                        "model.moe_z_loss_coef=0.01"};
  const auto with = [](std::vector<std::string> base, std::initializer_list<std::string> more) {
    base.insert(base.end(), more);
    return base;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> models = {
      {"gpt2", {}},
      // One padded document per sample: the key masks uploaded beside the ids, the CUDA attention's padding.
      {"gpt2_unpacked", {"data.packing=false"}},
      {"llama", {"model.arch=llama", "model.n_kv_head=2"}},
      {"mixtral", with(moe, {"model.arch=mixtral"})},
      {"qwen2_moe", with(moe, {"model.arch=qwen2_moe", "model.moe_d_ff=16", "model.moe_shared_d_ff=24",
                               "model.moe_capacity_factor=1.25"})},
  };
  for (const auto& [name, arch] : models) {
    std::vector<std::string> common = {"train.steps=20", "train.micro_batch_size=4", "model.dropout=0.1"};
    common.insert(common.end(), arch.begin(), arch.end());
    auto cpu = common, gpu = common;
    gpu.push_back("train.device=\"cuda\"");
    const TrainSummary ref = train(options(name + "-cpu", cpu));
    const TrainSummary got = train(options(name + "-cuda", gpu));
    ASSERT_EQ(got.losses.size(), ref.losses.size()) << name;
    for (std::size_t i = 0; i < ref.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-4 * std::max(1.0, std::fabs(ref.losses[i])))
          << name << " step " << i + 1;
    }
  }
}

TEST_F(CudaTrainingOnGpu, Bf16AndFp16Train) {
  for (const char* precision : {"bf16", "fp16"}) {
    const TrainSummary s = train(options(std::string("cuda-") + precision,
                                         {"train.steps=20", "train.micro_batch_size=8", "train.device=\"cuda\"",
                                          std::string("train.precision=") + precision}));
    ASSERT_EQ(s.losses.size(), 20u);
    EXPECT_LT(s.losses.back(), s.losses.front()) << precision;
    for (double l : s.losses) EXPECT_TRUE(std::isfinite(l)) << precision;
  }
}

// A checkpoint written from GPU memory resumes on the CPU exactly where the GPU run stopped.
TEST_F(CudaTrainingOnGpu, GpuCheckpointResumesOnTheCpu) {
  const TrainSummary gpu = train(options("ckpt", {"train.steps=10", "train.device=\"cuda\""}));
  auto more = options("ckpt", {"train.steps=12"});
  more.resume = true;
  const TrainSummary cpu = train(more);
  ASSERT_EQ(cpu.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(cpu.losses[0]));
  EXPECT_LT(cpu.losses[0], gpu.losses.front());
}

// After the first steps the step loop reuses the caching allocator's blocks
// and the cached cuBLASLt plans: no cudaMalloc, no heuristic query.
TEST_F(CudaTrainingOnGpu, StepLoopMakesNoDriverAllocationsOrHeuristicQueries) {
  for (const DType compute : {DType::f32, DType::bf16}) {
    models::TransformerSpec spec = models::preset("gpt2");
    spec.n_layer = 2;
    models::TransformerLM model(spec);
    model.initialize(1);
    model.to(Device::cuda(0));
    optim::AdamW opt(model.parameters(), optim::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
    Tensor ids = Tensor::zeros({2, 128}, DType::i64).to(Device::cuda(0));
    auto step = [&](int s) {
      opt.zero_grad();
      nn::ForwardContext ctx;
      ctx.training = true;
      ctx.step = s;
      ctx.compute_dtype = compute;
      autograd::Variable loss = model.loss(ids, ids, ctx);
      loss.backward();
      opt.step(1e-4);
      return loss.data().item();
    };
    step(1);
    step(2);
    const auto before = kernels::cuda::allocator_stats(0);
    const std::int64_t queries = kernels::cuda::gemm_heuristic_queries();
    for (int s = 3; s <= 5; ++s) EXPECT_TRUE(std::isfinite(step(s)));
    EXPECT_EQ(kernels::cuda::allocator_stats(0).driver_allocations, before.driver_allocations) << dtype_name(compute);
    EXPECT_EQ(kernels::cuda::gemm_heuristic_queries(), queries) << dtype_name(compute);
  }
}

}  // namespace
}  // namespace trident::train
