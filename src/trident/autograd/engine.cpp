// The backward engine: dependency-counted traversal of the recorded graph.
//
// Nodes run when every consumer has delivered its gradient, highest sequence
// number first (the reverse of the order they were recorded in), so the last
// layers' parameter gradients become ready first — what data-parallel overlap
// wants — and the traversal, hence every floating-point sum, is deterministic.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <queue>
#include <unordered_map>

#include "trident/autograd/function.h"
#include "trident/autograd/variable_impl.h"
#include "trident/ops/elementwise.h"
#include "trident/ops/registry.h"

namespace trident::autograd {

namespace {
std::atomic<std::uint64_t> g_sequence{0};

struct ProgressHooks {
  std::vector<std::pair<int, std::function<void()>>> hooks;
  int next_id = 0;
};
thread_local ProgressHooks t_progress;

struct NodeState {
  std::vector<Tensor> grads;
  int dependencies = 0;
};

std::uint64_t priority_of(const Node* node);

}  // namespace

Node::Node(std::string name, std::vector<Edge> next_edges, BackwardFn backward, std::vector<Tensor> output_templates)
    : name_(std::move(name)), next_edges_(std::move(next_edges)), backward_(std::move(backward)) {
  for (const Tensor& t : output_templates) {
    output_shapes_.push_back(t.shape());
    output_dtypes_.push_back(t.dtype());
    output_devices_.push_back(t.device());
  }
  sequence_nr_ = g_sequence.fetch_add(1, std::memory_order_relaxed);
}

std::vector<Tensor> Node::apply(std::vector<Tensor> grad_outputs) {
  TRIDENT_CHECK(!released_,
                "backward through '{}' a second time: its saved tensors were freed (pass retain_graph=true to the "
                "first backward)",
                name_);
  GradContext ctx;
  ctx.grad_outputs = std::move(grad_outputs);
  for (std::size_t i = 0; i < ctx.grad_outputs.size(); ++i) {
    if (!ctx.grad_outputs[i].defined()) {
      ctx.grad_outputs[i] = Tensor::zeros(output_shapes_[i], output_dtypes_[i], output_devices_[i]);
    }
  }
  ctx.needs_input_grad.reserve(next_edges_.size());
  for (const Edge& e : next_edges_) ctx.needs_input_grad.push_back(e.node != nullptr);
  std::vector<Tensor> grads = backward_(ctx);
  TRIDENT_CHECK(grads.size() == next_edges_.size(), "backward of '{}' returned {} gradients for {} inputs", name_,
                grads.size(), next_edges_.size());
  return grads;
}

void Node::release() {
  backward_ = nullptr;
  released_ = true;
}

namespace {
std::uint64_t priority_of(const Node* node) {
  // Leaf accumulators run as soon as they are ready so gradient-ready hooks fire early.
  if (dynamic_cast<const AccumulateGrad*>(node)) return UINT64_MAX;
  return node->sequence_nr();
}

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
  } else {
    TRIDENT_CHECK(slot.shape() == g.shape(), "gradients of shapes {} and {} meet at one output", slot.shape(),
                  g.shape());
    slot = ops::add(slot, g.dtype() == slot.dtype() ? g : ops::cast(g, slot.dtype()));
  }
}
}  // namespace

