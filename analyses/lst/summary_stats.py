"""Seed-level statistics and number formats shared by the LST reports (`report`, `length`).

Means with 95% t intervals over seeds, seed-paired tests, Spearman correlations that return NaN rather than
fail on too little data, and the short formats the reports print numbers in.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import numpy.typing as npt
import pandas as pd


def mean_ci(x: Iterable[float | None]) -> tuple[float, float, float, int]:
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


def fmt_ci(x: Iterable[float | None], pct: bool = True, digits: int = 1) -> str:
    """'mean [low, high] (n=N)' of `mean_ci`; ``pct``: accuracies in %, their interval clipped to [0, 100]."""
    m, lo, hi, n = mean_ci(x)
    if n == 0:
        return "n/a"
    f = (lambda v: f"{100 * v:.{digits}f}") if pct else (lambda v: f"{v:.2f}")
    if n < 2:
        return f"{f(m)} (n=1)"
    if pct:  # accuracies: the t interval is clipped to [0, 1]
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return f"{f(m)} [{f(lo)}, {f(hi)}] (n={n})"


# Paired differences closer than this are equal. Accuracies are multiples of 1/108 (0.0093) stored as float32, whose
# rounding (up to ~6e-8 near 1) leaves equal differences up to ~1e-7 apart, and a t-test on such a sample returns
# p ~ 0 from catastrophic cancellation (three σ = 2.0 placement pairs, each 68/108 apart, gave p = 1.9e-16 under
# the earlier 1e-9). Any real difference between two accuracies is at least 1/1000 of a puzzle set's step.
TIED = 1e-6


def paired_test(a: pd.Series, b: pd.Series) -> dict[str, Any]:
    """Paired t-test and Wilcoxon signed-rank test over the seeds both series have."""
    from scipy import stats

    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    n = len(both)
    out = {"n": n, "mean_diff": float((both.a - both.b).mean()) if n else math.nan, "t_p": math.nan, "wilcoxon_p": math.nan}
    if n >= 2 and np.any(both.a.values != both.b.values):
        if np.ptp((both.a - both.b).values) > TIED:  # equal differences have no variance: no t-test (p ~ 0 means nothing)
            out["t_p"] = float(stats.ttest_rel(both.a, both.b).pvalue)
        try:  # on the differences with near-ties merged: float32 noise must not break ties (or zeros) into ranks
            out["wilcoxon_p"] = float(stats.wilcoxon(merge_near_ties((both.a - both.b).to_numpy(float))).pvalue)
        except ValueError:
            pass
    return out


def merge_near_ties(values: np.ndarray, tol: float = TIED) -> np.ndarray:
    """Paired differences for a signed-rank test, with those closer than ``tol`` to zero set to 0 and magnitudes
    within ``tol`` of each other (runs of sorted |values|) made equal, signs kept: equal differences stored through
    float32 differ by ~1e-7, and the rank test would otherwise order them (and +2 vs -2 puzzles) by that noise."""
    values = np.asarray(values, dtype=float)
    mag = np.where(np.abs(values) < tol, 0.0, np.abs(values))
    order = np.argsort(mag, kind="stable")
    sorted_ = mag[order]
    for i in range(1, len(sorted_)):
        if sorted_[i] - sorted_[i - 1] < tol:
            sorted_[i] = sorted_[i - 1]
    mag[order] = sorted_
    return np.sign(values) * mag


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


def spearman(x: npt.ArrayLike, y: npt.ArrayLike) -> tuple[float, float, int]:
    """Spearman (ρ, p, n) over the finite pairs; NaN ρ and p with fewer than 3 pairs or a constant side. p is
    exact for up to 8 pairs (`pe_probe.report.compare_figures.spearman`): scipy's t approximation gave 0.038 for
    the 6 runs of the longer-training report's epoch-40 trend."""
    from pe_probe.report.compare_figures import spearman as exact_at_small_n

    return exact_at_small_n(x, y)


def rsa_change(d: pd.DataFrame, first: int, last: int) -> dict[str, Any]:
    """Per-run RSA change from epoch ``first`` to ``last`` (runs having both), with a paired t-test."""
    piv = d.pivot_table(index="run", columns="epoch", values="rsa_spearman")
    if first not in piv or last not in piv:
        return paired_ci(pd.Series(dtype=float), pd.Series(dtype=float))
    return paired_ci(piv[last], piv[first])


def f3(v: float | None) -> str:
    """Three significant digits, or 'n/a'."""
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.3g}"


def pct(v: float | None) -> str:
    """A fraction in % with one decimal ('92.5%'), or 'n/a'."""
    return "n/a" if v is None or not np.isfinite(v) else f"{100 * v:.1f}%"


def fp(v: float | None) -> str:
    """A p value: two significant digits, scientific below 0.001, or 'n/a'."""
    return "n/a" if v is None or not np.isfinite(v) else (f"{v:.2g}" if v >= 0.001 else f"{v:.1e}")


def sg(v: float) -> str:
    """A σ value as the report writes it: 0.1, 2.0 (at least one decimal)."""
    t = f"{v:g}"
    return t if ("." in t or "e" in t) else f"{v:.1f}"
