"""Shared libraries to load before trident's extension.

OpenSSL. The extension links the system's libcrypto (through libzip) and, in a build with Parquet input,
pyarrow's libparquet, which carries a copy of OpenSSL's symbols of its own. Loaded in that order as the
extension's dependencies, libcrypto's calls into itself bind to libparquet's copies, and the next use of
libcrypto (``import hashlib``, ``ssl``, ``torch``) crashes. Python's ``_hashlib`` is imported first, so
libcrypto is loaded alone and binds to itself.

NCCL. trident's extension links NCCL (``libnccl.so.2``); a CUDA build of PyTorch ships its own, newer one in the
``nvidia-nccl`` wheel. A process loads one library per name: when trident is imported first, the system's
NCCL comes in and ``import torch`` then fails (``undefined symbol: ncclCommResume``). When that wheel is
installed, it is loaded here first, so both use it (NCCL keeps its ABI within major version 2).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os


def load_before_extension() -> None:
    import _hashlib  # noqa: F401  (libcrypto, alone: see above)

    load_shared_with_torch()


def load_shared_with_torch() -> None:
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(location, "lib", "libnccl.so.2")
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return
