"""How precisely coordinates and tables were stored, so that distances equal before rounding stay ties.

A grid rotated and stored in float32, or written to a CSV at 6 significant digits, has distances that were
equal in exact arithmetic and now differ by ~1e-7 (float32) or ~1e-6 (6 digits) of the coordinates' size.
Counted as distinct, those rounding differences change every metric that sees ties (Kendall's tau-b,
trustworthiness, the kNN overlap: a rotated float32 8x8 grid moved the overlap from 0.8875 to 0.7625). The
functions here estimate the storage's unit roundoff u (relative precision) and from it the largest
rounding error of a Euclidean distance, which `pe_probe.distances.merge_near_ties` uses as a tie tolerance
when the distances fall into clusters that narrow.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

FLOAT64 = 2.0**-53  # float64's unit roundoff: what exact (integer, float64) coordinates get
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": FLOAT64}
# Text written at fewer significant digits than this is read as exact: "0.5, 1.5" is a half-step grid, not a
# rounded one, and a tolerance of 5e-4 of the coordinates' size would merge distances a large grid keeps apart.
MIN_ROUNDED_DIGITS = 6
_MANTISSA = re.compile(r"[+-]?(\d*)\.?(\d*)", re.ASCII)


def storage_roundoff(values: Any) -> float:
    """Unit roundoff of the float format ``values`` (array or tensor) is stored in.

    Integer values, and float arrays whose values are all integers, are exact (`FLOAT64`). A float64 array
    whose values all fit float32 exactly (and are not all integers) counts as float32: such arrays come from
    float32 files and tensors widened on the way in. Narrower formats (float16, bfloat16) count only where
    the dtype says so: small dyadic grids (steps of 0.5) fit them exactly without being rounded.
    """
    dtype = str(getattr(values, "dtype", "")).replace("torch.", "")
    u = UNIT_ROUNDOFF.get(dtype)
    if u is None:
        return FLOAT64
    if hasattr(values, "detach"):
        values = values.detach().cpu().double().numpy()
    arr = np.asarray(values, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0 or np.all(finite == np.round(finite)):
        return FLOAT64
    if u == FLOAT64 and np.all(finite.astype(np.float32).astype(np.float64) == finite):
        return UNIT_ROUNDOFF["float32"]
    return u


def significant_digits(cell: str) -> int:
    """Significant digits of a number written as text ("0.866025": 6, "-1.5e3": 2, "inf": 0)."""
    m = _MANTISSA.match(cell)
    return len((m.group(1) + m.group(2)).lstrip("0")) if m else 0


def digits_roundoff(most: int) -> float:
    """Unit roundoff of numbers written as decimal text whose cells show at most ``most`` significant digits.

    A writer that rounds to D significant digits (``%.6g``) leaves relative errors up to 0.5 * 10^(1 - D);
    its shorter cells ("1.5") are exact values that needed fewer digits, so D is the largest count seen.
    Under `MIN_ROUNDED_DIGITS` the text is read as exact; at 16 digits and more it is float64's."""
    if most < MIN_ROUNDED_DIGITS or most >= 16:
        return FLOAT64
    return 0.5 * 10.0 ** (1 - most)


def distance_error(coords: np.ndarray, roundoff: float) -> float:
    """The largest error rounding at ``roundoff`` can put in a Euclidean distance between rows of ``coords``:
    each coordinate moves by at most u |x|, a difference by 2 u max|x|, a distance over k axes by
    2 sqrt(k) u max|x| (the magnitude includes any offset: coordinates near 1000 round more coarsely than near 0)."""
    x = np.asarray(coords, dtype=np.float64)
    if x.size == 0:
        return 0.0
    return 2.0 * math.sqrt(x.shape[1] if x.ndim == 2 else 1) * roundoff * float(np.max(np.abs(x)))
