"""Benchmark: CPU training steps with glibc's default malloc settings and with `trainers.memory`'s.

Usage:
  python analyses/benchmarks/bench_memory.py             # writes reports/benchmarks/memory.{md,csv}
  python analyses/benchmarks/bench_memory.py --rounds 1 --no-write

Why: PyTorch's CPU tensors come from malloc, and glibc maps large freed blocks back out of the process,
so a step that allocates megabytes of activations page-faults them in again every step.
`trainers.memory.keep_freed_memory` (called by the CPU trainers) keeps them. Each measurement runs in its
own spawned one-thread process, since the setting cannot be undone within a process: the step of an
ensemble group of 4 (`trainers.ensemble`, as one CPU worker trains it), of the single-model trainer and
of the masked trainer at the paper size, float32 and bf16, default settings and ours alternating over
rounds. Reported: best round's rate, and minor page faults per step (from ``getrusage``) in that round.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

from bench_io import command_line, machine, write_results  # noqa: E402

# (name, builder, kwargs, items per step): builders from the other benchmarks, so the steps are theirs
CASES = [
    ("ensemble-4 d64", "bench_train:_group_step", {"d": 64, "seeds": [0, 1, 2, 3]}, 512),
    ("ensemble-4 d64 bf16", "bench_train:_group_step", {"d": 64, "seeds": [0, 1, 2, 3], "bf16": True}, 512),
    ("ensemble-4 d160", "bench_train:_group_step", {"d": 160, "seeds": [0, 1, 2, 3]}, 512),
    ("ensemble-4 d160 bf16", "bench_train:_group_step", {"d": 160, "seeds": [0, 1, 2, 3], "bf16": True}, 512),
    ("single d64", "bench_train:_single_step", {"d": 64, "nosync": True}, 128),
    ("single d160", "bench_train:_single_step", {"d": 160, "nosync": True}, 128),
    ("single d160 bf16", "bench_train:_single_step", {"d": 160, "nosync": True, "bf16": True}, 128),
    ("masked netsim paper", "bench_masked:make_step", {"task": "netsim", "preset": "paper"}, 128),
]


def _measure(builder: str, kwargs: dict, tuned: bool, warmup: int, steps: int, out) -> None:
    """In a fresh process: (optionally) our malloc settings, build the step, time it, count page faults."""
    import importlib

    import torch

    from trainers.evaluate import cpu_has_bf16
    from trainers.memory import keep_freed_memory

    torch.set_num_threads(1)
    try:
        if kwargs.get("bf16") and not cpu_has_bf16():
            out.put(("skipped", "no native bf16"))
            return
        applied = keep_freed_memory() if tuned else False
        module, name = builder.split(":")
        build = getattr(importlib.import_module(module), name)
        device = torch.device("cpu")
        step = build(device=device, **kwargs)
        step = step[0] if isinstance(step, tuple) else step  # bench_masked.make_step returns (step, batch)
        for i in range(warmup):
            step(i)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        for i in range(steps):
            step(warmup + i)
        secs = time.perf_counter() - t
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
        out.put(("ok", secs, faults, applied))
    except Exception as e:  # noqa: BLE001 - reported in the parent
        out.put(("error", f"{type(e).__name__}: {e}".splitlines()[0]))


def run_case(builder: str, kwargs: dict, tuned: bool, warmup: int, steps: int) -> tuple:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_measure, args=(builder, kwargs, tuned, warmup, steps, out))
    p.start()
    try:
        return out.get(timeout=900)
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.terminate()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; each row keeps its best (default 3)")
    p.add_argument("--steps", type=int, default=8, help="timed steps per measurement (default 8)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    cases = [c for c in CASES if args.cases is None or c[0] in args.cases.split(",")]
    best: dict[tuple[str, bool], dict] = {}
    for r in range(args.rounds):
        for name, builder, kwargs, items in cases:
            for tuned in (False, True):
                res = run_case(builder, kwargs, tuned, args.warmup, args.steps)
                if res[0] != "ok":
                    print(f"{name} {'ours' if tuned else 'default'}: {res[0]} ({res[1]})", flush=True)
                    continue
                _, secs, faults, applied = res
                rate = args.steps * items / secs
                print(f"round {r} {name:>22} {'ours' if tuned else 'default':>7}: {rate:8.0f}/s {faults:8.0f} faults/step",
                      flush=True)
                if (name, tuned) not in best or rate > best[(name, tuned)]["per_s"]:
                    best[(name, tuned)] = {"case": name, "malloc": "ours" if tuned else "default", "per_s": round(rate, 1),
                                           "faults_per_step": round(faults), "applied": applied}
    rows = []
    for name, *_ in cases:
        base, ours = best.get((name, False)), best.get((name, True))
        if base is None or ours is None:
            continue
        rows += [base, {**ours, "x_default": round(ours["per_s"] / base["per_s"], 2)}]
        base["x_default"] = 1.0
    md = report(rows, args, argv)
    if args.no_write:
        print(md)
    else:
        print(f"wrote {write_results(args.out, 'memory', rows, md, ['case', 'malloc', 'per_s', 'faults_per_step', 'x_default', 'applied'])}")
    return 0


def report(rows: list[dict], args, argv) -> str:
    import torch

    lines = ["# CPU training steps: glibc malloc defaults vs `trainers.memory.keep_freed_memory`", "",
             f"Written by `{command_line('bench_memory.py', argv)}` (raw numbers: `memory.csv`). "
             + " ".join(__doc__.split("Why: ", 1)[1].split()),
             f"Machine: {machine(torch.device('cpu'))} (each measurement: one process, one torch thread).", "",
             "| step | malloc | items/s | minor faults per step | x default |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['malloc']} | {r['per_s']:.0f} | {r['faults_per_step']} | {r['x_default']} |")
    lines += ["", "items = puzzles (LST) or windows (masked) trained; an ensemble step trains 4 x 128.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
