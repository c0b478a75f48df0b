"""Sentences that must not claim more than the statistics support: an inverted RSA only when it is significantly
below zero (readings.py), a rising/falling relation in a comparison only when its p-value supports it
(compare_index.py)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from pe_probe.report.compare_index import correlation_sentence, write_compare_index
from pe_probe.report.readings import readings, verdict

PROV = {"analysis": {"n_perm": 1000}}


def _rows(metrics, provenance=PROV):
    return {name: text for name, _, text in readings(metrics, provenance)}


# ---- RSA below zero: "inverts" / "dissimilar" only when significantly negative ------------------------------


def test_a_random_table_s_negative_rsa_is_not_called_an_inversion():
    """The reported case: a random 16x8 table on line:16, RSA -0.203, CI [-0.459, 0.095], Mantel p 0.986."""
    m = {"rsa_spearman": -0.203, "rsa_ci_low": -0.459, "rsa_ci_high": 0.095, "rsa_p": 0.986}
    rows = _rows(m)
    rsa = rows["RSA (Spearman ρ)"]
    assert "inverts" not in rsa and "dissimilar" not in rsa
    assert "not significantly below zero" in rsa and "interval includes 0" in rsa
    assert "-0.459 to 0.0950" in rsa  # the numbers are still given
    assert "inversion" not in rows["RSA p-value"] and "does not show that the table inverts" in rows["RSA p-value"]
    assert verdict(m, PROV) == "No evidence that the PE table reflects the true geometry beyond chance (RSA -0.20)."


def test_a_large_negative_rsa_whose_interval_includes_zero_is_no_inversion_anywhere():
    m = {"rsa_spearman": -0.6, "rsa_ci_low": -0.9, "rsa_ci_high": 0.05, "rsa_p": 1.0}
    rows = _rows(m)
    assert "inverts" not in rows["RSA (Spearman ρ)"] and "not significantly below zero" in rows["RSA (Spearman ρ)"]
    assert "systematic inversion" not in rows["RSA p-value"]
    v = verdict(m, PROV)
    assert "inversion" not in v and "anti-correlated" not in v and v.startswith("No evidence")


def test_a_clearly_negative_significant_rsa_keeps_the_inversion_wording():
    m = {"rsa_spearman": -0.6, "rsa_ci_low": -0.8, "rsa_ci_high": -0.4, "rsa_p": 1.0}
    rows = _rows(m)
    assert ("tend to have dissimilar PE vectors: the table inverts the true distances (strong negative correlation)"
            in rows["RSA (Spearman ρ)"])
    assert "not significantly" not in rows["RSA (Spearman ρ)"]
    assert "systematic inversion of the true distances" in rows["RSA p-value"]
    v = verdict(m, PROV)
    assert "anti-correlated" in v and "systematic inversion" in v


def test_a_weak_significant_negative_rsa_is_dissimilar_but_not_an_inversion():
    m = {"rsa_spearman": -0.2, "rsa_ci_low": -0.3, "rsa_ci_high": -0.1, "rsa_p": 0.99}
    rsa = _rows(m)["RSA (Spearman ρ)"]
    assert "dissimilar PE vectors" in rsa and "weak negative correlation" in rsa and "inverts" not in rsa
    assert "inversion" not in verdict(m, PROV)


def test_without_a_bootstrap_the_permutation_test_s_lower_tail_decides():
    # p >= 0.95: the RSA is among the lowest 5% of relabellings
    assert "inverts the true distances" in _rows({"rsa_spearman": -0.6, "rsa_p": 0.99})["RSA (Spearman ρ)"]
    # a merely large p only says that the table does not follow the true distances
    m = {"rsa_spearman": -0.6, "rsa_p": 0.7}
    rsa = _rows(m)["RSA (Spearman ρ)"]
    assert "inverts" not in rsa and "lowest 5%" in rsa
    assert "inversion" not in verdict(m, PROV)
    # a permutation test that cannot reach 5% (--n-perm 10) shows nothing either way
    few = {"analysis": {"n_perm": 10}}
    assert "inverts" not in _rows({"rsa_spearman": -0.9, "rsa_p": 1.0}, few)["RSA (Spearman ρ)"]
    # neither test run: no claim
    assert "not tested against zero" in _rows({"rsa_spearman": -0.9}, {})["RSA (Spearman ρ)"]


def test_rsa_below_zero_needs_every_computed_test_and_at_least_one():
    from pe_probe.report.readings import rsa_below_zero, rsa_inverted

    assert rsa_below_zero({"rsa_spearman": -0.5, "rsa_ci_low": -0.7, "rsa_ci_high": -0.2, "rsa_p": 0.99}, PROV)[0]
    assert rsa_below_zero({"rsa_spearman": -0.5, "rsa_ci_low": -0.7, "rsa_ci_high": -0.2}, {})[0]  # --n-perm 0
    assert not rsa_below_zero({"rsa_spearman": -0.5, "rsa_ci_low": -0.7, "rsa_ci_high": -0.2, "rsa_p": 0.5}, PROV)[0]
    assert not rsa_below_zero({"rsa_spearman": -0.5, "rsa_ci_low": -0.7, "rsa_ci_high": 0.0, "rsa_p": 1.0}, PROV)[0]
    assert not rsa_below_zero({"rsa_spearman": -0.5, "rsa_ci_low": math.nan, "rsa_ci_high": math.nan}, {})[0]
    exact = {"analysis": {"n_perm": 10, "mantel": {"exact": True, "n_relabellings": 5040}}}
    assert rsa_below_zero({"rsa_spearman": -1.0, "rsa_p": 1.0}, exact)[0]  # exact tests count even with few perms
    # but not over a handful of relabellings: line:4's mirror image ties with the observed RSA, so its exact
    # lower tail is at least 2/24 = 0.083 although p = 1 (a review found "a systematic inversion" said there)
    tiny = {"analysis": {"n_perm": 1000, "mantel": {"exact": True, "n_relabellings": 24}}}
    assert not rsa_below_zero({"rsa_spearman": -0.86, "rsa_p": 1.0}, tiny)[0]
    assert "inversion" not in verdict({"rsa_spearman": -0.86, "rsa_p": 1.0}, tiny)
    significant = {"rsa_ci_low": -0.5, "rsa_ci_high": -0.1, "rsa_p": 1.0}
    assert rsa_inverted({"rsa_spearman": -0.3, **significant}, PROV)
    assert not rsa_inverted({"rsa_spearman": -0.29, **significant}, PROV)


# ---- comparison sentences: rises/falls only with a p-value that supports it -----------------------------------


def _corr(rho, p, n, x="pe.init_std", y="probe_r2"):
    return {"x": x, "y": y, "spearman_rho": rho, "p_value": p, "n": n}


def test_zero_correlation_is_no_monotone_relation():
    s = correlation_sentence(_corr(0.0, 1.0, 12))
    assert s == "probe_r2 shows no monotone relation with pe.init_std (Spearman ρ = 0.00, p = 1, n = 12)."
    assert "falls" not in s and "rises" not in s and "weak" not in s


def test_zero_correlation_with_too_few_points_says_too_few():
    """ρ = 0 at n = 3 said 'no monotone relation' while every other n = 3 row said 'too few points to tell'."""
    s = correlation_sentence(_corr(0.0, 1.0, 3))
    assert s.startswith("probe_r2 vs pe.init_std: too few points to tell") and "no monotone relation" not in s


def test_a_non_significant_correlation_has_no_direction_or_strength():
    s = correlation_sentence(_corr(-0.3, 0.4, 12))
    assert s.startswith("probe_r2 shows no clear monotone relation with pe.init_std (Spearman ρ = -0.30, p = 0.4, n = 12)")
    assert "falls" not in s and "weak" not in s and "not significant at the 5% level" in s
    assert "no clear monotone relation" in correlation_sentence(_corr(0.9, math.nan, 12))


def test_a_significant_correlation_keeps_direction_and_strength():
    assert (correlation_sentence(_corr(-0.98, 1e-6, 12, "noise", "rsa_spearman"))
            == "rsa_spearman falls as noise rises (Spearman ρ = -0.98, p = 1e-06, n = 12): a very strong monotone relation.")
    assert correlation_sentence(_corr(0.45, 0.01, 30)).startswith("probe_r2 rises as pe.init_std rises")


def test_too_few_points_for_any_significant_p_are_named():
    from pe_probe.report.compare_index import smallest_exact_p

    assert smallest_exact_p(3) == pytest.approx(1 / 3) and smallest_exact_p(4) == pytest.approx(1 / 12)
    assert smallest_exact_p(5) == pytest.approx(1 / 60)
    # 2 values x 3 seeds: an exact test's smallest p is 2 * 3! * 3! / 6! = 0.1, though scipy's t-approximation says 0.021
    x, y = [0.1, 0.1, 0.1, 2.0, 2.0, 2.0], [0.9, 0.8, 0.85, 0.2, 0.3, 0.25]
    assert smallest_exact_p(6, x, y) == pytest.approx(0.1)
    s = correlation_sentence(_corr(1.0, 0.0, 4))  # scipy gives p = 0 for a perfect ordering of 4
    assert "too few points" in s and "rises" not in s and "0.083" in s
    tied = correlation_sentence(_corr(-0.878, 0.021, 6), x, y)
    assert "too few points" in tied and "tied values" in tied and "falls" not in tied
    assert "falls as" in correlation_sentence(_corr(-0.878, 0.021, 6))  # without the values: no ties known
    # ties can make the null asymmetric: the floor is the exact p of the most extreme ordering, not 2t/n!
    # (it said "at least 0.067" next to p = 0.033 for these values, which a perfect ordering reaches)
    v = [0, 0, 1, 1, 2]
    assert smallest_exact_p(5, v, v) == pytest.approx(1 / 30)
    assert "rises as" in correlation_sentence(_corr(1.0, 1 / 30, 5), v, v)


def test_undefined_correlation_is_no_relation():
    s = correlation_sentence(_corr(math.nan, math.nan, 2))
    assert "no monotone relation can be measured" in s and "only 2 points" in s
    assert "a constant column" in correlation_sentence(_corr(math.nan, math.nan, 6))


def test_index_page_uses_the_columns_ties(tmp_path):
    frame = pd.DataFrame({"label": list("abcdef"), "pe.init_std": [0.1, 0.1, 0.1, 2.0, 2.0, 2.0],
                          "probe_r2": [0.9, 0.8, 0.85, 0.2, 0.3, 0.25], "rsa_spearman": [0.5, 0.5, 0.4, 0.5, 0.6, 0.45]})
    corr = pd.DataFrame([_corr(-0.878, 0.021, 6), _corr(0.0, 1.0, 6, y="rsa_spearman")])
    page = write_compare_index(tmp_path, frame, corr, [], by="pe.init_std", trajectory=False).read_text()
    assert "probe_r2 vs pe.init_std: too few points" in page and "falls as" not in page
    assert "rsa_spearman vs pe.init_std: too few points" in page  # rho = 0, but these ties cannot reach p < 0.05


@pytest.mark.parametrize("x,y", [
    ([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]),
    ([0.1, 0.1, 0.1, 2.0, 2.0, 2.0], [0.9, 0.8, 0.95, 0.3, 0.25, 0.4]),  # 2 settings x 3 seeds: ties
    ([3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2, 8, 1]),  # ties in both, an asymmetric null
])
def test_compare_spearman_p_is_exact_at_small_n(x, y):
    """scipy's t approximation gave 0.037 for n = 5, rho = 0.9, where the exact p is 0.083."""
    import itertools

    from scipy.stats import spearmanr

    from pe_probe.report.compare_figures import spearman

    rho, p, n = spearman(x, y)
    observed = spearmanr(x, y).statistic
    # brute force: scipy's rho of every pairing, two-sided as |rho| >= |observed|
    every = [abs(spearmanr(x, [y[i] for i in perm]).statistic) for perm in itertools.permutations(range(len(y)))]
    assert n == len(x) and rho == pytest.approx(observed)
    assert p == pytest.approx(sum(r >= abs(observed) - 1e-12 for r in every) / len(every), abs=1e-12)


