"""The interactive page's structure (no browser): traces, menus, block-averaging, self-containedness."""

from __future__ import annotations

import numpy as np

from pe_probe.report.interactive import INTERACTIVE_RDM_MAX_CELLS, interactive_figure, write_interactive

from .conftest import grid_coords, hand_result


def test_traces_menus_and_linking_config(sinusoid_result):
    fig, cfg, note = interactive_figure(sinusoid_result)
    types = [t.type for t in fig.data]
    assert types == ["scatter", "scatter", "scatter", "heatmap"]  # true, pca, cmds, RDM
    assert [t.visible for t in fig.data[1:3]] == [True, False]
    method_menu, colour_menu = fig.layout.updatemenus
    assert [b.label for b in method_menu.buttons] == ["pca", "cmds"]
    assert [b.label for b in colour_menu.buttons] == ["colour: index", "colour: true axis 0", "colour: true axis 1"]
    assert np.asarray(fig.data[3].z).shape == (64, 64)
    # grid row-major: position i sits in heatmap row/column i
    assert cfg["cellOf"] == list(range(64)) and cfg["methodTraces"] == [1, 2] and note == ""


def test_page_is_self_contained(sinusoid_result, tmp_path):
    page = write_interactive(sinusoid_result, tmp_path / "i.html").read_text()
    assert "<script src=" not in page  # plotly.js is inline, nothing fetched
    assert "Plotly.newPlot" in page and "plotly_hover" in page


def test_large_n_heatmap_is_block_averaged_and_said_so():
    rng = np.random.default_rng(0)
    g = grid_coords(25, 20)  # 500 positions > 400
    r = hand_result(g @ rng.normal(size=(2, 8)), g, shape=(25, 20))
    fig, cfg, note = interactive_figure(r)
    z = np.asarray(fig.data[-1].z)
    assert z.shape[0] <= INTERACTIVE_RDM_MAX_CELLS and z.shape == (cfg["cells"], cfg["cells"])
    assert "block-averaged" in note
    assert max(cfg["cellOf"]) == cfg["cells"] - 1 and len(cfg["cellOf"]) == 500
