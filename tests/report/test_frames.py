"""The tidy frames behind the figures: index arithmetic, block averaging, ordering, bounded sizes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from pe_probe.report import frames as fr

from .conftest import grid_coords, hand_result


@pytest.mark.parametrize("n", [2, 3, 7, 50, 301])
def test_condensed_to_pairs_matches_scipy_order(n):
    i_ref, j_ref = np.triu_indices(n, 1)
    i, j = fr.condensed_to_pairs(np.arange(n * (n - 1) // 2), n)
    np.testing.assert_array_equal(i, i_ref)
    np.testing.assert_array_equal(j, j_ref)


def test_block_average_matches_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(23, 3))
    d = pdist(x)
    order = rng.permutation(23)
    edges = fr.block_edges(23, 5)
    got = fr.block_average(d, order, edges)
    sq = squareform(d)[np.ix_(order, order)]
    for a in range(5):
        for b in range(5):
            blk = sq[edges[a]:edges[a + 1], edges[b]:edges[b + 1]]
            assert got[a, b] == pytest.approx(blk.mean(), rel=1e-5)
    # one block per position: the reordered matrix itself
    np.testing.assert_allclose(fr.block_average(d, order, fr.block_edges(23, 100)), sq, rtol=1e-6)


def test_shared_order_identity_for_row_major_grid_and_sorts_shuffled_coords():
    g = grid_coords(4, 5)
    np.testing.assert_array_equal(fr.shared_order(g), np.arange(20))
    perm = np.random.default_rng(1).permutation(20)
    assert np.array_equal(g[perm][fr.shared_order(g[perm])], g)


def test_rdm_frame_replots_to_the_distance_matrices(sinusoid_result):
    frame = fr.rdm_frame(sinusoid_result)
    pe = frame[frame.matrix == "pe"].pivot(index="row", columns="col", values="value").to_numpy()
    true = frame[frame.matrix == "true"].pivot(index="row", columns="col", values="value").to_numpy()
    np.testing.assert_allclose(pe, squareform(sinusoid_result.pe_distances), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(true, squareform(sinusoid_result.gt_distances), rtol=1e-5, atol=1e-6)


def test_rdm_frame_names_the_positions_of_each_cell_for_coordinate_files():
    # shuffled coordinates: the shared ordering is not the identity, so row/col are not position ids
    rng = np.random.default_rng(2)
    g = grid_coords(4, 4)[rng.permutation(16)]
    table = g @ rng.normal(size=(2, 6))
    frame = fr.rdm_frame(hand_result(table, g))
    pe = frame[frame.matrix == "pe"]
    np.testing.assert_allclose(pe["value"], squareform(pdist(table))[pe.row_position, pe.col_position], rtol=1e-5)
    true = frame[frame.matrix == "true"]
    np.testing.assert_allclose(true["value"], squareform(pdist(g))[true.row_position, true.col_position], rtol=1e-5)
    assert not np.array_equal(pe["row"], pe["row_position"])


def test_rdm_frame_is_bounded_for_large_n():
    rng = np.random.default_rng(0)
    g = grid_coords(20, 25)
    r = hand_result(g @ rng.normal(size=(2, 8)), g, shape=(20, 25))
    frame = fr.rdm_frame(r)
    assert frame["row"].max() + 1 <= fr.STATIC_RDM_MAX_CELLS
    assert frame["block_size"].iloc[0] > 1 and "row_position" not in frame  # a cell spans several positions
    # block means of the true RDM still increase away from the diagonal on average
    t = frame[frame.matrix == "true"].pivot(index="row", columns="col", values="value").to_numpy()
    assert t[0, 1] < t[0, -1]


def test_shepard_frame_subsamples_consistently(sinusoid_result):
    full = fr.shepard_frame(sinusoid_result)
    assert len(full) == 64 * 63 // 2 and not full["subsampled"].any()
    sub = fr.shepard_frame(sinusoid_result, max_pairs=500, seed=3)
    assert len(sub) == 500 and sub["subsampled"].all()
    c = sinusoid_result.coords
    np.testing.assert_allclose(sub["true_distance"], np.linalg.norm(c[sub["i"]] - c[sub["j"]], axis=1))


def test_pc_grid_frame_only_for_2d_grids(sinusoid_result, cube_result, line_result):
    pcs = fr.pc_grid_frame(sinusoid_result)
    assert set(pcs.columns) >= {"component", "row", "col", "score", "explained"}
    assert pcs.groupby("component").size().eq(64).all()
    assert fr.pc_grid_frame(cube_result) is None
    assert fr.pc_grid_frame(line_result) is None


# ---- values the CSVs and captions show (a mutation audit changed each without a test failing)

def test_block_size_is_the_largest_block():
    rng = np.random.default_rng(0)
    g = grid_coords(15, 20)  # 300 positions in 128 blocks of 2 or 3
    frame = fr.rdm_frame(hand_result(g @ rng.normal(size=(2, 8)), g, shape=(15, 20)))
    assert frame["block_size"].iloc[0] == (frame["row_stop"] - frame["row_start"]).max() == 3


def test_layout_error_is_the_euclidean_distance(sinusoid_result):
    lay = fr.layout_frame(sinusoid_result)
    np.testing.assert_allclose(lay["error"], np.hypot(lay.recovered_0 - lay.true_0, lay.recovered_1 - lay.true_1))


def test_spectrum_components_are_numbered_from_1(sinusoid_result):
    spec = fr.spectrum_frame(sinusoid_result)
    assert spec["component"].iloc[0] == 1
    np.testing.assert_allclose(spec["cumulative"], np.cumsum(spec["ratio"]))


def test_each_pc_panel_shows_its_own_share_of_variance(sinusoid_result):
    pcs = fr.pc_grid_frame(sinusoid_result)
    _, _, ratio = fr.principal_axes(sinusoid_result.table)
    got = pcs.groupby("component")["explained"].first()
    np.testing.assert_allclose(got.to_numpy(), ratio[: len(got)])


def test_principal_axes_have_their_largest_loading_positive_whatever_the_sign_of_the_table():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 6)) @ rng.normal(size=(6, 6))
    for sign in (1, -1):
        _, vt, _ = fr.principal_axes(sign * x)
        assert (vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)] > 0).all()


def _rdm_axes(result):
    import matplotlib.pyplot as plt

    from pe_probe.report.static import rdm_figure

    fig = rdm_figure(fr.rdm_frame(result))
    ax = fig.axes[0]
    out = (ax.get_xlabel(), ax.get_ylabel(), [t.get_text() for t in ax.get_xticklabels()], ax.get_xticks(),
           fig._suptitle.get_text() if fig._suptitle else "")
    plt.close(fig)
    return out


def test_rdm_figure_names_position_ids_when_the_order_is_not_theirs():
    """Coordinates from a file: the cells are in true-coordinate order, and the axis said 'position' under ticks
    0, 2.5, 5 ... that were sort ranks (cell 0 was position 12)."""
    rng = np.random.default_rng(0)
    coords = rng.normal(size=(20, 2))
    result = hand_result(coords @ rng.normal(size=(2, 6)), coords, kind="coords")
    order = fr.shared_order(coords)
    xlabel, ylabel, ticks, _, _ = _rdm_axes(result)
    assert ticks == [str(i) for i in order] and order[0] != 0
    assert ylabel == "position" and "sorted by true coordinates" in xlabel


def test_rdm_figure_ticks_are_whole_cells_and_blocks_are_named_by_their_sizes():
    g = grid_coords(4, 4)
    xlabel, ylabel, _, ticks, _ = _rdm_axes(hand_result(g @ np.ones((2, 3)) + np.arange(16)[:, None] * 0.01, g))
    assert ylabel == "position" and np.all(ticks == np.round(ticks))
    g = grid_coords(24, 24)  # 576 positions in 128 blocks of 4 or 5 (it said 'block of 5' everywhere)
    table = np.hstack([g, np.sin(g)])
    xlabel, ylabel, _, _, suptitle = _rdm_axes(hand_result(table, g))
    assert ylabel == "block of 4-5 positions" and "4x4 to 5x5 position pairs" in suptitle
