// trident.models and trident.optim: train::ParallelModel (a causal LM split over a layout, the library's
// oslo-style API) and AdamW over its parameters. Parameters cross into Python without a copy: each is an
// array over the model's own memory (numpy's buffer, DLPack for torch), kept valid by the model object.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "trident/core/error.h"
#include "trident/core/storage.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/optim/optimizer.h"
#include "trident/train/config/config.h"
#include "trident/train/inference.h"
#include "trident/train/parallel_model.h"
#include "trident/train/setup.h"
#include "trident/train/trainer.h"

namespace trident::python {

namespace {

using Array = nb::ndarray<nb::numpy>;
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;

class Model {
 public:
  explicit Model(std::unique_ptr<train::ParallelModel> model) : model_(std::move(model)) {}
  train::ParallelModel& get() { return *model_; }

 private:
  std::unique_ptr<train::ParallelModel> model_;
};

train::Layout layout_of(int tp, int pp, int dp, int cp) { return {.tp = tp, .pp = pp, .dp = dp, .cp = cp}; }

// `t` (a CPU tensor of f32 or f64) as an array over its memory, alive as long as `owner`.
Array array_over(const Tensor& t, nb::handle owner, const std::string& name) {
  if (t.device().is_cuda()) {
    raise_data_error(fmt::format("parameter '{}' is on {}: arrays are given for CPU models (train.device = 'cpu')",
                                 name, t.device().to_string()));
  }
  std::vector<std::size_t> shape;
  for (std::int64_t d : t.shape().dims()) shape.push_back(static_cast<std::size_t>(d));
  nb::dlpack::dtype dtype;
  if (t.dtype() == DType::f32) {
    dtype = nb::dtype<float>();
  } else if (t.dtype() == DType::f64) {
    dtype = nb::dtype<double>();
  } else {
    raise_data_error(fmt::format("parameter '{}' is {}: arrays are given for f32 and f64 parameters", name,
                                 dtype_name(t.dtype())));
  }
  return Array(t.raw_data(), shape.size(), shape.data(), owner, nullptr, dtype);
}

// A [micro_batches, micro_batch, seq_len] (or one [micro_batch, seq_len]) integer array as that many
// i64 tensors, over the array's memory when it is int64, else converted. `what` names it in errors.
std::vector<Tensor> micro_batches_of(const InArray& a, const char* what) {
  if (a.ndim() != 2 && a.ndim() != 3) {
    raise_data_error(fmt::format("{}: expected an integer array of shape [micro_batch, seq_len] or [micro_batches, "
                                 "micro_batch, seq_len], got {} dimension(s)",
                                 what, a.ndim()));
  }
  if (a.size() == 0) {
    raise_data_error(fmt::format("{}: an empty array (shape {}): expected at least one micro-batch of tokens", what,
                                 [&] {
                                   std::string dims;
                                   for (std::size_t d = 0; d < a.ndim(); ++d)
                                     dims += (d ? ", " : "") + std::to_string(a.shape(d));
                                   return "[" + dims + "]";
                                 }()));
  }
  const bool int64 = a.dtype() == nb::dtype<std::int64_t>();
  const bool int32 = a.dtype() == nb::dtype<std::int32_t>();
  if (!int64 && !int32) {
    raise_data_error(fmt::format("{}: expected an int64 or int32 array of token ids, got dtype code {} of {} bits",
                                 what, a.dtype().code, a.dtype().bits));
  }
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    std::int64_t expected = 1;
    for (std::size_t e = d + 1; e < a.ndim(); ++e) expected *= static_cast<std::int64_t>(a.shape(e));
    if (a.stride(d) != expected) raise_data_error(fmt::format("{}: expected a C-contiguous array", what));
  }
  const std::int64_t n = a.ndim() == 3 ? static_cast<std::int64_t>(a.shape(0)) : 1;
  const std::int64_t b = static_cast<std::int64_t>(a.shape(a.ndim() - 2));
  const std::int64_t T = static_cast<std::int64_t>(a.shape(a.ndim() - 1));
  std::vector<Tensor> out;
  for (std::int64_t i = 0; i < n; ++i) {
    if (int64) {
      const auto* p = static_cast<const std::int64_t*>(a.data()) + i * b * T;
      auto storage = Storage::wrap(const_cast<std::int64_t*>(p), static_cast<std::size_t>(b * T) * 8, Device::cpu(),
                                   {});
      out.emplace_back(storage, 0, Shape{b, T}, DType::i64);
    } else {
      const auto* p = static_cast<const std::int32_t*>(a.data()) + i * b * T;
      out.push_back(Tensor::from_vector(std::vector<std::int64_t>(p, p + b * T), {b, T}));
    }
  }
  return out;
}

Dict layout_dict(const train::ParallelGroups& g) {
  Dict d;
  d["rank"] = g.rank;
  d["world_size"] = g.world->size();
  d["dp_rank"] = g.dp_rank;
  d["dp"] = g.dp_size;
  d["tp_rank"] = g.tp_rank;
  d["tp"] = g.tp_size;
  d["pp_rank"] = g.pp_rank;
  d["pp"] = g.pp_size;
  d["cp_rank"] = g.cp_rank;
  d["cp"] = g.cp_size;
  return d;
}

// The model a configuration describes (its model.*, data.tokenizer, train.* shape and dist.* layout),
// built as the trainer builds it: initialised from train.seed, or loaded from model.from_pretrained.
std::unique_ptr<train::ParallelModel> model_from_config(const std::string& path,
                                                        const std::vector<std::string>& overrides) {
  const auto world = job_world();
  std::vector<std::string> notes;
  const train::Config c = train::load_config(path, overrides, world->size(), &notes);
  train::validate_config(c, world->size());
  const data::Tokenizer tokenizer = data::Tokenizer::load(c.data.tokenizer);
  const models::TransformerSpec spec =
      train::detail::with_token_ids(train::detail::model_spec(c.model, tokenizer.vocab_size(), c.train.seq_len), tokenizer);
  const train::Layout layout{.tp = static_cast<int>(c.dist.tensor_parallel_size),
                             .pp = static_cast<int>(c.dist.pipeline_parallel_size),
                             .dp = 0,
                             .ep = static_cast<int>(c.dist.expert_parallel_size),
                             .cp = static_cast<int>(c.dist.context_parallel_size)};
  const train::ParallelModelOptions options{.micro_batch_size = c.train.micro_batch_size,
                                            .seq_len = c.train.seq_len,
                                            .seed = static_cast<std::uint64_t>(c.train.seed),
                                            .activation_checkpointing = c.train.activation_checkpointing,
                                            .sequence_parallel = c.dist.sequence_parallel};
  if (!c.model.from_pretrained.empty())
    return train::ParallelModel::from_pretrained(c.model.from_pretrained, world, layout, options);
  return std::make_unique<train::ParallelModel>(spec, world, layout, options);
}

train::GenerateOptions generate_options(std::int64_t max_new_tokens, double temperature, std::int64_t top_k, double top_p,
                                         std::int64_t no_repeat_ngram, std::uint64_t seed, bool greedy,
                                         const std::string& precision) {
  train::GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.sampling.temperature = greedy ? 0.0 : temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.no_repeat_ngram = no_repeat_ngram;
  o.sampling.seed = seed;
  o.compute_dtype = parse_precision(precision, "precision");
  return o;
}

// The one model chunk generation runs on: a layout without pipeline or context parallelism.
const models::TransformerLM& generating_chunk(train::ParallelModel& model) {
  const train::ParallelGroups& g = model.groups();
  if (g.pp_size > 1 || g.cp_size > 1) {
    TRIDENT_FAIL("generate: the model is split over pp={} cp={}; generation runs on tp × dp layouts (load it with "
                 "pp=1, cp=1)",
                 g.pp_size, g.cp_size);
  }
  return *model.chunks().front();
}

}  // namespace

