"""The longer-training LST report (`analyses.lst.length`) on hand-made frames: its tables, findings and files."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analyses.lst import length as LEN
from pe_probe.errors import InputError, show_path

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
    return {"runs": runs, "analyses": ana, "paths": paths, "configs": configs(runs, epochs=4, ckpt_every=1)}


def configs(runs: pd.DataFrame, epochs: int = 8, ckpt_every: int = 4, **overrides) -> dict[str, dict]:
    """run -> the config.json it would have: its PE, σ and seed, ``epochs`` and checkpoint cadence, ``overrides``."""
    from trainers.config import make_config

    out = {}
    for r in runs.drop_duplicates("run").itertuples():
        sigma = r.sigma if r.sigma is not None and np.isfinite(r.sigma) else 0.1
        out[r.run] = make_config("quick", {"pe.kind": r.pe, "pe.init_std": float(sigma), "seed": int(r.seed),
                                           "optim.epochs": epochs, "ckpt_every": ckpt_every, "eval_every": ckpt_every,
                                           **overrides}).to_dict()
    return out


def write_configs(root: Path, cfgs: dict[str, dict]) -> Path:
    for run, cfg in cfgs.items():
        (root / run).mkdir(parents=True, exist_ok=True)
        (root / run / "config.json").write_text(json.dumps(cfg))
    return root


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
    root = write_configs(tmp_path / "sweep", configs(frames()["runs"]))
    path = LEN.write_report(root, out, frames(), base_frames(), at=4, cmd="python -m analyses.lst.length",
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
    assert "median absolute difference 1.0 points, largest 1.0" in text and "Left out" not in text
    # the cross-check names the main sweep it read and what trained its paired runs (a later retrain differs)
    assert set(cross["main sweep run"]) <= set(base_frames()["runs"].run) and cross["main sweep run"].nunique() == 8
    assert "The main sweep's folder is not recorded." in text  # base_frames() has no folder
    acc = pd.read_csv(out / "accuracy_over_training.csv")
    assert set(acc.epoch) == set(EPOCHS) and len(acc) == 16
    geo = pd.read_csv(out / "geometry_over_training.csv")
    assert set(geo.view) == {"raw", "qk", "kernel", "attention"}
    assert (out / "accuracy_over_training.png").stat().st_size > 0 and (out / "geometry_over_training.png").exists()


def test_the_crosscheck_names_the_main_sweep_folder_and_what_trained_its_paired_runs(tmp_path):
    line = LEN.main_sweep_line({"root": tmp_path}, ["a", "a", "b"])
    assert line.startswith(f"The main sweep: `{tmp_path}`; its 2 paired runs were trained by")
    assert "not recorded: 2 runs" in line and "none of the 2 runs has a provenance.jsonl" in line


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


# ---------------------------------------------------------------------------------------------------
# the cross-check compares only runs of the same config


def test_crosscheck_leaves_out_pairs_whose_configs_differ(tmp_path):
    f, base = frames(), base_frames()
    mine = configs(f["runs"])
    base["configs"]["base-learned-0.1-seed1"]["model"]["d_model"] = 32  # the main sweep's σ 0.1, seed 1 was narrower
    base["configs"]["base-sin2d-None-seed0"]["optim"]["lr"] = 5e-4
    ev, an = LEN.with_arms(f["evals"]), LEN.with_arms(f["analyses"])
    table, left_out = LEN.crosscheck_table(ev, an, base, 4, mine)
    assert len(table) == 6 and not ((table.arm == "σ = 0.1") & (table.seed == 1)).any()
    assert not ((table.arm == "2D sinusoid") & (table.seed == 0)).any()
    assert sorted(left_out) == [
        "2D sinusoid seed 0 (`sin2d-None-seed0` vs `base-sin2d-None-seed0`): configs differ: optim.lr 0.001 here vs "
        "0.0005 there",
        "σ = 0.1 seed 1 (`learned-0.1-seed1` vs `base-learned-0.1-seed1`): configs differ: model.d_model 64 here vs "
        "32 there"]
    # epochs and the checkpoint / evaluation cadence differ in every pair (8 vs 4 epochs, 4 vs 1): not a reason
    assert all("epochs" not in w and "ckpt_every" not in w for w in left_out)
    # a key an older config.json lacks counts as its default: not a difference
    del base["configs"]["base-learned-2.0-seed0"]["model"]["readout"]
    assert len(LEN.crosscheck_table(ev, an, base, 4, mine)[0]) == 6
    # without this run's config.json the pair cannot be checked: left out too
    table, left_out = LEN.crosscheck_table(ev, an, base_frames(), 4, {})
    assert table.empty and len(left_out) == 8 and all("this run's config.json is missing" in w for w in left_out)
    text = LEN.write_report(write_configs(tmp_path / "sweep", mine), tmp_path / "out", f, base, at=4, cmd="").read_text()
    section = text[text.index("## Cross-check"):text.index("## Files")]
    assert "Left out: 2 pairs of runs whose configs do not match" in section and "model.d_model 64 here vs 32 there" in section
    assert len(pd.read_csv(tmp_path / "out" / "table_crosscheck.csv")) == 6


# ---------------------------------------------------------------------------------------------------
# the command: --base and --out checked before any work; a skipped cross-check is said


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """A long sweep of finished runs (config.json, last.pt) whose analysis is `frames()`; returns (root, calls):
    calls lists every `collect` call."""
    import torch

    from analyses.lst import analyse

    root = write_configs(tmp_path / "long", configs(frames()["runs"]))
    for run in frames()["runs"].run:
        torch.save({"epoch": 8}, root / run / "last.pt")
    calls = []
    monkeypatch.setattr(analyse, "collect", lambda *a, **k: calls.append(a) or frames())
    monkeypatch.chdir(tmp_path)  # the default --base runs/lst-sweep does not exist here
    return root, calls


def _main(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = LEN.main(args + ["--at", "4", "--n-perm", "5", "--n-boot", "5"])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _base_folder(path: Path, with_tables: bool = True) -> Path:
    b = base_frames()
    write_configs(path, b["configs"])
    if with_tables:
        (path / "analysis").mkdir()
        b["runs"].to_csv(path / "analysis" / "runs.csv", index=False)
        b["analyses"].to_csv(path / "analysis" / "analyses.csv", index=False)
    return path


@pytest.mark.parametrize("make,says", [(lambda p: p, "does not exist"),
                                       (lambda p: _base_folder(p, with_tables=False), "has no analysis/runs.csv"),
                                       (lambda p: _base_folder(Path(os.fsdecode(bytes(p) + b"\xff"))),
                                        "is not a UTF-8 name")])
def test_a_named_base_that_cannot_serve_is_a_usage_error_before_any_work(tmp_path, cli, capsys, make, says):
    root, calls = cli
    base = make(tmp_path / "main")
    code, err = _main(["--root", str(root), "--base", str(base), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and f"--base {show_path(base)} {says}" in err and "--base '' to skip" in err
    assert len(err.splitlines()) == 1
    assert not calls and not (tmp_path / "out").exists() and not (root / "analysis").exists()


@pytest.mark.parametrize("base,says", [(None, "Skipped: the main sweep's folder runs/lst-sweep (the default --base) "
                                               "does not exist."),
                                       ("", "Skipped: --base '' was given.")])
def test_a_skipped_crosscheck_is_said_in_the_report(tmp_path, cli, capsys, base, says):
    root, _ = cli
    out = tmp_path / "out"
    assert _main(["--root", str(root), "--out", str(out)] + (["--base", base] if base is not None else []), capsys)[0] == 0
    text = (out / "README.md").read_text()
    assert says in text[text.index("## Cross-check"):]
    cmd = text[text.index("```bash"):text.index("```\n\n")]
    assert ("--base" in cmd) == (base is not None)  # the regenerate command names --base only when it was given


def test_a_named_base_is_cross_checked_and_out_is_replaced_only_when_ours(tmp_path, cli, capsys):
    root, _ = cli
    base = _base_folder(tmp_path / "main")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = _main(["--root", str(root), "--base", str(base), "--out", str(out)], capsys)
    assert code == 2 and "was not written by pe-probe" in err and (out / "notes.txt").read_text() == "mine"
    assert _main(["--root", str(root), "--base", str(base), "--out", str(out), "--force"], capsys)[0] == 0
    assert not (out / "notes.txt").exists() and (out / ".pe-probe-output").exists()
    assert len(pd.read_csv(out / "table_crosscheck.csv")) == 8
    code, err = _main(["--root", str(root), "--base", str(base), "--out", str(base), "--force"], capsys)
    assert code == 2 and f"--out {base} is or holds the input {base}" in err and (base / "analysis" / "runs.csv").exists()


def test_an_at_without_checkpoints_is_refused_before_any_work(tmp_path, cli, capsys):
    root, calls = cli
    with pytest.raises(SystemExit) as e:
        LEN.main(["--root", str(root), "--base", "", "--out", str(tmp_path / "out"), "--at", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--at 3: the runs need an evaluation and a checkpoint at epoch 3" in err
    assert not calls and not (tmp_path / "out").exists() and not (root / "analysis").exists()
