"""Which rows of a sweep's tidy frames (`analyses.lst.analyse.collect`) a LST table, figure or verdict reads.

Runs are picked by their tags (group, σ, PE, control, seed); analysis rows by view and layer, at the last
checkpoint unless asked otherwise. The views the report shows are listed here so that every part uses the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# (view, layer) pairs shown in the identifiability figures, with labels
VIEWS = (("raw", "mean", "raw table (mean of layers)"), ("raw", "0", "raw table, layer 0"),
         ("q", "0", "q view, layer 0"), ("k", "0", "k view, layer 0"), ("qk", "0", "qk view, layer 0"),
         ("kernel", "mean", "attention kernel (mean)"), ("attention", "mean", "attention maps (mean)"))
# (view, layer) pairs followed over training (the trajectory table and the answer to "later in training?")
TRAJ_VIEWS = (("raw", "mean", "raw table (mean of layers)"), ("raw", "0", "raw table, layer 0"),
              ("qk", "0", "qk view, layer 0"), ("kernel", "mean", "attention kernel"), ("attention", "mean", "attention maps"))


def sigma_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the σ grid (group "sigma")."""
    return runs[runs.group == "sigma"].copy()


def label_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """A human label per run for the PE-type / control tables."""
    def lab(r):
        if r.group == "sigma":
            return f"learned N(0,{r.sigma:g}²), every layer"
        if r.group == "placement":
            return f"learned N(0,{r.sigma:g}²), input only"
        if r.group == "control":
            kind = "AdamW wd 0.1" if str(r.control).startswith("wd") else "SGD momentum 0.9"
            return f"learned N(0,{r.sigma:g}²), {kind}"
        return {"learned-uniform": "learned uniform (std 0.1)"}.get(r.pe, r.pe)
    out = runs.copy()
    out["label"] = [lab(r) for r in out.itertuples()]
    return out


def view_rows(ana: pd.DataFrame, view: str, layer: str, last: bool = True) -> pd.DataFrame:
    """The analysis rows of one (view, layer); ``last``: the last checkpoint of each run only."""
    sel = (ana.view == view) & (ana.layer.astype(str) == layer)
    if last:
        sel &= ana.is_last.astype(bool)
    return ana[sel]


def select_runs(runs: pd.DataFrame, **sel: Any) -> pd.DataFrame:
    """The runs whose tags equal ``sel`` (floats compared with `np.isclose`); none when a tag is not a column."""
    d = runs
    for k, v in sel.items():
        if k not in d:
            return d.iloc[0:0]
        d = d[np.isclose(d[k].astype(float), v)] if isinstance(v, float) else d[d[k] == v]
    return d


def ood_by_seed(runs: pd.DataFrame, **sel: Any) -> pd.Series:
    """Held-out accuracy of the runs ``select_runs`` picks, indexed by seed (for seed-paired comparisons)."""
    return select_runs(runs, **sel).set_index("seed").ood_acc
