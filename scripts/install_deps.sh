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
  # libzip: PyTorch's zip checkpoints (pytorch_model.bin; checkpoint/torch_file.h). Its libzip.pc
  # names -lbz2 -lssl -lcrypto in Libs.private, which `pkg-config --static trident` (the static
  # libtrident's consumers) passes to the linker, but libzip-dev does not pull in their -dev packages.
  libzip-dev libbz2-dev libssl-dev
  # libicu-dev: Unicode normalization (the NFC normalizer of Qwen2's tokenizer.json).
  libicu-dev
  # TensorBoard event files (log.tensorboard): protobuf for the Event messages, compiled at build
  # time by protoc; Boost.CRC (header-only) for TFRecord's CRC32C.
  libprotobuf-dev protobuf-compiler libboost-dev
  # trident plot: Cairo draws the loss curves into PNG or SVG; its text needs a font (DejaVu Sans).
  libcairo2-dev fonts-dejavu-core
  libgtest-dev libgmock-dev libbenchmark-dev
  bible-kjv python3 python3-venv
  # python3-dev: the headers the Python package's extension compiles against (pip install ., python/).
  python3-dev
  # The tests' shell scripts use pgrep/pkill (procps is not in a minimal root).
  procps
  # clang with libFuzzer's runtime and its OpenMP build the fuzz targets
  # (without them the fuzz_data test skips and says what is missing).
  clang libclang-rt-dev libomp-dev
)
# The multi-host test cluster (scripts/cluster_local.sh) makes its hosts with iproute2 (network
# namespaces, veth pairs, a bridge); with slurm-wlm and munge each host also runs a slurmd (the cluster
# starts its own daemons with its own slurm.conf). Slurm is installed as a best effort: where its
# packages do not configure (a root without an init system may refuse munge's service), the Slurm
# cluster tests skip and say so.
optional=()
if [[ ${1:-} == --tests ]]; then
  # MPICH beside Open MPI: the test command builds trident against it too and runs the distributed tests
  # under its Hydra launcher (scripts/test.sh). Open MPI stays the default mpicc/mpirun (Debian's
  # alternatives rank it above MPICH), so the main build is unchanged.
  packages+=(iproute2 libmpich-dev mpich)
  optional+=(slurm-wlm munge)
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=() optional_missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${optional[@]}"; do installed "$p" || optional_missing+=("$p"); done

if ((${#missing[@]} == 0 && ${#optional_missing[@]} == 0)); then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

log=$(mktemp /tmp/trident-apt.XXXXXX.log)
# apt's own errors (a package that failed to configure says why above the summary) and its last lines.
show_log() { { grep -n -B2 -A8 -E "^dpkg: error|^E: |returned error exit status" "$log" | head -n 60; tail -n 20 "$log"; } >&2; }
$sudo apt-get update -qq >"$log" 2>&1 || { echo "install_deps: apt-get update failed; log follows" >&2; show_log; exit 1; }
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
    echo "install_deps: apt-get failed; log follows" >&2
    show_log
    exit 1
  fi
fi
if ((${#optional_missing[@]})); then
  echo "install_deps: installing ${optional_missing[*]} (for the tests; optional)"
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" >>"$log" 2>&1; then
    echo "install_deps: ${optional_missing[*]} did not install; the tests that need them will skip. apt said:" >&2
    show_log
    # Leave no half-configured package behind for the next apt-get.
    $sudo dpkg --remove --force-remove-reinstreq "${optional_missing[@]}" slurmd slurmctld slurm-client >/dev/null 2>&1 || true
  fi
fi
rm -f "$log"
