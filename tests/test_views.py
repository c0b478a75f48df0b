"""Views of a PE table (raw, q, k, qk, kernel) on planted BERT-, GPT-2- and pe-probe-style states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

from pe_probe.errors import InputError
from pe_probe.groundtruth import grid, line
from pe_probe.io import load_table
from pe_probe.views import VIEWS, kernel_distance_correlation, view_tables

N, D = 16, 8


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def layer_norm(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def normalised_rows(rng, n=N, d=D):
    """Rows with mean 0 and variance 1, so a LayerNorm with weight 1, bias 0 leaves them as they are."""
    p = rng.normal(size=(n, d))
    p -= p.mean(1, keepdims=True)
    return p / p.std(1, keepdims=True)


def bert_state(P, *, wq=None, wk=None, bq=None, bk=None, ln_w=None, ln_b=None, tt0=None, prefix="bert."):
    d = P.shape[1]
    tt = np.zeros((2, d))
    if tt0 is not None:
        tt[0] = tt0
    att = prefix + "encoder.layer.0.attention.self."
    return {
        prefix + "embeddings.position_embeddings.weight": P,
        prefix + "embeddings.token_type_embeddings.weight": tt,
        prefix + "embeddings.word_embeddings.weight": np.ones((30, d)),
        prefix + "embeddings.LayerNorm.weight": np.ones(d) if ln_w is None else ln_w,
        prefix + "embeddings.LayerNorm.bias": np.zeros(d) if ln_b is None else ln_b,
        att + "query.weight": np.eye(d) if wq is None else wq,
        att + "query.bias": np.zeros(d) if bq is None else bq,
        att + "key.weight": np.eye(d) if wk is None else wk,
        att + "key.bias": np.zeros(d) if bk is None else bk,
        att + "value.weight": np.eye(d),
        att + "value.bias": np.zeros(d),
    }


def bert_meta(heads):
    return {"config": {"model_type": "bert", "num_attention_heads": heads, "layer_norm_eps": 1e-12},
            "ground_truth": None}


def one(views):
    assert len(views) == 1
    return views[0]


# ---------------------------------------------------------------------------------------------------
# BERT-style


def test_bert_identity_maps_give_the_hand_computed_kernel_and_qk(rng):
    P = normalised_rows(rng)
    state, meta = bert_state(P), bert_meta(1)
    label, A, info = one(view_tables(state, meta, "kernel"))
    assert A.shape == (N, N)
    np.testing.assert_allclose(A, softmax(P @ P.T / math.sqrt(D)), atol=1e-9)
    np.testing.assert_allclose(A.sum(1), 1.0)
    assert info["architecture"] == "bert" and info["n_heads"] == 1 and info["d_head"] == D
    assert info["scale"] == pytest.approx(1 / math.sqrt(D)) and info["causal"] is False
    assert label == "bert.embeddings.position_embeddings.weight:kernel"
    q = one(view_tables(state, meta, "q"))[1]
    k = one(view_tables(state, meta, "k"))[1]
    qk = one(view_tables(state, meta, "qk"))[1]
    np.testing.assert_allclose(q, P, atol=1e-9)
    np.testing.assert_allclose(k, P, atol=1e-9)
    assert qk.shape == (N, 2 * D)
    np.testing.assert_allclose(qk, np.hstack([q, k]))


def test_bert_kernel_averages_per_head_kernels(rng):
    P = normalised_rows(rng)
    state = bert_state(P)
    views = view_tables(state, bert_meta(2), "kernel")
    A = one(views)[1]
    h = D // 2
    per = [softmax(P[:, s] @ P[:, s].T / math.sqrt(h)) for s in (slice(0, h), slice(h, D))]
    np.testing.assert_allclose(A, (per[0] + per[1]) / 2, atol=1e-9)
    # the head average is not the single-head kernel of the whole table
    assert not np.allclose(A, softmax(P @ P.T / math.sqrt(D)), atol=1e-3)
    heads = view_tables(state, bert_meta(2), "kernel", per_head=True)
    assert [i["head"] for _, _, i in heads] == [0, 1]
    for (label, Ah, info), expected in zip(heads, per):
        np.testing.assert_allclose(Ah, expected, atol=1e-9)
        assert label.endswith(f":head{info['head']}")
    q_heads = view_tables(state, bert_meta(2), "q", per_head=True)
    assert [t.shape for _, t, _ in q_heads] == [(N, h), (N, h)]
    np.testing.assert_allclose(q_heads[1][1], P[:, h:], atol=1e-9)
    assert one(view_tables(state, bert_meta(2), "qk", per_head=True)[:1])[1].shape == (N, 2 * h)


def test_bert_token_type_layer_norm_and_projection_orientation(rng):
    P = rng.normal(size=(N, D)) * 2 + 0.5  # not normalised: the LayerNorm matters
    wq, wk = rng.normal(size=(D, D)), rng.normal(size=(D, D))  # torch Linear: (out, in)
    bq, bk = rng.normal(size=D), rng.normal(size=D)
    ln_w, ln_b, tt0 = rng.normal(size=D), rng.normal(size=D), rng.normal(size=D)
    state = bert_state(P, wq=wq, wk=wk, bq=bq, bk=bk, ln_w=ln_w, ln_b=ln_b, tt0=tt0, prefix="")
    meta = bert_meta(2)
    x = layer_norm(P + tt0, ln_w, ln_b, 1e-12)
    q_exp, k_exp = x @ wq.T + bq, x @ wk.T + bk
    _, q, info = one(view_tables(state, meta, "q"))
    np.testing.assert_allclose(q, q_exp, atol=1e-9)
    np.testing.assert_allclose(one(view_tables(state, meta, "k"))[1], k_exp, atol=1e-9)
    assert "embeddings.token_type_embeddings.weight" in info["tensors"]
    assert "LayerNorm" in info["input"]
    h = D // 2
    A = one(view_tables(state, meta, "kernel"))[1]
    exp = np.mean([softmax(q_exp[:, s] @ k_exp[:, s].T / math.sqrt(h)) for s in (slice(0, h), slice(h, D))], 0)
    np.testing.assert_allclose(A, exp, atol=1e-9)


def test_positions_slice_before_the_softmax(rng):
    P = normalised_rows(rng)
    state, meta = bert_state(P), bert_meta(1)
    _, A, info = one(view_tables(state, meta, "kernel", positions="0:8"))
    np.testing.assert_allclose(A, softmax(P[:8] @ P[:8].T / math.sqrt(D)), atol=1e-9)
    assert info["positions"] == [0, 8]


# ---------------------------------------------------------------------------------------------------
# GPT-2-style


def gpt2_state(P, w, b, ln_w, ln_b, prefix="transformer."):
    d = P.shape[1]
    return {
        prefix + "wpe.weight": P,
        prefix + "wte.weight": np.ones((50, d)),
        prefix + "h.0.ln_1.weight": ln_w,
        prefix + "h.0.ln_1.bias": ln_b,
        prefix + "h.0.attn.c_attn.weight": w,  # Conv1D: (d, 3d), x @ W + b
        prefix + "h.0.attn.c_attn.bias": b,
        prefix + "h.0.attn.c_proj.weight": np.eye(d),
    }


def test_gpt2_conv1d_split_layer_norm_and_causal_kernel(rng):
    P = rng.normal(size=(N, D))
    w, b = rng.normal(size=(D, 3 * D)), rng.normal(size=3 * D)
    ln_w, ln_b = rng.normal(size=D), rng.normal(size=D)
    state = gpt2_state(P, w, b, ln_w, ln_b)
    meta = {"config": {"model_type": "gpt2", "n_head": 2, "layer_norm_epsilon": 1e-5}, "ground_truth": None}
    x = layer_norm(P, ln_w, ln_b, 1e-5)
    qkv = x @ w + b
    q_exp, k_exp = qkv[:, :D], qkv[:, D : 2 * D]
    label, q, info = one(view_tables(state, meta, "q"))
    np.testing.assert_allclose(q, q_exp, atol=1e-9)
    np.testing.assert_allclose(one(view_tables(state, meta, "k"))[1], k_exp, atol=1e-9)
    assert info["architecture"] == "gpt2" and label == "transformer.wpe.weight:q"
    _, A, kinfo = one(view_tables(state, meta, "kernel"))
    assert kinfo["causal"] is True
    assert np.all(np.triu(A, 1) == 0) and A[0, 0] == pytest.approx(1.0)
    np.testing.assert_allclose(A.sum(1), 1.0)
    h = D // 2
    mask = np.triu(np.ones((N, N), bool), 1)
    exp = []
    for s in (slice(0, h), slice(h, D)):
        logits = q_exp[:, s] @ k_exp[:, s].T / math.sqrt(h)
        exp.append(softmax(np.where(mask, -np.inf, logits)))
    np.testing.assert_allclose(A, np.mean(exp, 0), atol=1e-9)


def test_gpt2_without_head_count_is_a_one_line_input_error(rng):
    D3 = 3 * D
    state = gpt2_state(rng.normal(size=(N, D)), rng.normal(size=(D, D3)), np.zeros(D3), np.ones(D), np.zeros(D), "")
    with pytest.raises(InputError, match="n_head") as e:
        view_tables(state, {"config": None}, "kernel")
    assert "\n" not in str(e.value)
    assert one(view_tables(state, {"config": None}, "raw"))[1].shape == (N, D)



def gpt2_folder(folder, rng, *, extra=None, weights="model.safetensors"):
    """A Hugging Face GPT-2-style folder: config.json plus one weights file (the planted state + ``extra``)."""
    import json

    import torch

    D3 = 3 * D
    state = gpt2_state(rng.normal(size=(N, D)), rng.normal(size=(D, D3)), rng.normal(size=D3),
                       np.ones(D), np.zeros(D))
    tensors = {k: torch.tensor(v, dtype=torch.float32) for k, v in state.items()} | (extra or {})
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2, "layer_norm_epsilon": 1e-5}))
    if weights.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(tensors, str(folder / weights))
    else:
        torch.save(tensors, folder / weights)
    return state


def test_a_view_reads_only_the_tensors_it_needs(tmp_path, rng, monkeypatch):
    """q/k/qk/kernel of a large model must not read its every tensor: only the table and the first block's."""
    import torch

    import pe_probe.io as io

    gpt2_folder(tmp_path / "m", rng, extra={f"transformer.h.{i}.mlp.c_fc.weight": torch.ones(D, 4 * D)
                                            for i in range(1, 4)})
    opened = io._open

    def counting_open(source):
        store, meta = opened(source)
        read = store.read
        store.read = lambda name: (reads.append(name), read(name))[1]
        return store, meta

    monkeypatch.setattr(io, "_open", counting_open)
    needed = {"transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
              "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias"}
    for view in ("q", "k", "qk", "kernel"):
        reads = []
        state, meta = io.open_state(tmp_path / "m")
        view_tables(state, meta, view)
        assert set(reads) <= needed and "transformer.wpe.weight" in reads, view
    reads = []
    assert set(io.load_state(tmp_path / "m")[0]) == set(reads) and len(reads) == 7 + 3  # load_state: every tensor once


