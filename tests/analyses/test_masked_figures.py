"""netsim / brain report figures: legends sit outside the panels, where they cover no data (figure QA found them
over the bottom-left grid nodes, over true brain-region centres and across reference lines)."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")


def _captured(monkeypatch):
    import matplotlib.figure

    figs = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figs.append(self))
    return figs


def _assert_legend_outside(fig):
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend inside a panel
    assert len(fig.legends) == 1
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent()), "the legend overlaps a panel"


def test_netsim_layout_legend_is_outside_the_panels(monkeypatch, tmp_path):
    from analyses.netsim.report import layout_figure

    g = np.array([(r, c) for r in range(8) for c in range(8)], dtype=float)
    res = SimpleNamespace(coords=g, embeddings={"smacof": g + 0.1}, metrics={"recovery_smacof_r2": 0.9})
    figs = _captured(monkeypatch)
    layout_figure({"σ=0.1": res, "σ=2": res}, tmp_path / "x.png")
    _assert_legend_outside(figs[0])


def test_brain_orthogonal_legend_is_outside_the_panels(monkeypatch, tmp_path):
    from analyses.brain.report import orthogonal_figure

    rng = np.random.default_rng(0)
    g = rng.normal(size=(10, 3))
    res = SimpleNamespace(coords=g, embeddings={"smacof": g + 0.05}, metrics={"recovery_smacof_r2": 0.9})
    figs = _captured(monkeypatch)
    orthogonal_figure({"σ=0.1": res}, [f"R{i}_{'L' if i % 2 else 'R'}" for i in range(10)], tmp_path / "x.png")
    _assert_legend_outside(figs[0])


def test_sigma_figure_legend_is_outside_the_panels(monkeypatch, tmp_path):
    from analyses.netsim.sweep import sigma_figure

    df = pd.DataFrame({"pe": ["learned"] * 4 + ["none"], "sigma": [0.1, 0.1, 2.0, 2.0, np.nan],
                       "label": ["learned σ=0.1"] * 2 + ["learned σ=2"] * 2 + ["none"],
                       "test_rel": [0.85, 0.86, 0.87, 0.88, 0.95]})
    summary = df.groupby(["pe", "label"], dropna=False, as_index=False).agg(sigma=("sigma", "first"),
                                                                           test_rel=("test_rel", "mean"))
    figs = _captured(monkeypatch)
    sigma_figure(df, summary, tmp_path / "x.png", [("test_rel", "test / zero")])
    _assert_legend_outside(figs[0])
