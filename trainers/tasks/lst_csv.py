"""Read and write Latin Square Task puzzles in the study's CSV format.

Columns (header required, case-insensitive, others ignored):
``puzzles``   16 digits, row-major 4x4: 0 blank, 1-4 shapes, 5 the target (exactly one). A value that
              a spreadsheet turned into a number and lost its leading zeros is left-padded to 16;
              quotes, a trailing ``.0`` and separators inside the field ("[1, 0, 5, ...]") are accepted.
``solutions`` the target's shape, 1-4 (``3.0`` accepted).
``condition`` Binary, Ternary or Quaternary.

Every row is checked; the first bad row raises `pe_probe.errors.InputError` with a one-line message
that names the file, the line, the problem and the fix. Besides the format, each puzzle must meet what
the generator (`trainers.tasks.lst_generate`) enforces on its own puzzles:

- the rule: no shape twice in a row or column;
- a unique answer: over the 576 order-4 Latin squares, every square that agrees with the givens puts
  the same shape at the target (`lst_puzzles.target_answers`), and that shape is ``solutions``;
- its level: the one-step rules (`lst_puzzles.classify_batch`: Binary, else Ternary, else Quaternary,
  the easiest rule that determines the target) give ``condition``. A puzzle that no single rule solves
  (several steps) has no level and is refused, as the study excluded such puzzles (DESIGN.md section 6).

The number of givens is not checked: the generator's ranges (Binary 6-11, Ternary 5-11, Quaternary 4-9)
describe the generated sets, and a user's held-out puzzles may hold more or fewer.
"""

from __future__ import annotations

import csv
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from pe_probe.errors import InputError, shorten
from pe_probe.filechecks import check_not_special
from trainers.tasks.lst_puzzles import (
    LEVELS,
    N_CELLS,
    N_SHAPES,
    TARGET,
    PuzzleSet,
    classify_batch,
    consistent_squares,
    squares_flat,
)

COLUMNS = ("puzzles", "solutions", "condition")
_DIGITS = re.compile(r"[0-5]{16}")


def _short(s: str) -> str:
    return shorten(s, 24)


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


# Why a puzzle has its level, for the message on a mislabelled row (the rules of DESIGN.md section 6).
_LEVEL_REASON = (
    "the target's row or column alone shows the other three shapes",
    "the target's row and column together exclude three shapes, neither alone does",
    "the target's row and column together exclude fewer than three shapes, but the answer has no other "
    "place in the target's row or column (a hidden single)",
)


def _or_list(values) -> str:
    v = [str(x) for x in sorted(values)]
    return v[0] if len(v) == 1 else f"{', '.join(v[:-1])} or {v[-1]}"


def _first_semantic_error(p: np.ndarray, sol: np.ndarray, lev: np.ndarray) -> tuple[int, str] | None:
    """(row index, message) of the first puzzle whose answer or level is wrong, else None.

    The same checks as the generator: every Latin square consistent with the givens puts the same
    shape at the target and it is the solution (brute force over the 576 squares); the one-step
    rules give the puzzle the labelled level.
    """
    if not len(p):
        return None
    ok = consistent_squares(p)  # (K, 576)
    t = np.argmax(p == TARGET, axis=1)
    vals = squares_flat()[:, t].T  # (K, 576) the target's shape in each square
    has_sol = (ok & (vals == sol[:, None])).any(1)
    other = (ok & (vals != sol[:, None])).any(1)  # another shape also fits
    level, _ = classify_batch(p)
    bad = ~has_sol | other | (level != lev)
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    s = int(sol[i])
    shapes = {int(v) for v in vals[i][ok[i]]}
    if not shapes:
        return i, ("no 4x4 Latin square completes this puzzle's givens, whatever the target; check the "
                   "puzzle")
    if s not in shapes:
        return i, (f"no 4x4 Latin square completes this puzzle with solution {s}: the givens allow only "
                   f"shape {_or_list(shapes)} at the target; check the puzzle and its solution")
    if len(shapes) > 1:
        return i, (f"the answer is not unique: Latin squares that complete the givens put shape "
                   f"{_or_list(shapes)} at the target; add givens until only {s} fits (each puzzle needs "
                   f"exactly one answer)")
    want = LEVELS[int(lev[i])]
    if level[i] < 0:
        return i, (f"'condition' is {want}, but no single rule (Binary, Ternary or Quaternary) determines "
                   f"the target: it needs several steps, which the study's levels exclude; use a puzzle "
                   f"that one rule solves")
    got = LEVELS[int(level[i])]
    return i, (f"'condition' is {want}, but the puzzle is {got}: {_LEVEL_REASON[int(level[i])]}; write "
               f"{got} in 'condition' (or change the puzzle)")


def read_puzzle_csv(path) -> PuzzleSet:
    """Read puzzles in the study's CSV format (see the module docstring) into a `PuzzleSet`."""
    path = Path(path)
    name = str(path)
    check_not_special(path, "puzzle file")  # /dev/zero, a pipe: said as such (they were "no such file")
    if path.is_dir():
        raise InputError(f"{name}: is a folder; give a CSV with columns puzzles, solutions, condition")
    if not path.is_file():
        raise InputError(f"{name}: no such file; give a CSV with columns puzzles, solutions, condition")
    puzzles, solutions, levels, lines = [], [], [], []
    row_error: InputError | None = None
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
                    twice = [c for c in COLUMNS if header.count(c) > 1]
                    if twice:
                        raise InputError(f"{name} line {reader.line_num}: column {twice[0]} appears twice in the "
                                         f"header; keep one")
                    cols = [header.index(c) for c in COLUMNS]
                    continue
                where = f"{name} line {reader.line_num}"
                try:
                    extra = len(row) > len(header) and any(cell.strip() for cell in row[len(header):])
                    if len(row) <= max(cols) or extra:  # (empty cells past the header: a trailing comma)
                        raise InputError(f"{where}: expected {len(header)} fields as in the header, got {len(row)}; "
                                         f"give every row the header's fields (quote a field that holds a comma)")
                    p = _parse_puzzle(row[cols[0]], where)
                    sol = _parse_solution(row[cols[1]], where)
                    lev = _parse_condition(row[cols[2]], where)
                    _check_rule(p, sol, where)
                except InputError as exc:
                    # Reported after the answer checks of the rows above, so the first bad line wins.
                    row_error = exc
                    break
                puzzles.append(p)
                solutions.append(sol)
                levels.append(lev)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{name}: not a UTF-8 text file; save the puzzles as CSV") from None
    except csv.Error as exc:
        raise InputError(f"{name}: malformed CSV ({exc})") from None
    p = np.array(puzzles, dtype=np.int8).reshape(-1, N_CELLS)
    sol = np.array(solutions, dtype=np.int8)
    lev = np.array(levels, dtype=np.int8)
    first = _first_semantic_error(p, sol, lev)
    if first is not None:
        raise InputError(f"{name} line {lines[first[0]]}: {first[1]}")
    if row_error is not None:
        raise row_error
    if not puzzles:
        raise InputError(f"{name}: no puzzles found; expected a header ({', '.join(COLUMNS)}) and rows")
    return PuzzleSet(p, sol, lev)


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
