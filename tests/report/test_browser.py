"""The interactive page in a real headless Chromium: it renders every point, links hover to the RDM,
and logs no errors. Skipped only when no Chromium is installed (see .ci/install_chromium.sh)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from pe_probe.report.interactive import write_interactive


def find_chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def load_headless(page, tmp_path, fragment: str = "") -> tuple[str, str]:
    """Open ``page`` from disk in headless Chromium; return (DOM after scripts ran, stderr). Saves a screenshot."""
    exe = find_chromium()
    if exe is None:
        pytest.skip("no Chromium at /usr/bin/chromium or on PATH (run .ci/install_chromium.sh)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", "--virtual-time-budget=8000",
           "--window-size=1300,720", f"--screenshot={tmp_path / 'screenshot.png'}", "--enable-logging=stderr",
           "--v=0", "--dump-dom", page.resolve().as_uri() + fragment]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def html_attr(dom: str, name: str) -> str | None:
    m = re.search(r"<html[^>]*\s" + re.escape(name) + r'="([^"]*)"', dom)
    return m.group(1) if m else None


@pytest.mark.browser
def test_interactive_page_renders_in_chromium(sinusoid_result, tmp_path):
    page = write_interactive(sinusoid_result, tmp_path / "interactive.html")
    dom, stderr = load_headless(page, tmp_path, "#selftest=10")
    assert html_attr(dom, "data-plot-status") == "rendered", dom[:500]
    assert html_attr(dom, "data-rendered-points") == "64"  # the visible method's 64 recovered positions
    assert html_attr(dom, "data-rendered-total") == "128"  # plus the 64 true positions
    assert int(html_attr(dom, "data-heatmap-images")) >= 1
    assert html_attr(dom, "data-highlighted-cell") == "10"  # hovering position 10 highlighted its row/column
    assert html_attr(dom, "data-console-errors") == "0", html_attr(dom, "data-last-error")
    console_errors = [ln for ln in stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert not console_errors, console_errors
    shot = tmp_path / "screenshot.png"
    assert shot.is_file() and shot.stat().st_size > 10_000  # a real picture, not a blank page


@pytest.mark.browser
def test_trajectory_title_follows_the_slider(tmp_path):
    """Moving the slider drew the new step's points under the previous step's title ('step 24: RSA 0.062' over
    step 8's layout): frames animated without a redraw do not repaint the title."""
    from pe_probe.groundtruth import grid
    from pe_probe.report.trajectory import write_trajectory

    g = grid(4, 4).coords
    rng = np.random.default_rng(0)
    page = write_trajectory([0, 8, 16], [g + s * rng.normal(size=g.shape) for s in (1.0, 0.5, 0.1)], g,
                            tmp_path / "trajectory.html", method="cmds",
                            titles=["step 0: RSA 0.1", "step 8: RSA 0.5", "step 16: RSA 0.9"])
    for step, title in (("8", "step 8: RSA 0.5"), ("16", "step 16: RSA 0.9")):
        dom, _ = load_headless(page, tmp_path, f"#selftest-step={step}")
        assert html_attr(dom, "data-shown-title") == title
