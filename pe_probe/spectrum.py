"""Spectrum of the centred table: explained variance and participation ratio."""

from __future__ import annotations

import numpy as np


def _scaled_eigenvalues(singular_values: np.ndarray) -> np.ndarray:
    """Squared singular values relative to the largest: both quantities below are scale-free, and unscaled
    a table of norm 1e100 overflows the fourth powers (the participation ratio came out NaN)."""
    s = np.abs(np.asarray(singular_values, float))
    top = s.max() if s.size else 0.0
    return (s / top) ** 2 if top > 0 else s ** 2


def explained_variance_ratio(singular_values: np.ndarray) -> np.ndarray:
    """Fraction of total variance on each principal axis (from the centred table's singular values)."""
    lam = _scaled_eigenvalues(singular_values)
    total = lam.sum()
    return lam / total if total > 0 else lam


def participation_ratio(singular_values: np.ndarray) -> float:
    """(sum lambda)^2 / sum lambda^2 over the covariance eigenvalues: the effective dimensionality."""
    lam = _scaled_eigenvalues(singular_values)
    denom = float(np.sum(lam ** 2))
    return float(lam.sum() ** 2 / denom) if denom > 0 else 0.0
