"""The Python API behind the CLI: analyse a source (file, folder or built-in) and write its report."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .analysis import analyze, as_ground_truth
from .errors import InputError
from .groundtruth import MAX_POSITIONS, GroundTruth, grid, line
from .output import check_out_dir, staged_dir, write_data_files
from .result import AnalysisResult
from .validation import parse_layer

BUILTIN_PREFIX = "builtin:"
BUILTINS_HELP = "builtin:sin2d:HxW[xD] (the study's 2D sinusoid, D=64), builtin:sin1d:N[xD], builtin:random:NxD"


def builtin_table(spec: str, seed: int = 0) -> tuple[np.ndarray, GroundTruth | None, str]:
    """Planted example tables: ``builtin:sin2d:8x8`` (2D sinusoid, d=64, ground truth grid:8x8),
    ``builtin:sin1d:64x32`` (1D sinusoid, ground truth line:64), ``builtin:random:64x64`` (Gaussian)."""
    from .reference import sinusoid_1d, sinusoid_2d

    body = spec[len(BUILTIN_PREFIX):].lower().replace(" ", "")

    def check(n: int, d: int, d_step: int = 1) -> None:
        if n < 4 or d < 1 or d % d_step or n > MAX_POSITIONS or n * d > 100 * MAX_POSITIONS:
            rule = f"a multiple of {d_step}" if d_step > 1 else ">= 1"
            raise InputError(f"built-in table {spec!r}: needs 4..{MAX_POSITIONS:,} positions, width {rule} and at most "
                             f"{100 * MAX_POSITIONS:,} values; use one of {BUILTINS_HELP}")

    m = re.fullmatch(r"sin2d:(\d+)x(\d+)(?:x(\d+))?", body)
    if m:
        h, w, d = int(m.group(1)), int(m.group(2)), int(m.group(3) or 64)
        check(h * w if h and w else 0, d, 4)
        return sinusoid_2d(h, w, d), grid(h, w), body
    m = re.fullmatch(r"sin1d:(\d+)(?:x(\d+))?", body)
    if m:
        n, d = int(m.group(1)), int(m.group(2) or 64)
        check(n, d)
        return sinusoid_1d(n, d), line(n), body
    m = re.fullmatch(r"random:(\d+)x(\d+)", body)
    if m:
        n, d = int(m.group(1)), int(m.group(2))
        check(n, d)
        return np.random.default_rng(seed).normal(size=(n, d)), None, body
    raise InputError(f"unknown built-in table {spec!r}; use one of {BUILTINS_HELP}")


def _resolve_ground_truth(loaded_gt: GroundTruth | None, ground_truth, n_rows: int,
                          positions: tuple[int, int] | None, full_rows: int,
                          loaded_error: str | None = None, grid_hint: str | None = None) -> GroundTruth:
    """The ground truth to analyse against: ``ground_truth`` if given (sliced like the table), else the
    source's own; a source's own that could not be read (``loaded_error``) is an error only here, when needed.
    ``grid_hint`` (``grid:HxW``, from a ViT-like table) leads the suggestions when there is none."""
    if ground_truth is None:
        if loaded_error:
            raise InputError(loaded_error)
        if loaded_gt is None:
            lead = f"{grid_hint} for this table's image patches, or " if grid_hint else ""
            raise InputError(f"no ground truth: pass --ground-truth ({lead}a .npy/.csv/.txt of N x k coordinates, "
                             f"or line:{n_rows}, grid:HxW, grid:HxWxD)")
        return loaded_gt
    gt = as_ground_truth(ground_truth)
    if positions is not None and gt.n == full_rows and gt.n != n_rows:
        gt = gt.rows(*positions)  # the ground truth describes the whole table: slice it alike
    return gt


def _reference_for_rows(analyze_kwargs: dict[str, Any], table: Any, span: tuple[int, int] | None,
                        full: int) -> dict[str, Any]:
    """``analyze_kwargs`` with a whole-table ``reference`` cut to the analysed rows ``span``, as the ground truth is."""
    from .reference import reference_for_rows

    spec = analyze_kwargs.get("reference")
    ref = reference_for_rows(spec, len(table), int(np.shape(table)[1]), tuple(span) if span else None, full)
    return analyze_kwargs if ref is spec else {**analyze_kwargs, "reference": ref}


def _refuse_counting_dropped_rows(ground_truth, n_rows: int, extra: int | None, asked: int | None) -> None:
    """A ground truth that counts the ``extra`` leading rows just dropped: say so, and how to keep them (the
    generic size mismatch would suggest --positions, which keeps the wrong rows)."""
    if ground_truth is None or not extra:
        return
    n_gt = as_ground_truth(ground_truth).n
    if n_gt == n_rows + extra:
        why = "as --drop-extra-tokens asked" if asked else "found to be CLS / offset rows"
        raise InputError(f"ground truth has {n_gt} positions, the table has {n_rows} after dropping {extra} leading "
                         f"row(s) {why}; pass --drop-extra-tokens 0 to keep them, or a ground truth of {n_rows} positions")


def _check_source(source: Any) -> str:
    """``source`` as text, when it is a path or ``builtin:...`` spec; anything else (an array, a tensor, a dict of
    them) raises InputError naming `analyze`, which takes tables."""
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"source must be a path (a file, a folder or builtin:...), got {type(source).__name__}; "
                         f"for an array or tensor use pe_probe.analyze(table, ground_truth)")
    return str(source)


def _check_layer(layer: Any, choices: str) -> int | str | None:
    """``layer`` as the loaders take it: None, an index, ``"mean"`` or ``"all"`` (as text, any case); anything else
    (0.0, True, "x") raises InputError saying what ``choices`` the caller takes. The range is checked later."""
    try:
        return parse_layer(layer)
    except ValueError:
        raise InputError(f"layer must be {choices}, got {layer!r}") from None


def _check_seed(analyze_kwargs: dict[str, Any]) -> int:
    """The ``seed`` among `analyze`'s keyword arguments, checked as `analyze` checks it (it is used before)."""
    from .analysis import MAX_SEED
    from .validation import check_positive_int

    return check_positive_int(analyze_kwargs.get("seed", 0), "seed", maximum=MAX_SEED)


