"""trident.evaluate: ``trident eval`` from Python."""

from __future__ import annotations

import os
from typing import Any

from . import _trident
from .config import PathLike


def evaluate(
    checkpoint: PathLike,
    *,
    data: PathLike | None = None,
    text: PathLike | None = None,
    json_key: str = "text",
    seq_len: int = 0,
    batch_size: int = 4,
    max_tokens: int = 0,
    precision: str = "fp32",
    mlm_probability: float = 0.15,
    whole_word_masking: bool = False,
    seed: int = 1234,
) -> dict[str, Any]:
    """The loss and perplexity of a checkpoint (a step directory, or a run directory's newest checkpoint)
    on a dataset prefix (``data``) or a text, JSONL or Parquet file (``text``), as ``trident eval`` computes
    them: windows of ``seq_len`` tokens (the model's context by default), each token predicted once. An
    encoder (BERT) gives its masked-LM loss and ``accuracy``. Under mpirun the model is tensor-parallel
    over the ranks, and every rank gets the same result.

    Returns ``loss``, ``perplexity``, ``predicted`` (the tokens scored), ``tokens``, ``windows``,
    ``seq_len``, ``masked_lm`` (and ``accuracy`` for an encoder)."""
    return dict(
        _trident.evaluate(
            os.fspath(checkpoint),
            os.fspath(data) if data is not None else "",
            os.fspath(text) if text is not None else "",
            json_key,
            seq_len,
            batch_size,
            max_tokens,
            precision,
            mlm_probability,
            whole_word_masking,
            seed,
        )
    )
