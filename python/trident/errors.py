"""trident's exceptions. Each carries the one-line message the ``trident`` command prints for the same
error; the extension picks the class from the key the message names and the part of trident that raised it
(python/src/errors.cpp)."""

from __future__ import annotations


class Error(RuntimeError):
    """An error of trident's, with the message the trident command prints."""


class ConfigError(Error, ValueError):
    """A config key or value is wrong: unknown, of the wrong type, out of range, or inconsistent."""


class DataError(Error, ValueError):
    """Data, a tokenizer, or an array handed to trident is missing or wrong."""


class CheckpointError(Error):
    """A checkpoint or pretrained directory is missing, incomplete, or does not match the model."""


class DistError(Error):
    """The distributed runtime failed."""


class CollectiveTimeout(DistError, TimeoutError):
    """A collective timed out: a peer rank is stuck, dead, or never called it."""


__all__ = ["Error", "ConfigError", "DataError", "CheckpointError", "DistError", "CollectiveTimeout"]
