"""Tidy data frames behind every report figure.

Each figure is drawn from exactly one of these frames, and the frame is saved as CSV beside the
figure, so anyone can re-plot it without pe-probe. Large N is bounded here, once: RDMs are
block-averaged and Shepard pairs subsampled, so the drawing code never sees N^2 values.
"""

from __future__ import annotations

import numpy as np

from pe_probe.result import AnalysisResult

STATIC_RDM_MAX_CELLS = 128  # more cells than this per side are not visible in a printed figure
SHEPARD_MAX_PAIRS = 20_000


def shared_order(coords: np.ndarray) -> np.ndarray:
    """Positions sorted by true coordinates (axis 0 first): the one ordering both RDMs share.

    For row-major grids and lines this is the identity; for coordinate files it puts neighbours together.
    """
    coords = np.asarray(coords)
    return np.lexsort(coords.T[::-1]) if coords.shape[1] else np.arange(coords.shape[0])


def block_edges(n: int, max_cells: int) -> np.ndarray:
    """Start index of each block when ``n`` ordered positions are split into at most ``max_cells`` blocks.

    Returns ``n_blocks + 1`` edges. Blocks have equal size up to one position.
    """
    n_blocks = min(n, max_cells)
    return np.linspace(0, n, n_blocks + 1).round().astype(int)


