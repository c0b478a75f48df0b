"""Seed-blocked re-analysis of the committed sweep tables: the σ claims with each seed as a block.

    python -m analyses.seed_blocked                       # reads reports/, writes reports/seed-blocked/
    python -m analyses.seed_blocked --reports DIR --out DIR

Runs that share a seed are not independent across σ: the trainer seeds torch once and then draws the PE table
as ``normal_(0, σ)``, so seed s starts every σ from the same draw Z_s scaled by σ, with the same other weights,
batch order and masks. The sweep reports compare σ groups as if their runs were independent (Mann-Whitney, pooled
Spearman ρ over runs, unpaired intervals). This module reads only the committed per-run tables (no runs needed)
and asks the same questions with seeds as blocks:

* LST (``reports/lst``): the large-σ accuracy drop as one difference per seed; the accuracy trend over σ ranges
  (Page's trend test, seeds as blocks, and the sign of each seed's own Spearman ρ); the raw-table RSA trend per
  seed, and how strongly a seed's RSA at σ = 2 predicts its RSA at smaller σ (the shared starting draw); the
  within-σ association of geometry with accuracy; the σ effect with the table at the input only.
* netsim / brain (``reports/netsim*``, ``reports/brain*``): σ = 0.1 minus σ = 2 paired by seed, per split,
  with the training fit beside it.

Writes README.md (the numbers with how each was computed) and one CSV per section.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyses.lst.summary_stats import TIED, f3, mean_ci, merge_near_ties, spearman
from analyses.lst.tables import md_table
from pe_probe.errors import InputError, OneLineArgumentParser, first_line

ROOT = Path(__file__).resolve().parents[1]
SMALL, LARGE = 0.1, 2.0  # the σ pair the masked-task reports compare
SMALL_BAND, LARGE_BAND = 0.2, 1.5  # the LST report's bands: σ ≤ 0.2 against σ ≥ 1.5
# σ ranges of the LST accuracy trend: the report's rise over small σ, the same without the two σ below the study's
# grid (0.1-2.0), the flat middle, and the study's grid
LST_RANGES = (("σ ≤ 0.5", 0.0, 0.5), ("0.1 ≤ σ ≤ 0.5", 0.1, 0.5), ("0.1 ≤ σ ≤ 1.0", 0.1, 1.0),
              ("0.1 ≤ σ ≤ 2.0 (the study's grid)", 0.1, 2.0), ("the whole grid", 0.0, math.inf))
# (report folder, columns compared σ = 0.1 vs σ = 2, labels): lower is better in every one
MASKED = {
    "netsim": [("train_rel", "training fit (train MSE / zero)"), ("test_rel", "50%-masked test / zero"),
               ("ood_rel", "90%-masked OOD / zero"), ("ood_noise_rel", "unseen noise / zero")],
    "brain": [("train_mse", "training fit (train MSE)"), ("test_mse", "held-out subjects, 50% masked"),
              ("ood_mse", "held-out subjects, 90% masked"), ("test_train_gap", "50%-masked held-out minus train"),
              ("ood_train_gap", "90%-masked held-out minus train")],
}


MASKED_REPORTS = {"netsim": "netsim", "netsim-standard": "netsim", "brain": "brain", "brain-standard": "brain"}


def read_table(path: Path, needed: list[str]) -> pd.DataFrame:
    """A committed CSV with the columns this analysis needs, or a one-line error naming what is missing."""
    if not path.is_file():
        raise InputError(f"{path}: not found; run from the repository root or pass --reports with the committed reports")
    try:
        df = pd.read_csv(path)
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a readable CSV ({first_line(e)})") from None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise InputError(f"{path}: lacks the column(s) {', '.join(missing)}; regenerate it with its report command")
    return df


def seed_difference(per_seed: pd.Series) -> dict[str, Any]:
    """One difference per seed: mean with its 95% t-interval, the seeds on each side, a one-sided Wilcoxon
    signed-rank p (> 0) and the smallest p that test can give with this many seeds."""
    from scipy import stats

    d = per_seed.dropna().astype(float)
    m, lo, hi, n = mean_ci(d.values)
    merged = merge_near_ties(d.to_numpy())  # float32-stored accuracies: equal differences ~1e-7 apart are equal
    nonzero = int(np.count_nonzero(merged))  # Wilcoxon drops zero differences
    out = {"n_seeds": n, "mean": m, "ci_low": lo, "ci_high": hi, "seeds_positive": int((merged > 0).sum()),
           "seeds_negative": int((merged < 0).sum()), "wilcoxon_p_greater": math.nan, "t_p": math.nan,
           "min_possible_p": 0.5 ** nonzero if nonzero else math.nan}
    if n >= 2 and np.ptp(d.values) > TIED:  # equal differences have no variance: no t-test (p ~ 0 means nothing)
        out["t_p"] = float(stats.ttest_1samp(d.values, 0.0).pvalue)
    if nonzero:
        out["wilcoxon_p_greater"] = float(stats.wilcoxon(merged, alternative="greater").pvalue)
    return out


def page_trend(wide: pd.DataFrame) -> dict[str, float]:
    """Page's L test with seeds as blocks (rows) and σ as ordered treatments (columns, ascending): p for a rise
    and for a fall with σ. Seeds missing a σ are dropped."""
    from scipy import stats

    w = wide.dropna()
    if len(w) < 2 or w.shape[1] < 3:
        return {"page_p_rising": math.nan, "page_p_falling": math.nan, "n_blocks": len(w)}
    rising = stats.page_trend_test(w.to_numpy(float)).pvalue
    falling = stats.page_trend_test(w.to_numpy(float)[:, ::-1]).pvalue
    return {"page_p_rising": float(rising), "page_p_falling": float(falling), "n_blocks": len(w)}


def per_seed_rho(wide: pd.DataFrame) -> pd.Series:
    """Each seed's own Spearman ρ between σ (the columns) and the value."""
    from scipy import stats

    sig = np.asarray(wide.columns, dtype=float)
    return wide.apply(lambda row: stats.spearmanr(sig, row.to_numpy(float)).statistic
                      if row.notna().all() and np.ptp(row.to_numpy(float)) > 0 else math.nan, axis=1)


