"""Plain-language readings of the headline metrics, for the index page.

Each function turns one metric (and its companions) into a sentence a reader who has not read the
methods can act on. Numbers are never invented: a missing metric yields no sentence.
"""

from __future__ import annotations

import math
from typing import Any

_METHOD_NAMES = {"pca": "PCA", "cmds": "classical MDS", "smacof": "metric MDS (SMACOF)", "umap": "UMAP"}


def _ok(metrics: dict, key: str) -> bool:
    v = metrics.get(key)
    return v is not None and isinstance(v, (int, float)) and math.isfinite(float(v))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def n_permutations(provenance: dict[str, Any]) -> int | None:
    """Number of permutations behind the p-values, if the provenance records it."""
    for key in ("n_perm", "n_permutations"):
        for place in (provenance, provenance.get("parameters", {}) or {}, provenance.get("params", {}) or {},
                      provenance.get("analysis", {}) or {}):
            if isinstance(place, dict) and isinstance(place.get(key), (int, float)):
                return int(place[key])
    return None


def exact_relabellings(provenance: dict[str, Any], test: str) -> int | None:
    """N! when the provenance says ``test`` ("mantel" or "protest") enumerated every relabelling, else None."""
    info = (provenance.get("analysis", {}) or {}).get(test, {}) or {}
    return int(info["n_relabellings"]) if info.get("exact") and info.get("n_relabellings") else None


def p_value_reading(p: float, n_perm: int | None, what: str, exact: int | None = None) -> str:
    """'p = 0.001: none of 999 random relabellings ...' with the permutation count when known; with ``exact``
    (the number of relabellings, N!, when all were enumerated) p = count / N!, the true labelling included."""
    if exact:
        count = round(p * exact)
        head = f"p = {p:.3g} (exact: every one of the {exact} relabellings of positions was tried)"
        if count <= 1:
            return f"{head}: no relabelling but the true one gave {what} this high; this is the smallest p-value possible here."
        return (f"{head}: {count} of them, the true one included, gave {what} at least this high, so this is "
                + ("unlikely to be chance." if p < 0.05 else "compatible with chance."))
    if n_perm is not None and n_perm > 0 and p <= 1.0 / (1 + n_perm) + 1e-12:
        return (f"p = {p:.3g}: no random relabelling of positions (out of {n_perm}) gave {what} this high; "
                f"this is the smallest p-value {n_perm} permutations can give.")
    if p < 0.05:
        return (f"p = {p:.3g}: only about {_pct_small(p)} of random relabellings of positions gave {what} at least this "
                f"high, so chance alone is an unlikely explanation.")
    return (f"p = {p:.3g}: about {_pct(p)} of random relabellings of positions gave {what} at least this high, "
            f"so this is compatible with chance.")


def _pct_small(x: float) -> str:
    """A percentage that never rounds a non-zero share to '0%'."""
    return _pct(x) if x >= 0.01 else f"{100 * x:.2g}%"


