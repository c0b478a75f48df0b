"""Does the arithmetic change the study's outcome? The quick-preset LST runs under three arithmetics.

Usage:
  python analyses/benchmarks/precision_check.py                  # seeds 0,1; sigma 0.1, 2.0; ~10 min on 2 cores
  python analyses/benchmarks/precision_check.py --seeds 0-3 --sigmas 0.1,0.5,2.0 --epochs 40

Each (seed, sigma) is trained three ways, everything else equal:
* fp32-ensemble: `train_ensemble` as sweeps run it (on the CPU one torch thread per worker);
* fp32-solo: the single-model trainer `train` with every core as torch threads (another summation order);
* bf16-ensemble: `train_ensemble` with bf16 autocast (the ``--bf16`` speed option; skipped where the CPU
  has no native bf16).
The three share the model, initialisation, data and data order; they differ only in floating-point
rounding. Reported per run: OOD accuracy (the study's generalisation measure) and the layer-0 table's RSA
with the grid. Writes reports/benchmarks/precision.csv and precision.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

import torch  # noqa: E402
from bench_io import command_line, write_results  # noqa: E402

from pe_probe.api import analyze_source  # noqa: E402
from trainers.cli import _parse_list  # noqa: E402
from trainers.config import make_config  # noqa: E402
from trainers.ensemble import member_name, train_ensemble  # noqa: E402
from trainers.evaluate import cpu_has_bf16  # noqa: E402
from trainers.train import train  # noqa: E402


def configs(seeds: list[int], sigmas: list[float], epochs: int | None) -> list:
    return [make_config("quick", {"pe.kind": "learned", "pe.init_std": s, "seed": seed, "optim.epochs": epochs})
            for seed in seeds for s in sigmas]


def rsa(run: Path) -> float:
    """Layer-0 table vs the 4x4 grid, Spearman RSA (no permutations needed for the value)."""
    return float(analyze_source(str(run / "last.pt"), n_perm=0, n_boot=0, methods=("pca",)).metrics["rsa_spearman"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1", help="seeds (default 0,1)")
    p.add_argument("--sigmas", default="0.1,2.0", help="PE init sigmas (default 0.1,2.0)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: the quick preset's 40)")
    p.add_argument("--work", default=None, help="folder for the runs (default: a temporary folder)")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    cfgs = configs(_parse_list(args.seeds, int, "--seeds"), _parse_list(args.sigmas, float, "--sigmas"), args.epochs)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="precision-"))
    variants = ["fp32-ensemble", "fp32-solo"] + (["bf16-ensemble"] if cpu_has_bf16() else [])
    quiet = lambda s: None  # noqa: E731
    for v in variants:
        outs = [work / v / member_name(c) for c in cfgs]
        print(f"== {v}: {len(cfgs)} runs in {work / v} ==", flush=True)
        if v == "fp32-solo":
            for c, o in zip(cfgs, outs):
                train(c, o, log=quiet)
        else:
            train_ensemble(cfgs, outs, amp=v.startswith("bf16"), log=quiet)
    rows = []
    for c in cfgs:
        row = {"seed": c.seed, "sigma": c.pe.init_std}
        for v in variants:
            run = work / v / member_name(c)
            row[f"ood_{v}"] = round(float(torch.load(run / "last.pt", weights_only=True)["metrics"]["ood_acc"]), 4)
            row[f"rsa_{v}"] = round(rsa(run), 4)
        rows.append(row)
    text = report(rows, variants, cfgs[0].optim.epochs, argv)
    print(text)
    if not args.no_write:
        write_results(args.out, "precision", rows, text)
    return 0


def report(rows: list[dict], variants: list[str], epochs: int, argv: list[str] | None) -> str:
    cmd = command_line("precision_check.py", argv)
    lines = ["# Does the arithmetic change the outcome? fp32 vs fp32 (other summation order) vs bf16", "",
             f"Written by `{cmd.strip()}` (raw numbers: `precision.csv`). Quick preset ({epochs} epochs, d_model 64, "
             "learned PE at every layer). Each row is one (seed, sigma) trained three ways that differ only in "
             "floating-point rounding: `fp32-ensemble` (the ensemble trainer, one torch thread per worker), "
             "`fp32-solo` (the single-model trainer, all cores as torch threads), `bf16-ensemble` (bf16 autocast). "
             "OOD = held-out accuracy; RSA = layer-0 table vs grid (Spearman).", "",
             "| seed | sigma | " + " | ".join(f"OOD {v}" for v in variants) + " | " + " | ".join(f"RSA {v}" for v in variants) + " |",
             "| ---: | ---: | " + " | ".join("---:" for _ in variants * 2) + " |"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['sigma']:g} | " + " | ".join(f"{r[f'ood_{v}']:.3f}" for v in variants) + " | "
                     + " | ".join(f"{r[f'rsa_{v}']:.3f}" for v in variants) + " |")
    spread = [max(r[f"ood_{v}"] for v in variants) - min(r[f"ood_{v}"] for v in variants) for r in rows]
    rsa_spread = [max(r[f"rsa_{v}"] for v in variants) - min(r[f"rsa_{v}"] for v in variants) for r in rows]
    lines += ["", f"Largest difference between the arithmetics of one (seed, sigma): OOD {max(spread):.3f} "
              f"(median {statistics.median(spread):.3f}); RSA {max(rsa_spread):.3f}."]
    lo, hi = min(r["sigma"] for r in rows), max(r["sigma"] for r in rows)
    if lo != hi:
        def mean(v, sigma):
            vals = [r[f"ood_{v}"] for r in rows if r["sigma"] == sigma]
            return sum(vals) / len(vals)

        lines.append(f"Mean OOD at sigma {lo:g} minus at sigma {hi:g}, per arithmetic: "
                     + ", ".join(f"{v} {mean(v, lo) - mean(v, hi):+.3f}" for v in variants) + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
