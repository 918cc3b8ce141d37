#!/usr/bin/env bash
# Preemption and requeue under the Slurm of scripts/cluster_local.sh's 2-host cluster: a batch job
# (#SBATCH --nodes=2 --ntasks-per-node=2 --requeue --open-mode=append, then `srun --mpi=pmix trident
# train`, dp2 × tp2, a checkpoint every 10 steps, no resume option) is stopped twice mid-run:
#  1. `scancel --signal=TERM` (what a time limit's `#SBATCH --signal=TERM@60` or an operator sends): the
#     ranks save a checkpoint and exit 75, srun and so the script exit 75, and the cluster's
#     `RequeueExit=75` puts the job back in the queue;
#  2. `scontrol requeue` (what preemption with PreemptMode=REQUEUE does): Slurm sends SIGTERM, the ranks
#     save and exit 75, and the job goes back in the queue.
# Each time the job starts again by itself (SLURM_RESTART_COUNT=1, then 2), resumes from the checkpoint
# the signal wrote, and the job's output, every start appended, logs exactly the per-step loss,
# learning rate and gradient norm of the same job run uninterrupted; it ends COMPLETED with exit code 0
# and leaves no trident process on either host.
# Slurm 22.05 holds a requeued job back for about 2 minutes (its EligibleTime); the test moves its start
# time to now (`scontrol update JobId=J StartTime=now`) to keep to a minute.
# Skips (77) where the cluster cannot be made or Slurm is not installed.
#   cluster_requeue_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/../cli/tiny_corpus.sh"
source "$(dirname "$0")/cluster_lib.sh"
# stop_cluster ends a job still running (its steps' processes run in the hosts' namespaces).
tiny_corpus_run "$trident" cluster-requeue stop_cluster
start_cluster
require_slurm
# A cluster brought up before RequeueExit=75 was in its slurm.conf (up rewrote the file) reads it again.
if ! on_host node1 scontrol show config 2>/dev/null | grep -qE "^RequeueExit += 75$"; then
  on_host node1 scontrol reconfigure
  sleep 2
fi
on_host node1 scontrol show config 2>/dev/null | grep -qE "^RequeueExit += 75$" \
  || fail "the cluster's Slurm does not requeue a job that exits 75 (RequeueExit): $(on_host node1 scontrol show config | grep -i requeue)"

steps=200
common=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
  --set train.seq_len=32 "${tiny_data[@]}" --set model.dropout=0.1
  --set train.micro_batch_size=2 --set train.global_batch_size=8 --set "train.steps=$steps" --set train.log_interval=1
  --set train.eval_interval=0 --set checkpoint.interval=10 --set dist.tensor_parallel_size=2 --set dist.timeout_s=10)
