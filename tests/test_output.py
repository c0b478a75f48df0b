"""Report folders: never over an input, whole or not at all, even when the writer is killed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pe_probe.errors import InputError
from pe_probe.groundtruth import grid, parse_ground_truth
from pe_probe.output import MARKER, check_out_dir, staged_dir, write_data_files
from pe_probe.result import AnalysisResult


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
    (tmp_path / "proj" / "out").mkdir(parents=True)  # a --runs still to be made is a folder, not a loose file:
    (tmp_path / "proj" / "out" / "old.txt").write_text("x")  # its parent (with a config.json) is no run folder
    (tmp_path / "proj" / "config.json").write_text("{}")
    check_out_dir(tmp_path / "proj" / "out", force=True, created_inputs=[tmp_path / "proj" / "runs"])


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


def _run_with_notes(root: Path) -> Path:
    """RUN/{last.pt, config.json, checkpoints/step-2.pt, table.npy, notes/mine.txt}: a run and a user's folder in it."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "notes").mkdir()
    for name in ("last.pt", "config.json", "checkpoints/step-2.pt", "table.npy", "notes/mine.txt"):
        (run / name).write_text("x")
    return run


def test_inputs_are_matched_by_their_real_paths(tmp_path, monkeypatch):
    """Review: from inside RUN/checkpoints, `analyze step-2.pt --out ../notes --force` and a symbolic link to a
    run's file escaped the rule (the path as typed has no run folder above it)."""
    run = _run_with_notes(tmp_path)
    monkeypatch.chdir(run / "checkpoints")
    with pytest.raises(InputError, match="the folder of the input step-2.pt"):
        check_out_dir("../notes", force=True, inputs=["step-2.pt"])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "best.npy").symlink_to(run / "table.npy")
    with pytest.raises(InputError, match="--force or not"):
        check_out_dir(run / "checkpoints", force=True, inputs=[tmp_path / "work" / "best.npy"])
    assert (run / "notes" / "mine.txt").exists() and (run / "checkpoints" / "step-2.pt").exists()


def test_an_out_through_dot_dot_is_checked_as_the_folder_it_names(tmp_path):
    """Review: `--out RUN/x/../checkpoints` (RUN/x missing) was not seen as the existing RUN/checkpoints, so the
    run's checkpoints were replaced without --force."""
    run = _run_with_notes(tmp_path)
    with pytest.raises(InputError, match="--force or not"):
        check_out_dir(run / "x" / ".." / "checkpoints", inputs=[run / "table.npy"])
    with pytest.raises(InputError, match="pass --force"):
        check_out_dir(tmp_path / "new" / ".." / "run" / "notes")  # a foreign folder, named through ..
    assert check_out_dir(tmp_path / "new" / ".." / "report") == (tmp_path / "report").resolve()
    assert not (run / "x").exists() and not (tmp_path / "new").exists()


def test_an_out_that_is_a_link_to_a_folder_writes_into_that_folder_and_stays_a_link(tmp_path):
    """The report was renamed over the link: --out became a real folder and the folder it named stayed empty."""
    target = tmp_path / "storage" / "report"
    target.mkdir(parents=True)
    link = tmp_path / "report"
    link.symlink_to(target)
    with staged_dir(link) as stage:
        (stage / "metrics.json").write_text("{}")
    assert link.is_symlink() and (target / "metrics.json").is_file() and (target / MARKER).is_file()
    with staged_dir(link) as stage:  # rewritten: the link still stands, its folder holds the new report
        (stage / "metrics.json").write_text('{"again": 1}')
    assert link.is_symlink() and json.loads((target / "metrics.json").read_text()) == {"again": 1}
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    (tmp_path / "to-mine").symlink_to(tmp_path / "mine")
    with pytest.raises(InputError, match="pass --force"):  # what the link names is checked, not the link
        check_out_dir(tmp_path / "to-mine")


