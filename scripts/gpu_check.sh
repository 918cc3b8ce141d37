#!/usr/bin/env bash
# The GPU checks of issue 20 in one run, for a lent GPU machine whose time is
# short: the gpu-labelled test programs, compute-sanitizer on the kernels most
# likely to fault, the main job's config on one GPU, train_bench against
# llm.c's train_gpt2cu on the same GPU.
#
#   scripts/gpu_check.sh BUNDLE.tar.xz [LLMC_DIR] [DATA_DIR]
#
# BUNDLE is what scripts/gpu_bundle.sh made (the programs plus the libraries a
# machine without trident's Debian packages lacks). LLMC_DIR holds a built
# train_gpt2cu and a token file in llm.c's format (kjv_train_llmc.bin);
# DATA_DIR the built-in corpus (scripts/prepare_corpus.sh's data/kjv).
# Every part has its own time limit, and its log is written as it runs to
# $OUT (or ./gpu-check-out): a part that fails or hangs does not hide the rest.
# SKIP="tests sanitizer mainjob bench llmc profile" leaves parts out; BATCHES (8 16 32 64) the
# micro-batches of train_bench and llm.c, LLAMA_CHECKPOINTING (0 1) the 1B LLaMA's runs.
set -uo pipefail

bundle=${1:?usage: gpu_check.sh BUNDLE.tar.xz [LLMC_DIR] [DATA_DIR]}
llmc=${2:-}
data=${3:-}
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
root=$(mktemp -d /tmp/trident-gpu.XXXX)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
skipped() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
# part NAME SECONDS LOG COMMAND...: runs one check under a time limit, appends to LOG.
part() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS
  echo "=== $name: $*" >>"$log"
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-34s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))"
  return $rc
}

if command -v xz >/dev/null; then
  xz -dc "$bundle" | tar -C "$root" -xf -
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$root"
fi

# The GPU machine's own CUDA runtime, cuBLAS and NCCL (they match its driver).
cuda_dirs=
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name "$lib" 2>/dev/null | head -1)
  [[ -n $found ]] && cuda_dirs=$cuda_dirs:$(dirname "$found")
done
export LD_LIBRARY_PATH=$root/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Open MPI as a singleton (no mpirun on the machine): its plug-ins from the bundle.
export OMPI_MCA_mca_base_component_path=$root/lib/openmpi3 PMIX_MCA_mca_base_component_path=$root/lib/pmix
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

