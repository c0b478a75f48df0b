"""`analyze`: the issue's planted tables on grid:8x8, invariance properties, and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial import procrustes as scipy_procrustes
from scipy.spatial.distance import pdist, squareform
from scipy.stats import kendalltau, ortho_group, pearsonr, spearmanr

import pe_probe
from pe_probe.errors import InputError
from pe_probe.groundtruth import grid
from pe_probe.reference import sinusoid_2d

G8 = grid(8, 8).coords

# Keys whose value comes from random draws tied to position labels (Mantel / PROTEST relabellings,
# bootstrap resample counts, the random tables of the chance level): relabelling the positions changes
# which draws go with which position, so these agree only up to Monte Carlo error there.
MONTE_CARLO = ("rsa_p", "rsa_ci_low", "rsa_ci_high", "recovery_pca_p", "recovery_cmds_p", "recovery_smacof_p",
               "null_rsa_mean", "null_rsa_sd")
UNIT_KEYS = ("recovery_pca_rmse", "recovery_cmds_rmse", "recovery_smacof_rmse")


def _planted(coords, d=64, noise=0.05, seed=0):
    """Coordinates mapped into d dims by a random orthogonal map (orthonormal rows), plus noise."""
    rng = np.random.default_rng(seed)
    q = ortho_group.rvs(d, random_state=seed)[: coords.shape[1]]
    return coords @ q + noise * rng.normal(size=(len(coords), d))


def _assert_same(m1, m2, keys, atol=1e-6, what=""):
    for key in keys:
        a, b = m1[key], m2[key]
        if isinstance(a, float) and math.isnan(a):
            assert math.isnan(b), (what, key)
        else:
            assert b == pytest.approx(a, abs=atol), (what, key, a, b)


# ---------------------------------------------------------------- the planted tables

def test_planted_orthogonal_map_is_recovered():
    m = pe_probe.analyze(_planted(G8), "grid:8x8").metrics
    assert m["rsa_spearman"] >= 0.95
    assert m["recovery_cmds_r2"] >= 0.95
    assert m["rsa_p"] <= 0.01
    assert m["rsa_ci_low"] <= m["rsa_spearman"] <= m["rsa_ci_high"]
    assert m["null_rsa_mean"] + 5 * m["null_rsa_sd"] < m["rsa_spearman"]
    assert m["probe_r2"] > 0.95 and m["trustworthiness"] > 0.95 and m["recovery_cmds_p"] <= 0.01
    assert m["explained_variance"] > 0.9


def test_study_sinusoid_2d_values_and_independent_check():
    table = sinusoid_2d(8, 8, 64)
    res = pe_probe.analyze(table, "grid:8x8")
    m = res.metrics
    assert m["rsa_spearman"] == pytest.approx(0.839, abs=0.005)
    assert m["recovery_cmds_r2"] == pytest.approx(0.896, abs=0.005)
    assert m["rsa_p"] <= 0.01
    # Independently: scipy's Spearman on pdist distances. The sinusoid's distances depend only on
    # (|d col|, |d row|) up to order, so they have exact ties (35 distinct values) that pdist's rounding
    # splits into 151; rounding to 1e-9 restores them. rsa_spearman is the tie-correct value.
    pe_d, gt_d = pdist(table), pdist(G8)
    assert len(np.unique(np.round(pe_d, 9))) == 35
    rho_ties = spearmanr(np.round(pe_d, 9), gt_d).statistic
    assert m["rsa_spearman"] == pytest.approx(rho_ties, abs=1e-12)
    assert spearmanr(pe_d, gt_d).statistic == pytest.approx(0.839, abs=0.005)  # both round to 0.839
    # Independently: top-2 principal components by SVD, then scipy's Procrustes.
    xc = table - table.mean(0)
    u, s, _ = np.linalg.svd(xc)
    pcs = u[:, :2] * s[:2]
    r2 = 1 - scipy_procrustes(G8, pcs)[2]
    assert r2 == pytest.approx(0.896, abs=0.005)
    assert m["recovery_cmds_r2"] == pytest.approx(r2, abs=1e-9)
    assert m["recovery_pca_r2"] == pytest.approx(r2, abs=1e-9)
    # Pearson on the raw distances; Kendall's tau-b with the rounding ties restored, as for Spearman
    assert m["rsa_pearson"] == pytest.approx(pearsonr(pe_d, gt_d).statistic, abs=1e-12)
    assert m["rsa_kendall"] == pytest.approx(kendalltau(np.round(pe_d, 9), gt_d).statistic, abs=1e-12)


@pytest.mark.parametrize("kind", ["planted", "random"])
def test_mds_stress_against_brute_force_kruskal(kind):
    """stress-1 of the k-dim classical MDS map with the ratio disparity b*delta that minimises it (scipy's
    scalar minimiser over b, independent of our closed form); in [0, 1] even for a random table."""
    from scipy.optimize import minimize_scalar

    table = _planted(G8, noise=0.3) if kind == "planted" else np.random.default_rng(3).normal(size=(64, 32))
    m = pe_probe.analyze(table, "grid:8x8", n_perm=0, n_boot=0, methods="cmds").metrics
    delta = pdist(table)
    c = table - table.mean(0)
    u, sv, _ = np.linalg.svd(c, full_matrices=False)
    dx = pdist(u[:, :2] * sv[:2])  # classical MDS of Euclidean distances = PCA scores
    best = minimize_scalar(lambda b: np.sum((dx - b * delta) ** 2), bounds=(0, 10), method="bounded",
                           options={"xatol": 1e-12})
    assert m["mds_stress"] == pytest.approx(np.sqrt(best.fun / np.sum(dx ** 2)), abs=1e-6)
    assert 0 <= m["mds_stress"] <= 1
    assert (m["mds_stress"] < 0.2) if kind == "planted" else (m["mds_stress"] > 0.3)  # "fair" vs "poor"


def test_random_gaussian_table_is_at_chance():
    ps, z = [], []
    for seed in range(10):
        table = np.random.default_rng(100 + seed).normal(size=(64, 64))
        m = pe_probe.analyze(table, "grid:8x8", seed=seed, methods="cmds").metrics
        ps.append(m["rsa_p"])
        z.append((m["rsa_spearman"] - m["null_rsa_mean"]) / m["null_rsa_sd"])
    assert sum(p > 0.05 for p in ps) >= 8, ps
    assert max(abs(v) for v in z) < 4, z


def test_exact_mantel_small_table():
    rng = np.random.default_rng(0)
    table = np.arange(5.0)[:, None] @ rng.normal(size=(1, 3)) + 0.1 * rng.normal(size=(5, 3))
    res = pe_probe.analyze(table, "line:5", n_boot=50)
    assert res.provenance["analysis"]["mantel"] == {"exact": True, "n_relabellings": 120}
    # exact p: only the identity and the reversal keep a line's distances, and both give the observed value
    # (the reversal up to rounding: the tie tolerance counts it)
    assert res.metrics["rsa_p"] == pytest.approx(2 / 120, abs=1e-15)


def test_exact_protest_small_table_against_brute_force():
    rng = np.random.default_rng(1)
    G = grid(2, 3).coords  # 6 positions: 720 relabellings
    table = G @ rng.normal(size=(2, 4)) + 0.8 * rng.normal(size=(6, 4))
    res = pe_probe.analyze(table, G, n_perm=720, n_boot=0, methods="pca,cmds")
    assert res.provenance["analysis"]["protest"] == {"exact": True, "n_relabellings": 720}
    from itertools import permutations

    from pe_probe.recovery import pca_embed
    X = pca_embed(np.asarray(table, float), 2)[0]
    r2 = [1 - scipy_procrustes(G[list(p)], X)[2] for p in permutations(range(6))]  # identity first
    expected = sum(v >= r2[0] - 1e-9 for v in r2) / 720  # exact: identity counted, no +1
    assert res.metrics["recovery_pca_p"] == pytest.approx(expected, abs=1e-12)
    assert res.metrics["recovery_pca_r2"] == pytest.approx(r2[0], abs=1e-9)
    sampled = pe_probe.analyze(table, G, n_perm=500, n_boot=0, methods="pca")  # fewer than N!: sampled, (1 + c) / (1 + n)
    assert sampled.provenance["analysis"]["protest"] == {"exact": False, "n_relabellings": 500}
    count = sampled.metrics["recovery_pca_p"] * 501 - 1
    assert count == pytest.approx(round(count)) and abs(sampled.metrics["recovery_pca_p"] - expected) < 0.1


def test_forbidding_reflections_is_refused():
    with pytest.raises(InputError, match="arbitrary"):
        pe_probe.analyze(_planted(G8, d=8), G8, allow_reflection=False, n_perm=0, n_boot=0)


def test_neighbourhood_metrics_do_not_depend_on_the_recovery_methods():
    table = _planted(G8, d=16, noise=0.8)
    runs = [pe_probe.analyze(table, G8, methods=m, n_perm=0, n_boot=0, n_null=0).metrics for m in ("pca", "smacof", "pca,cmds")]
    for key in ("trustworthiness", "knn_overlap"):
        assert runs[0][key] == runs[1][key] == runs[2][key]
    # and they are those of the 2-dim classical-MDS layout, each in its place (they differ on this table)
    from pe_probe.neighbourhood import neighbourhood_metrics
    from pe_probe.recovery import cmds_embed

    tw, knn = neighbourhood_metrics(cmds_embed(squareform(pdist(table)), 2)[0], G8)
    assert (runs[0]["trustworthiness"], runs[0]["knn_overlap"]) == (pytest.approx(tw, abs=1e-12), pytest.approx(knn, abs=1e-12))
    assert abs(tw - knn) > 0.05


# ---------------------------------------------------------------- invariance properties

def _moderate(coords, seed):
    """A planted table with enough noise that no metric saturates."""
    return _planted(coords, d=24, noise=0.9, seed=seed)


@pytest.fixture(scope="module", params=[0, 1])
def base(request):
    table = _moderate(G8, request.param)
    m = pe_probe.analyze(table, G8, n_perm=300, n_boot=300, seed=request.param).metrics
    assert 0.3 < m["rsa_spearman"] < 0.95 and 0.3 < m["recovery_cmds_r2"] < 0.97  # non-trivial
    return request.param, table, m


def test_similarity_transforms_of_table_change_nothing(base):
    seed, table, m0 = base
    rng = np.random.default_rng(seed + 10)
    q = ortho_group.rvs(table.shape[1], random_state=seed + 20)
    for what, t in [("rotation", table @ q), ("translation", table + rng.normal(size=table.shape[1]) * 50),
                    ("scaling", table * 1e3), ("all", 0.01 * table @ q - 7)]:
        m = pe_probe.analyze(t, G8, n_perm=300, n_boot=300, seed=seed).metrics
        assert set(m) == set(m0)
        # same seed and same labels: even the random draws coincide
        _assert_same(m0, m, m0, what=what)


def test_ground_truth_similarity_transforms(base):
    seed, table, m0 = base
    q = ortho_group.rvs(2, random_state=seed)
    for what, factor, g in [("scale", 0.37, 0.37 * G8), ("scale+shift", 3.1, 3.1 * G8 + [5.3, -2.2]),
                            ("rotation+shift", 1.0, G8 @ q + 1.7)]:
        m = pe_probe.analyze(table, g, n_perm=300, n_boot=300, seed=seed).metrics
        _assert_same(m0, m, [k for k in m0 if k not in UNIT_KEYS], what=what)
        for key in UNIT_KEYS:  # RMSE is in the ground truth's units
            assert m[key] == pytest.approx(factor * m0[key], rel=1e-6), (what, key)


def test_angular_metrics_invariant_to_rotation_and_scale():
    table = _moderate(G8, 3) + 2.0  # offset from the origin so that angles carry the geometry
    q = ortho_group.rvs(24, random_state=5)
    for metric, transformed in [("cosine", 4 * table @ q), ("correlation", 4 * table)]:
        m0 = pe_probe.analyze(table, G8, pe_metric=metric, n_perm=200, n_boot=200).metrics
        m = pe_probe.analyze(transformed, G8, pe_metric=metric, n_perm=200, n_boot=200).metrics
        _assert_same(m0, m, m0, what=metric)


def _relabel_check(coords, seed, exact_keys_exclude=()):
    table = _moderate(coords, seed)
    n = len(coords)
    m0 = pe_probe.analyze(table, coords, n_perm=300, n_boot=300, seed=seed).metrics
    for rep in range(2):
        p = np.random.default_rng(seed * 10 + rep).permutation(n)
        m = pe_probe.analyze(table[p], coords[p], n_perm=300, n_boot=300, seed=seed).metrics
        deterministic = [k for k in m0 if k not in MONTE_CARLO and k not in exact_keys_exclude]
        _assert_same(m0, m, deterministic, what="relabel")
        # Monte Carlo keys: tolerance for their sampling error
        for key in ("rsa_p", "recovery_pca_p", "recovery_cmds_p", "recovery_smacof_p"):
            assert abs(m[key] - m0[key]) <= 0.01, key  # planted signal: both at 1/(1 + n_perm)
        assert abs(m["rsa_ci_low"] - m0["rsa_ci_low"]) < 0.03
        assert abs(m["rsa_ci_high"] - m0["rsa_ci_high"]) < 0.03
        # mean of 20 null RSAs: its standard error is sd / sqrt(20); a difference of two is ~0.32 sd
        assert abs(m["null_rsa_mean"] - m0["null_rsa_mean"]) < 1.5 * m0["null_rsa_sd"]
        assert 0.4 < m["null_rsa_sd"] / m0["null_rsa_sd"] < 2.5
    return m0, m


@pytest.mark.parametrize("seed", [0, 1])
def test_relabelling_positions_leave_leave_one_out_metrics(seed):
    # 6x7 = 42 positions: the probe uses leave-one-out, which does not depend on labels
    _relabel_check(grid(6, 7).coords, seed)


def test_relabelling_positions_8x8():
    # 64 positions: the probe's shuffled 5-fold split is tied to the labels (a different, equally
    # valid split after relabelling), so probe_r2 is compared with a tolerance for that.
    m0, m = _relabel_check(G8, 2, exact_keys_exclude=("probe_r2",))
    assert abs(m["probe_r2"] - m0["probe_r2"]) < 0.03


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("case", ["nan", "inf", "three_rows", "one_d", "three_d", "mismatched", "metric", "method",
                                  "constant", "gt_nan", "gt_constant", "neg_perm", "empty_methods", "neighbours",
                                  "not_numeric", "equidistant", "gt_equidistant", "fractional_perm", "bool_boot"])
def test_bad_input_raises_input_error(case):
    good = _planted(grid(4, 4).coords, d=8)
    kwargs = {}
    table, gt = good, "grid:4x4"
    if case == "nan":
        table = good.copy()
        table[3, 2] = np.nan
    elif case == "inf":
        table = good.copy()
        table[0, 0] = -np.inf
    elif case == "three_rows":
        table, gt = good[:3], grid(1, 3).coords
    elif case == "one_d":
        table = good[:, 0]
    elif case == "three_d":
        table = np.stack([good, good])
    elif case == "mismatched":
        gt = "grid:4x5"
    elif case == "metric":
        kwargs = {"pe_metric": "manhattan"}
    elif case == "method":
        kwargs = {"methods": "pca,tsne"}
    elif case == "constant":
        table = np.ones((16, 8))
    elif case == "gt_nan":
        gt = grid(4, 4).coords.copy()
        gt[2, 1] = np.nan
    elif case == "gt_constant":
        gt = np.zeros((16, 2))
    elif case == "neg_perm":
        kwargs = {"n_perm": -1}
    elif case == "empty_methods":
        kwargs = {"methods": ""}
    elif case == "neighbours":
        kwargs = {"neighbours": 15}
    elif case == "not_numeric":
        table = [["a", "b"]] * 16
    elif case == "equidistant":  # a scaled, shifted simplex: all distances equal up to rounding
        table = 3 * np.eye(16) + 1
    elif case == "gt_equidistant":  # one-hot positions, scaled and shifted: RSA would be 0 / p 1, not undefined
        gt = 0.7 * np.eye(16) - 2.0
    elif case == "fractional_perm":  # not silently truncated to 2
        kwargs = {"n_perm": 2.7}
    elif case == "bool_boot":
        kwargs = {"n_boot": True}
    with pytest.raises(InputError, match=BAD_INPUT_MESSAGES[case]):
        pe_probe.analyze(table, gt, **kwargs)


# each bad input is refused by its own check (a distinctive part of each message)
BAD_INPUT_MESSAGES = {
    "nan": r"table: contains 1 NaN/Inf values \(first at row 3, column 2\)",
    "inf": r"table: contains 1 NaN/Inf values \(first at row 0, column 0\)",
    "three_rows": r"needs at least 4 positions \(rows\), got 3", "one_d": "got a 1-D array of length 16",
    "three_d": r"got shape \(2, 16, 8\); pick one layer", "mismatched": "ground truth has 20 positions but the PE table has 16",
    "metric": "unknown --pe-metric 'manhattan'", "method": "unknown recovery method 'tsne'",
    "constant": "all rows of the table are equidistant.*: check that --param / --layer pick the learned PE",
    "gt_nan": "ground truth: contains NaN/Inf coordinates; give finite coordinates",
    "gt_constant": "ground truth: all positions have the same coordinates; .*: give each position its own", "neg_perm": "n_perm must be >= 0, got -1",
    "empty_methods": "no recovery methods given", "neighbours": "must be below N/2 = 8 .* got 15",
    "not_numeric": "table: holds text, not numbers", "equidistant": "all rows of the table are equidistant",
    "gt_equidistant": "equally far apart", "fractional_perm": "n_perm must be an integer, got 2.7",
    "bool_boot": "n_boot must be an integer, got True",
}


def test_too_few_positions_or_no_columns_name_the_fix():
    with pytest.raises(InputError, match=r"needs at least 4 positions \(rows\), got 3; .*check --positions"):
        pe_probe.analyze(np.zeros((3, 2)), "line:3")
    with pytest.raises(InputError, match=r"has no columns .*; pass a \(positions x dims\) table"):
        pe_probe.analyze(np.zeros((16, 0)), "line:16")


def test_tables_too_large_for_memory_are_refused_before_any_square_matrix():
    from pe_probe.validation import SQUARE_ARRAYS, check_fits_in_memory

    check_fits_in_memory(1000, memory=SQUARE_ARRAYS * 1000 * 1000 * 8)  # fits exactly
    with pytest.raises(InputError, match="--positions"):
        check_fits_in_memory(1001, memory=SQUARE_ARRAYS * 1000 * 1000 * 8)
    with pytest.raises(InputError, match="1,000,000 positions"):  # this machine: 8 TB per matrix is beyond any
        pe_probe.analyze(np.zeros((1_000_000, 1)), "line:1000000", n_perm=0, n_boot=0)


@pytest.mark.parametrize("n", [9, 16, 36, 50, 64])
def test_correlations_never_pass_one(n):
    for table in (np.arange(float(n))[:, None], np.arange(float(n))[:, None] * [0.3, 7.0, -2.0]):
        m = pe_probe.analyze(table, f"line:{n}", n_perm=0, n_boot=0, n_null=0).metrics
        assert all(-1.0 <= m[k] <= 1.0 for k in ("rsa_spearman", "rsa_pearson", "rsa_kendall"))
        assert m["rsa_spearman"] == pytest.approx(1.0, abs=1e-12)


def test_a_constant_ground_truth_axis_is_noted():
    table = _planted(grid(6, 6).coords, d=8)
    flat = pe_probe.analyze(table, "grid:6x6x1", n_perm=0, n_boot=0, n_null=0)
    assert any("axis 2 is constant" in n for n in flat.provenance["notes"])
    plain = pe_probe.analyze(table, "grid:6x6", n_perm=0, n_boot=0, n_null=0)
    assert not any("constant" in n for n in plain.provenance.get("notes", []))


def test_a_torch_parameter_is_read_as_its_values():
    import torch

    table = _planted(grid(4, 4).coords, d=8)
    param = torch.nn.Parameter(torch.tensor(table))
    a = pe_probe.analyze(param, "grid:4x4", n_perm=0, n_boot=0, n_null=0).metrics
    b = pe_probe.analyze(table, "grid:4x4", n_perm=0, n_boot=0, n_null=0).metrics
    assert a["rsa_spearman"] == b["rsa_spearman"] and a["recovery_cmds_r2"] == b["recovery_cmds_r2"]


@pytest.mark.parametrize("metric", ["cosine", "correlation"])
def test_constant_table_under_angular_metrics(metric):
    # rows that are all multiples of one vector: every cosine distance is 0, no geometry
    table = np.outer(np.arange(1.0, 17.0), np.ones(8)) if metric == "cosine" else np.ones((16, 8))
    with pytest.raises(InputError):
        pe_probe.analyze(table, "grid:4x4", pe_metric=metric)


def test_top_level_api_exports_what_the_readme_uses():
    from pe_probe import api

    for name in ("analyze_source", "analyze_view", "n_layers", "write_analysis"):
        assert getattr(pe_probe, name) is getattr(api, name)
    assert set(pe_probe.__all__) >= {"analyze", "analyze_source", "analyze_view", "n_layers", "write_analysis"}


def test_a_layout_chosen_inside_a_tie_is_flagged_and_does_move():
    """A ring's table against a line: its two principal axes have equal variance, so the 1-dim PCA layout is
    one arbitrary direction of the ring's plane, and recovery r2 moves when the table is rotated; the
    result says so (and names RSA as unaffected, which it is). A generic table gets no such note."""
    n = 12
    angle = 2 * np.pi * np.arange(n) / n
    ring = np.column_stack([np.cos(angle), np.sin(angle), np.zeros((n, 6))])
    kw = dict(n_perm=0, n_boot=0, n_null=0, methods="pca,cmds")
    results = [pe_probe.analyze(ring @ ortho_group.rvs(8, random_state=s), "line:12", **kw) for s in range(4)]
    for res in results:
        tie = [note for note in res.provenance.get("notes", []) if "tied" in note]
        assert len(tie) == 1 and "recovery_pca_r2" in tie[0] and "trustworthiness" in tie[0], res.provenance
        assert res.metrics["rsa_spearman"] == pytest.approx(results[0].metrics["rsa_spearman"], abs=1e-9)
    r2 = [res.metrics["recovery_pca_r2"] for res in results]
    assert max(r2) - min(r2) > 0.05  # what the note warns about
    generic = pe_probe.analyze(np.random.default_rng(0).normal(size=(n, 8)), "line:12", **kw)
    assert not any("tied" in note for note in generic.provenance.get("notes", []))
    cosine = pe_probe.analyze(ring @ ortho_group.rvs(8, random_state=9) + 3, "line:12", pe_metric="cosine", **kw)
    assert any("principal" in note and "recovery_pca_r2" in note for note in cosine.provenance.get("notes", []))  # PCA is of the table


def test_a_classical_mds_tie_of_a_non_euclidean_metric_is_flagged_alone():
    """Directions on a ring with random lengths: their cosine distances are a ring's (the classical-MDS
    axes are tied), the table's own principal axes are not (the lengths differ). The note names the
    classical-MDS axes and their metrics, not PCA's."""
    n = 12
    angle = 2 * np.pi * np.arange(n) / n
    radii = np.random.default_rng(3).uniform(0.5, 2.0, n)
    table = np.column_stack([np.cos(angle), np.sin(angle)]) * radii[:, None]
    res = pe_probe.analyze(table, "line:12", pe_metric="cosine", n_perm=0, n_boot=0, n_null=0, methods="pca,cmds")
    tie = [note for note in res.provenance.get("notes", []) if "tied" in note]
    assert len(tie) == 1 and "classical-MDS axes" in tie[0] and "principal" not in tie[0], tie
    assert "recovery_cmds_r2" in tie[0] and "recovery_pca_r2" not in tie[0]


