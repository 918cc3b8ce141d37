# Sourced by the multi-node tests (label `cluster`), after tests/cli/tiny_corpus.sh (for fail).
#   start_cluster        brings up scripts/cluster_local.sh's 2-host cluster (node1, node2), which
#                        stop_cluster takes down again (call it from the test's EXIT trap); exits 77
#                        (skip) where it cannot be made: not root, no network namespaces
#   require_slurm        exits 77 unless the cluster runs Slurm (slurm-wlm and munge installed)
#   on_host HOST CMD...  runs CMD on HOST with the cluster's environment (SLURM_CONF, Open MPI's
#                        rsh agent and TCP settings)
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
