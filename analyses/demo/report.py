"""Regenerate reports/demo/: the main job (`pe-probe demo`) with its small outputs committed.

    python -m analyses.demo.report        # trains into runs/report-demo/ (resumable; a few minutes on 2 CPU cores)

`pe-probe demo` writes checkpoints and full reports (22 MB); this keeps what a reader needs to check the
README's demo table without rerunning it: the summary, both runs' config and training log, their metrics
(`metrics.csv`), two figures per run, and the comparison's tables and figures. No checkpoints.
"""

from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

from pe_probe.errors import InputError, OneLineArgumentParser, check_utf8_out, first_line, script_exit
from pe_probe.output import check_out_dir, staged_dir

ROOT = Path(__file__).resolve().parents[2]
RUN_FILES = ("config.json", "metrics.jsonl")  # per run: what it was, and how it trained
ANALYSIS_FILES = ("metrics.csv", "figures/layout.png", "figures/rdm.png")  # per run: its PE table's geometry
COMPARE_FILES = ("compare.csv", "correlations.csv", "figures/identifiability_vs_generalization.png",
                 "figures/metrics_vs_pe.init_std.png")
FOLDERS_LINE = "Folders: `runs/`"  # the demo's pointer to its own folders, replaced here


class _HelpFormat(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help keeps the module docstring's example lines and names each option's default."""


def parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog="python -m analyses.demo.report", description=__doc__, formatter_class=_HelpFormat)
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "report-demo",
                   help="where `pe-probe demo` trains (resumable; finished runs are skipped)")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "demo", help="the report folder")
    p.add_argument("--force", action="store_true", help="retrain the two runs from scratch")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run (or resume) the demo, then write the report folder atomically."""
    from trainers.demo import SIGMAS, run_demo
    from trainers.train import RunDirRefused

    p = parser()
    args = p.parse_args(argv)
    try:
        check_utf8_out(args.runs, "--runs")  # before --out's check, which would name it otherwise
        check_out_dir(args.out, created_inputs=[args.runs], kind="demo-report")  # before training: replacing --out must not delete the runs
        summary = run_demo(args.runs, force=args.force, flag="--runs")
        missing = [rel for rel in small_files(list(SIGMAS)) if not (args.runs / rel).is_file()]
        if missing:
            raise InputError(f"{args.runs / missing[0]} is missing ({len(missing)} file(s) of the demo); rerun with --force")
        with staged_dir(args.out, kind="demo-report") as out:
            copy_outputs(args.runs, out, list(SIGMAS))
            (out / "README.md").write_text(readme(summary.read_text(), args.runs, list(SIGMAS)))
    except RunDirRefused as e:  # the trainer's fix names its --out, which here is --runs
        p.error(f"{e.subject} {e.reason}; pass another --runs, or --force to retrain the two runs from scratch")
    except InputError as e:
        p.error(first_line(e))
    print(f"wrote {args.out / 'README.md'}")
    return 0


def small_files(names: list[str]) -> list[str]:
    """The demo folder's files the report keeps, relative to it."""
    return ([f"runs/{n}/{f}" for n in names for f in RUN_FILES] + [f"analysis/{n}/{f}" for n in names for f in ANALYSIS_FILES]
            + [f"compare/{f}" for f in COMPARE_FILES])


def copy_outputs(demo: Path, out: Path, names: list[str]) -> None:
    """The small files of the demo folder ``demo`` into ``out``, keeping their relative paths; compare.csv's
    sources are written relative to ``demo`` (the committed report names no folder of the machine that made it)."""
    for rel in small_files(names):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel == "compare/compare.csv":
            relative_sources(demo / rel, out / rel, demo)
        else:
            shutil.copyfile(demo / rel, out / rel)


def relative_sources(src: Path, dst: Path, base: Path) -> None:
    """Copy the tidy CSV ``src`` to ``dst`` with each ``source`` under ``base`` made relative to it (others kept)."""
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("source")
    base = base.resolve()
    for row in rows[1:]:
        path = Path(row[col]).resolve()
        if path.is_relative_to(base):
            row[col] = path.relative_to(base).as_posix()
    with open(dst, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def training_table(demo: Path, names: list[str]) -> str:
    """Training loss and OOD accuracy at each evaluation of each run (from its metrics.jsonl)."""
    from analyses.lst.analyse import read_evals

    logs = {n: read_evals(demo / "runs" / n) for n in names}
    epochs = sorted({line["epoch"] for lines in logs.values() for line in lines})
    head = "| epoch | " + " | ".join(f"{n} train_loss | {n} ood_acc" for n in names) + " |"
    rows = [head, "|---:|" + "---:|" * (2 * len(names))]
    for e in epochs:
        cells = []
        for n in names:
            line = next((x for x in logs[n] if x["epoch"] == e), {})
            cells += [f"{line['train_loss']:.4f}" if "train_loss" in line else "", f"{line['ood_acc']:.3f}" if "ood_acc" in line else ""]
        rows.append(f"| {e} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def readme(summary: str, demo: Path, names: list[str]) -> str:
    """The report's README: how to regenerate it, the demo's own summary, the training logs, the figures."""
    from analyses.benchmarks.bench_io import machine
    import torch

    body = summary.split(FOLDERS_LINE)[0].rstrip()
    title, rest = body.split("\n", 1)
    figures = []
    for n in names:
        figures += [f"**{n}**: recovered layout (`analysis/{n}/figures/layout.png`) and distance matrices "
                    f"(`rdm.png`)", "", f"![{n} layout](analysis/{n}/figures/layout.png)",
                    f"![{n} distances](analysis/{n}/figures/rdm.png)", ""]
    return "\n".join([
        title,
        "",
        "Regenerate (trains the two runs into `runs/report-demo/`, resumable, a few minutes on two CPU cores; "
        "then analyses and compares them as `make demo` does, with the same code and settings):",
        "",
        "```bash",
        "python -m analyses.demo.report",
        "```",
        "",
        f"Machine: {machine(torch.device('cpu'))}. One run's accuracies move with floating-point rounding (another "
        "CPU type or core count can change them; see README, *The main job*).",
        rest.rstrip(),
        "",
        "## Training (every evaluation, from each run's `metrics.jsonl`)",
        "",
        training_table(demo, names),
        "",
        "Chance: loss ln 4 = 1.386, accuracy 0.25.",
        "",
        "## Figures",
        "",
        *figures,
        "Identifiability against OOD accuracy, and every metric against σ (`compare/`; the two runs only):",
        "",
        "![identifiability vs generalisation](compare/figures/identifiability_vs_generalization.png)",
        "![metrics vs sigma](compare/figures/metrics_vs_pe.init_std.png)",
        "",
        "Files: `runs/<run>/` (config.json, metrics.jsonl), `analysis/<run>/metrics.csv` (every metric of the "
        "layer-0 table), `compare/compare.csv` and `correlations.csv`. Full reports (interactive HTML) and "
        "checkpoints stay in `runs/report-demo/`, which is not committed.",
        "",
    ])


if __name__ == "__main__":
    script_exit(main, "python -m analyses.demo.report")