def lst_tables(lst: Path) -> dict[str, pd.DataFrame]:
    """The LST sections, each a table: the σ-band drop, the accuracy and RSA trends, the starting draw, within-σ
    association and the input-only σ effect."""
    from scipy import stats

    runs = read_table(lst / "identifiability_vs_generalization.csv",
                      ["sigma", "seed", "eval_ood_acc", "rsa_spearman", "ref_procrustes_distance"])
    acc = runs.pivot_table(index="seed", columns="sigma", values="eval_ood_acc")
    rsa = runs.pivot_table(index="seed", columns="sigma", values="rsa_spearman")
    sig = acc.columns.to_numpy(float)

    small, large = acc.loc[:, sig <= SMALL_BAND], acc.loc[:, sig >= LARGE_BAND]
    complete = small.notna().all(axis=1) & large.notna().all(axis=1)  # a seed missing one σ of a band is left out
    drop = (small.mean(axis=1) - large.mean(axis=1))[complete]
    band = pd.DataFrame([{"comparison": f"held-out accuracy, mean over σ ≤ {SMALL_BAND:g} minus mean over σ ≥ "
                                        f"{LARGE_BAND:g} (one difference per seed)", **seed_difference(drop)}])

    trends = []
    for name, wide, col in (("held-out accuracy", acc, "eval_ood_acc"), ("raw-table RSA (mean of layers)", rsa, "rsa_spearman")):
        for label, lo, hi in LST_RANGES:
            cols = (sig >= lo) & (sig <= hi)
            if cols.sum() < 3:  # no trend to test over fewer than 3 σ (a sweep without that range)
                continue
            sub = wide.loc[:, cols].dropna()  # seeds with every σ of the range: Page's blocks
            rho = per_seed_rho(sub)
            pooled = runs[(runs.sigma >= lo) & (runs.sigma <= hi)]
            trends.append({"value": name, "σ range": label, "n_sigmas": int(cols.sum()), **page_trend(sub),
                           "seeds_rho_positive": int((rho > 0).sum()), "seeds_rho_negative": int((rho < 0).sum()),
                           "median_seed_rho": float(rho.median()),
                           "pooled_rho": spearman(pooled.sigma, pooled[col])[0],
                           "n_runs_pooled": len(pooled)})
    trend = pd.DataFrame(trends)

    start = []
    top = float(sig.max())
    for s in sig[sig < top][::-1]:
        both = rsa[[top, s]].dropna()
        if len(both) >= 3:
            r = stats.pearsonr(both[top], both[s])
            start.append({"sigma": float(s), "vs_sigma": top, "n_seeds": len(both), "pearson_r": float(r.statistic),
                          "p": float(r.pvalue)})
    draw = pd.DataFrame(start)

    within = []
    for label, keep in (("all σ", np.ones(len(runs), bool)), ("σ ≤ 1.0 (models that fit the training set)",
                                                               (runs.sigma <= 1.0).to_numpy())):
        sub = runs[keep]
        centred = sub.groupby("sigma")[["eval_ood_acc", "rsa_spearman", "ref_procrustes_distance"]].transform(
            lambda c: c - c.mean())
        for col, name in (("rsa_spearman", "raw-table RSA"), ("ref_procrustes_distance", "Procrustes distance to the 2D sinusoid")):
            pooled_rho, pooled_p, _ = spearman(sub[col], sub.eval_ood_acc)
            inside_rho, inside_p, _ = spearman(centred[col], centred.eval_ood_acc)
            within.append({"runs": label, "measure": name, "n_runs": len(sub), "pooled_rho": pooled_rho,
                           "pooled_p": pooled_p, "within_sigma_rho": inside_rho, "within_sigma_p": inside_p})
    assoc = pd.DataFrame(within)

    types = read_table(lst / "table_types_ident.csv", ["run", "OOD %"])
    placement = []
    for where in ("input", "every"):
        pat = re.compile(rf"learned-{where}-s([0-9.]+)-seed(\d+)$")
        rows = [(float(m.group(1)), int(m.group(2)), v / 100) for r, v in zip(types.run, types["OOD %"])
                if (m := pat.match(str(r)))]
        if where == "every" and not rows:  # the σ grid's every-layer runs live in the other table
            rows = [(s, int(seed), a) for s, seed, a in zip(runs.sigma, runs.seed, runs.eval_ood_acc)]
        table = pd.DataFrame(rows, columns=["sigma", "seed", "acc"]).pivot_table(index="seed", columns="sigma", values="acc")
        if SMALL in table.columns and LARGE in table.columns:
            placement.append({"placement": f"{where} {'layer' if where == 'every' else 'only'}",
                              "comparison": f"held-out accuracy σ = {SMALL:g} minus σ = {LARGE:g}, paired by seed",
                              **seed_difference(table[SMALL] - table[LARGE])})
    return {"lst_band_drop": band, "lst_trends": trend, "lst_starting_draw": draw, "lst_within_sigma": assoc,
            "lst_placement": pd.DataFrame(placement)}


