"""The LST report's figures: each drawn with matplotlib (Agg) and saved as PNG beside the CSV it was drawn from.

Every ``fig_*`` function takes the tidy frames it plots and the output folder, and returns the figure's name
(``NAME.png`` / ``NAME.csv``) or None when there is nothing to draw. `pyplot` and `save_figure` are shared with
the longer-training report (`analyses.lst.length`).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyses.lst.selection import VIEWS, view_rows
from analyses.lst.study import CHANCE, LEVELS
from analyses.lst.summary_stats import f3, fp, mean_ci, sg, spearman
from pe_probe.report.style import OKABE_ITO

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend, with the reports' font sizes and resolution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
                         "figure.dpi": 110, "savefig.bbox": "tight"})
    return plt


OKABE = tuple(OKABE_ITO[i] for i in (4, 0, 2, 5, 6, 1, 3, 7))  # the palette, blue first, as the figures use it


def save_figure(fig: Figure, df: pd.DataFrame, out: Path, name: str, runs: pd.DataFrame | None = None) -> str:
    """``out/NAME.png`` and the data it shows as ``out/NAME.csv``; closes the figure and returns ``name``.
    ``runs``: the single runs the figure draws as dots, written as ``out/NAME_runs.csv`` (the summary CSV holds
    only the means and intervals, so the dots could not be re-plotted from it)."""
    fig.savefig(out / f"{name}.png", dpi=110)
    df.to_csv(out / f"{name}.csv", index=False)
    if runs is not None:
        runs.to_csv(out / f"{name}_runs.csv", index=False)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return name


def _summary_by_sigma(df: pd.DataFrame, cols: list[str], clip: bool = False) -> pd.DataFrame:
    """Mean and 95% t CI per sigma; ``clip``: accuracies, whose interval is clipped to [0, 1] as in the tables."""
    rows = []
    for s, g in df.groupby("sigma"):
        row = {"sigma": s, "n_seeds": len(g)}
        for c in cols:
            m, lo, hi, _ = mean_ci(g[c])
            if clip and np.isfinite(lo):
                lo, hi = max(lo, 0.0), min(hi, 1.0)
            row.update({f"{c}_mean": m, f"{c}_ci_low": lo, f"{c}_ci_high": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def _errbar(ax, summ: pd.DataFrame, col: str, label: str, color: str, marker: str = "o", raw: pd.DataFrame | None = None):
    """Mean over seeds (line), 95% CI (band, where n >= 2) and the single seeds (dots)."""
    x = summ.sigma.values.astype(float)
    m = summ[f"{col}_mean"].values
    lo, hi = summ[f"{col}_ci_low"].values, summ[f"{col}_ci_high"].values
    ax.plot(x, m, label=label, color=color, marker=marker, ms=3, lw=1)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.fill_between(x, np.where(ok, lo, m), np.where(ok, hi, m), color=color, alpha=0.15, lw=0)
    if raw is not None and col in raw:
        ax.scatter(raw.sigma.astype(float), raw[col], s=5, color=color, alpha=0.5, lw=0)


def fig_accuracy(sr: pd.DataFrame, out: Path) -> str | None:
    """Train, test and held-out accuracy vs σ over the σ-grid runs ``sr``."""
    series = (("train_acc", "train", OKABE[2]), ("test_acc", "test (in-distribution)", OKABE[1]),
              ("ood_acc", "held-out (OOD)", OKABE[0]))
    return _accuracy_vs_sigma(sr, series, "accuracy", "Accuracy vs σ (mean, 95% CI over seeds)", None, out,
                              "accuracy_vs_sigma")


def fig_levels(sr: pd.DataFrame, out: Path) -> str | None:
    """Held-out accuracy per difficulty level vs σ."""
    series = tuple((f"ood_acc_{lv}", lv, c) for lv, c in zip(LEVELS, OKABE))
    return _accuracy_vs_sigma(sr, series, "held-out accuracy", "Held-out accuracy per difficulty level", "difficulty",
                              out, "per_level_vs_sigma")


def _accuracy_vs_sigma(sr: pd.DataFrame, series: tuple[tuple[str, str, str], ...], ylabel: str, title: str,
                       legend_title: str | None, out: Path, name: str) -> str | None:
    """Accuracy columns (column, label, colour) vs σ on a log axis, mean and 95% CI over seeds, chance dotted."""
    if sr.empty:
        return None
    plt = pyplot()
    summ = _summary_by_sigma(sr, [col for col, _, _ in series], clip=True)
    fig, ax = plt.subplots(figsize=(3.4, 2.5))
    for col, lab, c in series:
        _errbar(ax, summ, col, lab, c, raw=sr)
    ax.axhline(CHANCE, color="grey", lw=0.6, ls=":", label="chance")
    ax.set_xscale("log")
    ax.set_xlabel("σ of the learned PE init")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, title=legend_title)
    ax.set_title(title)
    ids = [c for c in ("run", "sigma", "seed") if c in sr.columns]
    return save_figure(fig, summ, out, name, runs=sr[ids + [col for col, _, _ in series if col in sr.columns]])


def fig_identifiability(ana_sigma: pd.DataFrame, out: Path) -> str | None:
    """RSA, cMDS recovery r² and shape distance to sin2d vs σ, one column per view (last checkpoint)."""
    if ana_sigma.empty:
        return None
    plt = pyplot()
    metrics = (("rsa_spearman", "RSA (Spearman)", (-0.5, 1.0)), ("recovery_cmds_r2", "recovery r² (cMDS)", (0, 1.0)),
               ("ref_shape_distance", "shape distance\nto sin2d (rad)", (0, math.pi / 2)))
    views = [v for v in VIEWS if not view_rows(ana_sigma, v[0], v[1]).empty]
    if not views:
        return None
    frames, dots = [], []
    fig, axes = plt.subplots(len(metrics), len(views), figsize=(1.45 * len(views), 1.3 * len(metrics) + 0.4),
                             squeeze=False, sharex=True)
    for i, (mkey, mlab, ylim) in enumerate(metrics):
        for j, (view, layer, vlab) in enumerate(views):
            ax = axes[i][j]
            d = view_rows(ana_sigma, view, layer)
            if not d[mkey].isna().all():
                summ = _summary_by_sigma(d, [mkey])
                _errbar(ax, summ, mkey, vlab, OKABE[0], raw=d)
                summ.insert(0, "view", f"{view}:{layer}")
                summ.insert(1, "metric", mkey)
                frames.append(summ.rename(columns={f"{mkey}_mean": "mean", f"{mkey}_ci_low": "ci_low",
                                                   f"{mkey}_ci_high": "ci_high"}))
                ids = [c for c in ("run", "sigma", "seed") if c in d.columns]
                dots.append(d[ids + [mkey]].rename(columns={mkey: "value"}).assign(view=f"{view}:{layer}", metric=mkey))
            else:  # e.g. no shape distance for attention maps: say so rather than leave the panel blank
                ax.text(0.5, 0.5, "not computed\nfor this view", transform=ax.transAxes, ha="center", va="center",
                        fontsize=6, color="0.4")
            if mkey == "rsa_spearman":
                ax.axhline(0, color="grey", lw=0.5, ls=":")
            ax.set_ylim(*ylim)
            ax.set_xscale("log")
            if i == 0:
                ax.set_title(vlab.replace(", ", "\n").replace(" (", "\n("), fontsize=6)
            if j == 0:
                ax.set_ylabel(mlab, fontsize=7)
            if i == len(metrics) - 1:
                ax.set_xlabel("σ")
            ax.tick_params(labelsize=6)
    fig.suptitle("Identifiability of the 4x4 grid vs σ, per view (last checkpoint; mean, 95% CI band, seeds as dots)",
                 fontsize=8, y=1.02)
    fig.tight_layout()
    return save_figure(fig, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), out, "identifiability_vs_sigma",
                       runs=pd.concat(dots, ignore_index=True) if dots else pd.DataFrame())


def fig_ident_vs_gen(ana_sigma: pd.DataFrame, out: Path) -> str | None:
    """Procrustes and shape distance of the raw table to sin2d vs held-out accuracy, per σ-grid run."""
    d = view_rows(ana_sigma, "raw", "mean")
    if d.empty:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(7.4, 2.6), sharey=True)  # one accuracy axis: its label on the left only
    for ax, key, lab in ((axes[0], "ref_procrustes_distance", "Procrustes distance to sin2d\n(unnormalised; grows with σ)"),
                         (axes[1], "ref_shape_distance", "shape distance to sin2d\n(angular, scale-free)")):
        sc = ax.scatter(d[key], d.eval_ood_acc, c=np.log10(d.sigma.astype(float)), cmap="viridis", s=12)
        rho, p, n = spearman(d[key], d.eval_ood_acc)
        ax.set_title(f"ρ = {f3(rho)} (p = {fp(p)}, n = {n})")
        ax.set_xlabel(lab)
    axes[0].set_ylabel("held-out accuracy")
    fig.colorbar(sc, ax=axes, label="log10 σ")
    cols = ["run", "sigma", "seed", "eval_ood_acc", "ref_procrustes_distance", "ref_shape_distance", "rsa_spearman"]
    return save_figure(fig, d[cols], out, "identifiability_vs_generalization")


def layout_picks(sr: pd.DataFrame) -> tuple[int, list[float]] | None:
    """The seed and the sigma values the layout figure shows: the study's 0.1 and 2.0 where the grid has them,
    else its smallest and largest sigma, for the smallest seed."""
    if sr.empty:
        return None
    seed = int(sr.seed.min())
    sig = sorted(float(v) for v in sr[sr.seed == seed].sigma.unique())
    if len(sig) < 1:
        return None
    picks = [sig[0], sig[-1]] if len(sig) > 1 else [sig[0]]
    if 0.1 in sig and 2.0 in sig:  # the study's small and large sigma
        picks = [0.1, 2.0]
    return seed, picks


def layout_caption(sr: pd.DataFrame) -> str:
    """The caption of `fig_layouts`: the σ values and the seed it shows."""
    lp = layout_picks(sr)
    if lp is None:
        return "Recovered 4x4 layouts"
    seed, picks = lp
    return (f"Recovered 4x4 layouts (raw table, attention kernel, attention maps; mean of layers), "
            + " vs ".join(f"σ = {sg(s)}" for s in picks) + f", seed {seed}")


def fig_layouts(lay: pd.DataFrame, sr: pd.DataFrame, out: Path) -> str | None:
    """Recovered 4x4 layouts (raw table, kernel, attention maps) at the σ values `layout_picks` chooses."""
    if lay.empty or sr.empty:
        return None
    plt = pyplot()
    lp = layout_picks(sr)
    if lp is None:
        return None
    seed, picks = lp
    panels = (("raw", "mean"), ("kernel", "mean"), ("attention", "mean"))
    fig, axes = plt.subplots(len(picks), len(panels), figsize=(1.9 * len(panels), 1.9 * len(picks)), squeeze=False)
    rows = []
    for i, s in enumerate(picks):
        for j, (view, layer) in enumerate(panels):
            ax = axes[i][j]
            d = lay[(lay.group == "sigma") & (lay.seed == seed) & (lay.sigma == s) & (lay.view == view)
                    & (lay.layer.astype(str) == layer)].sort_values("position")
            ax.set_xticks([]), ax.set_yticks([])
            if d.empty:
                ax.set_title(f"σ={s:g} {view}: n/a")
                continue
            rows.append(d)
            pts = d[["cmds_row", "cmds_col"]].values
            for r in range(4):  # grid lines between recovered neighbours
                ax.plot(pts[r * 4:(r + 1) * 4, 1], pts[r * 4:(r + 1) * 4, 0], color="grey", lw=0.5)
                ax.plot(pts[r::4, 1], pts[r::4, 0], color="grey", lw=0.5)
            ax.scatter(pts[:, 1], pts[:, 0], c=d.true_row, cmap="viridis", s=14, marker="o", edgecolor="k", lw=0.2)
            ax.scatter(d.true_col, d.true_row, s=4, color="red", marker="+", lw=0.5)
            ax.invert_yaxis()
            ax.set_title(f"σ={s:g}, {view}", fontsize=7)
    fig.suptitle(f"Recovered 4x4 layouts (cMDS, Procrustes-aligned; seed {seed}): dots coloured by true row, grey lines "
                 f"join grid neighbours, + = true cell", fontsize=7, y=1.02)
    return save_figure(fig, pd.concat(rows) if rows else pd.DataFrame(), out, "layouts_small_vs_large_sigma")


def fig_trajectories(ana_sigma: pd.DataFrame, evals: pd.DataFrame, out: Path) -> str | None:
    """RSA, recovery and attention similarity over training per σ (mean over seeds), and held-out accuracy."""
    if ana_sigma.empty:
        return None
    plt = pyplot()
    panels = (("raw", "mean", "rsa_spearman", "raw table RSA (mean of layers)"),
              ("raw", "0", "rsa_spearman", "raw table RSA, layer 0"),
              ("raw", "mean", "recovery_cmds_r2", "raw table recovery r²"),
              ("qk", "0", "rsa_spearman", "qk view RSA, layer 0"), ("kernel", "mean", "rsa_spearman", "kernel RSA"),
              ("attention", "mean", "rsa_spearman", "attention-map RSA"),
              ("attention", "mean", "attention_similarity", "attention similarity to sin2d"))
    sigmas = sorted(ana_sigma.sigma.unique())
    cmap = plt.get_cmap("viridis")
    colors = {s: cmap(i / max(1, len(sigmas) - 1)) for i, s in enumerate(sigmas)}
    fig, axes = plt.subplots(2, (len(panels) + 2) // 2, figsize=(8.5, 4.4))
    axes = list(axes.ravel())
    frames = []
    for ax, (view, layer, key, lab) in zip(axes, panels):
        d = view_rows(ana_sigma, view, layer, last=False)
        if d.empty:
            continue
        g = d.groupby(["sigma", "epoch"])[key].mean().reset_index().rename(columns={key: "value"})
        g.insert(0, "panel", f"{view}:{layer}:{key}")
        frames.append(g)
        for s in sigmas:
            gs = g[g.sigma == s]
            ax.plot(gs.epoch, gs.value, color=colors[s], lw=1, marker="o", ms=2, label=f"{s:g}")
        ax.set_title(lab)
        ax.set_xlabel("epoch")
        ax.set_ylim(*((-0.5, 1.0) if key == "rsa_spearman" else (0, 1.0)))
        ax.axhline(0, color="grey", lw=0.5, ls=":")
    ev = evals[evals.group == "sigma"] if not evals.empty else evals
    if not ev.empty:
        g = ev.groupby(["sigma", "epoch"]).ood_acc.mean().reset_index().rename(columns={"ood_acc": "value"})
        g.insert(0, "panel", "eval:ood_acc")
        frames.append(g)
        for s in sigmas:
            gs = g[g.sigma == s]
            axes[-1].plot(gs.epoch, gs.value, color=colors[s], lw=1, marker="o", ms=2)
        axes[-1].set_title("held-out accuracy")
        axes[-1].set_ylim(0, 1.02)
        axes[-1].axhline(CHANCE, color="grey", lw=0.5, ls=":")
        axes[-1].set_xlabel("epoch")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=6, title="σ")
    fig.suptitle("Trajectories over training (mean over seeds), by σ", fontsize=8, y=1.02)
    fig.tight_layout()
    return save_figure(fig, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), out, "trajectories")