def analyze_source(source: str | os.PathLike, ground_truth=None, *, param: str | None = None,
                   layer: int | str | None = None, positions: str | tuple[int, int] | None = None,
                   drop_extra_tokens: int | None = None, **analyze_kwargs: Any) -> AnalysisResult:
    """Load the PE table of ``source`` (checkpoint, state_dict, safetensors, HF folder, raw table or
    ``builtin:...``) and run `analyze` on it against ``ground_truth`` (default: the checkpoint's own).
    For a table already in memory (array or tensor) call `analyze` itself."""
    src = _check_source(source)
    layer = _check_layer(layer, "an integer index or 'mean'")
    seed = _check_seed(analyze_kwargs)
    if src.startswith(BUILTIN_PREFIX):
        if param is not None or layer not in (None, 0, "0", "mean") or drop_extra_tokens:
            raise InputError(f"{src} is one table with no extra rows: drop --param / --layer / --drop-extra-tokens")
        from .io import _row_centred

        table, gt, name = builtin_table(src, seed)
        shape = list(table.shape)
        full = len(table)
        span = None
        if positions is not None:
            from .io import _parse_positions

            span = _parse_positions(positions, full)
            table = table[span[0]:span[1]]
            if gt is not None:
                gt = gt.rows(*span)
        gt = _resolve_ground_truth(gt, ground_truth, len(table), span, full)
        analyze_kwargs = _reference_for_rows(analyze_kwargs, table, span, full)
        prov = {"source": src, "source_kind": "builtin", "param": name, "layer": None, "sha256": None,
                "original_shape": shape, "extra_tokens": 0, "positions": list(span) if span else None,
                "row_centred": _row_centred(np.asarray(table, dtype=np.float64)), "notes": []}
        return analyze(table, gt, provenance=prov, **analyze_kwargs)

    from .io import load_table

    loaded = load_table(source, param=param, layer=layer, positions=positions, drop_extra_tokens=drop_extra_tokens)
    full_rows = loaded.original_shape[-2] - loaded.extra_tokens if len(loaded.original_shape) >= 2 else len(loaded.table)
    if loaded.positions is None:
        _refuse_counting_dropped_rows(ground_truth, len(loaded.table), loaded.extra_tokens, drop_extra_tokens)
    gt = _resolve_ground_truth(loaded.ground_truth, ground_truth, len(loaded.table), loaded.positions, full_rows,
                               loaded.ground_truth_error, loaded.grid_hint)
    analyze_kwargs = _reference_for_rows(analyze_kwargs, loaded.table, loaded.positions, full_rows)
    prov = loaded.provenance()
    prov["config"] = loaded.config
    prov["checkpoint_metrics"] = loaded.checkpoint_metrics
    prov["step"] = loaded.step
    return analyze(loaded.table, gt, provenance=prov, **analyze_kwargs)


