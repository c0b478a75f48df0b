"""Benchmark: the compiled permutation and bootstrap kernels of `analyze` against their plain forms.

Usage:  python analyses/benchmarks/bench_kernels.py [--n 4096] [--perms 64] [--resamples 128] [--rounds 3]
                                                    [--out reports/benchmarks]

At N positions of a planted grid table (as `bench_analyze.py`), interleaved over rounds, each timed on the
same inputs in the same process:
- Mantel null: `kernels.permuted_upper_dots` (four accumulators, unsigned indices) against the plain
  one-accumulator loop (written here: the kernel before it was unrolled);
- exact bootstrap Spearman: `kernels.bootstrap_spearman` with its default block of resamples per pass over
  the pairs against ``block=1`` (one pass per resample: the kernel's earlier form, the same arithmetic).
Both pairs must give the same numbers (checked: bitwise for the bootstrap, to rounding for the Mantel sums).
Milliseconds per permutation / resample are the best round; ``x`` = baseline / ours, both best rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))  # bench_io and bench_analyze beside this script

from bench_analyze import machine, planted  # noqa: E402
from bench_io import command_line, write_results  # noqa: E402


def plain_mantel_kernel():
    """The Mantel kernel's earlier form: one accumulator per row, signed indices (the baseline)."""
    from numba import njit, prange

    @njit(parallel=True, cache=True)
    def permuted_upper_dots_plain(A, B, perms):  # pragma: no cover - compiled
        P, N = perms.shape
        out = np.empty(P, dtype=np.float64)
        for q in prange(P):
            p = perms[q]
            s = 0.0
            for i in range(N):
                Ai = A[i]
                Bi = B[p[i]]
                acc = 0.0
                for j in range(i + 1, N):
                    acc += Ai[j] * Bi[p[j]]
                s += acc
            out[q] = s
        return out

    return permuted_upper_dots_plain


def inputs(n: int, n_perm: int, n_boot: int, seed: int = 0) -> dict:
    """What `analyze` hands the kernels for a planted n-position grid table: the ranked, standardised distances
    as float32 square matrices (Mantel, N > 256), random relabellings, rank caches and resample counts."""
    from scipy.spatial.distance import squareform

    from pe_probe import distances as dist
    from pe_probe import stats

    table, gt = planted(n, 768, seed)
    pe_d, pe_o = dist.rsa_distances(dist.square_distances(table, "euclidean"), "euclidean")
    gt_d, gt_o = dist.rsa_distances(dist.square_distances(gt.coords, "euclidean"), "euclidean")
    a = stats.standardise(stats.rank(pe_d, pe_o))
    b = stats.standardise(stats.rank(gt_d, gt_o))
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_perm, n)), axis=1).astype(np.int32)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(n_boot)]).astype(np.float64)
    return {"A": squareform(a, checks=False).astype(np.float32), "B": squareform(b, checks=False).astype(np.float32),
            "perms": perms, "counts": counts, "c1": stats.RankCache(pe_d, n, pe_o), "c2": stats.RankCache(gt_d, n, gt_o)}


def time_once(fn, rounds_out: list[float]) -> None:
    """Run ``fn`` once and append its wall time to ``rounds_out`` (one round of one case)."""
    t = time.perf_counter()
    fn()
    rounds_out.append(time.perf_counter() - t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096, help="positions (a square grid: a square number)")
    ap.add_argument("--perms", type=int, default=64, help="relabellings timed per round")
    ap.add_argument("--resamples", type=int, default=128, help="bootstrap resamples timed per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    args = ap.parse_args(argv)
    from pe_probe import kernels

    x = inputs(args.n, args.perms, args.resamples)
    plain = plain_mantel_kernel()
    block = kernels.default_bootstrap_block(args.resamples, x["c1"], x["c2"])  # the default for this many resamples
    cases = {  # name -> (what, per, fn)
        "mantel plain": ("Mantel", args.perms, lambda: plain(x["A"], x["B"], x["perms"])),
        "mantel ours": ("Mantel", args.perms, lambda: kernels.permuted_upper_dots(x["A"], x["B"], x["perms"])),
        "bootstrap block=1": ("bootstrap", args.resamples,
                              lambda: kernels.bootstrap_spearman(x["counts"], x["c1"], x["c2"], block=1)),
        f"bootstrap block={block}": ("bootstrap", args.resamples,
                                     lambda: kernels.bootstrap_spearman(x["counts"], x["c1"], x["c2"], block=block)),
    }
    results = {k: f() for k, (_, _, f) in cases.items()}  # compile, and the answers to compare
    names = list(cases)
    mantel_diff = float(np.max(np.abs(results[names[0]] - results[names[1]]) / np.abs(results[names[0]]).max()))
    boot_same = bool(np.array_equal(results[names[2]], results[names[3]], equal_nan=True))
    if not boot_same or mantel_diff > 1e-9:
        raise SystemExit(f"the kernels disagree: bootstrap bitwise equal {boot_same}, Mantel max relative "
                         f"difference {mantel_diff:.1e}")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.rounds):
        for k, (_, _, f) in cases.items():
            time_once(f, times[k])
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {times[k][-1]:.2f}s" for k in cases), flush=True)
    rows = []
    for k, (what, per, _) in cases.items():
        rows.append({"kernel": what, "form": k, "n": args.n, "items": per, "rounds": args.rounds,
                     "best_ms_per_item": 1000 * min(times[k]) / per, "worst_ms_per_item": 1000 * max(times[k]) / per})
    for base, ours in ((rows[0], rows[1]), (rows[2], rows[3])):
        ours["x_baseline"] = base["best_ms_per_item"] / ours["best_ms_per_item"]
        base["x_baseline"] = 1.0
    m = machine()
    lines = ["# Benchmark: the permutation and bootstrap kernels", "",
             f"Written by `{command_line('bench_kernels.py', argv).strip()}`.", "",
             f"Machine: {m['cpu']} ({m.get('simd', '?')}), {m['cpus']} CPUs; numba threads "
             f"{kernels._numba().get_num_threads()}; load average at start {m.get('load_avg_at_start', float('nan')):.2f}.", "",
             f"Inputs: a planted {args.n}-position grid table (as `bench_analyze.py`); {args.perms} relabellings and "
             f"{args.resamples} resamples per round, {args.rounds} interleaved rounds. The bootstrap forms agree bitwise, "
             f"the Mantel sums to a relative {mantel_diff:.1e} (their accumulators may round differently).", "",
             "| kernel | form | best ms per item | worst ms per item | x baseline |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['form']} | {r['best_ms_per_item']:.2f} | {r['worst_ms_per_item']:.2f} | "
                     f"{r['x_baseline']:.2f} |")
    lines += ["", f"At `analyze`'s defaults (1,000 permutations and resamples) the best rounds project to "
              f"{rows[1]['best_ms_per_item']:.1f} s (Mantel, baseline {rows[0]['best_ms_per_item']:.1f} s) and "
              f"{rows[3]['best_ms_per_item']:.1f} s (bootstrap, baseline {rows[2]['best_ms_per_item']:.1f} s)."]
    md = write_results(args.out, "kernels", rows, "\n".join(lines) + "\n")
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
