"""``python -m analyses.lst.analyse --root runs/lst-sweep``: identifiability analyses of every sweep run.

For each finished run (``last.pt`` at its configured epoch) and each of its checkpoints:

* the last checkpoint gets every view: ``raw`` (each layer's table and their mean), ``q``, ``k``,
  ``qk`` and ``kernel`` (per layer and mean; `pe_probe.views`), and ``attention`` (the model's
  attention maps on 500 fresh task puzzles, per layer and mean), the attention maps compared by
  cosine similarity with the final 2D-sinusoid run of the same seed (the study's measure);
* earlier checkpoints get the trajectory set: raw mean, raw layer 0, kernel mean, kernel layer 0,
  qk layer 0 and attention mean.

Every table is measured against the 4x4 grid with ``reference="sin2d:4x4"`` (so both
``ref_shape_distance``, angular and scale-free, and ``ref_procrustes_distance``, unnormalised, are
there). PE kinds without a table (none, relative, RoPE) get the attention view only.

Results are cached per run in ``RUN/analysis.json``, one entry per checkpoint keyed by the file's
sha256 (and mtime/size, checked first): re-running analyses only new or changed checkpoints. The tidy
CSVs go to ``ROOT/analysis/``: ``runs.csv`` (one row per run: tags and final evaluation),
``evals.csv`` (every line of every metrics.jsonl), ``analyses.csv`` (one row per run x checkpoint x
view x layer) and ``layouts.csv`` (recovered 2D layouts of the last checkpoint, aligned to the grid).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from pe_probe.errors import OneLineArgumentParser, show_path, utf8_name

CACHE_FILE = "analysis.json"
CACHE_VERSION = 3  # 3: probe penalty by variance-weighted GCV, tie-aware neighbourhoods
OUT_SUBDIR = "analysis"
REFERENCE = "sin2d:4x4"
N_PUZZLES = 500
METRIC_KEYS = ("rsa_spearman", "rsa_p", "rsa_ci_low", "rsa_ci_high", "recovery_cmds_r2", "recovery_cmds_p",
               "recovery_smacof_r2", "probe_r2", "trustworthiness", "knn_overlap", "participation_ratio",
               "ref_shape_distance", "ref_procrustes_distance", "null_rsa_mean", "null_rsa_sd",
               "kernel_distance_rho", "attention_similarity")
EVAL_KEYS = ("train_acc", "test_acc", "ood_acc", "ood_acc_binary", "ood_acc_ternary", "ood_acc_quaternary",
             "train_loss")
TAG_KEYS = ("group", "pe", "sigma", "placement", "control", "seed")
# (view, layer) pairs: all checkpoints get TRAJECTORY, the last one FULL
TRAJECTORY = (("raw", "mean"), ("raw", 0), ("kernel", "mean"), ("kernel", 0), ("qk", 0), ("attention", "mean"))
TABLE_VIEWS = ("raw", "q", "k", "qk", "kernel")


# ---------------------------------------------------------------------------------------------------
# Run discovery


def run_tags(run_dir: Path) -> dict[str, Any]:
    """Tags of a run: from spec.json (written by the sweep) or, failing that, its config.json."""
    spec = run_dir / "spec.json"
    if spec.exists():
        return dict(json.loads(spec.read_text())["tags"])
    cfg = json.loads((run_dir / "config.json").read_text())
    pe = cfg["pe"]
    learned = pe["kind"] == "learned"
    return {"group": "other", "pe": pe["kind"], "sigma": pe["init_std"] if learned else None,
            "placement": "every" if pe["every_layer"] else "input", "control": "none", "seed": cfg["seed"]}


def configured_epochs(run_dir: Path) -> int:
    return int(json.loads((run_dir / "config.json").read_text())["optim"]["epochs"])


def checkpoints(run_dir: Path) -> list[Path]:
    """Step checkpoints in step order (last.pt is a copy of the last one)."""
    return sorted((run_dir / "checkpoints").glob("step-*.pt"))


def finished_runs(root: Path) -> list[Path]:
    from trainers.checkpoint import last_epoch

    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.json").exists()):
        ep = last_epoch(d)
        if ep is not None and ep >= configured_epochs(d):
            out.append(d)
    return out


def sweep_root_problem(root: Path) -> str | None:
    """Why ``root`` cannot be analysed (one line naming the fix), or None: it must be a folder holding at
    least one finished run, named in UTF-8 (`pe_probe.errors.utf8_name`: its checkpoints' paths must go into
    the tables)."""
    if not utf8_name(root):
        return (f"--root {show_path(root)} is not a UTF-8 name, which the analyses' tables cannot hold; rename the "
                f"folder, or link it under a UTF-8 name (ln -s), and pass that")
    if root.exists() and not root.is_dir():
        return f"--root {root}: is a file, not a sweep folder; give the folder python -m analyses.lst.sweep --root wrote"
    if not root.is_dir():
        return f"--root {root}: no such sweep folder; train one with python -m analyses.lst.sweep --root {root}"
    runs = finished_runs(root)
    if not runs:
        return (f"--root {root} holds no finished run yet; let python -m analyses.lst.sweep --root {root} finish "
                "(its --dry-run lists each run's state)")
    other = [(d, t) for d in runs if (t := run_task(d)) not in ("lst", None)]
    if other:
        d, task = other[0]
        return (f"--root {root} holds {len(other)} run(s) of another task ({d.name}: {task!r}); these analyses are for "
                f"Latin Square Task sweeps: point --root at one (netsim / brain runs: python -m analyses.netsim.report, "
                f"analyses.brain.report)")
    return None


def run_task(run_dir: Path) -> str | None:
    """The task a run's config.json names ('lst', 'netsim', 'brain'), or None when it cannot be read."""
    try:
        task = json.loads((run_dir / "config.json").read_text()).get("task")
    except (OSError, ValueError, AttributeError):
        return None
    return task if isinstance(task, str) else None