def block_average(condensed_d: np.ndarray, order: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of a distance matrix over blocks of ordered positions: (B, B) from a condensed vector.

    ``order`` permutes the positions first; ``edges`` are block boundaries in that order. With one
    position per block this is just the reordered square matrix.
    """
    from scipy.spatial.distance import squareform

    square = squareform(np.asarray(condensed_d, dtype=np.float32), checks=False)
    square = square[np.ix_(order, order)]
    starts = edges[:-1]
    if len(starts) == square.shape[0]:
        return square.astype(np.float64)
    sums = np.add.reduceat(np.add.reduceat(square, starts, axis=0, dtype=np.float64), starts, axis=1)
    sizes = np.diff(edges).astype(np.float64)
    return sums / np.outer(sizes, sizes)


def rdm_frame(result: AnalysisResult, max_cells: int = STATIC_RDM_MAX_CELLS):
    """Both RDMs in the shared ordering, long format.

    Columns: ``matrix`` ("pe" or "true"), ``row``, ``col`` (block indices in the shared ordering, which
    sorts positions by true coordinate: not position ids for coordinate files), ``value`` (mean distance in
    the block), ``row_start``/``row_stop``/``col_start``/``col_stop`` (half-open ranges of ordered positions
    the block covers), ``block_size`` (the largest block's; blocks differ by at most one position: use the
    ranges for each block's own), and with one position per block ``row_position``/``col_position``:
    the table rows (position ids, as in embedding.csv) of the cell. Re-plot with
    ``frame[frame.matrix == "pe"].pivot(index="row", columns="col", values="value")``.
    """
    import pandas as pd

    n = result.n_positions
    order = shared_order(result.coords)
    edges = block_edges(n, max_cells)
    b = len(edges) - 1
    rows, cols = np.meshgrid(np.arange(b), np.arange(b), indexing="ij")
    parts = []
    for name, cond in (("pe", result.pe_distances), ("true", result.gt_distances)):
        m = block_average(cond, order, edges)
        parts.append(
            pd.DataFrame(
                {
                    "matrix": name,
                    "row": rows.ravel(),
                    "col": cols.ravel(),
                    "value": m.ravel(),
                    "row_start": edges[rows.ravel()],
                    "row_stop": edges[rows.ravel() + 1],
                    "col_start": edges[cols.ravel()],
                    "col_stop": edges[cols.ravel() + 1],
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    frame["block_size"] = int(np.ceil(n / b))
    if b == n:  # one position per cell: name it, so a cell can be read without the ordering
        frame["row_position"] = order[frame["row"].to_numpy()]
        frame["col_position"] = order[frame["col"].to_numpy()]
    return frame


def condensed_to_pairs(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column ``(i, j)``, ``i < j``, of condensed indices ``k`` for ``n`` points (scipy order)."""
    k = np.asarray(k, dtype=np.int64)
    # Row i starts at offset s(i) = i*n - i*(i+1)/2; invert the quadratic, then fix rounding.
    b = 2 * n - 1
    i = np.floor((b - np.sqrt(b * b - 8.0 * k)) / 2).astype(np.int64)
    start = i * n - i * (i + 1) // 2
    too_far = start > k
    i[too_far] -= 1
    start = i * n - i * (i + 1) // 2
    nxt = (i + 1) * n - (i + 1) * (i + 2) // 2
    short = nxt <= k
    i[short] += 1
    start = i * n - i * (i + 1) // 2
    j = k - start + i + 1
    return i, j


def shepard_frame(result: AnalysisResult, max_pairs: int = SHEPARD_MAX_PAIRS, seed: int = 0):
    """Pairs of positions with their true and PE distances; a seeded random subset above ``max_pairs``.

    Columns: ``i``, ``j``, ``true_distance``, ``pe_distance``, ``subsampled`` (True when not all pairs).
    """
    import pandas as pd

    n_pairs = len(result.pe_distances)
    if n_pairs > max_pairs:
        k = np.sort(np.random.default_rng(seed).choice(n_pairs, size=max_pairs, replace=False))
    else:
        k = np.arange(n_pairs)
    i, j = condensed_to_pairs(k, result.n_positions)
    return pd.DataFrame(
        {
            "i": i,
            "j": j,
            "true_distance": np.asarray(result.gt_distances)[k],
            "pe_distance": np.asarray(result.pe_distances)[k],
            "subsampled": n_pairs > max_pairs,
        }
    )


def layout_frame(result: AnalysisResult):
    """Recovered and true coordinates, one row per (method, position).

    Columns: ``method``, ``position``, ``true_0..true_{k-1}``, ``recovered_0..recovered_{k-1}``
    (aligned onto the ground truth, in its units), ``error`` (distance recovered -> true).
    """
    import pandas as pd

    k = result.coords.shape[1]
    parts = []
    for method, emb in result.embeddings.items():
        emb = np.asarray(emb, dtype=np.float64)
        data = {"method": method, "position": np.arange(result.n_positions)}
        for a in range(k):
            data[f"true_{a}"] = result.coords[:, a]
        for a in range(emb.shape[1]):
            data[f"recovered_{a}"] = emb[:, a]
        kk = min(k, emb.shape[1])
        data["error"] = np.linalg.norm(emb[:, :kk] - result.coords[:, :kk], axis=1)
        parts.append(pd.DataFrame(data))
    if not parts:
        return pd.DataFrame(columns=["method", "position"])
    return pd.concat(parts, ignore_index=True)


def spectrum_frame(result: AnalysisResult):
    """Explained-variance ratio per principal component: ``component`` (1-based), ``ratio``, ``cumulative``."""
    import pandas as pd

    ev = np.asarray(result.explained_variance, dtype=np.float64)
    if ev.size == 0:
        ev = principal_axes(result.table)[2]
    return pd.DataFrame({"component": np.arange(1, ev.size + 1), "ratio": ev, "cumulative": np.cumsum(ev)})


def principal_axes(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores (N, r), axes (r, d) and explained-variance ratios (r,) of the centred table.

    Signs are fixed (largest-magnitude loading positive) so figures do not flip between runs.
    """
    x = np.asarray(table, dtype=np.float64)
    x = x - x.mean(axis=0)
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    flip = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
    flip[flip == 0] = 1
    vt = vt * flip[:, None]
    u = u * flip[None, :]
    var = s**2
    ratio = var / var.sum() if var.sum() > 0 else var
    return u * s, vt, ratio


def grid_cells(coords: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(row, col) cell of each position on a 2-D grid, from its coordinates; None if they do not form the grid."""
    if shape is None or len(shape) != 2 or coords.shape[1] != 2:
        return None
    rows_u = np.unique(coords[:, 0])
    cols_u = np.unique(coords[:, 1])
    if len(rows_u) != shape[0] or len(cols_u) != shape[1]:
        return None
    r = np.searchsorted(rows_u, coords[:, 0])
    c = np.searchsorted(cols_u, coords[:, 1])
    if len(set(zip(r.tolist(), c.tolist()))) != len(r):
        return None
    return r, c


def pc_grid_frame(result: AnalysisResult, n_components: int = 6):
    """Top principal-component scores of the table placed on the 2-D grid; None unless the ground truth is one.

    Columns: ``component`` (1-based), ``explained``, ``position``, ``row``, ``col``, ``score``.
    """
    import pandas as pd

    cells = grid_cells(np.asarray(result.coords), result.gt_shape)
    if cells is None:
        return None
    scores, _, ratio = principal_axes(result.table)
    n_comp = min(n_components, scores.shape[1])
    parts = []
    for c in range(n_comp):
        parts.append(
            pd.DataFrame(
                {
                    "component": c + 1,
                    "explained": ratio[c],
                    "position": np.arange(result.n_positions),
                    "row": cells[0],
                    "col": cells[1],
                    "score": scores[:, c],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)
