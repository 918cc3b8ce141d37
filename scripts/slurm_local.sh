#!/usr/bin/env bash
# Starts a single-node Slurm cluster on this machine (Debian's slurm-wlm and
# munge), for trying `srun --mpi=pmix -n N trident train ...` and for the
# `dist.slurm` test. Idempotent: does nothing when `sinfo` already answers.
# Needs root. The node advertises 8 CPUs so that 8 ranks fit on a small machine.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if command -v sinfo >/dev/null 2>&1 && timeout 5 sinfo >/dev/null 2>&1; then exit 0; fi
[[ $(id -u) -eq 0 ]] || { echo "slurm_local: run as root" >&2; exit 1; }
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
host=$(hostname)
mkdir -p /etc/slurm /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=trident
SlurmctldHost=$host
$(slurm_conf_policy)
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
if [[ ! -f /etc/munge/munge.key ]]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge && chmod 400 /etc/munge/munge.key
# Each daemon by its pid file: another cluster's slurmctld and slurmd may run on this machine
# (scripts/cluster_local.sh, in network namespaces), which `pgrep -x slurmd` would take for ours.
running() { [[ -s $1 ]] && [[ $(cat "/proc/$(<"$1")/comm" 2>/dev/null) == "$2" ]]; }
pgrep -x munged >/dev/null || /usr/sbin/munged --force
running /run/slurmctld.pid slurmctld || slurmctld
running /run/slurmd.pid slurmd || slurmd
for _ in $(seq 1 30); do timeout 5 sinfo >/dev/null 2>&1 && { sinfo; exit 0; }; sleep 1; done
echo "slurm_local: slurm did not come up (see /var/log/slurm/)" >&2
exit 1