def test_explained_variance_is_that_of_the_top_k_principal_axes():
    table = _moderate(G8, 0)
    m = pe_probe.analyze(table, G8, n_perm=0, n_boot=0, n_null=0, methods="pca").metrics
    sv = np.linalg.svd(table - table.mean(0), compute_uv=False)
    assert m["explained_variance"] == pytest.approx(np.sum(sv[:2] ** 2) / np.sum(sv ** 2), abs=1e-12)
    assert m["gt_dim"] == 2


def test_neighbourhood_metrics_are_those_of_the_cosine_mds_layout_under_cosine():
    """Under --pe-metric cosine the classical-MDS layout is of the cosine distances (not the table's PCA)."""
    from pe_probe import distances as dist
    from pe_probe.neighbourhood import neighbourhood_metrics
    from pe_probe.recovery import cmds_embed, pca_embed

    table = _planted(G8, d=16, noise=0.8) + 1.5
    m = pe_probe.analyze(table, G8, pe_metric="cosine", methods="pca", n_perm=0, n_boot=0, n_null=0).metrics
    cm = cmds_embed(dist.square_distances(table, "cosine"), 2)[0]
    tw, knn = neighbourhood_metrics(cm, G8)
    assert (m["trustworthiness"], m["knn_overlap"]) == (pytest.approx(tw, abs=1e-12), pytest.approx(knn, abs=1e-12))
    assert neighbourhood_metrics(pca_embed(table, 2)[0], G8) != pytest.approx((tw, knn), abs=1e-3)  # they differ


