"""Loading PE tables from every source kind, safely, with clear errors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from pe_probe.errors import InputError
from pe_probe.groundtruth import grid
from pe_probe.io import find_pe_params, load_state, load_table


def _checkpoint(table: np.ndarray, n_layers: int = 1, rng: np.random.Generator | None = None) -> dict:
    """A pe-probe-checkpoint/1 dict with per-layer tables blocks.{i}.pe.table (layer i = table + i)."""
    model = {"embed.weight": torch.randn(5, 8), "blocks.0.attn.w_q": torch.randn(8, 8)}
    for i in range(n_layers):
        model[f"blocks.{i}.pe.table"] = torch.tensor(table + i)
    return {
        "format": "pe-probe-checkpoint/1",
        "model": model,
        "config": {"task": "latin", "pe": "learned", "sigma": 0.2},
        "pe_params": [f"blocks.{i}.pe.table" for i in range(n_layers)],
        "ground_truth": {"coords": torch.tensor(grid(4, 4).coords), "kind": "grid", "shape": [4, 4]},
        "step": 120, "epoch": 3, "metrics": {"acc": 0.5},
    }


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------- source kinds


def test_our_checkpoint_round_trip(tmp_path, grid_table) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save(_checkpoint(grid_table), path)
    lt = load_table(path)
    np.testing.assert_allclose(lt.table, grid_table)
    assert lt.table.dtype == np.float64
    assert (lt.source_kind, lt.param, lt.layer, lt.n_layers) == ("pe-probe-checkpoint", "blocks.0.pe.table", None, 1)
    assert lt.sha256 == _sha(path) and lt.source == str(path)
    assert lt.ground_truth is not None and lt.ground_truth.shape == (4, 4) and lt.ground_truth.kind == "grid"
    np.testing.assert_array_equal(lt.ground_truth.coords, grid(4, 4).coords)
    assert lt.config["sigma"] == 0.2 and lt.step == 120 and lt.checkpoint_metrics == {"acc": 0.5}
    assert lt.extra_tokens == 0 and lt.positions is None
    prov = lt.provenance()
    json.dumps(prov)  # JSON-able
    assert prov["param"] == "blocks.0.pe.table" and prov["original_shape"] == [16, 8]


def test_checkpoint_positions_slice_the_ground_truth_too(tmp_path, grid_table) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save(_checkpoint(grid_table), path)
    lt = load_table(path, positions="4:12")
    np.testing.assert_allclose(lt.table, grid_table[4:12])
    np.testing.assert_array_equal(lt.ground_truth.coords, grid(4, 4).coords[4:12])
    assert lt.ground_truth.shape == (2, 4) and lt.positions == (4, 12)


def test_plain_and_nested_state_dicts(tmp_path, grid_table) -> None:
    sd = {"tok.weight": torch.randn(10, 8), "pos_emb.weight": torch.tensor(grid_table)}
    torch.save(sd, tmp_path / "plain.pth")
    torch.save({"state_dict": sd, "epoch": 4, "optimizer": {"lr": 0.1}}, tmp_path / "nested.ckpt")
    torch.save({"model": {"enc": {"pos_emb": {"weight": torch.tensor(grid_table)}}}}, tmp_path / "deep.bin")
    for name, param in [("plain.pth", "pos_emb.weight"), ("nested.ckpt", "pos_emb.weight"),
                        ("deep.bin", "enc.pos_emb.weight")]:
        lt = load_table(tmp_path / name)
        np.testing.assert_allclose(lt.table, grid_table)
        assert lt.source_kind == "state_dict" and lt.param == param, name
    assert any("'state_dict'" in n for n in load_table(tmp_path / "nested.ckpt").notes)


def test_tensor_pt_npy_npz_csv(tmp_path, grid_table) -> None:
    torch.save(torch.tensor(grid_table, dtype=torch.float32), tmp_path / "t.pt")
    np.save(tmp_path / "t.npy", grid_table)
    np.savez(tmp_path / "one.npz", anything=grid_table)
    np.savez(tmp_path / "two.npz", pos_embed=grid_table, other=np.ones((16, 3)))
    np.savetxt(tmp_path / "plain.csv", grid_table, delimiter=",")
    header = ",".join(f"d{i}" for i in range(8))
    np.savetxt(tmp_path / "head.csv", grid_table, delimiter=",", header=header, comments="")
    expected = {"t.pt": ("tensor", None), "t.npy": ("npy", None), "one.npz": ("npz", "anything"),
                "two.npz": ("npz", "pos_embed"), "plain.csv": ("csv", None), "head.csv": ("csv", None)}
    for name, (kind, param) in expected.items():
        lt = load_table(tmp_path / name)
        np.testing.assert_allclose(lt.table, grid_table, rtol=1e-6, atol=1e-6, err_msg=name)
        assert (lt.source_kind, lt.param) == (kind, param), name
        assert lt.sha256 == _sha(tmp_path / name)
    np.testing.assert_allclose(load_table(tmp_path / "two.npz", param="other").table, np.ones((16, 3)))


def test_safetensors_file_including_bfloat16(tmp_path, grid_table) -> None:
    save_file({"model.pos_embedding": torch.tensor(grid_table, dtype=torch.float32),
               "model.head": torch.randn(4, 8)}, str(tmp_path / "w.safetensors"))
    lt = load_table(tmp_path / "w.safetensors")
    np.testing.assert_allclose(lt.table, grid_table, rtol=1e-6)
    assert (lt.source_kind, lt.param) == ("safetensors", "model.pos_embedding")
    save_file({"wpe.weight": torch.tensor(grid_table, dtype=torch.bfloat16)}, str(tmp_path / "b.safetensors"))
    lt = load_table(tmp_path / "b.safetensors")
    np.testing.assert_allclose(lt.table, grid_table, rtol=1e-2, atol=1e-2)


def test_load_state_returns_all_tensors_and_metadata(tmp_path, grid_table) -> None:
    torch.save(_checkpoint(grid_table, n_layers=2), tmp_path / "c.pt")
    state, meta = load_state(tmp_path / "c.pt")
    assert set(state) == {"embed.weight", "blocks.0.attn.w_q", "blocks.0.pe.table", "blocks.1.pe.table"}
    assert all(isinstance(v, np.ndarray) for v in state.values())
    assert meta["source_kind"] == "pe-probe-checkpoint" and meta["pe_params"] == ["blocks.0.pe.table",
                                                                                  "blocks.1.pe.table"]
    assert meta["step"] == 120 and meta["epoch"] == 3 and meta["ground_truth"].n == 16
    assert find_pe_params(state, meta) == ["blocks.0.pe.table", "blocks.1.pe.table"]


# ----------------------------------------------------------------------------------- Hugging Face folders


def _hf_folder(tmp_path: Path, name: str, config: dict, tensors: dict, fmt: str) -> Path:
    folder = tmp_path / f"{name}-{fmt}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        save_file(tensors, str(folder / "model.safetensors"))
    else:
        torch.save(tensors, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_bert_with_position_ids_buffer(tmp_path, fmt, grid_table) -> None:
    tensors = {"embeddings.word_embeddings.weight": torch.randn(30, 8),
               "embeddings.position_embeddings.weight": torch.tensor(grid_table, dtype=torch.float32),
               "embeddings.token_type_embeddings.weight": torch.randn(2, 8),
               "embeddings.position_ids": torch.arange(16).unsqueeze(0)}
    folder = _hf_folder(tmp_path, "bert", {"model_type": "bert"}, tensors, fmt)
    lt = load_table(folder)
    assert lt.param == "embeddings.position_embeddings.weight" and lt.source_kind == "hf-folder"
    np.testing.assert_allclose(lt.table, grid_table, rtol=1e-6)
    weights = folder / ("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    assert lt.sha256 == _sha(weights) and lt.config == {"model_type": "bert"}
    assert "embeddings.position_ids" not in lt.candidates
    with pytest.raises(InputError, match="integer"):
        load_table(folder, param="embeddings.position_ids")


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_gpt2(tmp_path, fmt, grid_table) -> None:
    tensors = {"transformer.wte.weight": torch.randn(50, 8),
               "transformer.wpe.weight": torch.tensor(grid_table, dtype=torch.float32),
               "transformer.h.0.attn.c_attn.weight": torch.randn(8, 24)}
    folder = _hf_folder(tmp_path, "gpt2", {"model_type": "gpt2"}, tensors, fmt)
    lt = load_table(folder)
    assert lt.param == "transformer.wpe.weight" and lt.extra_tokens == 0
    np.testing.assert_allclose(lt.table, grid_table, rtol=1e-6)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_vit_drops_cls_token(tmp_path, fmt, rng) -> None:
    pe = rng.normal(size=(1, 1 + 4 * 4, 8)).astype(np.float32)
    tensors = {"vit.embeddings.cls_token": torch.randn(1, 1, 8),
               "vit.embeddings.position_embeddings": torch.tensor(pe),
               "vit.embeddings.patch_embeddings.projection.weight": torch.randn(8, 3, 2, 2)}
    folder = _hf_folder(tmp_path, "vit", {"model_type": "vit"}, tensors, fmt)
    lt = load_table(folder)
    assert lt.original_shape == (1, 17, 8) and lt.extra_tokens == 1
    np.testing.assert_allclose(lt.table, pe[0, 1:])
    assert any("CLS" in n and "4x4" in n for n in lt.notes)
    kept = load_table(folder, drop_extra_tokens=0)
    assert kept.table.shape == (17, 8) and kept.extra_tokens == 0


def test_deit_style_two_extra_tokens_from_name(tmp_path, rng) -> None:
    pe = rng.normal(size=(1, 2 + 9, 4))
    torch.save({"pos_embed": torch.tensor(pe), "cls_token": torch.zeros(1, 1, 4)}, tmp_path / "deit.pth")
    lt = load_table(tmp_path / "deit.pth")
    assert lt.extra_tokens == 2 and lt.table.shape == (9, 4)
    np.testing.assert_allclose(lt.table, pe[0, 2:])


def test_square_pos_embed_keeps_all_rows(tmp_path, rng) -> None:
    torch.save({"pos_embed": torch.tensor(rng.normal(size=(1, 16, 4)))}, tmp_path / "noclass.pth")
    assert load_table(tmp_path / "noclass.pth").extra_tokens == 0


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hf_opt_drops_two_offset_rows(tmp_path, fmt, rng) -> None:
    pe = rng.normal(size=(2 + 16, 8)).astype(np.float32)
    tensors = {"model.decoder.embed_tokens.weight": torch.randn(40, 8),
               "model.decoder.embed_positions.weight": torch.tensor(pe)}
    folder = _hf_folder(tmp_path, "opt", {"model_type": "opt"}, tensors, fmt)
    lt = load_table(folder)
    assert lt.param == "model.decoder.embed_positions.weight" and lt.extra_tokens == 2
    np.testing.assert_allclose(lt.table, pe[2:])
    assert any("offset" in n for n in lt.notes)
    assert load_table(folder, drop_extra_tokens=0).table.shape == (18, 8)


def test_opt_without_config_still_detected(tmp_path, rng) -> None:
    torch.save({"model.decoder.embed_positions.weight": torch.tensor(rng.normal(size=(2 + 32, 4)))},
               tmp_path / "opt.bin")
    assert load_table(tmp_path / "opt.bin").extra_tokens == 2


def test_hf_sharded_safetensors(tmp_path, grid_table) -> None:
    folder = tmp_path / "sharded"
    folder.mkdir()
    save_file({"a.weight": torch.randn(3, 3)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"embeddings.position_embeddings.weight": torch.tensor(grid_table)},
              str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                            "embeddings.position_embeddings.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    lt = load_table(folder)
    np.testing.assert_allclose(lt.table, grid_table)
    assert lt.config is None and any("shards" in n for n in lt.notes)


def test_folder_without_weights(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match="no model.safetensors or pytorch_model.bin"):
        load_table(tmp_path)


# --------------------------------------------------------------------------------------- per-layer tables


def test_per_layer_checkpoint_index_mean_out_of_range(tmp_path, grid_table) -> None:
    torch.save(_checkpoint(grid_table, n_layers=4), tmp_path / "c.pt")
    default = load_table(tmp_path / "c.pt")
    assert default.layer == 0 and default.n_layers == 4
    assert any("4 per-layer tables; analysing layer 0" in n for n in default.notes)
    np.testing.assert_allclose(default.table, grid_table)
    third = load_table(tmp_path / "c.pt", layer=2)
    np.testing.assert_allclose(third.table, grid_table + 2)
    assert third.param == "blocks.2.pe.table" and third.layer == 2
    assert load_table(tmp_path / "c.pt", layer="3").layer == 3  # CLI passes text
    mean = load_table(tmp_path / "c.pt", layer="mean")
    np.testing.assert_allclose(mean.table, grid_table + 1.5)
    assert mean.layer == "mean" and mean.param == [f"blocks.{i}.pe.table" for i in range(4)]
    with pytest.raises(InputError, match=r"out of range.*0\.\.3"):
        load_table(tmp_path / "c.pt", layer=4)
    with pytest.raises(InputError, match="out of range"):
        load_table(tmp_path / "c.pt", layer=-1)


def test_param_naming_a_per_layer_table_records_its_layer_and_conflicts_are_named(tmp_path, grid_table) -> None:
    torch.save(_checkpoint(grid_table, n_layers=4), tmp_path / "c.pt")
    by_name = load_table(tmp_path / "c.pt", param="blocks.2.pe.table")
    assert by_name.layer == 2 and by_name.param == "blocks.2.pe.table"  # what --layer 2 would pick
    np.testing.assert_allclose(by_name.table, grid_table + 2)
    assert load_table(tmp_path / "c.pt", param="blocks.2.pe.table", layer=2).layer == 2  # the same choice twice
    with pytest.raises(InputError, match="--param and --layer both choose the table.*layer 2"):
        load_table(tmp_path / "c.pt", param="blocks.2.pe.table", layer=1)
    assert load_table(tmp_path / "c.pt", param="embed.weight").layer is None  # not a per-layer PE table


def test_per_layer_found_by_name_sorted_numerically(tmp_path, grid_table) -> None:
    # layer 10 must come after layer 2 (numeric, not string, order)
    sd = {f"blocks.{i}.pe.table": torch.tensor(grid_table * 0 + i) for i in (10, 2, 0, 1)}
    sd["blocks.0.mlp.weight"] = torch.randn(8, 8)
    torch.save(sd, tmp_path / "sd.pt")
    state, meta = load_state(tmp_path / "sd.pt")
    assert find_pe_params(state, meta) == ["blocks.0.pe.table", "blocks.1.pe.table", "blocks.2.pe.table",
                                           "blocks.10.pe.table"]
    lt = load_table(tmp_path / "sd.pt", layer=3)
    assert lt.n_layers == 4 and lt.param == "blocks.10.pe.table" and lt.table[0, 0] == 10
    # --layer counts tables, not block numbers: the note says which table each index is
    assert any("not the block numbers" in n and "3=blocks.10.pe.table" in n for n in lt.notes)


def test_per_layer_numbered_from_zero_has_no_gap_note(tmp_path, grid_table) -> None:
    torch.save(_checkpoint(grid_table, n_layers=4), tmp_path / "c.pt")
    assert not any("block numbers" in n for n in load_table(tmp_path / "c.pt", layer=3).notes)


def test_single_table_rejects_layer_1(tmp_path, grid_table) -> None:
    np.save(tmp_path / "t.npy", grid_table)
    assert load_table(tmp_path / "t.npy", layer=0).layer is None
    with pytest.raises(InputError, match="out of range"):
        load_table(tmp_path / "t.npy", layer=1)
    with pytest.raises(InputError, match="one analysis per layer"):
        load_table(tmp_path / "t.npy", layer="all")


# ----------------------------------------------------------------------------------- safety and errors


class _Exploit:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_run(tmp_path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"pos_embed": torch.zeros(4, 4), "payload": _Exploit(marker)}, tmp_path / "evil.pt")
    with pytest.raises(InputError, match="refused to load: the file contains pickled code") as e:
        load_table(tmp_path / "evil.pt")
    assert "\n" not in str(e.value) and "safetensors" in str(e.value)
    with pytest.raises(InputError, match="refused"):
        load_state(tmp_path / "evil.pt")
    assert not marker.exists()
    # the payload is real: an unsafe load runs it (proves the test above could have failed)
    control = tmp_path / "control"
    torch.save({"payload": _Exploit(control)}, tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert control.exists()


def test_legacy_format_with_code_is_named_as_such_and_not_run(tmp_path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"pos_embed": torch.zeros(4, 4), "payload": _Exploit(marker)}, tmp_path / "evil.pt",
               _use_new_zipfile_serialization=False)  # several pickles in a row, the object in the 4th
    with pytest.raises(InputError, match="refused to load: the file contains pickled code"):
        load_table(tmp_path / "evil.pt")
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"\x80\x02garbage" * 10, bytes(range(256)) * 4])
def test_unreadable_torch_files_never_advise_an_unsafe_load(tmp_path, content) -> None:
    (tmp_path / "bad.pt").write_bytes(content)
    with pytest.raises(InputError, match="not a readable torch file") as e:
        load_table(tmp_path / "bad.pt")
    msg = str(e.value)
    assert "\n" not in msg and "\x1b" not in msg and "weights_only" not in msg and "re-" in msg


def test_unknown_param_lists_candidates(tmp_path, grid_table) -> None:
    torch.save({"pos_emb.weight": torch.tensor(grid_table), "head.weight": torch.randn(3, 8)}, tmp_path / "s.pt")
    with pytest.raises(InputError, match=r"no tensor named 'wpe'.*pos_emb\.weight, head\.weight"):
        load_table(tmp_path / "s.pt", param="wpe")
    with pytest.raises(InputError, match="only 3 positions"):
        load_table(tmp_path / "s.pt", param="head.weight")


def test_param_suffix_match_and_ambiguity(tmp_path, grid_table) -> None:
    t = torch.tensor(grid_table)
    torch.save({"text.embeddings.position_embedding.weight": t,
                "vision.embeddings.position_embedding.weight": t + 1}, tmp_path / "clip.pt")
    with pytest.raises(InputError, match="several possible PE tables.*--param"):
        load_table(tmp_path / "clip.pt")
    lt = load_table(tmp_path / "clip.pt", param="vision.embeddings.position_embedding.weight")
    np.testing.assert_allclose(lt.table, grid_table + 1)
    with pytest.raises(InputError, match="matches several"):
        load_table(tmp_path / "clip.pt", param="position_embedding.weight")


def test_no_pe_found_says_pass_param(tmp_path) -> None:
    torch.save({"encoder.weight": torch.randn(16, 8), "decoder.weight": torch.randn(8, 16),
                "relative_position_bias_table": torch.randn(49, 2)}, tmp_path / "s.pt")
    with pytest.raises(InputError, match=r"no positional-encoding table found.*pass --param NAME.*encoder\.weight"):
        load_table(tmp_path / "s.pt")
    (tmp_path / "cfg").mkdir()
    torch.save({"format": "pe-probe-checkpoint/1", "model": {"w": torch.randn(4, 4), "v": torch.randn(4, 4)},
                "pe_params": [], "config": {"pe": "rope"}}, tmp_path / "rope.pt")
    with pytest.raises(InputError, match="records no PE table"):
        load_table(tmp_path / "rope.pt")


def test_empty_pe_params_is_never_overridden_by_names(tmp_path, grid_table) -> None:
    """A relative-PE run stores offset tables, and may carry a PE-looking name: [] still means no table."""
    from pe_probe.errors import NoPETableError

    ckpt = _checkpoint(grid_table)
    ckpt.update(pe_params=[], config={"pe": {"kind": "relative"}})
    ckpt["model"]["blocks.0.attn.pe.offset_table"] = torch.randn(31, 8)
    torch.save(ckpt, tmp_path / "rel.pt")  # still holds blocks.0.pe.table: must not be guessed
    with pytest.raises(NoPETableError, match="records no PE table.*relative"):
        load_table(tmp_path / "rel.pt")
    assert load_table(tmp_path / "rel.pt", param="blocks.0.pe.table").table.shape == grid_table.shape
    # without our metadata, a relative offset table is not taken for a table of positions
    torch.save({"blocks.0.attn.pe.offset_table": torch.randn(31, 8), "embed.weight": torch.randn(5, 8)},
               tmp_path / "plain.pt")
    with pytest.raises(InputError, match="no positional-encoding table found"):
        load_table(tmp_path / "plain.pt")


def test_run_folders_given_as_model_folders_get_the_right_hint(tmp_path, grid_table) -> None:
    run = tmp_path / "sweep" / "run-0"
    run.mkdir(parents=True)
    torch.save(_checkpoint(grid_table), run / "last.pt")
    with pytest.raises(InputError, match=r"a training run folder: analyse .*last\.pt"):
        load_table(run)
    with pytest.raises(InputError, match=r"a folder of runs: .*pe-probe compare .*sweep/\*/"):
        load_table(tmp_path / "sweep")
    np.save(tmp_path / "t3.npy", np.zeros((4, 4, 4)))
    with pytest.raises(InputError, match="reshape it") as e:  # a raw table has no --param to pass
        load_table(tmp_path / "t3.npy")
    assert "--param" not in str(e.value)


def test_nan_names_the_tensor(tmp_path, grid_table) -> None:
    bad = grid_table.copy()
    bad[5, 2] = np.nan
    torch.save({"wpe.weight": torch.tensor(bad)}, tmp_path / "n.pt")
    with pytest.raises(InputError, match=r"wpe\.weight.*NaN or Inf.*row 5"):
        load_table(tmp_path / "n.pt")


def test_too_few_positions(tmp_path, rng) -> None:
    np.save(tmp_path / "small.npy", rng.normal(size=(3, 4)))
    with pytest.raises(InputError, match="only 3 positions.*at least 4"):
        load_table(tmp_path / "small.npy")
    np.save(tmp_path / "ok.npy", rng.normal(size=(10, 4)))
    with pytest.raises(InputError, match="only 2 positions"):
        load_table(tmp_path / "ok.npy", positions="0:2")


def test_1d_and_3d_tensors_refused(tmp_path) -> None:
    torch.save({"wpe.weight": torch.randn(16)}, tmp_path / "one.pt")
    with pytest.raises(InputError, match=r"shape \(16,\).*2-D \(positions x dims\)"):
        load_table(tmp_path / "one.pt")
    torch.save({"pos_embed": torch.randn(2, 16, 8)}, tmp_path / "three.pt")
    with pytest.raises(InputError, match=r"shape \(2, 16, 8\).*2-D"):
        load_table(tmp_path / "three.pt")
    # leading singleton dims are fine
    torch.save({"pos_embed": torch.randn(1, 1, 16, 8)}, tmp_path / "lead.pt")
    assert load_table(tmp_path / "lead.pt").table.shape == (16, 8)


@pytest.mark.parametrize("positions, expected", [("0:8", (0, 8)), (":8", (0, 8)), ("8:", (8, 16)),
                                                 (" 2 : 10 ", (2, 10)), ("-4:", (12, 16)), ((None, 5), (0, 5)),
                                                 ("0:16", (0, 16)), ("-16:", (0, 16))])
def test_positions_slices(tmp_path, grid_table, positions, expected) -> None:
    np.save(tmp_path / "t.npy", grid_table)
    lt = load_table(tmp_path / "t.npy", positions=positions)
    assert lt.positions == expected
    np.testing.assert_allclose(lt.table, grid_table[expected[0]:expected[1]])


@pytest.mark.parametrize("positions, match", [(p, "malformed --positions") for p in
                                              ["0-8", "a:b", "1:2:3", "0:8junk", "8", "", (1, 2, 3), (1.5, 4)]]
                         + [("8:4", "selects no rows"), ("20:30", "reaches past")])
def test_malformed_or_empty_positions(tmp_path, grid_table, positions, match) -> None:
    np.save(tmp_path / "t.npy", grid_table)
    with pytest.raises(InputError, match=match):
        load_table(tmp_path / "t.npy", positions=positions)


@pytest.mark.parametrize("positions", ["0:1000", "0:17", "-17:", (0, 20), "20:30"])
def test_positions_past_the_table_refused_not_clamped(tmp_path, grid_table, positions) -> None:
    """A Python slice would clamp 0:1000 to the 16 rows, silently analysing fewer rows than asked."""
    np.save(tmp_path / "t.npy", grid_table)
    with pytest.raises(InputError, match=r"reaches past the 16-row table.*0:16"):
        load_table(tmp_path / "t.npy", positions=positions)


def test_non_numeric_csv_names_the_line(tmp_path) -> None:
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,4\n5,x\n7,8\n")
    with pytest.raises(InputError, match="line 4, column 2"):
        load_table(tmp_path / "t.csv")


def test_missing_file_and_unsupported_suffix(tmp_path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_table(tmp_path / "missing.pt")
    (tmp_path / "t.h5").write_bytes(b"x")
    with pytest.raises(InputError, match="unsupported file type"):
        load_table(tmp_path / "t.h5")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(InputError, match="junk.pt: not a readable torch file"):
        load_table(tmp_path / "junk.pt")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 3)
    with pytest.raises(InputError, match="not a readable .safetensors"):
        load_table(tmp_path / "junk.safetensors")


def test_legacy_torch_format_and_bfloat16_state(tmp_path, grid_table) -> None:
    torch.save({"wpe.weight": torch.tensor(grid_table)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    np.testing.assert_allclose(load_table(tmp_path / "old.pt").table, grid_table)
    torch.save({"wpe.weight": torch.tensor(grid_table).bfloat16()}, tmp_path / "bf.pt")
    np.testing.assert_allclose(load_table(tmp_path / "bf.pt").table, grid_table, rtol=1e-2, atol=1e-2)


def test_param_on_raw_table_is_refused(tmp_path, grid_table) -> None:
    np.save(tmp_path / "t.npy", grid_table)
    with pytest.raises(InputError, match="single unnamed table"):
        load_table(tmp_path / "t.npy", param="wpe.weight")


def test_row_centred_flag(tmp_path, grid_table) -> None:
    centred = grid_table - grid_table.mean(axis=1, keepdims=True)
    np.save(tmp_path / "c.npy", centred)
    np.save(tmp_path / "u.npy", grid_table + 1.0)
    lt = load_table(tmp_path / "c.npy")
    assert lt.row_centred and any("row-centred" in n for n in lt.notes)
    assert not load_table(tmp_path / "u.npy").row_centred


def test_candidates_rank_pe_names_first(tmp_path, grid_table) -> None:
    torch.save({"a.weight": torch.randn(3, 3), "z.pos_emb.weight": torch.tensor(grid_table),
                "b.bias": torch.randn(3), "ids": torch.arange(4)[None]}, tmp_path / "s.pt")
    lt = load_table(tmp_path / "s.pt")
    assert lt.candidates == ["z.pos_emb.weight", "a.weight"]


def test_weights_file_reads_its_hf_config(tmp_path, rng) -> None:
    pe = rng.normal(size=(1, 1 + 9, 4)).astype(np.float32)
    folder = _hf_folder(tmp_path, "vit", {"model_type": "vit"},
                        {"embeddings.position_embeddings": torch.tensor(pe)}, "safetensors")
    lt = load_table(folder / "model.safetensors")
    assert lt.source_kind == "safetensors" and lt.config == {"model_type": "vit"} and lt.extra_tokens == 1


def test_future_checkpoint_format_is_refused(tmp_path, grid_table) -> None:
    ckpt = _checkpoint(grid_table)
    ckpt["format"] = "pe-probe-checkpoint/2"
    torch.save(ckpt, tmp_path / "c.pt")
    with pytest.raises(InputError, match="not supported.*upgrade"):
        load_table(tmp_path / "c.pt")


def test_import_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, pe_probe.io, pe_probe.groundtruth; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_hf_sharded_pytorch_bin(tmp_path, grid_table) -> None:
    folder = tmp_path / "bin-shards"
    folder.mkdir()
    torch.save({"h.0.w": torch.randn(3, 3)}, folder / "pytorch_model-00001-of-00002.bin")
    torch.save({"wpe.weight": torch.tensor(grid_table)}, folder / "pytorch_model-00002-of-00002.bin")
    index = {"weight_map": {"h.0.w": "pytorch_model-00001-of-00002.bin",
                            "wpe.weight": "pytorch_model-00002-of-00002.bin"}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    state, meta = load_state(folder)
    assert set(state) == {"h.0.w", "wpe.weight"} and meta["source_kind"] == "hf-folder"
    expected = hashlib.sha256(b"".join((folder / f).read_bytes() for f in dict.fromkeys(index["weight_map"].values())))
    assert meta["sha256"] == expected.hexdigest()
    np.testing.assert_allclose(load_table(folder).table, grid_table)


def test_hf_shard_index_is_authoritative(tmp_path, grid_table) -> None:
    """Each tensor comes from the shard the index names (as in transformers); unlisted ones are ignored."""
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    save_file({"transformer.wpe.weight": torch.tensor(grid_table, dtype=torch.float32)},
              str(folder / "model-00001-of-00002.safetensors"))
    save_file({"transformer.wpe.weight": torch.zeros(16, 8), "x": torch.ones(2, 2), "y": torch.ones(3)},  # stale wpe
              str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"transformer.wpe.weight": "model-00001-of-00002.safetensors",
                            "x": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    lt = load_table(folder)
    np.testing.assert_allclose(lt.table, grid_table, rtol=1e-6)  # shard 2's zeros won before
    assert any("ignored 1 tensor(s)" in n and "(e.g. y)" in n for n in lt.notes)
    assert set(load_state(folder)[0]) == {"transformer.wpe.weight", "x"}
    # an index naming a tensor its shard does not hold: refused, not another tensor analysed instead
    index["weight_map"] = {"transformer.wpe.weight": "model-00002-of-00002.safetensors", "pos": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=r"lists tensor 'pos' in model-00002-of-00002.safetensors, which does not hold it"):
        load_table(folder)


@pytest.mark.parametrize("given, parsed", [(None, None), (3, 3), (np.int64(2), 2), ("3", 3), (" 2 ", 2), ("-1", -1),
                                           ("+1", 1), ("MEAN", "mean"), (" all", "all")])
def test_parse_layer_accepts_what_every_entry_point_takes(given, parsed) -> None:
    from pe_probe.validation import parse_layer

    assert parse_layer(given) == parsed and type(parse_layer(given)) is type(parsed)


@pytest.mark.parametrize("bad", [0.0, 1.5, True, False, "x", "1.0", "", "1e2", [1]])
def test_parse_layer_refuses_the_rest(bad) -> None:
    from pe_probe.validation import parse_layer

    with pytest.raises(ValueError):
        parse_layer(bad)


def test_a_negative_layer_is_out_of_range_as_text_or_integer(tmp_path, grid_table) -> None:
    # the CLI passes text: '-1' must get the same range message as the integer -1 (not 'not understood')
    torch.save(_checkpoint(grid_table, n_layers=4), tmp_path / "c.pt")
    for layer in (-1, "-1"):
        with pytest.raises(InputError, match=r"--layer -1 is out of range.*valid: 0\.\.3"):
            load_table(tmp_path / "c.pt", layer=layer)
    with pytest.raises(InputError, match=r"--layer '1\.0' is not understood"):
        load_table(tmp_path / "c.pt", layer="1.0")


# ---- loader choices pinned against round trips and hand values

def test_mae_style_model_takes_the_well_known_pos_embed_not_the_decoder_one(tmp_path, rng) -> None:
    # timm MAE: pos_embed (encoder) and decoder_pos_embed; only pos_embed is a well-known name, so it is
    # taken without ambiguity; a PE-looking name must not outrank or tie with it.
    enc = rng.normal(size=(1, 17, 8)).astype(np.float32)
    state = {"pos_embed": torch.tensor(enc), "decoder_pos_embed": torch.tensor(rng.normal(size=(1, 17, 4)), dtype=torch.float32),
             "cls_token": torch.zeros(1, 1, 8)}
    path = tmp_path / "mae.pt"
    torch.save(state, path)
    lt = load_table(path, drop_extra_tokens=0)
    assert lt.param == "pos_embed"
    np.testing.assert_array_equal(lt.table, enc[0].astype(np.float64))
    # ...and says so: the decoder's table is named beside the pick, with the option that analyses it
    assert any("decoder_pos_embed" in n and "analysing pos_embed" in n and "--param" in n for n in lt.notes)


def test_training_checkpoint_uses_the_model_weights_not_the_ema_copy(tmp_path, rng) -> None:
    # {"model": ..., "model_ema": ...} (timm/DeiT-style training checkpoints): the live weights are analysed.
    live = rng.normal(size=(16, 8)).astype(np.float32)
    ema = rng.normal(size=(16, 8)).astype(np.float32)
    ckpt = {"model_ema": {"wpe.weight": torch.tensor(ema)}, "epoch": 3,
            "model": {"wpe.weight": torch.tensor(live)}, "optimizer": {"lr": 0.1}}
    path = tmp_path / "train.pt"
    torch.save(ckpt, path)
    lt = load_table(path)
    np.testing.assert_array_equal(lt.table, live.astype(np.float64))
    assert any("'model'" in n for n in lt.notes)


def test_provenance_records_the_rows_dropped_and_the_positions_kept(tmp_path, rng) -> None:
    # A ViT table: 1 CLS row + a 4x4 patch grid; provenance must say 1 row was dropped (what metrics.json records).
    table = rng.normal(size=(1, 17, 8)).astype(np.float32)
    save_file({"embeddings.position_embeddings": torch.tensor(table),
               "embeddings.cls_token": torch.tensor(rng.normal(size=(1, 1, 8)), dtype=torch.float32)},
              str(tmp_path / "vit.safetensors"))
    lt = load_table(tmp_path / "vit.safetensors", positions="2:10")
    prov = lt.provenance()
    assert prov["extra_tokens"] == 1 and lt.extra_tokens == 1
    assert prov["positions"] == [2, 10] and prov["original_shape"] == [1, 17, 8]
    np.testing.assert_array_equal(lt.table, table[0, 3:11].astype(np.float64))


def test_param_suffix_matches_whole_dotted_parts_only(tmp_path, rng) -> None:
    # "pe.weight" names h.pe.weight; h.wpe.weight merely ends with the same letters and is not a match.
    pe = rng.normal(size=(8, 4)).astype(np.float32)
    torch.save({"h.wpe.weight": torch.tensor(rng.normal(size=(8, 4)), dtype=torch.float32),
                "h.pe.weight": torch.tensor(pe)}, tmp_path / "m.pt")
    lt = load_table(tmp_path / "m.pt", param="pe.weight")
    assert lt.param == "h.pe.weight"
    np.testing.assert_array_equal(lt.table, pe.astype(np.float64))
    torch.save({"h.wpe.weight": torch.tensor(pe)}, tmp_path / "only.pt")
    with pytest.raises(InputError, match="no tensor named 'pe.weight'"):
        load_table(tmp_path / "only.pt", param="pe.weight")


def _save_line_checkpoint(path: Path, name: str, table: np.ndarray) -> np.ndarray:
    """Save a pe-probe checkpoint holding ``table`` (as float32) under ``name`` with a line ground truth of its rows."""
    table = table.astype(np.float32)
    n = len(table)
    torch.save({"format": "pe-probe-checkpoint/1", "model": {name: torch.tensor(table)}, "config": {"pe": "learned"},
                "pe_params": [name], "ground_truth": {"coords": torch.arange(n, dtype=torch.float64)[:, None],
                                                      "kind": "line", "shape": [n]}}, path)
    return table


def test_a_checkpoint_whose_ground_truth_matches_every_row_keeps_every_row(tmp_path, rng) -> None:
    # 17 rows under a ViT-looking name would read as CLS + 4x4 patches, but the checkpoint's own ground truth
    # (line:17) says every row is a position: nothing is dropped.
    table = _save_line_checkpoint(tmp_path / "ckpt.pt", "pos_embed", rng.normal(size=(17, 8)))
    lt = load_table(tmp_path / "ckpt.pt")
    assert lt.extra_tokens == 0 and lt.table.shape == (17, 8)
    np.testing.assert_array_equal(lt.table, table.astype(np.float64))
    assert lt.ground_truth is not None and lt.ground_truth.n == 17


def test_positions_do_not_slice_a_ground_truth_that_no_longer_lines_up_with_the_rows(tmp_path, rng) -> None:
    # 16 rows with a line:16 ground truth; dropping 1 row by hand shifts the table against its ground truth, so
    # slicing the ground truth with the same 0:8 would pair table row 1 with position 0. It is left whole (its
    # mismatch is then reported by the analysis) rather than silently misaligned.
    table = _save_line_checkpoint(tmp_path / "ckpt.pt", "blocks.0.pe.table", rng.normal(size=(16, 8)))
    lt = load_table(tmp_path / "ckpt.pt", drop_extra_tokens=1, positions="0:8")
    np.testing.assert_array_equal(lt.table, table[1:9].astype(np.float64))
    assert lt.ground_truth.n == 16
    np.testing.assert_array_equal(lt.ground_truth.coords[:, 0], np.arange(16))
    aligned = load_table(tmp_path / "ckpt.pt", positions="3:11")  # no rows dropped: sliced alongside
    np.testing.assert_array_equal(aligned.ground_truth.coords[:, 0], np.arange(3, 11))
