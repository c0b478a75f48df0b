"""Verdict levels, the at-chance rule, interval clipping and the linear baseline of the netsim / brain reports."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analyses.netsim.sweep import (DISAGREE, HOLDS, OPPOSITE, above_chance_text, chance_summary, clip_interval,
                                   deterministic_labels, fmt, layer_levels, layer_summary, layer_table, metric_range,
                                   opposite_direction, same_direction, summarise, t_interval, tables_at_chance,
                                   verdict_level)
from analyses.netsim.report import clip_to_positive_definite, every_pe_beats_none, stationary_covariance


# ---- verdict levels -------------------------------------------------------------------------------

def test_holds_when_intervals_separate_in_the_claimed_direction():
    assert verdict_level([0.10, 0.11], [0.50, 0.51], "lower") == HOLDS
    assert verdict_level([0.50, 0.51], [0.10, 0.11], "higher") == HOLDS


def test_opposite_when_intervals_separate_the_other_way():
    assert verdict_level([0.50, 0.51], [0.10, 0.11], "lower") == OPPOSITE
    assert verdict_level([0.10, 0.11], [0.50, 0.51], "higher") == OPPOSITE


def test_inconclusive_same_direction_when_every_seed_agrees_but_intervals_overlap():
    # t(1) = 12.7: spread 0.1 gives half-width ~0.64, so the intervals overlap
    a, b = [0.40, 0.50], [0.55, 0.65]
    assert verdict_level(a, b, "lower") == same_direction(2)
    assert verdict_level(a, b, "higher") == opposite_direction(2)
    assert same_direction(2) == "inconclusive (2 seeds): same direction in every seed"


def test_inconclusive_seeds_disagree():
    assert verdict_level([0.40, 0.70], [0.50, 0.60], "lower") == DISAGREE
    assert verdict_level([0.50, 0.50], [0.50, 0.50], "lower") == DISAGREE  # ties are no direction
    assert DISAGREE == "inconclusive: seeds disagree"


def test_single_values_fall_back_to_the_seed_comparison():
    assert verdict_level([0.4], [0.5], "lower") == same_direction(1)


def test_verdict_level_rejects_bad_input():
    with pytest.raises(ValueError):
        verdict_level([0.1, 0.2], [0.3, 0.4], "better")
    with pytest.raises(ValueError):
        verdict_level([float("nan")], [0.3], "lower")


def test_clipping_inside_verdict_level_keeps_the_levels():
    # raw intervals reach past 1 on both sides of the bound; clipped they still overlap
    a, b = [0.5, 0.6], [0.9, 0.99]
    assert verdict_level(a, b, "lower", (-1.0, 1.0)) == same_direction(2)


# ---- the at-chance rule ---------------------------------------------------------------------------

def test_tables_at_chance_rule():
    assert tables_at_chance([0.06, 0.155, 0.05, 0.3], [-0.1, -0.05, -0.001, -0.2])  # p = alpha is not < alpha
    assert not tables_at_chance([0.06, 0.04], [-0.1, -0.05])  # one significant Mantel test
    assert not tables_at_chance([0.06, 0.2], [-0.1, 0.01])  # one probe better than the mean
    with pytest.raises(ValueError):
        tables_at_chance([], [])


def runs_frame(rsa_p, probe_r2) -> pd.DataFrame:
    n = len(rsa_p)
    return pd.DataFrame({"label": [f"learned σ={s}" for s in range(n)], "pe": "learned", "sigma": range(n),
                         "seed": 0, "rsa_spearman": np.linspace(0.02, 0.07, n), "rsa_p": rsa_p,
                         "probe_r2": probe_r2, "null_rsa_mean": -0.01})


def test_chance_summary_reports_the_numbers():
    at, text = chance_summary(runs_frame([0.06, 0.3], [-0.1, -0.02]))
    assert at
    assert "Mantel p 0.060 to 0.300 (0 runs with p < 0.05)" in text
    assert "probe R2 -0.100 to -0.020 (0 runs with R2 >= 0)" in text
    at, _ = chance_summary(runs_frame([0.005, 0.3], [0.2, -0.02]))
    assert not at


def test_above_chance_text():
    assert above_chance_text(np.array([0.005, 0.01])).startswith("**yes, in every seed**")
    assert above_chance_text(np.array([0.005, 0.06])).startswith("**no**: 1 of 2 seeds")


# ---- interval clipping ----------------------------------------------------------------------------

def test_clip_interval_and_ranges():
    assert clip_interval(-0.074, 1.244, (-1.0, 1.0)) == (-0.074, 1.0, False, True)
    assert clip_interval(-1.5, 0.2, (-1.0, 1.0)) == (-1.0, 0.2, True, False)
    lo, hi, c1, c2 = clip_interval(float("nan"), float("nan"), (-1.0, 1.0))
    assert math.isnan(lo) and math.isnan(hi) and not c1 and not c2
    assert metric_range("rsa_fc_spearman") == (-1.0, 1.0)
    assert metric_range("probe_r2") == (-math.inf, 1.0)
    assert metric_range("ood_mse") == (0.0, math.inf)
    assert metric_range("ood_rel") == (0.0, math.inf)
    assert metric_range("ood_train_gap") == (-math.inf, math.inf)  # a difference of MSEs can be negative


def test_fmt_marks_clipped_ends_and_leaves_others():
    row = pd.Series({"rsa_fc_spearman": 0.585, "rsa_fc_spearman_lo": -0.074, "rsa_fc_spearman_hi": 1.244,
                     "ood_train_gap": 0.09, "ood_train_gap_lo": -0.032, "ood_train_gap_hi": 0.212})
    assert fmt(row, "rsa_fc_spearman") == "0.585 [-0.074, 1.000†]"
    assert fmt(row, "ood_train_gap") == "0.090 [-0.032, 0.212]"


def test_deterministic_labels_and_summarise():
    df = pd.DataFrame({"label": ["sin", "sin", "l", "l"], "pe": ["sin2d", "sin2d", "learned", "learned"],
                       "sigma": [np.nan, np.nan, 0.1, 0.1], "seed": [0, 1, 0, 1],
                       "rsa_spearman": [0.5, 0.5, 0.1, 0.9]})
    assert deterministic_labels(df, ["rsa_spearman"]) == ["sin"]
    s = summarise(df, ["rsa_spearman"]).set_index("label")
    assert s.loc["sin", "rsa_spearman_lo"] == s.loc["sin", "rsa_spearman_hi"] == 0.5
    assert s.loc["l", "rsa_spearman_hi"] > 1.0  # summary keeps the raw t-interval; tables clip it


# ---- linear-Gaussian baseline ---------------------------------------------------------------------

def test_conditional_mean_recovers_a_copied_node_and_falls_back_to_the_mean():
    from analyses.netsim.report import conditional_mean_mse, stationary_covariance

    rng = np.random.default_rng(0)
    m, t = 400, 4
    z = rng.normal(size=(m, 1, t))
    indep = rng.normal(size=(m, 1, t))
    x = np.concatenate([z, z + 1e-3 * rng.normal(size=(m, 1, t)), indep], axis=1)  # node 1 copies node 0
    mu, cov = stationary_covariance(x)
    assert cov.shape == (3 * t, 3 * t)
    assert np.allclose(cov, cov.T)
    mask = np.zeros((m, 3), dtype=bool)
    mask[:, 1] = True  # predict the copy from the original
    mse, zero = conditional_mean_mse(mu, cov, x, mask)
    assert mse < 1e-3 * zero
    mask = np.zeros((m, 3), dtype=bool)
    mask[:, 2] = True  # an independent node: no better than its mean
    mse, zero = conditional_mean_mse(mu, cov, x, mask)
    assert mse == pytest.approx(zero, rel=0.05)


def test_clip_to_positive_definite_leaves_a_positive_definite_matrix_untouched_and_repairs_a_small_sample():
    from analyses.netsim.report import clip_to_positive_definite, conditional_mean_mse, stationary_covariance

    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    pd_cov = a @ a.T + np.eye(6)
    same, n = clip_to_positive_definite(pd_cov)
    assert n == 0 and same is pd_cov  # bit for bit: the committed reports' baselines do not move

    x = rng.normal(size=(3, 4, 6))  # 3 windows of 4 nodes x 6 steps: the per-lag estimate is indefinite
    mu, cov = stationary_covariance(x)
    assert np.linalg.eigvalsh(cov).min() < 0
    mask = np.zeros((3, 4), dtype=bool)
    mask[:, 0] = True
    with pytest.raises(Exception):  # what the baseline hit before: Cholesky of an indefinite matrix
        conditional_mean_mse(mu, cov, x, mask)
    fixed, n = clip_to_positive_definite(cov)
    lam = np.linalg.eigvalsh(cov)
    assert n == int((lam <= 1e-9 * lam.max()).sum()) > 0
    assert np.allclose(fixed, fixed.T) and np.linalg.eigvalsh(fixed).min() > 0
    keep = lam > 1e-9 * lam.max()  # the positive part of the spectrum is kept
    assert np.allclose(np.sort(np.linalg.eigvalsh(fixed))[-keep.sum():], lam[keep])
    mse, zero = conditional_mean_mse(mu, fixed, x, mask)
    assert np.isfinite(mse) and zero > 0


def test_clipped_note_only_when_eigenvalues_were_raised():
    from analyses.netsim.report import clipped_note

    assert clipped_note({"covariance_eigenvalues_clipped": 0, "covariance_size": 8}) == ""
    assert clipped_note({}) == ""
    assert "(3 of 8 eigenvalues at or below zero" in clipped_note({"covariance_eigenvalues_clipped": 3,
                                                                  "covariance_size": 8})


# ---- report text --------------------------------------------------------------------------------

def netsim_frame(rsa_p: float, probe_r2: float) -> pd.DataFrame:
    rows = []
    spec = {"learned σ=0.1": ("learned", 0.1, 0.914, 0.96), "learned σ=2": ("learned", 2.0, 0.900, 0.97),
            "sin2d": ("sin2d", np.nan, 0.892, 0.96), "none": ("none", np.nan, 0.951, 0.99)}
    for label, (pe, sigma, test, ood) in spec.items():
        for seed, eps in enumerate((-0.0005, 0.0005)):
            r = {"label": label, "pe": pe, "sigma": sigma, "seed": seed, "run": f"no-such-runs/{label}-seed{seed}",
                 "test_rel": test + eps, "ood_rel": ood + 20 * eps, "ood_noise_rel": ood + eps, "test_mse": test + eps, "ood_mse": ood,
                 "ood_mse_noise": 3.6}
            if pe != "none":
                fixed = pe == "sin2d"
                r.update(rsa_spearman=0.567 if fixed else 0.04 + eps, rsa_p=0.005 if fixed else rsa_p,
                         probe_r2=1.0 if fixed else probe_r2, recovery_smacof_r2=0.5, trustworthiness=0.6,
                         null_rsa_mean=-0.006, pe_table="blocks.0.pe.table", pe_n_tables=2)
            rows.append(r)
    return pd.DataFrame(rows)


def layer_frame(df: pd.DataFrame, layer1_rsa: dict[str, float]) -> pd.DataFrame:
    """`analyse_sweep`'s layer rows for a `netsim_frame`: layer 0 as in ``df``, layer 1 with the RSA given per
    condition (same spread over seeds)."""
    keys = ["label", "pe", "sigma", "seed", "rsa_spearman", "rsa_p", "probe_r2", "recovery_smacof_r2"]
    first = df[df.pe != "none"][keys].assign(layer=0)
    second = first.assign(layer=1, rsa_spearman=first["label"].map(layer1_rsa) + 0.01 * first["seed"], rsa_p=0.005)
    return pd.concat([first, second], ignore_index=True)


def netsim_readme(df: pd.DataFrame) -> str:
    from analyses.netsim.report import LAYER_COLS, LINEAR, ROOT, SCALES, parser, readme
    from analyses.netsim.sweep import make_plan
    from trainers.config import make_masked_config

    cols = ["test_mse", "ood_mse", "ood_mse_noise", "test_rel", "ood_rel", "ood_noise_rel", "rsa_spearman",
            "recovery_smacof_r2", "probe_r2", "trustworthiness"]
    s = summarise(df, cols)
    base = {"ood_reuses_test_windows": True, "test_rel": 0.86, "ood_rel": 0.93, "ood_noise_rel": 0.94}
    base_row = pd.DataFrame([{"label": LINEAR, "pe": "baseline", "sigma": np.nan, "n_seeds": 0, **base}])
    geo = {"fc_distance_spearman": -0.5, "fc_nearest_mean": 0.17, "fc_all_mean": 0.06}
    layers = layer_frame(df, {"learned σ=0.1": 0.30, "learned σ=2": 0.10, "sin2d": 0.567})
    p = parser()
    plan = make_plan(p, p.parse_args([]), SCALES, ROOT)
    return readme(df, s, geo, geo, make_masked_config("netsim", "quick"), base, base_row, plan, layers,
                  layer_summary(layers, [c for c, _ in LAYER_COLS]))


def test_netsim_readme_levels_follow_the_data():
    text = netsim_readme(netsim_frame(rsa_p=0.2, probe_r2=-0.05))
    claims = text[text.index("## Which claims hold here"):]
    assert "encode the layout better than large-σ ones: **not testable in this pilot**" in claims
    assert "50%-masked test: **opposite**" in claims  # σ=0.1 worse than σ=2 on test
    assert "The picture is mixed" in claims
    assert "or the opposite" not in text
    assert "ceiling" not in text.replace("not a ceiling", "")
    assert "the `test` windows again" in text
    assert "better than every transformer run on every held-out split" in text
    # layer 0 at chance, layer 1 (synthetic) far above it: each layer gets its own level
    assert ("layer by layer (RSA, σ=0.1 vs σ=2): layer 0: **not testable: every learned table at chance** "
            "(0.040 [0.034, 0.046] vs 0.040 [0.034, 0.046]); layer 1: **holds** (0.305 [0.241, 0.369] vs "
            "0.105 [0.041, 0.169])") in claims
    assert "| PE | RSA, layer 0 | RSA, layer 1 | SMACOF r2, layer 0 |" in text
    text = netsim_readme(netsim_frame(rsa_p=0.005, probe_r2=0.3))
    assert "not testable" not in text[text.index("## Which claims hold here"):].replace("*not testable* here", "")


def test_the_readme_names_the_machine_and_commit_that_trained_the_runs(tmp_path):
    """One run's MSEs move with the CPU's kernels, so the report says which machine and code made them."""
    import json

    df = netsim_frame(rsa_p=0.005, probe_r2=0.3)
    assert "not recorded (none of the 8 runs has a provenance.jsonl)" in netsim_readme(df)
    runs = []
    for i, name in enumerate(f"{r.label}-seed{r.seed}" for r in df.itertuples()):
        run = tmp_path / name
        run.mkdir()
        kernels = "AVX2" if i < 6 else "AVX512"
        (run / "provenance.jsonl").write_text(json.dumps(
            {"git_commit": "e318ab06b9eb", "git_dirty": False, "torch": "2.13.0+cpu", "python": "3.11.7",
             "cpu": "AMD EPYC", "logical_cpus": 2, "cpu_kernels": kernels, "device": "cpu", "torch_threads": 1}) + "\n")
        runs.append(str(run))
    text = netsim_readme(df.assign(run=runs))
    line = next(ln for ln in text.splitlines() if ln.startswith("**Machine and code**"))
    assert "CPU AMD EPYC; logical CPUs 2; torch CPU kernels AVX2 (6 runs), AVX512 (2 runs); device cpu" in line
    assert line.endswith("Trainer code (git commit per run): e318ab0: 8 runs.")
    assert "not recorded" not in line


def test_brain_fc_vs_distance_per_seed():
    from analyses.brain.report import fc_vs_distance_per_seed

    df = pd.DataFrame({"label": "a", "seed": [0, 1], "rsa_spearman": [0.45, 0.43], "rsa_fc_spearman": [0.53, 0.40],
                       "rsa_dist_given_fc": [0.40, 0.38], "rsa_fc_given_dist": [0.50, 0.61]})
    out = fc_vs_distance_per_seed(df, "a")
    assert out.startswith("FC more than distance in 1 of 2 seeds by raw RSA (**inconclusive: seeds disagree**) and "
                          "2 of 2 by partial RSA (**inconclusive (2 seeds): same direction in every seed**)")
    assert ("seed 0: RSA vs 1 - FC 0.530 vs RSA vs distance 0.450 (more), partial FC given dist 0.500 vs dist given FC "
            "0.400 (more); seed 1: RSA vs 1 - FC 0.400 vs RSA vs distance 0.430 (not more), partial FC given dist 0.610 "
            "vs dist given FC 0.380 (more)") in out


def test_brain_partial_rsas_hold_out_the_right_variable():
    """rsa_dist_given_fc is the PE's RSA with distance with FC held out (and not the other way round), checked
    against the textbook partial correlation of the Spearman correlations."""
    from scipy.spatial.distance import pdist, squareform
    from scipy.stats import spearmanr

    from analyses.brain.report import partial_spearman, pe_vs_fc

    rng = np.random.default_rng(0)
    coords = rng.normal(size=(30, 3))
    table = np.hstack([coords, np.zeros((30, 2))]) + 0.05 * rng.normal(size=(30, 5))  # follows distance, not FC
    fc = np.corrcoef(rng.normal(size=(30, 50)))  # unrelated to both
    got = pe_vs_fc(table, fc, coords)
    assert got["rsa_dist_given_fc"] > 0.8 and abs(got["rsa_fc_given_dist"]) < 0.2

    a, b, c = pdist(table), pdist(coords), squareform(1 - fc, checks=False)
    r = lambda x, y: spearmanr(x, y)[0]  # noqa: E731
    textbook = (r(a, b) - r(a, c) * r(b, c)) / np.sqrt((1 - r(a, c) ** 2) * (1 - r(b, c) ** 2))
    assert partial_spearman(a, b, c) == pytest.approx(textbook, abs=1e-10)


@pytest.mark.parametrize("module", ["analyses.netsim.report", "analyses.brain.report"])
def test_report_scales_name_real_presets_and_bad_options_are_one_line_errors(module, capsys):
    """Each scale of the netsim / brain reports trains an existing preset into its own runs / report folders;
    a bad --scale or --workers is a one-line usage error (exit 2) before anything is trained or written."""
    import importlib

    from trainers.config import MASKED_PRESETS

    mod = importlib.import_module(module)
    task = module.split(".")[1]
    assert {s.preset for s in mod.SCALES.values()} <= set(MASKED_PRESETS[task])
    assert len({s.runs for s in mod.SCALES.values()}) == len({s.out for s in mod.SCALES.values()}) == len(mod.SCALES)
    for argv in (["--scale", "huge"], ["--workers", "0"]):
        with pytest.raises(SystemExit) as e:
            mod.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("module", ["analyses.netsim.report", "analyses.brain.report"])
def test_no_train_refuses_missing_runs_before_writing_anything(module, tmp_path, capsys):
    import importlib

    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as e:
        mod.main(["--no-train", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "report")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "--no-train:" in err and "missing or unfinished" in err
    assert not (tmp_path / "report").exists() and not (tmp_path / "runs").exists()


def test_untrained_runs_are_the_missing_unfinished_and_unreadable_ones(tmp_path):
    import torch

    from analyses.netsim.sweep import conditions, untrained_runs
    from trainers.config import make_masked_config

    epochs = make_masked_config("netsim", "quick").optim.epochs
    conds = conditions([0.1], ["sin2d"])
    state = {"learned-s0.1-seed0": epochs, "learned-s0.1-seed1": epochs - 1, "sin2d-seed0": "corrupt"}
    for name, epoch in state.items():  # sin2d-seed1 has no folder at all
        (tmp_path / name).mkdir()
        if epoch == "corrupt":
            (tmp_path / name / "last.pt").write_bytes(b"not a checkpoint")
        else:
            torch.save({"epoch": epoch}, tmp_path / name / "last.pt")
    missing = untrained_runs("netsim", tmp_path, conds, [0, 1], "quick")
    assert [m.name for m in missing] == ["learned-s0.1-seed1", "sin2d-seed0", "sin2d-seed1"]


# ---- every layer's table ---------------------------------------------------------------------------

def test_layer_levels_and_table_are_per_layer(tmp_path):
    rows = []
    for layer, (a, b) in enumerate([(0.50, 0.10), (0.10, 0.50), (0.02, 0.01)]):  # holds, opposite, at chance
        for seed in range(3):
            for label, sigma, rsa in (("small", 0.1, a), ("large", 2.0, b)):
                chance = layer == 2
                rows.append({"label": label, "pe": "learned", "sigma": sigma, "seed": seed, "layer": layer,
                             "rsa_spearman": rsa + 0.01 * seed, "rsa_p": 0.4 if chance else 0.005,
                             "probe_r2": -0.1 if chance else 0.5})
    layers = pd.DataFrame(rows)
    summ = layer_summary(layers, ["rsa_spearman", "probe_r2"])
    assert sorted(summ.layer.unique()) == [0, 1, 2] and len(summ) == 6
    assert summ.set_index(["layer", "label"]).loc[(1, "large"), "rsa_spearman"] == pytest.approx(0.51)
    text = layer_levels(layers, summ, "small", "large", "rsa_spearman", "higher")
    parts = text.split("; ")
    assert parts[0].startswith(f"layer 0: **{HOLDS}** (0.510 [")
    assert parts[1].startswith(f"layer 1: **{OPPOSITE}** (0.110 [")
    assert parts[2].startswith("layer 2: **not testable: every learned table at chance**")
    table = layer_table(summ, [("rsa_spearman", "RSA"), ("probe_r2", "probe R2")]).splitlines()
    assert table[0] == "| PE | RSA, layer 0 | RSA, layer 1 | RSA, layer 2 | probe R2, layer 0 | probe R2, layer 1 | probe R2, layer 2 |"
    assert [r.split(" | ")[0] for r in table[2:]] == ["| small", "| large"]
    assert table[2].split(" | ")[1] == fmt(summ[(summ.layer == 0) & (summ.label == "small")].iloc[0], "rsa_spearman")
    from analyses.netsim.sweep import layer_figure

    fixed = pd.DataFrame([{"label": "sin", "pe": "sin2d", "sigma": np.nan, "seed": s, "layer": k, "rsa_spearman": 0.6,
                           "rsa_p": 0.005, "probe_r2": 1.0} for k in range(3) for s in range(3)])
    both = pd.concat([layers, fixed], ignore_index=True)
    layer_figure(both, layer_summary(both, ["rsa_spearman", "probe_r2"]), tmp_path / "f.png",
                 [("rsa_spearman", "RSA"), ("probe_r2", "probe R2")])
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_analyse_sweep_reads_every_layer_table(tmp_path):
    """Two tiny netsim runs (learned, none): the learned run's two per-layer tables are each analysed, layer 0's
    metrics are the run's headline ones, layer 1's match an independent `analyze` of that table, ``extra`` is
    applied to every table and the run without a PE has no rows."""
    from analyses.netsim.sweep import analyse_sweep, conditions, run_sweep
    from pe_probe.analysis import analyze
    from pe_probe.io import load_table

    tiny = {"model.d_model": 16, "optim.epochs": 1, "optim.batch_size": 32, "data.n_train": 64, "data.n_test": 32,
            "eval_every": 1, "ckpt_every": 1}
    conds = [c for c in conditions([0.1], ["none"])]
    df = pd.DataFrame(run_sweep("netsim", tmp_path, conds, [0], tiny, log=lambda s: None))
    seen = []

    def extra(res):
        seen.append(res.table.copy())
        return {"n_rows": float(len(res.table))}

    lines = []
    out, layers, seed0 = analyse_sweep(df, extra, n_perm=19, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("  analysed [1/1] learned-s0.1-seed0: 2 PE table(s), layer-0 RSA ")
    assert list(out["pe_table"].fillna("")) == ["blocks.0.pe.table", ""]
    assert list(layers["layer"]) == [0, 1] and list(layers["pe_table"]) == ["blocks.0.pe.table", "blocks.1.pe.table"]
    assert (layers["n_rows"] == 64).all() and len(seen) == 2 and not np.allclose(seen[0], seen[1])
    assert layers.iloc[0]["rsa_spearman"] == out.iloc[0]["rsa_spearman"]
    assert list(seed0) == ["learned σ=0.1"]
    lt = load_table(tmp_path / "learned-s0.1-seed0" / "last.pt", layer=1)
    ref = analyze(lt.table, lt.ground_truth, methods="pca,smacof", n_perm=19, n_boot=0, n_null=5, seed=0)
    for key in ("rsa_spearman", "rsa_p", "probe_r2", "recovery_smacof_r2"):
        assert layers.iloc[1][key] == pytest.approx(ref.metrics[key])


# ---- stopping a sweep's worker processes ----------------------------------------------------------

def test_stop_workers_ends_running_worker_processes_at_once():
    """A killed netsim / brain sweep left its spawned workers training, orphaned, for the rest of their runs
    (found when two killed report runs kept 4 workers busy for an hour); leaving the pool's `with` would
    wait for them instead."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from analyses.netsim.sweep import stop_workers

    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(time.sleep, 60) for _ in range(7)]
    deadline = time.time() + 60
    while len(pool._processes or {}) < 2 or not all(f.running() for f in futures[:2]):  # both workers busy
        assert time.time() < deadline
        time.sleep(0.1)
    processes = list(pool._processes.values())
    t0 = time.time()
    stop_workers(pool)
    # the pool's own manager thread may reap a worker first, which can leave is_alive() briefly stale: poll
    while any(p.is_alive() for p in processes) and time.time() - t0 < 15:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in processes) and time.time() - t0 < 15  # not after the calls' 60 s
    # the pool's call queue holds up to workers + 1 calls, refilled as the workers take theirs: up to 3 calls
    # beyond the 2 running ones (futures 2-4) may count as running, not cancellable, depending on when its
    # manager thread woke. That thread also ends the rest, asynchronously: cancelled if it saw the shutdown
    # first, failed with BrokenProcessPool if it saw the terminated workers first (both seen in scratch runs;
    # a check for cancelled calls made at once, without waiting, failed once in a full `make test`). Either
    # way none may run: none of the waiting calls may have run to completion
    from concurrent.futures.process import BrokenProcessPool

    t1 = time.time()  # poll `done`: `wait` does not count a cancelled call the pool never picked up again as done
    while not all(f.done() for f in futures[5:]) and time.time() - t1 < 15:
        time.sleep(0.05)
    assert all(f.cancelled() or isinstance(f.exception(timeout=0), BrokenProcessPool) for f in futures[5:])
    assert not any(f.done() and not f.cancelled() and f.exception() is None for f in futures[2:])


