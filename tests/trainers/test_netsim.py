"""Network simulation task: geometry in the activity, reproducibility, speed, training, checkpoints."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pe_probe.errors import InputError
from trainers.checkpoint import load_checkpoint
from trainers.config import MaskedTrainConfig, make_masked_config
from trainers.evaluate import evaluate_checkpoint
from trainers.masked_model import MaskedPETransformer, masked_input, masked_mse
from trainers.tasks.netsim import activity_geometry, build_network, load_data, node_layout, simulate_windows
from trainers.train_masked import MaskedSplit, build_splits, n_masked, random_masks, split_mse, train_masked

torch.set_num_threads(1)


def tiny(**over):
    base = {"model.d_model": 16, "optim.epochs": 2, "optim.batch_size": 32, "data.n_train": 96, "data.n_test": 32,
            "eval_every": 1, "ckpt_every": 1}
    base.update(over)
    return make_masked_config("netsim", "quick", base)


@pytest.mark.parametrize("dim,layout", [(2, "grid"), (3, "grid"), (2, "random"), (3, "random")])
def test_geometry_is_in_the_simulated_activity(dim, layout):
    gt = node_layout(layout, 64, dim, seed=0)
    net = build_network(gt, seed=0)
    act = simulate_windows(net, 400, window=16, noise=0.5, seed=1)
    g = activity_geometry(act, gt.coords)
    assert g["fc_distance_spearman"] < -0.35  # nearby nodes co-vary: the layout is recoverable in principle
    assert g["fc_nearest_mean"] > 1.5 * g["fc_all_mean"]


def test_pe_probe_analyze_recovers_the_layout_from_the_activity_table():
    from pe_probe.analysis import analyze

    gt = node_layout("grid", 64, 2)
    act = simulate_windows(build_network(gt), 300, window=16, seed=2)  # (M, N, T)
    table = act.transpose(1, 0, 2).reshape(64, -1)  # node x time
    table = (table - table.mean(1, keepdims=True)) / table.std(1, keepdims=True)
    r = analyze(table, gt, pe_metric="correlation", methods="pca", n_perm=99, n_boot=0, n_null=3)
    assert r.metrics["rsa_spearman"] > 0.3 and r.metrics["rsa_p"] <= 0.01


def test_simulation_is_seeded_and_directed():
    gt = node_layout("random", 27, 3, seed=5)
    assert np.array_equal(gt.coords, node_layout("random", 27, 3, seed=5).coords)
    a, b = build_network(gt, seed=3), build_network(gt, seed=3)
    assert np.array_equal(a.W, b.W) and not np.allclose(a.W, a.W.T)
    assert np.isclose(np.abs(np.linalg.eigvals(a.W)).max(), 0.9)
    x1 = simulate_windows(a, 50, window=8, seed=4)
    assert np.array_equal(x1, simulate_windows(b, 50, window=8, seed=4))
    assert not np.array_equal(x1, simulate_windows(a, 50, window=8, seed=5))


def test_simulation_is_vectorised_and_fast():
    net = build_network(node_layout("grid", 64, 2))
    t = time.perf_counter()
    x = simulate_windows(net, 4000, window=16, seed=0)
    assert x.shape == (4000, 64, 16) and np.isfinite(x).all()
    assert time.perf_counter() - t < 20  # ~1-2 s on one core; generous for a busy machine


def test_layout_errors_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="square"):
        node_layout("grid", 60, 2)
    with pytest.raises(InputError, match="coordinate file"):
        node_layout("file")
    f = tmp_path / "c.csv"
    np.savetxt(f, np.random.default_rng(0).random((10, 3)), delimiter=",")
    assert node_layout("file", coords_file=str(f)).coords.shape == (10, 3)


def test_masks_and_loss():
    m = random_masks(5, 10, 0.9, torch.Generator().manual_seed(0))
    assert (m.sum(1) == 9).all()
    x = torch.randn(5, 10, 4)
    inp = masked_input(x, m)
    assert inp.shape == (5, 10, 5) and (inp[..., :4][m] == 0).all() and (inp[..., 4] == m.float()).all()
    assert masked_mse(x, x, m) == 0


def test_masked_model_shapes_and_pe_tables():
    cfg = tiny(**{"pe.kind": "sin2d"})
    model = MaskedPETransformer(cfg.model, cfg.pe, torch.as_tensor(node_layout("grid", 16, 2).coords), 9, 8)
    assert model(torch.randn(3, 16, 9)).shape == (3, 16, 8)
    assert model.pe_param_names() == ["blocks.0.pe.table", "blocks.1.pe.table"]


def test_config_round_trip_and_lst_untouched():
    cfg = tiny()
    assert MaskedTrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(InputError):
        make_masked_config("netsim", "quick", {"data.mask_ood": 1.0})
    from trainers.config import make_config

    assert "n_nodes" not in make_config("quick").to_dict()["data"]


def test_tiny_run_trains_writes_a_checkpoint_that_analyze_reads(tmp_path):
    run = tmp_path / "run"
    msgs = []
    m = train_masked(tiny(), run, log=msgs.append)
    assert msgs[0].startswith(f"{run}: training epochs 1-") and "windows per epoch" in msgs[0]
    for key in ("train_mse", "test_mse", "ood_mse", "ood_mse_noise", "ood_mse_zero"):
        assert np.isfinite(m[key])
    ck = load_checkpoint(run / "last.pt")
    assert ck["ground_truth"]["coords"].shape == (64, 2) and ck["ground_truth"]["kind"] == "grid"
    assert ck["pe_params"] == ["blocks.0.pe.table", "blocks.1.pe.table"]
    assert len(list((run / "checkpoints").glob("step-*.pt"))) == 2
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    # resume of a finished run returns its metrics; evaluate reproduces them
    assert train_masked(tiny(), run, log=lambda s: None)["ood_mse"] == pytest.approx(m["ood_mse"])
    from trainers.provenance import read_sessions
    assert [s["trainer"] for s in read_sessions(run)] == ["masked"]  # one session: the finished re-run adds none
    ev = evaluate_checkpoint(run / "last.pt")
    assert ev["ood_mse"] == pytest.approx(m["ood_mse"], rel=1e-5)
    counts = {k: v for k, v in ev.items() if k.endswith("_n")}  # windows per split, integers in --json too
    assert counts and all(type(v) is int and v > 0 for v in counts.values())
    out = subprocess.run([sys.executable, "-m", "pe_probe.cli", "analyze", str(run / "last.pt"), "--json",
                          "--n-perm", "19", "--n-boot", "0"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    met = json.loads(out.stdout)
    assert met["n_positions"] == 64 and met["gt_dim"] == 2


def test_cli_train_netsim_and_evaluate(tmp_path, capsys):
    from pe_probe.cli import main

    run = tmp_path / "cli"
    argv = ["train", "netsim", "--out", str(run), "--epochs", "1", "--n-train", "64",
            "--dim", "3", "--pe", "sin3d", "--d-model", "12"]
    assert main(argv) == 0
    assert load_checkpoint(run / "last.pt")["ground_truth"]["coords"].shape == (64, 3)
    capsys.readouterr()
    assert main(["evaluate", str(run / "last.pt")]) == 0
    assert capsys.readouterr().out.startswith("scored on the run's splits (masked tokens)\n")
    assert main(["train", "netsim", "--out", str(tmp_path / "bad"), "--stride", "3"]) == 2
    assert main(["train", "netsim", "--out", str(tmp_path / "graphs"), "--cuda-graphs", "--device", "cpu"]) == 2
    assert not (tmp_path / "graphs").exists()


def test_masked_speed_options_refused_where_unsupported_write_nothing(tmp_path, monkeypatch):
    import trainers.evaluate

    with pytest.raises(InputError, match="--cuda-graphs needs a CUDA device") as e:
        train_masked(tiny(), tmp_path / "graphs", log=lambda s: None, cuda_graphs=True)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(trainers.evaluate, "cpu_has_bf16", lambda: False)
    with pytest.raises(InputError, match="bf16"):
        train_masked(tiny(), tmp_path / "bf16", log=lambda s: None, bf16=True)
    assert not (tmp_path / "graphs").exists() and not (tmp_path / "bf16").exists()


@pytest.mark.skipif(not __import__("trainers.evaluate").evaluate.cpu_has_bf16(), reason="CPU without native bf16")
def test_masked_bf16_trains_close_to_float32_and_is_recorded(tmp_path):
    from trainers.provenance import read_sessions

    a = train_masked(tiny(), tmp_path / "fp32", log=lambda s: None)
    b = train_masked(tiny(), tmp_path / "bf16", log=lambda s: None, bf16=True)
    assert a["train_loss"] != b["train_loss"] and b["train_loss"] == pytest.approx(a["train_loss"], rel=0.02)
    wa, wb = (load_checkpoint(tmp_path / r / "last.pt")["model"] for r in ("fp32", "bf16"))
    assert all(wb[k].dtype == torch.float32 for k in wb)  # autocast: the weights stay float32
    assert 0 < max((wa[k] - wb[k]).abs().max().item() for k in wa) < 0.05
    assert [s["bf16"] for s in read_sessions(tmp_path / "bf16")] == [True]
    assert [s["bf16"] for s in read_sessions(tmp_path / "fp32")] == [False]


@pytest.mark.slow
def test_masked_compiled_training_matches_eager_within_tolerance(tmp_path):
    train_masked(tiny(), tmp_path / "eager", log=lambda s: None)
    train_masked(tiny(), tmp_path / "compiled", log=lambda s: None, compile=True)
    wa, wb = (load_checkpoint(tmp_path / r / "last.pt")["model"] for r in ("eager", "compiled"))
    for name, t in wa.items():
        torch.testing.assert_close(wb[name], t, rtol=1e-3, atol=1e-4)


def test_standard_presets_sit_between_quick_and_paper_and_are_listed_per_task(tmp_path, capsys):
    """`standard` is quick's shape, wider and longer (the quick models are undertrained); each task's --help
    lists its own presets and their values, and an unknown preset is a one-line error that writes nothing."""
    from pe_probe.cli import main

    std, quick = make_masked_config("netsim", "standard"), make_masked_config("netsim", "quick")
    assert (std.model.d_model, std.optim.epochs, std.data.n_train) == (64, 30, 8000)
    assert (std.model.n_layers, std.optim.lr, std.pe.every_layer) == (quick.model.n_layers, quick.optim.lr, True)
    brain = make_masked_config("brain", "standard")
    assert (brain.model.d_model % 6, brain.model.d_model, brain.optim.epochs) == (0, 72, 100)  # sin3d needs d % 6
    with pytest.raises(InputError, match="choose one of quick, standard, paper"):
        make_masked_config("brain", "huge")
    assert main(["train", "brain", "--preset", "huge", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "b").exists()
    capsys.readouterr()
    assert main(["train", "netsim", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "{quick,standard,paper}" in text and "epochs (quick 10, standard 30, paper 300)" in text
    assert main(["train", "brain", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "{quick,standard,paper}" in text and "width (quick 36, standard 72, paper 160;" in text


def test_netsim_report_sweep_gives_the_same_runs_with_worker_processes(tmp_path):
    """`run_sweep(workers=2)` trains in separate one-thread processes: the same metrics as one at a time."""
    from analyses.netsim.sweep import conditions, run_sweep

    over = {"model.d_model": 8, "optim.epochs": 1, "data.n_train": 64, "data.n_test": 16, "eval_every": 1,
            "ckpt_every": 1}
    conds = conditions([0.1], ["none"])
    a = run_sweep("netsim", tmp_path / "a", conds, [0, 1], over, log=lambda s: None)
    b = run_sweep("netsim", tmp_path / "b", conds, [0, 1], over, log=lambda s: None, workers=2)
    assert [(r["label"], r["seed"]) for r in a] == [(r["label"], r["seed"]) for r in b] == \
        [("learned σ=0.1", 0), ("learned σ=0.1", 1), ("none", 0), ("none", 1)]
    for ra, rb in zip(a, b):
        assert ra["test_mse"] == rb["test_mse"] and ra["ood_mse"] == rb["ood_mse"]
    assert a[0]["test_mse"] != a[1]["test_mse"]  # the seeds do differ


def test_the_network_has_no_self_connections_and_random_layouts_follow_their_seed():
    """Kills: the diagonal of the edge mask kept (self-loops); the random layout ignoring data.seed."""
    assert np.all(np.diag(build_network(node_layout("grid", 16, 2), seed=0).W) == 0)
    assert not np.allclose(node_layout("random", 16, 2, seed=0).coords, node_layout("random", 16, 2, seed=1).coords)


def test_an_unstable_integration_step_is_refused():
    """Kills: the dt <= 0.2 tau check removed."""
    with pytest.raises(InputError, match="dt"):
        tiny(**{"data.dt": 0.5})  # tau 1


def test_the_splits_mask_ratios_noise_and_scale():
    """Kills: ood masked at mask_test; held-out sets not divided by the training std; ood_noise simulated at the
    training noise."""
    cfg = tiny()
    d = load_data(cfg.data)
    s, scale = d["splits"], d["info"]["scale"]
    assert {k: r for k, (_, r) in s.items()} == {
        "train": cfg.data.mask_train, "test": cfg.data.mask_test, "ood": cfg.data.mask_ood,
        "ood_noise": cfg.data.mask_test, "ood_noise_mask90": cfg.data.mask_ood}
    assert s["train"][0].std() == pytest.approx(1.0, rel=1e-5)  # the training set defines the scale
    test_sd = s["test"][0].std()
    # same dynamics and noise as training: after the common scaling the std is near 1, not near the raw scale
    assert abs(test_sd - 1.0) < abs(test_sd - scale)
    # ood_noise doubles the noise: in the near-linear regime the std doubles; require at least 3/4 of that rise
    assert s["ood_noise"][0].std() > 1.5 * test_sd
    assert np.array_equal(s["ood"][0], s["test"][0]) and np.array_equal(s["ood_noise_mask90"][0], s["ood_noise"][0])


def test_held_out_windows_are_fresh_simulations():
    """Kills: the test set simulated with the training seed (with n_test == n_train: a copy of the training set)."""
    s = load_data(tiny(**{"data.n_train": 32, "data.n_test": 32}).data)["splits"]
    train = {w.tobytes() for w in s["train"][0]}
    assert not any(w.tobytes() in train for w in s["test"][0])


def test_masked_mse_is_the_mean_over_the_masked_tokens_values():
    """Kills: the mean divided by masked tokens instead of masked values; unmasked tokens counted."""
    g = torch.Generator().manual_seed(3)
    x, pred = torch.randn(4, 10, 6, generator=g), torch.randn(4, 10, 6, generator=g)
    m = random_masks(4, 10, 0.3, g)
    sel = ((pred - x) ** 2).numpy()[m.numpy()]  # (masked tokens, 6)
    assert masked_mse(pred, x, m).item() == pytest.approx(sel.mean(), rel=1e-5)
    assert masked_mse(pred, x, m, reduction="sum").item() == pytest.approx(sel.sum(), rel=1e-5)


def test_a_pre_ln_masked_model_ends_with_the_final_layer_norm():
    """Kills: ln_f skipped in MaskedPETransformer.forward."""
    cfg = tiny(**{"model.norm": "pre", "pe.kind": "sin2d"})
    torch.manual_seed(0)
    model = MaskedPETransformer(cfg.model, cfg.pe, torch.as_tensor(node_layout("grid", 16, 2).coords), 9, 8).eval()
    with torch.no_grad():
        model.ln_f.weight.normal_()
        model.ln_f.bias.normal_()
        x = torch.randn(3, 16, 9)
        assert model.pe is None  # the quick preset: a table at every block's input
        h = model.embed(x)
        for block in model.blocks:
            h = block(h)
        want = model.head(F.layer_norm(h, h.shape[-1:], model.ln_f.weight, model.ln_f.bias))
        torch.testing.assert_close(model(x), want)


def test_masks_hold_between_one_and_n_minus_one_tokens_at_random_places():
    """Kills: n_masked not clamped to [1, N-1]; masks not random (always the first k tokens)."""
    assert (n_masked(0.01, 10), n_masked(0.5, 10), n_masked(0.99, 10)) == (1, 5, 9)
    m = random_masks(200, 10, 0.3, torch.Generator().manual_seed(1))
    assert (m.sum(1) == 3).all()
    assert m.any(0).all()  # every token is masked in some example
    assert len({tuple(r.tolist()) for r in m}) > 1


class _Constant(torch.nn.Module):
    """Predicts ``c`` for every value; input (B, N, T + 1) -> (B, N, T)."""

    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, inp):
        return torch.full_like(inp[..., :-1], self.c)


def test_split_mse_and_its_zero_baseline_are_means_over_the_masked_values():
    """Kills: split_mse counting tokens instead of values; the zero baseline taken over every token."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(50, 10, 6, generator=g)
    m = random_masks(50, 10, 0.4, g)
    out = split_mse(_Constant(0.5), MaskedSplit(x, 0.4, m), "ood_noise", batch_size=16)  # batches 16, 16, 16, 2
    sel = x.numpy()[m.numpy()]
    assert out["ood_mse_noise"] == pytest.approx(((sel - 0.5) ** 2).mean(), rel=1e-5)
    assert out["ood_mse_noise_zero"] == pytest.approx((sel ** 2).mean(), rel=1e-5)