# The job script: its run directory is its argument. Idle ranks yield the CPU (as trident launch has
# them do): 4 ranks share this machine's cores.
# shellcheck disable=SC2016 # expanded by the job
{
  echo '#!/bin/bash'
  echo '#SBATCH --job-name=trident-requeue'
  echo '#SBATCH --nodes=2 --ntasks-per-node=2'
  echo '#SBATCH --requeue --open-mode=append'
  echo '#SBATCH --time=5'
  echo 'export OMPI_MCA_mpi_yield_when_idle=1'
  echo 'echo "job start: SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"'
  printf 'srun --mpi=pmix %q train --run-dir "$1"' "$trident"
  printf ' %q' "${common[@]}"
  echo
} > "$work/job.sh"
steps_of() { grep -oE "^step +[0-9]+/[0-9]+ \| loss [0-9.]+ \| lr [0-9.e+-]+ \| grad norm [0-9.]+" "$1"; }
# job_field NAME: the field NAME of the job's `scontrol show job` (JobState, Reason, Restarts, ExitCode, ...).
job_field() { on_host node1 scontrol -o show job "$jid" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p"; }
newest() { local c; c=$(cat "$work/run/checkpoints/latest" 2>/dev/null) && echo $((10#${c#step_})); }

# The reference: the same job, uninterrupted.
on_host node1 timeout 180 sbatch --wait --output="$work/ref.out" "$work/job.sh" "$work/ref" > "$work/sbatch.log" 2>&1 \
  || fail "the uninterrupted job: $(cat "$work/sbatch.log"; tail -20 "$work/ref.out" 2>/dev/null)"
[ "$(steps_of "$work/ref.out" | wc -l)" -eq $steps ] || fail "the uninterrupted job logged $(steps_of "$work/ref.out" | wc -l) of $steps steps"
echo "the uninterrupted job: $(steps_of "$work/ref.out" | tail -1) [$SECONDS s]"

jid=$(on_host node1 sbatch --parsable --output="$work/job.out" "$work/job.sh" "$work/run" 2>"$work/sbatch.log") \
  || fail "sbatch: $(cat "$work/sbatch.log")"

# interrupt N HOW...: once the job's start N-1 has saved a checkpoint of its own, stop it with HOW and wait
# until Slurm has requeued it (Restarts=N), then let it start again at once.
interrupt() {
  local n=$1 from state
  shift
  from=$(newest || echo 0)
  for _ in $(seq 1 1200); do
    [[ $(job_field JobState) == RUNNING && $(newest || echo 0) -gt $from ]] && break
    sleep 0.1
  done
  [[ $(job_field JobState) == RUNNING && $(newest || echo 0) -gt $from ]] \
    || fail "start $n: no new checkpoint past step $from (job $(job_field JobState)): $(tail -5 "$work/job.out")"
  local t0=$SECONDS
  on_host node1 "$@" || fail "$*"
  # Requeued: pending until its EligibleTime (reason BeginTime; NonZeroExitCode first, for a moment,
  # after RequeueExit), or running already.
  for _ in $(seq 1 300); do
    state=$(job_field JobState)
    # RUNNING with reason NonZeroExitCode is the moment after the exit, before the requeue: not started.
    [[ $(job_field Restarts) == "$n" && (($state == PENDING && $(job_field Reason) == BeginTime) ||
       ($state == RUNNING && $(job_field Reason) != NonZeroExitCode)) ]] && break
    sleep 0.1
  done
  [[ $(job_field Restarts) == "$n" ]] || fail "after '$*': the job was not requeued: $(on_host node1 scontrol show job "$jid")"
  echo "'$*' at checkpoint step $(newest): requeued in $((SECONDS - t0)) s (state $state, reason $(job_field Reason), exit code $(job_field ExitCode), eligible $(job_field EligibleTime), now $(date +%FT%T))"
  if [[ $state == PENDING ]]; then
    on_host node1 scontrol update JobId="$jid" StartTime=now || fail "scontrol update StartTime=now"
  fi
}
interrupt 1 scancel --signal=TERM "$jid"
interrupt 2 scontrol requeue "$jid"
for _ in $(seq 1 1200); do
  state=$(job_field JobState)
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
  sleep 0.1
done
[[ $state == COMPLETED && $(job_field ExitCode) == 0:0 ]] \
  || fail "the job ended $state, exit code $(job_field ExitCode): $(tail -20 "$work/job.out")"
echo "the job: COMPLETED after $(job_field Restarts) restarts [$SECONDS s]"
grep -E "^(job start|Slurm requeued|resumed from|stopped by signal|trident: interrupted|srun: error|slurmstepd)" "$work/job.out" \
  | sed 's/^/  | /'

# Each start: the restart count, a resume from the checkpoint the signal before it wrote, and a stop
# that saved and exited 75 on every rank.
[ "$(grep -c '^job start: ' "$work/job.out")" -eq 3 ] || fail "expected 3 starts: $(grep '^job start' "$work/job.out")"
mapfile -t stops < <(grep -oE "^trident: interrupted at step [0-9]+" "$work/job.out" | grep -oE "[0-9]+$")
[ ${#stops[@]} -eq 2 ] || fail "expected 2 stops by signal: $(grep -E 'stopped|interrupted' "$work/job.out")"
[ "$(grep -cE "exit status 75: the run did not finish" "$work/job.out")" -eq 2 ] || fail "the stops did not exit 75"
for tasks in 0-1 2-3; do
  [ "$(grep -cE "^srun: error: node[12]: tasks $tasks: Exited with exit code 75" "$work/job.out")" -eq 2 ] \
    || fail "tasks $tasks did not exit 75 twice: $(grep '^srun' "$work/job.out")"
done
for n in 1 2; do
  step=${stops[$((n - 1))]}
  grep -q "^Slurm requeued this job (SLURM_RESTART_COUNT=$n): resuming" "$work/job.out" || fail "start $((n + 1)): no requeue message"
  grep -qE "^resumed from .*step_0*$step at step $step " "$work/job.out" \
    || fail "start $((n + 1)) did not resume from step $step: $(grep -E '^resumed|skipping' "$work/job.out")"
done
! grep -q "skipping a checkpoint" "$work/job.out" || fail "a checkpoint did not verify: $(grep skipping "$work/job.out")"
# The loss curve, every start together, is the uninterrupted job's.
[ "$(steps_of "$work/job.out")" = "$(steps_of "$work/ref.out")" ] \
  || fail "the requeued job's steps differ from the uninterrupted job's:$(diff <(steps_of "$work/job.out") <(steps_of "$work/ref.out") | head -10)"
echo "the requeued job stopped at steps ${stops[*]}, resumed from each, and logged the uninterrupted job's $steps steps"
left=""
for _ in $(seq 1 100); do
  left=$(for h in node1 node2; do ip netns pids "trident-$h" 2>/dev/null | while read -r p; do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == trident ]] && echo "$h: $p"; done; done)
  [[ -z $left ]] && break
  sleep 0.1
done
[[ -z $left ]] || fail "trident processes left behind: $left"
echo "ok: scancel --signal=TERM and scontrol requeue: checkpoint, exit 75, requeue, resume, the same loss curve [$SECONDS s]"
