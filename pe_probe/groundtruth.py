"""Ground truths: the true coordinates of each token position, from a built-in spec or a file.

A ground truth is an (N, k) array of coordinates, one row per position of the PE table, in the same
order as the table's rows. Built-ins cover the layouts a sequence or image model sees: ``line:N``
(positions 0..N-1 on a line) and ``grid:HxW`` / ``grid:HxWxD`` (row-major, like a flattened image or
the Latin Square Task's 4x4 board). Anything else is read from a file of coordinates.
"""

from __future__ import annotations

import csv
import math
from array import array
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pe_probe.errors import InputError, show_path, shorten
from pe_probe.filechecks import check_not_special
from pe_probe.roundoff import FLOAT64, digits_roundoff, significant_digits, storage_roundoff

ACCEPTED_FORMS = "line:N, grid:HxW, grid:HxWxD, or a .npy/.csv/.txt file of N x k coordinates"

_BUILTIN = re.compile(r"^\s*(line|grid)\s*:(.*)$", re.IGNORECASE)
_SIZES = re.compile(r"^\s*\d+(\s*x\s*\d+)*\s*$", re.IGNORECASE)


@dataclass
class GroundTruth:
    """True coordinates of the N positions of a PE table.

    Attributes
    ----------
    coords : (N, k) float64; row i is the position of table row i.
    spec : where it came from, as given (e.g. ``"grid:4x4"``, ``"coords.npy"``, ``"checkpoint"``).
    kind : ``"line"``, ``"grid"``, ``"file"`` or ``"checkpoint"``.
    shape : grid shape ``(H, W)`` / ``(H, W, D)``, ``(N,)`` for a line, ``None`` when unknown.
    roundoff : relative precision the coordinates were stored at (`pe_probe.roundoff`): float64's for
        built-ins and float64 files, float32's for float32 arrays, ~5e-6 for text at 6 significant digits.
        Distances that differ by less than such rounding can put in them count as ties where they cluster.
    """

    coords: np.ndarray
    spec: str
    kind: str
    shape: tuple[int, ...] | None
    roundoff: float = FLOAT64

    @property
    def n(self) -> int:
        """Number of positions N."""
        return int(self.coords.shape[0])

    @property
    def dim(self) -> int:
        """Number of coordinate axes k."""
        return int(self.coords.shape[1])

    def rows(self, start: int, stop: int) -> GroundTruth:
        """The ground truth of positions ``start:stop`` (used when only a slice of the table is analysed).

        A grid keeps a grid shape when the slice covers whole rows (e.g. the first 2 rows of 4x4 -> 2x4).
        """
        coords = self.coords[start:stop]
        shape: tuple[int, ...] | None = None
        if self.kind == "line" or (self.shape is not None and len(self.shape) == 1):
            shape = (coords.shape[0],)
        elif self.shape is not None and len(self.shape) > 1:
            inner = int(np.prod(self.shape[1:]))
            if start % inner == 0 and stop % inner == 0 and stop > start:
                shape = ((stop - start) // inner, *self.shape[1:])
        return replace(self, coords=coords, spec=f"{self.spec}[{start}:{stop}]", shape=shape)


def line(n: int) -> GroundTruth:
    """Positions 0..n-1 on a line: coords = ``arange(n)[:, None]``."""
    n = _positive_size(n, "line")
    return GroundTruth(np.arange(n, dtype=np.float64)[:, None], f"line:{n}", "line", (n,))


def grid(*shape: int) -> GroundTruth:
    """Integer coordinates of a 2-D or 3-D grid in row-major order.

    ``coords[i] = (row, col)`` with ``i = row * W + col`` for ``grid(H, W)``, and
    ``coords[i] = (row, col, z)`` with ``i = (row * W + col) * D + z`` for ``grid(H, W, D)``:
    the order in which ``array.reshape(-1)`` flattens an image or a board.
    """
    if len(shape) not in (2, 3):
        raise InputError(f"grid needs 2 or 3 sizes (HxW or HxWxD), got {len(shape)}: use {ACCEPTED_FORMS}")
    sizes = tuple(_positive_size(s, "grid") for s in shape)
    if math.prod(sizes) > MAX_POSITIONS:
        raise InputError(f"grid {'x'.join(map(str, sizes))} has more than {MAX_POSITIONS:,} positions; "
                         f"give the table's own size")
    coords = np.indices(sizes).reshape(len(sizes), -1).T.astype(np.float64)
    return GroundTruth(coords, "grid:" + "x".join(map(str, sizes)), "grid", sizes)


def parse_ground_truth(spec: str | os.PathLike) -> GroundTruth:
    """A ground truth from a built-in spec (``line:N``, ``grid:HxW``, ``grid:HxWxD``) or a file.

    Built-ins are case-insensitive and tolerate spaces (``"Grid: 4 x 4"``). Files: ``.npy`` (N x k, or
    N -> N x 1), ``.csv`` (N x k numbers, an optional header row of names is skipped; when it names columns
    ``true_0 .. true_{k-1}``, as pe-probe's own embedding.csv does, only those are read), ``.txt``
    (whitespace- or comma-separated numbers, ``#`` comments). Raises InputError on anything else.
    """
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise InputError(f"ground truth spec must be text or a path, got {type(spec).__name__}")
    m = _BUILTIN.match(text)
    if m:
        return _parse_builtin(text, m.group(1).lower(), m.group(2))
    return _from_file(text)


def ground_truth_from_checkpoint(gt: dict[str, Any], source: str | os.PathLike | None = None) -> GroundTruth:
    """The ground truth stored in a pe-probe checkpoint: ``{"coords": [N, k], "kind": ..., "shape": [...]}``.

    ``kind`` is kept when it is ``"line"`` or ``"grid"`` (so reports can draw the layout); any other
    recorded kind becomes ``"checkpoint"``. ``coords`` may be a torch tensor, an array or a list; its
    claimed size is checked before anything is copied (a stride-0 tensor can claim 10^8 rows in a few
    bytes). ``source`` (the checkpoint's path) names the file in error messages.
    """
    name = f"checkpoint {os.fspath(source)}" if source is not None else "checkpoint"
    if not isinstance(gt, dict) or "coords" not in gt:
        raise InputError(f"{name}: its ground_truth must be a dict with a 'coords' entry [N, k]; "
                         f"pass --ground-truth, or re-save the checkpoint")
    raw = _checkpoint_coords(gt["coords"], name)
    coords = _validate_coords(raw, f"{name}: ground_truth")
    kind = gt.get("kind")
    kind = kind.lower() if isinstance(kind, str) else "checkpoint"
    if kind not in ("line", "grid"):
        kind = "checkpoint"
    return GroundTruth(coords, "checkpoint", kind, _layout_shape(gt.get("shape"), coords.shape[0]),
                       storage_roundoff(raw))


MAX_CHECKPOINT_COORD_VALUES = 16_000_000  # N x k: 16 axes at the most positions; 128 MB as float64


def _checkpoint_coords(x: Any, name: str) -> np.ndarray:
    """A checkpoint's ``coords`` as a numpy array, refusing (one line) what cannot be coordinates: a
    claimed size past the limits (checked before copying), a sparse tensor, a ragged list, a dtype
    numpy lacks (float8: too coarse for coordinates anyway)."""
    fix = "pass --ground-truth, or re-save the checkpoint with dense float coords [N, k]"
    _check_claimed_size(getattr(x, "shape", None), name, fix)
    if hasattr(x, "detach"):  # a torch tensor (torch is not imported here)
        layout = str(getattr(x, "layout", "torch.strided"))
        if layout != "torch.strided":
            raise InputError(f"{name}: its ground_truth coords are a {layout.replace('torch.', '')} tensor, "
                             f"not a dense one; {fix}")
        x = x.detach()
        dtype = str(x.dtype).replace("torch.", "")
        if dtype == "bfloat16":
            x = x.float()
        try:
            return x.cpu().numpy()
        except (TypeError, RuntimeError, ValueError):
            raise InputError(f"{name}: its ground_truth coords have dtype {dtype}, which is not a number type "
                             f"pe-probe reads; {fix}") from None
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name}: its ground_truth coords are not a rectangular N x k table of numbers "
                         f"(ragged rows?); {fix}") from None
    _check_claimed_size(arr.shape, name, fix)
    return arr


