"""trident.Trainer: ``trident train``'s loop, with Lightning-style callbacks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from . import _trident
from .config import Config, PathLike


class Callback:
    """Hooks into training, named as Lightning's are. Override the ones you need.

    Every hook receives the :class:`Trainer` first, then a dict: the step's metrics
    (``step``, ``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``, ``mfu``, ``step_ms``, ...), the
    validation result (``step``, ``val_loss``), or the checkpoint (``step``, ``path``). Set
    ``trainer.should_stop = True`` to stop after the current step, with a checkpoint. Hooks run on every
    rank, between steps; an exception in one ends the run and propagates out of :meth:`Trainer.fit`.
    """

    def on_train_start(self, trainer: Trainer, info: dict[str, Any]) -> None: ...

    def on_train_batch_end(self, trainer: Trainer, metrics: dict[str, Any]) -> None: ...

    def on_validation_end(self, trainer: Trainer, metrics: dict[str, Any]) -> None: ...

    def on_save_checkpoint(self, trainer: Trainer, checkpoint: dict[str, Any]) -> None: ...

    def on_train_end(self, trainer: Trainer, result: dict[str, Any]) -> None: ...


@dataclass
class TrainResult:
    """How :meth:`Trainer.fit` ended."""

    steps_done: int
    losses: list[float]  # the training loss of every step this call ran
    val_losses: list[tuple[int, float]]  # (step, validation loss)
    last_checkpoint: str  # "" when none was written
    interrupted: bool  # a signal (Ctrl-C, SIGTERM) or train.exit_duration_minutes stopped it, after saving
    stopped: str  # completed | signal | time_limit | early_stopping | requested
    extra: dict[str, Any] = field(default_factory=dict)


class Trainer:
    """Trains as ``trident train CONFIG --run-dir RUN_DIR`` does, on this job's ranks.

    Under ``mpirun -n 4 python train.py`` (or ``srun``, or ``trident launch -n 4 -- python train.py``) every
    rank runs the script and ``fit`` trains on the layout the config's ``dist.*`` keys name. Ctrl-C (or
    SIGTERM) stops at the next step boundary with a checkpoint, as for the command; ``fit`` then returns
    with ``interrupted`` set, and ``resume=True`` continues the run.
    """

    def __init__(
        self,
        config: Config | PathLike,
        run_dir: PathLike = "runs/default",
        callbacks: Sequence[Callback] = (),
        *,
        resume: bool = False,
        quiet: bool = False,
        verbose: bool = False,
    ) -> None:
        if not isinstance(config, Config):
            config = Config(config)
        self.config = config
        self.run_dir = os.fspath(run_dir)
        self.callbacks = list(callbacks)
        self.resume = resume
        self.quiet = quiet
        self.verbose = verbose
        self.should_stop = False
        self.info: dict[str, Any] = {}  # on_train_start's: this rank's place and the run's shape
        self.global_step = 0
        self.logged_metrics: dict[str, Any] = {}

    def _dispatch(self, hook: str, argument: dict[str, Any]) -> bool:
        if hook == "on_train_start":
            self.info = dict(argument)
            self.global_step = argument["first_step"]
        elif hook == "on_train_batch_end":
            self.global_step = argument["step"]
            self.logged_metrics.update(argument)
        elif hook == "on_validation_end":
            self.logged_metrics.update(argument)
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self, argument)
        return self.should_stop

    def fit(self) -> TrainResult:
        """Runs the training; returns how it ended. Raises the trident error a bad config, data or
        checkpoint gives (with the command's message), or a callback's exception."""
        self.should_stop = False
        summary = _trident.train(
            self.config.path,
            self.config.overrides,
            self.run_dir,
            self.resume,
            self.quiet,
            self.verbose,
            self._dispatch,
        )
        return TrainResult(
            steps_done=summary["steps_done"],
            losses=list(summary["losses"]),
            val_losses=[tuple(v) for v in summary["val_losses"]],
            last_checkpoint=summary["last_checkpoint"],
            interrupted=summary["interrupted"],
            stopped=summary["stopped"],
        )
