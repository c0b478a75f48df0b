"""Checkpoint contents torch's weights-only loader accepts but pe-probe's reports and models cannot take as
they are, from a second adversarial review: each exited 1 with a traceback. A value JSON cannot hold in a
config or metrics (a tensor, a set, bytes, a complex number) is now written as a plain value; nesting deeper
than any real config, a nested (ragged) tensor, are one-line errors (exit 2); a float8 weight evaluates; a complex
weight is refused where a model or a view would have dropped its imaginary part."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from pe_probe.cli import main
from pe_probe.errors import InputError
from pe_probe.io import MAX_META_DEPTH, plain_meta

FAST = ["--n-perm", "9", "--n-boot", "0", "--methods", "pca", "--quiet"]


def _checkpoint(folder, config: dict, metrics: dict | None = None):
    """A pe-probe checkpoint of a 4x4 grid's table, with this config and these metrics."""
    g = np.array([(i, j) for i in range(4) for j in range(4)], dtype=np.float32)
    table = torch.tensor(g @ np.random.default_rng(0).normal(size=(2, 8)), dtype=torch.float32)
    path = folder / "ck.pt"
    torch.save({"format": "pe-probe-checkpoint/1", "model": {"pe.table": table}, "config": config,
                "pe_params": ["pe.table"], "ground_truth": {"coords": torch.tensor(g), "kind": "grid", "shape": [4, 4]},
                "step": 0, "epoch": 0, "metrics": metrics or {"test_acc": 0.5}}, path)
    return path


def _tiny_run(tmp_path):
    out = tmp_path / "run1"
    assert main(["train", "lst", "--out", str(out), "--d-model", "16", "--layers", "2", "--heads", "2", "--epochs", "1",
                 "--n-per-level", "12", "--batch-size", "32", "--min-jaccard", "0.5"]) == 0
    return out / "last.pt"


def test_plain_meta_against_json():
    value = {"t": torch.tensor([1.5, 2.0]), "scalar": torch.tensor(0.25, dtype=torch.bfloat16), "s": {3, 1, 2},
             "b": b"\xffab", "c": 1 + 2j, 4: (1, None), "n": np.float32(0.5), "i": torch.tensor([1, 2])}
    plain = plain_meta(value, "config", "x.pt")
    assert plain == {"t": [1.5, 2.0], "scalar": 0.25, "s": [1, 2, 3], "b": "\\xffab", "c": "(1+2j)", "4": [1, None],
                     "n": 0.5, "i": [1, 2]}
    assert json.loads(json.dumps(plain)) == plain
    assert plain_meta(torch.tensor([1e-300], dtype=torch.float64), "m", "x")[0] == 1e-300  # float64 kept exactly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: nested tensors are a prototype
        ragged = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    assert "does not read into a config" in plain_meta({"r": ragged}, "config", "x")["r"]
    deep: object = 1
    for _ in range(MAX_META_DEPTH):
        deep = {"a": deep}
    plain_meta(deep, "config", "x.pt")  # as deep as allowed
    with pytest.raises(InputError, match=f"x.pt: its config is nested deeper than {MAX_META_DEPTH} levels"):
        plain_meta({"a": deep}, "config", "x.pt")


@pytest.mark.parametrize("extra", [torch.ones(3), {1, 2}, b"\xff", 1 + 2j])
def test_a_config_or_metric_json_cannot_hold_is_written_as_a_plain_value(tmp_path, capsys, extra):
    ck = _checkpoint(tmp_path, {"extra": extra}, {"test_acc": torch.tensor(0.5)})
    assert main(["analyze", str(ck), "--out", str(tmp_path / "out"), *FAST]) == 0
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert doc["provenance"]["config"]["extra"] == plain_meta(extra, "config", "")
    assert doc["provenance"]["checkpoint_metrics"]["test_acc"] == 0.5
    capsys.readouterr()
    assert main(["analyze", str(ck), "--json", *FAST]) == 0
    assert json.loads(capsys.readouterr().out)["provenance"]["config"]["extra"] == plain_meta(extra, "config", "")
    (tmp_path / "b").mkdir()
    ck2 = _checkpoint(tmp_path / "b", {"extra": extra})
    assert main(["compare", str(ck), str(ck2), "--by", "extra", "--out", str(tmp_path / "cmp"),
                 "--n-perm", "0", "--n-boot", "0", "--methods", "pca"]) == 0


