"""Report folders written completely or not at all, and never over a folder that is not ours.

A folder is written in a hidden staging folder beside the target and renamed into place at the end;
an existing target is replaced only when it carries our marker file (a previous pe-probe output) or
when the user passes --force.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import InputError, check_utf8_out, show_path, stop_if_interrupted

MARKER = ".pe-probe-output"
MAX_OUT_NAME = 200  # bytes of --out's last name: staged as ".NAME.staging-PID-XXXXXXXX", at most 255 bytes


def check_out_dir(out: str | os.PathLike, force: bool = False, inputs: Iterable[Any] = (),
                  created_inputs: Iterable[str | os.PathLike] = (), kind: str | None = None) -> Path:
    """Refuse early (before any work) an output folder we may not write: a file, the current folder or
    one above it, a folder not written by pe-probe (unless ``force``), or one that is or holds one of
    ``inputs`` (paths the command reads; replacing the folder would delete them, --force or not).
    ``created_inputs`` are inputs the command itself creates before reading them (a sweep's run folders):
    ``out`` may not be or hold them even while they do not exist yet. A file input inside a run or model
    folder (`owning_folder`: RUN/last.pt, RUN/checkpoints/step-N.pt, MODEL/model.safetensors) makes that
    folder an input folder too: its other parts (RUN/checkpoints) are not replaced, --force or not. Inputs
    are compared by their real paths (relative, through ``..`` or symbolic links alike); an ``out`` with
    ``..`` in it, or a symbolic link to a folder, is checked, and returned, as the folder it names. ``kind`` names
    the report the caller writes (`MARKER` records it): a folder pe-probe wrote as another kind of report (the
    committed reports/lst-data, when seed_blocked is pointed at it) is refused too, unless ``force``."""
    out = Path(out)
    check_utf8_out(out)
    try:
        resolved = out.resolve()
    except (RuntimeError, OSError) as e:  # a symbolic link loop on the way (RuntimeError before Python 3.13)
        raise InputError(f"--out {out} cannot be resolved ({e}); remove the symbolic link loop or choose another "
                         f"path") from None
    if out.is_symlink() and not out.exists():
        raise InputError(f"--out {out} is a symbolic link to {os.readlink(out)}, which does not exist; remove the link "
                         f"or choose another path")
    if ".." in out.parts or (out.is_symlink() and out.is_dir()):
        # RUN/x/../checkpoints is RUN/checkpoints, whether or not RUN/x exists; a link to a folder is written as
        # that folder, and stays a link (renaming the report into place replaced the link, the folder kept empty)
        out = resolved
    if len(out.name.encode()) > MAX_OUT_NAME:  # the staging folder beside it carries the name and ~30 bytes more
        raise InputError(f"--out name {out.name[:40]}... is {len(out.name.encode())} bytes long; the report is staged "
                         f"beside it under a longer name, and names are limited to 255 bytes: use at most {MAX_OUT_NAME}")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder; choose another path")
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents or resolved == resolved.parent:
        raise InputError(f"--out {out} is the current folder or one above it, which pe-probe replaces as a whole; "
                         f"name a new folder, e.g. --out {out / 'report'}")
    created = [Path(item) for item in created_inputs]
    for item in [*inputs, *created]:
        path = Path(item) if isinstance(item, (str, os.PathLike)) else None  # specs such as grid:4x4 do not exist
        if path is None or not (path.exists() or path in created):
            continue
        real = path.resolve()
        if real == resolved or resolved in real.parents:
            raise InputError(f"--out {out} is or holds the input {item}, which writing the report there would delete; "
                             f"name a folder outside it, e.g. --out {resolved.parent / (resolved.name + '-report')}")
        folder = real if real.is_dir() or path in created else owning_folder(real)
        if folder is not None and folder in resolved.parents and _foreign(out):
            whose = f"the input {item}" if folder == real else f"{folder}, the folder of the input {item}"
            raise InputError(f"--out {out} is a folder inside {whose} (part of it, e.g. a run), which writing the "
                             f"report there would delete, --force or not; name a new folder or one outside {folder}")
    if _foreign(out) and not force:
        raise InputError(f"--out {out} exists and was not written by pe-probe; choose another folder or pass --force to replace it")
    other = written_as(out)
    if kind is not None and other is not None and other != kind and not force:
        raise InputError(f"--out {out} holds another kind of report ({other}, not {kind}); choose another folder or pass "
                         f"--force to replace it")
    # the nearest existing ancestor must be a folder we can write into (checked before any work)
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"--out {out}: {ancestor} is a file, not a folder; choose another path")
    try:  # a real probe: os.access says yes to root on read-only or virtual file systems
        os.rmdir(tempfile.mkdtemp(prefix=".pe-probe-write-test-", dir=ancestor))
    except OSError as e:
        raise InputError(f"--out {out}: cannot write in {ancestor} ({e.strerror or e}); choose another folder") from None
    return out


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, force: bool = False, kind: str | None = None) -> Iterator[Path]:
    """Yield a staging folder; on success it replaces ``out`` atomically, on error it is removed. ``kind``: the
    report written, recorded in its `MARKER` and checked against the one there (`check_out_dir`)."""
    out = check_out_dir(out, force, kind=kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(out)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-{os.getpid()}-", dir=out.parent))
    except OSError as e:
        raise InputError(f"--out {out}: cannot create it ({e.strerror or e}); choose another folder") from None
    try:
        with terminate_as_exit():
            yield stage
        stop_if_interrupted()  # a Ctrl-C that a callback swallowed: no report
        (stage / MARKER).write_text(f"written by pe-probe ({kind})\n" if kind else "written by pe-probe\n")
        if out.exists():
            _swap_in(stage, out)
        else:
            os.replace(stage, out)
        _open_up(out)
    except BaseException:
        for _ in range(5):  # a further Ctrl-C can land before remove_uninterrupted holds them back: try again
            try:
                remove_uninterrupted(stage)
                break
            except BaseException:  # noqa: S112 - the first exception is re-raised below
                continue
        raise


def remove_uninterrupted(path: Path) -> None:
    """Remove folder ``path`` with Ctrl-C, SIGTERM and SIGHUP held back until it is gone: a second Ctrl-C pressed
    while a first one's cleanup runs would otherwise stop the removal half way and leave the staging folder. The
    Python handlers are swapped for one that notes the signal (masking the thread would not do: the process's
    other threads, torch's and numba's, would take it), and the first signal noted is raised again afterwards."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        shutil.rmtree(path, ignore_errors=True)
        return
    noted: list[int] = []
    before = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                before[sig] = signal.signal(sig, lambda signum, frame: noted.append(signum))
        shutil.rmtree(path, ignore_errors=True)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if noted:
        signal.raise_signal(noted[0])


def _swap_in(stage: Path, out: Path) -> None:
    """Replace the existing folder ``out`` by ``stage``: the old one is moved aside first (two renames; a
    folder cannot replace a non-empty one in one). If either rename fails the old report is back in place
    and its aside folder is gone, so a failed rewrite leaves nothing behind but the caller's staging folder."""
    trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    try:
        os.replace(out, trash / out.name)
    except BaseException:
        remove_uninterrupted(trash)
        raise
    try:
        os.replace(stage, out)
    except BaseException:
        os.replace(trash / out.name, out)
        remove_uninterrupted(trash)
        raise
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM / SIGHUP (a killed job, a closed terminal) raise SystemExit while a folder is staged, so the
    staging folder is removed like on any error; only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        raise SystemExit(128 + signum)

    def quiet(unraisable: Any) -> None:
        # our SystemExit raised inside a weakref callback or __del__ cannot propagate, and Python would print
        # it as "Exception ignored ... Traceback": the exit below takes its place, so say nothing
        if not (received and isinstance(unraisable.exc_value, SystemExit)):
            hook(unraisable)

    wanted = [sig for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if sig is not None]
    previous = {sig: signal.signal(sig, stop) for sig in wanted}
    hook, sys.unraisablehook = sys.unraisablehook, quiet
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:  # its SystemExit was swallowed (raised inside a weakref callback or __del__): stop all the same
        raise SystemExit(128 + received[0])


def _remove_abandoned(out: Path) -> None:
    """Staging / old-copy folders of ``out`` left by a process that no longer runs (killed with SIGKILL, or
    the machine stopped): their names carry the writer's pid."""
    for leftover in out.parent.glob(f".{glob.escape(out.name)}.*-*-*"):
        kind, _, rest = leftover.name[len(out.name) + 2:].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("staging", "old") and pid.isdigit() and leftover.is_dir() and not _alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


# a training run's parts (trainers.train's LAST, CONFIG_FILE, CKPT_DIR: a test keeps them equal) and the files of
# model weights beside a config.json (a Hugging Face folder, or a checkpoint with its config)
RUN_LAST, RUN_CONFIG, RUN_CHECKPOINTS = "last.pt", "config.json", "checkpoints"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def owning_folder(file: Path) -> Path | None:
    """The training run or model folder a file belongs to: its folder, or the one above it (RUN/checkpoints/
    step-N.pt), when that holds last.pt, or a config.json beside checkpoints/ or weight files; None for a file
    on its own. One level up only: parts of nested layouts (a diffusers pipeline's unet/ and vae/) are not
    recognised as one model."""
    for folder in (file.parent, file.parent.parent):
        if (folder / RUN_LAST).is_file():
            return folder
        if (folder / RUN_CONFIG).is_file() and ((folder / RUN_CHECKPOINTS).is_dir() or any(
                p.suffix in WEIGHT_SUFFIXES and p.is_file() for p in folder.iterdir())):
            return folder
    return None


_MARKER_KIND = re.compile(r"written by pe-probe \(([^)\n]+)\)")


def written_as(out: Path) -> str | None:
    """The kind of report `MARKER` in ``out`` records (``"analyze"``, ``"seed-blocked"``, ...), or None: no marker, an
    unreadable one, or one from before kinds were recorded ("written by pe-probe")."""
    try:
        m = _MARKER_KIND.match((Path(out) / MARKER).read_text(errors="replace")[:200])
    except OSError:
        return None
    return m.group(1) if m else None


def _foreign(out: Path) -> bool:
    """A non-empty existing folder that pe-probe did not write."""
    return out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists()


def _open_up(folder: Path) -> None:
    """mkdtemp makes the staging folder 0700; give the finished folder the usual umask-based mode."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)


def json_safe(obj: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats (-> null) into plain JSON values."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def metrics_document(result) -> dict[str, Any]:
    """The metrics.json content: flat metric keys plus a `provenance` object."""
    doc = {k: v for k, v in result.metrics.items()}
    doc["provenance"] = result.provenance
    return json_safe(doc)


def write_data_files(result, folder: Path) -> list[Path]:
    """Write metrics.json, metrics.csv (tidy) and embedding.csv into ``folder``."""
    folder = Path(folder)
    paths = [folder / "metrics.json", folder / "metrics.csv", folder / "embedding.csv"]
    paths[0].write_text(json.dumps(metrics_document(result), indent=2, allow_nan=False) + "\n")
    result.to_frame().to_csv(paths[1], index=False)
    result.embedding_frame().to_csv(paths[2], index=False, float_format="%.6g")
    return paths
