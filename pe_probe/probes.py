"""Cross-validated linear probe: how much of the ground truth is linearly decodable from the table."""

from __future__ import annotations

import numpy as np

ALPHAS = np.logspace(-4, 4, 17)


def _ridge_gcv_fit(x: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression with intercept; penalty chosen by generalised cross-validation (Golub et al.
    1979) from one SVD of the centred training data. Returns (coef (d, k), intercept (k,))."""
    xm, ym = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - xm, y - ym
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    uty = u.T @ yc  # (r, k)
    n = len(x)
    resid_outside = float(np.sum(yc ** 2) - np.sum(uty ** 2))  # part of y outside the span of X
    best, best_gcv = alphas[0], np.inf
    s2 = s ** 2
    for a in alphas:
        shrink = s2 / (s2 + a)
        rss = resid_outside + float(np.sum(((1 - shrink)[:, None] * uty) ** 2))
        dof = float(shrink.sum()) + 1.0  # + intercept
        if dof >= n:
            continue
        gcv = rss / (n * (1 - dof / n) ** 2)
        if gcv < best_gcv:
            best, best_gcv = a, gcv
    coef = vt.T @ ((s / (s2 + best))[:, None] * uty)
    return coef, ym - xm @ coef


def probe_r2(table: np.ndarray, coords: np.ndarray, *, seed: int = 0) -> float:
    """Mean over ground-truth axes of the out-of-fold R^2 of a ridge regression from table to coords.

    Leave-one-out below 50 positions, else shuffled 5-fold. The ridge penalty is chosen inside each
    training fold by generalised cross-validation over a fixed grid. The table is first scaled by its
    overall RMS (one number, so rotations are untouched) so the result does not depend on its scale.
    R^2 per axis = 1 - SS_res / SS_tot over the pooled out-of-fold predictions.
    """
    x = table - table.mean(axis=0)
    rms = np.sqrt(np.mean(x ** 2))
    x = x / rms if rms > 0 else x
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
        coef, intercept = _ridge_gcv_fit(x[train], y[train], ALPHAS)
        pred[test] = x[test] @ coef + intercept
    ss_res = np.sum((y - pred) ** 2, axis=0)
    ss_tot = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
    valid = ss_tot > 0
    return float(np.mean(1 - ss_res[valid] / ss_tot[valid]))
