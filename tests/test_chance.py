"""The chance level: Gaussian tables for a bare table, random PE tables read through the model for a view."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import procrustes
from scipy.spatial.distance import pdist
from scipy.stats import rankdata, spearmanr

from pe_probe.analysis import analyze
from pe_probe.api import analyze_view
from pe_probe.chance import ChanceModel, gaussian_chance, null_levels
from pe_probe.groundtruth import grid, line
from pe_probe.report.readings import readings
from pe_probe.views import view_tables
from test_causal import gpt2_folder
from test_views import N, ours_meta, ours_state

FAST = {"n_perm": 0, "n_boot": 0, "methods": "pca"}


def rsa(table, coords):
    return spearmanr(pdist(table), pdist(coords))[0]


def test_null_rsa_is_the_spearman_rsa_of_each_drawn_table(rng):
    coords = grid(4, 4).coords
    tables = [rng.normal(size=(N, 3)) for _ in range(4)]
    drawn = iter(tables)
    chance = ChanceModel("test", "the planted tables", lambda _rng: next(drawn))
    r = rankdata(pdist(coords))  # average ranks of the grid's tied distances, as pe-probe ranks them
    gt_ranked = (r - r.mean()) / np.linalg.norm(r - r.mean())
    out, ref = null_levels(chance, (N, 3), gt_ranked, "euclidean", 4, np.random.default_rng(0))
    np.testing.assert_allclose(out, [rsa(t, coords) for t in tables], atol=1e-12)
    assert np.isnan(ref).all()  # no reference, no shape distances
    with pytest.raises(ValueError, match="shape"):
        null_levels(ChanceModel("bad", "", lambda _rng: np.zeros((3, 3))), (N, 3), gt_ranked, "euclidean", 1, None)


def test_null_shape_distances_are_each_drawn_tables_distance_to_the_reference(rng):
    """The same draws give the chance level of ref_shape_distance: scipy's Procrustes disparity of a centred,
    unit-norm pair is 1 - (nuclear norm)^2, and the angular distance is arccos of the nuclear norm."""
    coords = grid(4, 4).coords
    reference = rng.normal(size=(N, 3))
    tables = [rng.normal(size=(N, 3)) for _ in range(3)]
    drawn = iter(tables)
    chance = ChanceModel("test", "the planted tables", lambda _rng: next(drawn))
    r = rankdata(pdist(coords))
    _, ref = null_levels(chance, (N, 3), (r - r.mean()) / np.linalg.norm(r - r.mean()), "euclidean", 3,
                         np.random.default_rng(0), reference)
    expected = [np.arccos(np.sqrt(1 - procrustes(reference, t)[2])) for t in tables]
    np.testing.assert_allclose(ref, expected, atol=1e-9)


def test_analyze_reports_the_shape_distance_chance_level_only_with_a_reference(rng):
    P = rng.normal(size=(N, 16))
    without = analyze(P, "grid:4x4", n_null=5, **FAST)
    assert "null_ref_shape_distance_mean" not in without.metrics
    res = analyze(P, "grid:4x4", n_null=5, reference="sin2d:4x4", **FAST)
    assert res.metrics["null_rsa_mean"] == without.metrics["null_rsa_mean"]  # the same draws as before
    mu, sd = res.metrics["null_ref_shape_distance_mean"], res.metrics["null_ref_shape_distance_sd"]
    assert 0 < mu < np.pi / 2 and sd > 0
    # a random table of the same shape is not closer to the sinusoid than chance
    assert abs(res.metrics["ref_shape_distance"] - mu) < 4 * sd


def test_default_chance_is_gaussian_of_the_tables_scale_and_recorded(rng):
    P = rng.normal(0, 3.0, size=(N, 5))
    res = analyze(P, "grid:4x4", n_null=5, seed=7, **FAST)
    assert res.provenance["analysis"]["chance"]["kind"] == "gaussian"
    # the same draws by hand: analyze's fourth spawned stream of its seed
    rng_null = np.random.default_rng(np.random.SeedSequence(7).spawn(5)[3])
    sd = float(np.std(P))
    expected = [rsa(rng_null.normal(0.0, sd, P.shape), grid(4, 4).coords) for _ in range(5)]
    np.testing.assert_allclose(res.null_rsa, expected, atol=1e-12)
    assert res.metrics["null_rsa_mean"] == pytest.approx(np.mean(expected), abs=1e-12)
    assert res.metrics["null_rsa_sd"] == pytest.approx(np.std(expected, ddof=1), abs=1e-12)  # the sample sd
    assert gaussian_chance(np.zeros((4, 2))).draw(np.random.default_rng(0)).std() > 0.5  # a constant table: sd 1


@pytest.mark.parametrize("view", ["q", "qk", "kernel"])
def test_a_views_chance_table_is_the_view_of_a_random_table_in_the_pe_tables_place(rng, view):
    state = ours_state(rng, every_layer=False)
    meta = ours_meta(state, "pre", heads=2)
    entries = view_tables(state, meta, view, return_chance=True, per_head=view == "kernel")
    for label, _, info, chance in entries:
        assert chance.kind == "through-view" and "ln1" in chance.description
        drawn = chance.draw(np.random.default_rng(3))
        planted = dict(state, **{"pe.table": np.random.default_rng(3).normal(0.0, np.std(state["pe.table"]), (N, 8))})
        same = [t for lab, t, _ in view_tables(planted, meta, view, per_head=view == "kernel") if lab == label]
        np.testing.assert_allclose(drawn, same[0], atol=1e-12)
    assert len(entries) == (2 if view == "kernel" else 1)
    assert all(len(e) == 3 for e in view_tables(state, meta, view))  # without return_chance: as before


def test_the_mean_views_chance_draws_one_random_table_per_layer(rng):
    state = ours_state(rng)
    meta = ours_meta(state, "post")
    (_, _, _, chance), = view_tables(state, meta, "q", layer="mean", return_chance=True)
    g = np.random.default_rng(4)
    planted = dict(state)
    for i in range(2):
        planted[f"blocks.{i}.pe.table"] = g.normal(0.0, np.std(state[f"blocks.{i}.pe.table"]), (N, 8))
    (_, expected, _), = view_tables(planted, meta, "q", layer="mean")
    np.testing.assert_allclose(chance.draw(np.random.default_rng(4)), expected, atol=1e-12)
    assert "2 per-layer tables" in chance.description
    raw = view_tables(state, meta, "raw", layer=0, return_chance=True)
    assert raw[0][3] is None  # raw: analyze's default (Gaussian tables of the table's shape)


def test_a_causal_kernels_chance_level_is_the_masks_not_zero(tmp_path, rng):
    """With Gaussian tables of the kernel's shape the chance level of a GPT-2 kernel was ~0 while any table, even
    a random one, gives ~0.66 through the causal mask: the chance level now says so."""
    gpt2_folder(tmp_path / "m", rng.normal(0, 0.5, (N, 8)), rng)
    res, = analyze_view(str(tmp_path / "m"), "kernel", line(N), n_null=8, **FAST)
    assert res.provenance["analysis"]["chance"]["kind"] == "through-view"
    mask = res.metrics["causal_mask_rsa"]
    assert mask > 0.5
    assert res.metrics["null_rsa_mean"] == pytest.approx(mask, abs=0.05)
    assert res.metrics["rsa_spearman"] - res.metrics["null_rsa_mean"] < 0.05  # this table adds nothing beyond chance
    gaussian = analyze(res.table, line(N), n_null=8, **FAST)  # the old chance level: Gaussian kernel-shaped tables
    assert abs(gaussian.metrics["null_rsa_mean"]) < 0.2
    rsa_row = {name: text for name, _, text in readings(res.metrics, res.provenance)}["RSA (Spearman ρ)"]
    assert "Random tables put in the PE table's place" in rsa_row and "read through the same model maps" in rsa_row
    one, = analyze_view(str(tmp_path / "m"), "kernel", line(N), n_null=1, **FAST)
    rsa_row = {name: text for name, _, text in readings(one.metrics, one.provenance)}["RSA (Spearman ρ)"]
    assert "One random table put in the PE table's place" in rsa_row and "a single draw" in rsa_row


def test_per_head_kernels_report_each_heads_cls_mass(rng):
    state = ours_state(rng, every_layer=False, cls=True)
    meta = ours_meta(state, "pre", heads=2, readout="cls")
    (_, _, both), = view_tables(state, meta, "kernel")
    heads = view_tables(state, meta, "kernel", per_head=True)
    masses = [info["cls_attention_mass"] for _, _, info in heads]
    assert np.mean(masses) == pytest.approx(both["cls_attention_mass"])
    assert masses[0] != pytest.approx(masses[1])


def test_a_drawn_table_equal_to_the_table_gets_the_tables_own_rsa():
    """The null ranks like the real RSA (near ties merged): a sinusoid table's distances tie in exact arithmetic."""
    from pe_probe.reference import sinusoid_2d

    P = sinusoid_2d(4, 4, 16) @ np.linalg.qr(np.random.default_rng(1).normal(size=(16, 16)))[0]  # rotated: ties by rounding
    res = analyze(P, "grid:4x4", n_null=2, chance=ChanceModel("test", "the table itself", lambda _rng: P.copy()), **FAST)
    np.testing.assert_array_equal(res.null_rsa, [res.metrics["rsa_spearman"]] * 2)


