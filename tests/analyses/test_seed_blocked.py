"""analyses.seed_blocked: the σ claims re-tested with seeds as blocks, from the committed per-run tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analyses import seed_blocked as SB

ROOT = Path(__file__).resolve().parents[2]
SIGMAS = [0.01, 0.1, 0.2, 0.5, 1.0, 1.5, 2.0]


def _fake_reports(tmp_path: Path, rng: np.random.Generator, n_seeds: int = 6) -> Path:
    """LST tables where accuracy falls with σ in every seed and each seed's RSA is its own constant at σ ≥ 0.5
    (a starting draw that dominates), plus a netsim and a brain runs.csv."""
    reports = tmp_path / "reports"
    (reports / "lst").mkdir(parents=True)
    rows, types = [], []
    seed_rsa = rng.normal(0, 0.1, n_seeds)
    for seed in range(n_seeds):
        for s in SIGMAS:
            acc = 0.95 - 0.3 * s + rng.normal(0, 0.005)
            rsa = seed_rsa[seed] if s >= 0.5 else 0.3 - s + rng.normal(0, 0.01)
            rows.append({"run": f"learned-every-s{s:g}-seed{seed}", "sigma": s, "seed": seed, "eval_ood_acc": acc,
                         "ref_procrustes_distance": 5 + rng.normal(), "ref_shape_distance": 1.0, "rsa_spearman": rsa})
        for s, a in ((0.1, 90.0 + seed), (2.0, 85.0)):
            types.append({"run": f"learned-input-s{s:g}-seed{seed}", "model": "x", "OOD %": a})
    pd.DataFrame(rows).to_csv(reports / "lst" / "identifiability_vs_generalization.csv", index=False)
    pd.DataFrame(types).to_csv(reports / "lst" / "table_types_ident.csv", index=False)
    for name, kind in (("netsim", "netsim"), ("brain", "brain")):
        (reports / name).mkdir()
        runs = []
        for seed in range(4):
            for s, shift in ((0.1, -0.01), (2.0, 0.0)):
                r = {"pe": "learned", "sigma": s, "seed": seed, "train_mse": 0.9 + shift, "train_mse_zero": 1.0,
                     "test_rel": 0.85 + shift, "ood_rel": 0.94 + shift + (0.001 * seed if s == 0.1 else 0.0), "ood_noise_rel": 0.92,
                     "test_mse": 0.5 + shift, "ood_mse": 0.7 + 2 * shift, "ood_train_gap": 0.1 + shift}
                runs.append(r)
            runs.append({**runs[-1], "pe": "none", "sigma": float("nan")})
        pd.DataFrame(runs).to_csv(reports / name / "runs.csv", index=False)
    return reports


def test_the_band_drop_is_one_difference_per_seed_and_matches_a_direct_computation(tmp_path):
    reports = _fake_reports(tmp_path, np.random.default_rng(0))
    tables = SB.lst_tables(reports / "lst")
    runs = pd.read_csv(reports / "lst" / "identifiability_vs_generalization.csv")
    per_seed = (runs[runs.sigma <= 0.2].groupby("seed").eval_ood_acc.mean()
                - runs[runs.sigma >= 1.5].groupby("seed").eval_ood_acc.mean())
    band = tables["lst_band_drop"].iloc[0]
    assert band.n_seeds == 6 and band.seeds_positive == 6
    assert band["mean"] == pytest.approx(per_seed.mean())
    assert band.t_p == pytest.approx(stats.ttest_1samp(per_seed, 0).pvalue)
    assert band.wilcoxon_p_greater == pytest.approx(0.5 ** 6)  # all 6 positive: the smallest p the test gives
    assert band.min_possible_p == pytest.approx(0.5 ** 6)


def test_trends_are_tested_within_seeds_and_the_starting_draw_shows_as_a_cross_sigma_correlation(tmp_path):
    reports = _fake_reports(tmp_path, np.random.default_rng(1))
    tables = SB.lst_tables(reports / "lst")
    trend = tables["lst_trends"].set_index(["value", "σ range"])
    whole = trend.loc[("held-out accuracy", "the whole grid")]
    assert whole.seeds_rho_negative == 6 and whole.page_p_falling < 1e-3 and whole.page_p_rising > 0.99
    draw = tables["lst_starting_draw"].set_index("sigma")
    assert draw.loc[1.5, "pearson_r"] == pytest.approx(1.0) and draw.loc[0.5, "pearson_r"] == pytest.approx(1.0)
    assert abs(draw.loc[0.1, "pearson_r"]) < 0.99  # below 0.5 the fake RSA is not the seed's constant
    place = tables["lst_placement"].set_index("placement")
    assert place.loc["input only", "mean"] == pytest.approx(np.mean([0.90 + s / 100 - 0.85 for s in range(6)]))
    assert place.loc["input only", "seeds_positive"] == 6


def test_page_trend_matches_scipy_and_reverses_for_a_fall():
    wide = pd.DataFrame([[1, 2, 3, 4], [1, 3, 2, 4], [2, 1, 3, 4]], columns=[0.1, 0.2, 0.5, 1.0], dtype=float)
    got = SB.page_trend(wide)
    assert got["page_p_rising"] == pytest.approx(stats.page_trend_test(wide.to_numpy()).pvalue)
    assert got["page_p_falling"] == pytest.approx(stats.page_trend_test(wide.to_numpy()[:, ::-1]).pvalue)
    assert got["page_p_rising"] < 0.05 < got["page_p_falling"]


def test_masked_reports_are_paired_by_seed_with_small_sigma_first(tmp_path):
    reports = _fake_reports(tmp_path, np.random.default_rng(2))
    ns = SB.masked_table(reports / "netsim", "netsim").set_index("split")
    train = ns.loc["training fit (train MSE / zero)"]
    assert train.mean_diff == pytest.approx(-0.01) and train.seeds_favouring_small_sigma == 4
    assert np.isnan(train.paired_t_p)  # four equal differences: no variance, no t-test
    ood = ns.loc["90%-masked OOD / zero"]
    assert ood.mean_diff == pytest.approx(-0.01 + 0.0015) and ood.ci_low < ood.mean_diff < ood.ci_high
    br = SB.masked_table(reports / "brain", "brain").set_index("split")
    assert br.loc["held-out subjects, 90% masked", "mean_diff"] == pytest.approx(-0.02)


def test_the_committed_reports_give_a_report_and_its_tables(tmp_path):
    out = tmp_path / "sb"
    assert SB.main(["--reports", str(ROOT / "reports"), "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"README.md", "lst_band_drop.csv", "lst_trends.csv", "lst_starting_draw.csv", "lst_within_sigma.csv",
            "lst_placement.csv", "masked.csv"} <= names
    text = (out / "README.md").read_text()
    assert "Page" in text and "paired by seed" in text
    masked = pd.read_csv(out / "masked.csv")
    assert set(masked.report) == {"netsim", "netsim-standard", "brain", "brain-standard"}


def test_a_table_without_a_needed_column_is_a_one_line_error_and_nothing_is_written(tmp_path):
    reports = _fake_reports(tmp_path, np.random.default_rng(3))
    path = reports / "lst" / "identifiability_vs_generalization.csv"
    pd.read_csv(path).drop(columns=["rsa_spearman"]).to_csv(path, index=False)
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "analyses.seed_blocked", "--reports", str(reports), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "rsa_spearman" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def test_equal_float32_differences_get_no_t_test_and_the_smallest_p_counts_nonzero_differences():
    """Four seeds each 68/108 apart, stored through float32, differ by ~4e-8: a t-test on them gave p = 8e-24
    (diff review); `paired_test` in the LST reports already refused it."""
    d = pd.Series((np.float32(0.9) - np.float32(0.9 - 68 / 108)) + np.array([0, 3.7e-8, -1e-8, 2e-8]))
    res = SB.seed_difference(d)
    assert np.isnan(res["t_p"]) and res["seeds_positive"] == 4
    with_zero = SB.seed_difference(pd.Series([0.02, 0.0, 0.01]))
    assert with_zero["min_possible_p"] == pytest.approx(0.25)  # Wilcoxon drops the zero: 2 differences left
    assert np.isnan(SB.seed_difference(pd.Series([0.0, 1e-9, -1e-9]))["wilcoxon_p_greater"])  # all near zero


def test_a_sweep_without_some_sigma_ranges_skips_them_and_a_seed_missing_a_band_sigma_is_left_out(tmp_path):
    reports = _fake_reports(tmp_path, np.random.default_rng(4))
    path = reports / "lst" / "identifiability_vs_generalization.csv"
    runs = pd.read_csv(path)
    runs = runs[~((runs.seed == 0) & (runs.sigma == 0.1))]  # seed 0 lacks σ = 0.1
    runs.to_csv(path, index=False)
    tables = SB.lst_tables(reports / "lst")
    assert tables["lst_band_drop"].iloc[0].n_seeds == 5  # not averaged over an incomplete band
    assert set(tables["lst_trends"].n_blocks) <= {5, 6}
    only_large = runs[runs.sigma >= 1.0]
    only_large.to_csv(path, index=False)
    trend = SB.lst_tables(reports / "lst")["lst_trends"]  # no traceback: ranges with < 3 σ are skipped
    assert "σ ≤ 0.5" not in set(trend["σ range"])


def test_out_may_not_be_a_report_it_reads(tmp_path):
    import shutil

    reports = _fake_reports(tmp_path, np.random.default_rng(5))
    before = sorted(p.name for p in (reports / "netsim").iterdir())
    res = subprocess.run([sys.executable, "-m", "analyses.seed_blocked", "--reports", str(reports), "--out",
                          str(reports / "netsim"), "--force"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "input" in res.stderr
    assert sorted(p.name for p in (reports / "netsim").iterdir()) == before
    shutil.rmtree(reports / "brain")  # a missing masked report is skipped, not an error
    assert SB.main(["--reports", str(reports), "--out", str(tmp_path / "o")]) == 0


def test_the_committed_report_reproduces_from_the_committed_tables(tmp_path):
    """Every CSV of reports/seed-blocked is what the code writes from the committed tables today."""
    out = tmp_path / "sb"
    assert SB.main(["--out", str(out)]) == 0
    committed = ROOT / "reports" / "seed-blocked"
    for csv in sorted(committed.glob("*.csv")):
        pd.testing.assert_frame_equal(pd.read_csv(out / csv.name), pd.read_csv(csv), check_exact=False, rtol=1e-12)
