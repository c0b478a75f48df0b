"""Ranks, correlations, the Mantel test and the bootstrap against scipy and plain-Python references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sst
from scipy.spatial.distance import pdist, squareform

from pe_probe import kernels, stats
from pe_probe.groundtruth import grid, line


def _grid_pair(h, w, d=6, noise=0.5, seed=0, decimals=None):
    """Condensed (pe, gt) distances: a noisy linear image of an h x w grid, and the grid itself."""
    rng = np.random.default_rng(seed)
    g = grid(h, w).coords
    p = g @ rng.normal(size=(2, d)) + noise * rng.normal(size=(h * w, d))
    pe = pdist(p)
    if decimals is not None:  # coarse values: ties on the table side too
        pe = np.round(pe, decimals)
    return pe, pdist(g)


# ---------------------------------------------------------------- rank / correlate

@pytest.mark.parametrize("seed", range(5))
def test_rank_matches_rankdata(seed):
    rng = np.random.default_rng(seed)
    for v in (rng.integers(0, 7, size=200).astype(float), rng.normal(size=150), pdist(grid(5, 6).coords),
              np.array([3.0, 3.0, 3.0, 3.0]), np.array([2.0])):
        np.testing.assert_array_equal(stats.rank(v), sst.rankdata(v, method="average"))


@pytest.mark.parametrize("decimals", [None, 0, 1])
def test_correlate_matches_scipy_with_ties(decimals):
    pe, gt = _grid_pair(6, 7, decimals=decimals)
    assert len(np.unique(gt)) < len(gt) / 10  # many ties
    assert math.isclose(stats.correlate(pe, gt, "spearman"), sst.spearmanr(pe, gt).statistic, rel_tol=0, abs_tol=1e-12)
    assert math.isclose(stats.correlate(pe, gt, "pearson"), sst.pearsonr(pe, gt).statistic, rel_tol=0, abs_tol=1e-12)
    tau = sst.kendalltau(pe, gt, variant="b").statistic
    assert math.isclose(stats.correlate(pe, gt, "kendall"), tau, rel_tol=0, abs_tol=1e-12)


def test_kendall_tau_b_by_hand_small():
    a = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 4.0])
    b = np.array([1.0, 1.0, 2.0, 3.0, 3.0, 6.0])
    conc = disc = ta = tb = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
        conc += s > 0
        disc += s < 0
        ta += a[i] == a[j] and b[i] != b[j]
        tb += b[i] == b[j] and a[i] != a[j]
    tau_b = (conc - disc) / math.sqrt((conc + disc + ta) * (conc + disc + tb))
    assert math.isclose(stats.correlate(a, b, "kendall"), tau_b, abs_tol=1e-12)


def test_correlate_constant_is_nan_and_bad_method():
    assert math.isnan(stats.correlate(np.ones(10), np.arange(10.0)))
    with pytest.raises(ValueError):
        stats.correlate(np.arange(5.0), np.arange(5.0), "distance")


# ---------------------------------------------------------------- Mantel

def _permuted(v, p):
    m = squareform(v, checks=False)
    return squareform(m[np.ix_(p, p)], checks=False)


def _mantel_reference(pe, gt, perms, method):
    """Slow, plain loop: correlate the table's distances with the relabelled ground truth's."""
    corr = sst.spearmanr if method == "spearman" else sst.pearsonr
    obs = corr(pe, gt).statistic
    null = np.array([corr(pe, _permuted(gt, p)).statistic for p in perms])
    return obs, null


@pytest.mark.parametrize("n,method", [(7, "spearman"), (8, "pearson"), (9, "spearman"), (10, "spearman")])
def test_mantel_matches_plain_loop(n, method):
    rng = np.random.default_rng(n)
    g = rng.normal(size=(n, 2))
    pe = pdist(g @ rng.normal(size=(2, 5)) + 1.5 * rng.normal(size=(n, 5)))
    gt = np.round(pdist(g), 1)  # with ties
    n_perm, seed = 200, 123
    res = stats.mantel(pe, gt, method=method, n_perm=n_perm, seed=seed)
    perms = np.argsort(np.random.default_rng(seed).random((n_perm, n)), axis=1)  # the documented draw
    obs, null = _mantel_reference(pe, gt, perms, method)
    assert not res.exact and res.n_perm == n_perm
    assert math.isclose(res.statistic, obs, abs_tol=1e-12)
    np.testing.assert_allclose(res.null, null, atol=1e-12)
    count = sum(1 for x in null if x >= obs - 1e-9)
    assert res.p_value == pytest.approx((1 + count) / (1 + n_perm), abs=1e-15)
    assert 1 / (1 + n_perm) <= res.p_value <= 1


@pytest.mark.parametrize("n", [4, 5])
def test_mantel_exact_enumeration(n):
    rng = np.random.default_rng(10 + n)
    gt = pdist(grid(1, n).coords if n == 4 else line(n).coords)  # ties: equal spacings
    pe = pdist(rng.normal(size=(n, 3)))
    res = stats.mantel(pe, gt, n_perm=200, seed=0)
    assert res.exact and res.n_perm == math.factorial(n)
    obs = sst.spearmanr(pe, gt).statistic
    null = [sst.spearmanr(pe, _permuted(gt, list(p))).statistic for p in itertools.permutations(range(n))]
    assert res.p_value == pytest.approx(sum(x >= obs - 1e-9 for x in null) / math.factorial(n), abs=1e-15)
    np.testing.assert_allclose(np.sort(res.null), np.sort(null), atol=1e-12)
    # A perfect match is exact: only the relabellings preserving every distance reach it.
    res2 = stats.mantel(gt, gt, n_perm=200)
    autos = sum(np.array_equal(_permuted(gt, list(p)), gt) for p in itertools.permutations(range(n)))
    assert res2.p_value == pytest.approx(autos / math.factorial(n))


def test_mantel_kernel_given_perms_and_float32_path():
    rng = np.random.default_rng(7)
    for n in (30, 300):  # 300 > 256 uses float32 matrices
        a = stats.standardise(rng.normal(size=n * (n - 1) // 2))
        b = stats.standardise(rng.normal(size=n * (n - 1) // 2))
        perms = np.argsort(rng.random((8, n)), axis=1)
        got = kernels.permuted_upper_dots(squareform(a, checks=False), squareform(b, checks=False), perms)
        ref = np.array([a @ _permuted(b, p) for p in perms])
        np.testing.assert_allclose(got, ref, atol=1e-12)
        res = stats.mantel_prepared(a, b, n_perm=8, seed=1)
        perms1 = np.argsort(np.random.default_rng(1).random((8, n)), axis=1)
        ref1 = np.array([a @ _permuted(b, p) for p in perms1])
        np.testing.assert_allclose(res.null, ref1, atol=1e-12 if n <= 256 else 1e-5)


def test_mantel_float32_path_counts_exact_ties():
    """Above 256 positions the null runs in float32 products; relabellings that tie the observed statistic
    exactly (here: those keeping the one outlying position in place) landed ~5e-9 away and were not counted,
    so p came out as 1/(n_perm+1) instead of (1 + ties)/(n_perm+1)."""
    n, n_perm, seed = 600, 3000, 0
    g = np.zeros((n, 1))
    g[0] = 1.0
    pe = pdist(g + 0.01 * np.random.default_rng(0).normal(size=(n, 3)))
    res = stats.mantel(pe, pdist(g), n_perm=n_perm, seed=seed)
    perms = np.argsort(np.random.default_rng(seed).random((n_perm, n)), axis=1)  # the documented draw
    fixing = perms[perms[:, 0] == 0]
    assert len(fixing) >= 3
    obs = sst.spearmanr(pe, pdist(g)).statistic
    assert all(sst.spearmanr(pe, _permuted(pdist(g), p)).statistic == obs for p in fixing[:3])
    others = perms[perms[:, 0] != 0][:50]
    assert all(sst.spearmanr(pe, _permuted(pdist(g), p)).statistic < obs - 1e-3 for p in others)
    assert res.p_value == pytest.approx((1 + len(fixing)) / (1 + n_perm), abs=1e-15)


def test_mantel_planted_and_noise():
    pe, gt = _grid_pair(6, 6, noise=0.3)
    assert stats.mantel(pe, gt, n_perm=500, seed=0).p_value == pytest.approx(1 / 501)
    rng = np.random.default_rng(3)
    ps = [stats.mantel(pdist(rng.normal(size=(36, 4))), gt, n_perm=200, seed=s).p_value for s in range(20)]
    assert 0.2 < np.mean(ps) < 0.8  # roughly uniform under the null
    with pytest.raises(ValueError):
        stats.mantel(pe, gt, method="kendall")


# ---------------------------------------------------------------- bootstrap

def _resample_spearman(pe_sq, gt_sq, counts, corr=sst.spearmanr):
    """Materialise the resample, take all its pairs, drop pairs of two copies of one position."""
    idx = np.repeat(np.arange(len(counts)), counts.astype(int))
    a, b = np.triu_indices(len(idx), 1)
    keep = idx[a] != idx[b]
    a, b = idx[a[keep]], idx[b[keep]]
    return corr(pe_sq[a, b], gt_sq[a, b]).statistic


def _counts(n, n_boot, seed):
    """The documented resample draw of `bootstrap_rsa`."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)]).astype(float)