def test_a_loose_table_beside_a_checkpoints_folder_does_not_block_force(tmp_path):
    """Only run and model folders protect their parts: a project folder that merely holds checkpoints/ (no
    last.pt, no config.json) lets --force replace its results/ folder as before."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "pe_table.npy").write_text("x")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "old.txt").write_text("x")
    check_out_dir(tmp_path / "results", force=True, inputs=[tmp_path / "checkpoints" / "pe_table.npy"])


def test_run_folder_names_are_the_trainer_s():
    from pe_probe import output
    from trainers import train

    assert (output.RUN_LAST, output.RUN_CONFIG, output.RUN_CHECKPOINTS) == (train.LAST, train.CONFIG_FILE, train.CKPT_DIR)


def test_the_python_api_writes_no_report_over_an_analysis_s_inputs(tmp_path):
    """Review: `pe_probe.write_analysis(result, RUN/checkpoints, force=True)` replaced a run's checkpoints; it now
    checks the inputs its result's provenance names, as the command line does."""
    import pe_probe

    run = _run_with_notes(tmp_path)
    np.save(run / "table.npy", np.random.default_rng(0).normal(size=(16, 4)))
    result = pe_probe.analyze_source(str(run / "table.npy"), ground_truth="line:16", n_perm=0, n_boot=0, methods="pca")
    for out, needle in ((run / "checkpoints", "--force or not"), (run, "is or holds the input")):
        with pytest.raises(InputError, match=needle):
            pe_probe.write_analysis(result, out, force=True, figures=False)
    assert (run / "checkpoints" / "step-2.pt").exists()
    assert (pe_probe.write_analysis(result, tmp_path / "report", figures=False) / "metrics.json").exists()


def test_an_out_name_too_long_to_stage_beside_is_refused_before_any_work(tmp_path):
    """A 250-byte name passed the early checks and failed only after the whole analysis, at staging time."""
    from pe_probe.output import MAX_OUT_NAME

    with pytest.raises(InputError, match=f"is 250 bytes long; .* use at most {MAX_OUT_NAME}"):
        check_out_dir(tmp_path / ("o" * 250))
    with staged_dir(tmp_path / ("o" * MAX_OUT_NAME)) as stage:  # the longest allowed name stages fine
        (stage / "x").write_text("x")
    assert (tmp_path / ("o" * MAX_OUT_NAME) / "x").exists()


def test_os_errors_on_a_user_s_path_become_one_line_with_the_fix():
    import errno

    from pe_probe.errors import os_error_message

    assert os_error_message(PermissionError(errno.EACCES, "Permission denied", "/x/t.npy")) == (
        "/x/t.npy: Permission denied; check its permissions, or run as a user who may read (or write) it")
    assert os_error_message(OSError(errno.ENAMETOOLONG, "File name too long", "a" * 300)).endswith("use a shorter one")
    assert "'bad\\nname.npy'" in os_error_message(FileNotFoundError(errno.ENOENT, "No such file", "bad\nname.npy"))
    assert os_error_message(OSError(errno.ENOSPC, "No space left on device", "/x")) is None  # not bad input
    assert os_error_message(OSError(errno.EIO, "I/O error")) is None


def test_a_termination_signal_whose_exit_was_swallowed_still_stops_the_report(tmp_path):
    """SIGTERM's SystemExit raised inside a weakref callback is printed and dropped by Python ('Exception
    ignored in ...'): the process went on and wrote the report (2 of ~25 fuzzing runs). Now the staged folder
    is not committed and the exit still happens."""
    import os
    import signal

    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as e:
        with staged_dir(out) as stage:
            (stage / "x").write_text("x")
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes, here
                    pass
            except SystemExit:  # what a weakref callback does with it
                pass
            (stage / "y").write_text("y")
    assert e.value.code == 128 + signal.SIGTERM
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_swallowed_exit_prints_no_traceback_but_other_unraisables_still_print(tmp_path, monkeypatch):
    """Where SIGTERM lands inside __del__ (or a weakref callback), Python printed 'Exception ignored in ...' and a
    traceback (a review saw it in 2 of ~16 timed kills); the exit that follows is the message, so that one is not
    passed to the unraisable hook (which prints it). Other unraisable errors still are."""
    import gc
    import os
    import signal
    import sys

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value).__name__))

    class KilledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes, here
                pass

    class Broken:
        def __del__(self):
            raise ValueError("a real bug in a finaliser")

    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as e:
        with staged_dir(out) as stage:
            (stage / "x").write_text("x")
            Broken()
            gc.collect()
            assert seen == ["ValueError"]  # not hidden
            KilledWhileCollected()
            gc.collect()
    assert e.value.code == 128 + signal.SIGTERM and not out.exists()
    assert seen == ["ValueError"]