def test_a_view_ignores_an_unreadable_tensor_it_does_not_need(tmp_path, rng):
    """An unrelated tensor pe-probe cannot read (here a sparse one) used to stop every view of the model."""
    import torch

    from pe_probe.api import analyze_view

    state = gpt2_folder(tmp_path / "m", rng, extra={"adjacency": torch.eye(4).to_sparse()},
                        weights="pytorch_model.bin")
    res = one(analyze_view(tmp_path / "m", "qk", "line:16", n_perm=0, n_boot=0, methods="pca"))
    expected = one(view_tables(state, {"config": {"n_head": 2, "layer_norm_epsilon": 1e-5}}, "qk"))[1]
    np.testing.assert_allclose(res.table, expected, rtol=1e-5, atol=1e-5)  # float32 on disk
    with pytest.raises(InputError, match="sparse"):
        analyze_view(tmp_path / "m", "raw", "line:4", param="adjacency", n_perm=0, n_boot=0, methods="pca")

# ---------------------------------------------------------------------------------------------------
# pe-probe checkpoints (planted, numpy only)


def ours_state(rng, d=D, n_layers=2, every_layer=True, cls=False):
    state = {"embed.weight": rng.normal(size=(d, 5)), "embed.bias": rng.normal(size=d)}
    if every_layer:
        for i in range(n_layers):
            state[f"blocks.{i}.pe.table"] = rng.normal(size=(N, d))
    else:
        state["pe.table"] = rng.normal(size=(N, d))
    for i in range(n_layers):
        state[f"blocks.{i}.attn.qkv.weight"] = rng.normal(size=(3 * d, d))
        state[f"blocks.{i}.attn.qkv.bias"] = rng.normal(size=3 * d)
        state[f"blocks.{i}.ln1.weight"] = rng.normal(size=d)
        state[f"blocks.{i}.ln1.bias"] = rng.normal(size=d)
    if cls:
        state["cls"] = rng.normal(size=(1, 1, d))
    return state


