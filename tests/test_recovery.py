"""Embeddings: PCA, classical MDS (against a full eigendecomposition), SMACOF (against scikit-learn)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from pe_probe import distances as dist
from pe_probe import kernels
from pe_probe.groundtruth import grid
from pe_probe.procrustes import procrustes_align
from pe_probe.recovery import cmds_embed, pca_embed, smacof_embed


def _table(n, d, seed, spread=(5.0, 3.0, 1.5)):
    """Random table with a few distinct dominant axes (distinct eigenvalues, so eigenvectors are unique)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[:, : len(spread)] *= spread
    return x @ np.linalg.qr(rng.normal(size=(d, d)))[0] + rng.normal(size=d)


def _cmds_brute(square, k):
    n = len(square)
    j = np.eye(n) - np.ones((n, n)) / n
    b = -0.5 * j @ (square ** 2) @ j
    vals, vecs = np.linalg.eigh(b)
    vals, vecs = vals[::-1][:k], vecs[:, ::-1][:, :k]
    return vecs * np.sqrt(np.clip(vals, 0, None)), vals


def _match_signs(a, b):
    s = np.sign(np.sum(a * b, axis=0))
    return a * s


@pytest.mark.parametrize("n,d,k", [(12, 5, 2), (50, 8, 3), (201, 20, 2), (230, 10, 3)])
def test_cmds_matches_full_eigh(n, d, k):
    x = _table(n, d, seed=n)
    sq = squareform(pdist(x))
    got, vals = cmds_embed(sq, k)
    ref, ref_vals = _cmds_brute(sq, k)
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-9)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(_match_signs(got, ref), ref, atol=1e-8 * scale)
    # deterministic sign: largest |entry| of each axis positive
    idx = np.argmax(np.abs(got), axis=0)
    assert np.all(got[idx, np.arange(k)] > 0)


def test_cmds_equals_pca_for_euclidean():
    for seed, (n, d) in enumerate([(30, 6), (64, 64), (210, 12)]):
        x = _table(n, d, seed)
        pca, sv = pca_embed(x, 2)
        cm, vals = cmds_embed(dist.square_distances(x), 2)
        np.testing.assert_allclose(vals, sv[:2] ** 2, rtol=1e-9)  # B's eigenvalues = squared singular values
        np.testing.assert_allclose(_match_signs(cm, pca), pca, atol=1e-8 * np.abs(pca).max())
        g = grid(5, 6).coords if n == 30 else np.random.default_rng(seed).normal(size=(n, 2))
        assert procrustes_align(cm, g).r2 == pytest.approx(procrustes_align(pca, g).r2, abs=1e-10)


def test_cmds_small_and_non_euclidean():
    # k >= N - 1 pads with zeros; a non-Euclidean (cosine) matrix has negative eigenvalues, clipped
    x = _table(4, 3, seed=1)
    out, _ = cmds_embed(dist.square_distances(x), 5)
    assert out.shape == (4, 5) and np.all(out[:, 3:] == 0)
    sq = dist.square_distances(np.random.default_rng(2).normal(size=(30, 5)), "cosine")
    out, vals = cmds_embed(sq, 3)
    np.testing.assert_allclose(vals, _cmds_brute(sq, 3)[1], rtol=1e-9)


def test_pca_by_hand():
    x = _table(40, 7, seed=3)
    scores, sv = pca_embed(x, 3)
    xc = x - x.mean(0)
    vals, vecs = np.linalg.eigh(xc.T @ xc)
    np.testing.assert_allclose(np.sort(sv ** 2)[::-1], vals[::-1], rtol=1e-9)
    ref = xc @ vecs[:, ::-1][:, :3]
    np.testing.assert_allclose(_match_signs(scores, ref), ref, atol=1e-9)
    assert pca_embed(x[:, :2], 3)[0].shape == (40, 3)


