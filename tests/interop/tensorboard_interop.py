"""TensorBoard event files (log.tensorboard) read by TensorBoard's own EventAccumulator:

1. A dense run in fp16 with evaluation (loss, lr, grad norm, tokens/s, MFU, memory, the loss scale, val
   loss and perplexity), then resumed from its step-10 checkpoint after it had gone on to step 14 (as a
   run that crashed after 14 would be): every scalar TensorBoard shows equals metrics.jsonl's, at the
   same steps, each step once. Also with the older file as it was before the resume rewrote it: the
   SessionLog START event alone keeps TensorBoard from showing steps 11..14 twice.
2. A mixture of experts on 2 data-parallel ranks (the MoE and straggler figures): one event file, rank
   0's, and its scalars equal metrics.jsonl's.
"""
import glob
import json
import os
import shutil
import struct
import sys

from common import fresh_dir, require, run, tiny_corpus

trident = sys.argv[1]
require("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

tmp = fresh_dir("/tmp/trident-tensorboard-interop")
failures = []


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(metrics_path):
    """{tag: {step: value}} from metrics.jsonl's numbers (a list's items are TAG/i), as 32-bit floats."""
    out = {}
    with open(metrics_path) as f:
        for line in f:
            j = json.loads(line)
            for key, value in j.items():
                if key == "step":
                    continue
                items = [(key, value)] if not isinstance(value, list) else [(f"{key}/{i}", v) for i, v in enumerate(value)]
                for tag, v in items:
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        steps = out.setdefault(tag, {})
                        if j["step"] in steps:
                            failures.append(f"{metrics_path}: {tag} twice at step {j['step']}")
                        steps[j["step"]] = f32(float(v))
    return out


def compare(name, logdir, metrics_path, must_have):
    acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    ours = {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        if len(set(steps)) != len(steps):
            failures.append(f"{name}: TensorBoard shows {tag} at steps {steps}: some twice")
        ours[tag] = {e.step: e.value for e in events}
    theirs = expected_scalars(metrics_path)
    missing = [t for t in must_have if t not in theirs]
    if missing:
        failures.append(f"{name}: metrics.jsonl lacks {missing}: the run did not exercise them")
    if ours != theirs:
        for tag in sorted(set(ours) | set(theirs)):
            a, b = ours.get(tag, {}), theirs.get(tag, {})
            if a != b:
                diff = {s: (a.get(s), b.get(s)) for s in sorted(set(a) | set(b)) if a.get(s) != b.get(s)}
                failures.append(f"{name}: {tag}: TensorBoard != metrics.jsonl at (step: (tensorboard, jsonl)) {diff}")
    count = sum(len(v) for v in ours.values())
    status = "ok" if ours == theirs and not missing else "FAIL"
    print(f"{status}: {name}: {len(ours)} tags, {count} scalars, TensorBoard's equal metrics.jsonl's")


# A corpus and a tokenizer.
corpus = tiny_corpus(trident, os.path.join(tmp, "corpus"))
tok_json = os.path.join(corpus, "tok.json")
common = {"model.n_layer": 2, "model.n_head": 4, "model.d_model": 32, "model.max_seq_len": 32, "train.seq_len": 32,
          "data.tokenizer": tok_json, "data.paths": f'["{os.path.join(corpus, "c")}"]', "data.split": '"90,10,0"',
          "log.progress": "off", "train.micro_batch_size": 2, "train.log_interval": 1, "train.peak_gflops": 1,
          "optim.lr": 3e-3}


def train(run_dir, sets, ranks=1):
    cmd = [trident, "train", "--run-dir", run_dir]
    if ranks > 1:
        cmd = [trident, "launch", "-n", str(ranks), "--"] + cmd
    for key, value in {**common, **sets}.items():
        cmd += ["--set", f"{key}={value}"]
    run(cmd)


# 1. fp16 with evaluation; to step 14 (checkpoints at 10 and 14), then resumed from 10 to 20.
dense = os.path.join(tmp, "dense")
dense_sets = {"train.precision": '"fp16"', "train.eval_interval": 5, "train.eval_steps": 2,
              "checkpoint.interval": 10, "log.tensorboard": "true"}
train(dense, {**dense_sets, "train.steps": 14})
tb = os.path.join(dense, "tensorboard")
before = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
if len(before) != 1:
    failures.append(f"dense: {len(before)} event files after the first run, expected 1: {before}")
compare("dense, steps 1-14", tb, os.path.join(dense, "metrics.jsonl"),
        ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "peak_memory_mb", "loss_scale", "val_loss",
         "val_ppl"])
snapshot = os.path.join(tmp, "dense-old-file")
os.makedirs(snapshot)
shutil.copy(before[0], snapshot)

train(dense, {**dense_sets, "train.steps": 20,
              "checkpoint.resume": f'"{os.path.join(dense, "checkpoints", "step_00000010")}"'})
after = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
if len(after) != 2 or after[0] != before[0]:
    failures.append(f"dense: the resumed run did not add a file of its own after {before}: {after}")
compare("dense, resumed from step 10 to 20", tb, os.path.join(dense, "metrics.jsonl"),
        ["loss", "loss_scale", "val_loss", "val_ppl"])
# The older file as the first run left it (steps 11..14 in it): the START event alone hides them.
shutil.copy(after[-1], snapshot)
compare("dense, resumed, the older file not rewritten (START only)", snapshot, os.path.join(dense, "metrics.jsonl"),
        ["loss"])

# 2. A mixture of experts on 2 ranks: aux loss, per-layer load imbalance, dropped fraction, straggler figures.
moe = os.path.join(tmp, "moe")
train(moe, {"model.arch": '"mixtral"', "model.n_kv_head": 2, "model.n_experts": 4, "model.experts_per_token": 2,
            "model.moe_aux_loss_coef": 0.02, "model.moe_capacity_factor": 1.0, "model.d_ff": 48,
            "train.global_batch_size": 8, "train.steps": 4, "train.eval_interval": 0,
            "log.tensorboard": f'"{os.path.join(tmp, "moe-tb")}"'}, ranks=2)
files = glob.glob(os.path.join(tmp, "moe-tb", "events.out.tfevents.*"))
if len(files) != 1:
    failures.append(f"moe: {len(files)} event files, expected rank 0's alone: {files}")
compare("mixtral on 2 ranks", os.path.join(tmp, "moe-tb"), os.path.join(moe, "metrics.jsonl"),
        ["aux_loss", "moe_load_imbalance/0", "moe_load_imbalance/1", "moe_dropped_fraction", "straggler_rank",
         "straggler_work_ms", "median_work_ms", "straggler_ratio"])

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("all TensorBoard checks passed")
