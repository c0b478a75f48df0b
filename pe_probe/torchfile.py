"""Reading a torch file as untrusted input: ``torch.load(weights_only=True)`` for any file name, quietly,
and its failures as one plain reason.

Shared by the analysis loader (`pe_probe.io`) and the trainers' checkpoint reader
(`trainers.checkpoint.load_checkpoint`), so both read the same files and word their refusals alike.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from pe_probe.errors import torch_load_reason, utf8_name
from pe_probe.filechecks import check_torch_pickle


def read_torch_file(path: str | os.PathLike, map_location: Any = "cpu", mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain containers only, never code.

    Without torch's "Detected pickle protocol 4" warning (a stray stderr line before a one-line error), and
    for a file name that is not UTF-8 too: torch's C++ reader takes UTF-8 names only, so such a file is
    opened here and handed over as a file object (not memory-mapped). A zip whose pickle is larger than any
    real checkpoint's is refused first (`check_torch_pickle`: InputError), before torch inflates it."""
    import torch

    check_torch_pickle(Path(path))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if utf8_name(path):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        with open(path, "rb") as f:
            return torch.load(f, map_location=map_location, weights_only=True)


def torch_file_reason(e: BaseException) -> str:
    """Why `read_torch_file` failed, as a phrase for "not a readable torch file (...)": torch's own reason
    where it gives one, else what the failure says about the file (a corrupt stream can fail anywhere in
    the unpickler, with a KeyError whose text is a bare number)."""
    if isinstance(e, EOFError):
        return "it ends too early: empty or truncated"
    if isinstance(e, (pickle.UnpicklingError, RuntimeError, OSError)):
        return torch_load_reason(e)
    name = type(e).__name__
    if name == "error":  # struct.error, zlib.error: the module says what failed
        name = f"{type(e).__module__}.error"
    return f"corrupt, or not written by torch.save: {name}"