@pytest.mark.parametrize("h,w,decimals", [(3, 4, None), (4, 4, 0), (4, 5, 1)])
def test_bootstrap_exact_kernel_matches_brute_force(h, w, decimals):
    pe, gt = _grid_pair(h, w, decimals=decimals, seed=h * w)
    n = h * w
    counts = _counts(n, 25, seed=5)
    got = kernels.bootstrap_spearman(counts, stats.RankCache(pe, n), stats.RankCache(gt, n))
    pe_sq, gt_sq = squareform(pe), squareform(gt)
    ref = np.array([_resample_spearman(pe_sq, gt_sq, c) for c in counts])
    np.testing.assert_allclose(got, ref, atol=1e-10)
    # bootstrap_rsa uses exactly these draws, and the percentile CI of its samples
    res = stats.bootstrap_rsa(pe, gt, n_boot=25, seed=5)
    assert res.method == "exact"
    np.testing.assert_allclose(res.samples, ref, atol=1e-10)
    assert res.low == pytest.approx(np.quantile(ref, 0.025), abs=1e-10)
    assert res.high == pytest.approx(np.quantile(ref, 0.975), abs=1e-10)


@pytest.mark.parametrize("decimals", [None, 0])
def test_bootstrap_kernel_gives_the_same_bits_for_every_block_of_resamples(decimals):
    # The kernel serves R resamples per pass over the pairs; each resample's arithmetic is that of a pass for it
    # alone, so every R gives the same bits, padding resamples of the last block included (37 = 32 + 5, 64 - 27).
    pe, gt = _grid_pair(5, 6, decimals=decimals, seed=3)
    n = 30
    counts = _counts(n, 37, seed=2)
    c1, c2 = stats.RankCache(pe, n), stats.RankCache(gt, n)
    one = kernels.bootstrap_spearman(counts, c1, c2, block=1)
    assert one.shape == (37,) and np.isfinite(one).all()
    for block in kernels.BOOTSTRAP_BLOCKS:
        np.testing.assert_array_equal(kernels.bootstrap_spearman(counts, c1, c2, block=block), one)
    ref = np.array([_resample_spearman(squareform(pe), squareform(gt), c) for c in counts])
    np.testing.assert_allclose(one, ref, atol=1e-10)
    with pytest.raises(ValueError, match="block must be one of"):
        kernels.bootstrap_spearman(counts, c1, c2, block=3)
    with pytest.raises(ValueError, match="whole numbers"):
        kernels.bootstrap_spearman(counts + 0.5, c1, c2)


