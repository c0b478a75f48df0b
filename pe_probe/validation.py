"""Input validation at the public boundary (scikit-learn style): check once, then trust inside."""

from __future__ import annotations

import math
import re

import numpy as np

from .errors import InputError, first_line

MAX_SEED = 2**63 - 1  # the largest int64: seeds are recorded in tables, and torch.manual_seed takes 64-bit seeds

MIN_POSITIONS = 4


_COMPLEX = "holds complex values; pass real numbers (the real part, or real and imaginary parts as separate columns)"


def as_float_array(values, name: str) -> np.ndarray:
    """``values`` (array-like or torch tensor) as a new float64 array that the caller's later edits cannot reach;
    a bf16/fp16 tensor is widened (as the file loaders do); complex or non-numeric values raise InputError."""
    try:
        if hasattr(values, "detach"):  # a torch tensor, perhaps a parameter that requires grad, on any device
            tensor = values.detach().cpu()
            if tensor.is_complex():
                raise InputError(f"{name}: {_COMPLEX}")
            arr = tensor.double().numpy()  # bf16 has no numpy dtype
        else:
            if isinstance(values, np.ma.MaskedArray) and np.ma.getmaskarray(values).any():
                raise InputError(f"{name}: is a masked array with {int(np.ma.getmaskarray(values).sum())} masked "
                                 f"value(s); fill them (np.ma.filled) or drop those rows before analysing it")
            arr = np.asarray(values)
        if arr.dtype.kind == "c":
            raise InputError(f"{name}: {_COMPLEX}")
        if arr.dtype.kind in "USO" and (arr.dtype.kind != "O" or any(isinstance(v, (str, bytes)) for v in arr.flat)):
            raise InputError(f"{name}: holds text, not numbers (dtype {arr.dtype}); convert it to a numeric array "
                             f"first (np.asarray(x, dtype=float) if the strings are numbers)")
        return arr.astype(np.float64)  # a copy, always
    except InputError:
        raise
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise InputError(f"{name}: expected numbers (an array or tensor), got {type(values).__name__} "
                         f"({first_line(exc)})") from None


def check_table(table, name: str = "table") -> np.ndarray:
    """Return a copy of ``table`` as a finite float64 (N, d) array with N >= 4, or raise InputError."""
    arr = as_float_array(table, name)
    if arr.ndim == 1:
        raise InputError(f"{name}: expected a 2-D (positions x dims) table, got a 1-D array of length {arr.shape[0]}; reshape it to (N, d)")
    if arr.ndim != 2:
        raise InputError(f"{name}: expected a 2-D (positions x dims) table, got shape {tuple(arr.shape)}; pick one layer (--layer) or reshape to (N, d)")
    if arr.shape[0] < MIN_POSITIONS:
        raise InputError(f"{name}: needs at least {MIN_POSITIONS} positions (rows), got {arr.shape[0]}; pass a table with "
                         f"one row per position (check --positions / --param)")
    if arr.shape[1] < 1:
        raise InputError(f"{name}: has no columns (shape {tuple(arr.shape)}); pass a (positions x dims) table")
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(f"{name}: contains {int(bad.sum())} NaN/Inf values (first at row {r}, column {c}); clean the table before analysing it")
    check_magnitude(arr, name)
    spread = _spread(arr)
    if 0 < spread < MIN_SPREAD:
        raise InputError(f"{name}: its values differ by at most {spread:.3g} across positions, which underflows float64 "
                         f"arithmetic (squared distances); rescale the table (e.g. divide it by {spread:.3g}: the "
                         f"metrics do not depend on its scale) and save it again")
    return arr


def _spread(arr: np.ndarray) -> float:
    """The largest range of one column over the rows (0 for a constant array)."""
    return float(np.ptp(arr, axis=0).max()) if arr.size else 0.0


# Squared distances of rows that differ by less than this (over 1e-200) leave closer pairs in float64's
# subnormal range, where they lose digits or vanish: metrics moved or the table read as constant (1e-170).
MIN_SPREAD = 1e-100

# Squared distances of values above this overflow float64 (1e308) once summed over dims: every metric
# would come out NaN/Inf, with a cascade of RuntimeWarnings. No real PE table comes near it.
MAX_ABS_VALUE = 1e150


def check_magnitude(arr: np.ndarray, name: str = "table") -> None:
    """Refuse (InputError) finite values too large for the analysis's float64 arithmetic, before any of it runs."""
    big = float(np.max(np.abs(arr))) if arr.size else 0.0
    if big > MAX_ABS_VALUE:
        raise InputError(f"{name}: holds values up to {big:.3g} in magnitude, which overflow float64 arithmetic (squared "
                         f"distances); rescale the table (e.g. divide it by its largest value) and save it again")


