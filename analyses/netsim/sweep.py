"""Shared machinery of the netsim and brain reports: a small resumable sigma sweep, PE analysis, tables.

`run_sweep` trains every (PE, sigma, seed) condition that has no finished run yet (runs resume from
``last.pt``), `analyse_runs` measures each run's layer-0 PE table against the ground truth with
`pe_probe.analysis.analyze`, and `summarise` gives the mean and a 95% t-interval over seeds.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd


def conditions(sigmas: list[float], fixed: list[str]) -> list[dict[str, Any]]:
    out = [{"pe": "learned", "sigma": s, "label": f"learned σ={s:g}"} for s in sigmas]
    out += [{"pe": k, "sigma": float("nan"), "label": k} for k in fixed]
    return out


def run_name(c: dict[str, Any], seed: int) -> str:
    return f"{c['pe']}-s{c['sigma']:g}-seed{seed}" if c["pe"] == "learned" else f"{c['pe']}-seed{seed}"


def run_sweep(task: str, runs_dir: Path, conds: list[dict[str, Any]], seeds: list[int],
              overrides: dict[str, Any] | None = None, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Train (or resume / skip) each run with the task's quick preset; returns one record per run."""
    import torch

    from trainers.config import make_masked_config
    from trainers.train_masked import train_masked

    torch.set_num_threads(1)
    records = []
    t0 = time.time()
    for c in conds:
        for seed in seeds:
            ov = {"seed": seed, "pe.kind": c["pe"], **(overrides or {})}
            if c["pe"] == "learned":
                ov["pe.init_std"] = c["sigma"]
            cfg = make_masked_config(task, "quick", ov)
            out = runs_dir / run_name(c, seed)
            t = time.time()
            m = train_masked(cfg, out, log=lambda s: None)
            log(f"  {out.name}: test_mse {m['test_mse']:.4f} ood_mse {m['ood_mse']:.4f} ({time.time() - t:.0f} s)")
            records.append({**c, "seed": seed, "run": str(out), **m})
    log(f"sweep: {len(records)} runs in {time.time() - t0:.0f} s")
    return records


def analyse_run(ckpt: Path, n_perm: int = 199) -> tuple[dict[str, float], Any]:
    """Layer-0 PE table of a run vs its own ground truth: selected metrics and the full result."""
    from pe_probe.analysis import analyze
    from pe_probe.io import load_table

    lt = load_table(ckpt, layer=0)
    r = analyze(lt.table, lt.ground_truth, methods="pca,smacof", n_perm=n_perm, n_boot=0, n_null=5, seed=0)
    keys = ("rsa_spearman", "rsa_p", "recovery_pca_r2", "recovery_smacof_r2", "probe_r2", "trustworthiness",
            "null_rsa_mean")
    return {k: float(r.metrics[k]) for k in keys if k in r.metrics}, r


def t_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% t-interval over seeds (nan interval for a single value)."""
    from scipy.stats import t

    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if len(x) < 2:
        return m, float("nan"), float("nan")
    h = float(t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - h, m + h


def summarise(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    rows = []
    for label, g in df.groupby("label", sort=False):
        row = {"label": label, "pe": g["pe"].iloc[0], "sigma": g["sigma"].iloc[0], "n_seeds": len(g)}
        for c in cols:
            if c in g:
                m, lo, hi = t_interval(g[c].to_numpy())
                row.update({c: m, f"{c}_lo": lo, f"{c}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def fmt(row: pd.Series, col: str, digits: int = 3) -> str:
    m = row.get(col, float("nan"))
    if not np.isfinite(m):
        return "–"
    lo, hi = row.get(f"{col}_lo", float("nan")), row.get(f"{col}_hi", float("nan"))
    if np.isfinite(lo):
        return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{m:.{digits}f}"


def markdown_table(summary: pd.DataFrame, cols: list[tuple[str, str]]) -> str:
    head = "| PE | " + " | ".join(name for _, name in cols) + " |\n"
    head += "| --- | " + " | ".join("---" for _ in cols) + " |\n"
    body = "".join("| " + r["label"] + " | " + " | ".join(fmt(r, c) for c, _ in cols) + " |\n"
                   for _, r in summary.iterrows())
    return head + body


def sigma_figure(df: pd.DataFrame, summary: pd.DataFrame, path: Path, panels: list[tuple[str, str]],
                 baselines: dict[str, str] | None = None) -> None:
    """One panel per metric: learned-PE mean over seeds vs sigma (points = seeds), other PEs as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.8), constrained_layout=True)
    axes = np.atleast_1d(axes)
    learned = summary[summary.pe == "learned"].sort_values("sigma")
    fixed = summary[summary.pe != "learned"]
    for ax, (col, name) in zip(axes, panels):
        ax.plot(learned["sigma"], learned[col], "o-", color="k", label="learned (mean)")
        pts = df[df.pe == "learned"]
        ax.plot(pts["sigma"], pts[col], ".", color="0.5", label="learned (seeds)")
        for i, (_, r) in enumerate(fixed.iterrows()):
            if np.isfinite(r.get(col, np.nan)):
                ax.axhline(r[col], ls="--", color=colours[i % len(colours)], label=r["label"])
        if baselines and col in baselines and baselines[col] in summary:
            ax.axhline(float(summary[baselines[col]].mean()), ls=":", color="0.3", label="predict zero")
        ax.set_xscale("log")
        ax.set_xlabel("PE init σ")
        ax.set_ylabel(name)
    axes[0].legend(fontsize=7, frameon=False)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=float) + "\n")
