"""The LST report's tables: pandas frames the report prints as markdown (`md_table`) and saves as ``table_*.csv``.

Accuracy against the study's numbers and per σ / PE type, seed-paired tests of the study's comparisons,
identifiability per view, and RSA over training.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyses.lst.code_paths import pair_paths
from analyses.lst.selection import TRAJ_VIEWS, VIEWS, label_runs, ood_by_seed, view_rows
from analyses.lst.study import LEVELS, study_pct
from analyses.lst.summary_stats import f3, fmt_ci, fp, paired_ci, paired_test, rsa_change, spearman


def md_table(df: pd.DataFrame) -> str:
    """``df`` as a markdown table ('_(no data)_' when empty)."""
    if df.empty:
        return "_(no data)_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in r) + " |")
    return "\n".join(lines) + "\n"


def comparison_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Our held-out accuracy next to the study's, for the models the study reports."""
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
                     "ours OOD % mean [95% CI, clipped]": fmt_ci(ood_by_seed(runs, **sel))})
    return pd.DataFrame(rows)


def accuracy_table(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """Train, test, held-out and per-level held-out accuracy (mean [95% CI] over seeds) per value of ``by``."""
    rows = []
    for key, g in df.groupby(by, sort=True):
        row = {by: f"{key:g}" if isinstance(key, float) else key}
        for c, lab in (("train_acc", "train %"), ("test_acc", "test %"), ("ood_acc", "OOD %")):
            row[lab] = fmt_ci(g[c])
        for lv in LEVELS:
            row[f"OOD {lv} %"] = fmt_ci(g[f"ood_acc_{lv}"], digits=0)
        rows.append(row)
    return pd.DataFrame(rows)


# the seed-paired comparisons of `paired_table`: (label A, runs A, label B, runs B)
PAIRS = (("learned σ=0.1", dict(group="sigma", sigma=0.1), "learned σ=2.0", dict(group="sigma", sigma=2.0)),
         ("learned σ=0.2", dict(group="sigma", sigma=0.2), "learned σ=1.0", dict(group="sigma", sigma=1.0)),
         ("learned σ=0.01", dict(group="sigma", sigma=0.01), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("2D sinusoid", dict(group="pe_type", pe="sin2d"), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("learned σ=2.0, input only", dict(group="placement", sigma=2.0), "learned σ=2.0, every layer", dict(group="sigma", sigma=2.0)),
         ("σ=0.1 + wd 0.1", dict(group="control", control="wd0.1", sigma=0.1), "learned σ=0.1", dict(group="sigma", sigma=0.1)),
         ("σ=2.0 + wd 0.1", dict(group="control", control="wd0.1", sigma=2.0), "learned σ=2.0", dict(group="sigma", sigma=2.0)))


def paired_table(runs: pd.DataFrame, paths: pd.Series | None = None) -> pd.DataFrame:
    """Paired t and Wilcoxon tests of held-out accuracy for each of `PAIRS`; with ``paths``, the CPU attention
    code paths of their runs."""
    rows = []
    for la, sa, lb, sb in PAIRS:
        a, b = ood_by_seed(runs, **sa), ood_by_seed(runs, **sb)
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
    """Per run outside the σ grid: held-out accuracy, RSA per view and attention similarity (last checkpoint)."""
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

