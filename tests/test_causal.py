"""A causal kernel's geometry, split into the causal mask's share and the PE's (pe_probe.causal)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

from pe_probe import stats
from pe_probe.causal import causal_mask_baseline, mask_only_kernel
from pe_probe.cli import main
from pe_probe.distances import rsa_distances, square_distances
from pe_probe.groundtruth import line
from pe_probe.report.readings import readings, verdict
from pe_probe.views import view_tables

N, D = 32, 8


def gpt2_folder(folder, P, rng):
    """A Hugging Face GPT-2-style folder (config.json + model.safetensors) whose position table is P."""
    import torch
    from safetensors.torch import save_file

    d = P.shape[1]
    state = {"transformer.wpe.weight": P, "transformer.h.0.ln_1.weight": np.ones(d), "transformer.h.0.ln_1.bias": np.zeros(d),
             "transformer.h.0.attn.c_attn.weight": rng.normal(0, 0.02, (d, 3 * d)),
             "transformer.h.0.attn.c_attn.bias": np.zeros(3 * d)}
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2, "layer_norm_epsilon": 1e-5}))
    save_file({k: torch.tensor(v, dtype=torch.float32) for k, v in state.items()}, str(folder / "model.safetensors"))
    return state


def near_kernel(n: int) -> np.ndarray:
    """A causal kernel that attends to near positions (weights exp(-|i - j| / 2) over j <= i): a PE with geometry."""
    i, j = np.indices((n, n))
    near = np.where(j <= i, np.exp(-np.abs(i - j) / 2.0), 0.0)
    return near / near.sum(1, keepdims=True)


def test_mask_only_kernel_is_a_constant_tables_causal_kernel(rng):
    M = mask_only_kernel(5)
    np.testing.assert_allclose(M[3], [0.25, 0.25, 0.25, 0.25, 0.0])
    np.testing.assert_allclose(M.sum(1), 1.0)
    state = {"wpe.weight": np.tile(rng.normal(size=D), (N, 1)), "h.0.ln_1.weight": np.ones(D), "h.0.ln_1.bias": np.zeros(D),
             "h.0.attn.c_attn.weight": rng.normal(size=(D, 3 * D)), "h.0.attn.c_attn.bias": rng.normal(size=3 * D)}
    _, A, info = view_tables(state, {"config": {"n_head": 2}}, "kernel")[0]
    assert info["causal"] is True
    np.testing.assert_allclose(A, mask_only_kernel(N), atol=1e-12)


def test_mask_baseline_matches_scipy_and_pairs_the_bootstrap(rng):
    coords = line(N).coords
    M = mask_only_kernel(N)
    same = causal_mask_baseline(M, coords, n_boot=200)
    # pe-probe merges distances that differ only by rounding into ties (M has many such): so does the reference
    assert same["causal_mask_rsa"] == pytest.approx(spearmanr(np.round(pdist(M), 12), pdist(coords))[0], abs=1e-12)
    assert same["causal_mask_rsa"] > 0.5  # the mask alone looks strongly positional
    # the same kernel against itself: every paired resample differs by exactly 0
    assert same["causal_excess_rsa"] == 0 and same["causal_excess_ci_low"] == same["causal_excess_ci_high"] == 0
    # a kernel that attends to near positions (a PE with geometry) exceeds the mask; one that ignores order does not
    near = near_kernel(N)
    up = causal_mask_baseline(near, coords, n_boot=200)
    assert up["causal_excess_rsa"] == pytest.approx(spearmanr(np.round(pdist(near), 12), pdist(coords))[0]
                                                    - same["causal_mask_rsa"], abs=1e-12)
    assert up["causal_excess_ci_low"] > 0 and up["causal_excess_ci_low"] <= up["causal_excess_rsa"] <= up["causal_excess_ci_high"]
    noisy = M * rng.uniform(0.5, 1.5, (N, N))
    noisy /= noisy.sum(1, keepdims=True)
    flat = causal_mask_baseline(noisy, coords, n_boot=200)
    assert flat["causal_excess_ci_low"] < flat["causal_excess_rsa"] < flat["causal_excess_ci_high"]
    assert np.isnan(causal_mask_baseline(near, coords, n_boot=0)["causal_excess_ci_low"])


def test_verdict_and_reading_judge_a_causal_kernel_against_the_mask():
    base = {"rsa_spearman": 0.66, "rsa_p": 0.01, "recovery_pca_r2": 0.9, "causal_mask_rsa": 0.66,
            "causal_excess_rsa": 0.0, "causal_excess_ci_low": -0.01, "causal_excess_ci_high": 0.01}
    assert verdict(base).startswith("No evidence that the PE adds geometry beyond the causal mask")
    assert "recovers" not in verdict(base)
    assert verdict(dict(base, rsa_spearman=0.9, causal_excess_rsa=0.24, causal_excess_ci_low=0.1)).startswith(
        "The PE adds geometry beyond the causal mask")
    assert "less than the causal mask" in verdict(dict(base, causal_excess_ci_high=-0.05))
    assert verdict(dict(base, causal_excess_ci_low=float("nan"))).startswith("Not tested against the causal mask")
    rsa_row = {name: text for name, _, text in readings(base)}["RSA (Spearman ρ)"]
    assert "causal mask alone" in rsa_row and "-0.01 to 0.01" in rsa_row


def test_gpt2_kernel_of_a_table_without_positions_shows_no_pe_geometry(tmp_path, rng, capsys):
    """A GPT-2 whose position table is all zeros read 'RSA 0.66, beyond chance' from the causal mask alone."""
    gpt2_folder(tmp_path / "m", np.zeros((N, D)), rng)
    out = tmp_path / "out"
    code = main(["analyze", str(tmp_path / "m"), "--view", "kernel", "-g", f"line:{N}", "--n-perm", "50", "--n-boot",
                 "100", "--n-null", "3", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "causal mask RSA" in text and "note        causal attention" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["causal_excess_rsa"] == pytest.approx(0.0, abs=1e-12) and m["rsa_spearman"] == pytest.approx(m["causal_mask_rsa"])
    prov = m["provenance"]
    assert prov["view"]["kernel_distance_rho"] == m["kernel_distance_rho"]  # was null there
    assert prov["original_shape"] == [N, D] and "causal attention: i attends to j <= i" in prov["notes"]
    assert "No evidence that the PE adds geometry beyond the causal mask" in (out / "index.html").read_text()


def test_a_local_layers_mask_only_kernel_is_uniform_over_its_window(rng):
    M = mask_only_kernel(6, window=2)
    np.testing.assert_allclose(M[4], [0, 0, 0, 0.5, 0.5, 0])
    np.testing.assert_allclose(M[0], [1, 0, 0, 0, 0, 0])
    # GPT-Neo's local first layer with a table without positions: the view's kernel is that mask
    d = 8
    state = {"transformer.wpe.weight": np.tile(rng.normal(size=d), (N, 1)), "transformer.h.0.ln_1.weight": np.ones(d),
             "transformer.h.0.ln_1.bias": np.zeros(d),
             **{f"transformer.h.0.attn.attention.{p}_proj.weight": rng.normal(size=(d, d)) for p in ("q", "k", "v")}}
    meta = {"config": {"model_type": "gpt_neo", "num_heads": 2, "attention_layers": ["local"], "window_size": 4,
                       "layer_norm_epsilon": 1e-5}}
    _, A, info = view_tables(state, meta, "kernel")[0]
    assert info["window"] == 4
    np.testing.assert_allclose(A, mask_only_kernel(N, 4), atol=1e-12)
    assert causal_mask_baseline(A, line(N).coords, n_boot=0, window=4)["causal_excess_rsa"] == pytest.approx(0, abs=1e-9)


def test_causal_mask_kernel_rho_is_the_mask_kernels_not_the_analysed_kernels():
    coords = line(12).coords
    M = mask_only_kernel(12)
    S = (M + M.T) / 2
    iu = np.triu_indices(12, k=1)
    # scipy reference: Spearman of the symmetrised mask (near ties merged by rounding) with minus the distances
    expected = spearmanr(np.round(S[iu], 12), -pdist(coords))[0]
    out = causal_mask_baseline(near_kernel(12), coords, n_boot=0)
    assert out["causal_mask_kernel_rho"] == pytest.approx(expected, abs=1e-9)
    # the analysed kernel's own rho is a different number: the key does not depend on the kernel given
    assert out["causal_mask_kernel_rho"] == pytest.approx(
        causal_mask_baseline(np.full((12, 12), 1 / 12), coords, n_boot=0)["causal_mask_kernel_rho"], abs=1e-12)


def test_causal_excess_interval_is_the_95_percent_percentile_interval_of_the_paired_resamples():
    coords = line(12).coords
    K = near_kernel(12)
    out = causal_mask_baseline(K, coords, n_boot=400, seed=5)
    gt = rsa_distances(square_distances(coords, "euclidean"), "euclidean")
    samples = {}
    for name, table in (("kernel", K), ("mask", mask_only_kernel(12))):
        d = rsa_distances(square_distances(table, "euclidean"), "euclidean")
        samples[name] = stats.bootstrap_rsa(d[0], gt[0], n_boot=400, seed=5, orders=(d[1], gt[1])).samples
    diff = samples["kernel"] - samples["mask"]
    diff = diff[np.isfinite(diff)]
    assert out["causal_excess_ci_low"] == pytest.approx(np.percentile(diff, 2.5), abs=1e-12)
    assert out["causal_excess_ci_high"] == pytest.approx(np.percentile(diff, 97.5), abs=1e-12)
    # about 5% of the paired resamples fall outside, not 10%
    outside = np.mean((diff < out["causal_excess_ci_low"]) | (diff > out["causal_excess_ci_high"]))
    assert outside <= 0.06