def _check_claimed_size(shape: Any, name: str, fix: str) -> None:
    """Refuse coordinates whose shape (as claimed, not as stored) is no N x k ground truth one can analyse."""
    if shape is None:
        return
    dims = tuple(int(s) for s in shape)
    if len(dims) not in (1, 2):
        raise InputError(f"{name}: its ground_truth coords must be N x k (or N), got shape {dims}; {fix}")
    if dims[0] > MAX_POSITIONS or math.prod(dims) > MAX_CHECKPOINT_COORD_VALUES:
        raise InputError(f"{name}: its ground_truth coords claim shape {dims}, more than {MAX_POSITIONS:,} positions "
                         f"or {MAX_CHECKPOINT_COORD_VALUES:,} values; {fix}")


def _layout_shape(shape: Any, n: int) -> tuple[int, ...] | None:
    """The recorded grid / line shape when it describes the N coordinates (a layout hint for reports);
    anything else (unreadable, wrong product, or more than 3 sizes, checked before copying) is dropped."""
    if shape is None or not 1 <= _claimed_len(shape) <= 3:
        return None
    try:
        shape_t = tuple(int(s) for s in _to_numpy(shape).reshape(-1))
    except (TypeError, ValueError, RuntimeError, OverflowError, InputError):
        return None
    return shape_t if len(shape_t) <= 3 and min(shape_t) >= 1 and math.prod(shape_t) == n else None


