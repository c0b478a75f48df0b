"""Hugging Face layouts: extra leading rows (CLS, offset, padding rows) and models with no absolute PE table.

Tensor names, shapes and config keys mirror tiny random models built with transformers 5.24 (ViT, DeiT,
RoBERTa, BART, BioGPT, MPNet, ESM, MVP, TrOCR in a vision-encoder-decoder, CodeGen, GPT-J, LLaMA, T5, BEiT,
Swin) and the module names of older GPT-NeoX and DeBERTa-v2 checkpoints; transformers itself is not needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from pe_probe.errors import InputError, NoPETableError
from pe_probe.io import load_table

D = 64


def _t(rng: np.random.Generator, *shape: int) -> torch.Tensor:
    return torch.tensor(rng.normal(0, 0.02, size=shape), dtype=torch.float32)


def _folder(tmp_path: Path, config: dict, tensors: dict[str, torch.Tensor], name: str = "model") -> Path:
    """An HF model folder: config.json + model.safetensors."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _loose(tmp_path: Path, tensors: dict[str, torch.Tensor], name: str) -> Path:
    """A .safetensors file with no config.json beside it."""
    save_file(tensors, str(tmp_path / name))
    return tmp_path / name


def _vit(rng, n_rows: int, prefix: str = "embeddings.", distill: bool = False) -> dict[str, torch.Tensor]:
    tensors = {f"{prefix}position_embeddings": _t(rng, 1, n_rows, D), f"{prefix}cls_token": _t(rng, 1, 1, D),
               f"{prefix}patch_embeddings.projection.weight": _t(rng, D, 3, 4, 4)}
    if distill:
        tensors[f"{prefix}distillation_token"] = _t(rng, 1, 1, D)
    return tensors


# ----------------------------------------------------------------- loose .safetensors: evidence from names


def test_loose_vit_drops_cls_row_because_of_its_cls_token(tmp_path, rng) -> None:
    tensors = _vit(rng, 65)
    lt = load_table(_loose(tmp_path, tensors, "vit.safetensors"))
    assert lt.extra_tokens == 1 and lt.table.shape == (64, D)
    np.testing.assert_allclose(lt.table, tensors["embeddings.position_embeddings"][0, 1:].numpy())
    assert any("CLS" in n and "8x8 patches" in n and "--drop-extra-tokens 0" in n for n in lt.notes)
    deit = load_table(_loose(tmp_path, _vit(rng, 66, distill=True), "deit.safetensors"))
    assert deit.extra_tokens == 2 and deit.table.shape == (64, D)


def test_loose_hf_vit_drops_its_cls_rows_whatever_its_patch_grid(tmp_path, rng) -> None:
    """A loose ViT table of 1 + 14x16 = 225 rows kept its CLS row and was hinted grid:15x15 (225 is a square); one
    of 1 + 8x12 = 97 rows kept it too. transformers' ViT/DeiT always put their tokens' rows first."""
    for rows, distill in ((225, False), (97, False), (226, True)):
        tensors = _vit(rng, rows, distill=distill)
        lt = load_table(_loose(tmp_path, tensors, f"vit{rows}.safetensors"))
        k = 2 if distill else 1
        assert lt.extra_tokens == k and lt.table.shape == (rows - k, D)
        np.testing.assert_allclose(lt.table, tensors["embeddings.position_embeddings"][0, k:].numpy())
        assert any("cls_token" in n and "beside the table" in n for n in lt.notes) and lt.grid_hint != "grid:15x15"
    # timm's pos_embed with a cls_token beside may hold patches only (no_embed_class): a square table is kept
    timm = {"pos_embed": _t(rng, 1, 196, D), "cls_token": _t(rng, 1, 1, D)}
    assert load_table(_loose(tmp_path, timm, "timm.safetensors")).extra_tokens == 0