int add_backward_progress_hook(std::function<void()> hook) {
  const int id = t_progress.next_id++;
  t_progress.hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_backward_progress_hook(int id) {
  auto& h = t_progress.hooks;
  h.erase(std::remove_if(h.begin(), h.end(), [id](const auto& e) { return e.first == id; }), h.end());
}

void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TRIDENT_CHECK(roots.size() == grads.size(), "backward: {} roots but {} gradients", roots.size(), grads.size());
  std::unordered_map<Node*, NodeState> state;
  std::vector<std::shared_ptr<Node>> root_nodes;

  // Seed the root gradients.
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    TRIDENT_CHECK(root.defined(), "backward: root {} is undefined", i);
    TRIDENT_CHECK(root.requires_grad(), "backward: root {} ({}) does not require grad and has no graph", i,
                  root.data().describe());
    Tensor g = grads[i];
    if (!g.defined()) {
      TRIDENT_CHECK(root.numel() == 1, "backward: a gradient is required for non-scalar root {} of shape {}", i,
                    root.shape());
      g = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
    } else {
      TRIDENT_CHECK(g.shape() == root.shape(), "backward: gradient shape {} does not match root shape {}", g.shape(),
                    root.shape());
    }
    std::shared_ptr<Node> node = root.gradient_edge_node();
    auto& st = state[node.get()];
    if (st.grads.empty()) st.grads.resize(std::max<std::size_t>(node->num_outputs(), 1));
    accumulate(st.grads[static_cast<std::size_t>(root.output_nr())], g);
    root_nodes.push_back(std::move(node));
  }

  // Count dependencies: how many edges from reachable nodes point at each node.
  {
    std::vector<Node*> stack;
    std::unordered_map<Node*, bool> seen;
    for (auto& n : root_nodes) {
      if (!seen[n.get()]) {
        seen[n.get()] = true;
        stack.push_back(n.get());
      }
    }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges()) {
        if (!e.node) continue;
        state[e.node.get()].dependencies++;
        if (!seen[e.node.get()]) {
          seen[e.node.get()] = true;
          stack.push_back(e.node.get());
        }
      }
    }
  }

  auto cmp = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return priority_of(a.get()) < priority_of(b.get());
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(cmp)> ready(cmp);
  {
    std::unordered_map<Node*, bool> queued;
    for (auto& n : root_nodes) {
      if (state[n.get()].dependencies == 0 && !queued[n.get()]) {
        queued[n.get()] = true;
        ready.push(n);
      }
    }
  }

  try {
    while (!ready.empty()) {
      std::shared_ptr<Node> node = ready.top();
      ready.pop();
      NodeState& st = state[node.get()];
      std::vector<Tensor> in = std::move(st.grads);
      in.resize(std::max<std::size_t>(node->num_outputs(), 1));
      std::vector<Tensor> out = node->apply(std::move(in));
      if (!retain_graph) node->release();
      for (const auto& [id, hook] : t_progress.hooks) hook();
      const auto& edges = node->next_edges();
      for (std::size_t i = 0; i < edges.size(); ++i) {
        const Edge& e = edges[i];
        if (!e.node) continue;
        NodeState& next = state[e.node.get()];
        if (next.grads.empty()) next.grads.resize(std::max<std::size_t>(e.node->num_outputs(), 1));
        if (i < out.size()) accumulate(next.grads[static_cast<std::size_t>(e.input_nr)], out[i]);
        if (--next.dependencies == 0) ready.push(e.node);
      }
    }
  } catch (...) {
    // Leaves whose accumulator will not run now must not carry this
    // backward's in-place writes into the next one.
    for (auto& [node, st] : state) {
      if (auto* acc = dynamic_cast<AccumulateGrad*>(node)) acc->abandon();
    }
    throw;
  }
}

// --- function helpers ---

bool any_requires_grad(const std::vector<Variable>& inputs) {
  for (const Variable& v : inputs)
    if (v.defined() && v.requires_grad()) return true;
  return false;
}

namespace {
std::atomic<bool>& verify_op_names_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("TRIDENT_VERIFY_OP_NAMES");
    return env != nullptr && std::string_view(env) == "1";
  }()};
  return on;
}
}  // namespace

void set_verify_op_names(bool on) noexcept { verify_op_names_flag().store(on, std::memory_order_relaxed); }
bool verify_op_names() noexcept { return verify_op_names_flag().load(std::memory_order_relaxed); }

std::vector<Variable> make_results(std::vector<Tensor> outputs, const std::vector<Variable>& inputs,
                                   std::string_view name, BackwardFn backward_fn) {
  TRIDENT_CHECK(!verify_op_names() || ops::find_op(name) != nullptr || name == "checkpoint",
                "autograd: op '{}' is recorded but not listed in the op registry (src/trident/ops/registry.h): add it "
                "there and follow the add-an-op checklist in CONTRIBUTING.md",
                name);
  std::vector<Variable> result;
  result.reserve(outputs.size());
  if (!grad_enabled() || !any_requires_grad(inputs)) {
    for (Tensor& t : outputs) result.emplace_back(std::move(t), false);
    return result;
  }
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Variable& v : inputs) {
    if (v.defined() && v.requires_grad()) {
      edges.push_back(Edge{v.gradient_edge_node(), v.output_nr()});
    } else {
      edges.push_back(Edge{});
    }
  }
  auto node = std::make_shared<Node>(std::string(name), std::move(edges), std::move(backward_fn), outputs);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    result.push_back(Variable::from_node(std::move(outputs[i]), node, static_cast<int>(i)));
  }
  return result;
}

Variable make_result(Tensor output, const std::vector<Variable>& inputs, std::string_view name, BackwardFn backward) {
  std::vector<Tensor> outs;
  outs.push_back(std::move(output));
  return make_results(std::move(outs), inputs, name, std::move(backward))[0];
}

}  // namespace trident::autograd
