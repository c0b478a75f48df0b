"""Rank correlations, the Mantel permutation test and the position bootstrap for RSA.

Definitions (DESIGN.md section 4):
- Spearman = Pearson correlation of average ranks (as `scipy.stats.spearmanr`); Kendall = tau-b
  (`scipy.stats.kendalltau`); Pearson on the raw distances.
- Mantel test (Mantel 1967): the position labels of the ground truth are permuted jointly on rows and
  columns of its distance matrix; one-sided (greater);
  p = (1 + #{null >= observed}) / (1 + n_perm). When N! <= n_perm every relabelling is enumerated
  and p = #{stat >= observed} / N! (identity included), which is exact.
- Bootstrap CI (percentile, 95% by default): positions are resampled with replacement and every pair
  of a position with its own copy is dropped (its distance is 0 by construction). A resample is the
  multiset of original pairs where pair (i, j) appears c_i * c_j times (c = resample counts), so its
  Spearman is a weighted rank correlation over the original pairs. For N <= EXACT_BOOTSTRAP_MAX_N it
  is computed exactly (average ranks within the resample, from cached sort orders, no re-sorting).
  Above that the *rank-cached* form is used: ranks are those of the full sample and each resample's
  statistic is their weighted Pearson correlation, a batched matrix product for all resamples at once
  (each resample agrees with the exact one to ~1e-3 for large N). The CI is only approximate: fixed
  ranks leave out the ranks' own resampling noise, and its width was off by up to ~15%, mostly too
  narrow, in the tests. `bootstrap_rsa` reports which form it used and `analyze` adds a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import permutations

import numpy as np
from scipy import stats as sst
from scipy.spatial.distance import squareform

from . import kernels

RSA_METHODS = ("spearman", "pearson", "kendall")
EXACT_BOOTSTRAP_MAX_N = 8192
_TIE_TOL = 1e-9  # relative tolerance for "null >= observed" (float rounding of identical statistics)
_FLOAT32_NEAR = 1e-5  # a float32 null value this close (relative) to the observed one is recomputed in float64


def rank(v: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Average ranks (1-based), identical to `scipy.stats.rankdata(v, method="average")`.

    ``order``: an argsort of ``v`` already at hand (skips the sort).
    """
    v = np.asarray(v)
    order = np.argsort(v) if order is None else order
    vs = v[order]
    new = np.empty(len(vs), dtype=bool)
    new[0] = True
    new[1:] = vs[1:] != vs[:-1]
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(vs))
    avg = (starts + ends + 1) / 2.0  # mean of 1-based ranks start+1 .. end
    out = np.empty(len(v), dtype=np.float64)
    out[order] = np.repeat(avg, ends - starts)
    return out


