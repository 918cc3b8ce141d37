"""Lightning's shape: a config, a Trainer with callbacks, fit().

    python examples/python/lightning_style.py configs/tiny_gpt.toml runs/py-lightning [--set key=value ...]
    mpirun -n 2 python examples/python/lightning_style.py configs/tiny_gpt.toml runs/py-lightning \
        --set dist.tensor_parallel_size=2

Lightning's ``Trainer(callbacks=[...]).fit(module, datamodule)`` becomes ``trident.Trainer(config,
callbacks=[...]).fit()``: the model and the data are the config's (``model.*``, ``data.*``), as LiBai's
LazyConfig holds them. The callbacks keep the best validation loss, stop when the training loss reaches a
target (Lightning's ``trainer.should_stop``), and print on rank 0 only.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import trident


class LossTarget(trident.Callback):
    """Stops training once the training loss is at or under ``target`` (a checkpoint is written)."""

    def __init__(self, target: float) -> None:
        self.target = target

    def on_train_batch_end(self, trainer: trident.Trainer, metrics: dict[str, Any]) -> None:
        if metrics["loss"] <= self.target:
            trainer.should_stop = True


class BestValidation(trident.Callback):
    """Remembers the best validation loss and where it was."""

    def __init__(self) -> None:
        self.best = (math.inf, -1)

    def on_validation_end(self, trainer: trident.Trainer, metrics: dict[str, Any]) -> None:
        if metrics["val_loss"] < self.best[0]:
            self.best = (metrics["val_loss"], metrics["step"])

    def on_save_checkpoint(self, trainer: trident.Trainer, checkpoint: dict[str, Any]) -> None:
        if trident.dist.is_main_process():
            print(f"checkpoint of step {checkpoint['step']}: {checkpoint['path']}")


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """--set key=value pairs: the values as the command reads them (numbers, true/false, else strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        value: Any = text
        for convert in (int, float):
            try:
                value = convert(text)
                break
            except ValueError:
                pass
        if text in ("true", "false"):
            value = text == "true"
        out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("run_dir")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--loss-target", type=float, default=0.0)
    args = parser.parse_args()

    config = trident.Config(args.config, overrides=parse_sets(args.set))
    best = BestValidation()
    trainer = trident.Trainer(config, run_dir=args.run_dir, callbacks=[LossTarget(args.loss_target), best])
    result = trainer.fit()
    if trident.dist.is_main_process():
        print(f"{result.stopped} after {result.steps_done} steps; final loss {result.losses[-1]:.4f}; "
              f"best validation loss {best.best[0]:.4f} at step {best.best[1]}; layout {trainer.info}")


if __name__ == "__main__":
    main()
