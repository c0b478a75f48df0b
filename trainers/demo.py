"""``pe-probe demo``: the study's contrast in a few minutes on a laptop CPU.

Trains two learned-PE models on the Latin Square Task with the quick preset, initialised with a small
(0.1) and a large (2.0) sigma, asks of each PE table whether it recovered the 4x4 grid
(`pe_probe.api.analyze_source`), compares the runs (`pe_probe.compare.compare`) and writes::

    OUT/runs/sigma-0.1/ ...          training runs (resumable; finished runs are skipped)
    OUT/analysis/sigma-0.1/ ...      identifiability report per run
    OUT/compare/ ...                 the runs side by side, by pe.init_std
    OUT/summary.md                   OOD accuracy and identifiability metrics of both
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainers.config import make_config
from trainers.ensemble import train_ensemble

SIGMAS = {"sigma-0.1": 0.1, "sigma-2.0": 2.0}
ACCURACY_KEYS = ("ood_acc", "ood_acc_binary", "ood_acc_ternary", "ood_acc_quaternary", "test_acc")
ANALYZE_KWARGS = {"reference": "sin2d:4x4"}  # adds ref_shape_distance, the study's Procrustes distance
IDENTIFIABILITY_KEYS = (
    "ref_procrustes_distance", "ref_shape_distance", "null_ref_shape_distance_mean", "rsa_spearman", "rsa_p", "recovery_cmds_r2", "recovery_pca_r2", "recovery_smacof_r2", "recovery_umap_r2",
    "probe_r2", "trustworthiness", "knn_overlap", "null_rsa_mean",
)


def _finished(run: Path, epochs: int, out: Path) -> bool:
    """Whether ``run`` already holds a checkpoint at its last epoch.

    A ``last.pt`` left there is untrusted (a crash, an edit, a foreign file): it is read with the
    project's loader (weights only) and a file that is no readable checkpoint is a one-line InputError
    naming it and the fix, before any training.
    """
    from pe_probe.errors import InputError
    from trainers.checkpoint import CheckpointRefused, load_checkpoint

    last = run / "last.pt"
    if not last.exists() and not last.is_symlink():
        return False
    fix = f"delete {run} (or pass --force to redo everything), or pass another --out than {out}"
    if not last.is_file():
        raise InputError(f"{last} is not a checkpoint file; {fix}")
    try:
        epoch = load_checkpoint(last, map_location="cpu")["epoch"]
    except CheckpointRefused as e:  # a file is there (checked above): any refusal is this kind
        raise InputError(f"{last} is no readable checkpoint ({e.brief}); {fix}") from None
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise InputError(f"{last}: its epoch is {type(epoch).__name__} {str(epoch)[:40]!r}, not an integer; {fix}")
    return epoch >= epochs


def _analysis(run: Path, out: Path, redo: bool) -> dict[str, float]:
    """Analyse a run's last checkpoint once; later calls read the stored metrics.json."""
    from pe_probe.api import analyze_source, write_analysis

    stored = out / "metrics.json"
    if stored.exists() and not redo:
        data = json.loads(stored.read_text())
        return {k: v for k, v in data.items() if isinstance(v, (int, float))}
    result = analyze_source(str(run / "last.pt"), **ANALYZE_KWARGS)
    write_analysis(result, out, force=True)
    return dict(result.metrics)


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "n/a"


def _summary(acc: dict[str, dict], ident: dict[str, dict], epochs: int) -> str:
    names = list(SIGMAS)
    head = "| metric | " + " | ".join(f"sigma {SIGMAS[n]}" for n in names) + " |\n|---|" + "---|" * len(names) + "\n"
    rows = [f"| {k} | " + " | ".join(_fmt(acc[n].get(k)) for n in names) + " |\n" for k in ACCURACY_KEYS]
    rows += [
        f"| {k} | " + " | ".join(_fmt(ident[n].get(k)) for n in names) + " |\n"
        for k in IDENTIFIABILITY_KEYS
        if any(k in ident[n] for n in names)
    ]
    small, large = (acc[n].get("ood_acc", float("nan")) for n in names)
    return (
        "# pe-probe demo: PE initialisation scale\n\n"
        f"Two transformers (quick preset, {epochs} epochs) learned the 4x4 Latin Square Task with a learned "
        "positional-encoding table initialised N(0, sigma^2). Held-out (OOD) accuracy: "
        f"sigma 0.1 -> {small:.1%}, sigma 2.0 -> {large:.1%} (chance 25%).\n\n"
        "Identifiability metrics ask whether the PE table's geometry matches the true (row, col) grid "
        "(the first layer's table; the quick preset adds a separate table at every layer's input): "
        "RSA correlates the two distance matrices; recovery r2 aligns a 2D embedding of the table onto the "
        "grid; probe r2 predicts (row, col) from the table; ref_procrustes_distance is the (unnormalised) Procrustes "
        "distance to the 2D sinusoid, which the study found to predict generalisation, and ref_shape_distance its "
        "scale-free form (radians), which null_ref_shape_distance_mean, random tables of the table's shape, puts in "
        "context (unrelated tables are closer than pi/2).\n\n"
        + head + "".join(rows)
        + "\nFolders: `runs/` (checkpoints, metrics.jsonl), `analysis/<run>/` (reports), `compare/`.\n"
    )


def run_demo(
    out: str | os.PathLike,
    *,
    epochs: int | None = None,
    n_per_level: int | None = None,
    device: str = "cpu",
    force: bool = False,
) -> Path:
    """Train, analyse and compare the two runs under ``out``; return the path of ``summary.md``."""
    from pe_probe.compare import compare

    out = Path(out)
    cfgs = {name: make_config("quick", {
        "pe.kind": "learned", "pe.init": "normal", "pe.init_std": sigma,
        "optim.epochs": epochs, "data.n_per_level": n_per_level, "device": device,
    }) for name, sigma in SIGMAS.items()}
    cfg = next(iter(cfgs.values()))
    fresh = {name: force or not _finished(out / "runs" / name, c.optim.epochs, out) for name, c in cfgs.items()}
    # both runs as one ensemble: on a GPU one batched group; on the CPU side by side, one core each
    print(f"== training {', '.join(cfgs)} ({cfg.optim.epochs} epochs, as one ensemble) ==", flush=True)
    results = train_ensemble(list(cfgs.values()), [out / "runs" / name for name in cfgs], force=force)
    acc: dict[str, dict] = dict(zip(cfgs, results))
    ident: dict[str, dict] = {}
    for name in SIGMAS:
        print(f"== analysing {name} ==", flush=True)
        ident[name] = _analysis(out / "runs" / name, out / "analysis" / name, fresh[name])
    if any(fresh.values()) or not (out / "compare" / "index.html").exists():
        print("== comparing ==", flush=True)
        compare([str(out / "runs" / n) for n in SIGMAS], out / "compare", by="pe.init_std",
                analyze_kwargs=ANALYZE_KWARGS, force=True)
    path = out / "summary.md"
    path.write_text(_summary(acc, ident, cfg.optim.epochs))
    return path
