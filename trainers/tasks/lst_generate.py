"""Generate balanced Latin Square Task puzzle sets and the train / test / OOD splits.

Rejection sampling, vectorised: a batch of candidates is drawn by picking a Latin square, a target
cell, a number of givens (uniform in the level's range) and a random set of that many givens; the
one-step rules (`classify_batch`) keep those of the wanted level; candidates too close (Jaccard) to an
excluded set are dropped; the brute-force check over all 576 squares keeps those with a unique
answer; duplicates are dropped. Draws are seeded per level, so a run is reproducible from ``seed``.
"""

from __future__ import annotations

import contextlib
from typing import Mapping

import numpy as np

from pe_probe.errors import InputError
from trainers.tasks.lst_puzzles import (
    GIVENS_RANGE,
    LEVELS,
    N_CELLS,
    TARGET,
    PuzzleSet,
    classify_batch,
    jaccard_distance,
    puzzle_keys,
    squares_flat,
    target_answers,
)

_BATCH = 8192
_MAX_EMPTY_BATCHES = 50  # give up after this many batches in a row that add nothing
_EXCLUDE_BLOCK = 2048  # Jaccard against a large excluded set in blocks, to bound memory
DEFAULT_MIN_JACCARD = 0.8  # the study's: every training puzzle at distance >= 0.8 from the held-out set


