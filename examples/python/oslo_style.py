"""oslo's shape: a model split over tensor × pipeline parallelism, and the program's own loop.

    python examples/python/oslo_style.py CONFIG OUT_DIR
    mpirun -n 4 python examples/python/oslo_style.py configs/tiny_gpt.toml out/oslo --tp 2 --pp 2

oslo's ``GPT2LMHeadModel.from_pretrained_with_parallel(path, tensor_parallel_size=2, pipeline_parallel_size=2)``
is ``trident.models.from_pretrained(path, tp=2, pp=2)``; here the model is the config's (``from_config``),
the batches are numpy arrays from the config's tokenizer, and the loop is the program's: zero_grad,
forward_backward, clip, step. The model is then saved merged, as a Hugging Face directory that
``transformers`` (or ``trident.models.from_pretrained`` on any layout) loads.
"""

from __future__ import annotations

import argparse

import numpy as np

import trident

TEXT = "In the beginning God created the heaven and the earth. And the earth was without form, and void. " * 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("out_dir")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    overrides: dict[str, object] = {"dist.tensor_parallel_size": args.tp, "dist.pipeline_parallel_size": args.pp}
    for pair in args.set:
        key, _, value = pair.partition("=")
        overrides[key] = value
    config = trident.Config(args.config, overrides=overrides)
    model = trident.models.from_config(config)
    layout = model.layout
    seq_len, micro_batch = config["train.seq_len"], config["train.micro_batch_size"]

    # The batches: one text, tokenized, cut into windows; each data-parallel rank takes its own.
    tokenizer = trident.Tokenizer.from_file(config["data.tokenizer"])
    ids = np.asarray(tokenizer.encode(TEXT), dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ids, seq_len + 1)[:: seq_len // 2]
    rng = np.random.default_rng(1234)

    optimizer = trident.optim.AdamW(model, weight_decay=0.0)
    first = last = 0.0
    for step in range(1, args.steps + 1):
        picks = rng.choice(len(windows), size=micro_batch * layout["dp"], replace=False)
        mine = windows[picks[layout["dp_rank"] * micro_batch : (layout["dp_rank"] + 1) * micro_batch]]
        optimizer.zero_grad()
        loss = model.forward_backward(np.ascontiguousarray(mine[:, :-1]), np.ascontiguousarray(mine[:, 1:]))
        optimizer.step(3e-3, trident.optim.clip_coefficient(model.grad_norm(), 1.0))
        first, last = (loss, loss) if step == 1 else (first, loss)
        if trident.dist.is_main_process() and step % 5 == 0:
            print(f"step {step}: loss {loss:.4f}")

    model.save_pretrained(f"{args.out_dir}/merged", merge=True)
    trident.dist.barrier()
    if trident.dist.is_main_process():
        print(f"loss {first:.4f} -> {last:.4f} on tp={layout['tp']} pp={layout['pp']} dp={layout['dp']}; "
              f"saved {args.out_dir}/merged")
    if last >= first:
        raise SystemExit(f"the loss did not fall: {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    main()
