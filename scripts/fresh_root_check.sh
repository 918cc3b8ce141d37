#!/usr/bin/env bash
# The fresh-root check: proves that the README's two commands work on a fresh
# Debian 12 machine. It makes a minimal Debian root with debootstrap, gives it
# the host's apt and pip settings (mirror, keys, proxies' CA certificates), copies
# this checkout into it and runs, inside it as root:
#   1. ./scripts/test.sh   the test command (every suite, then the ASan+UBSan pass)
#   2. ./scripts/run.sh    the main job, shortened only through its documented
#                          --set overrides (FRESH_STEPS training steps), and checks
#                          that validation loss fell, a checkpoint was saved, a
#                          sample was printed and `trident eval` printed a perplexity.
# Nothing the scripts do not install is inside the root. The only things brought
# in from the host are settings (apt sources and keys, pip configuration, CA
# certificates, DNS) and the CUDA toolkit, which is part of this machine kind's
# image rather than an install step: /usr/local/cuda-* is bind-mounted read-only
# where the host has it. .ci/run runs this script at every landing.
#
#   sudo ./scripts/fresh_root_check.sh            everything (about 30 min on 2 cores)
#   FRESH_ONLY=run ./scripts/fresh_root_check.sh  just the main job (FRESH_ONLY=test: just the tests)
#
# Environment:
#   FRESH_CACHE   caches kept between runs, outside the checkout (default
#                 /var/cache/trident/fresh-root): debootstrap's and apt's
#                 downloaded .deb files, pip's download cache, the interop
#                 venv and ccache's compilations (the root's checkout is always
#                 /root/trident, so they hit). They save downloads and compile
#                 time, never install steps: the root starts without any
#                 package the scripts do not install, and configure checks and
#                 links always run.
#   FRESH_ROOT    where to make the root (default: a new /var/tmp/trident-root.*);
#                 removed at the end unless FRESH_KEEP=1.
#   FRESH_STEPS   training steps of the shortened main job (default 60).
#   FRESH_NO_CUDA=1  do not bring the host's CUDA toolkit into the root.
# Exit status: 0 when both commands passed, 1 otherwise (the failing step and
# its log's tail are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

