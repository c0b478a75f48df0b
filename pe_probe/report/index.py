"""The report's front page, ``index.html``: headline metrics read in plain language, figures, links.

Links are relative so the folder can be moved, zipped or served as is. The data files
(metrics.json, metrics.csv, embedding.csv) are written by `pe_probe.api.write_analysis`; this page
only links to them.
"""

from __future__ import annotations

import html
import json
import math
import numbers
from pathlib import Path
from typing import Sequence

from pe_probe.report.readings import readings, verdict
from pe_probe.result import AnalysisResult

CSS = """body{font-family:Arial,Helvetica,sans-serif;max-width:60em;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:0.5em 0}td,th{border-bottom:1px solid #ddd;padding:0.3em 0.6em;vertical-align:top;text-align:left}
td.v{white-space:nowrap;font-variant-numeric:tabular-nums}figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:0.9em;color:#444}p.verdict{font-size:1.1em;background:#f4f7fb;padding:0.6em;border-left:4px solid #0072B2}
code{background:#f5f5f5;padding:0 0.2em}"""

FIGURE_CAPTIONS = {
    "rdm": "Distance matrices (RDMs) of the PE table and of the true positions, in the same position order. "
           "Similar block structure means the PE distances follow the true geometry.",
    "shepard": "Shepard plot: PE distance against true distance for pairs of positions. A rising band means "
               "nearby positions have nearby encodings; RSA is its rank correlation.",
    "layout": "Recovered layout (colour = position index) aligned onto the true layout (grey); each line joins a "
              "recovered position to its true position. Short lines mean good recovery.",
    "spectrum": "Variance of the PE table per principal component; the dashed line marks the participation ratio "
                "(effective number of dimensions).",
    "pc_grid": "Top principal components of the PE table drawn on the true grid. Smooth gradients along rows or "
               "columns show that the main directions of the table encode grid axes.",
}

DATA_LINKS = (
    ("metrics.json", "all metrics and provenance (JSON)"),
    ("metrics.csv", "metrics, one row each (tidy CSV)"),
    ("embedding.csv", "per position: true and recovered coordinates (CSV)"),
    ("interactive.html", "interactive view (opens offline)"),
)


VIEW_WORDS = {
    "q": "the table as the first attention layer's queries see it (W_Q applied after the token embedding and layer "
         "norm): each row is a position's query",
    "k": "the table as the first attention layer's keys see it (W_K applied after the token embedding and layer "
         "norm): each row is a position's key",
    "qk": "the table as the first attention layer's queries and keys see it: each row is a position's query and key",
    "kernel": "the positional attention kernel softmax(QKᵀ/√d) averaged over heads: each row is a position's attention "
              "profile over the positions",
    "attention": "the model's attention maps on task puzzles, averaged over puzzles: each row is a position's attention "
                 "profile",
}


def _view_line(provenance: dict) -> str:
    """What was analysed in place of the raw table, for ``--view``: the page's 'PE table' is that matrix."""
    info = provenance.get("view")
    name = info.get("view") if isinstance(info, dict) else None
    if name not in VIEW_WORDS:
        return ""
    return (f"<p>View <code>{html.escape(name)}</code>: {html.escape(VIEW_WORDS[name])}. This page's "
            f"&ldquo;PE table&rdquo; and &ldquo;PE distance&rdquo; refer to that matrix.</p>\n")


def _source_line(provenance: dict) -> str:
    parts = []
    for key in ("source", "param", "parameter", "layer", "ground_truth", "gt_spec", "step", "seed"):
        v = provenance.get(key)
        if v is not None and not isinstance(v, (dict, list)):
            parts.append(f"{key}: <code>{html.escape(str(v))}</code>")
    return "; ".join(parts)


def _notes(provenance: dict) -> str:
    """The analysis's notes (a rough bootstrap CI, a dropped CLS row ...) as a list under the verdict, as the
    terminal summary shows them."""
    notes = [str(n) for n in provenance.get("notes") or []]
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"\n<p>Notes on this analysis:</p><ul class=\"notes\">{items}</ul>"


def _embedded_json(metrics: dict) -> str:
    """The metrics as JSON a script can parse: null for missing values (as metrics.json), and no "</" that would
    end the script element (its text is not HTML-decoded, so it must not be HTML-escaped)."""
    clean = {k: (None if isinstance(v, numbers.Real) and not math.isfinite(v) else v) for k, v in metrics.items()}
    return json.dumps(clean, default=float, allow_nan=False).replace("</", "<\\/")


def write_index(result: AnalysisResult, out_dir: Path, figure_names: Sequence[str], *, image_format: str = "png",
                interactive: bool = True) -> Path:
    """Write ``out_dir/index.html`` for ``result``, showing ``figures/<name>.<image_format>`` for each name."""
    out_dir = Path(out_dir)
    rows = "\n".join(
        f"<tr><th>{html.escape(name)}</th><td class=v>{html.escape(value)}</td><td>{html.escape(text)}</td></tr>"
        for name, value, text in readings(result.metrics, result.provenance, list(result.embeddings))
    )
    figs = []
    for name in figure_names:
        img = f"figures/{name}.{image_format}"
        extra = [f'<a href="figures/{name}.csv">data (CSV)</a>']
        if (out_dir / "figures" / f"{name}.pdf").exists():
            extra.append(f'<a href="figures/{name}.pdf">PDF</a>')
        figs.append(f'<figure id="fig-{name}"><img src="{img}" alt="{name}"><figcaption>'
                    f'{html.escape(FIGURE_CAPTIONS.get(name, name))} ({" · ".join(extra)})</figcaption></figure>')
    links = "\n".join(f'<li><a href="{href}">{href}</a>: {html.escape(text)}</li>' for href, text in DATA_LINKS
                      if interactive or href != "interactive.html")
    n, k = result.n_positions, result.coords.shape[1]
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pe-probe report</title><style>{CSS}</style></head>
<body>
<h1>pe-probe report</h1>
<p>Did this positional-encoding table recover the true geometry of its {n} positions
(ground truth <code>{html.escape(str(result.gt_spec))}</code>, {k}-D; PE distance: {html.escape(result.pe_metric)};
table {n} x {result.table.shape[1]})? {_source_line(result.provenance)}</p>
{_view_line(result.provenance)}<p class="verdict">{html.escape(verdict(result.metrics, result.provenance))}</p>{_notes(result.provenance)}
<h2>Headline metrics</h2>
<table><tr><th>metric</th><th>value</th><th>what it means</th></tr>
{rows}
</table>
<h2>Files</h2>
<ul>
{links}
</ul>
<h2>Figures</h2>
{''.join(figs)}
<script type="application/json" id="pe-probe-metrics">{_embedded_json(result.metrics)}</script>
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
