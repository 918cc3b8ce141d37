#!/bin/bash
# The same job on one node's GPUs: four ranks, one per GPU (train.device = "cuda" gives each rank the GPU
# of its local rank), everything else as sbatch.sh. Submit it from the repository root, after
# prepare_data.sh, with trident built where nvcc is installed (the CUDA backend):
#
#   sbatch examples/bert_mlm/sbatch_gpu.sh
#
# Untested on several GPUs: trident's CUDA backend has run on one GPU at a time so far (docs/gpu.md).
# The environment is sbatch.sh's (TRIDENT, DATA_DIR, RUN_DIR — default runs/bert_mlm_gpu —, LR,
# TRIDENT_ARGS).
#SBATCH --job-name=bert_mlm_gpu
#SBATCH --nodes=1                   # one node
#SBATCH --ntasks=4                  # four ranks: ds_config.json's train_batch_size 4 = 1 per rank × 4
#SBATCH --gres=gpu:4                # four GPUs, every one visible to every rank
#SBATCH --output=bert_mlm_gpu-%j.out

set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
export RUN_DIR=${RUN_DIR:-runs/bert_mlm_gpu}
export TRIDENT_ARGS="--set train.device=\"cuda\" ${TRIDENT_ARGS:-}"
exec bash examples/bert_mlm/sbatch.sh
