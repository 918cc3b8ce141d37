#!/usr/bin/env bash
# A multi-node test cluster on this one machine: N hosts node1..nodeN, each a
# network namespace with its own address on a private bridge, its own hostname
# and its own slurmd (slurmctld runs on node1), so that `trident launch
# --hostfile`, `srun -N2` and multi-node sbatch scripts can be tried and tested
# without a second machine. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#
#   cluster_local.sh up N [CPUS]   create (or complete) the N-host cluster, each host offering
#                                  Slurm CPUS CPUs (default 2: `srun -N2 -n4` puts 2 tasks on each); idempotent
#   cluster_local.sh down          stop its daemons and processes, delete the hosts and the bridge
#   cluster_local.sh status        hosts, addresses, daemons, `sinfo`; exit 1 when it is not up
#   cluster_local.sh exec HOST CMD...   run CMD on HOST with the cluster's environment
#                                  (SLURM_CONF, Open MPI's rsh agent and TCP settings)
#
# Layout: bridge trcl-br0 with 10.231.7.1/24 (this subnet is used by nothing
# else); host nodeI is namespace trident-nodeI with eth0 = 10.231.7.(10+I),
# its lo up, and /etc/netns/trident-nodeI/{hosts,hostname} naming every host
# (bind-mounted over /etc/hosts and /etc/hostname for what runs on the host, as
# `ip netns exec` does, so this machine's own files stay untouched). A network
# namespace has no hostname of its own: each command run on a host (daemons
# included) gets a UTS namespace of its own set to the host's name, so
# `hostname`, Open MPI and Slurm see nodeI.
#
# Slurm: a slurm.conf of its own (/run/trident-cluster/slurm.conf, read through
# SLURM_CONF), so the single-node /etc/slurm/slurm.conf of scripts/slurm_local.sh
# and its daemons keep working beside it; munge is shared (`down` stops the munged
# that `up` started, unless that Slurm uses it). Every file the cluster writes
# (config, state, logs, pid files) is under /run/trident-cluster. RequeueExit=75:
# a batch job whose script exits 75 (trident train stopped by a signal, after its
# checkpoint) goes back in the queue, and resumes when it starts again.
#
# Open MPI: scripts/netns_rsh is the rsh agent (mpirun calls it as ssh, `agent
# HOST COMMAND...`), TCP between hosts is restricted to the bridge's subnet and
# shared memory (vader) is used inside a host. `cluster_local.sh exec` sets
# these; /run/trident-cluster/env holds them for `source`.
#
# Where namespaces cannot be made (not root, no CAP_NET_ADMIN), `up` prints one
# line saying why and exits 77, so tests skip. Without Slurm installed the
# hosts come up without it (mpirun still works) and `up` says so.
set -euo pipefail

subnet=10.231.7
bridge=trcl-br0
ns_prefix=trident-
dir=/run/trident-cluster
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$scripts/lib.sh"

usage() {
  echo "usage: cluster_local.sh up N [CPUS] | down | status | exec HOST COMMAND..." >&2
  exit 2
}
note() { echo "cluster_local: $*" >&2; }
skip() { note "$*"; exit 77; }

# Hosts that exist now (namespaces named trident-node*), in numeric order.
existing_hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^${ns_prefix}\(node[0-9][0-9]*\)$/\1/p" | sort -V
}

# on_host HOST CMD...: CMD in HOST's network namespace, under HOST's hostname, with HOST's
# /etc/hosts and /etc/hostname. Not `ip netns exec`: it mounts a sysfs of the namespace over /sys,
# which hides /sys/fs/cgroup, and slurmd will not start without it ("No filesystem mounted on
# /sys/fs/cgroup"). The mounts are private to CMD (unshare --mount).
on_host() {
  local host=$1; shift
  local ns=$ns_prefix$host
  # shellcheck disable=SC2016 # expanded by that sh
  nsenter --net="/run/netns/$ns" -- unshare --mount --uts -- /bin/sh -c \
    'mount --bind "$1/hosts" /etc/hosts && mount --bind "$1/hostname" /etc/hostname && hostname "$0" && shift && exec "$@"' \
    "$host" "/etc/netns/$ns" "$@"
}

# alive PIDFILE NAME: the process of PIDFILE runs and is NAME.
alive() {
  local pid
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

have_slurm() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; }

write_env() {
  cat > "$dir/env" <<ENV
export SLURM_CONF=$dir/slurm.conf
export OMPI_MCA_plm_rsh_agent=$scripts/netns_rsh
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=$subnet.0/24
export OMPI_MCA_oob_tcp_if_include=$subnet.0/24
export HYDRA_LAUNCHER=ssh HYDRA_LAUNCHER_EXEC=$scripts/netns_rsh
export HYDRA_IFACE=eth0 UCX_NET_DEVICES=eth0
ENV
}

