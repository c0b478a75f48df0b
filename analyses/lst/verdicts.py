"""The LST report's verdicts on the study's claims, and the answer to "later in training, or in what the model reads?".

Each label is decided by one of the rules below, with the thresholds set here; `criteria_text` states them in
the report, so the rules and their description change together.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from analyses.lst.code_paths import MIXED, pair_paths
from analyses.lst.selection import TRAJ_VIEWS, VIEWS, ood_by_seed, sigma_runs, view_rows
from analyses.lst.study import CHANCE, STUDY, STUDY_RHO, study_pct
from analyses.lst.summary_stats import f3, fp, mean_ci, paired_ci, pct, rsa_change, sg, spearman

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


def uncorrected_note(p: float, n_views: int) -> str:
    """A caveat for a 'decreases with σ' decided at p < 0.05 that a Bonferroni correction over the ``n_views`` geometry
    views would not keep (the rule itself stays the fixed, per-view one)."""
    if n_views < 2 or not np.isfinite(p) or p * n_views < ALPHA:
        return ""
    return (f"; that p is not corrected for the {n_views} geometry views, and a Bonferroni correction would not keep "
            f"it (p × {n_views} ≥ {ALPHA:g})")


def geometry_state(d: pd.DataFrame) -> dict[str, Any]:
    """The three-level geometry rule on one view's last-checkpoint rows over the σ grid: 'present' (σ <= 0.2: mean
    RSA > 0.3 and Mantel p < 0.05 in at least half of the runs), else 'weak, but it decreases with σ' (ρ(σ, RSA) < 0,
    p < 0.05 over all σ), else 'not supported'; 'borderline' when the Mantel share qualifies and the mean RSA is
    within 0.01 of 0.3, or its 95% t-interval over seeds (each seed's σ ≤ 0.2 runs averaged) contains 0.3."""
    s_, l_ = d[d.sigma <= SMALL], d[d.sigma >= LARGE]
    mean = float(s_.rsa_spearman.mean()) if len(s_) else math.nan
    share = float((s_.rsa_p < ALPHA).mean()) if len(s_) else math.nan
    rho, p, n = spearman(d.sigma.astype(float), d.rsa_spearman)
    present = bool(len(s_)) and mean > RSA_MIN and share >= MANTEL_SHARE
    decreasing = np.isfinite(rho) and rho < 0 and _ok(p)
    state = "present" if present else ("weak, but it decreases with σ" if decreasing else "not supported")
    if not present and not np.isfinite(p):  # no ρ over the grid (fewer than 3 runs, or one σ): nothing to decide
        state = "not testable with these runs (no σ ≤ 0.2 run meets the bar, and no ρ(σ, RSA) over fewer than 3 runs or one σ)"
    # the band's mean with a 95% t-interval over seeds (each seed's σ ≤ 0.2 runs averaged first: runs of one seed
    # share its starting draw); a bar inside that interval is crossed or missed by sampling noise
    seeds = s_.groupby("seed").rsa_spearman.mean() if "seed" in s_ and len(s_) else pd.Series(dtype=float)
    _, lo, hi, n_seeds = mean_ci(seeds.to_numpy(float))
    if np.isfinite(mean) and share >= MANTEL_SHARE and abs(mean - RSA_MIN) < BORDER:
        state += f" (borderline: mean RSA {mean:.3f} is within {BORDER:g} of {RSA_MIN:g})"
    elif np.isfinite(mean) and share >= MANTEL_SHARE and n_seeds >= 2 and lo <= RSA_MIN <= hi:
        state += (f" (borderline: the 95% interval of the mean RSA over {n_seeds} seeds, [{lo:.3f}, {hi:.3f}], "
                  f"contains {RSA_MIN:g})")
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


def wd_state(c: dict[str, Any], implied_gain: float, at_chance: bool = False) -> str:
    """Weight decay vs none, seed-paired: 'supported' when the difference is positive with paired t p < 0.05 over at
    least 3 seeds; else 'not informative' when ``at_chance`` (neither arm's held-out accuracy is above chance by its
    95% t-interval: no arm learned the task, so a gain cannot show), 'not detected (CI ...)' when the 95% t-CI
    includes the study's implied gain, 'not reproduced' when it excludes it; 'descriptive only' with fewer than 2
    seeds."""
    if c["n"] < 2 or not np.isfinite(c["ci_low"]):
        return "descriptive only"
    ci = f"95% CI [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] points"
    if c["n"] >= 3 and c["diff"] > 0 and _ok(c["t_p"]):
        return "supported" + (f", but by less than the study's implied gain ({ci})" if c["ci_high"] < implied_gain else "")
    if at_chance:
        return f"not informative ({ci}; neither arm's held-out accuracy is above chance)"
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
    # `paired_ci` runs no t-test on differences that are all equal (no variance): say so rather than a bare n/a
    t = ("paired t p = n/a (every seed's difference is the same: no variance to test)"
         if c["n"] >= 2 and np.isfinite(c["diff"]) and not np.isfinite(c["t_p"]) else f"paired t p = {fp(c['t_p'])}")
    return (f"over the {c['n']} seed(s) both have ({seeds}): {la} {100 * c['mean_a']:.1f}% vs {lb} {100 * c['mean_b']:.1f}%; "
            f"paired difference {100 * c['diff']:+.1f} points{ci}, {t}")


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
    small_label, trend = small_sigma_trend(sr)
    # "throughout" is contradicted by a significant rise over small σ, whatever the whole grid's ρ says (a grid
    # whose large σ fail drives that ρ negative on its own: the large-σ claim above, not this one)
    mono_state = ("supported" if mono and small_label != "rises with σ" else
                  f"not supported: accuracy falls with σ over the whole grid but rises with σ over σ ≤ {TREND_CUT:g}"
                  if mono else "not supported") if np.isfinite(p) else \
        "not testable with these runs (fewer than 3 runs, or one σ)"
    out.append(f"**Smaller σ is better across the whole range: {mono_state}.** "
               f"Spearman ρ(σ, held-out accuracy) = {f3(rho)} (p = {fp(p)}, n = {n} runs); {trend}.")
    geo = (("raw", "mean", "Small-σ learned tables mirror the true grid (raw table, mean of layers)"),
           ("q", "0", "Grid geometry in the q view of the table, layer 0"),
           ("k", "0", "Grid geometry in the k view of the table, layer 0"),
           ("qk", "0", "Grid geometry in the qk view of the table, layer 0"),
           ("kernel", "mean", "Grid geometry in the attention kernel of the table"),
           ("attention", "mean", "Grid geometry in the attention maps on task data"))
    shown = [(view, layer, head, view_rows(ana_sigma, view, layer)) for view, layer, head in geo]
    shown = [(view, head, d) for view, layer, head, d in shown if not (d.empty or d.rsa_spearman.isna().all())]
    for view, head, d in shown:
        g = geometry_state(d)
        extra = (f"; cMDS recovery r² {f3(d[d.sigma <= SMALL].recovery_cmds_r2.mean())} for σ ≤ 0.2"
                 if view == "raw" else "")
        if g["state"].startswith("weak, but it decreases"):
            extra += uncorrected_note(g["p"], len(shown))
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
    sin = ood_by_seed(runs, group="pe_type", pe="sin2d")
    if len(sin):
        best_sig = float(per.idxmax())
        c = paired_ci(sin, ood_by_seed(sr, sigma=best_sig))
        mixed = pair_paths(runs, paths, dict(group="pe_type", pe="sin2d"), dict(group="sigma", sigma=best_sig),
                           names=("2D sinusoid", f"σ = {best_sig:g}"))
        out.append(f"**The 2D sinusoid generalizes best (study: 97.7%): {best_state(c)}.** Against the σ of the grid with "
                   f"the highest mean (σ = {best_sig:g}), "
                   + _paired_line(c, "2D sinusoid", f"σ = {best_sig:g}") + "."
                   + f" That σ is chosen for its highest mean among {len(per)}, which selection inflates, so this "
                   "comparison leans against the sinusoid."
                   + (f" These pairs mix the two CPU attention code paths ({mixed}; {MIXED})." if mixed else ""))
    for sig, key in ((0.1, "learned s=0.1"), (2.0, "learned s=2")):
        wd, plain = ood_by_seed(runs, group="control", control="wd0.1", sigma=sig), ood_by_seed(runs, group="sigma", sigma=sig)
        if not (len(wd) and len(plain)):
            continue
        c = paired_ci(wd, plain)
        at_chance = all(mean_ci(arm)[1] <= CHANCE for arm in (wd, plain))  # no interval above chance (NaN: not known)
        implied = STUDY["weight decay"] - STUDY[key]
        mixed = pair_paths(runs, paths, dict(group="control", control="wd0.1", sigma=sig), dict(group="sigma", sigma=sig),
                           names=("with weight decay", "without"))
        out.append(f"**Weight decay helps learned PEs (study: about 99%), σ = {sg(sig)}: {wd_state(c, implied, at_chance)}.** "
                   + _cap(_paired_line(c, "AdamW weight decay 0.1", "without"))
                   + f". The study's implied gain: {study_pct('weight decay')}% with weight decay (its σ not given) minus "
                   f"{study_pct(key)}% without at σ = {sg(sig)} = ~{100 * implied:.1f} points; the study trained 4,000 epochs, "
                   f"these runs {int(sr.epochs.max())}."
                   + (f" These pairs mix the two CPU attention code paths ({mixed}; {MIXED})." if mixed else ""))
    sa, sb = dict(group="placement", sigma=2.0), dict(group="sigma", sigma=2.0)
    inp, every = ood_by_seed(runs, **sa), ood_by_seed(runs, **sb)
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


class ViewChange(NamedTuple):
    """One view's RSA change between two checkpoints: its view name, the phrase that states it, its label, and
    `rsa_change`'s result (diff, t_p, n)."""

    view: str
    text: str
    label: str
    change: dict[str, Any]


def _trajectory_conclusion(up: list[ViewChange], down: list[ViewChange], flat: list[ViewChange],
                           at_last: dict[str, float], first: int, last: int, n_views: int) -> str:
    """The sentence that sums up the per-view RSA changes: which views rise, which do not, and which rises survive a
    Bonferroni correction over the views."""
    span = f"from epoch {first} (the first checkpoint) to {last}"  # what trained before the first checkpoint is not seen
    if not up:
        return f"So no view gains grid geometry detectably {span}."

    def labels(entries: list[ViewChange]) -> str:
        names = [e.label for e in entries]  # the labels hold commas: "; " between them, "and" before the last
        return names[0] if len(names) == 1 else "; ".join(names[:-1]) + " and " + names[-1]

    text = f"So {span} RSA rises in the {labels(up)} (uncorrected p < {ALPHA:g})"
    if flat:
        text += f", not detectably in the {labels(flat)}"
    if down:
        text += f", and falls in the {labels(down)}"
    cut = ALPHA / max(n_views, 1)
    held = [e for e in up if e.change["t_p"] < cut]
    text += (f". With a Bonferroni correction for the {n_views} views (p < {cut:.2g}) "
             + (f"the rise holds in the {labels(held)}." if held else "no rise holds."))
    if any(e.view != "raw" for e in up):
        read_max = np.nanmax([v for k, v in at_last.items() if not k.startswith("raw")] or [math.nan])
        text += f" What the model reads stays modest in absolute terms (RSA at most {f3(read_max)} at epoch {last})."
    return text


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
        (up if _ok(ch["t_p"]) and ch["diff"] > 0 else down if _ok(ch["t_p"]) else flat).append(ViewChange(view, item, lab, ch))
        parts.append(f"{lab}: {f3(a0)} → {f3(a1)} (σ ≥ 1.5 at epoch {last}: {f3(l_.rsa_spearman.mean())})")
    text = (f"RSA with the grid for σ ≤ 0.2, epoch {first} → epoch {last} (mean over {n_small} runs): " + "; ".join(parts)
            + f". Per-run change from epoch {first} to {last} with a paired t-test (not corrected for the "
            f"{len(parts)} views): ")
    said = []
    if up:
        said.append("RSA rose for the " + ", ".join(e.text for e in up))
    if down:
        said.append("fell for the " + ", ".join(e.text for e in down))
    if flat:
        said.append("did not change detectably for the " + ", ".join(e.text for e in flat))
    text += "; ".join(said) + ". "
    text += _trajectory_conclusion(up, down, flat, at_last, first, last, len(parts))
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
    return ("Criteria (fixed in `analyses/lst/verdicts.py`): *large σ hurts* is supported when held-out accuracy for "
            f"σ ≤ {SMALL:g} exceeds that for σ ≥ {LARGE:g} by more than 10 points with a one-sided Mann-Whitney p < {ALPHA:g}; "
            f"*smaller is better throughout* when Spearman ρ(σ, accuracy) < 0 with p < {ALPHA:g} over the whole grid and "
            f"accuracy does not rise with σ over small σ, where the trend over small σ (σ ≤ {TREND_CUT:g}) is stated as "
            f"*rises with σ* / *falls with σ* when its Spearman ρ is positive / negative with p < {ALPHA:g}, *no clear "
            "trend* otherwise (the rise over small σ was added to this rule on 2026-12-03, after the 8-seed sweep's "
            "whole-grid ρ came out negative beside a significant rise over small σ); a geometry claim (per view, last "
            f"checkpoint) is *present* when the mean RSA for σ ≤ {SMALL:g} exceeds {RSA_MIN:g} and the Mantel test is "
            f"significant (p < {ALPHA:g}) in at least {100 * MANTEL_SHARE:.0f}% of those runs (*borderline* when that "
            f"share qualifies and the mean RSA is within {BORDER:g} of {RSA_MIN:g}, or its 95% t-interval over seeds, each seed's "
            f"σ ≤ {SMALL:g} runs averaged first, contains {RSA_MIN:g}), *weak, but it decreases with σ* when "
            f"it is not present but ρ(σ, RSA) < 0 with p < {ALPHA:g} over the whole grid, and *not supported* otherwise; "
            f"small-σ attention maps *resemble the 2D sinusoid's* only when their mean cosine similarity to it (σ ≤ "
            f"{SMALL:g}) exceeds that of the model without any PE (the floor of this measure); *the 2D sinusoid "
            f"generalizes best* is supported when its mean exceeds that of the best σ of the grid with a seed-paired t-test "
            f"p < {ALPHA:g}, *not supported* when it is below with p < {ALPHA:g}, *not distinguishable* when p ≥ {ALPHA:g}; "
            f"*weight decay helps* is supported when the seed-paired held-out difference is positive with a paired t-test "
            f"p < {ALPHA:g} over at least 3 seeds, otherwise *not detected* when the 95% t-CI of the paired difference "
            f"includes the study's implied gain (its ~99% with weight decay minus its accuracy without at that σ), and "
            f"*not reproduced* when the CI excludes it, and *not informative* when neither arm's held-out accuracy is above "
            f"chance by its 95% t-interval. Comparisons with one seed are descriptive only.\n")
