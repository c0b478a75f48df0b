"""``python -m analyses.lst.length --root runs/lst-long``: does longer training change the LST picture?

The committed LST report trains 40 epochs (the quick preset); the study trains 4,000. This report reads a
sweep of the same preset trained longer (``analyses.lst.sweep --epochs 400 --set ckpt_every=40``), analyses
its checkpoints like the main sweep (`analyses.lst.analyse`, cached per checkpoint) and compares every run
with itself: held-out accuracy and grid geometry at epoch ``--at`` (40) against the end of training. The
learning rate is constant and each epoch's shuffle is seeded by (seed, epoch), so a run's first 40 epochs
are exactly a quick-preset run of the same code: only the training length differs.

With ``--base`` (the main sweep's folder, default ``runs/lst-sweep``) it also sets each run's epoch-40 state
beside the main sweep's 40-epoch run of the same σ and seed, read from that sweep's ``analysis/*.csv``, for
the pairs whose ``config.json`` agree in all but the training length and the checkpoint and evaluation
cadence (the report names the pairs left out and why; a cross-check it skips, it says why).
Writes ``README.md``, ``table_*.csv`` and two figures, each with the CSV it was drawn from, to ``--out``:
written in a staging folder that replaces ``--out`` at the end, and only over a folder pe-probe wrote
(``--force`` otherwise).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyses.lst import setting
from analyses.lst.code_paths import MIXED, PATH_NAMES, code_paths, describe_paths
from analyses.lst.figures import OKABE, pyplot, save_figure
from analyses.lst.grid import PRESET_EPOCHS
from analyses.lst.report_cli import add_common_options, regenerate_command, write_staged
from analyses.lst.selection import TRAJ_VIEWS, view_rows
from analyses.lst.study import CHANCE
from analyses.lst.summary_stats import f3, fp, paired_ci, rsa_change, spearman
from analyses.lst.tables import md_table
from analyses.lst.verdicts import LARGE, SMALL
from pe_probe.errors import InputError, OneLineArgumentParser, show_path, utf8_name
from pe_probe.output import check_out_dir
from trainers.provenance import describe_hardware, describe_versions

SIN2D = "2D sinusoid"
DEFAULT_BASE = "runs/lst-sweep"
# config keys the cross-check does not compare: the training length, the checkpoint and evaluation cadence (a
# run's first epochs do not depend on them) and the preset's name (the values it sets are compared themselves)
CROSSCHECK_IGNORES = ("optim.epochs", "ckpt_every", "eval_every", "preset")


def arm(row: Any) -> str:
    """The run's arm: "σ = 0.1" for a learned table, "2D sinusoid" for the sin2d reference, else its PE kind."""
    if row.pe == "learned" and row.sigma is not None and np.isfinite(row.sigma):
        return f"σ = {row.sigma:g}"
    return SIN2D if row.pe == "sin2d" else str(row.pe)


def with_arms(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an ``arm`` column and its rows in arm order (σ ascending, then the references)."""
    out = df.copy()
    out["sigma"] = pd.to_numeric(out["sigma"], errors="coerce")
    out["arm"] = [arm(r) for r in out.itertuples()]
    out["_order"] = out.sigma.fillna(np.inf)
    return out.sort_values(["_order", "arm", "seed"], kind="stable").drop(columns="_order")


def arms(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df.arm))


def pct(v: float) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{100 * v:.1f}"


def seeds_text(values: pd.Series, scale: float = 100.0, digits: int = 1) -> str:
    """"93.5 (91.7, 95.4)": the mean over seeds, then each seed's value in seed order."""
    v = values.dropna()
    if v.empty:
        return "n/a"
    each = ", ".join(f"{scale * x:.{digits}f}" for x in v)
    return f"{scale * v.mean():.{digits}f} ({each})" if len(v) > 1 else f"{scale * v.iloc[0]:.{digits}f}"


def seed_range(runs: pd.DataFrame) -> str:
    """"2-4 seeds": how many seeds the arms have."""
    n = runs.groupby("arm").seed.nunique()
    lo, hi = int(n.min()), int(n.max())
    return f"{lo} seed{'s' if lo != 1 else ''}" if lo == hi else f"{lo}-{hi} seeds"


def r3(v: float) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.3f}"


