// The pipeline executor on one process (the self communicator, p = 1): two
// model chunks run as the interleaved schedule's virtual stages 0 and 1, the
// activation and its gradient passing through the executor's loopback. Chunk
// c multiplies by its weight w_c; the last chunk sums, so after a step
//   dL/dw0 = Σ_mb x_mb ⊙ w1,  dL/dw1 = Σ_mb x_mb ⊙ w0   (exactly, in f32).
// Forward-only lists give each micro-batch's loss with no gradients, and a
// chunk that returns the wrong shape is an error naming the instruction.
#include "trident/parallel/pipeline/executor.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/core/error.h"
#include "trident/dist/self_communicator.h"

namespace trident::parallel::pipeline {
namespace {

namespace ag = trident::autograd;

struct TwoChunks {
  Variable w0{Tensor::from_vector<float>({1, 2, 3, 4}, {4}), true};
  Variable w1{Tensor::from_vector<float>({-1, 0.5f, 2, 0.25f}, {4}), true};
  std::vector<Tensor> x = {Tensor::from_vector<float>({1, 1, 1, 1}, {4}),
                           Tensor::from_vector<float>({2, -1, 0.5f, 3}, {4})};
  std::map<int, double> losses;

  StepCallbacks callbacks() {
    StepCallbacks cb;
    cb.forward = [this](int mb, int chunk, const Variable& input) -> Variable {
      if (chunk == 0) return ag::mul(Variable(x[static_cast<std::size_t>(mb)]), w0);
      Variable loss = ag::sum(ag::mul(input, w1));
      losses[mb] = loss.data().item();
      return loss;
    };
    return cb;
  }
};

const Boundary kBoundary{Shape{4}, DType::f32};

TEST(PipelineExecutor, TwoChunksThroughTheLoopbackGiveTheExactGradients) {
  TwoChunks m;
  Executor exec(dist::self_communicator(), 2);
  exec.run(build(Schedule::interleaved, {1, 2, 2}, 0), kBoundary, m.callbacks());
  const auto w0 = m.w0.data().to_vector<float>(), w1 = m.w1.data().to_vector<float>();
  const auto x0 = m.x[0].to_vector<float>(), x1 = m.x[1].to_vector<float>();
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m.w0.grad().to_vector<float>()[i], x0[i] * w1[i] + x1[i] * w1[i]) << i;
    EXPECT_EQ(m.w1.grad().to_vector<float>()[i], x0[i] * w0[i] + x1[i] * w0[i]) << i;
  }
  EXPECT_EQ(m.losses.size(), 2u);
  EXPECT_EQ(exec.stats().bytes_sent, 2 * 2 * 16);  // 2 micro-batches × (activation + gradient) × 16 bytes
  EXPECT_GE(exec.stats().peak_stashed, 2);
}

TEST(PipelineExecutor, ForwardOnlyListsComputeTheLossesWithoutGradients) {
  TwoChunks m;
  Executor exec(dist::self_communicator(), 2);
  {
    ag::NoGradGuard no_grad;
    exec.run(build_forward_only({1, 2, 2}, 0), kBoundary, m.callbacks());
  }
  ASSERT_EQ(m.losses.size(), 2u);
  EXPECT_DOUBLE_EQ(m.losses[0], 1 * 1 * -1 + 1 * 2 * 0.5 + 1 * 3 * 2 + 1 * 4 * 0.25);
  EXPECT_FALSE(m.w0.grad().defined());
}

TEST(PipelineExecutor, AWrongActivationShapeNamesTheInstruction) {
  TwoChunks m;
  StepCallbacks cb = m.callbacks();
  cb.forward = [](int, int, const Variable&) { return Variable(Tensor::zeros({5}), true); };
  Executor exec(dist::self_communicator(), 2);
  try {
    exec.run(build(Schedule::interleaved, {1, 2, 2}, 0), kBoundary, cb);
    FAIL() << "a [5] activation crossed a [4] boundary";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("forward(mb=0, chunk=0)"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("stage boundaries carry [4]"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace trident::parallel::pipeline
