"""Benchmark: the full `pe_probe.analyze` against a naive pipeline of the same analyses.

Usage:  python analyses/benchmarks/bench_analyze.py [--sizes 1024,4096] [--dim 768] [--out reports/benchmarks]

Each case runs in its own subprocess so its peak memory (max RSS) is measured alone. "ours" is
`analyze()` with every default (1,000 permutations, 1,000 bootstrap resamples, PCA + classical MDS +
SMACOF, probe, neighbourhoods, chance level). "naive" is the same list of analyses written the obvious
way: `scipy.spatial.distance.pdist`, `scipy.stats.spearmanr`/`kendalltau`, a Python permutation loop
re-ranking the permuted distances each time, a Python bootstrap loop, a full eigendecomposition for
classical MDS, `sklearn.manifold.MDS` (SMACOF), `scipy.spatial.procrustes` with a Python PROTEST loop,
`sklearn` RidgeCV + cross_val_predict and `sklearn.manifold.trustworthiness`. Its permutation and
bootstrap loops are timed on a subset and projected to 1,000 iterations (marked in the table), since
running them in full takes hours at N=4096. Ratios are naive / ours, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))  # bench_io beside this script

from bench_io import command_line, write_results  # noqa: E402


def planted(n: int, d: int, seed: int = 0):
    import numpy as np

    from pe_probe.groundtruth import grid

    side = int(round(n ** 0.5))
    gt = grid(side, side)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    table = np.hstack([gt.coords, np.zeros((n, d - 2))]) @ q + rng.normal(scale=2.0, size=(n, d))
    return table, gt


def run_ours(n: int, d: int) -> dict:
    from pe_probe.analysis import analyze
    from pe_probe.stats import mantel

    mantel([0.0, 1, 2, 3, 4, 5], [0.0, 1, 2, 3, 4, 6], n_perm=3)  # compile kernels outside the timing (cached on disk anyway)
    table, gt = planted(n, d)
    t = time.perf_counter()
    res = analyze(table, gt)
    wall = time.perf_counter() - t
    return {"seconds": wall, "rsa_spearman": res.metrics["rsa_spearman"], "recovery_cmds_r2": res.metrics["recovery_cmds_r2"],
            "stages": res.provenance["analysis"]["stage_seconds"]}


def run_naive(n: int, d: int, n_perm: int = 1000, n_boot: int = 1000, budget_iters: int | None = None) -> dict:
    import numpy as np
    from scipy.spatial import procrustes
    from scipy.spatial.distance import pdist, squareform
    from scipy.stats import kendalltau, spearmanr
    from sklearn.linear_model import RidgeCV
    from sklearn.manifold import MDS, trustworthiness
    from sklearn.model_selection import KFold, cross_val_predict

    table, gt = planted(n, d)
    G = gt.coords
    rng = np.random.default_rng(0)
    parts: dict[str, float] = {}
    projected: list[str] = []

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        parts[name] = time.perf_counter() - t
        return out

    dp = timed("distances", lambda: pdist(table))
    dg = pdist(G)
    timed("spearman+pearson+kendall", lambda: (spearmanr(dp, dg), np.corrcoef(dp, dg), kendalltau(dp, dg)))
    iters = budget_iters or n_perm
    Dg = squareform(dg)

    def mantel_loop():
        for _ in range(iters):
            p = rng.permutation(n)
            spearmanr(dp, squareform(Dg[p][:, p], checks=False))

    timed("mantel", mantel_loop)
    if iters < n_perm:
        parts["mantel"] *= n_perm / iters
        projected.append(f"mantel ({iters} of {n_perm} run)")
    biters = budget_iters or n_boot

    def boot_loop():
        iu, ju = np.triu_indices(n, 1)
        for _ in range(biters):
            idx = rng.integers(0, n, n)
            keep = idx[iu] != idx[ju]
            spearmanr(pdist(table[idx])[keep], pdist(G[idx])[keep])

    timed("bootstrap", boot_loop)
    if biters < n_boot:
        parts["bootstrap"] *= n_boot / biters
        projected.append(f"bootstrap ({biters} of {n_boot} run)")

    def cmds():
        d2 = squareform(dp) ** 2
        j = np.eye(n) - 1.0 / n
        vals, vecs = np.linalg.eigh(-0.5 * j @ d2 @ j)
        return vecs[:, -2:] * np.sqrt(np.maximum(vals[-2:], 0))

    x_cmds = timed("cmds (full eigh)", cmds)
    x_pca = timed("pca", lambda: np.linalg.svd(table - table.mean(0), full_matrices=False)[0][:, :2])
    x_sm = timed("smacof (sklearn MDS)", lambda: MDS(n_components=2, metric="precomputed", n_init=1, init="classical_mds",
                                                     max_iter=300, eps=1e-6).fit_transform(squareform(dp)))

    def protest_loop():
        for x in (x_pca, x_cmds, x_sm):
            procrustes(G, x)
            for _ in range(iters):
                procrustes(G[rng.permutation(n)], x)

    timed("procrustes+PROTEST", protest_loop)
    if iters < n_perm:
        parts["procrustes+PROTEST"] *= n_perm / iters
        projected.append("PROTEST")
    cv = KFold(5, shuffle=True, random_state=0)
    timed("probe (RidgeCV)", lambda: cross_val_predict(RidgeCV(alphas=np.logspace(-4, 4, 17)), table, G, cv=cv))
    timed("trustworthiness", lambda: trustworthiness(G, x_cmds, n_neighbors=5))
    return {"seconds": sum(parts.values()), "parts": parts, "projected": projected}


def child(mode: str, n: int, d: int, budget: int | None) -> None:
    import resource

    out = run_ours(n, d) if mode == "ours" else run_naive(n, d, budget_iters=budget)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


def spawn(mode: str, n: int, d: int, budget: int | None) -> dict:
    cmd = [sys.executable, str(HERE), "--child", mode, "--n", str(n), "--dim", str(d)]
    if budget:
        cmd += ["--budget", str(budget)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise SystemExit(f"{mode} N={n} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[-1][7:])


def vector_extensions(cpuinfo: str) -> str:
    """The widest SIMD instruction set ``/proc/cpuinfo``'s flags name (AVX-512, AVX2, AVX, or "SSE only"): it
    decides which kernels numpy's BLAS and the compiled permutation / bootstrap kernels run, so timings from
    an AVX-512 and an AVX2 machine of one model name are not comparable."""
    from trainers.provenance import cpu_flags

    flags = cpu_flags(cpuinfo) or set()
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")):
        if flag in flags:
            return name
    return "SSE only" if flags else "?"


def blas_kernels() -> str:
    """Which BLAS numpy and scipy loaded and the kernels it picked for this CPU ("openblas 0.3.31 Haswell")."""
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS beside numpy's)
    from threadpoolctl import threadpool_info

    found = [f"{i.get('internal_api', '?')} {i.get('version', '?')} {i.get('architecture', '')}".strip()
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(dict.fromkeys(found)) or "?"


def machine() -> dict:
    """CPU model, its SIMD level, CPUs, memory, BLAS kernels, versions and load: the report's machine line."""
    import numpy

    from trainers.provenance import cpu_model

    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu": cpu_model(), "numpy": numpy.__version__, "blas": blas_kernels()}
    try:
        info["simd"] = vector_extensions(Path("/proc/cpuinfo").read_text())
        mem = [ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")]
        info["memory_gb"] = round(int(mem[0].split()[1]) / 1024 ** 2, 1)
    except OSError:
        pass
    try:
        info["load_avg_at_start"] = os.getloadavg()[0]
    except OSError:
        pass
    return info


TARGETS = {1024: (15.0, None), 4096: (60.0, 2000.0)}  # issue 2: N -> (seconds, peak MB or None)


def target_lines(rows: list[dict]) -> list[str]:
    """One verdict line per target size this run measured: N=1024 under 15 s; N=4096 under 60 s and 2 GB."""
    out = []
    for r in rows:
        if r["n"] not in TARGETS:
            continue
        seconds, peak_mb = TARGETS[r["n"]]
        met = r["ours_s"] < seconds and (peak_mb is None or r["ours_peak_mb"] < peak_mb)
        want = f"under {seconds:g} s" + (f" and {peak_mb / 1000:g} GB" if peak_mb else "")
        got = f"{r['ours_s']:.1f} s" + (f", {r['ours_peak_mb'] / 1000:.2f} GB peak" if peak_mb else "")
        out.append(f"- N={r['n']} (d={r['d']}) {want}: measured {got}: {'met' if met else '**NOT met**'}")
    return out or ["- neither target size (1024, 4096) was measured in this run"]


def report(rows: list[dict], m: dict, cmd: str) -> str:
    """The markdown report of one run: machine, the table, the naive pipeline's parts, the targets' verdicts."""
    lines = ["# Benchmark: `analyze` vs a naive pipeline", "",
             f"Written by `{cmd.strip()}` (`make bench` runs the default sizes into reports/benchmarks).", "",
             f"Machine: {m['cpu']} ({m.get('simd', '?')}), {m['cpus']} CPUs, {m.get('memory_gb', '?')} GB; "
             f"Python {m['python']}, numpy {m['numpy']}, BLAS {m['blas']}; "
             f"load average at start {m.get('load_avg_at_start', float('nan')):.2f}.", "",
             "Table: planted (grid coordinates through a random orthogonal map into d dims, plus Gaussian noise sd 2), "
             "ground truth a square grid. Ours = `analyze()` with every default (1,000 permutations, 1,000 bootstrap "
             "resamples, PCA + classical MDS + SMACOF, probe, neighbourhoods, chance level). Peak = max RSS of the process.", "",
             "| N | d | ours (s) | ours peak (MB) | naive (s) | naive peak (MB) | naive / ours | naive loops projected |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['d']} | {r['ours_s']:.1f} | {r['ours_peak_mb']:.0f} | {r['naive_s']:.0f} | "
                     f"{r['naive_peak_mb']:.0f} | {r['ratio']:.1f}x | {r['naive_projected'] or 'none'} |")
    lines += ["", "Ours, seconds per stage of `analyze` (its provenance's `stage_seconds`):", ""]
    for r in rows:
        lines.append(f"- N={r['n']}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.get("ours_stages", {}).items()))
    lines += ["", "Naive pipeline, seconds per part:", ""]
    for r in rows:
        lines.append(f"- N={r['n']}: " + ", ".join(f"{k} {v:.1f}" for k, v in r["naive_parts"].items()))
    lines += ["", "Targets (issue 2, at the default d=768):", *target_lines(rows)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,4096")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    ap.add_argument("--child")
    ap.add_argument("--n", type=int)
    ap.add_argument("--budget", type=int)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.n, args.dim, args.budget)
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        ours = spawn("ours", n, args.dim, None)
        budget = None if n <= 256 else (20 if n <= 1024 else 3)
        naive = spawn("naive", n, args.dim, budget)
        rows.append({"n": n, "d": args.dim, "ours_s": ours["seconds"], "ours_peak_mb": ours["peak_rss_mb"],
                     "naive_s": naive["seconds"], "naive_peak_mb": naive["peak_rss_mb"],
                     "ratio": naive["seconds"] / ours["seconds"], "naive_projected": "; ".join(naive["projected"]),
                     "naive_parts": naive["parts"], "ours_stages": ours["stages"], "rsa_spearman": ours["rsa_spearman"]})
        print(f"N={n}: ours {ours['seconds']:.1f}s ({ours['peak_rss_mb']:.0f} MB peak), naive {naive['seconds']:.1f}s "
              f"-> {rows[-1]['ratio']:.1f}x", flush=True)
    md = write_results(args.out, "analyze", rows, report(rows, machine(), command_line("bench_analyze.py", argv)),
                       fields=[k for k in rows[0] if k not in ("naive_parts", "ours_stages")])
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
