"""``python -m analyses.lst.report --root runs/lst-sweep``: regenerate ``reports/lst/`` from a sweep.

One command: it analyses every finished run that is not cached yet (`analyses.lst.analyse`), writes
the tidy tables to ``ROOT/analysis/``, then writes ``reports/lst/README.md`` and its figures (PNG, each
with the CSV it was drawn from). Every number in the folder comes from this command, the setting's too: it
describes the runs from their ``config.json``, ``provenance.jsonl`` and the sweep's ``grid.json`` and ``sweep.log``
(`analyses.lst.setting`). The folder is written in a staging folder that replaces ``--out`` at the end, and only
over a folder pe-probe wrote (``--force`` otherwise).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyses.lst import setting
from analyses.lst.analyse import N_PUZZLES, REFERENCE
from analyses.lst.grid import PRESET_EPOCHS, PRESET_SETTINGS, SGD_LR_ORIGIN
from pe_probe.errors import InputError, OneLineArgumentParser
from pe_probe.output import check_out_dir, staged_dir
from pe_probe.report.style import OKABE_ITO
from trainers.provenance import describe_versions

# The study's reported numbers (DESIGN.md section 6; OOD accuracy on the 108 held-out puzzles, 15 seeds)
STUDY = {
    "sin2d": 0.977,
    "learned s=0.2": 0.956,
    "learned s=0.1": 0.925,
    "learned s=1": 0.894,
    "learned s=2": 0.377,
    "relative": 0.920,
    "weight decay": 0.99,
}
# Study numbers DESIGN.md gives only approximately ("about 99%"): printed as ~99
STUDY_APPROX = {"weight decay"}
STUDY_RHO = -0.98
STUDY_OOD_PUZZLES = 108  # the study's held-out set: its human-study puzzles
LEVELS = ("binary", "ternary", "quaternary")
# (view, layer) pairs shown in the identifiability figures, with labels
VIEWS = (("raw", "mean", "raw table (mean of layers)"), ("raw", "0", "raw table, layer 0"),
         ("q", "0", "q view, layer 0"), ("k", "0", "k view, layer 0"), ("qk", "0", "qk view, layer 0"),
         ("kernel", "mean", "attention kernel (mean)"), ("attention", "mean", "attention maps (mean)"))
CHANCE = 0.25


# ---------------------------------------------------------------------------------------------------
# Statistics


def mean_ci(x) -> tuple[float, float, float, int]:
    """Mean and 95% t confidence interval over seeds; (mean, low, high, n); NaN bounds when n < 2."""
    from scipy import stats

    a = np.asarray([v for v in x if v is not None and np.isfinite(v)], dtype=float)
    n = len(a)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0)
    m = float(a.mean())
    if n < 2:
        return (m, math.nan, math.nan, 1)
    h = float(stats.t.ppf(0.975, n - 1) * a.std(ddof=1) / math.sqrt(n))
    return (m, m - h, m + h, n)


def fmt_ci(x, pct: bool = True, digits: int = 1) -> str:
    m, lo, hi, n = mean_ci(x)
    if n == 0:
        return "n/a"
    f = (lambda v: f"{100 * v:.{digits}f}") if pct else (lambda v: f"{v:.2f}")
    if n < 2:
        return f"{f(m)} (n=1)"
    if pct:  # accuracies: the t interval is clipped to [0, 1]
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return f"{f(m)} [{f(lo)}, {f(hi)}] (n={n})"


# Paired differences closer than this are equal (accuracies are multiples of 1/108: equal differences can still
# differ by rounding, and a t-test on such a sample returns p ~ 0 from catastrophic cancellation).
TIED = 1e-9


def paired_test(a: pd.Series, b: pd.Series) -> dict[str, Any]:
    """Paired t-test and Wilcoxon signed-rank test over the seeds both series have."""
    from scipy import stats

    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    n = len(both)
    out = {"n": n, "mean_diff": float((both.a - both.b).mean()) if n else math.nan, "t_p": math.nan, "wilcoxon_p": math.nan}
    if n >= 2 and np.any(both.a.values != both.b.values):
        if np.ptp((both.a - both.b).values) > TIED:  # equal differences have no variance: no t-test (p ~ 0 means nothing)
            out["t_p"] = float(stats.ttest_rel(both.a, both.b).pvalue)
        try:
            out["wilcoxon_p"] = float(stats.wilcoxon(both.a, both.b).pvalue)
        except ValueError:
            pass
    return out


def paired_ci(a: pd.Series, b: pd.Series) -> dict[str, Any]:
    """Seed-paired comparison of two series: the means over the seeds both have, the mean difference a - b with
    its 95% t confidence interval and the paired t-test p (NaN where n < 2 or the pairs are all equal)."""
    from scipy import stats

    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    n = len(both)
    out = {"n": n, "mean_a": math.nan, "mean_b": math.nan, "diff": math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "t_p": math.nan, "keys": list(both.index)}
    if not n:
        return out
    d = (both.a - both.b).astype(float)
    out.update(mean_a=float(both.a.mean()), mean_b=float(both.b.mean()), diff=float(d.mean()))
    if n >= 2:
        _, lo, hi, _ = mean_ci(d.values)  # the t-interval of the differences
        out.update(ci_low=lo, ci_high=hi)
        if np.ptp(d.values) > TIED:  # equal differences (all 0, or all the same) have no variance: no t-test
            out["t_p"] = float(stats.ttest_rel(both.a, both.b).pvalue)
    return out


def spearman(x, y) -> tuple[float, float, int]:
    from scipy import stats

    d = pd.DataFrame({"x": x, "y": y}).dropna()
    if len(d) < 3 or d.x.nunique() < 2 or d.y.nunique() < 2:
        return (math.nan, math.nan, len(d))
    r = stats.spearmanr(d.x, d.y)
    return (float(r.statistic), float(r.pvalue), len(d))


def f3(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.3g}"


def pct(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{100 * v:.1f}%"


def fp(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else (f"{v:.2g}" if v >= 0.001 else f"{v:.1e}")


# ---------------------------------------------------------------------------------------------------
# Data selection


def sigma_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs.group == "sigma"].copy()


def label_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """A human label per run for the PE-type / control tables."""
    def lab(r):
        if r.group == "sigma":
            return f"learned N(0,{r.sigma:g}²), every layer"
        if r.group == "placement":
            return f"learned N(0,{r.sigma:g}²), input only"
        if r.group == "control":
            kind = "AdamW wd 0.1" if str(r.control).startswith("wd") else "SGD momentum 0.9"
            return f"learned N(0,{r.sigma:g}²), {kind}"
        return {"learned-uniform": "learned uniform (std 0.1)"}.get(r.pe, r.pe)
    out = runs.copy()
    out["label"] = [lab(r) for r in out.itertuples()]
    return out


def view_rows(ana: pd.DataFrame, view: str, layer: str, last: bool = True) -> pd.DataFrame:
    sel = (ana.view == view) & (ana.layer.astype(str) == layer)
    if last:
        sel &= ana.is_last.astype(bool)
    return ana[sel]


# ---------------------------------------------------------------------------------------------------
# Figures (each with the CSV it was drawn from)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
                         "figure.dpi": 110, "savefig.bbox": "tight"})
    return plt


OKABE = tuple(OKABE_ITO[i] for i in (4, 0, 2, 5, 6, 1, 3, 7))  # the palette, blue first, as the figures use it


def _save(fig, df: pd.DataFrame, out: Path, name: str) -> str:
    fig.savefig(out / f"{name}.png", dpi=110)
    df.to_csv(out / f"{name}.csv", index=False)
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
    if sr.empty:
        return None
    plt = _plt()
    summ = _summary_by_sigma(sr, ["train_acc", "test_acc", "ood_acc"], clip=True)
    fig, ax = plt.subplots(figsize=(3.4, 2.5))
    for col, lab, c in (("train_acc", "train", OKABE[2]), ("test_acc", "test (in-distribution)", OKABE[1]),
                        ("ood_acc", "held-out (OOD)", OKABE[0])):
        _errbar(ax, summ, col, lab, c, raw=sr)
    ax.axhline(CHANCE, color="grey", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("σ of the learned PE init")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False)
    ax.set_title("Accuracy vs σ (mean, 95% CI over seeds)")
    return _save(fig, summ, out, "accuracy_vs_sigma")


def fig_levels(sr: pd.DataFrame, out: Path) -> str | None:
    if sr.empty:
        return None
    plt = _plt()
    cols = [f"ood_acc_{lv}" for lv in LEVELS]
    summ = _summary_by_sigma(sr, cols, clip=True)
    fig, ax = plt.subplots(figsize=(3.4, 2.5))
    for col, lv, c in zip(cols, LEVELS, OKABE):
        _errbar(ax, summ, col, lv, c, raw=sr)
    ax.axhline(CHANCE, color="grey", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("σ of the learned PE init")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, title="difficulty")
    ax.set_title("Held-out accuracy per difficulty level")
    return _save(fig, summ, out, "per_level_vs_sigma")


def fig_identifiability(ana_sigma: pd.DataFrame, out: Path) -> str | None:
    if ana_sigma.empty:
        return None
    plt = _plt()
    metrics = (("rsa_spearman", "RSA (Spearman)", (-0.5, 1.0)), ("recovery_cmds_r2", "recovery r² (cMDS)", (0, 1.0)),
               ("ref_shape_distance", "shape distance\nto sin2d (rad)", (0, math.pi / 2)))
    views = [v for v in VIEWS if not view_rows(ana_sigma, v[0], v[1]).empty]
    if not views:
        return None
    frames = []
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
    return _save(fig, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), out, "identifiability_vs_sigma")


def fig_ident_vs_gen(ana_sigma: pd.DataFrame, out: Path) -> str | None:
    d = view_rows(ana_sigma, "raw", "mean")
    if d.empty:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.4, 2.6))
    for ax, key, lab in ((axes[0], "ref_procrustes_distance", "Procrustes distance to sin2d\n(unnormalised; grows with σ)"),
                         (axes[1], "ref_shape_distance", "shape distance to sin2d\n(angular, scale-free)")):
        sc = ax.scatter(d[key], d.eval_ood_acc, c=np.log10(d.sigma.astype(float)), cmap="viridis", s=12)
        rho, p, n = spearman(d[key], d.eval_ood_acc)
        ax.set_title(f"ρ = {f3(rho)} (p = {fp(p)}, n = {n})")
        ax.set_xlabel(lab)
        ax.set_ylabel("held-out accuracy")
    fig.colorbar(sc, ax=axes, label="log10 σ")
    cols = ["run", "sigma", "seed", "eval_ood_acc", "ref_procrustes_distance", "ref_shape_distance", "rsa_spearman"]
    return _save(fig, d[cols], out, "identifiability_vs_generalization")


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


def sg(v: float) -> str:
    """A σ value as the report writes it: 0.1, 2.0 (at least one decimal)."""
    t = f"{v:g}"
    return t if ("." in t or "e" in t) else f"{v:.1f}"


def layout_caption(sr: pd.DataFrame) -> str:
    lp = layout_picks(sr)
    if lp is None:
        return "Recovered 4x4 layouts"
    seed, picks = lp
    return (f"Recovered 4x4 layouts (raw table, attention kernel, attention maps; mean of layers), "
            + " vs ".join(f"σ = {sg(s)}" for s in picks) + f", seed {seed}")


def fig_layouts(lay: pd.DataFrame, sr: pd.DataFrame, out: Path) -> str | None:
    if lay.empty or sr.empty:
        return None
    plt = _plt()
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
    fig.suptitle(f"Recovered 4x4 layouts (cMDS, Procrustes-aligned; seed {seed}; + = true cell)", fontsize=7, y=1.02)
    return _save(fig, pd.concat(rows) if rows else pd.DataFrame(), out, "layouts_small_vs_large_sigma")


def fig_trajectories(ana_sigma: pd.DataFrame, evals: pd.DataFrame, out: Path) -> str | None:
    if ana_sigma.empty:
        return None
    plt = _plt()
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
    return _save(fig, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), out, "trajectories")


# ---------------------------------------------------------------------------------------------------
# Markdown


def md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(no data)_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in r) + " |")
    return "\n".join(lines) + "\n"


def _sel(runs: pd.DataFrame, **sel) -> pd.DataFrame:
    d = runs
    for k, v in sel.items():
        if k not in d:
            return d.iloc[0:0]
        d = d[np.isclose(d[k].astype(float), v)] if isinstance(v, float) else d[d[k] == v]
    return d


def _ood(runs: pd.DataFrame, **sel) -> pd.Series:
    return _sel(runs, **sel).set_index("seed").ood_acc


# ---------------------------------------------------------------------------------------------------
# Which CPU attention code path trained a run

# Commit a635489 replaced torch's fused CPU attention kernel by plain matmul-softmax attention (same maths, other
# floating-point rounding). Runs without provenance.jsonl are attributed from their train.log: every session
# started after that commit -> matmul-softmax; every session finished (start + training time) before it -> fused.
ATTENTION_SWITCH = ("a635489", "2026-11-30 03:30:55")
PATH_NAMES = {"fused": "torch's fused kernel", "matmul": "matmul-softmax", "unknown": "not determined"}


def _log_starts(log: Path) -> list[pd.Timestamp]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("# ") and len(line) >= 21:
            t = pd.to_datetime(line[2:21], format="%Y-%m-%d %H:%M:%S", errors="coerce")
            if not pd.isna(t):
                out.append(t)
    return out


def code_paths(root: Path, runs: pd.DataFrame, switch: str = ATTENTION_SWITCH[1]) -> pd.Series:
    """run -> 'fused' / 'matmul' / 'unknown', from the session start times in RUN/train.log (the trainer writes
    them in the machine's local time, compared as they are with ``switch``) and the run's training seconds."""
    t_switch = pd.Timestamp(switch)
    out = {}
    for r in runs.itertuples():
        log = Path(root) / str(r.run) / "train.log"
        starts = _log_starts(log) if log.exists() else []
        secs = getattr(r, "train_seconds", math.nan)
        if starts and min(starts) > t_switch:
            out[r.run] = "matmul"
        elif starts and secs is not None and np.isfinite(secs) and max(starts) + pd.Timedelta(seconds=float(secs)) < t_switch:
            out[r.run] = "fused"
        else:
            out[r.run] = "unknown"
    return pd.Series(out, dtype=object)


def describe_paths(paths: pd.Series) -> str:
    """'torch's fused kernel: 57 runs (finished before a635489 ...); matmul-softmax: 26 runs (...)'."""
    if paths is None or paths.empty:
        return "no runs"
    what = {"fused": f"finished before commit {ATTENTION_SWITCH[0]}", "matmul": f"started after commit {ATTENTION_SWITCH[0]}",
            "unknown": "train.log missing or straddling the commit"}
    counts = paths.value_counts()
    return "; ".join(f"{PATH_NAMES[k]}: {counts[k]} run{'s' if counts[k] != 1 else ''} ({what[k]})"
                     for k in ("fused", "matmul", "unknown") if k in counts)


def pair_paths(runs: pd.DataFrame, paths: pd.Series | None, sel_a: dict, sel_b: dict, all_paths: bool = False,
               names: tuple[str, str] = ("A", "B")) -> str:
    """'A: seed 0 torch's fused kernel, seeds 1, 2 matmul-softmax; B: all torch's fused kernel' when the runs of a
    seed-paired comparison used both code paths; otherwise '' (or, with ``all_paths``, the one path's name)."""
    if paths is None or paths.empty:
        return ""
    a, b = _sel(runs, **sel_a), _sel(runs, **sel_b)
    seeds = set(a.seed) & set(b.seed)
    a, b = a[a.seed.isin(seeds)], b[b.seed.isin(seeds)]
    every = [paths.get(r, "unknown") for r in list(a.run) + list(b.run)]
    if not every:
        return ""
    if len(set(every)) == 1:
        return f"{PATH_NAMES[every[0]]} (all)" if all_paths else ""
    sides = []
    for name, d in zip(names, (a, b)):
        d = d.assign(path=[paths.get(r, "unknown") for r in d.run])
        if d.path.nunique() == 1:
            sides.append(f"{name}: all {PATH_NAMES[d.path.iloc[0]]}")
            continue
        per = []
        for path, g in sorted(d.groupby("path"), key=lambda kv: kv[1].seed.min()):
            ss = sorted(int(x) for x in g.seed)
            per.append(f"seed{'s' if len(ss) > 1 else ''} {', '.join(map(str, ss))} {PATH_NAMES[path]}")
        sides.append(f"{name}: " + ", ".join(per))
    return "; ".join(sides)


def study_pct(key: str) -> str:
    """The study's accuracy in %, as DESIGN.md gives it ("about 99%" stays ~99)."""
    return f"~{100 * STUDY[key]:.0f}" if key in STUDY_APPROX else f"{100 * STUDY[key]:.1f}"


def comparison_table(runs: pd.DataFrame) -> pd.DataFrame:
    items = [
        ("2D sinusoid", "sin2d", dict(group="pe_type", pe="sin2d")),
        ("learned σ=0.1", "learned s=0.1", dict(group="sigma", sigma=0.1)),
        ("learned σ=0.2", "learned s=0.2", dict(group="sigma", sigma=0.2)),
        ("learned σ=1.0", "learned s=1", dict(group="sigma", sigma=1.0)),
        ("learned σ=2.0", "learned s=2", dict(group="sigma", sigma=2.0)),
        ("relative PE", "relative", dict(group="pe_type", pe="relative")),
        ("learned σ=0.1 + weight decay 0.1", "weight decay", dict(group="control", control="wd0.1", sigma=0.1)),
        ("learned σ=2.0 + weight decay 0.1", "weight decay", dict(group="control", control="wd0.1", sigma=2.0)),
    ]
    rows = []
    for lab, key, sel in items:
        rows.append({"model": lab, "study OOD % (15 seeds, 4000 ep.)": study_pct(key) + (" (σ not given)" if key == "weight decay" else ""),
                     "ours OOD % mean [95% CI, clipped]": fmt_ci(_ood(runs, **sel))})
    return pd.DataFrame(rows)


def accuracy_table(df: pd.DataFrame, by: str) -> pd.DataFrame:
    rows = []
    for key, g in df.groupby(by, sort=True):
        row = {by: f"{key:g}" if isinstance(key, float) else key}
        for c, lab in (("train_acc", "train %"), ("test_acc", "test %"), ("ood_acc", "OOD %")):
            row[lab] = fmt_ci(g[c])
        for lv in LEVELS:
            row[f"OOD {lv} %"] = fmt_ci(g[f"ood_acc_{lv}"], digits=0)
        rows.append(row)
    return pd.DataFrame(rows)


PAIRS = (("learned σ=0.1", dict(group="sigma", sigma=0.1), "learned σ=2.0", dict(group="sigma", sigma=2.0)),
         ("learned σ=0.2", dict(group="sigma", sigma=0.2), "learned σ=1.0", dict(group="sigma", sigma=1.0)),
         ("learned σ=0.01", dict(group="sigma", sigma=0.01), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("2D sinusoid", dict(group="pe_type", pe="sin2d"), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("learned σ=2.0, input only", dict(group="placement", sigma=2.0), "learned σ=2.0, every layer", dict(group="sigma", sigma=2.0)),
         ("σ=0.1 + wd 0.1", dict(group="control", control="wd0.1", sigma=0.1), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("σ=2.0 + wd 0.1", dict(group="control", control="wd0.1", sigma=2.0), "learned σ=2.0", dict(group="sigma", sigma=2.0)))


def paired_table(runs: pd.DataFrame, paths: pd.Series | None = None) -> pd.DataFrame:
    rows = []
    for la, sa, lb, sb in PAIRS:
        a, b = _ood(runs, **sa), _ood(runs, **sb)
        t, c = paired_test(a, b), paired_ci(a, b)
        row = {"A": la, "B": lb, "seeds paired": t["n"],
               "paired mean A / B (%)": f"{100 * c['mean_a']:.1f} / {100 * c['mean_b']:.1f}" if c["n"] else "n/a",
               "mean OOD diff A-B (points)": f3(round(100 * t["mean_diff"], 4) + 0.0) if t["n"] else "n/a",
               "95% t-CI (points)": f"[{100 * c['ci_low']:.1f}, {100 * c['ci_high']:.1f}]" if np.isfinite(c["ci_low"]) else "n/a",
               "paired t p": fp(t["t_p"]), "Wilcoxon p": fp(t["wilcoxon_p"])}
        if paths is not None:
            row["CPU attention code path"] = pair_paths(runs, paths, sa, sb, all_paths=True) or "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


def ident_table(ana_sigma: pd.DataFrame) -> pd.DataFrame:
    """Per view: mean over runs at the smallest and largest sigma, Spearman with sigma and with OOD accuracy."""
    rows = []
    for view, layer, lab in VIEWS:
        d = view_rows(ana_sigma, view, layer)
        if d.empty:
            continue
        lo, hi = d.sigma.min(), d.sigma.max()
        for key in ("rsa_spearman", "recovery_cmds_r2", "probe_r2", "ref_shape_distance", "ref_procrustes_distance",
                    "kernel_distance_rho", "attention_similarity"):
            if d[key].isna().all():
                continue
            rs, ps, n = spearman(d.sigma.astype(float), d[key])
            rg, pg, _ = spearman(d[key], d.eval_ood_acc)
            sig_share = (d.rsa_p < 0.05).mean() if key == "rsa_spearman" else math.nan
            small = d[d.sigma <= 0.2]
            sig_small = (small.rsa_p < 0.05).mean() if key == "rsa_spearman" and len(small) else math.nan
            rows.append({"view": lab, "metric": key,
                         f"σ={lo:g} mean": f3(d[d.sigma == lo][key].mean()), f"σ={hi:g} mean": f3(d[d.sigma == hi][key].mean()),
                         "ρ with σ": f"{f3(rs)} (p {fp(ps)})", "ρ with OOD acc": f"{f3(rg)} (p {fp(pg)})", "n runs": n,
                         f"share Mantel p<0.05, all σ ({len(d)} runs)": "" if not np.isfinite(sig_share) else f"{sig_share:.2f}",
                         f"share Mantel p<0.05, σ ≤ 0.2 ({len(small)} runs)": "" if not np.isfinite(sig_small) else f"{sig_small:.2f}"})
    return pd.DataFrame(rows)


def pe_type_ident_table(ana: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    lab = label_runs(runs).set_index("run").label
    rows = []
    d = ana[ana.is_last.astype(bool) & (ana.group != "sigma")]
    for run, g in d.groupby("run"):
        def get(view, layer, key):
            s = g[(g.view == view) & (g.layer.astype(str) == layer)][key]
            return f3(s.iloc[0]) if len(s) else "n/a"
        rows.append({"run": run, "model": lab.get(run, run), "OOD %": f3(100 * g.eval_ood_acc.iloc[0]),
                     "raw RSA": get("raw", "mean", "rsa_spearman"), "kernel RSA": get("kernel", "mean", "rsa_spearman"),
                     "attention RSA": get("attention", "mean", "rsa_spearman"),
                     "attention sim. to sin2d": get("attention", "mean", "attention_similarity")})
    return pd.DataFrame(rows)


TRAJ_VIEWS = (("raw", "mean", "raw table (mean of layers)"), ("raw", "0", "raw table, layer 0"),
              ("qk", "0", "qk view, layer 0"), ("kernel", "mean", "attention kernel"), ("attention", "mean", "attention maps"))


def rsa_change(d: pd.DataFrame, first, last) -> dict[str, Any]:
    """Per-run RSA change from epoch ``first`` to ``last`` (runs having both), with a paired t-test."""
    piv = d.pivot_table(index="run", columns="epoch", values="rsa_spearman")
    if first not in piv or last not in piv:
        return paired_ci(pd.Series(dtype=float), pd.Series(dtype=float))
    return paired_ci(piv[last], piv[first])


def trajectory_summary(ana_sigma: pd.DataFrame) -> pd.DataFrame:
    """RSA of each trajectory view at the first and last checkpoint, small (<= 0.2) vs large (>= 1.5) sigma, and the
    per-run change between them with a paired t-test."""
    rows = []
    for view, layer, _ in TRAJ_VIEWS:
        d = view_rows(ana_sigma, view, layer, last=False)
        if d.empty:
            continue
        first, last = d.epoch.min(), d.epoch.max()
        for band, sel in (("σ ≤ 0.2", d.sigma <= 0.2), ("σ ≥ 1.5", d.sigma >= 1.5)):
            b = d[sel]
            if b.empty:
                continue
            per_epoch = b.groupby("epoch").rsa_spearman.mean()
            ch = rsa_change(b, first, last)
            rows.append({"view": f"{view}:{layer}", "σ band": band, f"RSA at epoch {first}": f3(per_epoch.get(first)),
                         f"RSA at epoch {last}": f3(per_epoch.get(last)),
                         f"change {first}→{last} (paired t p, n runs)": (f"{ch['diff']:+.3f} (p {fp(ch['t_p'])}, n {ch['n']})"
                                                                         if ch["n"] else "n/a"),
                         "max over epochs": f3(per_epoch.max()),
                         "epoch of max": int(per_epoch.idxmax()) if per_epoch.notna().any() else "n/a"})
    return pd.DataFrame(rows)


def model_line(root: Path, runs: pd.DataFrame) -> str:
    """The σ-grid runs' model and optimiser, and the optimiser controls', read from the runs' config.json."""
    names = list(sigma_runs(runs).run) if not runs.empty else []
    if not names or not (root / names[0] / "config.json").exists():
        return "(config not available)."
    c = json.loads((root / names[0] / "config.json").read_text())
    m, o = c["model"], c["optim"]
    return (f"{m['n_layers']} layers, {m['n_heads']} head(s), d_model {m['d_model']}, MLP {int(m['d_model'] * m['mlp_ratio'])}, "
            f"{m['norm']}-LN, {o['name']} lr {o['lr']:g}, batch {o['batch_size']}, {o['epochs']} epochs, a separate learned PE "
            f"table at every layer's input (as the companion code) unless marked *input only*"
            + "".join(f"; {text}" for text in control_optimisers(root, runs)) + ".")


def control_optimisers(root: Path, runs: pd.DataFrame) -> list[str]:
    """One phrase per optimiser control that ran ("sgd controls: SGD lr 0.01, momentum 0.9"), from the first
    such run's config.json; the SGD learning rate's origin from `analyses.lst.grid`."""
    if runs.empty or "control" not in runs:
        return []
    out = []
    for control, group in runs[runs.group == "control"].groupby("control", sort=True):
        path = root / group.run.iloc[0] / "config.json"
        if not path.exists():
            continue
        o = json.loads(path.read_text())["optim"]
        sgd = o["name"] == "sgd"
        parts = [f"{'SGD' if sgd else 'AdamW' if o['name'] == 'adamw' else o['name']} lr {o['lr']:g}"]
        if sgd and o.get("momentum"):  # AdamW configs carry the unused default too
            parts.append(f"momentum {o['momentum']:g}")
        if o.get("weight_decay"):
            parts.append(f"weight decay {o['weight_decay']:g}")
        origin = f" ({SGD_LR_ORIGIN})" if sgd else ""
        out.append(f"{control} controls: {', '.join(parts)}{origin}")
    return out


# ---------------------------------------------------------------------------------------------------
# Verdicts: each label is decided by one of these rules, the ones the report's criteria paragraph states

SMALL, LARGE, TREND_CUT = 0.2, 1.5, 0.5  # "small σ", "large σ", the range of the small-σ trend
RSA_MIN, MANTEL_SHARE, BORDER = 0.3, 0.5, 0.01  # geometry "present": mean RSA > 0.3, Mantel p < 0.05 in >= half
ALPHA = 0.05


def _ok(p) -> bool:
    return p is not None and np.isfinite(p) and p < ALPHA


def small_sigma_trend(sr: pd.DataFrame, cut: float = TREND_CUT) -> tuple[str, str]:
    """(label, sentence): Spearman ρ(σ, held-out accuracy) over the runs with σ <= cut; 'rises with σ' / 'falls with
    σ' when p < 0.05, else 'no clear trend'."""
    d = sr[sr.sigma <= cut]
    rho, p, n = spearman(d.sigma.astype(float), d.ood_acc)
    label = ("rises with σ" if rho > 0 else "falls with σ") if _ok(p) else "no clear trend"
    what = f"held-out accuracy {label}" if label != "no clear trend" else "held-out accuracy shows no clear trend with σ"
    rs = "n/a" if not np.isfinite(rho) else f"{rho:+.3g}"
    return label, f"over σ ≤ {cut:g}, {what} (ρ = {rs}, p = {fp(p)}, n = {n} runs)"


def geometry_state(d: pd.DataFrame) -> dict[str, Any]:
    """The three-level geometry rule on one view's last-checkpoint rows over the σ grid: 'present' (σ <= 0.2: mean
    RSA > 0.3 and Mantel p < 0.05 in at least half of the runs), else 'weak, but it decreases with σ' (ρ(σ, RSA) < 0,
    p < 0.05 over all σ), else 'not supported'; 'borderline' when the Mantel share qualifies and the mean RSA is
    within 0.01 of 0.3."""
    s_, l_ = d[d.sigma <= SMALL], d[d.sigma >= LARGE]
    mean = float(s_.rsa_spearman.mean()) if len(s_) else math.nan
    share = float((s_.rsa_p < ALPHA).mean()) if len(s_) else math.nan
    rho, p, n = spearman(d.sigma.astype(float), d.rsa_spearman)
    present = bool(len(s_)) and mean > RSA_MIN and share >= MANTEL_SHARE
    decreasing = np.isfinite(rho) and rho < 0 and _ok(p)
    state = "present" if present else ("weak, but it decreases with σ" if decreasing else "not supported")
    if not present and not np.isfinite(p):  # no ρ over the grid (fewer than 3 runs, or one σ): nothing to decide
        state = "not testable with these runs (no σ ≤ 0.2 run meets the bar, and no ρ(σ, RSA) over fewer than 3 runs or one σ)"
    if np.isfinite(mean) and share >= MANTEL_SHARE and abs(mean - RSA_MIN) < BORDER:
        state += f" (borderline: mean RSA {mean:.3f} is within {BORDER:g} of {RSA_MIN:g})"
    return {"state": state, "mean_small": mean, "share_small": share, "n_small": len(s_),
            "mean_large": float(l_.rsa_spearman.mean()) if len(l_) else math.nan, "rho": rho, "p": p, "n": n}


def attention_floor_value(ana: pd.DataFrame) -> tuple[float, int]:
    """Mean cosine similarity of the no-PE model's attention maps to the 2D-sinusoid model's: the measure's floor."""
    d = view_rows(ana[ana.pe == "none"], "attention", "mean") if not ana.empty and "pe" in ana else ana.iloc[0:0]
    d = d.dropna(subset=["attention_similarity"]) if not d.empty else d
    return (float(d.attention_similarity.mean()), len(d)) if len(d) else (math.nan, 0)


def attention_state(small: float, large: float, floor: float) -> str:
    """'supported' only when the small-σ mean similarity exceeds the no-PE floor."""
    if not np.isfinite(floor):
        return "descriptive only (no model without PE to set the floor)"
    if np.isfinite(small) and small > floor:
        return "supported: small σ exceeds the no-PE floor"
    large_s = ("large σ falls below the no-PE floor" if np.isfinite(large) and large < floor
               else "large σ does not fall below the no-PE floor")
    return f"not supported: {large_s}, while small σ does not exceed it"


def best_state(c: dict[str, Any]) -> str:
    """The 2D sinusoid vs the best σ of the grid, seed-paired: 'supported' when its mean is higher with paired t
    p < 0.05, 'not supported' when lower with p < 0.05, 'not distinguishable' when p >= 0.05."""
    if c["n"] < 2 or not np.isfinite(c["t_p"]):
        return "descriptive only" if c["n"] < 2 else "not distinguishable"
    if _ok(c["t_p"]):
        return "supported" if c["diff"] > 0 else "not supported"
    return "not distinguishable"


def wd_state(c: dict[str, Any], implied_gain: float) -> str:
    """Weight decay vs none, seed-paired: 'supported' when the difference is positive with paired t p < 0.05 over at
    least 3 seeds; else 'not detected (CI ...)' when the 95% t-CI includes the study's implied gain, 'not
    reproduced' when it excludes it; 'descriptive only' with fewer than 2 seeds."""
    if c["n"] < 2 or not np.isfinite(c["ci_low"]):
        return "descriptive only"
    ci = f"95% CI [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] points"
    if c["n"] >= 3 and c["diff"] > 0 and _ok(c["t_p"]):
        return "supported" + (f", but by less than the study's implied gain ({ci})" if c["ci_high"] < implied_gain else "")
    if c["ci_low"] <= implied_gain <= c["ci_high"]:
        return f"not detected ({ci} includes the study's implied gain of ~{100 * implied_gain:.1f})"
    return f"not reproduced ({ci} excludes the study's implied gain of ~{100 * implied_gain:.1f})"


def within_sigma_spearman(d: pd.DataFrame, x: str, y: str) -> tuple[float, float, int]:
    """Spearman ρ of x with y after centring both on their σ's mean: the association that σ does not carry."""
    g = d.groupby("sigma")
    return spearman(d[x] - g[x].transform("mean"), d[y] - g[y].transform("mean"))


def _paired_line(c: dict[str, Any], la: str, lb: str) -> str:
    seeds = ", ".join(map(str, c["keys"]))
    ci = (f", 95% t-CI [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]" if np.isfinite(c["ci_low"]) else "")
    return (f"over the {c['n']} seed(s) both have ({seeds}): {la} {100 * c['mean_a']:.1f}% vs {lb} {100 * c['mean_b']:.1f}%; "
            f"paired difference {100 * c['diff']:+.1f} points{ci}, paired t p = {fp(c['t_p'])}")


MIXED = "same maths, other floating-point rounding"


def _cap(t: str) -> str:
    return t[:1].upper() + t[1:]


def verdicts(runs: pd.DataFrame, ana_sigma: pd.DataFrame, ana_all: pd.DataFrame | None = None,
             paths: pd.Series | None = None) -> list[str]:
    """Plain statements on the study's claims, each decided by the numbers computed here."""
    out = []
    ana_all = ana_sigma if ana_all is None else ana_all
    sr = sigma_runs(runs)
    if sr.empty:
        return ["No finished runs of the σ grid: no claim can be checked."]
    from scipy import stats

    rho, p, n = spearman(sr.sigma, sr.ood_acc)
    small, large = sr[sr.sigma <= SMALL].ood_acc, sr[sr.sigma >= LARGE].ood_acc
    gap = small.mean() - large.mean()
    mw = stats.mannwhitneyu(small, large, alternative="greater").pvalue if len(small) and len(large) else math.nan
    ok = gap > 0.10 and np.isfinite(mw) and mw < ALPHA
    per = sr.groupby("sigma").ood_acc.mean()
    # the smallest one-sided Mann-Whitney p these group sizes allow (no ties): at or above ALPHA no outcome
    # could support the claim, so it is not testable here rather than "not supported"
    least_p = 1 / math.comb(len(small) + len(large), len(small)) if len(small) and len(large) else math.nan
    state = "supported" if ok else ("same direction, not significant" if gap > 0.10 else "not supported")
    if not (np.isfinite(least_p) and least_p < ALPHA):
        state = ("not testable with these runs (" + (f"n = {len(small)} vs {len(large)}: the smallest one-sided "
                 f"Mann-Whitney p possible is {fp(least_p)}" if np.isfinite(least_p) else "a σ band has no runs") + ")")
    out.append(f"**Large σ hurts generalization (study: σ=2.0 37.7% vs 92-96% at σ 0.1-0.2): {state}.** Mean held-out accuracy {pct(small.mean())} for σ ≤ 0.2 "
               f"(n = {len(small)} runs) vs {pct(large.mean())} for σ ≥ 1.5 (n = {len(large)}); one-sided Mann-Whitney "
               f"p = {fp(mw)}. Per σ: " + ", ".join(f"{k:g}: {100 * v:.0f}%" for k, v in per.items()) + ".")
    mono = np.isfinite(rho) and rho < 0 and _ok(p)
    _, trend = small_sigma_trend(sr)
    mono_state = ("supported" if mono else "not supported") if np.isfinite(p) else \
        "not testable with these runs (fewer than 3 runs, or one σ)"
    out.append(f"**Smaller σ is better across the whole range: {mono_state}.** "
               f"Spearman ρ(σ, held-out accuracy) = {f3(rho)} (p = {fp(p)}, n = {n} runs); {trend}.")
    geo = (("raw", "mean", "Small-σ learned tables mirror the true grid (raw table, mean of layers)"),
           ("q", "0", "Grid geometry in the q view of the table, layer 0"),
           ("k", "0", "Grid geometry in the k view of the table, layer 0"),
           ("qk", "0", "Grid geometry in the qk view of the table, layer 0"),
           ("kernel", "mean", "Grid geometry in the attention kernel of the table"),
           ("attention", "mean", "Grid geometry in the attention maps on task data"))
    for view, layer, head in geo:
        d = view_rows(ana_sigma, view, layer)
        if d.empty or d.rsa_spearman.isna().all():
            continue
        g = geometry_state(d)
        extra = (f"; cMDS recovery r² {f3(d[d.sigma <= SMALL].recovery_cmds_r2.mean())} for σ ≤ 0.2"
                 if view == "raw" else "")
        out.append(f"**{head}: {g['state']}.** RSA mean {f3(g['mean_small'])} for σ ≤ 0.2 (n = {g['n_small']}; Mantel "
                   f"p < 0.05 in {100 * g['share_small']:.1f}% of them) vs {f3(g['mean_large'])} for σ ≥ 1.5; ρ(σ, RSA) = "
                   f"{f3(g['rho'])} (p = {fp(g['p'])}, n = {g['n']}){extra}.")
    att = view_rows(ana_sigma, "attention", "mean")
    if not att.empty and not att.attention_similarity.isna().all():
        r1_, p1_, n1_ = spearman(att.sigma, att.attention_similarity)
        r2_, p2_, _ = spearman(att.attention_similarity, att.eval_ood_acc)
        sm, lg = att[att.sigma <= SMALL].attention_similarity.mean(), att[att.sigma >= LARGE].attention_similarity.mean()
        floor, nf = attention_floor_value(ana_all)
        fl = f"{f3(floor)} for the model without any PE (n = {nf}), the floor of this measure" if nf else "no no-PE model"
        out.append(f"**Attention maps of small-σ models resemble the 2D-sinusoid model's (the study's attention measure): "
                   f"{attention_state(sm, lg, floor)}.** Cosine similarity to the 2D-sinusoid model's maps {f3(sm)} for "
                   f"σ ≤ 0.2 and {f3(lg)} for σ ≥ 1.5 vs {fl}; ρ(σ, similarity) = {f3(r1_)} (p = {fp(p1_)}, n = {n1_}); "
                   f"ρ(similarity, held-out accuracy) = {f3(r2_)} (p = {fp(p2_)}).")
    sin = _ood(runs, group="pe_type", pe="sin2d")
    if len(sin):
        best_sig = float(per.idxmax())
        c = paired_ci(sin, _ood(sr, sigma=best_sig))
        mixed = pair_paths(runs, paths, dict(group="pe_type", pe="sin2d"), dict(group="sigma", sigma=best_sig),
                           names=("2D sinusoid", f"σ = {best_sig:g}"))
        out.append(f"**The 2D sinusoid generalizes best (study: 97.7%): {best_state(c)}.** Against the σ of the grid with "
                   f"the highest mean (σ = {best_sig:g}), "
                   + _paired_line(c, "2D sinusoid", f"σ = {best_sig:g}") + "."
                   + (f" These pairs mix the two CPU attention code paths ({mixed}; {MIXED})." if mixed else ""))
    for sig, key in ((0.1, "learned s=0.1"), (2.0, "learned s=2")):
        wd, plain = _ood(runs, group="control", control="wd0.1", sigma=sig), _ood(runs, group="sigma", sigma=sig)
        if not (len(wd) and len(plain)):
            continue
        c = paired_ci(wd, plain)
        implied = STUDY["weight decay"] - STUDY[key]
        mixed = pair_paths(runs, paths, dict(group="control", control="wd0.1", sigma=sig), dict(group="sigma", sigma=sig),
                           names=("with weight decay", "without"))
        out.append(f"**Weight decay helps learned PEs (study: about 99%), σ = {sg(sig)}: {wd_state(c, implied)}.** "
                   + _cap(_paired_line(c, "AdamW weight decay 0.1", "without"))
                   + f". The study's implied gain: {study_pct('weight decay')}% with weight decay (its σ not given) minus "
                   f"{study_pct(key)}% without at σ = {sg(sig)} = ~{100 * implied:.1f} points; the study trained 4,000 epochs, "
                   f"these runs {int(sr.epochs.max())}."
                   + (f" These pairs mix the two CPU attention code paths ({mixed}; {MIXED})." if mixed else ""))
    sa, sb = dict(group="placement", sigma=2.0), dict(group="sigma", sigma=2.0)
    inp, every = _ood(runs, **sa), _ood(runs, **sb)
    if len(inp) and len(every):
        c = paired_ci(inp, every)
        mixed = pair_paths(runs, paths, sa, sb, names=("input only", "every layer"))
        out.append("**Placement at σ = 2.0:** " + _paired_line(c, "one table at the input only", "a table at every layer")
                   + "." + (f" These pairs mix the two CPU attention code paths ({mixed}; {MIXED})." if mixed else ""))
    raw = view_rows(ana_sigma, "raw", "mean")
    if not raw.empty:
        ru, pu, nu = spearman(raw.ref_procrustes_distance, raw.eval_ood_acc)
        rn, pn, _ = spearman(raw.ref_shape_distance, raw.eval_ood_acc)
        su, _, _ = spearman(raw.sigma, raw.ref_procrustes_distance)
        sn, _, _ = spearman(raw.sigma, raw.ref_shape_distance)
        wu, wpu, wn = within_sigma_spearman(raw, "ref_procrustes_distance", "eval_ood_acc")
        ws, wps, _ = within_sigma_spearman(raw, "ref_shape_distance", "eval_ood_acc")
        out.append(f"**Distance to the 2D sinusoid predicts generalization (study: ρ = {STUDY_RHO} for the Procrustes "
                   f"distance of the learned PE):** raw table (mean of layers), across the σ-grid runs: unnormalised "
                   f"Procrustes distance ρ = {f3(ru)} (p = {fp(pu)}, n = {nu}); normalised shape distance ρ = {f3(rn)} "
                   f"(p = {fp(pn)}). Both distances track σ (ρ(σ, distance) = {f3(su)} and {f3(sn)}; the unnormalised "
                   f"one grows with the table's norm, hence with σ by construction), so their correlation with accuracy "
                   f"across σ is confounded by σ. Within σ (distance and accuracy centred on each σ's mean): Procrustes "
                   f"ρ = {f3(wu)} (p = {fp(wpu)}), shape distance ρ = {f3(ws)} (p = {fp(wps)}), n = {wn}.")
    return out


def answer(ana_sigma: pd.DataFrame) -> str:
    """Later in training, or in what the model reads? Decided from the per-run RSA change between the first and the
    last checkpoint (σ <= 0.2, paired t-test per view)."""
    raw = view_rows(ana_sigma, "raw", "mean", last=False)
    if raw.empty:
        return "No analyses yet."
    first, last = raw.epoch.min(), raw.epoch.max()
    parts, up, down, flat, at_last = [], [], [], [], {}
    n_small = 0
    for view, layer, lab in TRAJ_VIEWS:
        d = view_rows(ana_sigma, view, layer, last=False)
        if d.empty:
            continue
        s_, l_ = d[d.sigma <= SMALL], d[(d.sigma >= LARGE) & (d.epoch == last)]
        a0, a1 = s_[s_.epoch == first].rsa_spearman.mean(), s_[s_.epoch == last].rsa_spearman.mean()
        ch = rsa_change(s_, first, last)
        n_small = max(n_small, ch["n"])
        at_last[lab] = a1
        item = f"{lab} {ch['diff']:+.3f} (p = {fp(ch['t_p'])})" if ch["n"] else f"{lab} n/a"
        (up if _ok(ch["t_p"]) and ch["diff"] > 0 else down if _ok(ch["t_p"]) else flat).append((view, item))
        parts.append(f"{lab}: {f3(a0)} → {f3(a1)} (σ ≥ 1.5 at epoch {last}: {f3(l_.rsa_spearman.mean())})")
    text = (f"RSA with the grid for σ ≤ 0.2, epoch {first} → epoch {last} (mean over {n_small} runs): " + "; ".join(parts)
            + f". Per-run change from epoch {first} to {last} with a paired t-test (not corrected for the "
            f"{len(parts)} views): ")
    said = []
    if up:
        said.append("RSA rose for the " + ", ".join(i for _, i in up))
    if down:
        said.append("fell for the " + ", ".join(i for _, i in down))
    if flat:
        said.append("did not change detectably for the " + ", ".join(i for _, i in flat))
    text += "; ".join(said) + ". "
    raw_up = [i for v, i in up if v == "raw"]
    read_up = [i for v, i in up if v != "raw"]
    read_max = np.nanmax([v for k, v in at_last.items() if not k.startswith("raw")] or [math.nan])
    if read_up and not raw_up:
        text += (f"So over these {last} epochs the grid geometry that grows with training is in what the model reads, "
                 f"not in the raw table, and it stays modest in absolute terms (RSA at most {f3(read_max)} at epoch {last}).")
    elif raw_up and not read_up:
        text += f"So over these {last} epochs the grid geometry that grows is in the raw table, not in what the model reads."
    elif raw_up and read_up:
        text += f"So over these {last} epochs both the raw table and what the model reads gain grid geometry."
    else:
        text += f"So no view gains grid geometry detectably over these {last} epochs."
    corr = []
    for view, layer, lab in VIEWS:
        d = view_rows(ana_sigma, view, layer)
        if d.empty or d.ref_shape_distance.isna().all():
            continue
        r, p, n = spearman(d.ref_shape_distance, d.eval_ood_acc)
        corr.append(f"{lab} ρ = {f3(r)} (p = {fp(p)})")
    if corr:
        text += (" Scale-free shape distance to the 2D sinusoid vs held-out accuracy across all σ-grid runs (last "
                 "checkpoint; these pool σ, which moves both, see the distance verdict above): " + "; ".join(corr) + ".")
    return text


def criteria_text() -> str:
    """The criteria paragraph: the rules the verdict functions above apply, with their constants."""
    return ("Criteria (fixed in `analyses/lst/report.py`): *large σ hurts* is supported when held-out accuracy for "
            f"σ ≤ {SMALL:g} exceeds that for σ ≥ {LARGE:g} by more than 10 points with a one-sided Mann-Whitney p < {ALPHA:g}; "
            f"*smaller is better throughout* when Spearman ρ(σ, accuracy) < 0 with p < {ALPHA:g} over the whole grid, and "
            f"the trend over small σ (σ ≤ {TREND_CUT:g}) is stated as *rises with σ* / *falls with σ* when its Spearman ρ "
            f"is positive / negative with p < {ALPHA:g}, *no clear trend* otherwise; a geometry claim (per view, last "
            f"checkpoint) is *present* when the mean RSA for σ ≤ {SMALL:g} exceeds {RSA_MIN:g} and the Mantel test is "
            f"significant (p < {ALPHA:g}) in at least {100 * MANTEL_SHARE:.0f}% of those runs (*borderline* when that "
            f"share qualifies and the mean RSA is within {BORDER:g} of {RSA_MIN:g}), *weak, but it decreases with σ* when "
            f"it is not present but ρ(σ, RSA) < 0 with p < {ALPHA:g} over the whole grid, and *not supported* otherwise; "
            f"small-σ attention maps *resemble the 2D sinusoid's* only when their mean cosine similarity to it (σ ≤ "
            f"{SMALL:g}) exceeds that of the model without any PE (the floor of this measure); *the 2D sinusoid "
            f"generalizes best* is supported when its mean exceeds that of the best σ of the grid with a seed-paired t-test "
            f"p < {ALPHA:g}, *not supported* when it is below with p < {ALPHA:g}, *not distinguishable* when p ≥ {ALPHA:g}; "
            f"*weight decay helps* is supported when the seed-paired held-out difference is positive with a paired t-test "
            f"p < {ALPHA:g} over at least 3 seeds, otherwise *not detected* when the 95% t-CI of the paired difference "
            f"includes the study's implied gain (its ~99% with weight decay minus its accuracy without at that σ), and "
            f"*not reproduced* when the CI excludes it. Comparisons with one seed are descriptive only.\n")


def write_report(root: Path, out: Path, frames: dict[str, pd.DataFrame], cmd: str, notes: list[str] | None = None,
                 n_perm: int = 500, n_boot: int = 500) -> Path:
    """README.md, figures and tables into ``out`` (the command passes a staging folder); returns the README's path."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.png")) + list(out.glob("*.csv")):
        old.unlink()
    runs, evals, ana, lay = frames["runs"], frames["evals"], frames["analyses"], frames["layouts"]
    for df in (runs, evals, ana, lay):
        if "sigma" in df:
            df["sigma"] = pd.to_numeric(df["sigma"], errors="coerce")
    grid = json.loads((root / "grid.json").read_text()) if (root / "grid.json").exists() else {"runs": [], "preset": "?"}
    planned = [r["name"] for r in grid["runs"]]
    done = set(runs.run) if not runs.empty else set()
    missing = [n for n in planned if n not in done]
    sr = sigma_runs(runs) if not runs.empty else runs
    ana_sigma = ana[ana.group == "sigma"] if not ana.empty else ana
    epochs = sorted(runs.epochs.unique()) if not runs.empty else []
    seeds = sorted(sr.seed.unique()) if not sr.empty else []
    paths = code_paths(root, runs) if not runs.empty else pd.Series(dtype=object)

    figs = {
        "accuracy": fig_accuracy(sr, out),
        "levels": fig_levels(sr, out),
        "ident": fig_identifiability(ana_sigma, out),
        "identgen": fig_ident_vs_gen(ana_sigma, out),
        "layouts": fig_layouts(lay, sr, out),
        "traj": fig_trajectories(ana_sigma, evals, out),
    }
    tables = {
        "comparison": comparison_table(runs) if not runs.empty else pd.DataFrame(),
        "acc_sigma": accuracy_table(sr, "sigma") if not sr.empty else pd.DataFrame(),
        "acc_types": accuracy_table(label_runs(runs[runs.group != "sigma"]), "label") if not runs.empty and (runs.group != "sigma").any() else pd.DataFrame(),
        "paired": paired_table(runs, paths) if not runs.empty else pd.DataFrame(),
        "ident": ident_table(ana_sigma) if not ana_sigma.empty else pd.DataFrame(),
        "types_ident": pe_type_ident_table(ana, runs) if not ana.empty else pd.DataFrame(),
        "traj": trajectory_summary(ana_sigma) if not ana_sigma.empty else pd.DataFrame(),
    }
    for name, df in tables.items():
        df.to_csv(out / f"table_{name}.csv", index=False)

    def img(key, caption):
        return f"![{caption}]({figs[key]}.png)\n\n_{caption}_ (data: [`{figs[key]}.csv`]({figs[key]}.csv))\n" if figs.get(key) else "_(figure not available: no data)_\n"

    L = []
    L.append("# Latin Square Task: does learning positional encodings depend on initialization?\n")
    L.append(f"Regenerate everything in this folder with:\n\n```bash\n{cmd}\n```\n")
    L.append("Reproduction of Ito et al., *Learning positional encodings in transformers depends on initialization* "
             "(arXiv 2406.08272) with `pe-probe`'s trainer and analyses. Every number below was computed by the command "
             "above from the sweep folder; the study's numbers are quoted from DESIGN.md section 6.\n")
    L.append("## Setting\n")
    L.append(f"- Sweep: `{root}`, preset `{grid.get('preset')}` ({len(done)} of {len(planned)} planned runs finished"
             + (f"; missing: {', '.join(missing)}" if missing else "") + ").")
    L.append(f"- Training length: {', '.join(str(e) for e in epochs)} epochs (the study: 4,000); σ-grid seeds: "
             f"{', '.join(str(s) for s in seeds)} (the study: 15).")
    secs = runs.train_seconds.dropna() if not runs.empty else pd.Series(dtype=float)
    side = setting.parallelism(root) or "how many runs trained at once is not recorded"
    L.append(f"- Hardware (from each run's `provenance.jsonl`): {setting.hardware(root, sorted(done))}."
             + (f" Training time per run: median {secs.median():.0f} s (range {secs.min():.0f}-{secs.max():.0f} s; "
                f"{side})." if len(secs) else ""))
    L.append("- Trainer code (git commit per run, from each run's `provenance.jsonl`): "
             + describe_versions([root / name for name in sorted(done)]) + ".")
    if not runs.empty:
        L.append(f"- CPU attention code path per run, inferred from the session start times in each run's `train.log` and "
                 f"its training time against commit {ATTENTION_SWITCH[0]} ({ATTENTION_SWITCH[1]}), which replaced torch's "
                 f"fused CPU attention kernel by matmul-softmax ({MIXED}): {describe_paths(paths)}.")
    from trainers.config import PRESETS  # imports torch: not at module level

    configs = setting.run_configs(root, sorted(done))
    L.append("- Model: " + model_line(root, runs)
             + setting.paper_note(grid.get("preset"), configs, PRESETS["paper"], PRESET_SETTINGS["paper"]["seeds"]))
    L.append(f"- Held-out (OOD) set: {setting.heldout_text(configs, len(LEVELS), STUDY_OOD_PUZZLES)}. Chance is "
             f"{100 * CHANCE:.0f}%. One run's held-out accuracy at {PRESET_EPOCHS['quick']} epochs of the quick preset is "
             "sensitive to floating-point rounding (a different summation order moves it by several points: "
             "`reports/benchmarks/precision.md`), so σ values are compared over seeds.")
    L.append("- Analyses: last checkpoint of each run, every view; earlier checkpoints: raw mean, raw layer 0, kernel, qk "
             f"layer 0, attention maps (trajectories). {n_perm} permutations / {n_boot} bootstrap resamples; reference "
             f"`{REFERENCE}`; attention maps on {N_PUZZLES} fresh puzzles compared with the final 2D-sinusoid run of the "
             "same seed.")
    L += [f"- Note: {n}" for n in notes or []]
    L.append("")
    L.append("## Verdicts on the study's claims\n")
    L.append(criteria_text())
    L += [f"- {v}" for v in verdicts(runs, ana_sigma, ana, paths)] if not runs.empty else ["- No finished runs."]
    L.append("")
    L.append("## Later in training, or in what the model reads?\n")
    L.append("Small σ is σ ≤ 0.2 and large σ is σ ≥ 1.5 here too, in the text and in the table.\n")
    L.append((answer(ana_sigma) if not ana_sigma.empty else "No analyses yet.") + "\n")
    L.append(md_table(tables["traj"]))
    L.append(img("traj", "RSA / recovery over training by σ (raw table mean of layers and layer 0, qk view layer 0, "
                         "attention kernel, attention maps) and held-out accuracy"))
    L.append("## Our numbers next to the study's (held-out accuracy)\n")
    L.append(md_table(tables["comparison"]))
    L.append("## Accuracy per σ (learned N(0, σ²), every layer)\n")
    L.append("Mean [95% t CI, clipped to 0-100] over seeds, in %.\n")
    L.append(md_table(tables["acc_sigma"]))
    L.append(img("accuracy", "Train, test and held-out accuracy vs σ"))
    L.append(img("levels", "Held-out accuracy per difficulty level vs σ"))
    L.append("## PE types, placements and optimiser controls\n")
    L.append(md_table(tables["acc_types"]))
    L.append("## Paired tests across seeds (held-out accuracy)\n")
    L.append("With few seeds these tests have little power (a Wilcoxon test on n pairs cannot go below p = 2/2^n); the "
             "Spearman correlations over all runs of the σ grid (above and below) pool the σ values. Paired means are over "
             "the seeds both sides have; the CI is the 95% t interval of the mean paired difference.\n")
    mixed_rows = ([f"*{r.A}* vs *{r.B}*" for r in tables["paired"].itertuples() if str(r[-1]).startswith("A:")]
                  if "CPU attention code path" in tables["paired"] else [])
    if mixed_rows:
        L.append(f"The pairs {'; '.join(mixed_rows)} mix the two CPU attention code paths (last column, from the runs' "
                 f"`train.log` times; {MIXED}), so part of each difference can be rounding rather than the factor "
                 "compared.\n")
    L.append(md_table(tables["paired"]))
    L.append("## Identifiability per view vs σ and vs generalization (last checkpoint)\n")
    L.append(md_table(tables["ident"]))
    L.append(img("ident", "Identifiability of the grid vs σ for each view"))
    L.append(img("identgen", "Distance to the 2D sinusoid vs held-out accuracy: unnormalised (left) and scale-free (right)"))
    L.append(img("layouts", layout_caption(sr)))
    L.append("### Other PE types and controls (last checkpoint)\n")
    L.append(md_table(tables["types_ident"]))
    L.append("## Files\n")
    L.append("Figures (`*.png`) each with the CSV they were drawn from; `table_*.csv` hold the tables above. The tidy "
             f"per-run tables are in `{root}/analysis/` (`runs.csv`, `evals.csv`, `analyses.csv`, `layouts.csv`).\n")
    L.append(f"_Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._\n")
    path = out / "README.md"
    path.write_text("\n".join(L))
    return path


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m analyses.lst.report", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="runs/lst-sweep", help="sweep folder, one subfolder per run (default: %(default)s)")
    p.add_argument("--out", default="reports/lst", help="report folder: README.md, figures, tables (default: %(default)s)")
    p.add_argument("--n-perm", type=int, default=500, help="Mantel / PROTEST permutations per analysis (default: %(default)s)")
    p.add_argument("--n-boot", type=int, default=500, help="bootstrap resamples per RSA CI (default: %(default)s)")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="an extra line for the report's Setting section, e.g. where the runs came from (repeatable)")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder not written by pe-probe")
    args = p.parse_args(argv)
    from analyses.lst.analyse import check_arguments, collect, write_tables

    check_arguments(p, Path(args.root), args.n_perm, args.n_boot)
    try:
        check_out_dir(args.out, args.force, inputs=[args.root])
    except InputError as e:
        p.error(str(e))
    import torch

    torch.set_num_threads(1)
    root = Path(args.root)
    frames = collect(root, n_perm=args.n_perm, n_boot=args.n_boot)
    write_tables(frames, root)
    cmd = "python -m analyses.lst.report --root " + str(args.root) + ("" if args.out == "reports/lst" else f" --out {args.out}")
    cmd += "".join(f" --{k.replace('_', '-')} {v}" for k, v in (("n_perm", args.n_perm), ("n_boot", args.n_boot)) if v != 500)
    cmd += "".join(f" \\\n    --note {shlex.quote(n)}" for n in args.note)
    try:
        with staged_dir(args.out, args.force) as stage:  # replaces --out only once the whole report is written
            write_report(root, stage, frames, cmd, notes=args.note, n_perm=args.n_perm, n_boot=args.n_boot)
    except InputError as e:
        p.error(str(e))
    print(f"report written to {Path(args.out) / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