def masked_table(folder: Path, kind: str) -> pd.DataFrame:
    """σ = 0.1 minus σ = 2 per seed for each split of a netsim or brain report (lower is better: a negative
    difference favours small σ)."""
    needed = ["pe", "sigma", "seed"] + (["train_mse", "train_mse_zero"] if kind == "netsim" else [])
    derived = {"train_rel", "test_train_gap"}
    runs = read_table(folder / "runs.csv", needed + [c for c, _ in MASKED[kind] if c not in derived])
    runs = runs[runs.pe == "learned"].copy()
    if kind == "netsim":
        runs["train_rel"] = runs.train_mse / runs.train_mse_zero
    else:  # the generalisation gap at equal (50%) masking: new subjects only, not more masking too
        runs["test_train_gap"] = runs.test_mse - runs.train_mse
    rows = []
    for col, label in MASKED[kind]:
        wide = runs.pivot_table(index="seed", columns="sigma", values=col)
        if SMALL not in wide.columns or LARGE not in wide.columns:
            continue
        diff = (wide[SMALL] - wide[LARGE]).dropna()
        res = seed_difference(-diff)  # positive: small σ better (lower error); the t-test reported is two-sided
        rows.append({"report": folder.name, "split": label, "n_seeds": res["n_seeds"], "mean_diff": -res["mean"],
                     "ci_low": -res["ci_high"], "ci_high": -res["ci_low"], "seeds_favouring_small_sigma": res["seeds_positive"],
                     "seeds_favouring_large_sigma": res["seeds_negative"], "paired_t_p": res["t_p"],
                     "per_seed": " ".join(f"seed {k}: {v:+.4f}" for k, v in diff.items())})
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    """A table as markdown, numbers at 3 significant digits."""
    return md_table(df.map(lambda v: f3(v) if isinstance(v, (float, np.floating)) else v)).rstrip("\n")