def value_at(df: pd.DataFrame, epoch: int, key: str) -> pd.Series:
    """``key`` per seed at ``epoch`` (rows of one arm)."""
    return df[df.epoch == epoch].set_index("seed")[key]


# ---------------------------------------------------------------------------------------------------
# Tables


def accuracy_table(evals: pd.DataFrame, epochs: list[int], last: int) -> pd.DataFrame:
    """Per arm: held-out accuracy at each of ``epochs`` (mean over seeds, then each seed), test and train
    accuracy at ``last``, in %."""
    rows = []
    for a in arms(evals):
        d = evals[evals.arm == a]
        row = {"arm": a, "seeds": ", ".join(str(s) for s in sorted(d.seed.unique()))}
        for ep in epochs:
            row[f"held-out % at epoch {ep}"] = seeds_text(value_at(d, ep, "ood_acc"))
        row[f"test % at epoch {last}"] = seeds_text(value_at(d, last, "test_acc"))
        row[f"train % at epoch {last}"] = seeds_text(value_at(d, last, "train_acc"))
        rows.append(row)
    return pd.DataFrame(rows)


def geometry_table(ana: pd.DataFrame, first: int, last: int) -> pd.DataFrame:
    """Per view and arm: RSA with the grid at ``first`` and ``last`` (mean over seeds, then each seed), the
    runs whose Mantel p < 0.05 at each, and the mean per-run change."""
    rows = []
    for view, layer, label in TRAJ_VIEWS:
        d = view_rows(ana, view, layer, last=False)
        for a in arms(d):
            g = d[d.arm == a]
            r0, r1 = value_at(g, first, "rsa_spearman"), value_at(g, last, "rsa_spearman")
            p0, p1 = value_at(g, first, "rsa_p"), value_at(g, last, "rsa_p")
            change = (r1 - r0).dropna()
            rows.append({"view": label, "arm": a, f"RSA at epoch {first}": seeds_text(r0, 1, 3),
                         f"RSA at epoch {last}": seeds_text(r1, 1, 3),
                         "change (mean)": f"{change.mean():+.3f}" if len(change) else "n/a",
                         f"Mantel p<0.05 at {first}": f"{int((p0 < 0.05).sum())}/{len(p0.dropna())}",
                         f"Mantel p<0.05 at {last}": f"{int((p1 < 0.05).sum())}/{len(p1.dropna())}"})
    return pd.DataFrame(rows)


