"""Reference tables (fixed sinusoids) and the shape distance of a table to a reference.

Shape distance (Williams et al. 2021, "Generalized shape metrics on neural representations"): both
tables are centred and scaled to unit Frobenius norm, zero-padded to the same width, and
d = arccos(sum of singular values of P0^T R0), the angle after the best orthogonal alignment Q
(reflections allowed), in radians from 0 (same shape) to pi/2; computed as 2 arcsin(||P0 - R0 Q|| / 2), the same
angle without arccos's loss of half the digits near 0.
The unnormalised Procrustes distance min_Q ||Pc - Rc Q||_F (centred, not scaled) is also reported
because the study used it; it grows with the table's norm, hence with the init sigma, by construction.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .filechecks import check_not_special
from .validation import as_float_array, check_table


def sinusoid_1d(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al. (2017): PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1] = cos(pos w_i), w_i = base^(-2i/d)."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange((d + 1) // 2, dtype=np.float64)
    w = base ** (-2 * i / d)
    out = np.zeros((n, d))
    out[:, 0::2] = np.sin(pos * w)[:, : len(range(0, d, 2))]
    out[:, 1::2] = np.cos(pos * w)[:, : len(range(1, d, 2))]
    return out


def sinusoid(coords: np.ndarray, d: int, base: float = 10000.0) -> np.ndarray:
    """Fixed sinusoid of k-dimensional coordinates, (N, k) -> (N, d), d divisible by 2k.

    The d dims are split into k equal parts, one per axis, LAST axis first (for (row, col) the first
    half encodes the column, the second half the row, as in the study). Inside a part of m = d/k dims,
    dims 2j, 2j+1 are sin(p w_j), cos(p w_j) with w_j = base^(-2j/m): for k = 1 the Transformer
    sinusoid, for k = 2 the study's w_j = 10000^(-4j/d).
    """
    coords = np.asarray(coords, dtype=np.float64)
    if coords.ndim == 1:
        coords = coords[:, None]
    n, k = coords.shape
    if d % (2 * k):
        raise InputError(f"a {k}D sinusoid needs a width divisible by {2 * k}, got {d} (trainer: change --d-model)")
    m = d // k
    w = base ** (-np.arange(0, m, 2, dtype=np.float64) / m)  # (m/2,)
    out = np.empty((n, d))
    for part, axis in enumerate(reversed(range(k))):
        ang = coords[:, axis:axis + 1] * w  # (N, m/2)
        out[:, part * m + 0:(part + 1) * m:2] = np.sin(ang)
        out[:, part * m + 1:(part + 1) * m:2] = np.cos(ang)
    return out


def sinusoid_2d(h: int, w: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The study's 2D sinusoid for a row-major h x w grid, d divisible by 4.

    First half of the dims encodes the column c: dims 2k, 2k+1 = sin(c w_k), cos(c w_k) with
    w_k = base^(-4k/d), k = 0..d/4-1; the second half encodes the row r the same way.
    """
    rows, cols = np.divmod(np.arange(h * w), w)
    return sinusoid(np.stack([rows, cols], axis=1), d, base)


@dataclass(frozen=True)
class SlicedReference:
    """Rows of a whole-table reference, cut like the analysed rows (`reference_for_rows`), with their name."""
    table: np.ndarray
    name: str


def reference_for_rows(spec: Any, n: int, d: int, span: tuple[int, int] | None, full: int) -> Any:
    """The reference for rows ``span`` (n of them) of a table of ``full`` rows: a reference of the whole table
    (``sin2d:HxW`` with H x W = full, a file of ``full`` rows) is cut like the ground truth is; anything else is
    returned as given, for `parse_reference` to check against the n analysed rows. ``sin1d`` is built for the
    n rows directly: a slice's 1D sinusoid differs from it by a rotation, which no distance sees."""
    if spec is None or span is None or full == n or not isinstance(spec, (str, os.PathLike)):
        return spec
    if os.fspath(spec).strip().lower() == "sin1d":
        return spec
    try:
        ref, name = parse_reference(spec, full, d)
    except InputError:  # not a whole-table reference: parse_reference names the problem against the n rows
        return spec
    return SlicedReference(ref[span[0]:span[1]], f"{name}[{span[0]}:{span[1]}]")