# ---- what a mutation audit found untested

def test_the_seed_count_of_an_inconclusive_level_is_the_smaller_side():
    assert verdict_level([0.40, 0.45, 0.50], [0.55, 0.65], "lower") == same_direction(2)


def test_a_tiny_positive_eigenvalue_is_raised_too():
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(4, 4)))
    cov = (q * np.array([1.0, 0.5, 0.2, 1e-12])) @ q.T
    fixed, n = clip_to_positive_definite((cov + cov.T) / 2)
    assert n == 1 and np.linalg.eigvalsh(fixed).min() > 0


def test_the_stationary_covariance_puts_a_lag_on_the_right_node_pair():
    rng = np.random.default_rng(0)
    m, t = 2000, 3
    z = rng.normal(size=(m, t + 1))
    x = np.stack([z[:, 1:], z[:, :-1]], axis=1)  # node 1 at step a+1 equals node 0 at step a
    _, cov = stationary_covariance(x)
    for a in range(t - 1):
        assert cov[0 * t + a, 1 * t + a + 1] > 0.9  # node 0 now, node 1 one step later: the same value
        assert abs(cov[1 * t + a, 0 * t + a + 1]) < 0.1  # node 1 now, node 0 one step later: two steps apart


def test_every_pe_beats_none_counts_lower_errors():
    rows = []
    for seed in range(3):
        rows.append({"label": "sin", "pe": "sin", "sigma": np.nan, "seed": seed,
                     "test_rel": 0.2 + 0.01 * seed, "ood_rel": 0.3 + 0.01 * seed, "ood_noise_rel": 0.4 + 0.01 * seed})
        rows.append({"label": "none", "pe": "none", "sigma": np.nan, "seed": seed,
                     "test_rel": 0.9 + 0.01 * seed, "ood_rel": 0.9 + 0.01 * seed, "ood_noise_rel": 0.9 + 0.01 * seed})
    df = pd.DataFrame(rows)
    s = summarise(df, ["test_rel", "ood_rel", "ood_noise_rel"])
    assert every_pe_beats_none(df, s).endswith("50%-masked test 1 of 1, 90%-masked OOD 1 of 1, unseen noise 1 of 1")