def test_index_table_shows_a_blank_value_as_a_dash_not_nan(tmp_path):
    """compare --by pe.init_std blanks σ for PEs that ignore it; the index table showed that as 'nan'."""
    frame = pd.DataFrame({"label": ["sin", "learned"], "pe.init_std": [math.nan, 0.1],
                          "rsa_spearman": [0.9, math.nan]})
    page = write_compare_index(tmp_path, frame, pd.DataFrame(columns=["x", "y", "spearman_rho", "p_value", "n"]), [],
                               by="pe.init_std", trajectory=False).read_text()
    table = page[page.index("<table"):page.index("</table>")]
    assert "nan" not in table and table.count("&mdash;") == 2 and "<td>0.1</td>" in table


def test_index_table_shows_the_generalization_metric_the_figures_use(tmp_path):
    """The table took the first three eval.* columns (train_acc, train_loss, ...) and left out eval.ood_acc."""
    frame = pd.DataFrame({"label": list("abcd"), "rsa_spearman": [0.1, 0.2, 0.3, 0.4],
                          "eval.train_acc": [1.0] * 4, "eval.train_loss": [0.1] * 4, "eval.train_acc_binary": [1.0] * 4,
                          "eval.ood_acc": [0.5, 0.6, 0.7, 0.8]})
    page = write_compare_index(tmp_path, frame, pd.DataFrame(columns=["x", "y", "spearman_rho", "p_value", "n"]), [],
                               by=None, trajectory=False).read_text()
    header = page[page.index("<table"):page.index("</tr>")]
    assert "<th>eval.ood_acc</th>" in header and header.index("eval.ood_acc") < header.index("eval.train_acc")


