"""Spectrum of the centred table: explained variance and participation ratio."""

from __future__ import annotations

import numpy as np


def explained_variance_ratio(singular_values: np.ndarray) -> np.ndarray:
    """Fraction of total variance on each principal axis (from the centred table's singular values)."""
    lam = np.asarray(singular_values, float) ** 2
    total = lam.sum()
    return lam / total if total > 0 else lam


def participation_ratio(singular_values: np.ndarray) -> float:
    """(sum lambda)^2 / sum lambda^2 over the covariance eigenvalues: the effective dimensionality."""
    lam = np.asarray(singular_values, float) ** 2
    denom = float(np.sum(lam ** 2))
    return float(lam.sum() ** 2 / denom) if denom > 0 else 0.0
