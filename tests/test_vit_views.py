"""The q/k/kernel views of ViT, DeiT, DINOv2 and CLIP's vision tower on planted states (numpy only).

The hand computation runs the first attention layer the way those models do for a blank (all-zero) image: every
token's input (CLS and distillation tokens included) through the layer norm(s) and the query/key Linears, softmax
over all keys per head; the view is then the patch rows and columns, each head's rows renormalised, averaged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_views import layer_norm, mean_head_kernel, one, softmax

from pe_probe.errors import InputError
from pe_probe.groundtruth import grid
from pe_probe.views import view_tables

N, D, HEADS = 16, 8, 2  # a 4x4 patch grid (image 16, patch 4), width 8, 2 heads of 4
VIT_ATT = "encoder.layer.0.attention.attention."
CLIP_ATT = "encoder.layers.0.self_attn."


def linear(rng, prefix, state, bias=True):
    state[prefix + ".weight"] = rng.normal(size=(D, D))  # torch Linear: (out, in)
    if bias:
        state[prefix + ".bias"] = rng.normal(size=D)


def norm(rng, prefix, state):
    state[prefix + ".weight"], state[prefix + ".bias"] = 1 + 0.3 * rng.normal(size=D), rng.normal(size=D)


def vit_state(rng, arch="vit", prefix="vit.", bias=True):
    """A HF ViT (DeiT: with a distillation token; DINOv2: block norm norm1) as saved: table (1, k + N, D), tokens
    (1, 1, D)."""
    k = 2 if arch == "deit" else 1
    s = {prefix + "embeddings.position_embeddings": rng.normal(size=(1, k + N, D)),
         prefix + "embeddings.cls_token": rng.normal(size=(1, 1, D)),
         prefix + "embeddings.patch_embeddings.projection.weight": rng.normal(size=(D, 3, 4, 4)),
         prefix + "embeddings.patch_embeddings.projection.bias": rng.normal(size=D)}
    if arch == "deit":
        s[prefix + "embeddings.distillation_token"] = rng.normal(size=(1, 1, D))
    norm(rng, prefix + "encoder.layer.0." + ("norm1" if arch == "dinov2" else "layernorm_before"), s)
    for m in ("query", "key", "value"):
        linear(rng, prefix + VIT_ATT + m, s, bias)
    return s


def clip_state(rng, prefix=""):
    """CLIP's vision tower as saved: table (1 + N, D), class_embedding (D,), a patch conv without bias."""
    s = {prefix + "embeddings.position_embedding.weight": rng.normal(size=(1 + N, D)),
         prefix + "embeddings.class_embedding": rng.normal(size=D),
         prefix + "embeddings.patch_embedding.weight": rng.normal(size=(D, 3, 4, 4))}
    norm(rng, prefix + "pre_layrnorm", s)
    norm(rng, prefix + "encoder.layers.0.layer_norm1", s)
    for m in ("q_proj", "k_proj", "v_proj"):
        linear(rng, prefix + CLIP_ATT + m, s)
    return s


def config(model_type, **extra):
    return {"model_type": model_type, "num_attention_heads": HEADS, "image_size": 16, "patch_size": 4, **extra}


# (arch, table name, state, meta, extra tokens m); eps: what the model's layer norms use
CASES = {
    "vit": lambda rng: (vit_state(rng), {"config": config("vit"), "ground_truth": grid(4, 4)}, 1e-12),
    "vit-eps": lambda rng: (vit_state(rng, prefix=""), {"config": config("vit", layer_norm_eps=1e-2)}, 1e-2),
    "deit": lambda rng: (vit_state(rng, "deit", prefix="deit."), {"config": config("deit")}, 1e-12),
    "dinov2": lambda rng: (vit_state(rng, "dinov2", prefix=""), {"config": config("dinov2")}, 1e-6),
    "dinov2-noconfig": lambda rng: (vit_state(rng, "dinov2", prefix=""), {"config": {"num_attention_heads": HEADS}}, 1e-6),
    "clip_vision": lambda rng: (clip_state(rng), {"config": config("clip_vision_model")}, 1e-5),
    "clip": lambda rng: (clip_state(rng, "vision_model."),
                         {"config": {"model_type": "clip", "vision_config": config("clip_vision_model"),
                                     "text_config": {"model_type": "clip_text_model"}}}, 1e-5),
}


