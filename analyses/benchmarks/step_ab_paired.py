"""A/B of a compiled CPU training step inside one process: the trainers' step (A) and the same step with
experiment flags (B) compiled side by side, then timed in alternating windows (A B, B A, A B, ...).

`step_ab.py` runs each variant in its own processes, so the comparison carries this VM's drift between
processes: 2-thread processes switch between a fast mode and one ~30% slower from minute to minute, and a
per-round ratio there spreads by +-15% (24 rounds of `cpu-avx2-r5/step-ab-cpp-wrapper*` gave 0.76-1.32).
Here both steps share the process, its memory and its threads, and each window of B is paired with the
window of A beside it, so the drift cancels in each pair's ratio and effects of a few percent resolve.

How B gets its own compiled graphs: flags are applied after A is compiled and warmed up (they are one-way
patches), and B's `torch.compile` targets are made distinct for Dynamo (a module gets a one-off subclass, a
function a copy of its code object), so B compiles anew under the flags instead of reusing A's cache entry.
Dynamo is then told to fail on any recompilation: a flag that would change A's graph after the fact stops
the run instead of timing the wrong thing. A `plain,plain` run (an A/A control) measures what is left of
the method's own bias: A is always built first.

Each --rounds is one process (two compiles). The report gives, over all pairs of all processes, the
geometric mean of B/A with a 95% bootstrap interval (resampling processes, then pairs within them), the
median pair ratio and the share of pairs where B was faster; and per process the geometric mean.

With --side-by-side N, N such processes run at once (as an ensemble's CPU workers do, one per core), each
timing its own pairs, every window begun together behind a barrier: a variant's effect alone on the machine
and beside another busy core can differ (caches and memory shared between cores).

Usage:
  python analyses/benchmarks/step_ab_paired.py --float32 --single --threads 2 --variants plain,cpp_wrapper \
      --rounds 4 --out reports/benchmarks/cpu-avx2-r6/paired-cpp-wrapper
  python analyses/benchmarks/step_ab_paired.py --float32 --variants plain,whole_batch --side-by-side 2 \
      --rounds 3 --pairs 30 --steps 8 --out reports/benchmarks/cpu-avx512bf16-intel-r2/paired-chunk
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

from bench_io import command_line, machine, write_results  # noqa: E402
from step_ab import add_step_options, build_step, check_step_options, parse_variant, step_description  # noqa: E402
from step_experiments import EXPERIMENTS  # noqa: E402


def distinct_for_dynamo(target):
    """``target`` (a module or a function about to be `torch.compile`d) made distinct from earlier ones for
    Dynamo's cache: a module is given a one-off subclass of its class, a function is copied onto a new code
    object. Same behaviour; Dynamo compiles it anew instead of reusing another target's graphs."""
    import torch

    if isinstance(target, torch.nn.Module):
        cls = type(target)
        target.__class__ = type(cls.__name__ + "_B", (cls,), {"__module__": cls.__module__})
        return target
    if isinstance(target, types.FunctionType):
        copy = types.FunctionType(target.__code__.replace(), target.__globals__, target.__name__,
                                  target.__defaults__, target.__closure__)
        copy.__kwdefaults__, copy.__dict__ = target.__kwdefaults__, dict(target.__dict__)
        return copy
    raise TypeError(f"cannot make a {type(target).__name__} distinct for torch.compile")


def build_distinct(build):
    """Call ``build()`` with every `torch.compile` inside it given a `distinct_for_dynamo` target."""
    import torch

    real = torch.compile

    def compile_distinct(target=None, **kw):
        return real(distinct_for_dynamo(target), **kw) if target is not None else real(**kw)

    torch.compile = compile_distinct
    try:
        return build()
    finally:
        torch.compile = real


def alternate(step_a, step_b, warmup: int, pairs: int, steps: int, sync=None) -> list[tuple[float, float]]:
    """``pairs`` pairs of windows of ``steps`` steps, (A ms, B ms) per step, the order swapped every pair.
    ``sync`` (if given) is called before every window: a barrier of processes side by side, so that they all
    run the same variant at once."""
    for i in range(warmup):
        step_a(i)
        step_b(i)

    def window(step, first: int) -> float:
        if sync is not None:
            sync()
        t = time.perf_counter()
        for i in range(steps):
            step(first + i)
        return (time.perf_counter() - t) / steps * 1e3

    out = []
    for p in range(pairs):
        first = warmup + p * steps
        if p % 2 == 0:
            a = window(step_a, first)
            b = window(step_b, first)
        else:
            b = window(step_b, first)
            a = window(step_a, first)
        out.append((round(a, 3), round(b, 3)))
    return out


