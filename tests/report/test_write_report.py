"""write_report: the files of DESIGN.md section 5 (minus the lead's data files), each figure with its CSV."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pe_probe.errors import InputError
from pe_probe.report import write_report

EXPECTED_CSV_COLUMNS = {
    "rdm": {"matrix", "row", "col", "value"},
    "shepard": {"i", "j", "true_distance", "pe_distance"},
    "layout": {"method", "position", "true_0", "true_1", "recovered_0", "recovered_1"},
    "spectrum": {"component", "ratio", "cumulative"},
    "pc_grid": {"component", "position", "row", "col", "score"},
}


@pytest.fixture(scope="module")
def sinusoid_report(tmp_path_factory):
    from .conftest import grid_coords, hand_result, sinusoid_2d

    r = hand_result(sinusoid_2d(8, 8, 64), grid_coords(8, 8), shape=(8, 8), spec="grid:8x8")
    out = tmp_path_factory.mktemp("report")
    return r, out, write_report(r, out)


def test_every_figure_has_png_pdf_and_a_replottable_csv(sinusoid_report):
    r, out, written = sinusoid_report
    figs = out / "figures"
    for name, cols in EXPECTED_CSV_COLUMNS.items():
        for ext in ("png", "pdf", "csv"):
            assert (figs / f"{name}.{ext}").is_file(), f"{name}.{ext} missing"
        frame = pd.read_csv(figs / f"{name}.csv")
        assert cols <= set(frame.columns), f"{name}.csv lacks {cols - set(frame.columns)}"
        assert len(frame) > 0
    # the layout CSV re-creates the recovered coordinates of the result
    lay = pd.read_csv(figs / "layout.csv")
    pca = lay[lay.method == "pca"].sort_values("position")
    np.testing.assert_allclose(pca[["recovered_0", "recovered_1"]].to_numpy(), r.embeddings["pca"], rtol=1e-5, atol=1e-5)
    assert set(written) >= {figs / "rdm.png", out / "interactive.html", out / "index.html"}


def test_does_not_write_the_leads_data_files(sinusoid_report):
    _, out, _ = sinusoid_report
    for name in ("metrics.json", "metrics.csv", "embedding.csv"):
        assert not (out / name).exists()


def test_pdf_embeds_truetype_fonts(sinusoid_report):
    _, out, _ = sinusoid_report
    pdf = (out / "figures" / "shepard.pdf").read_bytes()
    assert b"/FontFile2" in pdf  # TrueType program embedded (pdf.fonttype 42)
    assert b"/Subtype /Type3" not in pdf


def test_index_links_are_relative_and_metrics_are_read_in_words(sinusoid_report):
    r, out, _ = sinusoid_report
    page = (out / "index.html").read_text()
    hrefs = re.findall(r'(?:href|src)="([^"]+)"', page)
    for target in ("metrics.json", "metrics.csv", "embedding.csv", "interactive.html", "figures/rdm.png"):
        assert target in hrefs
    assert all(not h.startswith(("/", "http:", "https:", "file:")) for h in hrefs)
    r2 = r.metrics["recovery_pca_r2"]
    assert f"explains {100 * r2:.0f}% of the variance of the true layout" in page
    assert "no random relabelling of positions (out of 999)" in page  # p = 0.001 = 1 / (1 + 999)
    assert f"{r.metrics['null_rsa_mean']:.2f} ± {r.metrics['null_rsa_sd']:.2f}" in page
    for h in hrefs:  # every local link points to a file that exists (data files aside: the lead writes them)
        if h.startswith("figures/") or h == "interactive.html":
            assert (out / h).is_file(), h


def test_three_d_and_line_ground_truths(cube_result, line_result, tmp_path):
    w3 = write_report(cube_result, tmp_path / "cube", formats=("png",))
    assert (tmp_path / "cube" / "figures" / "layout.png") in w3
    assert not (tmp_path / "cube" / "figures" / "pc_grid.png").exists()
    assert "Scatter3d".lower() in (tmp_path / "cube" / "interactive.html").read_text().lower() or \
        '"type":"scatter3d"' in (tmp_path / "cube" / "interactive.html").read_text()
    lay = pd.read_csv(tmp_path / "cube" / "figures" / "layout.csv")
    assert {"true_2", "recovered_2"} <= set(lay.columns)
    write_report(line_result, tmp_path / "line", formats=("png",), interactive=False)
    assert (tmp_path / "line" / "figures" / "layout.png").is_file()
    assert not (tmp_path / "line" / "interactive.html").exists()
    assert "interactive.html" not in (tmp_path / "line" / "index.html").read_text()


def test_unknown_format_is_an_input_error(sinusoid_result, tmp_path):
    with pytest.raises(InputError, match="unknown figure format"):
        write_report(sinusoid_result, tmp_path, formats=("bmp",))


@pytest.mark.slow
def test_large_n_is_bounded(tmp_path):
    """N = 4096 (64x64 grid): report in bounded time, interactive page under 5 MiB with a block-averaged heatmap."""
    import time

    from .conftest import grid_coords, hand_result

    rng = np.random.default_rng(0)
    g = grid_coords(64, 64)
    r = hand_result(g @ rng.normal(size=(2, 32)) + 0.3 * rng.normal(size=(4096, 32)), g, shape=(64, 64),
                    spec="grid:64x64", methods=("pca", "cmds", "smacof"))
    t0 = time.perf_counter()
    write_report(r, tmp_path, formats=("png",))
    elapsed = time.perf_counter() - t0
    size = (tmp_path / "interactive.html").stat().st_size
    assert size < 5 * 1024 * 1024, f"interactive.html is {size / 1e6:.2f} MB"
    page = (tmp_path / "interactive.html").read_text()
    assert 'id="block-note"' in page and "block-averaged" in page
    assert elapsed < 60, elapsed
    rdm = pd.read_csv(tmp_path / "figures" / "rdm.csv")
    assert rdm["row"].max() < 128
    assert len(pd.read_csv(tmp_path / "figures" / "shepard.csv")) <= 20_000


@pytest.mark.parametrize("formats", [("png", "pdf"), ("png",), ("svg",)])
def test_every_local_link_of_the_index_page_exists(tmp_path, formats):
    """index.html links only files that are there (PNG-only reports had dangling PDF links)."""
    from .conftest import grid_coords, hand_result, sinusoid_2d

    from pe_probe.api import write_analysis

    r = hand_result(sinusoid_2d(4, 4, 16), grid_coords(4, 4), shape=(4, 4), spec="grid:4x4")
    write_analysis(r, tmp_path / "out", formats=formats)
    tmp_path = tmp_path / "out"
    page = (tmp_path / "index.html").read_text()
    links = [l for l in re.findall(r'(?:href|src)="([^"#:]+)"', page) if not l.startswith("data")]
    assert links and all((tmp_path / l).is_file() for l in links), [l for l in links if not (tmp_path / l).is_file()]
    assert ("figures/rdm.pdf" in links) == ("pdf" in formats)


def test_the_shepard_line_is_the_median_per_true_distance(sinusoid_result):
    """Its legend says median: a mean line would mislabel the series (a mutation audit found it untested)."""
    import matplotlib.pyplot as plt

    from pe_probe.report import frames as fr
    from pe_probe.report.static import shepard_figure

    shep = fr.shepard_frame(sinusoid_result)
    fig = shepard_figure(shep, sinusoid_result.metrics)
    line = [ln for ln in fig.axes[0].lines if ln.get_label() == "median per true distance"][0]
    want = shep.assign(t=shep.true_distance.round(6)).groupby("t").pe_distance.median()
    np.testing.assert_allclose(line.get_ydata(), want.to_numpy(), rtol=1e-6)
    plt.close(fig)


def test_a_views_page_says_what_matrix_it_analysed(sinusoid_result, tmp_path):
    """--view kernel's page said 'PE table' / 'PE distance' throughout and named the view only by a param suffix."""
    import dataclasses

    from pe_probe.report.index import write_index

    for name in ("raw", "k"):
        (tmp_path / name).mkdir()
    assert "<p>View " not in write_index(sinusoid_result, tmp_path / "raw", [], interactive=False).read_text()
    prov = dict(sinusoid_result.provenance, view={"view": "kernel", "param": "x"})
    page = write_index(dataclasses.replace(sinusoid_result, provenance=prov), tmp_path / "k", [], interactive=False).read_text()
    assert "<p>View <code>kernel</code>: the positional attention kernel" in page and "refer to that matrix" in page