def ours_meta(state, norm="post", heads=2, readout="last"):
    pe = [n for n in state if n.endswith("pe.table")]
    return {"source_kind": "pe-probe-checkpoint", "pe_params": sorted(pe),
            "config": {"model": {"n_heads": heads, "norm": norm, "readout": readout}},
            "ground_truth": grid(4, 4)}


def expected_ours(state, i, norm, with_embed):
    P = state[f"blocks.{i}.pe.table"] if f"blocks.{i}.pe.table" in state else state["pe.table"]
    x = P + state["embed.bias"] if with_embed else P
    if norm == "pre":
        x = layer_norm(x, state[f"blocks.{i}.ln1.weight"], state[f"blocks.{i}.ln1.bias"], 1e-5)
    w, b = state[f"blocks.{i}.attn.qkv.weight"], state[f"blocks.{i}.attn.qkv.bias"]
    return x @ w[:D].T + b[:D], x @ w[D : 2 * D].T + b[D : 2 * D]


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_ours_per_layer_tables_use_the_blank_embedding_only_at_layer_0(rng, norm):
    state = ours_state(rng)
    meta = ours_meta(state, norm)
    views = view_tables(state, meta, "q", layer="all")
    assert [(lab, i["layer"], i["block"]) for lab, _, i in views] == [
        ("blocks.0.pe.table:q", 0, 0), ("blocks.1.pe.table:q", 1, 1)]
    for i, (_, q, info) in enumerate(views):
        np.testing.assert_allclose(q, expected_ours(state, i, norm, with_embed=i == 0)[0], atol=1e-9)
        assert ("embed.bias" in info["tensors"]) == (i == 0)
        assert ("ln1" in info["input"]) == (norm == "pre")
    assert any("P_1 alone" in n for n in views[1][2]["notes"])
    # layer=None: layer 0 with a note; "mean": the average of the per-layer views
    _, q0, info0 = one(view_tables(state, meta, "q"))
    np.testing.assert_allclose(q0, views[0][1])
    assert any("layer 0" in n and "use --layer N|mean|all" in n for n in info0["notes"])  # the CLI's wording, as io's
    _, qm, infom = one(view_tables(state, meta, "q", layer="mean"))
    np.testing.assert_allclose(qm, (views[0][1] + views[1][1]) / 2)
    assert infom["layer"] == "mean" and infom["block"] == [0, 1]
    _, Am, _ = one(view_tables(state, meta, "kernel", layer="mean"))
    np.testing.assert_allclose(Am.sum(1), 1.0)
    _, A1, info1 = one(view_tables(state, meta, "kernel", layer=1))
    q, k = expected_ours(state, 1, norm, with_embed=False)
    h = D // 2
    exp = np.mean([softmax(q[:, s] @ k[:, s].T / math.sqrt(h)) for s in (slice(0, h), slice(h, D))], 0)
    np.testing.assert_allclose(A1, exp, atol=1e-9)
    assert info1["kernel_distance_rho"] == pytest.approx(kernel_distance_correlation(A1, grid(4, 4).coords))


