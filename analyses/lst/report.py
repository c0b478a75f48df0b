"""``python -m analyses.lst.report --root runs/lst-sweep``: regenerate ``reports/lst/`` from a sweep.

One command: it analyses every finished run that is not cached yet (`analyses.lst.analyse`), writes
the tidy tables to ``ROOT/analysis/``, then writes ``reports/lst/README.md`` and its figures (PNG, each
with the CSV it was drawn from). Every number in the folder comes from this command, the setting's too: it
describes the runs from their ``config.json``, ``provenance.jsonl`` and the sweep's ``grid.json`` and ``sweep.log``
(`analyses.lst.setting`). The folder is written in a staging folder that replaces ``--out`` at the end, and only
over a folder pe-probe wrote (``--force`` otherwise).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from analyses.lst import setting
from analyses.lst.analyse import N_PUZZLES, REFERENCE
from analyses.lst.code_paths import ATTENTION_SWITCH, MIXED, code_paths, describe_paths
from analyses.lst.figures import (fig_accuracy, fig_ident_vs_gen, fig_identifiability, fig_layouts, fig_levels,
                                  fig_trajectories, layout_caption)
from analyses.lst.grid import PRESET_EPOCHS, PRESET_SETTINGS
from analyses.lst.report_cli import add_common_options, regenerate_command, write_staged
from analyses.lst.selection import label_runs, sigma_runs
from analyses.lst.study import CHANCE, LEVELS, STUDY_OOD_PUZZLES
from analyses.lst.tables import (accuracy_table, comparison_table, ident_table, md_table, paired_table,
                                 pe_type_ident_table, trajectory_summary)
from analyses.lst.verdicts import answer, criteria_text, verdicts
from pe_probe.errors import InputError, OneLineArgumentParser
from pe_probe.output import check_out_dir
from trainers.provenance import describe_versions


def write_report(root: Path, out: Path, frames: dict[str, pd.DataFrame], cmd: str, notes: list[str] | None = None,
                 n_perm: int = 500, n_boot: int = 500) -> Path:
    """README.md, figures and tables into ``out`` (the command passes a staging folder); returns the README's path."""
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.png")) + list(out.glob("*.csv")):
        old.unlink()
    runs, evals, ana, lay = frames["runs"], frames["evals"], frames["analyses"], frames["layouts"]
    for df in (runs, evals, ana, lay):
        if "sigma" in df:
            df["sigma"] = pd.to_numeric(df["sigma"], errors="coerce")
    grid = setting.read_grid(root)
    done = set(runs.run) if not runs.empty else set()
    configs = setting.run_configs(root, sorted(done))
    sr = sigma_runs(runs) if not runs.empty else runs
    ana_sigma = ana[ana.group == "sigma"] if not ana.empty else ana
    epochs = sorted(runs.epochs.unique()) if not runs.empty else []
    seeds = sorted(sr.seed.unique()) if not sr.empty else []
    paths = code_paths(root, runs) if not runs.empty else pd.Series(dtype=object)

    figs = {
        "accuracy": fig_accuracy(sr, out),
        "levels": fig_levels(sr, out),
        "ident": fig_identifiability(ana_sigma, out),
        "identgen": fig_ident_vs_gen(ana_sigma, out),
        "layouts": fig_layouts(lay, sr, out),
        "traj": fig_trajectories(ana_sigma, evals, out),
    }
    tables = {
        "comparison": comparison_table(runs) if not runs.empty else pd.DataFrame(),
        "acc_sigma": accuracy_table(sr, "sigma") if not sr.empty else pd.DataFrame(),
        "acc_types": accuracy_table(label_runs(runs[runs.group != "sigma"]), "label") if not runs.empty and (runs.group != "sigma").any() else pd.DataFrame(),
        "paired": paired_table(runs, paths) if not runs.empty else pd.DataFrame(),
        "ident": ident_table(ana_sigma) if not ana_sigma.empty else pd.DataFrame(),
        "types_ident": pe_type_ident_table(ana, runs) if not ana.empty else pd.DataFrame(),
        "traj": trajectory_summary(ana_sigma) if not ana_sigma.empty else pd.DataFrame(),
    }
    for name, df in tables.items():
        df.to_csv(out / f"table_{name}.csv", index=False)

    def img(key, caption):
        return f"![{caption}]({figs[key]}.png)\n\n_{caption}_ (data: [`{figs[key]}.csv`]({figs[key]}.csv))\n" if figs.get(key) else "_(figure not available: no data)_\n"

    L = []
    L.append("# Latin Square Task: does learning positional encodings depend on initialization?\n")
    L.append(f"Regenerate everything in this folder with:\n\n```bash\n{cmd}\n```\n")
    L.append("Reproduction of Ito et al., *Learning positional encodings in transformers depends on initialization* "
             "(arXiv 2406.08272) with `pe-probe`'s trainer and analyses. Every number below was computed by the command "
             "above from the sweep folder; the study's numbers are quoted from the paper, as `analyses/lst/study.py` "
             "holds them.\n")
    L.append("## Setting\n")
    L.append(f"- Sweep: `{root}`, {setting.sweep_text(grid, sorted(done), configs)}.")
    seed_ids = (f"{'seed' if len(seeds) == 1 else 'seeds'} {', '.join(str(s) for s in seeds)}" if seeds
                else "no σ-grid runs")
    L.append(f"- Training length: {', '.join(str(e) for e in epochs)} epochs (the study: 4,000); σ-grid seeds: "
             f"{len(seeds)} ({seed_ids}; the study: 15).")
    secs = runs.train_seconds.dropna() if not runs.empty else pd.Series(dtype=float)
    side = setting.parallelism(root) or "how many runs trained at once is not recorded"
    L.append(f"- Hardware (from each run's `provenance.jsonl`): {setting.hardware(root, sorted(done))}."
             + (" Training time per run (the training loop's own clock: without process start-up and data "
                "generation): median {} (range {}; {}).".format(*setting.time_spread(secs), side) if len(secs) else ""))
    L.append("- Trainer code (git commit per run, from each run's `provenance.jsonl`): "
             + describe_versions([root / name for name in sorted(done)]) + ".")
    if not runs.empty:
        L.append(f"- CPU attention code path per run, inferred from the session start times in each run's `train.log` and "
                 f"its training time against commit {ATTENTION_SWITCH[0]} ({ATTENTION_SWITCH[1]}), which replaced torch's "
                 f"fused CPU attention kernel by matmul-softmax ({MIXED}): {describe_paths(paths)}.")
    from trainers.config import PRESETS  # imports torch: not at module level

    L.append("- Model: " + setting.model_line(configs, runs)
             + setting.paper_note((grid or {}).get("preset"), configs, PRESETS["paper"], PRESET_SETTINGS["paper"]["seeds"]))
    L.append(f"- Held-out (OOD) set: {setting.heldout_text(configs, len(LEVELS), STUDY_OOD_PUZZLES)}. Chance is "
             f"{100 * CHANCE:.0f}%. One run's held-out accuracy at {PRESET_EPOCHS['quick']} epochs of the quick preset is "
             "sensitive to floating-point rounding (a different summation order moves it by several points: "
             "`reports/benchmarks/precision.md`), so σ values are compared over seeds.")
    L.append("- Analyses: last checkpoint of each run, every view; earlier checkpoints: raw mean, raw layer 0, kernel, qk "
             f"layer 0, attention maps (trajectories). {n_perm} permutations / {n_boot} bootstrap resamples; reference "
             f"`{REFERENCE}`; attention maps on {N_PUZZLES} fresh puzzles compared with the final 2D-sinusoid run of the "
             "same seed.")
    L += [f"- Note: {n}" for n in notes or []]
    L.append("")
    L.append("## Verdicts on the study's claims\n")
    L.append(criteria_text())
    L += [f"- {v}" for v in verdicts(runs, ana_sigma, ana, paths)] if not runs.empty else ["- No finished runs."]
    L.append("")
    L.append("## Later in training, or in what the model reads?\n")
    L.append("Small σ is σ ≤ 0.2 and large σ is σ ≥ 1.5 here too, in the text and in the table.\n")
    L.append((answer(ana_sigma) if not ana_sigma.empty else "No analyses yet.") + "\n")
    L.append(md_table(tables["traj"]))
    L.append(img("traj", "RSA / recovery over training by σ (raw table mean of layers and layer 0, qk view layer 0, "
                         "attention kernel, attention maps) and held-out accuracy"))
    L.append("## Our numbers next to the study's (held-out accuracy)\n")
    L.append(md_table(tables["comparison"]))
    L.append("## Accuracy per σ (learned N(0, σ²), every layer)\n")
    L.append("Mean [95% t CI, clipped to 0-100] over seeds, in %.\n")
    L.append(md_table(tables["acc_sigma"]))
    L.append(img("accuracy", "Train, test and held-out accuracy vs σ"))
    L.append(img("levels", "Held-out accuracy per difficulty level vs σ"))
    L.append("## PE types, placements and optimiser controls\n")
    L.append(md_table(tables["acc_types"]))
    L.append("## Paired tests across seeds (held-out accuracy)\n")
    L.append("With few seeds these tests have little power (a Wilcoxon test on n pairs cannot go below p = 2/2^n); the "
             "Spearman correlations over all runs of the σ grid (above and below) pool the σ values. Paired means are over "
             "the seeds both sides have; the CI is the 95% t interval of the mean paired difference.\n")
    mixed_rows = ([f"*{r.A}* vs *{r.B}*" for r in tables["paired"].itertuples() if str(r[-1]).startswith("A:")]
                  if "CPU attention code path" in tables["paired"] else [])
    if mixed_rows:
        L.append(f"The pairs {'; '.join(mixed_rows)} mix the two CPU attention code paths (last column, from the runs' "
                 f"`train.log` times; {MIXED}), so part of each difference can be rounding rather than the factor "
                 "compared.\n")
    L.append(md_table(tables["paired"]))
    L.append("## Identifiability per view vs σ and vs generalization (last checkpoint)\n")
    L.append(md_table(tables["ident"]))
    L.append(img("ident", "Identifiability of the grid vs σ for each view"))
    L.append(img("identgen", "Distance to the 2D sinusoid vs held-out accuracy: unnormalised (left) and scale-free (right)"))
    L.append(img("layouts", layout_caption(sr)))
    L.append("### Other PE types and controls (last checkpoint)\n")
    L.append(md_table(tables["types_ident"]))
    L.append("## Files\n")
    L.append("Figures (`*.png`) each with the CSV they were drawn from; `table_*.csv` hold the tables above. The tidy "
             f"per-run tables are in `{root}/analysis/` (`runs.csv`, `evals.csv`, `analyses.csv`, `layouts.csv`).\n")
    L.append(f"_Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._\n")
    path = out / "README.md"
    path.write_text("\n".join(L))
    return path


