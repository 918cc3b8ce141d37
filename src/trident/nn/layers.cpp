#include "trident/nn/layers.h"

#include "trident/autograd/autograd.h"

namespace trident::nn {

namespace ag = trident::autograd;

Variable compute_view(const Parameter& p, const ForwardContext& ctx) {
  TRIDENT_CHECK(p.var.defined(), "parameter '{}' used before initialize()", p.name);
  return ag::cast(p.var, ctx.compute_dtype);
}

Linear::Linear(std::string prefix, const LinearOptions& options) : Module(std::move(prefix)), options_(options) {
  TRIDENT_CHECK(options.in_features > 0 && options.out_features > 0, "Linear '{}': sizes must be positive, got {}x{}",
                this->prefix(), options.in_features, options.out_features);
  Shape w = options.layout == WeightLayout::out_in ? Shape{options.out_features, options.in_features}
                                                   : Shape{options.in_features, options.out_features};
  weight_ = &add_parameter("weight", w, Init{InitKind::normal, options.init_std}, true);
  if (options.bias) bias_ = &add_parameter("bias", Shape{options.out_features}, Init{InitKind::zeros, 0}, false);
}

Variable Linear::forward(const Variable& x, const ForwardContext& ctx) const {
  TRIDENT_CHECK(x.shape().rank() >= 1 && x.shape().last() == options_.in_features,
                "Linear '{}': input of shape {} does not end in in_features={}", prefix(), x.shape(),
                options_.in_features);
  Variable w = compute_view(*weight_, ctx);
  Variable b = bias_ ? compute_view(*bias_, ctx) : Variable();
  if (options_.layout == WeightLayout::out_in) return ag::linear(x, w, b);
  Variable y = ag::matmul(x, w, false, false);
  return b.defined() ? ag::bias_add(y, b) : y;
}

Embedding::Embedding(std::string prefix, std::int64_t num_embeddings, std::int64_t dim, double init_std)
    : Module(std::move(prefix)) {
  weight_ = &add_parameter("weight", Shape{num_embeddings, dim}, Init{InitKind::normal, init_std}, true);
}

Variable Embedding::forward(const Tensor& ids, const ForwardContext& ctx) const {
  return ag::embedding(compute_view(*weight_, ctx), ids);
}

LayerNorm::LayerNorm(std::string prefix, std::int64_t dim, double eps, bool bias) : Module(std::move(prefix)), eps_(eps) {
  weight_ = &add_parameter("weight", Shape{dim}, Init{InitKind::ones, 0}, false);
  if (bias) bias_ = &add_parameter("bias", Shape{dim}, Init{InitKind::zeros, 0}, false);
}

Variable LayerNorm::forward(const Variable& x, const ForwardContext& ctx) const {
  return ag::layer_norm(x, compute_view(*weight_, ctx), bias_ ? compute_view(*bias_, ctx) : Variable(), eps_);
}

RMSNorm::RMSNorm(std::string prefix, std::int64_t dim, double eps) : Module(std::move(prefix)), eps_(eps) {
  weight_ = &add_parameter("weight", Shape{dim}, Init{InitKind::ones, 0}, false);
}

Variable RMSNorm::forward(const Variable& x, const ForwardContext& ctx) const {
  return ag::rms_norm(x, compute_view(*weight_, ctx), eps_);
}

Variable dropout(const Variable& x, double p, const std::string& site, const ForwardContext& ctx) {
  if (!ctx.training || p <= 0.0) return x;
  return ag::dropout(x, p, ctx.dropout_rng(site), ctx.batch_slice(x.shape()));
}

}  // namespace trident::nn