def test_ours_input_table_and_cls_token(rng):
    state = ours_state(rng, every_layer=False, cls=True)
    meta = ours_meta(state, "pre", heads=1, readout="cls")
    _, A, info = one(view_tables(state, meta, "kernel"))
    q, k = expected_ours(state, 0, "pre", with_embed=True)
    x_cls = layer_norm(state["cls"].reshape(1, D), state["blocks.0.ln1.weight"], state["blocks.0.ln1.bias"], 1e-5)
    w, b = state["blocks.0.attn.qkv.weight"], state["blocks.0.attn.qkv.bias"]
    k_cls = x_cls @ w[D : 2 * D].T + b[D : 2 * D]
    full = softmax(q @ np.vstack([k_cls, k]).T / math.sqrt(D))  # (N, 1 + N), CLS key first
    np.testing.assert_allclose(A, full[:, 1:] / full[:, 1:].sum(1, keepdims=True), atol=1e-9)
    assert info["cls_attention_mass"] == pytest.approx(full[:, 0].mean())
    assert 0 < info["cls_attention_mass"] < 1 and A.shape == (N, N)
    assert one(view_tables(state, meta, "raw"))[1].shape == (N, D)


@pytest.mark.parametrize("view", ["q", "kernel"])
def test_non_finite_attention_weights_are_named_not_the_pe_table(rng, view):
    """A NaN in the query weights made the view say "table: contains 16 NaN/Inf values ...; clean the table",
    which points at the (finite) PE table (a review)."""
    state = ours_state(rng)
    state["blocks.1.attn.qkv.weight"][0, 0] = np.nan
    with pytest.raises(InputError, match=rf"the {view} view of blocks.1.pe.table has NaN/Inf values: "
                                         r"blocks.1.attn.qkv.weight holds NaN/Inf \(the PE table itself is finite\)"):
        view_tables(state, ours_meta(state), view, layer=1)
    assert len(view_tables(state, ours_meta(state), view, layer=0)) == 1  # layer 0 reads finite weights


def test_ours_without_config_says_what_is_missing(rng):
    state = ours_state(rng, every_layer=False)
    with pytest.raises(InputError, match="n_heads"):
        view_tables(state, {"pe_params": ["pe.table"]}, "k")


# ---------------------------------------------------------------------------------------------------
# raw, errors, kernel_distance_correlation


def test_raw_view_matches_load_table(tmp_path, rng):
    state = ours_state(rng)
    path = tmp_path / "state.npz"
    np.savez(path, **state)
    for layer in (0, 1, "mean"):
        _, table, info = one(view_tables(state, {}, "raw", layer=layer))
        np.testing.assert_array_equal(table, load_table(path, layer=layer).table)
        assert info["view"] == "raw" and info["architecture"] is None
    assert len(view_tables(state, {}, "raw", layer="all")) == 2


def test_unknown_architecture_offers_raw_and_names_the_supported_families(rng):
    state = {"encoder.pos_embed": rng.normal(size=(N, D)), "encoder.mixer.weight": rng.normal(size=(D, D))}
    for view in ("q", "k", "qk", "kernel"):
        with pytest.raises(InputError) as e:
            view_tables(state, {}, view)
        msg = str(e.value)
        assert "\n" not in msg and "raw" in msg and "BERT-style" in msg and "GPT-2-style" in msg
    np.testing.assert_array_equal(one(view_tables(state, {}, "raw"))[1], state["encoder.pos_embed"])
    with pytest.raises(InputError, match="unknown view"):
        view_tables(state, {}, "values")
    assert set(VIEWS) == {"raw", "q", "k", "qk", "kernel"}


def test_width_mismatch_is_an_input_error(rng):
    state = bert_state(normalised_rows(rng))
    state["bert.embeddings.position_embeddings.weight"] = rng.normal(size=(N, D + 2))
    with pytest.raises(InputError, match="width"):
        view_tables(state, bert_meta(1), "q")


