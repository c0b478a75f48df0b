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
    """A share as a whole percentage that never rounds a share below 1 up to '100%' (0.9965: 'over 99%')."""
    if 0.995 <= x < 1:
        return "over 99%"
    return f"{100 * x:.0f}%"


def sig3(x: float) -> str:
    """Three significant digits, trailing zeros kept: the one rule for metric values on every page and figure
    ("0.770 [0.768, 0.779]"; "0.00880", where three decimals would leave one digit; "0.995", not "1.00"), without
    a minus sign on a value that rounds to zero."""
    text = f"{x:#.3g}"
    text = text[:-1] if text.endswith(".") else text
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _num(x: float, digits: int = 2) -> str:
    """``x`` to ``digits`` decimals, without a minus sign on a value that rounds to zero ('-0.00')."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


# Words for the size of a correlation |rho| (Cohen's conventions for r): below 0.1 negligible, 0.1-0.3 weak,
# 0.3-0.5 moderate, 0.5 and above strong. README, "What the numbers mean", lists them with the other cut-offs.
CORRELATION_WORDS = ((0.5, "strong"), (0.3, "moderate"), (0.1, "weak"), (0.0, "negligible"))
RECOVERED_R2 = 0.8  # the verdict's "recovers the true geometry": best layout recovery r2 at least this
ALPHA = 0.05  # the verdict's and the p-value sentences' significance level
INVERSION_RHO = -0.3  # an RSA at or below this, significantly below zero (`rsa_below_zero`), is named an inversion
# how the chance level's random tables were used, by `pe_probe.chance.ChanceModel.kind` (else Gaussian tables)
CHANCE_WORDS = {"through-view": " put in the PE table's place (its shape and scale) and read through the same model maps",
                "model-rerun": " put in place of the model's PE tables (their shape and scale), the model rerun on the same "
                               "puzzles"}
NO_SPREAD = 1e-9  # random tables' RSA sd at or below this is rounding noise: they all gave one value
PROBE_MOST = 0.5  # the probe sentence's "most of the position information"
TRUST_MOSTLY, TRUST_PARTLY = 0.9, 0.7  # the trustworthiness sentence's "mostly" / "partly" true neighbours
# Kruskal (1964)'s verbal scale for stress-1; a value between two anchors takes the grade of the one above it
KRUSKAL_STRESS = ((0.0, "perfect"), (0.025, "excellent"), (0.05, "good"), (0.1, "fair"), (0.2, "poor"))


def stress_grade(v: float) -> str:
    """Kruskal's word for a stress-1 value: the grade of the nearest anchor of `KRUSKAL_STRESS` at or above it."""
    for anchor, grade in KRUSKAL_STRESS:
        if v <= anchor:
            return grade
    return f"worse than poor (above {KRUSKAL_STRESS[-1][0]:g})"


def correlation_strength(rho: float) -> str:
    """'strong', 'moderate', 'weak' or 'negligible' for |rho| (`CORRELATION_WORDS`)."""
    return next(word for bound, word in CORRELATION_WORDS if abs(rho) >= bound)


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
        if p >= ALPHA:
            return (f"{head}: {count} of them, the true one included, gave {what} at least this high, so {what} this "
                    f"high is compatible with chance.")
        return (f"{head}: {count} of them, the true one included, gave {what} at least this high, so this is unlikely "
                f"to be chance. Relabellings that are symmetries of the true layout (a line's mirror image, a grid's "
                f"rotations and reflections) leave its distances unchanged and always do as well, so p cannot fall "
                f"below their share.")
    if n_perm is not None and n_perm > 0 and p <= 1.0 / (1 + n_perm) + 1e-12:
        return (f"p = {p:.3g}: no random relabelling of positions (out of {n_perm}) gave {what} this high; "
                f"this is the smallest p-value {n_perm} permutations can give.")
    if p < ALPHA:
        return (f"p = {p:.3g}: only about {_pct_small(p)} of random relabellings of positions gave {what} at least this "
                f"high, so chance alone is an unlikely explanation.")
    return (f"p = {p:.3g}: about {_pct(p)} of random relabellings of positions gave {what} at least this high, "
            f"so {what} this high is compatible with chance.")  # 'this high': the test is one-sided


