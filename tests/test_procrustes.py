"""Procrustes alignment against `scipy.spatial.procrustes`, and the PROTEST permutation test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import procrustes as scipy_procrustes
from scipy.stats import ortho_group

from pe_probe.procrustes import apply_alignment, procrustes_align, protest


def _pad(x, k):
    return np.hstack([x, np.zeros((len(x), k - x.shape[1]))]) if x.shape[1] < k else x


def _scipy_r2(emb, coords):
    k = max(emb.shape[1], coords.shape[1])
    return 1 - scipy_procrustes(_pad(coords, k), _pad(emb, k))[2]


@pytest.mark.parametrize("kx,kg", [(2, 2), (3, 3), (1, 2), (2, 3), (3, 2), (2, 1)])
@pytest.mark.parametrize("seed", [0, 1])
def test_r2_and_transform_match_scipy(kx, kg, seed):
    rng = np.random.default_rng(seed)
    n = 30
    coords = rng.normal(size=(n, kg)) * 3 + 7
    emb = _pad(coords, max(kx, kg))[:, :kx] @ rng.normal(size=(kx, kx)) + rng.normal(size=(n, kx))
    al = procrustes_align(emb, coords)
    assert al.r2 == pytest.approx(_scipy_r2(emb, coords), abs=1e-12)
    # r2 is symmetric in the two configurations (both orders of k'/k)
    assert procrustes_align(coords, emb).r2 == pytest.approx(al.r2, abs=1e-12)
    k = max(kx, kg)
    # aligned = scale * (X - mean_X) @ R + mean_G, by hand, equals scipy's standardised mtx2 rescaled
    X, G = _pad(emb, k), _pad(coords, k)
    aligned = al.scale * (X - X.mean(0)) @ al.rotation + G.mean(0)
    np.testing.assert_allclose(apply_alignment(al, emb), aligned, atol=1e-10)
    m1, m2, _ = scipy_procrustes(G, X)
    g_norm = np.linalg.norm(G - G.mean(0))
    np.testing.assert_allclose(aligned, m2 * g_norm + G.mean(0), atol=1e-9)
    rmse = np.sqrt(np.mean(np.sum((aligned - G) ** 2, axis=1)))
    assert al.rmse == pytest.approx(rmse, rel=1e-10)
    # rmse^2 * N = disparity * |G - mean G|^2 (disparity is measured on unit-norm G)
    assert al.rmse ** 2 * n == pytest.approx((1 - al.r2) * g_norm ** 2, rel=1e-9)
    np.testing.assert_allclose(al.rotation @ al.rotation.T, np.eye(k), atol=1e-12)
    assert al.reflection == (np.linalg.det(al.rotation) < 0)
    # the transform is optimal: a perturbed one is never better
    for _ in range(5):
        q = np.linalg.qr(np.eye(k) + 0.05 * rng.normal(size=(k, k)))[0]
        worse = al.scale * 1.02 * (X - X.mean(0)) @ al.rotation @ q + G.mean(0)
        assert np.sqrt(np.mean(np.sum((worse - G) ** 2, axis=1))) >= al.rmse - 1e-12


def test_exact_similarity_copy_and_units():
    rng = np.random.default_rng(3)
    coords = rng.normal(size=(20, 2))
    q = ortho_group.rvs(2, random_state=4)
    emb = 0.1 * coords @ q + 5
    al = procrustes_align(emb, coords)
    assert al.r2 == pytest.approx(1, abs=1e-12) and al.rmse == pytest.approx(0, abs=1e-10)
    assert al.scale == pytest.approx(10, rel=1e-10)
    np.testing.assert_allclose(apply_alignment(al, emb), coords, atol=1e-10)
    # RMSE is in the ground truth's units: scaling G scales it, r2 does not change.
    noisy = emb + 0.05 * rng.normal(size=emb.shape)
    a1, a2 = procrustes_align(noisy, coords), procrustes_align(noisy, 4 * coords)
    assert a2.r2 == pytest.approx(a1.r2, abs=1e-12) and a2.rmse == pytest.approx(4 * a1.rmse, rel=1e-10)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_reflection_forbidden(k):
    rng = np.random.default_rng(k)
    coords = rng.normal(size=(25, k))
    mirror = np.eye(k)
    mirror[0, 0] = -1
    emb = coords @ mirror + 0.3 * rng.normal(size=(25, k))
    free = procrustes_align(emb, coords)
    fixed = procrustes_align(emb, coords, allow_reflection=False)
    assert free.reflection and np.linalg.det(free.rotation) < 0
    assert not fixed.reflection and np.linalg.det(fixed.rotation) == pytest.approx(1, abs=1e-12)
    assert fixed.r2 <= free.r2 + 1e-12 and fixed.r2 < free.r2 - 0.05
    assert fixed.scale >= 0  # a negative scale would be a reflection in disguise
    aligned = apply_alignment(fixed, emb)
    assert fixed.rmse == pytest.approx(np.sqrt(np.mean(np.sum((aligned - coords) ** 2, axis=1))), rel=1e-10)
    # brute force over rotations (k = 2): the best proper rotation gives the same r2
    if k == 2:
        X = emb - emb.mean(0)
        X /= np.linalg.norm(X)
        G = coords - coords.mean(0)
        G /= np.linalg.norm(G)
        best = max(np.trace(X @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) @ G.T)
                   for t in np.linspace(0, 2 * np.pi, 20001))
        assert fixed.r2 == pytest.approx(max(best, 0) ** 2, abs=1e-6)
    if k == 1:  # a pure mirror image: no proper rotation with a non-negative scale fits it
        assert fixed.r2 == 0.0 and fixed.scale == 0.0
    # without a reflection in the data, forbidding it changes nothing
    a, b = procrustes_align(coords, coords * 2 + 1), procrustes_align(coords, coords * 2 + 1, allow_reflection=False)
    assert a.r2 == pytest.approx(1) and b.r2 == pytest.approx(1)


def test_protest_planted_and_noise():
    rng = np.random.default_rng(0)
    coords = rng.normal(size=(40, 2))
    emb = coords @ ortho_group.rvs(2, random_state=1) + 0.5 * rng.normal(size=(40, 2))
    p, null = protest(emb, coords, n_perm=499, seed=0)
    assert p == pytest.approx(1 / 500) and len(null) == 499
    # the null by hand for a few permutations: r2 of the relabelled ground truth
    perms = np.argsort(np.random.default_rng(0).random((499, 40)), axis=1)
    for i in range(0, 499, 50):
        assert null[i] == pytest.approx(procrustes_align(emb, coords[perms[i]]).r2, abs=1e-10)
        assert (protest(emb, coords, perms=perms[i:i + 1], allow_reflection=False)[1][0]
                == pytest.approx(procrustes_align(emb, coords[perms[i]], allow_reflection=False).r2, abs=1e-10))
    ps = [protest(rng.normal(size=(30, 2)), coords[:30], n_perm=199, seed=s)[0] for s in range(40)]
    assert 0.3 < np.mean(ps) < 0.7
    assert 0.05 < np.mean(np.array(ps) <= 0.25) < 0.5  # about a quarter


def test_protest_reflection_forbidden_consistent_k1():
    x = np.arange(12.0)[:, None]
    p, null = protest(-x, x, n_perm=99, allow_reflection=False, seed=0)
    assert p == 1.0  # the observed r2 is 0: a mirrored line is no match without reflections
    assert protest(-x, x, n_perm=99, seed=0)[0] == pytest.approx(0.01)


def test_exact_protest_counts_the_square_symmetries_equal_up_to_rounding():
    """A rotated, scaled, shifted copy of a square: the square's 8 symmetries (reflections included) all fit it
    perfectly, so the exact p is 8/24; their r2 equal the observed one only up to rounding, which the tie
    tolerance counts (without it some rotations give p = 0)."""
    from pe_probe.groundtruth import grid
    from pe_probe.stats import all_permutations

    g, perms = grid(2, 2).coords, all_permutations(4, 1000)
    for seed in range(10):
        rng = np.random.default_rng(seed)
        th = rng.uniform(0, 2 * np.pi)
        rot = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
        p, _ = protest(g @ rot * np.e + rng.normal(size=2), g, perms=perms, exact=True)
        assert p == pytest.approx(8 / 24, abs=1e-15), (seed, p)


def test_protest_null_without_reflections_is_procrustes_r2_for_every_relabelling_k1():
    """k = 1 with reflections forbidden: a relabelling whose best fit needs a mirror has r2 = 0 (scale 0), in the
    null as in `procrustes_align`; counting it as trace^2 inflates the p-value."""
    rng = np.random.default_rng(4)
    coords = rng.normal(size=(15, 1))
    emb = coords + 0.5 * rng.normal(size=(15, 1))
    perms = np.argsort(rng.random((60, 15)), axis=1)
    _, null = protest(emb, coords, perms=perms, allow_reflection=False)
    ref = [procrustes_align(emb, coords[p], allow_reflection=False).r2 for p in perms]
    np.testing.assert_allclose(null, ref, atol=1e-10)
    assert (np.array(ref) == 0).any()  # some relabellings would need a mirror
