#!/usr/bin/env bash
# The main job: installs dependencies, builds trident, prepares the built-in
# corpus (the King James Bible), trains a small GPT on it on 4 ranks (tensor ×
# pipeline parallel) with a live progress display and falling validation loss,
# saves a checkpoint, samples text, and draws the loss curves (RUN_DIR/loss.png).
#
#   ./scripts/run.sh                       everything, on a fresh Debian 12 machine
#   RUN_DIR=runs/other ./scripts/run.sh    put the run elsewhere
#   ./scripts/run.sh --set train.steps=100 extra trident train overrides
set -euo pipefail
cd "$(dirname "$0")/.."

run_dir=${RUN_DIR:-runs/kjv}
jobs=$(nproc 2>/dev/null || echo 2)

source scripts/lib.sh

echo "==> [1/5] dependencies"
./scripts/install_deps.sh

echo "==> [2/5] build (Release; the first build takes a few minutes)"
mkdir -p build/logs
quiet build/logs/configure.log cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
quiet build/logs/build-trident.log ninja -C build -j "$jobs" trident
./build/bin/trident info

echo "==> [3/5] built-in corpus"
./scripts/prepare_corpus.sh

echo "==> [4/5] training on 4 ranks, tp=2 × pp=2 (configs/kjv_gpt_small.toml; Ctrl-C saves a checkpoint, --resume continues)"
rm -rf "$run_dir"
./build/bin/trident launch -n 4 -- ./build/bin/trident train configs/kjv_gpt_small.toml --run-dir "$run_dir" "$@"

echo "==> [5/5] sampling from the checkpoint, its perplexity on the held-out test split, and the loss curves"
./build/bin/trident generate --checkpoint "$run_dir" --prompt "And God said unto Moses," \
  --max-new-tokens 80 --temperature 0.8 --top-k 40 --no-repeat-ngram 3 --seed 7
./build/bin/trident eval --checkpoint "$run_dir" --data data/kjv/kjv_test --seq-len 128
./build/bin/trident plot "$run_dir"
echo "run.sh: done. Metrics: $run_dir/metrics.jsonl (plot: $run_dir/loss.png); checkpoint: $(cat "$run_dir/checkpoints/latest" 2>/dev/null)"
