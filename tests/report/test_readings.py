"""Plain-language readings of the metrics on the index page."""

from __future__ import annotations

from pe_probe.report.readings import correlation_strength, p_value_reading, readings, rsa_below_zero, stress_grade, verdict


def _by_name(rows):
    return {name: text for name, _, text in rows}


def test_recovery_and_rsa_sentences_use_the_numbers():
    m = {"rsa_spearman": 0.9, "rsa_ci_low": 0.85, "rsa_ci_high": 0.93, "null_rsa_mean": 0.0, "null_rsa_sd": 0.05,
         "rsa_p": 0.001, "recovery_cmds_r2": 0.9, "recovery_cmds_rmse": 0.42, "gt_dim": 2, "participation_ratio": 3.5}
    rows = _by_name(readings(m, {"n_perm": 999}))
    assert "explains 90% of the variance of the true layout" in rows["recovery r² (cmds)"]
    assert "0.42 true units" in rows["recovery r² (cmds)"]
    assert "18.0 standard deviations above chance" in rows["RSA (Spearman ρ)"]
    assert "0.850 to 0.930" in rows["RSA (Spearman ρ)"]
    assert "no random relabelling" in rows["RSA p-value"]
    assert "3.5 effective dimensions (the true layout has 2)" in rows["participation ratio"]


def test_p_value_wording_depends_on_the_value():
    assert "no random relabelling" in p_value_reading(0.001, 999, "an RSA")
    assert "so an RSA this high is compatible with chance" in p_value_reading(0.4, 999, "an RSA")  # one-sided: not "this is"
    assert "unlikely" in p_value_reading(0.01, 999, "an RSA")
    assert "no random relabelling" not in p_value_reading(0.01, None, "an RSA")


def test_p_value_wording_of_exact_tests():
    # N = 6: all 720 relabellings enumerated; p = 1/720 means only the true labelling did as well
    smallest = p_value_reading(1 / 720, 1000, "an RSA", exact=720)
    assert "exact" in smallest and "720" in smallest and "no relabelling but the true one" in smallest
    assert "0%" not in smallest and "random relabelling" not in smallest
    some = p_value_reading(4 / 720, 1000, "an RSA", exact=720)
    assert "4 of them" in some and "unlikely" in some
    assert "compatible with chance" in p_value_reading(300 / 720, 1000, "an RSA", exact=720)
    # sampled tests never print a non-zero share as "0%"
    assert "about 0%" not in p_value_reading(0.002, 5000, "an RSA")


def test_readings_take_exactness_from_provenance():
    prov = {"analysis": {"n_perm": 1000, "mantel": {"exact": True, "n_relabellings": 720},
                         "protest": {"exact": True, "n_relabellings": 720}}}
    rows = {name: text for name, _, text in readings({"rsa_spearman": 0.9, "rsa_p": 1 / 720, "recovery_pca_r2": 0.9,
                                                      "recovery_pca_p": 2 / 720}, prov)}
    assert "every one of the 720 relabellings" in rows["RSA p-value"]
    assert "2 of them" in rows["recovery r² (pca)"]


def test_missing_metrics_give_no_sentence_and_verdict_reflects_chance():
    assert readings({}) == []
    assert "No evidence" in verdict({"rsa_spearman": 0.02, "rsa_p": 0.6})
    untested = verdict({"rsa_spearman": 0.99, "recovery_pca_r2": 0.98})  # --n-perm 0: no p-value at all
    assert "Not tested against chance" in untested and "No evidence" not in untested and "0.98" in untested
    assert "recovers the true geometry" in verdict({"rsa_spearman": 0.95, "rsa_p": 0.001, "recovery_pca_r2": 0.97})


# ---- wording that follows the size and direction of an effect (from an audit of the report text) ----------