def worker(variant_b: str, args, sync=None) -> list[tuple[float, float]]:
    """One process: compile A (the trainers' step), warm it, apply B's flags, compile B, then `alternate`
    (its windows started together with the other processes' through ``sync``, if given)."""
    import torch

    torch.set_num_threads(args.threads)
    from trainers.memory import keep_freed_memory

    keep_freed_memory()
    kw = {"bf16": not args.float32, "single": args.single}
    step_a = build_step(args.task, args.d_model, args.k, **kw)
    for i in range(args.warmup):
        step_a(i)
    for name in parse_variant(variant_b):
        EXPERIMENTS[name][1]()
    step_b = build_distinct(lambda: build_step(args.task, args.d_model, args.k, **kw))
    for i in range(args.warmup):
        step_b(i)
    torch._dynamo.config.error_on_recompile = True  # from here on, a graph that changes is an error
    return alternate(step_a, step_b, 0, args.pairs, args.steps, sync)


BARRIER_TIMEOUT_S = 900.0  # every process compiles two steps before the first window: minutes on 2 cores


def _side_by_side_worker(variant_b: str, args, barrier, results) -> None:
    """One of --side-by-side spawned processes: `worker` with a shared barrier before every window."""
    try:
        results.put(worker(variant_b, args, lambda: barrier.wait(BARRIER_TIMEOUT_S)))
    except BaseException as e:  # the others stop at the barrier instead of waiting for this one
        barrier.abort()
        results.put(f"{type(e).__name__}: {e}".splitlines()[0])


def side_by_side_round(variant_b: str, args) -> list[list[tuple[float, float]]]:
    """--side-by-side processes at once, each timing its own pairs, every window begun together."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(args.side_by_side), ctx.Queue()
    procs = [ctx.Process(target=_side_by_side_worker, args=(variant_b, args, barrier, results))
             for _ in range(args.side_by_side)]
    for proc in procs:
        proc.start()
    out: list = []
    while len(out) < len(procs):
        try:
            out.append(results.get(timeout=5))
        except queue.Empty:  # a process killed (out of memory, a signal) puts nothing: do not wait for it forever
            dead = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if dead:
                barrier.abort()
                raise RuntimeError(f"a side-by-side process died (exit code {dead[0]})") from None
    for proc in procs:
        proc.join()
    failed = [r for r in out if isinstance(r, str)]
    if failed:
        raise RuntimeError(f"a side-by-side process failed: {failed[0]}")
    return out


def geo_mean(xs) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def bootstrap_interval(groups: list[list[float]], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the geometric mean of all ratios, resampling groups (processes), then ratios within."""
    rng = random.Random(seed)
    means = []
    for _ in range(n):
        sample = []
        for g in rng.choices(groups, k=len(groups)):
            sample += rng.choices(g, k=len(g))
        means.append(geo_mean(sample))
    means.sort()
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def summary(rows: list[dict]) -> dict:
    """B/A over every pair: geometric mean with its bootstrap interval, median, share of pairs B won; per
    process the geometric mean."""
    by_process: dict[tuple[int, int], list[float]] = {}
    for r in rows:
        by_process.setdefault((r["round"], r.get("process", 0)), []).append(r["b_ms"] / r["a_ms"])
    ratios = [x for g in by_process.values() for x in g]
    low, high = bootstrap_interval(list(by_process.values()))
    return {"pairs": len(ratios), "processes": len(by_process), "geo_mean": geo_mean(ratios), "low": low,
            "high": high, "median": statistics.median(ratios),
            "b_faster": sum(x < 1 for x in ratios) / len(ratios),
            "per_process": [geo_mean(g) for _, g in sorted(by_process.items())],
            "a_median_ms": statistics.median(r["a_ms"] for r in rows),
            "b_median_ms": statistics.median(r["b_ms"] for r in rows)}


