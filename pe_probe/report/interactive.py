"""The interactive page: one self-contained HTML file (plotly.js embedded) that opens offline.

Left: the recovered layout (2-D scatter, or 3-D when the ground truth is 3-D) with hover showing the
position index and its true coordinates, buttons to switch recovery method and a menu to colour by
each true axis or by index. Right: the PE RDM; hovering a point highlights its row and column.

Size is bounded for large N: above `BLOCK_ABOVE` positions the heatmap is block-averaged to at most
`INTERACTIVE_RDM_MAX_CELLS` cells a side (the page says so), arrays are stored as float32 binary
(plotly's base64 typed arrays) and menu arrays are rounded to 4 significant digits. True coordinates
are stored once and copied into the hover data by the page's script.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from pe_probe.report import frames as fr
from pe_probe.report.readings import sig3
from pe_probe.result import AnalysisResult

BLOCK_ABOVE = 400
INTERACTIVE_RDM_MAX_CELLS = 128
PLOT_ID = "pe-probe-plot"

# Runs before plotly.js: records uncaught errors and console.error calls on <html data-console-errors>.
_ERROR_HOOK = """<script>
(function(){
  var root = document.documentElement; root.setAttribute('data-console-errors', '0');
  window.__peErrors = [];
  function note(msg){ window.__peErrors.push(String(msg)); root.setAttribute('data-console-errors', String(window.__peErrors.length));
                      root.setAttribute('data-last-error', String(msg).slice(0, 300)); }
  window.addEventListener('error', function(e){ note(e.message || e); });
  window.addEventListener('unhandledrejection', function(e){ note(e.reason); });
  var orig = console.error; console.error = function(){ note(Array.prototype.slice.call(arguments).join(' ')); return orig.apply(console, arguments); };
})();
</script>"""

# Runs after Plotly.newPlot resolved: hover data, row/column highlight, rendered-point bookkeeping.
_POST_SCRIPT = r"""
var gd = document.getElementById('{plot_id}');
var CFG = __CFG__;
var root = document.documentElement;
// plotly decodes its binary arrays into _fullData; gd.data may still hold the encoded form.
var trueTrace = gd._fullData.filter(function(t){ return t.index === CFG.trueTrace; })[0] || gd.data[CFG.trueTrace];
var cd = new Array(CFG.n);
for (var i = 0; i < CFG.n; i++) {
  var row = [i];
  for (var a = 0; a < CFG.trueAxes.length; a++) { row.push(Number(trueTrace[CFG.trueAxes[a]][i]).toPrecision(4)); }
  cd[i] = row;
}
var cds = CFG.methodTraces.map(function(){ return cd; });
Plotly.restyle(gd, {customdata: cds}, CFG.methodTraces);
Plotly.restyle(gd, {customdata: [cd]}, [CFG.trueTrace]);
function band(c, axis){
  var lo = c - 0.5, hi = c + 0.5;
  var s = {type: 'rect', xref: 'x2', yref: 'y2', line: {color: '#D55E00', width: 1.5}, fillcolor: 'rgba(0,0,0,0)'};
  if (axis === 'row') { s.x0 = -0.5; s.x1 = CFG.cells - 0.5; s.y0 = lo; s.y1 = hi; }
  else { s.y0 = -0.5; s.y1 = CFG.cells - 0.5; s.x0 = lo; s.x1 = hi; }
  return s;
}
function onHover(ev){
  var p = ev.points[0];
  if (p.curveNumber !== CFG.trueTrace && CFG.methodTraces.indexOf(p.curveNumber) < 0) return;
  var c = CFG.cellOf[p.pointNumber];
  Plotly.relayout(gd, {shapes: [band(c, 'row'), band(c, 'col')]});
  root.setAttribute('data-highlighted-cell', String(c));
}
gd.on('plotly_hover', onHover);
gd.on('plotly_unhover', function(){ Plotly.relayout(gd, {shapes: []}); root.removeAttribute('data-highlighted-cell'); });
function countPoints(){
  var shown = 0, total = 0;
  if (CFG.webgl) {
    gd._fullData.forEach(function(t){ if (t.visible === true && CFG.methodTraces.indexOf(t.index) >= 0) shown += t._length || (t.x ? t.x.length : 0); });
    total = shown;
  } else {
    var groups = gd.querySelectorAll('.scatterlayer .trace');
    groups.forEach(function(g){
      var n = g.querySelectorAll('path.point').length; total += n;
      var d = g.__data__ && g.__data__[0] && g.__data__[0].trace;
      if (d && CFG.methodTraces.indexOf(d.index) >= 0) shown += n;
    });
  }
  root.setAttribute('data-rendered-points', String(shown));
  root.setAttribute('data-rendered-total', String(total));
  root.setAttribute('data-heatmap-images', String(gd.querySelectorAll('.heatmaplayer image').length));
  root.setAttribute('data-plot-status', 'rendered');
}
gd.on('plotly_afterplot', countPoints);
countPoints();
// '#selftest=I' in the URL hovers position I of the shown method, so a headless browser can check the linking.
var m = /selftest=(\d+)/.exec(window.location.hash);
if (m) {
  var pt = {curveNumber: CFG.methodTraces[0], pointNumber: Number(m[1])};
  if (!CFG.webgl) Plotly.Fx.hover(gd, [pt], 'xy');  // shows the label; manual hovers emit no event, so:
  gd.emit('plotly_hover', {points: [pt]});
}
"""


def _sig4(values) -> list:
    """Round to 4 significant digits for the JSON menus (keeps N=4096 pages small)."""
    arr = np.asarray(values, dtype=np.float64)
    return [float(f"{v:.4g}") for v in arr.tolist()]


def interactive_figure(result: AnalysisResult):
    """Build the plotly figure and the configuration its page script needs; returns ``(fig, cfg, note)``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n = result.n_positions
    coords = np.asarray(result.coords, dtype=np.float64)
    k = coords.shape[1]
    three_d = k >= 3
    grid_view = k == 2 and result.gt_kind == "grid"  # (row, col): axis 1 across, axis 0 down, like the image
    methods = list(result.embeddings)
    left = {"type": "scene"} if three_d else {"type": "xy"}
    fig = make_subplots(rows=1, cols=2, specs=[[left, {"type": "xy"}]], column_widths=[0.55, 0.45],
                        horizontal_spacing=0.12,
                        subplot_titles=("recovered layout (aligned to the true one)", f"PE distance ({result.pe_metric})"))

    def xyz(points: np.ndarray) -> dict:
        pts = points.astype(np.float32)
        if three_d:
            return {"x": pts[:, 0], "y": pts[:, 1], "z": pts[:, 2]}
        if k == 1:  # 1-D: recovered position against true position (the diagonal is perfect recovery)
            return {"x": coords[:, 0].astype(np.float32), "y": pts[:, 0]}
        if grid_view:
            return {"x": pts[:, 1], "y": pts[:, 0]}
        return {"x": pts[:, 0], "y": pts[:, 1]}  # coordinates from a file: axis 0 across, axis 1 up

    scatter = go.Scatter3d if three_d else go.Scatter
    axis_names = [f"true axis {a}" for a in range(k)]
    hover_true = ", ".join(f"%{{customdata[{a + 1}]}}" for a in range(k))
    fig.add_trace(scatter(**xyz(coords), mode="markers", name="true position",
                          marker={"size": 3 if three_d else 5, "color": "rgba(150,150,150,0.6)"},
                          hovertemplate=f"position %{{customdata[0]}}<br>true ({hover_true})<extra>true</extra>"),
                  row=1, col=1)
    size = 2 if n > 1000 else (4 if n > 200 else 7)
    index_colour = np.arange(n, dtype=np.int32)
    for i, m in enumerate(methods):
        emb = np.asarray(result.embeddings[m], dtype=np.float64)
        r2 = result.metrics.get(f"recovery_{m}_r2")
        label = f"{m} (r² = {sig3(r2)})" if r2 is not None and np.isfinite(r2) else m
        marker = {"size": size if not three_d else max(2, size - 2), "color": index_colour, "colorscale": "Viridis",
                  "showscale": True, "colorbar": {"title": {"text": "index"}, "x": 0.5, "len": 0.8, "thickness": 12}}
        fig.add_trace(scatter(**xyz(emb), mode="markers", name=label, visible=(i == 0), marker=marker,
                              hovertemplate=f"position %{{customdata[0]}}<br>true ({hover_true})<extra>{m}</extra>"),
                      row=1, col=1)

    blocked = n > BLOCK_ABOVE
    order = fr.shared_order(coords)
    edges = fr.block_edges(n, INTERACTIVE_RDM_MAX_CELLS if blocked else n)
    cells = len(edges) - 1
    z = fr.block_average(result.pe_distances, order, edges).astype(np.float32)
    if blocked:
        labels = [f"{edges[c]}-{edges[c + 1] - 1}" for c in range(cells)]
    else:
        labels = [str(int(p)) for p in order]
    fig.add_trace(go.Heatmap(z=z, x=labels, y=labels, colorscale="Cividis", name="PE RDM",
                             colorbar={"title": {"text": "distance"}, "x": 1.02, "len": 0.8, "thickness": 12},
                             hovertemplate="row %{y}<br>col %{x}<br>distance %{z:.4g}<extra></extra>"),
                  row=1, col=2)
    method_traces = list(range(1, 1 + len(methods)))
    heat_trace = 1 + len(methods)

    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    cell_of = (np.searchsorted(edges, rank, side="right") - 1).astype(int).tolist()

    buttons = [dict(label=m, method="restyle",
                    args=[{"visible": [j == i for j in range(len(methods))]}, method_traces])
               for i, m in enumerate(methods)]
    colour_options = [("index", list(range(n)))] + [(axis_names[a], _sig4(coords[:, a])) for a in range(k)]
    colour_buttons = [dict(label=f"colour: {name}", method="restyle",
                           args=[{"marker.color": [values], "marker.colorbar.title.text": name}, method_traces])
                      for name, values in colour_options]
    menus = [dict(type="buttons", direction="right", buttons=buttons, x=0.0, y=1.16, xanchor="left", yanchor="top",
                  showactive=True, pad={"r": 4, "t": 0})]
    if colour_buttons:
        menus.append(dict(type="dropdown", buttons=colour_buttons, x=0.55, y=1.16, xanchor="right", yanchor="top",
                          showactive=True))
    fig.update_layout(template="none", height=560, margin={"l": 60, "r": 40, "t": 110, "b": 60},
                      updatemenus=menus, legend={"orientation": "h", "y": -0.2, "x": 0},
                      hoverlabel={"namelength": -1}, font={"family": "Arial, sans-serif", "size": 12})
    fig.update_xaxes(type="category", row=1, col=2, showticklabels=cells <= 64, title_text="position (sorted by true coordinates)")
    fig.update_yaxes(type="category", row=1, col=2, autorange="reversed", showticklabels=cells <= 64,
                     title_text="position (sorted by true coordinates)")
    if three_d:
        fig.update_scenes(xaxis_title="true axis 0", yaxis_title="true axis 1", zaxis_title="true axis 2", aspectmode="data",
                          camera={"eye": {"x": 1.6, "y": 1.6, "z": 1.1}})  # plotly's 1.25 clipped the axis titles
    elif k == 1:
        fig.update_xaxes(title_text="true position", row=1, col=1)
        fig.update_yaxes(title_text="recovered position (true units)", row=1, col=1)
    elif grid_view:
        fig.update_xaxes(title_text="true axis 1", row=1, col=1)
        fig.update_yaxes(title_text="true axis 0", autorange="reversed", scaleanchor="x", scaleratio=1, row=1, col=1)
    else:
        fig.update_xaxes(title_text="true axis 0", row=1, col=1)
        fig.update_yaxes(title_text="true axis 1", scaleanchor="x", scaleratio=1, row=1, col=1)

    cfg = {"n": n, "trueTrace": 0, "methodTraces": method_traces, "heatTrace": heat_trace, "cells": cells,
           "cellOf": cell_of, "webgl": three_d,
           "trueAxes": ["x", "y", "z"] if three_d else (["x"] if k == 1 else ["y", "x"] if grid_view else ["x", "y"])}
    if k > 3:
        cfg["trueAxes"] = ["x", "y", "z"]  # only the first three axes are drawn
    note = ""
    if blocked:
        size_b = int(np.ceil(n / cells))
        note = (f"The heatmap is block-averaged: {n} positions in {cells} blocks of about {size_b} consecutive "
                f"positions (sorted by true coordinates); each cell is the mean distance over a block pair.")
    return fig, cfg, note


