"""`analyze()`: every identifiability measure of one PE table against one ground truth.

The metric keys and definitions are those of DESIGN.md section 4; each measure lives in its own module
(`stats`, `procrustes`, `recovery`, `probes`, `neighbourhood`, `spectrum`, `reference`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import distances as dist
from . import stats
from .chance import ChanceModel, gaussian_chance, null_levels
from .distances import rsa_distances
from .errors import InputError
from .groundtruth import GroundTruth, parse_ground_truth
from .neighbourhood import default_k, neighbourhood_metrics
from .probes import probe_r2
from .procrustes import apply_alignment, procrustes_align, protest
from .recovery import METHODS, cmds_embed, pca_embed, smacof_embed, tied_at_cut, umap_embed
from .reference import parse_reference, procrustes_distance, shape_distance
from .result import AnalysisResult
from .roundoff import FLOAT64, distance_error, storage_roundoff
from .spectrum import explained_variance_ratio, participation_ratio
from .validation import (  # MAX_SEED also as pe_probe.analysis.MAX_SEED, which the CLI's _count looks up
    MAX_SEED,
    as_float_array,
    check_choice,
    check_coords,
    check_fits_in_memory,
    check_positive_int,
    check_table,
)

DEFAULT_METHODS = ("pca", "cmds", "smacof")


def as_ground_truth(ground_truth: GroundTruth | np.ndarray | str) -> GroundTruth:
    """Accept a GroundTruth, a spec string / path, or an (N, k) array or tensor (copied)."""
    if isinstance(ground_truth, GroundTruth):
        return ground_truth
    if isinstance(ground_truth, (str, bytes)) or hasattr(ground_truth, "__fspath__"):
        return parse_ground_truth(ground_truth)
    if ground_truth is None:
        raise InputError("no ground truth: pass a spec (line:N, grid:HxW, grid:HxWxD), a .npy/.csv/.txt file of "
                         "N x k coordinates, an (N, k) array or a GroundTruth")
    coords = as_float_array(ground_truth, "ground truth")
    if coords.ndim == 1:
        coords = coords[:, None]
    return GroundTruth(coords=coords, spec="array", kind="file", shape=None, roundoff=storage_roundoff(ground_truth))


FLOAT64_ULPS = 8  # rounding errors float64 coordinates may carry from the arithmetic that made them, in ulps


def _storage_atol(x: np.ndarray, roundoff: float, metric: str) -> float:
    """The rounding error ``x``'s storage (unit roundoff ``roundoff``) can put in a distance between its rows, for
    `distances.merge_near_ties`. float64 values are taken to carry up to `FLOAT64_ULPS` ulps from the arithmetic
    that made them (a rotation, an offset); narrower storage rounds once, after that arithmetic. 0 for the
    correlation metric (centring can magnify a row's rounding without bound)."""
    if metric == "correlation":
        return 0.0
    u = max(roundoff, FLOAT64_ULPS * FLOAT64)
    return 4.0 * u if metric == "cosine" else distance_error(x, u)


def _tie_notes(sv: np.ndarray, cmds_vals: np.ndarray, k: int, pe_metric: str, methods: Sequence[str]) -> list[str]:
    """A note naming the metrics that can change with a rotation or relabelling of the table when the k-dim
    PCA or classical-MDS layout is not unique (k-th and (k+1)-th eigenvalues tied, e.g. a ring's table
    against a line, or a table with symmetric axes)."""
    pca_tied = tied_at_cut(sv ** 2, k)  # euclidean classical MDS has PCA's eigenvalues
    cmds_tied = pca_tied if pe_metric == "euclidean" else tied_at_cut(cmds_vals, k)
    affected = ["recovery_pca_r2"] if pca_tied and "pca" in methods else []
    if cmds_tied:
        affected += [f"recovery_{m}_r2" for m in ("cmds", "smacof") if m in methods]
        affected += ["trustworthiness", "knn_overlap", "mds_stress"]
    if not affected:
        return []
    which = "principal and classical-MDS" if pca_tied and cmds_tied else "principal" if pca_tied else "classical-MDS"
    return [f"the table's {_ordinal(k)} and {_ordinal(k + 1)} {which} axes are tied (equal eigenvalues): its "
            f"{k}-dim layout is one arbitrary choice among equally good ones, so {', '.join(affected)} can change "
            "with a rotation or relabelling of the table (RSA and probe_r2 cannot)"]


def _ordinal(i: int) -> str:
    return f"{i}{'th' if 10 <= i % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(i % 10, 'th')}"


def parse_methods(methods: str | Sequence[str]) -> tuple[str, ...]:
    """``"pca,cmds"`` or ``["pca", "cmds"]`` -> ``("pca", "cmds")``, checked against `METHODS`."""
    items = methods.split(",") if isinstance(methods, str) else list(methods) if isinstance(methods, Iterable) else None
    if items is None or not all(isinstance(m, str) for m in items):
        raise InputError(f"methods must be a comma-separated string or a list of names from {','.join(METHODS)}, "
                         f"got {methods!r:.60}")
    items = [m.strip().lower() for m in items if m.strip()]
    if not items:
        raise InputError(f"no recovery methods given; choose from {','.join(METHODS)}")
    for m in items:
        check_choice(m, METHODS, "recovery method")
    return tuple(dict.fromkeys(items))


MAX_PERMUTATIONS = 1_000_000  # p-values resolve to 1e-6; more only costs time
MAX_BOOTSTRAP = 100_000  # a (resamples x N) count matrix is held in memory
MAX_NULL_TABLES = 1000  # random tables for the chance level: each is a full RSA
# Below this many resamples the 2.5% and 97.5% percentiles fall between the two most extreme resamples
# (0.025 (n - 1) < 1, that is n <= 40): the CI's ends are set by those extremes, not by percentiles
# (n_boot = 1: a zero-width CI).
MIN_BOOT_CI = 41


def auto_n_null(n_pairs: int) -> int:
    """Random tables for the chance level: 20, fewer for very large tables (at least 3)."""
    return int(max(3, min(20, 1e7 // max(n_pairs, 1))))


class _Stages:
    """Progress of `analyze`'s stages: one line per stage on a terminal (silent otherwise), and each stage's
    wall time, recorded always (provenance ``analysis.stage_seconds``: where a slow analysis spends it)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.current: str | None = None
        self.started = self.t0
        self.seconds: dict[str, float] = {}

    def _close(self) -> None:
        now = time.perf_counter()
        if self.current is not None:
            self.seconds[self.current] = round(self.seconds.get(self.current, 0.0) + now - self.started, 3)
        self.started = now

    def __call__(self, name: str) -> None:
        self._close()
        self.current = name.split(" (")[0]  # "Mantel test (1000 permutations)" is recorded as "Mantel test"
        if self.enabled:
            sys.stderr.write(f"\r\x1b[K  [{time.perf_counter() - self.t0:6.1f}s] {name}...")
            sys.stderr.flush()

    def done(self) -> None:
        self._close()
        self.current = None
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# Forbidding reflections cannot be honoured here: the k-dim layouts are recovered with arbitrary axis
# signs (PCA / classical MDS eigenvectors, SMACOF's and UMAP's starts), and for d > k a proper rotation
# of the table can mirror any k-dim view of it, so their handedness says nothing about the PE table and a
# rotation-only alignment gave an arbitrary r2 (near 0 for a table that is the grid itself plus noise).
NO_REFLECTION_REFUSED = ("--no-reflection (allow_reflection=False) is not supported: the recovered layouts have arbitrary "
                         "axis signs, so a rotation-only fit gives an arbitrary r2; drop the option (reflections are "
                         "always allowed, as in scipy.spatial.procrustes)")


def analyze(table, ground_truth, *, pe_metric: str = "euclidean", methods: str | Sequence[str] = DEFAULT_METHODS,
            n_perm: int = 1000, n_boot: int = 1000, seed: int = 0,
            reference: str | os.PathLike | np.ndarray | None = None, allow_reflection: bool = True,
            n_null: int | None = None, neighbours: int | None = None,
            provenance: dict[str, Any] | None = None, progress: bool = False,
            chance: ChanceModel | None = None) -> AnalysisResult:
    """Measure how well a PE table (N x d) recovers the geometry of ground-truth coordinates (N x k).

    Parameters
    ----------
    table : (N, d) array-like, the positional-encoding table (one row per position).
    ground_truth : GroundTruth, spec ("grid:8x8", "line:16", a file path) or (N, k) array.
    pe_metric : distance between table rows for RSA and MDS: "euclidean", "cosine" or "correlation".
    methods : recovery methods among pca, cmds, smacof, umap (umap JIT-compiles, ~10-15 s once).
    n_perm : permutations for the Mantel and PROTEST p-values (0 skips them).
    n_boot : bootstrap resamples for the RSA confidence interval (0 skips it; below `MIN_BOOT_CI` a note says
        the CI is unreliable).
    seed : seeds every random step (permutations, bootstrap, random tables, UMAP, CV folds).
    reference : "sin1d", "sin2d:HxW", a table file, or an (N, d') array / tensor, for `ref_shape_distance`.
    allow_reflection : must stay True (Procrustes with reflections, the scipy definition); False raises
        `InputError` (`NO_REFLECTION_REFUSED`: the recovered layouts have no defined handedness).
    n_null : random tables for the chance level (default: 20, fewer for very large N; 0 skips it; 1 has no sd).
    chance : how those tables are drawn (`pe_probe.chance`); default Gaussian N(0, var(table)) tables of the
        table's shape. `analyze_view` passes random PE tables read through the view's model maps.
    neighbours : k for trustworthiness / kNN overlap, below N/2 (default min(5, N//2 - 1)).
    """
    if not allow_reflection:
        raise InputError(NO_REFLECTION_REFUSED)
    P = check_table(table)
    table_roundoff = storage_roundoff(table)
    check_fits_in_memory(P.shape[0])
    gt = as_ground_truth(ground_truth)
    G = check_coords(gt.coords, P.shape[0])
    pe_metric = check_choice(str(pe_metric).lower(), dist.PE_METRICS, "--pe-metric")
    methods = parse_methods(methods)
    n_perm = check_positive_int(n_perm, "n_perm", maximum=MAX_PERMUTATIONS)
    n_boot = check_positive_int(n_boot, "n_boot", maximum=MAX_BOOTSTRAP)
    seed = check_positive_int(seed, "seed", maximum=MAX_SEED)
    if n_null is not None:
        n_null = check_positive_int(n_null, "n_null", maximum=MAX_NULL_TABLES)
    n, d = P.shape
    k = G.shape[1]
    if neighbours is not None:
        neighbours = check_positive_int(neighbours, "neighbours", 1)
        if 2 * neighbours >= n:  # trustworthiness's normaliser 2 / (N k (2N - 3k - 1)) holds only for k < N/2
            raise InputError(f"neighbours (--neighbours) must be below N/2 = {n / 2:g} for this table of {n} positions "
                             f"(trustworthiness is defined only for k < N/2), got {neighbours}; choose a smaller k, "
                             f"at most {(n - 1) // 2}")
    ss = np.random.SeedSequence(seed)
    rng_mantel, rng_boot, rng_protest, rng_null, rng_probe = (np.random.default_rng(s) for s in ss.spawn(5))
    stage = _Stages(progress)
    t_start = time.time()
    notes: list[str] = []
    flat = [int(i) for i in np.flatnonzero(np.ptp(G, axis=0) == 0)]
    if flat:  # e.g. grid:6x6x1: k counts an axis with no geometry (recovery embeds in k dims)
        notes.append(f"ground-truth axis {', '.join(map(str, flat))} is constant: it adds {len(flat)} dimension(s) "
                     f"with no geometry to k = {k}, which lowers the recovery r2, stress and explained variance; "
                     f"drop it (e.g. grid:HxW instead of grid:HxWx1)")

    stage("distances")
    pe_sq = dist.square_distances(P, pe_metric)
    gt_sq = dist.square_distances(G, "euclidean")
    pe_d, pe_order = rsa_distances(pe_sq, pe_metric, _storage_atol(P, table_roundoff, pe_metric))
    gt_d, gt_order = rsa_distances(gt_sq, "euclidean", _storage_atol(G, gt.roundoff, "euclidean"))
    gt_sq = dist.squareform(gt_d)  # the neighbourhoods see RSA's ties (their 1e-9 tolerance keeps merged ones equal)
    if np.ptp(pe_d) == 0:
        raise InputError("all rows of the table are equidistant (e.g. a constant table); there is no geometry to compare: "
                         "check that --param / --layer pick the learned PE (an untrained zero-initialised table is "
                         "constant), or analyse a checkpoint after training")
    if np.ptp(gt_d) == 0:
        raise InputError("the ground truth's positions are all equally far apart (e.g. one-hot coordinates); there is no "
                         "geometry to compare: give coordinates whose distances differ (a line, grid or 3D positions)")

    m: dict[str, float] = {"n_positions": n, "pe_dim": d, "gt_dim": k}
    stage("RSA")
    gt_ranked = stats.standardise(stats.rank(gt_d, gt_order))
    pe_ranked = stats.standardise(stats.rank(pe_d, pe_order))
    m["rsa_spearman"] = float(np.clip(pe_ranked @ gt_ranked, -1.0, 1.0))  # rounding can pass 1 by an ulp
    m["rsa_pearson"] = stats.correlate(pe_d, gt_d, "pearson")
    m["rsa_kendall"] = stats.correlate(pe_d, gt_d, "kendall")
    mantel_info: dict[str, Any] = {}
    if n_perm:
        stage(f"Mantel test ({n_perm} permutations)")
        mt = stats.mantel_prepared(pe_ranked, gt_ranked, n_perm=n_perm, seed=rng_mantel)
        m["rsa_p"] = mt.p_value
        mantel_info = {"exact": mt.exact, "n_relabellings": mt.n_perm}
    else:
        m["rsa_p"] = float("nan")
    boot_method, boot_valid = None, 0
    if n_boot:
        stage(f"bootstrap CI ({n_boot} resamples)")
        bt = stats.bootstrap_rsa(pe_d, gt_d, method="spearman", n_boot=n_boot, seed=rng_boot,
                                 orders=(pe_order, gt_order))
        m["rsa_ci_low"], m["rsa_ci_high"] = bt.low, bt.high
        boot_method = bt.method
        boot_valid = int(np.isfinite(bt.samples).sum())
        if boot_valid < n_boot:
            notes.append(f"bootstrap CI from {boot_valid} of {n_boot} resamples: the others drew too few distinct "
                         f"positions for a correlation (likely with N={n}); read the CI as rough")
        if n_boot < MIN_BOOT_CI:
            notes.append(f"bootstrap CI from only {n_boot} resamples: each end falls between the two most extreme "
                         f"resamples on its side, not at a 2.5% / 97.5% percentile (fewer than {MIN_BOOT_CI}), so it "
                         f"is unreliable; use n_boot >= 1000 (--n-boot)")
        if bt.method == "rank-cached":
            notes.append(f"bootstrap CI by the rank-cached approximation (N={n} > {stats.EXACT_BOOTSTRAP_MAX_N}): "
                         "it keeps full-sample ranks, which leaves out their own resampling noise: its CI width "
                         "was off by up to ~15% (mostly too narrow) in our tests; read it as approximate")
    else:
        m["rsa_ci_low"] = m["rsa_ci_high"] = float("nan")

    stage("recovery")
    pca_scores, sv = pca_embed(P, k)
    raw: dict[str, np.ndarray] = {}
    cmds_coords, cmds_vals = cmds_embed(pe_sq, k, n_eigenvalues=k + 1)  # the (k+1)-th for the tie check
    notes.extend(_tie_notes(sv, cmds_vals, k, pe_metric, methods))
    if "pca" in methods:
        raw["pca"] = pca_scores
    if "cmds" in methods:
        raw["cmds"] = cmds_coords
    smacof_iter = None
    if "smacof" in methods:
        stage("SMACOF")
        raw["smacof"], smacof_iter = smacof_embed(pe_sq, cmds_coords)
    if "umap" in methods:
        stage("UMAP")
        raw["umap"] = umap_embed(P, k, metric=pe_metric, seed=seed)
    stage("alignment and PROTEST")
    perms = stats.all_permutations(n, n_perm) if n_perm else None  # exact PROTEST when N! <= n_perm, as Mantel
    exact_protest = perms is not None
    if n_perm and not exact_protest:
        perms = np.argsort(rng_protest.random((n_perm, n)), axis=1)
    embeddings, alignments = {}, {}
    for name, emb in raw.items():
        al = procrustes_align(emb, G)
        alignments[name] = al
        embeddings[name] = apply_alignment(al, emb)[:, :k]
        m[f"recovery_{name}_r2"] = al.r2
        m[f"recovery_{name}_rmse"] = al.rmse
        m[f"recovery_{name}_p"] = protest(emb, G, perms=perms, exact=exact_protest)[0] if n_perm else float("nan")

    stage("linear probe")
    m["probe_r2"] = probe_r2(P, G, seed=int(rng_probe.integers(2**31)))
    stage("neighbourhoods")
    # always of the classical-MDS layout (computed whatever --methods asks for), so the two do not
    # change with the recovery methods requested
    m["trustworthiness"], m["knn_overlap"] = neighbourhood_metrics(cmds_coords, G, neighbours, gt_square=gt_sq)
    m["mds_stress"] = _kruskal_stress(cmds_coords, pe_d)
    evr = explained_variance_ratio(sv)
    m["participation_ratio"] = participation_ratio(sv)
    m["explained_variance"] = float(evr[:k].sum())
    ref, ref_name = None, None
    if reference is not None:
        ref, ref_name = parse_reference(reference, n, d)
        m["ref_shape_distance"] = shape_distance(P, ref)
        m["ref_procrustes_distance"] = procrustes_distance(P, ref)

    n_null = auto_n_null(len(pe_d)) if n_null is None else n_null
    chance = chance or gaussian_chance(P)
    null = null_ref = np.empty(0)
    if n_null:
        stage(f"chance level ({n_null} random tables)")
        null, null_ref = null_levels(chance, P.shape, gt_ranked, pe_metric, n_null, rng_null, ref)
        flat = int(np.isnan(null).sum())
        if flat:
            notes.append(f"chance level from {n_null - flat} of {n_null} random tables: {flat} gave rows all equally far "
                         f"apart (no geometry), so the view barely depends on the table")
            null = null[~np.isnan(null)]
    if n_null == 1:
        notes.append("chance level from a single random table: it has no spread (null_rsa_sd is n/a); use n_null >= 2 "
                     "(--n-null; default 20)")
    m["null_rsa_mean"] = float(null.mean()) if len(null) else float("nan")
    m["null_rsa_sd"] = float(null.std(ddof=1)) if len(null) > 1 else float("nan")
    if ref is not None:  # unrelated tables are closer than pi/2 after the best rotation: how close, by chance
        null_ref = null_ref[np.isfinite(null_ref)]
        m["null_ref_shape_distance_mean"] = float(null_ref.mean()) if len(null_ref) else float("nan")
        m["null_ref_shape_distance_sd"] = float(null_ref.std(ddof=1)) if len(null_ref) > 1 else float("nan")
    stage.done()

    prov = dict(provenance or {})
    prov.update({
        "ground_truth": {"spec": gt.spec, "kind": gt.kind, "shape": list(gt.shape) if gt.shape else None},
        "analysis": {
            "pe_metric": pe_metric, "gt_metric": "euclidean", "methods": list(methods), "n_perm": n_perm,
            "n_boot": n_boot, "n_boot_valid": boot_valid, "bootstrap": boot_method, "mantel": mantel_info,
            "protest": {"exact": exact_protest, "n_relabellings": len(perms) if n_perm else 0}, "n_null": n_null,
            "chance": {"kind": chance.kind, "description": chance.description}, "seed": seed,
            "allow_reflection": allow_reflection, "neighbours": neighbours or default_k(n),
            "neighbourhood_embedding": "cmds", "smacof_iterations": smacof_iter, "reference": ref_name,
            "rsa_p_statistic": "spearman", "seconds": round(time.time() - t_start, 3),
            "stage_seconds": stage.seconds,
        },
        "versions": _versions(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    prov["notes"] = [*(prov.get("notes") or []), *notes]  # always a list, as metrics.json's "notes"
    return AnalysisResult(
        metrics=m, provenance=prov, table=P, coords=G, gt_spec=gt.spec, gt_kind=gt.kind,
        gt_shape=tuple(gt.shape) if gt.shape else None, pe_metric=pe_metric, pe_distances=pe_d,
        gt_distances=gt_d, embeddings=embeddings, raw_embeddings=raw, alignments=alignments,
        explained_variance=evr, null_rsa=null,
    )


def _kruskal_stress(coords: np.ndarray, pe_d: np.ndarray) -> float:
    """Kruskal stress-1 of a map against the PE distances delta, with ratio disparities d^ = b delta:
    sqrt(sum (d_ij(X) - b delta_ij)^2 / sum d_ij(X)^2) over pairs i<j, b fitted by least squares.

    Fitting b is Kruskal's disparity step for ratio (metric) MDS: it makes stress-1 lie in [0, 1] and
    independent of the scale of either side, so his rule-of-thumb grades apply (with b = 1 a k-dim map that
    drops most of the variance scored above 1, and the score mixed fit with shrinkage)."""
    dx = dist.pairwise(coords, "euclidean")
    denom, pe_sq = float(np.sum(dx ** 2)), float(np.sum(pe_d ** 2))
    if denom <= 0 or pe_sq <= 0:
        return float("nan")
    b = float(np.sum(dx * pe_d)) / pe_sq
    return float(np.clip(np.sqrt(np.sum((dx - b * pe_d) ** 2) / denom), 0.0, 1.0))


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for pkg in ("pe-probe", "numpy", "scipy", "scikit-learn", "torch"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
