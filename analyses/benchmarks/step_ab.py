"""A/B of a compiled CPU training step (by default the ensemble group's): the trainers' step against the
same step with experiment flags (`step_experiments.EXPERIMENTS`), interleaved over rounds, each variant run
as the CPU benchmark runs an ensemble of 8: one group of --k members per one-thread process, --side-by-side
such processes at once.
With --task netsim or brain each process times the masked trainer's compiled bf16 step of that task's paper
model instead (`bench_masked.make_step`); with --single, the single-model trainer's compiled step
(`bench_train._single_step`, d_model --d-model), in processes of --threads threads. --float32 times the
float32 step (no bf16 autocast), the precision of a CPU without native bf16 (AVX2).

Usage:
  python analyses/benchmarks/step_ab.py --variants plain,inductor_gelu,inductor_gelu+copying_adamw \
      --rounds 4 --out reports/benchmarks/cpu-avx512/step-ab
  python analyses/benchmarks/step_ab.py --task brain --variants plain,float32_logits --rounds 3 \
      --windows 4 --steps 3 --out reports/benchmarks/cpu-avx512/step-ab-half-logits-brain
  python analyses/benchmarks/step_ab.py --float32 --single --threads 2 --side-by-side 1 \
      --variants plain,four_d_attention_products --rounds 4 --out reports/benchmarks/cpu-avx2-r3/step-ab-single

A variant is ``plain`` (the trainers as they are) or experiment names joined by ``+``. Every round runs each
variant once, in a shuffled order (seeded), each run its own processes: compile, --warmup steps, then
--windows windows of --steps steps; a process reports its fastest and its median window (ms per step).
Single timings on this VM drift by 10% and more from one minute to the next, which is why the variants
alternate and the summary is over every process of every round: the mean of the processes' fastest windows,
the median of their median windows, and each as a ratio to the first variant. Writes OUT/step_ab.csv (one
row per process) and OUT/step_ab.md (the summary, the machine and the command).

A caveat of --side-by-side here: the processes are not synchronised. Each compiles, then times its windows on
its own clock, so a process whose compile ends first may time some of its windows while the other still
compiles, i.e. alone on the machine. An effect that differs alone and beside a busy core is then mixed: a
2026-12-08 run put the float32 chunked group step 1.19x ahead of the whole batch here, where
`step_ab_paired.py --side-by-side 2` (every window begun together behind a barrier) measured 1.12x
(both in reports/benchmarks/cpu-avx512bf16-intel-r2/). For side-by-side effects use that.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

from bench_io import command_line, machine, write_results  # noqa: E402
from step_experiments import EXPERIMENTS  # noqa: E402


def parse_variant(variant: str) -> list[str]:
    """``plain`` -> []; ``a+b`` -> ["a", "b"], each a name of `EXPERIMENTS` (ValueError otherwise)."""
    if variant == "plain":
        return []
    names = variant.split("+")
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown or not all(names):
        raise ValueError(f"unknown experiment {', '.join(unknown) or repr(variant)}; choose from "
                         f"plain, {', '.join(EXPERIMENTS)} (joined by +)")
    return names


TASKS = ("lst", "netsim", "brain")


def add_step_options(p: argparse.ArgumentParser) -> None:
    """The options that pick the compiled step a worker times (`build_step`), shared with step_ab_paired."""
    p.add_argument("--task", default="lst", choices=TASKS,
                   help="lst: the LST ensemble group step (default); netsim / brain: the masked trainer's paper-model step")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--k", type=int, default=4,
                   help="members of the ensemble group (the ensemble of 8 on 2 cores: 4; unused with --single)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--float32", action="store_true", help="time the float32 step (default: bf16 autocast)")
    p.add_argument("--single", action="store_true",
                   help="lst: the single-model trainer's step instead of an ensemble group (--k unused)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps of each compiled step")


def check_step_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (exit 2) for `add_step_options`'s values."""
    if min(args.d_model, args.k, args.threads) < 1 or args.warmup < 0:
        p.error("--d-model, --k and --threads must be >= 1, --warmup >= 0")
    if args.single and args.task != "lst":
        p.error("--single times the LST single-model step: use it with --task lst")


def step_description(args: argparse.Namespace) -> str:
    """What `build_step` times for these options, as the reports name it."""
    if args.task != "lst":
        return f"the masked trainer's step of the {args.task} paper model"
    if args.single:
        return f"the single-model trainer's step at d_model {args.d_model}"
    return f"one group of K = {args.k} at d_model {args.d_model}"


def build_step(task: str, d: int, k: int, bf16: bool = True, single: bool = False):
    """The compiled step a worker times (bf16 autocast unless ``bf16`` is False): the LST ensemble's group
    step of k members at d_model d (or with ``single`` the single-model trainer's step), or the masked
    trainer's step of the netsim / brain paper model (`bench_masked.make_step`; d and k unused)."""
    import torch

    if task == "lst":
        import bench_train

        if single:
            return bench_train._single_step(d, torch.device("cpu"), nosync=True, compile=True, bf16=bf16)
        return bench_train._group_step(d, torch.device("cpu"), list(range(k)), bf16=bf16, compile=True)
    import bench_masked

    return bench_masked.make_step(task, "paper", torch.device("cpu"), bf16=bf16, compile=True)[0]