def check_arguments(parser: Any, root: Path, n_perm: int, n_boot: int) -> None:
    """The analysing commands' shared input check: a one-line usage error (exit 2) for a count below 1 or a
    sweep folder that cannot be analysed (`sweep_root_problem`), before anything is written."""
    if n_perm < 1 or n_boot < 1:
        parser.error("--n-perm and --n-boot must be >= 1")
    problem = sweep_root_problem(root)
    if problem:
        parser.error(problem)


def read_evals(run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    path = run_dir / "metrics.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


# ---------------------------------------------------------------------------------------------------
# One checkpoint


def file_key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"mtime_ns": st.st_mtime_ns, "size": st.st_size}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _metrics_row(res, view: str, layer: Any) -> dict[str, Any]:
    row = {"view": view, "layer": str(layer)}
    for k in METRIC_KEYS:
        v = res.metrics.get(k)
        row[k] = None if v is None or not np.isfinite(v) else float(v)
    return row


def _layout(res, view: str, layer: Any) -> dict[str, Any]:
    return {"view": view, "layer": str(layer), "coords": res.coords.tolist(),
            "cmds": res.embeddings["cmds"].tolist() if "cmds" in res.embeddings else None}


class AttentionCache:
    """Final attention maps of the 2D-sinusoid reference run per seed (computed once per process)."""

    def __init__(self, root: Path):
        self.root = root
        self._maps: dict[int, np.ndarray | None] = {}

    def reference(self, seed: int) -> np.ndarray | None:
        if seed not in self._maps:
            from trainers.attention import attention_maps

            from trainers.checkpoint import last_epoch

            ref = self.root / f"sin2d-seed{seed}"
            ok = (ref / "config.json").exists() and last_epoch(ref) == configured_epochs(ref)
            self._maps[seed] = attention_maps(ref / "last.pt", n_puzzles=N_PUZZLES, seed=0) if ok else None
        return self._maps[seed]


