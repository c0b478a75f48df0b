"""Static figures of one analysis (matplotlib, Agg): RDMs, Shepard plot, recovered layout, spectrum, PCs on the grid.

Every function takes the tidy frame from `pe_probe.report.frames` (the same frame that is saved as
CSV beside the figure) and returns a matplotlib Figure; `write_static_figures` builds, draws and
saves all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from pe_probe.report import frames as fr
from pe_probe.report.style import (
    DISTANCE_CMAP,
    ONE_COLUMN_IN,
    SEQUENTIAL_CMAP,
    TWO_COLUMN_IN,
    method_colour,
    publication_style,
    save_figure,
)
from pe_probe.report.readings import sig3
from pe_probe.result import AnalysisResult

HEXBIN_ABOVE = 5_000  # Shepard pairs drawn as a hexbin density above this many


def write_static_figures(result: AnalysisResult, figures_dir: Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Draw and save every static figure of ``result`` into ``figures_dir``; return the files written."""
    written: list[Path] = []
    with publication_style():
        rdm = fr.rdm_frame(result)
        written += save_figure(rdm_figure(rdm, result.pe_metric), rdm, figures_dir, "rdm", formats)
        shep = fr.shepard_frame(result)
        written += save_figure(shepard_figure(shep, result.metrics, result.pe_metric), shep, figures_dir, "shepard", formats)
        layout = fr.layout_frame(result)
        if len(layout):
            fig = layout_figure(layout, result.metrics, grid_view=result.gt_kind == "grid")
            written += save_figure(fig, layout, figures_dir, "layout", formats)
        spec = fr.spectrum_frame(result)
        written += save_figure(spectrum_figure(spec, result.metrics), spec, figures_dir, "spectrum", formats)
        pcs = fr.pc_grid_frame(result)
        if pcs is not None:
            written += save_figure(pc_grid_figure(pcs), pcs, figures_dir, "pc_grid", formats)
    return written


def rdm_figure(frame, pe_metric: str = "euclidean"):
    """Paired heatmaps: PE distances and true distances in the same position ordering, each with a colour bar."""
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(TWO_COLUMN_IN, 3.0), layout="constrained")
    cells = frame[(frame["matrix"] == "pe") & (frame["col"] == 0)].sort_values("row")
    sizes = (cells["row_stop"] - cells["row_start"]).to_numpy()
    lo, hi = int(sizes.min()), int(sizes.max())
    ids = cells["row_position"].to_numpy() if "row_position" in cells.columns else None
    in_id_order = ids is not None and bool(np.array_equal(ids, np.arange(len(ids))))
    few = ids is not None and len(ids) <= 32
    if hi > 1:
        unit = f"block of {lo} positions" if lo == hi else f"block of {lo}-{hi} positions"
        xlabel = f"{unit} (in true-coordinate order)"
    elif in_id_order or few:  # the cells are position ids (ticks say which when the order is not theirs)
        unit, xlabel = "position", "position (sorted by true coordinates)"
    else:
        unit = xlabel = "rank of the position in true-coordinate order"
    for ax, (name, title) in zip(axes, (("pe", f"PE distance ({pe_metric})"), ("true", "true distance"))):
        sub = frame[frame["matrix"] == name]
        m = sub.pivot(index="row", columns="col", values="value").to_numpy()
        im = ax.imshow(m, cmap=DISTANCE_CMAP, interpolation="nearest", origin="upper")
        ax.set_title(title)
        if few and not in_id_order:
            ax.set_xticks(range(len(ids)), [str(i) for i in ids], fontsize=5, rotation=90)
            ax.set_yticks(range(len(ids)), [str(i) for i in ids], fontsize=5)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        fig.colorbar(im, ax=ax, shrink=0.85, label="distance")
    if hi > 1:
        pairs = f"{lo}x{lo}" if lo == hi else f"{lo}x{lo} to {hi}x{hi}"
        fig.suptitle(f"block-averaged: each cell is the mean over {pairs} position pairs", fontsize=7)
    return fig


def _fmt(x) -> str:
    """Three significant digits, trailing zeros kept ("0.770 [0.768, 0.779]", not "0.77 [...]": a dropped zero read
    as less precision than the interval beside it)."""
    if x is None or not np.isfinite(x):
        return "n/a"
    return sig3(float(x))