def _raw_stress(x, sq):
    return float(np.sum((pdist(x) - squareform(sq, checks=False)) ** 2))


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_smacof_improves_on_cmds_and_matches_sklearn(metric):
    from sklearn.manifold import smacof

    rng = np.random.default_rng(0)
    g = grid(6, 6).coords
    table = np.tanh(g @ rng.normal(size=(2, 16)) / 3) + 0.1 * rng.normal(size=(36, 16))  # curved image of the grid
    sq = dist.square_distances(table, metric)
    init, _ = cmds_embed(sq, 2)
    s0 = _raw_stress(init, sq)
    # stress never increases along the iterations
    prev = s0
    for it in (1, 2, 3, 5, 10, 30):
        x, _ = smacof_embed(sq, init, max_iter=it, eps=0)
        s = _raw_stress(x, sq)
        assert s <= prev + 1e-12
        prev = s
    ours, n_iter = smacof_embed(sq, init)
    s_ours = _raw_stress(ours, sq)
    assert s_ours < s0 and n_iter >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smacof(sq, metric=True, n_components=2, init=init, n_init=1, max_iter=300, eps=1e-6,
                     normalized_stress=False)[0]
    s_ref = _raw_stress(ref, sq)
    assert abs(s_ours - s_ref) <= 0.05 * s_ref + 1e-12, (s_ours, s_ref)
    assert procrustes_align(ours, ref).r2 > 0.99


def test_smacof_fixed_point_for_exact_distances():
    x = np.random.default_rng(5).normal(size=(20, 2))
    sq = squareform(pdist(x))
    out, it = smacof_embed(sq, x - x.mean(0))
    assert it <= 2
    np.testing.assert_allclose(out, x - x.mean(0), atol=1e-10)


@pytest.mark.slow
def test_umap_embed_recovers_grid():
    from pe_probe.recovery import umap_embed

    rng = np.random.default_rng(0)
    g = grid(8, 8).coords
    table = g @ rng.normal(size=(2, 16)) + 0.05 * rng.normal(size=(64, 16))
    emb = umap_embed(table, 2, seed=0)
    assert emb.shape == (64, 2) and np.isfinite(emb).all()
    np.testing.assert_array_equal(emb, umap_embed(table, 2, seed=0))  # seeded
    assert procrustes_align(emb, g).r2 > 0.5


def test_umap_gets_a_seed_its_random_state_accepts(monkeypatch):
    """analyze takes seeds up to 2**63 - 1; umap-learn's numpy RandomState takes only seeds below 2**32 (a
    bigger --seed with --methods umap raised from inside umap). A stand-in module records the seed (no JIT)."""
    import sys
    import types

    from pe_probe.recovery import umap_embed

    seen = []

    class FakeUMAP:
        def __init__(self, n_components, random_state, **kw):
            np.random.RandomState(random_state)  # what umap-learn does with it: raises for seeds >= 2**32
            seen.append(random_state)
            self.k = n_components

        def fit_transform(self, x):
            return np.zeros((len(x), self.k))

    monkeypatch.setitem(sys.modules, "umap", types.SimpleNamespace(UMAP=FakeUMAP))
    umap_embed(np.eye(8), 2, seed=2**40 + 7)
    umap_embed(np.eye(8), 2, seed=5)
    assert seen == [7, 5]  # small seeds unchanged


# ---------------------------------------------------------------- tied eigenvalues at the cut

def test_tied_at_cut_by_hand():
    from pe_probe.recovery import tied_at_cut

    assert tied_at_cut(np.array([4.0, 4.0, 1.0]), 1)  # the 1st axis is any direction of a 2-dim tie
    assert not tied_at_cut(np.array([4.0, 4.0, 1.0]), 2)  # the top 2 together are unique
    assert tied_at_cut(np.array([1.0, 4.0, 4.0 - 1e-9]), 1)  # unsorted, tied within rounding
    assert not tied_at_cut(np.array([1.0, 0.0, 0.0]), 2)  # both at zero: those scores are all 0, nothing to choose
    assert not tied_at_cut(np.array([3.0, 2.0]), 2)  # nothing past the cut


