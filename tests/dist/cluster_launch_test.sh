#!/usr/bin/env bash
# Training across two hosts through `trident launch --hostfile` (Open MPI's mpirun or MPICH's Hydra,
# started on node1 of scripts/cluster_local.sh's 2-host cluster; node2's ranks through its ssh stand-in,
# TCP between the hosts, shared memory inside each): 4 ranks, 2 per host, as
#   dp2 × tp2 with ZeRO-1  tensor-parallel pairs [0,1] on node1 and [2,3] on node2, data parallel
#                          (gradients, ZeRO-1's shards) across the hosts;
#   pp2 × tp2              stage 0 on node1, stage 1 on node2 (activations cross between the hosts).
# Each reports the same training and validation losses as one process training the same config,
# its ranks 0,1 ran on node1 and 2,3 on node2 with node-local ranks 0,1 on each (the index a rank
# takes its GPU by), and the gradients went over node2's link (its byte counters).
# Skips (77) where the cluster cannot be made (not root, no network namespaces).
#   cluster_launch_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$(realpath "$1")
source "$(dirname "$0")/../cli/tiny_corpus.sh"
source "$(dirname "$0")/cluster_lib.sh"
tiny_corpus_run "$trident" cluster-launch stop_cluster
start_cluster

printf 'node1 slots=2\nnode2 slots=2\n' > "$work/hosts"
train_reference "$trident"
link_bytes() { echo $(( $(cat /sys/class/net/trcl-node2/statistics/rx_bytes) + $(cat /sys/class/net/trcl-node2/statistics/tx_bytes) )); }

# layout NAME LAYOUT_LINE ARGS...: trains on the 2 hosts; each rank first writes its host and
# node-local rank to NAME.where/RANK, then becomes trident train.
layout() {
  local name=$1 want=$2 before where r
  shift 2
  mkdir "$work/$name.where"
  before=$(link_bytes)
  on_host node1 timeout 180 "$trident" launch --hostfile "$work/hosts" -n 4 -- /bin/sh -c \
    'echo "$(hostname) ${OMPI_COMM_WORLD_LOCAL_RANK:-$MPI_LOCALRANKID}" > "$0/${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" && exec "$@"' "$work/$name.where" \
    "$trident" train --run-dir "$work/$name" "${common[@]}" "$@" > "$work/$name.log" 2>&1 \
    || fail "$name on 2 hosts: $(tail -20 "$work/$name.log")"
  link=$(( $(link_bytes) - before ))
  grep -qF "$want" "$work/$name.log" || fail "$name: layout not reported ('$want'): $(grep trident: "$work/$name.log")"
  where=$(for r in 0 1 2 3; do echo "rank $r: $(cat "$work/$name.where/$r" 2>/dev/null)"; done)
  [ "$where" = "$(printf 'rank 0: node1 0\nrank 1: node1 1\nrank 2: node2 0\nrank 3: node2 1')" ] \
    || fail "$name: ranks not placed 2 per host in order with local ranks 0,1: $where"
  [ "$(losses "$work/$name.log")" = "$(losses "$work/one.log")" ] \
    || fail "$name on 2 hosts: losses differ from one process:$(diff <(losses "$work/$name.log") <(losses "$work/one.log"))"
  echo "ok: $name on 2 hosts follows one process ($(losses "$work/$name.log" | tail -2 | head -1)); $((link / 1024)) KiB over node2's link"
}
layout dp2xtp2 "dp=2 × tp=2 × pp=1 (4 ranks)" --set dist.tensor_parallel_size=2 --set dist.zero_stage=1
# At least the data-parallel all-reduces of node2's gradient shards: 6 steps of half of 38k fp32 parameters.
# (Open MPI only: MPICH's UCX finds that the two hosts share this machine's kernel and moves their data
# through shared memory, as between the ranks of one host.)
if ! "$trident" info | grep -q '^mpi: .*MPICH'; then
  [ "$link" -gt 200000 ] || fail "dp2xtp2: only $link bytes crossed node2's link: the hosts did not talk over the bridge"
fi
layout pp2xtp2 "dp=1 × tp=2 × pp=2 (4 ranks)" --set dist.tensor_parallel_size=2 --set dist.pipeline_parallel_size=2
grep -q "4 micro-batches through the 1f1b pipeline schedule" "$work/pp2xtp2.log" \
  || fail "pp2xtp2: schedule not reported: $(grep trident: "$work/pp2xtp2.log")"