def worker(variant: str, d: int, k: int, warmup: int, windows: int, steps: int, task: str = "lst",
           bf16: bool = True, single: bool = False, threads: int = 1) -> dict:
    """Time one compiled step (`build_step`) under ``variant``'s patches (this process, ``threads`` threads)."""
    import torch

    torch.set_num_threads(threads)
    from trainers.memory import keep_freed_memory

    keep_freed_memory()
    for name in parse_variant(variant):
        EXPERIMENTS[name][1]()
    step = build_step(task, d, k, bf16=bf16, single=single)
    for i in range(warmup):
        step(i)
    ms = []
    for w in range(windows):
        t = time.perf_counter()
        for i in range(steps):
            step(warmup + w * steps + i)
        ms.append((time.perf_counter() - t) / steps * 1e3)
    return {"fastest_ms": round(min(ms), 2), "median_ms": round(statistics.median(ms), 2)}


def run_round(variant: str, args) -> list[dict]:
    """--side-by-side worker processes of one variant at once; their results."""
    cmd = [sys.executable, str(HERE), "--worker", variant, "--task", args.task, "--d-model", str(args.d_model), "--k", str(args.k),
           "--warmup", str(args.warmup), "--windows", str(args.windows), "--steps", str(args.steps),
           "--threads", str(args.threads)] + ["--float32"] * args.float32 + ["--single"] * args.single
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(args.side_by_side)]
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode:
            raise RuntimeError(f"{variant}: a worker failed (exit {p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def summary(rows: list[dict], variants: list[str]) -> list[dict]:
    base = None
    table = []
    for v in variants:
        fast = statistics.mean(r["fastest_ms"] for r in rows if r["variant"] == v)
        med = statistics.median(r["median_ms"] for r in rows if r["variant"] == v)
        base = base or (fast, med)
        table.append({"variant": v, "processes": sum(r["variant"] == v for r in rows), "mean_fastest_ms": round(fast, 1),
                      "median_median_ms": round(med, 1), "fastest_vs_first": round(fast / base[0], 3),
                      "median_vs_first": round(med / base[1], 3)})
    return table


def report(rows: list[dict], variants: list[str], args, argv: list[str]) -> str:
    import torch

    task = getattr(args, "task", "lst")
    single, threads = getattr(args, "single", False), getattr(args, "threads", 1)
    what = step_description(argparse.Namespace(task=task, single=single, d_model=args.d_model, k=args.k))
    precision = "float32" if getattr(args, "float32", False) else "bf16 autocast"
    lines = [
        ("# A/B of the compiled CPU single-model step" if single else "# A/B of the compiled CPU ensemble step")
        if task == "lst" else f"# A/B of the compiled CPU masked step ({task})",
        "",
        f"Written by `{command_line('step_ab.py', argv)}` (raw numbers: `step_ab.csv`).",
        f"Machine: {machine(torch.device('cpu'))} (the parent process; each worker runs {threads} torch "
        f"thread{'s' * (threads > 1)}). Each variant: {args.side_by_side} {threads}-thread process"
        f"{'es side by side' if args.side_by_side > 1 else ''}, "
        f"{what}, {precision}, torch.compile; {args.warmup} warm-up steps, then "
        f"{args.windows} windows of {args.steps} steps; {args.rounds} rounds, variants shuffled in each. "
        "ms per step per process (lower is faster); `vs first` > 1 means slower than the first variant.",
        "",
        "| variant | processes | mean of fastest windows (ms/step) | median of median windows (ms/step) | fastest vs first | median vs first |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in summary(rows, variants):
        lines.append(f"| {r['variant']} | {r['processes']} | {r['mean_fastest_ms']} | {r['median_median_ms']} | "
                     f"{r['fastest_vs_first']} | {r['median_vs_first']} |")
    lines += ["", "Variants: " + "; ".join(
        f"`{v}`: " + (" + ".join(EXPERIMENTS[n][2] for n in parse_variant(v)) if v != "plain" else "the trainers as they are")
        for v in variants), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="plain,inductor_gelu+copying_adamw",
                   help="comma list of variants, the first the reference: plain or experiment names joined by + "
                        f"({', '.join(EXPERIMENTS)})")
    p.add_argument("--rounds", type=int, default=4)
    add_step_options(p)
    p.add_argument("--side-by-side", type=int, default=2, help="processes at once (default 2, one per core here)")
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--steps", type=int, default=8, help="steps per timed window")
    p.add_argument("--seed", type=int, default=0, help="seed of the variants' order in each round")
    p.add_argument("--out", default="out/step_ab")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.d_model, args.k, args.warmup, args.windows, args.steps, args.task,
                                bf16=not args.float32, single=args.single, threads=args.threads)))
        return 0
    variants = args.variants.split(",")
    try:
        for v in variants:
            parse_variant(v)
    except ValueError as e:
        p.error(str(e))
    check_step_options(p, args)
    if min(args.rounds, args.side_by_side, args.windows, args.steps) < 1:
        p.error("--rounds, --side-by-side, --windows and --steps must be >= 1")
    rng = random.Random(args.seed)
    rows = []
    for r in range(1, args.rounds + 1):
        order = variants[:]
        rng.shuffle(order)
        for v in order:
            for i, res in enumerate(run_round(v, args)):
                rows.append({"round": r, "variant": v, "process": i, **res})
                print(f"round {r} {v:40s} process {i}: fastest {res['fastest_ms']} ms/step, median {res['median_ms']}", flush=True)
    write_results(args.out, "step_ab", rows, report(rows, variants, args, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