def _claimed_len(x: Any) -> int:
    """How many values ``x`` holds by its own account (a tensor's numel, a list's length); -1 if unknown."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return math.prod(int(s) for s in shape)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return 1
    return len(x) if isinstance(x, (list, tuple)) else -1


def load_npy(path: str | os.PathLike, what: str = "file") -> np.ndarray:
    """A plain numeric ``.npy`` (never pickle), its header's claimed size checked against the file before any
    data is read (`pe_probe.filechecks.open_npy`); an unreadable file is an InputError."""
    from pe_probe.filechecks import open_npy

    _, _, read = open_npy(Path(path), what)
    return np.array(read())  # a copy: the memory map would keep the file open


def read_number_table(path: str | os.PathLike, *, header: bool, what: str = "file") -> np.ndarray:
    """Read a rectangular table of numbers from a ``.csv`` or ``.txt`` file as (rows, columns) float64.

    ``.csv`` is comma-separated; ``.txt`` is whitespace- or comma-separated with ``#`` comments. With
    ``header=True`` a first row that is not all numbers is taken as column names and skipped. A
    non-numeric cell raises InputError naming the file, line and column. ``pe_probe.io`` reuses this
    for tables stored as text.
    """
    return read_named_table(path, header=header, what=what)[1]


def read_named_table(path: str | os.PathLike, *, header: bool, what: str = "file",
                     true_columns: bool = False) -> tuple[list[str] | None, np.ndarray, float]:
    """`read_number_table`, also returning the header row it skipped (its stripped cells), or None, and the
    numbers' relative precision as written (`pe_probe.roundoff.digits_roundoff`). With ``true_columns``, a
    header naming ``true_0 .. true_{k-1}`` selects those columns, and only they must be numbers (pe-probe's own
    embedding.csv and layout.csv hold other columns, some of them text)."""
    path = Path(path)
    names: list[str] | None = None
    keep: list[int] = []
    width = n_rows = most_digits = 0
    values = array("d")  # parsed as the file streams in: 8 bytes a number, not a list of strings (~22x the file)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            for lineno, cells in _text_rows(fh, path.suffix.lower() == ".csv"):
                if not width:
                    if header and names is None and not _all_numbers(cells):
                        names = cells
                        continue
                    width = len(cells)
                    keep = (_true_column_indices(path, names, width) if true_columns and names else None) or list(range(width))
                if len(cells) != width:
                    raise InputError(f"{path}: line {lineno} has {len(cells)} values, expected {width} like the first row; "
                                     f"give every row the same number of values")
                for c in keep:
                    cell = cells[c]
                    try:
                        values.append(parse_number(cell))
                    except ValueError:
                        raise InputError(f"{path}: line {lineno}, column {c + 1}: {shorten(repr(cell), 80)} is not a "
                                         f"number; {what} must hold only numbers") from None
                    most_digits = max(most_digits, significant_digits(cell))
                n_rows += 1
                if len(values) > MAX_TEXT_VALUES:
                    raise InputError(f"{path}: holds more than {MAX_TEXT_VALUES:,} numbers, far more than any PE table "
                                     f"or set of coordinates; check the file, or save large arrays as .npy")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (not UTF-8); the {what} must be numbers in a .csv/.txt, or a .npy") from None
    except csv.Error as e:
        raise InputError(f"{path}: not a readable CSV ({e}); the {what} must be rows of numbers") from None
    if not n_rows:
        if names is not None:
            raise InputError(f"{path}: {what} has a header row but no rows of numbers (an unclosed quote makes the rest of "
                             f"a CSV one cell); it needs N rows of numbers")
        raise InputError(f"{path}: {what} is empty; it needs N rows of numbers")
    out = np.frombuffer(values, dtype=np.float64).reshape(n_rows, len(keep)).copy()
    return names, out, digits_roundoff(most_digits)


MAX_TEXT_VALUES = 128_000_000  # numbers in one .csv/.txt (1 GB as float64): 30x a 4096 x 1024 table


def _text_rows(fh, is_csv: bool):
    """(line number, stripped cells) of every row of ``fh`` that holds anything: a CSV's by its quoting rules,
    a .txt's split on whitespace and commas after ``#`` comments are cut."""
    if is_csv:
        for i, cells in enumerate(csv.reader(fh), start=1):
            cells = [c.strip() for c in cells]
            if any(cells):
                yield i, cells
    else:
        for i, raw in enumerate(fh, start=1):
            body = raw.split("#", 1)[0].strip()
            if body:
                yield i, [c for c in re.split(r"[\s,]+", body) if c]