def main(argv: list[str] | None = None) -> int:
    """The command: check the arguments and ``--out``, analyse the sweep, write the report; 0 on success."""
    p = OneLineArgumentParser(prog="python -m analyses.lst.report", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default="runs/lst-sweep", help="sweep folder, one subfolder per run (default: %(default)s)")
    p.add_argument("--out", default="reports/lst", help="report folder: README.md, figures, tables (default: %(default)s)")
    add_common_options(p, "Mantel / PROTEST permutations per analysis")
    args = p.parse_args(argv)
    from analyses.lst.analyse import check_arguments, collect, write_tables

    check_arguments(p, Path(args.root), args.n_perm, args.n_boot)
    try:
        check_out_dir(args.out, args.force, inputs=[args.root], kind="lst-report")
        setting.read_grid(Path(args.root))  # an unreadable grid.json: refused before the analyses
    except InputError as e:
        p.error(str(e))
    import torch

    torch.set_num_threads(1)
    root = Path(args.root)
    frames = collect(root, n_perm=args.n_perm, n_boot=args.n_boot)
    write_tables(frames, root)
    cmd = regenerate_command("analyses.lst.report", [("--root", args.root)]
                             + ([("--out", args.out)] if args.out != "reports/lst" else []), args)
    write_staged(p, args.out, args.force, "lst-report", lambda stage: write_report(
        root, stage, frames, cmd, notes=args.note, n_perm=args.n_perm, n_boot=args.n_boot))
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.report")