def test_t_interval_leaves_out_nan_and_inf_seeds():
    from scipy import stats

    vals = np.array([0.2, 0.4, 0.6])
    sem = vals.std(ddof=1) / math.sqrt(3)
    lo, hi = stats.t.interval(0.95, 2, loc=vals.mean(), scale=sem)  # scipy reference over the finite seeds
    for x in ([0.2, np.nan, 0.4, 0.6], [np.inf, 0.2, 0.4, 0.6, np.nan]):
        m, a, b = t_interval(np.array(x))
        assert (m, a, b) == pytest.approx((0.4, lo, hi), abs=1e-12)
    assert t_interval(np.array([np.nan, 0.3])) == pytest.approx((0.3, math.nan, math.nan), nan_ok=True)
    assert all(math.isnan(v) for v in t_interval(np.array([np.nan, np.nan])))


def test_summarise_a_label_with_a_failed_seed_keeps_the_other_seeds_interval():
    from scipy import stats

    df = pd.DataFrame({"label": ["l"] * 3, "pe": ["learned"] * 3, "sigma": [0.1] * 3, "seed": [0, 1, 2],
                       "rsa_spearman": [0.2, np.nan, 0.6]})
    s = summarise(df, ["rsa_spearman"]).set_index("label")
    assert s.loc["l", "rsa_spearman"] == pytest.approx(0.4)
    lo, hi = stats.t.interval(0.95, 1, loc=0.4, scale=np.std([0.2, 0.6], ddof=1) / math.sqrt(2))
    assert (s.loc["l", "rsa_spearman_lo"], s.loc["l", "rsa_spearman_hi"]) == pytest.approx((lo, hi))


