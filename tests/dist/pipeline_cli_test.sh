#!/usr/bin/env bash
# End to end through the trident command with 3D parallelism: `trident launch
# -n 4` trains a 4-layer GPT with tp=2 × pp=2 (1F1B, 4 micro-batches per step,
# dropout on) and one process trains the same config unsharded; the two runs
# report the same losses, and their checkpoints generate the same greedy text.
# Pipeline misconfigurations fail before any step with one clear message.
#   pipeline_cli_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
export OMPI_MCA_btl=self,vader
tiny_corpus_run "$trident" pp

common=(--set model.n_layer=4 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
  --set train.seq_len=32 "${tiny_data[@]}" --set model.dropout=0.1
  --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=12 --set train.log_interval=4
  --set train.eval_interval=6 --set train.eval_steps=2)
timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/pp" "${common[@]}" \
  --set dist.tensor_parallel_size=2 --set dist.pipeline_parallel_size=2 > "$work/pp.log" 2>&1 \
  || fail "training with tp=2 × pp=2: $(tail -20 "$work/pp.log")"
grep -q "dp=1 × tp=2 × pp=2 (4 ranks)" "$work/pp.log" || fail "layout not reported: $(head -5 "$work/pp.log")"
grep -q "4 micro-batches through the 1f1b pipeline schedule" "$work/pp.log" \
  || fail "schedule not reported: $(grep trident: "$work/pp.log")"
timeout 300 "$trident" train --run-dir "$work/one" "${common[@]}" > "$work/one.log" 2>&1 \
  || fail "training on one process: $(tail -20 "$work/one.log")"
# Loss and validation loss lines agree to the printed digits (losses, tiny_corpus.sh).
[ "$(losses "$work/pp.log")" = "$(losses "$work/one.log")" ] \
  || fail "tp=2 × pp=2 losses differ from one process:$(diff <(losses "$work/pp.log") <(losses "$work/one.log"))"
[ "$(losses "$work/pp.log" | wc -l)" -ge 5 ] || fail "too few loss lines: $(losses "$work/pp.log")"

gen=(generate --prompt "line 7 of" --max-new-tokens 12 --greedy)
a=$("$trident" "${gen[@]}" --checkpoint "$work/pp" 2>&1) || fail "generate from the pipeline checkpoint: $a"
b=$("$trident" "${gen[@]}" --checkpoint "$work/one" 2>&1) || fail "generate from the single-process checkpoint: $b"
[ "$a" = "$b" ] || fail "the pipeline checkpoint generated '$a', the single-process one '$b'"

# Each misconfiguration: non-zero exit, the expected message, no training step.
expect_error() {
  local what=$1 message=$2; shift 2
  local out
  out=$(timeout 120 "$trident" launch -n 2 -- "$trident" train --run-dir "$work/bad" "${common[@]}" \
    --set dist.pipeline_parallel_size=2 "$@" 2>&1) && fail "$what: training succeeded"
  echo "$out" | grep -qF -- "$message" || fail "$what: unclear error: $out"
  echo "$out" | grep -q "^step " && fail "$what: steps ran before the error: $out"
  return 0
}
expect_error "uneven layers" "3 layers do not divide evenly over 2 pipeline stages; give the layers of each stage in dist.pipeline_num_layers (e.g. [2, 1])" \
  --set model.n_layer=3
expect_error "layer counts" "dist.pipeline_num_layers has 3 entries but there are 2 pipeline stages" \
  --set "dist.pipeline_num_layers=[1, 1, 2]"
expect_error "interleaved micro-batches" \
  "the interleaved pipeline schedule needs the number of micro-batches per step (3) to be a multiple of dist.pipeline_parallel_size (2)" \
  --set dist.pipeline_schedule=\"interleaved\" --set dist.virtual_pipeline_size=2 --set train.global_batch_size=6
expect_error "ZeRO-2" "dist.zero_stage=2 with dist.pipeline_parallel_size=2: ZeRO-2/3 partition gradients" \
  --set dist.zero_stage=2
echo "ok: tp=2 × pp=2 follows one process ($(losses "$work/pp.log" | tail -1)); greedy text: $a"
