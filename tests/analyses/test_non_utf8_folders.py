"""The analyses' commands refuse a folder whose name is not UTF-8 before any work: the runs trained there could
not be analysed (`pe_probe.filechecks` refuses their checkpoints' paths, which the tables record), so a sweep
trained for hours and then failed, and ``check_reports --work`` created the folder and reported the report as
not reproducible (exit 1) instead of naming the bad option."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import trainers.demo
from analyses import check_reports
from analyses.brain import report as brain_report
from analyses.demo import report as demo_report
from analyses.lst import analyse, length, report as lst_report, sweep
from analyses.netsim import report as netsim_report
from analyses.netsim import sweep as masked_sweep


def _never(*args, **kwargs):
    raise AssertionError("work started before the folder's name was checked")


@pytest.fixture
def bad(tmp_path: Path) -> str:
    """A folder name under tmp_path that is not UTF-8 (a Latin-1 byte), as Python keeps it: a surrogate."""
    return os.fsdecode(bytes(tmp_path) + b"/runs-\xff")


@pytest.mark.parametrize("main, argv, flag", [
    (sweep.main, ["--root", "{bad}", "--epochs", "1"], "--root"),
    (sweep.main, ["--root", "file://{bad}", "--backend", "ray"], "--root"),
    (analyse.main, ["--root", "{bad}"], "--root"),
    (lst_report.main, ["--root", "{bad}", "--out", "{tmp}/report"], "--root"),
    (length.main, ["--root", "{bad}", "--out", "{tmp}/report"], "--root"),
    (netsim_report.main, ["--runs", "{bad}", "--out", "{tmp}/report"], "--runs"),
    (brain_report.main, ["--runs", "{bad}", "--out", "{tmp}/report"], "--runs"),
    (demo_report.main, ["--runs", "{bad}", "--out", "{tmp}/report"], "--runs"),
    (check_reports.main, ["--work", "{bad}", "--reports", "netsim"], "--work"),
], ids=["lst-sweep", "lst-sweep-url", "lst-analyse", "lst-report", "lst-length", "netsim", "brain", "demo",
        "check-reports"])
def test_a_folder_whose_name_is_not_utf8_is_refused_before_any_work(tmp_path, monkeypatch, capsys, bad, main, argv,
                                                                      flag):
    for module, name in ((sweep, "make_runner"), (masked_sweep, "run_sweep"), (trainers.demo, "run_demo"),
                         (check_reports, "regenerate")):
        monkeypatch.setattr(module, name, _never)
    monkeypatch.setattr(sweep, "ray_installed", lambda: True)
    with pytest.raises(SystemExit) as e:
        main([a.format(bad=bad, tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert f"{flag} " in err and "is not a UTF-8 name" in err and len(err.splitlines()) == 1, err
    assert "\\udcff" in err  # the name as Python shows it, not a crash on the byte
    assert list(tmp_path.iterdir()) == []
