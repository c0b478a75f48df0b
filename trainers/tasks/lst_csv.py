"""Read and write Latin Square Task puzzles in the study's CSV format.

Columns (header required, case-insensitive, others ignored):
``puzzles``   16 digits, row-major 4x4: 0 blank, 1-4 shapes, 5 the target (exactly one). A value that
              a spreadsheet turned into a number and lost its leading zeros is left-padded to 16;
              quotes, a trailing ``.0`` and separators inside the field ("[1, 0, 5, ...]") are accepted.
``solutions`` the target's shape, 1-4 (``3.0`` accepted).
``condition`` Binary, Ternary or Quaternary.

Every row is checked; the first bad row raises `pe_probe.errors.InputError` with a one-line message
that names the file, the line and the problem. Besides the format, each puzzle must obey the rule
(no shape twice in a row or column) and the solution must be possible: not already in the target's
row or column, and completing the puzzle to at least one Latin square.
"""

from __future__ import annotations

import csv
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from pe_probe.errors import InputError
from trainers.tasks.lst_puzzles import (
    LEVELS,
    N_CELLS,
    N_SHAPES,
    TARGET,
    PuzzleSet,
    consistent_squares,
    squares_flat,
)

COLUMNS = ("puzzles", "solutions", "condition")
_DIGITS = re.compile(r"[0-5]{16}")


def _short(s: str, n: int = 24) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _parse_puzzle(raw: str, where: str) -> np.ndarray:
    s = raw.strip().strip("\"'").strip()
    if re.fullmatch(r"\d+\.0*", s):  # "1200340050.0": a number from a spreadsheet
        s = s.split(".")[0]
    elif re.fullmatch(r"[\[\(]?\s*\d(\s*[,; ]\s*\d){15}\s*[\]\)]?", s):  # "[1, 0, 5, ...]"
        s = re.sub(r"\D", "", s)
    if s.isdigit() and len(s) < N_CELLS:
        s = s.zfill(N_CELLS)
    if not _DIGITS.fullmatch(s) or s.count(str(TARGET)) != 1:
        raise InputError(f"{where}: 'puzzles' must be 16 digits 0-5 with exactly one 5, got {_short(raw)!r}")
    return np.frombuffer(s.encode(), dtype=np.uint8).astype(np.int8) - ord("0")


def _parse_solution(raw: str, where: str) -> int:
    s = raw.strip().strip("\"'").strip()
    m = re.fullmatch(r"([1-4])(\.0*)?", s)
    if not m:
        raise InputError(f"{where}: 'solutions' must be a shape 1-4, got {_short(raw)!r}")
    return int(m.group(1))


def _parse_condition(raw: str, where: str) -> int:
    s = raw.strip().strip("\"'").strip().lower()
    for i, name in enumerate(LEVELS):
        if s == name.lower():
            return i
    raise InputError(f"{where}: 'condition' must be one of {', '.join(LEVELS)}, got {_short(raw)!r}")


def _check_rule(p: np.ndarray, sol: int, where: str) -> None:
    g = p.reshape(4, 4)
    for axis, name in ((1, "row"), (0, "column")):
        for i in range(4):
            line = g[i] if axis == 1 else g[:, i]
            shapes = line[(line >= 1) & (line <= N_SHAPES)]
            if len(set(shapes.tolist())) != len(shapes):
                raise InputError(f"{where}: a shape appears twice in {name} {i + 1}; each shape may appear "
                                 f"at most once per row and column")
    r, c = divmod(int(np.argmax(p == TARGET)), 4)
    if sol in g[r] or sol in g[:, c]:
        raise InputError(f"{where}: solution {sol} is impossible, shape {sol} is already in the target's "
                         f"row or column")


def read_puzzle_csv(path) -> PuzzleSet:
    """Read puzzles in the study's CSV format (see the module docstring) into a `PuzzleSet`."""
    path = Path(path)
    name = str(path)
    if not path.is_file():
        raise InputError(f"{name}: no such file; give a CSV with columns puzzles, solutions, condition")
    puzzles, solutions, levels, lines = [], [], [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = None
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                if header is None:
                    header = [h.strip().strip("\"'").lower() for h in row]
                    missing = [c for c in COLUMNS if c not in header]
                    if missing:
                        raise InputError(f"{name} line {reader.line_num}: missing column(s) {', '.join(missing)}; "
                                         f"the header needs {', '.join(COLUMNS)}")
                    cols = [header.index(c) for c in COLUMNS]
                    continue
                where = f"{name} line {reader.line_num}"
                if len(row) <= max(cols):
                    raise InputError(f"{where}: expected {len(header)} fields as in the header, got {len(row)}")
                p = _parse_puzzle(row[cols[0]], where)
                sol = _parse_solution(row[cols[1]], where)
                lev = _parse_condition(row[cols[2]], where)
                _check_rule(p, sol, where)
                puzzles.append(p)
                solutions.append(sol)
                levels.append(lev)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{name}: not a UTF-8 text file; save the puzzles as CSV") from None
    except csv.Error as exc:
        raise InputError(f"{name}: malformed CSV ({exc})") from None
    if not puzzles:
        raise InputError(f"{name}: no puzzles found; expected a header ({', '.join(COLUMNS)}) and rows")
    p = np.array(puzzles, dtype=np.int8)
    sol = np.array(solutions, dtype=np.int8)
    # The solution must complete to at least one Latin square (brute force over all 576).
    t = np.argmax(p == TARGET, axis=1)
    possible = (consistent_squares(p) & (squares_flat()[:, t].T == sol[:, None])).any(1)
    if not possible.all():
        i = int(np.argmin(possible))
        raise InputError(f"{name} line {lines[i]}: no 4x4 Latin square completes this puzzle with solution "
                         f"{sol[i]}; check the puzzle and its solution")
    return PuzzleSet(p, sol, np.array(levels, dtype=np.int8))


def write_puzzle_csv(ps: PuzzleSet, path) -> None:
    """Write `ps` in the study's CSV format, atomically (temporary file, then rename)."""
    if not isinstance(ps, PuzzleSet):
        raise InputError(f"write_puzzle_csv needs a PuzzleSet, got {type(ps).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(COLUMNS)
            for p, s, lev in zip(ps.puzzles, ps.solutions, ps.levels):
                w.writerow(("".join(str(int(v)) for v in p), int(s), LEVELS[lev]))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
