// oslo's training loop in C++: a Hugging Face GPT-2 directory loaded split tensor × pipeline ×
// data parallel, the program's own loop over an endless loader (zero_grad, a pipelined forward and
// backward over micro-batches, the optimizer's step), then a sharded save (one file per rank) and a
// merged save that transformers loads.
//
//   mpirun -n 8 ./oslo_loop HF_DIR OUT_DIR [TP PP]       (8 ranks: dp 2 × tp 2 × pp 2)
//
// It asserts that the loss falls, that both saves read back (under the same layout) to exactly the
// trained parameters, and writes OUT_DIR/logits.safetensors — the logits of a fixed input computed
// by one process from the sharded save — for check_transformers.py to compare with transformers.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "trident/autograd/autograd.h"
#include "trident/checkpoint/safetensors.h"
#include "trident/core/rng.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/models/pretrained.h"
#include "trident/optim/optimizer.h"
#include "trident/train/parallel_model.h"

using namespace trident;

namespace {

// An endless stream of training samples: sample i counts from a random start by a random stride
// (mod the vocabulary), so a model can learn to continue it. Each data-parallel rank takes its own
// samples of every global batch, in train::step_context's order (micro-batch, then rank).
class CountingLoader {
 public:
  CountingLoader(std::int64_t vocab, std::int64_t micro_batch, std::int64_t seq_len, int dp_rank, int dp_size)
      : vocab_(vocab), mb_(micro_batch), T_(seq_len), dp_rank_(dp_rank), dp_size_(dp_size) {}

  // This rank's next micro-batch; `m` of `per_step` in the step.
  train::MicroBatch next(std::int64_t m, std::int64_t per_step) {
    const std::int64_t first = step_ * per_step * mb_ * dp_size_ + m * mb_ * dp_size_ + dp_rank_ * mb_;
    if (m + 1 == per_step) ++step_;
    std::vector<std::int64_t> ids, labels;
    for (std::int64_t s = first; s < first + mb_; ++s) {
      const CounterRng rng(7, "counting/" + std::to_string(s));
      const auto start = static_cast<std::int64_t>(rng.bits(0) % vocab_);
      const auto stride = 1 + static_cast<std::int64_t>(rng.bits(1) % 3);
      for (std::int64_t t = 0; t < T_; ++t) {
        ids.push_back((start + stride * t) % vocab_);
        labels.push_back((start + stride * (t + 1)) % vocab_);
      }
    }
    return {Tensor::from_vector(ids, {mb_, T_}), Tensor::from_vector(labels, {mb_, T_})};
  }

 private:
  std::int64_t vocab_, mb_, T_;
  int dp_rank_, dp_size_;
  std::int64_t step_ = 0;
};

// True when every parameter of `a` equals the same parameter of `b` exactly (same layout).
bool same_parameters(const train::ParallelModel& a, const train::ParallelModel& b) {
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    const Tensor x = a.parameters()[i]->var.data(), y = b.parameters()[i]->var.data();
    if (x.shape() != y.shape() || x.to_vector<float>() != y.to_vector<float>()) return false;
  }
  return true;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} HF_DIR OUT_DIR [TP PP]\n", argv[0]);
    return 2;
  }
  const std::string hf_dir = argv[1], out = argv[2];
  const train::Layout layout{argc > 3 ? std::atoi(argv[3]) : 2, argc > 4 ? std::atoi(argv[4]) : 2};
  auto world = dist::launched_by_mpi() ? dist::mpi_world() : dist::self_communicator();
  const bool root = world->rank() == 0;

  // Every rank builds its share only: its pipeline stage's layers, its tensor-parallel shards.
  const train::ParallelModelOptions options{.micro_batch_size = 2, .seq_len = 32, .seed = 1};
  auto model = train::ParallelModel::from_pretrained(hf_dir, world, layout, options);
  const train::ParallelGroups& g = model->groups();
  if (root) fmt::print("{} from {}: {} parameters\n", g.mesh->describe(), hf_dir, model->spec().num_parameters());

  optim::AdamW optimizer(model->parameters(), {.weight_decay = 0.0});
  CountingLoader loader(model->spec().vocab_size, options.micro_batch_size, options.seq_len, g.dp_rank, g.dp_size);
  const std::int64_t steps = 30, micro_batches = 4;  // per data-parallel rank and step: 1F1B over 4
  double first = 0, last = 0;
  for (std::int64_t step = 1; step <= steps; ++step) {
    optimizer.zero_grad();
    std::vector<train::MicroBatch> batches;
    for (std::int64_t m = 0; m < micro_batches; ++m) batches.push_back(loader.next(m, micro_batches));
    const double loss = model->forward_backward(batches);  // pipelined forward + backward, DP all-reduce
    const double norm = model->grad_norm();
    optimizer.step(3e-3, optim::clip_coefficient(norm, 1.0));
    if (step == 1) first = loss;
    last = loss;
    if (root && (step == 1 || step % 10 == 0)) fmt::print("step {:3d}  loss {:.4f}  grad norm {:.3f}\n", step, loss, norm);
  }

  // oslo's two save modes.
  model->save_pretrained(out + "/sharded", {.merged = false});
  const auto files = model->save_pretrained(out + "/merged", {.merged = true});
  if (root) fmt::print("saved {}/sharded ({} ranks' files) and {}/merged: {}\n", out, g.world->size(), out,
                       fmt::join(files, ", "));

  // Both saves read back, under this layout, to exactly the trained parameters.
  const bool learned = last < first - 0.5;  // nats
  bool exact = true;
  for (const char* kind : {"sharded", "merged"}) {
    const auto back = train::ParallelModel::from_pretrained(out + "/" + kind, world, layout, options);
    exact = exact && world->all_reduce_scalar(same_parameters(*model, *back) ? 1 : 0, dist::ReduceOp::min) == 1;
  }

  // One process reads the sharded save whole and writes the logits of a fixed input.
  if (root) {
    const auto whole = models::from_pretrained(out + "/sharded");
    std::vector<std::int64_t> ids;
    for (std::int64_t t = 0; t < 16; ++t) ids.push_back((5 + 3 * t) % model->spec().vocab_size);
    const Tensor input = Tensor::from_vector(ids, {1, 16});
    autograd::NoGradGuard no_grad;
    checkpoint::SafetensorsWriter writer;
    writer.add("input_ids", input);
    writer.add("logits", whole->forward(input, nn::ForwardContext{}).data());
    writer.write(out + "/logits.safetensors");
    fmt::print("loss {:.4f} -> {:.4f} ({}); both saves read back to the trained parameters: {}\n", first, last,
               learned ? "learned" : "FAIL: it did not fall by 0.5", exact ? "yes" : "FAIL: no");
  }
  return learned && exact ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int status = run(argc, argv);
    dist::finalize();
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "oslo_loop: {}\n", e.what());
    dist::finalize_and_exit(1);
  }
}