def test_evaluation_masks_are_fixed_by_the_data_seed_and_differ_per_split():
    """Kills: the evaluation masks ignoring data.seed."""
    x = np.random.default_rng(0).normal(size=(20, 10, 4)).astype(np.float32)
    data = {"splits": {"train": (x, 0.5), "test": (x, 0.5)}}
    cpu = torch.device("cpu")
    a, b = build_splits(tiny(), data, cpu), build_splits(tiny(), data, cpu)
    c = build_splits(tiny(**{"data.seed": 1}), data, cpu)
    assert all(torch.equal(a[k].mask, b[k].mask) for k in a)
    assert not torch.equal(a["test"].mask, c["test"].mask)
    assert not torch.equal(a["train"].mask, a["test"].mask)


def test_training_inputs_are_masked_and_the_masks_are_redrawn_every_epoch(tmp_path, monkeypatch):
    """Kills: the training step feeding unmasked inputs (a leak of the targets); one training mask for all epochs."""
    import trainers.train_masked as tm

    cfg = tiny(**{"data.n_train": 32, "data.n_test": 8, "eval_every": 2, "ckpt_every": 2})  # 2 epochs
    inputs, train_masks = [], []
    real_build, real_masks = tm.build_model, tm.random_masks

    def build(*a, **k):
        model = real_build(*a, **k)
        model.register_forward_pre_hook(lambda mod, args: inputs.append(args[0].detach().clone()) if mod.training else None)
        return model

    def masks(m, n, ratio, generator):
        out = real_masks(m, n, ratio, generator)
        if m == cfg.data.n_train and ratio == cfg.data.mask_train:
            train_masks.append(out)
        return out

    monkeypatch.setattr(tm, "build_model", build)
    monkeypatch.setattr(tm, "random_masks", masks)
    train_masked(cfg, tmp_path / "run", log=lambda s: None)
    k = n_masked(cfg.data.mask_train, cfg.data.n_nodes)
    assert inputs
    for inp in inputs:
        flags = inp[..., -1]
        assert (flags.sum(1) == k).all() and (inp[..., :-1][flags.bool()] == 0).all()
    assert len(train_masks) == 3  # the fixed mask for train_mse, then one draw per epoch
    assert not torch.equal(train_masks[1], train_masks[2])


def test_the_attention_view_of_a_netsim_checkpoint_names_the_views_that_work(tmp_path, capsys):
    from pe_probe.cli import main

    train_masked(tiny(**{"optim.epochs": 1}), tmp_path / "run", log=lambda s: None)
    assert main(["analyze", str(tmp_path / "run" / "last.pt"), "--view", "attention", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'netsim' checkpoint" in err and "--view raw, q, k, qk or kernel" in err and err.count("\n") == 1