def forward(state, eps, start=0, stop=N):
    """The hand computation: token inputs for a blank image, norms, q/k; per-head attention of patches
    start..stop-1 over every token (special tokens first), patch part renormalised; CLS mass; the patches' q, k."""
    table = next(n for n in state if n.endswith(("position_embeddings", "position_embedding.weight")))
    pre = table[: table.index("embeddings.")]
    P = state[table].reshape(-1, D)
    if pre + "embeddings.class_embedding" in state:  # CLIP: no conv bias, two layer norms
        tokens, bias = [state[pre + "embeddings.class_embedding"]], np.zeros(D)
        norms, att, (qn, kn) = [pre + "pre_layrnorm", pre + "encoder.layers.0.layer_norm1"], pre + CLIP_ATT, ("q_proj",
                                                                                                              "k_proj")
    else:
        tokens = [state[pre + "embeddings." + t].reshape(D) for t in ("cls_token", "distillation_token")
                  if pre + "embeddings." + t in state]
        bias = state[pre + "embeddings.patch_embeddings.projection.bias"]
        block_norm = "norm1" if pre + "encoder.layer.0.norm1.weight" in state else "layernorm_before"
        norms, att, (qn, kn) = [pre + "encoder.layer.0." + block_norm], pre + VIT_ATT, ("query", "key")
    m = len(tokens)
    x = np.vstack([np.array(tokens) + P[:m], (bias + P[m:])[start:stop]])  # (m + n, D), as the model orders them
    for n in norms:
        x = layer_norm(x, state[n + ".weight"], state[n + ".bias"], eps)
    q = x @ state[att + qn + ".weight"].T + state.get(att + qn + ".bias", 0)
    k = x @ state[att + kn + ".weight"].T + state.get(att + kn + ".bias", 0)
    h = D // HEADS
    full = [softmax(q[:, s] @ k[:, s].T / math.sqrt(h)) for s in (slice(0, h), slice(h, D))]  # (m + n, m + n)
    kernels = [a[m:, m:] / a[m:, m:].sum(1, keepdims=True) for a in full]
    masses = [a[m:, :m].sum(1).mean() for a in full]
    return kernels, masses, q[m:], k[m:]


