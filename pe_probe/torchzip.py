"""Checking a torch zip checkpoint's storage records against what its pickle says they hold, before a
memory-mapped ``torch.load`` reads them.

With ``mmap=True`` torch reads each storage at its record's offset for as many bytes as the pickle claims,
without comparing that with the record's size: a record cut short (or deflate-compressed, whose bytes are not
the values) was read past its end, and the garbage analysed with exit 0. Here the pickle's persistent ids
(``('storage', storage class, key, location, numel)``) are read by an unpickler whose every global is an inert
stub (nothing from the file runs), and each record's size and compression are compared with them.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

from pe_probe.errors import InputError, show_path


class _Stub:
    """Stands for any object the pickle builds: accepts construction, state and items, and does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _PersistentIds(pickle.Unpickler):
    """Collects the persistent ids of a torch pickle; every global resolves to a fresh stub class named after it."""

    def __init__(self, data: bytes) -> None:
        import io

        super().__init__(io.BytesIO(data))
        self.ids: list[Any] = []

    def find_class(self, module: str, name: str) -> type:
        return type(name, (_Stub,), {"qualified": f"{module}.{name}"})

    def persistent_load(self, pid: Any) -> _Stub:
        self.ids.append(pid)
        return _Stub()


def _element_size(storage_class: Any) -> int | None:
    """Bytes per element of a torch storage class named in the pickle (``torch.FloatStorage``...); 1 for
    ``torch.UntypedStorage`` (its numel counts bytes); None when the name is not a torch storage class."""
    import torch

    name = getattr(storage_class, "qualified", "")
    module, _, attr = name.rpartition(".")
    if module != "torch" or not attr.endswith("Storage"):
        return None
    if attr == "UntypedStorage":
        return 1
    with warnings.catch_warnings():  # TypedStorage classes warn that they are deprecated when touched
        warnings.simplefilter("ignore")
        dtype = getattr(getattr(torch, attr, None), "dtype", None)
    return torch.empty(0, dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else None


def mmap_is_safe(path: Path) -> bool:
    """Whether a memory-mapped load of torch zip ``path`` reads exactly its records: each storage record is stored
    uncompressed with the byte size its pickle claims. False (load it without mmap, where torch checks the sizes
    itself) when the pickle cannot be read here or a record is compressed; InputError when a record's size differs
    from its claim (a truncated or edited file)."""
    try:
        with zipfile.ZipFile(path) as zf:
            pkl = [i for i in zf.infolist() if i.filename.endswith("data.pkl")]
            if len(pkl) != 1:
                return False
            prefix = pkl[0].filename[: -len("data.pkl")]
            reader = _PersistentIds(zf.read(pkl[0]))
            reader.load()
            infos = {i.filename: i for i in zf.infolist()}
    except Exception:  # noqa: BLE001 - any failure: let torch's own (non-mmap) reader judge the file
        return False
    safe = True
    for pid in reader.ids:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[2], str)
                and isinstance(pid[4], int)):
            return False
        size = _element_size(pid[1])
        info = infos.get(f"{prefix}data/{pid[2]}")
        if size is None or info is None:
            return False  # torch says what is wrong
        if info.compress_type != zipfile.ZIP_STORED:
            safe = False  # its bytes are not the values: torch inflates it without mmap
            continue
        need = pid[4] * size
        if info.file_size != need:
            raise InputError(f"{show_path(path)}: its record {info.filename} holds {info.file_size:,} bytes but its "
                             f"tensor's storage needs {need:,}: the file is truncated or edited; re-save or re-download it")
    return safe