VIEWS = ("raw", "q", "k", "qk", "kernel", "attention")


def analyze_view(source: str | os.PathLike, view: str, ground_truth=None, *, param: str | None = None,
                 layer: int | str | None = None, positions: str | tuple[int, int] | None = None,
                 drop_extra_tokens: int | None = None, attention_reference: str | None = None,
                 n_puzzles: int = 500, **analyze_kwargs: Any) -> list[AnalysisResult]:
    """Analyse a *view* of the PE: what the model reads from its table, not only the table.

    - ``raw``: the table (same as `analyze_source`).
    - ``q`` / ``k`` / ``qk``: the table as the first attention layer that reads it sees it (blank-token
      embedding + P, the layer norm before attention if any, then W_Q / W_K); see `pe_probe.views`.
    - ``kernel``: the positional attention kernel softmax(QK^T / sqrt(d_head)), averaged over heads;
      each row (a position's attention profile) is analysed as that position's code. Adds the metric
      ``kernel_distance_rho`` (Spearman of the symmetrised kernel with minus the true distance).
    - ``attention``: attention maps of our checkpoints on task data, averaged over puzzles (needs the
      trainer); with ``attention_reference`` (another checkpoint, e.g. the 2D-sinusoid model) adds
      ``attention_similarity``, the cosine similarity of the two maps (the study's measure).
    Returns one result per table the view yields (one per layer for ``layer="all"``).
    """
    from .io import open_state
    from .validation import check_choice, check_positive_int

    _check_source(source)
    view = check_choice(str(view).lower(), VIEWS, "--view")
    layer = _check_layer(layer, "an integer index, 'mean' or 'all'")
    seed = _check_seed(analyze_kwargs)
    if attention_reference is not None and view != "attention":
        raise InputError("--attention-reference applies to --view attention only; add --view attention or drop it")
    if view == "attention":
        given = [flag for flag, value in (("--param", param), ("--positions", positions),
                                          ("--drop-extra-tokens", drop_extra_tokens)) if value is not None]
        if given:
            raise InputError(f"--view attention analyses the model's whole attention maps and takes no "
                             f"{' / '.join(given)}; drop {'it' if len(given) == 1 else 'them'}")
        n_puzzles = check_positive_int(n_puzzles, "n_puzzles", minimum=1)
    if view == "raw":
        layers = list(range(n_layers(source, param))) if layer == "all" else [layer]
        return [analyze_source(source, ground_truth, param=param, layer=lay, positions=positions,
                               drop_extra_tokens=drop_extra_tokens, **analyze_kwargs) for lay in layers]
    if str(source).startswith(BUILTIN_PREFIX):
        raise InputError(f"{source} is a bare table with no model around it, so it has no {view} view; "
                         f"drop --view (or use --view raw)")
    state, meta = open_state(source)
    base_prov = {"source": str(source), "sha256": meta.get("sha256"), "source_kind": meta.get("source_kind"),
                 "config": meta.get("config"), "checkpoint_metrics": meta.get("metrics"), "step": meta.get("step")}
    items: list[tuple[str, np.ndarray, dict, Any]] = []  # (label, table, info, chance model or None)
    if view == "attention":
        if meta.get("source_kind") != "pe-probe-checkpoint":
            raise InputError(f"--view attention needs one of our checkpoints (it runs the model on task data); "
                             f"{source} is a {meta.get('source_kind')}")
        from trainers.attention import attention_maps, attention_model, attention_similarity, model_attention_maps

        model, x = attention_model(source, n_puzzles=n_puzzles, seed=seed)
        maps = model_attention_maps(model, x)
        sims = None
        if attention_reference:
            sims = attention_similarity(maps, attention_maps(attention_reference, n_puzzles=n_puzzles, seed=seed))
        chosen = range(len(maps)) if layer == "all" else None
        reruns: dict[str, Any] = {}  # the chance level's model reruns, shared by the layers
        if layer == "mean":
            items.append(("attention:mean", maps.mean(0), {"view": "attention", "layer": "mean",
                          "attention_similarity": float(np.mean(sims)) if sims is not None else None},
                          _attention_chance(model, x, None, reruns)))
        else:
            idx = list(chosen) if chosen is not None else [0 if layer is None else layer]
            for i in idx:
                if not 0 <= i < len(maps):
                    raise InputError(f"--layer {i} out of range: the model has {len(maps)} attention layers")
                items.append((f"attention:layer{i}", maps[i], {"view": "attention", "layer": i,
                              "attention_similarity": float(sims[i]) if sims is not None else None},
                              _attention_chance(model, x, i, reruns)))
    else:
        from .views import view_tables

        items = view_tables(state, meta, view, layer=layer, pe_param=param, positions=positions,
                            drop_extra_tokens=drop_extra_tokens, return_chance=True)
    results = []
    for label, table, info, chance in items:
        gt, kwargs = meta.get("ground_truth"), analyze_kwargs
        if view == "attention" or positions is None:
            if view != "attention":
                _refuse_counting_dropped_rows(ground_truth, len(table), info.get("extra_tokens"), drop_extra_tokens)
            gt = _resolve_ground_truth(gt, ground_truth, len(table), None, len(table), meta.get("ground_truth_error"))
        else:  # the view's rows are --positions of a table of info["n_rows"] rows: slice a ground truth alike
            span, full = tuple(info["positions"]), info["n_rows"]
            if gt is not None and gt.n == full:
                gt = gt.rows(*span)
            gt = _resolve_ground_truth(gt, ground_truth, len(table), span, full, meta.get("ground_truth_error"))
            kwargs = _reference_for_rows(analyze_kwargs, table, span, full)
        notes = list(dict.fromkeys([*(meta.get("notes") or []), *(info.get("notes") or [])]))  # the source's too
        prov = dict(base_prov, param=label, layer=info.get("layer"), view=info, notes=notes,
                    extra_tokens=info.get("extra_tokens"), original_shape=_stored_shape(state, info.get("param")))
        res = analyze(table, gt, provenance=prov, chance=chance, **kwargs)
        if view == "kernel":
            from .views import kernel_distance_correlation

            res.metrics["kernel_distance_rho"] = info["kernel_distance_rho"] = kernel_distance_correlation(table, res.coords)
            if info.get("causal"):  # the mask alone makes a causal kernel look positional: measure its share
                from .causal import causal_mask_baseline

                res.metrics.update(causal_mask_baseline(table, res.coords, pe_metric=res.pe_metric,
                                                        n_boot=analyze_kwargs.get("n_boot", 1000),
                                                        seed=seed, window=info.get("window")))
        if info.get("attention_similarity") is not None:
            res.metrics["attention_similarity"] = info["attention_similarity"]
        results.append(res)
    return results


