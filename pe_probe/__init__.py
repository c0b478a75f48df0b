"""pe-probe: did a transformer's positional encoding recover the true geometry of its positions?

Python API (mirrors the CLI):
    pe_probe.analyze(table, ground_truth, ...) -> AnalysisResult   (.metrics, .embeddings, .to_frame())
    pe_probe.analyze_source(path_or_folder, ground_truth=None, ...) -> AnalysisResult
    pe_probe.analyze_view(path_or_folder, "kernel", ...) -> list[AnalysisResult]   (--view)
    pe_probe.n_layers(path_or_folder) -> int                          (per-layer PE tables, for --layer all)
    pe_probe.write_analysis(result, out_dir)                        (metrics.json/csv, figures, HTML)
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["analyze", "analyze_source", "analyze_view", "n_layers", "write_analysis", "AnalysisResult", "GroundTruth",
           "InputError"]


def __getattr__(name: str):
    # Lazy: `import pe_probe` stays fast (no scipy/sklearn/torch until used).
    if name == "analyze":
        from .analysis import analyze

        return analyze
    if name in ("analyze_source", "analyze_view", "n_layers", "write_analysis"):
        from . import api

        return getattr(api, name)
    if name == "AnalysisResult":
        from .result import AnalysisResult

        return AnalysisResult
    if name == "GroundTruth":
        from .groundtruth import GroundTruth

        return GroundTruth
    if name == "InputError":
        from .errors import InputError

        return InputError
    raise AttributeError(name)