def rsa_caption(metrics: dict) -> str:
    """'Spearman ρ = 0.93 [0.90, 0.95], p = 0.001' from whatever RSA metrics are present."""
    text = f"Spearman ρ = {_fmt(metrics.get('rsa_spearman', np.nan))}"
    if "rsa_ci_low" in metrics and "rsa_ci_high" in metrics:
        text += f" [{_fmt(metrics['rsa_ci_low'])}, {_fmt(metrics['rsa_ci_high'])}]"
    if "rsa_p" in metrics:
        text += f"\np = {_fmt(metrics['rsa_p'])}"
    if "null_rsa_mean" in metrics:
        text += f"\nchance {_fmt(metrics['null_rsa_mean'])} ± {_fmt(metrics.get('null_rsa_sd', np.nan))}"
    return text


def shepard_figure(frame, metrics: dict, pe_metric: str = "euclidean"):
    """PE distance against true distance for pairs of positions, RSA and its CI in the corner."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(ONE_COLUMN_IN, 2.8), layout="constrained")
    x = frame["true_distance"].to_numpy()
    y = frame["pe_distance"].to_numpy()
    if len(frame) > HEXBIN_ABOVE:
        hb = ax.hexbin(x, y, gridsize=40, cmap=SEQUENTIAL_CMAP, mincnt=1, bins="log", linewidths=0)
        fig.colorbar(hb, ax=ax, label="pairs (log)")
    else:
        ax.scatter(x, y, s=7, alpha=0.45, color="#0072B2", linewidths=0, rasterized=len(frame) > 1000, label="pair")
    # Median PE distance per distinct true distance: shows monotonicity, which Spearman measures.
    ux = np.unique(np.round(x, 6))
    if len(ux) <= 60:
        med = [np.median(y[np.isclose(x, v)]) for v in ux]
        ax.plot(ux, med, color="#D55E00", lw=0.8, alpha=0.8, label="median per true distance")
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside upper center", ncols=2, frameon=False, handlelength=1.2)
    ax.set_xlabel("true distance")
    ax.set_ylabel(f"PE distance ({pe_metric})")
    # the RSA caption above the axes, not in a corner box, which hid the pairs under it
    caption = rsa_caption(metrics)
    if bool(frame["subsampled"].iloc[0]) if len(frame) else False:
        caption += f"\n{len(frame):,} random pairs shown"
    ax.set_title(caption, fontsize=7, loc="left")
    return fig


def layout_figure(frame, metrics: dict, grid_view: bool = True):
    """One panel per method: true layout (grey) and aligned recovered layout (colour = position), joined by lines.

    ``grid_view``: draw a 2-D layout like the grid's image (axis 1 across, axis 0 down); else (coordinates
    from a file) axis 0 across and axis 1 up, as a scatter plot of (x, y) is read."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    methods = list(dict.fromkeys(frame["method"]))
    k = sum(c.startswith("true_") for c in frame.columns)
    ncols = min(len(methods), 4)
    nrows = int(np.ceil(len(methods) / ncols))
    width = TWO_COLUMN_IN if ncols > 1 else ONE_COLUMN_IN
    panel = width / ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel * nrows + 0.5), layout="constrained", squeeze=False)
    n = int((frame["method"] == methods[0]).sum())
    big = n > 1000
    for ax in axes.ravel()[len(methods):]:
        ax.set_visible(False)
    for ax, method in zip(axes.ravel(), methods):
        sub = frame[frame["method"] == method]
        if k == 1:
            tx, ty = sub["true_0"].to_numpy(), np.zeros(len(sub))
            rx, ry = sub["recovered_0"].to_numpy(), np.full(len(sub), 1.0)
        else:
            a, b = (1, 0) if grid_view else (0, 1)  # grids: axis 1 across, axis 0 down, like the image
            tx, ty = sub[f"true_{a}"].to_numpy(), sub[f"true_{b}"].to_numpy()
            rx, ry = sub[f"recovered_{a}"].to_numpy(), sub[f"recovered_{b}"].to_numpy()
        segs = np.stack([np.column_stack([rx, ry]), np.column_stack([tx, ty])], axis=1)
        ax.add_collection(LineCollection(segs, colors="0.55", linewidths=0.3 if big else 0.5, alpha=0.6, zorder=1,
                                         rasterized=big))
        ax.scatter(tx, ty, s=2 if big else 8, color="0.75", linewidths=0, zorder=2, label="true")
        sc = ax.scatter(rx, ry, s=1 if big else 10, c=sub["position"].to_numpy(), cmap=SEQUENTIAL_CMAP,
                        linewidths=0, zorder=3, label="recovered", rasterized=big)
        r2 = metrics.get(f"recovery_{method}_r2")
        ax.set_title(f"{method}: r² = {_fmt(r2)}" if r2 is not None else method, color=method_colour(method))
        if k == 1:
            ax.set_yticks([0, 1], ["true", "recovered"])
            ax.set_xlabel("position (true units)")
        else:
            ax.set_aspect("equal", adjustable="datalim")
            ax.set_xlabel(f"true axis {a}")
            ax.set_ylabel(f"true axis {b}")
            if k == 2 and grid_view:
                ax.invert_yaxis()  # axis 0 is the grid row: row 0 on top, like the image
        ax.autoscale_view()
    fig.colorbar(sc, ax=axes.ravel().tolist(), shrink=0.8, label="position index")
    if k > 2:
        fig.suptitle(f"3-D ground truth: showing true axes 0 and 1 of {k} (aligned in all {k})", fontsize=7)
    elif k == 1:
        fig.suptitle("1-D ground truth: recovered (top) vs true (bottom) positions", fontsize=7)
    return fig


