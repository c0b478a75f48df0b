"""Procrustes alignment of a recovered embedding onto the ground truth, and the PROTEST test.

Definitions follow `scipy.spatial.procrustes`: both configurations are centred and scaled to unit
Frobenius norm; the orthogonal map (reflection allowed unless forbidden) and isotropic scale that
best map the embedding onto the ground truth give a disparity (sum of squared residuals) and
r2 = 1 - disparity = (sum of singular values of G0^T X0)^2. PROTEST (Jackson 1995; Peres-Neto &
Jackson 2001) permutes the rows of the ground truth to get a null distribution of r2.
"""

from __future__ import annotations

import numpy as np

from .result import Alignment


def _normalised(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    mean = x.mean(axis=0)
    xc = x - mean
    norm = float(np.linalg.norm(xc))
    return (xc / norm if norm > 0 else xc), mean, norm


def _pad(x: np.ndarray, k: int) -> np.ndarray:
    if x.shape[1] >= k:
        return x
    return np.hstack([x, np.zeros((x.shape[0], k - x.shape[1]))])


def procrustes_align(embedding: np.ndarray, coords: np.ndarray, *, allow_reflection: bool = True) -> Alignment:
    """Align ``embedding`` (N x k') onto ``coords`` (N x k); returns the transform, r2 and RMSE.

    The aligned embedding is ``scale * (X - mean_X) @ rotation + mean_G`` (see `Alignment.apply`),
    expressed in the ground truth's units. RMSE = sqrt(mean_i ||g_i - aligned_i||^2).
    """
    k = max(embedding.shape[1], coords.shape[1])
    X = _pad(np.asarray(embedding, dtype=np.float64), k)
    G = _pad(np.asarray(coords, dtype=np.float64), k)
    X0, mean_x, norm_x = _normalised(X)
    G0, mean_g, norm_g = _normalised(G)
    u, s, vt = np.linalg.svd(X0.T @ G0)
    reflection = bool(np.linalg.det(u @ vt) < 0)
    if reflection and not allow_reflection:
        u[:, -1] *= -1
        s = s.copy()
        s[-1] *= -1
        reflection = False
    rotation = u @ vt
    # With reflections forbidden and k = 1 the trace can be negative; the best non-negative scale is
    # then 0 (a negative scale would be a reflection), so r2 = max(trace, 0)^2, as in `protest`.
    trace = max(0.0, float(s.sum()))
    r2 = max(0.0, min(1.0, trace ** 2))
    scale = (trace * norm_g / norm_x) if norm_x > 0 else 0.0
    aligned = scale * (X - mean_x) @ rotation + mean_g
    rmse = float(np.sqrt(np.mean(np.sum((aligned - G) ** 2, axis=1))))
    translation = mean_g - scale * mean_x @ rotation
    return Alignment(rotation=rotation, scale=float(scale), translation=translation, r2=r2, rmse=rmse,
                     reflection=reflection)


def apply_alignment(alignment: Alignment, embedding: np.ndarray) -> np.ndarray:
    """Map an embedding through a fitted alignment (into ground-truth units)."""
    k = alignment.rotation.shape[0]
    X = _pad(np.asarray(embedding, dtype=np.float64), k)
    return alignment.scale * X @ alignment.rotation + alignment.translation


def protest(embedding: np.ndarray, coords: np.ndarray, *, n_perm: int = 1000, allow_reflection: bool = True,
            seed: int | np.random.Generator | None = 0, perms: np.ndarray | None = None,
            exact: bool = False) -> tuple[float, np.ndarray]:
    """PROTEST p-value of r2: p = (1 + #{null r2 >= observed}) / (1 + n_perm), one-sided; with ``exact``
    ``perms`` are all N! relabellings (identity included) and p = #{null r2 >= observed} / N!, exact.

    Vectorised: for each permutation only the k x k cross-product G0[pi]^T X0 and its singular values
    are needed.
    """
    k = max(embedding.shape[1], coords.shape[1])
    X0 = _normalised(_pad(np.asarray(embedding, float), k))[0]
    G0 = _normalised(_pad(np.asarray(coords, float), k))[0]
    observed = procrustes_align(embedding, coords, allow_reflection=allow_reflection).r2
    if perms is None:
        rng = np.random.default_rng(seed)
        perms = np.argsort(rng.random((n_perm, len(X0))), axis=1)
    null = np.empty(len(perms))
    step = max(1, 4_000_000 // (len(X0) * k))
    for s in range(0, len(perms), step):
        p = perms[s:s + step]
        cross = np.einsum("pnk,nl->pkl", G0[p], X0)  # (P, k, k) = G0[pi]^T X0
        sv = np.linalg.svd(cross, compute_uv=False)
        if not allow_reflection:
            det = np.linalg.det(cross)
            sv[:, -1] *= np.where(det < 0, -1.0, 1.0)
        null[s:s + step] = np.clip(sv.sum(axis=1), 0, None) ** 2
    count = int(np.sum(null >= observed - 1e-9))
    return (count / len(perms) if exact else (1 + count) / (1 + len(perms))), null
