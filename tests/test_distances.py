"""Gram-matrix distances against `scipy.spatial.distance.pdist`, and the near-tie merging helper."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from pe_probe import distances as dist
from pe_probe.groundtruth import grid

METRICS = ("euclidean", "cosine", "correlation")


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("shape", [(5, 3), (40, 16), (120, 64)])
def test_random_rows_match_pdist(metric, shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape) * rng.uniform(0.5, 3, size=shape[1]) + rng.normal(size=shape[1]) * 4
    got = dist.pairwise(x, metric)
    ref = pdist(x, metric)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    sq = dist.square_distances(x, metric)
    np.testing.assert_array_equal(sq, sq.T)
    assert np.all(np.diag(sq) == 0)
    np.testing.assert_allclose(squareform(sq, checks=False), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-3, 1e-6, 1e-8, 1e-10, 1e-13])
def test_near_duplicate_rows_euclidean_relative_precision(eps):
    """pdist's explicit differences are exact to a few ulps; the Gram form must be too, even for
    rows that nearly coincide (|a|^2 + |b|^2 - 2ab cancels catastrophically there)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 16)) + 10.0  # offset: large norms make cancellation worse
    for a, b in [(1, 0), (5, 4), (17, 3)]:
        x[a] = x[b] + eps * rng.normal(size=16)
    got = dist.pairwise(x)
    ref = pdist(x)
    assert np.all(got > 0)  # distinct rows must not collapse onto distance 0
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
    # The ranks of the smallest distances (near-duplicates) must be right.
    np.testing.assert_array_equal(np.argsort(got)[:3], np.argsort(ref)[:3])


@pytest.mark.parametrize("metric", ["cosine", "correlation"])
def test_near_duplicate_rows_angular(metric):
    # pdist uses the same 1 - u.v formula, so both have absolute error ~1e-16 near 0.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(25, 12))
    x[3] = x[7] * 2.5 + 1e-9 * rng.normal(size=12)
    x[9] = x[2] + 1e-7 * rng.normal(size=12)
    np.testing.assert_allclose(dist.pairwise(x, metric), pdist(x, metric), rtol=1e-10, atol=1e-13)


def test_euclidean_rows_blocks_match_pdist_and_refine_near_duplicates():
    """A block of rows' distances (what the neighbourhood metrics compute in slices) equals the same rows of
    pdist, near-duplicate pairs included (recomputed from explicit differences, not the Gram identity)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 7)) * 50 + 100
    x[5] = x[30] + 1e-9  # Gram identity: error ~1e-10 relative to |x|^2 ~ 1e6, larger than the distance
    xc = x - x.mean(axis=0)
    ref = squareform(pdist(x))
    full = np.vstack([dist.euclidean_rows(xc, s, min(s + 16, 40)) for s in range(0, 40, 16)])
    np.testing.assert_allclose(full, ref, rtol=1e-10, atol=0)
    assert full[5, 30] == full[30, 5] == pytest.approx(np.sqrt(7) * 1e-9, rel=1e-5)


def test_exact_duplicates_give_zero():
    x = np.random.default_rng(3).normal(size=(10, 5))
    x[4] = x[2]
    for metric in METRICS:
        sq = dist.square_distances(x, metric)
        assert sq[2, 4] == 0 and sq[4, 2] == 0


def test_zero_row_cosine_is_one():
    x = np.random.default_rng(4).normal(size=(6, 3))
    x[0] = 0
    sq = dist.square_distances(x, "cosine")
    np.testing.assert_allclose(sq[0, 1:], 1.0)


def test_unknown_metric():
    with pytest.raises(ValueError):
        dist.pairwise(np.eye(4), "manhattan")


def test_grid_distances_are_exact():
    g = grid(8, 8).coords
    d = dist.pairwise(g)
    np.testing.assert_array_equal(d, pdist(g))
    assert len(np.unique(d)) == 33  # sqrt(a^2 + b^2), 0 <= a <= b <= 7, minus (0, 0): 36 - 1 - 2 (25=9+16=0+25, 50=1+49=25+25)


def test_merge_near_ties_restores_rounding_broken_ties():
    g = grid(8, 8).coords
    exact = pdist(g)
    for scale, shift in [(0.37, 5.3), (3.1, -2.0), (1e-3, 0.0)]:
        d = dist.pairwise(g * scale + shift)
        merged = dist.merge_near_ties(d)
        # Ties broken by rounding before merging (the point of the helper) ...
        assert len(np.unique(d)) > len(np.unique(exact))
        # ... the same tie structure as the exact integer grid after it.
        assert len(np.unique(merged)) == len(np.unique(exact))
        _, inv_m = np.unique(merged, return_inverse=True)
        _, inv_e = np.unique(exact, return_inverse=True)
        np.testing.assert_array_equal(inv_m, inv_e)
        np.testing.assert_allclose(merged, exact * scale, rtol=1e-12)


def test_merge_near_ties_keeps_distinct_values():
    v = np.random.default_rng(5).random(10000)
    np.testing.assert_array_equal(dist.merge_near_ties(v), v)
    w = np.array([1.0, 1.0 + 1e-13, 2.0, 1.0 - 1e-13, 3.0])
    out = dist.merge_near_ties(w)
    assert out[0] == out[1] == out[3] and out[2] == 2.0 and out[4] == 3.0


def test_angular_distances_stay_within_their_range_for_parallel_and_opposite_rows():
    """1 - u.v rounds to a few ulps outside [0, 2] for (anti)parallel rows; the distances are clipped into it."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(50, 7))
    x = np.vstack([base, base * rng.uniform(0.1, 10, size=(50, 1)), -base * rng.uniform(0.1, 10, size=(50, 1))])
    for metric in ("cosine", "correlation"):
        sq = dist.square_distances(x, metric)
        assert sq.min() >= 0.0 and sq.max() <= 2.0, metric


def test_euclidean_rows_chunks_and_batches_refine_the_right_pairs():
    """The near-duplicate refinement runs in row chunks and pair batches (1024 / 65536 by default, so only very
    large tables use more than one): with tiny chunks and batches each refined pair still lands in its place."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 7)) * 50 + 100
    for a, b in [(5, 30), (21, 2), (37, 12), (33, 34)]:  # near-duplicates in several chunks
        x[a] = x[b] + 1e-9 * rng.normal(size=7)
    xc = x - x.mean(axis=0)
    ref = squareform(pdist(x))
    got = np.vstack([dist.euclidean_rows(xc, s, min(s + 16, 40), chunk=4, batch=1) for s in range(0, 40, 16)])
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    assert np.all(got[~np.eye(40, dtype=bool)] > 0)


@pytest.mark.parametrize("scale,shift", [(1e6 / 3, 5.3), (np.pi * 1e7, -2.0)])
def test_merge_near_ties_is_relative_to_the_values_size(scale, shift):
    """Large units: rounding splits ties by much more than 1e-11 absolutely; the tolerance scales with them."""
    g = grid(8, 8).coords
    exact = pdist(g)
    d = dist.pairwise(g * scale + shift)
    assert len(np.unique(d)) > len(np.unique(exact))  # ties broken by rounding before merging
    merged = dist.merge_near_ties(d)
    _, inv_m = np.unique(merged, return_inverse=True)
    _, inv_e = np.unique(exact, return_inverse=True)
    np.testing.assert_array_equal(inv_m, inv_e)