def test_a_label_is_deterministic_only_when_every_metric_is_fixed_across_seeds():
    df = pd.DataFrame({"label": ["fixed", "fixed", "half", "half", "varies", "varies"], "seed": [0, 1] * 3,
                       "rsa_spearman": [0.5, 0.5, 0.3, 0.3, 0.1, 0.9],
                       "probe_r2": [0.7, 0.7, 0.2, 0.8, 0.4, 0.4]})
    assert deterministic_labels(df, ["rsa_spearman", "probe_r2"]) == ["fixed"]
    assert deterministic_labels(df, ["rsa_spearman"]) == ["fixed", "half"]


def test_the_committed_brain_report_computes_its_ood_train_gap_as_ood_minus_train():
    """runs.csv's gap is the 90%-masked MSE minus the train MSE in every run, and summary.csv's is its seed mean
    (the report's 'generalisation gap' verdict reads these columns)."""
    from pathlib import Path

    report = Path(__file__).resolve().parents[2] / "reports" / "brain"
    runs, summ = pd.read_csv(report / "runs.csv"), pd.read_csv(report / "summary.csv").set_index("label")
    np.testing.assert_allclose(runs["ood_train_gap"], runs["ood_mse"] - runs["train_mse"], rtol=0, atol=1e-12)
    means = runs.groupby("label")["ood_train_gap"].mean()
    np.testing.assert_allclose(summ.loc[means.index, "ood_train_gap"], means, rtol=1e-12)


def test_the_resource_trackers_leak_warning_is_silenced_once(monkeypatch):
    """Ctrl-C or a kill reaching the sweep's workers too printed a 2-line resource_tracker warning after the
    one-line 'interrupted': the tracker, started with this process's warning options, is told to ignore it."""
    import sys

    from analyses.netsim.sweep import quiet_resource_tracker

    monkeypatch.setattr(sys, "warnoptions", [])
    quiet_resource_tracker()
    quiet_resource_tracker()
    assert sys.warnoptions == ["ignore:resource_tracker:UserWarning"]
    from multiprocessing import util

    assert "-Wignore:resource_tracker:UserWarning" in util._args_from_interpreter_flags()  # what the tracker gets
