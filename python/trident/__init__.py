"""trident: train large language models with 3D parallelism, from Python.

A thin layer over trident's C++ library (the extension ``trident._trident``): every call goes into the
functions the ``trident`` command runs. See docs/guide/python.md.

    import trident
    config = trident.Config("configs/kjv_gpt2.toml", overrides={"train.steps": 100})
    trident.Trainer(config, run_dir="runs/py", callbacks=[MyCallback()]).fit()
"""

from __future__ import annotations

import atexit as _atexit

from ._libraries import load_before_extension as _load_before_extension

_load_before_extension()

from . import _trident, dist, models, optim  # noqa: E402
from ._trident import Tokenizer  # noqa: E402
from .errors import CheckpointError, CollectiveTimeout, ConfigError, DataError, DistError, Error  # noqa: E402
from .config import Config  # noqa: E402
from .trainer import Callback, Trainer, TrainResult  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .data import preprocess, write_dataset  # noqa: E402

__version__: str = _trident.version()

__all__ = [
    "__version__",
    "Config",
    "Trainer",
    "TrainResult",
    "Callback",
    "Tokenizer",
    "evaluate",
    "preprocess",
    "write_dataset",
    "models",
    "optim",
    "dist",
    "Error",
    "ConfigError",
    "DataError",
    "CheckpointError",
    "DistError",
    "CollectiveTimeout",
]

# MPI is finalized once, when the interpreter exits (a job's every rank does the same).
_atexit.register(_trident.dist_finalize)

if dist.launched_by_mpi():
    import sys as _sys

    _previous_hook = _sys.excepthook

    def _end_the_job(kind, value, traceback):  # type: ignore[no-untyped-def]
        """An exception no rank caught: print it, then end every rank of the job (as the command does for an
        error only some ranks see), so that no peer waits in a collective for this one."""
        _previous_hook(kind, value, traceback)
        _sys.stderr.flush()
        _trident.dist_abort(1)

    _sys.excepthook = _end_the_job