def check_coords(coords, n_positions: int, name: str = "ground truth") -> np.ndarray:
    """Return a copy of the ground-truth coordinates as finite float64 (N, k) matching the table's N, or raise."""
    arr = as_float_array(coords, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"{name}: expected (N, k) coordinates, got shape {tuple(arr.shape)}")
    if arr.shape[1] < 1:
        raise InputError(f"{name}: has no columns (shape {tuple(arr.shape)}); give each position its coordinates "
                         f"(N x k with k >= 1)")
    if arr.shape[0] != n_positions:
        extra = n_positions - arr.shape[0]
        tokens = (f"if its first {extra} row(s) are extra tokens (CLS, distillation, offset rows), pass "
                  f"--drop-extra-tokens {extra}; else " if extra in (1, 2) else "")
        rows = ("or select the table's rows with --positions A:B" if extra > 0 else
                "or pick the table that has them (--param, --layer): slicing the table cannot add rows")
        raise InputError(f"{name} has {arr.shape[0]} positions but the PE table has {n_positions}; {tokens}"
                         f"pass a matching --ground-truth, {rows}")
    if not np.isfinite(arr).all():
        raise InputError(f"{name}: contains NaN/Inf coordinates; give finite coordinates for every position")
    big = float(np.max(np.abs(arr)))
    if big > MAX_ABS_VALUE:
        raise InputError(f"{name}: holds coordinates up to {big:.3g} in magnitude, which overflow float64 arithmetic "
                         f"(squared distances); rescale them (only the RMSE is in their units)")
    spread = _spread(arr)
    if 0 < spread < MIN_SPREAD:
        raise InputError(f"{name}: its coordinates differ by at most {spread:.3g} across positions, which underflows "
                         f"float64 arithmetic (squared distances); rescale them (only the RMSE is in their units)")
    if spread == 0:
        raise InputError(f"{name}: all positions have the same coordinates; nothing to compare against: give each "
                         f"position its own coordinates (line:N, grid:HxW or a file of N x k)")
    return arr


def check_choice(value: str, allowed, what: str) -> str:
    if value not in allowed:
        raise InputError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")
    return value


def parse_layer(value) -> int | str | None:
    """A layer choice as every entry point takes it: None, a whole-number index (an integer or its text; the
    loader checks the range, as only it knows how many tables a source has), or 'mean' / 'all' in any case.
    Raises ValueError for anything else (0.0, True, 'x'): each caller words the error for its own flag."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        key = value.strip().lower()
        if key in ("mean", "all"):
            return key
        if re.fullmatch(r"[+-]?[0-9]+", key):
            return int(key)
    raise ValueError(f"not a layer: {value!r}")


def check_positive_int(value, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        iv = int(value)
        if isinstance(value, bool) or iv != value:  # 2.7 or True: not silently truncated to 2 / taken as 1
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{what} must be an integer, got {value!r}") from None
    if iv < minimum:
        raise InputError(f"{what} must be >= {minimum}, got {iv}")
    if maximum is not None and iv > maximum:
        raise InputError(f"{what} must be <= {maximum:,}, got {iv:,}")
    return iv


# `analyze` holds about this many N x N float64 arrays at once (distances of the table and of the ground
# truth and their double-centred / ranked forms, the classical-MDS Gram matrix, SMACOF's iterates): a
# rough count, used only to refuse tables that cannot fit before any N x N array is made.
SQUARE_ARRAYS = 12


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(n: int, memory: int | None = None) -> None:
    """Refuse (InputError) N positions whose N x N matrices would not fit in ``memory`` (default: this machine's)."""
    memory = physical_memory() if memory is None else memory
    need = SQUARE_ARRAYS * n * n * 8
    if memory and need > memory:
        raise InputError(f"{n:,} positions need about {need / 2**30:,.0f} GiB for the analysis's N x N matrices, more than "
                         f"this machine's {memory / 2**30:,.0f} GiB; analyse a slice of the table with --positions A:B")


def check_tensor_bytes(shape: tuple[int, ...], name: str, memory: int | None = None) -> None:
    """Refuse (InputError) a tensor whose float64 copy would take more than half of ``memory`` (default: this
    machine's), from its shape alone: a tiny file can claim a huge shape (an expanded, stride-0 tensor, a
    header that lies), and converting it would exhaust memory before any other check ran."""
    memory = physical_memory() if memory is None else memory
    need = math.prod(shape) * 8
    if memory and need > memory // 2:
        raise InputError(f"{name}: a tensor of shape {tuple(shape)} needs about {need / 2**30:,.0f} GiB as float64, more than "
                         f"half this machine's {memory / 2**30:,.0f} GiB; pass a smaller table (or check the file: its "
                         f"header may claim more than it holds)")
