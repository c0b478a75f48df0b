"""Embed a PE table into the ground truth's k dimensions: PCA, classical MDS, SMACOF, UMAP.

- PCA: projection of the centred table onto its top-k principal axes (SVD).
- Classical MDS (Torgerson 1952; Gower 1966): top-k eigenpairs of B = -1/2 J D^2 J, computed with a
  top-k eigensolver (ARPACK `eigsh` for large N, LAPACK's subset `eigh` for small N), never a full
  eigendecomposition. Negative eigenvalues are clipped at 0. With Euclidean distances it equals PCA.
- SMACOF (de Leeuw 1977): metric MDS minimising raw stress sum_{i<j} (d_ij(X) - delta_ij)^2 by Guttman
  transforms, warm-started from classical MDS (so it only improves on it).
- UMAP (McInnes et al. 2018): imported lazily, seeded, on the table with the chosen metric.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh

METHODS = ("pca", "cmds", "smacof", "umap")


def pca_embed(table: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (top-k principal component scores (N, k), singular values of the centred table)."""
    xc = table - table.mean(axis=0)
    u, s, _ = np.linalg.svd(xc, full_matrices=False)
    scores = u[:, :k] * s[:k]
    if scores.shape[1] < k:
        scores = np.hstack([scores, np.zeros((len(xc), k - scores.shape[1]))])
    return scores, s


TIE_RTOL = 1e-6  # eigenvalues closer than this share of the largest are tied


def tied_at_cut(eigenvalues: np.ndarray, k: int, rtol: float = TIE_RTOL) -> bool:
    """Whether the k-th and (k+1)-th largest of ``eigenvalues`` are tied (and not both ~0): then the top-k
    subspace is not unique, and a k-dim PCA / classical-MDS layout is one arbitrary choice within the tie,
    which a rotation or relabelling of the table can change."""
    vals = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    if k < 1 or len(vals) <= k or vals[0] <= 0:
        return False
    scale = rtol * vals[0]
    return bool(vals[k - 1] > scale and vals[k - 1] - vals[k] <= scale)


NULL_RTOL = 1e-10  # classical-MDS eigenvalues below this share of the largest are zero (rounding error)


def _double_centred(square_dist: np.ndarray) -> np.ndarray:
    """Classical MDS's inner-product matrix B = -J D^2 J / 2 (J the centring matrix)."""
    d2 = square_dist ** 2
    row = d2.mean(axis=1)
    return -0.5 * (d2 - row[:, None] - row[None, :] + row.mean())


def cmds_embed(square_dist: np.ndarray, k: int, *, n_eigenvalues: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Classical MDS: (coordinates (N, k), the top eigenvalues, descending).

    The eigenvalues are the k used (at most N - 1), or the top ``n_eigenvalues`` (at most N) when more are
    asked for: the (k+1)-th tells whether the k-dim layout is unique (`tied_at_cut`), from the same
    eigendecomposition.
    """
    n = square_dist.shape[0]
    b = _double_centred(square_dist)
    k_eff = min(k, n - 1)
    m = max(k_eff, min(n_eigenvalues if n_eigenvalues is not None else k_eff, n))
    if n > 200 and m < n - 1:
        # A fixed start vector keeps ARPACK deterministic; not the constant vector, which the centring puts in
        # B's null space (the Krylov space would then grow from rounding error alone).
        v0 = np.random.default_rng(0).standard_normal(n)
        vals, vecs = eigsh(b, k=m, which="LA", v0=v0, tol=1e-10)
    else:
        vals, vecs = eigh(b, subset_by_index=[n - m, n - 1])
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order[:k_eff]]
    # Fix the sign of each axis (largest |entry| positive) so results do not depend on the solver.
    signs = np.sign(vecs[np.argmax(np.abs(vecs), axis=0), np.arange(vecs.shape[1])])
    vecs = vecs * np.where(signs == 0, 1, signs)
    # Axes whose eigenvalue is rounding error (a table of lower rank than k) get coordinates of exactly 0, not
    # ~1e-8 noise that would break the layout's ties by the row order (neighbourhoods, SMACOF's start).
    kept = np.where(vals[:k_eff] > NULL_RTOL * max(float(vals[0]), 0.0), vals[:k_eff], 0.0)
    coords = vecs * np.sqrt(kept)
    if coords.shape[1] < k:
        coords = np.hstack([coords, np.zeros((n, k - coords.shape[1]))])
    return coords, vals


COINCIDENT_RTOL = 1e-9  # points of a layout closer than this share of its extent are one point (SMACOF)


def smacof_embed(square_dist: np.ndarray, init: np.ndarray, *, max_iter: int = 300, eps: float = 1e-6) -> tuple[np.ndarray, int]:
    """Metric SMACOF from ``init``; stops when the relative stress decrease falls below ``eps``.

    Each Guttman transform X <- B(X) X / n runs in one compiled pass over the distance matrix
    (no N x N temporaries). Returns (coordinates, iterations used).
    """
    from .kernels import guttman_step

    delta = np.ascontiguousarray(square_dist, dtype=np.float64)
    x = np.asarray(init, dtype=np.float64)
    prev = np.inf
    it = 0
    for it in range(1, max_iter + 1):
        # points within 1e-9 of the layout's extent are one point: a symmetric layout keeps mirror pairs on one
        # point up to rounding, and that rounding must not decide (by the row order) how they split
        tol = COINCIDENT_RTOL * float(np.abs(x - x.mean(axis=0)).max())
        x_new, stress = guttman_step(x, delta, tol)  # stress of x (before the step)
        if it > 1 and prev - stress < eps * max(prev, 1e-300):
            break
        prev = stress
        x = x_new
    return x, it


def umap_embed(table: np.ndarray, k: int, *, metric: str = "euclidean", seed: int = 0) -> np.ndarray:
    """UMAP embedding (lazy import: umap-learn JIT-compiles on first use, ~10-15 s)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import umap

        n_neighbors = max(2, min(15, len(table) - 1))
        # umap-learn seeds numpy's legacy RandomState, which takes seeds below 2**32 only (analyze's reach 2**63 - 1)
        reducer = umap.UMAP(n_components=k, n_neighbors=n_neighbors, metric=metric, random_state=seed % 2**32,
                            init="random" if len(table) <= k + 1 else "spectral")
        return np.asarray(reducer.fit_transform(table), dtype=np.float64)
