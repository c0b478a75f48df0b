"""Runner that trains the submitted runs in this process as batched ensembles (`trainers.ensemble`).

``python -m analyses.lst.sweep --backend ensemble`` hands the whole sweep to `train_ensemble`: runs that
share an architecture (all but seed, σ, PE init, learning rate, weight decay, momentum) become stacked
groups, trained side by side on ``workers`` CPU cores (one torch thread each) or as one batch per group
on a GPU. Each run still gets its ordinary run folder (config, metrics, checkpoints, provenance) and
the results equal training it alone (tested in `tests/trainers/test_ensemble.py`), so the sweep's
analyses and report read them unchanged. Interrupted runs resume from their last checkpoint. The sweep's
speed options (`trainers.train.SpeedOptions`) and ``max_group`` (``--ensemble-max``) go to `train_ensemble`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from analyses.lst.grid import RunSpec
from analyses.lst.runner import Runner, RunResult, is_finished, write_spec
from trainers.console import print_line

if TYPE_CHECKING:
    from trainers.train import SpeedOptions


class EnsembleRunner(Runner):
    """Queue specs; ``wait()`` trains them all with `trainers.ensemble.train_ensemble`."""

    def __init__(self, workers: int = 2, log: Callable[[str], None] | None = None,
                 speed: SpeedOptions | None = None, max_group: int | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        from trainers.train import SpeedOptions

        self.workers, self.speed, self.max_group = workers, speed or SpeedOptions(), max_group
        self.log = log or print_line
        self._queue: list[tuple[RunSpec, Path]] = []

    def submit(self, spec: RunSpec, out_dir: str | os.PathLike) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_spec(out, spec.to_dict())
        self._queue.append((spec, out))

    def wait(self) -> list[RunResult]:
        from trainers.ensemble import train_ensemble

        queue, self._queue = self._queue, []
        if not queue:
            return []
        t0 = time.time()
        self.log(f"training {len(queue)} runs as batched ensembles ({self.workers} workers)")
        try:
            sp = self.speed
            train_ensemble([s.config() for s, _ in queue], [o for _, o in queue], log=self.log, workers=self.workers,
                           max_group=self.max_group, compile=sp.compile, amp=sp.bf16, cuda_graphs=sp.cuda_graphs,
                           tf32=sp.tf32)
        except Exception as e:  # noqa: BLE001 - reported per run below; finished runs stay finished
            self.log(f"ensemble training failed: {type(e).__name__}: {e}")
        secs = time.time() - t0
        return [RunResult(s.name, str(o), 0 if is_finished(s, o) else 1, secs) for s, o in queue]