def analyse_checkpoint(ckpt: Path, pairs: list[tuple[str, Any]], seed: int, att: AttentionCache, *,
                       n_perm: int, n_boot: int, layouts: bool) -> dict[str, Any]:
    """Rows (and layouts) for the requested (view, layer) pairs of one checkpoint."""
    from pe_probe.analysis import analyze
    from pe_probe.api import analyze_view
    from pe_probe.errors import InputError
    from pe_probe.groundtruth import grid
    from trainers.attention import attention_maps, attention_similarity

    kw = {"n_perm": n_perm, "n_boot": n_boot, "seed": 0, "reference": REFERENCE}
    rows, lays, notes = [], [], []
    by_view: dict[str, list[Any]] = {}
    for view, layer in pairs:
        by_view.setdefault(view, []).append(layer)
    for view, layers in by_view.items():
        if view == "attention":
            maps = attention_maps(ckpt, n_puzzles=N_PUZZLES, seed=0)  # (L, N, N)
            ref = att.reference(seed)
            sims = attention_similarity(maps, ref) if ref is not None else None
            for layer in layers:
                expanded = range(len(maps)) if layer == "all" else [layer]
                for lay in expanded:
                    table = maps.mean(0) if lay == "mean" else maps[int(lay)]
                    # the maps are computed once per checkpoint, so their chance level is analyze's Gaussian one, not
                    # the CLI's reruns with random PE tables (`pe_probe.api.analyze_view`); the reports do not use it
                    res = analyze(table, grid(4, 4), **{k: v for k, v in kw.items() if k != "reference"})
                    row = _metrics_row(res, "attention", lay)
                    if sims is not None:
                        row["attention_similarity"] = float(np.nanmean(sims)) if lay == "mean" else float(sims[int(lay)])
                    rows.append(row)
                    if layouts:
                        lays.append(_layout(res, "attention", lay))
            continue
        for layer in layers:
            try:
                results = analyze_view(ckpt, view, layer=layer, **kw)
            except InputError as e:  # no table for this PE kind (none, relative, RoPE)
                notes.append(f"{view}/{layer}: {e}")
                continue
            for i, res in enumerate(results):
                lay = i if layer == "all" else layer
                rows.append(_metrics_row(res, view, lay))
                if layouts:
                    lays.append(_layout(res, view, lay))
    return {"rows": rows, "layouts": lays, "notes": notes}


def full_pairs() -> list[tuple[str, Any]]:
    return [(v, lay) for v in TABLE_VIEWS for lay in ("all", "mean")] + [("attention", "all"), ("attention", "mean")]


def analyse_run(run_dir: Path, att: AttentionCache, *, n_perm: int = 500, n_boot: int = 500,
                log=print) -> dict[str, Any]:
    """Analyse (or load from cache) every checkpoint of one run; returns the cache dict."""
    import torch

    cache_path = run_dir / CACHE_FILE
    cache: dict[str, Any] = {}
    if cache_path.exists():
        try:
            cache = json.loads(cache_path.read_text())
        except ValueError:
            cache = {}
    settings = {"version": CACHE_VERSION, "n_perm": n_perm, "n_boot": n_boot, "reference": REFERENCE,
                "n_puzzles": N_PUZZLES}
    if cache.get("settings") != settings:
        cache = {"settings": settings, "checkpoints": {}}
    tags = run_tags(run_dir)
    ckpts = checkpoints(run_dir)
    ref_sha = None
    ref_last = att.root / f"sin2d-seed{tags['seed']}" / "last.pt"
    if ref_last.exists():
        ref_sha = sha256(ref_last)
    changed = False
    for i, ck in enumerate(ckpts):
        is_last = i == len(ckpts) - 1
        rel = str(ck.relative_to(run_dir))
        key = file_key(ck)
        entry = cache["checkpoints"].get(rel)
        if entry is not None and entry.get("is_last") == is_last and entry.get("ref_sha") == ref_sha:
            if entry["file"] == key or entry["sha256"] == sha256(ck):
                continue
        payload = torch.load(ck, map_location="cpu", weights_only=True)
        t0 = time.time()
        out = analyse_checkpoint(ck, full_pairs() if is_last else list(TRAJECTORY), int(tags["seed"]), att,
                                 n_perm=n_perm, n_boot=n_boot, layouts=is_last)
        cache["checkpoints"][rel] = {
            "file": key, "sha256": sha256(ck), "is_last": is_last, "ref_sha": ref_sha,
            "epoch": int(payload["epoch"]), "step": int(payload["step"]),
            "eval": {k: float(v) for k, v in payload.get("metrics", {}).items() if isinstance(v, (int, float))},
            **out,
        }
        changed = True
        log(f"  {run_dir.name} {rel}: {len(out['rows'])} analyses in {time.time() - t0:.1f} s")
    stale = set(cache["checkpoints"]) - {str(c.relative_to(run_dir)) for c in ckpts}
    for rel in stale:
        del cache["checkpoints"][rel]
        changed = True
    if changed:
        tmp = cache_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_path)
    return cache