@pytest.mark.parametrize("n", [30, 260])  # LAPACK's subset eigh and ARPACK
def test_cmds_extra_eigenvalues_are_the_top_of_the_full_spectrum_and_leave_the_layout_alone(n):
    rng = np.random.default_rng(n)
    d = squareform(pdist(rng.normal(size=(n, 6))))
    c = np.eye(n) - 1 / n
    full = np.sort(np.linalg.eigvalsh(-0.5 * c @ (d ** 2) @ c))[::-1]
    coords, vals = cmds_embed(d, 2, n_eigenvalues=3)
    np.testing.assert_allclose(vals, full[:3], rtol=1e-8)
    alone, vals2 = cmds_embed(d, 2)
    np.testing.assert_allclose(vals2, full[:2], rtol=1e-8)
    np.testing.assert_allclose(coords, alone, atol=1e-8)


def test_cmds_eigenvalue_count_is_capped_by_the_number_of_points():
    d = squareform(pdist(np.random.default_rng(1).normal(size=(4, 3))))
    coords, vals = cmds_embed(d, 5, n_eigenvalues=6)
    assert coords.shape == (4, 5) and len(vals) == 4  # 3 axes + the zero of the centring
    assert abs(vals[-1]) < 1e-10 and np.all(coords[:, 3:] == 0)


def test_guttman_step_matches_the_numpy_transform_and_the_raw_stress_over_pairs_i_lt_j():
    rng = np.random.default_rng(0)
    n = 7
    x = rng.normal(size=(n, 2))
    delta = squareform(pdist(rng.normal(size=(n, 3))))
    out, stress = kernels.guttman_step(x, delta)
    d = squareform(pdist(x))
    # raw stress: each pair once
    iu = np.triu_indices(n, k=1)
    assert stress == pytest.approx(np.sum((d[iu] - delta[iu]) ** 2), rel=1e-12)
    # B(X) X / n with b_ij = -delta_ij / d_ij (i != j), b_ii = -sum_j b_ij
    with np.errstate(divide="ignore", invalid="ignore"):
        B = np.where(d > 0, -delta / d, 0.0)
    np.fill_diagonal(B, 0.0)
    np.fill_diagonal(B, -B.sum(1))
    np.testing.assert_allclose(out, B @ x / n, atol=1e-12)


def test_tied_at_cut_does_not_depend_on_the_units_of_the_eigenvalues():
    """Ties are relative to the largest eigenvalue (a table in other units has the same ties)."""
    from pe_probe.recovery import tied_at_cut

    tied, distinct = np.array([4.0, 4.0 * (1 - 1e-9), 1.0]), np.array([4.0, 3.0, 1.0])
    for c in (1e-8, 1.0, 1e8):
        assert tied_at_cut(c * tied, 1), c
        assert not tied_at_cut(c * distinct, 1), c


def test_cmds_eigenvalues_of_a_non_euclidean_matrix_are_the_largest_not_the_largest_in_magnitude():
    """Cosine distances of rows in 3 dims, N > 200 (ARPACK): B has 3 positive eigenvalues, then ~0, and large
    negative ones; the top-4 are the 4 algebraically largest (the 4th ~0), as a full eigendecomposition says."""
    x = np.random.default_rng(0).normal(size=(260, 3))
    sq = dist.square_distances(x, "cosine")
    full = np.sort(np.linalg.eigvalsh(-0.5 * (np.eye(260) - 1 / 260) @ (sq ** 2) @ (np.eye(260) - 1 / 260)))[::-1]
    assert full[-1] < -1.0  # strongly non-Euclidean: negative eigenvalues larger than the 4th
    coords, vals = cmds_embed(sq, 3, n_eigenvalues=4)
    np.testing.assert_allclose(vals, full[:4], rtol=1e-8, atol=1e-8 * full[0])
    ref, _ = _cmds_brute(sq, 3)
    np.testing.assert_allclose(_match_signs(coords, ref), ref, atol=1e-8 * np.abs(ref).max())


