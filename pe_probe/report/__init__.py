"""Reports of one analysis: static figures (with their data as CSV), an interactive page, an index page.

`write_report` is what `pe_probe.api.write_analysis` calls after writing metrics.json, metrics.csv
and embedding.csv into the same folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pe_probe.result import AnalysisResult

__all__ = ["write_report"]


def write_report(result: AnalysisResult, out_dir: Path, *, formats: Sequence[str] = ("png", "pdf"),
                 interactive: bool = True) -> list[Path]:
    """Write ``figures/*.<fmt>`` (+ a tidy CSV beside each), ``interactive.html`` and ``index.html``.

    Parameters
    ----------
    result : the analysis to report.
    out_dir : folder to write into (created if missing). Existing files of the same names are replaced.
    formats : image formats for the static figures; the first one is shown on the index page.
    interactive : also write the self-contained plotly page.

    Returns the paths written, figures first.
    """
    from pe_probe.errors import InputError
    from pe_probe.report.index import write_index
    from pe_probe.report.static import write_static_figures

    allowed = {"png", "pdf", "svg"}
    formats = tuple(formats)
    bad = [f for f in formats if f not in allowed]
    if bad or not formats:
        raise InputError(f"unknown figure format(s) {bad or '(none)'}; choose from {sorted(allowed)}")
    out_dir = Path(out_dir)
    figures_dir = out_dir / "figures"
    written = write_static_figures(result, figures_dir, formats)
    if interactive:
        from pe_probe.report.interactive import write_interactive

        written.append(write_interactive(result, out_dir / "interactive.html"))
    names = [p.stem for p in written if p.parent == figures_dir and p.suffix == ".csv"]
    written.append(write_index(result, out_dir, names, image_format=formats[0], interactive=interactive))
    return written