def spectrum_figure(frame, metrics: dict, max_components: int = 40):
    """Explained variance per principal component (bars) and cumulative (line), participation ratio marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(ONE_COLUMN_IN, 2.4), layout="constrained")
    # Show the components that carry variance: up to 99.9% cumulative, at least 10, at most max_components.
    reach = int(np.searchsorted(frame["cumulative"].to_numpy(), 0.999)) + 2
    shown = int(min(max_components, len(frame), max(10, reach)))
    sub = frame.head(shown)
    ax.bar(sub["component"], sub["ratio"], color="#0072B2", width=0.8, label="per component")
    ax2 = ax.twinx()
    ax2.plot(sub["component"], sub["cumulative"], color="#D55E00", lw=1.2, label="cumulative")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("cumulative", color="#D55E00")
    ax2.spines["right"].set_visible(True)
    ax.set_xlabel("principal component")
    ax.set_ylabel("explained variance ratio")
    pr = metrics.get("participation_ratio")
    if pr is not None and np.isfinite(pr):
        ax.axvline(pr, color="0.3", ls="--", lw=0.8, label=f"participation ratio {pr:.2f}")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside upper center", ncols=3, frameon=False, handlelength=1.2, fontsize=6)
    if len(frame) > shown:
        ax.set_title(f"first {shown} of {len(frame)} components", fontsize=7)
    return fig


def pc_grid_figure(frame):
    """Each top principal component of the table as a small heatmap on the true grid."""
    import matplotlib.pyplot as plt

    comps = sorted(frame["component"].unique())
    ncols = min(len(comps), 6)
    nrows = int(np.ceil(len(comps) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(TWO_COLUMN_IN, TWO_COLUMN_IN / ncols * nrows + 0.4),
                             layout="constrained", squeeze=False)
    for ax in axes.ravel()[len(comps):]:
        ax.set_visible(False)
    for ax, c in zip(axes.ravel(), comps):
        sub = frame[frame["component"] == c]
        m = sub.pivot(index="row", columns="col", values="score").to_numpy()
        lim = np.nanmax(np.abs(m)) or 1.0
        ax.imshow(m, cmap="PuOr_r", vmin=-lim, vmax=lim, interpolation="nearest")  # _r: purple low, orange high
        ax.set_title(f"PC{c} ({100 * sub['explained'].iloc[0]:.0f}%)")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("principal components of the PE table on the true grid (row down, column across); "
                 "purple = negative score, orange = positive", fontsize=7)
    return fig
