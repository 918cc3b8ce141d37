#!/usr/bin/env bash
# `trident info` on every rank of a 2-host job on scripts/cluster_local.sh's cluster says which
# rank of the one MPI job it is, on which host, and its node-local rank (the index by which a rank
# takes its GPU): ranks 0,1 on node1 and 2,3 on node2 with local ranks 0,1 on each, under
#   srun --mpi=pmix -N2 -n4                    (Slurm)
#   trident launch --hostfile F -n 4           (mpirun, from node1)
# and srun without an MPI plugin is named as 4 tasks that are not one MPI job.
# Skips (77) where the cluster cannot be made; the srun parts skip without Slurm.
#   cluster_info_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/../cli/tiny_corpus.sh"
source "$(dirname "$0")/cluster_lib.sh"
work_dir cluster-info stop_cluster
start_cluster

want=$(printf 'rank:            %s\n' "0 of 4 on host node1, local rank 0 of 2" "1 of 4 on host node1, local rank 1 of 2" \
  "2 of 4 on host node2, local rank 0 of 2" "3 of 4 on host node2, local rank 1 of 2")
ranks() { grep '^rank:' "$1" | sort -t: -k2 -n; }
# two_per_host OUT WHAT: OUT, trident info's lines from every rank of WHAT, shows want's ranks, 2 per node.
two_per_host() {
  [ "$(ranks "$1")" = "$want" ] || fail "$2: $(ranks "$1")"
  [ "$(grep -c '^cpu threads: .* 2 rank(s) on this node)$' "$1")" -eq 4 ] \
    || fail "$2: not 2 ranks per node: $(grep '^cpu threads' "$1")"
  echo "ok: $2 trident info:"
  ranks "$1"
}

printf 'node1 slots=2\nnode2 slots=2\n' > "$work/hosts"
on_host node1 timeout 60 "$trident" launch --hostfile "$work/hosts" -n 4 -- "$trident" info > "$work/launch.out" 2>&1 \
  || fail "trident launch --hostfile -n 4 -- trident info: $(tail -5 "$work/launch.out")"
two_per_host "$work/launch.out" "trident launch --hostfile -n 4 --"

require_slurm
on_host node1 timeout 60 srun --mpi=pmix -N2 -n4 "$trident" info > "$work/srun.out" 2>&1 \
  || fail "srun --mpi=pmix -N2 -n4 trident info: $(tail -5 "$work/srun.out")"
two_per_host "$work/srun.out" "srun --mpi=pmix -N2 -n4"

on_host node1 timeout 60 srun --mpi=none -N2 -n4 "$trident" info > "$work/none.out" 2>&1 \
  || fail "srun --mpi=none -N2 -n4 trident info: $(tail -5 "$work/none.out")"
[ "$(grep -c '^rank: *none: Slurm task [0-3] of 4 on host node[12] without MPI (srun --mpi=pmix makes the tasks one job)$' \
  "$work/none.out")" -eq 4 ] || fail "srun --mpi=none: $(grep '^rank:' "$work/none.out")"
echo "ok: srun --mpi=none -N2 -n4 is named as tasks without MPI"
