"""Neighbourhood preservation of a recovered embedding against the ground truth.

Both metrics treat ties in the ground truth (grids have many equal distances) symmetrically, so they
do not depend on how positions are labelled:
- rank r(i, j) of j among i's ground-truth neighbours is 1 + #{l != i : D_G(i, l) < D_G(i, j)};
- i's ground-truth k-neighbourhood is {j : r(i, j) <= k} (all ties at the k-th distance included).
Trustworthiness (Venna & Kaski 2001; `sklearn.manifold.trustworthiness` when there are no ties):
T = 1 - 2 / (N k (2N - 3k - 1)) * sum_i sum_{j in U_k(i)} (r(i, j) - k), U_k(i) = i's k nearest
neighbours in the embedding that are outside its ground-truth k-neighbourhood.
kNN overlap: mean over i of |embedding kNN(i) ∩ ground-truth kNN(i)| / k.
"""

from __future__ import annotations

import numpy as np

from .distances import square_distances


def default_k(n: int) -> int:
    return max(1, min(5, n // 2 - 1))


def _embedding_neighbours(emb: np.ndarray, k: int, chunk: int = 512) -> np.ndarray:
    n = len(emb)
    out = np.empty((n, k), dtype=np.int64)
    for s in range(0, n, chunk):
        d = square_distances_rows(emb, s, min(n, s + chunk))
        rows = np.arange(s, min(n, s + chunk))
        d[np.arange(len(rows)), rows] = np.inf
        idx = np.argpartition(d, k - 1, axis=1)[:, :k] if k < n - 1 else np.argsort(d, axis=1)[:, :k]
        out[s:s + len(rows)] = idx
    return out


def square_distances_rows(x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Euclidean distances from rows start:stop of x to all rows."""
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[start:stop, None] + sq[None, :] - 2 * x[start:stop] @ x.T
    return np.sqrt(np.maximum(d2, 0))


def neighbourhood_metrics(embedding: np.ndarray, coords: np.ndarray, k: int | None = None,
                          gt_square: np.ndarray | None = None) -> tuple[float, float]:
    """Return (trustworthiness, knn_overlap) of ``embedding`` against ``coords``."""
    n = len(coords)
    k = default_k(n) if k is None else k
    if gt_square is None:
        gt_square = square_distances(coords)
    nbrs = _embedding_neighbours(np.asarray(embedding, float), k)
    penalty = 0.0
    overlap = 0.0
    tol = 1e-9 * max(1.0, float(gt_square.max()))
    for s in range(0, n, 256):
        rows = np.arange(s, min(n, s + 256))
        dg = gt_square[rows]  # (b, N)
        dj = np.take_along_axis(dg, nbrs[rows], axis=1)  # (b, k) gt distance to embedding neighbours
        # rank = 1 + number of other points strictly closer than j (self has distance 0 and is excluded)
        closer = (dg[:, None, :] < dj[:, :, None] - tol).sum(axis=2) - 1  # minus self
        r = 1 + closer
        penalty += float(np.sum(np.clip(r - k, 0, None)))
        overlap += float(np.sum(r <= k)) / k
    norm = 2.0 / (n * k * (2 * n - 3 * k - 1))
    return 1.0 - norm * penalty, overlap / n
