"""Bad files and bad options from an adversarial review: each is a one-line error with exit code 2, no
traceback, and nothing left on disk (the project's rule for bad input)."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import torch

from pe_probe.cli import main

FAST = ["--n-perm", "10", "--n-boot", "10", "--n-null", "3", "--quiet"]


def refuse(argv, capsys, needle: str) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    return err


def _corrupt_files(tmp_path):
    (tmp_path / "text.pt").write_text("hello world\nthis is not torch\n")
    (tmp_path / "empty.npy").write_bytes(b"")
    np.save(tmp_path / "ok.npy", np.random.default_rng(0).normal(size=(16, 4)))
    (tmp_path / "trunc.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:100])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}] * 16, dtype=object), allow_pickle=True)
    (tmp_path / "empty.npz").write_bytes(b"")
    np.savez(tmp_path / "ok.npz", t=np.ones((16, 4)))
    (tmp_path / "trunc.npz").write_bytes((tmp_path / "ok.npz").read_bytes()[:60])
    (tmp_path / "bin.csv").write_bytes(bytes(range(128, 256)) * 3)
    (tmp_path / "text.npy").write_bytes(b"not npy")  # numpy takes it for a pickle and suggests loading it unsafely
    return tmp_path


@pytest.mark.parametrize("name,needle", [
    ("text.pt", "not a readable torch file"), ("empty.npy", "not a readable .npy"),
    ("trunc.npy", ".npy"), ("obj.npy", "not a plain numeric .npy"), ("empty.npz", "not a readable .npz"),
    ("trunc.npz", "not a readable .npz"), ("bin.csv", "not a text file"),
    ("text.npy", "not a .npy file (no NumPy header)"),
])
def test_corrupt_tables_ground_truths_and_references(tmp_path, capsys, name, needle):
    d = _corrupt_files(tmp_path)
    err = refuse(["analyze", d / name, "-g", "line:16", *FAST], capsys, needle)
    assert "allow_pickle" not in err and "pickle.load" not in err  # never advice to load a file unsafely
    if name.endswith((".npy", ".csv")):  # the same readers serve --ground-truth and --reference
        refuse(["analyze", d / "ok.npy", "-g", d / name, *FAST], capsys, needle)
        refuse(["analyze", d / "ok.npy", "-g", "line:16", "--reference", d / name, *FAST], capsys, needle)


def test_hugging_face_shard_index_is_checked(tmp_path, capsys):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a"]}))
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "no usable weight_map")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"pos_embed": "../x.safetensors"}}))
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "outside the model folder")


@pytest.mark.parametrize("argv,needle", [
    (["-g", "line:99999999999999999999"], "more than 1,000,000 positions"),
    (["-g", "grid:100000x100000"], "more than 1,000,000 positions"),
    (["-g", "line:16", "--n-perm", "99999999999999999999"], "argument --n-perm: expected a number <= 1,000,000"),
    (["-g", "line:16", "--n-boot", "99999999999999999999"], "argument --n-boot: expected a number <= 100,000"),
    (["-g", "line:16", "--n-null", "1001"], "argument --n-null: expected a number <= 1,000, got 1,001"),
    (["-g", "line:16", "--neighbours", "0"], "argument --neighbours: expected a number >= 1, got 0"),
    (["-g", "line:16", "--neighbours", "-1"], "argument --neighbours: expected a number >= 1, got -1"),
    (["-g", "line:16", "--seed", str(2**63)], "argument --seed: expected a number <= 9,223,372,036,854,775,807"),
    (["-g", "line:16", "--neighbours", "15"], "neighbours (--neighbours) must be below N/2 = 8 for this table"),
    (["-g", "line:16", "--neighbours", "8"], "choose a smaller k, at most 7"),  # gave trustworthiness > 1 before
    (["-g", "line:16", "--seed", "-1"], "expected a number >= 0"),
    (["-g", "line:16", "--attention-reference", "x.pt"], "--view attention only"),
    (["-g", "line:16", "--drop-extra-tokens", "16"], "--drop-extra-tokens 16 must be"),
])
def test_absurd_options_are_refused_before_any_work(tmp_path, capsys, argv, needle):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    refuse(["analyze", tmp_path / "t.npy", *FAST, *argv, "--out", tmp_path / "out"], capsys, needle)
    assert not (tmp_path / "out").exists()


def test_unwritable_or_self_replacing_out_is_refused_up_front(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    (tmp_path / "afile").write_text("x")
    refuse(["analyze", tmp_path / "t.npy", "-g", "line:16", "--out", tmp_path / "afile" / "x", *FAST], capsys,
           "is a file, not a folder")
    monkeypatch.chdir(tmp_path)
    refuse(["analyze", "t.npy", "-g", "line:16", "--out", ".", "--force", *FAST], capsys, "current folder")
    assert sorted(os.listdir(tmp_path)) == ["afile", "t.npy"]  # no staging or .old folders left behind


def test_finished_report_folder_has_the_usual_permissions(tmp_path, capsys):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    assert main(["analyze", str(tmp_path / "t.npy"), "-g", "line:16", "--out", str(tmp_path / "o"), "--no-figures",
                 *FAST]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700


def test_zero_width_and_integer_tables(tmp_path, capsys):
    torch.save({"pos_embed": torch.zeros(16, 0)}, tmp_path / "col0.pt")
    refuse(["analyze", tmp_path / "col0.pt", "-g", "line:16", *FAST], capsys, "no dimensions per position")
    np.save(tmp_path / "ints.npy", np.random.default_rng(0).integers(0, 9, size=(16, 4)))
    assert main(["analyze", str(tmp_path / "ints.npy"), "-g", "line:16", "--json", *FAST]) == 0  # numbers are numbers


def test_tampered_checkpoints_fail_cleanly(tmp_path, capsys):
    """A real checkpoint with its config or weights edited: every reader says so in one line."""
    from trainers.checkpoint import load_checkpoint
    from trainers.config import make_config
    from trainers.train import train

    cfg = make_config("quick", {"model.d_model": 8, "model.n_layers": 1, "optim.epochs": 1, "data.n_per_level": 8,
                                "data.min_jaccard": 0.5, "eval_every": 1, "ckpt_every": 1})
    train(cfg, tmp_path / "run", log=lambda *_: None)
    good = load_checkpoint(tmp_path / "run" / "last.pt")

    def tampered(name, edit):
        ck = {**good, "config": json.loads(json.dumps(good["config"])), "model": dict(good["model"])}
        edit(ck)
        torch.save(ck, tmp_path / name)
        return tmp_path / name

    heads0 = tampered("heads0.pt", lambda c: c["config"]["model"].update(n_heads=0))
    missing = tampered("missing.pt", lambda c: c["model"].pop("blocks.0.attn.qkv.weight"))
    config_str = tampered("configstr.pt", lambda c: c.update(config="oops"))
    for path, needle in ((heads0, "--heads must be an integer >= 1"), (missing, "do not rebuild the model")):
        refuse(["evaluate", path], capsys, needle)
        refuse(["analyze", path, "--view", "attention", *FAST], capsys, needle)
    refuse(["analyze", heads0, "--view", "qk", *FAST], capsys, "heads")
    refuse(["analyze", config_str, "--view", "qk", *FAST], capsys, "not a mapping")
    refuse(["evaluate", tmp_path / "run"], capsys, "is a folder, not a checkpoint file; pass")


def test_train_checks_ood_puzzles_and_out_before_writing(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("puzzles,solutions,condition\n123,1,Binary\n")
    refuse(["train", "lst", "--out", tmp_path / "t1", "--ood-puzzles", bad, "--epochs", "1"], capsys, "line 2")
    assert not (tmp_path / "t1").exists()
    (tmp_path / "afile").write_text("x")
    refuse(["train", "lst", "--out", tmp_path / "afile", "--epochs", "1"], capsys, "is a file, not a run folder")
    refuse(["train", "lst", "--out", tmp_path / "afile" / "x", "--epochs", "1"], capsys, "cannot create it")


def test_vit_ground_truth_counting_the_cls_row_gets_a_hint(tmp_path, capsys):
    pe = np.random.default_rng(0).normal(size=(1, 17, 8)).astype(np.float32)
    torch.save({"pos_embed": torch.tensor(pe), "cls_token": torch.zeros(1, 1, 8)}, tmp_path / "vit.pth")
    refuse(["analyze", tmp_path / "vit.pth", "-g", "line:17", *FAST], capsys, "--drop-extra-tokens 0")
    assert zipfile.is_zipfile(tmp_path / "vit.pth")
