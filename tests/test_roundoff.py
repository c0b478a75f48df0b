"""Ties blurred by storage rounding (float32, 6-digit text, large offsets) stay ties; continuous values do not merge."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist
from scipy.stats import kendalltau

import pe_probe
from pe_probe.distances import merge_near_ties
from pe_probe.reference import sinusoid_2d
from pe_probe.roundoff import FLOAT64, digits_roundoff, distance_error, significant_digits, storage_roundoff

TIE_METRICS = ("rsa_spearman", "rsa_kendall", "trustworthiness", "knn_overlap")


def _grid(h: int, w: int) -> np.ndarray:
    return np.stack(np.divmod(np.arange(h * w), w), 1).astype(float)


def _rotation(theta: float = np.pi / 6) -> np.ndarray:
    return np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])


def _metrics(table, gt) -> dict:
    return pe_probe.analyze(table, gt, n_perm=0, n_boot=0, n_null=0, methods="pca").metrics


@pytest.fixture(scope="module")
def grid_case():
    G = _grid(8, 8)
    rng = np.random.default_rng(0)
    P = G @ rng.normal(size=(2, 16)) + rng.normal(0, 1.0, (64, 16))
    return P, G, _metrics(P, G)


@pytest.mark.parametrize("name", ["rotated-float32", "scaled-float32", "offset-float64", "rotated-torch-float32"])
def test_ground_truth_stored_coarsely_keeps_its_ties(grid_case, name):
    P, G, exact = grid_case
    R = _rotation()
    gt = {"rotated-float32": (G @ R).astype(np.float32),
          "scaled-float32": (G * 0.1).astype(np.float32),
          "offset-float64": G @ R * 1e-5 + 1e3,  # float64, but its rounding is set by the offset
          "rotated-torch-float32": torch.tensor(G @ R, dtype=torch.float32)}[name]
    got = _metrics(P, gt)
    for key in TIE_METRICS:
        assert got[key] == pytest.approx(exact[key], abs=1e-12), key


def test_ground_truth_csv_at_six_digits_keeps_its_ties(grid_case, tmp_path):
    P, G, exact = grid_case
    path = tmp_path / "gt.csv"
    np.savetxt(path, G @ _rotation(), fmt="%.6g", delimiter=",")
    got = _metrics(P, str(path))
    for key in TIE_METRICS:
        assert got[key] == pytest.approx(exact[key], abs=1e-12), key


def test_large_rotated_float32_grid_keeps_its_ties():
    G = _grid(32, 32)
    P = G @ np.random.default_rng(1).normal(size=(2, 8)) + np.random.default_rng(2).normal(0, 2.0, (1024, 8))
    exact = _metrics(P, G)
    got = _metrics(P, (G @ _rotation(0.3)).astype(np.float32))
    for key in TIE_METRICS:
        assert got[key] == pytest.approx(exact[key], abs=1e-12), key


def test_float32_sinusoid_table_keeps_its_ties():
    S = sinusoid_2d(8, 8, 64)
    exact = _metrics(S, "grid:8x8")
    got = _metrics(S.astype(np.float32), "grid:8x8")
    for key in ("rsa_spearman", "rsa_kendall"):
        assert got[key] == pytest.approx(exact[key], abs=1e-12), key


@pytest.mark.parametrize("n", [64, 256])
def test_continuous_float32_values_are_not_merged(n):
    """A random float32 table has no ties: its Kendall tau is scipy's on its own distances (merging the distances
    within its float32 rounding, 20-1,000 pairs here, would move it by 1e-7 to 1e-6; the 1e-9 left is summation
    order, there before storage rounding was considered)."""
    rng = np.random.default_rng(n)
    P = rng.normal(size=(n, 64)).astype(np.float32)
    G = rng.normal(size=(n, 3))
    ref = kendalltau(pdist(P.astype(np.float64)), pdist(G)).statistic
    assert _metrics(P, G)["rsa_kendall"] == pytest.approx(ref, abs=1e-8)


def test_merge_near_ties_takes_clusters_and_leaves_chains():
    tol = 1e-6
    clusters = np.array([1.0, 1.0 + 4e-7, 2.0, 2.0 - 3e-7, 3.0])
    merged = merge_near_ties(clusters, storage_atol=tol)
    assert merged[0] == merged[1] and merged[2] == merged[3] and len(set(merged)) == 3
    chain = np.array([1.0, 1.0 + 8e-7, 1.0 + 1.6e-6, 1.0 + 2.4e-6, 5.0])  # gaps under tol, span over it
    np.testing.assert_array_equal(merge_near_ties(chain, storage_atol=tol), chain)
    crowded = np.array([1.0, 1.0 + 5e-7, 1.0 + 2.5e-6, 7.0])  # a cluster with a value 2 tolerances away
    np.testing.assert_array_equal(merge_near_ties(crowded, storage_atol=tol), crowded)


def test_storage_roundoff_reads_the_format():
    assert storage_roundoff(np.arange(5)) == FLOAT64
    assert storage_roundoff(np.arange(5.0, dtype=np.float32)) == FLOAT64  # integers are exact in any format
    assert storage_roundoff(np.array([0.1, 0.2], dtype=np.float32)) == 2.0**-24
    assert storage_roundoff(np.array([0.1, 0.2], dtype=np.float32).astype(np.float64)) == 2.0**-24  # widened
    assert storage_roundoff(np.array([0.1, 0.2])) == FLOAT64
    assert storage_roundoff(np.array([0.1, 0.25], dtype=np.float16)) == 2.0**-11
    assert storage_roundoff(torch.tensor([0.1, 0.3], dtype=torch.bfloat16)) == 2.0**-8
    # dyadic values fit float32 and count as such: harmless, a grid's distinct distances are far more than
    # float32's rounding apart (test_large_rotated_float32_grid_keeps_its_ties)
    assert storage_roundoff(np.array([0.5, 1.5])) == 2.0**-24
    assert storage_roundoff([0.1, 0.2]) == FLOAT64


def decimal_roundoff(cells: list[str]) -> float:
    """What read_named_table derives from a file's cells: the roundoff of the most digits any shows."""
    return digits_roundoff(max(significant_digits(c) for c in cells))


def test_decimal_roundoff_counts_the_writers_digits():
    assert decimal_roundoff(["0.866025", "-2.59808", "3"]) == pytest.approx(5e-6)
    assert decimal_roundoff(["1.23457e+06", "-0.5"]) == pytest.approx(5e-6)
    assert decimal_roundoff(["0.5", "1.5", "12"]) == FLOAT64  # short decimals are exact values
    assert decimal_roundoff([repr(0.1 + 0.2)]) == FLOAT64  # full float64 precision


def test_distance_error_counts_offsets():
    x = np.array([[1000.0, 0.0], [1000.0, 1.0]])
    assert distance_error(x, 1e-7) == pytest.approx(2 * np.sqrt(2) * 1e-7 * 1000)