ALPHA = 0.05


def trend_words(row: Any, value: str) -> str:
    """'accuracy rises with σ over R (Page p = ..., 8 of 8 seeds with ρ > 0)', or falls, or 'shows no detectable
    trend' (neither Page p below 0.05: not evidence of flatness with few seeds)."""
    if row.page_p_rising < ALPHA:
        return (f"{value} rises with σ over {row.name} (Page p = {f3(row.page_p_rising)}, {row.seeds_rho_positive} of "
                f"{row.n_blocks} seeds with ρ > 0)")
    if row.page_p_falling < ALPHA:
        return (f"{value} falls with σ over {row.name} (Page p = {f3(row.page_p_falling)}, {row.seeds_rho_negative} of "
                f"{row.n_blocks} seeds with ρ < 0)")
    return (f"{value} shows no detectable trend over {row.name} (Page p = {f3(row.page_p_rising)} for a rise, "
            f"{f3(row.page_p_falling)} for a fall)")


def band_words(band: Any) -> str:
    """Whether the per-seed drop holds: its interval above 0 and the one-sided Wilcoxon p below 0.05."""
    if band.ci_low > 0 and band.wilcoxon_p_greater < ALPHA:
        return "The drop holds with seeds as blocks."
    return "With seeds as blocks the drop is not established (interval reaching 0 or Wilcoxon p ≥ 0.05)."


