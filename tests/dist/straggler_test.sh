#!/usr/bin/env bash
# The straggler report: on 4 ranks (dp=4), rank 2 made slow on purpose (TRIDENT_TEST_SLOW_RANK sleeps
# in every step) is named with its host in the progress line of every logged step and in
# metrics.jsonl; with log.straggler_threshold out of reach the line stays quiet while metrics.jsonl
# still records the slowest rank.
#   straggler_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$1
source "$(dirname "$0")/../cli/tiny_corpus.sh"
export OMPI_MCA_btl=self,vader
tiny_corpus_run "$trident" straggler

common=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
  --set train.seq_len=32 "${tiny_data[@]}" --set train.micro_batch_size=2
  --set train.steps=6 --set train.log_interval=2 --set train.eval_interval=0)
host=$(hostname)

TRIDENT_TEST_SLOW_RANK=2:400 timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/slow" \
  "${common[@]}" > "$work/slow.log" 2>&1 || fail "training with a slow rank: $(tail -20 "$work/slow.log")"
for step in 2 4 6; do
  grep -E "^step +$step/6 .*\| straggler rank 2 on $host: [0-9]+ ms, [0-9.]+x the median" "$work/slow.log" >/dev/null \
    || fail "step $step does not name rank 2 as the straggler: $(grep "^step" "$work/slow.log")"
done
python3 - "$work/slow/metrics.jsonl" "$host" <<'PY' || fail "metrics.jsonl: $(cat "$work/slow/metrics.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert [r["step"] for r in rows] == [2, 4, 6], rows
for r in rows:
    assert r["straggler_rank"] == 2 and r["straggler_host"] == sys.argv[2], r
    assert r["straggler_ratio"] >= 1.5 and r["straggler_work_ms"] >= 400, r
    assert r["median_work_ms"] < r["straggler_work_ms"], r
PY

timeout 300 "$trident" launch -n 4 -- "$trident" train --run-dir "$work/even" "${common[@]}" \
  --set log.straggler_threshold=1000 > "$work/even.log" 2>&1 || fail "training: $(tail -20 "$work/even.log")"
! grep -q "| straggler rank" "$work/even.log" || fail "a straggler named under an unreachable threshold: $(grep "| straggler" "$work/even.log")"
grep -q '"straggler_rank"' "$work/even/metrics.jsonl" || fail "metrics.jsonl lacks the slowest rank"

bad=$("$trident" train --run-dir "$work/bad" "${common[@]}" --set log.straggler_threshold=0.5 2>&1) \
  && fail "log.straggler_threshold=0.5 was accepted"
grep -q "log.straggler_threshold" <<<"$bad" || fail "bad threshold error: $bad"
echo "straggler test passed"
