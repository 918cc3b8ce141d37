"""The Python package's overhead against the `trident` command, measured in the same run (issue 44).

  ./scripts/python_check.sh            # builds the wheel and installs it into the project's venv
  ~/.cache/trident/venv/bin/python bench/python_bench.py [--data data/kjv] [--repeat 3]

1. Training: the loop time of a run driven by trident.Trainer (with a callback on every hook, the worst
   case) against `trident train` on the same config. Set-up is cancelled by timing each mode at two
   lengths (LONG and SHORT steps) and taking the difference; the ratio is CLI loop / Python loop
   (1.0 = no overhead; above 0.99 is the target).
2. Tokenizing: Tokenizer.encode_batch (1 thread, and every core) against `trident tokenizer encode --jsonl`
   on the corpus's chapters (JSONL, one document per chapter), MB/s of text.
3. Handing a parameter to numpy (and torch, when installed): the time of model.parameters()[name] and
   np.asarray for a 100 MB and a 0.4 MB parameter (zero-copy: the same), against copying the 100 MB one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import trident
from trident.__main__ import command_path

os.environ.setdefault("TRIDENT_NUM_THREADS", "1")

p = argparse.ArgumentParser()
p.add_argument("--data", default="data/kjv")
p.add_argument("--repeat", type=int, default=5)
p.add_argument("--short", type=int, default=5)
p.add_argument("--long", type=int, default=25)
p.add_argument("--parts", default="1,2,3", help="which measurements to run (1: training, 2: tokenizing, 3: arrays)")
args = p.parse_args()
data = Path(args.data)
work = Path(tempfile.mkdtemp(prefix="trident-pybench."))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"trident {trident.__version__} on {cpu}, {os.cpu_count()} CPUs, TRIDENT_NUM_THREADS={os.environ['TRIDENT_NUM_THREADS']}")

# 1. Training.
overrides = {
    "model.arch": "gpt2", "model.n_layer": 4, "model.n_head": 4, "model.d_model": 256, "model.max_seq_len": 128,
    "train.seq_len": 128, "train.micro_batch_size": 8, "train.eval_interval": 0, "train.log_interval": 1000,
    "checkpoint.interval": 0, "data.tokenizer": str(data / "tokenizer.json"), "data.paths": [str(data / "kjv_train")],
    "data.split": "100,0,0", "log.progress": "off", "train.peak_gflops": 1.0,
}


class EveryHook(trident.Callback):
    def on_train_batch_end(self, trainer, metrics):
        self.last = metrics["loss"]

    def on_validation_end(self, trainer, metrics):
        pass


def python_run(steps: int, run: Path, base: dict = overrides) -> float:
    config = trident.Config(overrides=dict(base, **{"train.steps": steps}))
    start = time.perf_counter()
    # Not quiet: the run logs as the command does (metrics.jsonl, the start and end lines).
    trident.Trainer(config, run_dir=run, callbacks=[EveryHook()]).fit()
    return time.perf_counter() - start


def cli_run(steps: int, run: Path, base: dict = overrides) -> float:
    flags = []
    for assignment in trident.Config(overrides=dict(base, **{"train.steps": steps})).overrides:
        flags += ["--set", assignment]
    start = time.perf_counter()
    subprocess.run([command_path(), "train", *flags, "--run-dir", str(run)], check=True, capture_output=True)
    return time.perf_counter() - start


def loop_times(base: dict, short: int, long: int, tag: str) -> tuple[float, float]:
    """Median seconds per step of the CLI's and the Python run's loops (set-up cancelled)."""
    loops: dict[str, list[float]] = {"cli": [], "python": []}
    for rep in range(args.repeat):
        # The order alternates, so that a drift of the machine's speed does not favour one mode.
        modes = [("cli", cli_run), ("python", python_run)]
        for mode, fn in modes if rep % 2 == 0 else modes[::-1]:
            t_long = fn(long, work / f"{tag}{rep}{mode}l", base)
            t_short = fn(short, work / f"{tag}{rep}{mode}s", base)
            loops[mode].append((t_long - t_short) / (long - short))
    return statistics.median(loops["cli"]), statistics.median(loops["python"])


def report_training() -> None:
    cli_s, py_s = loop_times(overrides, args.short, args.long, "gpt")
    print(f"\n1. training step (gpt2 4 x 256, 8 x 128 tokens), median of {args.repeat}, set-up cancelled "
          f"({args.long} - {args.short} steps):")
    print(f"   trident train {cli_s * 1e3:.1f} ms/step | trident.Trainer with callbacks {py_s * 1e3:.1f} ms/step | "
          f"CLI / Python = {cli_s / py_s:.3f}")
    tiny = dict(overrides, **{"model.n_layer": 1, "model.d_model": 16, "model.n_head": 2, "model.max_seq_len": 16,
                              "train.seq_len": 16, "train.micro_batch_size": 1})
    cli_s, py_s = loop_times(tiny, 200, 2000, "tiny")
    print(f"   a 1-layer, width-16 model (the per-step overhead at its most visible; 2000 - 200 steps): "
          f"trident train {cli_s * 1e6:.0f} us/step | Python {py_s * 1e6:.0f} us/step | "
          f"difference {(py_s - cli_s) * 1e6:+.0f} us/step")

def report_tokenizing() -> None:
    documents = [json.loads(line)["text"] for line in open(data / "chapters.jsonl")]
    megabytes = sum(len(d.encode()) for d in documents) / 1e6
    tokenizer = trident.Tokenizer.from_file(str(data / "tokenizer.json"))
    times: dict[str, list[float]] = {"cli": [], "py1": [], "pyall": []}
    for _ in range(args.repeat):
        start = time.perf_counter()
        subprocess.run([command_path(), "tokenizer", "encode", "--tokenizer", str(data / "tokenizer.json"), "--jsonl",
                        "--input", str(data / "chapters.jsonl")], check=True, stdout=subprocess.DEVNULL)
        times["cli"].append(time.perf_counter() - start)
        for key, threads in (("py1", 1), ("pyall", 0)):
            start = time.perf_counter()
            tokenizer.encode_batch(documents, threads=threads)
            times[key].append(time.perf_counter() - start)
    rate = {k: megabytes / statistics.median(v) for k, v in times.items()}
    print(f"\n2. encoding {len(documents)} documents ({megabytes:.1f} MB), median of {args.repeat}:")
    print(f"   trident tokenizer encode --jsonl {rate['cli']:.2f} MB/s | encode_batch 1 thread {rate['py1']:.2f} MB/s "
          f"({rate['py1'] / rate['cli']:.2f}x) | all {os.cpu_count()} cores {rate['pyall']:.2f} MB/s "
          f"({rate['pyall'] / rate['cli']:.2f}x)")

def report_arrays() -> None:
    big = trident.models.from_config(trident.Config(overrides=dict(
        overrides, **{"model.n_layer": 1, "model.d_model": 512, "model.n_head": 8, "model.vocab_size": 50304})))
    small = trident.models.from_config(trident.Config(overrides=dict(
        overrides, **{"model.n_layer": 1, "model.d_model": 192, "model.n_head": 4, "model.vocab_size": 512})))


    def handoff(model, reps=200) -> tuple[float, int]:
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            array = np.asarray(model.parameters()["transformer.wte.weight"])
            samples.append(time.perf_counter() - start)
        return statistics.median(samples), array.nbytes


    big_s, big_bytes = handoff(big)
    small_s, small_bytes = handoff(small)
    array = big.parameters()["transformer.wte.weight"]
    copies = []
    for _ in range(5):
        start = time.perf_counter()
        np.array(array, copy=True)
        copies.append(time.perf_counter() - start)
    print(f"\n3. a parameter to numpy (model.parameters()[name], np.asarray), median of 200:")
    print(f"   {big_bytes / 1e6:.0f} MB: {big_s * 1e6:.1f} us | {small_bytes / 1e6:.2f} MB: {small_s * 1e6:.1f} us | "
          f"ratio {big_s / small_s:.2f} | a copy of the {big_bytes / 1e6:.0f} MB one: {statistics.median(copies) * 1e3:.1f} ms")
    try:
        import torch

        samples = []
        for _ in range(200):
            start = time.perf_counter()
            torch.from_dlpack(big.parameters()["transformer.wte.weight"])
            samples.append(time.perf_counter() - start)
        print(f"   torch.from_dlpack of the {big_bytes / 1e6:.0f} MB one: {statistics.median(samples) * 1e6:.1f} us")
    except ImportError:
        pass


parts = {int(x) for x in args.parts.split(",")}
for number, report in ((1, report_training), (2, report_tokenizing), (3, report_arrays)):
    if number in parts:
        report()
