"""The interactive page's structure (no browser): traces, menus, block-averaging, self-containedness."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist, squareform

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


def test_2d_orientation_grid_like_an_image_coordinate_files_like_a_scatter_plot():
    rng = np.random.default_rng(0)
    g = grid_coords(4, 5).astype(float)
    table = g @ rng.normal(size=(2, 6))
    fig, cfg, _ = interactive_figure(hand_result(table, g, shape=(4, 5)))
    np.testing.assert_allclose(fig.data[0].x, g[:, 1])
    np.testing.assert_allclose(fig.data[0].y, g[:, 0])
    assert fig.layout.yaxis.autorange == "reversed" and cfg["trueAxes"] == ["y", "x"]
    pts = rng.normal(size=(20, 2))
    fig, cfg, _ = interactive_figure(hand_result(pts @ rng.normal(size=(2, 6)), pts, spec="coords.npy", kind="file"))
    np.testing.assert_allclose(fig.data[0].x, pts[:, 0], rtol=1e-6)
    np.testing.assert_allclose(fig.data[0].y, pts[:, 1], rtol=1e-6)
    assert fig.layout.yaxis.autorange != "reversed" and fig.layout.xaxis.title.text == "true axis 0"
    assert cfg["trueAxes"] == ["x", "y"]


def test_static_layout_orientation_follows_the_ground_truth_kind():
    from pe_probe.report import frames as fr
    from pe_probe.report.static import layout_figure

    rng = np.random.default_rng(1)
    pts = rng.normal(size=(20, 2))
    r = hand_result(pts @ rng.normal(size=(2, 6)), pts, spec="coords.npy", kind="file")
    frame = fr.layout_frame(r)
    ax = layout_figure(frame, r.metrics, grid_view=False).axes[0]
    assert ax.get_xlabel() == "true axis 0" and not ax.yaxis_inverted()
    np.testing.assert_allclose(ax.collections[1].get_offsets()[:, 0], pts[:, 0])  # grey true points
    ax = layout_figure(frame, r.metrics, grid_view=True).axes[0]
    assert ax.get_xlabel() == "true axis 1" and ax.yaxis_inverted()


def test_block_labels_are_disjoint_inclusive_ranges():
    rng = np.random.default_rng(0)
    g = grid_coords(25, 20)
    fig, _, _ = interactive_figure(hand_result(g @ rng.normal(size=(2, 8)), g, shape=(25, 20)))
    spans = [tuple(map(int, s.split("-"))) for s in fig.data[-1].x]
    assert spans[0][0] == 0 and spans[-1][1] == 499
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))  # "0-3", "4-7": no position in two blocks


def test_heatmap_labels_name_the_positions_of_shuffled_coordinates():
    rng = np.random.default_rng(2)
    g = grid_coords(4, 4)[rng.permutation(16)]
    table = g @ rng.normal(size=(2, 6))
    fig, _, _ = interactive_figure(hand_result(table, g, spec="coords.npy", kind="file"))
    heat = fig.data[-1]
    ids = [int(s) for s in heat.x]
    np.testing.assert_allclose(np.asarray(heat.z), squareform(pdist(table))[np.ix_(ids, ids)], rtol=1e-5)


def test_three_d_view_is_far_enough_to_show_its_axis_titles():
    """At plotly's default camera distance (eye 1.25, 1.25, 1.25) the scene's axis titles were clipped ('true axi…')."""
    g = grid_coords(3, 3, 3)
    fig, _, _ = interactive_figure(hand_result(np.hstack([g, g ** 2]), g, spec="grid:3x3x3"))
    eye = fig.layout.scene.camera.eye
    assert fig.layout.scene.xaxis.title.text == "true axis 0"
    assert np.hypot(eye.x, eye.y) > 1.25 * np.sqrt(2) + 0.3


def test_both_heatmap_axes_are_titled(sinusoid_result):
    """The heatmap's y-axis had no title (figure QA): both axes name what the rows and columns are."""
    fig, _, _ = interactive_figure(sinusoid_result)
    heat = next(t for t in fig.data if t.type == "heatmap")
    x_axis = fig.layout["xaxis" + heat.xaxis[1:]]
    y_axis = fig.layout["yaxis" + heat.yaxis[1:]]
    assert x_axis.title.text == y_axis.title.text == "position (sorted by true coordinates)"
