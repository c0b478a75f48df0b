"""`pe-probe evaluate` on edited checkpoints: sizes the config or ground truth claim are checked against the
stored weights (and limits) before a model is built or a puzzle generated; inputs claim sizes, never allocate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import trainers.evaluate
import trainers.train
from pe_probe.errors import InputError
from pe_probe.groundtruth import grid
from trainers.checkpoint import make_payload, save_checkpoint
from trainers.config import MAX_N_PER_LEVEL, MAX_OOD_PER_LEVEL, make_config, validate
from trainers.evaluate import Split, evaluate_checkpoint, model_from_checkpoint, split_metrics
from trainers.model import PETransformer

torch.set_num_threads(1)


class Reached(BaseException):
    """Raised by stand-ins for the costly steps: not an Exception, so no wrapper turns it into an InputError."""


def _never(*args, **kwargs):
    raise Reached("the costly step was reached")


def _payload(**overrides) -> dict:
    cfg = make_config("quick", {"model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2, "data.n_per_level": 12,
                                "pe.kind": "learned", **overrides})
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(grid(4, 4).coords))
    return make_payload(model, cfg.to_dict(), grid(4, 4), step=1, epoch=1, metrics={})


def _saved(tmp_path, payload: dict):
    path = tmp_path / "last.pt"
    save_checkpoint(payload, path)
    return path


@pytest.mark.parametrize("edit, needle", [
    (lambda c: c["config"]["model"].update(d_model=4096), "implies embed.weight of shape (4096, 5)"),
    # sizes above the trainer's own limits are refused by its config checks (trainers.config.validate)
    (lambda c: c["config"]["model"].update(d_model=10**6, n_heads=1), "--d-model is 1,000,000, above the 8,192"),
    (lambda c: c["config"]["model"].update(mlp_ratio=10**6), "the MLP width"),
    (lambda c: c["config"]["model"].update(n_layers=10**9), "--layers is 1,000,000,000, above the 256"),
    (lambda c: c["config"]["model"].update(n_layers=3), "says 3 layers, the weights hold 2 blocks"),
    (lambda c: c["config"]["model"].update(mlp_ratio=8.0), "blocks.0.mlp.fc.weight"),
    (lambda c: c["ground_truth"].update(coords=torch.zeros(1, 2).expand(10**12, 2)), "shape (1000000000000, 2)"),
    (lambda c: c["ground_truth"].update(coords=torch.zeros(16, 2).to_sparse()), "sparse_coo"),
    (lambda c: c["ground_truth"].update(coords=[[0.0, 0.0]] * 16), "no coords tensor"),
    (lambda c: c["ground_truth"].update(coords=torch.full((16, 2), float("nan"))), "NaN"),
    (lambda c: c.update(model=[1, 2]), "not a dict of tensors"),
    (lambda c: c["model"].update({5: torch.zeros(2)}), "has a weight keyed by the int 5, not a name"),  # was a traceback
    (lambda c: c["model"].update({None: torch.zeros(2)}), "keyed by the NoneType None, not a name"),
    (lambda c: c["model"].update({b"x" * 10**6: torch.zeros(2)}), "keyed by the bytes b'xxxxxxxx"),
])
def test_edited_sizes_are_refused_before_the_model_is_built(tmp_path, monkeypatch, edit, needle):
    ckpt = _payload()
    edit(ckpt)
    path = _saved(tmp_path, ckpt)
    monkeypatch.setattr(trainers.evaluate, "PETransformer", _never)
    with pytest.raises(InputError) as e:
        evaluate_checkpoint(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and needle in msg and "re-train or re-save" in msg


@pytest.mark.parametrize("key, value, limit", [("n_ood_per_level", 10**9, MAX_OOD_PER_LEVEL),
                                               ("n_per_level", 10**12, MAX_N_PER_LEVEL)])
def test_data_sizes_no_run_uses_are_refused_before_generating(tmp_path, monkeypatch, key, value, limit):
    ckpt = _payload()
    ckpt["config"]["data"][key] = value
    path = _saved(tmp_path, ckpt)
    monkeypatch.setattr(trainers.train, "load_splits", _never)
    with pytest.raises(InputError) as e:
        evaluate_checkpoint(path)
    msg = str(e.value)
    # above the trainer's own limits (trainers.config.validate): no run has such a config, so it was edited
    assert "\n" not in msg and f"data.{key}" in msg and f"{limit:,}" in msg and "re-train or re-save" in msg


def test_ood_count_is_not_checked_when_the_ood_set_is_a_file():
    cfg = make_config("quick", {"data.n_ood_per_level": 10**9, "data.ood_puzzles": "ood.csv"})
    validate(cfg)  # the OOD set is read from the file, not generated


def test_an_unedited_checkpoint_still_rebuilds_exactly():
    ckpt = _payload(**{"pe.kind": "sin2d", "pe.every_layer": False})
    model, cfg = model_from_checkpoint(ckpt)
    assert cfg.model.d_model == 16
    for name, value in model.state_dict().items():
        assert torch.equal(value, ckpt["model"][name])


# ---- netsim / brain checkpoints: the same checks before the data is regenerated and the model built ----

def _masked_payload(**overrides) -> dict:
    from trainers.config import make_masked_config
    from trainers.tasks.netsim import node_layout
    from trainers.train_masked import build_model

    cfg = make_masked_config("netsim", "quick", {"model.d_model": 16, "data.n_train": 8, "data.n_test": 8})
    gt = node_layout("grid", cfg.data.n_nodes, cfg.data.dim, seed=0)
    model = build_model(cfg, gt.coords, cfg.data.window)
    payload = make_payload(model, cfg.to_dict(), gt, step=1, epoch=1, metrics={})
    for key, value in overrides.items():  # edits: "config.data.n_train", "ground_truth.coords", ...
        *path, last = key.split(".")
        node = payload
        for part in path:
            node = node[part]
        node[last] = value
    return payload


@pytest.mark.parametrize("edit, needle, stub", [
    ({"config.data.n_train": 10**9}, "(data.n_train) is 1,000,000,000", "load_task_data"),
    ({"config.data.n_nodes": 10**6}, "(data.n_nodes) is 1,000,000", "load_task_data"),
    ({"config.model.d_model": 4096}, "implies embed.weight of shape (4096, 17)", "load_task_data"),
    ({"ground_truth.coords": torch.zeros(1, 1).expand(10**9, 2)}, "shape (1000000000, 2), not the netsim task's 64 x 2",
     "build_model"),
    ({"ground_truth.coords": torch.zeros(64, 2).to_sparse()}, "sparse_coo", "build_model"),
])
def test_edited_netsim_checkpoints_are_refused_before_the_costly_step(tmp_path, monkeypatch, edit, needle, stub):
    import trainers.train_masked

    path = _saved(tmp_path, _masked_payload(**edit))
    monkeypatch.setattr(trainers.train_masked, stub, _never)
    with pytest.raises(InputError, match="was the checkpoint edited") as e:
        evaluate_checkpoint(path)
    assert needle in str(e.value) and str(path) in str(e.value)


def test_an_unedited_netsim_checkpoint_still_evaluates(tmp_path):
    ev = evaluate_checkpoint(_saved(tmp_path, _masked_payload()))
    assert ev["test_mse"] > 0 and ev["test_mse_n"] == 8


def test_a_moved_held_out_file_names_the_run_s_config_and_the_evaluate_fix(tmp_path, monkeypatch):
    """It named --ood-puzzles, a training option evaluate does not have."""
    monkeypatch.setattr(trainers.train, "load_splits", _never)
    payload = _payload()
    payload["config"]["data"]["ood_puzzles"] = str(tmp_path / "moved.csv")
    with pytest.raises(InputError, match=r"held-out puzzle file .*moved.csv \(data.ood_puzzles in its config\) is not "
                                         r"found; pass it, or another study-format CSV, with --puzzles FILE"):
        evaluate_checkpoint(_saved(tmp_path, payload))


def test_split_metrics_are_means_over_all_puzzles_and_over_each_level():
    """Kills: per-level accuracy computed over all puzzles; the loss averaged over batches, not puzzles."""
    g = torch.Generator().manual_seed(0)
    m = 10
    logits = torch.randn(m, 4, generator=g)
    y = torch.randint(0, 4, (m,), generator=g)
    levels = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])

    class Lookup(torch.nn.Module):  # the logits of puzzle i, its index written in token 0
        def forward(self, x):
            return logits[x[:, 0, 0].long()]

    x = torch.zeros(m, 16, 5)
    x[:, 0, 0] = torch.arange(m)
    out = split_metrics(Lookup(), Split(x, y, levels), "ood", batch_size=4)  # batches 4, 4, 2
    correct = (logits.argmax(1) == y).float()
    assert out["ood_acc"] == pytest.approx(correct.mean().item())
    assert out["ood_loss"] == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-6)
    for i, name in enumerate(("binary", "ternary", "quaternary")):
        assert out[f"ood_acc_{name}"] == pytest.approx(correct[levels == i].mean().item())
    assert len({out["ood_acc_binary"], out["ood_acc_ternary"], out["ood_acc_quaternary"]}) > 1  # not vacuous


def test_a_checkpoint_missing_a_weight_is_refused():
    """Kills: load_state_dict(strict=False) (a missing weight would silently keep its random init)."""
    ckpt = _payload()
    del ckpt["model"]["head.bias"]
    with pytest.raises(InputError, match="do not rebuild the model"):
        model_from_checkpoint(ckpt, "cpu", "last.pt")


def test_a_non_finite_vector_weight_is_refused_too():
    """Kills: the NaN / Inf scan limited to matrices (biases and LayerNorm weights skipped)."""
    ckpt = _payload()
    ckpt["model"]["head.bias"][0] = float("nan")
    with pytest.raises(InputError, match="head.bias holds NaN"):
        model_from_checkpoint(ckpt, "cpu", "last.pt")


def test_renumbered_blocks_are_refused_before_the_model_is_built(monkeypatch):
    """Kills: the block-numbering check reduced to a count (blocks 0 and 2 for a 2-layer config)."""
    ckpt = _payload()
    ckpt["model"] = {k.replace("blocks.1.", "blocks.2."): v for k, v in ckpt["model"].items()}
    monkeypatch.setattr(trainers.evaluate, "PETransformer", _never)
    with pytest.raises(InputError, match=r"says 2 layers \(blocks 0 to 1\), the weights hold block 2; was the"):
        model_from_checkpoint(ckpt, "cpu", "last.pt")
