"""Where the target cell sits in the LST training, test and held-out (OOD) puzzles, and how many cells are given.

    python -m analyses.lst.data_check                      # the trainer's default splits (seed 0), reports/lst-data/
    python -m analyses.lst.data_check --seeds 0,1,2 --out DIR
    python -m analyses.lst.data_check --runs runs/lst-sweep/learned-every-s0.1-seed*   # + accuracy per target cell

The training pool excludes every puzzle within Jaccard distance `--min-jaccard` of an OOD puzzle
(`trainers.tasks.lst_generate.make_splits`). The Jaccard sets include the target marker's cell, so a candidate
whose target sits where many OOD targets sit shares that element with them and is rejected more often: the
filter moves training targets away from the OOD targets' cells. In a study of positional encodings that is a
shift in exactly what the PE encodes, so this check measures it (per cell: training and OOD target counts and
their Spearman ρ over the 16 cells; the training share of an OOD puzzle's target cell), against the same
generator with no filter as the control, with the number of given cells per level and split, which any Jaccard
filter also shifts. With --runs, trained models' accuracy per target cell says what the shift costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.lst.summary_stats import spearman
from pe_probe.errors import InputError, OneLineArgumentParser, first_line

ROOT = Path(__file__).resolve().parents[2]


def target_cells(puzzles: np.ndarray) -> np.ndarray:
    """The index (0-15, row-major) of each puzzle's target cell."""
    from trainers.tasks.lst_puzzles import TARGET

    return np.argmax(np.asarray(puzzles) == TARGET, axis=1)


def split_tables(seed: int, n_per_level: int, min_jaccard: float) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Per-cell target counts per split, givens per level and split, and the summary numbers for one seed."""
    from trainers.tasks.lst_generate import make_splits
    from trainers.tasks.lst_puzzles import LEVELS, TARGET

    splits = make_splits(n_per_level=n_per_level, min_jaccard=min_jaccard, seed=seed)
    cells = {name: target_cells(s.puzzles) for name, s in splits.items()}
    counts = pd.DataFrame({name: np.bincount(c, minlength=16) for name, c in cells.items()})
    counts.insert(0, "cell", [f"({i // 4},{i % 4})" for i in range(16)])
    counts.insert(0, "min_jaccard", min_jaccard)
    counts.insert(0, "seed", seed)
    share = counts["train"] / counts["train"].sum()
    rho, rho_p, _ = spearman(counts["train"], counts["ood"])
    givens = []
    for name, s in splits.items():
        n_given = ((s.puzzles > 0) & (s.puzzles < TARGET)).sum(axis=1)
        for lvl, label in enumerate(LEVELS):
            sel = s.levels == lvl
            if sel.any():
                givens.append({"seed": seed, "min_jaccard": min_jaccard, "split": name, "level": label, "puzzles": int(sel.sum()),
                               "mean_givens": float(n_given[sel].mean())})
    summary = {"seed": seed, "min_jaccard": min_jaccard, "train_puzzles": int(counts["train"].sum()), "ood_puzzles": int(counts["ood"].sum()),
               "train_share_min": float(share.min()), "train_share_max": float(share.max()),
               "uniform_share": 1 / 16, "spearman_train_vs_ood_counts": rho, "spearman_p": rho_p,
               "train_share_of_ood_target_cell": float(share.to_numpy()[cells["ood"]].mean()),
               "train_share_of_test_target_cell": float(share.to_numpy()[cells["test"]].mean())}
    return counts, pd.DataFrame(givens), summary


def run_checkpoint(source: Path) -> Path:
    """A run folder's last.pt, or the checkpoint file given."""
    path = source / "last.pt" if source.is_dir() else source
    if not path.is_file():
        raise InputError(f"--runs {source}: no checkpoint there (a run folder with last.pt, or a .pt file)")
    return path


def run_labels(sources: list[Path]) -> list[str]:
    """A name per --runs entry: the run folder's name (a checkpoint's folder and file name), refused when two
    entries would share one (their rows would be merged)."""
    labels = [s.name if s.is_dir() else f"{s.parent.name}/{s.name}" for s in sources]
    dup = next((lab for lab in labels if labels.count(lab) > 1), None)
    if dup is not None:
        raise InputError(f"--runs: two entries are both named {dup!r}; give run folders with distinct names")
    return labels


