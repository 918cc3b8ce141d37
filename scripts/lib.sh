# Sourced by scripts/run.sh, scripts/test.sh, scripts/package_check.sh and the local Slurm clusters
# (slurm_local.sh, cluster_local.sh).

# quiet LOG CMD...: runs CMD with its output in LOG, shown (the tail) only if it fails.
quiet() {
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "$(basename "$0"): '$*' failed; log follows" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
}

# slurm_conf_policy: the slurm.conf lines both local test clusters (slurm_local.sh, cluster_local.sh)
# share, whatever their hosts and files: munge authentication, processes tracked through /proc and
# tasks left unconfined (no cgroups), Slurm running as root, a node back in service when its slurmd
# returns, the builtin scheduler placing jobs per core, the CPUs slurm.conf gives a node taken over
# what its hardware has (config_overrides), and no MPI plugin unless a step asks (srun --mpi=pmix).
slurm_conf_policy() {
  cat <<'CONF'
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmUser=root
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
CONF
}
