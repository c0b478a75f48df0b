"""The trajectory page: the recovered layout at each saved training step, on a slider.

Frames are aligned to each other by chained Procrustes (step t's embedding is aligned onto step
t-1's aligned embedding; the first onto the ground truth), so the picture evolves smoothly instead
of flipping or rotating whenever an eigen-decomposition changes sign.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import numpy as np


def rotation_align(x: np.ndarray, target: np.ndarray, size: float) -> np.ndarray:
    """``x`` centred, scaled to RMS radius ``size``, rotated (reflection allowed) onto ``target``, moved to its mean."""
    x = np.asarray(x, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    xc = x - x.mean(0)
    tc = target - target.mean(0)
    norm = float(np.sqrt((xc**2).sum(1).mean()))
    xc = xc * (size / norm) if norm > 0 else xc
    u, _, vt = np.linalg.svd(xc.T @ tc)
    return xc @ (u @ vt) + target.mean(0)


def chain_align(embeddings: Sequence[np.ndarray], reference: np.ndarray) -> list[np.ndarray]:
    """Align frame 0 onto ``reference``, then each frame t onto the aligned frame t-1.

    Every frame is first scaled to the reference's RMS radius, so the chain neither shrinks (as a
    least-squares scale would for a poor early frame) nor drifts; only rotation, reflection and
    translation are fitted between consecutive frames.
    """
    reference = np.asarray(reference, dtype=np.float64)
    size = float(np.sqrt(((reference - reference.mean(0)) ** 2).sum(1).mean())) or 1.0
    out: list[np.ndarray] = []
    prev = reference
    for emb in embeddings:
        aligned = rotation_align(emb, prev, size)
        out.append(aligned)
        prev = aligned
    return out


def neighbour_edges(coords: np.ndarray, max_edges_per_point: int = 4) -> np.ndarray:
    """Pairs of positions at the smallest true distance (grid/line neighbours), (E, 2); empty if too many."""
    from scipy.spatial.distance import pdist

    from pe_probe.report.frames import condensed_to_pairs

    n = len(coords)
    if n < 2 or n > 5000:
        return np.zeros((0, 2), dtype=int)
    d = pdist(coords)
    positive = d[d > 0]
    if positive.size == 0:
        return np.zeros((0, 2), dtype=int)
    k = np.flatnonzero(np.isclose(d, positive.min()))
    if len(k) > max_edges_per_point * n:
        return np.zeros((0, 2), dtype=int)
    i, j = condensed_to_pairs(k, n)
    return np.column_stack([i, j])


def _r4(a) -> list:
    return [None if not np.isfinite(v) else float(f"{v:.4g}") for v in np.asarray(a, dtype=float).tolist()]


def _edge_xy(points: np.ndarray, edges: np.ndarray, axes: Sequence[int]) -> list[list]:
    out = []
    for a in axes:
        seg = np.full((len(edges), 3), np.nan)
        seg[:, 0] = points[edges[:, 0], a]
        seg[:, 1] = points[edges[:, 1], a]
        out.append(_r4(seg.ravel()))
    return out


# '#selftest-step=S' in the URL moves to step S with the slider's own arguments and records the title then on screen, so a
# headless browser can check that the title names the step whose layout is drawn.
_SELFTEST = """
(function(){
  var gd = document.getElementById('pe-probe-trajectory');
  var m = /selftest-step=(\\w+)/.exec(window.location.hash);
  if (!m || !window.Plotly) return;
  var step = gd.layout.sliders[0].steps.filter(function(st){ return st.label === m[1]; })[0];
  if (!step) return;
  Plotly.animate(gd, step.args[0], step.args[1]).then(function(){  // exactly what the slider does
      var t = gd.querySelector('.gtitle');
      document.documentElement.setAttribute('data-shown-title', t ? t.textContent : '');
    });
})();
"""


def _write_layouts(steps: Sequence[int], frames: Sequence[np.ndarray], coords: np.ndarray, path: Path) -> None:
    import pandas as pd

    n, k = coords.shape
    parts = []
    for step, f in zip(steps, frames):
        part = {"step": np.full(n, int(step)), "position": np.arange(n)}
        part.update({f"aligned_{a}": f[:, a] for a in range(k)})
        part.update({f"true_{a}": coords[:, a] for a in range(k)})
        parts.append(pd.DataFrame(part))
    pd.concat(parts, ignore_index=True).to_csv(path, index=False)


def write_trajectory(steps: Sequence[int], embeddings: Sequence[np.ndarray], coords: np.ndarray, path: Path, *,
                     method: str, titles: Sequence[str] | None = None, layouts_csv: Path | None = None) -> Path:
    """Write a self-contained page animating the chained-Procrustes-aligned layouts over ``steps``; with
    ``layouts_csv``, also those layouts at full precision (the page rounds them to 4 digits), one row per step
    and position: step, position, aligned_0..aligned_{k-1}, true_0..true_{k-1}."""
    import plotly.graph_objects as go

    coords = np.asarray(coords, dtype=np.float64)
    n, k = coords.shape
    frames_xyz = chain_align(embeddings, coords)
    if layouts_csv is not None:
        _write_layouts(steps, frames_xyz, coords, layouts_csv)
    three_d = k >= 3
    if k == 1:  # draw a line as recovered vs true position
        frames_xyz = [np.column_stack([coords[:, 0], f[:, 0]]) for f in frames_xyz]
        axes, labels = (0, 1), ("true position", "recovered position")
    elif three_d:
        axes, labels = (0, 1, 2), ("true axis 0", "true axis 1", "true axis 2")
    else:
        axes, labels = (1, 0), ("true axis 1", "true axis 0")
    edges = neighbour_edges(coords) if k > 1 else np.zeros((0, 2), dtype=int)
    names = ("x", "y", "z")
    titles = list(titles) if titles is not None else [f"step {s}" for s in steps]

    def traces(points: np.ndarray):
        pts = {names[i]: _r4(points[:, a]) for i, a in enumerate(axes)}
        edge = {names[i]: v for i, v in enumerate(_edge_xy(points, edges, axes))}
        if three_d:
            return [go.Scatter3d(mode="lines", line={"color": "rgba(120,120,120,0.5)", "width": 2}, hoverinfo="skip",
                                 name="true neighbours", **edge),
                    go.Scatter3d(mode="markers", marker={"size": 3}, name=method, **pts)]
        return [go.Scatter(mode="lines", line={"color": "rgba(120,120,120,0.5)", "width": 1}, hoverinfo="skip",
                           name="true neighbours", **edge),
                go.Scatter(mode="markers", marker={"size": 7}, name=method, **pts)]

    hover = "position %{customdata[0]}<br>true (" + ", ".join(f"%{{customdata[{a + 1}]}}" for a in range(k)) + ")<extra></extra>"
    first = traces(frames_xyz[0])
    first[1].update(customdata=np.column_stack([np.arange(n), coords]).round(4).tolist(), hovertemplate=hover,
                    marker={"color": list(range(n)), "colorscale": "Viridis", "showscale": True,
                            "colorbar": {"title": {"text": "index"}}})
    fig = go.Figure(data=first)
    fig.frames = [go.Frame(data=traces(f), name=str(s), traces=[0, 1], layout={"title": {"text": t}})
                  for s, f, t in zip(steps, frames_xyz, titles)]
    allpts = np.vstack(frames_xyz)
    ranges = []
    for a in axes:
        lo, hi = float(np.nanmin(allpts[:, a])), float(np.nanmax(allpts[:, a]))
        pad = 0.05 * (hi - lo or 1.0)
        ranges.append([lo - pad, hi + pad])
    redraw = True  # without a redraw plotly moves the points but leaves the previous frame's title on screen
    slider = {"active": 0, "currentvalue": {"prefix": "step "}, "pad": {"t": 40}, "x": 0.1, "len": 0.9,
              "steps": [{"label": str(s), "method": "animate",
                         "args": [[str(s)], {"mode": "immediate", "frame": {"duration": 0, "redraw": redraw},
                                              "transition": {"duration": 0}}]} for s in steps]}
    play = {"type": "buttons", "showactive": False, "x": 0.0, "y": -0.08, "xanchor": "right", "yanchor": "top",
            "buttons": [{"label": "play", "method": "animate",
                         "args": [None, {"frame": {"duration": 400, "redraw": redraw}, "fromcurrent": True,
                                         "transition": {"duration": 150}}]},
                        {"label": "pause", "method": "animate",
                         "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]}]}
    fig.update_layout(template="none", height=640, title={"text": titles[0]}, sliders=[slider], updatemenus=[play],
                      showlegend=False,
                      margin={"l": 60, "r": 30, "t": 60, "b": 100})
    if three_d:
        fig.update_scenes(xaxis={"title": labels[0], "range": ranges[0]}, yaxis={"title": labels[1], "range": ranges[1]},
                          zaxis={"title": labels[2], "range": ranges[2]}, aspectmode="cube")
    else:
        fig.update_xaxes(title_text=labels[0], range=ranges[0])
        yr = ranges[1][::-1] if k == 2 else ranges[1]  # grid row 0 on top
        fig.update_yaxes(title_text=labels[1], range=yr, scaleanchor="x" if k == 2 else None)
    div = fig.to_html(full_html=False, include_plotlyjs=True, div_id="pe-probe-trajectory",
                      config={"responsive": True, "displaylogo": False})
    page = f"""<!DOCTYPE html>
<html lang="en" data-frames="{len(steps)}"><head><meta charset="utf-8"><title>pe-probe: training trajectory</title>
<style>body{{font-family:Arial,Helvetica,sans-serif;margin:1em 2em;color:#222}}</style></head>
<body><h1 style="font-size:1.3em">Recovered layout over training ({html.escape(method)})</h1>
<p>{n} positions, {len(steps)} checkpoints. Each step's layout is aligned onto the previous step's (chained
Procrustes; the first onto the true layout), so motion between frames is real change, not a flip.
Grey lines join true neighbours: an untangled mesh means the geometry is recovered.</p>
{div}
<script>{_SELFTEST}</script>
</body></html>
"""
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path
