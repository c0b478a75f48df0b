"""The longer-training LST report (`analyses.lst.length`) on hand-made frames: its tables, findings and files."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analyses.lst import length as LEN
from pe_probe.errors import InputError

ARMS = (("learned", 0.01), ("learned", 0.1), ("learned", 2.0), ("sin2d", None))
EPOCHS = (4, 8)
VIEWS = (("raw", "mean"), ("raw", 0), ("qk", 0), ("kernel", "mean"), ("attention", "mean"))


def ood(pe: str, sigma: float | None, seed: int, epoch: int) -> float:
    """A made-up held-out accuracy: large sigma at chance early, recovering later."""
    if pe == "learned" and sigma >= 1.5:
        return 0.25 + (0.25 if epoch == 8 else 0.0) + 0.05 * seed
    return 0.8 + 0.01 * epoch + 0.02 * seed


def rsa(pe: str, sigma: float | None, seed: int, epoch: int, view: str) -> float:
    base = 0.1 if pe == "learned" and sigma >= 1.5 else 0.3
    return base + 0.02 * epoch + 0.01 * seed * epoch / 4 + (0.1 if view == "qk" else 0)


def frames() -> dict[str, pd.DataFrame]:
    runs, evals, ana = [], [], []
    for seed in (0, 1):
        for pe, sigma in ARMS:
            name = f"{pe}-{sigma}-seed{seed}"
            tags = {"group": "sigma" if pe == "learned" else "pe_type", "pe": pe, "sigma": sigma, "placement": "every",
                    "control": "none", "seed": seed}
            for ep in EPOCHS:
                acc = {"ood_acc": ood(pe, sigma, seed, ep), "test_acc": 0.9, "train_acc": 0.95}
                evals.append({"run": name, **tags, "epoch": ep, "step": ep, "time": 1.0, **acc})
                for view, layer in VIEWS:
                    ana.append({"run": name, **tags, "checkpoint": f"step-{ep}", "epoch": ep, "step": ep,
                                "is_last": ep == 8, "view": view, "layer": layer,
                                "rsa_spearman": rsa(pe, sigma, seed, ep, view), "rsa_p": 0.01 if ep == 8 else 0.2})
            runs.append({"run": name, **tags, "epochs": 8, "ood_acc": ood(pe, sigma, seed, 8), "train_seconds": 60.0})
    return {"runs": pd.DataFrame(runs), "evals": pd.DataFrame(evals), "analyses": pd.DataFrame(ana),
            "layouts": pd.DataFrame()}


def base_frames() -> dict:
    """A main sweep whose 4-epoch runs differ from epoch 4 of the long runs by +1 point of held-out accuracy;
    seed 0 trained with the fused attention kernel, seed 1 with matmul-softmax."""
    f = frames()
    runs = f["evals"][f["evals"].epoch == 4].copy()
    runs["run"] = "base-" + runs["run"]
    runs["epochs"] = 4
    runs["ood_acc"] += 0.01
    ana = f["analyses"][f["analyses"].epoch == 4].copy()
    ana["run"] = "base-" + ana["run"]
    ana["is_last"] = True
    # a control run at the same sigma and seed (weight decay) must not be matched
    wd = runs[(runs.sigma == 0.1)].assign(run=lambda d: "wd-" + d.run, group="control", control="wd0.1", ood_acc=0.5)
    runs = pd.concat([wd, runs], ignore_index=True)
    paths = pd.Series({r.run: "fused" if r.seed == 0 else "matmul" for r in runs.itertuples()}, dtype=object)
    return {"runs": runs, "analyses": ana, "paths": paths}


def test_arms_are_labelled_and_ordered_by_sigma():
    d = LEN.with_arms(frames()["runs"])
    assert LEN.arms(d) == ["σ = 0.01", "σ = 0.1", "σ = 2", "2D sinusoid"]


def test_accuracy_table_gives_the_mean_then_each_seed():
    ev = LEN.with_arms(frames()["evals"])
    t = LEN.accuracy_table(ev, [4, 8], 8).set_index("arm")
    # sigma 2: epoch 4 -> 25.0 and 30.0 (mean 27.5); epoch 8 -> 50.0 and 55.0
    assert t.loc["σ = 2", "held-out % at epoch 4"] == "27.5 (25.0, 30.0)"
    assert t.loc["σ = 2", "held-out % at epoch 8"] == "52.5 (50.0, 55.0)"
    assert t.loc["2D sinusoid", "seeds"] == "0, 1"


def test_large_sigma_finding_uses_the_exact_mann_whitney_test():
    ev = LEN.with_arms(frames()["evals"])
    text = LEN.large_sigma_finding(ev, 4, 8)
    small = ev[(ev.epoch == 8) & (ev.sigma <= 0.2)].ood_acc
    large = ev[(ev.epoch == 8) & (ev.sigma >= 1.5)].ood_acc
    p = stats.mannwhitneyu(small, large, alternative="greater", method="exact").pvalue
    assert math.isclose(p, 1 / math.comb(6, 2))  # every small-sigma run above every large-sigma one
    assert f"p at epoch 8 = {LEN.fp(p)}" in text and f"allow is {LEN.fp(1 / 15)}" in text
    assert "σ = 2 seed 0: 25.0% → 50.0%" in text and "σ = 2 seed 1: 30.0% → 55.0%" in text


def test_small_sigma_finding_reports_the_spearman_trend_at_both_epochs():
    ev = LEN.with_arms(frames()["evals"])
    text = LEN.small_sigma_finding(ev, 4, 8)
    d = ev[(ev.epoch == 8) & (ev.pe == "learned") & (ev.sigma <= 0.5)]
    rho = stats.spearmanr(d.sigma, d.ood_acc).statistic
    assert f"ρ(σ, accuracy) = {LEN.f3(rho)}" in text and "epoch 4:" in text and "epoch 8:" in text


def test_geometry_finding_and_table_give_the_per_run_change():
    an = LEN.with_arms(frames()["analyses"])
    text = LEN.geometry_finding(an, 4, 8)
    # each learned run gains 0.08 + 0.01 * seed between epochs 4 and 8: +0.085 on average
    assert "raw table (mean of layers): σ ≤ 0.2 0.385 → 0.470 (+0.085" in text
    assert "σ ≥ 1.5 0.185 → 0.270 (+0.085" in text
    t = LEN.geometry_table(an, 4, 8)
    row = t[(t.view == "qk view, layer 0") & (t.arm == "σ = 0.1")].iloc[0]
    assert row["RSA at epoch 8"] == "0.570 (0.560, 0.580)" and row["change (mean)"] == "+0.085"
    assert row["Mantel p<0.05 at 4"] == "0/2" and row["Mantel p<0.05 at 8"] == "2/2"


def test_written_report_files_and_crosscheck(tmp_path):
    out = tmp_path / "report"
    path = LEN.write_report(tmp_path / "sweep", out, frames(), base_frames(), at=4, cmd="python -m analyses.lst.length",
                            notes=["where the runs came from"])
    text = path.read_text()
    assert "- Note: where the runs came from" in text and "With 2 seeds per arm" in text
    for head in ("## Findings", "## Held-out accuracy over training", "## Grid geometry over training",
                 "## Cross-check: epoch 4 of these runs vs the main sweep's 4-epoch runs"):
        assert head in text
    cross = pd.read_csv(out / "table_crosscheck.csv")
    assert len(cross) == 8 and set(cross["difference (points)"]) == {-1.0}
    assert set(cross[cross.seed == 0]["main sweep run's CPU attention"]) == {"torch's fused kernel"}
    assert set(cross[cross.seed == 1]["main sweep run's CPU attention"]) == {"matmul-softmax"}
    assert "median absolute difference 1.0 points, largest 1.0" in text
    acc = pd.read_csv(out / "accuracy_over_training.csv")
    assert set(acc.epoch) == set(EPOCHS) and len(acc) == 16
    geo = pd.read_csv(out / "geometry_over_training.csv")
    assert set(geo.view) == {"raw", "qk", "kernel", "attention"}
    assert (out / "accuracy_over_training.png").stat().st_size > 0 and (out / "geometry_over_training.png").exists()


def test_an_epoch_without_a_checkpoint_is_a_one_line_error_before_writing(tmp_path):
    out = tmp_path / "report"
    with pytest.raises(InputError, match="--at 5: the runs need an evaluation and a checkpoint at epoch 5"):
        LEN.write_report(tmp_path, out, frames(), {}, at=5, cmd="")
    assert not out.exists()


@pytest.mark.parametrize("module", ["length", "report", "analyse"])
def test_a_missing_or_empty_sweep_folder_exits_2(tmp_path, module, capsys):
    import importlib

    main = importlib.import_module(f"analyses.lst.{module}").main
    for root, says in ((tmp_path / "missing", "no such sweep folder"), (tmp_path, "holds no finished run yet")):
        with pytest.raises(SystemExit) as e:
            main(["--root", str(root), "--out", str(tmp_path / "out")] if module != "analyse" else ["--root", str(root)])
        assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_read_base_reads_the_tidy_tables_or_nothing(tmp_path):
    assert LEN.read_base(None) == {} and LEN.read_base(tmp_path) == {}
    b = base_frames()
    (tmp_path / "analysis").mkdir()
    b["runs"].to_csv(tmp_path / "analysis" / "runs.csv", index=False)
    b["analyses"].to_csv(tmp_path / "analysis" / "analyses.csv", index=False)
    got = LEN.read_base(tmp_path)
    assert len(got["runs"]) == 10 and len(got["analyses"]) == len(b["analyses"])
    assert set(got["paths"]) == {"unknown"}  # no train.log to date the runs by