def _single_threaded_blas():
    """Batches are small matmuls: BLAS threads only add start-up cost and contend on a busy machine."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _check_givens(givens: Mapping[str, tuple[int, int]] | None) -> dict[str, tuple[int, int]]:
    out = dict(GIVENS_RANGE)
    if givens is None:
        return out
    for name, rng in givens.items():
        if name not in LEVELS:
            raise InputError(f"givens: unknown level {name!r}; use one of {', '.join(LEVELS)}")
        try:
            lo, hi = (int(v) for v in rng)
        except (TypeError, ValueError):
            raise InputError(f"givens[{name!r}] must be a pair (min, max) of integers, got {rng!r}") from None
        if not 0 <= lo <= hi <= N_CELLS - 1:
            raise InputError(f"givens[{name!r}] = {rng!r}: need 0 <= min <= max <= 15 givens besides the target")
        out[name] = (lo, hi)
    return out


def _far_from(cand: np.ndarray, exclude: PuzzleSet, min_jaccard: float) -> np.ndarray:
    """(K,) bool: candidate k is at Jaccard distance >= min_jaccard from every excluded puzzle."""
    far = np.ones(len(cand), dtype=bool)
    for start in range(0, len(exclude), _EXCLUDE_BLOCK):
        block = exclude.puzzles[start:start + _EXCLUDE_BLOCK]
        far &= jaccard_distance(cand, block).min(1) >= min_jaccard
    return far


def _draw(rng: np.random.Generator, n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """n candidate puzzles (n, 16) int8 and their answers (n,) int8, drawn from random squares."""
    squares = squares_flat()[rng.integers(0, len(squares_flat()), n)]
    target = rng.integers(0, N_CELLS, n)
    k = rng.integers(lo, hi + 1, n)
    keys = rng.random((n, N_CELLS))
    rows = np.arange(n)
    keys[rows, target] = 2.0  # the target always ranks last, so it is never a given
    ranks = np.argsort(np.argsort(keys, axis=1), axis=1)
    puzzles = np.where(ranks < k[:, None], squares, 0).astype(np.int8)
    puzzles[rows, target] = TARGET
    return puzzles, squares[rows, target]


def _shortfall_message(level: int, n: int, have: int, lo: int, hi: int, exclude: PuzzleSet | None,
                       min_jaccard: float) -> str:
    """One line: why a level fell short, and only the fixes that can help (as command-line options)."""
    name = LEVELS[level]
    filtered = exclude is not None and len(exclude) > 0 and min_jaccard > 0
    where = f" at Jaccard distance >= {min_jaccard} from all {len(exclude)} held-out puzzles" if filtered else ""
    fixes = []
    if filtered:
        fixes.append(f"lower --min-jaccard (default {DEFAULT_MIN_JACCARD})")
    if (lo, hi) != GIVENS_RANGE[name]:  # only reachable from Python (generate(givens=...))
        fixes.append(f"widen the givens range ({lo}-{hi} now, default {GIVENS_RANGE[name][0]}-{GIVENS_RANGE[name][1]})")
    if have or not fixes:  # with none found, fewer would not help
        fixes.append("ask for fewer puzzles per level with --n-per-level")
    return (f"could not generate {n} {name} puzzles{where}: found {have}, then {_MAX_EMPTY_BATCHES} batches "
            f"of {_BATCH} candidates in a row added none; {', or '.join(fixes)}")


def _generate_level(
    level: int,
    n: int,
    rng: np.random.Generator,
    lo: int,
    hi: int,
    seen: set[int],
    exclude: PuzzleSet | None,
    min_jaccard: float,
    bar=None,
) -> PuzzleSet:
    """`n` new puzzles of one level; `seen` holds the keys of puzzles already taken (updated here)."""
    chunks: list[np.ndarray] = []
    answers: list[np.ndarray] = []
    have, empty = 0, 0
    while have < n:
        cand, sol = _draw(rng, _BATCH, lo, hi)
        lv, ans = classify_batch(cand)
        keep = lv == level
        cand, sol, ans = cand[keep], sol[keep], ans[keep]
        if np.any(ans != sol):  # the one-step rules are sound; a mismatch is a bug here
            raise AssertionError("one-step rule deduced a shape that differs from the square's")
        if exclude is not None and len(exclude) and len(cand):
            far = _far_from(cand, exclude, min_jaccard)
            cand, sol = cand[far], sol[far]
        _, unique = target_answers(cand)
        keep = unique == sol
        cand, sol = cand[keep], sol[keep]
        added = 0
        for key, p, s in zip(puzzle_keys(cand).tolist(), cand, sol):
            if have + added >= n:
                break
            if key in seen:
                continue
            seen.add(key)
            chunks.append(p)
            answers.append(s)
            added += 1
        have += added
        if bar is not None:
            bar.update(added)
        empty = 0 if added else empty + 1
        if empty >= _MAX_EMPTY_BATCHES:
            raise InputError(_shortfall_message(level, n, have, lo, hi, exclude, min_jaccard))
    puzzles = np.array(chunks, dtype=np.int8).reshape(-1, N_CELLS)
    return PuzzleSet(puzzles, np.array(answers, dtype=np.int8), np.full(len(puzzles), level, dtype=np.int8))


def generate(
    n_per_level: int = 3000,
    seed: int = 0,
    *,
    givens: Mapping[str, tuple[int, int]] | None = None,
    exclude: PuzzleSet | None = None,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    progress: bool = False,
) -> PuzzleSet:
    """Generate `n_per_level` puzzles of each level in `LEVELS`, grouped by level.

    Every puzzle is classified by the one-step rules as its level, has exactly one consistent target
    shape over the 576 Latin squares, is unique within the set, and has a number of givens besides the
    target within ``givens[level]`` (default: Binary 6-11, Ternary 5-11, Quaternary 4-9). The count of
    givens is drawn uniformly within the range before rejection, so the accepted counts lean towards
    the counts where a level is more common. With `exclude`, only puzzles at Jaccard distance
    >= `min_jaccard` from every puzzle of `exclude` are kept.
    """
    if isinstance(n_per_level, bool) or not isinstance(n_per_level, (int, np.integer)) or n_per_level < 0:
        raise InputError(f"n_per_level must be a non-negative integer, got {n_per_level!r}")
    if not 0.0 <= float(min_jaccard) <= 1.0:
        raise InputError(f"min_jaccard must lie in [0, 1], got {min_jaccard!r}")
    if exclude is not None and not isinstance(exclude, PuzzleSet):
        raise InputError(f"exclude must be a PuzzleSet, got {type(exclude).__name__}")
    ranges = _check_givens(givens)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_per_level * len(LEVELS), desc="puzzles", unit="pz")
    seen: set[int] = set()
    children = np.random.SeedSequence(seed).spawn(len(LEVELS))
    try:
        with _single_threaded_blas():
            parts = [
                _generate_level(i, int(n_per_level), np.random.default_rng(children[i]), *ranges[name],
                                seen, exclude, float(min_jaccard), bar)
                for i, name in enumerate(LEVELS)
            ]
    finally:
        if bar is not None:
            bar.close()
    return PuzzleSet.concat(parts)


def _stratified_split(ps: PuzzleSet, test_frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    train, test = [], []
    for level in range(len(LEVELS)):
        idx = rng.permutation(np.flatnonzero(ps.levels == level))
        n_test = int(round(len(idx) * test_frac))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def make_splits(
    n_per_level: int = 3000,
    test_frac: float = 0.1,
    n_ood_per_level: int = 36,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    seed: int = 0,
    ood: PuzzleSet | None = None,
) -> dict[str, PuzzleSet]:
    """The study's data: ``{"train", "test", "ood"}``.

    The held-out OOD set is generated first (`n_ood_per_level` per level), unless the user gives one
    in `ood` (e.g. read with `read_puzzle_csv`). The training pool (`n_per_level` per level) is then
    generated excluding every puzzle within Jaccard distance `min_jaccard` of any OOD puzzle, and split
    into train and test, stratified by level (`test_frac` of each level goes to test).
    """
    if not 0.0 <= float(test_frac) < 1.0:
        raise InputError(f"test_frac must lie in [0, 1), got {test_frac!r}")
    if ood is not None and not isinstance(ood, PuzzleSet):
        raise InputError(f"ood must be a PuzzleSet (see read_puzzle_csv), got {type(ood).__name__}")
    ss_ood, ss_pool, ss_split = np.random.SeedSequence(seed).spawn(3)
    if ood is None:
        ood = generate(n_ood_per_level, seed=int(ss_ood.generate_state(1)[0]))
    pool = generate(n_per_level, seed=int(ss_pool.generate_state(1)[0]), exclude=ood, min_jaccard=min_jaccard)
    train, test = _stratified_split(pool, float(test_frac), np.random.default_rng(ss_split))
    return {"train": pool.subset(train), "test": pool.subset(test), "ood": ood}
