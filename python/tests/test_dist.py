"""Distributed runs driven from Python: mpirun and trident launch start the script on every rank."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import trident
from conftest import mpirun, run_cli, set_flags
from trident.__main__ import command_path

SCRIPT = """
import json, sys, trident
overrides = json.loads(sys.argv[1])
ranks = (trident.dist.rank(), trident.dist.world_size(), trident.dist.launched_by_mpi())
result = trident.Trainer(trident.Config(overrides=overrides), run_dir=sys.argv[2], quiet=True).fit()
tp = trident.models.from_config(trident.Config(overrides=overrides)).layout
if ranks[0] == 0:
    with open(sys.argv[3], "w") as f:
        json.dump({"ranks": ranks, "losses": result.losses, "layout": tp}, f)
trident.dist.barrier()
"""


def single_process_losses(overrides, run_dir) -> list[float]:
    run_cli("train", *set_flags(overrides), "--run-dir", str(run_dir))
    losses = {}
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record and "val_loss" not in record:
                losses[record["step"]] = record["loss"]
    return [losses[s] for s in sorted(losses)]


def run_two_ranks(launcher: list[str], tiny, tmp_path) -> dict:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    overrides = dict(tiny, **{"dist.tensor_parallel_size": 2, "train.log_interval": 1, "train.eval_interval": 0})
    out = tmp_path / "result.json"
    env = dict(os.environ, OMPI_MCA_btl="self,vader")
    proc = subprocess.run([*launcher, sys.executable, str(script), json.dumps(overrides), str(tmp_path / "run"), str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_mpirun_tp2_follows_one_process(tiny, tmp_path):
    launcher = mpirun()
    if launcher is None:
        pytest.skip("no mpirun here")
    got = run_two_ranks(launcher, tiny, tmp_path)
    assert got["ranks"] == [0, 2, True]
    assert got["layout"]["tp"] == 2 and got["layout"]["world_size"] == 2
    reference = single_process_losses(dict(tiny, **{"train.log_interval": 1, "train.eval_interval": 0}), tmp_path / "one")
    assert len(got["losses"]) == len(reference) == 6
    for step, (a, b) in enumerate(zip(got["losses"], reference), 1):
        assert abs(a - b) <= 1e-5, f"step {step}: {a} against {b}"


def test_trident_launch_runs_a_python_script(tiny, tmp_path):
    if mpirun() is None:
        pytest.skip("no mpirun here")
    got = run_two_ranks([command_path(), "launch", "-n", "2", "--"], tiny, tmp_path)
    assert got["ranks"] == [0, 2, True]


def test_srun_runs_a_python_script(tiny, tmp_path):
    """Where a Slurm controller answers (scripts/slurm_local.sh makes one), as tests/dist/slurm_test.sh."""
    try:
        answers = shutil.which("srun") is not None and subprocess.run(["sinfo"], capture_output=True,
                                                                      timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        answers = False
    if not answers:
        pytest.skip("no Slurm controller answers here")
    got = run_two_ranks(["srun", "--mpi=pmix", "-n", "2"], tiny, tmp_path)
    assert got["ranks"] == [0, 2, True] and got["layout"]["tp"] == 2


def test_alone_the_script_is_rank_0_of_1():
    assert (trident.dist.rank(), trident.dist.world_size(), trident.dist.is_main_process()) == (0, 1, True)
    trident.dist.barrier()


def test_an_exception_on_one_rank_ends_the_job(tmp_path):
    """A rank that raises alone (its peer waits in a barrier) brings the job down at once."""
    launcher = mpirun()
    if launcher is None:
        pytest.skip("no mpirun here")
    script = tmp_path / "fail.py"
    script.write_text(textwrap.dedent("""
        import trident
        if trident.dist.rank() == 1:
            raise ValueError("rank 1 failed alone")
        trident.dist.barrier()
    """))
    env = dict(os.environ, OMPI_MCA_btl="self,vader")
    proc = subprocess.run([*launcher, sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0
    assert "rank 1 failed alone" in proc.stderr
