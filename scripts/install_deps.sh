#!/usr/bin/env bash
# Installs trident's system dependencies from Debian 12 packages.
# Idempotent and quiet: packages already present are skipped, and apt output
# goes to a log that is shown only when something fails.
#   install_deps.sh           what building and running trident needs
#   install_deps.sh --tests   that and what the tests need besides (the test command)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  # ocl-icd-opencl-dev: oneDNN's CMake config (dnnl-config.cmake) calls
  # find_package(OpenCL), and --no-install-recommends leaves it out.
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libxxhash-dev libzstd-dev
  # libicu-dev: Unicode normalization (the NFC normalizer of Qwen2's tokenizer.json).
  libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  bible-kjv python3 python3-venv
  # The tests' shell scripts use pgrep/pkill (procps is not in a minimal root).
  procps
  # clang with libFuzzer's runtime and its OpenMP build the fuzz targets
  # (without them the fuzz_data test skips and says what is missing).
  clang libclang-rt-dev libomp-dev
)
if [[ ${1:-} == --tests ]]; then
  # The multi-host test cluster (scripts/cluster_local.sh): network namespaces, veth pairs and a bridge
  # (iproute2), a slurmd per host and slurmctld (slurm-wlm, munge; their services need no setup: the
  # cluster runs its own daemons with its own slurm.conf).
  packages+=(iproute2 slurm-wlm munge)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

log=$(mktemp /tmp/trident-apt.XXXXXX.log)
echo "install_deps: installing ${missing[*]}"
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "install_deps: apt-get failed; log follows" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
rm -f "$log"
