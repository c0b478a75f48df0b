"""Cross-validated linear probe: how much of the ground truth is linearly decodable from the table."""

from __future__ import annotations

import numpy as np

ALPHAS = np.logspace(-4, 4, 17)


def _ridge_gcv_fit(x: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression with intercept; a penalty per output column, each chosen by generalised
    cross-validation (Golub et al. 1979) from one SVD of the centred training data (as scikit-learn's
    ``RidgeCV(alpha_per_target=True)``). Returns (coef (d, k), intercept (k,))."""
    xm, ym = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - xm, y - ym
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    uty = u.T @ yc  # (r, k)
    n = len(x)
    resid_outside = np.sum(yc ** 2, axis=0) - np.sum(uty ** 2, axis=0)  # (k,) part of y outside the span of X
    s2 = s ** 2
    best = np.full(y.shape[1], alphas[0])
    best_gcv = np.full(y.shape[1], np.inf)
    for a in alphas:
        shrink = s2 / (s2 + a)
        dof = float(shrink.sum()) + 1.0  # + intercept
        if dof >= n:
            continue
        rss = resid_outside + np.sum(((1 - shrink)[:, None] * uty) ** 2, axis=0)  # (k,)
        gcv = rss / (n * (1 - dof / n) ** 2)
        better = gcv < best_gcv
        best[better], best_gcv[better] = a, gcv[better]
    coef = vt.T @ ((s[:, None] / (s2[:, None] + best[None, :])) * uty)  # (d, k)
    return coef, ym - xm @ coef


def probe_r2(table: np.ndarray, coords: np.ndarray, *, seed: int = 0) -> float:
    """Mean over ground-truth axes of the out-of-fold R^2 of a ridge regression from table to coords.

    Leave-one-out below 50 positions, else shuffled 5-fold. Inside each training fold the table is
    scaled by its overall RMS on the training rows (one number, so rotations are untouched and the
    result does not depend on the table's scale), and each axis of G gets its own ridge penalty, chosen
    by generalised cross-validation over a fixed grid (so an axis with little variance is not
    over-shrunk by a penalty fitted to a larger one). R^2 per axis = 1 - SS_res / SS_tot over the
    pooled out-of-fold predictions. A mean over G's axes, so it is defined in G's own axes (grid rows
    and columns, anatomical x/y/z): rotating G changes it, unlike the distance-based metrics.
    """
    x = np.asarray(table, dtype=np.float64)
    y = np.asarray(coords, dtype=np.float64)
    n = len(x)
    if n < 50:
        folds = [np.array([i]) for i in range(n)]
    else:
        order = np.random.default_rng(seed).permutation(n)
        folds = np.array_split(order, 5)
    pred = np.empty_like(y)
    for test in folds:
        train = np.setdiff1d(np.arange(n), test, assume_unique=True)
        xt = x[train] - x[train].mean(axis=0)
        rms = np.sqrt(np.mean(xt ** 2))
        scale = 1.0 / rms if rms > 0 else 1.0
        coef, intercept = _ridge_gcv_fit(x[train] * scale, y[train], ALPHAS)
        pred[test] = (x[test] * scale) @ coef + intercept
    ss_res = np.sum((y - pred) ** 2, axis=0)
    ss_tot = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
    valid = ss_tot > 0
    return float(np.mean(1 - ss_res[valid] / ss_tot[valid]))
