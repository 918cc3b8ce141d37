"""``python -m trident``: the ``trident`` command, the same program (shipped in the package)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def command_path() -> str:
    """The ``trident`` command this package carries."""
    return str(Path(__file__).resolve().parent / "_bin" / "trident")


def main() -> None:
    command = command_path()
    if not os.access(command, os.X_OK):
        sys.exit(f"trident: the package's command is missing ({command}); reinstall the package")
    os.execv(command, ["trident", *sys.argv[1:]])


if __name__ == "__main__":
    main()
