"""Publication style shared by every static figure: sizes, palettes, fonts, and one way to save.

Why one module: every figure must embed its fonts in PDF (``pdf.fonttype=42``), use colour-blind
safe colours, fit a one- or two-column journal width, and ship the tidy data it plots as a CSV
beside it. Keeping those rules here means a new figure cannot forget one of them.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

ONE_COLUMN_IN = 3.4
TWO_COLUMN_IN = 7.0

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
OKABE_ITO = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#F0E442",  # yellow
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#000000",  # black
)
SEQUENTIAL_CMAP = "viridis"  # perceptually uniform, colour-blind safe
DISTANCE_CMAP = "cividis"

METHOD_COLOURS = {"pca": OKABE_ITO[4], "cmds": OKABE_ITO[5], "smacof": OKABE_ITO[2], "umap": OKABE_ITO[6]}

RC_PARAMS = {
    "pdf.fonttype": 42,  # TrueType: fonts embedded and editable
    "ps.fonttype": 42,
    "svg.fonttype": "none",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # filled in `publication_style`
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "image.cmap": SEQUENTIAL_CMAP,
}


def method_colour(method: str, i: int = 0) -> str:
    """Colour of a recovery method, stable across figures."""
    return METHOD_COLOURS.get(method, OKABE_ITO[i % len(OKABE_ITO)])


@contextmanager
def publication_style() -> Iterator[None]:
    """Use the Agg backend and our rcParams for the figures drawn inside the block."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from cycler import cycler

    params = dict(RC_PARAMS)
    params["axes.prop_cycle"] = cycler(color=list(OKABE_ITO))
    with plt.rc_context(params):
        yield


def save_figure(fig, frame, out_dir: Path, name: str, formats: Sequence[str]) -> list[Path]:
    """Save ``fig`` as ``out_dir/name.<fmt>`` for each format, and ``frame`` (tidy data) as ``name.csv``.

    The figure is closed afterwards so long runs do not accumulate open figures.
    """
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    csv_path = out_dir / f"{name}.csv"
    frame.to_csv(csv_path, index=False, float_format="%.6g")
    written.append(csv_path)
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, format=fmt, metadata=_metadata(fmt))
        written.append(path)
    plt.close(fig)
    return written


def _metadata(fmt: str) -> dict | None:
    """Drop time stamps so that re-running produces identical files where the backend allows it."""
    if fmt == "png":
        return {"Software": "pe-probe"}
    if fmt == "pdf":
        return {"Creator": "pe-probe", "CreationDate": None}
    if fmt == "svg":
        return {"Date": None}
    return None
