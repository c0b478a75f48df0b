"""Attention maps of LST checkpoints: shapes, normalisation, the model's own code path, and the views."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from pe_probe.io import load_state
from pe_probe.views import view_tables
from trainers.attention import attention_maps, attention_similarity, model_attention_maps
from trainers.checkpoint import make_payload, save_checkpoint
from trainers.config import make_config
from trainers.evaluate import model_from_checkpoint
from trainers.model import PETransformer
from trainers.tasks.lst import encode, generate
from trainers.train import ground_truth, seed_everything

torch.set_num_threads(1)


def untrained_checkpoint(path, **over):
    """A tiny model saved as a checkpoint before any training step (epoch 0), with the trainer's code."""
    base = {"model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2, "model.mlp_ratio": 2.0,
            "pe.init_std": 1.0, "optim.epochs": 1, "seed": 3}
    base.update(over)
    cfg = make_config("quick", base)
    gt = ground_truth(cfg.task)
    seed_everything(cfg.seed)
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(gt.coords))
    save_checkpoint(make_payload(model, cfg.to_dict(), gt, step=0, epoch=0, metrics={}), path)
    return path


def test_maps_are_row_stochastic_and_similar_to_themselves(tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "a.pt")
    maps = attention_maps(ckpt, n_puzzles=30, seed=1)
    assert maps.shape == (2, 16, 16) and np.all(maps >= 0)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(attention_similarity(maps, maps), 1.0)
    # the same puzzles give the same maps; other puzzles give other maps
    np.testing.assert_array_equal(maps, attention_maps(ckpt, n_puzzles=30, seed=1))
    assert not np.allclose(maps, attention_maps(ckpt, n_puzzles=30, seed=2))


def test_fixed_sinusoid_and_random_table_attend_differently(tmp_path):
    sin = attention_maps(untrained_checkpoint(tmp_path / "sin.pt", **{"pe.kind": "sin2d"}), n_puzzles=30)
    rnd = attention_maps(untrained_checkpoint(tmp_path / "rnd.pt", **{"pe.kind": "random"}), n_puzzles=30)
    sim = attention_similarity(sin, rnd)
    assert sim.shape == (2,) and np.all(sim < 1 - 1e-3) and np.all(sim > 0)
    assert np.abs(sin - rnd).max() > 1e-2


def test_maps_match_a_recomputation_from_the_weights(tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "a.pt", **{"pe.every_layer": False})
    model, _ = model_from_checkpoint(torch.load(ckpt, weights_only=True))
    x = torch.as_tensor(encode(generate(3, seed=4))[0])
    maps = model_attention_maps(model, x, batch_size=4)
    with torch.no_grad():  # layer 0 by hand: post-LN, PE added once at the input, 2 heads of 8
        h = model.embed(x) + model.pe.table
        q, k, _ = model.blocks[0].attn.qkv(h).split(16, dim=2)
        q = q.view(len(x), 16, 2, 8).transpose(1, 2)
        k = k.view(len(x), 16, 2, 8).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    np.testing.assert_allclose(maps[0], w.double().mean(dim=(0, 1)).numpy(), atol=1e-6)
    # the model's output is unchanged by the recording
    with torch.no_grad():
        before = model(x)
    model_attention_maps(model, x)
    with torch.no_grad():
        assert torch.equal(model(x), before)


@pytest.mark.parametrize("over", [
    {"pe.every_layer": True, "model.norm": "post"},
    {"pe.every_layer": True, "model.norm": "pre"},
    {"pe.every_layer": False, "model.norm": "pre", "model.readout": "cls"},
])
def test_on_a_blank_board_layer_0_attention_is_the_kernel_view(tmp_path, over):
    ckpt = untrained_checkpoint(tmp_path / "a.pt", **over)
    model, _ = model_from_checkpoint(torch.load(ckpt, weights_only=True))
    maps = model_attention_maps(model, np.zeros((2, 16, 5), dtype=np.float32))
    state, meta = load_state(ckpt)
    _, kernel, info = view_tables(state, meta, "kernel", layer=0)[0]
    np.testing.assert_allclose(maps[0], kernel, atol=1e-5)
    assert info["block"] == 0


def test_attention_pes_go_through_the_models_own_code(tmp_path):
    causal = attention_maps(untrained_checkpoint(tmp_path / "rel.pt", **{"pe.kind": "relative", "pe.causal": True}),
                            n_puzzles=12)
    assert np.all(np.triu(causal, 1) == 0)  # the relative PE's causal mask reached the recorded weights
    np.testing.assert_allclose(causal.sum(-1), 1.0, atol=1e-9)
    rope = attention_maps(untrained_checkpoint(tmp_path / "rope.pt", **{"pe.kind": "rope2d"}), n_puzzles=12)
    none = attention_maps(untrained_checkpoint(tmp_path / "none.pt", **{"pe.kind": "none"}), n_puzzles=12)
    assert rope.shape == none.shape == (2, 16, 16)
    assert not np.allclose(rope, none, atol=1e-4)  # the rotation changes the weights