def _parse_builtin(text: str, kind: str, sizes: str) -> GroundTruth:
    if not _SIZES.match(sizes):
        raise InputError(f"malformed ground truth spec {text!r}: use {ACCEPTED_FORMS}")
    values = [int(s) for s in re.split(r"x", sizes.strip().lower())]
    if kind == "line":
        if len(values) != 1:
            raise InputError(f"malformed ground truth spec {text!r}: line takes one size; use {ACCEPTED_FORMS}")
        return line(values[0])
    if len(values) not in (2, 3):
        raise InputError(f"malformed ground truth spec {text!r}: grid takes HxW or HxWxD; use {ACCEPTED_FORMS}")
    return grid(*values)


def _from_file(text: str) -> GroundTruth:
    path = Path(text)
    suffix = path.suffix.lower()
    known = suffix in (".npy", ".csv", ".txt")
    if not known and not path.exists():
        raise InputError(f"unknown ground truth {text!r}: use {ACCEPTED_FORMS}")
    check_not_special(path, "ground truth")  # /dev/zero, a pipe: said as such, whatever the suffix
    if path.is_dir():
        raise InputError(f"ground truth {text} is a folder; give a .npy, .csv or .txt file or one of {ACCEPTED_FORMS}")
    if not known:
        raise InputError(f"ground truth {show_path(path)}: pe-probe reads .npy, .csv or .txt files; save the "
                         f"coordinates as one of those, or use one of {ACCEPTED_FORMS}")
    if not path.is_file():
        raise InputError(f"ground truth file {text} not found; give an existing file or one of {ACCEPTED_FORMS}")
    if suffix == ".npy":
        coords = load_npy(path, "ground truth")
        roundoff = storage_roundoff(coords)
    else:
        _, coords, roundoff = read_named_table(path, header=suffix == ".csv", what="ground truth", true_columns=True)
    return GroundTruth(_validate_coords(coords, text), text, "file", None, roundoff)


