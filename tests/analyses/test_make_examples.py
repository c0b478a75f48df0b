"""analyses/make_examples.py: the committed reports/examples reproduce, and the command keeps the output contract
(one-line errors, exit 2, nothing written; the folder replaced whole or not at all)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, str(ROOT / "analyses" / "make_examples.py")]


@pytest.mark.parametrize("argv,needle", [(["--seed", "-1"], "--seed -1"), (["--out", "FILE"], "is a file, not a folder"),
                                         (["--out", "OTHER"], "not written by pe-probe")])
def test_bad_options_are_one_line_errors_and_nothing_is_written(tmp_path, argv, needle):
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "OTHER").mkdir()
    (tmp_path / "OTHER" / "mine.txt").write_text("keep")
    argv = [str(tmp_path / a) if a in ("FILE", "OTHER") else a for a in argv]
    res = subprocess.run([*SCRIPT, *argv] + ([] if "--out" in argv else ["--out", str(tmp_path / "new")]),
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists() and sorted(p.name for p in (tmp_path / "OTHER").iterdir()) == ["mine.txt"]


def test_the_committed_examples_reproduce(tmp_path):
    res = subprocess.run([*SCRIPT, "--out", str(tmp_path / "ex")], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    for name in ("sinusoid-8x8", "random-8x8"):
        committed = json.loads((ROOT / "reports" / "examples" / name / "metrics.json").read_text())
        fresh = json.loads((tmp_path / "ex" / name / "metrics.json").read_text())
        metrics = [k for k in committed if k != "provenance"]  # flat metric keys; provenance holds the timings
        assert len(metrics) > 20 and {k: fresh[k] for k in metrics} == {k: committed[k] for k in metrics}, name
    assert (tmp_path / "ex" / "plotly.min.js").is_file() and (tmp_path / "ex" / ".pe-probe-output").is_file()