def test_the_verdict_weighs_size_direction_and_testability_not_only_p():
    noise = verdict({"rsa_spearman": 0.076, "rsa_p": 0.034, "recovery_pca_r2": 0.018})  # a 5% false positive
    assert noise.startswith("Weak evidence at most") and "negligible" in noise and "only partly" not in noise
    anti = verdict({"rsa_spearman": -1.0, "rsa_p": 1.0})
    assert "anti-correlated" in anti and "systematic inversion" in anti
    few = verdict({"rsa_spearman": 0.96, "rsa_p": 1 / 11, "recovery_pca_r2": 0.97}, {"analysis": {"n_perm": 10}})
    assert few.startswith("Not testable at the 5% level") and "No evidence" not in few
    assert "--n-perm 20 or more" in few  # 19 permutations still cannot give p < 0.05: 1 / 20 = 0.05
    nineteen = verdict({"rsa_spearman": 0.9, "rsa_p": 0.05, "recovery_pca_r2": 0.95}, {"analysis": {"n_perm": 19}})
    assert nineteen.startswith("Not testable") and "--n-perm 20 or more" in nineteen
    cosine = verdict({"rsa_spearman": 0.64, "rsa_p": 0.001, "recovery_pca_r2": 0.97, "recovery_cmds_r2": 0.39},
                     {"analysis": {"pe_metric": "cosine"}})
    assert "(PCA; PCA uses the table itself, not the cosine distances)" in cosine
    assert "(PCA)" in verdict({"rsa_spearman": 0.95, "rsa_p": 0.001, "recovery_pca_r2": 0.97})


def test_rsa_probe_and_neighbour_sentences_are_graded():
    rows = _by_name(readings({"rsa_spearman": 0.076, "probe_r2": -0.11, "trustworthiness": 0.545}))
    assert rows["RSA (Spearman ρ)"].startswith("PE distances barely follow true distances (negligible correlation)")
    assert "none of it is linearly decodable" in rows["linear probe R²"]
    assert "hardly more often true neighbours than at random" in rows["trustworthiness"]
    rows = _by_name(readings({"rsa_spearman": -0.9, "rsa_p": 1.0, "probe_r2": 0.43, "trustworthiness": 0.8}))
    assert "dissimilar PE vectors" in rows["RSA (Spearman ρ)"] and "strong negative correlation" in rows["RSA (Spearman ρ)"]
    assert "one-sided" in rows["RSA p-value"] and "some of the position" in rows["linear probe R²"]
    assert "partly true neighbours" in rows["trustworthiness"]


def test_stress_is_graded_on_kruskal_s_own_scale():
    """Kruskal (1964): 0.2 poor, 0.1 fair, 0.05 good, 0.025 excellent, 0 perfect (an audit found the report one
    grade more generous: 0.04 read "excellent", 0.15 "fair")."""
    grades = {v: stress_grade(v) for v in (0.0, 0.01, 0.025, 0.04, 0.05, 0.07, 0.1, 0.15, 0.2, 0.2795)}
    assert grades == {0.0: "perfect", 0.01: "excellent", 0.025: "excellent", 0.04: "good", 0.05: "good", 0.07: "fair",
                      0.1: "fair", 0.15: "poor", 0.2: "poor", 0.2795: "worse than poor (above 0.2)"}
    row = _by_name(readings({"mds_stress": 0.04}))["MDS stress"]
    assert "good on Kruskal's (1964) scale (0.2 poor, 0.1 fair, 0.05 good, 0.025 excellent, 0 perfect)" in row


def test_numbers_never_round_into_a_false_claim():
    rows = _by_name(readings({"explained_variance": 0.9965, "gt_dim": 1, "recovery_pca_r2": 0.99501,
                              "rsa_spearman": 0.5, "null_rsa_mean": -0.001, "null_rsa_sd": 0.02}))
    assert "The top 1 principal component holds over 99%" in rows["explained variance"]
    assert "explains over 99% of the variance" in rows["recovery r² (pca)"]
    assert "give 0.00 ± 0.02" in rows["RSA (Spearman ρ)"] and "-0.00" not in rows["RSA (Spearman ρ)"]
    one = _by_name(readings({"rsa_spearman": 0.9, "null_rsa_mean": -0.55}))  # --n-null 1: no spread
    assert "One random Gaussian table of the same shape gives -0.55: a single draw" in one["RSA (Spearman ρ)"]


def test_a_skipped_bootstrap_is_named():
    rows = _by_name(readings({"rsa_spearman": 0.9}, {"analysis": {"n_boot": 0}}))
    assert "No bootstrap interval was computed (--n-boot 0)." in rows["RSA (Spearman ρ)"]


def test_exact_p_values_name_the_ground_truth_s_symmetries():
    line = p_value_reading(2 / 120, 1000, "an RSA", exact=120)  # a line's mirror image fits as well as the truth
    assert "2 of them" in line and "symmetries of the true layout" in line
    assert "symmetries" not in p_value_reading(300 / 720, 1000, "an RSA", exact=720)


