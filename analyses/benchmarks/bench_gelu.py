"""The exact GELU's CPU kernels: ATen's (what eager steps run, and compiled CPU steps since `trainers.gelu`)
against the C++ Inductor generates for it under torch.compile, forward and backward, one torch thread.

Usage:
  python analyses/benchmarks/bench_gelu.py --out reports/benchmarks/cpu-avx512/gelu

The tensor is the MLP's hidden activation of one compiled ensemble group on the CPU (K = 4 members x 128
puzzles x 16 tokens x 256 hidden units at d_model 64: 2,097,152 elements). Each kernel runs --calls calls per
round, --rounds rounds interleaved, with the CPU trainers' malloc settings (`trainers.memory`); the table
gives the fastest round's ms per call and Inductor's time over ATen's.
Writes OUT/gelu.csv and OUT/gelu.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_io import command_line, machine, write_results  # noqa: E402

ELEMENTS = 4 * 128 * 16 * 256


def kernels(dtype: torch.dtype, n: int) -> dict[tuple[str, str], object]:
    """(direction, implementation) -> a zero-argument call, for one dtype."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g).to(dtype)
    up = torch.randn(n, generator=g).to(dtype)
    inductor_fwd = torch.compile(lambda t: F.gelu(t), dynamic=False)
    inductor_bwd = torch.compile(lambda u, t: torch.ops.aten.gelu_backward(u, t), dynamic=False)
    return {
        ("forward", "aten"): lambda: F.gelu(x),
        ("forward", "inductor"): lambda: inductor_fwd(x),
        ("backward", "aten"): lambda: torch.ops.aten.gelu_backward(up, x),
        ("backward", "inductor"): lambda: inductor_bwd(up, x),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--elements", type=int, default=ELEMENTS)
    p.add_argument("--out", default="out/gelu")
    args = p.parse_args(argv)
    if min(args.rounds, args.calls, args.elements) < 1:
        p.error("--rounds, --calls and --elements must be >= 1")
    torch.set_num_threads(1)
    from trainers.memory import keep_freed_memory

    keep_freed_memory()  # as the CPU trainers run: each call's output from reused memory, not freshly mapped pages
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        calls = kernels(dtype, args.elements)
        for fn in calls.values():  # compile and warm up
            fn(), fn()
        best = {name: float("inf") for name in calls}
        for _ in range(args.rounds):
            for name, fn in calls.items():
                t = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - t) / args.calls * 1e3)
        for direction in ("forward", "backward"):
            aten, ind = best[direction, "aten"], best[direction, "inductor"]
            rows.append({"dtype": str(dtype).removeprefix("torch."), "direction": direction, "elements": args.elements,
                         "aten_ms": round(aten, 3), "inductor_ms": round(ind, 3),
                         "inductor_over_aten": round(ind / aten, 2)})
            print(rows[-1], flush=True)
    lines = ["# The exact GELU's CPU kernels: ATen's against Inductor's", "",
             f"Written by `{command_line('bench_gelu.py', argv)}` (raw numbers: `gelu.csv`).",
             f"Machine: {machine(torch.device('cpu'))}. Fastest of {args.rounds} interleaved rounds of "
             f"{args.calls} calls, ms per call, on {args.elements:,} elements.", "",
             "| dtype | direction | ATen (ms) | Inductor (ms) | Inductor / ATen |", "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['dtype']} | {r['direction']} | {r['aten_ms']} | {r['inductor_ms']} | {r['inductor_over_aten']} |"
              for r in rows]
    write_results(args.out, "gelu", rows, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
