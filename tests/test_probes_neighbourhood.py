"""Linear probe, trustworthiness / kNN overlap (against scikit-learn and brute force), and the spectrum."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform
from scipy.stats import ortho_group

from pe_probe.groundtruth import grid
from pe_probe.neighbourhood import default_k, neighbourhood_metrics
from pe_probe.probes import probe_r2
from pe_probe.spectrum import explained_variance_ratio, participation_ratio


# ---------------------------------------------------------------- neighbourhoods

def _brute(emb, coords, k):
    """Trustworthiness and kNN overlap from the definitions (loops; ties in the ground truth shared)."""
    n = len(coords)
    dg, de = squareform(pdist(coords)), squareform(pdist(emb))
    penalty = overlap = 0.0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        emb_nn = sorted(others, key=lambda j: de[i, j])[:k]
        for j in emb_nn:
            r = 1 + sum(1 for m in others if dg[i, m] < dg[i, j] - 1e-12)
            penalty += max(0, r - k)
            overlap += (r <= k) / k
    return 1 - 2.0 / (n * k * (2 * n - 3 * k - 1)) * penalty, overlap / n


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_trustworthiness_matches_sklearn_without_ties(seed, k):
    from sklearn.manifold import trustworthiness

    rng = np.random.default_rng(seed)
    coords = rng.normal(size=(40, 2))
    emb = coords @ rng.normal(size=(2, 2)) + 0.6 * rng.normal(size=(40, 2))
    t, o = neighbourhood_metrics(emb, coords, k)
    assert t == pytest.approx(trustworthiness(coords, emb, n_neighbors=k), abs=1e-12)
    bt, bo = _brute(emb, coords, k)
    assert t == pytest.approx(bt, abs=1e-12) and o == pytest.approx(bo, abs=1e-12)


@pytest.mark.parametrize("n", [9, 10])
def test_trustworthiness_k_up_to_below_half_n_matches_sklearn_and_beyond_is_refused(n):
    """k < N/2 is where the normaliser holds (sklearn refuses the rest); at k = N/2 it used to divide by zero
    or return values above 1 (N = 8, k = 6: 1.111)."""
    from sklearn.manifold import trustworthiness

    rng = np.random.default_rng(n)
    coords, emb = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))  # unrelated: the low end of the scale
    k = (n - 1) // 2
    t, _ = neighbourhood_metrics(emb, coords, k)
    assert t == pytest.approx(trustworthiness(coords, emb, n_neighbors=k), abs=1e-12) and 0 <= t <= 1
    for bad in ((n + 1) // 2, n - 2, 0):  # the smallest k at or above N/2, one far above, none
        with pytest.raises(ValueError, match="trustworthiness needs 1 <= k < N/2"):
            neighbourhood_metrics(emb, coords, bad)


@pytest.mark.parametrize("seed", [0, 1])
def test_grid_with_ties_brute_force_and_relabelling(seed):
    rng = np.random.default_rng(seed)
    g = grid(6, 7).coords
    emb = g @ rng.normal(size=(2, 2)) + 0.4 * rng.normal(size=(42, 2))
    k = default_k(42)
    t, o = neighbourhood_metrics(emb, g)
    bt, bo = _brute(emb, g, k)
    assert t == pytest.approx(bt, abs=1e-12) and o == pytest.approx(bo, abs=1e-12)
    for _ in range(3):
        p = rng.permutation(42)
        t2, o2 = neighbourhood_metrics(emb[p], g[p])
        assert t2 == pytest.approx(t, abs=1e-12) and o2 == pytest.approx(o, abs=1e-12)
    # invariant to similarity transforms of either configuration
    q = ortho_group.rvs(2, random_state=seed)
    t3, o3 = neighbourhood_metrics(3 * emb @ q + 1, 0.5 * g - 2)
    assert t3 == pytest.approx(t, abs=1e-12) and o3 == pytest.approx(o, abs=1e-12)


def _brute_tie_average(emb, coords, k):
    """The metrics averaged over every way of breaking ties at each row's k-th embedding distance
    (enumerated), from the definitions: the label-free value the package computes in closed form."""
    from itertools import combinations

    n = len(coords)
    dg, de = squareform(pdist(coords)), squareform(pdist(emb))
    penalty = overlap = 0.0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        kth = sorted(de[i, j] for j in others)[k - 1]
        closer = [j for j in others if de[i, j] < kth - 1e-9]
        tied = [j for j in others if abs(de[i, j] - kth) <= 1e-9]
        choices = list(combinations(tied, k - len(closer)))
        for chosen in choices:
            for j in closer + list(chosen):
                r = 1 + sum(1 for m in others if dg[i, m] < dg[i, j] - 1e-9)
                penalty += max(0, r - k) / len(choices)
                overlap += (r <= k) / k / len(choices)
    return 1 - 2.0 / (n * k * (2 * n - 3 * k - 1)) * penalty, overlap / n


@pytest.mark.parametrize("k", [1, 2, 4])
def test_ties_in_the_embedding_averaged_over_tie_breaks(k):
    """An embedding that codes one grid axis only has many exact ties: the metrics are their expectation
    over random tie-breaking (brute-force enumeration), and so do not depend on position labels."""
    g = grid(4, 4).coords
    emb = g[:, :1] * 1.0  # the row index only: every row's 3 row-mates tie at distance 0
    t, o = neighbourhood_metrics(emb, g, k)
    bt, bo = _brute_tie_average(emb, g, k)
    assert t == pytest.approx(bt, abs=1e-12) and o == pytest.approx(bo, abs=1e-12)
    rng = np.random.default_rng(k)
    for _ in range(5):
        p = rng.permutation(16)
        t2, o2 = neighbourhood_metrics(emb[p], g[p], k)
        assert t2 == pytest.approx(t, abs=1e-12) and o2 == pytest.approx(o, abs=1e-12)


def test_rows_equal_up_to_rounding_tie_like_equal_rows():
    """A table that codes one grid axis gives rows that are equal up to rounding once scaled and shifted (and
    after MDS): their Gram-matrix distances (~1e-8) used to exceed the tie tolerance, so ties were broken by
    rounding noise and the metrics changed with the positions' labels."""
    g = grid(8, 8).coords
    emb = np.c_[g[:, 1], 2 * g[:, 1]] * 1.7 + 5.0  # codes the column only: 8 exact ties per row
    exact = neighbourhood_metrics(emb, g, 5)
    jittered = emb + np.random.default_rng(0).normal(size=emb.shape) * 1e-14
    assert neighbourhood_metrics(jittered, g, 5) == pytest.approx(exact, abs=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(3):
        p = rng.permutation(64)
        assert neighbourhood_metrics(jittered[p], g[p], 5) == pytest.approx(exact, abs=1e-12)


@pytest.mark.parametrize("scale", [1e-9, 1e-6, 1e3])
def test_units_of_either_configuration_do_not_matter(scale):
    """Ties are found relative to the largest distance, so tiny or huge units change nothing."""
    rng = np.random.default_rng(0)
    g = grid(5, 6).coords
    emb = g @ rng.normal(size=(2, 2)) + 0.4 * rng.normal(size=(30, 2))
    ref = neighbourhood_metrics(emb, g)
    assert neighbourhood_metrics(emb, scale * g) == pytest.approx(ref, abs=1e-12)
    assert neighbourhood_metrics(scale * emb, g) == pytest.approx(ref, abs=1e-12)
    sparse = rng.normal(size=(30, 2))  # no ties: random ground truth in tiny units
    assert neighbourhood_metrics(emb, scale * sparse) == pytest.approx(neighbourhood_metrics(emb, sparse), abs=1e-12)


def test_duplicate_positions_rank_first():
    """Two positions at the same ground-truth coordinates are each other's nearest neighbour (rank 1)."""
    g = np.vstack([grid(3, 3).coords, grid(3, 3).coords[:1]])  # position 9 duplicates position 0
    t, o = neighbourhood_metrics(g, g, 1)
    assert t == pytest.approx(1.0) and o == pytest.approx(1.0)
    assert (t, o) == pytest.approx(_brute_tie_average(g, g, 1), abs=1e-12)


def test_perfect_and_random_embeddings():
    g = grid(8, 8).coords
    rng = np.random.default_rng(0)
    t, o = neighbourhood_metrics(g + 1e-6 * rng.normal(size=g.shape), g)
    assert t == pytest.approx(1.0) and o == pytest.approx(1.0)
    ts, os_ = zip(*(neighbourhood_metrics(rng.normal(size=(64, 2)), g) for _ in range(5)))
    assert np.mean(ts) < 0.7 and np.mean(os_) < 0.3
    assert default_k(64) == 5 and default_k(6) == 2 and default_k(4) == 1


# ---------------------------------------------------------------- probe

@pytest.mark.parametrize("h,w", [(5, 6), (8, 8)])  # leave-one-out (N < 50) and 5-fold
def test_probe_planted_and_noise(h, w):
    rng = np.random.default_rng(h)
    g = grid(h, w).coords
    n = h * w
    planted = g @ rng.normal(size=(2, 32)) + 0.05 * rng.normal(size=(n, 32))
    r = probe_r2(planted, g)
    assert r > 0.98
    # invariant to rotation, translation and scale of the table (same folds)
    q = ortho_group.rvs(32, random_state=1)
    assert probe_r2(7 * planted @ q - 3, g) == pytest.approx(r, abs=1e-6)
    noise = [probe_r2(rng.normal(size=(n, 32)), g, seed=s) for s in range(3)]
    assert max(noise) < 0.25 and np.mean(noise) < 0.1


def _ridge_gcv_reference(x, y, alphas):
    """Ridge with intercept, one penalty by generalised cross-validation from explicit hat matrices,
    each column's residual sum of squares divided by its own (training) sum of squares."""
    n, d = x.shape
    xc, yc = x - x.mean(0), y - y.mean(0)
    best = None
    for a in alphas:
        inv = np.linalg.solve(xc.T @ xc + a * np.eye(d), np.eye(d))
        hat = xc @ inv @ xc.T + np.ones((n, n)) / n  # + intercept
        rss = np.sum(np.sum((y - hat @ y) ** 2, axis=0) / np.sum(yc ** 2, axis=0))
        tr = np.trace(hat)
        if tr >= n:
            continue
        gcv = rss / (n * (1 - tr / n) ** 2)
        if best is None or gcv < best[0]:
            best = (gcv, a)
    coef = np.linalg.solve(xc.T @ xc + best[1] * np.eye(d), xc.T @ yc)
    return coef, y.mean(0) - x.mean(0) @ coef


@pytest.mark.parametrize("n", [20, 60])  # leave-one-out, 5-fold
def test_probe_r2_by_hand(n):
    rng = np.random.default_rng(3)
    g = rng.normal(size=(n, 2))
    x = np.hstack([g, rng.normal(size=(n, 3))]) + 0.3 * rng.normal(size=(n, 5)) + 4
    g[:, 1] *= 0.2  # axes of different variance: each counted as a share of its own
    alphas = np.logspace(-4, 4, 17)
    if n < 50:
        folds = [np.array([i]) for i in range(n)]
    else:  # the documented shuffled 5-fold split
        folds = np.array_split(np.random.default_rng(11).permutation(n), 5)
    pred = np.empty_like(g)
    for test in folds:
        tr = np.setdiff1d(np.arange(n), test)
        xs = x / np.sqrt(np.mean((x[tr] - x[tr].mean(0)) ** 2))  # the table's RMS on the training rows
        coef, b = _ridge_gcv_reference(xs[tr], g[tr], alphas)
        pred[test] = xs[test] @ coef + b
    ref = np.mean(1 - ((g - pred) ** 2).sum(0) / ((g - g.mean(0)) ** 2).sum(0))
    assert probe_r2(x, g, seed=11) == pytest.approx(ref, abs=1e-10)
    assert 0.5 < ref < 1


def test_probe_does_not_depend_on_the_units_of_each_axis():
    """G's axes in different units: a penalty fitted to the raw pooled residuals lets the large axis
    decide it (0.32 here; 0.52 once the small axis is in the same units). Residuals counted as a share
    of each axis's variance make the result the same in any units."""
    rng = np.random.default_rng(0)
    g = np.column_stack([rng.uniform(0, 10, 40), rng.uniform(0, 1, 40)])
    x = np.column_stack([g[:, 0], rng.normal(size=(40, 20))])  # the large axis exactly, plus noise columns
    r = probe_r2(x, g)
    assert r == pytest.approx(probe_r2(x, g * [1, 10]), abs=1e-12)
    assert r == pytest.approx(probe_r2(x, g * [0.01, 3]), abs=1e-12)
    assert 0.45 < r < 0.6


# ---------------------------------------------------------------- spectrum

def test_spectrum_by_hand():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)) * [4, 2, 1, 1, 0.5, 0.1]
    xc = x - x.mean(0)
    lam = np.linalg.eigvalsh(np.cov(xc.T))[::-1]
    sv = np.linalg.svd(xc, compute_uv=False)
    np.testing.assert_allclose(explained_variance_ratio(sv), lam / lam.sum(), rtol=1e-10)
    assert participation_ratio(sv) == pytest.approx(lam.sum() ** 2 / np.sum(lam ** 2), rel=1e-10)
    # isotropic m-dim data: PR = m; rank one: PR = 1; scale-free
    assert participation_ratio(np.ones(7)) == pytest.approx(7)
    assert participation_ratio(np.array([3.0, 0, 0])) == pytest.approx(1)
    assert participation_ratio(10 * sv) == pytest.approx(participation_ratio(sv), rel=1e-12)
    # at any scale float64 holds: the fourth powers of 1e100 overflowed (NaN), those of 1e-100 underflowed (0)
    for scale in (1e100, 1e150, 1e-100):
        assert participation_ratio(scale * sv) == pytest.approx(participation_ratio(sv), rel=1e-12)
        np.testing.assert_allclose(explained_variance_ratio(scale * sv), explained_variance_ratio(sv), rtol=1e-12)
    assert participation_ratio(np.zeros(3)) == 0.0


