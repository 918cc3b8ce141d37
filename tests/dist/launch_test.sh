#!/usr/bin/env bash
# End to end under `trident launch -n 4` with data parallelism and ZeRO-3: a
# training run of the README's kind saves a checkpoint, which then generates.
#   launch_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
export OMPI_MCA_btl=self,vader
tiny_corpus_run "$trident" launch

timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/run" --set model.n_layer=2 \
  --set model.n_head=2 --set model.d_model=32 --set model.max_seq_len=32 --set train.seq_len=32 \
  --set train.micro_batch_size=2 --set train.global_batch_size=16 --set train.steps=12 --set train.log_interval=4 \
  --set train.eval_interval=6 --set train.eval_steps=2 --set dist.zero_stage=3 "${tiny_data[@]}" \
  > "$work/train.log" 2>&1 || fail "training: $(tail -20 "$work/train.log")"
grep -q "dp=4 × tp=1 × pp=1 (4 ranks)" "$work/train.log" || fail "layout not reported: $(head -5 "$work/train.log")"
grep -q "ZeRO stage 3" "$work/train.log" || fail "ZeRO stage not reported"
grep -q "^step     12/12" "$work/train.log" || fail "no step 12: $(cat "$work/train.log")"
ls "$work/run/checkpoints/step_00000012/shard-0000"{0,1,2,3}.safetensors >/dev/null || fail "missing shard files"
out=$("$trident" generate --checkpoint "$work/run" --prompt "In the beginning" --max-new-tokens 8 --seed 1 2>&1) \
  || fail "generate: $out"
echo "ok: $(grep '^step     12/12' "$work/train.log" | cut -c1-60) ... sample: $out"
