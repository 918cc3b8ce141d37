#include "trident/autograd/variable.h"

#include <atomic>
#include <utility>

#include "trident/autograd/variable_impl.h"
#include "trident/core/memory.h"
#include "trident/ops/elementwise.h"

namespace trident::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() noexcept { return t_grad_enabled; }
NoGradGuard::NoGradGuard() noexcept : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() noexcept : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  TRIDENT_CHECK(data.defined(), "Variable: cannot wrap an undefined tensor");
  TRIDENT_CHECK(!requires_grad || is_floating(data.dtype()),
                "Variable: only floating tensors can require gradients (got {})", data.describe());
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
}

const Tensor& Variable::data() const {
  TRIDENT_CHECK(impl_ != nullptr, "use of an undefined Variable");
  return impl_->data;
}

void Variable::set_data(const Tensor& data) {
  TRIDENT_CHECK(impl_ != nullptr, "set_data on an undefined Variable");
  TRIDENT_CHECK(data.shape() == impl_->data.shape() && data.dtype() == impl_->data.dtype(),
                "set_data: new data {} does not match {} of variable '{}'", data.describe(), impl_->data.describe(),
                impl_->name);
  impl_->data = data;
  mark_data_changed();
}

void Variable::reset_data(const Tensor& data) {
  TRIDENT_CHECK(impl_ != nullptr, "reset_data on an undefined Variable");
  TRIDENT_CHECK(data.defined() && data.dtype() == impl_->data.dtype(),
                "reset_data: new data {} does not match the dtype of {} of variable '{}'",
                data.defined() ? data.describe() : "undefined", impl_->data.describe(), impl_->name);
  impl_->data = data;
  mark_data_changed();
}

void Variable::mark_data_changed() {
  TRIDENT_CHECK(impl_ != nullptr, "mark_data_changed on an undefined Variable");
  ++impl_->version;
  impl_->compute_copy = Tensor();  // ZeRO-3 frees a released parameter's copy with it
}

Tensor Variable::compute_copy() const {
  return impl_ && impl_->copy_version == impl_->version ? impl_->compute_copy : Tensor();
}

void Variable::set_compute_copy(const Tensor& copy) const {
  TRIDENT_CHECK(impl_ != nullptr && copy.shape() == impl_->data.shape() && copy.device() == impl_->data.device(),
                "set_compute_copy: {} is not a copy of variable '{}' ({})", copy.describe(), name(),
                impl_ ? impl_->data.describe() : "undefined");
  impl_->compute_copy = copy;
  impl_->copy_version = impl_->version;
}

bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }

void Variable::set_requires_grad(bool requires_grad) {
  TRIDENT_CHECK(is_leaf(), "set_requires_grad: only leaves can change requires_grad (variable '{}')", name());
  TRIDENT_CHECK(!requires_grad || is_floating(data().dtype()), "set_requires_grad: {} cannot require gradients",
                data().describe());
  impl_->requires_grad = requires_grad;
}

bool Variable::is_leaf() const { return impl_ && impl_->grad_fn == nullptr; }

const Tensor& Variable::grad() const {
  TRIDENT_CHECK(impl_ != nullptr, "grad() of an undefined Variable");
  if (std::exchange(impl_->grad_stale, false)) impl_->grad.fill_zero();
  return impl_->grad;
}

void Variable::set_grad(const Tensor& grad) {
  TRIDENT_CHECK(impl_ != nullptr, "set_grad on an undefined Variable");
  if (grad.defined()) {
    TRIDENT_CHECK(grad.shape() == impl_->data.shape(), "set_grad: gradient shape {} does not match parameter {} '{}'",
                  grad.shape(), impl_->data.shape(), impl_->name);
  }
  impl_->grad = grad;
  impl_->grad_stale = false;
}

void Variable::zero_grad() {
  if (impl_ && impl_->grad.defined()) impl_->grad_stale = true;
}