def test_equidistant_draws_are_left_out_of_the_chance_level_with_a_note(rng):
    P = rng.normal(size=(N, 4))
    tables = iter([np.zeros((N, 4)), rng.normal(size=(N, 4)), rng.normal(size=(N, 4))])
    res = analyze(P, "grid:4x4", n_null=3, chance=ChanceModel("test", "", lambda _rng: next(tables)), **FAST)
    assert len(res.null_rsa) == 2 and np.isfinite(res.metrics["null_rsa_sd"])
    assert any("from 2 of 3 random tables" in n for n in res.provenance["notes"])


def test_random_tables_that_all_give_one_rsa_are_read_as_no_spread():
    metrics = {"rsa_spearman": 0.6634, "null_rsa_mean": 0.6633, "null_rsa_sd": 1e-16, "rsa_p": 0.001}
    prov = {"analysis": {"chance": {"kind": "through-view"}, "n_null": 20}}
    text = {n: t for n, _, t in readings(metrics, prov)}["RSA (Spearman ρ)"]
    assert "all give 0.66, without spread" in text and "standard deviations" not in text
    metrics["null_rsa_sd"] = 0.01
    assert "standard deviations" in {n: t for n, _, t in readings(metrics, prov)}["RSA (Spearman ρ)"]


def test_shape_distance_chance_level_leaves_out_tables_without_a_shape(rng):
    """A drawn table with no spread (all rows equal) has no shape distance (NaN); the chance level is the mean and
    sd of the others, as `shape_distance` gives them, not NaN."""
    from pe_probe.reference import shape_distance

    P = rng.normal(size=(N, 4))
    ref = rng.normal(size=(N, 4))
    drawn = [np.zeros((N, 4)), rng.normal(size=(N, 4)), rng.normal(size=(N, 4))]
    tables = iter([t.copy() for t in drawn])
    res = analyze(P, "grid:4x4", n_null=3, reference=ref, chance=ChanceModel("test", "", lambda _rng: next(tables)),
                  **FAST)
    expected = [shape_distance(t, ref) for t in drawn[1:]]
    assert res.metrics["null_ref_shape_distance_mean"] == pytest.approx(np.mean(expected), abs=1e-12)
    assert res.metrics["null_ref_shape_distance_sd"] == pytest.approx(np.std(expected, ddof=1), abs=1e-12)
