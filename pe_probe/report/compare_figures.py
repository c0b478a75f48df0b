"""Figures of a comparison across models: metrics vs a config key, identifiability vs generalization,
metrics over training steps. Each is drawn from a tidy frame that is saved as CSV beside it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_probe.report.style import ONE_COLUMN_IN, SEQUENTIAL_CMAP, TWO_COLUMN_IN, OKABE_ITO, publication_style, save_figure

GENERALIZATION_KEYS = ("eval.ood_acc", "eval.test_acc", "eval.ood_mse", "eval.test_mse")
BASE_METRICS = ("rsa_spearman", "probe_r2", "trustworthiness", "knn_overlap", "participation_ratio",
                "ref_shape_distance")


def identifiability_metrics(frame) -> list[str]:
    """Identifiability columns present in ``frame`` with at least one finite value, in reading order."""
    recovery = sorted(c for c in frame.columns if re.fullmatch(r"recovery_[a-z0-9]+_r2", str(c)))
    wanted = ["rsa_spearman", *recovery, *BASE_METRICS[1:]]
    out = []
    for c in wanted:
        if c in frame.columns and c not in out:
            vals = frame[c].to_numpy(dtype=float, na_value=np.nan)
            if np.isfinite(vals).any():
                out.append(c)
    return out


def generalization_key(frame) -> str | None:
    """First of eval.ood_acc / eval.test_acc / eval.ood_mse / eval.test_mse present with finite values."""
    for key in GENERALIZATION_KEYS:
        if key in frame.columns and np.isfinite(frame[key].to_numpy(dtype=float, na_value=np.nan)).any():
            return key
    return None


EXACT_SPEARMAN_N = 8  # up to this many pairs the p-value enumerates every pairing (8! = 40,320)


def spearman(x, y) -> tuple[float, float, int]:
    """Spearman rho, two-sided p and n over the pairs where both values are finite (nan when undefined).

    p is exact for n <= `EXACT_SPEARMAN_N` (every pairing of the values, ties kept: the share with |rho| at least
    the observed), where scipy's t approximation can be several times too small (n = 5, rho = 0.9: 0.037 against
    an exact 0.083); above it, scipy's."""
    from scipy.stats import spearmanr

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return math.nan, math.nan, n
    res = spearmanr(x[ok], y[ok])
    rho = float(res.statistic)
    return rho, (exact_spearman_p(x[ok], y[ok], rho) if n <= EXACT_SPEARMAN_N else float(res.pvalue)), n


def exact_spearman_p(x: np.ndarray, y: np.ndarray, rho: float) -> float:
    """Two-sided exact p of Spearman's rho: the share of all n! pairings of ``y`` with ``x`` whose |rho| is at
    least |``rho``| (within rounding)."""
    import itertools

    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    rx, ry = (rx - rx.mean()) / np.linalg.norm(rx - rx.mean()), (ry - ry.mean()) / np.linalg.norm(ry - ry.mean())
    perms = np.array(list(itertools.permutations(range(len(ry)))))
    rhos = ry[perms] @ rx  # the Pearson correlation of ranks of every pairing
    return float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))


def is_numeric(values) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(pd.Series(values).infer_objects()) and not pd.api.types.is_bool_dtype(pd.Series(values))


def summary_frame(frame, by: str, metrics: Sequence[str]):
    """Mean and 95% t-interval over rows (seeds/repeats) at each value of ``by``, per metric (tidy)."""
    import pandas as pd
    from scipy.stats import t as student_t

    rows = []
    for metric in metrics:
        sub = frame[[by, metric]].dropna()
        for value, grp in sub.groupby(by, sort=True):
            v = grp[metric].to_numpy(dtype=float)
            n = len(v)
            mean = float(v.mean())
            sd = float(v.std(ddof=1)) if n > 1 else math.nan
            half = float(student_t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n > 1 else math.nan
            rows.append({"metric": metric, by: value, "n": n, "mean": mean, "sd": sd,
                         "ci_low": mean - half, "ci_high": mean + half})
    return pd.DataFrame(rows, columns=["metric", by, "n", "mean", "sd", "ci_low", "ci_high"])


def _grid(n_panels: int, ncols: int = 3, panel_h: float = 1.9):
    import matplotlib.pyplot as plt

    ncols = max(1, min(ncols, n_panels))
    nrows = int(math.ceil(n_panels / ncols))
    width = TWO_COLUMN_IN if ncols > 1 else ONE_COLUMN_IN
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel_h * nrows + 0.4), layout="constrained", squeeze=False)
    for ax in axes.ravel()[n_panels:]:
        ax.set_visible(False)
    return fig, axes.ravel()[:n_panels]


