"""The comparison's front page: what was compared, the correlations in words, figures, links."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from pe_probe.report.compare_figures import generalization_key
from pe_probe.report.readings import ALPHA, _num, sig3

CSS = """body{font-family:Arial,Helvetica,sans-serif;max-width:62em;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:0.5em 0;font-size:0.9em}td,th{border-bottom:1px solid #ddd;padding:0.25em 0.5em;text-align:left}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:0.9em;color:#444}"""

CAPTIONS = {
    "metrics_vs": "Identifiability metrics against {by}: dots are single models, the line is the mean with a 95% "
                  "t-interval over models (seeds/repeats) at each value; its CSV holds those summaries, the single "
                  "models' values (the dots) and the titles' Spearman ρ are in compare.csv and correlations.csv.",
    "identifiability_vs_generalization": "Generalization against each identifiability metric, one dot per model; "
                                         "the title gives the Spearman rank correlation across models.",
    "metrics_over_steps": "Identifiability metrics at each saved training step.",
}


def _strength(rho: float) -> str:
    a = abs(rho)
    return "very strong" if a >= 0.8 else "strong" if a >= 0.6 else "moderate" if a >= 0.4 else "weak"


def _log_ties(values: np.ndarray) -> float:
    """log of the product of factorials of the sizes of the groups of tied values."""
    _, counts = np.unique(values, return_counts=True)
    return float(sum(math.lgamma(c + 1) for c in counts))


def smallest_exact_p(n: int, x=None, y=None) -> float:
    """The smallest two-sided p-value an exact permutation test of Spearman's ρ could give for ``n`` pairs.

    With the column values ``x`` and ``y`` (their finite pairs must number ``n``) and n up to
    `compare_figures.EXACT_SPEARMAN_N`: the exact p of the most extreme ordering, ties kept (with ties the null
    is not symmetric, so both extremes need not be reachable). Larger n with values: t/n!, t the larger of the
    products of the factorials of x's and y's tie-group sizes (at least t orderings reach the extreme that is
    reached). Without values, no ties: 2/n! (1/3 at n = 3, 1/12 at n = 4, 1/60 at n = 5)."""
    from pe_probe.report.compare_figures import EXACT_SPEARMAN_N

    if n < 2:
        return 1.0
    pairs = _finite_pairs(x, y, n)
    if pairs is None:
        return min(1.0, 2 / math.factorial(n)) if n <= 170 else 0.0
    xs, ys = pairs
    if n <= EXACT_SPEARMAN_N:
        if np.ptp(xs) == 0 or np.ptp(ys) == 0:
            return 1.0
        return _extreme_p(xs, ys)
    log_t = max(_log_ties(xs), _log_ties(ys))
    return min(1.0, math.exp(log_t - math.lgamma(n + 1)))


def _extreme_p(xs: np.ndarray, ys: np.ndarray) -> float:
    """The exact two-sided p of the most extreme Spearman ρ any pairing of these values reaches."""
    from pe_probe.report.compare_figures import exact_spearman_p
    from scipy.stats import spearmanr

    best = max(abs(spearmanr(np.sort(xs), np.sort(ys)).statistic), abs(spearmanr(np.sort(xs), -np.sort(-ys)).statistic))
    return exact_spearman_p(xs, ys, best)


def _finite_pairs(x, y, n: int):
    """``x`` and ``y`` as float arrays over their finite pairs, or None when not given or not ``n`` such pairs."""
    if x is None or y is None:
        return None
    try:
        xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    except (TypeError, ValueError):
        return None
    if xs.shape != ys.shape:
        return None
    ok = np.isfinite(xs) & np.isfinite(ys)
    return (xs[ok], ys[ok]) if int(ok.sum()) == n else None


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def correlation_sentence(row, x=None, y=None) -> str:
    """'rsa_spearman falls as noise rises (Spearman ρ = -0.98, p = 1e-06, n = 12): a very strong monotone relation.'

    Rises/falls and a strength word (`_strength`) only when p < `ALPHA` and an exact test could reach that at
    all (`smallest_exact_p`, given the column values ``x`` and ``y`` for their ties); ρ = 0 is "no monotone
    relation", p >= `ALPHA` "no clear monotone relation", too few points for p < `ALPHA` says so."""
    rho, p, n = _float(row["spearman_rho"]), _float(row["p_value"]), int(row["n"])
    if not math.isfinite(rho):
        why = f"only {n} point{'' if n == 1 else 's'} with both values" if n < 3 else "a constant column"
        return f"{row['y']} vs {row['x']}: no monotone relation can be measured (correlation undefined: {why})."
    p_ok = math.isfinite(p)
    stats = f"Spearman ρ = {_num(rho)}, p = {p:.2g}, n = {n}" if p_ok else f"Spearman ρ = {_num(rho)}, n = {n}"
    floor = smallest_exact_p(n, x, y)
    if rho == 0 and floor < ALPHA:
        return f"{row['y']} shows no monotone relation with {row['x']} ({stats})."
    if floor >= ALPHA:
        ties = " and these tied values" if floor > smallest_exact_p(n) * (1 + 1e-9) else ""
        return (f"{row['y']} vs {row['x']}: too few points to tell whether there is a monotone relation ({stats}; "
                f"with n = {n}{ties}, even a perfect ordering would have an exact two-sided p of at least "
                f"{floor:.2g}, not below {ALPHA:g}).")
    if not (p_ok and p < ALPHA):
        return (f"{row['y']} shows no clear monotone relation with {row['x']} ({stats}): not significant at the "
                f"{ALPHA:.0%} level.")
    direction = "rises" if rho > 0 else "falls"
    return (f"{row['y']} {direction} as {row['x']} rises ({stats}): a {_strength(rho)} monotone relation.")


def _column(frame, name):
    return frame[name].to_numpy() if name in frame.columns else None


EVAL_SPLITS = ("ood", "test", "train")  # the order the index's evaluation columns follow


def _eval_columns(frame, gen_key: str | None, limit: int = 3) -> list[str]:
    """Up to ``limit`` evaluation columns besides ``gen_key``: accuracies before errors and losses before the rest
    (a binary accuracy), each kind OOD, test, then training; file order among equals."""
    def rank(c) -> tuple[int, int]:
        name = str(c)[len("eval."):]
        split = next((i for i, s in enumerate(EVAL_SPLITS) if name.startswith(s)), len(EVAL_SPLITS))
        kind = 0 if name.endswith("_acc") else 1 if name.endswith(("_mse", "_loss")) else 2
        return kind, split

    return sorted((c for c in frame.columns if str(c).startswith("eval.") and c != gen_key), key=rank)[:limit]


def write_compare_index(out_dir: Path, frame, corr, figure_names: Sequence[str], *, by: str | None,
                        trajectory: bool, image_format: str = "png") -> Path:
    """Write ``out_dir/index.html`` of a comparison."""
    out_dir = Path(out_dir)
    shown = [c for c in ("label", "step", by, "rsa_spearman", "probe_r2") if c and c in frame.columns]
    shown += [c for c in frame.columns if str(c).startswith("recovery_") and str(c).endswith("_r2")]
    gen_key = generalization_key(frame)  # the generalization metric the figures and correlations use comes first
    shown += ([gen_key] if gen_key else []) + _eval_columns(frame, gen_key)
    shown = list(dict.fromkeys(shown))

    def cell(v, column) -> str:
        if isinstance(v, float) and not math.isfinite(v):
            return '<span title="blank: no value for this model">&mdash;</span>'
        if isinstance(v, float):  # metrics to three significant digits (as every page); a setting (σ 0.1) as given
            return f"{v:.3g}" if column in (by, "step") else sig3(v)
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown)
    body = "\n".join("<tr>" + "".join(f"<td>{cell(r[c], c)}</td>" for c in shown) + "</tr>"
                     for _, r in frame.head(200).iterrows())
    sentences = "\n".join(
        f"<li>{html.escape(correlation_sentence(r, _column(frame, r['x']), _column(frame, r['y'])))}</li>"
        for _, r in corr.iterrows())
    figs = []
    for name in figure_names:
        key = "metrics_vs" if name.startswith("metrics_vs_") else name
        cap = CAPTIONS.get(key, name).format(by=by or "source")
        pdf = f', <a href="figures/{name}.pdf">PDF</a>' if (out_dir / "figures" / f"{name}.pdf").exists() else ""
        figs.append(f'<figure id="fig-{name}"><img src="figures/{name}.{image_format}" alt="{name}"><figcaption>'
                    f'{html.escape(cap)} (<a href="figures/{name}.csv">data (CSV)</a>{pdf})</figcaption></figure>')
    links = ['<li><a href="compare.csv">compare.csv</a>: one row per model, every metric, config keys, eval.* metrics</li>',
             '<li><a href="correlations.csv">correlations.csv</a>: Spearman correlations shown below</li>']
    if trajectory:
        links.append('<li><a href="trajectory.html">trajectory.html</a>: recovered layout over training (slider)</li>')
        if (out_dir / "figures" / "trajectory_layouts.csv").exists():
            links.append('<li><a href="figures/trajectory_layouts.csv">trajectory_layouts.csv</a>: its aligned layouts, '
                         'step by step, at full precision</li>')
    what = "one training run, checkpoint by checkpoint" if trajectory else f"{len(frame)} models"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pe-probe comparison</title><style>{CSS}</style></head>
<body><h1>pe-probe comparison</h1>
<p>Identifiability of the positional encoding across {html.escape(what)}{f", grouped by <code>{html.escape(by)}</code>" if by else ""}.</p>
<h2>Relations</h2><ul>{sentences or "<li>No correlations could be computed (too few models or no numeric grouping key).</li>"}</ul>
<h2>Files</h2><ul>{"".join(links)}</ul>
<h2>Figures</h2>{"".join(figs)}
<h2>Models</h2><table><tr>{head}</tr>
{body}
</table>
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
