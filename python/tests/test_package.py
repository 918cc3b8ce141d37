"""The package: its version, its command, its stubs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trident
from trident.__main__ import command_path


def test_version_is_the_command_s():
    out = subprocess.run([sys.executable, "-m", "trident", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"trident {trident.__version__}"
    assert trident.__version__.count(".") == 2


def test_python_m_trident_is_the_command():
    out = subprocess.run([sys.executable, "-m", "trident", "info"], capture_output=True, text=True, check=True)
    direct = subprocess.run([command_path(), "info"], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == direct.stdout.splitlines()[0]
    bad = subprocess.run([sys.executable, "-m", "trident", "trian"], capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown command 'trian'" in bad.stderr


def test_stubs_and_marker_ship():
    package = Path(trident.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_trident.pyi").read_text()
    for name in ("class Tokenizer", "class Model", "class AdamW", "def train(", "def encode_batch("):
        assert name in stub, name


def test_openssl_and_torch_import_after_trident():
    """A new interpreter: trident first, then what loads libcrypto and NCCL again (see trident/_libraries.py)."""
    code = "import trident, hashlib, ssl\nhashlib.sha256(b'x').hexdigest()\ntry:\n    import torch\nexcept ImportError:\n    pass\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
