"""trident.models: models split over a parallel layout, as oslo's ``*_with_parallel`` and LiBai's models."""

from __future__ import annotations

import os

from . import _trident
Model = _trident.Model
from .config import Config, PathLike


def from_pretrained(
    path: PathLike,
    tp: int = 1,
    pp: int = 1,
    dp: int = 0,
    cp: int = 1,
    *,
    seq_len: int = 0,
    micro_batch_size: int = 1,
    seed: int = 0,
) -> Model:
    """A Hugging Face directory (or a sharded save of any layout) split over tp × pp × cp; the job's other
    ranks are data-parallel (``dp=0`` infers it). Collective: every rank calls it. As oslo's
    ``GPT2LMHeadModel.from_pretrained_with_parallel(path, tensor_parallel_size=2, pipeline_parallel_size=2)``.
    """
    return _trident.model_from_pretrained(os.fspath(path), tp, pp, dp, cp, seq_len, micro_batch_size, seed)


def from_config(config: Config | PathLike) -> Model:
    """The model a configuration describes (``model.*``, ``data.tokenizer``, ``train.seq_len``,
    ``train.micro_batch_size``, ``train.seed``), on its ``dist.*`` layout; loaded from
    ``model.from_pretrained`` when set, else initialised as a fresh training run. Collective."""
    if not isinstance(config, Config):
        config = Config(config)
    return _trident.model_from_config(config.path, config.overrides)


__all__ = ["Model", "from_pretrained", "from_config"]
