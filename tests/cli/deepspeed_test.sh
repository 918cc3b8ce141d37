#!/usr/bin/env bash
# A DeepSpeed config drives a real run (docs/deepspeed.md): `trident train --deepspeed ds.json` under
# `trident launch -n 2` on the tiny corpus, with micro-batch 2 × accumulation 3 and ZeRO-1, prints its
# mapping, and the mapped values take effect: the run's description (global batch 12 = 2 × 3 × 2
# data-parallel ranks, ZeRO stage 1), metrics.jsonl not thinned by steps_per_print (DeepSpeed's own print), and the
# resolved config.toml (which stands alone: the DeepSpeed file is recorded, not re-read).
#   deepspeed_test.sh TRIDENT_BINARY SRC_DIR
set -uo pipefail
T=$(realpath "$1")
SRC=$(realpath "$2")
source "$SRC/tests/cli/tiny_corpus.sh"
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 0; }
export TRIDENT_NUM_THREADS=1
W=$(mktemp -d /tmp/trident-deepspeed.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W" || fail "cd $W"
make_tiny_corpus "$T" "$W"
cat > cfg.toml <<TOML
[model]
arch = "gpt2"
n_layer = 2
n_head = 2
d_model = 16
max_seq_len = 16
[data]
tokenizer = "$W/tok.json"
paths = ["$W/c"]
split = "90,10,0"
[train]
seq_len = 16
micro_batch_size = 8
steps = 4
log_interval = 1
eval_interval = 0
peak_gflops = 1
[log]
progress = "off"
TOML
cat > ds.json <<'JSON'
{
  // per rank: 2 samples × 3 micro-batches per optimizer step
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 3,
  /* ZeRO-1: the optimizer state partitioned */
  "zero_optimization": { "stage": 1, "reduce_bucket_size": 5e8 },
  "optimizer": { "type": "AdamW", "params": { "lr": 2e-3, "weight_decay": 0.01 } },
  "gradient_clipping": 0.5,
  "steps_per_print": 2
}
JSON
"$T" launch -n 2 -- "$T" train cfg.toml --deepspeed ds.json --run-dir run >out.log 2>err.log \
  || fail "training exited $?: $(cat err.log)"
expect_line() { grep -qF -- "$1" "$2" || fail "$2 has no line '$1': $(cat "$2")"; }
expect_line "ds.json: train_micro_batch_size_per_gpu 2 → train.micro_batch_size = 2" out.log
expect_line "ds.json: train_batch_size (derived) 12 → train.global_batch_size = 12" out.log
expect_line "ds.json: zero_optimization.stage 1 → dist.zero_stage = 1" out.log
expect_line "ds.json: zero_optimization.reduce_bucket_size 500000000.0 ignored" out.log
expect_line "global batch 12 × 16 tokens (micro-batch 2 × 3 accumulation × 2 data-parallel), ZeRO stage 1" out.log
echo "ok: mapping printed, batch and ZeRO stage in effect"
# steps_per_print is DeepSpeed's own print: metrics.jsonl keeps every train.log_interval (1) step.
steps=$(grep -o '"step":[0-9]*' run/metrics.jsonl | grep -v '"step":0' | tr '\n' ' ')
[[ $steps == '"step":1 "step":2 "step":3 "step":4 ' ]] || fail "metrics.jsonl steps: '$steps' (expected 1 to 4)"
expect_line "ds.json: steps_per_print 2 ignored (DeepSpeed's own progress print" out.log
echo "ok: steps_per_print does not thin metrics.jsonl"
for line in "micro_batch_size = 2" "global_batch_size = 12" "zero_stage = 1" "clip_grad = 0.5" "lr = 0.002" \
            "weight_decay = 0.01" "deepspeed_config = ''"; do
  expect_line "$line" run/config.toml
done
expect_line "# DeepSpeed config 'ds.json' applied" run/config.toml
echo "ok: resolved config.toml"
# fp16: the loss scaler's options take effect (initial_scale_power 10, loss_scale_window 3: the scale
# doubles after every 3 good steps).
cat > fp16.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3}}
JSON
"$T" train cfg.toml --deepspeed fp16.json --set train.steps=6 --run-dir fp16 >fp16.log 2>&1 || fail "fp16 run: $(cat fp16.log)"
scales=$(grep -o '"loss_scale":[0-9.]*' fp16/metrics.jsonl | tr '\n' ' ')
[[ $scales == '"loss_scale":1024.0 "loss_scale":1024.0 "loss_scale":2048.0 "loss_scale":2048.0 "loss_scale":2048.0 "loss_scale":4096.0 ' ]] \
  || fail "fp16 loss scales: '$scales'"