def _attention_chance(model: Any, x: np.ndarray, layer: int | None, reruns: dict[str, Any]) -> Any:
    """The chance level of attention maps (layer None: their mean over layers): the same model on the same puzzles
    with its PE tables replaced by random ones (`trainers.attention.random_pe_attention_maps`); None (Gaussian
    tables of the maps' shape) for a model without a PE table.

    Every layer's analysis seeds its random tables alike, so they draw the same tables: ``reruns`` (shared by the
    layers) keeps each rerun's maps under the generator's state before the draw, with its state after, and a
    layer that finds them there skips the rerun and moves its generator on as the rerun would have."""
    from trainers.attention import pe_tables, random_pe_attention_maps

    from .chance import ChanceModel

    names = [name for name, _ in pe_tables(model)]
    if not names:
        return None

    def draw(rng: np.random.Generator) -> np.ndarray:
        key = repr(rng.bit_generator.state)
        if key not in reruns:
            reruns[key] = (random_pe_attention_maps(model, x, rng), rng.bit_generator.state)
        maps, after = reruns[key]
        rng.bit_generator.state = after
        return maps.mean(0) if layer is None else maps[layer]

    return ChanceModel("model-rerun", f"the model's PE table(s) ({', '.join(names)}) replaced by random Gaussian "
                       f"tables of their shape and scale, attention maps recomputed on the same {len(x)} puzzles", draw)


