#!/usr/bin/env bash
# Runs the Python examples on a tiny corpus (not named check.sh: scripts/package_check.sh runs those with a
# C++ example's arguments) (scripts/python_check.sh calls it with the project's venv, where
# the package is installed): lightning_style.py alone, oslo_style.py on tp 2 × pp 2 under mpirun.
#   examples/python/check_examples.sh PYTHON WORK_DIR
set -euo pipefail
python=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
trident=("$python" -m trident)
for i in $(seq 1 400); do echo "line $i of the test corpus, with words that repeat and repeat again."; done > "$work/c.txt"
"${trident[@]}" tokenizer train --input "$work/c.txt" --vocab-size 300 --special-token '<|endoftext|>' \
  --output "$work/tok.json" > /dev/null 2>&1
"${trident[@]}" preprocess --input "$work/c.txt" --tokenizer "$work/tok.json" --output-prefix "$work/c" --append-eod --quiet
cat > "$work/tiny.toml" <<TOML
[model]
arch = "gpt2"
n_layer = 2
n_head = 2
d_model = 32
max_seq_len = 32
[data]
tokenizer = "$work/tok.json"
paths = ["$work/c"]
split = "90,10,0"
[train]
seq_len = 32
micro_batch_size = 2
steps = 20
log_interval = 5
eval_interval = 10
eval_steps = 1
peak_gflops = 1.0
[log]
progress = "off"
TOML

out=$("$python" "$here/lightning_style.py" "$work/tiny.toml" "$work/run" --loss-target 5.55)
grep -q "^requested after" <<<"$out" || { echo "lightning_style.py: the loss target did not stop it: $out" >&2; exit 1; }
echo "lightning_style.py: $(tail -1 <<<"$out" | cut -c1-100)"

mpirun=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
out=$("${mpirun[@]}" -n 4 "$python" "$here/oslo_style.py" "$work/tiny.toml" "$work/oslo" --tp 2 --pp 2)
grep -q "on tp=2 pp=2 dp=1" <<<"$out" || { echo "oslo_style.py: $out" >&2; exit 1; }
[[ -f $work/oslo/merged/config.json ]] || { echo "oslo_style.py: no merged save" >&2; exit 1; }
echo "oslo_style.py: $(tail -1 <<<"$out")"
