#!/usr/bin/env bash
# Real DeepSpeed configs (tests/train/fixtures/deepspeed_corpus, SOURCES.md there names each file's
# repository and path) drive a 2-step run on 2 ranks each, as DeepSpeed would run them: every one runs
# (trident refuses only what current DeepSpeed refuses too: deepspeed_refused/ holds one, a batch of 1
# for 2 ranks), prints its resolved learning rate and clipping, and logs both steps in metrics.jsonl.
# Spot checks: a file without a scheduler trains at a constant rate, DeepSpeed's WarmupLR with its
# defaults starts at 0 (log warmup), OneCycle at cycle_min_lr, and Adam's bias_correction false reaches
# the resolved config.toml.
#   deepspeed_corpus_test.sh TRIDENT_BINARY SRC_DIR
set -uo pipefail
T=$(realpath "$1")
SRC=$(realpath "$2")
source "$SRC/tests/cli/tiny_corpus.sh"
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 0; }
sanitizer_build "$T" && { echo "skipped: a sanitizer build does not run mpirun (tiny_corpus.sh)"; exit 0; }
tiny_corpus_run "$T" deepspeed-corpus
cd "$work" || fail "cd $work"
# A tiny model; the TOML's lr and warmup are what a Hugging Face "auto" leaves to the trainer.
cat > cfg.toml <<TOML
[model]
n_layer = 1
n_head = 2
d_model = 16
max_seq_len = 16
[train]
seq_len = 16
micro_batch_size = 2
steps = 2
log_interval = 1
eval_interval = 0
[optim]
lr = 0.001
TOML
corpus="$SRC/tests/train/fixtures/deepspeed_corpus"
n=0
for ds in "$corpus"/*.json; do
  name=$(basename "$ds" .json)
  # A Hugging Face "auto" warmup takes trident's schedule.warmup_steps (as the Trainer fills it in), which
  # DeepSpeed needs positive.
  auto=()
  grep -q '"warmup_num_steps": "auto"' "$ds" && auto=(--set schedule.warmup_steps=2)
  "$T" launch -n 2 -- "$T" train cfg.toml "${tiny_data[@]}" "${auto[@]}" --deepspeed "$ds" --run-dir "run_$name" \
    >"$name.log" 2>&1 || fail "$name: exited $?: $(tail -5 "$name.log")"
  grep -q ": resolved: learning rate " "$name.log" || fail "$name: no resolved line: $(cat "$name.log")"
  steps=$(grep -o '"step":[12],' "run_$name/metrics.jsonl" | tr -d '\n')
  [[ $steps == '"step":1,"step":2,' ]] || fail "$name: metrics.jsonl steps '$steps'"
  n=$((n + 1))
done
((n >= 12)) || fail "only $n configs in $corpus"
echo "ok: $n DeepSpeed configs ran 2 steps on 2 ranks"
lrs() { grep -o '"lr":[0-9.e+-]*' "run_$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
[[ $(lrs ds_megatron_gpt2_bs4_zero1) == "0.001 0.001 " ]] || fail "no scheduler: lr $(lrs ds_megatron_gpt2_bs4_zero1)"
grep -qF "learning rate constant 0.001; gradients clipped to global norm 1" ds_megatron_gpt2_bs4_zero1.log \
  || fail "no scheduler: $(grep resolved ds_megatron_gpt2_bs4_zero1.log)"
[[ $(lrs ds_unit_lr_before_train_warmuplr) == "0.0 0.0 " ]] || fail "WarmupLR: lr $(lrs ds_unit_lr_before_train_warmuplr)"
[[ $(lrs ds_unit_pipeline_checkpoint_onecycle) == "0.0001 0.0001 " ]] \
  || fail "OneCycle: lr $(lrs ds_unit_pipeline_checkpoint_onecycle)"
grep -q "^bias_correction = false" run_ds_bingbertsquad_bsz24_fp16/config.toml || fail "bias_correction not resolved"
echo "ok: constant rate without a scheduler, WarmupLR and OneCycle start values, bias_correction"
# DeepSpeed itself refuses this one on 2 ranks (a batch of 1); so does trident, with DeepSpeed's message.
"$T" launch -n 2 -- "$T" train cfg.toml "${tiny_data[@]}" \
  --deepspeed "$SRC/tests/train/fixtures/deepspeed_refused/ds_accelerator_config.json" --run-dir refused \
  >refused.log 2>&1 && fail "a batch of 1 on 2 ranks ran"
grep -qF "train_batch_size 1 != train_micro_batch_size_per_gpu 0" refused.log || fail "refused: $(cat refused.log)"
echo "ok: the config DeepSpeed refuses on 2 ranks is refused"
