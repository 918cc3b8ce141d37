"""trident.optim: optimizers over a model's parameters on this rank, for a program's own loop."""

from __future__ import annotations

from . import _trident

AdamW = _trident.AdamW
clip_coefficient = _trident.clip_coefficient

__all__ = ["AdamW", "clip_coefficient"]
