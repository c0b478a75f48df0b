"""Plain-language readings of the metrics on the index page."""

from __future__ import annotations

from pe_probe.report.readings import p_value_reading, readings, verdict


def _by_name(rows):
    return {name: text for name, _, text in rows}


def test_recovery_and_rsa_sentences_use_the_numbers():
    m = {"rsa_spearman": 0.9, "rsa_ci_low": 0.85, "rsa_ci_high": 0.93, "null_rsa_mean": 0.0, "null_rsa_sd": 0.05,
         "rsa_p": 0.001, "recovery_cmds_r2": 0.9, "recovery_cmds_rmse": 0.42, "gt_dim": 2, "participation_ratio": 3.5}
    rows = _by_name(readings(m, {"n_perm": 999}))
    assert "explains 90% of the variance of the true layout" in rows["recovery r² (cmds)"]
    assert "0.42 true units" in rows["recovery r² (cmds)"]
    assert "18.0 standard deviations above chance" in rows["RSA (Spearman ρ)"]
    assert "0.85 to 0.93" in rows["RSA (Spearman ρ)"]
    assert "no random relabelling" in rows["RSA p-value"]
    assert "3.5 effective dimensions (the true layout has 2)" in rows["participation ratio"]


def test_p_value_wording_depends_on_the_value():
    assert "no random relabelling" in p_value_reading(0.001, 999, "an RSA")
    assert "compatible with chance" in p_value_reading(0.4, 999, "an RSA")
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
