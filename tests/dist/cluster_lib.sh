# Sourced by the multi-node tests (label `cluster`), after tests/cli/tiny_corpus.sh (for fail, losses
# and tiny_data).
#   start_cluster        brings up scripts/cluster_local.sh's 2-host cluster (node1, node2), which
#                        stop_cluster takes down again (call it from the test's EXIT trap); exits 77
#                        (skip) where it cannot be made: not root, no network namespaces
#   require_slurm        exits 77 unless the cluster runs Slurm (slurm-wlm and munge installed)
#   on_host HOST CMD...  runs CMD on HOST with the cluster's environment (SLURM_CONF, Open MPI's
#                        rsh agent and TCP settings)
#   train_reference TRIDENT  the single-process run the 2-host training tests compare with
# The tests share one cluster: CMake gives them RESOURCE_LOCK trident_cluster so they never overlap.
cluster_script=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/cluster_local.sh
cluster_started=0

start_cluster() {
  local out rc
  out=$("$cluster_script" up 2 2>&1)
  rc=$?
  if [[ $rc -eq 77 ]]; then
    echo "SKIP: no multi-node test cluster here: $out"
    exit 77
  fi
  cluster_started=1
  [[ $rc -eq 0 ]] || fail "cluster_local.sh up 2 (exit $rc): $out"
}

stop_cluster() {
  if [[ $cluster_started -eq 1 ]]; then "$cluster_script" down >/dev/null 2>&1 || echo "cluster_local.sh down failed" >&2; fi
  cluster_started=0
}

require_slurm() {
  if ! command -v sbatch >/dev/null 2>&1 || ! on_host node1 timeout 10 sinfo >/dev/null 2>&1; then
    echo "SKIP: the test cluster runs no Slurm (install slurm-wlm and munge)"
    exit 77
  fi
}

on_host() { "$cluster_script" exec "$@"; }

# train_reference TRIDENT: the single-process run that the 2-host training tests (cluster_launch,
# cluster_sbatch) compare theirs with. Sets common to their tiny GPT's options (on the tiny corpus:
# tiny_corpus_run first), trains it into $work/one (log: $work/one.log) and checks that it logged its
# 6 steps and 3 evaluations.
train_reference() {
  common=(--set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq_len=32
    --set train.seq_len=32 "${tiny_data[@]}" --set model.dropout=0.1
    --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=6 --set train.log_interval=1
    --set train.eval_interval=3 --set train.eval_steps=2 --set checkpoint.interval=0)
  timeout 120 "$1" train --run-dir "$work/one" "${common[@]}" > "$work/one.log" 2>&1 \
    || fail "training on one process: $(tail -20 "$work/one.log")"
  [ "$(losses "$work/one.log" | wc -l)" -eq 9 ] || fail "one process: expected 6 steps and 3 evals: $(losses "$work/one.log")"
}