def readings(metrics: dict, provenance: dict[str, Any] | None = None, methods: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Headline metrics as ``(name, value, reading)`` rows, in reading order."""
    provenance = provenance or {}
    n_perm = n_permutations(provenance)
    out: list[tuple[str, str, str]] = []
    if _ok(metrics, "rsa_spearman"):
        rho = float(metrics["rsa_spearman"])
        value = f"{rho:.3f}"
        text = (f"Pairs of positions that are close in the true layout {'have' if rho > 0 else 'do not have'} "
                f"similar PE vectors: the rank correlation between PE distances and true distances is {rho:.2f} "
                f"(1 = same ordering of all pairs, 0 = unrelated).")
        if _ok(metrics, "rsa_ci_low") and _ok(metrics, "rsa_ci_high"):
            value += f" [{metrics['rsa_ci_low']:.3f}, {metrics['rsa_ci_high']:.3f}]"
            text += f" The 95% bootstrap interval over positions is {metrics['rsa_ci_low']:.2f} to {metrics['rsa_ci_high']:.2f}."
        if _ok(metrics, "null_rsa_mean"):
            mu = float(metrics["null_rsa_mean"])
            sd = float(metrics.get("null_rsa_sd", float("nan")))
            if math.isfinite(sd) and sd > 0:
                z = (rho - mu) / sd
                text += (f" Random Gaussian tables of the same shape give {mu:.2f} ± {sd:.2f} (chance level), so this "
                         f"is {z:.1f} standard deviations {'above' if z >= 0 else 'below'} chance.")
            else:
                text += f" Random Gaussian tables of the same shape give {mu:.2f} (chance level)."
        out.append(("RSA (Spearman ρ)", value, text))
    if _ok(metrics, "rsa_p"):
        out.append(("RSA p-value", f"{metrics['rsa_p']:.3g}", p_value_reading(float(metrics["rsa_p"]), n_perm, "an RSA",
                                                                     exact_relabellings(provenance, "mantel"))))
    methods = methods or sorted({k[len("recovery_"):-len("_r2")] for k in metrics if k.startswith("recovery_") and k.endswith("_r2")})
    for m in methods:
        key = f"recovery_{m}_r2"
        if not _ok(metrics, key):
            continue
        r2 = float(metrics[key])
        text = (f"Embedding the PE table in the true number of dimensions with {_METHOD_NAMES.get(m, m)} and aligning it "
                f"(shift, rotation/reflection, scale): the aligned recovered layout explains {_pct(max(r2, 0.0))} of the "
                f"variance of the true layout.")
        if _ok(metrics, f"recovery_{m}_rmse"):
            text += f" Recovered positions lie on average (RMS) {metrics[f'recovery_{m}_rmse']:.3g} true units from their true positions."
        if _ok(metrics, f"recovery_{m}_p"):
            text += " " + p_value_reading(float(metrics[f"recovery_{m}_p"]), n_perm, "a fit",
                                              exact_relabellings(provenance, "protest"))
        out.append((f"recovery r² ({m})", f"{r2:.3f}", text))
    if _ok(metrics, "probe_r2"):
        v = float(metrics["probe_r2"])
        out.append(("linear probe R²", f"{v:.3f}",
                    f"A cross-validated linear (ridge) read-out predicts the true coordinates of held-out positions with "
                    f"R² = {v:.2f}: {'most' if v >= 0.5 else 'little'} of the position information is linearly decodable, "
                    f"even if not laid out geometrically."))
    if _ok(metrics, "trustworthiness"):
        v = float(metrics["trustworthiness"])
        out.append(("trustworthiness", f"{v:.3f}",
                    f"Neighbours in the recovered layout are {'mostly ' if v >= 0.9 else ''}true neighbours "
                    f"(1 = no position is a recovered neighbour without being a true one; about 0.5 = random)."))
    if _ok(metrics, "knn_overlap"):
        v = float(metrics["knn_overlap"])
        out.append(("k-NN overlap", f"{v:.3f}",
                    f"On average {_pct(v)} of each position's nearest neighbours in the recovered layout are also its "
                    f"nearest neighbours in the true layout."))
    if _ok(metrics, "mds_stress"):
        v = float(metrics["mds_stress"])
        grade = "excellent" if v < 0.05 else "good" if v < 0.1 else "fair" if v < 0.2 else "poor"
        out.append(("MDS stress", f"{v:.3f}",
                    f"Kruskal stress-1 of the low-dimensional MDS map against the PE distances: {grade} by Kruskal's "
                    f"rule of thumb (< 0.05 excellent, < 0.1 good, < 0.2 fair); how well PE distances fit in the true number of dimensions."))
    if _ok(metrics, "participation_ratio"):
        v = float(metrics["participation_ratio"])
        k = metrics.get("gt_dim")
        text = f"The table's variance is spread over about {v:.1f} effective dimensions"
        text += f" (the true layout has {int(k)})." if _ok(metrics, "gt_dim") else "."
        out.append(("participation ratio", f"{v:.2f}", text))
    if _ok(metrics, "explained_variance"):
        v = float(metrics["explained_variance"])
        k = int(metrics["gt_dim"]) if _ok(metrics, "gt_dim") else None
        out.append(("explained variance", f"{v:.3f}",
                    f"The top {k if k else 'k'} principal components hold {_pct(v)} of the table's variance."))
    if _ok(metrics, "ref_shape_distance"):
        v = float(metrics["ref_shape_distance"])
        out.append(("shape distance to reference", f"{v:.3f}",
                    f"Angular Procrustes distance between the PE table and the reference table: 0 = the same shape up "
                    f"to rotation and scale, π/2 ≈ 1.571 = unrelated."))
    return out


def verdict(metrics: dict) -> str:
    """One sentence summary: is the true geometry recovered, beyond chance?"""
    if not _ok(metrics, "rsa_spearman"):
        return "No RSA was computed."
    best = max((float(v) for k, v in metrics.items() if k.startswith("recovery_") and k.endswith("_r2")
                and isinstance(v, (int, float)) and math.isfinite(float(v))), default=None)
    rho = float(metrics["rsa_spearman"])
    if not _ok(metrics, "rsa_p"):  # no permutations (--n-perm 0): say so rather than "no evidence"
        tail = f", best layout recovery r² {best:.2f}" if best is not None else ""
        return f"Not tested against chance (no permutation test was run, --n-perm 0): RSA {rho:.2f}{tail}."
    sig = float(metrics["rsa_p"]) < 0.05
    if sig and best is not None and best >= 0.8:
        return f"The PE table recovers the true geometry: RSA {rho:.2f} (beyond chance) and best layout recovery r² {best:.2f}."
    if sig:
        return (f"The PE table carries the true geometry only partly: RSA {rho:.2f} is beyond chance, "
                f"but the best layout recovery r² is {best:.2f}." if best is not None else
                f"The PE distances follow the true distances beyond chance (RSA {rho:.2f}).")
    return f"No evidence that the PE table reflects the true geometry beyond chance (RSA {rho:.2f})."
