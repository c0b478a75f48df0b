"""Participation ratio and explained variance of a table's spectrum, against hand values and numpy's covariance."""

from __future__ import annotations

import numpy as np
import pytest

import pe_probe
from pe_probe.spectrum import explained_variance_ratio, participation_ratio


def test_participation_ratio_of_hand_spectra():
    # singular values s -> covariance eigenvalues lam ~ s^2; PR = (sum lam)^2 / sum lam^2
    assert participation_ratio(np.ones(4)) == pytest.approx(4.0)  # isotropic: every axis counts
    assert participation_ratio(np.array([2.0, 1.0])) == pytest.approx(25 / 17)  # lam = 4, 1
    assert participation_ratio(np.array([3.0, 0.0, 0.0])) == pytest.approx(1.0)  # one axis
    np.testing.assert_allclose(explained_variance_ratio(np.array([2.0, 1.0])), [0.8, 0.2])


def test_analyze_participation_ratio_is_that_of_the_tables_covariance():
    rng = np.random.default_rng(0)
    coords = np.indices((4, 4)).reshape(2, -1).T.astype(float)
    P = coords @ rng.normal(size=(2, 6)) + 0.3 * rng.normal(size=(16, 6))
    lam = np.linalg.eigvalsh(np.cov(P.T))
    expected = lam.sum() ** 2 / (lam ** 2).sum()
    m = pe_probe.analyze(P, "grid:4x4", n_perm=0, n_boot=0, n_null=0).metrics
    assert m["participation_ratio"] == pytest.approx(expected, rel=1e-9)
    assert 1.0 < m["participation_ratio"] < 6.0