def readme(tables: dict[str, pd.DataFrame], argv: list[str]) -> str:
    """The report: what was asked, how, and the tables; its reading sentences follow from the p-values."""
    band, trend = tables["lst_band_drop"].iloc[0], tables["lst_trends"]
    draw, place, masked = tables["lst_starting_draw"], tables["lst_placement"], tables["masked"]
    acc_trend = trend[trend.value == "held-out accuracy"].set_index("σ range")
    rsa_trend = trend[trend.value != "held-out accuracy"].set_index("σ range")
    parts = [
        "# The σ claims with seeds as blocks",
        "",
        f"Written by `python -m analyses.seed_blocked{' ' + ' '.join(argv) if argv else ''}` from the committed "
        "per-run tables of `reports/lst`, `reports/netsim*` and `reports/brain*` (no runs needed).",
        "",
        "Why: the trainer seeds torch once and then draws the PE table as `normal_(0, σ)`, so seed s starts every σ "
        "from the same draw Z_s scaled by σ, with the same other weights, batch order and masks. Runs that share a "
        "seed are therefore not independent across σ, while the sweep reports compare σ groups as if they were "
        "(Mann-Whitney over runs, Spearman ρ pooled over runs, unpaired intervals over seeds). Here each seed is a "
        "block: one difference per seed, Page's trend test over σ within seeds, and each seed's own ρ. Page's exact "
        "p does not adjust for ties within a seed (conservative).",
        "",
        "## LST: large σ hurts",
        "",
        f"Held-out accuracy averaged over σ ≤ {SMALL_BAND:g} minus that over σ ≥ {LARGE_BAND:g}, one difference per "
        f"seed with every σ of both bands: {f3(100 * band['mean'])} points [{f3(100 * band.ci_low)}, "
        f"{f3(100 * band.ci_high)}] (95% t-interval, {band.n_seeds} seeds), positive in {band.seeds_positive} of "
        f"{band.n_seeds}; one-sided Wilcoxon p = {f3(band.wilcoxon_p_greater)} (the smallest p this test can give "
        f"here is {f3(band.min_possible_p)}), t-test p = {f3(band.t_p)}. {band_words(band)}",
        "",
        markdown(tables["lst_band_drop"]),
        "",
        "By where the table sits (σ = 0.1 minus σ = 2, paired by seed; the input-only accuracies are read from "
        "`table_types_ident.csv`, which rounds them to 0.1 points):",
        "",
        markdown(place) if len(place) else "(no placement runs in the committed tables)",
        "",
        "## LST: accuracy and raw-table RSA over σ",
        "",
        "Page's L test (seeds with every σ of the range as blocks, σ ascending) for a rise and for a fall, the seeds "
        "whose own Spearman ρ(σ, value) is positive / negative, and, for comparison, the Spearman ρ pooled over runs "
        "that the sweep report uses. Accuracies are fractions.",
        "",
        markdown(trend),
        "",
    ]
    if len(acc_trend):
        parts += ["Reading: " + "; ".join(trend_words(r, "accuracy") for _, r in acc_trend.iterrows()) + ". No detectable "
                  "trend is not evidence of none with this many seeds.", ""]
    parts += [
        "## LST: the raw table at large σ and its starting draw",
        "",
        f"Pearson r across seeds between a seed's raw-table RSA at σ = {f3(draw.vs_sigma.iloc[0] if len(draw) else math.nan)} "
        "and at each smaller σ. Each seed starts every σ from the same Z_s scaled by σ; where training changes the "
        "table little compared with σ Z_s, the RSA is close to the RSA of Z_s, the same number at every large σ, and "
        "these correlations are high.",
        "",
        markdown(draw) if len(draw) else "(too few seeds)",
        "",
    ]
    if "0.1 ≤ σ ≤ 1.0" in rsa_trend.index:
        parts += [trend_words(rsa_trend.loc["0.1 ≤ σ ≤ 1.0"], "The raw-table RSA")[0].upper()
                  + trend_words(rsa_trend.loc["0.1 ≤ σ ≤ 1.0"], "The raw-table RSA")[1:]
                  + ". High correlations above mean that part of a fall with σ can be the learned change diluted by a "
                  "starting table that grows with σ rather than a different learned geometry; separating the two needs "
                  "the learned change (the final table minus σ Z_s), which the committed tables do not hold.", ""]
    n_lst = int(band.n_seeds)
    masked_seeds = sorted(set(masked.n_seeds)) if len(masked) else []
    parts += [
        "## LST: does geometry track generalisation within σ?",
        "",
        "Spearman ρ of each measure with held-out accuracy, pooled over runs (mixes σ groups) and within σ (both "
        "centred on their σ group's mean). A pooled ρ can come from σ alone; within-σ p values treat runs of one seed "
        "as independent (optimistic), and the σ ≤ 1.0 rows are a subset chosen after seeing the all-σ ones.",
        "",
        markdown(tables["lst_within_sigma"]),
        "",
        "## netsim and brain: σ = 0.1 vs σ = 2, paired by seed",
        "",
        "Difference σ = 0.1 minus σ = 2 per seed (lower is better in every row, so a negative difference favours small "
        "σ), its mean with a 95% t-interval over seeds, and the two-sided paired t-test. The reports' verdicts compare "
        "two unpaired intervals, a conservative and non-standard test; the training-fit row says how much of a "
        "held-out difference the training fit already has, and the 'minus train' rows are the generalisation gaps.",
        "",
        markdown(masked) if len(masked) else "(no netsim or brain reports found)",
        "",
        f"Caveats: seeds are few ({n_lst} in the LST band comparison"
        + (f", {'-'.join(map(str, (masked_seeds[0], masked_seeds[-1]))) if len(masked_seeds) > 1 else masked_seeds[0]} "
           "in netsim and brain" if masked_seeds else "")
        + "); a p-value just below 0.05 with 4 seeds is fragile. brain's held-out data are 2 subjects, so its "
        "intervals cover seeds only.",
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m analyses.seed_blocked", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reports", type=Path, default=ROOT / "reports", help="the committed reports folder (default: reports/)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: REPORTS/seed-blocked)")
    p.add_argument("--force", action="store_true", help="replace an --out folder not written by pe-probe")
    args = p.parse_args(argv)
    from pe_probe.output import check_out_dir, staged_dir

    out = args.out or args.reports / "seed-blocked"
    try:
        check_out_dir(out, args.force, inputs=[args.reports / name for name in ("lst", *MASKED_REPORTS)],
                      kind="seed-blocked")
        tables = lst_tables(args.reports / "lst")
        masked = [masked_table(args.reports / name, kind) for name, kind in MASKED_REPORTS.items()
                  if (args.reports / name / "runs.csv").is_file()]
    except InputError as e:
        p.error(first_line(e))
    tables["masked"] = pd.concat(masked, ignore_index=True) if masked else pd.DataFrame()
    shown = list(sys.argv[1:] if argv is None else argv)
    with staged_dir(out, force=args.force, kind="seed-blocked") as stage:
        for name, df in tables.items():
            df.to_csv(stage / f"{name}.csv", index=False)
        (stage / "README.md").write_text(readme(tables, shown))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.seed_blocked")