def config_mismatch(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> str | None:
    """Why two runs' configs make the cross-check meaningless (None when they agree in every key but
    `CROSSCHECK_IGNORES`; a key an older config.json lacks counts as the config's default)."""
    from trainers.config import TrainConfig
    from trainers.train import config_differences, flatten_config as flat

    if mine is None or theirs is None:
        return f"{'this' if mine is None else 'the main sweep'} run's config.json is missing"
    default = flat(TrainConfig().to_dict())
    diff = config_differences({**default, **flat(mine)}, {**default, **flat(theirs)}, ignore=CROSSCHECK_IGNORES)
    if not diff:
        return None
    said = ", ".join(f"{k} {here!r} here vs {there!r} there" for k, here, there in diff[:3])
    return "configs differ: " + said + (f" and {len(diff) - 3} more key(s)" if len(diff) > 3 else "")


def crosscheck_table(evals: pd.DataFrame, ana: pd.DataFrame, base: dict[str, Any], at: int,
                     configs: dict[str, dict[str, Any]] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Each run's state at epoch ``at`` beside the main sweep's ``at``-epoch run of the same arm and seed:
    held-out accuracy, the raw table's RSA (mean of layers), and the CPU attention code path of the main
    sweep's run (`analyses.lst.code_paths.code_paths`). Pairs whose configs differ (`config_mismatch`; ``configs``
    and ``base["configs"]``: run -> config.json) are left out: returns the table and one line per such pair."""
    base_runs = base.get("runs", pd.DataFrame())
    base_ana = base.get("analyses", pd.DataFrame())
    paths = base.get("paths", pd.Series(dtype=object))
    configs, base_configs = configs or {}, base.get("configs", {})
    if base_runs.empty:
        return pd.DataFrame(), []
    base_runs = with_arms(base_runs[base_runs.epochs == at])
    raw = view_rows(ana, "raw", "mean", last=False)
    base_raw = view_rows(base_ana, "raw", "mean") if not base_ana.empty else base_ana
    rows, left_out = [], []
    for r in evals[evals.epoch == at].itertuples():
        # the same kind of run: arm and seed, and group, placement and control (the main sweep also trains
        # learned tables at these sigmas with one table at the input, or other optimisers)
        b = base_runs[(base_runs.arm == r.arm) & (base_runs.seed == r.seed) & (base_runs.group == r.group)
                      & (base_runs.placement == r.placement) & (base_runs.control == r.control)]
        if b.empty:
            continue
        why = config_mismatch(configs.get(r.run), base_configs.get(b.run.iloc[0]))
        if why:
            left_out.append(f"{r.arm} seed {r.seed} (`{r.run}` vs `{b.run.iloc[0]}`): {why}")
            continue
        mine = raw[(raw.run == r.run) & (raw.epoch == at)].rsa_spearman
        theirs = base_raw[base_raw.run == b.run.iloc[0]].rsa_spearman if not base_raw.empty else pd.Series(dtype=float)
        rows.append({"arm": r.arm, "seed": r.seed, f"held-out % (this run, epoch {at})": pct(r.ood_acc),
                     f"held-out % (main sweep, {at} epochs)": pct(b.ood_acc.iloc[0]),
                     "difference (points)": f"{100 * (r.ood_acc - b.ood_acc.iloc[0]):+.1f}",
                     f"raw RSA (this run, epoch {at})": r3(mine.iloc[0]) if len(mine) else "n/a",
                     f"raw RSA (main sweep, {at} epochs)": r3(theirs.iloc[0]) if len(theirs) else "n/a",
                     "main sweep run's CPU attention": PATH_NAMES[paths.get(b.run.iloc[0], "unknown")],
                     "main sweep run": b.run.iloc[0]})
    return pd.DataFrame(rows), left_out


# ---------------------------------------------------------------------------------------------------
# Findings: plain statements, each computed from the runs


def mann_whitney_greater(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    """Exact one-sided Mann-Whitney p that ``a`` exceeds ``b``, and the smallest p these group sizes allow."""
    from scipy import stats

    a, b = a.dropna(), b.dropna()
    if a.empty or b.empty:
        return math.nan, math.nan
    p = float(stats.mannwhitneyu(a, b, alternative="greater", method="exact").pvalue)
    return p, 1.0 / math.comb(len(a) + len(b), len(b))


def large_sigma_finding(evals: pd.DataFrame, first: int, last: int) -> str:
    learned = evals[evals.pe == "learned"]
    small, large = learned[learned.sigma <= SMALL], learned[learned.sigma >= LARGE]
    if small.empty or large.empty:
        return f"Large σ: needs runs with σ ≤ {SMALL:g} and σ ≥ {LARGE:g}."
    parts = []
    for ep in (first, last):
        s, l_ = value_at(small, ep, "ood_acc"), value_at(large, ep, "ood_acc")
        parts.append(f"epoch {ep}: {pct(s.mean())}% for σ ≤ {SMALL:g} (n = {len(s)}) vs {pct(l_.mean())}% for "
                     f"σ ≥ {LARGE:g} (n = {len(l_)}), gap {100 * (s.mean() - l_.mean()):+.1f} points")
    p, floor = mann_whitney_greater(value_at(small, last, "ood_acc"), value_at(large, last, "ood_acc"))
    per_run = large.pivot_table(index=["sigma", "seed"], columns="epoch", values="ood_acc")
    big = ", ".join(f"σ = {s:g} seed {k}: {pct(r[first])}% → {pct(r[last])}%" for (s, k), r in per_run.iterrows())
    return (f"**Large σ and training length.** Held-out accuracy at {'; at '.join(parts)}. One-sided exact "
            f"Mann-Whitney p at epoch {last} = {fp(p)} (the smallest p these group sizes allow is {fp(floor)}). "
            f"Per large-σ run, epoch {first} → {last}: {big} (chance {100 * CHANCE:.0f}%).")


def small_sigma_finding(evals: pd.DataFrame, first: int, last: int, cut: float = 0.5) -> str:
    learned = evals[(evals.pe == "learned") & (evals.sigma <= cut)]
    if learned.sigma.nunique() < 2:
        return f"Small σ: needs at least two σ values ≤ {cut:g}."
    parts = []
    for ep in (first, last):
        d = learned[learned.epoch == ep]
        means = d.groupby("sigma").ood_acc.mean()
        rho, p, n = spearman(d.sigma.astype(float), d.ood_acc)
        parts.append(f"epoch {ep}: " + ", ".join(f"σ {s:g} {pct(m)}%" for s, m in means.items())
                     + f" (ρ(σ, accuracy) = {f3(rho)}, p = {fp(p)}, n = {n} runs)")
    return (f"**Is smaller σ better among σ ≤ {cut:g}?** Mean held-out accuracy at " + "; at ".join(parts) + ".")


def sinusoid_finding(evals: pd.DataFrame, last: int) -> str:
    d = evals[evals.epoch == last]
    ref = d[d.arm == SIN2D]
    learned = d[d.pe == "learned"]
    if ref.empty or learned.empty:
        return "2D sinusoid: no reference runs."
    best_sigma = learned.groupby("sigma").ood_acc.mean().idxmax()
    c = paired_ci(ref.set_index("seed").ood_acc, learned[learned.sigma == best_sigma].set_index("seed").ood_acc)
    return (f"**2D sinusoid vs the best σ at epoch {last}** (σ = {best_sigma:g}), over {c['n']} seed(s): "
            f"{pct(c['mean_a'])}% vs {pct(c['mean_b'])}%, paired difference {100 * c['diff']:+.1f} points "
            f"(descriptive with this few seeds).")


def geometry_finding(ana: pd.DataFrame, first: int, last: int) -> str:
    lines = []
    learned = ana[ana.pe == "learned"]
    for view, layer, label in TRAJ_VIEWS:
        d = view_rows(learned, view, layer, last=False)
        if d.empty:
            continue
        bands = []
        for name, sel in ((f"σ ≤ {SMALL:g}", d.sigma <= SMALL), (f"σ ≥ {LARGE:g}", d.sigma >= LARGE)):
            c = rsa_change(d[sel], first, last)
            if not c["n"]:  # no run of this band has both epochs
                continue
            bands.append(f"{name} {c['mean_b']:.3f} → {c['mean_a']:.3f} ({c['diff']:+.3f}, paired t p = {fp(c['t_p'])}, "
                         f"n = {c['n']})")
        if bands:
            lines.append(f"{label}: " + "; ".join(bands))
    if not lines:
        return "Geometry: no analyses of learned tables at both epochs."
    return (f"**Grid geometry, epoch {first} → {last}** (RSA with the grid, mean over runs; the per-run change has a "
            "paired t-test, not corrected for the views): " + ". ".join(lines) + ".")


def findings(evals: pd.DataFrame, ana: pd.DataFrame, first: int, last: int) -> list[str]:
    return [large_sigma_finding(evals, first, last), small_sigma_finding(evals, first, last),
            sinusoid_finding(evals, last), geometry_finding(ana, first, last)]


# ---------------------------------------------------------------------------------------------------
# Figures (each with the CSV it was drawn from)


def _colours(names: list[str]) -> dict[str, str]:
    return {a: ("#000000" if a == SIN2D else OKABE[i % (len(OKABE) - 1)]) for i, a in enumerate(names)}


def fig_accuracy(evals: pd.DataFrame, at: int, out: Path) -> str:
    """Held-out and training accuracy over epochs per arm: the mean over seeds, each seed faint."""
    plt = pyplot()
    colours = _colours(arms(evals))
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), sharey=True)
    for ax, key, title in zip(axes, ("ood_acc", "train_acc"), ("held-out accuracy", "training accuracy")):
        for a, g in evals.groupby("arm", sort=False):
            for _, s in g.groupby("seed"):
                ax.plot(s.epoch, s[key], color=colours[a], lw=0.5, alpha=0.35)
            m = g.groupby("epoch")[key].mean()
            ax.plot(m.index, m.values, color=colours[a], lw=1.5, label=a)
        ax.axhline(CHANCE, color="grey", lw=0.5, ls=":")
        ax.axvline(at, color="grey", lw=0.5, ls="--")
        ax.set(title=title, xlabel="epoch", ylim=(0, 1.02))
    axes[0].set_ylabel(f"accuracy (dashed: epoch {at}, the quick preset's end)")
    axes[1].legend(loc="lower right", frameon=False)
    fig.tight_layout()
    data = evals[["arm", "run", "seed", "epoch", "ood_acc", "test_acc", "train_acc"]]
    return save_figure(fig, data, out, "accuracy_over_training")


def fig_geometry(ana: pd.DataFrame, at: int, out: Path) -> str:
    """RSA with the grid over checkpoints per arm and view."""
    plt = pyplot()
    colours = _colours(arms(ana))
    fig, axes = plt.subplots(1, len(TRAJ_VIEWS), figsize=(10.5, 2.6), sharey=True)
    frames = []
    for ax, (view, layer, label) in zip(axes, TRAJ_VIEWS):
        d = view_rows(ana, view, layer, last=False)
        frames.append(d[["arm", "run", "seed", "epoch", "view", "layer", "rsa_spearman", "rsa_p"]])
        for a, g in d.groupby("arm", sort=False):
            m = g.groupby("epoch").rsa_spearman.mean()
            ax.plot(m.index, m.values, color=colours[a], lw=1.2, marker="o", ms=2, label=a)
        ax.axhline(0, color="grey", lw=0.5, ls=":")
        ax.axvline(at, color="grey", lw=0.5, ls="--")
        ax.set(title=label, xlabel="epoch", ylim=(-0.3, 1.0))
    axes[0].set_ylabel("RSA with the grid (mean over seeds)")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return save_figure(fig, pd.concat(frames, ignore_index=True), out, "geometry_over_training")


# ---------------------------------------------------------------------------------------------------
# Report


def write_report(root: Path, out: Path, frames: dict[str, pd.DataFrame], base: dict[str, Any], *, at: int,
                 cmd: str, notes: list[str] | None = None, n_perm: int = 500) -> Path:
    """README.md, the tables and the figures of the longer-training report into ``out`` (the command passes a
    staging folder); returns the README's path. ``base``: `read_base`, or {"skipped": why} without a cross-check."""
    evals, ana, runs = with_arms(frames["evals"]), with_arms(frames["analyses"]), with_arms(frames["runs"])
    last = int(runs.epochs.min())
    if at >= last or at not in set(evals.epoch) or at not in set(ana.epoch):
        raise InputError(at_error(at, last))
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.png")) + list(out.glob("*.csv")):
        old.unlink()
    marks = sorted({at, *[e for e in (100, 200) if at < e < last], last})
    cross, left_out = crosscheck_table(evals, ana, base, at, setting.run_configs(root, runs.run))
    tables = {"accuracy": accuracy_table(evals, marks, last), "geometry": geometry_table(ana, at, last),
              "crosscheck": cross}
    for name, df in tables.items():
        df.to_csv(out / f"table_{name}.csv", index=False)
    figs = {"accuracy": fig_accuracy(evals, at, out), "geometry": fig_geometry(ana, at, out)}
    secs = runs.train_seconds.dropna()
    own = code_paths(root, runs)

    L = ["# Latin Square Task: does longer training change the picture?\n",
         f"Regenerate everything in this folder with:\n\n```bash\n{cmd}\n```\n",
         "Every number below was computed by that command from the runs' `metrics.jsonl` and checkpoints. The main LST "
         f"report ([`../lst/README.md`](../lst/README.md)) trains the quick preset's {PRESET_EPOCHS['quick']} epochs; the "
         "study trains 4,000. Here the same runs "
         f"are compared at epoch {at} and at epoch {last}: the learning rate is constant and each epoch's shuffle is seeded "
         f"by (seed, epoch), so a run's first {at} epochs are exactly a {at}-epoch run of the same code.\n",
         "## Setting\n",
         f"- Runs: `{root}`, {len(runs)} runs: " + ", ".join(f"{a} ({(runs.arm == a).sum()})" for a in arms(runs))
         + f"; seeds {', '.join(str(s) for s in sorted(runs.seed.unique()))}; {last} epochs; checkpoints every "
         f"{int(np.diff(sorted(ana.epoch.unique())).min())} epochs.",
         f"- Hardware (from each run's `provenance.jsonl`): {setting.hardware(root, runs.run)}."
         + (" Training time per run: median {} (range {}; {}).".format(
             *setting.time_spread(secs), setting.parallelism(root) or "how many runs trained at once is not recorded")
            if len(secs) else ""),
         "- Trainer code (git commit per run, from `provenance.jsonl`): "
         + describe_versions([root / r for r in runs.run]) + f"; CPU attention code path: {describe_paths(own)}.",
         "- Analyses as in the main report (`analyses.lst.analyse`): the views followed at every checkpoint (raw table, "
         f"qk view, attention kernel, attention maps on 500 fresh puzzles), {n_perm} permutations. The σ bands are the main "
         f"report's: small σ ≤ {SMALL:g}, large σ ≥ {LARGE:g}. With {seed_range(runs)} per arm, every comparison "
         "here is descriptive except the exact tests it names: read the per-seed values.",
         *[f"- Note: {n}" for n in notes or []],
         "", "## Findings\n"]
    L += [f"- {f}" for f in findings(evals, ana, at, last)]
    L += ["", "## Held-out accuracy over training\n",
          "Mean over seeds, then each seed's value in seed order, in %. Chance is 25%.\n",
          md_table(tables["accuracy"]),
          f"![Held-out and training accuracy over epochs]({figs['accuracy']}.png)\n",
          f"_Held-out and training accuracy over epochs: the mean over seeds (thick), each seed (faint); dashed: epoch "
          f"{at}_ (data: [`{figs['accuracy']}.csv`]({figs['accuracy']}.csv))\n",
          "## Grid geometry over training\n",
          "RSA (Spearman) between the table's (or view's) distances and the grid's: mean over seeds, then each seed. "
          "The 2D sinusoid's raw table is fixed, so its raw RSA does not move.\n",
          md_table(tables["geometry"]),
          f"![RSA with the grid over checkpoints]({figs['geometry']}.png)\n",
          f"_RSA with the grid over checkpoints, per view (mean over seeds)_ (data: [`{figs['geometry']}.csv`]"
          f"({figs['geometry']}.csv))\n"]
    L += crosscheck_section(tables["crosscheck"], left_out, base, at, describe_paths(own))
    L += ["## Files\n",
          "`table_accuracy.csv`, `table_geometry.csv`, `table_crosscheck.csv`: the tables above; each figure with the CSV "
          f"it was drawn from. Tidy per-run tables: `{root}/analysis/`.\n",
          f"_Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._\n"]
    path = out / "README.md"
    path.write_text("\n".join(L))
    return path


def crosscheck_section(table: pd.DataFrame, left_out: list[str], base: dict[str, Any], at: int, own_paths: str) -> list[str]:
    """The cross-check's lines: the table, the pairs left out and why, or why there is no cross-check."""
    L = [f"## Cross-check: epoch {at} of these runs vs the main sweep's {at}-epoch runs\n"]
    if "runs" not in base:
        return L + [f"Skipped: {base.get('skipped', 'no main sweep was given')}.\n"]
    if not table.empty:
        diff = table["difference (points)"].astype(float).abs()
        L += ["Same σ, seed and config (all but the training length and the checkpoint and evaluation cadence, from the "
              "runs' `config.json`). Where the two runs' CPU attention code paths differ (last column; the runs here: "
              f"{own_paths}), they differ in floating-point rounding only ({MIXED}), so they need not match bit "
              "for bit: `reports/benchmarks/precision.md` measures how far rounding alone moves one run. Here: median "
              f"absolute difference {np.median(diff):.1f} points, largest {diff.max():.1f}.\n",
              main_sweep_line(base, list(table["main sweep run"])),
              md_table(table)]
    elif not left_out:
        L.append(f"No run of the main sweep `{base.get('root')}` trained {at} epochs with the arm, seed, group, placement "
                 "and control of these runs.\n")
    if left_out:
        L.append(f"Left out: {len(left_out)} pair{'s' if len(left_out) != 1 else ''} of runs whose configs do not match "
                 "in all but the training length and the checkpoint and evaluation cadence (or cannot be read), where a "
                 "difference would not be rounding alone:\n")
        L += [f"- {w}" for w in left_out] + [""]
    return L


def main_sweep_line(base: dict[str, Any], paired: list[str]) -> str:
    """Which main sweep the cross-check read, as it is on disk now: its folder, and the commits and machines that
    trained the paired runs (`trainers.provenance`). A main sweep retrained later (another machine or commit) holds
    other single-run numbers, so a committed cross-check names what it was made against."""
    root = base.get("root")
    if root is None:
        return "The main sweep's folder is not recorded.\n"
    dirs = [Path(root) / str(r) for r in dict.fromkeys(paired)]
    return (f"The main sweep: `{root}`; its {len(dirs)} paired runs were trained by (git commit per run, from "
            f"`provenance.jsonl`) {describe_versions(dirs)}, on: {describe_hardware(dirs)}.\n")


def at_error(at: int, last: int) -> str:
    """Why ``--at`` cannot be compared with the runs' last epoch ``last``, naming the fix."""
    if at >= last:
        return f"--at {at}: --at must be before the runs' last epoch ({last}); choose a smaller --at"
    return (f"--at {at}: the runs need an evaluation and a checkpoint at epoch {at} and must train past it "
            f"(they end at {last}); train with --set ckpt_every={at}, or choose another --at")


def at_problem(root: Path, at: int) -> str | None:
    """`at_error` when no finished run's config.json checkpoints at epoch ``at`` before its end (checked before
    any work; None when the configs cannot tell, and `write_report` checks the data)."""
    from analyses.lst.analyse import finished_runs

    try:
        cfgs = [json.loads((d / "config.json").read_text()) for d in finished_runs(root)]
        last, every = min(int(c["optim"]["epochs"]) for c in cfgs), [int(c["ckpt_every"]) for c in cfgs]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return at_error(at, last) if at >= last or not any(at % e == 0 for e in every) else None


# the columns of the main sweep's tidy tables that the cross-check reads
BASE_COLUMNS = {"runs.csv": ("run", "epochs", "pe", "sigma", "seed", "group", "placement", "control", "ood_acc"),
                "analyses.csv": ("run", "view", "layer", "is_last", "rsa_spearman")}


def base_problem(root: Path) -> str | None:
    """Why ``root`` cannot serve as the main sweep of the cross-check (its ``analysis/runs.csv`` and
    ``analyses.csv`` must be CSV tables with `BASE_COLUMNS`; the report names it, so in UTF-8), or None."""
    if not utf8_name(root):
        return "is not a UTF-8 name, which the report cannot hold; rename it, or link it under a UTF-8 name (ln -s)"
    if root.exists() and not root.is_dir():
        return "is a file, not a sweep folder"
    if not root.is_dir():
        return "does not exist"
    fix = f"(write them with python -m analyses.lst.analyse --root {root})"
    if not (root / "analysis" / "runs.csv").is_file() or not (root / "analysis" / "analyses.csv").is_file():
        return f"has no analysis/runs.csv and analyses.csv {fix}"
    for name, needed in BASE_COLUMNS.items():
        try:
            columns = pd.read_csv(root / "analysis" / name, low_memory=False).columns
        except (OSError, ValueError) as e:  # empty (EmptyDataError) or not a CSV table
            return f"has an analysis/{name} that cannot be read ({str(e).splitlines()[0] if str(e) else 'empty'}) {fix}"
        lacking = [c for c in needed if c not in columns]
        if lacking:
            return f"has an analysis/{name} without the column(s) {', '.join(lacking)} {fix}"
    return None


def read_base(root: Path | None) -> dict[str, Any]:
    """The main sweep's tidy tables (``ROOT/analysis/runs.csv`` and ``analyses.csv``), each run's CPU attention
    code path (``paths``) and config.json (``configs``), or {} without them."""
    if root is None:
        return {}
    folder = root / "analysis"
    if not (folder / "runs.csv").is_file() or not (folder / "analyses.csv").is_file():
        return {}
    runs = pd.read_csv(folder / "runs.csv")
    return {"runs": runs, "analyses": pd.read_csv(folder / "analyses.csv", low_memory=False),
            "paths": code_paths(root, runs), "configs": setting.run_configs(root, runs.run), "root": root}


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m analyses.lst.length", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="runs/lst-long", help="the longer sweep's folder (default: %(default)s)")
    p.add_argument("--base", default=None,
                   help=f"the main sweep's folder, for the cross-check ('' to skip; default: {DEFAULT_BASE}, skipped "
                        "with a word in the report when it is missing)")
    p.add_argument("--out", default="reports/lst-long", help="report folder (default: %(default)s)")
    p.add_argument("--at", type=int, default=40, help="the earlier epoch compared with the end (default: %(default)s)")
    add_common_options(p, "Mantel permutations per analysis")
    args = p.parse_args(argv)
    from analyses.lst.analyse import check_arguments, collect, write_tables

    if args.at < 1:
        p.error(f"--at must be >= 1, got {args.at}")
    root = Path(args.root)
    check_arguments(p, root, args.n_perm, args.n_boot)
    base_dir = Path(args.base if args.base is not None else DEFAULT_BASE) if args.base != "" else None
    why = base_problem(base_dir) if base_dir is not None else None
    if why and args.base is not None:  # named by the user: a usage error
        p.error(f"--base {show_path(args.base)} {why}; pass the main sweep's folder, or --base '' to skip the cross-check")
    try:
        check_out_dir(args.out, args.force, inputs=[root] + ([base_dir] if base_dir is not None else []),
                      kind="lst-length")
    except InputError as e:
        p.error(str(e))
    problem = at_problem(root, args.at)
    if problem:
        p.error(problem)
    import torch

    torch.set_num_threads(1)
    frames = collect(root, n_perm=args.n_perm, n_boot=args.n_boot)
    write_tables(frames, root)
    cmd = regenerate_command("analyses.lst.length", [("--root", args.root)]
                             + ([("--base", args.base)] if args.base is not None else [])
                             + [("--out", args.out)] + ([("--at", str(args.at))] if args.at != 40 else []), args)
    if base_dir is None:
        base = {"skipped": "--base '' was given"}
    elif why:
        base = {"skipped": f"the main sweep's folder {base_dir} (the default --base) {why}"}
    else:
        base = read_base(base_dir)
    write_staged(p, args.out, args.force, "lst-length", lambda stage: write_report(
        root, stage, base=base, frames=frames, at=args.at, cmd=cmd, notes=args.note, n_perm=args.n_perm))
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.length")
