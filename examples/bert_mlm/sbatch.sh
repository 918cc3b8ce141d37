#!/bin/bash
# The seed's job under Slurm, done by trident: a BERT trained as a masked LM
# with the seed's DeepSpeed config (ZeRO-3, 4 data-parallel ranks of one
# sample each). Submit it from the repository root, after prepare_data.sh:
#
#   sbatch examples/bert_mlm/sbatch.sh
#
# Environment (sbatch passes it on): TRIDENT (default build/bin/trident),
# DATA_DIR (default data), RUN_DIR (default runs/bert_mlm), LR (default 1e-3:
# the seed's 1e-4 suits fine-tuning bert-large, not a small model from
# scratch), TRIDENT_ARGS (more arguments, e.g. "--set train.steps=50").
#SBATCH --job-name=bert_mlm
#SBATCH --nodes=1                   # one node
#SBATCH --ntasks=4                  # four ranks: ds_config.json's train_batch_size 4 = 1 per rank × 4
#SBATCH --output=bert_mlm-%j.out

set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
trident=${TRIDENT:-build/bin/trident}
data=${DATA_DIR:-data}/bert_mlm
# srun starts the ranks; trident finds its rank and the job's size through srun's MPI plug-in (no launcher
# of its own): pmix for a trident built against Open MPI, SRUN_MPI=pmi2 for MPICH (`trident info` says which).
# checkpoint.resume=auto: submitting the script again continues the run from its newest checkpoint (a
# new run over it would be refused), as a Megatron job that --loads its --save directory.
# shellcheck disable=SC2086  # TRIDENT_ARGS is a list of arguments
srun --mpi="${SRUN_MPI:-pmix}" "$trident" train examples/bert_mlm/bert_small.toml \
  --deepspeed examples/bert_mlm/ds_config.json \
  --run-dir "${RUN_DIR:-runs/bert_mlm}" \
  --set "data.tokenizer=\"$data/tokenizer.json\"" \
  --set "data.paths=[\"$data/train\"]" \
  --set "data.valid_paths=[\"$data/valid\"]" \
  --set "optim.lr=${LR:-1e-3}" \
  --set log.progress=off \
  --set checkpoint.resume=auto \
  ${TRIDENT_ARGS:-}
