#!/usr/bin/env bash
# The lines a run prints about itself: MFU never reads above 100% (a run whose matmul peak,
# train.peak_gflops, is below the rate its steps reach, as a peak measured in a busy moment would be,
# divides by that rate instead, in the log line and in metrics.jsonl); the run ends with one line giving
# its wall time, the tokens seen (the real ones, padding left out) and the final losses; a run asked to evaluate
# (train.eval_interval) without validation data says in one line that no evaluation will run, and why (issue 48, item 1).
#   run_log_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus_run "$trident" run_log

"$trident" train --run-dir "$work/r" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 \
  --set model.max_seq_len=16 "${tiny_data[@]}" --set train.seq_len=16 --set train.micro_batch_size=2 \
  --set train.steps=3 --set train.log_interval=1 --set train.eval_interval=3 --set train.peak_gflops=0.0001 \
  > "$work/r.log" 2>&1 || fail "training: $(tail -5 "$work/r.log")"
mfus=$(grep -oE "MFU [0-9.]+%" "$work/r.log" | grep -oE "[0-9.]+")
[[ -n $mfus ]] || fail "no MFU in the log: $(tail -5 "$work/r.log")"
for m in $mfus; do
  awk -v m="$m" 'BEGIN { exit !(m <= 100.0) }' || fail "the log prints MFU $m%: $(grep MFU "$work/r.log")"
done
python3 - "$work/r/metrics.jsonl" <<'PY' || fail "metrics.jsonl holds an MFU above 1"
import json, sys
mfu = [json.loads(line)["mfu"] for line in open(sys.argv[1]) if '"mfu"' in line]
assert mfu and all(0 < m <= 1 for m in mfu), mfu
PY
# A fresh run: the tokens of this run are those since step 0; the evaluation at step 3 gives the final val loss.
end=$(grep "^end of run: " "$work/r.log") || fail "no end-of-run line: $(tail -3 "$work/r.log")"
[[ $end =~ ^end\ of\ run:\ steps\ 1-3\ in\ [0-9]+s\ \([0-9.]+\ min\),\ ([0-9]+)\ tokens\ \(([0-9]+)\ since\ step\ 0\)\ \|\ final\ loss\ [0-9.]+\ \|\ final\ val\ loss\ [0-9.]+$ ]] \
  && [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" && $((BASH_REMATCH[1] % (3 * 16))) == 0 ]] \
  || fail "the end-of-run line: $end"
echo "$end"
# One padded line per sample (data.packing = false, lines of about 20 tokens padded to 32): the tokens
# counted are the real ones, fewer than the batches compute, and a resume counts on from the checkpoint's.
padded=(--set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 --set model.max_seq_len=32
  "${tiny_data[@]}" --set train.seq_len=32 --set train.micro_batch_size=2 --set train.eval_interval=0
  --set data.packing=false)
"$trident" train --run-dir "$work/p" "${padded[@]}" --set train.steps=2 > "$work/p1.log" 2>&1 \
  || fail "padded training: $(tail -5 "$work/p1.log")"
"$trident" train --run-dir "$work/p" "${padded[@]}" --set train.steps=4 --resume > "$work/p2.log" 2>&1 \
  || fail "padded resume: $(tail -5 "$work/p2.log")"
tokens() { grep "^end of run: " "$1" | sed -E 's/.*, ([0-9]+) tokens \(([0-9]+) since step 0\).*/\1 \2/'; }
read -r t1 s1 < <(tokens "$work/p1.log")
read -r t2 s2 < <(tokens "$work/p2.log")
[[ -n $t1 && -n $t2 && $t1 == "$s1" && $s2 == $((t1 + t2)) && $t1 -lt $((2 * 2 * 32)) && $t2 -lt $((2 * 2 * 32)) ]] \
  || fail "padded runs' tokens: $(grep -h '^end of run' "$work/p1.log" "$work/p2.log")"
echo "ok: padded runs count $t1 and $t2 real tokens of $((2 * 2 * 32)) computed, $s2 since step 0"
echo "ok: with a peak of 0.1 MFLOP/s the MFU reads $(echo $mfus | tr ' ' ,)%"

# No validation data (data.split '100,0,0', no data.valid_paths) under train.eval_interval=2: one line says so.
"$trident" train --run-dir "$work/nv" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 \
  --set model.max_seq_len=16 "${tiny_data[@]}" --set data.split=\"100,0,0\" --set train.seq_len=16 \
  --set train.micro_batch_size=2 --set train.steps=2 --set train.eval_interval=2 > "$work/nv.log" 2>&1 \
  || fail "training without validation data: $(tail -5 "$work/nv.log")"
[[ $(grep -c "no evaluation" "$work/nv.log") -eq 1 ]] \
  && grep -q "^no evaluation will run: train.eval_interval=2 asks for one, but the run has no validation data \
(data.split '100,0,0' leaves no validation documents and data.valid_paths is empty)" "$work/nv.log" \
  || fail "no single line saying that no evaluation will run: $(cat "$work/nv.log")"
! grep -q "^eval at step" "$work/nv.log" || fail "an evaluation ran without validation data"
echo "ok: $(grep "no evaluation" "$work/nv.log")"
