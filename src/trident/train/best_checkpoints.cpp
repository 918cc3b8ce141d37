#include "trident/train/best_checkpoints.h"

#include <algorithm>
#include <cmath>

#include "trident/core/error.h"

namespace trident::train::detail {

double monitored_value(const Config& config, double val_loss) {
  return config.checkpoint.monitor == "val_ppl" ? std::exp(val_loss) : val_loss;
}

void observe(MonitorState& state, const Config& config, std::int64_t step, double val_loss) {
  // Early stopping (Lightning's rule for mode "min": an improvement is current < best - min_delta; a NaN
  // never improves).
  const double value = monitored_value(config, val_loss);
  if (!state.best || value < monitored_value(config, *state.best) - config.train.early_stopping_min_delta) {
    state.best = val_loss;
    state.best_step = step;
    state.evaluations_without_improvement = 0;
  } else {
    ++state.evaluations_without_improvement;
  }
  // The best k (Lightning's save_top_k: a new checkpoint enters while there are fewer than k, or when
  // strictly better than the k-th, which then goes).
  const auto k = static_cast<std::size_t>(std::max<std::int64_t>(config.checkpoint.keep_best, 0));
  std::erase_if(state.kept, [step](const auto& e) { return e.second >= step; });  // a redone step replaces its own
  if (k > 0 && std::isfinite(val_loss)) {
    if (state.kept.size() < k || val_loss < state.kept.back().first) state.kept.emplace_back(val_loss, step);
    std::sort(state.kept.begin(), state.kept.end());  // by value, then the earlier step
  }
  if (state.kept.size() > k) state.kept.resize(k);
}

bool patience_exhausted(const MonitorState& state, const Config& config) {
  return config.train.early_stopping_patience > 0 &&
         state.evaluations_without_improvement >= config.train.early_stopping_patience;
}

std::string early_stop_message(const MonitorState& state, const Config& config, std::int64_t step) {
  const bool ppl = config.checkpoint.monitor == "val_ppl";
  const double best = state.best ? monitored_value(config, *state.best) : NAN;
  const auto value = [&](double v) { return ppl ? fmt::format("{:.2f}", v) : fmt::format("{:.4f}", v); };
  // The best step by min_delta's rule may be one keep_best (which ranks by the value alone) has pruned: a
  // later step a little lower, by less than min_delta, took its place. Name the checkpoint that is kept.
  std::string kept;
  const bool pruned = !state.kept.empty() && std::none_of(state.kept.begin(), state.kept.end(), [&](const auto& e) {
    return e.second == state.best_step;
  });
  if (config.checkpoint.keep_best > 0 && pruned) {
    kept = fmt::format("; its checkpoint is not among the checkpoint.keep_best={} kept, the best of which is step {} "
                       "({} {}: checkpoints/best)",
                       config.checkpoint.keep_best, state.kept.front().second, ppl ? "val ppl" : "val loss",
                       value(monitored_value(config, state.kept.front().first)));
  }
  return fmt::format("stopped after step {}: {} has not improved by more than {} for {} evaluations (best {} at step "
                     "{}{})",
                     step, ppl ? "val ppl" : "val loss", config.train.early_stopping_min_delta,
                     state.evaluations_without_improvement, value(best), state.best_step, kept);
}

std::vector<std::string> kept_best_names(const MonitorState& state) {
  std::vector<std::string> names;
  for (const auto& [value, step] : state.kept) names.push_back(fmt::format("step_{:08d}", step));
  return names;
}

nlohmann::json monitor_json(const MonitorState& state, const Config& config) {
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& [value, step] : state.kept) kept.push_back({{"step", step}, {"val_loss", value}});
  nlohmann::json best = nullptr;
  if (state.best) best = {{"step", state.best_step}, {"val_loss", *state.best}};
  return {{"metric", config.checkpoint.monitor},
          {"best", best},
          {"evaluations_without_improvement", state.evaluations_without_improvement},
          {"best_checkpoints", kept}};
}

namespace {

std::int64_t step_of(const nlohmann::json& j, const std::string& where, const char* what) {
  TRIDENT_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                    j["step"].get<std::int64_t>() >= 0 && j.contains("val_loss") && j["val_loss"].is_number(),
                "'{}': \"monitor\".\"{}\" must hold {{\"step\": an integer >= 0, \"val_loss\": a number}}, got {}",
                where, what, j.dump());
  return j["step"].get<std::int64_t>();
}

}  // namespace

MonitorState monitor_from_meta(const nlohmann::json& meta, const std::string& where) {
  MonitorState state;
  if (!meta.contains("monitor")) return state;
  const nlohmann::json& m = meta["monitor"];
  TRIDENT_CHECK(m.is_object(), "'{}': \"monitor\" must be an object, got {}", where, m.dump());
  if (m.contains("best") && !m["best"].is_null()) {
    state.best_step = step_of(m["best"], where, "best");
    state.best = m["best"]["val_loss"].get<double>();
  }
  if (m.contains("evaluations_without_improvement")) {
    const auto& n = m["evaluations_without_improvement"];
    TRIDENT_CHECK(n.is_number_integer() && n.get<std::int64_t>() >= 0,
                  "'{}': \"monitor\".\"evaluations_without_improvement\" must be an integer >= 0, got {}", where,
                  n.dump());
    state.evaluations_without_improvement = n.get<std::int64_t>();
  }
  if (m.contains("best_checkpoints")) {
    TRIDENT_CHECK(m["best_checkpoints"].is_array(), "'{}': \"monitor\".\"best_checkpoints\" must be an array, got {}",
                  where, m["best_checkpoints"].dump());
    for (const auto& e : m["best_checkpoints"]) {
      const std::int64_t step = step_of(e, where, "best_checkpoints");
      state.kept.emplace_back(e["val_loss"].get<double>(), step);
    }
    std::sort(state.kept.begin(), state.kept.end());
  }
  return state;
}

}  // namespace trident::train::detail
