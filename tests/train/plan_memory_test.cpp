// `trident plan`'s memory model against measurement (docs/parallelism.md#memory-and-planning), under
// mpirun with 2 ranks: GPT-2, LLaMA, BERT and Mixtral, small but with their model states well above
// the fixed overheads, train two steps (the second has every state allocated) as one process (on
// rank 0), and over both ranks as dp2, ZeRO-1/2/3, tp2 (with and without sequence parallelism), pp2
// (1F1B and GPipe), ep2 and cp2 (ring, all-to-all, with ZeRO-1), with and without activation checkpointing
// and in bf16 and fp16. Each rank's peak of
// the tensor allocator over the steps (core/memory.h; what metrics.jsonl reports as peak_memory_mb)
// must be within 10% of the plan's total for that rank's pipeline stage. TRIDENT_PLAN_TEST_DEVICE=cuda
// runs the same matrix with train.device=cuda (a GPU per rank), where the peak read is the device's
// counter (memory_stats of the run's device): the model's terms are the same; that comparison has not
// been run yet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "layout_runs.h"
#include "trident/dist/self_communicator.h"
#include "trident/train/plan/memory_estimate.h"
#include "trident/train/plan/plan.h"

namespace trident::train {
namespace {

struct Case {
  std::string name;
  std::string arch;
  bool whole_job = false;  // over both ranks; else one process on rank 0
  std::vector<std::string> layout;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PlanMemory : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    runs_.set_up("plan");
    if (runs_.world->rank() == 0) testing::make_bert_corpus(runs_.shared / "bert");
    runs_.world->barrier();
  }
  static void TearDownTestSuite() { runs_.tear_down(); }

  // The model: 4 blocks of width 128 over a 320-token (BERT: 200) vocabulary, micro-batches of 4 × 64
  // tokens, a global batch of 8 (2 micro-batches per data-parallel rank, 4 in a pipeline).
  static std::vector<std::string> overrides(const Case& c) {
    std::vector<std::string> o = testing::tiny_run(runs_.shared / "corpus", "cache");
    for (const char* s : {"model.n_layer=4", "model.d_model=128", "model.n_head=4", "model.max_seq_len=64",
                          "train.seq_len=64", "train.micro_batch_size=4", "train.global_batch_size=8",
                          "train.steps=2", "model.dropout=0"}) {
      o.emplace_back(s);
    }
    o.push_back("model.arch=" + c.arch);
    if (c.arch == "llama") o.emplace_back("model.n_kv_head=2");
    if (c.arch == "mixtral") {
      for (const char* s : {"model.n_kv_head=2", "model.d_ff=128", "model.n_experts=4", "model.experts_per_token=2"})
        o.emplace_back(s);
    }
    if (c.arch == "bert") {
      const std::filesystem::path dir = runs_.shared / "bert";
      o.push_back("data.tokenizer=" + (dir / "tokenizer.json").string());
      o.push_back("data.paths=[\"" + (dir / "corpus").string() + "\"]");
      o.push_back("data.cache_dir=" + (dir / "cache").string());
    }
    o.insert(o.end(), c.layout.begin(), c.layout.end());
    if (const char* device = std::getenv("TRIDENT_PLAN_TEST_DEVICE"); device != nullptr && *device != '\0')
      o.push_back(std::string("train.device=") + device);
    return o;
  }

