"""The LST reports' setting lines, read from what the sweep recorded (never from the machine writing the report).

`run_configs` reads each run's ``config.json``; `heldout_text` and `paper_note` describe the data and the
preset from them, `model_line` the model and the optimisers; `parallelism` reads ``ROOT/sweep.log``;
`hardware` summarises each run's ``provenance.jsonl``. Where the runs differ, the values are listed with
their counts; where nothing was recorded, the text says so.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from analyses.lst.grid import SGD_LR_ORIGIN
from analyses.lst.selection import sigma_runs
from pe_probe.errors import InputError
from trainers.provenance import counted, describe_hardware

# the sweep's call summary in sweep.log (`analyses.lst.sweep`) and the ensemble backend's start line
_CALL = re.compile(r"sweep \S+: \d+ runs, \d+ finished, (\d+) to train \((?:(\d+) workers|(ray))\)")
_ENSEMBLE = "as batched ensembles"


def run_configs(root: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """run -> its ``config.json`` (runs without a readable one are left out)."""
    out = {}
    for name in names:
        try:
            out[str(name)] = json.loads((Path(root) / str(name) / "config.json").read_text())
        except (OSError, ValueError):
            continue
    return out


def dotted(cfg: dict[str, Any], key: str) -> Any:
    """``cfg["a"]["b"]`` for the key "a.b" (None where missing)."""
    for part in key.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def heldout_text(configs: dict[str, dict[str, Any]], n_levels: int, study_n: int) -> str:
    """The held-out set the runs used (from their data config): its size and the Jaccard filter."""
    if not configs:
        return "not recorded (no run has a config.json)"
    kinds: Counter = Counter()
    for c in configs.values():
        per, jac, path = (dotted(c, f"data.{k}") for k in ("n_ood_per_level", "min_jaccard", "ood_puzzles"))
        what = (f"the puzzles of `{path}`" if path else f"{n_levels * per} generated puzzles ({per} per level)"
                if isinstance(per, int) else "generated puzzles (how many is not recorded)")
        far = ("the distance filter is not recorded" if not isinstance(jac, (int, float)) else
               f"every training puzzle at Jaccard distance ≥ {jac:g} from them" if jac > 0 else
               "no distance filter between training and held-out puzzles")
        kinds[f"{what}, {far}"] += 1
    text = counted(kinds, len(configs)) if len(kinds) > 1 else next(iter(kinds))
    if not any(dotted(c, "data.ood_puzzles") for c in configs.values()):
        text += f" (the study's {study_n} human-study puzzles are not available here)"
    return text


def read_grid(root: Path,
              fix: str = "the report then says the plan is not recorded), or restore it") -> dict[str, Any] | None:
    """ROOT/grid.json as the sweep wrote it, or None without one; a one-line `InputError` for one it did not
    (``fix``: the end of its advice, after "move it away (")."""
    path = Path(root) / "grid.json"
    if not path.exists():
        return None
    try:
        grid = json.loads(path.read_text())
    except (OSError, ValueError):
        grid = None
    if not isinstance(grid, dict) or not isinstance(grid.get("runs", []), list):
        raise InputError(f"{path} is not a grid.json the sweep wrote; move it away ({fix}")
    return grid


def sweep_text(grid: dict[str, Any] | None, done: list[str], configs: dict[str, dict[str, Any]]) -> str:
    """"preset `quick` (4 of 6 planned runs finished; missing: ...)": planned are ``grid.json``'s runs and any finished
    run not in it; without a grid (None) the plan is not recorded and the preset comes from the runs' configs."""
    if grid is None:
        presets = Counter(str(c.get("preset")) for c in configs.values() if c.get("preset"))
        preset = f"preset `{counted(presets, len(configs))}`" if presets else "preset not recorded"
        return (f"{preset} ({len(done)} finished run{'s' if len(done) != 1 else ''}; the plan is not recorded "
                "(no grid.json))")
    planned = list(dict.fromkeys([str(r.get("name")) for r in grid.get("runs", []) if isinstance(r, dict)] + done))
    missing = [n for n in planned if n not in set(done)]
    return (f"preset `{grid.get('preset') or 'not recorded'}` ({len(done)} of {len(planned)} planned runs finished"
            + (f"; missing: {', '.join(missing)}" if missing else "") + ")")


