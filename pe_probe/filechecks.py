"""Checks on what a file's headers CLAIM, made before any of its data is read (untrusted input).

A 200-byte ``.npy`` can claim 10^11 rows, a 1 KB ``.npz`` member can inflate to gigabytes, and a
16 KB torch zip can hold a pickle of many megabytes that takes minutes to unpickle. These helpers
read only headers and zip directories, refuse claims the file cannot back, and open ``.npy`` data
memory-mapped, so the caller can apply the size guard to the shape and then read just the rows it needs.
"""

from __future__ import annotations

import math
import os
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import IO, Callable

import numpy as np

from pe_probe.errors import InputError, show_path, utf8_name
from pe_probe.errors import first_line as _first_line

NPY_MAGIC = b"\x93NUMPY"
# torch zip checkpoints keep their object tree in data.pkl: a few KB to a few MB for real models. The
# weights-only unpickler is pure Python (~1 s per MiB of opcodes at worst), so more than this is refused.
MAX_TORCH_PICKLE_BYTES = 16 << 20


def _read_header(fh: IO[bytes], label: str, what: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header length) of the .npy stream ``fh``, positioned at its start."""
    from numpy.lib import format as npf

    magic = fh.read(len(NPY_MAGIC))
    if magic != NPY_MAGIC:  # np.load would take it for a pickle and suggest loading it unsafely
        what_it_is = "not a readable .npy file (empty)" if not magic else "not a .npy file (no NumPy header)"
        raise InputError(f"{label}: {what_it_is}; save the {what} with np.save")
    version = tuple(fh.read(2))
    try:
        if version == (1, 0):
            shape, _fortran, dtype = npf.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _fortran, dtype = npf.read_array_header_2_0(fh)
        elif version == (3, 0) and hasattr(npf, "_read_array_header"):
            shape, _fortran, dtype = npf._read_array_header(fh, version)
        else:
            raise ValueError(f"unknown format version {version}")
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, tokenize.TokenError) as e:  # numpy tokenizes it
        raise InputError(f"{label}: not a readable .npy file (a malformed or truncated header: {_first_line(e)}); "
                         f"save the {what} with np.save") from None
    if any(int(s) < 0 for s in shape):
        raise InputError(f"{label}: not a readable .npy file (its header claims a negative size, shape {tuple(shape)}); "
                         f"save the {what} with np.save")
    if dtype.hasobject:
        raise InputError(f"{label}: not a plain numeric .npy array (Python objects, which pe-probe never unpickles); "
                         f"save the {what} as numbers with np.save")
    return tuple(int(s) for s in shape), dtype, fh.tell()


def _check_claim(shape: tuple[int, ...], dtype: np.dtype, available: int, label: str, what: str) -> int:
    """The data bytes the header claims; refused when the file holds fewer."""
    claimed = math.prod(shape) * dtype.itemsize
    if claimed > available:
        raise InputError(f"{label}: its header claims {claimed:,} bytes of data (shape {shape}, {dtype}) but the file "
                         f"holds {max(available, 0):,}; the file is truncated or crafted: save the {what} again with np.save")
    return claimed


def open_npy(path: Path, what: str = "table") -> tuple[tuple[int, ...], np.dtype, Callable[[], np.ndarray]]:
    """Shape, dtype and a reader of a plain numeric ``.npy``, from its header alone.

    The header's claim is checked against the file's size first; the reader memory-maps the data,
    so slicing rows out of it reads only those rows.
    """
    label = show_path(path)
    try:
        with open(path, "rb") as fh:
            shape, dtype, offset = _read_header(fh, label, what)
            size = os.fstat(fh.fileno()).st_size
    except OSError as e:
        raise InputError(f"{label}: cannot be read ({e.strerror or e}); check the path") from None
    claimed = _check_claim(shape, dtype, size - offset, label, what)

    def read() -> np.ndarray:
        if claimed == 0:
            return np.zeros(shape, dtype)
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise InputError(f"{label}: not a readable .npy file ({_first_line(e)}); save the {what} with np.save") from None

    return shape, dtype, read


# what reading a damaged zip member raises: also an encrypted member (RuntimeError), an unknown compression
# method (NotImplementedError) and a corrupt deflate stream (zlib.error)
ZIP_MEMBER_ERRORS = (EOFError, OSError, zipfile.BadZipFile, ValueError, RuntimeError, NotImplementedError, zlib.error)


def open_npz(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype, Callable[[], np.ndarray]]]:
    """Every array member of an ``.npz`` as (shape, dtype, reader), from the members' headers alone.

    Members are read only when asked for (an ``.npz`` can hold many arrays, compressed), and each
    header's claim is checked against the member's uncompressed size in the zip directory, which the
    zip reader enforces. Members that are not ``.npy`` arrays are ignored.
    """
    label = show_path(path)
    fix = "save numbers with np.savez"
    out: dict[str, tuple[tuple[int, ...], np.dtype, Callable[[], np.ndarray]]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                key = info.filename[:-4]
                mlabel = f"{label} (array {key!r})"
                if key in out:  # numpy's own reader would silently take the last one
                    raise InputError(f"{label}: holds two arrays named {key!r}; the file is crafted or corrupt: {fix}")
                with zf.open(info) as fh:
                    shape, dtype, offset = _read_header(fh, mlabel, "arrays")
                _check_claim(shape, dtype, info.file_size - offset, mlabel, "arrays")

                def read(info: zipfile.ZipInfo = info, mlabel: str = mlabel) -> np.ndarray:
                    from numpy.lib import format as npf

                    try:
                        with zipfile.ZipFile(path) as z, z.open(info) as f:
                            return npf.read_array(f, allow_pickle=False)
                    except ZIP_MEMBER_ERRORS as e:
                        raise InputError(f"{mlabel}: not readable ({_first_line(e)}); {fix}") from None

                out[key] = (shape, dtype, read)
    except InputError:
        raise
    except ZIP_MEMBER_ERRORS as e:
        raise InputError(f"{label}: not a readable .npz file (empty, truncated or damaged: {_first_line(e)}); {fix}") from None
    if not out:
        raise InputError(f"{label}: the .npz holds no arrays; {fix}")
    return out


NPY_MAGIC = b"\x93NUMPY"


def check_not_numpy(path: Path) -> None:
    """Refuse a NumPy file saved under a torch name (``.npy``/``.npz`` renamed ``.pt``): torch cannot read it and
    would call it corrupt or pickled code; the fix is its real suffix."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(NPY_MAGIC))
        is_npz = (head[:2] == b"PK" and zipfile.is_zipfile(path)
                  and _zip_names_are_arrays(path))
    except (OSError, zipfile.BadZipFile, ValueError):
        return  # torch.load says what is wrong with it
    if head == NPY_MAGIC or is_npz:
        real = ".npz" if is_npz else ".npy"
        raise InputError(f"{show_path(path)}: this is a NumPy {real} file, not a torch file; rename it to "
                         f"{path.with_suffix(real).name} (or load it with numpy and save it with torch.save)")