  static testing::LayoutRuns runs_;
};
testing::LayoutRuns PlanMemory::runs_;

TEST_P(PlanMemory, PeakIsWithinTenPercentOfThePlan) {
  const Case& c = GetParam();
  const std::shared_ptr<dist::Communicator> comm = c.whole_job ? runs_.world : dist::self_communicator();
  double measured = 0, predicted = 0;
  if (c.whole_job || runs_.world->rank() == 0) {
    TrainOptions o;
    o.overrides = overrides(c);
    o.run_dir = (runs_.shared / c.name).string();
    o.quiet = true;
    o.world = comm;
    const TrainSummary summary = train(o);
    measured = static_cast<double>(summary.memory_after_last_step.peak);
    const Config config = load_config("", o.overrides);
    const MemoryLayout layout = memory_layout(config, comm->size());
    const MemoryEstimate e = estimate_memory(config, planned_spec(config), layout);
    const auto stage = static_cast<std::size_t>(comm->rank() / (layout.tp * layout.cp * layout.dp));
    ASSERT_LT(stage, e.stages.size());
    predicted = static_cast<double>(e.stages[stage].total());
    const double mib = 1 << 20;
    std::printf("[plan] %-26s rank %d: measured %7.2f MiB, predicted %7.2f MiB (%+.1f%%)\n", c.name.c_str(),
                comm->rank(), measured / mib, predicted / mib, 100 * (predicted - measured) / measured);
    EXPECT_LE(std::fabs(predicted - measured), 0.10 * measured)
        << c.name << " rank " << comm->rank() << ": measured " << measured << " bytes, plan " << predicted;
  }
  runs_.world->barrier();
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string arch : {"gpt2", "llama", "bert", "mixtral"}) {
    out.push_back({arch + "_one", arch, false, {}});
    out.push_back({arch + "_one_ckpt", arch, false, {"train.activation_checkpointing=true"}});
    out.push_back({arch + "_dp2_zero1", arch, true, {"dist.zero_stage=1"}});
    out.push_back({arch + "_tp2", arch, true, {"dist.tensor_parallel_size=2"}});
    out.push_back({arch + "_pp2", arch, true, {"dist.pipeline_parallel_size=2"}});
  }
  out.push_back({"gpt2_one_bf16", "gpt2", false, {"train.precision=bf16"}});
  out.push_back({"llama_one_bf16", "llama", false, {"train.precision=bf16"}});
  // fp16's loss scaling holds more than bf16 (a reviewer measured the plan 11-33% under before it counted it).
  out.push_back({"gpt2_one_fp16", "gpt2", false, {"train.precision=fp16"}});
  out.push_back({"llama_dp2_zero1_fp16", "llama", true, {"train.precision=fp16", "dist.zero_stage=1"}});
  out.push_back({"gpt2_dp2", "gpt2", true, {}});
  out.push_back({"gpt2_dp2_zero2", "gpt2", true, {"dist.zero_stage=2"}});
  out.push_back({"gpt2_dp2_zero3", "gpt2", true, {"dist.zero_stage=3"}});
  out.push_back({"llama_dp2_zero3_ckpt", "llama", true, {"dist.zero_stage=3", "train.activation_checkpointing=true"}});
  out.push_back({"gpt2_tp2_sp", "gpt2", true, {"dist.tensor_parallel_size=2", "dist.sequence_parallel=true"}});
  out.push_back({"gpt2_pp2_gpipe", "gpt2", true, {"dist.pipeline_parallel_size=2", "dist.pipeline_schedule=gpipe"}});
  out.push_back({"llama_pp2_ckpt", "llama", true, {"dist.pipeline_parallel_size=2", "train.activation_checkpointing=true"}});
  out.push_back({"mixtral_ep2", "mixtral", true, {"dist.expert_parallel_size=2"}});
  // Context parallelism: half of each sequence per rank, the ring's buffers in each layer's backward.
  out.push_back({"gpt2_cp2", "gpt2", true, {"dist.context_parallel_size=2"}});
  out.push_back({"llama_cp2_ckpt", "llama", true,
                 {"dist.context_parallel_size=2", "train.activation_checkpointing=true"}});
  out.push_back({"gpt2_cp2_all_to_all", "gpt2", true,
                 {"dist.context_parallel_size=2", "dist.context_parallel_algorithm=all_to_all"}});
  out.push_back({"bert_cp2_zero1", "bert", true, {"dist.context_parallel_size=2", "dist.zero_stage=1"}});
  // Block-sparse attention: the layout (built once) and the gathered blocks' working buffers.
  out.push_back({"llama_one_sparse", "llama", false,
                 {"model.sparse_attention.mode=bigbird", "model.sparse_attention.block=16",
                  "model.sparse_attention.num_random_blocks=1", "model.sparse_attention.different_layout_per_head=true"}});
  // Sequences of 512, where the activations outweigh the model's states: one process, then each rank
  // holding half of every sequence.
  for (const auto& [name, cp] : {std::pair<std::string, bool>{"gpt2_one_long", false}, {"gpt2_cp2_long", true}}) {
    std::vector<std::string> layout = {"train.seq_len=512", "model.max_seq_len=512", "train.micro_batch_size=2",
                                       "train.global_batch_size=4"};
    if (cp) layout.emplace_back("dist.context_parallel_size=2");
    out.push_back({name, "gpt2", cp, layout});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, PlanMemory, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace trident::train
