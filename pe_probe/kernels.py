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

    @njit(cache=True)
    def _group_midranks(c, i_s, j_s, gid, n_groups):  # pragma: no cover - compiled
        """Average rank of each tie group in the resample multiset (pair k weighs c[i]*c[j])."""
        wg = np.zeros(n_groups, dtype=np.float64)
        for k in range(i_s.shape[0]):
            wg[gid[k]] += c[i_s[k]] * c[j_s[k]]
        mr = np.empty(n_groups, dtype=np.float64)
        before = 0.0
        for g in range(n_groups):
            mr[g] = before + (wg[g] + 1.0) / 2.0
            before += wg[g]
        return mr, before

    @njit(parallel=True, cache=True)
    def bootstrap_spearman(counts, i_s1, j_s1, gid1, ng1, gid2_at1, i_s2, j_s2, gid2, ng2):  # pragma: no cover
        """Exact Spearman of each position resample (rows of counts), from cached sort orders.

        Pairs are visited in the sort order of the first vector; gid2_at1[k] is the tie group, in the
        second vector, of the k-th pair of that order.
        """
        B = counts.shape[0]
        out = np.empty(B, dtype=np.float64)
        for b in prange(B):
            c = counts[b]
            mr1, W = _group_midranks(c, i_s1, j_s1, gid1, ng1)
            mr2, _ = _group_midranks(c, i_s2, j_s2, gid2, ng2)
            mean = (W + 1.0) / 2.0  # weighted mean of the midranks of W items
            vx = 0.0
            vy = 0.0
            cxy = 0.0
            for k in range(i_s1.shape[0]):
                w = c[i_s1[k]] * c[j_s1[k]]
                if w != 0.0:
                    dx = mr1[gid1[k]] - mean
                    dy = mr2[gid2_at1[k]] - mean
                    vx += w * dx * dx
                    vy += w * dy * dy
                    cxy += w * dx * dy
            if vx <= 0.0 or vy <= 0.0:
                out[b] = np.nan
            else:
                out[b] = cxy / np.sqrt(vx * vy)
        return out

    return {
        "permuted_upper_dots": permuted_upper_dots,
        "bootstrap_spearman": bootstrap_spearman,
    }


def permuted_upper_dots(A: np.ndarray, B: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """For each permutation p: sum over i<j of A[i, j] * B[p[i], p[j]] (A, B square)."""
    fn = _get("permuted_upper_dots")
    return fn(np.ascontiguousarray(A), np.ascontiguousarray(B), np.ascontiguousarray(perms, dtype=np.int32))


def bootstrap_spearman(counts: np.ndarray, cache1, cache2) -> np.ndarray:
    """Exact Spearman of every resample (rows of ``counts``) given two `stats.RankCache` objects."""
    fn = _get("bootstrap_spearman")
    gid2_at1 = cache2.gid_of_pair[cache1.order]
    return fn(np.ascontiguousarray(counts, dtype=np.float64), cache1.i_sorted, cache1.j_sorted, cache1.gid_sorted,
              cache1.n_groups, gid2_at1, cache2.i_sorted, cache2.j_sorted, cache2.gid_sorted, cache2.n_groups)
