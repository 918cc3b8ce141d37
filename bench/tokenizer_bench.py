"""Tokenizer and preprocessing benchmark: trident against Hugging Face
`tokenizers`, in the same run, on the built-in corpus (scripts/prepare_corpus.sh).

  scripts/python_env.sh   # the venv with tokenizers
  ~/.cache/trident/venv/bin/python bench/tokenizer_bench.py --build build [--repeat 5]

Prints single-thread encode throughput (MB/s) of both, whole corpus as one
text and line by line (a verse per call), their ratio, and `trident
preprocess` throughput with all workers on the corpus's chapters (JSONL)
replicated to ~40 MB.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # single-thread Hugging Face
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--build", default="build")
p.add_argument("--data", default="data/kjv")
p.add_argument("--repeat", type=int, default=5)
args = p.parse_args()

tok_path = os.path.join(args.data, "tokenizer.json")
text_path = os.path.join(args.data, "kjv.txt")
if not os.path.exists(tok_path):
    sys.exit("run scripts/prepare_corpus.sh first")
text = open(text_path, encoding="utf-8", newline="").read()
mb = len(text.encode()) / 1e6
lines = text.split("\n")

out = subprocess.run([os.path.join(args.build, "bin", "tokenizer_bench"), "--tokenizer", tok_path, "--input", text_path,
                      "--repeat", str(args.repeat)], capture_output=True, text=True, check=True).stdout
tr = json.loads(out)

whole, per_line = [], []
for _ in range(args.repeat):
    hf = Tokenizer.from_file(tok_path)  # fresh: its word cache starts cold, like trident's
    t0 = time.perf_counter()
    ids = hf.encode(text, add_special_tokens=False).ids
    whole.append(mb / (time.perf_counter() - t0))
    hf = Tokenizer.from_file(tok_path)
    t0 = time.perf_counter()
    for line in lines:
        hf.encode(line, add_special_tokens=False)
    per_line.append(mb / (time.perf_counter() - t0))
assert len(ids) == tr["tokens"], (len(ids), tr["tokens"])
hf_whole, hf_lines = statistics.median(whole), statistics.median(per_line)

print(f"corpus: {text_path}, {mb:.2f} MB, {tr['tokens']} tokens (identical count in both)")
print(f"single-thread encode, whole text : trident {tr['whole_mb_s']:7.2f} MB/s   HF tokenizers {hf_whole:7.2f} MB/s   "
      f"ratio {tr['whole_mb_s'] / hf_whole:5.2f}x")
print(f"single-thread encode, per line   : trident {tr['lines_mb_s']:7.2f} MB/s   HF tokenizers {hf_lines:7.2f} MB/s   "
      f"ratio {tr['lines_mb_s'] / hf_lines:5.2f}x")

# Preprocess throughput with all workers, on ~40 MB of JSONL.
chapters = open(os.path.join(args.data, "chapters.jsonl"), encoding="utf-8").read()
with tempfile.TemporaryDirectory() as tmp:
    big = os.path.join(tmp, "big.jsonl")
    with open(big, "w", encoding="utf-8") as f:
        for _ in range(10):
            f.write(chapters)
    workers = os.cpu_count()
    res = subprocess.run([os.path.join(args.build, "bin", "trident"), "preprocess", "--input", big, "--tokenizer",
                          tok_path, "--output-prefix", os.path.join(tmp, "out"), "--append-eod", "--workers",
                          str(workers)], capture_output=True, text=True, check=True)
    print("preprocess, all workers          : " + res.stderr.strip().splitlines()[-1])
