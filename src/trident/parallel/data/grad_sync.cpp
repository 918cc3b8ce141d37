#include "trident/parallel/data/grad_sync.h"

#include "trident/core/memory.h"

namespace trident::parallel {

GradSync::GradSync(std::vector<nn::Parameter*> params, std::shared_ptr<dist::Communicator> dp, GradSyncOptions options)
    : GradSync(std::vector<GradGroup>{GradGroup{std::move(params), std::move(dp)}}, options) {}

GradSync::GradSync(std::vector<GradGroup> groups, GradSyncOptions options) : options_(options) {
  std::vector<nn::Parameter*> all;
  for (const GradGroup& g : groups) all.insert(all.end(), g.params.begin(), g.params.end());
  TRIDENT_CHECK(!all.empty(), "GradSync: no parameters");
  const DType dtype = all.front()->var.dtype();
  std::int64_t total = 0;
  for (const nn::Parameter* p : all) {
    TRIDENT_CHECK(p->var.dtype() == dtype, "GradSync: parameter '{}' is {} but others are {}", p->name,
                  p->var.dtype(), dtype);
    total += p->var.numel();
  }
  {
    MemoryCategoryScope scope(MemoryCategory::gradients);
    buffer_ = Tensor::zeros({total}, dtype, all.front()->var.device());
  }
  stats_.bytes = static_cast<std::int64_t>(buffer_.nbytes());
  const std::int64_t bucket_elems =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(options.bucket_mb * (1 << 20)) / static_cast<std::int64_t>(dtype_size(dtype)));
  std::int64_t offset = 0;
  for (GradGroup& g : groups) {
    groups_.push_back(g.group);
    bool fresh = true;  // a group starts a bucket of its own
    // Backward produces the gradients of the last-registered parameters first.
    for (auto it = g.params.rbegin(); it != g.params.rend(); ++it) {
      nn::Parameter* p = *it;
      const std::int64_t n = p->var.numel();
      if (fresh || buckets_.back().end - buckets_.back().begin >= bucket_elems) {
        buckets_.push_back(Bucket{offset, offset, 0, 0, nullptr, false, {}, g.group.get()});
        fresh = false;
      }
      Bucket& b = buckets_.back();
      b.end = offset + n;
      b.params += 1;
      b.members.push_back(p);
      p->var.set_grad(buffer_.slice0(offset, offset + n).view(p->var.shape()));
      const std::size_t index = buckets_.size() - 1;
      const int hook = p->var.add_grad_ready_hook([this, index](autograd::Variable&) {
        Bucket& bucket = buckets_[index];
        if (!sync_) return;
        if (--bucket.pending == 0 && options_.overlap) launch(bucket);
      });
      hooks_.emplace_back(p->var, hook);
      offset += n;
    }
  }
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  // While backward runs, test the buckets in flight after every node so MPI moves them along.
  progress_hook_ = autograd::add_backward_progress_hook([this] {
    if (!any_launched_) return;
    for (Bucket& b : buckets_)
      if (b.work) b.work->test();
  });
}

GradSync::~GradSync() {
  autograd::remove_backward_progress_hook(progress_hook_);
  // The parameters may outlive this object (another GradSync over the same model).
  for (auto& [var, hook] : hooks_) var.remove_grad_ready_hook(hook);
}

// Lazily, as an optimizer's zero_grad(): the next backward overwrites each
// gradient, and launch() zeroes the members no backward wrote.
void GradSync::zero_grad() {
  for (Bucket& b : buckets_)
    for (nn::Parameter* p : b.members) p->var.zero_grad();
}

void GradSync::begin_micro_batch(bool last) {
  sync_ = last;
  if (!last) return;
  for (Bucket& b : buckets_) {
    b.pending = b.params;
    b.launched = false;
    b.work.reset();
  }
  any_launched_ = false;
}

void GradSync::launch(Bucket& b) {
  if (b.launched) return;
  if (!any_launched_) {
    first_launch_ = std::chrono::steady_clock::now();
    any_launched_ = true;
  }
  // A member whose zero_grad() was lazy and that no backward wrote since
  // holds old values in the buffer until grad() zeroes them.
  for (const nn::Parameter* p : b.members) (void)p->var.grad();
  Tensor view = buffer_.slice0(b.begin, b.end);
  if (b.group->size() > 1) b.work = b.group->all_reduce(view);  // one rank holds the only copy
  b.launched = true;
}

void GradSync::finish() {
  TRIDENT_CHECK(sync_, "GradSync::finish: begin_micro_batch(true) was not called for the last micro-batch");
  const auto end_of_backward = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) launch(b);
  stats_.backward_seconds =
      any_launched_ ? std::chrono::duration<double>(end_of_backward - first_launch_).count() : 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_)
    if (b.work) b.work->wait();
  stats_.exposed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sync_ = false;
}

}  // namespace trident::parallel
