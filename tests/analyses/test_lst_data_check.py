"""analyses.lst.data_check: where the target cell sits in the LST splits, and how many cells are given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analyses.lst import data_check as DC
from trainers.tasks.lst_generate import make_splits

ROOT = Path(__file__).resolve().parents[2]


def test_per_cell_counts_and_shares_match_a_direct_count():
    counts, givens, summary = DC.split_tables(seed=3, n_per_level=300, min_jaccard=0.8)
    splits = make_splits(n_per_level=300, min_jaccard=0.8, seed=3)
    for name, s in splits.items():
        cells = [int(np.flatnonzero(p == 5)[0]) for p in s.puzzles]  # brute force, one puzzle at a time
        assert counts[name].tolist() == np.bincount(cells, minlength=16).tolist()
    share = counts.train / counts.train.sum()
    ood_cells = [int(np.flatnonzero(p == 5)[0]) for p in splits["ood"].puzzles]
    assert summary["train_share_of_ood_target_cell"] == pytest.approx(np.mean([share[c] for c in ood_cells]))
    assert summary["spearman_train_vs_ood_counts"] == pytest.approx(stats.spearmanr(counts.train, counts.ood).statistic)
    row = givens[(givens.split == "ood") & (givens.level == "Binary")].iloc[0]
    ood = splits["ood"]
    binary = ood.puzzles[ood.levels == 0]
    assert row.mean_givens == pytest.approx(((binary > 0) & (binary < 5)).sum(1).mean())


def test_the_filter_moves_training_targets_away_from_the_ood_targets_cells():
    """The Jaccard sets include the target marker, so the filter rejects more candidates whose target sits where
    OOD targets sit. This asserts the shift the report documents: it fails once the splits no longer have it."""
    _, _, summary = DC.split_tables(seed=0, n_per_level=600, min_jaccard=0.8)
    assert summary["spearman_train_vs_ood_counts"] < -0.5
    assert summary["train_share_of_ood_target_cell"] < summary["uniform_share"] < summary["train_share_of_test_target_cell"]


def test_the_report_and_its_tables_are_written(tmp_path):
    out = tmp_path / "lst-data"
    assert DC.main(["--seeds", "0,1", "--n-per-level", "120", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"README.md", "target_cells.csv", "givens.csv", "summary.csv"}
    summary = pd.read_csv(out / "summary.csv")  # each seed with the filter and without it (the control)
    assert len(pd.read_csv(out / "target_cells.csv")) == 64 and len(summary) == 4
    assert sorted(summary.min_jaccard.unique()) == [0.0, 0.8]
    control = summary[summary.min_jaccard == 0]
    assert (control.train_share_of_ood_target_cell > summary[summary.min_jaccard > 0].train_share_of_ood_target_cell.max()).all()
    assert "Spearman ρ, training vs OOD target count" in (out / "README.md").read_text()


@pytest.mark.parametrize("argv,needle", [(["--seeds", "a"], "--seeds"), (["--seeds", "-1"], "--seeds"),
                                         (["--n-per-level", "2"], "--n-per-level"),
                                         (["--seeds", "0,0"], "names a seed twice"),
                                         (["--n-per-level", "1000000000"], "above the 1,000,000"),
                                         (["--min-jaccard", "nan"], "between 0 and 1"),
                                         (["--min-jaccard", "-1"], "between 0 and 1"),
                                         (["--min-jaccard", "0.99", "--n-per-level", "600"], "lower --min-jaccard")])
def test_bad_options_are_one_line_errors_and_nothing_is_written(tmp_path, argv, needle):
    out = tmp_path / "o"
    res = subprocess.run([sys.executable, "-m", "analyses.lst.data_check", *argv, "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True)
    lines = res.stderr.strip().splitlines()  # progress lines may come first (splits being made)
    assert res.returncode == 2 and needle in lines[-1] and "Traceback" not in res.stderr
    assert all(line.startswith("splits of data seed") for line in lines[:-1])
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from trainers.cli import train_main

    out = tmp_path_factory.mktemp("cells") / "run"
    assert train_main(["lst", "--d-model", "16", "--layers", "1", "--heads", "2", "--epochs", "2", "--n-per-level", "30",
                       "--batch-size", "32", "--min-jaccard", "0.5", "--out", str(out)]) == 0
    return out


def test_per_cell_accuracy_adds_up_to_what_evaluate_reports(tiny_run):
    from trainers.evaluate import evaluate_checkpoint

    cells = DC.cell_accuracy(tiny_run)
    assert set(cells.split) == {"train", "test", "ood"} and len(cells) == 48
    ood = cells[cells.split == "ood"]
    assert ood.correct.sum() / ood.n.sum() == pytest.approx(evaluate_checkpoint(tiny_run / "last.pt")["ood_acc"])
    train = cells[cells.split == "train"]
    assert train.train_share.sum() == pytest.approx(1.0)
    assert (train.n / train.n.sum()).to_numpy() == pytest.approx(train.train_share.to_numpy())
    per = DC.cell_summary(cells).set_index("split")
    assert per.loc["ood", "puzzles_below"] + per.loc["ood", "puzzles_at_or_above"] == ood.n.sum()


def test_runs_add_the_per_cell_section_and_a_missing_run_is_refused(tiny_run, tmp_path):
    out = tmp_path / "r"
    assert DC.main(["--seeds", "0", "--n-per-level", "60", "--runs", str(tiny_run), "--out", str(out)]) == 0
    assert (out / "cell_accuracy.csv").is_file() and (out / "cell_summary.csv").is_file()
    assert "Does a model do worse where training had few targets?" in (out / "README.md").read_text()
    res = subprocess.run([sys.executable, "-m", "analyses.lst.data_check", "--runs", str(tmp_path / "nope"),
                          "--out", str(tmp_path / "o2")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "no checkpoint there" in res.stderr and not (tmp_path / "o2").exists()
    # rerun without --runs into that report: its per-model section would be lost, so it is refused ...
    before = sorted(p.name for p in out.iterdir())
    res = subprocess.run([sys.executable, "-m", "analyses.lst.data_check", "--n-per-level", "60", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "holds a per-model section" in res.stderr and len(res.stderr.splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == before
    assert DC.main(["--n-per-level", "60", "--out", str(out), "--force"]) == 0  # ... unless --force
    assert not (out / "cell_accuracy.csv").exists()


def test_two_runs_of_one_name_are_refused_not_merged(tiny_run, tmp_path):
    import shutil

    other = tmp_path / "elsewhere" / tiny_run.name
    shutil.copytree(tiny_run, other)
    res = subprocess.run([sys.executable, "-m", "analyses.lst.data_check", "--runs", str(tiny_run), str(other),
                          "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and "both named" in res.stderr and not (tmp_path / "o").exists()
    labels = DC.run_labels([tiny_run / "last.pt", other.parent])
    assert labels == [f"{tiny_run.name}/last.pt", "elsewhere"]


def test_the_committed_split_tables_reproduce(tmp_path):
    """reports/lst-data's data tables are what the trainer's make_splits gives today (seed 0 checked here)."""
    out = tmp_path / "d"
    assert DC.main(["--seeds", "0", "--out", str(out)]) == 0
    committed = ROOT / "reports" / "lst-data"
    for name in ("target_cells.csv", "givens.csv", "summary.csv"):
        ours = pd.read_csv(out / name)
        theirs = pd.read_csv(committed / name)
        theirs = theirs[theirs.seed == 0].reset_index(drop=True)
        pd.testing.assert_frame_equal(ours, theirs, check_exact=False, rtol=1e-12)