_TRUE_COLUMN = re.compile(r"true_(\d+)")


def _true_column_indices(path: Path, header: list[str], width: int) -> list[int] | None:
    """The indices of the ``true_0, true_1, ...`` columns a CSV's ``header`` names, in order (pe-probe's own
    embedding.csv, whose other columns are the position index and the recovered coordinates), else None."""
    names = list(header)
    while names and not names[-1]:  # a trailing comma
        names.pop()
    if _all_numbers(names):
        return None
    true = [(int(m.group(1)), i) for i, name in enumerate(names) if (m := _TRUE_COLUMN.fullmatch(name))]
    if not true:
        return None
    shown = show_path(path)
    if len(names) != width:
        raise InputError(f"{shown}: its header names {len(names)} columns but its rows have {width}; "
                         f"give one name per column")
    found = dict(true)
    if len(found) != len(true):
        raise InputError(f"{shown}: its header names a true_ column twice; name each of true_0 .. true_{{k-1}} once")
    if sorted(found) != list(range(len(found))):
        raise InputError(f"{shown}: its header names true_ columns {', '.join(f'true_{k}' for k in sorted(found))}; "
                         f"ground-truth columns must be true_0 .. true_{{k-1}}, without gaps")
    return [found[k] for k in range(len(found))]


def _validate_coords(coords: np.ndarray, name: str) -> np.ndarray:
    """Check and normalise coordinates to a finite (N, k) float64 array."""
    if coords.dtype.kind not in "biuf":
        raise InputError(f"{name}: coordinates must be numbers, got dtype {coords.dtype}")
    if coords.ndim == 1:
        coords = coords[:, None]
    if coords.ndim != 2:
        raise InputError(f"{name}: coordinates must be N x k (or N), got shape {tuple(coords.shape)}")
    if coords.shape[0] == 0 or coords.shape[1] == 0:
        raise InputError(f"{name}: coordinates are empty (shape {tuple(coords.shape)}); need N x k with N, k >= 1")
    coords = coords.astype(np.float64)
    if not np.all(np.isfinite(coords)):
        bad = int(np.argwhere(~np.isfinite(coords))[0, 0])
        raise InputError(f"{name}: coordinates contain NaN or Inf (first at row {bad}); give finite numbers")
    return coords


MAX_POSITIONS = 1_000_000  # a spec above this is a typo, not a PE table anyone can analyse (N^2 distances)


def _positive_size(n: Any, kind: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"{kind} sizes must be integers >= 1, got {n!r}: use {ACCEPTED_FORMS}")
    if n > MAX_POSITIONS:
        raise InputError(f"{kind} size {n} is more than {MAX_POSITIONS:,} positions; give the table's own size")
    return int(n)


# A number as data files write it: ASCII digits, an optional sign, point and exponent, or inf / nan. Python's float()
# also takes "1_0" (10) and other scripts' digits ("٣" is 3), which in a coordinate file are typos or text.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE | re.ASCII)


def parse_number(cell: str) -> float:
    """``cell`` as a float if it is a number written in ASCII (`_NUMBER`), else ValueError."""
    if not _NUMBER.fullmatch(cell):
        raise ValueError(cell)
    return float(cell)


def _all_numbers(cells: list[str]) -> bool:
    return all(_NUMBER.fullmatch(c) for c in cells)


def _to_numpy(x: Any) -> np.ndarray:
    """A torch tensor, list or array as a numpy array, without importing torch."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)
