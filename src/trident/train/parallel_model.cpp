#include "trident/train/parallel_model.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "trident/train/model_runner.h"
#include "trident/train/parallel_state.h"

namespace trident::train {

namespace {

// ParallelGroups' named view of each group kind it holds, in the order make_groups splits them (the
// splits are collective: every rank makes them in this order).
struct NamedGroup {
  dist::GroupKind kind;
  std::shared_ptr<dist::Communicator> ParallelGroups::*group;
  int ParallelGroups::*rank;  // null: not kept by name
  int ParallelGroups::*size;
};
using G = ParallelGroups;
constexpr NamedGroup kNamedGroups[] = {
    {dist::GroupKind::dp, &G::dp, &G::dp_rank, &G::dp_size},
    {dist::GroupKind::tp, &G::tp, &G::tp_rank, &G::tp_size},
    {dist::GroupKind::pp, &G::pp, &G::pp_rank, &G::pp_size},
    {dist::GroupKind::embedding, &G::embedding, nullptr, nullptr},
    {dist::GroupKind::ep, &G::ep, &G::ep_rank, &G::ep_size},
    {dist::GroupKind::expert_dp, &G::expert_dp, &G::expert_dp_rank, nullptr},
    {dist::GroupKind::cp, &G::cp, &G::cp_rank, &G::cp_size},
    {dist::GroupKind::dp_cp, &G::dp_cp, &G::dp_cp_rank, &G::dp_cp_size},
    {dist::GroupKind::expert_dp_cp, &G::expert_dp_cp, &G::expert_dp_cp_rank, nullptr},
};

const NamedGroup& named(dist::GroupKind kind) {
  const auto* it = std::find_if(std::begin(kNamedGroups), std::end(kNamedGroups),
                                [kind](const NamedGroup& n) { return n.kind == kind; });
  TRIDENT_CHECK(it != std::end(kNamedGroups), "ParallelGroups: no communicator is made for the {} group",
                dist::group_info(kind).name);
  return *it;
}

}  // namespace

const std::shared_ptr<dist::Communicator>& ParallelGroups::group(dist::GroupKind kind) const {
  return this->*named(kind).group;
}

dist::Group ParallelGroups::layer_group(dist::GroupKind kind) const {
  const std::shared_ptr<dist::Communicator>& g = group(kind);
  return g && g->size() > 1 ? dist::Group{g} : dist::Group{};
}

ParallelGroups make_groups(std::shared_ptr<dist::Communicator> world, const Layout& layout,
                           std::shared_ptr<dist::Communicator> parent) {
  TRIDENT_CHECK(world != nullptr, "make_groups: no world communicator");
  if (!parent) parent = world;
  ParallelGroups g;
  g.world = std::move(world);
  g.rank = g.world->rank();
  g.mesh = std::make_unique<dist::Mesh>(g.world->size(), layout);
  for (const NamedGroup& n : kNamedGroups) {
    std::shared_ptr<dist::Communicator>& comm = g.*n.group;
    // Groups that equal one made before are that group: the experts' replicas without expert parallelism
    // (the data-parallel group), and the gradients' groups without context parallelism.
    const bool no_cp = g.mesh->cp() == 1;
    if (n.kind == dist::GroupKind::expert_dp && g.mesh->ep() == 1) {
      comm = g.dp;
    } else if (n.kind == dist::GroupKind::dp_cp && no_cp) {
      comm = g.dp;
    } else if (n.kind == dist::GroupKind::expert_dp_cp && (no_cp || g.mesh->ep() == 1)) {
      comm = no_cp ? g.expert_dp : g.dp_cp;
    } else {
      comm = parent->split(g.mesh->partition(n.kind), dist::group_info(n.kind).name);
    }
    if (n.rank) g.*n.rank = comm->rank();
    if (n.size) g.*n.size = comm->size();
  }
  return g;
}

nn::ForwardContext step_context(std::uint64_t seed, std::int64_t step, std::int64_t m, std::int64_t micro_batches,
                                std::int64_t micro_batch, int dp_rank, int dp_size, DType compute_dtype) {
  nn::ForwardContext ctx;
  ctx.training = true;
  ctx.seed = seed;
  ctx.step = step;
  ctx.global_batch = micro_batches * micro_batch * dp_size;
  ctx.batch_offset = m * micro_batch * dp_size + dp_rank * micro_batch;
  ctx.compute_dtype = compute_dtype;
  return ctx;
}

struct ParallelModel::Impl {
  models::TransformerSpec spec;
  ParallelModelOptions options;
  detail::ParallelState par;
  std::unique_ptr<detail::ModelRunner> runner;
  std::int64_t steps = 0;
};

ParallelModel::ParallelModel(const models::TransformerSpec& spec, std::shared_ptr<dist::Communicator> world,
                             const Layout& layout, const ParallelModelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.spec = spec;
  m.spec.validate();
  m.options = options;
  if (m.options.seq_len == 0) m.options.seq_len = spec.max_seq_len;
  TRIDENT_CHECK(m.options.micro_batch_size >= 1, "ParallelModel: micro_batch_size must be at least 1, got {}",
                m.options.micro_batch_size);
  TRIDENT_CHECK(m.options.seq_len >= 1 && m.options.seq_len <= spec.max_seq_len,
                "ParallelModel: seq_len {} is not within [1, the model's max_seq_len {}]", m.options.seq_len,
                spec.max_seq_len);
  static_cast<ParallelGroups&>(m.par) = make_groups(std::move(world), layout);
  m.par.chunks = options.virtual_stages;
  m.par.sequence_parallel = options.sequence_parallel && m.par.tp_size > 1;
  m.par.cp_all_to_all = options.context_all_to_all;
  TRIDENT_CHECK(m.par.cp_size == 1 || m.options.seq_len % (2 * m.par.cp_size) == 0,
                "ParallelModel: context parallelism over {} ranks splits each sequence into {} chunks: seq_len ({}) "
                "must be a multiple of {}",
                m.par.cp_size, 2 * m.par.cp_size, m.options.seq_len, 2 * m.par.cp_size);
  TRIDENT_CHECK(!m.par.sequence_parallel || (m.options.seq_len / m.par.cp_size) % m.par.tp_size == 0,
                "ParallelModel: sequence parallelism needs each context-parallel rank's seq_len ({}) divisible by tp "
                "({})",
                m.options.seq_len / m.par.cp_size, m.par.tp_size);
  m.runner = std::make_unique<detail::ModelRunner>(
      m.spec, m.par,
      detail::ModelRunner::Options{options.stage_layers, options.schedule, m.options.micro_batch_size,
                                   m.options.seq_len, DType::f32, Device::cpu(), /*attention_masks=*/true});
  for (const auto& chunk : m.runner->chunks()) {
    chunk->initialize(options.seed);
    chunk->set_activation_checkpointing(options.activation_checkpointing);
  }
  // The data-parallel gradient reduction (the trainer's, ZeRO stage 0): one group, or the experts' own.
  if (m.par.dp_cp_size > 1) {
    std::vector<nn::Parameter*> dense, experts;
    for (nn::Parameter* p : m.runner->parameters()) (p->expert_parallel ? experts : dense).push_back(p);
    std::vector<parallel::GradGroup> groups{{dense, m.par.dp_cp}};
    if (!experts.empty()) groups.push_back({experts, m.par.expert_dp_cp});
    m.par.grad_sync = std::make_unique<parallel::GradSync>(std::move(groups), parallel::GradSyncOptions{});
  }
}

std::unique_ptr<ParallelModel> ParallelModel::from_pretrained(const std::string& dir,
                                                              std::shared_ptr<dist::Communicator> world,
                                                              const Layout& layout,
                                                              const ParallelModelOptions& options) {
  auto model = std::make_unique<ParallelModel>(models::pretrained_spec(dir), std::move(world), layout, options);
  // Every rank reads its boxes; a failure on one (a missing tensor) reaches all of them.
  dist::on_every_rank(*model->impl_->par.world, [&] {
    for (const auto& chunk : model->impl_->runner->chunks()) models::load_pretrained(*chunk, dir);
  });
  return model;
}

ParallelModel::~ParallelModel() = default;

const models::TransformerSpec& ParallelModel::spec() const noexcept { return impl_->spec; }
const ParallelGroups& ParallelModel::groups() const noexcept { return impl_->par; }
const std::vector<nn::Parameter*>& ParallelModel::parameters() const noexcept { return impl_->runner->parameters(); }
std::int64_t ParallelModel::steps() const noexcept { return impl_->steps; }

std::vector<const models::TransformerLM*> ParallelModel::chunks() const {
  std::vector<const models::TransformerLM*> out;
  for (const auto& chunk : impl_->runner->chunks()) out.push_back(chunk.get());
  return out;
}

void ParallelModel::zero_grad() {
  for (nn::Parameter* p : parameters()) p->var.zero_grad();
}

double ParallelModel::forward_backward(const std::vector<MicroBatch>& micro_batches, double normalizer) {
  Impl& m = *impl_;
  const detail::ParallelState& par = m.par;
  const auto count = static_cast<std::int64_t>(micro_batches.size());
  TRIDENT_CHECK(count >= 1, "forward_backward: no micro-batch given");
  const Shape expected{m.options.micro_batch_size, m.options.seq_len};
  // The stages that read ids (the first) or labels (the last); every stage reads the attention masks.
  const bool reads = !par.pipelined() || par.first_stage() || par.last_stage();
  for (std::int64_t i = 0; i < count; ++i) {
    const MicroBatch& b = micro_batches[static_cast<std::size_t>(i)];
    TRIDENT_CHECK(!reads || (b.ids.shape() == expected && b.labels.shape() == expected),
                  "forward_backward: micro-batch {} has ids {} and labels {}; the model was built for {}", i,
                  b.ids.shape(), b.labels.shape(), expected);
    TRIDENT_CHECK(!b.attention_mask.defined() || b.attention_mask.shape() == expected,
                  "forward_backward: micro-batch {} has an attention_mask {}; the model was built for {}", i,
                  b.attention_mask.shape(), expected);
  }
  if (normalizer <= 0) {
    // The global batch's labels: this rank's (first or last stage) summed over data parallelism, then
    // shared along the pipeline from its last stage, which reads labels.
    double labels = 0;
    if (reads && par.last_stage()) {
      for (const MicroBatch& b : micro_batches) {
        const Tensor l = b.labels.to(DType::i64);
        const auto v = l.to_vector<std::int64_t>();
        labels += static_cast<double>(std::count_if(v.begin(), v.end(), [](std::int64_t x) { return x != -100; }));
      }
    }
    labels = par.dp->all_reduce_scalar(labels, dist::ReduceOp::sum);
    if (par.pipelined()) labels = par.pp->all_reduce_scalar(labels, dist::ReduceOp::max);
    normalizer = std::max(labels, 1.0);
  }
  const std::int64_t step = ++m.steps;
  std::size_t next = 0;
  const auto loss = m.runner->train_step(
      count,
      [&] {
        const MicroBatch& b = micro_batches[next++ % micro_batches.size()];
        data::Batch batch;
        batch.tokens = b.ids;
        batch.labels = b.labels;
        batch.key_mask = b.attention_mask;
        return batch;
      },
      [&](std::int64_t mb) {
        return step_context(m.options.seed, step, mb, count, m.options.micro_batch_size, par.dp_rank, par.dp_size);
      },
      normalizer, 1.0);
  return *loss;  // no stop_before: the step always completes
}

double ParallelModel::grad_norm() { return std::sqrt(impl_->runner->grad_sum_of_squares()); }

std::vector<std::string> ParallelModel::save_pretrained(const std::string& dir,
                                                        const models::SaveOptions& options) const {
  const detail::ParallelState& par = impl_->par;
  return models::save_pretrained(chunks(), dir, *par.world, {par.dp_cp_rank, par.expert_dp_cp_rank}, options);
}

}  // namespace trident::train