def test_puzzle_forms_agree_and_bad_input_is_refused(tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "a.pt")
    ps = generate(2, seed=5)
    from_set = attention_maps(ckpt, ps)
    np.testing.assert_allclose(attention_maps(ckpt, ps.puzzles), from_set)
    np.testing.assert_allclose(attention_maps(ckpt, encode(ps)[0]), from_set)
    with pytest.raises(InputError, match="puzzles must be"):
        attention_maps(ckpt, np.zeros((3, 7)))
    with pytest.raises(InputError, match="same shape"):
        attention_similarity(from_set, from_set[:1])


def test_similarity_is_the_per_layer_cosine():
    a = np.zeros((2, 4, 4))
    b = np.zeros((2, 4, 4))
    a[0, 0, 0] = b[0, 0, 1] = 1.0  # layer 0: disjoint support -> 0
    a[1] = np.eye(4)
    b[1] = 2 * np.eye(4)  # layer 1: same direction as a[1], plus one off-diagonal entry
    b[1, 0, 1] = 2.0
    expected1 = np.sum(a[1] * b[1]) / (np.linalg.norm(a[1]) * np.linalg.norm(b[1]))
    np.testing.assert_allclose(attention_similarity(a, b), [0.0, expected1])
    assert 0 < expected1 < 1


# ---- the chance level of attention maps: the same model with random PE tables ----------------------

@pytest.mark.parametrize("kind", ["learned", "relative", "rope2d"])
def test_random_pe_maps_replace_every_pe_table_and_restore_it(tmp_path, kind):
    from trainers.attention import attention_model, pe_tables, random_pe_attention_maps

    model, x = attention_model(untrained_checkpoint(tmp_path / "a.pt", **{"pe.kind": kind}), n_puzzles=20)
    tables = pe_tables(model)
    if kind == "rope2d":
        assert tables == []
        with pytest.raises(InputError, match="no PE table"):
            random_pe_attention_maps(model, x, np.random.default_rng(0))
        return
    assert [n.rsplit(".", 1)[1] for n, _ in tables] == ["table" if kind == "learned" else "offset_table"] * 2
    before = [t.detach().clone() for _, t in tables]
    drawn = random_pe_attention_maps(model, x, np.random.default_rng(5))
    for (_, t), b in zip(tables, before):
        torch.testing.assert_close(t, b, rtol=0, atol=0)  # restored
    # by hand: the same draws written into the tables, then the model's maps
    g = np.random.default_rng(5)
    for _, t in tables:
        with torch.no_grad():
            t.copy_(torch.as_tensor(g.normal(0.0, float(t.double().std(unbiased=False)), tuple(t.shape)), dtype=t.dtype))
    np.testing.assert_allclose(drawn, model_attention_maps(model, x), atol=1e-12)
    assert not np.allclose(drawn, random_pe_attention_maps(model, x, np.random.default_rng(6)))


def test_the_attention_views_chance_level_reruns_the_model_with_random_tables(tmp_path):
    from pe_probe.api import analyze_view
    from pe_probe.report.readings import readings

    ckpt = untrained_checkpoint(tmp_path / "a.pt")
    fast = {"n_perm": 0, "n_boot": 0, "methods": "pca", "n_null": 3}
    res, = analyze_view(ckpt, "attention", layer=1, n_puzzles=20, **fast)
    chance = res.provenance["analysis"]["chance"]
    assert chance["kind"] == "model-rerun" and "blocks.0.pe.table, blocks.1.pe.table" in chance["description"]
    assert "Random tables put in place of the model's PE tables (their shape and scale), the model rerun" in dict((n, t) for n, _, t in readings(res.metrics, res.provenance))[
        "RSA (Spearman ρ)"]
    mean, = analyze_view(ckpt, "attention", layer="mean", n_puzzles=20, **fast)
    assert mean.metrics["null_rsa_mean"] != res.metrics["null_rsa_mean"]
    rope, = analyze_view(untrained_checkpoint(tmp_path / "r.pt", **{"pe.kind": "rope2d"}), "attention", layer=0,
                         n_puzzles=20, **fast)
    assert rope.provenance["analysis"]["chance"]["kind"] == "gaussian"  # no table to replace


def test_every_layer_shares_the_chance_levels_reruns(tmp_path, monkeypatch):
    import trainers.attention as attention
    from pe_probe.api import analyze_view

    calls = []
    real = attention.random_pe_attention_maps
    monkeypatch.setattr(attention, "random_pe_attention_maps", lambda *a, **k: calls.append(1) or real(*a, **k))
    ckpt = untrained_checkpoint(tmp_path / "a.pt")
    fast = {"n_perm": 0, "n_boot": 0, "methods": "pca", "n_null": 3}
    every = analyze_view(ckpt, "attention", layer="all", n_puzzles=20, **fast)
    assert len(every) == 2 and len(calls) == 3  # one rerun per random table, not per layer
    one, = analyze_view(ckpt, "attention", layer=1, n_puzzles=20, **fast)
    np.testing.assert_array_equal(every[1].null_rsa, one.null_rsa)  # as if the layer had drawn its own
    assert not np.array_equal(every[0].null_rsa, every[1].null_rsa)