def test_plain_tables_with_cls_like_rows_are_never_cut(tmp_path, rng) -> None:
    """1 + 8x8 rows alone is no evidence: a GPT-style table, or a CLS token of another module or width, keeps all."""
    assert load_table(_loose(tmp_path, {"embeddings.position_embeddings": _t(rng, 1, 65, D)}, "a.safetensors")
                      ).extra_tokens == 0
    assert load_table(_loose(tmp_path, {"wpe.weight": _t(rng, 65, D)}, "gpt.safetensors")).extra_tokens == 0
    other_module = {"text_model.embeddings.position_embeddings": _t(rng, 1, 65, D),
                    "vision_model.embeddings.cls_token": _t(rng, 1, 1, D)}
    assert load_table(_loose(tmp_path, other_module, "b.safetensors")).extra_tokens == 0
    other_width = {"embeddings.position_embeddings": _t(rng, 1, 65, D), "embeddings.cls_token": _t(rng, 1, 1, 32)}
    assert load_table(_loose(tmp_path, other_width, "c.safetensors")).extra_tokens == 0


@pytest.mark.parametrize("param", ["encoder.embed_positions.weight", "decoder.embed_positions.weight"])
def test_loose_bart_encoder_and_decoder_alike(tmp_path, rng, param) -> None:
    tensors = {"encoder.embed_positions.weight": _t(rng, 66, D), "decoder.embed_positions.weight": _t(rng, 66, D)}
    lt = load_table(_loose(tmp_path, tensors, "bart.safetensors"), param=param)
    assert lt.extra_tokens == 2
    np.testing.assert_allclose(lt.table, tensors[param][2:].numpy())
    bare = load_table(_loose(tmp_path, {"embed_positions.weight": _t(rng, 66, D)}, "biogpt.safetensors"))
    assert bare.extra_tokens == 2  # BioGPT names it at the top level


def test_loose_roberta_needs_its_zero_padding_row(tmp_path, rng) -> None:
    """nn.Embedding(padding_idx=1) keeps row 1 at exactly zero: with N - 2 a power of two, that marks RoBERTa."""
    table = _t(rng, 66, D)
    plain = load_table(_loose(tmp_path, {"embeddings.position_embeddings.weight": table}, "plain.safetensors"))
    assert plain.extra_tokens == 0  # a BERT-style 66-row table: no evidence, nothing cut
    table[1] = 0
    lt = load_table(_loose(tmp_path, {"roberta.embeddings.position_embeddings.weight": table}, "r.safetensors"))
    assert lt.extra_tokens == 2 and lt.table.shape == (64, D)
    assert any("padding" in n for n in lt.notes)
    odd = torch.cat([table, _t(rng, 1, D)])  # zero row 1, but 67 - 2 is no power of two
    assert load_table(_loose(tmp_path, {"embeddings.position_embeddings.weight": odd}, "o.safetensors")
                      ).extra_tokens == 0


# ------------------------------------------------------------------------ offset families with a config


@pytest.mark.parametrize("config, name", [
    ({"model_type": "biogpt", "max_position_embeddings": 64, "pad_token_id": 1}, "embed_positions.weight"),
    ({"model_type": "mvp", "max_position_embeddings": 64, "pad_token_id": 1}, "decoder.embed_positions.weight"),
    ({"model_type": "mpnet", "max_position_embeddings": 66, "pad_token_id": 1,
      "relative_attention_num_buckets": 32}, "embeddings.position_embeddings.weight"),
    ({"model_type": "esm", "max_position_embeddings": 66, "pad_token_id": 1, "position_embedding_type": "absolute",
      "rope_theta": 10000.0}, "embeddings.position_embeddings.weight"),
    # RoBERTa-style position ids from padding_idx + 1 (transformers 5.25: markuplm, layoutlmv3, lilt, luke, altclip)
    *[({"model_type": t, "max_position_embeddings": 66, "pad_token_id": 1}, "embeddings.position_embeddings.weight")
      for t in ("markuplm", "layoutlmv3", "lilt", "luke", "altclip_text_model")],
    # nn.Embedding(max_position_embeddings + 2) looked up at arange(max) + 2 (nystromformer, mra)
    *[({"model_type": t, "max_position_embeddings": 64}, "embeddings.position_embeddings.weight")
      for t in ("nystromformer", "mra")],
])
def test_offset_families_with_config(tmp_path, rng, config, name) -> None:
    table = _t(rng, 66, D)
    tensors = {name: table, "embed_tokens.weight": _t(rng, 100, D)}
    if config["model_type"] == "mpnet":
        tensors["encoder.relative_attention_bias.weight"] = _t(rng, 32, 4)
    lt = load_table(_folder(tmp_path, config, tensors))
    assert lt.param == name and lt.extra_tokens == 2
    np.testing.assert_allclose(lt.table, table[2:].numpy())
    assert any(config["model_type"] in n and "--drop-extra-tokens 0" in n for n in lt.notes)