cache=${FRESH_CACHE:-/var/cache/trident/fresh-root}
steps=${FRESH_STEPS:-60}
only=${FRESH_ONLY:-}
say() { echo "fresh-root: $*"; }
die() { echo "fresh-root: error: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount and chroot): run it with sudo"
[[ -z $only || $only == run || $only == test ]] || die "FRESH_ONLY must be 'run' or 'test', got '$only'"
for tool in unshare chroot mount findmnt git tar; do
  command -v "$tool" >/dev/null || die "'$tool' not found on the host"
done

# The host side needs debootstrap (a Debian package) and its keyring.
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on the host"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      debootstrap debian-archive-keyring; } >/tmp/trident-fresh-apt.log 2>&1 ||
    { tail -n 30 /tmp/trident-fresh-apt.log >&2; die "apt-get install debootstrap failed (log above)"; }
fi

# The host's release and Debian mirror, as apt resolved them from its own
# sources (one-line or deb822 format alike).
# shellcheck disable=SC1091
. /etc/os-release
suite=${VERSION_CODENAME:?}
[[ $ID == debian ]] || die "the host is $ID $suite; the check makes a Debian root from the host's Debian mirror"
mirror_of() { apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null |
  awk -v s="$suite" '$2 == s && $3 == "main" { print $1; exit }'; }
mirror=$(mirror_of)
if [[ -z $mirror ]]; then
  apt-get update -qq >/dev/null 2>&1 || true
  mirror=$(mirror_of)
fi
[[ -n $mirror ]] || die "no '$suite main' source in the host's apt configuration (/etc/apt/sources.list*)"

mkdir -p "$cache/debootstrap" "$cache/apt-archives/partial" "$cache/pip" "$cache/venv" "$cache/ccache"
root=${FRESH_ROOT:-$(mktemp -d /var/tmp/trident-root.XXXXXX)}
# mktemp makes it 0700: as the root directory of a machine it must be 0755, or no user but root can
# run anything in it (munge's postinst runs `su munge -c mungekey` and failed with "Permission denied").
chmod 0755 "$root"
mkdir -p "$root"
[[ -z $(ls -A "$root") ]] || die "FRESH_ROOT '$root' is not empty"
logs=$cache/logs
rm -rf "$logs"
mkdir -p "$logs"

cleanup() {
  local rc=$?
  # Every mount lives in the private mount namespace of the unshare below and
  # is gone with it; refuse to delete anything that is still mounted.
  if grep -qF " $root/" /proc/self/mountinfo; then
    echo "fresh-root: $root still has mounts; not removing it" >&2
  elif [[ ${FRESH_KEEP:-0} != 1 ]]; then
    rm -rf --one-file-system "$root"
  else
    say "kept the root at $root"
  fi
  exit "$rc"
}
trap cleanup EXIT

t0=$SECONDS
say "debootstrap --variant=minbase $suite from $mirror"
# In a private mount namespace, so that the mounts debootstrap makes in the
# root (proc, sys) vanish with it even when it is interrupted.
if ! unshare --mount --propagation private -- debootstrap --variant=minbase --cache-dir="$cache/debootstrap" "$suite" "$root" "$mirror" \
    >"$logs/debootstrap.log" 2>&1; then
  tail -n 30 "$logs/debootstrap.log" >&2
  die "debootstrap failed (log above; whole log in $logs/debootstrap.log)"
fi
say "root ready in $((SECONDS - t0)) s"

# --- the host's settings, copied in -----------------------------------------
# apt: the same sources, keys and options as the host (snapshot pinning, proxy...).
rm -rf "$root/etc/apt/sources.list" "$root/etc/apt/sources.list.d"
for entry in sources.list sources.list.d apt.conf.d preferences.d trusted.gpg trusted.gpg.d keyrings auth.conf.d; do
  if [[ -e /etc/apt/$entry ]]; then cp -a "/etc/apt/$entry" "$root/etc/apt/"; fi
done
# Keyrings the sources name (Signed-By) come along too.
for key in $(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    sed -nE 's/.*(Signed-By:|signed-by=)[[:space:]]*(\/[^] ]+).*/\2/p' | sort -u); do
  if [[ -f $key ]]; then mkdir -p "$root$(dirname "$key")"; cp -a "$key" "$root$key"; fi
done
# DNS, and the CA certificates the host trusts (an HTTPS proxy's among them).
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
cp -L /etc/hosts "$root/etc/hosts"
mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
# pip: the host's configuration files, its PIP_* variables, and the files they name.
pip_env=()
while IFS='=' read -r name value; do
  if [[ $name == PIP_* ]]; then pip_env+=("$name=$value"); fi
done < <(env)
for conf in /etc/pip.conf /etc/xdg/pip/pip.conf "$HOME/.pip/pip.conf" "$HOME/.config/pip/pip.conf"; do
  [[ -f $conf ]] || continue
  dest=$root${conf/#$HOME//root}
  mkdir -p "$(dirname "$dest")"
  cp -L "$conf" "$dest"
done
for path in $(printf '%s\n' "${pip_env[@]}" | sed -n 's/^PIP_\(CERT\|CLIENT_CERT\|FIND_LINKS\)=//p') \
    $(cat /etc/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf" 2>/dev/null |
      sed -nE 's/^[[:space:]]*(cert|client-cert|find-links)[[:space:]]*=[[:space:]]*//p'); do
  [[ $path == /* && -e $path ]] || continue
  mkdir -p "$root$(dirname "$path")"
  cp -aL "$path" "$root$path"
done

# CUDA: part of the machine's image, bind-mounted read-only where the host has it.
cuda=""
if [[ ${FRESH_NO_CUDA:-0} != 1 && -x /usr/local/cuda/bin/nvcc ]]; then
  cuda=$(readlink -f /usr/local/cuda)
  mkdir -p "$root$cuda"
  if [[ /usr/local/cuda != "$cuda" ]]; then ln -sfn "$cuda" "$root/usr/local/cuda"; fi
  echo "$cuda/lib" >"$root/etc/ld.so.conf.d/cuda.conf"
  say "CUDA toolkit: $cuda (read-only from the host)"
fi

# The checkout: its tracked files and untracked ones git does not ignore.
mkdir -p "$root/root/trident"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && xargs -0 -r ls -d 2>/dev/null | tar --no-recursion -cf - -T -) |
  tar -xf - -C "$root/root/trident"

# --- the job inside the root ------------------------------------------------------
cat >"$root/root/fresh-job.sh" <<'JOB'
#!/bin/bash
# Runs inside the fresh root (written by scripts/fresh_root_check.sh).
set -uo pipefail
cd /root/trident
ldconfig
status=0
step() { echo; echo "===== fresh root: $* ====="; }
if [[ $FRESH_ONLY != run ]]; then
  step "./scripts/test.sh"
  start=$SECONDS
  if ./scripts/test.sh; then
    echo "fresh root: the test command passed in $((SECONDS - start)) s"
  else
    echo "fresh root: FAILED: the test command (./scripts/test.sh)"; status=1
  fi
fi
if [[ $FRESH_ONLY != test ]]; then
  step "./scripts/run.sh --set train.steps=$FRESH_STEPS ..."
  start=$SECONDS
  # Shortened through the documented --set overrides: fewer steps, evaluation
  # at the start and the end, one checkpoint at the end.
  if ./scripts/run.sh --set train.steps="$FRESH_STEPS" --set schedule.warmup_steps=10 \
      --set train.eval_interval="$FRESH_STEPS" --set train.log_interval=10 --set checkpoint.interval="$FRESH_STEPS" \
      2>&1 | tee /root/run.log; then
    first=$(sed -nE 's/^eval at step 0: val loss ([0-9.]+).*/\1/p' /root/run.log)
    last=$(sed -nE "s/^eval at step $FRESH_STEPS: val loss ([0-9.]+).*/\\1/p" /root/run.log)
    problems=()
    [[ -n $first && -n $last ]] || problems+=("no 'eval at step 0' and 'eval at step $FRESH_STEPS' lines")
    [[ -n $first && -n $last ]] && ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' &&
      problems+=("validation loss did not fall ($first -> $last)")
    grep -q '^saved checkpoint ' /root/run.log || problems+=("no 'saved checkpoint' line")
    [[ $(sed -n '/^==> \[5\/5\]/,/^eval: /p' /root/run.log | grep -vc -e '^==>' -e '^eval: ') -ge 1 ]] ||
      problems+=("no sampled text")
    grep -qE '^eval: .* perplexity [0-9.]+' /root/run.log || problems+=("trident eval printed no perplexity")
    if ((${#problems[@]})); then
      printf 'fresh root: FAILED: the main job: %s\n' "${problems[@]}"; status=1
    else
      echo "fresh root: the main job passed in $((SECONDS - start)) s (val loss $first -> $last)"
    fi
  else
    echo "fresh root: FAILED: the main job (./scripts/run.sh)"; status=1
  fi
fi
exit $status
JOB
chmod +x "$root/root/fresh-job.sh"

# A private mount and PID namespace: every mount below and every process left
# behind by the job disappear when it ends, whatever happens.
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[[ -n $cuda ]] && path=/usr/local/cuda/bin:$path
say "running the README's commands inside the root (logs: $logs)"
set +e
unshare --mount --pid --fork --propagation private --kill-child -- /bin/bash -euo pipefail -c '
  root=$1 cache=$2 cuda=$3; shift 3
  # The root a mount point of its own, as / is on a machine (entering a network namespace, which the
  # cluster tests do, remounts / and fails on a plain directory).
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o mode=1777,size=50% tmpfs "$root/dev/shm"
  mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
  mkdir -p "$root/root/.cache/pip" "$root/root/.cache/trident/venv" "$root/root/.cache/ccache"
  mount --bind "$cache/pip" "$root/root/.cache/pip"
  mount --bind "$cache/ccache" "$root/root/.cache/ccache"
  mount --bind "$cache/venv" "$root/root/.cache/trident/venv"
  if [[ -n $cuda ]]; then
    mount --bind "$cuda" "$root$cuda"
    mount -o remount,bind,ro "$root$cuda"
  fi
  exec chroot "$root" /usr/bin/env -i "$@" /root/fresh-job.sh
' fresh-root "$root" "$cache" "$cuda" \
  HOME=/root PATH="$path" LANG=C.UTF-8 TERM=dumb CI=true TRIDENT_REQUIRE_OPTIONAL=1 \
  FRESH_STEPS="$steps" FRESH_ONLY="$only" "${pip_env[@]}" 2>&1 | tee "$logs/job.log"
rc=${PIPESTATUS[0]}
set -e
say "finished in $((SECONDS - t0)) s with status $rc"
exit "$rc"
