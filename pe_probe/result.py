"""The result object that `pe_probe.analyze` returns and every report writer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Alignment:
    """A Procrustes alignment of a recovered embedding onto the ground truth.

    ``aligned = scale * (X - mean_X) @ rotation + mean_G`` maps the raw embedding ``X`` (N x k) into
    ground-truth units. ``r2 = 1 - disparity`` with disparity as in `scipy.spatial.procrustes`.
    """

    rotation: np.ndarray  # (k, k) orthogonal; det -1 when a reflection was used
    scale: float
    translation: np.ndarray  # (k,) = mean_G - scale * mean_X @ rotation
    r2: float
    rmse: float  # root mean squared error of the aligned embedding, in G's units
    reflection: bool


@dataclass
class AnalysisResult:
    """Everything one identifiability analysis produced.

    Attributes
    ----------
    metrics : flat ``str -> float`` dict with the metric keys of DESIGN.md section 4.
    provenance : JSON-able dict (source, sha256, parameter, layer, ground-truth spec, versions, seed, time).
    table : (N, d) the PE table that was analysed (after slicing / dropping extra tokens).
    coords : (N, k) ground-truth coordinates.
    gt_spec, gt_kind, gt_shape : where the ground truth came from; kind is "line", "grid", "file" or
        "checkpoint"; shape is the grid shape (e.g. (4, 4)) when the positions form a grid, else None.
    pe_metric : distance used on the table ("euclidean", "cosine" or "correlation").
    pe_distances, gt_distances : condensed distance vectors (N*(N-1)/2,), scipy `pdist` order.
    embeddings : method -> (N, k) recovered coordinates aligned onto ``coords`` (ground-truth units).
    raw_embeddings : method -> (N, k) recovered coordinates before alignment.
    alignments : method -> Alignment.
    explained_variance : (min(N, d),) explained-variance ratio of the centred table's principal axes.
    null_rsa : RSA values of random tables (the chance level, drawn as `pe_probe.chance` says), may be empty.
    """

    metrics: dict[str, float]
    provenance: dict[str, Any]
    table: np.ndarray
    coords: np.ndarray
    gt_spec: str
    gt_kind: str
    gt_shape: tuple[int, ...] | None
    pe_metric: str
    pe_distances: np.ndarray
    gt_distances: np.ndarray
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    raw_embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    alignments: dict[str, Alignment] = field(default_factory=dict)
    explained_variance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    null_rsa: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __repr__(self) -> str:
        """One line (the dataclass default printed every array: 20,000 characters for 25 positions)."""
        m = self.metrics
        return (f"AnalysisResult(n_positions={self.n_positions}, dims={self.table.shape[1]}, "
                f"ground_truth={self.gt_spec!r}, pe_metric={self.pe_metric!r}, "
                f"rsa_spearman={m.get('rsa_spearman', float('nan')):.4g}, rsa_p={m.get('rsa_p', float('nan')):.4g}, "
                f"methods={self.methods})")

    def to_dict(self) -> dict[str, Any]:
        """The metrics.json document: the flat metrics plus ``provenance``, as plain JSON values (NaN and
        infinities become None, numpy scalars Python numbers), so ``json.dumps(res.to_dict())`` is valid JSON."""
        from .output import metrics_document

        return metrics_document(self)

    @property
    def n_positions(self) -> int:
        return int(self.table.shape[0])

    @property
    def methods(self) -> list[str]:
        return list(self.embeddings)

    def to_frame(self):
        """Tidy metrics: one row per metric with columns ``metric`` and ``value`` (counts such as
        ``n_positions`` stay integers, so the CSV reads 16, not 16.0)."""
        import pandas as pd

        values = [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else float(v)
                  for v in self.metrics.values()]
        return pd.DataFrame({"metric": list(self.metrics), "value": pd.Series(values, dtype=object)})

    def embedding_frame(self):
        """One row per position: ``position``, ``true_0..true_{k-1}``, ``<method>_0..<method>_{k-1}``."""
        import pandas as pd

        k = self.coords.shape[1]
        data: dict[str, Any] = {"position": np.arange(self.n_positions)}
        for j in range(k):
            data[f"true_{j}"] = self.coords[:, j]
        for m, emb in self.embeddings.items():
            for j in range(emb.shape[1]):
                data[f"{m}_{j}"] = emb[:, j]
        return pd.DataFrame(data)
