"""Fixtures of the analysis-pipeline tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def as_if_ray_installed(monkeypatch):
    """The LST sweep's options checked as on a machine with the `ray` extra: for tests of its --backend ray
    option handling (a dry run, refusals, a fake runner) that never start Ray, so they run where it is not
    installed (`make test` on a plain machine)."""
    from analyses.lst import sweep

    monkeypatch.setattr(sweep, "ray_installed", lambda: True)
