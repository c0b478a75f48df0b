"""`python -m analyses.check_reports`: the number-by-number comparison of regenerated reports with the
committed ones (on copies of reports/netsim/ and reports/demo/, changed by hand), its exit codes and its
one-line errors; the slow test regenerates the netsim pilot for real."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from analyses import check_reports
from analyses.check_reports import compare_file, compare_folders, main

ROOT = Path(__file__).resolve().parents[2]


def _copies(tmp_path: Path, names: tuple[str, ...] = ("netsim",)) -> tuple[Path, Path]:
    committed, regenerated = tmp_path / "committed", tmp_path / "regenerated"
    for name in names:
        shutil.copytree(ROOT / "reports" / name, committed / name)
        shutil.copytree(ROOT / "reports" / name, regenerated / name)
    return committed, regenerated


def _edit_csv(path: Path, row: int, column: str, value: str) -> str:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    old = rows[row][column]
    rows[row][column] = value
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return old


def _numeric_column(path: Path) -> str:
    with open(path, newline="") as f:
        row = next(csv.DictReader(f))
    for key, value in row.items():
        try:
            if float(value) != 0:
                return key
        except ValueError:
            continue
    raise AssertionError("no numeric column")


def test_identical_copies_reproduce_and_every_number_is_counted(tmp_path):
    committed, regenerated = _copies(tmp_path)
    checks = compare_folders(committed / "netsim", regenerated / "netsim")
    assert [c.path for c in checks] == sorted(p.relative_to(committed / "netsim").as_posix()
                                              for p in (committed / "netsim").rglob("*")
                                              if p.suffix in (".csv", ".json", ".jsonl"))
    assert all(c.status == "identical" and c.ok for c in checks)
    with open(committed / "netsim" / "summary.csv", newline="") as f:
        rows = list(csv.reader(f))
    numeric = sum(1 for r in rows[1:] for cell in r if check_reports.as_number(cell) is not None)
    assert next(c for c in checks if c.path == "summary.csv").numbers == numeric > 0


def test_a_changed_number_is_found_with_its_size_and_place(tmp_path):
    committed, regenerated = _copies(tmp_path)
    path = regenerated / "netsim" / "summary.csv"
    column = _numeric_column(path)
    old = float(_edit_csv(path, 1, column, "0"))
    check = compare_file(committed / "netsim" / "summary.csv", path, "summary.csv")
    assert check.status == "differs" and not check.ok and check.differing == 1
    assert check.max_abs == pytest.approx(abs(old)) and check.max_rel == pytest.approx(1.0)
    assert f"rows[1].{column}" in check.first
    # a tolerance wider than the change accepts it, and says it was not identical
    loose = compare_file(committed / "netsim" / "summary.csv", path, "summary.csv", atol=abs(old) * 1.01)
    assert loose.status == "within tolerance" and loose.ok and loose.differing == 0


def test_text_and_shape_changes_missing_and_extra_files_differ(tmp_path):
    committed, regenerated = _copies(tmp_path)
    reg = regenerated / "netsim"
    with open(reg / "runs.csv", newline="") as f:
        header = next(csv.reader(f))
    text_column = next(c for c in header if c in ("pe", "name", "condition", "run"))
    _edit_csv(reg / "runs.csv", 0, text_column, "something else")
    doc = json.loads((reg / "linear_baseline.json").read_text())
    doc["a new key"] = 1
    (reg / "linear_baseline.json").write_text(json.dumps(doc))
    (reg / "layers.csv").unlink()
    (reg / "new.csv").write_text("a\n1\n")
    by_path = {c.path: c for c in compare_folders(committed / "netsim", reg)}
    assert by_path["runs.csv"].status == "differs" and "something else" in by_path["runs.csv"].first
    assert by_path["linear_baseline.json"].status == "differs" and "a new key" in by_path["linear_baseline.json"].first
    assert by_path["layers.csv"].status == "missing" and by_path["new.csv"].status == "extra"
    assert by_path["summary.csv"].status == "identical"


def test_wall_clock_times_in_training_logs_are_not_compared_but_metrics_are(tmp_path):
    committed, regenerated = _copies(tmp_path, ("demo",))
    log = regenerated / "demo" / "runs" / "sigma-0.1" / "metrics.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        line["time"] += 100.0
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert compare_file(committed / "demo" / "runs" / "sigma-0.1" / "metrics.jsonl", log, "x").status == "identical"
    lines[-1]["ood_acc"] = lines[-1]["ood_acc"] + 0.01
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    check = compare_file(committed / "demo" / "runs" / "sigma-0.1" / "metrics.jsonl", log, "x")
    assert check.status == "differs" and f"[{len(lines) - 1}].ood_acc" in check.first


def test_nan_equals_nan_and_bools_are_not_numbers(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"x": NaN, "flag": true}')
    b.write_text('{"x": NaN, "flag": true}')
    assert compare_file(a, b, "j").status == "identical"
    b.write_text('{"x": NaN, "flag": 1}')
    assert compare_file(a, b, "j").status == "differs"


def test_the_command_exits_0_when_identical_and_1_with_a_summary_when_not(tmp_path, capsys):
    committed, regenerated = _copies(tmp_path, ("netsim", "demo"))
    argv = ["--committed", str(committed), "--regenerated", str(regenerated), "--reports", "netsim,demo"]
    out = tmp_path / "check.md"
    assert main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "**netsim**: reproduces" in text and "**demo**: reproduces" in text
    assert out.read_text() == text and not list(tmp_path.glob(".check.md*"))
    path = regenerated / "demo" / "analysis" / "sigma-0.1" / "metrics.csv"
    _edit_csv(path, 0, _numeric_column(path), "12345")
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "**demo**: **1 of" in text and "| demo | `analysis/sigma-0.1/metrics.csv` | differs |" in text


def test_the_summary_line_counts_numbers_beyond_the_tolerance_apart_from_rounding(tmp_path, capsys):
    """One number 1.5x, one 1+1e-14: the line said '1 of them differ in the last digits only, within the tolerance
    (largest relative difference 0.5)', the 0.5 being the one beyond it, which the line did not count."""
    committed, regenerated = _copies(tmp_path)
    path = regenerated / "netsim" / "linear_baseline.json"
    doc = json.loads(path.read_text())
    keys = [k for k, v in doc.items() if isinstance(v, float) and v != 0][:2]
    doc[keys[0]] *= 1.5
    doc[keys[1]] *= 1 + 1e-14
    path.write_text(json.dumps(doc))
    assert main(["--committed", str(committed), "--regenerated", str(regenerated), "--reports", "netsim"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("- **netsim**"))
    assert "; 1 differ beyond the tolerance (largest relative difference 0.5)" in line
    assert "; 1 more differ in the last digits only, within the tolerance (largest relative difference 1e-14)" in line


def test_a_failed_regeneration_is_reported_and_exits_1(tmp_path, monkeypatch, capsys):
    committed, _ = _copies(tmp_path)
    monkeypatch.setattr(check_reports, "regenerate", lambda name, work: 3)
    assert main(["--committed", str(committed), "--reports", "netsim", "--work", str(tmp_path / "w")]) == 1
    assert "could not be regenerated**: its command exited 3" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--reports", "lst"], "unknown report lst"),
    (["--reports", ","], "unknown report (none)"),
    (["--reports", "netsim", "--regenerated", "MISSING"], "--regenerated MISSING does not exist; pass the folder"),
    (["--reports", "netsim", "--regenerated", "FILE"], "--regenerated FILE is a file, not a folder; pass the folder"),
    (["--reports", "netsim", "--regenerated", "."], "has no netsim/ folder"),
    (["--reports", "netsim", "--rtol", "-1"], "--rtol -1.0 must be"),
    (["--reports", "netsim", "--atol", "nan"], "--atol nan must be"),
    (["--reports", "netsim", "--out", "NODIR/x.md"], "name a file in an existing folder"),
    (["--reports", "netsim", "--out", "a" * 250 + ".md"], "is too long: the summary is staged beside it"),
    (["--reports", "netsim", "--out", "/proc/x.md"], "--out /proc/x.md: No such file or directory"),
    (["--reports", "netsim", "--work", "FILE"], "--work FILE is a file, not a folder"),
    (["--reports", "netsim", "--work", "FILE/sub"], "a part of the path is a file, not a folder"),
    (["--reports", "netsim", "--work", "LOOP"], "the path loops through symbolic links"),
    (["--reports", "netsim", "--work", "DANGLING"], "is a symbolic link to nothing"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_work(tmp_path, monkeypatch, capsys, extra, message):
    """The --work and --out cases were tracebacks (exit 1), --out's only after every comparison was made."""
    committed, _ = _copies(tmp_path)
    monkeypatch.setattr(check_reports, "regenerate", lambda name, work: pytest.fail("regenerated on bad input"))
    (tmp_path / "FILE").write_text("mine")
    (tmp_path / "LOOP").symlink_to(tmp_path / "LOOP2")
    (tmp_path / "LOOP2").symlink_to(tmp_path / "LOOP")
    (tmp_path / "DANGLING").symlink_to(tmp_path / "nowhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    extra = [str(tmp_path / e) if e.split("/")[0] in ("MISSING", "NODIR", "FILE", "LOOP", "DANGLING") or
             e.startswith("aaa") else e for e in extra]
    message = message.replace("FILE", str(tmp_path / "FILE")).replace("MISSING", str(tmp_path / "MISSING"))
    with pytest.raises(SystemExit) as exc:
        main(["--committed", str(committed), *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no --work folder, no .partial file


def test_the_first_difference_of_a_file_compared_as_text_is_a_short_excerpt(tmp_path):
    """A file that does not parse is compared as bytes: its first difference was the whole file in a table cell."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, tail in ((a, b"X"), (b, b"Y")):
        folder.mkdir()
        (folder / "broken.json").write_bytes(b"{" + b"0" * 5000 + tail + b"1" * 5000)
    check = compare_file(a / "broken.json", b / "broken.json", "broken.json")
    assert not check.ok and len(check.first) < 300, check.first
    assert check.first.startswith("value at byte 5001: …b'") and "X" in check.first and "Y" in check.first


def test_work_inside_the_committed_reports_is_refused(tmp_path, capsys):
    committed, _ = _copies(tmp_path)
    with pytest.raises(SystemExit):
        main(["--committed", str(committed), "--reports", "netsim", "--work", str(committed / "scratch")])
    assert "inside the committed reports" in capsys.readouterr().err
    assert not (committed / "scratch").exists()


@pytest.mark.slow
def test_the_netsim_pilot_regenerates_and_every_committed_file_is_compared(tmp_path, capsys):
    """Trains the pilot's 10 runs for real (~2 min on 2 cores). Whether the numbers are identical depends on
    the CPU type (the committed runs name theirs), so this asserts the comparison covers every file."""
    code = main(["--reports", "netsim", "--work", str(tmp_path / "work")])
    text = capsys.readouterr().out
    assert code in (0, 1), text
    committed = sorted(p.relative_to(ROOT / "reports" / "netsim").as_posix()
                       for p in (ROOT / "reports" / "netsim").rglob("*") if p.suffix in (".csv", ".json"))
    for rel in committed:
        assert f"| netsim | `{rel}` | " in text and f"| netsim | `{rel}` | missing" not in text


def test_extra_files_are_counted_apart_from_differing_ones(tmp_path, capsys):
    """A full `pe-probe demo --out` folder holds files the committed demo leaves out: the line said '25 of 26 files
    differ' when 18 of them were extra and none differed (README walkthrough)."""
    committed, regenerated = _copies(tmp_path)
    (regenerated / "netsim" / "more.csv").write_text("a,b\n1,2\n")
    (regenerated / "netsim" / "more.json").write_text("{}")
    assert main(["--committed", str(committed), "--regenerated", str(regenerated), "--reports", "netsim"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("- **netsim**"))
    assert line.startswith("- **netsim**: **extra files**: ") and "files differ" not in line
    assert "; **2 extra files** in the regenerated report, not in the committed one" in line