Variable Variable::detach() const {
  Variable v(data(), false);
  v.impl_->name = impl_->name;
  return v;
}

int Variable::add_grad_ready_hook(GradReadyHook hook) {
  TRIDENT_CHECK(is_leaf() && requires_grad(), "add_grad_ready_hook: '{}' is not a leaf that requires grad", name());
  const int handle = impl_->next_hook++;
  impl_->hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::remove_grad_ready_hook(int handle) {
  if (!impl_) return;
  std::erase_if(impl_->hooks, [handle](const auto& entry) { return entry.first == handle; });
}

const std::string& Variable::name() const {
  static const std::string kEmpty;
  return impl_ ? impl_->name : kEmpty;
}
void Variable::set_name(std::string name) {
  TRIDENT_CHECK(impl_ != nullptr, "set_name on an undefined Variable");
  impl_->name = std::move(name);
}

const std::shared_ptr<Node>& Variable::grad_fn() const {
  static const std::shared_ptr<Node> kNull;
  return impl_ ? impl_->grad_fn : kNull;
}

int Variable::output_nr() const { return impl_ ? impl_->output_nr : 0; }

Variable Variable::from_impl(std::shared_ptr<VariableImpl> impl) {
  Variable v;
  v.impl_ = std::move(impl);
  return v;
}

Variable Variable::from_node(Tensor data, std::shared_ptr<Node> node, int output_nr) {
  Variable v(std::move(data), false);
  v.impl_->requires_grad = true;
  v.impl_->grad_fn = std::move(node);
  v.impl_->output_nr = output_nr;
  return v;
}

std::shared_ptr<Node> Variable::gradient_edge_node() const {
  if (!requires_grad()) return nullptr;
  if (impl_->grad_fn) return impl_->grad_fn;
  std::shared_ptr<Node> acc = impl_->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl_);
    impl_->grad_accumulator = acc;
  }
  return acc;
}

void Variable::backward(const Tensor& grad_output, bool retain_graph) const {
  autograd::backward({*this}, {grad_output}, retain_graph);
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<VariableImpl>& leaf)
    : Node("AccumulateGrad", {}, nullptr, {leaf->data}), leaf_(leaf) {}

void AccumulateGrad::abandon() noexcept {
  if (std::shared_ptr<VariableImpl> leaf = leaf_.lock()) leaf->grad_written_in_place = false;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grad_outputs) {
  std::shared_ptr<VariableImpl> leaf = leaf_.lock();
  if (!leaf) return {};
  // Consumers with a WeightGradSink have already added theirs into .grad.
  const bool written_in_place = std::exchange(leaf->grad_written_in_place, false);
  const bool arrived = !grad_outputs.empty() && grad_outputs[0].defined();
  if (!arrived && !written_in_place) return {};
  if (arrived) {
    const Tensor& g = grad_outputs[0];
    TRIDENT_CHECK(g.shape() == leaf->data.shape(), "gradient of shape {} arrived for parameter '{}' of shape {}",
                  g.shape(), leaf->name, leaf->data.shape());
    if (leaf->grad.defined()) {
      const Tensor src = g.dtype() == leaf->grad.dtype() ? g : ops::cast(g, leaf->grad.dtype());
      if (std::exchange(leaf->grad_stale, false)) {
        leaf->grad.copy_from(src);
      } else {
        ops::add_(leaf->grad, src);
      }
    } else {
      // Clone: the incoming tensor may be shared with other consumers' gradients.
      MemoryCategoryScope scope(MemoryCategory::gradients);
      leaf->grad = g.dtype() == leaf->data.dtype() ? g.clone() : ops::cast(g, leaf->data.dtype());
    }
  }
  if (!leaf->hooks.empty()) {
    Variable handle = Variable::from_impl(leaf);
    for (auto& [id, hook] : leaf->hooks) hook(handle);
  }
  return {};
}

}  // namespace trident::autograd
