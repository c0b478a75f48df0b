"""Report folders: never over an input, whole or not at all, even when the writer is killed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pe_probe.errors import InputError
from pe_probe.output import MARKER, check_out_dir, staged_dir


def test_out_inside_an_input_folder_is_refused_when_it_holds_other_files_force_or_not(tmp_path):
    runs = tmp_path / "runs"
    (runs / "run-a").mkdir(parents=True)
    (runs / "run-a" / "last.pt").write_bytes(b"weights")
    for force in (False, True):
        with pytest.raises(InputError, match="inside the input .* --force or not"):
            check_out_dir(runs / "run-a", force=force, inputs=[runs])
    assert (runs / "run-a" / "last.pt").exists()
    check_out_dir(runs / "report", inputs=[runs])  # a new folder inside: nothing to delete
    (runs / "old-report").mkdir()
    (runs / "old-report" / MARKER).write_text("written by pe-probe\n")
    (runs / "old-report" / "README.md").write_text("x")
    check_out_dir(runs / "old-report", inputs=[runs])  # an earlier report of ours


def test_a_killed_writer_leaves_no_staging_folder(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from pe_probe.output import staged_dir
        with staged_dir({str(tmp_path / 'out')!r}) as stage:
            (stage / "half.txt").write_text("half")
            os.kill(os.getpid(), signal.SIGTERM)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 128 + 15, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_folders_abandoned_by_dead_writers_are_removed_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    abandoned = tmp_path / f".out.staging-{dead_pid}-abc"
    live = tmp_path / f".out.staging-{__import__('os').getpid()}-def"
    other = tmp_path / f".other.staging-{dead_pid}-ghi"
    for folder in (abandoned, live, other):
        folder.mkdir()
    with staged_dir(tmp_path / "out") as stage:
        (stage / "a.txt").write_text("a")
    assert not abandoned.exists() and live.exists() and other.exists()
    assert (tmp_path / "out" / "a.txt").read_text() == "a"


def test_out_may_not_be_or_hold_an_input_the_command_creates_later(tmp_path):
    """A sweep's --runs may not exist yet: check_out_dir refuses an --out that is or holds it all the same
    when told it is created (``created_inputs``); as a plain input that does not exist it is skipped."""
    runs = tmp_path / "new" / "runs"
    for out in (tmp_path / "new", runs):
        with pytest.raises(InputError, match="is or holds the input"):
            check_out_dir(out, created_inputs=[runs])
        check_out_dir(out, inputs=[runs])  # an input that does not exist cannot be deleted
    check_out_dir(tmp_path / "report", created_inputs=[runs])  # beside it: fine
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("source,out", [
    ("run/last.pt", "run/checkpoints"),  # a run's step checkpoints beside the analysed last.pt
    ("run/checkpoints/step-2.pt", "run/notes"),  # a step checkpoint: its run is the input's folder
    ("model/model.safetensors", "model/onnx"),  # a model folder's other parts
])
def test_out_inside_the_run_or_model_folder_of_an_input_file_is_refused_force_or_not(tmp_path, source, out):
    """QA: `pe-probe analyze RUN/last.pt --out RUN/checkpoints --force` replaced the run's step checkpoints."""
    for name, text in {"run/last.pt": "w", "run/config.json": "{}", "run/checkpoints/step-2.pt": "w",
                       "run/notes/mine.txt": "x", "model/config.json": "{}", "model/model.safetensors": "w",
                       "model/onnx/model.onnx": "w"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for force in (False, True):
        with pytest.raises(InputError, match=r"the folder of the input .* --force or not"):
            check_out_dir(tmp_path / out, force=force, inputs=[tmp_path / source])
    check_out_dir(tmp_path / source.split("/")[0] / "report", inputs=[tmp_path / source])  # a new folder: fine
    loose = tmp_path / "loose"
    (loose / "old").mkdir(parents=True)
    (loose / "old" / "x.txt").write_text("x")
    (loose / "table.npy").write_bytes(b"")
    check_out_dir(loose / "old", force=True, inputs=[loose / "table.npy"])  # a file on its own: --force replaces