def cell_accuracy(source: Path, label: str | None = None) -> pd.DataFrame:
    """One trained LST model's accuracy per target cell on its own training, test and OOD puzzles (the splits
    rebuilt from its config, as `pe-probe evaluate` does), with each cell's share of its training targets."""
    import torch

    from trainers.checkpoint import load_checkpoint
    from trainers.evaluate import batch_logits, encode_split, model_from_checkpoint
    from trainers.pe import init_matters
    from trainers.train import load_splits

    path = run_checkpoint(source)
    ckpt = load_checkpoint(path)
    if not isinstance(ckpt.get("config"), dict) or ckpt["config"].get("task", "lst") != "lst":
        raise InputError(f"--runs {source}: not a Latin Square Task checkpoint")
    model, cfg = model_from_checkpoint(ckpt, "cpu", path)
    splits = load_splits(cfg)
    share = np.bincount(target_cells(splits["train"].puzzles), minlength=16) / len(splits["train"])
    rows = []
    for name, ps in splits.items():
        with torch.no_grad():  # the model is in eval mode (model_from_checkpoint)
            correct = torch.cat([logits.argmax(-1) == y for logits, y in batch_logits(model, encode_split(ps))]).numpy()
        cells = target_cells(ps.puzzles)
        for c in range(16):
            sel = cells == c
            rows.append({"run": label or (source.name if source.is_dir() else f"{source.parent.name}/{source.name}"),
                         "pe": cfg.pe.kind, "sigma": cfg.pe.init_std if init_matters(cfg.pe.kind, cfg.pe.init) else np.nan,
                         "seed": cfg.seed, "data_seed": cfg.data.seed, "split": name, "cell": c,
                         "train_share": float(share[c]), "n": int(sel.sum()), "correct": int(correct[sel].sum())})
    return pd.DataFrame(rows)


def trained_by(runs: list[Path]) -> str:
    """Which code and machine trained the run folders given (their provenance.jsonl), for the report."""
    from trainers.provenance import describe_hardware, describe_versions

    folders = [r if r.is_dir() else r.parent for r in runs]
    return f"commits {describe_versions(folders)}; {describe_hardware(folders)}" if folders else ""


