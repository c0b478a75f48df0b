"""Ray backend of the sweep runner: each run is one Ray task, on this machine or across a cluster.

    runner = RayRunner(address=None, max_retries=2, cpus_per_run=1)   # None: start a local Ray instance
    runner.submit(spec, "/shared/runs/lst-paper/learned-every-s0.1-seed0")  # or "s3://bucket/sweep/<name>"
    results = runner.wait()                                           # list[RunResult], as LocalRunner

A task trains one `RunSpec` in-process with `trainers.train.train` (which resumes from ``last.pt``
and writes checkpoints atomically), declaring ``cpus_per_run`` CPUs (= its torch threads) and
``gpus_per_run`` GPUs. Output folders are local paths on a filesystem every node sees, or fsspec URLs
(``s3://``, ``gs://``, ``file://`` ...): for a non-local URL the task downloads the run folder (to
resume), trains into a local temporary folder, and uploads each file under a temporary name that is
then moved into place, ``last.pt`` last, so a run counts as finished only once all of it is there.

Failures: a worker that dies (killed, OOM, lost node) is retried by Ray (``max_retries``); a run that
raises is resubmitted by the driver, up to ``max_retries`` more times. A run that still fails is
reported with ``returncode 1``; the other runs go on. Runs that are already finished (the local
runner's rule, `is_finished`: ``last.pt`` at the configured epoch) are skipped at submission, so a
killed driver can simply be started again. Ray is imported lazily: the local backend never needs it.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from analyses.lst.runner import RunResult, Runner, write_spec
from trainers.console import print_line

SKIPPED_RC = 0  # a run found finished at submission is reported as done (returncode 0, 0 seconds)
FAILED_RC = 1
_UPLOAD_SUFFIX = ".uploading"


# ----------------------------------------------------------------------------------------------
# Output folders: local paths or fsspec URLs


def is_url(path: str | os.PathLike) -> bool:
    return isinstance(path, str) and "://" in path


def resolve(out: str | os.PathLike) -> tuple[Any, str, bool]:
    """``(fs, path, local)``: a local path (or ``file://`` URL) gives ``(None, path, True)``."""
    if not is_url(out):
        return None, str(out), True
    import fsspec

    fs, path = fsspec.core.url_to_fs(str(out))
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return None, path, True
    return fs, path.rstrip("/"), False


def join(root: str | os.PathLike, name: str) -> str | Path:
    """``root / name`` for a path, ``root/name`` for a URL."""
    return f"{str(root).rstrip('/')}/{name}" if is_url(root) else Path(root) / name


def _epoch_of(blob: bytes | str | os.PathLike) -> int | None:
    import torch

    try:
        src = io.BytesIO(blob) if isinstance(blob, bytes) else blob
        return int(torch.load(src, map_location="cpu", weights_only=True)["epoch"])
    except Exception:  # torn or foreign file: not finished
        return None


def run_last_epoch(run_dir: str | os.PathLike) -> int | None:
    """Epoch stored in RUN/last.pt (local path or URL), or None."""
    fs, path, local = resolve(run_dir)
    if local:
        p = Path(path) / "last.pt"
        return _epoch_of(p) if p.is_file() else None
    try:
        with fs.open(f"{path}/last.pt", "rb") as f:
            return _epoch_of(f.read())
    except (FileNotFoundError, OSError):
        return None


def run_is_finished(spec, run_dir: str | os.PathLike) -> bool:
    """`analyses.lst.runner.is_finished` for local paths and URLs alike."""
    ep = run_last_epoch(run_dir)
    return ep is not None and ep >= spec.config().optim.epochs


def download_run(fs, remote: str, local: Path) -> int:
    """Copy every file under ``remote`` into ``local`` (keeping sub-folders); return the count."""
    if not fs.exists(remote):
        return 0
    n = 0
    for f in sorted(fs.find(remote)):
        rel = f[len(remote):].lstrip("/")
        if not rel or rel.endswith(_UPLOAD_SUFFIX):  # an upload that was cut short: ignore it
            continue
        dest = local / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(f, str(dest))
        n += 1
    return n


def upload_run(local: Path, fs, remote: str) -> int:
    """Upload every file of ``local`` to ``remote``, each under a temporary name then moved into place.

    ``last.pt`` goes last: a reader that sees the final ``last.pt`` sees a complete run folder.
    """
    files = sorted((p for p in local.rglob("*") if p.is_file() and not p.name.endswith(".tmp")),
                   key=lambda p: (p.name == "last.pt", str(p)))
    for p in files:
        rel = p.relative_to(local).as_posix()
        final = f"{remote}/{rel}"
        tmp = f"{final}.{uuid.uuid4().hex[:8]}{_UPLOAD_SUFFIX}"
        parent = final.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        fs.put_file(str(p), tmp)
        try:
            fs.mv(tmp, final)
        except BaseException:
            try:
                fs.rm(tmp)
            except Exception:
                pass
            raise
    return len(files)


# ----------------------------------------------------------------------------------------------
# The task (runs in a Ray worker; needs only the installed pe_probe / trainers packages)


@dataclass
class TaskOutcome:
    ok: bool
    seconds: float
    error: str = ""
    epoch: int | None = None


def _log_to(path: Path) -> Callable[[str], None]:
    def log(msg: str) -> None:
        with open(path, "a") as f:
            f.write(msg.rstrip("\n") + "\n")

    return log


def remove_stale_temp_files(run: Path) -> list[Path]:
    """Delete temp files that an atomic write killed mid-way left behind (``.NAME.XXXX.tmp``, see
    `trainers.checkpoint.atomic_write`). Safe because one run folder has one writer at a time."""
    gone = []
    for folder in (run, run / "checkpoints"):
        if folder.is_dir():
            for p in folder.glob(".*.tmp"):
                p.unlink(missing_ok=True)
                gone.append(p)
    return gone


def train_run(preset: str, overrides: dict, out: str, *, threads: int = 1, **speed: bool) -> int:
    """Train one run into the local folder ``out`` (resuming from last.pt); return its final epoch.
    ``speed``: the trainer's speed options (`trainers.train.SpeedOptions.kwargs`)."""
    import torch

    from trainers.config import make_config
    from trainers.train import train

    torch.set_num_threads(max(1, threads))
    cfg = make_config(preset, dict(overrides))
    out_p = Path(out)
    log = _log_to(out_p / "train.log")
    train(cfg, out_p, log=log, **speed)
    return cfg.optim.epochs


def run_task(spec_dict: dict, out: str, attempt: int, threads: int, stage: bool | None,
             train_fn: Callable[..., Any] | None = None, speed: dict[str, bool] | None = None) -> TaskOutcome:
    """Body of one Ray task: one attempt at one run. Exceptions are returned, not raised (the driver
    decides about retries); a killed worker never returns and is retried by Ray."""
    t0 = time.time()
    fs, path, local = resolve(out)
    staged = (not local) if stage is None else stage
    tmp: Path | None = None
    try:
        if staged:
            import fsspec

            if fs is None:  # a local path staged anyway (tests, or a slow network mount)
                fs = fsspec.filesystem("file")
            tmp = Path(tempfile.mkdtemp(prefix="pe-probe-run-"))
            download_run(fs, path, tmp)
            work = tmp
        else:
            work = Path(path)
            work.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(work)
        write_spec(work, spec_dict)
        _log_to(work / "train.log")(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} ray attempt {attempt} "
                                    f"host {socket.gethostname()} pid {os.getpid()}")
        fn = train_fn or train_run
        epoch = fn(spec_dict["preset"], spec_dict["overrides"], str(work), threads=threads, **(speed or {}))
        if staged:
            upload_run(work, fs, path)
        return TaskOutcome(True, time.time() - t0, epoch=epoch)
    except Exception as exc:  # noqa: BLE001 - any failure of the run is reported to the driver
        msg = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        try:
            log_dir = tmp if tmp is not None else Path(path)
            _log_to(log_dir / "train.log")(f"# attempt {attempt} failed: {msg}\n" + traceback.format_exc())
            if staged and tmp is not None and fs is not None:  # keep the log (and progress) remotely
                upload_run(tmp, fs, path)
        except Exception:
            pass
        return TaskOutcome(False, time.time() - t0, error=msg)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Ray set-up


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to Ray: reuse an initialised one, join ``address`` (``auto`` or ``HOST:PORT``), or start
    a local instance. Returns True when this call started/joined it (and so should shut it down)."""
    try:
        import ray
    except ImportError:
        raise ImportError("the ray backend needs Ray: pip install -e \".[ray]\" (or pip install 'ray[default]')") from None
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": True}
    if address is None:  # a local instance: no dashboard process on small machines
        kwargs.update(include_dashboard=False, num_cpus=num_cpus)
    # ray.init installs its own SIGTERM handler; keep the caller's (the sweep's clean stop)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray.init(**{k: v for k, v in kwargs.items() if v is not None or k == "address"})
    if threading.current_thread() is threading.main_thread():
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    return True


def _pickle_by_value() -> None:
    """Ship this module's functions by value, so workers need only the installed packages
    (``analyses/`` is a folder of the repository, not part of the installed distribution)."""
    from ray import cloudpickle

    try:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    except (ValueError, AttributeError):  # already registered, or an old cloudpickle
        pass


class RayRunner(Runner):
    """Runs `RunSpec`s as Ray tasks; same interface as `LocalRunner` (``submit``, ``wait``).

    Parameters
    ----------
    address : ``None`` to start a local Ray instance (or use an initialised one), ``"auto"`` or
        ``"HOST:PORT"`` to join a running cluster.
    max_retries : extra attempts for a run that raises, and Ray's retries for a worker that dies.
    cpus_per_run, gpus_per_run : resources each task declares (torch uses ``cpus_per_run`` threads).
    num_cpus : CPUs of a local instance started here (default: all).
    stage : None (default) stages through a local temp folder only for non-local URLs; True/False forces it.
    progress : tqdm bar over finished runs (shown only when stderr is a terminal).
    train_fn : ``fn(preset, overrides, out_dir, threads=, **speed) -> epoch`` (tests inject failures through it).
    speed : `trainers.train.SpeedOptions` for every run (checked on the workers: the driver may have no GPU).
    """

    def __init__(self, address: str | None = None, *, max_retries: int = 2, cpus_per_run: float = 1,
                 gpus_per_run: float = 0, num_cpus: int | None = None, stage: bool | None = None,
                 progress: bool = True, log: Callable[[str], None] | None = None,
                 train_fn: Callable[..., Any] | None = None, poll_s: float = 1.0, speed: Any = None):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if cpus_per_run <= 0 or gpus_per_run < 0:
            raise ValueError(f"need cpus_per_run > 0 and gpus_per_run >= 0, got {cpus_per_run}, {gpus_per_run}")
        self.address, self.num_cpus = address, num_cpus
        self.max_retries = max_retries
        self.cpus_per_run, self.gpus_per_run = cpus_per_run, gpus_per_run
        self.stage, self.progress, self.train_fn, self.poll_s = stage, progress, train_fn, poll_s
        # the options that are on, as train_run keywords (none: train_fn is called as before)
        self.speed = {k: v for k, v in speed.kwargs().items() if v} if speed is not None else {}
        self.log = log or print_line
        self._owns_ray = False
        self._remote = None
        self._pending: dict[Any, tuple[Any, str, int, float]] = {}  # ref -> (spec, out, attempt, t_submit)
        self._done: list[RunResult] = []
        self.attempts: dict[str, int] = {}  # run name -> attempts started by the driver
        self.errors: dict[str, str] = {}  # run name -> last error of a failed run
        self.skipped: list[str] = []  # runs found finished at submission
        self._bar = None

    # -- Ray plumbing
    def _task(self):
        if self._remote is None:
            import ray

            self._owns_ray = ensure_ray(self.address, self.num_cpus)
            _pickle_by_value()
            self._remote = ray.remote(run_task).options(
                num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run,
                max_retries=self.max_retries, retry_exceptions=False)
        return self._remote

    def _launch(self, spec, out: str, attempt: int) -> None:
        threads = max(1, int(self.cpus_per_run))
        ref = self._task().remote(spec.to_dict(), out, attempt, threads, self.stage, self.train_fn, self.speed)
        self.attempts[spec.name] = attempt
        self._pending[ref] = (spec, out, attempt, time.time())

    # -- Runner interface
    def submit(self, spec, out_dir: str | os.PathLike) -> None:
        out = str(out_dir)
        if run_is_finished(spec, out):
            self.skipped.append(spec.name)
            self._done.append(RunResult(spec.name, out, SKIPPED_RC, 0.0))
            self.log(f"skipped  {spec.name} (finished)")
            return
        self._launch(spec, out, 1)
        if self._bar is not None:
            self._bar.total += 1
            self._bar.refresh()

    def wait(self) -> list[RunResult]:
        import ray
        from tqdm.auto import tqdm

        self._bar = tqdm(total=len(self._pending), desc="runs", unit="run",
                         disable=not self.progress or not sys.stderr.isatty())
        try:
            while self._pending:
                ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=self.poll_s)
                for ref in ready:
                    spec, out, attempt, t0 = self._pending.pop(ref)
                    try:
                        outcome: TaskOutcome = ray.get(ref)
                    except Exception as exc:  # the worker died more than max_retries times, or Ray failed
                        outcome = TaskOutcome(False, time.time() - t0, error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    if outcome.ok:
                        self._finish(spec, out, 0, time.time() - t0, "finished")
                    elif attempt <= self.max_retries:
                        self.log(f"retry    {spec.name} (attempt {attempt + 1}/{self.max_retries + 1}) after: {outcome.error}")
                        self._launch(spec, out, attempt + 1)
                    else:
                        self.errors[spec.name] = outcome.error
                        self._finish(spec, out, FAILED_RC, time.time() - t0,
                                     f"FAILED after {attempt} attempt(s) ({outcome.error})")
        finally:
            self._bar.close()
            self._bar = None
        done, self._done = self._done, []
        return done

    def _finish(self, spec, out: str, rc: int, seconds: float, what: str) -> None:
        self._done.append(RunResult(spec.name, out, rc, seconds))
        self.log(f"finished {spec.name} in {seconds:.0f} s" if rc == 0 else f"{what}: {spec.name}")
        if self._bar is not None:
            self._bar.update(1)

    def terminate(self) -> None:
        """Cancel the queued and running tasks (their runs resume from last.pt next time)."""
        import ray

        for ref in list(self._pending):
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        self._pending.clear()
        self.close()

    def close(self) -> None:
        """Shut down the Ray instance this runner started or joined (not one initialised by the caller)."""
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False
            self._remote = None