# ---- report folders replaced whole; the data files' values

def _write_report(out, text):
    with staged_dir(out) as stage:
        (stage / "report.txt").write_text(text)


def test_rewriting_a_report_replaces_it_and_leaves_no_hidden_copies(tmp_path):
    out = tmp_path / "report"
    _write_report(out, "first")
    (out / "stale.txt").write_text("from the first run")  # inside our own folder: replaced as a whole
    _write_report(out, "second")
    assert (out / "report.txt").read_text() == "second" and (out / MARKER).is_file()
    assert not (out / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no .report.old-* / .report.staging-*


def test_an_error_while_writing_keeps_the_previous_report_and_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "report"
    _write_report(out, "good")
    with pytest.raises(RuntimeError):
        with staged_dir(out) as stage:
            (stage / "report.txt").write_text("half")
            raise RuntimeError("analysis failed")
    assert (out / "report.txt").read_text() == "good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_finished_report_folder_gets_the_umask_mode_not_the_private_staging_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        _write_report(tmp_path / "report", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "report").stat().st_mode) == 0o755


def test_out_may_not_be_the_current_folder_or_one_above_it(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / MARKER).write_text("written by pe-probe\n")  # even a folder that looks like ours
    monkeypatch.chdir(work)
    for out in (".", "..", str(work), str(tmp_path)):
        with pytest.raises(InputError, match="current folder or one above it"):
            check_out_dir(out, force=True)


def _result(coords: np.ndarray, emb: np.ndarray, metrics: dict) -> AnalysisResult:
    n = len(coords)
    return AnalysisResult(metrics=metrics, provenance={"source": "t.npy", "seed": 0}, table=np.zeros((n, 3)),
                          coords=coords, gt_spec="grid:2x3", gt_kind="grid", gt_shape=(2, 3), pe_metric="euclidean",
                          pe_distances=np.zeros(n * (n - 1) // 2), gt_distances=np.zeros(n * (n - 1) // 2),
                          embeddings={"mds": emb})


def test_embedding_csv_columns_hold_each_axis_of_truth_and_recovery(tmp_path):
    coords = grid(2, 3).coords  # (row, col), rows differ from cols: a swap would show
    emb = coords * 10.0 + np.array([0.5, -0.25])
    write_data_files(_result(coords, emb, {"n_positions": 6, "rsa": 0.75, "nan_metric": float("nan")}), tmp_path)
    df = pd.read_csv(tmp_path / "embedding.csv")
    assert list(df.columns) == ["position", "true_0", "true_1", "mds_0", "mds_1"]
    np.testing.assert_array_equal(df["position"], np.arange(6))
    np.testing.assert_array_equal(df["true_0"], [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(df["true_1"], [0, 1, 2, 0, 1, 2])
    np.testing.assert_allclose(df[["mds_0", "mds_1"]].to_numpy(), emb, rtol=1e-6)
    # pe-probe's own embedding.csv read back as a ground truth gives the same coordinates
    np.testing.assert_array_equal(parse_ground_truth(str(tmp_path / "embedding.csv")).coords, coords)
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["n_positions"] == 6 and doc["rsa"] == 0.75 and doc["nan_metric"] is None
    assert doc["provenance"] == {"source": "t.npy", "seed": 0}


def test_embedding_csv_keeps_six_significant_digits(tmp_path):
    coords = grid(2, 3).coords
    emb = np.full((6, 2), 1.2345678)
    write_data_files(_result(coords, emb, {"rsa": 0.5}), tmp_path)
    df = pd.read_csv(tmp_path / "embedding.csv")
    np.testing.assert_allclose(df["mds_0"], 1.23457, rtol=0, atol=1e-9)


@pytest.mark.parametrize("failing", ["old report aside", "new report in"])
def test_a_failed_swap_keeps_the_previous_report_and_leaves_no_hidden_folders(tmp_path, monkeypatch, failing):
    """The rewrite of an existing report takes two renames (the old folder aside, the new one in). If either
    fails (a read-only report: Permission denied) the old report stays whole and no .old-* folder is left;
    the first failure used to leave an empty one behind, the second the old report in it."""
    import pe_probe.output as output

    out = tmp_path / "report"
    _write_report(out, "good")
    real_replace = os.replace

    def replace(src, dst):
        src, dst = Path(src), Path(dst)
        moving_old_aside = src == out and ".old-" in dst.parent.name
        moving_new_in = dst == out and ".staging-" in src.name
        if (failing == "old report aside" and moving_old_aside) or (failing == "new report in" and moving_new_in):
            raise PermissionError(13, "Permission denied", str(src))
        real_replace(src, dst)

    monkeypatch.setattr(output.os, "replace", replace)
    with pytest.raises(PermissionError):
        _write_report(out, "new")
    assert (out / "report.txt").read_text() == "good" and (out / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_second_ctrl_c_during_cleanup_still_removes_the_staging_folder(tmp_path, monkeypatch):
    import signal
    import time

    import pe_probe.output as output

    real = output.shutil.rmtree

    def rmtree_hit_by_ctrl_c(path, ignore_errors=False):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C arrives as the first one's cleanup starts
        time.sleep(0.05)  # Python acts on a delivered SIGINT at the next bytecode, i.e. here
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(output.shutil, "rmtree", rmtree_hit_by_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        with output.staged_dir(tmp_path / "rep") as stage:
            (stage / "metrics.json").write_text("{}")
            raise KeyboardInterrupt  # the first Ctrl-C
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_report_of_another_kind_is_not_replaced_without_force(tmp_path):
    """Every report folder had the same marker, so any command replaced any other's report (seed_blocked
    --out reports/lst-data replaced the committed data check, whose per-model section needs runs not in the repo)."""
    from pe_probe.output import MARKER, check_out_dir, staged_dir, written_as

    with staged_dir(tmp_path / "rep", kind="lst-data") as stage:
        (stage / "summary.csv").write_text("x\n")
    assert (tmp_path / "rep" / MARKER).read_text() == "written by pe-probe (lst-data)\n"
    assert written_as(tmp_path / "rep") == "lst-data"
    with pytest.raises(InputError, match=r"holds another kind of report \(lst-data, not seed-blocked\).*--force"):
        check_out_dir(tmp_path / "rep", kind="seed-blocked")
    check_out_dir(tmp_path / "rep", kind="lst-data")  # the same command may rewrite its own report
    check_out_dir(tmp_path / "rep", force=True, kind="seed-blocked")
    check_out_dir(tmp_path / "rep")  # a caller that names no kind
    (tmp_path / "rep" / MARKER).write_text("written by pe-probe\n")  # written before kinds were recorded
    assert written_as(tmp_path / "rep") is None
    check_out_dir(tmp_path / "rep", kind="seed-blocked")


def test_committed_reports_record_which_command_wrote_them():
    from pe_probe.output import written_as

    reports = Path(__file__).resolve().parents[1] / "reports"
    expected = {"lst": "lst-report", "lst-long": "lst-length", "lst-data": "lst-data", "seed-blocked": "seed-blocked",
                "netsim": "netsim-report", "netsim-standard": "netsim-report", "brain": "brain-report",
                "brain-standard": "brain-report", "demo": "demo-report", "examples": "examples",
                "examples/sinusoid-8x8": "analyze", "examples/random-8x8": "analyze"}
    assert {name: written_as(reports / name) for name in expected} == expected
