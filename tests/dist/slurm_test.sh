#!/usr/bin/env bash
# trident under Slurm: `srun --mpi=PLUGIN -n 2 trident train ...` is detected as a
# 2-rank job (data parallel) and follows the single-process run's losses; srun with no MPI
# plug-in (each task would train alone) is refused with a line naming the one to use.
# Skips (exit 77) unless a Slurm controller answers (`sinfo`); scripts/slurm_local.sh
# starts a single-node Slurm on this machine.
#   slurm_test.sh TRIDENT_BINARY [PLUGIN]   (the MPI library's: pmix for Open MPI, pmi2 for MPICH)
set -uo pipefail
trident=$1
plugin=${2:-pmix}
source "$(dirname "$0")/../cli/tiny_corpus.sh"
if ! command -v srun >/dev/null 2>&1 || ! timeout 10 sinfo >/dev/null 2>&1; then
  echo "SKIP: no Slurm cluster answers (start one with scripts/slurm_local.sh)"
  exit 77
fi
tiny_corpus_run "$trident" slurm
args=(train --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 --set model.max_seq_len=16
      --set train.seq_len=16 --set train.micro_batch_size=2 --set train.global_batch_size=8 --set train.steps=4
      --set train.log_interval=1 "${tiny_data[@]}" --set train.eval_interval=0)
"$trident" "${args[@]}" --run-dir "$work/one" > "$work/one.log" 2>&1 || fail "single process: $(tail -3 "$work/one.log")"
timeout 300 srun --mpi="$plugin" -n 2 "$trident" "${args[@]}" --run-dir "$work/two" > "$work/two.log" 2>&1 \
  || fail "srun: $(tail -5 "$work/two.log")"
grep -q "dp=2 × tp=1 × pp=1 (2 ranks)" "$work/two.log" || fail "srun job not seen as 2 ranks: $(grep trident: "$work/two.log")"
diff <(grep '^step ' "$work/one.log" | cut -d'|' -f2) <(grep '^step ' "$work/two.log" | cut -d'|' -f2) \
  || fail "losses differ between one process and srun -n 2"
echo "ok: srun --mpi=$plugin -n 2 follows the single-process losses: $(grep '^step ' "$work/two.log" | cut -d'|' -f2 | tr '\n' ' ')"

# Without an MPI plug-in each task would be a job of one rank: refused before training, naming the
# plug-in to use; with another library's plug-in (pmix for MPICH) too.
timeout 120 srun --mpi=none -n 2 "$trident" "${args[@]}" --run-dir "$work/none" > "$work/none.log" 2>&1 \
  && fail "srun --mpi=none trained: $(tail -3 "$work/none.log")"
grep -q "trident: error: srun started 2 tasks without an MPI plug-in (SLURM_MPI_TYPE=none), so each would train alone .*run srun --mpi=$plugin" \
  "$work/none.log" || fail "srun --mpi=none message: $(cat "$work/none.log")"
[[ ! -e $work/none/metrics.jsonl ]] || fail "srun --mpi=none wrote metrics"
echo "ok: srun --mpi=none is refused: $(grep -m1 'trident: error' "$work/none.log")"
if [[ $plugin == pmi2 ]] && srun --mpi=list 2>&1 | grep -qw pmix; then
  timeout 120 srun --mpi=pmix -n 2 "$trident" "${args[@]}" --run-dir "$work/pmix" > "$work/pmix.log" 2>&1 \
    && fail "MPICH under srun --mpi=pmix trained: $(tail -3 "$work/pmix.log")"
  grep -q "srun started 2 tasks, but each sees a job of one rank: srun's --mpi plugin (pmix) does not start ranks of the MPI library .*run srun --mpi=pmi2" \
    "$work/pmix.log" || fail "srun --mpi=pmix message: $(cat "$work/pmix.log")"
  echo "ok: MPICH under srun --mpi=pmix is refused: $(grep -m1 'trident: error' "$work/pmix.log")"
fi