# ---------------------------------------------------------------------------------------------------
# Tidy tables


def collect(root: Path, *, n_perm: int = 500, n_boot: int = 500, log=print) -> dict[str, Any]:
    """Analyse every finished run under ``root`` (cached) and return tidy pandas frames."""
    import pandas as pd

    root = Path(root)
    att = AttentionCache(root)
    run_rows, eval_rows, ana_rows, lay_rows = [], [], [], []
    runs = finished_runs(root)
    # the sin2d references first, so their attention maps exist before the others need them
    runs.sort(key=lambda d: 0 if d.name.startswith("sin2d-") else 1)
    for d in runs:
        tags = run_tags(d)
        cache = analyse_run(d, att, n_perm=n_perm, n_boot=n_boot, log=log)
        evals = read_evals(d)
        for e in evals:
            eval_rows.append({"run": d.name, **tags, **{k: e.get(k) for k in ("epoch", "step", "time", *EVAL_KEYS)}})
        final = evals[-1] if evals else {}
        run_rows.append({"run": d.name, **tags, "epochs": configured_epochs(d),
                         **{k: final.get(k) for k in EVAL_KEYS}, "train_seconds": final.get("time")})
        for rel, entry in cache["checkpoints"].items():
            base = {"run": d.name, **tags, "checkpoint": rel, "epoch": entry["epoch"], "step": entry["step"],
                    "is_last": entry["is_last"], **{f"eval_{k}": entry["eval"].get(k) for k in EVAL_KEYS}}
            for r in entry["rows"]:
                ana_rows.append({**base, **r})
            for lay in entry.get("layouts", []):
                if lay["cmds"] is None:
                    continue
                for pos, (true, rec) in enumerate(zip(lay["coords"], lay["cmds"])):
                    lay_rows.append({"run": d.name, **tags, "view": lay["view"], "layer": lay["layer"],
                                     "position": pos, "true_row": true[0], "true_col": true[1],
                                     "cmds_row": rec[0], "cmds_col": rec[1]})
    frames = {"runs": pd.DataFrame(run_rows), "evals": pd.DataFrame(eval_rows),
              "analyses": pd.DataFrame(ana_rows), "layouts": pd.DataFrame(lay_rows)}
    for name in ("runs", "evals", "analyses"):
        if len(frames[name]) and "epoch" in frames[name]:
            frames[name] = frames[name].sort_values(["run", "epoch"] if name != "runs" else ["run"]).reset_index(drop=True)
    return frames


def write_tables(frames: dict[str, Any], root: Path) -> Path:
    out = Path(root) / OUT_SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    for name, df in frames.items():
        df.to_csv(out / f"{name}.csv", index=False)
    return out


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m analyses.lst.analyse", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="runs/lst-sweep", help="sweep folder, one subfolder per run (default: %(default)s)")
    p.add_argument("--n-perm", type=int, default=500, help="Mantel / PROTEST permutations per analysis (default: %(default)s)")
    p.add_argument("--n-boot", type=int, default=500, help="bootstrap resamples per RSA CI (default: %(default)s)")
    args = p.parse_args(argv)
    check_arguments(p, Path(args.root), args.n_perm, args.n_boot)
    import torch

    torch.set_num_threads(1)
    frames = collect(Path(args.root), n_perm=args.n_perm, n_boot=args.n_boot)
    out = write_tables(frames, Path(args.root))
    print(f"{len(frames['runs'])} runs, {len(frames['analyses'])} analysis rows -> {out}")
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.analyse")