echo "ok: fp16 loss scaler from the DeepSpeed config"
# gradient_allreduce_op "sum" (issue 47): the 2 ranks' gradients added, twice the mean's norm at step 1
# (the same data and weights as the first run's step 1).
sed 's/"steps_per_print": 2/"steps_per_print": 2, "gradient_allreduce_op": "sum"/' ds.json > sum.json
"$T" launch -n 2 -- "$T" train cfg.toml --deepspeed sum.json --set train.steps=1 --run-dir sum >sum.log 2>&1 \
  || fail "sum run: $(cat sum.log)"
norm() { grep '"step":1,' "$1/metrics.jsonl" | grep -o '"grad_norm":[0-9.e+-]*' | cut -d: -f2; }
awk -v m="$(norm run)" -v s="$(norm sum)" 'BEGIN { exit !(m > 0 && (s / m - 2) ^ 2 < 1e-10) }' \
  || fail "grad_norm with sum $(norm sum), with mean $(norm run): expected twice"
echo "ok: gradient_allreduce_op sum doubles the gradient on 2 ranks"
# OneCycle cycles Adam's beta1 (issue 47): steps 1 and 2 agree with and without the cycling (Adam's first
# step does not depend on the betas), step 3 does not.
cat > cycle.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-3,
 "cycle_max_lr": 1e-2, "cycle_first_step_size": 2, "cycle_min_mom": 0.5, "cycle_max_mom": 0.9}}}
JSON
"$T" train cfg.toml --deepspeed cycle.json --set train.steps=3 --run-dir cycled >cycled.log 2>&1 || fail "$(cat cycled.log)"
"$T" train cfg.toml --deepspeed cycle.json --set train.steps=3 --set schedule.cycle_momentum=false --run-dir flat \
  >flat.log 2>&1 || fail "$(cat flat.log)"
losses_of() { grep -o '"loss":[0-9.e+-]*' "$1/metrics.jsonl" | tr '\n' ' '; }
read -r -a a <<<"$(losses_of cycled)"
read -r -a b <<<"$(losses_of flat)"
[[ ${a[0]} == "${b[0]}" && ${a[1]} == "${b[1]}" && ${a[2]} != "${b[2]}" ]] \
  || fail "losses with the momentum cycled '${a[*]}', without '${b[*]}'"
expect_line "beta1 cycled 0.9 → 0.5, beta2 0.99" cycled.log
echo "ok: OneCycle cycles the momentum"
# bf16.check_grad_overflow (issue 47; DeepSpeed's default true under ZeRO 1 and 2): a step whose gradients
# are not finite is skipped and the run goes on; with it false the run stops at the first non-finite loss.
# An lr of 1e35 overflows the bf16 logits from step 2.
echo '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}, "bf16": {"enabled": true}}' > bf16.json
"$T" train cfg.toml --deepspeed bf16.json --set train.steps=3 --set optim.lr=1e35 --run-dir bf16 >bf16.log 2>&1 \
  || fail "bf16 run with check_grad_overflow: $(tail -3 bf16.log)"
[[ $(grep -c '"skipped":true' bf16/metrics.jsonl) == 2 ]] || fail "bf16 skipped steps: $(cat bf16/metrics.jsonl)"
sed 's/"enabled": true}/"enabled": true, "check_grad_overflow": false}/' bf16.json > bf16_nocheck.json
"$T" train cfg.toml --deepspeed bf16_nocheck.json --set train.steps=3 --set optim.lr=1e35 --run-dir nocheck \
  >nocheck.log 2>&1 && fail "a diverging bf16 run without check_grad_overflow finished"
grep -q "training diverged at step 2" nocheck.log || fail "$(tail -3 nocheck.log)"
echo "ok: bf16 check_grad_overflow skips non-finite steps"