def write_interactive(result: AnalysisResult, path: Path, title: str = "pe-probe: interactive view", *,
                      plotlyjs: bool | str = True) -> Path:
    """Write the interactive page to ``path`` and return it.

    ``plotlyjs=True`` embeds plotly.js (self-contained, the default for reports); a relative path such
    as ``"../plotly.min.js"`` links a shared local copy instead (used for committed examples).
    """
    fig, cfg, note = interactive_figure(result)
    post = _POST_SCRIPT.replace("__CFG__", json.dumps(cfg, separators=(",", ":")))
    div = fig.to_html(full_html=False, include_plotlyjs=plotlyjs, div_id=PLOT_ID, post_script=post,
                      config={"responsive": True, "displaylogo": False})
    metrics = result.metrics
    summary = []
    if "rsa_spearman" in metrics:
        summary.append(f"RSA (Spearman) = {sig3(metrics['rsa_spearman'])}")
    for m in result.embeddings:
        if f"recovery_{m}_r2" in metrics:
            summary.append(f"{m} r² = {sig3(metrics[f'recovery_{m}_r2'])}")
    page = f"""<!DOCTYPE html>
<html lang="en" data-plot-status="loading" data-n-positions="{result.n_positions}">
<head><meta charset="utf-8"><title>{html.escape(title)}</title>
{_ERROR_HOOK}
<style>body{{font-family:Arial,Helvetica,sans-serif;margin:1em 2em;color:#222}} p.note{{color:#555;font-size:0.9em}}</style>
</head>
<body>
<h1 style="font-size:1.3em">{html.escape(title)}</h1>
<p>{result.n_positions} positions, ground truth <code>{html.escape(str(result.gt_spec))}</code>; {html.escape("; ".join(summary))}.
Hover a point to see its index and true coordinates and to highlight its row and column in the distance matrix.</p>
{f'<p class="note" id="block-note">{html.escape(note)}</p>' if note else ''}
{div}
<p class="note">Recovered layouts are aligned onto the true layout by Procrustes (translation, rotation/reflection, scale), so axes are in true units.</p>
</body></html>
"""
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path