write_slurm_conf() {
  local n=$1 cpus=$2 i
  {
    cat <<CONF
# Written by scripts/cluster_local.sh for its $n-host test cluster; read through SLURM_CONF.
ClusterName=tridentlocal
SlurmctldHost=node1($subnet.11)
$(slurm_conf_policy)
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdSpoolDir=$dir/spool/slurmd-%n
StateSaveLocation=$dir/spool/slurmctld
# Each host's own temporary directory: Slurm's PMIx plugin makes spmix_appdir_UID_JOB.STEP in it
# on every node of a step, which fails ("File exists") when the hosts share /tmp.
TmpFS=$dir/tmp/%n
KillWait=5
# A batch script that exits 75 (what trident train exits with after saving on SIGTERM) goes back in the queue.
RequeueExit=75
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
CONF
    for i in $(seq 1 "$n"); do echo "NodeName=node$i NodeAddr=$subnet.$((10 + i)) CPUs=$cpus State=UNKNOWN"; done
    echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
  } > "$dir/slurm.conf"
}

start_munge() {
  [[ -f /etc/munge/munge.key ]] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  mkdir -p /run/munge
  chown -R munge:munge /etc/munge /run/munge && chmod 400 /etc/munge/munge.key
  # One munged serves every host (and slurm_local.sh's Slurm); down stops it if up started it.
  if ! pgrep -x munged >/dev/null; then
    /usr/sbin/munged --force 2>"$dir/log/munged.err" || { note "munged did not start: $(<"$dir/log/munged.err")"; exit 1; }
    cp /run/munge/munged.pid "$dir/munged.pid"
  fi
}

start_slurm() {
  local n=$1 i
  export SLURM_CONF=$dir/slurm.conf
  mkdir -p "$dir/spool/slurmctld"
  for i in $(seq 1 "$n"); do
    mkdir -p "$dir/spool/slurmd-node$i" "$dir/tmp/node$i"
    chmod 755 "$dir/spool/slurmd-node$i" && chmod 1777 "$dir/tmp/node$i"
  done
  start_munge
  alive "$dir/slurmctld.pid" slurmctld || on_host node1 slurmctld
  for i in $(seq 1 "$n"); do
    alive "$dir/slurmd-node$i.pid" slurmd || on_host "node$i" slurmd
  done
  # Every node idle (or mixed/allocated after an earlier job) within 30 s.
  local states=""
  for _ in $(seq 1 60); do
    states=$(on_host node1 timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null || true)
    if [[ $(grep -cE ' (idle|mixed|allocated)$' <<<"$states") -eq $n ]]; then return 0; fi
    sleep 0.5
  done
  note "slurm did not bring up $n nodes within 30 s (sinfo: ${states:-no answer}); logs in $dir/log"
  exit 1
}

