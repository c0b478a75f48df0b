"""Checking a torch zip checkpoint's storage records against what its pickle says they hold, before a
memory-mapped ``torch.load`` reads them.

With ``mmap=True`` torch reads each storage at its record's offset for as many bytes as the pickle claims,
without comparing that with the record's size: a record cut short (or deflate-compressed, whose bytes are not
the values) was read past its end, and the garbage analysed with exit 0. Here the pickle's persistent ids
(``('storage', storage class, key, location, numel)``) are read by an unpickler whose every global is an inert
stub (nothing from the file runs), and each record's size and compression are compared with them.
"""

from __future__ import annotations

import io
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


# A torch pickle names a handful of globals (rebuild helpers, storage classes, OrderedDict); a crafted one could
# name thousands, each a stub class of ~2 KB here
MAX_GLOBALS = 256


class _PersistentIds(pickle.Unpickler):
    """Collects the persistent ids of a torch pickle; every global resolves to a stub class named after it (one
    per distinct name, at most `MAX_GLOBALS`)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.ids: list[Any] = []
        self.classes: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> type:
        qualified = f"{module}.{name}"
        if qualified not in self.classes:
            if len(self.classes) >= MAX_GLOBALS:
                raise pickle.UnpicklingError("too many distinct globals for a torch checkpoint")
            self.classes[qualified] = type(name, (_Stub,), {"qualified": qualified})
        return self.classes[qualified]

    def persistent_load(self, pid: Any) -> _Stub:
        self.ids.append(pid)
        return _Stub()


PUT_OPS = ("PUT", "BINPUT", "LONG_BINPUT")  # the opcodes that store into the memo at an index
_PID_OPS = ("PERSID", "BINPERSID")
# A torch pickle takes ~32 opcodes per storage (measured on a 5,000-tensor state_dict); more than this many per
# storage, beyond a slack for configs and metrics, is not a plain state_dict (16 MiB of EMPTY_SET opcodes built
# 3.9 GB of empty sets in the stub unpickler): such a pickle is left to torch's own reader
MAX_OPS_PER_STORAGE = 100
OPS_SLACK = 100_000


def _scan_is_plain(data: bytes) -> bool:
    """Whether the pickle can go through the stub unpickler cheaply: every memo index it stores under is below its
    number of opcodes, as in any pickle Python or torch writes (CPython's unpickler sizes its memo by the largest
    index: a 14-byte pickle storing under 2^31 asked for 32 GB), and its opcodes stay within `MAX_OPS_PER_STORAGE`
    per storage it names (plus `OPS_SLACK`), checked as it goes. Scanned with `pickletools.genops`, which builds
    nothing."""
    import pickletools

    n_ops = n_pids = 0
    largest = -1
    try:
        for op, arg, _ in pickletools.genops(data):
            n_ops += 1
            if op.name in PUT_OPS:
                largest = max(largest, int(arg))
            elif op.name in _PID_OPS:
                n_pids += 1
            if n_ops > MAX_OPS_PER_STORAGE * n_pids + OPS_SLACK:
                return False
    except Exception:  # noqa: BLE001 - not a pickle this scan can follow: torch's own reader judges it
        return False
    return largest < n_ops


def _element_size(storage_class: Any) -> int | None:
    """Bytes per element of a torch storage class named in the pickle (``torch.FloatStorage``...); 1 for
    ``UntypedStorage`` (its numel counts bytes; torch writes it as ``torch.storage.UntypedStorage`` for dtypes
    without a typed storage: float8, uint16/32/64); None when the name is not a torch storage class."""
    import torch

    name = getattr(storage_class, "qualified", "")
    module, _, attr = name.rpartition(".")
    if attr == "UntypedStorage" and module in ("torch", "torch.storage"):
        return 1
    if module != "torch" or not attr.endswith("Storage"):
        return None
    with warnings.catch_warnings():  # TypedStorage classes warn that they are deprecated when touched
        warnings.simplefilter("ignore")
        dtype = getattr(getattr(torch, attr, None), "dtype", None)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else None


def mmap_is_safe(path: Path) -> bool:
    """Whether a memory-mapped load of torch zip ``path`` reads exactly its records: each storage record is stored
    uncompressed with the byte size its pickle claims. False (load it without mmap, where torch checks the sizes
    itself) when the pickle cannot be read here or a record is compressed; InputError when a record's size differs
    from its claim (a truncated or edited file)."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = [i.filename.lower() for i in zf.infolist()]
            if len(set(names)) != len(names):  # torch's reader matches names ignoring case and takes the first:
                return False  # with two "data/0" (or "data/A" and "data/a") it could read another record than checked
            pkl = [i for i in zf.infolist() if i.filename.lower().endswith("data.pkl")]
            if len(pkl) != 1:
                return False
            prefix = pkl[0].filename[: -len("data.pkl")]
            data = zf.read(pkl[0])  # its size is capped before (filechecks.check_torch_pickle)
            if not _scan_is_plain(data):
                return False
            reader = _PersistentIds(data)
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
            shown = f"{need:,}" if 0 <= need < 10**24 else "an impossible number of"
            raise InputError(f"{show_path(path)}: its record {info.filename} holds {info.file_size:,} bytes but its "
                             f"tensor's storage needs {shown} bytes: the file is truncated or edited; re-save or "
                             f"re-download it")
    return safe
