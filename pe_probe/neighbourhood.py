"""Neighbourhood preservation of a recovered embedding against the ground truth.

Both metrics treat ties symmetrically, in the ground truth (grids have many equal distances) and in the
embedding (a table that codes one grid axis only, or a symmetric sinusoid), so they do not depend on how
positions are labelled. Distances within a relative tolerance (1e-9 of the largest distance) are equal,
so neither depends on the units of the coordinates or the embedding:
- rank r(i, j) of j among i's ground-truth neighbours is 1 + #{l != i : D_G(i, l) < D_G(i, j)};
- i's ground-truth k-neighbourhood is {j : r(i, j) <= k} (all ties at the k-th distance included);
- i's embedding k-neighbourhood is the expectation over uniformly random tie-breaking: the points
  strictly closer than its k-th nearest distance count fully, and the t points tied at that distance
  count (k - #closer) / t each. Without ties it is the plain k nearest neighbours.
Trustworthiness (Venna & Kaski 2001; `sklearn.manifold.trustworthiness` when there are no ties):
T = 1 - 2 / (N k (2N - 3k - 1)) * sum_i sum_{j in U_k(i)} (r(i, j) - k), U_k(i) = i's k nearest
neighbours in the embedding that are outside its ground-truth k-neighbourhood.
kNN overlap: mean over i of |embedding kNN(i) ∩ ground-truth kNN(i)| / k.
"""

from __future__ import annotations

import numpy as np

from .distances import euclidean_rows, square_distances

_RTOL = 1e-9  # distances closer than this fraction of the largest distance are ties
_BLOCK = 1 << 22  # elements of one (rows x candidates x N) comparison block


def default_k(n: int) -> int:
    return max(1, min(5, n // 2 - 1))


def _neighbours(d: np.ndarray, k: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row's embedding k-neighbourhood (self at distance inf) as (candidates (b, c), weights (b, c)):
    weight 1 for points closer than the row's k-th nearest distance, (k - #closer) / #tied for the
    points tied at it, 0 for padding. c = k unless some row has ties across its k-th distance."""
    idx = np.argpartition(d, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(d, idx, axis=1).max(axis=1, keepdims=True)
    within = (d <= kth + tol).sum(axis=1)
    if (within == k).all():  # no ties across the k-th distance: the plain k nearest neighbours
        return idx, np.ones(idx.shape)
    closer = d < kth - tol
    tied = ~closer & (d <= kth + tol)
    w = closer + tied * ((k - closer.sum(axis=1, keepdims=True)) / tied.sum(axis=1, keepdims=True))
    c = int(within.max())
    cand = np.argpartition(-w, c - 1, axis=1)[:, :c] if c < d.shape[1] else np.broadcast_to(np.arange(c), w.shape)
    return cand, np.take_along_axis(w, cand, axis=1)


def neighbourhood_metrics(embedding: np.ndarray, coords: np.ndarray, k: int | None = None,
                          gt_square: np.ndarray | None = None) -> tuple[float, float]:
    """Return (trustworthiness, knn_overlap) of ``embedding`` against ``coords``."""
    n = len(coords)
    k = default_k(n) if k is None else k
    if not 1 <= k < n / 2:  # beyond, trustworthiness's normaliser is wrong (> 1) or divides by zero
        raise ValueError(f"k = {k} neighbours: trustworthiness needs 1 <= k < N/2 = {n / 2:g}")
    if gt_square is None:
        gt_square = square_distances(coords)
    emb = np.asarray(embedding, float)
    emb = emb - emb.mean(axis=0)
    tol_e = _RTOL * 2 * float(np.sqrt(np.einsum("ij,ij->i", emb, emb).max()))  # >= tol of the largest distance
    tol_g = _RTOL * float(gt_square.max())
    penalty = 0.0
    overlap = 0.0
    for s in range(0, n, 256):
        rows = np.arange(s, min(n, s + 256))
        de = euclidean_rows(emb, s, rows[-1] + 1)  # rows equal up to rounding come out equal
        de[np.arange(len(rows)), rows] = np.inf
        cand, wc = _neighbours(de, k, tol_e)  # (b, c)
        n_cand = cand.shape[1]
        step = max(1, _BLOCK // (n_cand * n))
        for a in range(0, len(rows), step):
            dg = gt_square[rows[a : a + step]]  # (b', N)
            dj = np.take_along_axis(dg, cand[a : a + step], axis=1)  # (b', c) gt distance to the candidates
            # rank = 1 + number of other points strictly closer than j (self, at 0, only when j is farther)
            closer = (dg[:, None, :] < dj[:, :, None] - tol_g).sum(axis=2) - (dj > tol_g)
            r = 1 + closer
            wa = wc[a : a + step]
            penalty += float(np.sum(wa * np.clip(r - k, 0, None)))
            overlap += float(np.sum(wa * (r <= k))) / k
    norm = 2.0 / (n * k * (2 * n - 3 * k - 1))
    return 1.0 - norm * penalty, overlap / n