def test_grey_points_in_the_generalization_figure_have_a_key():
    """Runs whose PE ignores σ are drawn grey; nothing on the figure said what grey meant."""
    import matplotlib.pyplot as plt

    from pe_probe.report.compare_figures import generalization_figure, generalization_frame

    frame = pd.DataFrame({"label": list("abcd"), "pe.init_std": [0.1, 1.0, 2.0, math.nan],
                          "rsa_spearman": [0.9, 0.5, 0.2, 0.95], "eval.ood_acc": [0.8, 0.6, 0.5, 0.9]})
    for std, keyed in ((frame["pe.init_std"], True), (frame["pe.init_std"].fillna(0.5), False)):
        f = frame.assign(**{"pe.init_std": std})
        fig = generalization_figure(generalization_frame(f, ["rsa_spearman"], "eval.ood_acc", "pe.init_std"),
                                    ["rsa_spearman"], "eval.ood_acc", "pe.init_std")
        texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        assert (texts == ["pe.init_std blank (a PE that ignores it, or not recorded)"]) is keyed, texts
        plt.close(fig)


def test_the_generalization_figure_colours_a_sigma_grid_over_decades_on_a_log_scale():
    """σ 0.02, 0.1, 0.5 came out one colour on a linear scale beside a σ of 2."""
    import matplotlib.colors
    import matplotlib.pyplot as plt

    from pe_probe.report.compare_figures import generalization_figure, generalization_frame

    frame = pd.DataFrame({"label": list("abcd"), "pe.init_std": [0.02, 0.1, 0.5, 2.0],
                          "rsa_spearman": [0.9, 0.5, 0.2, 0.1], "eval.ood_acc": [0.8, 0.6, 0.5, 0.4]})
    for sigmas, log in (([0.02, 0.1, 0.5, 2.0], True), ([0.5, 1.0, 1.5, 2.0], False)):
        f = frame.assign(**{"pe.init_std": sigmas})
        fig = generalization_figure(generalization_frame(f, ["rsa_spearman"], "eval.ood_acc", "pe.init_std"),
                                    ["rsa_spearman"], "eval.ood_acc", "pe.init_std")
        norm = fig.axes[0].collections[0].norm
        assert isinstance(norm, matplotlib.colors.LogNorm) is log
        plt.close(fig)