env_log=$out/env.log
{
  date -u
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  command -v nvcc && nvcc --version | tail -2
  command -v compute-sanitizer mpirun nsys ncu
  uname -a
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for p in "$root"/bin/* "$root"/tests/*; do ldd "$p" | grep "not found" | sed "s|^|$(basename "$p"): |"; done
  "$root/bin/trident" info
} >"$env_log" 2>&1
note "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

tests_log=$out/tests.log
if ! skipped tests; then
  declare -A limits=([cuda_device_test]=60 [cuda_consistency_test]=150 [cuda_training_test]=180)
  # As ctest runs them: with the checks that only tests pay for (they re-convert cached compute copies
  # every step, and slow training down far too much for a benchmark).
  for t in cuda_device_test cuda_consistency_test cuda_training_test; do
    TRIDENT_VERIFY_COMPUTE_COPIES=1 TRIDENT_VERIFY_OP_NAMES=1 part "$t" "${limits[$t]}" "$tests_log" "$root/tests/$t" \
      --gtest_brief=1
  done
  TRIDENT_VERIFY_COMPUTE_COPIES=1 TRIDENT_VERIFY_OP_NAMES=1 part "nccl_communicator_test (1 rank)" 60 "$tests_log" \
    "$root/tests/nccl_communicator_test" --gtest_brief=1
  grep -h -E "^\[  (PASSED|FAILED|SKIPPED) |tests? (ran|skipped)|^\[  FAILED  \]" "$tests_log" | sort | uniq -c >>"$summary"
fi

bench_log=$out/bench.log
if ! skipped bench; then
  for b in ${BATCHES:-8 16 32 64}; do
    part "train_bench bf16 B=$b T=1024" 75 "$bench_log" "$root/bin/train_bench" --device cuda --batch "$b" --seq 1024 \
      --steps 10 --only bf16
  done
  # A LLaMA of about 1B parameters (TinyLlama's shape) at sequence 2048, without and with activation checkpointing.
  for ckpt in ${LLAMA_CHECKPOINTING:-0 1}; do
    part "train_bench llama-1b B=$((4 + 4 * ckpt)) ckpt=$ckpt" 150 "$bench_log" "$root/bin/train_bench" --device cuda \
      --preset llama-1b --batch $((4 + 4 * ckpt)) --seq 2048 --steps 5 --only bf16 --checkpointing "$ckpt"
  done
  grep -E "^train_bench|^bf16|GPU memory" "$bench_log" >>"$summary"
fi

llmc_log=$out/llmc.log
if ! skipped llmc && [[ -n $llmc ]]; then
  for b in ${BATCHES:-8 16 32 64}; do
    # From random initialisation (-e d12), no validation, sampling or checkpoints.
    (cd "$llmc" && part "llm.c train_gpt2cu B=$b T=1024" 60 "$llmc_log" ./train_gpt2cu -e d12 -b "$b" -t 1024 -x 30 \
      -i kjv_train_llmc.bin -j kjv_train_llmc.bin -v 1000 -m 1 -s 0 -n 0)
  done
  grep -E "^\| micro batch size|^step +30/" "$llmc_log" >>"$summary"
fi

prof_log=$out/bench.log
if ! skipped profile; then
  # Where the step's GPU time goes: Nsight Compute's kernel durations, or with USE_NSYS=1 Nsight Systems'
  # kernel summary (on the lent H100, nsys records but cannot make its report: "Importer error").
  nsys=
  [[ ${USE_NSYS:-0} == 1 ]] && nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
    /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
  bench=("$root/bin/train_bench" --device cuda --batch 8 --seq 1024 --steps 3 --only bf16)
  if [[ -n $nsys ]] && part "nsys profile train_bench B=8" 120 "$prof_log" "$nsys" profile -t cuda -o /tmp/trident-prof \
    --force-overwrite true "${bench[@]}" &&
    part "nsys stats" 60 "$prof_log" "$nsys" stats -r cuda_gpu_kern_sum -f csv -o /tmp/trident-kern /tmp/trident-prof.nsys-rep; then
    cp /tmp/trident-kern*.csv "$out/kernels.csv" 2>/dev/null
  elif command -v ncu >/dev/null; then
    # Two steps (the warm-up and one timed); every kernel once, serialised.
    part "ncu kernel durations (2 steps)" 150 "$prof_log" ncu --metrics gpu__time_duration.sum --csv --log-file \
      "$out/kernels.csv" "${bench[@]:0:7}" --steps 1 --only bf16
  fi
fi

san_log=$out/sanitizer.log
if ! skipped sanitizer && command -v compute-sanitizer >/dev/null; then
  filter='*attention_causal*:*attention_backward_causal*:*attention_gqa_head_dim_128*:*attention_backward_gqa_head_dim_128*'
  filter+=':*norm_backward_1024*:*norm_backward_1025*:*norm_backward_odd_width*:*cross_entropy*:*embedding*'
  filter+=':*dropout*:*Dropout*:*padded*'
  for tool in memcheck racecheck; do
    part "compute-sanitizer $tool" 100 "$san_log" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$root/tests/cuda_consistency_test" --gtest_brief=1 --gtest_filter="$filter"
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$san_log" >>"$summary"
fi

main_log=$out/mainjob.log
if ! skipped mainjob && [[ -n $data ]]; then
  work=$(mktemp -d /tmp/trident-main.XXXX)
  mkdir -p "$work/data" && ln -s "$(realpath "$data")" "$work/data/kjv"  # DATA_DIR is the kjv folder itself
  cp configs/kjv_gpt_small.toml "$work/"
  (cd "$work" && part "main job on cuda (1200 steps)" 150 "$main_log" "$root/bin/trident" train kjv_gpt_small.toml \
    --run-dir run --set dist.tensor_parallel_size=1 --set dist.pipeline_parallel_size=1 --set 'train.device="cuda"' \
    --set train.log_interval=100)
  (cd "$work" && part "generate from the GPU checkpoint" 60 "$main_log" "$root/bin/trident" generate --checkpoint run \
    --prompt "And God said unto Moses," --max-new-tokens 24 --greedy)
  (cd "$work" && part "eval of the GPU checkpoint" 60 "$main_log" "$root/bin/trident" eval --checkpoint run \
    --data data/kjv/kjv_test --seq-len 128)
  grep -E "val|step +1200|loss" "$main_log" | tail -6 >>"$summary"
fi
echo "=== summary"
cat "$summary"