def cell_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per run and split: Spearman ρ over the cells between the cell's training share and the accuracy on puzzles
    whose target sits there, and the accuracy in the cells below and at or above the uniform share."""
    out = []
    for (run, split), g in cells.groupby(["run", "split"], sort=False):
        g = g[g.n > 0]
        acc = g.correct / g.n
        rho, rho_p, _ = spearman(g.train_share, acc)  # NaN with fewer than 3 cells or one accuracy
        low, high = g[g.train_share < 1 / 16], g[g.train_share >= 1 / 16]
        out.append({"run": run, "pe": g.pe.iloc[0], "sigma": g.sigma.iloc[0], "seed": g.seed.iloc[0],
                    "data_seed": g.data_seed.iloc[0], "split": split,
                    "puzzles": int(g.n.sum()), "accuracy": float(g.correct.sum() / g.n.sum()),
                    "acc_cells_below_uniform_share": float(low.correct.sum() / low.n.sum()) if low.n.sum() else np.nan,
                    "puzzles_below": int(low.n.sum()),
                    "acc_cells_at_or_above": float(high.correct.sum() / high.n.sum()) if high.n.sum() else np.nan,
                    "puzzles_at_or_above": int(high.n.sum()),
                    "spearman_share_vs_accuracy": rho, "spearman_p": rho_p})
    return pd.DataFrame(out)


def readme(summary: pd.DataFrame, givens: pd.DataFrame, argv: list[str], cells: pd.DataFrame | None = None,
           trained_by: str = "") -> str:
    """The report: the measured shift, per seed, with the givens table."""
    from trainers.tasks.lst_puzzles import LEVELS

    filtered = summary.min_jaccard.max()
    g = givens.assign(split=[f"{sp} ({'filter' if mj else 'no filter'})" for sp, mj in zip(givens.split, givens.min_jaccard)])
    g = g.groupby(["level", "split"]).mean_givens.mean().unstack("split")
    order = [f"{sp} ({f})" for f in ("filter", "no filter") for sp in ("train", "test", "ood")]
    g = g.reindex([lvl for lvl in LEVELS if lvl in g.index])[[c for c in order if c in g.columns]]
    lines = ["# LST data: where the targets sit, and how many cells are given",
             "",
             f"Written by `python -m analyses.lst.data_check{' ' + ' '.join(argv) if argv else ''}` (the trainer's own "
             "`make_splits`; no training).",
             "",
             "The training pool excludes puzzles within Jaccard distance of a held-out (OOD) puzzle, and the Jaccard "
             "sets include the target marker's cell. A candidate whose target sits where OOD targets sit shares that "
             "element with them and is rejected more often, so the filter moves training targets away from the OOD "
             "targets' cells: a shift in where the target is, which is what a positional encoding encodes. The "
             "control is the same generator with no filter (`--min-jaccard 0`).",
             "",
             "| seed | filter | training puzzles | training share of a cell, min-max (uniform 6.25%) | Spearman ρ, training vs OOD target count over the 16 cells | training share of an OOD puzzle's target cell |",
             "| ---: | --- | ---: | --- | --- | ---: |"]
    for r in summary.itertuples():
        lines.append(f"| {r.seed} | {'Jaccard ≥ ' + format(r.min_jaccard, 'g') if r.min_jaccard else 'none (control)'} | "
                     f"{r.train_puzzles:,} | {100 * r.train_share_min:.1f}%-{100 * r.train_share_max:.1f}% | "
                     f"{r.spearman_train_vs_ood_counts:+.2f} (p = {r.spearman_p:.2g}) | "
                     f"{100 * r.train_share_of_ood_target_cell:.2f}% |")
    lines += ["",
              "Mean number of given cells per level and split (averaged over the seeds), with and without the filter: "
              "the filter also keeps the training puzzles with fewer givens than the OOD ones, as any Jaccard filter "
              "on given cells would. (The CSV's `train_share_of_test_target_cell` is at least 6.25% for any "
              "non-uniform split by construction, so it is no control; the unfiltered rows are.)",
              "",
              "| level | " + " | ".join(g.columns) + " |", "| --- | " + " | ".join("---:" for _ in g.columns) + " |"]
    for level, row in g.iterrows():
        lines.append(f"| {level} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    lines += ["",
              "So the study's held-out accuracy, as our trainer builds its splits, measures generalisation to new "
              "puzzles whose targets sit more often in cells that training saw less, with more givens. Whether the "
              "study's own splits have the first shift depends on whether its filter counts the target marker, which "
              "we have not checked. A split stratified by target cell, or Jaccard sets without the marker, would "
              "remove it. Per-cell counts are in `target_cells.csv`, givens in `givens.csv`, the table above in "
              "`summary.csv`.",
              ""]
    if cells is None or not len(cells):
        lines += ["How much the shift moves held-out accuracy is measured with `--runs RUN ...` (trained models: "
                  "accuracy per target cell against the cell's training share); none were given.", ""]
        return "\n".join(lines)
    per = cell_summary(cells)
    ood = per[per.split == "ood"]
    lines += ["## Does a model do worse where training had few targets?",
              "",
              f"{len(ood)} trained model(s) (`--runs`), each on its own splits: accuracy on puzzles whose target sits in "
              "a cell with less than the uniform 6.25% of training targets, against the other cells, and Spearman ρ "
              "over the 16 cells between the cell's training share and the accuracy there. Per model and cell in "
              "`cell_accuracy.csv`, this table in `cell_summary.csv`." + (f" The models: {trained_by}." if trained_by else ""),
              "",
              "| model | PE | split | accuracy | cells below uniform share (puzzles) | other cells (puzzles) | ρ(share, accuracy) over cells |",
              "| --- | --- | --- | ---: | --- | --- | --- |"]
    for r in per.itertuples():
        lines.append(f"| {r.run} | {r.pe}{f' σ={r.sigma:g}' if np.isfinite(r.sigma) else ''} | {r.split} | {100 * r.accuracy:.1f}% | "
                     f"{100 * r.acc_cells_below_uniform_share:.1f}% ({r.puzzles_below}) | "
                     f"{100 * r.acc_cells_at_or_above:.1f}% ({r.puzzles_at_or_above}) | "
                     + (f"{r.spearman_share_vs_accuracy:+.2f} (p = {r.spearman_p:.2g})" if np.isfinite(r.spearman_share_vs_accuracy) else "n/a")
                     + " |")
    gap = (ood.acc_cells_at_or_above - ood.acc_cells_below_uniform_share).dropna()
    if len(gap):
        lines += ["", f"On the OOD split, accuracy in the cells at or above the uniform share minus that in the cells "
                      f"below it: {100 * gap.mean():+.1f} points on average over the {len(gap)} model(s) (range "
                      f"{100 * gap.min():+.1f} to {100 * gap.max():+.1f}; positive, i.e. better where training had more "
                      f"targets, in {int((gap > 0).sum())} of {len(gap)}). Each OOD cell holds only a few puzzles "
                      f"({int(ood.puzzles.iloc[0])} in all for the first model), so read single models' ρ with care"
                      + ("; the models share their data seed, hence the same splits." if per.data_seed.nunique() == 1
                         else "; the models' data seeds differ, so their splits do too.")]
    lines.append("")
    return "\n".join(lines)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds {text!r}: give non-negative integers separated by commas, e.g. 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds):
        raise InputError(f"--seeds {text!r}: give non-negative integers separated by commas, e.g. 0,1,2")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text!r} names a seed twice (its rows would be counted twice); give each once")
    return seeds


def main(argv: list[str] | None = None) -> int:
    from trainers.config import MAX_N_PER_LEVEL
    from trainers.tasks.lst_generate import DEFAULT_MIN_JACCARD

    p = OneLineArgumentParser(prog="python -m analyses.lst.data_check", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0", help="data seeds, comma-separated (default: 0, the trainer's default)")
    p.add_argument("--n-per-level", type=int, default=3000, help="training pool per level (default: 3000, the trainer's)")
    p.add_argument("--min-jaccard", type=float, default=DEFAULT_MIN_JACCARD,
                   help=f"the filter's Jaccard distance (default: {DEFAULT_MIN_JACCARD:g}, the trainer's)")
    p.add_argument("--runs", type=Path, nargs="+", default=[], metavar="RUN",
                   help="trained LST run folders (or .pt checkpoints): their accuracy per target cell on their own splits")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "lst-data", help="report folder (default: reports/lst-data)")
    p.add_argument("--force", action="store_true", help="replace an --out folder not written by pe-probe")
    args = p.parse_args(argv)
    from pe_probe.output import check_out_dir, staged_dir

    try:
        seeds = parse_seeds(args.seeds)
        if args.n_per_level < 6:
            raise InputError(f"--n-per-level {args.n_per_level}: at least 6 (each level's test share must round to one puzzle)")
        if args.n_per_level > MAX_N_PER_LEVEL:
            raise InputError(f"--n-per-level {args.n_per_level:,} is above the {MAX_N_PER_LEVEL:,} the trainer makes; "
                             f"use at most that")
        if not 0.0 <= args.min_jaccard <= 1.0:  # NaN too
            raise InputError(f"--min-jaccard {args.min_jaccard!r}: a Jaccard distance between 0 and 1, e.g. "
                             f"{DEFAULT_MIN_JACCARD:g} (the trainer's)")
        check_out_dir(args.out, args.force, inputs=args.runs, kind="lst-data")
        if not args.runs and not args.force and (args.out / "cell_accuracy.csv").exists():
            raise InputError(f"--out {args.out} holds a per-model section (cell_accuracy.csv, from --runs) that a run "
                             f"without --runs would drop, and the runs may not be here to rebuild it; pass the same "
                             f"--runs, another --out, or --force")
        for run in args.runs:
            run_checkpoint(run)
        labels = run_labels(args.runs)
        evaluated = []
        for i, (run, lab) in enumerate(zip(args.runs, labels), 1):
            print(f"[{i}/{len(args.runs)}] accuracy per target cell: {lab}", file=sys.stderr, flush=True)
            evaluated.append(cell_accuracy(run, lab))
        cells = pd.concat(evaluated, ignore_index=True) if evaluated else None
        per_seed = []
        for s in seeds:
            for mj in dict.fromkeys((args.min_jaccard, 0.0)):  # the filter, then the unfiltered control
                print(f"splits of data seed {s}, min Jaccard {mj:g}", file=sys.stderr, flush=True)
                per_seed.append(split_tables(s, args.n_per_level, mj))  # a filter too strict to fill: InputError
    except InputError as e:
        p.error(first_line(e))
    counts = pd.concat([c for c, _, _ in per_seed], ignore_index=True)
    givens = pd.concat([g for _, g, _ in per_seed], ignore_index=True)
    summary = pd.DataFrame([s for _, _, s in per_seed])
    shown = list(sys.argv[1:] if argv is None else argv)
    with staged_dir(args.out, force=args.force, kind="lst-data") as stage:
        counts.to_csv(stage / "target_cells.csv", index=False)
        givens.to_csv(stage / "givens.csv", index=False)
        summary.to_csv(stage / "summary.csv", index=False)
        if cells is not None:
            cells.to_csv(stage / "cell_accuracy.csv", index=False)
            cell_summary(cells).to_csv(stage / "cell_summary.csv", index=False)
        (stage / "README.md").write_text(readme(summary, givens, shown, cells, trained_by(args.runs)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.data_check")
