"""What every benchmark script writes: its raw rows as CSV and its markdown report, side by side."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Sequence


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that wrote a report, as the report quotes it (``argv`` None: this process's own)."""
    return f"python analyses/benchmarks/{script} " + " ".join(argv if argv is not None else sys.argv[1:])


def write_results(out_dir: str | Path, stem: str, rows: Sequence[dict], markdown: str,
                  fields: Sequence[str] | None = None) -> Path:
    """OUT/<stem>.csv (the rows; ``fields`` picks and orders columns, default: the first row's keys) and
    OUT/<stem>.md; returns the markdown path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fields = list(fields if fields is not None else rows[0])
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    md = out / f"{stem}.md"
    md.write_text(markdown)
    return md
