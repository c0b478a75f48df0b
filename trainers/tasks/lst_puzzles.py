"""Latin Square Task puzzles: the container, the 576 squares, the one-step difficulty rules.

Everything here is pure numpy and vectorised over a batch of puzzles, so that generation
(`trainers.tasks.lst_generate`) can draw and check tens of thousands of candidates per second.
The rules are stated in full in the docstring of `trainers.tasks.lst`.

A puzzle is a (16,) row-major array of the 4x4 grid: 0 = blank, 1..4 = shapes, 5 = the target "?".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import numpy as np

from pe_probe.errors import InputError

LEVELS = ("Binary", "Ternary", "Quaternary")
TARGET = 5  # token value of the "?" cell; 0 = blank, 1..4 = shapes
N_CELLS = 16
N_SHAPES = 4
# Givens besides the target, inclusive ranges, as in the study (DESIGN.md section 6).
GIVENS_RANGE: dict[str, tuple[int, int]] = {"Binary": (6, 11), "Ternary": (5, 11), "Quaternary": (4, 9)}


@dataclass(eq=False)
class PuzzleSet:
    """A batch of puzzles with their answers and difficulty levels.

    Attributes
    ----------
    puzzles : (M, 16) int8, row-major 4x4, values 0..5, exactly one 5 (the target) per row.
    solutions : (M,) int8 in 1..4, the target's shape.
    levels : (M,) int8, index into `LEVELS`.
    """

    puzzles: np.ndarray
    solutions: np.ndarray
    levels: np.ndarray

    def __post_init__(self) -> None:
        p = np.asarray(self.puzzles)
        if p.ndim == 3 and p.shape[1:] == (4, 4):
            p = p.reshape(len(p), N_CELLS)
        if p.ndim != 2 or p.shape[1] != N_CELLS:
            raise InputError(f"PuzzleSet: puzzles must be (M, 16) or (M, 4, 4), got shape {p.shape}")
        self.puzzles = p.astype(np.int8)
        self.solutions = np.asarray(self.solutions, dtype=np.int8).reshape(-1)
        self.levels = np.asarray(self.levels, dtype=np.int8).reshape(-1)
        m = len(self.puzzles)
        if len(self.solutions) != m or len(self.levels) != m:
            raise InputError(
                f"PuzzleSet: puzzles, solutions and levels must have the same length, got "
                f"{m}, {len(self.solutions)}, {len(self.levels)}"
            )
        if m:
            if self.puzzles.min() < 0 or self.puzzles.max() > TARGET:
                raise InputError("PuzzleSet: puzzle values must lie in 0..5")
            if not np.all((self.puzzles == TARGET).sum(1) == 1):
                raise InputError("PuzzleSet: every puzzle must hold exactly one target (value 5)")
            if self.solutions.min() < 1 or self.solutions.max() > N_SHAPES:
                raise InputError("PuzzleSet: solutions must lie in 1..4")
            if self.levels.min() < 0 or self.levels.max() >= len(LEVELS):
                raise InputError(f"PuzzleSet: levels must index LEVELS {LEVELS}")

    def __len__(self) -> int:
        return len(self.puzzles)

    def subset(self, idx) -> "PuzzleSet":
        """The puzzles selected by `idx` (integer indices, a boolean mask or a slice)."""
        return PuzzleSet(self.puzzles[idx], self.solutions[idx], self.levels[idx])

    @staticmethod
    def concat(sets: Iterable["PuzzleSet"]) -> "PuzzleSet":
        """All puzzles of `sets`, in order (an empty iterable gives an empty set)."""
        sets = list(sets)
        if not sets:
            return PuzzleSet(np.zeros((0, N_CELLS)), np.zeros(0), np.zeros(0))
        return PuzzleSet(
            np.concatenate([s.puzzles for s in sets]),
            np.concatenate([s.solutions for s in sets]),
            np.concatenate([s.levels for s in sets]),
        )

    def level_names(self) -> list[str]:
        """The level of each puzzle as a name from `LEVELS`."""
        return [LEVELS[i] for i in self.levels]


@lru_cache(maxsize=1)
def squares_flat() -> np.ndarray:
    """(576, 16) int8, read-only: every order-4 Latin square, rows chosen so no column repeats."""
    perms = list(itertools.permutations(range(1, N_SHAPES + 1)))

    def extend(rows: tuple) -> list[tuple]:
        if len(rows) == N_SHAPES:
            return [rows]
        fits = (r for r in perms if all(r[j] != prev[j] for prev in rows for j in range(N_SHAPES)))
        return [done for r in fits for done in extend(rows + (r,))]

    sq = np.array([sum(rows, ()) for rows in extend(())], dtype=np.int8)
    sq.setflags(write=False)
    return sq


def latin_squares() -> np.ndarray:
    """All order-4 Latin squares, (576, 4, 4) int8 with values 1..4, in lexicographic row order."""
    return squares_flat().reshape(-1, 4, 4).copy()


def _as_batch(puzzles: np.ndarray) -> np.ndarray:
    """(K, 16) int8 from one puzzle (16,) or (4, 4), or a batch (K, 16) or (K, 4, 4)."""
    p = np.asarray(puzzles)
    if p.ndim == 1 or p.shape == (4, 4):
        p = p.reshape(1, -1)
    elif p.ndim == 3 and p.shape[1:] == (4, 4):
        p = p.reshape(len(p), N_CELLS)
    if p.ndim != 2 or p.shape[1] != N_CELLS:
        raise ValueError(f"a puzzle has 16 cells (or is 4x4), got shape {np.shape(puzzles)}")
    return p.astype(np.int8, copy=False)


def _givens_onehot(p: np.ndarray) -> np.ndarray:
    """(K, 64) float32: channel (cell, shape) is 1 where that cell shows that shape."""
    oh = np.zeros((len(p), N_CELLS, N_SHAPES), dtype=np.float32)
    for s in range(1, N_SHAPES + 1):
        oh[:, :, s - 1] = p == s
    return oh.reshape(len(p), N_CELLS * N_SHAPES)


def consistent_squares(puzzles: np.ndarray) -> np.ndarray:
    """(K, 576) bool: square q agrees with every given shape of puzzle k (one matmul)."""
    p = _as_batch(puzzles)
    sq = squares_flat()
    matches = _givens_onehot(p) @ _givens_onehot(sq).T  # (K, 576) number of givens matched
    n_givens = ((p >= 1) & (p <= N_SHAPES)).sum(1)
    return matches == n_givens[:, None]


def target_answers(puzzles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute force over the 576 squares, batched.

    Returns ``(n_completions, answer)``: (K,) number of consistent squares, and (K,) int8 the target's
    shape when every consistent square agrees on it, else 0 (no completion, or several answers).
    """
    p = _as_batch(puzzles)
    ok = consistent_squares(p)
    t = np.argmax(p == TARGET, axis=1)
    vals = squares_flat()[:, t].T  # (K, 576) the target cell's shape in each square
    lo = np.where(ok, vals, 99).min(1)
    hi = np.where(ok, vals, -1).max(1)
    answer = np.where((lo == hi) & ok.any(1), lo, 0).astype(np.int8)
    return ok.sum(1), answer


