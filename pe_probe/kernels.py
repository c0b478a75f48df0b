"""Numba kernels for the permutation and bootstrap loops (compiled once, cached on disk).

numba comes with umap-learn, a regular dependency. Each kernel has a plain-numpy reference in the
tests (`tests/test_stats.py`).

numba's on-disk cache is not safe for processes that compile into it at once: each rewrites the kernel's
index and numbers its compiled files by the index it read, so two analyses started together (parallel
workers, a test run beside a CLI run) could leave an index that names another variant's file, after which
every bootstrap failed with "NRT_adapt_ndarray_to_python ... descr is NULL". Kernels are therefore
loaded or compiled (`_compiled_call`) under a file lock shared by the user's processes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np

_cache: dict[str, object] = {}
LOCK_NAME = "pe-probe-numba-cache.lock"  # in the temporary folder: one lock for every cache folder


@contextlib.contextmanager
def cache_lock():
    """Hold an exclusive lock on `LOCK_NAME` (blocking) while numba reads or writes its cache; without fcntl
    (Windows) or a writable temporary folder, no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux/macOS
        yield
        return
    path = os.path.join(tempfile.gettempdir(), f"{LOCK_NAME}.{os.getuid()}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _compiled_call(fn, *args):
    """``fn(*args)``, a numba dispatcher, first loading or compiling its variant for these argument types under
    `cache_lock` (the call itself runs outside the lock, so analyses still run side by side)."""
    numba = _numba()
    sig = tuple(numba.typeof(a) for a in args)
    if sig not in fn.signatures:
        with cache_lock():
            fn.compile(sig)
    return fn(*args)


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
        """sum_{i<j} A[i, j] * B[p[i], p[j]] for each row p of perms (unsigned: no negative-index wraparound).

        Each row's sum runs in four interleaved accumulators, so the gathers B[p[i], p[j]] overlap instead of
        waiting on one chain of additions (another rounding order of the same sum)."""
        P, N = perms.shape
        n = np.uint64(N)
        one, two, three, four = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
        out = np.empty(P, dtype=np.float64)
        for q in prange(P):
            p = perms[q]
            s = 0.0
            for i in range(N):
                Ai = A[i]
                Bi = B[p[i]]
                a0 = 0.0
                a1 = 0.0
                a2 = 0.0
                a3 = 0.0
                j = np.uint64(i) + one
                while j + three < n:
                    a0 += Ai[j] * Bi[p[j]]
                    a1 += Ai[j + one] * Bi[p[j + one]]
                    a2 += Ai[j + two] * Bi[p[j + two]]
                    a3 += Ai[j + three] * Bi[p[j + three]]
                    j += four
                while j < n:
                    a0 += Ai[j] * Bi[p[j]]
                    j += one
                s += (a0 + a1) + (a2 + a3)
            out[q] = s
        return out

    @njit(parallel=True, cache=True)
    def guttman_step(x, delta, tol):  # pragma: no cover - compiled
        """One SMACOF Guttman transform X <- B(X) X / n, and the raw stress of the input X; points closer
        than tol count as one point (their pull is 0, as at distance 0)."""
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
                if d > tol:
                    r = dl / d
                    for a in range(k):
                        acc[a] += r * (x[i, a] - x[j, a])
            for a in range(k):
                out[i, a] = acc[a] / n
            stress_rows[i] = s
        return out, stress_rows.sum()

    return {
        "permuted_upper_dots": permuted_upper_dots,
        "guttman_step": guttman_step,
    }


BOOTSTRAP_BLOCKS = (64, 32, 16, 8, 4, 2, 1)  # resamples per pass over the pairs: the kernels compiled, widest first
BOOTSTRAP_BLOCK_BYTES = 64 * 2**20  # per thread, for a block's tie-group sums and mean ranks of the 2nd vector


def bootstrap_block(n_resamples: int, n_groups2: int, n_threads: int) -> int:
    """How many resamples one pass over the sorted pairs serves (`BOOTSTRAP_BLOCKS`).

    Each pass streams every pair's indices (~16 bytes a pair: 134 MB at N=4096), so serving R resamples per
    pass cuts that traffic R-fold; R is bounded by the memory of R rows of per-group sums of the second
    vector (small for grids and lines, whose distances take few values; ~N^2/2 groups for tie-free
    coordinates, which leaves R=1) and by the resamples each thread gets.
    """
    per_thread = -(-n_resamples // max(1, n_threads))
    for r in BOOTSTRAP_BLOCKS:
        if r <= per_thread and 2 * 8 * n_groups2 * r <= BOOTSTRAP_BLOCK_BYTES:
            return r
    return 1


def default_bootstrap_block(n_resamples: int, cache1, cache2) -> int:
    """The block `bootstrap_spearman` uses by default for these rank caches: `bootstrap_block` of the vector with
    fewer tie groups (the one whose groups are looked up), at numba's thread count."""
    return bootstrap_block(n_resamples, min(cache1.n_groups, cache2.n_groups), _numba().get_num_threads())


def _bootstrap_kernel(R: int):
    """The compiled exact-Spearman bootstrap for blocks of ``R`` resamples (R a compile-time constant, so the
    per-resample accumulators live in vector registers; one cached compilation per R)."""
    key = f"bootstrap_spearman_{R}"
    if key not in _cache:
        numba = _numba()

        @numba.njit(parallel=True, cache=True)
        def bootstrap_spearman(counts_t, i_s, j_s, start1, g2, n_groups2):  # pragma: no cover - compiled
            """Exact Spearman of each position resample (columns of counts_t, N x B, B a multiple of R).

            Pairs are visited in the sort order of the first vector (i_s, j_s: the pair's two positions;
            start1: where each tie group of the first vector begins in that order, plus the end); g2[k] is
            the tie group, in the second vector, of the k-th pair. In a resample pair (i, j) appears
            c_i * c_j times; average ranks follow from running sums of those weights, so nothing is
            re-sorted and no per-pair buffer is needed. Each pass over the pairs serves R resamples, each
            with the operations, in the order, of a pass for it alone (the same bits for any R).
            """
            N, B = counts_t.shape
            M = i_s.shape[0]
            ng1 = start1.shape[0] - 1
            out = np.empty(B, dtype=np.float64)
            for blk in numba.prange(B // R):
                b0 = blk * R
                c = np.empty((N, R), dtype=np.float32)  # small integer counts: exact, half the cache of float64
                for i in range(N):
                    for q in range(R):
                        c[i, q] = counts_t[i, b0 + q]
                wg2 = np.zeros((n_groups2, R), dtype=np.float64)
                W = np.zeros(R, dtype=np.float64)
                for k in range(M):
                    ci = c[i_s[k]]
                    cj = c[j_s[k]]
                    g = g2[k]
                    for q in range(R):
                        w = np.float64(ci[q]) * np.float64(cj[q])
                        wg2[g, q] += w
                        W[q] += w
                mr2 = np.empty((n_groups2, R), dtype=np.float64)
                before = np.zeros(R, dtype=np.float64)
                for g in range(n_groups2):
                    for q in range(R):
                        mr2[g, q] = before[q] + (wg2[g, q] + 1.0) / 2.0
                        before[q] += wg2[g, q]
                mean = np.empty(R, dtype=np.float64)
                for q in range(R):
                    mean[q] = (W[q] + 1.0) / 2.0  # weighted mean of the average ranks of W items
                vx = np.zeros(R, dtype=np.float64)
                vy = np.zeros(R, dtype=np.float64)
                cxy = np.zeros(R, dtype=np.float64)
                wsum = np.empty(R, dtype=np.float64)
                dx = np.empty(R, dtype=np.float64)
                for q in range(R):
                    before[q] = 0.0
                for g in range(ng1):
                    s0 = start1[g]
                    s1 = start1[g + 1]
                    if s1 - s0 == 1:  # no tie (the usual case for PE distances): one weight, no branches
                        ci = c[i_s[s0]]
                        cj = c[j_s[s0]]
                        m2 = mr2[g2[s0]]
                        for q in range(R):
                            w = np.float64(ci[q]) * np.float64(cj[q])
                            d_x = before[q] + (w + 1.0) * 0.5 - mean[q]
                            d_y = m2[q] - mean[q]
                            vx[q] += w * d_x * d_x
                            vy[q] += w * d_y * d_y
                            cxy[q] += w * d_x * d_y
                            before[q] += w
                        continue
                    for q in range(R):
                        wsum[q] = 0.0
                    for k in range(s0, s1):
                        ci = c[i_s[k]]
                        cj = c[j_s[k]]
                        for q in range(R):
                            wsum[q] += np.float64(ci[q]) * np.float64(cj[q])
                    for q in range(R):
                        dx[q] = before[q] + (wsum[q] + 1.0) * 0.5 - mean[q]
                    for k in range(s0, s1):
                        ci = c[i_s[k]]
                        cj = c[j_s[k]]
                        m2 = mr2[g2[k]]
                        for q in range(R):
                            w = np.float64(ci[q]) * np.float64(cj[q])  # w = 0 adds nothing: no branch needed
                            d_y = m2[q] - mean[q]
                            vx[q] += w * dx[q] * dx[q]
                            vy[q] += w * d_y * d_y
                            cxy[q] += w * dx[q] * d_y
                    for q in range(R):
                        before[q] += wsum[q]
                for q in range(R):
                    if vx[q] <= 0.0 or vy[q] <= 0.0:
                        out[b0 + q] = np.nan
                    else:
                        out[b0 + q] = cxy[q] / np.sqrt(vx[q] * vy[q])
            return out

        _cache[key] = bootstrap_spearman
    return _cache[key]


def permuted_upper_dots(A: np.ndarray, B: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """For each permutation p: sum over i<j of A[i, j] * B[p[i], p[j]] (A, B square)."""
    return _compiled_call(_get("permuted_upper_dots"), np.ascontiguousarray(A), np.ascontiguousarray(B),
                          np.ascontiguousarray(perms, dtype=np.uint32))


def bootstrap_spearman(counts: np.ndarray, cache1, cache2, block: int | None = None) -> np.ndarray:
    """Exact Spearman of every resample (rows of ``counts``) given two `stats.RankCache` objects.

    The vector with more tie groups drives the traversal; the other's groups are looked up. ``block``:
    resamples per pass over the pairs (default `bootstrap_block`'s choice); every block gives the same bits.
    """
    if cache1.n_groups < cache2.n_groups:
        cache1, cache2 = cache2, cache1
    counts = np.asarray(counts, dtype=np.float64)
    if counts.size and not (counts.min() >= 0 and counts.max() < 2**24 and np.all(counts == np.round(counts))):
        raise ValueError("counts must be resample counts: whole numbers from 0 to 2^24 (held exactly in float32)")
    n_res = counts.shape[0]
    if block is None:
        block = default_bootstrap_block(n_res, cache1, cache2)
    if block not in BOOTSTRAP_BLOCKS:
        raise ValueError(f"block must be one of {BOOTSTRAP_BLOCKS}, got {block!r}")
    padded = -(-n_res // block) * block  # all-zero resamples fill the last block (NaN, dropped)
    counts_t = np.zeros((counts.shape[1], padded), dtype=np.float64)
    counts_t[:, :n_res] = counts.T
    g2 = cache2.gid_of_pair[cache1.order]
    fn = _bootstrap_kernel(block)
    return _compiled_call(fn, counts_t, cache1.i_sorted, cache1.j_sorted, cache1.group_starts, g2,
                          cache2.n_groups)[:n_res]


def guttman_step(x: np.ndarray, delta: np.ndarray, tol: float = 0.0) -> tuple[np.ndarray, float]:
    """(Guttman transform of x, raw stress sum_{i<j} (d_ij(x) - delta_ij)^2 of x). Points of x closer than ``tol``
    pull on each other as points at distance 0 do (not at all): their rounding-level distance would otherwise
    decide how they separate."""
    out, stress = _compiled_call(_get("guttman_step"), np.ascontiguousarray(x, dtype=np.float64), delta, float(tol))
    return out, float(stress)
