"""QA fixes of the LST commands: a merged grid.json, checked --base tables, run folders with foreign files,
wording for a file given as a folder and for --at at the end, and the study numbers' source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from synthetic_sweep import run_report_command
from test_lst_length import _base_folder, configs, frames, write_configs
from test_lst_report_setting import _frames, _setting, _sweep
from test_lst_sweep_cli import SMALL, refused

from analyses.lst import length as LEN
from analyses.lst import report as R
from analyses.lst import runner as RUN
from analyses.lst import sweep as S
from analyses.lst.grid import build_grid


class FakeRunner(RUN.Runner):
    """Trains nothing: every submitted run succeeds."""

    def __init__(self):
        self.names: list[str] = []

    def submit(self, spec, out_dir):
        self.names.append(spec.name)

    def wait(self):
        return [RUN.RunResult(n, "", 0, 0.0) for n in self.names]


@pytest.fixture
def fake_runner(monkeypatch):
    monkeypatch.setattr(S, "make_runner", lambda *a, **k: FakeRunner())


# 1. grid.json is merged over the sweep's calls; the report's plan counts them all


def test_a_second_sweep_call_keeps_the_first_calls_runs_in_grid_json(tmp_path, fake_runner):
    first = ["--root", str(tmp_path), "--sigmas", "0.1", "--seeds", "1", "--groups", "sigma", "--epochs", "2"]
    second = ["--root", str(tmp_path), "--sigmas", "2.0", "--seeds", "1", "--groups", "sigma", "--epochs", "2"]
    assert S.main(first) == 0 and S.main(second) == 0
    grid = json.loads((tmp_path / "grid.json").read_text())
    names = [r["name"] for r in grid["runs"]]
    assert sorted(names) == ["learned-every-s0.1-seed0", "learned-every-s2-seed0", "sin2d-seed0"]
    assert grid["argv"] == second and [c["argv"] for c in grid["calls"]] == [first, second]
    assert grid["preset"] == "quick"


def test_calls_of_different_presets_are_listed(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"preset": "paper", "argv": ["--preset", "paper"], "runs": [{"name": "old"}]}))
    grid = build_grid("quick", sigmas=(0.1,), seeds=1, include=("sigma",))
    got = S.merged_grid(path, "quick", ["x"], grid)
    assert got["preset"] == "paper,quick" and [r["name"] for r in got["runs"]][0] == "old"
    assert [c["preset"] for c in got["calls"]] == ["paper", "quick"]


def test_a_broken_grid_json_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "grid.json").write_text("{not json")
    err = refused(tmp_path, capsys, ["--root", str(tmp_path), *SMALL])
    assert "grid.json is not a grid.json the sweep wrote; move it away" in err


def test_report_counts_finished_runs_outside_the_grid_as_planned(tmp_path):
    frames_ = _frames()
    root = _sweep(tmp_path / "sweep", frames_)
    done = sorted(frames_["runs"].run)
    (root / "grid.json").write_text(json.dumps({"preset": "quick", "runs": [{"name": done[0]}, {"name": "never-ran"}]}))
    text = _setting(R.write_report(root, tmp_path / "out", frames_, "cmd").read_text())
    assert f"preset `quick` ({len(done)} of {len(done) + 1} planned runs finished; missing: never-ran)" in text


def test_report_without_grid_json_says_the_plan_is_not_recorded(tmp_path):
    frames_ = _frames()
    root = _sweep(tmp_path / "sweep", frames_, preset="paper")
    (root / "grid.json").unlink()
    text = _setting(R.write_report(root, tmp_path / "out", frames_, "cmd").read_text())
    assert "preset `paper` (6 finished runs; the plan is not recorded (no grid.json))" in text
    assert "`?`" not in text and "paper preset" not in text


def test_a_mixed_preset_grid_is_not_said_to_lack_the_paper_preset(tmp_path):
    frames_ = _frames()
    root = _sweep(tmp_path / "sweep", frames_)
    (root / "grid.json").write_text(json.dumps({"preset": "quick,paper", "runs": []}))
    assert "was not run for this sweep" not in _setting(R.write_report(root, tmp_path / "out", frames_, "cmd").read_text())


# 2. and 4. analyses.lst.length: --base tables checked up front; a file is not a folder; --at at the end


@pytest.fixture
def long_sweep(tmp_path, monkeypatch):
    """A long sweep of finished runs (8 epochs, checkpoints every 4); returns (root, calls to `collect`)."""
    from analyses.lst import analyse

    root = write_configs(tmp_path / "long", configs(frames()["runs"]))
    for run in frames()["runs"].run:
        torch.save({"epoch": 8}, root / run / "last.pt")
    calls: list = []
    monkeypatch.setattr(analyse, "collect", lambda *a, **k: calls.append(a) or frames())
    monkeypatch.chdir(tmp_path)
    return root, calls


def _length(args: list[str], capsys) -> tuple[int, str]:
    return run_report_command(LEN.main, args, capsys)


def _empty_runs(base: Path) -> None:
    (base / "analysis" / "runs.csv").write_text("")


def _no_rsa(base: Path) -> None:
    import pandas as pd

    path = base / "analysis" / "analyses.csv"
    pd.read_csv(path).drop(columns="rsa_spearman").to_csv(path, index=False)


@pytest.mark.parametrize("spoil,says", [(_empty_runs, "has an analysis/runs.csv that cannot be read"),
                                        (_no_rsa, "has an analysis/analyses.csv without the column(s) rsa_spearman")])
def test_a_base_with_unusable_tables_is_refused_before_any_work(tmp_path, long_sweep, capsys, spoil, says):
    root, calls = long_sweep
    base = _base_folder(tmp_path / "main")
    spoil(base)
    code, err = _length(["--root", str(root), "--base", str(base), "--out", str(tmp_path / "out"), "--at", "4"], capsys)
    assert code == 2 and f"--base {base} {says}" in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not calls and not (tmp_path / "out").exists()


def test_a_base_that_is_a_file_is_named_a_file(tmp_path, long_sweep, capsys):
    root, calls = long_sweep
    (tmp_path / "main").write_text("x")
    code, err = _length(["--root", str(root), "--base", str(tmp_path / "main"), "--out", str(tmp_path / "out"),
                         "--at", "4"], capsys)
    assert code == 2 and "is a file, not a sweep folder" in err and "does not exist" not in err and not calls


def test_an_at_at_the_last_epoch_says_it_must_come_before_it(tmp_path, long_sweep, capsys):
    root, calls = long_sweep
    code, err = _length(["--root", str(root), "--base", "", "--out", str(tmp_path / "out"), "--at", "8"], capsys)
    assert code == 2 and "--at must be before the runs' last epoch (8)" in err and "ckpt_every" not in err
    assert not calls


@pytest.mark.parametrize("module", ["report", "length"])
def test_a_root_that_is_a_file_is_named_a_file(tmp_path, capsys, module):
    import importlib

    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"analyses.lst.{module}").main(["--root", str(tmp_path / "f"), "--out",
                                                                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "is a file, not a sweep folder" in err and "no such sweep folder" not in err


# 3. a run folder holding files that are not its run's is refused before anything is written


@pytest.mark.parametrize("dry", [["--dry-run"], []])
def test_a_run_folder_with_foreign_files_is_refused(tmp_path, capsys, dry):
    (tmp_path / "learned-every-s0.1-seed0").mkdir()
    (tmp_path / "learned-every-s0.1-seed0" / "junk").write_text("mine")
    err = refused(tmp_path, capsys, ["--root", str(tmp_path), *SMALL, *dry])
    assert "1 run folder(s) under" in err and "e.g. learned-every-s0.1-seed0: holds files that are not this run's (junk)" in err
    assert "move those files away, or delete the folder" in err
    (tmp_path / "learned-every-s0.1-seed0" / "junk").unlink()  # the pipeline's own files are accepted
    for name in ("spec.json", "train.log"):
        (tmp_path / "learned-every-s0.1-seed0" / name).write_text("")
    assert S.main(["--root", str(tmp_path), *SMALL, "--dry-run"]) == 0
    assert "todo  learned-every-s0.1-seed0" in capsys.readouterr().out


# 5. the study's numbers are said to come from analyses/lst/study.py, not a DESIGN.md the repository lacks


def test_report_points_at_study_py_for_the_study_numbers(tmp_path):
    frames_ = _frames()
    text = R.write_report(_sweep(tmp_path / "sweep", frames_), tmp_path / "out", frames_, "cmd").read_text()
    assert "`analyses/lst/study.py`" in text and "DESIGN.md" not in text


def test_a_run_folder_with_a_broken_config_is_named_with_the_file(tmp_path, capsys):
    (tmp_path / "learned-every-s0.1-seed0").mkdir()
    (tmp_path / "learned-every-s0.1-seed0" / "config.json").write_text("{")
    err = refused(tmp_path, capsys, ["--root", str(tmp_path), *SMALL, "--dry-run"])
    assert "e.g. learned-every-s0.1-seed0: config.json is not valid JSON" in err and "--force" not in err


def test_a_dry_run_into_a_closed_pipe_ends_quietly_with_exit_0(tmp_path, monkeypatch):
    """`sweep --dry-run | head -1` ended in a BrokenPipeError traceback (README walkthrough)."""
    import io
    import sys

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert S.main(["--root", str(tmp_path / "sweep"), *SMALL, "--dry-run"]) == 0
    assert not (tmp_path / "sweep").exists()


def test_a_root_of_another_tasks_runs_is_refused_before_analysing(tmp_path, monkeypatch):
    """analyse / report / length analysed netsim runs for a while, then failed with a traceback (--view attention)."""
    import json

    from analyses.lst import analyse

    root = tmp_path / "root"
    for name, task in (("l1", "lst"), ("n1", "netsim")):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text(json.dumps({"task": task}))
    monkeypatch.setattr(analyse, "finished_runs", lambda r: sorted(p for p in r.iterdir()))
    problem = analyse.sweep_root_problem(root)
    assert problem is not None and "1 run(s) of another task (n1: 'netsim')" in problem
    (root / "n1" / "config.json").write_text(json.dumps({"task": "lst"}))
    assert analyse.sweep_root_problem(root) is None