def test_bootstrap_block_is_bounded_by_memory_and_by_the_resamples_per_thread():
    assert kernels.bootstrap_block(1000, 1575, 2) == 64  # a 64x64 grid's distances: few tie groups
    assert kernels.bootstrap_block(20, 1575, 2) == 8  # 10 resamples a thread
    assert kernels.bootstrap_block(1, 1575, 2) == 1
    assert kernels.bootstrap_block(1000, 4096 * 4095 // 2, 2) == 1  # tie-free coordinates: a row per resample
    r = kernels.bootstrap_block(1000, 400_000, 2)
    assert 2 * 8 * 400_000 * r <= kernels.BOOTSTRAP_BLOCK_BYTES < 2 * 8 * 400_000 * 2 * r


def test_bootstrap_pearson_matches_brute_force():
    pe, gt = _grid_pair(4, 5, seed=2)
    counts = _counts(20, 20, seed=9)
    res = stats.bootstrap_rsa(pe, gt, method="pearson", n_boot=20, seed=9)
    ref = [_resample_spearman(squareform(pe), squareform(gt), c, corr=sst.pearsonr) for c in counts]
    np.testing.assert_allclose(res.samples, ref, atol=1e-10)


def test_bootstrap_degenerate_resample_is_nan():
    # A resample of copies of one position has no pairs: its statistic is undefined, not a number.
    pe, gt = _grid_pair(2, 3, seed=1)
    counts = np.zeros((1, 6))
    counts[0, 2] = 6
    out = kernels.bootstrap_spearman(counts, stats.RankCache(pe, 6), stats.RankCache(gt, 6))
    assert np.isnan(out[0])


def test_bootstrap_rank_cached_close_to_exact_at_n300():
    """The rank-cached approximation (used above EXACT_BOOTSTRAP_MAX_N) against the exact form."""
    pe, gt = _grid_pair(15, 20, d=8, noise=2.0, seed=4)
    ex = stats.bootstrap_rsa(pe, gt, n_boot=200, seed=1, exact=True)
    rc = stats.bootstrap_rsa(pe, gt, n_boot=200, seed=1, exact=False)
    assert (ex.method, rc.method) == ("exact", "rank-cached")
    rho = stats.correlate(pe, gt)
    assert ex.low < rho < ex.high
    print(f"N=300 rho={rho:.4f} exact CI=({ex.low:.4f}, {ex.high:.4f}) rank-cached CI=({rc.low:.4f}, {rc.high:.4f}) "
          f"max |sample diff|={np.max(np.abs(ex.samples - rc.samples)):.2e}")
    assert abs(ex.low - rc.low) < 0.02 and abs(ex.high - rc.high) < 0.02
    assert np.max(np.abs(ex.samples - rc.samples)) < 0.02


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_bootstrap_rank_cached_width_is_approximate(seed):
    """Each rank-cached resample is close to exact, but fixing the ranks leaves out their resampling
    noise, so the CI width is off (mostly too narrow: 0.93x, 0.93x, 1.12x here). The ~15% bound is what
    `analyze`'s note for N > EXACT_BOOTSTRAP_MAX_N states."""
    pe, gt = _grid_pair(15, 20, d=8, noise=2.0, seed=seed)
    ex = stats.bootstrap_rsa(pe, gt, n_boot=400, seed=1, exact=True)
    rc = stats.bootstrap_rsa(pe, gt, n_boot=400, seed=1, exact=False)
    ratio = (rc.high - rc.low) / (ex.high - ex.low)
    print(f"seed {seed}: rank-cached / exact CI width = {ratio:.3f}")
    assert 0.85 < ratio < 1.15 and abs(ratio - 1) > 0.02  # approximate, and not exact


@pytest.mark.parametrize("method", ["spearman", "pearson"])
def test_exact_mantel_counts_relabellings_equal_up_to_rounding(method):
    """A table that is a rotated, scaled, shifted line: the identity and the reversal both reproduce the observed
    statistic, but the observed value (a dot product) and the relabellings' (the compiled kernel's sums) differ
    in their last bits. Exact p = 2/120 needs the tie tolerance (without it: p = 0, even the identity missed)."""
    from scipy.stats import ortho_group

    g = line(5).coords
    for seed in range(30):
        table = g @ ortho_group.rvs(4, random_state=seed)[:1] * np.pi + np.random.default_rng(seed).normal(size=4)
        res = stats.mantel(pdist(table), pdist(g), method=method, n_perm=1000)
        assert res.p_value == pytest.approx(2 / 120, abs=1e-15), (seed, res.p_value)


def test_mantel_is_exact_when_n_factorial_equals_n_perm():
    """The docstring: "When N! <= n_perm every relabelling is enumerated" -- equality included (4! = 24)."""
    assert stats.all_permutations(4, 24) is not None and len(stats.all_permutations(4, 24)) == 24
    assert stats.all_permutations(4, 23) is None
    rng = np.random.default_rng(3)
    gt = pdist(line(4).coords)
    pe = pdist(rng.normal(size=(4, 3)))
    res = stats.mantel(pe, gt, n_perm=24)
    assert res.exact and res.n_perm == 24
    obs = sst.spearmanr(pe, gt).statistic
    null = [sst.spearmanr(pe, _permuted(gt, list(p))).statistic for p in itertools.permutations(range(4))]
    assert res.p_value == pytest.approx(sum(x >= obs - 1e-9 for x in null) / 24, abs=1e-15)


def test_bootstrap_ci_leaves_out_resamples_without_a_correlation():
    """N = 4: a resample that draws <= 2 distinct positions has one distinct pair (a constant), so no Spearman
    (NaN, as scipy says). The CI is the percentile interval of the other resamples, not NaN."""
    import warnings

    pe, gt = _grid_pair(2, 2, seed=3)
    counts = _counts(4, 200, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on the constant inputs
        ref = np.array([_resample_spearman(squareform(pe), squareform(gt), c) for c in counts])
    assert 0 < np.isnan(ref).sum() < len(ref)  # some resamples have no correlation
    res = stats.bootstrap_rsa(pe, gt, n_boot=200, seed=2)
    np.testing.assert_allclose(res.samples, ref, atol=1e-10)  # NaN where scipy gives NaN
    good = ref[np.isfinite(ref)]
    assert res.low == pytest.approx(np.quantile(good, 0.025), abs=1e-10)
    assert res.high == pytest.approx(np.quantile(good, 0.975), abs=1e-10)


def test_default_bootstrap_block_follows_the_vector_with_fewer_tie_groups():
    pe, gt = _grid_pair(5, 6, seed=3)  # a grid's distances have few values; the table's are all distinct
    c_pe, c_gt = stats.RankCache(pe, 30), stats.RankCache(gt, 30)
    threads = kernels._numba().get_num_threads()
    expected = kernels.bootstrap_block(1000, c_gt.n_groups, threads)
    assert c_gt.n_groups < c_pe.n_groups
    assert kernels.default_bootstrap_block(1000, c_pe, c_gt) == kernels.default_bootstrap_block(1000, c_gt, c_pe) == expected