def test_offset_follows_the_config(tmp_path, rng) -> None:
    """A max_position_embeddings that does not fit the offset layout: nothing cut; a RoBERTa-style pad_token_id
    of 0: position ids start at 1, one row cut."""
    tensors = {"embed_positions.weight": _t(rng, 66, D)}
    cfg = {"model_type": "biogpt", "max_position_embeddings": 66}
    assert load_table(_folder(tmp_path, cfg, tensors, "a")).extra_tokens == 0
    cfg = {"model_type": "roberta", "pad_token_id": 0, "max_position_embeddings": 66}
    lt = load_table(_folder(tmp_path, cfg, {"embeddings.position_embeddings.weight": _t(rng, 66, D)}, "b"))
    assert lt.extra_tokens == 1 and any("padding_idx + 1 = 1" in n for n in lt.notes)


def test_vision_encoder_decoder_reads_the_nested_configs(tmp_path, rng) -> None:
    """ViT encoder (1 + 8x12 patches: only the nested image_size tells) and TrOCR decoder (offset 2)."""
    config = {"model_type": "vision-encoder-decoder", "architectures": ["VisionEncoderDecoderModel"],
              "encoder": {"model_type": "vit", "image_size": [32, 48], "patch_size": 4},
              "decoder": {"model_type": "trocr", "max_position_embeddings": 64,
                          "use_learned_position_embeddings": True}}
    tensors = {"encoder.embeddings.position_embeddings": _t(rng, 1, 97, D),
               "encoder.embeddings.patch_embeddings.projection.weight": _t(rng, D, 3, 4, 4),
               "decoder.model.decoder.embed_positions.weight": _t(rng, 66, D),
               "decoder.model.decoder.embed_tokens.weight": _t(rng, 100, D)}
    folder = _folder(tmp_path, config, tensors)
    enc = load_table(folder, param="encoder.embeddings.position_embeddings")
    assert enc.extra_tokens == 1 and enc.table.shape == (96, D)
    assert any("8x12 patches" in n for n in enc.notes)
    dec = load_table(folder, param="decoder.model.decoder.embed_positions.weight")
    assert dec.extra_tokens == 2 and dec.table.shape == (64, D)


# ------------------------------------------------------------------------------------ non-square ViT grids


@pytest.mark.parametrize("image, patch, n_rows, grid", [
    ([32, 48], 4, 97, "8x12"),   # 97 = 1 + 96: not 1 + a square
    ([24, 32], 4, 49, "6x8"),    # 49 = 1 + 48 is itself a square
    (32, [4, 8], 33, "8x4"),     # patch_size as a pair
])
def test_non_square_vit_grid_from_config(tmp_path, rng, image, patch, n_rows, grid) -> None:
    config = {"model_type": "vit", "image_size": image, "patch_size": patch}
    tensors = _vit(rng, n_rows)
    lt = load_table(_folder(tmp_path, config, tensors))
    assert lt.extra_tokens == 1 and lt.table.shape == (n_rows - 1, D)
    np.testing.assert_allclose(lt.table, tensors["embeddings.position_embeddings"][0, 1:].numpy())
    assert any(f"{grid} patches" in n for n in lt.notes)