void bind_model(nb::module_& m) {
  // trident.models and trident.optim (python/trident/) name these.
  nb::class_<Model>(m, "Model",
                    "A causal LM split over a layout (dp × tp × pp × cp): this rank holds its stage's layers and "
                    "its tensor-parallel shards. Every call marked collective must be made by every rank.")
      .def_prop_ro("layout", [](Model& self) { return layout_dict(self.get().groups()); },
                   "This rank's place: rank, world_size, dp/tp/pp/cp and their ranks")
      .def_prop_ro("family", [](Model& self) { return self.get().spec().family; })
      .def(
          "parameters",
          [](nb::handle self_handle) {
            Model& self = nb::cast<Model&>(self_handle);
            Dict out;
            for (nn::Parameter* p : self.get().parameters()) {
              if (p->tied_copy) continue;
              out[p->name.c_str()] = array_over(p->var.data(), self_handle, p->name);
            }
            return out;
          },
          "This rank's parameters by Hugging Face name: arrays over the model's memory (no copy; writes "
          "change the model). Tensor-parallel shards have their local shape.")
      .def(
          "gradients",
          [](nb::handle self_handle) {
            Model& self = nb::cast<Model&>(self_handle);
            Dict out;
            for (nn::Parameter* p : self.get().parameters()) {
              if (p->tied_copy || !p->var.grad().defined()) continue;
              out[p->name.c_str()] = array_over(p->var.grad(), self_handle, p->name);
            }
            return out;
          },
          "This rank's gradients by name (after forward_backward), as arrays over the model's memory")
      .def("zero_grad", [](Model& self) { self.get().zero_grad(); })
      .def(
          "forward_backward",
          [](Model& self, const InArray& ids, const InArray& labels, std::optional<InArray> attention_mask) {
            const std::vector<Tensor> id_batches = micro_batches_of(ids, "ids");
            const std::vector<Tensor> label_batches = micro_batches_of(labels, "labels");
            if (id_batches.size() != label_batches.size() || id_batches[0].shape() != label_batches[0].shape()) {
              raise_data_error(fmt::format("labels: expected the shape of ids ({} micro-batch(es) of {}), got {} of {}",
                                           id_batches.size(), id_batches[0].shape().to_string(), label_batches.size(),
                                           label_batches[0].shape().to_string()));
            }
            std::vector<Tensor> masks;
            if (attention_mask) masks = micro_batches_of(*attention_mask, "attention_mask");
            std::vector<train::MicroBatch> batches;
            for (std::size_t i = 0; i < id_batches.size(); ++i)
              batches.push_back({id_batches[i], label_batches[i], masks.empty() ? Tensor() : masks[i]});
            nb::gil_scoped_release unlocked;
            return self.get().forward_backward(batches);
          },
          nb::arg("ids"), nb::arg("labels"), nb::arg("attention_mask") = nb::none(),
          // Any array numpy can view (numpy, torch on the CPU, ...), as the stubs say.
          nb::sig("def forward_backward(self, ids: numpy.typing.ArrayLike, labels: numpy.typing.ArrayLike, "
                  "attention_mask: numpy.typing.ArrayLike | None = None) -> float"),
          "One step's forward and backward over this data-parallel rank's micro-batches (int64 or int32 "
          "[micro_batches, micro_batch, seq_len], or one [micro_batch, seq_len]; labels -100 are ignored); "
          "returns the global batch's mean loss. Collective.")
      .def("grad_norm", [](Model& self) {
        nb::gil_scoped_release unlocked;
        return self.get().grad_norm();
      }, "The whole model's gradient norm, the same on every rank. Collective.")
      .def(
          "generate",
          [](Model& self, const std::vector<std::int64_t>& prompt, std::int64_t max_new_tokens, double temperature,
             std::int64_t top_k, double top_p, std::int64_t no_repeat_ngram, std::uint64_t seed, bool greedy,
             std::optional<std::vector<std::int64_t>> stop_ids, std::int64_t vocab_limit, const std::string& precision) {
            train::GenerateOptions o =
                generate_options(max_new_tokens, temperature, top_k, top_p, no_repeat_ngram, seed, greedy, precision);
            const models::TransformerLM& chunk = generating_chunk(self.get());
            o.stop_ids = stop_ids.value_or(chunk.spec().eos_token_ids);
            o.vocab_limit = vocab_limit;
            nb::gil_scoped_release unlocked;
            return train::generate(chunk, prompt, o).ids;
          },
          nb::arg("prompt"), nb::arg("max_new_tokens") = 64, nb::arg("temperature") = 1.0, nb::arg("top_k") = 0,
          nb::arg("top_p") = 1.0, nb::arg("no_repeat_ngram") = 0, nb::arg("seed") = 0, nb::arg("greedy") = false,
          nb::arg("stop_ids") = nb::none(), nb::arg("vocab_limit") = 0, nb::arg("precision") = "fp32",
          "The ids that continue `prompt` (a KV cache; `trident generate`'s sampler): greedy, or sampled at "
          "`temperature` among top_k / top_p. Stops before an id of `stop_ids` (default: config.json's eos ids). "
          "Under tensor parallelism every rank calls it alike and gets the same ids. Needs pp = cp = 1.")
      .def(
          "generate_text",
          [](Model& self, const data::Tokenizer& tokenizer, const std::string& prompt, std::int64_t max_new_tokens,
             double temperature, std::int64_t top_k, double top_p, std::int64_t no_repeat_ngram, std::uint64_t seed,
             bool greedy, const std::string& precision) {
            train::GenerateOptions o =
                generate_options(max_new_tokens, temperature, top_k, top_p, no_repeat_ngram, seed, greedy, precision);
            const models::TransformerLM& chunk = generating_chunk(self.get());
            o.stop_ids = train::default_stop_ids(chunk.spec(), tokenizer);
            o.vocab_limit = tokenizer.vocab_size();
            const std::vector<std::int32_t> ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
            const std::vector<std::int64_t> prompt_ids(ids.begin(), ids.end());
            std::vector<std::int32_t> out;
            {
              nb::gil_scoped_release unlocked;
              for (std::int64_t id : train::generate(chunk, prompt_ids, o).ids) out.push_back(static_cast<std::int32_t>(id));
            }
            std::string text = tokenizer.decode(out);
            return nb::steal<nb::str>(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
          },
          nb::arg("tokenizer"), nb::arg("prompt"), nb::arg("max_new_tokens") = 64, nb::arg("temperature") = 1.0,
          nb::arg("top_k") = 0, nb::arg("top_p") = 1.0, nb::arg("no_repeat_ngram") = 0, nb::arg("seed") = 0,
          nb::arg("greedy") = false, nb::arg("precision") = "fp32",
          "The text that continues `prompt`, as `trident generate` writes it (without the prompt)")
      .def(
          "save_pretrained",
          [](Model& self, const std::string& dir, bool merge, const std::string& dtype) {
            const models::SaveOptions options{.merged = merge, .dtype = parse_dtype(dtype, "dtype")};
            nb::gil_scoped_release unlocked;
            return self.get().save_pretrained(dir, options);
          },
          nb::arg("path"), nb::arg("merge") = true, nb::arg("dtype") = "f32",
          "Saves a Hugging Face directory (merge=True; rank 0 writes it) or one file per rank (merge=False, which "
          "any layout reads back). Collective; returns the files written.");

  m.def(
      "model_from_pretrained",
      [](const std::string& path, int tp, int pp, int dp, int cp, std::int64_t seq_len, std::int64_t micro_batch_size,
         std::uint64_t seed) {
        const train::ParallelModelOptions options{.micro_batch_size = micro_batch_size, .seq_len = seq_len, .seed = seed};
        nb::gil_scoped_release unlocked;
        return Model(train::ParallelModel::from_pretrained(path, job_world(), layout_of(tp, pp, dp, cp), options));
      },
      nb::arg("path"), nb::arg("tp") = 1, nb::arg("pp") = 1, nb::arg("dp") = 0, nb::arg("cp") = 1,
      nb::arg("seq_len") = 0, nb::arg("micro_batch_size") = 1, nb::arg("seed") = 0,
      "A Hugging Face directory (or a sharded save of any layout) split over tp × pp × cp, the job's other "
      "ranks data-parallel (dp=0 infers it). Collective.");
  m.def(
      "model_from_config",
      [](const std::string& path, const std::vector<std::string>& overrides) {
        nb::gil_scoped_release unlocked;
        return Model(model_from_config(path, overrides));
      },
      nb::arg("path"), nb::arg("overrides"), "The model a configuration describes, on its dist.* layout. Collective.");

  nb::class_<optim::AdamW>(m, "AdamW", "AdamW over a model's parameters on this rank (replicated, not ZeRO)")
      .def(
          "__init__",
          [](optim::AdamW* self, Model& model, double beta1, double beta2, double eps, double weight_decay) {
            // The checks optim.betas, optim.eps and optim.weight_decay get in a config.
            TRIDENT_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                          "optim.betas: AdamW(beta1={}, beta2={}): each must be in [0, 1)", beta1, beta2);
            TRIDENT_CHECK(eps > 0 && std::isfinite(eps), "optim.eps: AdamW(eps={}): must be a finite number > 0", eps);
            TRIDENT_CHECK(weight_decay >= 0 && std::isfinite(weight_decay),
                          "optim.weight_decay: AdamW(weight_decay={}): must be a finite number >= 0", weight_decay);
            new (self) optim::AdamW(model.get().parameters(),
                                    {.beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
          },
          nb::arg("model"), nb::arg("beta1") = 0.9, nb::arg("beta2") = 0.999, nb::arg("eps") = 1e-8,
          nb::arg("weight_decay") = 0.01, nb::keep_alive<1, 2>())
      .def(
          "step",
          [](optim::AdamW& self, double lr, double grad_scale) {
            nb::gil_scoped_release unlocked;
            self.step(lr, grad_scale);
          },
          nb::arg("lr"), nb::arg("grad_scale") = 1.0,
          "One update at learning rate `lr`; `grad_scale` multiplies the gradients first (clip_coefficient)")
      .def("zero_grad", [](optim::AdamW& self) { self.zero_grad(); });
  m.def(
      "evaluate",
      [](const std::string& checkpoint, const std::string& data, const std::string& text, const std::string& json_key,
         std::int64_t seq_len, std::int64_t batch_size, std::int64_t max_tokens, const std::string& precision,
         double mlm_probability, bool whole_word_masking, std::uint64_t seed) {
        train::EvalOptions o{.data = data,
                             .text = text,
                             .json_key = json_key,
                             .seq_len = seq_len,
                             .batch_size = batch_size,
                             .max_tokens = max_tokens,
                             .compute_dtype = parse_precision(precision, "precision"),
                             .mlm_probability = mlm_probability,
                             .whole_word = whole_word_masking,
                             .seed = seed};
        train::EvalResult r;
        {
          nb::gil_scoped_release unlocked;
          r = train::evaluate(train::load_inference_model(checkpoint, false, "checkpoint"), o);
        }
        Dict d;
        d["loss"] = r.loss;
        d["perplexity"] = r.perplexity;
        d["predicted"] = r.predicted;
        d["tokens"] = r.tokens;
        d["windows"] = r.windows;
        d["seq_len"] = r.seq_len;
        d["masked_lm"] = r.masked_lm;
        if (r.accuracy) d["accuracy"] = *r.accuracy;
        return d;
      },
      nb::arg("checkpoint"), nb::arg("data") = "", nb::arg("text") = "", nb::arg("json_key") = "text",
      nb::arg("seq_len") = 0, nb::arg("batch_size") = 4, nb::arg("max_tokens") = 0, nb::arg("precision") = "fp32",
      nb::arg("mlm_probability") = 0.15, nb::arg("whole_word_masking") = false, nb::arg("seed") = 1234,
      "`trident eval`: the loss and perplexity of a checkpoint on a dataset or a text file");
  m.def("clip_coefficient", &optim::clip_coefficient, nb::arg("total_norm"), nb::arg("max_norm"),
            "The factor that brings a gradient of norm `total_norm` down to `max_norm` (1 when under it)");
}

}  // namespace trident::python