def standardise(v: np.ndarray) -> np.ndarray:
    """Centre and scale to unit norm, so that a dot product of two such vectors is Pearson's r."""
    v = np.asarray(v, dtype=np.float64)
    v = v - v.mean()
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def correlate(a: np.ndarray, b: np.ndarray, method: str = "spearman") -> float:
    """Correlation between two condensed distance vectors (NaN when either is constant)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    if method == "kendall":
        return float(sst.kendalltau(a, b).statistic)
    if method == "spearman":
        a, b = rank(a), rank(b)
    elif method != "pearson":
        raise ValueError(f"unknown RSA method {method!r}; choose one of {RSA_METHODS}")
    return float(np.clip(standardise(a) @ standardise(b), -1.0, 1.0))  # rounding can pass 1 by an ulp


@dataclass
class MantelResult:
    """Observed statistic, p-value, and the null distribution of the Mantel test."""

    statistic: float
    p_value: float
    n_perm: int  # relabellings evaluated (N! when exact)
    exact: bool
    null: np.ndarray


def _prepared(v: np.ndarray, method: str) -> np.ndarray:
    return standardise(rank(v) if method == "spearman" else v)


def all_permutations(n: int, n_perm: int) -> np.ndarray | None:
    """All n! relabellings of n positions (n!, n) when there are no more than ``n_perm`` of them (and
    n <= 12), for exact permutation tests; else None (sample ``n_perm`` at random)."""
    if n <= 12 and math.factorial(n) <= n_perm:
        return np.array(list(permutations(range(n))), dtype=np.int32)
    return None


def mantel(pe_dist: np.ndarray, gt_dist: np.ndarray, *, method: str = "spearman", n_perm: int = 1000,
           seed: int | np.random.Generator | None = 0) -> MantelResult:
    """One-sided Mantel permutation test of the RSA correlation (Spearman or Pearson).

    Rank-cached: both vectors are ranked and standardised once; a relabelling pi then costs
    sum_{i<j} A_ij B_pi(i)pi(j) over the square forms, evaluated by a parallel compiled kernel.
    """
    if method not in ("spearman", "pearson"):
        raise ValueError("the Mantel test supports spearman and pearson")
    a, b = _prepared(pe_dist, method), _prepared(gt_dist, method)
    return mantel_prepared(a, b, n_perm=n_perm, seed=seed)


def mantel_prepared(a: np.ndarray, b: np.ndarray, *, n_perm: int = 1000,
                    seed: int | np.random.Generator | None = 0) -> MantelResult:
    """Mantel test on already ranked (if Spearman) and standardised condensed vectors."""
    observed = float(a @ b)
    A = squareform(a, checks=False)
    B = squareform(b, checks=False)
    n = A.shape[0]
    perms = all_permutations(n, n_perm)
    exact = perms is not None
    if not exact:
        rng = np.random.default_rng(seed)
        perms = np.argsort(rng.random((n_perm, n)), axis=1).astype(np.int32)
    scale = max(1.0, abs(observed))
    if n > 256 and len(perms):  # float32 halves memory traffic; ample precision for a null distribution
        null = kernels.permuted_upper_dots(A.astype(np.float32), B.astype(np.float32), perms)
        # ... except next to the observed value: a relabelling that ties it exactly (a symmetry of the ground
        # truth) lands a few 1e-9 away in float32 products, past the tie tolerance, so those are redone in float64
        near = np.flatnonzero(np.abs(null - observed) <= _FLOAT32_NEAR * scale)
        if len(near):
            null[near] = kernels.permuted_upper_dots(A, B, perms[near])
    else:
        null = kernels.permuted_upper_dots(A, B, perms) if len(perms) else np.zeros(0)
    count = int(np.sum(null >= observed - _TIE_TOL * scale))
    p = count / len(perms) if exact else (1 + count) / (1 + n_perm)
    return MantelResult(observed, float(p), len(perms), exact, null)


class RankCache:
    """Sort order and tie groups of one condensed vector, for exact resample ranks."""

    def __init__(self, v: np.ndarray, n: int, order: np.ndarray | None = None):
        self.order = np.argsort(v) if order is None else order
        vs = np.asarray(v)[self.order]
        new = np.empty(len(vs), dtype=bool)
        new[0] = True
        new[1:] = vs[1:] != vs[:-1]
        self.gid_sorted = (np.cumsum(new) - 1).astype(np.int32)
        self.n_groups = int(self.gid_sorted[-1]) + 1
        self.gid_of_pair = np.empty_like(self.gid_sorted)
        self.gid_of_pair[self.order] = self.gid_sorted
        self.group_starts = np.append(np.flatnonzero(new), len(vs)).astype(np.int64)
        iu, ju = np.triu_indices(n, 1)
        small = np.int16 if n < 32768 else np.int32
        self.i_sorted = iu[self.order].astype(small)
        self.j_sorted = ju[self.order].astype(small)


@dataclass
class BootstrapResult:
    low: float
    high: float
    samples: np.ndarray
    method: str  # "exact" or "rank-cached"


def bootstrap_rsa(pe_dist: np.ndarray, gt_dist: np.ndarray, *, method: str = "spearman", n_boot: int = 1000,
                  seed: int | np.random.Generator | None = 0, level: float = 0.95,
                  exact: bool | None = None, orders: tuple[np.ndarray, np.ndarray] | None = None) -> BootstrapResult:
    """Percentile bootstrap CI of the RSA correlation, resampling positions with replacement."""
    if method not in ("spearman", "pearson"):
        raise ValueError("the bootstrap CI supports spearman and pearson")
    pe_dist = np.asarray(pe_dist, dtype=np.float64)
    gt_dist = np.asarray(gt_dist, dtype=np.float64)
    n = squareform(pe_dist, checks=False).shape[0]
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)]).astype(np.float64)
    if exact is None:
        exact = n <= EXACT_BOOTSTRAP_MAX_N
    if exact and method == "spearman":
        o1, o2 = orders if orders is not None else (None, None)
        c1, c2 = RankCache(pe_dist, n, o1), RankCache(gt_dist, n, o2)
        samples = kernels.bootstrap_spearman(counts, c1, c2)
        used = "exact"
    elif method == "pearson":
        samples = _weighted_pearson_batch(standardise(pe_dist), standardise(gt_dist), counts)
        used = "exact"
    else:
        samples = _weighted_pearson_batch(_prepared(pe_dist, "spearman"), _prepared(gt_dist, "spearman"), counts)
        used = "rank-cached"
    good = samples[np.isfinite(samples)]
    if len(good) == 0:
        return BootstrapResult(float("nan"), float("nan"), samples, used)
    alpha = (1 - level) / 2
    low, high = np.quantile(good, [alpha, 1 - alpha])
    return BootstrapResult(float(low), float(high), samples, used)


def _weighted_pearson_batch(a: np.ndarray, b: np.ndarray, counts: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Weighted Pearson of condensed a, b with pair weights c_i c_j, for every row c of counts.

    Every weighted sum over pairs is a quadratic form 1/2 c^T X c with X symmetric and zero on the
    diagonal, so all resamples are evaluated by matrix products.
    """
    A = squareform(a, checks=False)
    B = squareform(b, checks=False)
    dtype = np.float32 if A.shape[0] > 1024 else np.float64
    X = np.concatenate([A, B, A * A, B * B, A * B]).astype(dtype)  # (5N, N)
    n = A.shape[0]
    out = np.empty(len(counts))
    for s in range(0, len(counts), chunk):
        C = counts[s:s + chunk]  # (b, N)
        XC = (X @ C.T.astype(dtype)).astype(np.float64).reshape(5, n, -1)  # (5, N, b)
        q = 0.5 * np.einsum("knb,bn->kb", XC, C)  # (5, b) sums over pairs i<j
        sw = 0.5 * (C.sum(1) ** 2 - (C * C).sum(1))
        sa, sb, saa, sbb, sab = q
        va = saa - sa * sa / sw
        vb = sbb - sb * sb / sw
        cov = sab - sa * sb / sw
        with np.errstate(invalid="ignore", divide="ignore"):
            r = cov / np.sqrt(va * vb)
        r[(va <= 0) | (vb <= 0)] = np.nan
        out[s:s + chunk] = r
    return out
