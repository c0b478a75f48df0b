"""`pe-probe demo` on an output folder that already holds runs: a last.pt there is untrusted input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trainers.demo
from pe_probe.errors import InputError
from trainers.checkpoint import FORMAT
from trainers.demo import run_demo


class Payload:
    """Pickles as a call of this module's code: torch's weights-only reader must refuse it."""

    def __reduce__(self):
        return (Path.touch, (Path("/nonexistent-dir/pwned"),))


def _no_training(*args, **kwargs):
    raise AssertionError("the demo trained although a run's last.pt is no checkpoint")


def _plant(tmp_path: Path, write) -> tuple[Path, Path, list[Path]]:
    """A demo folder whose sigma-0.1 run holds a ``last.pt`` made by ``write``; also its files before the call."""
    out = tmp_path / "demo"
    last = out / "runs" / "sigma-0.1" / "last.pt"
    last.parent.mkdir(parents=True)
    write(last)
    return out, last, sorted(out.rglob("*"))


@pytest.mark.parametrize("write, reason", [
    (lambda p: torch.save({"format": FORMAT, "x": Payload()}, p), "weights-only reader refused"),
    (lambda p: p.write_bytes(b"PK\x03\x04 not really a zip"), ""),
    (lambda p: torch.save({"epoch": 99}, p), "not format"),
    (lambda p: torch.save({"format": FORMAT, "model": {}, "config": {}, "pe_params": [], "ground_truth": None,
                           "step": 1, "epoch": "ten", "metrics": {}}, p), "not an integer"),
    (lambda p: p.mkdir(), "not a checkpoint file"),
])
def test_a_bad_last_pt_is_refused_in_one_line_before_training(tmp_path, monkeypatch, write, reason):
    monkeypatch.setattr(trainers.demo, "train_ensemble", _no_training)
    out, last, before = _plant(tmp_path, write)
    with pytest.raises(InputError) as e:
        run_demo(out, epochs=1, n_per_level=50)
    msg = str(e.value)
    assert "\n" not in msg and str(last) in msg and reason in msg
    assert "--force" in msg and "--out" in msg  # the fixes: redo the run, or another folder
    assert "weights_only=False" not in msg and "weights_only" not in msg.replace("weights-only", "")
    assert sorted(out.rglob("*")) == before  # nothing written


def test_a_finished_run_is_recognised(tmp_path):
    run = tmp_path / "runs" / "sigma-0.1"
    run.mkdir(parents=True)
    torch.save({"format": FORMAT, "model": {}, "config": {}, "pe_params": [], "ground_truth": None,
                "step": 5, "epoch": 3, "metrics": {}}, run / "last.pt")
    assert trainers.demo._finished(run, 3, tmp_path) and not trainers.demo._finished(run, 4, tmp_path)
    assert not trainers.demo._finished(tmp_path / "runs" / "sigma-2.0", 1, tmp_path)


def test_a_moved_demo_folder_redoes_its_analyses_which_would_name_the_old_folder(tmp_path, capsys):
    """A resumed demo reuses its analyses and comparison; but in a folder moved or copied from elsewhere they
    name the old folder's checkpoints (their provenance, compare.csv), so they are redone there."""
    import csv
    import json
    import shutil

    first = tmp_path / "first"
    run_demo(first, epochs=1, n_per_level=30)
    capsys.readouterr()
    stamp = (first / "compare" / "compare.csv").stat().st_mtime_ns
    run_demo(first, epochs=1, n_per_level=30)  # in place: nothing redone
    assert "== comparing ==" not in capsys.readouterr().out
    assert (first / "compare" / "compare.csv").stat().st_mtime_ns == stamp
    moved = tmp_path / "moved"
    shutil.copytree(first, moved)
    run_demo(moved, epochs=1, n_per_level=30)
    assert "== comparing ==" in capsys.readouterr().out
    for name in trainers.demo.SIGMAS:
        source = json.loads((moved / "analysis" / name / "metrics.json").read_text())["provenance"]["source"]
        assert Path(source).resolve() == (moved / "runs" / name / "last.pt").resolve()
    with open(moved / "compare" / "compare.csv", newline="") as f:
        sources = sorted(Path(row["source"]).resolve() for row in csv.DictReader(f))
    assert sources == sorted((moved / "runs" / n / "last.pt").resolve() for n in trainers.demo.SIGMAS)


def test_a_closed_output_pipe_stops_the_demo_with_exit_141_and_a_line(tmp_path, monkeypatch, capsys):
    """`pe-probe demo | head` stopped the demo with exit 0 and no word: it looked finished."""
    import sys

    from trainers.cli import demo_main

    def closed(*args, **kwargs):
        raise BrokenPipeError

    monkeypatch.setattr(trainers.demo, "run_demo", closed)
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test: the handler points it at devnull
    assert demo_main(["--out", str(tmp_path / "d")]) == 141
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pe-probe demo: stopped: its output was closed" in err and "rerun the same" in err