def report(rows: list[dict], variants: list[str], args, argv: list[str]) -> str:
    import torch

    s = summary(rows)
    what = step_description(args)
    described = ("the trainers as they are (an A/A control)" if variants[1] == "plain"
                 else " + ".join(EXPERIMENTS[n][2] for n in parse_variant(variants[1])))
    return "\n".join([
        f"# Paired in-process A/B: {variants[1]} against the trainers' step",
        "",
        f"Written by `{command_line('step_ab_paired.py', argv)}` (raw numbers: `step_ab_paired.csv`, one row per "
        "pair of windows).",
        f"Machine: {machine(torch.device('cpu'))}. Each of {args.rounds * args.side_by_side} processes "
        f"({args.threads} torch thread{'s' * (args.threads > 1)}"
        + (f"; {args.side_by_side} at a time, side by side, every window begun together" if args.side_by_side > 1
           else "; one at a time") + f") compiles {what}, "
        f"{'float32' if args.float32 else 'bf16 autocast'}, twice: A as the trainers run it, then B with "
        f"`{variants[1]}`; after {args.warmup} warm-up steps each, {args.pairs} pairs of windows of {args.steps} "
        "steps, A and B alternating (the order swapped every pair). B/A < 1: B is faster.",
        "",
        "| pairs | processes | B/A geometric mean | 95% interval | median B/A | pairs B faster | A median ms/step | B median ms/step |",
        "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
        f"| {s['pairs']} | {s['processes']} | {s['geo_mean']:.3f} | [{s['low']:.3f}, {s['high']:.3f}] | "
        f"{s['median']:.3f} | {s['b_faster']:.0%} | {s['a_median_ms']:.1f} | {s['b_median_ms']:.1f} |",
        "",
        "Per process (B/A geometric mean): " + ", ".join(f"{x:.3f}" for x in s["per_process"]) + ".",
        "",
        f"B: {described}.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="plain,cpp_wrapper",
                   help="plain,B: B is plain (an A/A control) or experiment names joined by + "
                        f"({', '.join(EXPERIMENTS)})")
    p.add_argument("--rounds", type=int, default=4, help="processes (or --side-by-side groups of them), one after "
                   "another (default 4)")
    p.add_argument("--side-by-side", type=int, default=1, metavar="N",
                   help="N processes at once, each timing its own pairs, every window begun together (a barrier): "
                        "the A/B as an ensemble's workers run, one per core (default 1: alone on the machine)")
    add_step_options(p)
    p.add_argument("--pairs", type=int, default=40, help="pairs of windows per process (default 40)")
    p.add_argument("--steps", type=int, default=4, help="steps per window (default 4)")
    p.add_argument("--out", default="out/step_ab_paired")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    if len(variants) != 2 or variants[0] != "plain":
        p.error("--variants takes two: plain, then the variant to compare (plain for an A/A control)")
    try:
        parse_variant(variants[1])
    except ValueError as e:
        p.error(str(e))
    check_step_options(p, args)
    if min(args.rounds, args.pairs, args.steps, args.side_by_side) < 1:
        p.error("--rounds, --pairs, --steps and --side-by-side must be >= 1")
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args)))
        return 0
    rows = []
    for r in range(1, args.rounds + 1):
        if args.side_by_side > 1:
            for j, pairs in enumerate(side_by_side_round(variants[1], args)):
                rows += [{"round": r, "process": j, "pair": i, "a_ms": a, "b_ms": b} for i, (a, b) in enumerate(pairs)]
                print(f"round {r}, process {j}: B/A geometric mean {geo_mean([b / a for a, b in pairs]):.3f} over "
                      f"{len(pairs)} pairs", flush=True)
            continue
        cmd = [sys.executable, str(HERE), *argv, "--worker", variants[1]]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise RuntimeError(f"process {r} failed (exit {done.returncode})")
        pairs = json.loads(done.stdout.strip().splitlines()[-1])
        rows += [{"round": r, "process": 0, "pair": i, "a_ms": a, "b_ms": b} for i, (a, b) in enumerate(pairs)]
        g = geo_mean([b / a for a, b in pairs])
        print(f"process {r}: B/A geometric mean {g:.3f} over {len(pairs)} pairs", flush=True)
    write_results(args.out, "step_ab_paired", rows, report(rows, variants, args, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
