"""Fixtures of the Python package's tests (python/tests, run by scripts/python_check.sh).

The package under test is the installed ``trident`` (a wheel built from this checkout); the ``trident``
command they compare it with is the one the package carries, the same program the CLI tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trident
from trident.__main__ import command_path

# One CPU thread per process, as the CLI tests run, so that results do not depend on the core count.
os.environ.setdefault("TRIDENT_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent


def run_cli(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Runs the package's ``trident`` command."""
    result = subprocess.run([command_path(), *args], capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"trident {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, str]:
    """A tiny corpus: 400 lines, a 300-token byte-level BPE and its Megatron dataset (as tests/cli/tiny_corpus.sh)."""
    d = tmp_path_factory.mktemp("corpus")
    text = d / "c.txt"
    text.write_text("".join(f"line {i} of the test corpus, with words that repeat and repeat again.\n" for i in range(1, 401)))
    run_cli("tokenizer", "train", "--input", str(text), "--vocab-size", "300", "--special-token", "<|endoftext|>",
            "--output", str(d / "tok.json"))
    run_cli("preprocess", "--input", str(text), "--tokenizer", str(d / "tok.json"), "--output-prefix", str(d / "c"),
            "--append-eod", "--quiet")
    return {"dir": str(d), "text": str(text), "tokenizer": str(d / "tok.json"), "prefix": str(d / "c")}


@pytest.fixture()
def tiny(corpus) -> dict[str, object]:
    """Overrides that train a tiny GPT-2 on the corpus in a second, with a plain log."""
    return {
        "model.n_layer": 2,
        "model.n_head": 2,
        "model.d_model": 32,
        "model.max_seq_len": 16,
        "train.seq_len": 16,
        "train.micro_batch_size": 2,
        "train.steps": 6,
        "train.log_interval": 2,
        "train.eval_interval": 3,
        "train.eval_steps": 1,
        "data.tokenizer": corpus["tokenizer"],
        "data.paths": [corpus["prefix"]],
        "data.split": "90,10,0",
        "log.progress": "off",
        "train.peak_gflops": 1.0,
    }


def set_flags(overrides: dict[str, object]) -> list[str]:
    """The same overrides as the command's --set flags (through the package's own TOML spelling)."""
    flags: list[str] = []
    for assignment in trident.Config(overrides=overrides).overrides:
        flags += ["--set", assignment]
    return flags


def mpirun() -> list[str] | None:
    """The MPI launcher and its flags for a 2-rank run here, or None when there is none."""
    launcher = shutil.which("mpirun")
    if launcher is None:
        return None
    flags = ["-n", "2"]
    version = subprocess.run([launcher, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        flags += ["--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return [launcher, *flags]


@pytest.fixture()
def python() -> str:
    return sys.executable