def test_index_page_shows_the_notes_and_embeds_parseable_metrics(tmp_path):
    import json
    import re

    import numpy as np

    import pe_probe

    table = np.arange(5.0)[:, None] * np.ones((5, 3)) + np.random.default_rng(0).normal(0, 0.01, (5, 3))
    res = pe_probe.analyze(table, "line:5", n_perm=0, n_boot=200, methods="pca")
    assert res.provenance["notes"]  # N = 5: a rough bootstrap CI
    page = (pe_probe.write_analysis(res, tmp_path / "r", formats=("png",)) / "index.html").read_text()
    assert "Notes on this analysis" in page and "read the CI as rough" in page
    embedded = re.search(r'id="pe-probe-metrics">(.*?)</script>', page, re.S).group(1)
    data = json.loads(embedded)  # valid JSON: not HTML-escaped, null where metrics.json has null
    on_disk = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert data["rsa_p"] is None and data == {k: v for k, v in on_disk.items() if k in data}


def test_distance_from_chance_is_not_offered_as_a_test_when_the_tests_disagree():
    """A random table at RSA -0.20 (CI across zero, Mantel p 0.986) read '4.0 standard deviations below chance'
    right after 'not shown to be below zero'; the sentence now says which of the two is the test."""
    prov = {"analysis": {"n_perm": 999}}
    base = {"rsa_spearman": -0.20, "rsa_ci_low": -0.46, "rsa_ci_high": 0.10, "rsa_p": 0.986,
            "null_rsa_mean": 0.0, "null_rsa_sd": 0.05}
    text = _by_name(readings(base, prov))["RSA (Spearman ρ)"]
    assert "not shown to be below zero" in text and "4.0 standard deviations below chance" in text
    assert "not a test: the interval and the permutation test are" in text
    weak_up = _by_name(readings(dict(base, rsa_spearman=0.15, rsa_ci_low=-0.1, rsa_ci_high=0.4, rsa_p=0.08), prov))
    assert "3.0 standard deviations above chance" in weak_up["RSA (Spearman ρ)"]
    assert "not a test" in weak_up["RSA (Spearman ρ)"]
    for agreeing in (dict(base, rsa_spearman=0.15, rsa_p=0.01), dict(base, rsa_spearman=-0.05, null_rsa_sd=0.02),
                     dict(base, rsa_ci_high=-0.05, rsa_p=0.999)):  # tests agree, or |rho| < 0.1, or shown below zero
        assert "not a test" not in _by_name(readings(agreeing, prov))["RSA (Spearman ρ)"], agreeing


def test_shape_distance_is_read_against_its_chance_level_not_pi_over_2():
    """Unrelated tables land well below pi/2 after the best rotation; the reading compares with the random tables."""
    close = _by_name(readings({"ref_shape_distance": 0.2, "null_ref_shape_distance_mean": 0.72,
                               "null_ref_shape_distance_sd": 0.01}))["shape distance to reference"]
    assert "0.720 ± 0.010" in close and "closer to the reference than chance" in close and "not clearly" not in close
    far = _by_name(readings({"ref_shape_distance": 0.71, "null_ref_shape_distance_mean": 0.72,
                             "null_ref_shape_distance_sd": 0.01}))["shape distance to reference"]
    assert "not clearly closer to the reference than chance" in far
    bare = _by_name(readings({"ref_shape_distance": 0.71}))["shape distance to reference"]
    assert "chance" not in bare and "orthogonal even after the best rotation" in bare


# ---- cut-offs, each at its edge (a mutation audit moved every one of these without a test failing)

def test_correlation_words_at_their_cut_offs():
    assert [correlation_strength(r) for r in (0.5, 0.3, 0.1, 0.09, -0.5)] == [
        "strong", "moderate", "weak", "negligible", "strong"]


def test_an_rsa_is_called_below_zero_only_at_p_of_at_least_0_95():
    m = {"rsa_spearman": -0.6, "rsa_ci_low": -0.8, "rsa_ci_high": -0.4}
    prov = {"n_perm": 999}
    assert rsa_below_zero(dict(m, rsa_p=0.95), prov)[0]
    assert not rsa_below_zero(dict(m, rsa_p=0.92), prov)[0]