@pytest.mark.parametrize("case", list(CASES))
def test_a_blank_images_kernel_q_and_k_match_the_hand_computed_first_layer(rng, case):
    state, meta, eps = CASES[case](rng)
    kernels, masses, q_exp, k_exp = forward(state, eps)
    label, A, info = one(view_tables(state, meta, "kernel"))
    np.testing.assert_allclose(A, np.mean(kernels, 0), atol=1e-9)
    np.testing.assert_allclose(A.sum(1), 1.0)
    assert info["cls_attention_mass"] == pytest.approx(np.mean(masses), abs=1e-12)
    assert 0 < info["cls_attention_mass"] < 1 and info["causal"] is False
    assert info["scale"] == pytest.approx(1 / math.sqrt(D // HEADS)) and info["n_heads"] == HEADS
    m = 2 if case == "deit" else 1
    assert info["extra_tokens"] == m and A.shape == (N, N)
    assert info["architecture"] == {"vit-eps": "vit", "clip": "clip_vision", "dinov2-noconfig": "dinov2"}.get(case, case)
    assert "blank (all-zero) image" in " ".join(info["notes"])
    heads = view_tables(state, meta, "kernel", per_head=True)
    for (lab, Ah, hinfo), expected, mass in zip(heads, kernels, masses):
        np.testing.assert_allclose(Ah, expected, atol=1e-9)
        assert hinfo["cls_attention_mass"] == pytest.approx(mass, abs=1e-12) and lab.endswith(f"head{hinfo['head']}")
    assert len(heads) == HEADS and masses[0] != pytest.approx(masses[1])
    np.testing.assert_allclose(one(view_tables(state, meta, "q"))[1], q_exp, atol=1e-9)
    np.testing.assert_allclose(one(view_tables(state, meta, "k"))[1], k_exp, atol=1e-9)
    np.testing.assert_allclose(one(view_tables(state, meta, "qk"))[1], np.hstack([q_exp, k_exp]), atol=1e-9)
    q1 = view_tables(state, meta, "q", per_head=True)[1][1]
    np.testing.assert_allclose(q1, q_exp[:, D // HEADS :], atol=1e-9)
    if meta.get("ground_truth") is not None:  # the view's rows are the grid's: its own ground truth scores it
        assert info["kernel_distance_rho"] is not None and math.isfinite(info["kernel_distance_rho"])


def test_the_layer_norm_eps_of_the_config_is_used(rng):
    """1e-2 from the config, not ViT's default 1e-12: the hand computation's eps is load-bearing."""
    state, meta, _ = CASES["vit-eps"](rng)
    A = one(view_tables(state, meta, "kernel"))[1]
    assert not np.allclose(A, np.mean(forward(state, 1e-12)[0], 0), atol=1e-6)
    np.testing.assert_allclose(A, np.mean(forward(state, 1e-2)[0], 0), atol=1e-9)


def test_a_vit_without_query_key_bias(rng):
    """ViTConfig(qkv_bias=False) saves no query/key bias: the view reads them as 0."""
    state = vit_state(rng, prefix="", bias=False)
    meta = {"config": config("vit", qkv_bias=False)}
    kernels, masses, q_exp, _ = forward(state, 1e-12)
    np.testing.assert_allclose(one(view_tables(state, meta, "q"))[1], q_exp, atol=1e-9)
    _, A, info = one(view_tables(state, meta, "kernel"))
    np.testing.assert_allclose(A, np.mean(kernels, 0), atol=1e-9)
    with pytest.raises(InputError, match="query.bias"):  # qkv_bias left at its default (True): the bias is needed
        view_tables(state, {"config": config("vit")}, "q")


@pytest.mark.parametrize("case", ["vit", "clip_vision"])
def test_positions_slice_the_patches_before_the_softmax(rng, case):
    state, meta, eps = CASES[case](rng)
    kernels, masses, q_exp, _ = forward(state, eps, 4, 12)
    _, A, info = one(view_tables(state, meta, "kernel", positions="4:12"))
    np.testing.assert_allclose(A, np.mean(kernels, 0), atol=1e-9)
    assert info["positions"] == [4, 12] and info["cls_attention_mass"] == pytest.approx(np.mean(masses), abs=1e-12)
    np.testing.assert_allclose(one(view_tables(state, meta, "q", positions="4:12"))[1], q_exp, atol=1e-9)


@pytest.mark.parametrize("case", ["vit", "deit", "clip"])
@pytest.mark.parametrize("view", ["q", "kernel"])
def test_the_chance_draw_is_the_view_of_random_patch_rows_in_the_tables_place(rng, case, view):
    """The random table replaces the viewed patch rows; the CLS (and distillation) rows keep their real values."""
    state, meta, _ = CASES[case](rng)
    table = next(n for n in state if n.endswith(("position_embeddings", "position_embedding.weight")))
    m = 2 if case == "deit" else 1
    P = state[table].reshape(-1, D)
    (label, _, info, chance), = view_tables(state, meta, view, return_chance=True)
    assert chance.kind == "through-view" and "viewed rows" in chance.description
    drawn = chance.draw(np.random.default_rng(3))
    random_rows = np.random.default_rng(3).normal(0.0, np.std(P[m:]), (N, D))
    planted = dict(state, **{table: np.vstack([P[:m], random_rows]).reshape(state[table].shape)})
    np.testing.assert_allclose(drawn, one(view_tables(planted, meta, view))[1], atol=1e-12)
    # Replacing the CLS rows too would change no drawn table: at layer 0 the special tokens change no patch's
    # q or k, and the kernel renormalised over patches is the softmax over patch keys alone (only
    # cls_attention_mass reads them, and the chance level does not draw it).
    other_cls = np.random.default_rng(4).normal(0.0, np.std(P[m:]), (m, D))
    other = dict(state, **{table: np.vstack([other_cls, random_rows]).reshape(state[table].shape)})
    (_, table_other, info_other), = view_tables(other, meta, view)
    np.testing.assert_allclose(drawn, table_other, atol=1e-12)
    if view == "kernel":
        assert info_other["cls_attention_mass"] != pytest.approx(
            one(view_tables(planted, meta, view))[2]["cls_attention_mass"])


@pytest.mark.parametrize("case, tensor", [
    ("vit", "vit.embeddings.patch_embeddings.projection.bias"),
    ("vit", "vit.embeddings.cls_token"),
    ("deit", "deit.embeddings.distillation_token"),
    ("deit", "deit." + VIT_ATT + "key.weight"),
    ("clip_vision", "pre_layrnorm.weight"),
    ("clip", "vision_model.encoder.layers.0.layer_norm1.bias"),
])
def test_a_missing_tensor_is_a_one_line_input_error_naming_it(rng, case, tensor):
    state, meta, _ = CASES[case](rng)
    del state[tensor]
    with pytest.raises(InputError) as e:
        view_tables(state, meta, "kernel")
    msg = str(e.value)
    assert "missing" in msg and tensor in msg and "raw" in msg and "\n" not in msg and len(msg) < 300


def test_the_cls_rows_must_be_dropped_as_the_model_has_them(rng):
    state, meta, _ = CASES["deit"](rng)
    with pytest.raises(InputError, match="--drop-extra-tokens 2") as e:
        view_tables(state, meta, "kernel", drop_extra_tokens=0)
    assert "\n" not in str(e.value)
    assert one(view_tables(state, meta, "raw", drop_extra_tokens=0))[1].shape == (N + 2, D)  # raw: as asked
    assert one(view_tables(state, meta, "q", drop_extra_tokens=2))[1].shape == (N, D)


def test_no_config_tells_deit_from_vit_and_asks_for_the_head_count(rng):
    state, _, _ = CASES["deit"](rng)
    with pytest.raises(InputError, match="num_attention_heads"):
        view_tables(state, {"config": None}, "q")
    meta = {"config": {"num_attention_heads": HEADS, "image_size": 16, "patch_size": 4}}  # no model_type
    (_, A, info), = view_tables(state, meta, "kernel")
    assert info["architecture"] == "deit" and info["extra_tokens"] == 2
    np.testing.assert_allclose(A, np.mean(forward(state, 1e-12)[0], 0), atol=1e-9)


def test_other_vision_models_are_refused_by_name(rng):
    state = vit_state(rng, prefix="")
    for model_type in ("dinov2_with_registers", "vit_mae"):
        with pytest.raises(InputError, match=f"model_type {model_type}; use --view raw") as e:
            view_tables(state, {"config": config(model_type)}, "kernel")
        assert "DINOv2, CLIP vision" in str(e.value) and len(str(e.value)) < 300
    siglip = clip_state(rng)
    with pytest.raises(InputError, match="model_type siglip_vision_model"):
        view_tables(siglip, {"config": config("siglip_vision_model")}, "q")


def text_tower(rng, state, prefix="text_model."):
    """CLIP's text tower beside ``state``: a (N, D) table, token embedding, layer_norm1, q/k/v_proj."""
    state[prefix + "embeddings.position_embedding.weight"] = rng.normal(size=(N, D))
    state[prefix + "embeddings.token_embedding.weight"] = rng.normal(size=(50, D))
    norm(rng, prefix + "encoder.layers.0.layer_norm1", state)
    for m in ("q_proj", "k_proj", "v_proj"):
        linear(rng, prefix + CLIP_ATT + m, state)
    return state


def causal_kernel(state, prefix, eps):
    """CLIP text's layer 0 by hand: P -> layer_norm1 -> q/k, per-head causal softmax, mean over heads."""
    x = layer_norm(state[prefix + "embeddings.position_embedding.weight"], state[prefix + "encoder.layers.0.layer_norm1.weight"],
                   state[prefix + "encoder.layers.0.layer_norm1.bias"], eps)
    q = x @ state[prefix + CLIP_ATT + "q_proj.weight"].T + state[prefix + CLIP_ATT + "q_proj.bias"]
    k = x @ state[prefix + CLIP_ATT + "k_proj.weight"].T + state[prefix + CLIP_ATT + "k_proj.bias"]
    later = np.triu(np.ones((N, N), dtype=bool), 1)
    return mean_head_kernel(q, k, 1 / math.sqrt(D // HEADS), later, heads=HEADS), q


def test_clips_text_tower_is_read_causally_in_every_layout(rng):
    name = "text_model.embeddings.position_embedding.weight"
    full, meta, _ = CASES["clip"](rng)
    text_tower(rng, full)
    meta["config"]["text_config"].update(num_attention_heads=HEADS, layer_norm_eps=1e-3)
    expected, q = causal_kernel(full, "text_model.", 1e-3)
    (_, A, info), = view_tables(full, meta, "kernel", pe_param=name)
    np.testing.assert_allclose(A, expected, atol=1e-9)
    assert info["architecture"] == "clip_text" and info["causal"] is True and info["extra_tokens"] == 0
    np.testing.assert_allclose(one(view_tables(full, meta, "q", pe_param=name))[1], q, atol=1e-9)
    # a CLIP config without its towers' model types: each tower by its prefix; a text tower alone with no config
    vision = {k: v for k, v in config("clip_vision_model").items() if k != "model_type"}
    no_tower_types = dict(meta, config={"model_type": "clip", "vision_config": vision,
                                        "text_config": {"num_attention_heads": HEADS, "layer_norm_eps": 1e-3}})
    np.testing.assert_allclose(one(view_tables(full, no_tower_types, "kernel", pe_param=name))[1], expected, atol=1e-9)
    (_, _, info), = view_tables(full, no_tower_types, "q", pe_param="vision_model.embeddings.position_embedding.weight")
    assert info["architecture"] == "clip_vision"
    alone = text_tower(rng, {})
    (_, A, info), = view_tables(alone, {"config": {"num_attention_heads": HEADS}}, "kernel")
    np.testing.assert_allclose(A, causal_kernel(alone, "text_model.", 1e-5)[0], atol=1e-9)
    assert info["architecture"] == "clip_text"
    del alone["text_model.encoder.layers.0.self_attn.k_proj.bias"]
    with pytest.raises(InputError, match="k_proj.bias"):
        view_tables(alone, {"config": {"num_attention_heads": HEADS}}, "q")
