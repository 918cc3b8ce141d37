// From tensors to a trained model, with nothing but trident's public header.
//
// A two-layer perceptron learns which points of the square [-1, 1]² lie inside the circle of radius
// 0.7: build the data as tensors, the model from nn layers, train it with AdamW on a warmup-cosine
// schedule, save it as safetensors, load it into a fresh model, and check that both agree.
//
//   ./simple [OUTPUT_DIR]            (one process; prints the loss and the accuracy)
#include <trident/trident.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

using namespace trident;
using autograd::Variable;

namespace {

constexpr std::int64_t kPoints = 512, kHidden = 32, kSteps = 300;
constexpr double kLossTarget = 0.05;  // the training loss must fall below this (it starts near ln 2)

// Points on a 2-D grid with a little jitter, and their class: 1 inside the circle, 0 outside.
struct Data {
  Tensor x;  // [kPoints, 2] f32
  Tensor y;  // [kPoints] i64
};
Data make_data(std::uint64_t seed) {
  const CounterRng rng(seed, "points");
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::int64_t i = 0; i < kPoints; ++i) {
    const auto u = static_cast<float>(2 * rng.uniform(static_cast<std::uint64_t>(2 * i)) - 1);
    const auto v = static_cast<float>(2 * rng.uniform(static_cast<std::uint64_t>(2 * i + 1)) - 1);
    x.insert(x.end(), {u, v});
    y.push_back(u * u + v * v < 0.49f ? 1 : 0);
  }
  return {Tensor::from_vector(x, {kPoints, 2}), Tensor::from_vector(y, {kPoints})};
}

// 2 → kHidden → kHidden → 2 with GELU: an nn::Module owns its parameters, named as its children are.
class Classifier : public nn::Module {
 public:
  Classifier() : nn::Module("") {
    fc1_ = &add_module(std::make_unique<nn::Linear>(
        "fc1", nn::LinearOptions{.in_features = 2, .out_features = kHidden, .init_std = 0.5}));
    fc2_ = &add_module(std::make_unique<nn::Linear>(
        "fc2", nn::LinearOptions{.in_features = kHidden, .out_features = kHidden, .init_std = 0.2}));
    out_ =
        &add_module(std::make_unique<nn::Linear>("out", nn::LinearOptions{.in_features = kHidden, .out_features = 2}));
  }
  // x [N, 2] → logits [N, 2].
  Variable forward(const Variable& x, const nn::ForwardContext& ctx) const {
    return out_->forward(autograd::gelu(fc2_->forward(autograd::gelu(fc1_->forward(x, ctx)), ctx)), ctx);
  }

 private:
  nn::Linear *fc1_, *fc2_, *out_;
};

// The fraction of points whose larger logit is their class.
double accuracy(const Tensor& logits, const Tensor& y) {
  const std::vector<float> l = logits.to_vector<float>();
  const std::vector<std::int64_t> t = y.to_vector<std::int64_t>();
  std::int64_t right = 0;
  for (std::size_t i = 0; i < t.size(); ++i) right += ((l[2 * i + 1] > l[2 * i]) ? 1 : 0) == t[i];
  return static_cast<double>(right) / static_cast<double>(t.size());
}

int run(const std::filesystem::path& out_dir) {
  const Data train = make_data(1), test = make_data(2);
  Classifier model;
  model.initialize(/*seed=*/7);  // every parameter from a counter-based generator: the same on any machine
  std::printf("classifier with %lld parameters\n", static_cast<long long>(model.num_parameters()));

  optim::AdamW optimizer(model.parameters(), {.weight_decay = 0.0});
  const optim::ScheduleOptions schedule{.peak_lr = 3e-2, .min_lr = 3e-3, .warmup_steps = 20, .decay_steps = kSteps};
  const nn::ForwardContext ctx{.training = true};
  double first_loss = 0, loss_value = 0;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    optimizer.zero_grad();
    const Variable loss = autograd::cross_entropy(model.forward(Variable(train.x), ctx), train.y);
    loss.backward();
    optimizer.step(optim::learning_rate(schedule, step));
    loss_value = loss.data().item();
    if (step == 1) first_loss = loss_value;
    if (step == 1 || step % 50 == 0) std::printf("step %3lld  loss %.4f\n", static_cast<long long>(step), loss_value);
  }

  autograd::NoGradGuard no_grad;  // inference: record no graph
  const Tensor logits = model.forward(Variable(test.x), {}).data();
  const double acc = accuracy(logits, test.y);
  std::printf("held-out accuracy %.3f\n", acc);

  // Save every parameter under its name, then load them into a new model.
  std::filesystem::create_directories(out_dir);
  const std::string path = (out_dir / "classifier.safetensors").string();
  checkpoint::SafetensorsWriter writer;
  for (const nn::Parameter* p : std::as_const(model).parameters()) writer.add(p->name, p->var.data());
  writer.write(path);
  const checkpoint::SafetensorsFile file = checkpoint::SafetensorsFile::open(path);
  Classifier loaded;
  loaded.initialize(/*seed=*/0);  // allocates the parameters; the file's values replace these
  for (nn::Parameter* p : loaded.parameters()) p->var.data().copy_from(file.tensor(p->name));
  const std::vector<float> a = logits.to_vector<float>();
  const std::vector<float> b = loaded.forward(Variable(test.x), {}).data().to_vector<float>();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::fmax(worst, std::fabs(a[i] - b[i]));
  std::printf("saved %s; the loaded model's logits differ by %.1e\n", path.c_str(), worst);

  const bool ok = loss_value < kLossTarget && loss_value < first_loss && acc >= 0.95 && worst == 0.0;
  std::printf("%s\n", ok ? "OK" : "FAIL (expected the loss below 0.05, accuracy >= 0.95 and equal logits)");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? argv[1] : "simple_out");
  } catch (const std::exception& e) {  // trident::Error: one line naming what was wrong
    std::fprintf(stderr, "simple: %s\n", e.what());
    return 1;
  }
}