# ------------------------------------------------------------------------------- no absolute table at all


_ROTARY = {"h.0.attn.qkv_proj.weight": (192, D), "h.0.mlp.fc_in.weight": (256, D), "wte.weight": (100, D)}


@pytest.mark.parametrize("config, shapes, why", [
    ({"model_type": "codegen", "rotary_dim": 8, "n_positions": 64}, _ROTARY, "rotary.*rotary_dim"),
    ({"model_type": "gptj", "rotary_dim": 8}, _ROTARY, "rotary.*rotary_dim"),
    ({"model_type": "llama", "max_position_embeddings": 64,
      "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}},
     {"embed_tokens.weight": (100, D), "layers.0.self_attn.q_proj.weight": (D, D)}, "rotary.*rope_parameters"),
    ({"model_type": "mistral", "rope_theta": 10000.0},
     {"embed_tokens.weight": (100, D), "layers.0.self_attn.q_proj.weight": (D, D)}, "rotary.*rope_theta"),
    ({"model_type": "gpt_neox", "rotary_pct": 0.25},
     {"gpt_neox.embed_in.weight": (100, D), "gpt_neox.layers.0.attention.rotary_emb.inv_freq": (4,)}, "rotary"),
    ({"model_type": "t5", "relative_attention_num_buckets": 32},
     {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": (32, 4),
      "encoder.block.0.layer.0.SelfAttention.q.weight": (D, D)}, "relative.*relative_attention_num_buckets"),
    ({"model_type": "beit", "use_relative_position_bias": True, "use_absolute_position_embeddings": False},
     {"embeddings.cls_token": (1, 1, D),
      "encoder.layer.0.attention.attention.relative_position_bias.relative_position_bias_table": (228, 4)},
     "relative.*use_relative_position_bias"),
    ({"model_type": "swin", "use_absolute_embeddings": False},
     {"encoder.layers.0.blocks.0.attention.self.relative_position_bias_table": (49, 2),
      "encoder.layers.0.blocks.0.attention.self.query.weight": (16, 16)}, "relative.*use_absolute_embeddings"),
    ({"model_type": "deberta-v2", "relative_attention": True, "position_biased_input": False},
     {"embeddings.word_embeddings.weight": (100, D), "encoder.rel_embeddings.weight": (512, D)},
     "relative.*relative_attention"),
])
def test_models_without_an_absolute_table_say_so(tmp_path, rng, config, shapes, why) -> None:
    folder = _folder(tmp_path, config, {n: _t(rng, *s) for n, s in shapes.items()})
    with pytest.raises(NoPETableError, match=f"no absolute PE table \\(.*{why}.*nothing to analyse.*--param NAME"):
        load_table(folder)


def test_no_absolute_table_from_tensor_names_and_on_the_command_line(tmp_path, rng, capsys) -> None:
    from pe_probe.cli import main

    t5 = {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": _t(rng, 32, 4),
          "decoder.block.0.layer.0.SelfAttention.q.weight": _t(rng, D, D)}
    path = _loose(tmp_path, t5, "t5.safetensors")
    with pytest.raises(NoPETableError, match="relative.*relative_attention_bias"):
        load_table(path)
    assert main(["analyze", str(path), "-g", "line:32"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no absolute PE table" in err
    # no evidence either way: the old message, which lists the candidates for --param
    with pytest.raises(InputError, match="no positional-encoding table found automatically") as e:
        load_table(_loose(tmp_path, {"h.0.attn.qkv_proj.weight": _t(rng, 192, D), "wte.weight": _t(rng, 100, D)},
                          "plain.safetensors"))
    assert not isinstance(e.value, NoPETableError)


@pytest.mark.parametrize("config, name, rows, why", [
    ({"model_type": "llama"}, "model.embed_tokens.weight", 50, "rotary position embeddings, from model_type llama"),
    ({"model_type": "t5"}, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, "relative"),
    (None, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, "relative"),
])
def test_a_lone_tensor_is_not_taken_for_the_table_when_the_model_has_none(tmp_path, rng, capsys, config, name, rows,
                                                                          why) -> None:
    """A folder or file holding one tensor was analysed as its PE table even when its config or the tensor's
    name says the model has no absolute table (a Llama folder with only its token embeddings: exit 0)."""
    from pe_probe.cli import main

    tensors = {name: _t(rng, rows, 8)}
    path = _folder(tmp_path, config, tensors) if config else _loose(tmp_path, tensors, "lone.safetensors")
    with pytest.raises(NoPETableError, match=f"no absolute PE table \\({why}"):
        load_table(path)
    assert main(["analyze", str(path), "-g", f"line:{rows}", "--out", str(tmp_path / "out")]) == 2
    assert "no absolute PE table" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert load_table(path, param=name).table.shape == (rows, 8)  # --param still takes it


def test_esm_rope_theta_does_not_hide_its_absolute_table(tmp_path, rng) -> None:
    """Newer configs carry rope_theta even for an absolute table: a table that exists is still analysed."""
    config = {"model_type": "esm", "position_embedding_type": "absolute", "rope_theta": 10000.0,
              "max_position_embeddings": 66, "pad_token_id": 1}
    lt = load_table(_folder(tmp_path, config, {"embeddings.position_embeddings.weight": _t(rng, 66, D)}))
    assert lt.param == "embeddings.position_embeddings.weight"


# ----------------------------------------------------------------- which ground truth to suggest


def test_a_vit_table_without_ground_truth_suggests_its_patch_grid(tmp_path, rng) -> None:
    """The tool said 'line:64' for a ViT, though its own note said '8x12 patches'."""
    from pe_probe.api import analyze_source

    config = {"model_type": "vit", "image_size": [32, 48], "patch_size": 4, "hidden_size": D}
    folder = _folder(tmp_path, config, _vit(rng, 97))
    assert load_table(folder).grid_hint == "grid:8x12"
    with pytest.raises(InputError, match="pass --ground-truth \\(grid:8x12 for this table's image patches, or "):
        analyze_source(folder)
    assert load_table(_loose(tmp_path, _vit(rng, 65), "vit.safetensors")).grid_hint == "grid:8x8"  # square, no config
    assert load_table(folder, positions="0:48").grid_hint is None  # a slice is no longer the image
    gpt = _loose(tmp_path, {"transformer.wpe.weight": _t(rng, 64, D)}, "gpt2.safetensors")
    assert load_table(gpt).grid_hint is None
    with pytest.raises(InputError, match=r"no ground truth: pass --ground-truth \(a \.npy"):
        analyze_source(gpt)


def test_a_folder_with_two_weight_formats_says_which_one_was_read(tmp_path, rng) -> None:
    folder = _folder(tmp_path, {"model_type": "gpt2"}, {"transformer.wpe.weight": _t(rng, 16, D)})
    assert not any("not read" in n for n in load_table(folder).notes)
    torch.save({"transformer.wpe.weight": _t(rng, 16, D)}, folder / "pytorch_model.bin")  # a different model
    lt = load_table(folder)
    assert "read model.safetensors; pytorch_model.bin beside it not read (safetensors first, as transformers)" in lt.notes
    assert lt.provenance()["notes"] == lt.notes
    # sharded: the note names the index it followed, not its first shard ('read model-00002-of-00002... and its shards')
    (folder / "model.safetensors").unlink()
    shards = {"model-00001-of-00002.safetensors": {"transformer.wpe.weight": _t(rng, 16, D)},
              "model-00002-of-00002.safetensors": {"transformer.wte.weight": _t(rng, 50, D)}}
    for shard, tensors in shards.items():
        save_file(tensors, str(folder / shard))
    weight_map = {name: shard for shard, tensors in shards.items() for name in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert ("read model.safetensors.index.json and its shards; pytorch_model.bin beside it not read (safetensors "
            "first, as transformers)") in load_table(folder).notes


def test_a_fixed_sinusoidal_table_is_noted_as_such(tmp_path, rng) -> None:
    """Whisper's encoder and Marian store fixed sinusoids as weights; they were analysed like learned tables."""
    pos = np.arange(48)[:, None]
    freqs = 1.0 / 10000 ** (np.arange(16) / 16)
    concatenated = np.concatenate([np.sin(pos * freqs), np.cos(pos * freqs)], axis=1)  # Whisper: [sin | cos]
    interleaved = np.stack([np.sin(pos * freqs), np.cos(pos * freqs)], axis=2).reshape(48, 32)  # Vaswani
    for name, table in (("concatenated", concatenated), ("interleaved", interleaved)):
        tensors = {"model.encoder.embed_positions.weight": torch.tensor(table, dtype=torch.float16)}  # fp16 on disk
        notes = load_table(_loose(tmp_path, tensors, f"{name}.safetensors")).notes
        assert any("depend only on the offset i - j" in n for n in notes), name
    learned = concatenated + rng.normal(0, 0.05, concatenated.shape)  # a table training moved a little
    for table in (learned, rng.normal(size=(48, 32))):
        np.save(tmp_path / "t.npy", table)
        assert not any("offset i - j" in n for n in load_table(tmp_path / "t.npy").notes)


@pytest.mark.parametrize("pe_type", ["relative_key", "relative_key_query"])
def test_a_bert_table_its_config_says_is_unused_is_refused_unless_named(tmp_path, rng, pe_type) -> None:
    """transformers 4.x builds BertEmbeddings.position_embeddings for every position_embedding_type but adds it to
    the input only for 'absolute': with relative_key its rows are an untrained initialisation, analysed silently."""
    cfg = {"model_type": "bert", "max_position_embeddings": 64, "position_embedding_type": pe_type}
    name = "bert.embeddings.position_embeddings.weight"
    folder = _folder(tmp_path, cfg, {name: _t(rng, 64, D), "bert.embeddings.word_embeddings.weight": _t(rng, 100, D)})
    with pytest.raises(NoPETableError, match=f"position_embedding_type {pe_type}.*pass --param {name}") as e:
        load_table(folder)
    assert "no absolute PE table" in e.value.reason
    lt = load_table(folder, param=name)
    assert lt.table.shape == (64, D) and any("never reads this table" in n for n in lt.notes)
    cfg["position_embedding_type"] = "absolute"
    assert load_table(_folder(tmp_path, cfg, {name: _t(rng, 64, D)}, "absolute")).param == name
    # MarkupLM adds its table whatever position_embedding_type its attention uses: analysed as usual
    markup = {"model_type": "markuplm", "position_embedding_type": pe_type, "pad_token_id": 1,
              "max_position_embeddings": 66}
    lt = load_table(_folder(tmp_path, markup, {"markuplm.embeddings.position_embeddings.weight": _t(rng, 66, D)}, "m"))
    assert lt.extra_tokens == 2 and not any("never reads" in n for n in lt.notes)


@pytest.mark.parametrize("model_type", ["m2m_100", "xglm", "ctrl", "funnel"])
def test_models_whose_positions_are_computed_or_relative_have_no_table(tmp_path, rng, model_type) -> None:
    """M2M100, XGLM and CTRL compute their sinusoid at run time (never stored), Funnel uses relative attention: they
    got 'no table found automatically, pass --param' and made `compare` fail instead of skipping them."""
    folder = _folder(tmp_path, {"model_type": model_type}, {"model.embed_tokens.weight": _t(rng, 100, D),
                                                             "model.layers.0.fc1.weight": _t(rng, 2 * D, D)})
    with pytest.raises(NoPETableError, match="no absolute PE table") as e:
        load_table(folder)
    assert f"model_type {model_type}" in e.value.reason