def test_cmds_axes_with_negative_eigenvalues_are_zero():
    """Negative eigenvalues are clipped at 0 (module docstring): with k = N - 1 on a non-Euclidean matrix the
    layout's Gram matrix is the positive part of B, V max(lam, 0) V^T, from a full eigendecomposition."""
    sq = dist.square_distances(np.random.default_rng(2).normal(size=(30, 5)), "cosine")
    coords, vals = cmds_embed(sq, 29)
    ref, ref_vals = _cmds_brute(sq, 29)
    assert (ref_vals < -1e-6).any()
    assert np.all(coords[:, ref_vals < -1e-9 * ref_vals[0]] == 0)  # clearly negative (not ~0 by rounding)
    np.testing.assert_allclose(coords @ coords.T, ref @ ref.T, atol=1e-9 * np.abs(ref @ ref.T).max())


@pytest.mark.parametrize("c", [1e-3, 1e3])
def test_smacof_does_not_depend_on_the_units_of_the_distances(c):
    """The stopping rule is relative (stress decrease below eps of the stress): scaling the distances and the
    start by c scales the result by c and takes the same number of iterations."""
    rng = np.random.default_rng(0)
    g = grid(6, 6).coords
    table = np.tanh(g @ rng.normal(size=(2, 16)) / 3) + 0.1 * rng.normal(size=(36, 16))
    sq = dist.square_distances(table, "cosine")
    init, _ = cmds_embed(sq, 2)
    x1, it1 = smacof_embed(sq, init)
    xc, itc = smacof_embed(c * sq, c * init)
    assert itc == it1 and 2 < it1 < 300
    np.testing.assert_allclose(xc, c * x1, rtol=1e-9, atol=1e-12 * c)


def test_cmds_of_exact_integer_distances_on_many_points():
    """N > 200 (ARPACK) with distances whose double-centred matrix sends the constant vector to exactly 0: a
    constant start vector would be "zero" to ARPACK (error -9) where a full eigendecomposition works."""
    square = squareform(pdist(grid(16, 16).coords, "cityblock"))
    coords, vals = cmds_embed(square, 3)
    ref, ref_vals = _cmds_brute(square, 4)
    assert ref_vals[2] - ref_vals[3] > 1e-3 * ref_vals[0]  # the top 3 axes are unique together
    np.testing.assert_allclose(vals, ref_vals[:3], rtol=1e-8)
    np.testing.assert_allclose(coords @ coords.T, ref[:, :3] @ ref[:, :3].T, atol=1e-6 * ref_vals[0])


# ---- degenerate layouts must not depend on the row order (QA found both changing under relabelling)

def _relabelled_metrics(P: np.ndarray, G: np.ndarray, keys: tuple[str, ...], n: int = 6) -> set[tuple[float, ...]]:
    import pe_probe

    seen = set()
    for s in range(n):
        p = np.random.default_rng(s).permutation(len(P))
        m = pe_probe.analyze(P[p], G[p], n_perm=0, n_boot=0, n_null=0).metrics
        seen.add(tuple(round(m[k], 9) for k in keys))
    return seen


def test_classical_mds_gives_exact_zeros_on_axes_beyond_the_tables_rank():
    rng = np.random.default_rng(1)
    P = np.repeat(np.eye(2), 9, axis=0) @ rng.normal(size=(2, 5))  # two distinct rows: rank 1 once centred
    coords, vals = cmds_embed(np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1)), 2)
    assert vals[0] > 0 and np.all(coords[:, 1] == 0.0)
    # so the neighbourhood metrics (of that layout) do not break its ties by the row order
    G = np.random.default_rng(2).normal(size=(18, 2))
    assert len(_relabelled_metrics(P, G, ("trustworthiness", "knn_overlap"), n=8)) == 1


def test_smacof_does_not_split_coincident_start_points_by_rounding_noise():
    from pe_probe.groundtruth import line

    # four columns of ten points; a 1-D start puts each column on one point, and the columns' mirror pairs stay
    # together by symmetry: rounding decided how they split (r2 0.919-0.955 over relabellings)
    P = np.c_[np.repeat(np.arange(4.0), 10), np.tile(np.arange(10.0) - 4.5, 4) * 0.1]
    G = line(40).coords
    assert len(_relabelled_metrics(P, G, ("recovery_smacof_r2", "recovery_smacof_rmse"))) == 1
