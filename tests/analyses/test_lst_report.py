"""The LST report's verdict rules (analyses/lst/verdicts.py), with the statistics and the CPU attention code
paths they use, and the written report (analyses/lst/report.py), on small synthetic frames."""

from __future__ import annotations

import json

import math

import numpy as np
import pandas as pd
import pytest

from analyses.lst import code_paths as CP
from analyses.lst import report as R
from analyses.lst import summary_stats as SS
from analyses.lst import tables as T
from analyses.lst import verdicts as V

SIGMAS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 1.5, 2.0)


def _view(rsa_of_sigma, p_of_sigma=lambda s, i: 0.01, seeds=4) -> pd.DataFrame:
    """Last-checkpoint rows of one view: RSA and Mantel p per (σ, seed) from the given functions."""
    rows = []
    for s in SIGMAS:
        for i in range(seeds):
            rows.append({"run": f"s{s}-{i}", "sigma": s, "seed": i, "rsa_spearman": rsa_of_sigma(s, i),
                         "rsa_p": p_of_sigma(s, i)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------
# geometry: three levels, as the criteria paragraph states


def test_geometry_present():
    g = V.geometry_state(_view(lambda s, i: 0.6 - 0.2 * s + 0.01 * i))
    assert g["state"] == "present"
    assert g["n_small"] == 16 and g["share_small"] == 1.0


def test_geometry_weak_but_decreasing():
    # small σ: mean RSA 0.18 < 0.3, but RSA falls with σ over the grid (p < 0.05)
    g = V.geometry_state(_view(lambda s, i: 0.2 - 0.08 * s + 0.002 * i))
    assert g["mean_small"] < 0.3 and g["rho"] < 0 and g["p"] < 0.05
    assert g["state"] == "weak, but it decreases with σ"


def test_geometry_decreasing_but_few_mantel_hits_is_not_present():
    # mean RSA > 0.3 but the Mantel test significant in only a quarter of the small-σ runs
    g = V.geometry_state(_view(lambda s, i: 0.5 - 0.2 * s + 0.001 * i, lambda s, i: 0.01 if i == 0 else 0.3))
    assert g["mean_small"] > 0.3 and g["share_small"] == 0.25
    assert g["state"] == "weak, but it decreases with σ"


def test_geometry_present_at_exactly_half_the_mantel_hits():
    """'At least half' of the small-σ runs: exactly half (2 of 4 seeds) is enough, a quarter is not (above)."""
    g = V.geometry_state(_view(lambda s, i: 0.6 - 0.2 * s + 0.01 * i, lambda s, i: 0.01 if i < 2 else 0.3))
    assert g["share_small"] == 0.5 and g["state"] == "present"


def test_accuracy_intervals_are_clipped_to_0_and_100_percent():
    from analyses.lst import summary_stats as SS

    assert SS.fmt_ci([1.0, 0.99, 0.5]).endswith(", 100.0] (n=3)")  # the t interval reaches past 1
    assert SS.fmt_ci([0.0, 0.01, 0.5]).split("[")[1].startswith("0.0, ")  # and below 0
    assert float(SS.fmt_ci([1.0, 0.99, 0.5], pct=False).split(", ")[1].split("]")[0]) > 1  # non-% not clipped


def test_geometry_not_supported():
    rng = np.random.default_rng(1)
    vals = {(s, i): float(rng.uniform(-0.1, 0.1)) for s in SIGMAS for i in range(4)}
    g = V.geometry_state(_view(lambda s, i: vals[(s, i)], lambda s, i: 0.5))
    assert not (g["rho"] < 0 and g["p"] < 0.05)
    assert g["state"] == "not supported"


def test_geometry_borderline():
    d = _view(lambda s, i: (0.305 if s <= 0.2 else 0.0) + 0.001 * (i - 1.5))
    g = V.geometry_state(d)
    assert g["state"].startswith("present (borderline: mean RSA 0.305")
    d2 = _view(lambda s, i: (0.295 if s <= 0.2 else 0.0) + 0.001 * (i - 1.5))
    assert V.geometry_state(d2)["state"].startswith("weak, but it decreases with σ (borderline")


def test_geometry_is_borderline_when_the_seed_interval_contains_the_bar():
    """The qk view read 'present' at 0.312 with 4 seeds and 'weak' at 0.29 with 8: a bar inside the seed-level 95%
    interval is crossed by sampling noise (stats review), so such a verdict says borderline."""
    spread = {0: 0.22, 1: 0.40, 2: 0.26, 3: 0.36}  # seed means 0.31 ± a wide interval
    d = _view(lambda s, i: (spread[i] if s <= 0.2 else 0.0))
    state = V.geometry_state(d)["state"]
    assert state.startswith("present (borderline: the 95% interval of the mean RSA over 4 seeds, [")
    assert state.endswith("contains 0.3)")
    tight = _view(lambda s, i: (0.36 + 0.002 * i if s <= 0.2 else 0.0))  # a narrow interval above the bar
    assert V.geometry_state(tight)["state"] == "present"


# ---------------------------------------------------------------------------------------------------
# the small-σ trend sentence


def test_a_decrease_with_sigma_that_a_bonferroni_correction_would_not_keep_says_so():
    """The k view's 'decreases with σ' rested on p = 0.013, one of 6 geometry views tested uncorrected."""
    assert V.uncorrected_note(0.013, 6) == ("; that p is not corrected for the 6 geometry views, and a Bonferroni "
                                            "correction would not keep it (p × 6 ≥ 0.05)")
    assert V.uncorrected_note(0.008, 6) == ""  # 0.048: kept
    assert V.uncorrected_note(0.03, 1) == ""  # one view: nothing to correct
    assert V.uncorrected_note(float("nan"), 6) == ""


def _sigma_runs(acc_of_sigma) -> pd.DataFrame:
    return pd.DataFrame([{"run": f"s{s}-{i}", "group": "sigma", "sigma": s, "seed": i, "ood_acc": acc_of_sigma(s, i)}
                         for s in SIGMAS for i in range(4)])


def test_small_sigma_trend_rises_falls_and_flat():
    label, text = V.small_sigma_trend(_sigma_runs(lambda s, i: 0.7 + 0.4 * s + 0.001 * i))
    assert label == "rises with σ"
    assert text.startswith("over σ ≤ 0.5, held-out accuracy rises with σ (ρ = +") and "n = 24 runs" in text
    assert V.small_sigma_trend(_sigma_runs(lambda s, i: 0.9 - 0.4 * s + 0.001 * i))[0] == "falls with σ"
    flat = {0: 0.8, 1: 0.9, 2: 0.7, 3: 0.85}
    label, text = V.small_sigma_trend(_sigma_runs(lambda s, i: flat[i]))
    assert label == "no clear trend" and "shows no clear trend with σ" in text
    # only σ <= 0.5 counts: a drop at large σ does not make the small-σ trend fall
    assert V.small_sigma_trend(_sigma_runs(lambda s, i: (0.7 + 0.4 * s if s <= 0.5 else 0.2) + 0.001 * i))[0] == "rises with σ"


def test_smaller_sigma_verdict_states_the_computed_trend():
    sr = _sigma_runs(lambda s, i: (0.6 + 0.6 * s if s <= 0.5 else 0.3) + 0.01 * i)
    out = V.verdicts(sr, pd.DataFrame(columns=["view", "layer", "is_last", "sigma"]))
    line = next(v for v in out if v.startswith("**Smaller σ is better"))
    assert "threshold" not in line
    assert "over σ ≤ 0.5, held-out accuracy rises with σ" in line


# ---------------------------------------------------------------------------------------------------
# weight decay: paired difference with its t-CI against the study's implied gain


def _paired(a, b):
    idx = range(len(a))
    return SS.paired_ci(pd.Series(a, index=idx), pd.Series(b, index=idx))


def test_paired_ci_matches_scipy():
    from scipy import stats

    a, b = [0.9, 0.95, 0.92, 0.97], [0.85, 0.9, 0.91, 0.9]
    c = _paired(a, b)
    d = np.subtract(a, b)
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert c["n"] == 4 and c["diff"] == pytest.approx(d.mean())
    assert (c["ci_low"], c["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert c["t_p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert c["mean_a"] == pytest.approx(np.mean(a)) and c["mean_b"] == pytest.approx(np.mean(b))


def test_equal_paired_differences_get_no_t_test():
    """Two seeds with the same accuracy gap (ties are common: accuracies are multiples of 1/108) have no
    variance; scipy would return p ~ 0 there, which the report read as a significant difference."""
    a, b = [70 / 108, 80 / 108], [77 / 108, 87 / 108]
    c = _paired(a, b)
    assert c["diff"] == pytest.approx(-7 / 108) and math.isnan(c["t_p"])
    idx = range(2)
    assert math.isnan(SS.paired_test(pd.Series(a, index=idx), pd.Series(b, index=idx))["t_p"])
    assert not math.isnan(_paired([0.5, 0.6, 0.7], [0.4, 0.45, 0.65])["t_p"])  # differences that vary: tested


def test_equal_differences_of_float32_accuracies_get_no_t_test():
    """Accuracies come back from the checkpoints as float32: the sweep's three σ = 2.0 placement pairs were each
    68/108 apart, but their float32 differences spread over 1.5e-8, and the t-test gave p = 1.9e-16."""
    a = [float(np.float32(k / 108)) for k in (100, 91, 94)]  # input-only runs
    b = [float(np.float32(k / 108)) for k in (32, 23, 26)]  # every-layer runs
    assert np.ptp(np.subtract(a, b)) > 1e-9  # what the earlier tolerance let through
    c = _paired(a, b)
    assert c["diff"] == pytest.approx(68 / 108) and math.isnan(c["t_p"])
    assert math.isnan(SS.paired_test(pd.Series(a), pd.Series(b))["t_p"])
    line = V._paired_line(c, "input only", "every layer")
    assert line.endswith("paired difference +63.0 points, 95% t-CI [+63.0, +63.0], paired t p = n/a (every seed's "
                         "difference is the same: no variance to test)")
    # one puzzle's difference is far above the tolerance: tested
    assert not math.isnan(_paired(a, [b[0], b[1], float(np.float32(27 / 108))])["t_p"])


def test_wd_state_labels():
    gain = 0.065
    assert V.wd_state(_paired([0.95, 0.96, 0.97], [0.90, 0.905, 0.91]), gain) == "supported"
    assert V.wd_state(_paired([0.99, 0.995, 0.999], [0.90, 0.905, 0.91]), gain) == "supported"
    small = V.wd_state(_paired([0.91, 0.915, 0.92], [0.90, 0.904, 0.909]), gain)
    assert small.startswith("supported, but by less than the study's implied gain")
    wide = V.wd_state(_paired([0.92, 0.94, 0.93], [0.96, 0.94, 0.89]), gain)  # CI about [-11, +10] points
    assert wide.startswith("not detected (95% CI [") and "includes the study's implied gain of ~6.5" in wide
    narrow = V.wd_state(_paired([0.25, 0.29, 0.22], [0.24, 0.28, 0.24]), 0.613)
    assert narrow.startswith("not reproduced (95% CI [") and "excludes the study's implied gain of ~61.3" in narrow
    assert V.wd_state(_paired([0.9], [0.8]), gain) == "descriptive only"
    # both arms at chance (sigma 2 at 40 epochs): a gain cannot show, so the claim is not tested, not refuted
    at_chance = V.wd_state(_paired([0.25, 0.29, 0.22], [0.24, 0.28, 0.24]), 0.613, at_chance=True)
    assert at_chance.startswith("not informative (95% CI [") and "neither arm's held-out accuracy is above chance" in at_chance
    assert V.wd_state(_paired([0.95, 0.96, 0.97], [0.90, 0.905, 0.91]), gain, at_chance=True) == "supported"


def _wd_frames():
    rows = []
    for seed, (plain, wd) in enumerate([(0.96, 0.92), (0.94, 0.94), (0.89, 0.93), (0.92, None)]):
        rows.append({"run": f"sigma-{seed}", "group": "sigma", "pe": "learned", "sigma": 0.1, "control": "none",
                     "seed": seed, "ood_acc": plain, "epochs": 40})
        rows.append({"run": f"sigma2-{seed}", "group": "sigma", "pe": "learned", "sigma": 2.0, "control": "none",
                     "seed": seed, "ood_acc": 0.25, "epochs": 40})
        if wd is not None:
            rows.append({"run": f"wd-{seed}", "group": "control", "pe": "learned", "sigma": 0.1, "control": "wd0.1",
                         "seed": seed, "ood_acc": wd, "epochs": 40})
    return pd.DataFrame(rows)


def test_wd_verdict_prints_paired_means_and_the_training_length():
    runs = _wd_frames()
    out = V.verdicts(runs, pd.DataFrame(columns=["view", "layer", "is_last", "sigma"]))
    line = next(v for v in out if v.startswith("**Weight decay helps learned PEs (study: about 99%), σ = 0.1"))
    assert ": not detected (95% CI [" in line
    # paired means over seeds 0-2 (the unpaired σ=0.1 mean over 4 seeds would be 92.75%)
    assert "over the 3 seed(s) both have (0, 1, 2)" in line.lower()
    assert "AdamW weight decay 0.1 93.0% vs without 93.0%" in line
    assert "~99% with weight decay" in line and "~~" not in line
    assert "the study trained 4,000 epochs, these runs 40" in line


# ---------------------------------------------------------------------------------------------------
# attention maps against the no-PE floor; the 2D sinusoid against the best σ


def test_attention_state_uses_the_no_pe_floor():
    assert V.attention_state(0.75, 0.3, 0.67) == "supported: small σ exceeds the no-PE floor"
    s = V.attention_state(0.596, 0.26, 0.67)
    assert s == "not supported: large σ falls below the no-PE floor, while small σ does not exceed it"
    assert V.attention_state(0.6, 0.7, 0.67).startswith("not supported: large σ does not fall below")
    assert V.attention_state(0.6, 0.3, float("nan")).startswith("descriptive only")


def test_best_state():
    assert V.best_state(_paired([0.98, 0.99, 0.985, 0.99], [0.9, 0.92, 0.91, 0.93])) == "supported"
    assert V.best_state(_paired([0.8, 0.83, 0.8, 0.84], [0.9, 0.92, 0.91, 0.93])) == "not supported"
    assert V.best_state(_paired([0.97, 0.94, 0.93, 0.86], [0.96, 0.99, 0.93, 0.95])) == "not distinguishable"
    assert V.best_state(_paired([0.9], [0.8])) == "descriptive only"


# ---------------------------------------------------------------------------------------------------
# distance to the sinusoid: the within-σ correlation removes what σ carries


def test_within_sigma_spearman_removes_the_sigma_effect():
    rng = np.random.default_rng(0)
    rows = []
    for s in SIGMAS:
        for i in range(6):
            rows.append({"sigma": s, "dist": 10 * s + rng.normal(0, 0.1), "acc": 1 - 0.3 * s + rng.normal(0, 0.01)})
    d = pd.DataFrame(rows)
    across, p_across, _ = SS.spearman(d.dist, d.acc)
    within, p_within, n = V.within_sigma_spearman(d, "dist", "acc")
    assert across < -0.8 and p_across < 1e-6
    assert abs(within) < 0.3 and p_within > 0.05 and n == len(d)
    # a real within-σ association is kept
    d["acc2"] = d.acc - 0.5 * (d.dist - 10 * d.sigma)
    assert V.within_sigma_spearman(d, "dist", "acc2")[0] < -0.8


# ---------------------------------------------------------------------------------------------------
# which CPU attention code path trained a run (train.log times against commit a635489)


def test_code_paths_and_mixed_pairs(tmp_path):
    runs = pd.DataFrame([
        {"run": "a-0", "group": "control", "control": "wd0.1", "sigma": 0.1, "seed": 0, "train_seconds": 100.0},
        {"run": "a-1", "group": "control", "control": "wd0.1", "sigma": 0.1, "seed": 1, "train_seconds": 100.0},
        {"run": "b-0", "group": "sigma", "control": "none", "sigma": 0.1, "seed": 0, "train_seconds": 100.0},
        {"run": "b-1", "group": "sigma", "control": "none", "sigma": 0.1, "seed": 1, "train_seconds": 100.0},
        {"run": "c-0", "group": "sigma", "control": "none", "sigma": 2.0, "seed": 0, "train_seconds": 100.0},
    ])
    logs = {"a-0": "2026-11-30 01:00:00", "a-1": "2026-11-30 04:40:00", "b-0": "2026-11-30 02:00:00",
            "b-1": "2026-11-30 03:30:00"}  # b-1 finishes after the switch: not determined
    for run, t in logs.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "train.log").write_text(f"# {t} pe-probe train lst ...\nepoch 5/40\n")
    paths = CP.code_paths(tmp_path, runs)
    assert paths.to_dict() == {"a-0": "fused", "a-1": "matmul", "b-0": "fused", "b-1": "unknown", "c-0": "unknown"}
    assert "torch's fused kernel: 2 runs" in CP.describe_paths(paths)
    wd, plain = dict(group="control", control="wd0.1", sigma=0.1), dict(group="sigma", sigma=0.1)
    mixed = CP.pair_paths(runs, paths, wd, plain)
    assert mixed.startswith("A: seed 0 torch's fused kernel, seed 1 matmul-softmax; B: ")
    same = pd.Series({r: "fused" for r in runs.run})
    assert CP.pair_paths(runs, same, wd, plain) == ""
    assert CP.pair_paths(runs, same, wd, plain, all_paths=True) == "torch's fused kernel (all)"


# ---------------------------------------------------------------------------------------------------
# the written report: CSV bounds, trajectory data, labels


def _frames():
    from synthetic_sweep import ACC_KEYS, synthetic_frames

    items = [("sigma", "learned", s, "every", "none") for s in (0.1, 0.2, 1.5, 2.0)]
    items += [("pe_type", "sin2d", None, "every", "none"), ("pe_type", "none", None, "every", "none"),
              ("control", "learned", 0.1, "every", "wd0.1")]

    def accuracies(rng):  # accuracies near 1 with spread: the t-interval's upper bound passes 1
        return {**{k: float(rng.choice([0.7, 0.99, 1.0])) for k in ACC_KEYS}, "train_loss": 0.1}

    return synthetic_frames(items, accuracies, lambda rng: float(rng.uniform(0.3, 0.9)))


def test_written_report_labels_and_csvs(tmp_path):
    from trainers.config import make_config

    root = tmp_path / "sweep"
    root.mkdir()
    (root / "grid.json").write_text(json.dumps({"preset": "quick", "runs": []}))
    frames = _frames()
    for run in frames["runs"].run:  # the held-out set is described from the runs' config.json
        (root / run).mkdir()
        (root / run / "config.json").write_text(json.dumps(make_config("quick").to_dict()))
    out = tmp_path / "report"
    text = R.write_report(root, out, frames, "python -m analyses.lst.report --root X").read_text()
    acc = pd.read_csv(out / "accuracy_vs_sigma.csv")
    bounds = acc.filter(like="_ci_")
    assert bounds.notna().any().any() and (bounds.max().max() <= 1.0) and (bounds.min().min() >= 0.0)
    assert pd.read_csv(out / "per_level_vs_sigma.csv").filter(like="_ci_").max().max() <= 1.0
    # the per-seed dots are re-plottable: the runs' CSV holds them, and its means are the summary's (figure QA)
    dots = pd.read_csv(out / "accuracy_vs_sigma_runs.csv")
    assert {"sigma", "seed", "ood_acc"} <= set(dots.columns) and len(dots) > len(acc)
    means = dots.groupby("sigma").ood_acc.mean()
    assert means.to_numpy() == pytest.approx(acc.set_index("sigma").loc[means.index, "ood_acc_mean"].to_numpy())
    ident_dots = pd.read_csv(out / "identifiability_vs_sigma_runs.csv")
    ident_summ = pd.read_csv(out / "identifiability_vs_sigma.csv")
    got = ident_dots.groupby(["view", "metric", "sigma"]).value.mean()
    want = ident_summ.set_index(["view", "metric", "sigma"])["mean"]
    assert got.loc[want.index].to_numpy() == pytest.approx(want.to_numpy())
    panels = set(pd.read_csv(out / "trajectories.csv").panel)
    assert {"raw:0:rsa_spearman", "qk:0:rsa_spearman", "raw:mean:rsa_spearman"} <= panels
    traj = pd.read_csv(out / "table_traj.csv")
    assert set(traj["σ band"]) == {"σ ≤ 0.2", "σ ≥ 1.5"}
    ident = pd.read_csv(out / "table_ident.csv")
    assert any(c.startswith("share Mantel p<0.05, all σ") for c in ident.columns)
    assert any(c.startswith("share Mantel p<0.05, σ ≤ 0.2") for c in ident.columns)
    assert "σ = 0.1 vs σ = 2.0, seed 0" in text
    assert "not available here" in text and "not public" not in text
    assert "~99 (σ not given)" in text and "99.0" not in text
    verdicts = text[text.index("## Verdicts"):text.index("## Later in training")]
    for head in ("q view of the table, layer 0", "k view of the table, layer 0", "qk view of the table, layer 0"):
        assert f"Grid geometry in the {head}: " in verdicts
    assert "the study's ρ = -0.98 used" not in text
    assert "Within σ (distance and accuracy centred on each σ's mean)" in verdicts
    assert "The 2D sinusoid generalizes best (study: 97.7%): " in verdicts and "paired t p = " in verdicts
    assert "which selection inflates, so this comparison leans against the sinusoid" in verdicts
    for label in ("*not detected*", "*not reproduced*", "*not distinguishable*", "*weak, but it decreases with σ*"):
        assert label in verdicts


def test_claims_the_runs_cannot_decide_are_not_testable_rather_than_not_supported():
    """One run per σ band (the least one-sided Mann-Whitney p is 0.5), no large-σ run at all, or one σ:
    no outcome could support the claim, so the report must not call it 'not supported'."""
    empty = pd.DataFrame(columns=["view", "layer", "is_last", "sigma"])
    one_each = pd.DataFrame([{"run": "a", "group": "sigma", "pe": "learned", "sigma": 0.1, "seed": 0, "ood_acc": 0.3,
                              "epochs": 40},
                             {"run": "b", "group": "sigma", "pe": "learned", "sigma": 2.0, "seed": 0, "ood_acc": 0.31,
                              "epochs": 40}])
    out = V.verdicts(one_each, empty)
    large = next(v for v in out if v.startswith("**Large σ hurts"))
    assert "not testable with these runs (n = 1 vs 1: the smallest one-sided Mann-Whitney p possible is 0.5)" in large
    assert "not testable" in next(v for v in out if v.startswith("**Smaller σ is better"))
    small_only = one_each.assign(sigma=0.1)
    large = next(v for v in V.verdicts(small_only, empty) if v.startswith("**Large σ hurts"))
    assert "not testable with these runs (a σ band has no runs)" in large and "n/a for σ ≥ 1.5" in large
    # enough runs: decided as before
    sr = _sigma_runs(lambda s, i: (0.9 if s <= 0.2 else 0.3) + 0.01 * i)
    decided = next(v for v in V.verdicts(sr, empty) if v.startswith("**Large σ hurts"))
    assert ": supported." in decided
    assert V.geometry_state(_view(lambda s, i: 0.1, seeds=1).iloc[:1])["state"].startswith("not testable")


def test_the_training_trend_sentence_says_when_the_raw_table_fell():
    """A review found "the raw table's RSA does not change detectably" printed right after "fell for the raw
    table ... p = 3.3e-05"."""
    from analyses.lst.verdicts import answer

    rng = np.random.default_rng(0)
    rows = []
    for run in range(5):
        for epoch in (5, 40):
            late = epoch == 40
            for view, layer, rsa in (("raw", "mean", 0.4 - 0.2 * late), ("raw", "0", 0.3 - 0.2 * late),
                                     ("qk", "0", 0.1 + 0.2 * late)):
                rows.append({"run": f"r{run}", "sigma": 0.1, "epoch": epoch, "view": view, "layer": layer,
                             "is_last": late, "rsa_spearman": rsa + rng.normal(0, 0.01),
                             "ref_shape_distance": np.nan, "eval_ood_acc": 0.9})
    text = answer(pd.DataFrame(rows))
    assert "fell for the raw table" in text
    assert "falls in the raw table (mean of layers) and raw table, layer 0" in text
    assert "does not change detectably" not in text and "not detectably in" not in text


def test_the_training_trend_sentence_names_the_views_that_did_not_rise_and_the_bonferroni_survivors():
    """The committed LST report said "both the raw table and what the model reads gain grid geometry" when only layer
    0's raw table rose (the mean of layers did not change) and that rise failed a Bonferroni correction."""
    from analyses.lst.verdicts import answer

    rng = np.random.default_rng(1)
    rows = []
    # raw mean: flat; raw layer 0: a small rise (uncorrected p between 0.01 and 0.05); qk: a large clear rise
    steps = {("raw", "mean"): [0.0] * 8, ("raw", "0"): [0.05, 0.12, -0.03, 0.09, 0.02, 0.07, -0.01, 0.11],
             ("qk", "0"): [0.2 + 0.01 * i for i in range(8)]}
    for run in range(8):
        for epoch in (5, 40):
            late = epoch == 40
            for (view, layer), rise in steps.items():
                rows.append({"run": f"r{run}", "sigma": 0.1, "epoch": epoch, "view": view, "layer": layer,
                             "is_last": late, "rsa_spearman": 0.2 + late * rise[run] + rng.normal(0, 1e-3),
                             "ref_shape_distance": np.nan, "eval_ood_acc": 0.9})
    d = pd.DataFrame(rows)
    p_layer0 = SS.rsa_change(d[(d.view == "raw") & (d.layer == "0")], 5, 40)["t_p"]
    assert 0.05 / 3 < p_layer0 < 0.05  # the case under test: significant alone, not after the correction
    text = answer(d)
    assert "both the raw table and what the model reads" not in text
    assert "RSA rises in the raw table, layer 0 and qk view, layer 0 (uncorrected p < 0.05)" in text
    assert "not detectably in the raw table (mean of layers)" in text
    assert "With a Bonferroni correction for the 3 views (p < 0.017) the rise holds in the qk view, layer 0." in text


# ---- each verdict rule at the condition its criteria text names (a mutation audit dropped each one unnoticed)

NO_ANALYSIS = pd.DataFrame(columns=["view", "layer", "is_last", "sigma"])


def _verdict_line(runs: pd.DataFrame, start: str) -> str:
    return next(v for v in V.verdicts(runs, NO_ANALYSIS) if v.startswith(start))


def test_weight_decay_needs_three_seeds_to_be_supported():
    assert not V.wd_state(_paired([0.95, 0.96], [0.90, 0.909]), 0.065).startswith("supported")  # 2 seeds, t p ~ 0.006


def test_large_sigma_hurts_needs_a_10_point_gap():
    runs = _sigma_runs(lambda s, i: (0.36 if s <= 0.2 else 0.30) + 0.01 * i)  # 6 points apart, Mann-Whitney p tiny
    assert ": not supported." in _verdict_line(runs, "**Large σ hurts")


def test_large_sigma_hurts_reports_the_one_sided_mann_whitney_p():
    from scipy import stats

    runs = _sigma_runs(lambda s, i: (0.9 if s <= 0.2 else 0.3) + 0.05 * ((i * 7 + int(s * 100)) % 5))
    p = stats.mannwhitneyu(runs[runs.sigma <= 0.2].ood_acc, runs[runs.sigma >= 1.5].ood_acc, alternative="greater").pvalue
    assert f"one-sided Mann-Whitney p = {SS.fp(p)}" in _verdict_line(runs, "**Large σ hurts")


def test_the_sinusoid_is_compared_with_the_sigma_of_highest_mean():
    runs = _sigma_runs(lambda s, i: 0.95 - 0.2 * abs(s - 0.1) + 0.001 * i)  # best mean at σ = 0.1
    sin = pd.DataFrame([{"run": f"sin-{i}", "group": "pe_type", "pe": "sin2d", "sigma": np.nan, "seed": i,
                         "ood_acc": 0.97, "control": "none", "epochs": 40} for i in range(4)])
    runs = pd.concat([runs.assign(pe="learned", control="none", epochs=40), sin])
    assert "highest mean (σ = 0.1)" in _verdict_line(runs, "**The 2D sinusoid")


def test_weight_decay_arms_are_at_chance_when_their_intervals_reach_chance():
    rows = []
    for seed, (plain, wd) in enumerate([(0.20, 0.22), (0.40, 0.38), (0.24, 0.30)]):  # means 0.28-0.30 > 0.25, but
        common = {"group": "sigma", "pe": "learned", "sigma": 0.1, "seed": seed, "epochs": 40}  # t-intervals reach far below
        rows += [{**common, "run": f"s-{seed}", "control": "none", "ood_acc": plain},
                 {**common, "run": f"wd-{seed}", "group": "control", "control": "wd0.1", "ood_acc": wd}]
    assert ": not informative (" in _verdict_line(pd.DataFrame(rows), "**Weight decay helps")


def test_smaller_sigma_is_not_better_throughout_when_it_rises_over_small_sigma():
    """A grid whose large σ fail has a negative whole-grid ρ; a significant rise over σ <= 0.5 still contradicts
    'better throughout' (the 8-seed sweep: ρ = -0.31, p = 0.005, beside a rise over small σ at p = 1.6e-5)."""
    rising_then_failing = _sigma_runs(lambda s, i: (0.7 + 0.4 * s if s <= 0.5 else 0.9 - 0.3 * s) + 0.001 * i)
    rho, p, _ = SS.spearman(rising_then_failing.sigma, rising_then_failing.ood_acc)
    assert rho < 0 and p < 0.05  # the whole grid falls
    line = _verdict_line(rising_then_failing, "**Smaller σ is better")
    assert ": not supported: accuracy falls with σ over the whole grid but rises with σ over σ ≤ 0.5.**" in line
    assert "over σ ≤ 0.5, held-out accuracy rises with σ" in line
    falling = _sigma_runs(lambda s, i: 0.9 - 0.3 * s + 0.001 * i)
    assert ": supported.**" in _verdict_line(falling, "**Smaller σ is better")
    flat_small = _sigma_runs(lambda s, i: (0.9 if s <= 0.5 else 0.9 - 0.3 * s) + 0.01 * (i % 2))
    assert ": supported.**" in _verdict_line(flat_small, "**Smaller σ is better")  # no rise over small σ: supported


def test_smaller_sigma_is_not_better_when_accuracy_rises_with_sigma():
    runs = _sigma_runs(lambda s, i: 0.3 + 0.3 * s + 0.001 * i)
    assert ": not supported.**" in _verdict_line(runs, "**Smaller σ is better")


# ---- the report's tables, value by value

def _accuracy_runs() -> pd.DataFrame:
    rows = []
    for seed in range(3):
        for s, acc in ((0.1, 0.9), (2.0, 0.3)):
            rows.append({"run": f"s{s}-{seed}", "group": "sigma", "pe": "learned", "sigma": s, "control": "none",
                         "seed": seed, "train_acc": 1.0, "test_acc": 0.5, "ood_acc": acc + 0.01 * seed,
                         **{f"ood_acc_{lv}": acc for lv in ("binary", "ternary", "quaternary")}})
    return pd.DataFrame(rows)


def _raw_mean_row(s: float, seed: int, **fields) -> dict:
    """One analysis row of run ``s{s}-{seed}``'s raw mean-of-layers table: ``fields`` plus NaN for the other metrics."""
    others = ("recovery_cmds_r2", "probe_r2", "ref_shape_distance", "ref_procrustes_distance", "kernel_distance_rho",
              "attention_similarity")
    return {"run": f"s{s}-{seed}", "view": "raw", "layer": "mean", "sigma": s, "seed": seed,
            **dict.fromkeys(others, np.nan), **fields}


def _analysis_rows() -> pd.DataFrame:
    rows = []
    for s, rsa in ((0.1, 0.8), (1.0, 0.5), (2.0, 0.1)):
        for seed in range(3):
            for epoch, grow in ((5, 0.0), (10, 0.1), (40, -0.05)):
                rows.append(_raw_mean_row(s, seed, is_last=epoch == 40, epoch=epoch, rsa_spearman=rsa + grow + 0.01 * seed,
                                          rsa_p=0.01, eval_ood_acc=0.9 - 0.3 * s))
    return pd.DataFrame(rows)


def test_accuracy_table_columns_hold_their_own_accuracy():
    t = T.accuracy_table(_accuracy_runs(), "sigma").set_index("sigma")
    assert t.loc["0.1", "train %"].startswith("100.0") and t.loc["0.1", "test %"].startswith("50.0")
    assert t.loc["0.1", "OOD %"].startswith("91.0") and t.loc["2", "OOD %"].startswith("31.0")


def test_paired_table_differences_are_a_minus_b():
    row = T.paired_table(_accuracy_runs()).iloc[0]
    assert (row["A"], row["B"]) == ("learned σ=0.1", "learned σ=2.0")
    assert row["paired mean A / B (%)"] == "91.0 / 31.0" and row["mean OOD diff A-B (points)"] == "60"


def test_ident_table_means_at_the_smallest_and_largest_sigma():
    t = T.ident_table(_analysis_rows())
    row = t[(t.view == "raw table (mean of layers)") & (t.metric == "rsa_spearman")].iloc[0]
    assert row["σ=0.1 mean"] == "0.76" and row["σ=2 mean"] == "0.06"  # last checkpoints: 0.8 - 0.05 + seeds' 0.01


def test_trajectory_summary_names_the_epoch_of_the_maximum():
    t = T.trajectory_summary(_analysis_rows())
    row = t[(t.view == "raw:mean") & (t["σ band"] == "σ ≤ 0.2")].iloc[0]
    assert row["epoch of max"] == 10 and row["max over epochs"] == "0.91"


def test_view_rows_keep_the_last_checkpoint_unless_asked():
    from analyses.lst.selection import view_rows

    last = view_rows(_analysis_rows(), "raw", "mean")
    assert len(last) == 9 and last.is_last.all() and set(last.epoch) == {40}
    assert len(view_rows(_analysis_rows(), "raw", "mean", last=False)) == 27


def test_input_only_placement_runs_are_labelled_so():
    from analyses.lst.selection import label_runs

    runs = pd.DataFrame([{"run": "a", "group": "placement", "pe": "learned", "sigma": 2.0, "control": "none"},
                         {"run": "b", "group": "sigma", "pe": "learned", "sigma": 2.0, "control": "none"}])
    assert label_runs(runs).label.tolist() == ["learned N(0,2²), input only", "learned N(0,2²), every layer"]


# (sigma, seed) -> Mantel p of the raw-table RSA at the last checkpoint
MANTEL_P = {(0.1, 0): 0.01, (0.1, 1): 0.07, (0.2, 0): 0.04, (0.2, 1): 0.05,
     (1.0, 0): 0.2, (1.0, 1): 0.06, (2.0, 0): 0.03, (2.0, 1): 0.5}


def _mantel_rows() -> pd.DataFrame:
    return pd.DataFrame([_raw_mean_row(s, seed, is_last=True, rsa_spearman=0.5 - 0.1 * s + 0.01 * seed, rsa_p=p,
                                       eval_ood_acc=0.9 - 0.1 * s) for (s, seed), p in MANTEL_P.items()])


def test_ident_table_mantel_shares_count_p_below_0_05_strictly():
    t = T.ident_table(_mantel_rows())
    row = t[(t.view == "raw table (mean of layers)") & (t.metric == "rsa_spearman")].iloc[0]
    # all sigma: 0.01, 0.04, 0.03 of 8 runs (0.05 itself is not below 0.05)
    assert row["share Mantel p<0.05, all σ (8 runs)"] == "0.38"
    # sigma <= 0.2: 0.01, 0.04 of 4 runs
    assert row["share Mantel p<0.05, σ ≤ 0.2 (4 runs)"] == "0.50"


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_paired_wilcoxon_p_is_two_sided(sign):
    idx = range(5)
    b = pd.Series([0.5, 0.4, 0.6, 0.3, 0.7], index=idx)
    a = b + sign * pd.Series([0.01, 0.02, 0.03, 0.04, 0.05], index=idx)  # every seed on one side, distinct gaps
    from scipy import stats

    out = SS.paired_test(a, b)
    # exact signed-rank null over 2^5 sign patterns: the extreme pattern on either side, p = 2 / 32
    assert out["wilcoxon_p"] == pytest.approx(2 / 32)
    assert out["wilcoxon_p"] == pytest.approx(stats.wilcoxon(a, b, alternative="two-sided").pvalue)
    assert out["t_p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)


def test_the_wilcoxon_p_ranks_paired_differences_by_puzzles_not_by_float32_noise():
    """Accuracies are k/108 stored as float32: equal differences (and +2 vs -2 puzzles) came out ~1e-7 apart and the
    signed-rank test ordered them by that noise (p 0.16 for the wd 0.1 row of the LST report; 0.19 on whole puzzles)."""
    from scipy import stats

    k = np.array([-2, 6, 0, 3, 6, -4, 2, 20])
    base = np.array([30, 41, 55, 27, 60, 70, 33, 40])
    a = pd.Series(((base + k) / 108).astype(np.float32)).astype(float)
    b = pd.Series((base / 108).astype(np.float32)).astype(float)
    assert SS.paired_test(a, b)["wilcoxon_p"] == pytest.approx(stats.wilcoxon(k).pvalue, rel=1e-12)
    merged = SS.merge_near_ties(np.array([2 + 1e-8, -2.0, 1e-9, -3.0, 3 - 2e-7, 5.0]))
    assert merged[2] == 0 and abs(merged[0]) == abs(merged[1]) and abs(merged[3]) == abs(merged[4])
    assert np.sign(merged).tolist() == [1, -1, 0, -1, 1, 1] and merged[5] == 5.0
