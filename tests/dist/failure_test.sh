#!/usr/bin/env bash
# A rank that fails ends the whole job with a message naming the rank and the
# cause, within the collective timeout; no rank hangs.
#   failure_test.sh TRIDENT_BINARY MPIEXEC [FLAGS...]   (the MPI library's launcher and its flags:
#                                                     cmake/TridentMpi.cmake)
#  1. a bad data file on one rank only (MPMD: `-np 1 A : -np 1 B`, in Open MPI's and Hydra's spelling);
#  2. a rank that stops responding (SIGSTOP): its peers' collective times out;
#  3. a rank killed with SIGKILL mid-training;
#  4. a rank that never joins a mixture-of-experts dispatch (expert parallelism): the peer's all-to-all
#     times out with a line naming the MoE layer and the rank.
set -uo pipefail
trident=$1
shift
mpi=("$@")
source "$(dirname "$0")/../cli/tiny_corpus.sh"
export OMPI_MCA_btl=self,vader
# MPICH's UCX reads a peer's memory with process_vm_readv (the "cma" transport); when test 3 kills rank 1
# in the middle of such a copy, rank 0 aborts inside UCX before Hydra reports the SIGKILL, and the log
# names rank 0's abort instead of the killed rank. Shared-memory queues keep the report about rank 1.
export UCX_TLS=^cma
tiny_corpus_run "$trident" failure 'pkill -CONT -f "$work" 2>/dev/null; pkill -KILL -f "$work" 2>/dev/null'

common=(train --run-dir "$work/run" --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16
        --set model.max_seq_len=16 --set train.seq_len=16 --set train.micro_batch_size=2 "${tiny_data[@]}"
        --set train.eval_interval=0)

# signal_mid_run WHAT SIGNAL LOG ARGS...: trains on 2 ranks (with ARGS, output in LOG), sends SIGNAL to
# the last rank once the run has logged a step, and checks that the job then failed without hanging.
signal_mid_run() {
  local what=$1 signal=$2 log=$3 launcher rc pids
  shift 3
  timeout 120 "${mpi[@]}" -np 2 "$trident" "${common[@]}" --set train.steps=100000 "$@" > "$log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 100); do [[ -s $work/run/metrics.jsonl ]] && break; sleep 0.2; done
  pids=($(pgrep -f -- "--run-dir $work/run" | sort -n))
  [[ ${#pids[@]} -ge 2 ]] || fail "$what: ranks not found"
  kill "-$signal" "${pids[-1]}"
  wait $launcher
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "$what: exit code $rc (124 = hung)"
}

# 1. Bad data file on rank 1 only.
start=$SECONDS
out=$(timeout 120 "${mpi[@]}" -np 1 "$trident" "${common[@]}" --set train.steps=5 : \
      -np 1 "$trident" "${common[@]}" --set train.steps=5 --set 'data.paths=["/nonexistent/corpus"]' 2>&1)
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "bad data on one rank: exit code $rc (124 = hung)"
grep -q "trident: error: rank 1: data.paths: '/nonexistent/corpus' has no" <<<"$out" || fail "bad data message: $out"
echo "ok 1: bad data file on rank 1 ended the job in $((SECONDS - start)) s: $(grep 'trident: error' <<<"$out" | head -1)"

# 2. A stuck rank: SIGSTOP rank 1 during training; rank 0's collective times out after dist.timeout_s.
start=$SECONDS
signal_mid_run "stuck rank" STOP "$work/stuck.log" --set dist.timeout_s=5
host=$(hostname)
# Rank 0's line names the call (its sequence number on the group), the stopped rank and its host (the
# peer check: rank 1 left no note), then what rank 0 ran last (the flight recorder).
grep -qE "trident: error: rank 0: [a-z_]+ #[0-9]+ on (world|dp group \[0, 1\]) \(rank 0 of 2\) timed out after 5 s .*; rank 1 on $host never reached it \(stopped, dead or cut off" "$work/stuck.log" \
  || fail "stuck rank message: $(cat "$work/stuck.log")"
grep -qE "last collectives, oldest first" "$work/stuck.log" || fail "no flight record: $(cat "$work/stuck.log")"
grep -qE "#[0-9]+ on (world|dp group \[0, 1\]) \(rank 0 of 2\): [0-9.]+ (B|KiB|MiB), started [0-9.]+ s ago, done in [0-9.]+ ms" "$work/stuck.log" \
  || fail "flight record entries: $(cat "$work/stuck.log")"
echo "ok 2: a stuck rank ended the job in $((SECONDS - start)) s: $(grep 'trident: error' "$work/stuck.log" | head -1)"

# 3. A rank killed mid-training.
rm -rf "$work/run"
start=$SECONDS
signal_mid_run "killed rank" KILL "$work/kill.log"
grep -qiE "signal 9|killed" "$work/kill.log" || fail "killed rank message: $(cat "$work/kill.log")"
echo "ok 3: a killed rank ended the job in $((SECONDS - start)) s: $(grep -iE 'signal 9|killed' "$work/kill.log" | head -1)"

# 4. A hung all-to-all: rank 1 of a tiny Mixtral under dist.expert_parallel_size=2 stops before its first
#    dispatch (TRIDENT_TEST_STALL_MOE_DISPATCH, on that rank only); rank 0's all-to-all times out.
rm -rf "$work/run"
start=$SECONDS
moe=(--set model.arch=mixtral --set model.n_experts=4 --set model.experts_per_token=2 --set model.d_ff=32
     --set dist.expert_parallel_size=2 --set dist.timeout_s=5 --set train.steps=5)
out=$(timeout 120 "${mpi[@]}" -np 1 "$trident" "${common[@]}" "${moe[@]}" : \
      -np 1 env TRIDENT_TEST_STALL_MOE_DISPATCH=1 "$trident" "${common[@]}" "${moe[@]}" 2>&1)
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "hung all-to-all: exit code $rc (124 = hung)"
grep -qE "trident: error: rank 0: all_to_all #[0-9]+ \(moe dispatch in model\.layers\.0\.block_sparse_moe\) on ep group .*timed out after 5 s.*; rank 1 on $host never reached it" <<<"$out" \
  || fail "hung all-to-all message: $out"
echo "ok 4: a hung all-to-all ended the job in $((SECONDS - start)) s: $(grep 'trident: error' <<<"$out" | head -1)"
