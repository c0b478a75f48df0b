"""Shared machinery of the netsim and brain reports: a small resumable sigma sweep, PE analysis, tables.

`run_sweep` trains every (PE, sigma, seed) condition that has no finished run yet (runs resume from
``last.pt``), `analyse_sweep` measures every per-layer PE table of each run against the ground truth with
`pe_probe.analysis.analyze` (the layer-0 table's metrics are the headline; `layer_summary` and
`layer_levels` cover every layer), and `summarise` gives the mean and a 95% t-interval over seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from pe_probe.errors import InputError, OneLineArgumentParser, first_line, show_path, utf8_name
from pe_probe.report.style import OKABE_ITO

if TYPE_CHECKING:  # trainers imports torch: loaded where a function needs it
    from trainers.train import RunDirRefused


@dataclass(frozen=True)
class Scale:
    """One size of a report: the trainer preset, the seeds, where runs and the report go."""

    name: str
    preset: str
    seeds: tuple[int, ...]
    runs: str  # under runs/
    out: str  # under reports/
    cost: str  # how long a regeneration from nothing takes, for the README


@dataclass(frozen=True)
class Plan:
    """One report invocation: its scale, run and report folders, and how its README names them."""

    scale: Scale
    runs: Path
    out: Path
    command: str  # the command line that reproduces the report (`regenerate_command`)
    runs_text: str  # --runs as the README shows it


def scale_parser(task: str, doc: str | None, scales: dict[str, Scale], scale_help: str) -> OneLineArgumentParser:
    """The command line of ``python -m analyses.<task>.report`` (one-line usage errors, exit 2): the options
    every report with scales takes, --scale, --workers, --runs, --out, --force and --no-train."""
    p = OneLineArgumentParser(prog=f"python -m analyses.{task}.report", description=doc,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="pilot", choices=list(scales), help=scale_help)
    p.add_argument("--workers", type=int, default=1, help="runs trained at a time, one CPU core each (default 1)")
    p.add_argument("--runs", default=None, help=f"run folders (missing or unfinished runs are trained; default "
                   f"runs/report-{task}[-standard])")
    p.add_argument("--out", default=None, help=f"report folder (default reports/{task}[-standard]); written "
                   "completely or not at all")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder not written by pe-probe")
    p.add_argument("--no-train", action="store_true", help="only rebuild the report from finished runs: refuse, "
                   "before writing anything, if any run of the sweep is missing or unfinished in --runs")
    return p


def _same_path(a: Path, b: Path) -> bool:
    """Whether two paths name the same place (existing or not)."""
    return a.resolve() == b.resolve()


def resolve_scale(p: Any, args: Any, scales: dict[str, Scale], root: Path, task: str | None = None) -> Plan:
    """`make_plan`, checked: a bad --workers, a --runs that is a file, or an --out that may not be written
    (`check_out_dir`; it may never be or hold --runs, trained or not) is a usage error of ``p`` (one line, exit 2), raised
    before anything is written."""
    from pe_probe.output import check_out_dir

    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    plan = make_plan(p, args, scales, root)
    runs, out = plan.runs, plan.out
    if not utf8_name(runs):  # its checkpoints' paths go into the analyses' tables
        p.error(f"--runs {show_path(runs)} is not a UTF-8 name; choose a name in UTF-8")
    file = next((f for f in (runs, *runs.parents) if f.exists() and not f.is_dir()), None)
    if file is not None:
        where = f"--runs {runs}" + ("" if file == runs else f": {file}")
        p.error(f"{where} is a file, not a folder; pass the folder that holds (or will hold) the run folders")
    try:
        check_out_dir(out, args.force, created_inputs=[runs], kind=f"{task}-report" if task else None)
    except InputError as e:
        p.error(str(e))
    return plan


def make_plan(p: Any, args: Any, scales: dict[str, Scale], root: Path) -> Plan:
    """The chosen scale, its run and report folders (--runs / --out override the scale's, under ``root``) and
    how the README names them (`regenerate_command`); checks nothing."""
    scale = scales[args.scale]
    default_runs, default_out = root / "runs" / scale.runs, root / "reports" / scale.out
    runs = Path(args.runs) if args.runs else default_runs
    out = Path(args.out) if args.out else default_out
    runs_text = f"runs/{scale.runs}" if _same_path(runs, default_runs) else str(runs)
    return Plan(scale, runs, out, regenerate_command(p, args, default_runs, default_out), runs_text)


def regenerate_command(p: Any, args: Any, default_runs: Path, default_out: Path) -> str:
    """The command line that reproduces a report made with ``args`` (parsed by ``p``): ``--scale`` and
    ``--workers`` unless at their defaults, ``--runs`` / ``--out`` as given unless they name the default
    folders; shell-quoted."""
    parts = ["python", "-m", p.prog.removeprefix("python -m ")]
    for opt in ("scale", "workers"):
        if getattr(args, opt) != p.get_default(opt):
            parts += [f"--{opt}", str(getattr(args, opt))]
    for opt, default in (("runs", default_runs), ("out", default_out)):
        given = getattr(args, opt)
        if given and not _same_path(Path(given), default):
            parts += [f"--{opt}", given]
    return shlex.join(parts)


def regenerate_lines(plan: Plan, needs: str = "") -> list[str]:
    """The README's "Regenerate" paragraph and command block (``needs``: what to install first, if anything)."""
    return [f"Regenerate ({needs}trains missing runs into `{plan.runs_text}/`, resumable, then analyses; "
            f"{plan.scale.cost} when nothing is trained yet, under a minute of analyses when the runs exist):", "",
            "```bash", plan.command, "```", ""]


def machine_lines(df: pd.DataFrame) -> list[str]:
    """The README's "Machine and code" paragraph: what trained the runs (``df["run"]``: run folders) and at which
    commit, from their ``provenance.jsonl``. One run's MSEs move with floating-point rounding, which differs between
    CPU kernel sets (AVX2, AVX-512) and devices, so a report says where its numbers came from."""
    from trainers.provenance import describe_hardware, describe_versions

    runs = [Path(r) for r in df["run"]]
    return [f"**Machine and code** (from each run's `provenance.jsonl`): {describe_hardware(runs)}. Trainer code "
            f"(git commit per run): {describe_versions(runs)}.", ""]


def check_runs(p: Any, task: str, runs: Path, conds: list[dict[str, Any]], seeds: list[int], preset: str) -> None:
    """A usage error of ``p`` (one line, exit 2) when the trainer would refuse a run folder of the sweep in
    ``runs`` (`trainers.train.check_run_dir`, e.g. a run of another config); reads only."""
    from trainers.config import make_masked_config
    from trainers.train import RunDirRefused, check_run_dir

    refused = []
    for _, _, ov, out in sweep_jobs(runs, conds, seeds):
        cfg = make_masked_config(task, preset, ov)
        try:
            check_run_dir(cfg, out, force=False)
        except RunDirRefused as e:
            refused.append(run_refusal(e))
    if refused:
        p.error(f"--runs {runs}: the trainer would refuse {len(refused)} of the sweep's {len(conds) * len(seeds)} run "
                f"folders (first: {refused[0]}); pass another --runs, or delete that run folder to train it afresh")


def run_refusal(e: RunDirRefused) -> str:
    """Why the trainer refused a run folder, in words: all the differing config keys (up to 8; the trainer's own
    message shows 3), else its reason without its fix (the fix names the trainer's flags)."""
    if e.differences:
        shown = ", ".join(f"{k} ({was!r} -> {now!r})" for k, was, now in e.differences[:8])
        more = f" and {len(e.differences) - 8} more" if len(e.differences) > 8 else ""
        return f"{e.subject} holds a run of another config, differing in {shown}{more}"
    return f"{e.subject} {e.reason}"


def check_trained(p: Any, args: Any, task: str, runs: Path, conds: list[dict[str, Any]], seeds: list[int],
                  preset: str) -> None:
    """With --no-train, a usage error of ``p`` (one line, exit 2) when a run of the sweep is not finished."""
    if not args.no_train:
        return
    missing = untrained_runs(task, runs, conds, seeds, preset)
    if missing:
        p.error(f"--no-train: {len(missing)} of {len(conds) * len(seeds)} runs are missing or unfinished in {runs} "
                f"(first: {missing[0].name}); run without --no-train to train them, or pass the --runs that holds them")


def report_main(p: Any, argv: list[str] | None, task: str, scales: dict[str, Scale], root: Path,
                conds: list[dict[str, Any]], build: Callable[[Plan, list[dict[str, Any]], int, bool], None]) -> int:
    """A report's command (netsim, brain): parse ``argv`` with ``p``, check every input (one-line usage errors,
    exit 2, nothing written), then ``build(plan, conds, workers, force)`` trains the sweep and writes the
    report; an `InputError` it raises before writing (e.g. no HCP data) is a usage error too."""
    args = p.parse_args(argv)
    plan = resolve_scale(p, args, scales, root, task)
    seeds = list(plan.scale.seeds)
    check_runs(p, task, plan.runs, conds, seeds, plan.scale.preset)
    check_trained(p, args, task, plan.runs, conds, seeds, plan.scale.preset)
    try:
        build(plan, conds, args.workers, args.force)
    except InputError as e:
        p.error(first_line(e))
    print(f"wrote {plan.out / 'README.md'}")
    return 0


def untrained_runs(task: str, runs_dir: Path, conds: list[dict[str, Any]], seeds: list[int], preset: str) -> list[Path]:
    """The sweep's run folders without a finished last.pt (one at the epoch its config trains to; a missing,
    torn or foreign last.pt is not finished: `trainers.checkpoint.last_epoch`)."""
    from trainers.checkpoint import last_epoch
    from trainers.config import make_masked_config

    missing = []
    for _, _, ov, out in sweep_jobs(runs_dir, conds, seeds):
        epoch = last_epoch(out)
        if epoch is None or epoch < make_masked_config(task, preset, ov).optim.epochs:
            missing.append(out)
    return missing


def sweep_jobs(runs_dir: Path, conds: list[dict[str, Any]], seeds: list[int],
               overrides: dict[str, Any] | None = None) -> list[tuple[dict[str, Any], int, dict[str, Any], Path]]:
    """(condition, seed, config overrides, run folder) of every run of a sweep, in (condition, seed) order."""
    jobs = []
    for c in conds:
        for seed in seeds:
            ov = {"seed": seed, "pe.kind": c["pe"], **(overrides or {})}
            if c["pe"] == "learned":
                ov["pe.init_std"] = c["sigma"]
            jobs.append((c, seed, ov, runs_dir / run_name(c, seed)))
    return jobs


def conditions(sigmas: list[float], fixed: list[str]) -> list[dict[str, Any]]:
    out = [{"pe": "learned", "sigma": s, "label": f"learned σ={s:g}"} for s in sigmas]
    out += [{"pe": k, "sigma": float("nan"), "label": k} for k in fixed]
    return out


def run_name(c: dict[str, Any], seed: int) -> str:
    return f"{c['pe']}-s{c['sigma']:g}-seed{seed}" if c["pe"] == "learned" else f"{c['pe']}-seed{seed}"


def _train_one(task: str, preset: str, overrides: dict[str, Any], out: str) -> tuple[dict[str, Any], float]:
    """Train (or resume / skip) one run on one torch thread; its metrics and the seconds it took."""
    import torch

    from trainers.config import make_masked_config
    from trainers.train_masked import train_masked

    torch.set_num_threads(1)
    t = time.time()
    m = train_masked(make_masked_config(task, preset, overrides), Path(out), log=lambda s: None)
    return m, time.time() - t


def run_sweep(task: str, runs_dir: Path, conds: list[dict[str, Any]], seeds: list[int],
              overrides: dict[str, Any] | None = None, log: Callable[[str], None] = print, *,
              preset: str = "quick", workers: int = 1) -> list[dict[str, Any]]:
    """Train (or resume / skip) each run with the task's ``preset``, one torch thread per run, ``workers``
    runs at a time (separate processes; every run is seeded, so the results do not depend on ``workers``).
    Returns one record per run, in (condition, seed) order."""
    jobs = sweep_jobs(runs_dir, conds, seeds, overrides)
    t0 = time.time()
    results: dict[int, dict[str, Any]] = {}

    def done(i: int, m: dict[str, Any], seconds: float) -> None:
        c, seed, _, out = jobs[i]
        log(f"  [{len(results) + 1}/{len(jobs)}] {out.name}: test_mse {m['test_mse']:.4f} ood_mse {m['ood_mse']:.4f} "
            f"({seconds:.0f} s)")
        results[i] = {**c, "seed": seed, "run": str(out), **m}

    if workers <= 1:
        for i, (c, seed, ov, out) in enumerate(jobs):
            done(i, *_train_one(task, preset, ov, str(out)))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        from pe_probe.output import terminate_as_exit

        # a kill (SIGTERM, SIGHUP) raises SystemExit here; then, as on Ctrl-C or an error, the workers stop
        # at once: left alone they trained on, orphaned, for the rest of their runs
        quiet_resource_tracker()
        with terminate_as_exit(), ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            try:
                futures = {pool.submit(_train_one, task, preset, ov, str(out)): i
                           for i, (_, _, ov, out) in enumerate(jobs)}
                for f in as_completed(futures):
                    done(futures[f], *f.result())
            except BaseException:
                stop_workers(pool)
                raise
    log(f"sweep: {len(jobs)} runs in {time.time() - t0:.0f} s")
    return [results[i] for i in range(len(jobs))]


def quiet_resource_tracker() -> None:
    """Keep multiprocessing's resource tracker (started with this process's warning options) from printing
    'There appear to be N leaked semaphore objects to clean up at shutdown' after the one-line 'interrupted' when
    Ctrl-C or a kill reaches the workers too: it cleans those semaphores up itself, so the warning is noise."""
    option = "ignore:resource_tracker:UserWarning"
    if option not in sys.warnoptions:
        sys.warnoptions.append(option)


def stop_workers(pool: Any) -> None:
    """Terminate a process pool's workers now, rather than wait for their runs to end as leaving its `with`
    would (hours at the paper preset); the runs resume from their last checkpoint (written atomically)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        p.terminate()
    for p in processes:
        p.join(timeout=10)
        if p.is_alive():  # deaf to SIGTERM: the shutdown below must not wait on it
            p.kill()
            p.join()
    pool.shutdown(wait=True)  # the pool's manager thread then closes its queues (else their semaphores leak, and
    # the resource tracker warns about them after the one-line 'interrupted')


N_PERM = 199


def analyse_run(ckpt: Path, n_perm: int = N_PERM, layer: int = 0) -> tuple[dict[str, Any], Any]:
    """One per-layer PE table of a run (default layer 0) vs its own ground truth: selected metrics (plus
    ``pe_table``, the tensor analysed, and ``pe_n_tables``, how many per-layer tables the run has) and the
    full result."""
    from pe_probe.analysis import analyze
    from pe_probe.io import load_table

    lt = load_table(ckpt, layer=layer)
    r = analyze(lt.table, lt.ground_truth, methods="pca,smacof", n_perm=n_perm, n_boot=0, n_null=5, seed=0)
    keys = ("rsa_spearman", "rsa_p", "recovery_pca_r2", "recovery_smacof_r2", "probe_r2", "trustworthiness",
            "null_rsa_mean")
    out: dict[str, Any] = {k: float(r.metrics[k]) for k in keys if k in r.metrics}
    out.update(pe_table=str(lt.param), pe_n_tables=int(lt.n_layers))
    return out, r


COLOURS = [OKABE_ITO[i] for i in (4, 5, 2, 6, 0, 1)]  # colour-blind safe (Okabe-Ito), blue first
LINE_STYLES = ["--", ":", "-."]
RUN_KEYS = ("label", "pe", "sigma", "seed")  # the columns that name a run's condition in a layer row


def analyse_sweep(df: pd.DataFrame, extra: Callable[[Any], dict[str, float]] | None = None,
                  n_perm: int = N_PERM, log: Callable[[str], None] = lambda s: print(s, flush=True)
                  ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Every per-layer PE table of every run in ``df`` (one row per run, with ``run`` folders) analysed by
    `analyse_run`, ``extra(result)``'s metrics added to each table's (e.g. a second ground truth).

    Returns ``df`` with its layer-0 table's metrics joined (empty for runs without a table, PE ``none``), the
    layer rows (one per run and table: the run's condition columns, ``layer`` and that table's metrics) and
    the layer-0 results of seed 0 by condition label (for layout figures). ``log`` gets a line per run (the
    analyses take a minute or two).
    """
    rows, layer_rows, seed0 = [], [], {}
    t0, n, analysed = time.time(), int((df["pe"] != "none").sum()), 0
    for _, r in df.iterrows():
        if r["pe"] == "none":
            rows.append({})
            continue
        ckpt = Path(r["run"]) / "last.pt"
        first = analyse_run(ckpt, n_perm)
        tables = [first] + [analyse_run(ckpt, n_perm, layer=k) for k in range(1, first[0]["pe_n_tables"])]
        analysed += 1
        log(f"  analysed [{analysed}/{n}] {Path(r['run']).name}: {len(tables)} PE table(s), layer-0 RSA "
            f"{first[0].get('rsa_spearman', float('nan')):.3f} ({time.time() - t0:.0f} s)")
        for layer, (m, res) in enumerate(tables):
            m.update(extra(res) if extra else {})
            layer_rows.append({**{k: r[k] for k in RUN_KEYS}, "layer": layer, **m})
        rows.append(first[0])
        if r["seed"] == 0:
            seed0[r["label"]] = first[1]
    return (pd.concat([df.reset_index(drop=True), pd.DataFrame(rows)], axis=1), pd.DataFrame(layer_rows), seed0)


def layer_summary(layers: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """`summarise` of the layer rows of `analyse_sweep`, per layer: one row per (layer, condition)."""
    return pd.concat([summarise(g, cols).assign(layer=int(layer)) for layer, g in layers.groupby("layer")],
                     ignore_index=True)


def layer_table(summary: pd.DataFrame, cols: list[tuple[str, str]]) -> str:
    """Markdown: a row per condition, a column per (metric, layer), each ``mean [95% interval]``."""
    layers = sorted(summary["layer"].unique())
    by_layer = {k: summary[summary.layer == k].set_index("label") for k in layers}
    labels = list(by_layer[layers[0]].index)
    heads = [(c, k, f"{name}, layer {k}") for c, name in cols for k in layers]
    out = "| PE | " + " | ".join(h for _, _, h in heads) + " |\n"
    out += "| --- | " + " | ".join("---" for _ in heads) + " |\n"
    for label in labels:
        cells = [fmt(by_layer[k].loc[label], c) if label in by_layer[k].index else "–" for c, k, _ in heads]
        out += f"| {label} | " + " | ".join(cells) + " |\n"
    return out


def layer_levels(layers: pd.DataFrame, summary: pd.DataFrame, a: str, b: str, col: str, claim: str) -> str:
    """Per layer, the level of "condition a is ``claim`` than b on ``col``" with both means and intervals;
    "not testable" at a layer whose learned tables are all at chance (`tables_at_chance`)."""
    parts = []
    for layer in sorted(layers["layer"].unique()):
        g = layers[layers.layer == layer]
        s = summary[summary.layer == layer].set_index("label")
        learned = g[g.pe == "learned"]
        level = ("not testable: every learned table at chance" if tables_at_chance(learned["rsa_p"], learned["probe_r2"])
                 else compare(g, a, b, col, claim))
        parts.append(f"layer {layer}: **{level}** ({fmt(s.loc[a], col)} vs {fmt(s.loc[b], col)})")
    return "; ".join(parts)


def write_layers(layers: pd.DataFrame, out: Path, cols: list[tuple[str, str]]) -> pd.DataFrame:
    """Write a report's every-layer outputs (``layers.csv``, ``figures/layers_vs_sigma.png``); returns their
    `layer_summary` over ``cols`` (metric, name)."""
    summary = layer_summary(layers, [c for c, _ in cols])
    layers.to_csv(out / "layers.csv", index=False)
    layer_figure(layers, summary, out / "figures" / "layers_vs_sigma.png", cols)
    return summary


def layer_section(summary: pd.DataFrame, cols: list[tuple[str, str]], csv_contents: str) -> list[str]:
    """README lines of a report's "Every layer's PE table" section (``csv_contents``: what layers.csv adds)."""
    return ["## Every layer's PE table", "",
            "Each run adds a separate table at every layer's input; the tables above are layer 0's. Every layer's "
            f"table, mean [95% t-interval] over seeds (per run and layer, with {csv_contents}: `layers.csv`):", "",
            layer_table(summary, cols),  # `analyse_sweep` gives runs without a PE no layer rows
            "![every layer's table vs sigma](figures/layers_vs_sigma.png)", ""]


def layer_figure(layers: pd.DataFrame, summary: pd.DataFrame, path: Path, panels: list[tuple[str, str]]) -> None:
    """One panel per metric: each layer's learned-PE mean over seeds vs sigma (a line per layer; points =
    seeds) and each fixed PE's mean (one grey line when its tables are the same at every layer, else one per
    layer in that layer's colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layer_ids = sorted(summary["layer"].unique())
    colour = {layer: COLOURS[i % len(COLOURS)] for i, layer in enumerate(layer_ids)}
    fixed = summary[summary.pe != "learned"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.8), constrained_layout=True)
    for ax, (col, name) in zip(np.atleast_1d(axes), panels):
        for layer in layer_ids:
            learned = summary[(summary.layer == layer) & (summary.pe == "learned")].sort_values("sigma")
            ax.plot(learned["sigma"], learned[col], "o-", color=colour[layer], label=f"learned, layer {layer}")
            pts = layers[(layers.layer == layer) & (layers.pe == "learned")]
            ax.plot(pts["sigma"], pts[col], ".", color=colour[layer], alpha=0.4)
        for j, (label, g) in enumerate(fixed.groupby("label", sort=False)):
            style = LINE_STYLES[j % len(LINE_STYLES)]
            if np.allclose(g[col], g[col].iloc[0], equal_nan=True):
                ax.axhline(g[col].iloc[0], ls=style, color="0.4", lw=1, label=f"{label}, every layer")
                continue
            for _, r in g.iterrows():
                ax.axhline(r[col], ls=style, color=colour[r["layer"]], lw=1, label=f"{label}, layer {r['layer']}")
        ax.set_xscale("log")
        ax.set_xlabel("PE init σ")
        ax.set_ylabel(name)
    outside_legend(fig, np.atleast_1d(axes)[0], fontsize=6)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def outside_legend(fig, ax, fontsize: float) -> None:
    """The legend of ``ax``'s labelled artists below the panels (a constrained-layout figure), where it covers no
    data; one entry per label."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=min(len(seen), 4),
                   fontsize=fontsize, frameon=False)


def t_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% t-interval over seeds (nan interval for a single value)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if len(x) < 2:
        return m, float("nan"), float("nan")
    h = t_value(len(x)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - h, m + h


def summarise(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    rows = []
    for label, g in df.groupby("label", sort=False):
        row = {"label": label, "pe": g["pe"].iloc[0], "sigma": g["sigma"].iloc[0], "n_seeds": len(g)}
        for c in cols:
            if c in g:
                m, lo, hi = t_interval(g[c].to_numpy())
                row.update({c: m, f"{c}_lo": lo, f"{c}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


# Possible range of each metric: t-intervals over 2 seeds can reach past it; tables clip them to it.
RANGES: dict[str, tuple[float, float]] = {
    "rsa_spearman": (-1.0, 1.0), "rsa_fc_spearman": (-1.0, 1.0), "rsa_dist_given_fc": (-1.0, 1.0),
    "rsa_fc_given_dist": (-1.0, 1.0), "trustworthiness": (0.0, 1.0), "probe_r2": (-math.inf, 1.0),
    "recovery_smacof_r2": (-math.inf, 1.0), "recovery_pca_r2": (-math.inf, 1.0),
}
CLIP_MARK = "†"


def metric_range(col: str) -> tuple[float, float]:
    """(low, high) a metric can take: RANGES, else MSEs and MSE ratios are >= 0, else unbounded."""
    if col in RANGES:
        return RANGES[col]
    if "mse" in col or col.endswith("_rel"):
        return 0.0, math.inf
    return -math.inf, math.inf


def clip_interval(lo: float, hi: float, bounds: tuple[float, float]) -> tuple[float, float, bool, bool]:
    """The interval clipped to ``bounds``: (lo, hi, lo was clipped, hi was clipped); nan stays nan."""
    b_lo, b_hi = bounds
    lo_c = bool(np.isfinite(lo) and lo < b_lo)
    hi_c = bool(np.isfinite(hi) and hi > b_hi)
    return (b_lo if lo_c else lo), (b_hi if hi_c else hi), lo_c, hi_c


def interval(row: pd.Series, col: str) -> tuple[float, float, bool, bool]:
    """A summary row's 95% interval of ``col``, clipped to the metric's possible range."""
    return clip_interval(float(row.get(f"{col}_lo", float("nan"))), float(row.get(f"{col}_hi", float("nan"))),
                         metric_range(col))


def fmt(row: pd.Series, col: str, digits: int = 3) -> str:
    """``mean [lo, hi]`` with the interval clipped to the metric's range (a clipped end is marked †)."""
    m = row.get(col, float("nan"))
    if not np.isfinite(m):
        return "–"
    lo, hi, lo_c, hi_c = interval(row, col)
    if np.isfinite(lo):
        mark = lambda c: CLIP_MARK if c else ""  # noqa: E731
        return f"{m:.{digits}f} [{lo:.{digits}f}{mark(lo_c)}, {hi:.{digits}f}{mark(hi_c)}]"
    return f"{m:.{digits}f}"


def n_clipped(summary: pd.DataFrame, cols: list[str]) -> int:
    """How many interval ends of ``cols`` in ``summary`` the tables clip."""
    return sum(int(c1) + int(c2) for _, r in summary.iterrows() for c in cols if f"{c}_lo" in r
               for (_, _, c1, c2) in [interval(r, c)])


def deterministic_labels(df: pd.DataFrame, cols: list[str]) -> list[str]:
    """Labels whose per-seed values of every one of ``cols`` are identical (a fixed table): zero-width intervals."""
    out = []
    for label, g in df.groupby("label", sort=False):
        vals = [g[c].to_numpy(dtype=float) for c in cols if c in g]
        vals = [v[np.isfinite(v)] for v in vals]
        if len(g) > 1 and vals and all(len(v) > 1 and np.all(v == v[0]) for v in vals):
            out.append(label)
    return out


# ---- verdict levels -------------------------------------------------------------------------------

ALPHA = 0.05  # Mantel test: a table is above chance at p < ALPHA
HOLDS, OPPOSITE = "holds", "opposite"


def same_direction(n: int) -> str:
    return f"inconclusive ({n} seeds): same direction in every seed"


def opposite_direction(n: int) -> str:
    return f"inconclusive ({n} seeds): opposite direction in every seed"


DISAGREE = "inconclusive: seeds disagree"


def verdict_level(a: np.ndarray, b: np.ndarray, claim: str, bounds: tuple[float, float] = (-math.inf, math.inf)) -> str:
    """Level of the claim "a is ``claim`` ('lower' or 'higher') than b" from per-seed values.

    ``holds``: the 95% t-intervals over seeds (clipped to ``bounds``) do not overlap and a lies on the
    claimed side; ``opposite``: they do not overlap and a lies on the other side; otherwise inconclusive:
    ``same direction in every seed`` when every seed of a lies on the claimed side of every seed of b,
    ``opposite direction in every seed`` when every seed lies on the other side, else ``seeds disagree``.
    """
    if claim not in ("lower", "higher"):
        raise ValueError(f"claim must be 'lower' or 'higher', got {claim!r}")
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        raise ValueError("verdict_level needs at least one finite value on each side")
    _, a_lo, a_hi = t_interval(a)
    _, b_lo, b_hi = t_interval(b)
    a_lo, a_hi, _, _ = clip_interval(a_lo, a_hi, bounds)
    b_lo, b_hi, _, _ = clip_interval(b_lo, b_hi, bounds)
    sign = 1.0 if claim == "lower" else -1.0  # claim: sign * a < sign * b
    if np.isfinite(a_lo) and np.isfinite(b_lo):
        if a_hi < b_lo:
            return HOLDS if claim == "lower" else OPPOSITE
        if b_hi < a_lo:
            return HOLDS if claim == "higher" else OPPOSITE
    n = min(len(a), len(b))
    diff = sign * (a[:, None] - b[None, :])  # < 0 where the pair goes the claimed way
    if np.all(diff < 0):
        return same_direction(n)
    if np.all(diff > 0):
        return opposite_direction(n)
    return DISAGREE


def level_criteria(n_seeds: int, t_value: float) -> str:
    """The verdict levels as `verdict_level` applies them, in words."""
    return (f"Verdict levels (computed by `verdict_level` in `analyses/netsim/sweep.py`): **{HOLDS}** = the 95% "
            f"t-intervals over the {n_seeds} seeds (t = {t_value:.1f}, clipped to the metric's range) do not overlap "
            f"and the difference goes the claimed way; **{OPPOSITE}** = they do not overlap and it goes the other way; "
            f"otherwise **{same_direction(n_seeds)}** when every seed of the first condition lies on the claimed side "
            f"of every seed of the second, **{opposite_direction(n_seeds)}** when every seed lies on the other side, "
            f"and **{DISAGREE}** when the seeds point both ways. With {n_seeds} seeds the interval test has "
            f"{'very little' if n_seeds <= 2 else 'little'} power, so an inconclusive level is not evidence against a "
            "claim; \"holds\" means consistent with the study, not a replication of it.")


def tables_at_chance(rsa_p: np.ndarray, probe_r2: np.ndarray, alpha: float = ALPHA) -> bool:
    """Every learned table is at chance: no run has Mantel p < alpha and every run's probe R2 is < 0."""
    p = np.asarray(rsa_p, dtype=float)
    r2 = np.asarray(probe_r2, dtype=float)
    p, r2 = p[np.isfinite(p)], r2[np.isfinite(r2)]
    if len(p) == 0 or len(r2) == 0:
        raise ValueError("tables_at_chance needs per-run Mantel p-values and probe R2s")
    return bool(np.all(p >= alpha) and np.all(r2 < 0))


def at_chance_criteria(alpha: float = ALPHA, n_perm: int = 199) -> str:
    return (f"A learned table is *at chance* when its Mantel p >= {alpha:g} ({n_perm} permutations, so the smallest "
            f"possible p is {1 / (n_perm + 1):.3f}) and its linear-probe R2 < 0 (the probe predicts the coordinates "
            "worse than their mean); when every learned run is at chance, geometry claims are *not testable* here.")


def t_value(n: int) -> float:
    """The two-sided 95% t quantile with n - 1 degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def markdown_table(summary: pd.DataFrame, cols: list[tuple[str, str]]) -> str:
    head = "| PE | " + " | ".join(name for _, name in cols) + " |\n"
    head += "| --- | " + " | ".join("---" for _ in cols) + " |\n"
    body = "".join("| " + r["label"] + " | " + " | ".join(fmt(r, c) for c, _ in cols) + " |\n"
                   for _, r in summary.iterrows())
    return head + body


def sigma_figure(df: pd.DataFrame, summary: pd.DataFrame, path: Path, panels: list[tuple[str, str]],
                 baselines: dict[str, str] | None = None) -> None:
    """One panel per metric: learned-PE mean over seeds vs sigma (points = seeds), other PEs as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 2.8), constrained_layout=True)
    axes = np.atleast_1d(axes)
    learned = summary[summary.pe == "learned"].sort_values("sigma")
    fixed = summary[summary.pe != "learned"]
    for ax, (col, name) in zip(axes, panels):
        ax.plot(learned["sigma"], learned[col], "o-", color="k", label="learned (mean)")
        pts = df[df.pe == "learned"]
        ax.plot(pts["sigma"], pts[col], ".", color="0.5", label="learned (seeds)")
        for i, (_, r) in enumerate(fixed.iterrows()):
            if np.isfinite(r.get(col, np.nan)):
                ax.axhline(r[col], ls="--", color=COLOURS[i % len(COLOURS)], label=r["label"])
        if baselines and col in baselines and baselines[col] in summary:
            ax.axhline(float(summary[baselines[col]].mean()), ls=":", color="0.3", label="predict zero")
        ax.set_xscale("log")
        ax.set_xlabel("PE init σ")
        ax.set_ylabel(name)
    outside_legend(fig, axes[0], fontsize=7)  # inside, its text ran across the reference lines
    fig.savefig(path, dpi=150)
    plt.close(fig)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=float) + "\n")


def seed_values(df: pd.DataFrame, label: str, col: str) -> np.ndarray:
    """Per-seed values of ``col`` for the condition ``label`` (one row per run in ``df``)."""
    return df.loc[df["label"] == label, col].to_numpy(dtype=float)


def compare(df: pd.DataFrame, a: str, b: str, col: str, claim: str) -> str:
    """`verdict_level` of "condition a is ``claim`` than condition b on ``col``", clipped to col's range."""
    return verdict_level(seed_values(df, a, col), seed_values(df, b, col), claim, metric_range(col))


def claim_levels(df: pd.DataFrame, a: pd.Series, b: pd.Series, cols: list[tuple[str, str]],
                 claim: str) -> tuple[list[str], str]:
    """Per metric (col, name): the level of "a is ``claim`` than b", and the text naming each level with
    both conditions' values (summary rows ``a`` and ``b``)."""
    levels = [compare(df, a["label"], b["label"], col, claim) for col, _ in cols]
    text = "; ".join(f"{name}: **{lev}** ({fmt(a, col)} vs {fmt(b, col)})" for lev, (col, name) in zip(levels, cols))
    return levels, text


def chance_summary(df: pd.DataFrame, alpha: float = ALPHA) -> tuple[bool, str]:
    """(every learned table at chance, the numbers behind it in words) over all learned runs in ``df``."""
    L = df[df["pe"] == "learned"]
    at = tables_at_chance(L["rsa_p"], L["probe_r2"], alpha)
    n_sig = int((L["rsa_p"] < alpha).sum())
    n_pos = int((L["probe_r2"] >= 0).sum())
    text = (f"over the {len(L)} learned runs RSA is {L['rsa_spearman'].min():.3f} to {L['rsa_spearman'].max():.3f} "
            f"(chance level, the mean RSA of random Gaussian tables: {L['null_rsa_mean'].mean():.3f}), Mantel p {L['rsa_p'].min():.3f} to "
            f"{L['rsa_p'].max():.3f} ({n_sig} runs with p < {alpha:g}), probe R2 {L['probe_r2'].min():.3f} to "
            f"{L['probe_r2'].max():.3f} ({n_pos} runs with R2 >= 0)")
    return at, text


def above_chance_text(p: np.ndarray, alpha: float = ALPHA) -> str:
    """'yes, in every seed' when every seed has Mantel p < alpha, else how many do; with the p-values (a
    per-seed rule, not the interval rule of `verdict_level`, so it does not say 'holds')."""
    p = np.asarray(p, dtype=float)
    k = int((p < alpha).sum())
    head = "**yes, in every seed**" if k == len(p) else f"**no**: {k} of {len(p)} seeds"
    return f"{head} (p = {', '.join(f'{v:.3f}' for v in p)})"


def table_provenance(df: pd.DataFrame) -> str:
    """Which per-layer PE table the headline tables read, and how many each run has (from `analyse_run`)."""
    t = df[df["pe"] != "none"]
    names = sorted(set(t["pe_table"].dropna()))
    counts = sorted({int(v) for v in t["pe_n_tables"].dropna()})
    return (f"these are the layer-0 tables ({', '.join(f'`{n}`' for n in names)}); every PE run here has "
            f"{' or '.join(map(str, counts))} PE tables (the preset's `pe.every_layer`: a separate table at every "
            "layer's input), all of them analysed under *Every layer's PE table* below")
