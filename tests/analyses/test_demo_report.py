"""reports/demo/: the demo's small outputs, copied, with a README whose links all resolve."""

import functools
import re

import pytest


@pytest.mark.slow
def test_the_demo_report_holds_the_summary_logs_and_every_linked_file(tmp_path, monkeypatch, capsys):
    import trainers.demo
    from analyses.demo import report

    monkeypatch.setattr(trainers.demo, "run_demo", functools.partial(trainers.demo.run_demo, epochs=2, n_per_level=30))
    out = tmp_path / "reports" / "demo"
    assert report.main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    summary = (tmp_path / "runs" / "summary.md").read_text()
    table = [line for line in summary.splitlines() if line.startswith("| ood_acc |")]
    assert table and table[0] in text  # the demo's own table, verbatim
    assert "Folders: `runs/`" not in text and "python -m analyses.demo.report" in text
    assert re.search(r"\| 2 \| \d\.\d{4} \| \d\.\d{3} \| \d\.\d{4} \| \d\.\d{3} \|", text)  # the last evaluation
    for link in re.findall(r"\]\(([^)]+)\)", text):
        assert (out / link).is_file(), link
    assert not list(out.rglob("*.pt")) and not list(out.rglob("*.html"))  # no checkpoints, no 5 MB pages
    # a second call resumes (nothing retrained) and replaces its own folder
    capsys.readouterr()
    assert report.main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert "already finished" in capsys.readouterr().out


@pytest.mark.parametrize("runs,out", [("rep/runs", "rep"), ("same", "same")])
def test_an_out_folder_that_would_hold_the_runs_is_refused_before_training(tmp_path, monkeypatch, capsys, runs, out):
    """A review found --runs inside an earlier report folder deleted with it, and --out == --runs refused only
    after the whole demo had trained."""
    import trainers.demo
    from analyses.demo import report

    monkeypatch.setattr(trainers.demo, "run_demo", lambda *a, **k: pytest.fail("trained before checking --out"))
    (tmp_path / out).mkdir()
    (tmp_path / out / ".pe-probe-output").write_text("written by pe-probe\n")  # a report folder of ours
    with pytest.raises(SystemExit) as e:
        report.main(["--runs", str(tmp_path / runs), "--out", str(tmp_path / out)])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_a_demo_folder_missing_a_file_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    import trainers.demo
    from analyses.demo import report

    def fake_demo(runs, force=False, **_):
        (runs / "runs").mkdir(parents=True)
        (runs / "summary.md").write_text("# t\n\nFolders: `runs/`\n")
        return runs / "summary.md"

    monkeypatch.setattr(trainers.demo, "run_demo", fake_demo)
    with pytest.raises(SystemExit) as e:
        report.main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "config.json is missing" in err and "rerun with --force" in err
    assert not (tmp_path / "rep").exists()


def test_compare_sources_are_written_relative_to_the_demo_folder(tmp_path):
    """The committed compare.csv named the absolute folder of the machine that made it (/work/main/runs/...)."""
    from analyses.demo.report import relative_sources

    demo = tmp_path / "demo"
    inside = demo / "runs" / "sigma-0.1" / "last.pt"
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(f"source,label,notes\n{inside},sigma-0.1,\"a, b\"\n/elsewhere/x.pt,x,\n")
    relative_sources(src, dst, demo)
    assert dst.read_text() == "source,label,notes\nruns/sigma-0.1/last.pt,sigma-0.1,\"a, b\"\n/elsewhere/x.pt,x,\n"


def test_a_refused_run_folder_names_runs_not_the_trainers_out(tmp_path, monkeypatch, capsys):
    """The trainer's fix 'use another --out' named the report folder's option; the runs are --runs here."""
    import trainers.demo
    from analyses.demo import report
    from trainers.train import RunDirRefused

    def refused(runs, force=False, **_):
        raise RunDirRefused(runs / "runs" / "sigma-0.1", "holds a run with a different config: optim.epochs (6 -> 40)",
                            "use another --out, or --force to restart")

    monkeypatch.setattr(trainers.demo, "run_demo", refused)
    with pytest.raises(SystemExit) as e:
        report.main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "optim.epochs (6 -> 40); pass another --runs, or --force to retrain" in err and "--out" not in err


@pytest.mark.parametrize("make", ["file", "foreign folder"])
def test_a_bad_runs_folder_is_named_as_runs_not_as_the_demos_out(tmp_path, capsys, make):
    """The demo checks its folder as its own --out; under this command that folder is --runs, and the error (and
    its fix) must say so, before any training."""
    from analyses.demo import report

    runs = tmp_path / "runs"
    if make == "file":
        runs.write_text("x")
    else:
        runs.mkdir()
        (runs / "mine.txt").write_text("x")
    with pytest.raises(SystemExit) as e:
        report.main(["--runs", str(runs), "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert f"error: --runs {runs} " in err and "--out" not in err
    assert not (tmp_path / "rep").exists()
