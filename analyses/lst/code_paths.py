"""Which CPU attention code path trained each LST run: torch's fused kernel or matmul-softmax.

Commit a635489 changed the CPU attention of the trainer (same maths, other floating-point rounding); the
reports say which runs trained on which side of it, inferred from each run's ``train.log``, and name the
seed-paired comparisons whose runs mix the two.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.lst.selection import select_runs

# Commit a635489 replaced torch's fused CPU attention kernel by plain matmul-softmax attention (same maths, other
# floating-point rounding). Runs without provenance.jsonl are attributed from their train.log: every session
# started after that commit -> matmul-softmax; every session finished (start + training time) before it -> fused.
ATTENTION_SWITCH = ("a635489", "2026-11-30 03:30:55")
PATH_NAMES = {"fused": "torch's fused kernel", "matmul": "matmul-softmax", "unknown": "not determined"}
# how the two paths differ, as the reports say it
MIXED = "same maths, other floating-point rounding"


def _log_starts(log: Path) -> list[pd.Timestamp]:
    """The session start times (``# YYYY-mm-dd HH:MM:SS ...`` lines) in a run's train.log."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("# ") and len(line) >= 21:
            t = pd.to_datetime(line[2:21], format="%Y-%m-%d %H:%M:%S", errors="coerce")
            if not pd.isna(t):
                out.append(t)
    return out


def code_paths(root: Path, runs: pd.DataFrame, switch: str = ATTENTION_SWITCH[1]) -> pd.Series:
    """run -> 'fused' / 'matmul' / 'unknown', from the session start times in RUN/train.log (the trainer writes
    them in the machine's local time, compared as they are with ``switch``) and the run's training seconds."""
    t_switch = pd.Timestamp(switch)
    out = {}
    for r in runs.itertuples():
        log = Path(root) / str(r.run) / "train.log"
        starts = _log_starts(log) if log.exists() else []
        secs = getattr(r, "train_seconds", math.nan)
        if starts and min(starts) > t_switch:
            out[r.run] = "matmul"
        elif starts and secs is not None and np.isfinite(secs) and max(starts) + pd.Timedelta(seconds=float(secs)) < t_switch:
            out[r.run] = "fused"
        else:
            out[r.run] = "unknown"
    return pd.Series(out, dtype=object)


def describe_paths(paths: pd.Series) -> str:
    """'torch's fused kernel: 57 runs (finished before a635489 ...); matmul-softmax: 26 runs (...)'."""
    if paths is None or paths.empty:
        return "no runs"
    what = {"fused": f"finished before commit {ATTENTION_SWITCH[0]}", "matmul": f"started after commit {ATTENTION_SWITCH[0]}",
            "unknown": "train.log missing or straddling the commit"}
    counts = paths.value_counts()
    return "; ".join(f"{PATH_NAMES[k]}: {counts[k]} run{'s' if counts[k] != 1 else ''} ({what[k]})"
                     for k in ("fused", "matmul", "unknown") if k in counts)


def pair_paths(runs: pd.DataFrame, paths: pd.Series | None, sel_a: dict, sel_b: dict, all_paths: bool = False,
               names: tuple[str, str] = ("A", "B")) -> str:
    """'A: seed 0 torch's fused kernel, seeds 1, 2 matmul-softmax; B: all torch's fused kernel' when the runs of a
    seed-paired comparison used both code paths; otherwise '' (or, with ``all_paths``, the one path's name)."""
    if paths is None or paths.empty:
        return ""
    a, b = select_runs(runs, **sel_a), select_runs(runs, **sel_b)
    seeds = set(a.seed) & set(b.seed)
    a, b = a[a.seed.isin(seeds)], b[b.seed.isin(seeds)]
    every = [paths.get(r, "unknown") for r in list(a.run) + list(b.run)]
    if not every:
        return ""
    if len(set(every)) == 1:
        return f"{PATH_NAMES[every[0]]} (all)" if all_paths else ""
    sides = []
    for name, d in zip(names, (a, b)):
        d = d.assign(path=[paths.get(r, "unknown") for r in d.run])
        if d.path.nunique() == 1:
            sides.append(f"{name}: all {PATH_NAMES[d.path.iloc[0]]}")
            continue
        per = []
        for path, g in sorted(d.groupby("path"), key=lambda kv: kv[1].seed.min()):
            ss = sorted(int(x) for x in g.seed)
            per.append(f"seed{'s' if len(ss) > 1 else ''} {', '.join(map(str, ss))} {PATH_NAMES[path]}")
        sides.append(f"{name}: " + ", ".join(per))
    return "; ".join(sides)

