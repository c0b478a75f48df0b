"""Where the target cell sits in the LST training, test and held-out (OOD) puzzles, and how many cells are given.

    python -m analyses.lst.data_check                      # the trainer's default splits (seed 0), reports/lst-data/
    python -m analyses.lst.data_check --seeds 0,1,2 --out DIR

The training pool excludes every puzzle within Jaccard distance `--min-jaccard` of an OOD puzzle
(`trainers.tasks.lst_generate.make_splits`). The Jaccard sets include the target marker's cell, so a candidate
whose target sits where many OOD targets sit shares that element with them and is rejected more often: the
filter moves training targets away from the OOD targets' cells. In a study of positional encodings that is a
shift in exactly what the PE encodes, so this check measures it (per cell: training and OOD target counts and
their Spearman ρ over the 16 cells; the training share of an OOD puzzle's target cell against a test puzzle's)
with the number of given cells per level and split, which any Jaccard filter also shifts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pe_probe.errors import InputError, OneLineArgumentParser, first_line

ROOT = Path(__file__).resolve().parents[2]


def target_cells(puzzles: np.ndarray) -> np.ndarray:
    """The index (0-15, row-major) of each puzzle's target cell."""
    from trainers.tasks.lst_puzzles import TARGET

    return np.argmax(np.asarray(puzzles) == TARGET, axis=1)


