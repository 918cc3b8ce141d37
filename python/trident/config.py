"""trident.Config: a TOML config (or a DeepSpeed JSON) with overrides, as ``trident train`` reads it."""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping
from typing import Any, Union

from . import _trident
from .errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]


def _toml_value(key: str, value: Any) -> str:
    """The TOML text of a Python value, as ``--set key=VALUE`` takes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{key}: {value} is not a number a config holds")
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return json.dumps(os.fspath(value))  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(key, v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(key, v)}" for k, v in value.items()) + " }"
    raise ConfigError(
        f"{key}: a value of type {type(value).__name__} (expected bool, int, float, str, a path, or a list of them)"
    )


class Config:
    """A configuration: the defaults, then a TOML file (or a DeepSpeed ``ds_config.json``), then overrides.

    ``overrides`` take the dotted keys of ``trident train --set`` with Python values. Each key and value is
    checked as the command checks it: a wrong one raises :class:`ConfigError` with the command's message.
    The rules across keys (data present, batch sizes against the layout) are checked by :meth:`validate`,
    which :meth:`Trainer.fit` applies.
    """

    def __init__(
        self,
        path: PathLike | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        deepspeed: PathLike | None = None,
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ConfigError(f"Config path: expected a str or a path, got {type(path).__name__}")
        path_text = os.fspath(path) if path is not None else ""
        if path_text.endswith(".json"):  # a ds_config alone, as `trident train --deepspeed`
            if deepspeed is not None:
                raise ConfigError(f"Config('{path_text}', deepspeed=...): give one DeepSpeed config")
            deepspeed, path_text = path_text, ""
        self.path: str = path_text
        self._overrides: list[str] = []
        if deepspeed is not None:
            self._overrides.append(f"train.deepspeed_config={_toml_value('train.deepspeed_config', deepspeed)}")
        for key, value in (overrides or {}).items():
            self._overrides.append(f"{key}={_toml_value(key, value)}")
        self._resolve()

    def _resolve(self) -> None:
        self._toml = _trident.resolve_config(self.path, self._overrides)
        self._table = tomllib.loads(self._toml)

    def validate(self) -> None:
        """Checks the keys together as ``trident train`` does for this job's rank count (data.paths given,
        batch sizes divisible by the data-parallel size, the layout dividing the world, ...)."""
        _trident.resolve_config(self.path, self._overrides, True)

    @property
    def overrides(self) -> list[str]:
        """The overrides in ``--set`` form (``section.key=TOML``), in order."""
        return list(self._overrides)

    def __getitem__(self, key: str) -> Any:
        node: Any = self._table
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                _trident.unknown_key(key)
            node = node[part]
        return node

    def __setitem__(self, key: str, value: Any) -> None:
        self._overrides.append(f"{key}={_toml_value(key, value)}")
        try:
            self._resolve()
        except BaseException:
            self._overrides.pop()
            raise

    def to_toml(self) -> str:
        """Every key, as the run directory's config.toml records it."""
        return self._toml

    def to_dict(self) -> dict[str, Any]:
        return tomllib.loads(self._toml)

    @staticmethod
    def keys() -> dict[str, str]:
        """Every key and its type, as ``trident train --help-config`` lists them."""
        return dict(_trident.config_keys())

    def __repr__(self) -> str:
        return f"Config({self.path!r}, overrides={self._overrides!r})"
