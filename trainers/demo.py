"""``pe-probe demo``: the study's contrast in a few minutes on a laptop CPU.

Trains two learned-PE models on the Latin Square Task with the quick preset, initialised with a small
(0.1) and a large (2.0) sigma, asks of each PE table whether it recovered the 4x4 grid
(`pe_probe.api.analyze_source`), compares the runs (`pe_probe.compare.compare`) and writes::

    OUT/runs/sigma-0.1/ ...          training runs (resumable; finished runs are skipped)
    OUT/analysis/sigma-0.1/ ...      identifiability report per run
    OUT/compare/ ...                 the runs side by side, by pe.init_std
    OUT/summary.md                   OOD accuracy and identifiability metrics of both
    OUT/.pe-probe-demo               marks the folder as the demo's own (`check_demo_dir`)

OUT must be new, empty, or a demo folder: the demo writes into it (and replaces OUT/compare/ and
OUT/summary.md), so a folder of the user's own files is refused, --force or not.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from pathlib import Path
from typing import Any, Iterator

from trainers.config import make_config
from trainers.ensemble import train_ensemble

SIGMAS = {"sigma-0.1": 0.1, "sigma-2.0": 2.0}
ACCURACY_KEYS = ("ood_acc", "ood_acc_binary", "ood_acc_ternary", "ood_acc_quaternary", "test_acc")
ANALYZE_KWARGS = {"reference": "sin2d:4x4"}  # adds ref_shape_distance, the study's Procrustes distance
IDENTIFIABILITY_KEYS = (
    "ref_procrustes_distance", "ref_shape_distance", "null_ref_shape_distance_mean", "rsa_spearman", "rsa_p", "recovery_cmds_r2", "recovery_pca_r2", "recovery_smacof_r2", "recovery_umap_r2",
    "probe_r2", "trustworthiness", "knn_overlap", "null_rsa_mean",
)


DEMO_MARKER = ".pe-probe-demo"  # not pe_probe.output.MARKER: that one lets analyze/compare replace the folder
SUMMARY_TITLE = "# pe-probe demo"
DEMO_ENTRIES = ("runs", "analysis", "compare", "summary.md", DEMO_MARKER)


def check_demo_dir(out: str | os.PathLike, flag: str = "--out") -> Path:
    """Refuse, before any training, an --out the demo may not write into: an empty path (the current folder),
    a file, or an existing non-empty folder that is not a demo folder. The demo writes into OUT and replaces
    OUT/summary.md and OUT/compare/ as a whole, so a folder of the user's own files lost them (exit 0, --force
    or not). A demo folder carries `DEMO_MARKER`; an older one, written before the marker, is recognised by its
    entries (`_old_demo_dir`), so it still resumes. ``flag``: the option the messages name (a caller that takes
    the demo folder under another option, as `analyses.demo.report`'s --runs)."""
    from pe_probe.errors import InputError, check_utf8_out

    if not str(out):
        raise InputError(f'{flag} "" is an empty path (is a shell variable unset?); name the demo folder, e.g. {flag} out/demo')
    check_utf8_out(out, flag)  # the analysis of its runs would refuse their paths after training
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise InputError(f"{flag} {out} is a symbolic link to nothing; remove it or name a new folder")
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {out} is a file, not a folder; name a new folder, e.g. {flag} out/demo")
    entries = sorted(path.iterdir()) if path.is_dir() else []
    if not entries or (path / DEMO_MARKER).is_file() or _old_demo_dir(path):
        return path
    shown = next((e.name for e in entries if not _demo_entry(e.name)), entries[0].name)
    raise InputError(f"{flag} {out} exists and is not a folder pe-probe demo wrote (it holds {shown}); the demo writes "
                     f"runs/, analysis/, compare/ and summary.md into it, replacing what is there: choose a new or empty "
                     f"folder (--force retrains a demo folder's runs; it does not take over other folders)")


def _demo_entry(name: str) -> bool:
    """A name the demo writes at the top of OUT, or a staging leftover of one (``.compare.staging-...``)."""
    return name in DEMO_ENTRIES or any(name.startswith(f".{e}.") for e in DEMO_ENTRIES)


def _old_demo_dir(path: Path) -> bool:
    """Whether ``path`` clearly is a demo folder written before `DEMO_MARKER` existed: it holds runs/ with
    only the demo's runs in it, and otherwise only analysis/ (the demo's runs), compare/ (written by
    pe-probe, so marked by it) and a summary.md that starts with the demo's title."""
    from pe_probe.output import MARKER

    entries = {e.name: e for e in path.iterdir()}
    if "runs" not in entries or not all(_demo_entry(name) for name in entries):
        return False
    for folder in ("runs", "analysis"):
        if folder in entries and not (entries[folder].is_dir() and all(
                e.name in SIGMAS or any(e.name.startswith(f".{n}.") for n in SIGMAS) for e in entries[folder].iterdir())):
            return False
    if "compare" in entries and not (entries["compare"] / MARKER).is_file():
        return False
    summary = entries.get("summary.md")
    if summary is not None:
        try:
            with open(summary, "rb") as f:
                head = f.read(len(SUMMARY_TITLE))
        except OSError:
            return False
        if head != SUMMARY_TITLE.encode():
            return False
    return True


@contextlib.contextmanager
def marked_demo_dir(out: Path) -> Iterator[None]:
    """Create ``out`` (if new) and mark it as the demo's when the demo starts, so a rerun resumes it; a bad
    setting found later, before training writes anything (no CUDA device, a run of another config), takes
    the folder and marker back off again: bad input leaves nothing on disk."""
    from pe_probe.errors import InputError

    created = [d for d in (out, *out.parents) if not d.exists()]  # the folders mkdir makes, deepest first
    out.mkdir(parents=True, exist_ok=True)
    marker = out / DEMO_MARKER
    marked = not marker.exists()
    if marked:
        marker.write_text("written by pe-probe demo: rerun `pe-probe demo --out` with this folder to resume it\n")
    try:
        yield
    except InputError:
        if marked:
            marker.unlink(missing_ok=True)
        for d in created:  # only the ones still empty: anything training wrote stays
            try:
                d.rmdir()
            except OSError:
                break
        raise


def _finished(run: Path, epochs: int, out: Path, flag: str = "--out") -> bool:
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
    fix = f"delete {run} (or pass --force to redo everything), or pass another {flag} than {out}"
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
        if _same_file((data.get("provenance") or {}).get("source"), run / "last.pt"):  # else the demo folder was moved or copied: redo
            return {k: v for k, v in data.items() if isinstance(v, (int, float))}
    result = analyze_source(str(run / "last.pt"), **ANALYZE_KWARGS)
    write_analysis(result, out, force=True)
    return dict(result.metrics)


def _same_file(recorded: Any, path: Path) -> bool:
    """Whether a source path recorded by an earlier analysis names ``path`` (not the same file in a folder the
    demo was moved or copied from, which the stored report would go on naming)."""
    try:
        return isinstance(recorded, str) and Path(recorded).resolve() == path.resolve()
    except (OSError, RuntimeError):
        return False


def _compared(compare_dir: Path, runs: list[Path]) -> bool:
    """Whether ``compare_dir`` holds a finished comparison of exactly these runs' checkpoints."""
    table = compare_dir / "compare.csv"
    if not (compare_dir / "index.html").exists() or not table.is_file():
        return False
    with open(table, newline="") as f:
        sources = [row.get("source") for row in csv.DictReader(f)]
    return len(sources) == len(runs) and all(any(_same_file(s, r / "last.pt") for s in sources) for r in runs)


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
    flag: str = "--out",
) -> Path:
    """Train, analyse and compare the two runs under ``out``; return the path of ``summary.md``.

    ``out`` must be new, empty or a demo folder (`check_demo_dir`); ``force`` retrains the runs there. ``flag``
    names the option that gave ``out`` in error messages."""
    from pe_probe.compare import compare

    out = check_demo_dir(out, flag)
    cfgs = {name: make_config("quick", {
        "pe.kind": "learned", "pe.init": "normal", "pe.init_std": sigma,
        "optim.epochs": epochs, "data.n_per_level": n_per_level, "device": device,
    }) for name, sigma in SIGMAS.items()}
    cfg = next(iter(cfgs.values()))
    fresh = {name: force or not _finished(out / "runs" / name, c.optim.epochs, out, flag) for name, c in cfgs.items()}
    # both runs as one ensemble: on a GPU one batched group; on the CPU side by side, one core each
    print(f"== training {', '.join(cfgs)} ({cfg.optim.epochs} epochs, as one ensemble) ==", flush=True)
    with marked_demo_dir(out):
        results = train_ensemble(list(cfgs.values()), [out / "runs" / name for name in cfgs], force=force)
    acc: dict[str, dict] = dict(zip(cfgs, results))
    ident: dict[str, dict] = {}
    for name in SIGMAS:
        print(f"== analysing {name} ==", flush=True)
        ident[name] = _analysis(out / "runs" / name, out / "analysis" / name, fresh[name])
    runs = [out / "runs" / n for n in SIGMAS]
    if any(fresh.values()) or not _compared(out / "compare", runs):
        print("== comparing ==", flush=True)
        compare([str(r) for r in runs], out / "compare", by="pe.init_std",
                analyze_kwargs=ANALYZE_KWARGS, force=True)
    path = out / "summary.md"
    path.write_text(_summary(acc, ident, cfg.optim.epochs))
    return path
