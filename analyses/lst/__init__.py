"""The Latin Square Task study (Ito et al., arXiv 2406.08272): sweep, per-run analyses, report.

``python -m analyses.lst.sweep``    trains the grid (`grid.py`) through a `runner.Runner`
``python -m analyses.lst.analyse``  analyses every run (cached per run, beside its checkpoints)
``python -m analyses.lst.report``   regenerates ``reports/lst/`` from the sweep results

The report's parts, shared with the longer-training report (`length.py`): `figures.py`, `tables.py`,
`verdicts.py` (the rules behind the verdicts), `code_paths.py` (the CPU attention code path per run),
`setting.py` (the setting lines), `selection.py`, `summary_stats.py` and `study.py` (the study's numbers).
"""
