"""Regenerate the committed example reports in reports/examples/.

Two 8x8 examples analysed against grid:8x8 through the public API (`pe_probe.api.write_analysis`):
``sinusoid-8x8`` (the study's planted 2-D sinusoid table, d=64: a PE that encodes the grid) and
``random-8x8`` (a Gaussian table of the same shape: what chance looks like). To keep the committed
folders small, figures are PNG only (no PDFs) and both interactive pages load one shared local copy of plotly.js
(``reports/examples/plotly.min.js``, still offline) instead of embedding 4.8 MB each.

Run:  .venv/bin/python analyses/make_examples.py  [--out reports/examples] [--seed 0] [--force]
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from pe_probe.errors import InputError, OneLineArgumentParser, first_line

ROOT = Path(__file__).resolve().parents[1]


def make_examples(out: Path, seed: int = 0) -> list[Path]:
    """Analyse both tables and write their report folders under ``out``; return the folders."""
    from pe_probe.analysis import analyze
    from pe_probe.api import write_analysis
    from pe_probe.groundtruth import grid
    from pe_probe.reference import sinusoid_2d
    from pe_probe.report.interactive import write_interactive
    import plotly

    gt = grid(8, 8)
    tables = {
        "sinusoid-8x8": (sinusoid_2d(8, 8, 64), "builtin:sin2d:8x8"),
        "random-8x8": (np.random.default_rng(seed).normal(size=(64, 64)), f"builtin:random:64x64 (seed {seed})"),
    }
    folders = []
    for name, (table, source) in tables.items():
        result = analyze(table, gt, n_perm=999, n_boot=1000, seed=seed, provenance={"source": source})
        folder = write_analysis(result, out / name, force=True, formats=("png",))  # no PDFs: keep them small
        write_interactive(result, folder / "interactive.html", plotlyjs="../plotly.min.js")
        folders.append(folder)
    shutil.copyfile(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", out / "plotly.min.js")
    return folders


def main(argv: list[str] | None = None) -> int:
    """Check the options (one-line errors, exit 2, nothing written), then write both reports into a staged folder
    that replaces ``--out`` as a whole, or not at all (a Ctrl-C leaves the committed folder as it was)."""
    from pe_probe.analysis import MAX_SEED
    from pe_probe.output import check_out_dir, staged_dir

    parser = OneLineArgumentParser(
        prog="python analyses/make_examples.py", description=__doc__.split("\n\n")[0],
        epilog="example: python analyses/make_examples.py --out out/examples   (then compare with reports/examples)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "examples",
                        help="folder for the two reports and plotly.min.js, replaced as a whole (default: reports/examples)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random table and of every analysis's permutations and resamples (default: 0)")
    parser.add_argument("--force", action="store_true", help="replace an --out folder not written by pe-probe")
    args = parser.parse_args(argv)
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed {args.seed}: an integer from 0 to {MAX_SEED:,}")
    try:
        check_out_dir(args.out, args.force, kind="examples")
    except InputError as e:
        parser.error(first_line(e))
    with staged_dir(args.out, force=args.force, kind="examples") as stage:
        names = [folder.name for folder in make_examples(stage, args.seed)]
    for name in names:
        folder = args.out / name
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{folder}  ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python analyses/make_examples.py")