def test_neighbours_at_half_n_is_an_input_error():
    """k < N/2 is required; k = N/2 exactly (8 of 16) is refused by analyze's own one-line InputError."""
    with pytest.raises(InputError, match="must be below N/2 = 8 .* got 8"):
        pe_probe.analyze(_planted(grid(4, 4).coords, d=8), "grid:4x4", neighbours=8, n_perm=0, n_boot=0, n_null=0)
    m = pe_probe.analyze(_planted(grid(4, 4).coords, d=8), "grid:4x4", neighbours=7, n_perm=0, n_boot=0, n_null=0)
    assert m.provenance["analysis"]["neighbours"] == 7


def test_four_positions_are_enough():
    """The documented minimum (4 positions) is accepted, not refused."""
    table = np.random.default_rng(0).normal(size=(4, 3))
    res = pe_probe.analyze(table, "line:4", n_perm=0, n_boot=0, n_null=0, methods="pca,cmds")
    assert res.metrics["n_positions"] == 4 and np.isfinite(res.metrics["rsa_spearman"])


def test_resamples_without_a_correlation_are_noted_with_their_count():
    """N = 4: a resample drawing <= 2 distinct positions has a single distinct pair, so no correlation; that
    happens with probability (4 + 6 * 14) / 4**4 = 88/256 per resample (4 constant draws; 6 pairs of positions,
    2**4 - 2 draws using both). The CI is from the others, and a note says how many."""
    table = np.random.default_rng(0).normal(size=(4, 3))
    res = pe_probe.analyze(table, "line:4", n_perm=0, n_boot=400, n_null=0, methods="pca")
    valid = res.provenance["analysis"]["n_boot_valid"]
    p_ok = 1 - 88 / 256
    assert abs(valid - 400 * p_ok) < 5 * np.sqrt(400 * p_ok * (1 - p_ok))
    assert any(f"bootstrap CI from {valid} of 400 resamples" in note for note in res.provenance["notes"])