def _pct_small(x: float) -> str:
    """A percentage that never rounds a non-zero share to '0%'."""
    return _pct(x) if x >= 0.01 else f"{100 * x:.2g}%"


MIN_EXACT_FOR_LOWER_TAIL = 1000  # an exact test over fewer relabellings does not count as evidence below zero


def _p_can_reach_alpha(provenance: dict[str, Any]) -> bool:
    """Whether a large Mantel p can say the RSA is below zero: False for a sampled test too small to reach
    `ALPHA` (--n-perm < 20), and for an exact test over fewer than `MIN_EXACT_FOR_LOWER_TAIL` relabellings,
    where the layout's symmetries (a line's mirror image, a grid's rotations) tie with the observed RSA and
    hold a share of the lower tail that p does not show (4 positions: 2 of 24)."""
    exact = exact_relabellings(provenance, "mantel")
    if exact:
        return exact >= MIN_EXACT_FOR_LOWER_TAIL
    n_perm = n_permutations(provenance)
    return not n_perm or 1 / (n_perm + 1) < ALPHA


def rsa_below_zero(metrics: dict, provenance: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Is the RSA significantly below zero? ``(answer, reason)``.

    Every test that was computed must say so, and at least one must have been: the 95% bootstrap interval lies
    below 0 (its upper end < 0), and ``rsa_p`` >= 1 - `ALPHA` (the Mantel test is one-sided, for a table that
    follows the true distances; a p this large puts the RSA among the lowest 5% of relabellings, while a
    merely large p only says the table does not follow them). A Mantel test whose permutations cannot reach
    `ALPHA` (--n-perm below 20) does not count. ``reason`` is empty when the answer is yes, else a clause saying
    why not ('its 95% bootstrap interval includes 0')."""
    answer, reason = _rsa_sign_tested(metrics, provenance or {}, above=False)
    if answer is None:
        return False, "it was not tested against zero (no bootstrap interval and no permutation test that can reach p < 0.05)"
    return answer, reason


def rsa_above_zero(metrics: dict, provenance: dict[str, Any] | None = None) -> tuple[bool | None, str]:
    """Is the RSA significantly above zero? ``(answer, reason)``, answer None when nothing tested it.

    Every test that was computed must say so: the 95% bootstrap interval lies above 0, and ``rsa_p`` < `ALPHA`
    (a Mantel test that cannot reach `ALPHA` does not count). ``reason`` says why not ('its 95% bootstrap interval
    includes 0'), empty when the answer is yes or None."""
    return _rsa_sign_tested(metrics, provenance or {}, above=True)


def _rsa_sign_tested(metrics: dict, provenance: dict[str, Any], above: bool) -> tuple[bool | None, str]:
    """`rsa_above_zero` (``above``) or `rsa_below_zero`'s tests: None when neither the CI nor a Mantel test that
    can reach `ALPHA` was computed."""
    tests = 0
    if _ok(metrics, "rsa_ci_low") and _ok(metrics, "rsa_ci_high"):
        tests += 1
        if (float(metrics["rsa_ci_low"]) <= 0) if above else (float(metrics["rsa_ci_high"]) >= 0):
            return False, "its 95% bootstrap interval includes 0"
    if _ok(metrics, "rsa_p") and _p_can_reach_alpha(provenance):
        tests += 1
        p = float(metrics["rsa_p"])
        if above and p >= ALPHA:
            return False, f"the permutation test gives p = {p:.3g}, not below {ALPHA:g}"
        if not above and p < 1 - ALPHA:
            return False, (f"the one-sided permutation test (p = {p:.3g}) does not place it among the lowest "
                           f"{_pct(ALPHA)} of random relabellings of positions")
    return (True, "") if tests else (None, "")


def rsa_inverted(metrics: dict, provenance: dict[str, Any] | None = None) -> bool:
    """Does the table invert the true distances? RSA <= `INVERSION_RHO` and significantly below zero
    (`rsa_below_zero`). README, "What the numbers mean", states the rule."""
    return (_ok(metrics, "rsa_spearman") and float(metrics["rsa_spearman"]) <= INVERSION_RHO
            and rsa_below_zero(metrics, provenance)[0])


def readings(metrics: dict, provenance: dict[str, Any] | None = None, methods: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Headline metrics as ``(name, value, reading)`` rows, in reading order."""
    provenance = provenance or {}
    n_perm = n_permutations(provenance)
    out: list[tuple[str, str, str]] = []
    if _ok(metrics, "rsa_spearman"):
        rho = float(metrics["rsa_spearman"])
        value = sig3(rho)
        strength = correlation_strength(rho)
        below, why_not = rsa_below_zero(metrics, provenance)
        above, why_not_above = rsa_above_zero(metrics, provenance)
        kind = f"{strength} {'negative ' if rho <= -0.1 else ''}correlation"
        if abs(rho) < 0.1:
            head = "PE distances barely follow true distances"
        elif rho > 0 and above is False:  # no claim of a tendency
            head = "PE distances seem to follow the true distances, but not significantly"
            kind += ", not significantly above zero"
        elif rho > 0:
            head = "Pairs of positions that are close in the true layout tend to have similar PE vectors"
        elif not below:  # negative, but not shown to be below zero: no claim of dissimilarity or inversion
            head = "PE distances do not clearly follow the true distances, nor clearly invert them"
            kind += ", not significantly below zero"
        elif rho <= INVERSION_RHO:
            head = ("Pairs of positions that are close in the true layout tend to have dissimilar PE vectors: the "
                    "table inverts the true distances")
        else:
            head = "Pairs of positions that are close in the true layout tend to have somewhat dissimilar PE vectors"
        text = (f"{head} ({kind}): the rank correlation between PE distances and true distances is {_num(rho)} "
                f"(1 = same ordering of all pairs, 0 = unrelated, -1 = reversed).")
        if _ok(metrics, "rsa_ci_low") and _ok(metrics, "rsa_ci_high"):
            value += f" [{sig3(metrics['rsa_ci_low'])}, {sig3(metrics['rsa_ci_high'])}]"
            text += (f" The 95% bootstrap interval over positions is {sig3(metrics['rsa_ci_low'])} to "
                     f"{sig3(metrics['rsa_ci_high'])}.")
        elif (provenance.get("analysis", {}) or {}).get("n_boot") == 0:
            text += " No bootstrap interval was computed (--n-boot 0)."
        if rho <= -0.1 and not below:
            text += f" The correlation is not shown to be below zero: {why_not}."
        if rho >= 0.1 and above is False:
            text += f" The correlation is not shown to be above zero: {why_not_above}."
        if _ok(metrics, "null_rsa_mean"):
            mu = float(metrics["null_rsa_mean"])
            sd = float(metrics.get("null_rsa_sd", float("nan")))
            kind = ((provenance.get("analysis") or {}).get("chance") or {}).get("kind")
            tail = CHANCE_WORDS.get(kind, " of the same shape")
            many, one = ("Random tables", "One random table") if kind in CHANCE_WORDS else (
                "Random Gaussian tables", "One random Gaussian table")
            if math.isfinite(sd) and sd > NO_SPREAD:
                z = (rho - mu) / sd
                text += (f" {many}{tail} give {_num(mu)} ± {_num(sd)} (chance level), so "
                         f"this is {abs(z):.1f} standard deviations {'above' if z >= 0 else 'below'} chance.")
                untested = (not below) if z < 0 else (_ok(metrics, "rsa_p") and float(metrics["rsa_p"]) >= 0.05)
                if abs(z) >= 2 and (rho <= -0.1 or z > 0) and untested:
                    text += (" That spread is how much random tables' RSA varies, not how uncertain this table's RSA is, "
                             "so it is not a test: the interval and the permutation test are.")
            elif math.isfinite(sd):  # several random tables, one value: the view does not depend on the table
                text += (f" {many}{tail} all give {_num(mu)}, without spread: what this view shows hardly depends on "
                         f"the table, so any table gets about this RSA.")
            else:  # one null table (--n-null 1): a single draw, no spread
                text += (f" {one}{tail} gives {_num(mu)}: a single draw, not a chance level "
                         f"(raise --n-null).")
        if _ok(metrics, "causal_mask_rsa"):
            text += (f" This is a causal model's kernel: the causal mask alone (a table without positional information) "
                     f"gives {_num(float(metrics['causal_mask_rsa']))}, so only the excess over it, "
                     f"{_num(float(metrics['causal_excess_rsa']))}{_excess_ci(metrics)}, can come from the PE.")
        out.append(("RSA (Spearman ρ)", value, text))
    if _ok(metrics, "rsa_p"):
        text = p_value_reading(float(metrics["rsa_p"]), n_perm, "an RSA", exact_relabellings(provenance, "mantel"))
        if rsa_inverted(metrics, provenance):
            text += (" The test is one-sided (does the table follow the true distances?): an RSA this far below zero "
                     "is a systematic inversion of the true distances, not chance.")
        elif _ok(metrics, "rsa_spearman") and float(metrics["rsa_spearman"]) <= -0.1:
            text += (" The test is one-sided (does the table follow the true distances?), so a large p alone does not "
                     "show that the table inverts them.")
        out.append(("RSA p-value", f"{metrics['rsa_p']:.3g}", text))
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
        out.append((f"recovery r² ({m})", sig3(r2), text))
    if _ok(metrics, "probe_r2"):
        v = float(metrics["probe_r2"])
        if v >= PROBE_MOST:
            how = "most of the position information is linearly decodable"
        elif v >= 0:
            how = "some of the position information is linearly decodable"
        else:
            how = "none of it is linearly decodable (the read-out does worse than predicting the mean position)"
        text = (f"A cross-validated linear (ridge) read-out predicts the true coordinates of held-out positions with "
                f"R² = {_num(v)}: {how}.")
        best = best_recovery(metrics)
        if v >= PROBE_MOST and best is not None and best[1] < 0.5:
            text += " The positions are decodable even though the table does not lay them out geometrically."
        out.append(("linear probe R²", sig3(v), text))
    if _ok(metrics, "trustworthiness"):
        v = float(metrics["trustworthiness"])
        how = ("mostly true neighbours" if v >= TRUST_MOSTLY else "partly true neighbours" if v >= TRUST_PARTLY
               else "hardly more often true neighbours than at random")
        out.append(("trustworthiness", sig3(v),
                    f"Neighbours in the recovered layout are {how} (1 = no position is a recovered neighbour without "
                    f"being a true one; about 0.5 = random)."))
    if _ok(metrics, "knn_overlap"):
        v = float(metrics["knn_overlap"])
        out.append(("k-NN overlap", sig3(v),
                    f"On average {_pct(v)} of each position's nearest neighbours in the recovered layout are also its "
                    f"nearest neighbours in the true layout."))
    if _ok(metrics, "mds_stress"):
        v = float(metrics["mds_stress"])
        out.append(("MDS stress", sig3(v),
                    f"Kruskal stress-1 of the low-dimensional MDS map against the PE distances: {stress_grade(v)} on "
                    "Kruskal's (1964) scale (0.2 poor, 0.1 fair, 0.05 good, 0.025 excellent, 0 perfect); how well PE "
                    "distances fit in the true number of dimensions."))
    if _ok(metrics, "participation_ratio"):
        v = float(metrics["participation_ratio"])
        k = metrics.get("gt_dim")
        text = f"The table's variance is spread over about {v:.1f} effective dimensions"
        text += f" (the true layout has {int(k)})." if _ok(metrics, "gt_dim") else "."
        out.append(("participation ratio", sig3(v), text))
    if _ok(metrics, "explained_variance"):
        v = float(metrics["explained_variance"])
        k = int(metrics["gt_dim"]) if _ok(metrics, "gt_dim") else None
        pcs = "principal component holds" if k == 1 else "principal components hold"
        out.append(("explained variance", sig3(v), f"The top {k if k else 'k'} {pcs} {_pct(v)} of the table's variance."))
    if _ok(metrics, "kernel_distance_rho"):
        v = float(metrics["kernel_distance_rho"])
        how = ("attend more to near positions than to far ones" if v >= 0.1 else
               "attend more to far positions than to near ones" if v <= -0.1 else "hardly depend on distance")
        out.append(("kernel vs −distance (Spearman ρ)", sig3(v),
                    f"The positional attention kernel (softmax(QKᵀ/√d) averaged over heads, made symmetric) has a rank "
                    f"correlation of {_num(v)} with minus the true distance: positions {how} (1 = attention falls "
                    f"off with distance in the same order for every pair)."))
    if _ok(metrics, "attention_similarity"):
        v = float(metrics["attention_similarity"])
        out.append(("attention similarity", sig3(v),
                    f"Cosine similarity between this model's attention maps on task puzzles and the reference model's "
                    f"(--attention-reference), the study's attention measure: 1 = the same maps up to scale."))
    if _ok(metrics, "ref_shape_distance"):
        v = float(metrics["ref_shape_distance"])
        text = ("Angular Procrustes distance between the PE table and the reference table: 0 = the same shape up to "
                "rotation and scale, π/2 ≈ 1.571 = orthogonal even after the best rotation.")
        if _ok(metrics, "null_ref_shape_distance_mean"):
            mu = float(metrics["null_ref_shape_distance_mean"])
            sd = float(metrics.get("null_ref_shape_distance_sd", float("nan")))
            spread = f" ± {sig3(sd)}" if math.isfinite(sd) else ""
            closer = ("closer to the reference than chance (more than 2 sd below it)" if math.isfinite(sd) and v < mu - 2 * sd
                      else "not clearly closer to the reference than chance" if math.isfinite(sd) else "")
            text += (f" Unrelated tables land well below π/2 (the rotation fits noise): the chance level's random tables "
                     f"give {sig3(mu)}{spread}" + (f", so this table is {closer}." if closer else "."))
        out.append(("shape distance to reference", sig3(v), text))
    return out


def best_recovery(metrics: dict) -> tuple[str, float] | None:
    """(method, r2) of the best layout recovery, or None when none was computed."""
    found = [(k[len("recovery_"):-len("_r2")], float(v)) for k, v in metrics.items()
             if k.startswith("recovery_") and k.endswith("_r2") and isinstance(v, (int, float)) and math.isfinite(float(v))]
    return max(found, key=lambda item: item[1], default=None)


def _excess_ci(metrics: dict) -> str:
    lo, hi = metrics.get("causal_excess_ci_low"), metrics.get("causal_excess_ci_high")
    return f" (95% CI {_num(float(lo))} to {_num(float(hi))})" if _ok(metrics, "causal_excess_ci_low") and _ok(
        metrics, "causal_excess_ci_high") else ""


def causal_verdict(metrics: dict) -> str:
    """The verdict on a causal kernel: does the PE add geometry beyond what the causal mask alone gives?"""
    rho, mask = float(metrics["rsa_spearman"]), float(metrics["causal_mask_rsa"])
    said = (f"the kernel's RSA {_num(rho)} against the {_num(mask)} that the causal mask alone gives (a table without "
            f"positional information): a difference of {_num(rho - mask)}{_excess_ci(metrics)}")
    if not _ok(metrics, "causal_excess_ci_low"):
        return f"Not tested against the causal mask (--n-boot 0): {said}."
    if float(metrics["causal_excess_ci_low"]) > 0:
        return f"The PE adds geometry beyond the causal mask: {said}; only this excess can come from the PE."
    if float(metrics["causal_excess_ci_high"]) < 0:
        return f"The PE makes the kernel follow the true distances less than the causal mask alone: {said}."
    return f"No evidence that the PE adds geometry beyond the causal mask: {said}."


def verdict(metrics: dict, provenance: dict[str, Any] | None = None) -> str:
    """One sentence summary: is the true geometry recovered, beyond chance? (cut-offs: `ALPHA`, `RECOVERED_R2`,
    `CORRELATION_WORDS`; README, "What the numbers mean"). A causal kernel is judged against the causal mask
    (`causal_verdict`)."""
    if not _ok(metrics, "rsa_spearman"):
        return "No RSA was computed."
    if _ok(metrics, "causal_mask_rsa"):
        return causal_verdict(metrics)
    provenance = provenance or {}
    rho = float(metrics["rsa_spearman"])
    best = best_recovery(metrics)
    recovery = recovery_is = ""  # "best layout recovery r² 0.97 (PCA)" / "the best layout recovery r² is 0.55 (PCA)"
    if best is not None:
        method, r2 = best
        metric = (provenance.get("analysis", {}) or {}).get("pe_metric") or provenance.get("pe_metric")
        note = (f"; PCA uses the table itself, not the {metric} distances"
                if method == "pca" and metric not in (None, "euclidean") else "")
        which = f"({_METHOD_NAMES.get(method, method)}{note})"
        recovery, recovery_is = f"best layout recovery r² {r2:.2f} {which}", f"the best layout recovery r² is {r2:.2f} {which}"
    if not _ok(metrics, "rsa_p"):  # no permutations (--n-perm 0): say so rather than "no evidence"
        return f"Not tested against chance by permutation (--n-perm 0): RSA {_num(rho)}" + (
            f", {recovery}." if recovery else ".")
    p = float(metrics["rsa_p"])
    n_perm = n_permutations(provenance)
    if p >= ALPHA and n_perm and not exact_relabellings(provenance, "mantel") and 1 / (n_perm + 1) >= ALPHA:
        return (f"Not testable at the 5% level: {n_perm} permutations cannot give a p-value below {1 / (n_perm + 1):.3g} "
                f"(use --n-perm {math.floor(1 / ALPHA)} or more); RSA {_num(rho)}" + (f", {recovery}." if recovery else "."))
    strength = correlation_strength(rho)
    if p < ALPHA and best is not None and best[1] >= RECOVERED_R2:
        return f"The PE table recovers the true geometry: RSA {_num(rho)} (beyond chance, {strength}) and {recovery}."
    if p < ALPHA and abs(rho) < 0.3:
        return (f"Weak evidence at most: RSA {_num(rho)} is beyond chance (p = {p:.3g}) but {strength}"
                + (f", and {recovery_is}." if recovery_is else "."))
    if p < ALPHA:
        return (f"The PE table carries the true geometry only partly: RSA {_num(rho)} is beyond chance ({strength}), "
                f"but {recovery_is}." if recovery_is else
                f"The PE distances follow the true distances beyond chance (RSA {_num(rho)}, {strength}).")
    if rsa_inverted(metrics, provenance):  # RSA <= -0.3 and significantly below zero
        return (f"No evidence that the PE table reflects the true geometry: its distances are anti-correlated with the "
                f"true ones (RSA {_num(rho)}), a systematic inversion, not chance.")
    return f"No evidence that the PE table reflects the true geometry beyond chance (RSA {_num(rho)})."
