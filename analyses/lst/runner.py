"""Runner interface: execute `RunSpec`s somewhere and tell when they are done.

``Runner.submit(spec, out_dir)`` queues one training run, ``Runner.wait()`` blocks until every
submitted run has ended and returns their `RunResult`s. `LocalRunner(workers)` runs each spec as a
subprocess ``pe-probe train ...`` with one torch/BLAS thread (``OMP_NUM_THREADS=1``), at most
``workers`` at a time, each logging to ``RUN_DIR/train.log``, with the sweep's speed options
(`trainers.train.SpeedOptions`) as flags. The ensemble and Ray backends implement the same
two methods. Finished-run detection (`is_finished`) lives here so every backend skips the same runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from analyses.lst.grid import RunSpec
from trainers.console import print_line

if TYPE_CHECKING:
    from trainers.train import SpeedOptions

THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}


@dataclass
class RunResult:
    name: str
    out_dir: str
    returncode: int
    seconds: float


def is_finished(spec: RunSpec, run_dir: str | os.PathLike) -> bool:
    """A run is finished when its last.pt holds epoch == the configured number of epochs."""
    from trainers.checkpoint import last_epoch  # torch: imported when needed, not with this module

    ep = last_epoch(run_dir)
    return ep is not None and ep >= spec.config().optim.epochs


def write_spec(run_dir: Path, spec_dict: dict) -> None:
    """RUN_DIR/spec.json: the run's grid entry, which the analyses read for its tags."""
    (run_dir / "spec.json").write_text(json.dumps(spec_dict, indent=2) + "\n")


def last_error(log: Path, limit: int = 300) -> str:
    """The reason a run failed: the last line of its log that says error (the trainer's one-line refusal), else
    its last non-empty line, cut to ``limit`` characters; what the sweep's FAILED line shows."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    lines = [ln for ln in lines if not ln.startswith("# ")]  # the runner's own command line
    errors = [ln for ln in lines if "error" in ln.lower()]
    line = (errors or lines or ["empty log"])[-1]
    return line if len(line) <= limit else line[:limit] + "…"


def pe_probe_command() -> list[str]:
    """How to call ``pe-probe``: the console script beside this interpreter, else ``python -m``."""
    exe = Path(sys.executable).with_name("pe-probe")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("pe-probe")
    return [found] if found else [sys.executable, "-m", "pe_probe.cli"]


class Runner:
    """Backend interface."""

    def submit(self, spec: RunSpec, out_dir: str | os.PathLike) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def wait(self) -> list[RunResult]:  # pragma: no cover - interface
        raise NotImplementedError


class LocalRunner(Runner):
    """Parallel local subprocesses, ``workers`` at a time, one thread each."""

    def __init__(self, workers: int = 2, log: Callable[[str], None] | None = None, poll_s: float = 0.5,
                 speed: SpeedOptions | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.log = log or print_line
        self.poll_s = poll_s
        self.speed_args = speed.cli_args() if speed is not None else []
        self._queue: list[tuple[RunSpec, Path]] = []
        self._running: dict[str, tuple[subprocess.Popen, Path, float, object]] = {}
        self._done: list[RunResult] = []

    def submit(self, spec: RunSpec, out_dir: str | os.PathLike) -> None:
        self._queue.append((spec, Path(out_dir)))
        self._fill()

    def _start(self, spec: RunSpec, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        write_spec(out, spec.to_dict())
        env = {**os.environ, **THREAD_ENV}
        logf = open(out / "train.log", "a")
        cmd = pe_probe_command() + spec.train_args(str(out)) + self.speed_args
        logf.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        logf.flush()
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._running[spec.name] = (proc, out, time.time(), logf)
        self.log(f"started  {spec.name} (pid {proc.pid})")

    def _fill(self) -> None:
        while self._queue and len(self._running) < self.workers:
            spec, out = self._queue.pop(0)
            self._start(spec, out)

    def _reap(self) -> None:
        for name, (proc, out, t0, logf) in list(self._running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            logf.close()
            del self._running[name]
            res = RunResult(name, str(out), rc, time.time() - t0)
            self._done.append(res)
            why = "" if rc == 0 else f": {last_error(out / 'train.log')} (log: {out / 'train.log'})"
            self.log(f"{'finished' if rc == 0 else f'FAILED (rc {rc})'} {name} in {res.seconds:.0f} s{why}")

    def wait(self) -> list[RunResult]:
        while self._queue or self._running:
            self._reap()
            self._fill()
            if self._running:
                time.sleep(self.poll_s)
        done, self._done = self._done, []
        return done

    def terminate(self) -> None:
        """Stop the queue and the running subprocesses (each in its own session, by pid)."""
        self._queue.clear()
        for proc, _, _, logf in self._running.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc, _, _, logf in self._running.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            logf.close()
        self._running.clear()


def make_runner(backend: str, workers: int, log: Callable[[str], None] | None = None,
                speed: SpeedOptions | None = None) -> Runner:
    if backend == "local":
        return LocalRunner(workers, log=log, speed=speed)
    raise ValueError(f"unknown runner backend {backend!r}; available: local (ray: to be added)")