def test_the_few_resamples_note_starts_just_below_min_boot_ci():
    from pe_probe.analysis import MIN_BOOT_CI

    assert 0.025 * (MIN_BOOT_CI - 2) < 1 <= 0.025 * (MIN_BOOT_CI - 1)  # the last n with 0.025 (n - 1) < 1
    table = _planted(grid(4, 4).coords, d=8, noise=0.5)
    for n_boot, noted in ((MIN_BOOT_CI - 1, True), (MIN_BOOT_CI, False)):
        res = pe_probe.analyze(table, "grid:4x4", n_perm=0, n_boot=n_boot, n_null=0, methods="pca")
        assert any("bootstrap CI from only" in n for n in res.provenance.get("notes", [])) == noted, n_boot


def test_provenance_records_each_stages_wall_time():
    g = grid(6, 6).coords
    res = pe_probe.analyze(g @ np.random.default_rng(1).normal(size=(2, 8)), "grid:6x6", n_perm=50, n_boot=50, n_null=2)
    stages = res.provenance["analysis"]["stage_seconds"]
    assert list(stages) == ["distances", "RSA", "Mantel test", "bootstrap CI", "recovery", "SMACOF",
                            "alignment and PROTEST", "linear probe", "neighbourhoods", "chance level"]
    assert all(v >= 0 for v in stages.values())
    assert sum(stages.values()) <= res.provenance["analysis"]["seconds"] + 0.05
    skipped = pe_probe.analyze(g, "grid:6x6", n_perm=0, n_boot=0, n_null=0, methods="pca").provenance["analysis"]["stage_seconds"]
    assert "Mantel test" not in skipped and "bootstrap CI" not in skipped and "SMACOF" not in skipped