def test_kernel_distance_correlation(rng):
    coords = grid(4, 4).coords
    dist = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    near = np.exp(-dist)
    assert kernel_distance_correlation(near, coords) == pytest.approx(1.0)
    assert kernel_distance_correlation(np.exp(dist), coords) == pytest.approx(-1.0)
    # an asymmetric kernel is symmetrised: only (A + A^T) / 2 counts
    # (integers, so the symmetrised sum is exact and ties between equal distances stay ties)
    close = 20.0 - dist**2  # exact integers on a grid
    skew = np.triu(rng.integers(1, 5, size=(N, N)), 1).astype(float)
    assert kernel_distance_correlation(close + skew - skew.T, coords) == pytest.approx(1.0)
    assert kernel_distance_correlation(close + 100 * skew, coords) < 0.9  # a symmetric change does count
    perm = rng.permutation(N)
    assert abs(kernel_distance_correlation(near[perm][:, perm], coords)) < 0.5
    assert math.isnan(kernel_distance_correlation(np.full((N, N), 1 / N), coords))
    with pytest.raises(InputError):
        kernel_distance_correlation(near[:, :5], coords)


def test_kernel_distance_correlation_ignores_rotation_and_scale_of_the_coordinates(rng):
    """A grid's equal distances stay ties after rotating and scaling it (merged like `analyze` does)."""
    coords = grid(6, 6).coords
    A = rng.random((36, 36))
    ref = kernel_distance_correlation(A, coords)
    c, s = np.cos(0.7), np.sin(0.7)
    moved = coords @ np.array([[c, -s], [s, c]]) / 3 + 5
    assert kernel_distance_correlation(A, moved) == pytest.approx(ref, abs=1e-12)


def test_a_2d_sinusoid_read_through_identity_maps_attends_to_near_cells():
    coords = grid(4, 4).coords
    freqs = np.array([1.0, 0.5])
    ang = np.concatenate([coords[:, :1] * freqs, coords[:, 1:] * freqs], axis=1)  # (N, 4)
    P = 3 * np.concatenate([np.sin(ang), np.cos(ang)], axis=1)  # (N, 8)
    state = bert_state(P, ln_w=np.ones(D))
    meta = dict(bert_meta(1), ground_truth=grid(4, 4))
    _, A, info = one(view_tables(state, meta, "kernel"))
    assert info["kernel_distance_rho"] > 0.5
    rng = np.random.default_rng(1)
    _, _, info_r = one(view_tables(bert_state(rng.normal(size=(N, D)) * 3), meta, "kernel"))
    assert info_r["kernel_distance_rho"] < info["kernel_distance_rho"]


# ---------------------------------------------------------------------------------------------------
# Factorised embeddings (ELECTRA, ALBERT), DistilBERT, GPT-Neo; messages for other architectures

E, H = 4, 8  # factorised: embedding width E, hidden width H (2 heads of 4)


def factorised_state(rng, q, k, proj):
    """BERT-style embeddings of width E, a Linear ``proj`` (H, E) to width H, then query/key Linears ``q``/``k``."""
    return {
        "embeddings.position_embeddings.weight": rng.normal(size=(N, E)) * 2 + 0.5,
        "embeddings.token_type_embeddings.weight": rng.normal(size=(2, E)),
        "embeddings.word_embeddings.weight": np.ones((30, E)),
        "embeddings.LayerNorm.weight": rng.normal(size=E),
        "embeddings.LayerNorm.bias": rng.normal(size=E),
        proj + ".weight": rng.normal(size=(H, E)),  # torch Linear: (out, in)
        proj + ".bias": rng.normal(size=H),
        q + ".weight": rng.normal(size=(H, H)),
        q + ".bias": rng.normal(size=H),
        k + ".weight": rng.normal(size=(H, H)),
        k + ".bias": rng.normal(size=H),
    }


def mean_head_kernel(q, k, scale, mask=None, heads=2):
    """Softmax(q k^T * scale) per head (columns split evenly), masked where ``mask`` is True, averaged over heads."""
    h = q.shape[1] // heads
    out = []
    for s in (slice(i * h, (i + 1) * h) for i in range(heads)):
        logits = q[:, s] @ k[:, s].T * scale
        out.append(softmax(logits if mask is None else np.where(mask, -np.inf, logits)))
    return np.mean(out, 0)