def test_index_links_the_pdf_of_a_figure_when_there_is_one(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "metrics_vs_pe.init_std.pdf").write_bytes(b"%PDF-1.4")
    frame = pd.DataFrame({"label": list("ab"), "rsa_spearman": [0.1, 0.2]})
    empty = pd.DataFrame(columns=["x", "y", "spearman_rho", "p_value", "n"])
    page = write_compare_index(tmp_path, frame, empty, ["metrics_vs_pe.init_std", "identifiability_vs_generalization"],
                               by="pe.init_std", trajectory=False).read_text()
    assert page.count('.pdf">PDF</a>') == 1 and 'href="figures/metrics_vs_pe.init_std.pdf"' in page


def test_index_models_table_shows_the_splits_accuracies_not_the_first_columns_in_file_order(tmp_path):
    frame = pd.DataFrame({"label": ["a", "b"], "rsa_spearman": [0.5, 0.1], "eval.ood_acc": [0.9, 0.3],
                          "eval.train_acc": [1.0, 0.9], "eval.train_loss": [0.01, 0.2],
                          "eval.train_acc_binary": [1.0, 1.0], "eval.test_acc": [0.95, 0.5]})
    page = write_compare_index(tmp_path, frame, pd.DataFrame(columns=["x", "y", "spearman_rho", "p_value", "n"]), [],
                               by=None, trajectory=False).read_text()
    header = re.findall(r"<th>([^<]+)</th>", page)
    assert header[-4:] == ["eval.ood_acc", "eval.test_acc", "eval.train_acc", "eval.train_loss"]