def test_probe_r2_fold_rule_at_fifty_positions():
    """'Leave-one-out below 50 positions, else shuffled 5-fold': N = 50 uses the 5-fold split."""
    rng = np.random.default_rng(3)
    g = rng.normal(size=(50, 2))
    x = np.hstack([g, rng.normal(size=(50, 3))]) + 0.3 * rng.normal(size=(50, 5))
    pred = np.empty_like(g)
    for test in np.array_split(np.random.default_rng(11).permutation(50), 5):
        tr = np.setdiff1d(np.arange(50), test)
        xs = x / np.sqrt(np.mean((x[tr] - x[tr].mean(0)) ** 2))
        coef, b = _ridge_gcv_reference(xs[tr], g[tr], np.logspace(-4, 4, 17))
        pred[test] = xs[test] @ coef + b
    ref = np.mean(1 - ((g - pred) ** 2).sum(0) / ((g - g.mean(0)) ** 2).sum(0))
    assert probe_r2(x, g, seed=11) == pytest.approx(ref, abs=1e-10)


def test_probe_ignores_a_constant_ground_truth_axis():
    """grid:HxWx1 has an axis with no variance: its R^2 is undefined and left out of the mean (it also has no
    weight in the penalty search), so the probe equals that of the other axes."""
    rng = np.random.default_rng(0)
    g = grid(5, 6).coords
    x = g @ rng.normal(size=(2, 8)) + 0.5 * rng.normal(size=(30, 8))
    flat = np.column_stack([g, np.full(30, 3.0)])
    r = probe_r2(x, flat)
    assert np.isfinite(r) and r == pytest.approx(probe_r2(x, g), abs=1e-12)


@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_metrics_do_not_change_when_the_embedding_is_far_from_the_origin(offset):
    """Tie tolerance and Gram distances are taken on the centred embedding: a large translation (an
    embedding in raw table units, an un-centred layout) changes nothing."""
    rng = np.random.default_rng(0)
    g = grid(5, 6).coords
    emb = g @ rng.normal(size=(2, 2)) + 0.4 * rng.normal(size=(30, 2))
    ref = neighbourhood_metrics(emb, g)
    assert neighbourhood_metrics(emb + offset, g) == pytest.approx(ref, abs=1e-12)
    assert ref == pytest.approx(_brute(emb, g, default_k(30)), abs=1e-12)
