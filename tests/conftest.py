"""Shared fixtures: a seeded generator and a small PE table that encodes a 4x4 grid."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so every test sees the same numbers."""
    return np.random.default_rng(0)


@pytest.fixture
def grid_table(rng: np.random.Generator) -> np.ndarray:
    """(16, 8) float64 table whose rows are a random linear image of the 4x4 grid coordinates plus small noise."""
    coords = np.indices((4, 4)).reshape(2, -1).T.astype(float)
    return coords @ rng.normal(size=(2, 8)) + 0.01 * rng.normal(size=(16, 8))
