// The optimizer registry: the one list of the optimizers trident builds.
//
// An entry (OptimizerDef, in registry.cpp) declares everything about one
// optimizer: its name (optim.name), its state tensors (names and dtype; each
// has its parameter's shape), the optim.* keys its hyperparameters come from,
// the DeepSpeed optimizer types that map onto it, and its update rule — the
// kernel call over the spans of parameter, gradient and state it is given.
// Everything else asks the registry: the replicated optimizer
// (optim::RuleOptimizer, optim/optimizer.h), ZeRO's partitioned one
// (parallel::ZeroOptimizer, which hands the rule the rows each rank owns),
// the config's validation, the memory estimate and the DeepSpeed translator.
// The recipe for adding one is docs/architecture.md §4 "Adding an optimizer".
//
// The rule sees only the elements it is given: the whole parameter
// (replicated), or the flat rows one rank owns (ZeRO). An element-wise rule
// (AdamW, SGD) needs nothing more. A rule that needs a reduction over the
// whole parameter (LAMB's trust ratio ‖w‖ / ‖update‖) forms each parameter's
// partial sums over its elements and calls StepArgs::sum_over_pieces, which
// adds them over every rank that holds a piece of that parameter.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "trident/nn/module.h"

namespace trident::optim {

// Hyperparameters of the registered optimizers. Each names its entry (kName):
// an options struct converts to the Method it describes.
struct AdamWOptions {
  static constexpr const char* kName = "adamw";
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // applied to parameters with weight_decay = true only
  bool bias_correction = true;  // false: no 1 − beta^t correction of the moments (DeepSpeed's bias_correction)
};

struct SGDOptions {
  static constexpr const char* kName = "sgd";
  double momentum = 0.9;
  double weight_decay = 0.0;  // applied to parameters with weight_decay = true only
  bool nesterov = false;
};

// One state tensor of every parameter: state and checkpoint keys are "<name>/<parameter name>".
struct StateSpec {
  StateSpec(std::string name_, std::optional<DType> dtype_ = std::nullopt) : name(std::move(name_)), dtype(dtype_) {}
  std::string name;
  std::optional<DType> dtype;  // unset: the parameter's (master) dtype
  DType dtype_for(DType master) const { return dtype.value_or(master); }
};

// One parameter's share of an update: contiguous tensors of one shape (the
// parameter's, or under ZeRO the flat rows this rank owns).
struct ParamUpdate {
  const nn::Parameter* param = nullptr;  // its name and weight_decay flag (not its data: see `data`)
  Tensor* data = nullptr;                // the master weights, updated in place
  const Tensor* grad = nullptr;          // any floating dtype; zeros where no loss reached the parameter
  std::span<Tensor> state;               // in the order of OptimizerDef::states
  // The compute-dtype copy of the weights to rewrite in the same pass (mixed precision), or null. Given
  // only to a rule whose OptimizerDef::writes_compute_copy is set.
  Tensor* compute_copy = nullptr;
};

struct StepArgs {
  double lr = 0;
  double grad_scale = 1;  // multiplies every gradient first (clipping and loss-scale removal)
  std::int64_t step = 1;  // 1-based: this step's number
  // The state tensors hold the zeros they were made with: neither stepped nor loaded from a checkpoint
  // (SGD's momentum then starts at the gradient, as PyTorch's does).
  bool fresh = false;
  // Adds values[i], a partial sum over updates[i]'s elements, over every rank that holds a piece of that
  // parameter, in place. Collective: every rank of the optimizer calls it as often as the others.
  std::function<void(std::span<double> values)> sum_over_pieces;
};

class Method;
struct OptimizerDef;
// The entry named `name`; an error lists the registered names ("optim.name must be adamw or sgd, got 'x'").
const OptimizerDef& optimizer_def(std::string_view name);
// The hyperparameter values an optimizer reads: optim.<key> → its numbers (a scalar key holds one).
using Settings = std::map<std::string, std::vector<double>, std::less<>>;

struct OptimizerDef {
  std::string name;                          // optim.name
  std::string title;                         // for messages: "AdamW"
  std::vector<StateSpec> states;
  std::vector<std::string> keys;             // the optim.* keys (without "optim.") from_settings reads
  std::vector<std::string> deepspeed_types;  // DeepSpeed optimizer.type values mapped onto it, any case
  bool writes_compute_copy = false;          // the rule rewrites ParamUpdate::compute_copy in its pass
  std::function<Method(const Settings&)> from_settings;
  std::function<void(const Method&, std::span<const ParamUpdate>, const StepArgs&)> step;

  // Bytes of state per parameter element for master weights of `master` dtype.
  std::size_t state_bytes(DType master) const;
};

// A registered optimizer with its hyperparameters: what an optimizer is made from.
class Method {
 public:
  template <typename Options>
    requires requires { Options::kName; }
  Method(const Options& options)  // NOLINT(google-explicit-constructor): AdamWOptions{...} is a Method
      : Method(optimizer_def(Options::kName), options) {}
  // An entry with its options, registered or not (a rule being developed, a test's); `def` must outlive it.
  template <typename Options>
  Method(const OptimizerDef& def, const Options& options)
      : def_(&def), type_(&typeid(Options)), options_(std::make_shared<const Options>(options)) {}

  const OptimizerDef& def() const noexcept { return *def_; }
  // The hyperparameters, as the options struct of def(); a check names the mismatch.
  template <typename Options>
  const Options& options() const {
    check_type(typeid(Options));
    return *static_cast<const Options*>(options_.get());
  }

 private:
  void check_type(const std::type_info& wanted) const;
  const OptimizerDef* def_;
  const std::type_info* type_;
  std::shared_ptr<const void> options_;
};

// Checks one update's tensors before a rule hands their raw pointers to a kernel (as an ops:: entry
// point checks its arguments): master weights f32 or f64; a floating gradient and every state tensor
// (in its StateSpec's dtype) with the weights' element count, on their device. Errors name the entry.
void check_update(const OptimizerDef& def, const ParamUpdate& update);

// The entries, in registration order.
const std::vector<OptimizerDef>& optimizers();
// The entry named `name`, or null.
const OptimizerDef* find_optimizer(std::string_view name);
// The entry DeepSpeed's optimizer.type `type` maps onto (any case), or null.
const OptimizerDef* find_deepspeed_optimizer(std::string_view type);
// What DeepSpeed optimizer types map onto, for a refusal: "trident's optimizer is AdamW (DeepSpeed's Adam
// and AdamW map onto it)".
std::string deepspeed_optimizers_note();
// The named optimizer with the hyperparameters `settings` gives (every key of its OptimizerDef::keys).
Method method_from_settings(std::string_view name, const Settings& settings);
// The value of `key` from `settings` (its `index`-th number); an error names a missing or short key.
double setting(const Settings& settings, std::string_view key, std::size_t index = 0);

}  // namespace trident::optim
