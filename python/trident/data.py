"""trident.preprocess and trident.write_dataset: Megatron datasets (PREFIX.bin/.idx) for training."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Union

from . import _trident
from ._trident import Tokenizer
from .config import PathLike


def preprocess(
    output_prefix: PathLike,
    tokenizer: Tokenizer | PathLike,
    *,
    inputs: Sequence[PathLike] = (),
    documents: Iterable[str] | None = None,
    json_key: str = "text",
    append_eod: bool = False,
    eod_token: str | None = None,
    add_special_tokens: bool = True,
    encoder: bool = False,
    skip_bad_lines: bool = False,
    workers: int = 0,
    overwrite: bool = True,
) -> dict[str, Any]:
    """``trident preprocess``: text, JSONL or Parquet files (``inputs``), or an iterable of texts
    (``documents``, one document each: a list, a generator, a datasets.Dataset column), tokenized on
    ``workers`` threads (0: every core) into ``OUTPUT_PREFIX.bin/.idx`` and its card. The iterable is read on
    the calling thread while the workers tokenize without the GIL. Returns the counts (``documents``,
    ``tokens``, ``empty_documents``, ...)."""
    if (documents is None) == (not inputs):
        raise _trident_error("preprocess: give input files (inputs=[...]) or an iterable of texts (documents=...), "
                             "one of the two")
    source = tokenizer if isinstance(tokenizer, (str, os.PathLike)) else ""
    tok = Tokenizer.from_file(os.fspath(tokenizer)) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    return dict(
        _trident.preprocess(tok, os.fspath(source), os.fspath(output_prefix), [os.fspath(f) for f in inputs], documents,
                            json_key, append_eod, eod_token, add_special_tokens, encoder, skip_bad_lines, workers,
                            overwrite)
    )


TokenSequence = Union[Sequence[int], Any]  # a list of ints, or a 1-D integer array (numpy, torch)


def write_dataset(
    prefix: PathLike,
    sequences: Iterable[TokenSequence],
    *,
    vocab_size: int | None = None,
    tokenizer: Tokenizer | PathLike | None = None,
    append_eod: bool = False,
) -> dict[str, int]:
    """``PREFIX.bin/.idx`` from token sequences a program made itself, one document each (empty ones are
    skipped). Ids must be below ``vocab_size`` (default: the tokenizer's). With ``tokenizer``, the dataset's
    card records it, and training checks the dataset against the model's tokenizer; ``append_eod`` says the
    sequences already end with the end-of-document token."""
    tok = Tokenizer.from_file(os.fspath(tokenizer)) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    if vocab_size is None:
        if tok is None:
            raise _trident_error("write_dataset: give vocab_size or tokenizer (the ids must be below it)")
        vocab_size = tok.vocab_size
    source = os.fspath(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else ""
    return dict(_trident.write_dataset(os.fspath(prefix), sequences, vocab_size, tok, source, append_eod))


def _trident_error(message: str) -> Exception:
    from .errors import DataError

    return DataError(message)


__all__ = ["preprocess", "write_dataset"]