def _zip_names_are_arrays(path: Path) -> bool:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    return bool(names) and all(n.endswith(".npy") for n in names)


def check_torch_pickle(path: Path) -> None:
    """Refuse a torch zip whose pickle (``data.pkl``) is larger, uncompressed, than any real checkpoint's.

    The size comes from the zip directory, which torch's zip reader also trusts (it inflates into a
    buffer of that size), so nothing is decompressed or unpickled here. Non-zip files pass: their pickle
    is no larger than the file.
    """
    try:
        if not zipfile.is_zipfile(path):
            return
        with zipfile.ZipFile(path) as zf:
            sizes = [i.file_size for i in zf.infolist() if i.filename.lower().endswith(".pkl")]  # torch: any case
    except (OSError, zipfile.BadZipFile, ValueError):
        return  # torch.load says what is wrong with it
    if sizes and max(sizes) > MAX_TORCH_PICKLE_BYTES:
        raise InputError(f"{show_path(path)}: its pickle (data.pkl) is {max(sizes):,} bytes uncompressed, more than the "
                         f"{MAX_TORCH_PICKLE_BYTES >> 20} MiB any real checkpoint needs; the file is crafted or corrupt: "
                         f"re-save the tensors with torch.save(model.state_dict()) or as .safetensors")


# torch.load(weights_only=True) ran attacker code before 2.6 (CVE-2025-32434) and could corrupt memory before
# 2.10 (CVE-2026-24747, pickle opcodes and storage sizes): pickled torch files are read only from 2.10 on.
SAFE_TORCH_LOADER = "2.10"


def check_safe_torch_loader(path: Path, version: str | None = None) -> None:
    """Refuse to unpickle ``path`` when the installed torch's weights-only loader has known code-execution flaws."""
    from torch.torch_version import TorchVersion

    if version is None:
        import torch

        version = torch.__version__
    if TorchVersion(version) < SAFE_TORCH_LOADER:
        raise InputError(f"{show_path(path)}: refused to load with torch {version}: its weights-only loader can run code "
                         f"from a crafted file (CVE-2025-32434, CVE-2026-24747); install torch>={SAFE_TORCH_LOADER} (make install "
                         f"does), or convert the file to .safetensors on a trusted machine")


def check_not_special(path: Path, what: str) -> None:
    """Refuse an existing path that is neither a regular file nor a folder (a FIFO, a device such as /dev/zero, a
    socket): reading one would block or never end. Refuse a name that is not UTF-8 too: reports record and show
    their inputs' names, in UTF-8 files."""
    if not utf8_name(path):
        raise InputError(f"{show_path(path)}: the {what}'s name is not UTF-8, which the report's files cannot hold; "
                         f"rename it, or link it under a UTF-8 name (ln -s), and pass that")
    if path.exists() and not path.is_file() and not path.is_dir():
        raise InputError(f"{show_path(path)}: the {what} is not a regular file (a pipe, device or socket, which pe-probe "
                         f"does not read: it could block or never end); save it to a file and pass that")
