"""Compare the identifiability of many PE tables: across a sweep (``by`` a config key) or along training.

`compare` analyses every source (checkpoint, raw table, or run folder), writes one tidy row per source
to ``OUT/compare.csv``, draws the relations (metrics vs ``by``, identifiability vs generalization,
metrics over steps and a trajectory page for a single run folder) and an ``index.html``.

The output folder is written completely or not at all (`pe_probe.output.staged_dir`): everything goes
into a staging folder beside ``OUT`` that is renamed into place at the end; on any failure it is removed.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pe_probe.defaults import COMPARE_N_BOOT, COMPARE_N_PERM
from pe_probe.errors import InputError, NoPETableError, show_path

_STEP_FILE = re.compile(r"^step-(\d+)\.pt$")
TRAJECTORY_METHODS = ("cmds", "pca", "smacof", "umap")  # deterministic methods first


@dataclass
class _Source:
    path: Path
    label: str


def _is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "last.pt").is_file() or (path / "checkpoints").is_dir())


_MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")


def _is_model_folder(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in _MODEL_FILES)


def _step_checkpoints(run: Path) -> list[Path]:
    found = []
    ckpt_dir = run / "checkpoints"
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            m = _STEP_FILE.match(p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def skipped_folders(paths: Sequence[Path]) -> list[Path]:
    """Among several sources, the folders that are neither run nor model folders (a sweep's ``analysis/``, perhaps
    an earlier compare's output, caught by ``ROOT/*/``): skipped, not read."""
    if len(paths) < 2:
        return []
    return [p for p in paths if p.is_dir() and not _is_run_folder(p) and not _is_model_folder(p)]


def expand_sources(sources: Sequence[str | os.PathLike]) -> tuple[list[_Source], bool]:
    """Resolve run folders to checkpoints. Returns (sources, is_trajectory).

    A run folder becomes its ``last.pt`` (or its latest ``step-*.pt``); when it is the only source it
    becomes all its ``checkpoints/step-*.pt`` in step order (a training trajectory). Among several
    sources, folders that are neither run nor model folders (a sweep's ``analysis/`` caught by
    ``ROOT/*/``) are skipped with a line on stderr.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = [Path(s) for s in sources]
    if not paths:
        raise InputError("compare needs at least one source: give checkpoints, tables or run folders")
    for p in paths:
        if not p.exists() and str(p).startswith("builtin:"):
            raise InputError(f"compare reads checkpoints, tables and run folders on disk, not generated tables such as "
                             f"{p}: analyse it with pe-probe analyze, or measure each source's distance to a "
                             f"sinusoid with --reference sin1d or sin2d:HxW")
        if not p.exists():
            raise InputError(f"source not found: {p}; check the path")
    if len(paths) == 1 and _is_run_folder(paths[0]):
        steps = _step_checkpoints(paths[0])
        if not steps:
            raise InputError(f"run folder {paths[0]} has no checkpoints/step-*.pt; train with checkpoints, or pass last.pt")
        return [_Source(p, f"{paths[0].name}/{p.stem}") for p in steps], True
    if len(paths) > 1:
        skipped = skipped_folders(paths)
        for p in skipped:
            sys.stderr.write(f"pe-probe: skipping {p}: not a run folder (last.pt, checkpoints/) or a model folder\n")
        paths = [p for p in paths if p not in skipped]
        if not paths:
            raise InputError("no run, model or checkpoint among the sources; give run folders or checkpoint files")
    out = []
    for p in paths:
        if _is_run_folder(p):
            last = p / "last.pt"
            target = last if last.is_file() else (_step_checkpoints(p) or [None])[-1]
            if target is None:
                raise InputError(f"run folder {p} has neither last.pt nor checkpoints/step-*.pt; pass a checkpoint file")
            out.append(_Source(target, p.name))
        else:
            out.append(_Source(p, p.stem if p.is_file() else p.name))
    seen: dict[Path, str] = {}
    for given, s in zip(paths, out):  # twice the same checkpoint would count twice in every correlation
        key = s.path.resolve()
        shown = show_path(str(given))
        if key in seen:
            same = f"{shown} is given twice" if seen[key] == shown else \
                f"{shown} and {seen[key]} are the same source ({show_path(str(s.path))})"
            raise InputError(f"{same}; give each source once")
        seen[key] = shown
    labels = [s.label for s in out]
    if len(set(labels)) < len(labels):  # make labels unique with their full paths
        out = [_Source(s.path, str(s.path)) for s in out]
    return out, False


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dict -> flat dict with keys joined by dots (``{"pe": {"init_std": 0.2}}`` -> ``pe.init_std``)."""
    out: dict[str, Any] = {}
    if isinstance(config, dict):
        for k, v in config.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(flatten(v, key))
            elif isinstance(v, (list, tuple)):
                out[key] = "x".join(str(x) for x in v) if all(isinstance(x, (int, float)) for x in v) else str(list(v))
            else:
                out[key] = v
    return out


def result_row(result, source: _Source) -> dict[str, Any]:
    """One tidy row: source, label, step, the table measured (param, layer) and the loader's notes, every
    metric, config keys (dotted), eval.* checkpoint metrics."""
    prov = result.provenance or {}
    row: dict[str, Any] = {"source": str(source.path), "label": source.label, "step": prov.get("step"),
                           "param": "+".join(map(str, param)) if isinstance(param := prov.get("param"), list) else param,
                           "layer": prov.get("layer"),
                           "notes": "; ".join(prov.get("notes") or [])}
    row.update({k: float(v) for k, v in result.metrics.items()})
    for k, v in flatten(prov.get("config") or {}).items():
        row[k if k not in row else f"config.{k}"] = v
    row.update(eval_columns(prov.get("checkpoint_metrics")))
    return row


def eval_columns(metrics: Any) -> dict[str, Any]:
    """A checkpoint's own ``metrics`` as ``eval.*`` columns: numbers as floats, nested dicts dotted (as
    configs are). Anything but a dict (a list, a string: an edited checkpoint) is no metrics at all, as
    `pe-probe analyze` takes it (it only records them), rather than an error deep in the comparison."""
    out: dict[str, Any] = {}
    for k, v in flatten(metrics).items():
        try:
            out[f"eval.{k}"] = float(v)
        except (TypeError, ValueError, OverflowError):
            out[f"eval.{k}"] = v
    return out


class _Skipped:
    """Stands for a source that has no PE table (relative, RoPE or no PE: `NoPETableError`), left out of the
    comparison (an instance, not a sentinel object: it crosses Ray's process boundary); ``reason`` says why."""

    def __init__(self, reason: str = "no PE table"):
        self.reason = reason


def _analyze_one(path: Path, ground_truth, analyze_kwargs: dict):
    """Load and analyse one source with the package's public loader (`_Skipped` if it has no PE table)."""
    from pe_probe.api import analyze_source

    try:
        return analyze_source(path, ground_truth, **analyze_kwargs)
    except NoPETableError as e:
        return _Skipped(e.reason)
    except InputError as e:  # among many sources, say which one ("ground truth has 16 positions..." alone does not)
        label = show_path(path)
        if label in str(e):
            raise
        raise InputError(f"{label}: {e}", e.prog) from None


def _analyze_in_order(paths: Sequence[Path], ground_truth, analyze_kwargs: dict, backend: str,
                      address: str | None, window: int | None = None):
    """Yield the analysis result of each path, in order: here (``local``) or as Ray tasks (``ray``).

    With Ray at most ``window`` analyses are in flight (default 4x the cluster's CPUs), so memory
    stays bounded over thousands of checkpoints; the paths must be readable on every node.
    """
    if backend == "local":
        for p in paths:
            yield _analyze_one(p, ground_truth, analyze_kwargs)
        return
    if backend != "ray":
        raise InputError(f"unknown compare backend {backend!r}; choose local or ray")
    try:
        import ray
    except ImportError:
        raise InputError('the ray backend needs Ray: pip install -e ".[ray]"') from None
    started = False
    if not ray.is_initialized():
        ray.init(address=address, **({"include_dashboard": False} if address is None else {}))
        started = True
    try:
        task = ray.remote(_analyze_ray_task).options(num_cpus=1, max_retries=2)
        window = window or max(4, 4 * int(ray.cluster_resources().get("CPU", 1)))
        refs: list = []
        nxt = 0
        for i in range(len(paths)):
            while nxt < len(paths) and nxt < i + window:
                refs.append(task.remote(str(paths[nxt]), ground_truth, analyze_kwargs))
                nxt += 1
            result = ray.get(refs[i])
            refs[i] = None  # let the object store free it
            if isinstance(result, BaseException):
                raise result
            yield result
    finally:
        if started:
            ray.shutdown()


def _analyze_ray_task(path: str, ground_truth, analyze_kwargs: dict):
    """One analysis in a Ray worker, single-threaded; an InputError is returned so it keeps its type."""
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(1):
            return _analyze_one(Path(path), ground_truth, analyze_kwargs)
    except InputError as exc:
        return exc


def compare(sources: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, by: str | None = None,
            ground_truth=None, analyze_kwargs: dict | None = None, force: bool = False, progress: bool = True,
            formats: Sequence[str] = ("png", "pdf"), backend: str = "local", address: str | None = None):
    """Analyse each source and write a comparison report to ``out_dir``; return the tidy per-source frame.

    Parameters
    ----------
    sources : checkpoints, raw tables or run folders. One run folder alone means its whole trajectory.
    out_dir : output folder (written atomically; see module docstring).
    by : column to group by, usually a dotted config key such as ``pe.init_std``; means and 95% CIs
        are taken over the models sharing a value (seeds, repeats).
    ground_truth : passed to the analysis (needed for raw tables; our checkpoints carry their own).
    analyze_kwargs : extra keyword arguments of `pe_probe.api.analyze_source` (methods, n_perm, seed, ...);
        n_perm and n_boot default to `COMPARE_N_PERM` and `COMPARE_N_BOOT` (200), as on the command line.
    force : replace a non-empty folder that is not a previous pe-probe output.
    progress : show a tqdm bar (only when stderr is a terminal).
    formats : static figure formats.
    backend : ``"local"`` analyses here, one after another; ``"ray"`` runs each analysis as a Ray task
        (one CPU each) and collects the results in order (extra ``ray``; sources must be readable on
        every node).
    address : with ``backend="ray"``: ``None`` starts a local Ray instance (or uses an initialised
        one), ``"auto"`` or ``"HOST:PORT"`` joins a running cluster.

    Raises `InputError` (one line) for sources with different numbers of positions or ground truths,
    an unknown ``by`` key, or an unusable output folder.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    from pe_probe.output import check_out_dir, staged_dir

    if backend not in ("local", "ray"):
        raise InputError(f"unknown compare backend {backend!r}; choose local or ray")
    if by is not None and not str(by).strip():
        raise InputError("--by is empty; give a dotted config key such as pe.init_std, or leave --by out")
    given = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    skipped = set(skipped_folders([Path(s) for s in given]))  # never read: an earlier compare's --out may be one
    out_dir = check_out_dir(out_dir, force, inputs=[*(s for s in given if Path(s) not in skipped), ground_truth],
                            kind="compare")
    expanded, trajectory = expand_sources(sources)
    kwargs = {"n_perm": COMPARE_N_PERM, "n_boot": COMPARE_N_BOOT, **(analyze_kwargs or {})}  # as `pe-probe compare`

    rows: list[dict[str, Any]] = []
    traj_embeddings: list[np.ndarray] = []
    traj_method: str | None = None
    first = None  # (label, n, coords) of the first source
    bar = tqdm(expanded, desc="compare", unit="source", disable=not progress or not sys.stderr.isatty())
    results = _analyze_in_order([s.path for s in expanded], ground_truth, kwargs, backend, address)
    skips: list[str] = []  # said once a source is kept: if none is, the error alone says it (one line)
    for src, result in zip(bar, results):
        if isinstance(result, _Skipped):
            skips.append(f"pe-probe: skipping {src.label}: no PE table to compare ({result.reason})\n")
            if rows:
                sys.stderr.write(skips.pop())
            continue
        n, coords = result.n_positions, np.asarray(result.coords, dtype=np.float64)
        if first is None:
            first = (src.label, n, coords)
        elif n != first[1]:
            raise InputError(f"sources have different numbers of positions: {first[0]} has {first[1]}, {src.label} has {n}; "
                             f"compare only sources with the same number of positions")
        elif coords.shape != first[2].shape or not np.allclose(coords, first[2]):
            raise InputError(f"sources have different ground truths: {first[0]} and {src.label} disagree; "
                             f"compare models trained on the same positions or pass one ground truth")
        row = result_row(result, src)
        if by is not None and by not in row:
            keys = sorted(k for k in row if "." in k and not k.startswith("eval."))
            raise InputError(f"--by key {by!r} not found in {src.label}; available config keys: {', '.join(keys[:30]) or 'none'}")
        rows.append(row)
        sys.stderr.write("".join(skips))
        skips.clear()
        if trajectory:
            if traj_method is None:
                traj_method = next((m for m in TRAJECTORY_METHODS if m in result.raw_embeddings),
                                   next(iter(result.raw_embeddings), None))
            if traj_method is not None:
                traj_embeddings.append(np.asarray(result.raw_embeddings[traj_method], dtype=np.float64))
        del result
    results.close()  # stops a Ray instance started for this call (on an error: when the generator is freed)
    if not rows:
        raise InputError("no source has a PE table to compare (relative, RoPE and no-PE runs record none, and models "
                         "whose config says they have none); pass runs or models with learned or sinusoidal tables")
    frame = pd.DataFrame(rows)
    if by is not None:
        _blank_ignored_init(frame, by)
    if trajectory and frame["step"].isna().any():
        frame["step"] = frame["step"].fillna(pd.Series(range(len(frame)), dtype=float))

    with staged_dir(out_dir, force, kind="compare") as staging:  # renamed into place only if everything was written
        _write_outputs(staging, frame, by=by, trajectory=trajectory, formats=formats,
                       traj=(traj_method, traj_embeddings, first[2] if first else None))
    return frame


def _blank_ignored_init(frame, by: str) -> None:
    """By ``pe.init_std`` or ``pe.init``: blank (NaN) the value of the rows whose PE ignores it (a fixed table,
    RoPE, no PE; a zero-initialised table for init_std), which the trainer records at its default (σ 0.1) so
    that identical models get identical configs. Left as recorded, a sin2d run sat at σ 0.1 in every figure and
    correlation against σ. A note on stderr says how many rows were blanked."""
    if by not in ("pe.init_std", "pe.init") or "pe.kind" not in frame.columns:
        return
    import pandas as pd

    from trainers.pe import TABLE_INIT_KINDS, init_matters

    kinds = frame["pe.kind"].astype(str)
    inits = frame["pe.init"].astype(str) if "pe.init" in frame.columns else pd.Series("normal", index=frame.index)
    if by == "pe.init":
        ignored = ~kinds.isin(TABLE_INIT_KINDS)
    else:
        ignored = ~pd.Series([init_matters(k, i) for k, i in zip(kinds, inits)], index=frame.index, dtype=bool)
    ignored &= frame["pe.kind"].notna()  # a source with no config (a raw table) keeps what it has
    if ignored.any():
        frame[by] = frame[by].astype(object if by == "pe.init" else float).where(~ignored)
        which = ", ".join(sorted(set(kinds[ignored])))
        sys.stderr.write(f"pe-probe: note: {int(ignored.sum())} of {len(frame)} sources have a PE that ignores {by} "
                         f"({which}); their {by} is left blank in compare.csv and out of the figures and correlations "
                         f"against it\n")


def _write_outputs(folder: Path, frame, *, by: str | None, trajectory: bool, formats: Sequence[str], traj) -> None:
    from pe_probe.report.compare_figures import write_compare_figures
    from pe_probe.report.compare_index import write_compare_index

    frame.to_csv(folder / "compare.csv", index=False, float_format="%.6g")
    figures_dir = folder / "figures"
    written, corr = write_compare_figures(frame, figures_dir, by=by, trajectory=trajectory, formats=formats)
    corr.to_csv(folder / "correlations.csv", index=False, float_format="%.6g")
    method, embeddings, coords = traj
    if trajectory and method is not None and embeddings:
        from pe_probe.report.trajectory import write_trajectory

        steps = [int(s) for s in frame["step"]]
        from pe_probe.report.readings import sig3

        titles = [f"step {s}: RSA {sig3(r)}" if np.isfinite(r) else f"step {s}"
                  for s, r in zip(steps, frame.get("rsa_spearman", [np.nan] * len(steps)))]
        write_trajectory(steps, embeddings, coords, folder / "trajectory.html", method=method, titles=titles,
                         layouts_csv=figures_dir / "trajectory_layouts.csv")
    names = [p.stem for p in written if p.suffix == ".csv"]
    image = next((f for f in formats if f in ("png", "svg")), formats[0])
    write_compare_index(folder, frame, corr, names, by=by, trajectory=trajectory, image_format=image)
