"""What every benchmark script writes: its raw rows as CSV and its markdown report, side by side."""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path
from typing import Sequence


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that wrote a report, as the report quotes it (``argv`` None: this process's own)."""
    return f"python analyses/benchmarks/{script} " + " ".join(argv if argv is not None else sys.argv[1:])


def write_results(out_dir: str | Path, stem: str, rows: Sequence[dict], markdown: str,
                  fields: Sequence[str] | None = None) -> Path:
    """OUT/<stem>.csv (the rows; ``fields`` picks and orders columns, default: the first row's keys) and
    OUT/<stem>.md; returns the markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fields = list(fields if fields is not None else rows[0])
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    md = out / f"{stem}.md"
    md.write_text(markdown)
    return md


def device_suffix(device) -> str:
    """What a report's file name gets on an accelerator: "" on the CPU (train.md), "_cuda" on a GPU (train_cuda.md)."""
    return "" if device.type == "cpu" else f"_{device.type}"


def machine(device) -> str:
    """CPU model, core count, torch version, threads, CPU kernels and bf16 units (and the GPU on CUDA): a report's machine line."""
    import torch

    from trainers.provenance import cpu_bf16_units, cpu_model

    s = f"{cpu_model()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, {torch.get_num_threads()} torch threads"
    # the instruction set of torch's CPU kernels (AVX2, AVX512, ...): it sets their summation order, so two CPUs
    # of one model name in a virtual machine can still train to different floating-point results
    s += f", {torch.backends.cpu.get_cpu_capability()} kernels, bf16 units: {cpu_bf16_units()}"
    if device.type == "cuda":
        s += f", GPU {torch.cuda.get_device_name(0)}"
    return s


def load() -> float:
    """The 1-minute load average (other work on the machine lowers the measured rates)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def sync(device) -> None:
    """Wait for the device's queued work (a GPU's kernels run asynchronously; a no-op on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(step, first: int, n: int, device) -> float:
    """Seconds for ``step(first)`` .. ``step(first + n - 1)``, the device's queue drained before and after."""
    sync(device)
    t = time.perf_counter()
    for i in range(first, first + n):
        step(i)
    sync(device)
    return time.perf_counter() - t