def test_a_config_nested_past_any_real_one_is_refused(tmp_path, capsys):
    deep: object = 1
    for _ in range(200):
        deep = {"a": deep}
    ck = _checkpoint(tmp_path, {"extra": deep})
    (tmp_path / "b").mkdir()
    ck2 = _checkpoint(tmp_path / "b", {"extra": deep})
    for argv in (["analyze", str(ck), "--out", str(tmp_path / "out")],
                 ["compare", str(ck), str(ck2), "--out", str(tmp_path / "cmp")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is nested deeper than" in err
    folder = tmp_path / "hf"
    folder.mkdir()
    from safetensors.torch import save_file

    save_file({"pos_embedding": torch.randn(16, 8)}, str(folder / "model.safetensors"))
    for text in ("[" * 100_000 + "]" * 100_000, '{"a":' * 500 + "1" + "}" * 500):  # json's own limit; ours
        (folder / "config.json").write_text(text)
        assert main(["analyze", str(folder), "-g", "grid:4x4"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "config.json" in err and "nested deeper" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cmp").exists()


def test_nested_tensors_are_refused_in_one_line(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ragged = torch.nested.nested_tensor([torch.randn(16, 8), torch.randn(3, 8)])
    torch.save({"pos_embedding": ragged}, tmp_path / "sd.pt")
    torch.save(ragged, tmp_path / "top.pt")
    for name in ("sd.pt", "top.pt"):
        assert main(["analyze", str(tmp_path / name), "-g", "line:16"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is a nested (ragged) tensor" in err


def test_evaluate_a_float8_weight_and_refuse_a_nested_one(tmp_path, capsys):
    last = _tiny_run(tmp_path)
    ckpt = torch.load(last, weights_only=True)
    ckpt["model"]["blocks.0.attn.qkv.weight"] = ckpt["model"]["blocks.0.attn.qkv.weight"].to(torch.float8_e4m3fn)
    torch.save(ckpt, tmp_path / "f8.pt")
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "f8.pt")]) == 0  # weights load as float32, as a bf16 one does
    ckpt = torch.load(last, weights_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ckpt["model"]["blocks.0.pe.table"] = torch.nested.nested_tensor([ckpt["model"]["blocks.0.pe.table"]] * 2)
    torch.save(ckpt, tmp_path / "nested.pt")
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "nested.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "blocks.0.pe.table is a nested (ragged) tensor" in err
    # a complex weight: loading it dropped the imaginary part with a ComplexWarning, exit 0
    ckpt = torch.load(last, weights_only=True)
    ckpt["model"]["blocks.0.attn.qkv.weight"] = ckpt["model"]["blocks.0.attn.qkv.weight"].to(torch.complex64)
    torch.save(ckpt, tmp_path / "complex.pt")
    for argv, says in ((["evaluate"], "its weight blocks.0.attn.qkv.weight is a complex tensor (complex64)"),
                       (["analyze", "--view", "qk"], "blocks.0.attn.qkv.weight in"),
                       (["analyze", "--view", "attention"], "is a complex tensor")):
        capsys.readouterr()
        assert main([argv[0], str(tmp_path / "complex.pt"), *argv[1:]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err and "complex" in err, err
    # resuming the run: a config.json nested past any real config was a RecursionError traceback
    for text in ("[" * 100_000 + "]" * 100_000, '{"a":' * 500 + "1" + "}" * 500):
        (last.parent / "config.json").write_text(text)
        assert main(["train", "lst", "--out", str(last.parent), "--d-model", "16", "--layers", "2", "--heads", "2",
                     "--epochs", "2", "--n-per-level", "12", "--batch-size", "32", "--min-jaccard", "0.5"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "config.json is nested deeper than 64 levels" in err, err


def test_two_tensors_with_one_dotted_name_are_refused_not_one_picked(tmp_path, capsys):
    torch.save({"a": {"b": torch.randn(16, 4)}, "a.b": torch.randn(16, 4)}, tmp_path / "amb.pt")
    assert main(["analyze", str(tmp_path / "amb.pt"), "-g", "line:16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "two tensors are named a.b" in err
    torch.save({"a": {"b": torch.randn(16, 4)}, "a.c": torch.randn(16, 4)}, tmp_path / "fine.pt")
    assert main(["analyze", str(tmp_path / "fine.pt"), "-g", "line:16", "--param", "a.b", *FAST]) == 0