def solve_count(puzzle: np.ndarray) -> tuple[int, set[int]]:
    """Number of Latin squares consistent with the givens, and the set of target shapes among them."""
    p = _as_batch(puzzle)
    if len(p) != 1:
        raise ValueError("solve_count takes one puzzle; use target_answers for a batch")
    ok = consistent_squares(p)[0]
    t = int(np.argmax(p[0] == TARGET))
    return int(ok.sum()), {int(v) for v in squares_flat()[ok, t]}


# Shape sets as 4-bit masks: shape s is bit s-1. Blank (0) and target (5) carry no bit.
_BIT = np.array([0, 1, 2, 4, 8, 0], dtype=np.uint8)
_ALL = np.uint8(15)
_POPCOUNT = np.array([bin(m).count("1") for m in range(16)], dtype=np.int8)
_SHAPE_OF_BIT = np.zeros(16, dtype=np.int8)
_SHAPE_OF_BIT[[1, 2, 4, 8]] = [1, 2, 3, 4]  # single-bit mask -> shape; other masks -> 0


def classify_batch(puzzles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Apply the one-step rules to a batch of puzzles, with shape sets as 4-bit masks.

    Returns ``(level, answer)``: (K,) int8 index into `LEVELS` or -1 when no single step determines
    the target (or the givens contradict each other), and (K,) int8 the shape the rule deduces (0 if none).
    """
    p = _as_batch(puzzles)
    k = len(p)
    g = p.reshape(k, 4, 4)
    bits = _BIT[g]  # (K, 4, 4)
    row_mask = np.bitwise_or.reduce(bits, axis=2)  # (K, row): shapes present in each row
    col_mask = np.bitwise_or.reduce(bits, axis=1)  # (K, col)
    t = np.argmax(p == TARGET, axis=1)
    ar, tr, tc = np.arange(k), t // 4, t % 4
    in_row, in_col = row_mask[ar, tr], col_mask[ar, tc]  # (K,) shapes in the target's row / column
    seen = in_row | in_col
    n_seen = _POPCOUNT[seen]

    # Binary / Ternary: the excluded shapes leave exactly one candidate (4 excluded = contradiction).
    single = n_seen == N_SHAPES - 1
    binary = single & ((_POPCOUNT[in_row] == N_SHAPES - 1) | (_POPCOUNT[in_col] == N_SHAPES - 1))
    ternary = single & ~binary

    # Quaternary (hidden single). For the target's row: each other blank cell contributes the shapes
    # its column excludes, non-blank cells (and the target) exclude nothing from the search, so they
    # contribute all shapes; AND over the row = shapes with no other place in the row. Same for the column.
    row_vals, col_vals = g[ar, tr], g[ar, :, tc]  # (K, 4) the target's row / column
    row_excl = np.bitwise_and.reduce(np.where(row_vals == 0, col_mask, _ALL), axis=1)
    col_excl = np.bitwise_and.reduce(np.where(col_vals == 0, row_mask, _ALL), axis=1)
    hidden = (row_excl | col_excl) & ~seen & _ALL
    quaternary = ~single & (n_seen < N_SHAPES) & (_POPCOUNT[hidden] == 1)

    level = np.full(k, -1, dtype=np.int8)
    level[binary], level[ternary], level[quaternary] = 0, 1, 2
    answer = np.zeros(k, dtype=np.int8)
    answer[single] = _SHAPE_OF_BIT[~seen[single] & _ALL]
    answer[quaternary] = _SHAPE_OF_BIT[hidden[quaternary]]
    return level, answer


def classify(puzzle: np.ndarray) -> str | None:
    """The easiest level whose single-step rule determines the target, or None (multi-step)."""
    level, _ = classify_batch(_as_batch(puzzle)[:1])
    return None if level[0] < 0 else LEVELS[level[0]]


def _pairs_onehot(x: PuzzleSet | np.ndarray) -> np.ndarray:
    p = _as_batch(x.puzzles if isinstance(x, PuzzleSet) else x)
    oh = np.zeros((len(p), N_CELLS, TARGET), dtype=np.float32)
    for v in range(1, TARGET + 1):
        oh[:, :, v - 1] = p == v
    return oh.reshape(len(p), N_CELLS * TARGET)


def jaccard_distance(a: PuzzleSet | np.ndarray, b: PuzzleSet | np.ndarray) -> np.ndarray:
    """(Ma, Mb) float64 Jaccard distance ``1 - |A & B| / |A | B|``.

    A puzzle is the set of (cell, value) pairs of its non-blank cells, the target marker included.
    Two empty sets are at distance 0. Computed with one one-hot (M, 80) matmul (exact small integers),
    then ``(union - inter) / union`` in one correctly rounded division, so a distance of exactly 4/5
    compares equal to the literal 0.8.
    """
    oa, ob = _pairs_onehot(a), _pairs_onehot(b)
    inter = (oa @ np.ascontiguousarray(ob.T)).astype(np.float64)  # (Ma, Mb)
    union = oa.sum(1, dtype=np.float64)[:, None] + ob.sum(1, dtype=np.float64)[None, :] - inter
    return np.where(union > 0, (union - inter) / np.maximum(union, 1.0), 0.0)


def encode(ps: PuzzleSet) -> tuple[np.ndarray, np.ndarray]:
    """Model inputs as in the study.

    x: (M, 16, 5) float32 one-hot per token, channels = shapes 1..4 then the target; a blank is all
    zeros. y: (M,) int64, the answer's class 0..3 (shape - 1).
    """
    p = ps.puzzles
    x = np.zeros((len(p), N_CELLS, TARGET), dtype=np.float32)
    for v in range(1, TARGET + 1):
        x[:, :, v - 1] = p == v
    return x, ps.solutions.astype(np.int64) - 1


def n_givens(puzzles: np.ndarray) -> np.ndarray:
    """(K,) number of given shapes besides the target."""
    p = _as_batch(puzzles)
    return ((p >= 1) & (p <= N_SHAPES)).sum(1)


def puzzle_keys(puzzles: np.ndarray) -> np.ndarray:
    """(K,) int64 exact key of each puzzle (base-6 digits), for deduplication."""
    p = _as_batch(puzzles).astype(np.int64)
    return p @ (6 ** np.arange(N_CELLS, dtype=np.int64))


