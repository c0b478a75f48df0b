"""The LST report's setting comes from what the sweep recorded, and its command writes --out safely."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from synthetic_sweep import run_report_command

from analyses.lst import report as R
from analyses.lst import setting as S
from pe_probe.output import MARKER


def _frames():
    from synthetic_sweep import ACC_KEYS, synthetic_frames

    items = [("sigma", "learned", s, "every", "none") for s in (0.1, 2.0)] + [("pe_type", "sin2d", None, "every", "none")]
    return synthetic_frames(items, lambda rng: {**{k: float(rng.uniform(0.25, 1)) for k in ACC_KEYS}, "train_loss": 0.1},
                            lambda rng: 0.5, seeds=(0, 1))


def _sweep(root: Path, frames, preset: str = "quick", data: dict | None = None, provenance: list[dict] | None = None,
           log: str | None = None) -> Path:
    """A sweep folder for ``frames``: grid.json, each run's config.json (``data``: data.* overrides) and
    provenance.jsonl (``provenance``: one session per run, cycled), and sweep.log (``log``)."""
    from trainers.config import make_config

    root.mkdir(parents=True, exist_ok=True)
    (root / "grid.json").write_text(json.dumps({"preset": preset, "runs": []}))
    cfg = make_config(preset, {f"data.{k}": v for k, v in (data or {}).items()}).to_dict()
    for i, run in enumerate(frames["runs"].run):
        (root / run).mkdir(exist_ok=True)
        (root / run / "config.json").write_text(json.dumps(cfg))
        if provenance:
            (root / run / "provenance.jsonl").write_text(json.dumps(provenance[i % len(provenance)]) + "\n")
    if log is not None:
        (root / "sweep.log").write_text(log)
    return root


def _setting(text: str) -> str:
    return text[text.index("## Setting"):text.index("## Verdicts")]


SESSION = {"time": "2026-01-01T00:00:00+00:00", "git_commit": None, "torch": "9.9.9", "python": "3.99.1",
           "trainer": "single", "device": "cuda", "torch_threads": 4}


def test_setting_reads_the_data_parallelism_and_hardware_the_runs_recorded(tmp_path):
    frames = _frames()
    root = _sweep(tmp_path / "sweep", frames, data={"n_ood_per_level": 20, "min_jaccard": 0.5}, provenance=[SESSION],
                  log="10:00:00 sweep quick: 6 runs, 0 finished, 6 to train (3 workers)\n10:00:01 started  a (pid 1)\n")
    text = _setting(R.write_report(root, tmp_path / "out", frames, "cmd").read_text())
    assert "60 generated puzzles (20 per level), every training puzzle at Jaccard distance ≥ 0.5" in text
    assert "108 generated" not in text and "36 per level" not in text and "≥ 0.8" not in text
    assert "trained up to 3 runs at a time, from sweep.log" in text and "2 runs in parallel" not in text
    assert "device cuda; torch 9.9.9; Python 3.99.1; torch threads per process 4" in text
    assert "CPU cores (shared)" not in text  # nothing about the machine writing the report
    assert "was not run for this sweep" in text  # a quick sweep: the paper preset was not run


def test_setting_says_what_was_not_recorded(tmp_path):
    frames = _frames()
    root = _sweep(tmp_path / "sweep", frames)  # no provenance.jsonl, no sweep.log
    text = _setting(R.write_report(root, tmp_path / "out", frames, "cmd").read_text())
    assert "Hardware (from each run's `provenance.jsonl`): not recorded (none of the 6 runs has a provenance.jsonl)" in text
    assert "how many runs trained at once is not recorded" in text and "in parallel" not in text


def test_a_paper_sweep_is_not_said_to_lack_the_paper_preset(tmp_path):
    frames = _frames()
    text = _setting(R.write_report(_sweep(tmp_path / "sweep", frames, preset="paper"), tmp_path / "out", frames,
                                   "cmd").read_text())
    assert "paper preset" not in text


def test_runs_that_differ_are_listed_with_counts(tmp_path):
    frames = _frames()
    other = {**SESSION, "device": "cpu", "hostname": "box"}
    root = _sweep(tmp_path / "sweep", frames, provenance=[SESSION, other])
    (root / frames["runs"].run.iloc[0] / "provenance.jsonl").unlink()
    text = S.hardware(root, frames["runs"].run)
    assert "host box (3 runs)" in text and "device cpu (3 runs), cuda (2 runs)" in text
    assert "(from the 5 of 6 runs that have a provenance.jsonl)" in text
    assert "is not recorded" not in text  # a host name was recorded


def test_the_cpu_and_its_kernels_are_named_and_runs_that_predate_them_are_counted(tmp_path):
    frames = _frames()
    avx2 = {**SESSION, "device": "cpu", "cpu": "AMD EPYC", "logical_cpus": 2, "cpu_kernels": "AVX2"}
    root = _sweep(tmp_path / "sweep", frames, provenance=[avx2])
    text = S.hardware(root, frames["runs"].run)
    assert "CPU AMD EPYC (6 runs)" not in text and "CPU AMD EPYC" in text and "torch CPU kernels AVX2" in text
    assert "logical CPUs 2" in text and "is not recorded" not in text and "predate" not in text
    old = frames["runs"].run.iloc[0]
    (root / old / "provenance.jsonl").write_text(json.dumps(SESSION) + "\n")  # a run recorded before the CPU was
    text = S.hardware(root, frames["runs"].run)
    assert "torch CPU kernels AVX2 (5 runs)" in text
    assert "the machine (CPU or GPU model) is recorded for 5 of those 6 runs (the others predate it)" in text


def test_parallelism_counts_only_calls_that_trained(tmp_path):
    log = ("sweep quick: 4 runs, 0 finished, 4 to train (2 workers)\n"
           "sweep quick: 4 runs, 4 finished, 0 to train (8 workers)\n"
           "sweep quick: 6 runs, 4 finished, 2 to train (1 workers)\ntraining 2 runs as batched ensembles (1 workers)\n")
    (tmp_path / "sweep.log").write_text(log)
    assert S.parallelism(tmp_path) == ("trained up to 2 runs at a time in 1 sweep call, as batched ensembles on 1 "
                                       "worker thread in 1 sweep call, from sweep.log")
    (tmp_path / "sweep.log").write_text("an older log without call summaries\n")
    assert S.parallelism(tmp_path) is None


def test_a_held_out_file_is_named_instead_of_generated_puzzles():
    cfg = {"data": {"n_ood_per_level": 36, "min_jaccard": 0.0, "ood_puzzles": "/data/study.csv"}}
    text = S.heldout_text({"a": cfg}, 3, 108)
    assert text == "the puzzles of `/data/study.csv`, no distance filter between training and held-out puzzles"
    assert S.heldout_text({}, 3, 108).startswith("not recorded")


# ---------------------------------------------------------------------------------------------------
# the command: --out is checked before any work and replaced only when the whole report is written


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """A sweep folder with finished runs (as `check_arguments` sees them) whose analysis is the synthetic frames;
    returns (root, calls): calls lists every `collect` call."""
    import torch

    from analyses.lst import analyse

    frames = _frames()
    root = _sweep(tmp_path / "sweep", frames)
    for run in frames["runs"].run:
        cfg = json.loads((root / run / "config.json").read_text())
        torch.save({"epoch": cfg["optim"]["epochs"]}, root / run / "last.pt")
    calls = []
    monkeypatch.setattr(analyse, "collect", lambda *a, **k: calls.append(a) or _frames())
    return root, calls


def _main(args: list[str], capsys) -> tuple[int, str]:
    return run_report_command(R.main, args, capsys)


def test_an_existing_folder_not_written_by_pe_probe_is_refused_before_any_work(tmp_path, cli, capsys):
    root, calls = cli
    out = tmp_path / "Documents"
    out.mkdir()
    (out / "README.md").write_text("mine")
    code, err = _main(["--root", str(root), "--out", str(out)], capsys)
    assert code == 2 and "was not written by pe-probe" in err and "--force" in err and len(err.splitlines()) == 1
    assert (out / "README.md").read_text() == "mine" and not calls and not (root / "analysis").exists()
    assert _main(["--root", str(root), "--out", str(out), "--force"], capsys)[0] == 0
    assert (out / MARKER).read_text() == "written by pe-probe (lst-report)\n" and "Latin Square" in (out / "README.md").read_text()
    assert _main(["--root", str(root), "--out", str(out)], capsys)[0] == 0  # ours now: no --force needed


@pytest.mark.parametrize("content", ["[1, 2]", "{not json", '{"runs": 3}'])
def test_a_grid_json_the_sweep_did_not_write_is_refused_before_any_work(tmp_path, cli, capsys, content):
    root, calls = cli
    (root / "grid.json").write_text(content)
    code, err = _main(["--root", str(root), "--out", str(tmp_path / "rep")], capsys)
    assert code == 2 and "is not a grid.json the sweep wrote" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not calls and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("where", ["root", "parent"])
def test_out_may_not_be_or_hold_the_sweep(tmp_path, cli, capsys, where):
    root, calls = cli
    out = root if where == "root" else tmp_path
    for force in ([], ["--force"]):  # --force or not: replacing --out would delete the sweep
        code, err = _main(["--root", str(root), "--out", str(out)] + force, capsys)
        assert code == 2 and f"--out {out} is or holds the input {root}" in err and not calls
        assert (root / "grid.json").exists() and not (out / "README.md").exists()


def test_an_error_halfway_leaves_the_previous_report_untouched(tmp_path, cli, capsys, monkeypatch):
    root, _ = cli
    out = tmp_path / "report"
    assert _main(["--root", str(root), "--out", str(out)], capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*a, **k):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(R, "fig_trajectories", broken)
    with pytest.raises(RuntimeError, match="figure failed"):
        R.main(["--root", str(root), "--out", str(out), "--n-perm", "5", "--n-boot", "5"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "sweep"]  # no staging folder left


def test_model_line_reads_the_controls_optimisers_from_their_configs(tmp_path):
    import json

    import pandas as pd

    from analyses.lst.setting import model_line, run_configs
    from trainers.config import TrainConfig

    def run(folder, **optim):
        cfg = TrainConfig().to_dict()
        cfg["optim"].update(optim)
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(json.dumps(cfg))

    run("learned-s0.1-seed0")
    run("sgd-s0.1-seed0", name="sgd", lr=0.03, momentum=0.8)
    run("wd0.1-s0.1-seed0", weight_decay=0.25)
    runs = pd.DataFrame({"run": ["learned-s0.1-seed0", "sgd-s0.1-seed0", "wd0.1-s0.1-seed0"],
                         "group": ["sigma", "control", "control"], "control": ["none", "sgd", "wd0.1"]})
    configs = run_configs(tmp_path, runs.run)
    line = model_line(configs, runs)
    assert "sgd controls: SGD lr 0.03, momentum 0.8 (lr chosen by an 8-epoch pilot" in line
    assert "wd0.1 controls: AdamW lr 0.0001, weight decay 0.25" in line and "momentum 0.9" not in line
    assert "control" not in model_line(configs, runs[runs.group == "sigma"])  # no controls ran: none named


def test_seed_count_and_sub_second_training_times_read_as_such(tmp_path):
    """QA: a one-seed sweep read "σ-grid seeds: 0" (the seed's id, taken for a count) and its runs' 0.4 s of
    training "median 0 s"."""
    frames = _frames()
    frames["runs"]["train_seconds"] = [0.4, 0.5, 0.6, 0.5, 0.5, 0.5]
    text = _setting(R.write_report(_sweep(tmp_path / "sweep", frames), tmp_path / "out", frames, "cmd").read_text())
    assert "σ-grid seeds: 2 (seeds 0, 1; the study: 15)" in text
    assert "median 0.5 s (range 0.4-0.6 s;" in text
    assert S.time_spread(pd.Series([100.0, 107.4, 144.0])) == ("107 s", "100-144 s")
    assert S.time_spread(pd.Series([1020.0, 1080.0, 1380.0])) == ("18 min", "17-23 min")  # the length report's runs


def test_a_sweep_without_sigma_runs_says_so(tmp_path):
    frames = _frames()
    keep = frames["runs"].group != "sigma"
    frames = {k: (v[keep.values] if k == "runs" else v) for k, v in frames.items()}
    text = _setting(R.write_report(_sweep(tmp_path / "sweep", frames), tmp_path / "out", frames, "cmd").read_text())
    assert "σ-grid seeds: 0 (no σ-grid runs; the study: 15)" in text
