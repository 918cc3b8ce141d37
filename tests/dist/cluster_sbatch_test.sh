#!/usr/bin/env bash
# A multi-node sbatch script in the seed's shape (#SBATCH --nodes=2 --ntasks-per-node=2, then
# `srun --mpi=pmix trident train ...`) submitted on scripts/cluster_local.sh's 2-host cluster with
# `sbatch --wait`: its first step (`srun --mpi=pmix trident info`) shows ranks 0,1 on node1 and
# 2,3 on node2, and the training step runs dp2 × tp2 (tensor parallel inside each host, data
# parallel across) with the same training and validation losses as one process.
# Skips (77) where the cluster cannot be made or Slurm is not installed.
#   cluster_sbatch_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/../cli/tiny_corpus.sh"
source "$(dirname "$0")/cluster_lib.sh"
# stop_cluster ends a job still running (its steps' processes run in the hosts' namespaces).
tiny_corpus_run "$trident" cluster-sbatch stop_cluster
start_cluster
require_slurm

train_reference "$trident"

# The job script; the environment (TRIDENT_NUM_THREADS, ...) travels with the job (sbatch --export=ALL).
{
  echo '#!/bin/bash'
  echo '#SBATCH --job-name=trident-2nodes'
  echo '#SBATCH --nodes=2 --ntasks-per-node=2'
  echo '#SBATCH --time=5'
  echo 'set -e'
  echo "srun --mpi=pmix $trident info | grep '^rank:'"
  printf 'srun --mpi=pmix %s train --run-dir %q' "$trident" "$work/job"
  printf ' %q' "${common[@]}" --set dist.tensor_parallel_size=2
  echo
} > "$work/job.sh"
on_host node1 timeout 180 sbatch --wait --output="$work/job.out" "$work/job.sh" > "$work/sbatch.log" 2>&1 \
  || fail "sbatch: $(cat "$work/sbatch.log"; tail -20 "$work/job.out" 2>/dev/null)"
ranks=$(grep '^rank:' "$work/job.out" | sort -t: -k2 -n)
[ "$ranks" = "$(printf 'rank:            %s\n' "0 of 4 on host node1, local rank 0 of 2" "1 of 4 on host node1, local rank 1 of 2" \
  "2 of 4 on host node2, local rank 0 of 2" "3 of 4 on host node2, local rank 1 of 2")" ] \
  || fail "the job's ranks are not 2 per host in order: $ranks"
grep -q "dp=2 × tp=2 × pp=1 (4 ranks)" "$work/job.out" || fail "the job did not train as dp2 × tp2: $(grep trident: "$work/job.out")"
[ "$(losses "$work/job.out")" = "$(losses "$work/one.log")" ] \
  || fail "the 2-node job's losses differ from one process:$(diff <(losses "$work/job.out") <(losses "$work/one.log"))"
echo "ok: sbatch --nodes=2 --ntasks-per-node=2 with srun --mpi=pmix trains dp2 × tp2 like one process ($(losses "$work/job.out" | tail -2 | head -1))"
