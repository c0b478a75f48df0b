"""Fixtures for the report tests: AnalysisResult objects built by hand (fast, no analysis code needed).

The hand-built result fills every field the report reads, with the same definitions as DESIGN.md
section 4 where it matters for the pictures (distances, PCA spectrum, Procrustes-aligned embeddings).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

from pe_probe.result import Alignment, AnalysisResult


def sinusoid_2d(h: int, w: int, d: int) -> np.ndarray:
    """The planted 2-D sinusoid table: first half encodes the column, second half the row."""
    k = np.arange(d // 4)
    freq = 10000.0 ** (-4.0 * k / d)
    rows, cols = np.divmod(np.arange(h * w), w)

    def enc(c):
        ang = c[:, None] * freq[None, :]
        out = np.empty((len(c), d // 2))
        out[:, 0::2], out[:, 1::2] = np.sin(ang), np.cos(ang)
        return out

    return np.hstack([enc(cols), enc(rows)])


def grid_coords(*shape: int) -> np.ndarray:
    return np.indices(shape).reshape(len(shape), -1).T.astype(float)


def _align(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, Alignment]:
    mx, mg = x.mean(0), g.mean(0)
    xc, gc = x - mx, g - mg
    u, s, vt = np.linalg.svd(xc.T @ gc)
    r = u @ vt
    scale = s.sum() / max((xc**2).sum(), 1e-300)
    aligned = scale * xc @ r + mg
    disparity = ((aligned - g) ** 2).sum() / max((gc**2).sum(), 1e-300)
    rmse = float(np.sqrt(((aligned - g) ** 2).sum(1).mean()))
    al = Alignment(r, float(scale), mg - scale * mx @ r, float(1 - disparity), rmse, bool(np.linalg.det(r) < 0))
    return aligned, al


def hand_result(table: np.ndarray, coords: np.ndarray, shape=None, spec="grid", kind="grid",
                methods=("pca", "cmds")) -> AnalysisResult:
    """An AnalysisResult computed directly (PCA for both methods; enough for report drawing)."""
    table = np.asarray(table, float)
    n, k = coords.shape
    pe_d = pdist(table)
    gt_d = pdist(coords)
    xc = table - table.mean(0)
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    ev = s**2 / (s**2).sum()
    raw = (u * s)[:, :k]
    emb, alg, raws = {}, {}, {}
    metrics = {"n_positions": n, "pe_dim": table.shape[1], "gt_dim": k}
    for m in methods:
        aligned, al = _align(raw, coords)
        emb[m], alg[m], raws[m] = aligned, al, raw
        metrics[f"recovery_{m}_r2"] = al.r2
        metrics[f"recovery_{m}_rmse"] = al.rmse
        metrics[f"recovery_{m}_p"] = 0.001
    rho = float(spearmanr(pe_d, gt_d)[0]) if len(pe_d) < 200_000 else 0.5
    metrics.update(rsa_spearman=rho, rsa_p=0.001, rsa_ci_low=rho - 0.05, rsa_ci_high=min(rho + 0.05, 1.0),
                   probe_r2=0.9, trustworthiness=0.95, knn_overlap=0.8, mds_stress=0.08,
                   participation_ratio=float(1 / (ev**2).sum()), explained_variance=float(ev[:k].sum()),
                   null_rsa_mean=0.01, null_rsa_sd=0.03)
    return AnalysisResult(metrics=metrics, provenance={"source": "hand", "n_perm": 999}, table=table, coords=coords,
                          gt_spec=spec, gt_kind=kind, gt_shape=shape, pe_metric="euclidean", pe_distances=pe_d,
                          gt_distances=gt_d, embeddings=emb, raw_embeddings=raws, alignments=alg,
                          explained_variance=ev, null_rsa=np.zeros(0))


@pytest.fixture
def sinusoid_result() -> AnalysisResult:
    """8x8 grid, planted 2-D sinusoid table (d=64)."""
    return hand_result(sinusoid_2d(8, 8, 64), grid_coords(8, 8), shape=(8, 8), spec="grid:8x8")


@pytest.fixture
def cube_result() -> AnalysisResult:
    """3x3x3 grid with a noisy linear table: exercises the 3-D paths."""
    rng = np.random.default_rng(1)
    g = grid_coords(3, 3, 3)
    return hand_result(g @ rng.normal(size=(3, 16)) + 0.05 * rng.normal(size=(27, 16)), g, shape=(3, 3, 3),
                       spec="grid:3x3x3")


@pytest.fixture
def line_result() -> AnalysisResult:
    rng = np.random.default_rng(2)
    g = np.arange(20, dtype=float)[:, None]
    return hand_result(g @ rng.normal(size=(1, 8)) + 0.1 * rng.normal(size=(20, 8)), g, shape=(20,), spec="line:20",
                       kind="line")


def _fallback_analyze_one(path, ground_truth, analyze_kwargs):
    """Stand-in for `pe_probe.api.analyze_source` until it exists: io.load_table + analysis.analyze."""
    from pe_probe.analysis import analyze
    from pe_probe.io import load_table

    loaded = load_table(path)
    gt = ground_truth if ground_truth is not None else loaded.ground_truth
    result = analyze(loaded.table, gt, **analyze_kwargs)
    result.provenance.update(source=str(path), config=loaded.config, checkpoint_metrics=loaded.checkpoint_metrics,
                             step=loaded.step)
    return result


@pytest.fixture
def analyze_source_available(monkeypatch):
    """Make `pe_probe.compare` analyse real files: the real API if present, else the stand-in above."""
    try:
        import pe_probe.api  # noqa: F401
    except ImportError:
        import pe_probe.compare

        monkeypatch.setattr(pe_probe.compare, "_analyze_one", _fallback_analyze_one)
    return True


def write_checkpoint(path, table: np.ndarray, coords: np.ndarray, shape, *, config: dict, metrics: dict, step: int = 0):
    """A minimal checkpoint in the pe-probe-checkpoint/1 format (DESIGN.md section 3)."""
    import torch

    obj = {
        "format": "pe-probe-checkpoint/1",
        "model": {"pe.table": torch.tensor(table, dtype=torch.float32), "head.weight": torch.zeros(4, table.shape[1])},
        "config": config,
        "pe_params": ["pe.table"],
        "ground_truth": {"coords": torch.tensor(coords, dtype=torch.float32), "kind": "grid", "shape": list(shape)},
        "step": int(step),
        "epoch": 0,
        "metrics": metrics,
    }
    torch.save(obj, path)
    return path