def split_tables(seed: int, n_per_level: int, min_jaccard: float) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Per-cell target counts per split, givens per level and split, and the summary numbers for one seed."""
    from scipy import stats

    from trainers.tasks.lst_generate import make_splits
    from trainers.tasks.lst_puzzles import LEVELS, TARGET

    splits = make_splits(n_per_level=n_per_level, min_jaccard=min_jaccard, seed=seed)
    cells = {name: target_cells(s.puzzles) for name, s in splits.items()}
    counts = pd.DataFrame({name: np.bincount(c, minlength=16) for name, c in cells.items()})
    counts.insert(0, "cell", [f"({i // 4},{i % 4})" for i in range(16)])
    counts.insert(0, "seed", seed)
    share = counts["train"] / counts["train"].sum()
    rho = stats.spearmanr(counts["train"], counts["ood"])
    givens = []
    for name, s in splits.items():
        n_given = ((s.puzzles > 0) & (s.puzzles < TARGET)).sum(axis=1)
        for lvl, label in enumerate(LEVELS):
            sel = s.levels == lvl
            if sel.any():
                givens.append({"seed": seed, "split": name, "level": label, "puzzles": int(sel.sum()),
                               "mean_givens": float(n_given[sel].mean())})
    summary = {"seed": seed, "train_puzzles": int(counts["train"].sum()), "ood_puzzles": int(counts["ood"].sum()),
               "train_share_min": float(share.min()), "train_share_max": float(share.max()),
               "uniform_share": 1 / 16, "spearman_train_vs_ood_counts": float(rho.statistic),
               "spearman_p": float(rho.pvalue),
               "train_share_of_ood_target_cell": float(share.to_numpy()[cells["ood"]].mean()),
               "train_share_of_test_target_cell": float(share.to_numpy()[cells["test"]].mean())}
    return counts, pd.DataFrame(givens), summary


def readme(summary: pd.DataFrame, givens: pd.DataFrame, argv: list[str]) -> str:
    """The report: the measured shift, per seed, with the givens table."""
    from trainers.tasks.lst_puzzles import LEVELS

    g = givens.groupby(["level", "split"]).mean_givens.mean().unstack("split")
    g = g.reindex([lvl for lvl in LEVELS if lvl in g.index])[[c for c in ("train", "test", "ood") if c in g.columns]]
    lines = ["# LST data: where the targets sit, and how many cells are given",
             "",
             f"Written by `python -m analyses.lst.data_check{' ' + ' '.join(argv) if argv else ''}` (the trainer's own "
             "`make_splits`; no training).",
             "",
             "The training pool excludes puzzles within Jaccard distance of a held-out (OOD) puzzle, and the Jaccard "
             "sets include the target marker's cell. A candidate whose target sits where OOD targets sit shares that "
             "element with them and is rejected more often, so the filter moves training targets away from the OOD "
             "targets' cells: a shift in where the target is, which is what a positional encoding encodes.",
             "",
             "| seed | training puzzles | training share of a cell, min-max (uniform 6.25%) | Spearman ρ, training vs OOD target count over the 16 cells | training share of an OOD puzzle's target cell | of a test puzzle's |",
             "| ---: | ---: | --- | --- | ---: | ---: |"]
    for r in summary.itertuples():
        lines.append(f"| {r.seed} | {r.train_puzzles:,} | {100 * r.train_share_min:.1f}%-{100 * r.train_share_max:.1f}% | "
                     f"{r.spearman_train_vs_ood_counts:.2f} (p = {r.spearman_p:.2g}) | "
                     f"{100 * r.train_share_of_ood_target_cell:.2f}% | {100 * r.train_share_of_test_target_cell:.2f}% |")
    lines += ["",
              "Mean number of given cells per level and split (averaged over the seeds): the filter also keeps the "
              "training puzzles with fewer givens than the OOD ones, as any Jaccard filter on given cells would.",
              "",
              "| level | " + " | ".join(g.columns) + " |", "| --- | " + " | ".join("---:" for _ in g.columns) + " |"]
    for level, row in g.iterrows():
        lines.append(f"| {level} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    lines += ["",
              "So the study's held-out accuracy, as our trainer builds its splits, measures generalisation to new "
              "puzzles whose targets sit more often in cells that training saw less, with more givens. Whether the "
              "study's own splits have the first shift depends on whether its filter counts the target marker, which "
              "we have not checked. A split stratified by target cell, or Jaccard sets without the marker, would "
              "remove it; how much it moves held-out accuracy (accuracy per target cell against the cell's training "
              "share) is not measured yet. Per-cell counts are in `target_cells.csv`, givens in `givens.csv`, the "
              "table above in `summary.csv`.",
              ""]
    return "\n".join(lines)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds {text!r}: give non-negative integers separated by commas, e.g. 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds):
        raise InputError(f"--seeds {text!r}: give non-negative integers separated by commas, e.g. 0,1,2")
    return seeds


def main(argv: list[str] | None = None) -> int:
    from trainers.tasks.lst_generate import DEFAULT_MIN_JACCARD

    p = OneLineArgumentParser(prog="python -m analyses.lst.data_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0", help="data seeds, comma-separated (default: 0, the trainer's default)")
    p.add_argument("--n-per-level", type=int, default=3000, help="training pool per level (default: 3000, the trainer's)")
    p.add_argument("--min-jaccard", type=float, default=DEFAULT_MIN_JACCARD,
                   help=f"the filter's Jaccard distance (default: {DEFAULT_MIN_JACCARD:g}, the trainer's)")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "lst-data", help="report folder (default: reports/lst-data)")
    p.add_argument("--force", action="store_true", help="replace an --out folder not written by pe-probe")
    args = p.parse_args(argv)
    from pe_probe.output import check_out_dir, staged_dir

    try:
        seeds = parse_seeds(args.seeds)
        if args.n_per_level < 6:
            raise InputError(f"--n-per-level {args.n_per_level}: at least 6 (each level's test share must round to one puzzle)")
        check_out_dir(args.out, args.force)
    except InputError as e:
        p.error(first_line(e))
    per_seed = [split_tables(s, args.n_per_level, args.min_jaccard) for s in seeds]
    counts = pd.concat([c for c, _, _ in per_seed], ignore_index=True)
    givens = pd.concat([g for _, g, _ in per_seed], ignore_index=True)
    summary = pd.DataFrame([s for _, _, s in per_seed])
    shown = list(sys.argv[1:] if argv is None else argv)
    with staged_dir(args.out, force=args.force) as stage:
        counts.to_csv(stage / "target_cells.csv", index=False)
        givens.to_csv(stage / "givens.csv", index=False)
        summary.to_csv(stage / "summary.csv", index=False)
        (stage / "README.md").write_text(readme(summary, givens, shown))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.data_check")