def spans_decades(values) -> bool:
    """Whether positive values spread over more than a factor of 10 (three distinct values at least): a σ grid
    0.01 ... 2 on a linear axis bunches its small σ, where the study's effect lives, against the spine."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return len(np.unique(v)) >= 3 and v.min() > 0 and v.max() / v.min() > 10


def metrics_vs_by_figure(summary, frame, by: str, metrics: Sequence[str]):
    """One panel per metric: individual models (dots) and mean with 95% CI at each value of ``by``."""
    numeric = is_numeric(frame[by])
    log_x = numeric and spans_decades(frame[by])  # one decision for every panel of the figure
    fig, axes = _grid(len(metrics))
    cats = list(dict.fromkeys(summary[by])) if not numeric else None
    for ax, metric in zip(axes, metrics):
        s = summary[summary["metric"] == metric]
        pts = frame[[by, metric]].dropna()
        if numeric:
            xs, xp = s[by].to_numpy(dtype=float), pts[by].to_numpy(dtype=float)
        else:
            pos = {c: i for i, c in enumerate(cats)}
            xs = np.array([pos[v] for v in s[by]], dtype=float)
            xp = np.array([pos.get(v, np.nan) for v in pts[by]], dtype=float)
        ax.scatter(xp, pts[metric], s=12, color=OKABE_ITO[4], alpha=0.7, linewidths=0, label="model", zorder=3)
        lo = (s["mean"] - s["ci_low"]).to_numpy()
        hi = (s["ci_high"] - s["mean"]).to_numpy()
        yerr = np.vstack([np.nan_to_num(lo), np.nan_to_num(hi)])
        ax.errorbar(xs, s["mean"], yerr=yerr, color=OKABE_ITO[5], lw=1.0, marker="o", ms=3, capsize=2,
                    label="mean ± 95% CI", zorder=2, alpha=0.9)
        rho, p, n = spearman(pts[by], pts[metric]) if numeric else (math.nan, math.nan, len(pts))
        ax.set_title(f"{metric}" + (f"\nSpearman ρ = {rho:.2f} (n = {n})" if np.isfinite(rho) else ""))
        if log_x:
            ax.set_xscale("log")
            ax.set_xlabel(f"{by} (log scale)")
        else:
            ax.set_xlabel(by)
        if not numeric:
            ax.set_xticks(range(len(cats)), [str(c) for c in cats], rotation=30, ha="right")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=2, frameon=False)
    return fig


def generalization_frame(frame, metrics: Sequence[str], gen_key: str, by: str | None):
    """Tidy pairs (model, identifiability metric, its value, generalization value)."""
    import pandas as pd

    parts = []
    for metric in metrics:
        cols = ["label", metric, gen_key] + ([by] if by and by not in (metric, gen_key, "label") else [])
        sub = frame[cols].rename(columns={metric: "value"}).copy()
        sub.insert(1, "metric", metric)
        parts.append(sub)
    return pd.concat(parts, ignore_index=True)


def generalization_figure(gframe, metrics: Sequence[str], gen_key: str, by: str | None):
    """Generalization against each identifiability metric across models, Spearman ρ in each title."""
    import matplotlib

    fig, axes = _grid(len(metrics))
    colour_by = by if by and by in gframe.columns and is_numeric(gframe[by]) else None
    sc = None
    for ax, metric in zip(axes, metrics):
        sub = gframe[gframe["metric"] == metric]
        # a model without a value (a fixed PE, by pe.init_std): drawn grey, not dropped
        kw = ({"c": sub[colour_by].to_numpy(dtype=float), "plotnonfinite": True,
               "cmap": matplotlib.colormaps[SEQUENTIAL_CMAP].with_extremes(bad="0.65"),
               # a σ grid 0.02 ... 2 on a linear scale gives its small σ one colour, as on a linear axis
               "norm": "log" if spans_decades(gframe[colour_by]) else None}
              if colour_by else {"color": OKABE_ITO[4]})
        sc = ax.scatter(sub["value"], sub[gen_key], s=10, linewidths=0, **kw)
        rho, p, n = spearman(sub["value"], sub[gen_key])
        ax.set_title(f"Spearman ρ = {rho:.2f}\np = {p:.2g}, n = {n}" if np.isfinite(rho) else f"ρ undefined\nn = {n}",
                     fontsize=7)
        ax.set_xlabel(metric)
        ax.set_ylabel(gen_key)
    if colour_by and sc is not None:
        fig.colorbar(sc, ax=list(axes), shrink=0.5, aspect=30, label=colour_by)
        if not np.isfinite(gframe[colour_by].to_numpy(dtype=float)).all():  # the grey points get a key
            from matplotlib.lines import Line2D

            grey = Line2D([], [], ls="", marker="o", ms=3, mfc="0.65", mec="none",
                          label=f"{colour_by} blank (a PE that ignores it, or not recorded)")
            fig.legend(handles=[grey], loc="outside lower center", frameon=False, fontsize=7)
    fig.suptitle(f"identifiability vs generalization ({gen_key}) across models")
    return fig


def steps_frame(frame, metrics: Sequence[str]):
    """Metrics over training steps, long format: ``step``, ``metric``, ``value``."""
    long = frame.melt(id_vars=["step"], value_vars=list(metrics), var_name="metric", value_name="value")
    return long.sort_values(["metric", "step"], kind="stable").reset_index(drop=True)


def steps_figure(sframe, metrics: Sequence[str]):
    """One panel per metric over training steps."""
    fig, axes = _grid(len(metrics))
    for ax, metric in zip(axes, metrics):
        sub = sframe[sframe["metric"] == metric]
        ax.plot(sub["step"], sub["value"], color=OKABE_ITO[4], marker="o", ms=2.5, lw=1.0)
        ax.set_title(metric)
        ax.set_xlabel("training step")
    return fig


def write_compare_figures(frame, figures_dir: Path, *, by: str | None, trajectory: bool,
                          formats: Sequence[str] = ("png", "pdf")) -> tuple[list[Path], "object"]:
    """Draw every comparison figure; return (files written, correlations frame)."""
    import pandas as pd

    metrics = identifiability_metrics(frame)
    written: list[Path] = []
    corr_rows = []
    gen_key = generalization_key(frame)
    x_key = by or (None if trajectory else "label")
    with publication_style():
        if metrics and x_key:
            summary = summary_frame(frame, x_key, metrics)
            name = "metrics_vs_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", x_key)
            written += save_figure(metrics_vs_by_figure(summary, frame, x_key, metrics), summary, figures_dir, name, formats)
            if x_key != "label" and is_numeric(frame[x_key]):
                for m in metrics:
                    rho, p, n = spearman(frame[x_key], frame[m])
                    corr_rows.append({"x": x_key, "y": m, "spearman_rho": rho, "p_value": p, "n": n})
        if trajectory and metrics:
            sframe = steps_frame(frame, metrics)
            written += save_figure(steps_figure(sframe, metrics), sframe, figures_dir, "metrics_over_steps", formats)
            for m in metrics:
                rho, p, n = spearman(frame["step"], frame[m])
                corr_rows.append({"x": "step", "y": m, "spearman_rho": rho, "p_value": p, "n": n})
        if metrics and gen_key:
            gframe = generalization_frame(frame, metrics, gen_key, by)
            written += save_figure(generalization_figure(gframe, metrics, gen_key, by), gframe, figures_dir,
                                   "identifiability_vs_generalization", formats)
            for m in metrics:
                rho, p, n = spearman(frame[m], frame[gen_key])
                corr_rows.append({"x": m, "y": gen_key, "spearman_rho": rho, "p_value": p, "n": n})
    corr = pd.DataFrame(corr_rows, columns=["x", "y", "spearman_rho", "p_value", "n"])
    return written, corr
