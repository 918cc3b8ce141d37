"""trident.Trainer: the command's training loop, Lightning's callbacks, stops and errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import trident
from conftest import run_cli, set_flags


def logged_losses(run_dir: Path) -> dict[int, float]:
    losses = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record and "step" in record and "val_loss" not in record:
            losses[record["step"]] = record["loss"]
    return losses


def test_a_python_run_equals_the_command_s_bit_for_bit(tiny, tmp_path):
    result = trident.Trainer(trident.Config(overrides=tiny), run_dir=tmp_path / "py").fit()
    run_cli("train", *set_flags(tiny), "--run-dir", str(tmp_path / "cli"))
    cli = logged_losses(tmp_path / "cli")
    assert result.steps_done == 6 and result.stopped == "completed" and not result.interrupted
    assert len(result.losses) == 6
    assert cli, "the command logged no losses"
    for step, loss in cli.items():
        assert result.losses[step - 1] == loss, f"step {step}"  # exactly: the same program, the same order
    assert logged_losses(tmp_path / "py") == cli
    assert Path(result.last_checkpoint).name == "step_00000006"
    assert [s for s, _ in result.val_losses] == [0, 3, 6]


class Recorder(trident.Callback):
    def __init__(self, stop_at: int | None = None):
        self.calls: list[tuple[str, dict]] = []
        self.stop_at = stop_at

    def on_train_start(self, trainer, info):
        self.calls.append(("on_train_start", info))

    def on_train_batch_end(self, trainer, metrics):
        self.calls.append(("on_train_batch_end", metrics))
        if metrics["step"] == self.stop_at:
            trainer.should_stop = True

    def on_validation_end(self, trainer, metrics):
        self.calls.append(("on_validation_end", metrics))

    def on_save_checkpoint(self, trainer, checkpoint):
        self.calls.append(("on_save_checkpoint", checkpoint))

    def on_train_end(self, trainer, result):
        self.calls.append(("on_train_end", result))

    def names(self, hook: str) -> list[dict]:
        return [arg for name, arg in self.calls if name == hook]


def test_callbacks_see_every_step_evaluation_and_checkpoint(tiny, tmp_path):
    recorder = Recorder()
    trainer = trident.Trainer(trident.Config(overrides=dict(tiny, **{"checkpoint.interval": 2})),
                              run_dir=tmp_path / "run", callbacks=[recorder], quiet=True)
    result = trainer.fit()
    assert recorder.calls[0][0] == "on_train_start" and recorder.calls[-1][0] == "on_train_end"
    info = recorder.names("on_train_start")[0]
    assert (info["world_size"], info["dp"], info["tp"], info["pp"], info["first_step"], info["steps"]) == (1, 1, 1, 1, 0, 6)
    steps = recorder.names("on_train_batch_end")
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5, 6]
    assert [m["loss"] for m in steps] == result.losses
    assert all(m["lr"] >= 0 and m["grad_norm"] > 0 and m["tokens_per_s"] > 0 for m in steps)
    assert [(m["step"], m["val_loss"]) for m in recorder.names("on_validation_end")] == result.val_losses
    saved = recorder.names("on_save_checkpoint")
    assert [c["step"] for c in saved] == [2, 4, 6]
    assert all(Path(c["path"]).is_dir() for c in saved)
    assert trainer.global_step == 6 and trainer.logged_metrics["step"] == 6


def test_should_stop_stops_after_the_step_with_a_checkpoint_and_resume_goes_on(tiny, tmp_path):
    config = trident.Config(overrides=tiny)
    result = trident.Trainer(config, run_dir=tmp_path / "run", callbacks=[Recorder(stop_at=2)], quiet=True).fit()
    assert (result.steps_done, result.stopped, result.interrupted) == (2, "requested", False)
    assert Path(result.last_checkpoint).name == "step_00000002"
    resumed = trident.Trainer(config, run_dir=tmp_path / "run", resume=True, quiet=True).fit()
    assert resumed.steps_done == 6 and len(resumed.losses) == 4
    whole = trident.Trainer(config, run_dir=tmp_path / "whole", quiet=True).fit()
    assert resumed.losses == whole.losses[2:]  # a stop and a resume change nothing


def test_a_callback_s_exception_reaches_the_caller(tiny, tmp_path):
    class Boom(trident.Callback):
        def on_train_batch_end(self, trainer, metrics):
            if metrics["step"] == 2:
                raise ValueError("boom at step 2")

    with pytest.raises(ValueError, match="boom at step 2"):
        trident.Trainer(trident.Config(overrides=tiny), run_dir=tmp_path / "run", callbacks=[Boom()], quiet=True).fit()
    # The run directory's lock was released: the same directory trains again.
    assert trident.Trainer(trident.Config(overrides=tiny), run_dir=tmp_path / "run", quiet=True).fit().steps_done == 6


def test_bad_data_raises_data_error_with_the_command_s_message(tiny, tmp_path):
    bad = dict(tiny, **{"data.paths": ["/nonexistent/corpus"]})
    with pytest.raises(trident.DataError) as e:
        trident.Trainer(trident.Config(overrides=bad), run_dir=tmp_path / "run", quiet=True).fit()
    cli = run_cli("train", *set_flags(bad), "--run-dir", str(tmp_path / "cli"), check=False)
    assert cli.returncode != 0
    assert cli.stderr.strip().splitlines()[-1] == f"trident: error: {e.value}"


def test_resume_of_a_run_that_does_not_exist_is_a_checkpoint_error(tiny, tmp_path):
    with pytest.raises(trident.CheckpointError, match="--resume"):
        trident.Trainer(trident.Config(overrides=tiny), run_dir=tmp_path / "none", resume=True, quiet=True).fit()


def test_ctrl_c_stops_with_a_checkpoint(tiny, tmp_path):
    """SIGINT during fit(): the step ends, a checkpoint is written, fit() returns interrupted."""
    overrides = dict(tiny, **{"train.steps": 100000, "train.eval_interval": 0})
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, trident
        class Started(trident.Callback):
            def on_train_batch_end(self, trainer, metrics):
                if metrics["step"] == 3:
                    print("started", flush=True)
        result = trident.Trainer(trident.Config(overrides={overrides!r}), run_dir={str(tmp_path / "run")!r},
                                 callbacks=[Started()], quiet=True).fit()
        print(json.dumps({{"steps": result.steps_done, "stopped": result.stopped,
                          "interrupted": result.interrupted, "checkpoint": result.last_checkpoint}}), flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["stopped"] == "signal" and result["interrupted"] and result["steps"] >= 3
    assert Path(result["checkpoint"]).name == f"step_{result['steps']:08d}"
