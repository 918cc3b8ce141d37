#!/usr/bin/env bash
# The BERT example's GPU sbatch script (examples/bert_mlm/sbatch_gpu.sh) asks Slurm for four GPUs on one
# node and starts the CPU script's job with train.device = "cuda": run here with a stand-in srun that
# records its arguments (no GPU or Slurm needed), and the trident it would start, given those arguments on
# a machine without a GPU, refuses with the device named.
#   sbatch_gpu_test.sh TRIDENT_BINARY
set -uo pipefail
trident=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tests/cli/tiny_corpus.sh"
work_dir sbatch_gpu
script=$repo/examples/bert_mlm/sbatch_gpu.sh

for directive in "--nodes=1" "--ntasks=4" "--gres=gpu:4"; do
  grep -qE "^#SBATCH $directive( |$)" "$script" || fail "$script lacks '#SBATCH $directive'"
done
mkdir -p "$work/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/srun.args"\n' "$work" > "$work/bin/srun"
chmod +x "$work/bin/srun"
(cd "$repo" && PATH="$work/bin:$PATH" TRIDENT="$trident" bash "$script") || fail "the script failed"
args=$(cat "$work/srun.args")
[[ $(sed -n 1p "$work/srun.args") == "--mpi=pmix" ]] || fail "srun is not started with --mpi=pmix: $args"
grep -qx 'train.device="cuda"' "$work/srun.args" || fail "no --set train.device=\"cuda\": $args"
grep -qx 'runs/bert_mlm_gpu' "$work/srun.args" || fail "the run directory is not runs/bert_mlm_gpu: $args"
grep -qx -- '--deepspeed' "$work/srun.args" || fail "not the DeepSpeed job: $args"

# What one of its ranks would do on a machine without a GPU: a clear refusal (not checked where one is).
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "ok: sbatch_gpu.sh runs srun $(tr '\n' ' ' < "$work/srun.args" | cut -c1-120)... (a GPU is visible here)"
  exit 0
fi
out=$("$trident" train "$repo/examples/bert_mlm/bert_small.toml" --run-dir "$work/r" --set 'train.device="cuda"' \
  --set train.steps=1 2>&1) && fail "train.device=cuda ran on a machine without a GPU: $out"
[[ $out == *"train.device 'cuda'"* ]] || fail "the refusal does not name train.device 'cuda': $out"
echo "ok: sbatch_gpu.sh runs srun $(tr '\n' ' ' < "$work/srun.args" | cut -c1-120)..."
