"""Regenerate the committed example reports in reports/examples/.

Two 8x8 examples analysed against grid:8x8 through the public API (`pe_probe.api.write_analysis`):
``sinusoid-8x8`` (the study's planted 2-D sinusoid table, d=64: a PE that encodes the grid) and
``random-8x8`` (a Gaussian table of the same shape: what chance looks like). To keep the committed
folders small, figures are PNG only (no PDFs) and both interactive pages load one shared local copy of plotly.js
(``reports/examples/plotly.min.js``, still offline) instead of embedding 4.8 MB each.

Run:  .venv/bin/python analyses/make_examples.py  [--out reports/examples]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from pe_probe.errors import OneLineArgumentParser

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


def main() -> None:
    parser = OneLineArgumentParser(prog="python analyses/make_examples.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "examples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for folder in make_examples(args.out, args.seed):
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{folder}  ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