def _stored_shape(state: Any, param: Any) -> list[int] | None:
    """The stored shape of a view's table (None for a mean over layers, or a state without shapes)."""
    shapes = getattr(getattr(state, "store", None), "shapes", {})
    return list(shapes[param]) if isinstance(param, str) and param in shapes else None


def n_layers(source: str | os.PathLike, param: str | None = None) -> int:
    """How many per-layer PE tables ``source`` holds (1 for most models)."""
    if _check_source(source).startswith(BUILTIN_PREFIX):
        return 1
    from .io import load_table

    return load_table(source, param=param).n_layers


def write_analysis(result: AnalysisResult, out_dir: str | os.PathLike, *, force: bool = False,
                   figures: bool = True, formats: str | Sequence[str] = ("png", "pdf")) -> Path:
    """Write the report folder of one analysis (DESIGN.md section 5), completely or not at all;
    ``formats``: the static figures' formats (the first one is shown on the index page). As on the command
    line, ``out_dir`` may not be, hold or sit inside the analysis's inputs (the source and a ground-truth
    file named in its provenance; `check_out_dir`), ``force`` or not. ``formats`` may be one name ("png")."""
    if isinstance(result, (list, tuple)):
        raise InputError("write_analysis takes one result; analyze_view returns a list: write each (e.g. to "
                         "out/layer-N)")
    if not isinstance(result, AnalysisResult):
        raise InputError(f"write_analysis takes an AnalysisResult (from analyze, analyze_source or analyze_view), "
                         f"got {type(result).__name__}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise InputError(f"out_dir must be a folder path, got {type(out_dir).__name__}")
    formats = (formats,) if isinstance(formats, str) else tuple(formats) if isinstance(formats, Iterable) else formats
    if not isinstance(formats, tuple) or not all(isinstance(f, str) for f in formats):
        raise InputError(f"formats must be a format name or a list of them (png, pdf, svg), got {formats!r:.60}")
    prov = result.provenance or {}
    inputs = [prov.get("source"), (prov.get("ground_truth") or {}).get("spec")]
    out = check_out_dir(out_dir, force, inputs=[p for p in inputs if isinstance(p, str)], kind="analyze")
    with staged_dir(out, force, kind="analyze") as stage:
        write_data_files(result, stage)
        if figures:
            from .report import write_report

            write_report(result, stage, formats=formats)
    return out
