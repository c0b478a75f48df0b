"""Numba kernels for the permutation and bootstrap loops (compiled once, cached on disk).

numba comes with umap-learn, a regular dependency. Each kernel has a plain-numpy reference in the
tests (`tests/test_stats.py`).
"""

from __future__ import annotations

import numpy as np

_cache: dict[str, object] = {}


def _numba():
    import numba  # lazy: compiling costs ~1 s the first time, then the on-disk cache is used

    return numba


def _get(name: str):
    if name not in _cache:
        _cache.update(_compile())
    return _cache[name]


def _compile() -> dict[str, object]:
    numba = _numba()
    njit, prange = numba.njit, numba.prange

    @njit(parallel=True, cache=True, fastmath=False)
    def permuted_upper_dots(A, B, perms):  # pragma: no cover - compiled
        """sum_{i<j} A[i, j] * B[p[i], p[j]] for each row p of perms."""
        P, N = perms.shape
        out = np.empty(P, dtype=np.float64)
        for q in prange(P):
            p = perms[q]
            s = 0.0
            for i in range(N):
                Ai = A[i]
                Bi = B[p[i]]
                acc = 0.0
                for j in range(i + 1, N):
                    acc += Ai[j] * Bi[p[j]]
                s += acc
            out[q] = s
        return out

    @njit(parallel=True, cache=True)
    def bootstrap_spearman(counts, i_s, j_s, start1, g2, n_groups2):  # pragma: no cover - compiled
        """Exact Spearman of each position resample (rows of counts).

        Pairs are visited in the sort order of the first vector (i_s, j_s: the pair's two positions;
        start1: where each tie group of the first vector begins in that order, plus the end); g2[k] is
        the tie group, in the second vector, of the k-th pair. In a resample pair (i, j) appears
        c_i * c_j times; average ranks follow from running sums of those weights, so nothing is
        re-sorted and no per-pair buffer is needed.
        """
        B = counts.shape[0]
        M = i_s.shape[0]
        ng1 = start1.shape[0] - 1
        out = np.empty(B, dtype=np.float64)
        for b in prange(B):
            c = counts[b]
            wg2 = np.zeros(n_groups2, dtype=np.float64)
            W = 0.0
            for k in range(M):
                w = c[i_s[k]] * c[j_s[k]]
                wg2[g2[k]] += w
                W += w
            mr2 = np.empty(n_groups2, dtype=np.float64)
            before = 0.0
            for g in range(n_groups2):
                mr2[g] = before + (wg2[g] + 1.0) / 2.0
                before += wg2[g]
            mean = (W + 1.0) / 2.0  # weighted mean of the average ranks of W items
            vx = 0.0
            vy = 0.0
            cxy = 0.0
            before = 0.0
            for g in range(ng1):
                s0 = start1[g]
                s1 = start1[g + 1]
                if s1 - s0 == 1:  # no tie (the usual case for PE distances): one weight, no branches
                    w = c[i_s[s0]] * c[j_s[s0]]
                    dx = before + (w + 1.0) * 0.5 - mean
                    dy = mr2[g2[s0]] - mean
                    vx += w * dx * dx
                    vy += w * dy * dy
                    cxy += w * dx * dy
                    before += w
                    continue
                wsum = 0.0
                for k in range(s0, s1):
                    wsum += c[i_s[k]] * c[j_s[k]]
                dx = before + (wsum + 1.0) * 0.5 - mean
                for k in range(s0, s1):
                    w = c[i_s[k]] * c[j_s[k]]  # w = 0 adds nothing: no branch needed
                    dy = mr2[g2[k]] - mean
                    vx += w * dx * dx
                    vy += w * dy * dy
                    cxy += w * dx * dy
                before += wsum
            if vx <= 0.0 or vy <= 0.0:
                out[b] = np.nan
            else:
                out[b] = cxy / np.sqrt(vx * vy)
        return out

    @njit(parallel=True, cache=True)
    def guttman_step(x, delta):  # pragma: no cover - compiled
        """One SMACOF Guttman transform X <- B(X) X / n, and the raw stress of the input X."""
        n, k = x.shape
        out = np.zeros((n, k), dtype=np.float64)
        stress_rows = np.zeros(n, dtype=np.float64)
        for i in prange(n):
            acc = np.zeros(k, dtype=np.float64)
            s = 0.0
            for j in range(n):
                if j == i:
                    continue
                d2 = 0.0
                for a in range(k):
                    t = x[i, a] - x[j, a]
                    d2 += t * t
                d = np.sqrt(d2)
                dl = delta[i, j]
                if j > i:
                    s += (d - dl) * (d - dl)
                if d > 0.0:
                    r = dl / d
                    for a in range(k):
                        acc[a] += r * (x[i, a] - x[j, a])
            for a in range(k):
                out[i, a] = acc[a] / n
            stress_rows[i] = s
        return out, stress_rows.sum()

    return {
        "permuted_upper_dots": permuted_upper_dots,
        "bootstrap_spearman": bootstrap_spearman,
        "guttman_step": guttman_step,
    }


def permuted_upper_dots(A: np.ndarray, B: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """For each permutation p: sum over i<j of A[i, j] * B[p[i], p[j]] (A, B square)."""
    fn = _get("permuted_upper_dots")
    return fn(np.ascontiguousarray(A), np.ascontiguousarray(B), np.ascontiguousarray(perms, dtype=np.int32))


def bootstrap_spearman(counts: np.ndarray, cache1, cache2) -> np.ndarray:
    """Exact Spearman of every resample (rows of ``counts``) given two `stats.RankCache` objects.

    The vector with more tie groups drives the traversal; the other's groups are looked up.
    """
    if cache1.n_groups < cache2.n_groups:
        cache1, cache2 = cache2, cache1
    fn = _get("bootstrap_spearman")
    g2 = cache2.gid_of_pair[cache1.order]
    return fn(np.ascontiguousarray(counts, dtype=np.float64), cache1.i_sorted, cache1.j_sorted,
              cache1.group_starts, g2, cache2.n_groups)


def guttman_step(x: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, float]:
    """(Guttman transform of x, raw stress sum_{i<j} (d_ij(x) - delta_ij)^2 of x)."""
    fn = _get("guttman_step")
    out, stress = fn(np.ascontiguousarray(x, dtype=np.float64), delta)
    return out, float(stress)