def test_the_pc_grid_caption_names_the_colours_the_map_draws(sinusoid_result):
    """The title says purple = negative, orange = positive; the colour map must draw them so (PuOr alone runs the
    other way: a figure QA found the most negative sin2d scores drawn orange)."""
    import matplotlib.pyplot as plt

    from pe_probe.report import frames as fr
    from pe_probe.report.static import pc_grid_figure

    pcs = fr.pc_grid_frame(sinusoid_result)
    fig = pc_grid_figure(pcs)
    assert "purple = negative score, orange = positive" in fig._suptitle.get_text()
    image = fig.axes[0].images[0]
    low, high = image.cmap(image.norm(image.norm.vmin)), image.cmap(image.norm(image.norm.vmax))
    assert low[2] > low[0] and low[1] < 0.2  # purple: more blue than red, little green
    assert high[0] > high[2] and high[1] > 0.2  # orange: more red than blue
    plt.close(fig)


def test_the_shepard_caption_sits_above_the_axes_not_over_the_pairs(sinusoid_result):
    """The RSA caption in a corner box hid pairs under it (26 of 2,016 in the committed random-8x8 figure)."""
    import matplotlib.pyplot as plt

    from pe_probe.report import frames as fr
    from pe_probe.report.static import shepard_figure

    fig = shepard_figure(fr.shepard_frame(sinusoid_result), sinusoid_result.metrics)
    ax = fig.axes[0]
    assert not ax.texts  # nothing drawn inside the axes
    assert ax.get_title(loc="left").startswith("Spearman ρ")
    plt.close(fig)


def test_figure_numbers_keep_their_trailing_zeros():
    from pe_probe.report.static import _fmt, rsa_caption

    assert _fmt(0.7703) == "0.770" and _fmt(0.034) == "0.0340" and _fmt(100.0) == "100" and _fmt(-0.5) == "-0.500"
    assert _fmt(float("nan")) == "n/a" and _fmt(None) == "n/a" and _fmt(1.234e-7) == "1.23e-07"
    assert rsa_caption({"rsa_spearman": 0.7703, "rsa_ci_low": 0.768, "rsa_ci_high": 0.779}) == \
        "Spearman ρ = 0.770 [0.768, 0.779]"