def test_a_shape_distance_is_closer_than_chance_only_beyond_2_sd():
    base = {"null_ref_shape_distance_mean": 1.0, "null_ref_shape_distance_sd": 0.1}
    near = _by_name(readings(dict(base, ref_shape_distance=0.85)))["shape distance to reference"]
    far = _by_name(readings(dict(base, ref_shape_distance=0.75)))["shape distance to reference"]
    assert "not clearly closer to the reference than chance" in near
    assert "closer to the reference than chance (more than 2 sd below it)" in far


def test_the_verdict_says_recovers_only_from_r2_0_8():
    partly = verdict({"rsa_spearman": 0.8, "rsa_p": 0.001, "recovery_pca_r2": 0.7})
    assert partly.startswith("The PE table carries the true geometry only partly")
    assert verdict({"rsa_spearman": 0.8, "rsa_p": 0.001, "recovery_pca_r2": 0.8}).startswith("The PE table recovers")


def test_a_probe_explains_most_of_the_position_from_r2_0_5():
    for r2, word in ((0.5, "most"), (0.55, "most"), (0.45, "some")):
        assert f"{word} of the position" in _by_name(readings({"probe_r2": r2}))["linear probe R²"]


def test_a_positive_rsa_claims_a_tendency_only_when_tested_above_zero():
    """A noisy line table (rho 0.25, p = 0.064, CI [-0.26, 0.83]) read 'close positions tend to have similar PE
    vectors' beside a verdict of 'no evidence beyond chance'."""
    prov = {"n_perm": 999}
    weak = {"rsa_spearman": 0.25, "rsa_ci_low": -0.26, "rsa_ci_high": 0.83, "rsa_p": 0.064}
    text = _by_name(readings(weak, prov))["RSA (Spearman ρ)"]
    assert text.startswith("PE distances seem to follow the true distances, but not significantly")
    assert "tend to" not in text and "not shown to be above zero: its 95% bootstrap interval includes 0" in text
    text = _by_name(readings(dict(weak, rsa_ci_low=0.05), prov))["RSA (Spearman ρ)"]
    assert "not shown to be above zero: the permutation test gives p = 0.064, not below 0.05" in text
    shown = _by_name(readings(dict(weak, rsa_ci_low=0.05, rsa_p=0.01), prov))["RSA (Spearman ρ)"]
    assert shown.startswith("Pairs of positions that are close in the true layout tend to have similar PE vectors")
    untested = _by_name(readings({"rsa_spearman": 0.25}, prov))["RSA (Spearman ρ)"]  # nothing to say it is not
    assert "tend to" in untested and "not shown" not in untested


def test_the_kernel_and_attention_views_own_metrics_are_read():
    """kernel_distance_rho and attention_similarity were in metrics.json and the terminal summary but not in
    index.html's headline metrics."""
    rows = {name: (value, text) for name, value, text in
            readings({"kernel_distance_rho": 0.62, "attention_similarity": 0.913})}
    value, text = rows["kernel vs −distance (Spearman ρ)"]
    assert value == "0.620" and "0.62" in text and "attend more to near positions" in text
    assert "attend more to far" in _by_name(readings({"kernel_distance_rho": -0.4}))["kernel vs −distance (Spearman ρ)"]
    value, text = rows["attention similarity"]
    assert value == "0.913" and "reference model" in text


def test_values_keep_three_significant_digits_on_every_page():
    """One rule (sig3) for the index's values, the interactive page and the figures: small values keep their
    digits (0.0088, not 0.009) and a CI end of 0.9952 does not read as a perfect 1.00."""
    from pe_probe.report.readings import sig3
    from pe_probe.report.static import _fmt

    assert [sig3(v) for v in (0.008795, 0.9952, -0.04667, 0.77, 12.345, -0.0001)] == \
        ["0.00880", "0.995", "-0.0467", "0.770", "12.3", "-0.000100"]
    assert sig3(-0.0000001 * 0) == "0.00" and _fmt(0.008795) == sig3(0.008795) and _fmt(float("nan")) == "n/a"
    m = {"rsa_spearman": 0.9, "rsa_ci_low": 0.97, "rsa_ci_high": 0.9952, "recovery_pca_r2": 0.008795}
    rows = {name: (value, text) for name, value, text in readings(m, {})}
    assert "0.970 to 0.995" in rows["RSA (Spearman ρ)"][1] and rows["recovery r² (pca)"][0] == "0.00880"
