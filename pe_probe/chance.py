"""The chance level of RSA: the RSA that random tables, put where the PE table is, get against the ground truth.

For a bare table the random tables are Gaussian, N(0, var(P)), of the table's shape. A view (`pe_probe.views`)
is what a model computes from its table, so its chance level draws random tables of the PE table's shape
and scale and passes them through the same maps (token embedding, layer norm, W_Q / W_K, softmax and a
causal mask). That keeps what the model adds to any table: a causal kernel's mask alone makes random
tables look positional (`pe_probe.causal`), which Gaussian tables of the kernel's shape would not show.
The attention view reruns the model on the same puzzles with random PE tables
(`trainers.attention.random_pe_attention_maps`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import distances as dist
from . import stats


@dataclass(frozen=True)
class ChanceModel:
    """How the chance level's random tables are drawn: ``draw(rng)`` returns one table shaped like the analysed
    one. ``kind``: "gaussian", "through-view" (a view's maps) or "model-rerun" (the attention view); ``description``
    says it in words (recorded in provenance)."""

    kind: str
    description: str
    draw: Callable[[np.random.Generator], np.ndarray]


def gaussian_chance(table: np.ndarray) -> ChanceModel:
    """Gaussian tables of ``table``'s shape with its overall standard deviation (1 for a constant table)."""
    sd = float(np.std(table))
    sd = sd if sd > 0 else 1.0
    return ChanceModel("gaussian", f"Gaussian tables N(0, {sd:.4g}^2) of the table's shape {list(table.shape)}",
                       lambda rng: rng.normal(0.0, sd, table.shape))


def null_levels(chance: ChanceModel, shape: tuple[int, ...], gt_ranked: np.ndarray, pe_metric: str, n_null: int,
                rng: np.random.Generator, reference: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Chance levels from ``n_null`` tables drawn by ``chance``: (their Spearman RSA against the ranked, standardised
    ground-truth distances, their `shape_distance` to ``reference``).

    Ranked as `analyze` ranks the table's distances (near ties merged). An RSA is NaN for a drawn table whose rows
    are all equidistant (no geometry: what `analyze` refuses in a real table); every shape distance is NaN without
    a ``reference``. The same draws serve both, so a model-rerun chance model runs the model ``n_null`` times."""
    from .reference import shape_distance

    rsa, ref = np.full(n_null, np.nan), np.full(n_null, np.nan)
    for i in range(n_null):
        table = np.asarray(chance.draw(rng), dtype=np.float64)
        if table.shape != tuple(shape):
            raise ValueError(f"the chance model drew a table of shape {table.shape}, not {tuple(shape)}")
        d, order = dist.rsa_distances(dist.square_distances(table, pe_metric), pe_metric)
        if np.ptp(d) > 0:
            rsa[i] = float(stats.standardise(stats.rank(d, order)) @ gt_ranked)
        if reference is not None:
            ref[i] = shape_distance(table, reference)
    return rsa, ref
