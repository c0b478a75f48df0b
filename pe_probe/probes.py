"""Cross-validated linear probe: how much of the ground truth is linearly decodable from the table."""

from __future__ import annotations

import numpy as np

ALPHAS = np.logspace(-4, 4, 17)


def _ridge_gcv_fit(x: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression with intercept; one penalty for all output columns, chosen by generalised
    cross-validation (Golub et al. 1979) from one SVD of the centred training data. The criterion sums
    each column's residuals divided by that column's variance: it estimates the mean R^2 over columns,
    the number `probe_r2` reports, so a column with large variance (units) does not decide the penalty
    alone. Returns (coef (d, k), intercept (k,))."""
    xm, ym = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - xm, y - ym
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    uty = u.T @ yc  # (r, k)
    n = len(x)
    ss = np.sum(yc ** 2, axis=0)
    weight = np.divide(1.0, ss, out=np.zeros_like(ss), where=ss > 0)  # per column: residuals as a share of variance
    # the part of y outside the span of U, from the residual itself (ss - |U^T y|^2 cancels when y is near that span)
    resid_outside = float(np.sum(weight * np.sum((yc - u @ uty) ** 2, axis=0)))
    best, best_gcv = alphas[0], np.inf
    s2 = s ** 2
    for a in alphas:
        shrink = s2 / (s2 + a)
        rss = resid_outside + float(np.sum(weight * np.sum(((1 - shrink)[:, None] * uty) ** 2, axis=0)))
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

    Leave-one-out below 50 positions, else shuffled 5-fold. Inside each training fold the table is
    scaled by its overall RMS on the training rows (one number, so rotations are untouched and the
    result does not depend on the table's scale), and one ridge penalty is chosen by generalised
    cross-validation over a fixed grid, with each axis's residuals counted as a share of its variance
    (so G's units do not let one axis decide it). R^2 per axis = 1 - SS_res / SS_tot over the pooled
    out-of-fold predictions. A mean over G's own axes (grid rows and columns, anatomical x/y/z), so it
    can change when G is rotated: the per-axis weights of the penalty search differ between rotations
    (even for a square grid, whose training folds lose the axes' equal variance), and so may the penalty.
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
