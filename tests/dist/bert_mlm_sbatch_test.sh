#!/usr/bin/env bash
# The BERT example's sbatch script (examples/bert_mlm/sbatch.sh, the DeepSpeed
# job's shape: --nodes=1 --ntasks=4, srun --mpi=pmix or pmi2, its ZeRO-3 ds_config.json)
# submitted to Slurm with `sbatch --wait`, on the example's own data
# (prepare_data.sh) with a smaller model and fewer steps: the job runs as 4
# data-parallel ranks and its validation MLM loss falls. Skips (exit 77) unless
# a Slurm controller answers (scripts/slurm_local.sh starts a single-node one).
#   bert_mlm_sbatch_test.sh TRIDENT_BINARY [PLUGIN]   (srun's MPI plug-in: pmix for Open MPI, pmi2 for MPICH)
set -uo pipefail
trident=$(realpath "$1")
export SRUN_MPI=${2:-pmix}  # the script's srun --mpi
repo=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! command -v sbatch >/dev/null 2>&1 || ! timeout 10 sinfo >/dev/null 2>&1; then
  echo "SKIP: no Slurm cluster answers (start one with scripts/slurm_local.sh)"
  exit 77
fi
command -v bible >/dev/null 2>&1 || { echo "SKIP: Debian's bible-kjv is not installed (scripts/install_deps.sh)"; exit 77; }
work=$(mktemp -d /tmp/trident-bert-sbatch.XXXXXX)
# A job still queued or running when the test ends (timeout, failure) is cancelled before its
# directory goes: otherwise it would go on writing into a deleted run directory.
cleanup() {
  local job
  job=$(sed -nE 's/^Submitted batch job ([0-9]+).*/\1/p' "$work/sbatch.log" 2>/dev/null)
  if [[ -n $job ]]; then
    scancel "$job" 2>/dev/null
    # Its ranks can take Slurm's KillWait (30 s here) to go; wait for them before removing their files.
    for _ in $(seq 60); do [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break; sleep 1; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
TRIDENT=$trident DATA_DIR=$work VOCAB_SIZE=2000 "$repo/examples/bert_mlm/prepare_data.sh" > "$work/prepare.log" 2>&1 \
  || fail "prepare_data.sh: $(tail -3 "$work/prepare.log")"
export TRIDENT=$trident DATA_DIR=$work RUN_DIR=$work/run TRIDENT_NUM_THREADS=1
export TRIDENT_ARGS="--set model.n_layer=2 --set model.d_model=64 --set model.d_ff=256 --set train.steps=60
  --set train.eval_interval=30 --set train.eval_steps=4 --set train.log_interval=10 --set checkpoint.interval=0
  --set schedule.warmup_steps=10"
cd "$repo" || fail "cd $repo"
timeout 360 sbatch --wait --export=ALL --output="$work/job.out" examples/bert_mlm/sbatch.sh > "$work/sbatch.log" 2>&1 \
  || fail "sbatch: $(cat "$work/sbatch.log"; tail -5 "$work/job.out" 2>/dev/null)"
grep -q "dp=4 × tp=1 × pp=1 (4 ranks)" "$work/job.out" || fail "the job did not run as 4 ranks: $(grep trident: "$work/job.out")"
grep -q "zero_optimization.stage 3 → dist.zero_stage = 3" "$work/job.out" || fail "the seed's ds_config.json was not applied"
first=$(grep -m1 '^eval at step 0:' "$work/job.out" | sed -E 's/.*val loss ([0-9.]+).*/\1/')
last=$(grep '^eval at step 60:' "$work/job.out" | sed -E 's/.*val loss ([0-9.]+).*/\1/')
[[ -n $first && -n $last ]] || fail "no validation losses in the job's output: $(tail -5 "$work/job.out")"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.9 * a) }' \
  || fail "the validation MLM loss did not fall by 10%: $first at step 0, $last at step 60"
echo "ok: sbatch examples/bert_mlm/sbatch.sh ran 4 ranks under srun with the seed's ZeRO-3 config; validation MLM loss $first -> $last"
