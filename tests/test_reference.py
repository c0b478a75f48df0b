"""Reference sinusoids (layout by hand) and the shape / Procrustes distances to a reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from pe_probe.errors import InputError
from pe_probe.reference import parse_reference, procrustes_distance, shape_distance, sinusoid_1d, sinusoid_2d


def test_sinusoid_1d_by_hand():
    pe = sinusoid_1d(10, 6)
    for pos in (0, 3, 9):
        for i in range(3):
            w = 10000.0 ** (-2 * i / 6)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(pos * w), abs=1e-15)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(pos * w), abs=1e-15)
    odd = sinusoid_1d(5, 7)
    assert odd.shape == (5, 7)
    assert odd[4, 6] == pytest.approx(math.sin(4 * 10000.0 ** (-6 / 7)))


def test_sinusoid_2d_by_hand():
    h, w, d = 3, 5, 16
    pe = sinusoid_2d(h, w, d)
    assert pe.shape == (h * w, d)
    for idx in (0, 7, 14):  # row-major: idx = row * w + col
        row, col = divmod(idx, w)
        for k in range(d // 4):
            wk = 10000.0 ** (-4 * k / d)
            assert pe[idx, 2 * k] == pytest.approx(math.sin(col * wk), abs=1e-15)
            assert pe[idx, 2 * k + 1] == pytest.approx(math.cos(col * wk), abs=1e-15)
            assert pe[idx, d // 2 + 2 * k] == pytest.approx(math.sin(row * wk), abs=1e-15)
            assert pe[idx, d // 2 + 2 * k + 1] == pytest.approx(math.cos(row * wk), abs=1e-15)
    # the first half depends only on the column, the second only on the row
    np.testing.assert_array_equal(pe[0, : d // 2], pe[w, : d // 2])
    np.testing.assert_array_equal(pe[0, d // 2:], pe[1, d // 2:])
    with pytest.raises(InputError):
        sinusoid_2d(2, 2, 6)


def test_parse_reference():
    ref, name = parse_reference("sin2d:4x4", 16, 10)  # width rounded up to a multiple of 4
    assert ref.shape == (16, 12) and name == "sin2d:4x4"
    ref, name = parse_reference("sin1d", 9, 8)
    np.testing.assert_array_equal(ref, sinusoid_1d(9, 8))
    for bad in ("sin2d:3x3", "sinus", "/no/such/file.npy"):
        with pytest.raises(InputError):
            parse_reference(bad, 16, 8)


def test_shape_distance_zero_for_similar_copy():
    rng = np.random.default_rng(0)
    ref = sinusoid_2d(4, 4, 16)
    q = ortho_group.rvs(16, random_state=1)
    copy = 3.7 * ref @ q + rng.normal(size=16)
    # to rounding: arccos of the nuclear norm gave about 3e-8 here (half the digits lost near 0)
    assert shape_distance(copy, ref) == pytest.approx(0, abs=1e-12)
    assert shape_distance(ref, copy) == pytest.approx(0, abs=1e-12)
    assert shape_distance(ref, ref) == pytest.approx(0, abs=1e-14)
    # zero padding: a reference of another width that spans the same configuration
    assert shape_distance(np.hstack([copy, np.zeros((16, 4))]), ref) == pytest.approx(0, abs=1e-12)
    # small angles to full precision: one-column tables at angle t (arccos returned 0 or 2e-8 at t = 1e-9)
    u, w = np.linalg.qr(np.hstack([np.ones((16, 1)), rng.normal(size=(16, 2))]))[0][:, 1:].T  # centred, orthonormal
    for t in (1e-9, 1e-6, 1e-3, 0.5):
        assert shape_distance((np.cos(t) * u + np.sin(t) * w)[:, None], u[:, None]) == pytest.approx(t, rel=1e-7)


def test_the_rounding_floor_of_an_ill_conditioned_table_against_itself():
    """README: read a shape distance below about 1e-8 as zero. A 1D sinusoid's slowest dimensions barely vary over
    the positions, so its distance to itself is far above float64's 1e-16 (about 2e-9), but stays under 1e-8."""
    for n, d in ((16, 64), (1024, 768)):
        t = sinusoid_1d(n, d)
        assert shape_distance(t, t) < 1e-8
    assert shape_distance(sinusoid_2d(8, 8, 64), sinusoid_2d(8, 8, 64)) < 1e-10


def test_shape_distance_orthogonal_content_and_by_hand():
    rng = np.random.default_rng(2)
    n = 40
    basis = np.linalg.qr(np.hstack([np.ones((n, 1)), rng.normal(size=(n, 6))]))[0][:, 1:]  # centred, orthonormal
    a, b = basis[:, :3] * [3, 2, 1], basis[:, 3:] * [1, 1, 5]
    assert shape_distance(a, b) == pytest.approx(math.pi / 2, abs=1e-9)
    # independent random tables: far from each other (large N: near pi/2)
    big = shape_distance(rng.normal(size=(500, 8)), rng.normal(size=(500, 8)))
    assert 1.3 < big <= math.pi / 2
    # by hand: arccos of the nuclear norm of the normalised cross-product, symmetric
    p, r = rng.normal(size=(30, 5)), rng.normal(size=(30, 3))
    pc, rc = p - p.mean(0), np.hstack([r - r.mean(0), np.zeros((30, 2))])
    pc, rc = pc / np.linalg.norm(pc), rc / np.linalg.norm(rc)
    ref = math.acos(np.linalg.svd(pc.T @ rc, compute_uv=False).sum())
    assert shape_distance(p, r) == pytest.approx(ref, abs=1e-12)
    assert shape_distance(r, p) == pytest.approx(ref, abs=1e-12)
    assert math.isnan(shape_distance(np.ones((5, 2)), p[:5]))


def test_procrustes_distance():
    rng = np.random.default_rng(3)
    ref = sinusoid_2d(4, 4, 8)
    q = ortho_group.rvs(8, random_state=4)
    assert procrustes_distance(ref @ q + 2, ref) == pytest.approx(0, abs=1e-12)  # was 3e-7: sqrt of a difference
    assert procrustes_distance(ref, ref) == pytest.approx(0, abs=1e-14)
    table = ref + 0.3 * rng.normal(size=ref.shape)
    ds = [procrustes_distance(s * table, ref) for s in (1, 2, 4, 8, 16)]
    assert all(b > a for a, b in zip(ds, ds[1:]))
    # by brute force: min over orthogonal Q of ||Pc - Rc Q|| is attained by the polar factor
    pc, rc = table - table.mean(0), ref - ref.mean(0)
    u, _, vt = np.linalg.svd(rc.T @ pc)
    best = np.linalg.norm(pc - rc @ (u @ vt))
    assert procrustes_distance(table, ref) == pytest.approx(best, rel=1e-10)
    for _ in range(20):  # no random orthogonal map does better
        assert np.linalg.norm(pc - rc @ ortho_group.rvs(8, random_state=rng)) >= best - 1e-12
    # the unit-free shape distance does not grow with scale
    assert shape_distance(16 * table, ref) == pytest.approx(shape_distance(table, ref), abs=1e-12)
