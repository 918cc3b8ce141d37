"""Shared libraries that trident and PyTorch must share in one process.

trident's extension links NCCL (``libnccl.so.2``); a CUDA build of PyTorch ships its own, newer one in the
``nvidia-nccl`` wheel. A process loads one library per name: when trident is imported first, the system's
NCCL comes in and ``import torch`` then fails (``undefined symbol: ncclCommResume``). When that wheel is
installed, it is loaded here first, so both use it (NCCL keeps its ABI within major version 2).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os


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