def parse_reference(spec: str | os.PathLike | np.ndarray | SlicedReference, n: int, d: int) -> tuple[np.ndarray, str]:
    """Build a reference table from ``sin1d``, ``sin2d:HxW``, a file (.npy/.csv/.txt, N x d') or an (N, d')
    array or tensor (recorded as ``"array"``)."""
    if isinstance(spec, SlicedReference):
        return spec.table, spec.name
    if not isinstance(spec, (str, os.PathLike)):
        return _array_reference(spec, n), "array"
    s = os.fspath(spec).strip()
    if s.lower() == "sin1d":
        return sinusoid_1d(n, d), "sin1d"
    m = re.fullmatch(r"sin2d:(\d+)x(\d+)", s.lower().replace(" ", ""))
    if m:
        h, w = int(m.group(1)), int(m.group(2))
        if h * w != n:
            raise InputError(f"reference {s!r} has {h * w} positions but the table has {n}; give sin2d:HxW with "
                             f"H x W = {n} (the analysed rows), sin1d, or a file of {n} rows")
        width = d if d % 4 == 0 else d + (4 - d % 4)
        return sinusoid_2d(h, w, width), s.lower()
    if s.lower().startswith("sin"):
        raise InputError(f"malformed reference {s!r}; use sin1d, sin2d:HxW or a file path")
    path = Path(s)
    if not path.exists():
        raise InputError(f"reference {s!r} not found; use sin1d, sin2d:HxW or an existing .npy/.csv/.txt file")
    check_not_special(path, "reference")
    from .io import load_table

    ref = load_table(path, min_positions=1).table
    if ref.shape[0] != n:
        raise InputError(f"reference {s!r} has {ref.shape[0]} positions but the table has {n}; give a reference "
                         "with one row per analysed position, or one per row of the whole table when --positions "
                         "analyses a slice of it")
    return ref, str(path)


def _array_reference(values, n: int) -> np.ndarray:
    """An (n, d') reference given as an array or tensor: its shape named against n, then `check_table`'s checks."""
    ref = as_float_array(values, "reference")
    if ref.ndim != 2 or ref.shape[0] != n:
        raise InputError(f"reference array has shape {ref.shape}; pass an (N, d') array with one row per analysed "
                         f"position (N = {n}), or sin1d, sin2d:HxW or a file path")
    return check_table(ref, "reference")


def _centred(x: np.ndarray, width: int) -> np.ndarray:
    x = np.asarray(x, float) - np.mean(x, axis=0)
    if x.shape[1] < width:
        x = np.hstack([x, np.zeros((len(x), width - x.shape[1]))])
    return x


def _aligned_residual(p: np.ndarray, r: np.ndarray) -> float:
    """min over orthogonal Q of ||p - r Q||_F, as the norm of the residual at the best Q (from the SVD of r^T p);
    sqrt(|p|^2 + |r|^2 - 2 nuclear norm) would lose half the digits when the tables nearly agree."""
    u, _, vt = np.linalg.svd(r.T @ p)
    return float(np.linalg.norm(p - r @ (u @ vt)))


def shape_distance(table: np.ndarray, reference: np.ndarray) -> float:
    """Angular Procrustes distance between centred, unit-norm tables (radians, 0..pi/2): 2 arcsin of half
    their aligned residual, which is arccos of the nuclear norm without its loss of precision near 0."""
    width = max(table.shape[1], reference.shape[1])
    p, r = _centred(table, width), _centred(reference, width)
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    if pn == 0 or rn == 0:
        return float("nan")
    return float(2 * np.arcsin(min(1.0, _aligned_residual(p / pn, r / rn) / 2)))


def procrustes_distance(table: np.ndarray, reference: np.ndarray) -> float:
    """Unnormalised Procrustes distance min over orthogonal Q of ||Pc - Rc Q||_F (centred tables)."""
    width = max(table.shape[1], reference.shape[1])
    return _aligned_residual(_centred(table, width), _centred(reference, width))