def paper_note(grid_preset: str | None, configs: dict[str, dict[str, Any]], paper: dict[str, Any], seeds: int) -> str:
    """A sentence saying the paper preset was not run, when the sweep's preset is known and is not it; else ''."""
    presets = {p for g in [grid_preset, *(c.get("preset") for c in configs.values())] if g for p in str(g).split(",")}
    if not presets or "paper" in presets:
        return ""
    return (f" The paper preset (d_model {paper['model.d_model']}, lr {paper['optim.lr']:g}, {paper['optim.epochs']:,} "
            f"epochs, {seeds} seeds) is meant for a GPU and was not run for this sweep.")


def parallelism(root: Path) -> str | None:
    """How the sweep's calls that trained runs ran them side by side, from ``ROOT/sweep.log``; None if not recorded."""
    log = Path(root) / "sweep.log"
    if not log.is_file():
        return None
    calls: list[list[Any]] = []  # [runs to train, workers, ray, ensemble]
    for line in log.read_text(errors="replace").splitlines():
        m = _CALL.search(line)
        if m:
            calls.append([int(m[1]), m[2], bool(m[3]), False])
        elif calls and _ENSEMBLE in line:
            calls[-1][3] = True
    kinds = Counter("on Ray, as many at once as the cluster allowed" if ray else
                    f"as batched ensembles on {w} worker thread{'s' if w != '1' else ''}" if ens else
                    f"up to {w} run{'s' if w != '1' else ''} at a time"
                    for todo, w, ray, ens in calls if todo > 0)
    if not kinds:
        return None
    if len(kinds) == 1:
        return f"trained {next(iter(kinds))}, from sweep.log"
    return "trained " + ", ".join(f"{k} in {c} sweep call{'s' if c != 1 else ''}" for k, c in kinds.items()) + ", from sweep.log"


def hardware(root: Path, names: Iterable[str]) -> str:
    """What trained the runs ``root/name`` (`trainers.provenance.describe_hardware`)."""
    return describe_hardware([Path(root) / str(n) for n in names])


def model_line(configs: dict[str, dict[str, Any]], runs: pd.DataFrame) -> str:
    """The σ-grid runs' model and optimiser, and the optimiser controls', from the runs' configs (`run_configs`)."""
    names = list(sigma_runs(runs).run) if not runs.empty else []
    if not names or names[0] not in configs:
        return "(config not available)."
    c = configs[names[0]]
    m, o = c["model"], c["optim"]
    return (f"{m['n_layers']} layers, {m['n_heads']} head(s), d_model {m['d_model']}, MLP {int(m['d_model'] * m['mlp_ratio'])}, "
            f"{m['norm']}-LN, {o['name']} lr {o['lr']:g}, batch {o['batch_size']}, {o['epochs']} epochs, a separate learned PE "
            f"table at every layer's input (as the companion code) unless marked *input only*"
            + "".join(f"; {text}" for text in control_optimisers(configs, runs)) + ".")


def control_optimisers(configs: dict[str, dict[str, Any]], runs: pd.DataFrame) -> list[str]:
    """One phrase per optimiser control that ran ("sgd controls: SGD lr 0.01, momentum 0.9"), from the first
    such run's config (`run_configs`); the SGD learning rate's origin from `analyses.lst.grid`."""
    if runs.empty or "control" not in runs:
        return []
    out = []
    for control, group in runs[runs.group == "control"].groupby("control", sort=True):
        name = str(group.run.iloc[0])
        if name not in configs:
            continue
        o = configs[name]["optim"]
        sgd = o["name"] == "sgd"
        parts = [f"{'SGD' if sgd else 'AdamW' if o['name'] == 'adamw' else o['name']} lr {o['lr']:g}"]
        if sgd and o.get("momentum"):  # AdamW configs carry the unused default too
            parts.append(f"momentum {o['momentum']:g}")
        if o.get("weight_decay"):
            parts.append(f"weight decay {o['weight_decay']:g}")
        origin = f" ({SGD_LR_ORIGIN})" if sgd else ""
        out.append(f"{control} controls: {', '.join(parts)}{origin}")
    return out


def seconds(x: float) -> str:
    """Seconds as the Setting prints them: whole, one decimal under 10 s (a tiny sweep's runs train in under a
    second, which whole seconds would print as 0)."""
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def time_spread(secs: pd.Series) -> tuple[str, str]:
    """(median, range) of runs' training times with their unit: minutes when the median run took 10 minutes or
    more ("18 min", "17-23 min"), else seconds ("107 s", "100-144 s"; "0.5 s", "0.4-0.6 s")."""
    if secs.median() >= 600:
        return f"{secs.median() / 60:.0f} min", f"{secs.min() / 60:.0f}-{secs.max() / 60:.0f} min"
    return f"{seconds(secs.median())} s", f"{seconds(secs.min())}-{seconds(secs.max())} s"