@pytest.mark.parametrize("model_type, q, k, proj", [
    ("electra", "encoder.layer.0.attention.self.query", "encoder.layer.0.attention.self.key", "embeddings_project"),
    ("albert", "encoder.albert_layer_groups.0.albert_layers.0.attention.query",
     "encoder.albert_layer_groups.0.albert_layers.0.attention.key", "encoder.embedding_hidden_mapping_in"),
])
def test_factorised_embeddings_pass_the_projection_before_attention(rng, model_type, q, k, proj):
    """ELECTRA/ALBERT: table width E, attention width H. It used to say 'pick the right table with --param'
    (ELECTRA) or that the tensors were missing (ALBERT); x = LayerNorm(P + tt0) -> proj -> query/key."""
    s = factorised_state(rng, q, k, proj)
    meta = {"config": {"model_type": model_type, "num_attention_heads": 2, "layer_norm_eps": 1e-12}}
    x = layer_norm(s["embeddings.position_embeddings.weight"] + s["embeddings.token_type_embeddings.weight"][0],
                   s["embeddings.LayerNorm.weight"], s["embeddings.LayerNorm.bias"], 1e-12)
    x = x @ s[proj + ".weight"].T + s[proj + ".bias"]
    q_exp, k_exp = x @ s[q + ".weight"].T + s[q + ".bias"], x @ s[k + ".weight"].T + s[k + ".bias"]
    _, qv, info = one(view_tables(s, meta, "q"))
    np.testing.assert_allclose(qv, q_exp, atol=1e-9)
    np.testing.assert_allclose(one(view_tables(s, meta, "k"))[1], k_exp, atol=1e-9)
    assert info["d_head"] == H // 2 and proj in info["input"] and proj + ".weight" in info["tensors"]
    assert info["architecture"] == ("albert" if model_type == "albert" else "bert")
    _, A, kinfo = one(view_tables(s, meta, "kernel"))
    np.testing.assert_allclose(A, mean_head_kernel(q_exp, k_exp, 1 / math.sqrt(H // 2)), atol=1e-9)
    assert kinfo["causal"] is False


def test_a_factorised_model_without_its_projection_names_it_missing(rng):
    q, k = "encoder.layer.0.attention.self.query", "encoder.layer.0.attention.self.key"
    s = factorised_state(rng, q, k, "embeddings_project")
    del s["embeddings_project.weight"], s["embeddings_project.bias"]
    with pytest.raises(InputError) as e:
        view_tables(s, {"config": {"model_type": "electra", "num_attention_heads": 2}}, "q")
    msg = str(e.value)
    assert "missing" in msg and "embeddings_project.weight" in msg and "--param" not in msg and "raw" in msg


def test_distilbert_reads_q_lin_k_lin_without_token_types(rng):
    P = rng.normal(size=(N, D)) * 2 + 0.5
    att = "distilbert.transformer.layer.0.attention."
    s = {"distilbert.embeddings.position_embeddings.weight": P,
         "distilbert.embeddings.word_embeddings.weight": np.ones((30, D)),
         "distilbert.embeddings.LayerNorm.weight": rng.normal(size=D),
         "distilbert.embeddings.LayerNorm.bias": rng.normal(size=D)}
    for m in ("q_lin", "k_lin", "v_lin"):
        s[att + m + ".weight"], s[att + m + ".bias"] = rng.normal(size=(D, D)), rng.normal(size=D)
    meta = {"config": {"model_type": "distilbert", "n_heads": 2, "dim": D}}  # DistilBERT's LayerNorm eps: 1e-12
    x = layer_norm(P, s["distilbert.embeddings.LayerNorm.weight"], s["distilbert.embeddings.LayerNorm.bias"], 1e-12)
    q_exp = x @ s[att + "q_lin.weight"].T + s[att + "q_lin.bias"]
    k_exp = x @ s[att + "k_lin.weight"].T + s[att + "k_lin.bias"]
    _, qk, info = one(view_tables(s, meta, "qk"))
    np.testing.assert_allclose(qk, np.hstack([q_exp, k_exp]), atol=1e-9)
    assert info["architecture"] == "distilbert" and info["n_heads"] == 2
    _, A, _ = one(view_tables(s, meta, "kernel"))
    np.testing.assert_allclose(A, mean_head_kernel(q_exp, k_exp, 1 / math.sqrt(D // 2)), atol=1e-9)
    # no config: the tensors say DistilBERT, the head count is what is missing
    with pytest.raises(InputError, match="n_heads"):
        view_tables(s, {"config": None}, "q")


@pytest.mark.parametrize("first_layer, window", [("global", None), ("local", 3)])
def test_gpt_neo_unscaled_causal_and_local_kernel(rng, first_layer, window):
    """GPT-Neo: q_proj/k_proj without bias, q k^T NOT divided by sqrt(d_head), causal; a local first layer sees
    only the last window_size positions."""
    P = rng.normal(size=(N, D))
    att = "transformer.h.0.attn.attention."
    s = {"transformer.wpe.weight": P, "transformer.wte.weight": np.ones((50, D)),
         "transformer.h.0.ln_1.weight": rng.normal(size=D), "transformer.h.0.ln_1.bias": rng.normal(size=D),
         att + "q_proj.weight": rng.normal(size=(D, D)) / 2, att + "k_proj.weight": rng.normal(size=(D, D)) / 2,
         att + "v_proj.weight": rng.normal(size=(D, D))}
    meta = {"config": {"model_type": "gpt_neo", "num_heads": 2, "layer_norm_epsilon": 1e-5,
                       "attention_layers": [first_layer, "global"], "window_size": 3}}
    x = layer_norm(P, s["transformer.h.0.ln_1.weight"], s["transformer.h.0.ln_1.bias"], 1e-5)
    q_exp, k_exp = x @ s[att + "q_proj.weight"].T, x @ s[att + "k_proj.weight"].T
    _, q, info = one(view_tables(s, meta, "q"))
    np.testing.assert_allclose(q, q_exp, atol=1e-9)
    assert info["architecture"] == "gpt_neo"
    i, j = np.indices((N, N))
    mask = (j > i) if window is None else (j > i) | (j <= i - window)
    _, A, kinfo = one(view_tables(s, meta, "kernel"))
    np.testing.assert_allclose(A, mean_head_kernel(q_exp, k_exp, 1.0, mask), atol=1e-9)
    assert kinfo["scale"] == 1.0 and kinfo["causal"] is True and np.all(A[mask] == 0)
    assert not np.allclose(A, mean_head_kernel(q_exp, k_exp, 1 / math.sqrt(D // 2), mask), atol=1e-3)


def esm_like_state(rng, prefix=""):
    """BERT names, another architecture: ESM puts a LayerNorm before attention and has no embeddings.LayerNorm."""
    att = prefix + "encoder.layer.0.attention."
    return {prefix + "embeddings.position_embeddings.weight": rng.normal(size=(N, D)),
            prefix + "embeddings.word_embeddings.weight": np.ones((30, D)),
            att + "LayerNorm.weight": np.ones(D), att + "LayerNorm.bias": np.zeros(D),
            att + "self.query.weight": np.eye(D), att + "self.query.bias": np.zeros(D),
            att + "self.key.weight": np.eye(D), att + "self.key.bias": np.zeros(D)}


def test_another_architecture_with_a_bert_or_gpt2_table_name_is_named_not_called_truncated(rng):
    """ESM, MPNet, GPT-BigCode... reuse the table names: say which model it is, not that tensors are missing."""
    s = esm_like_state(rng, "esm.")
    meta = {"config": {"model_type": "esm", "num_attention_heads": 2}}
    # as ESM is (it used to read as a truncated file), and with BERT's embeddings.LayerNorm (it used to be computed)
    with_ln = dict(s, **{"esm.embeddings.LayerNorm.weight": np.ones(D), "esm.embeddings.LayerNorm.bias": np.zeros(D)})
    for state in (s, with_ln):
        with pytest.raises(InputError) as e:
            view_tables(state, meta, "kernel")
        msg = str(e.value)
        assert "model_type esm" in msg and "esm.encoder.layer.0.attention.self.query" in msg
        assert "missing" not in msg and "use --view raw" in msg and "BERT-style" in msg and "README" in msg
        assert "\n" not in msg and len(msg) < 300
    # no config: the layout alone (an MPNet-style attn.q) says it is another model
    mpnet = {"embeddings.position_embeddings.weight": rng.normal(size=(N, D)),
             "encoder.layer.0.attention.attn.q.weight": np.eye(D), "encoder.layer.0.attention.attn.k.weight": np.eye(D)}
    with pytest.raises(InputError, match=r"another model \(its attention reads the table through encoder.layer.0"):
        view_tables(mpnet, {}, "q")
    gpt = {"transformer.wpe.weight": rng.normal(size=(N, D)), "transformer.h.0.attn.c_attn.weight": np.eye(D)}
    with pytest.raises(InputError, match="model_type gpt_bigcode"):
        view_tables(gpt, {"config": {"model_type": "gpt_bigcode", "n_head": 2}}, "q")


def test_a_bert_model_with_tensors_missing_names_them_in_a_short_line(rng):
    s = bert_state(normalised_rows(rng))
    for n in [n for n in s if ".attention." in n]:
        del s[n]
    with pytest.raises(InputError) as e:
        view_tables(s, bert_meta(1), "q")
    msg = str(e.value)
    assert "missing" in msg and "bert.encoder.layer.0.attention.self.query.weight" in msg and "1 more" in msg
    assert "raw" in msg and "\n" not in msg and len(msg) < 300


def test_unsupported_table_messages_are_short_and_point_to_the_readme(rng):
    state = {"encoder.pos_embed": rng.normal(size=(N, D)), "encoder.mixer.weight": rng.normal(size=(D, D))}
    with pytest.raises(InputError) as e:
        view_tables(state, {}, "q")
    assert len(str(e.value)) < 300 and "README" in str(e.value) and "encoder.pos_embed" in str(e.value)
    with pytest.raises(InputError, match="model_type beit;") as e:
        view_tables(state, {"config": {"model_type": "beit"}}, "kernel")
    assert len(str(e.value)) < 300
    # a supported model's other tensor: not 'this is model_type bert', which --view does read
    with pytest.raises(InputError, match="bert.embeddings.word_embeddings.weight is none of their PE tables"):
        view_tables(bert_state(normalised_rows(rng)), bert_meta(1), "q",
                    pe_param="bert.embeddings.word_embeddings.weight")


def test_a_pe_probe_checkpoint_with_a_tensor_missing_says_which_not_unrecognised(rng):
    state = ours_state(rng)
    del state["blocks.0.attn.qkv.weight"]
    with pytest.raises(InputError) as e:
        view_tables(state, ours_meta(state), "q")
    assert "missing" in str(e.value) and "blocks.0.attn.qkv.weight" in str(e.value) and "BERT" not in str(e.value)


def test_an_encoder_decoders_parts_are_read_with_their_own_configs(rng):
    """A BERT encoder and a GPT-2 decoder in one folder (transformers' EncoderDecoderModel): each part's model type,
    head count and layer-norm eps come from its own sub-config, not the top-level "encoder-decoder" one."""
    P, Q = rng.normal(size=(N, D)), rng.normal(size=(N, D))
    w, b, ln_w, ln_b = rng.normal(size=(D, 3 * D)), rng.normal(size=3 * D), rng.normal(size=D), rng.normal(size=D)
    state = {**bert_state(P, wq=rng.normal(size=(D, D)), wk=rng.normal(size=(D, D)), prefix="encoder."),
             **gpt2_state(Q, w, b, ln_w, ln_b, prefix="decoder.transformer.")}
    enc = {"model_type": "bert", "num_attention_heads": 2, "layer_norm_eps": 1e-12}
    dec = {"model_type": "gpt2", "n_head": 4, "layer_norm_epsilon": 1e-3}
    meta = {"config": {"model_type": "encoder-decoder", "encoder": enc, "decoder": dec}}
    got = view_tables(state, meta, "kernel", pe_param="encoder.embeddings.position_embeddings.weight")
    alone = view_tables({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")},
                        {"config": enc}, "kernel")
    np.testing.assert_allclose(one(got)[1], one(alone)[1], atol=1e-12)
    assert one(got)[2]["architecture"] == "bert" and one(got)[2]["n_heads"] == 2
    (_, A, info), = view_tables(state, meta, "kernel", pe_param="decoder.transformer.wpe.weight")
    assert info["architecture"] == "gpt2" and info["n_heads"] == 4 and info["causal"] is True
    qkv = layer_norm(Q, ln_w, ln_b, 1e-3) @ w + b
    later = np.triu(np.ones((N, N), dtype=bool), 1)
    expected = mean_head_kernel(qkv[:, :D], qkv[:, D : 2 * D], 1 / math.sqrt(D // 4), later, heads=4)
    np.testing.assert_allclose(A, expected, atol=1e-9)


def test_a_checkpoint_config_without_norm_is_read_as_the_trainers_default_post_norm():
    from trainers.config import ModelConfig

    assert ModelConfig().norm == "post"  # what a config that does not say means
    state = ours_state(np.random.default_rng(0), n_layers=1, every_layer=False)
    meta = ours_meta(state)
    del meta["config"]["model"]["norm"]
    (_, q, info), = view_tables(state, meta, "q")
    np.testing.assert_allclose(q, expected_ours(state, 0, "post", with_embed=True)[0], atol=1e-9)  # no ln1
    assert "ln1" not in info["input"]


def test_a_positions_slices_kernel_distance_rho_is_against_the_slices_ground_truth():
    rng = np.random.default_rng(1)
    t = np.arange(N)[:, None] / 3.0
    P = np.concatenate([np.sin(t * np.arange(1, D // 2 + 1)), np.cos(t * np.arange(1, D // 2 + 1))], axis=1)
    state = bert_state(P, wq=rng.normal(size=(D, D)), wk=rng.normal(size=(D, D)))
    (_, A, info), = view_tables(state, {**bert_meta(2), "ground_truth": line(N)}, "kernel", positions="4:12")
    assert A.shape == (8, 8)
    S = (A + A.T) / 2
    iu = np.triu_indices(8, k=1)
    expected = spearmanr(S[iu], -pdist(line(N).coords[4:12]))[0]  # positions 4..11 of the line
    assert info["kernel_distance_rho"] is not None and not math.isnan(info["kernel_distance_rho"])
    assert info["kernel_distance_rho"] == pytest.approx(expected, abs=1e-9)


def test_layer_all_with_a_view_of_a_one_table_source_writes_layer_0(tmp_path, rng, capsys):
    """`--layer all --view q` of a GPT-2 folder printed '== layer None (q) ==' and wrote OUT/layer-None/."""
    from pe_probe.cli import main

    gpt2_folder(tmp_path / "gpt2", rng)
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "gpt2"), "-g", f"line:{N}", "--layer", "all", "--view", "q", "--out", str(out),
                 "--n-perm", "10", "--n-boot", "10", "--n-null", "3", "--no-figures"]) == 0
    text = capsys.readouterr().out
    assert "== layer 0 (q) ==" in text and "== layer None" not in text and "layer-None" not in text
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["layer-0"]


def test_a_views_provenance_keeps_the_sources_own_notes(tmp_path, rng):
    """A view's provenance dropped the loader's notes (which weights file was read; what a sharded sha256 covers)."""
    import torch

    from pe_probe.api import analyze_view

    gpt2_folder(tmp_path / "gpt2", rng)
    torch.save({"transformer.wpe.weight": torch.zeros(N, D)}, tmp_path / "gpt2" / "pytorch_model.bin")
    res = analyze_view(tmp_path / "gpt2", "q", f"line:{N}", n_perm=10, n_boot=10, n_null=3, progress=False)[0]
    assert any("pytorch_model.bin beside it not read" in n for n in res.provenance["notes"])
