"""Pairwise distances between rows, returned condensed (scipy `pdist` order) or square.

Computed through one BLAS matrix product (Gram matrix) instead of `pdist`'s pairwise loop: for
N=4096, d=768 this is tens of times faster. Results agree with `scipy.spatial.distance.pdist` to
floating-point precision (tested).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import squareform

PE_METRICS = ("euclidean", "cosine", "correlation")


def square_distances(x: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """Symmetric (N, N) distance matrix with a zero diagonal.

    euclidean: ||x_i - x_j||; cosine: 1 - cos(x_i, x_j); correlation: 1 - Pearson r of the rows
    (as `scipy.spatial.distance.pdist`). A zero row gets cosine distance 1 to every other row.
    """
    x = np.asarray(x, dtype=np.float64)
    if metric == "euclidean":
        xc = x - x.mean(axis=0)  # centring reduces cancellation in |a|^2 + |b|^2 - 2ab
        sq = np.einsum("ij,ij->i", xc, xc)
        d2 = sq[:, None] + sq[None, :] - 2.0 * (xc @ xc.T)
        np.maximum(d2, 0.0, out=d2)
        d = np.sqrt(d2, out=d2)
    elif metric in ("cosine", "correlation"):
        xc = x - x.mean(axis=1, keepdims=True) if metric == "correlation" else x
        norms = np.linalg.norm(xc, axis=1)
        safe = np.where(norms > 0, norms, 1.0)
        u = xc / safe[:, None]
        d = 1.0 - u @ u.T
        np.clip(d, 0.0, 2.0, out=d)
    else:
        raise ValueError(f"unknown metric {metric!r}; choose one of {PE_METRICS}")
    np.fill_diagonal(d, 0.0)
    d = 0.5 * (d + d.T)
    return d


def condensed(square: np.ndarray) -> np.ndarray:
    """Upper triangle of a square distance matrix as a condensed vector (scipy order)."""
    return squareform(square, force="tovector", checks=False)


def pairwise(x: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """Condensed distance vector of the rows of ``x`` (length N(N-1)/2)."""
    return condensed(square_distances(x, metric))