up() {
  local n=${1:-} cpus=${2:-2}
  [[ $n =~ ^[1-9][0-9]?$ ]] || { note "up: give the number of hosts, 1 to 99"; usage; }
  [[ $cpus =~ ^[1-9][0-9]*$ ]] || { note "up: CPUS must be a positive number"; usage; }
  [[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces (run as root)"
  if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then skip "needs ip (iproute2), nsenter and unshare (util-linux)"; fi
  # Can namespaces, veth pairs and bridges be made here? (a container without CAP_NET_ADMIN cannot)
  local why
  ip netns del "${ns_prefix}probe" 2>/dev/null || true
  why=$(ip netns add "${ns_prefix}probe" 2>&1) || skip "cannot create network namespaces here: $why"
  # Entering one needs / to be a mount point (`ip -n` remounts it as a slave: a chroot whose root is a
  # plain directory cannot).
  why=$(ip -n "${ns_prefix}probe" link set lo up 2>&1) ||
    { ip netns del "${ns_prefix}probe"; skip "cannot enter a network namespace here: $why"; }
  ip netns del "${ns_prefix}probe"
  ip link del trcl-probe 2>/dev/null || true
  why=$(ip link add trcl-probe type veth peer name trcl-probep 2>&1) || skip "cannot create veth pairs here: $why"
  ip link del trcl-probe
  # A cluster of another shape goes first (its hosts files and slurm.conf name other hosts).
  if [[ -f $dir/hosts && $(<"$dir/hosts") != "$n $cpus" ]] || [[ $(existing_hosts | grep -c . || true) -gt $n ]]; then
    down
  fi
  mkdir -p "$dir/log" "$dir/spool"
  echo "$n $cpus" > "$dir/hosts"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    why=$(ip link add "$bridge" type bridge 2>&1) || skip "cannot create a bridge here: $why"
  fi
  ip addr replace "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  local hosts i host ns
  hosts=$(printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s.1\tcluster-gateway\n' "$subnet"
          for i in $(seq 1 "$n"); do printf '%s.%d\tnode%d\n' "$subnet" $((10 + i)) "$i"; done)
  for i in $(seq 1 "$n"); do
    host=node$i ns=$ns_prefix$host
    ip netns list | awk '{print $1}' | grep -qx "$ns" || ip netns add "$ns"
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
      ip link del "trcl-$host" 2>/dev/null || true
      ip link add "trcl-$host" type veth peer name "trcl-${host}p"
      ip link set "trcl-${host}p" netns "$ns"
      ip -n "$ns" link set "trcl-${host}p" name eth0
    fi
    ip link set "trcl-$host" master "$bridge"
    ip link set "trcl-$host" up
    ip -n "$ns" addr replace "$subnet.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns"
    echo "$hosts" > "/etc/netns/$ns/hosts"
    echo "$host" > "/etc/netns/$ns/hostname"
  done
  write_env
  write_slurm_conf "$n" "$cpus"
  if have_slurm; then
    start_slurm "$n"
  else
    note "Slurm (slurm-wlm, munge) is not installed: the hosts run without it (mpirun works)"
  fi
  echo "cluster_local: $n host(s) up: node1..node$n on $subnet.0/24; run commands on them with $0 exec HOST COMMAND..."
}

# stop_daemons PIDFILE NAME [PIDFILE NAME]...: SIGTERM to each that runs, then SIGKILL to those
# still there after 5 s (slurmctld takes about 3 s to save its state).
stop_daemons() {
  local -a pids=()
  while [[ $# -ge 2 ]]; do
    if alive "$1" "$2"; then pids+=("$(<"$1")"); kill "$(<"$1")" 2>/dev/null || true; fi
    rm -f "$1"
    shift 2
  done
  local pid
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
    if [[ -d /proc/$pid ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  done
}

down() {
  [[ $(id -u) -eq 0 ]] || skip "needs root"
  local host ns f
  local -a pids daemons=("$dir/slurmctld.pid" slurmctld)
  for f in "$dir"/slurmd-node*.pid; do [[ -e $f ]] && daemons+=("$f" slurmd); done
  # The munged that up started, unless slurm_local.sh's Slurm has come to use it since.
  if ! alive /run/slurmctld.pid slurmctld && ! alive /run/slurmd.pid slurmd; then daemons+=("$dir/munged.pid" munged); fi
  stop_daemons "${daemons[@]}"
  for host in $(existing_hosts); do
    ns=$ns_prefix$host
    # What still runs on the host (job steps, ranks, orted): its processes, by id.
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    if [[ ${#pids[@]} -gt 0 ]]; then
      kill "${pids[@]}" 2>/dev/null || true
      sleep 0.5
      mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
      if [[ ${#pids[@]} -gt 0 ]]; then kill -9 "${pids[@]}" 2>/dev/null || true; fi
    fi
    ip netns del "$ns" 2>/dev/null || true
    ip link del "trcl-$host" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  ip link del "$bridge" 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true  # when no other namespace has files there
  rm -rf "$dir"
}

status() {
  local hosts host ok=0
  hosts=$(existing_hosts)
  if [[ -z $hosts ]]; then echo "cluster_local: down"; return 1; fi
  echo "cluster_local: $(wc -w <<<"$hosts") host(s), bridge $bridge $(ip -br addr show "$bridge" 2>/dev/null | awk '{print $2, $3}')"
  for host in $hosts; do
    local daemon="not running"
    if alive "$dir/slurmd-$host.pid" slurmd; then daemon="running (pid $(<"$dir/slurmd-$host.pid"))"; else ok=1; fi
    printf '  %-7s %-15s slurmd %s\n' "$host" "$(ip -n "$ns_prefix$host" -br -4 addr show eth0 2>/dev/null | awk '{print $3}')" \
      "$daemon"
  done
  if alive "$dir/slurmctld.pid" slurmctld; then
    echo "  slurmctld running on node1 (pid $(<"$dir/slurmctld.pid")), SLURM_CONF=$dir/slurm.conf"
    on_host node1 env SLURM_CONF="$dir/slurm.conf" timeout 5 sinfo -N 2>&1 | sed 's/^/  /' || true
  else
    echo "  slurmctld not running"
    ok=1
  fi
  return $ok
}

exec_on() {
  local host=${1:-}
  [[ $# -ge 2 ]] || usage
  shift
  if [[ $1 == -- ]]; then shift; fi
  [[ $# -gt 0 ]] || usage
  existing_hosts | grep -qx "$host" || { note "no host $host (up: $(existing_hosts | tr '\n' ' '))"; exit 1; }
  # shellcheck disable=SC1091
  source "$dir/env"
  on_host "$host" "$@"
}

case ${1:-} in
  up) up "${2:-}" "${3:-2}" ;;
  down) down ;;
  status) status ;;
  exec) shift; exec_on "$@" ;;
  on) shift; on_host "$@" ;;  # HOST CMD...: without the cluster's environment (scripts/netns_rsh)
  *) usage ;;
esac
