"""Bad inputs a review found in `pe-probe demo / train / evaluate`, each now a one-line error with exit 2 and
nothing written: the demo writing into (and replacing files of) a folder of the user's own, an empty --out
taken as the current folder, sizes that made training impossible (tracebacks, hangs), and a checkpoint with
NaN weights evaluated to chance-level accuracies with exit 0."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

import trainers.demo
import trainers.ensemble
import trainers.train
import trainers.train_masked
from pe_probe.cli import main
from pe_probe.errors import InputError
from pe_probe.output import MARKER
from trainers.config import (MASKED_PRESETS, MAX_D_MODEL, MAX_EPOCHS, MAX_N_PER_LEVEL, PRESETS, make_config,
                             make_masked_config)
from trainers.demo import DEMO_MARKER, check_demo_dir, run_demo

torch.set_num_threads(1)


def _never(*args, **kwargs):
    raise AssertionError("reached the costly step although the input was bad")


def _refused(argv: list[str], capsys) -> str:
    """Run the CLI in-process; assert exit 2 with one error line and no traceback; return the line."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pe-probe: error: ") and "Traceback" not in err, err
    return err


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


# ----------------------------------------------------------------------------------------------
# 1. the demo's --out


def _users_folder(tmp_path: Path) -> Path:
    ws = tmp_path / "ws3"
    (ws / "compare").mkdir(parents=True)
    (ws / "summary.md").write_text("# my own notes\n")
    (ws / "compare" / "mine.txt").write_text("mine\n")
    return ws


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_the_demo_refuses_a_folder_of_the_user_s_files_force_or_not(tmp_path, monkeypatch, capsys, force):
    monkeypatch.setattr(trainers.demo, "train_ensemble", _never)
    ws = _users_folder(tmp_path)
    before = _tree(ws)
    err = _refused(["demo", "--out", str(ws), "--epochs", "1", "--n-per-level", "30", *force], capsys)
    assert f"--out {ws}" in err and "not a folder pe-probe demo wrote" in err and "new or empty folder" in err
    assert _tree(ws) == before  # summary.md and compare/mine.txt untouched, no marker added


def test_the_demo_refuses_a_training_run_s_folder_a_file_and_an_analyze_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trainers.demo, "train_ensemble", _never)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "last.pt").write_bytes(b"x")
    report = tmp_path / "report"
    report.mkdir()
    (report / MARKER).write_text("written by pe-probe\n")  # an analyze/compare report: not a demo folder
    (report / "index.html").write_text("<html>")
    for out in (run, report):
        before = _tree(out)
        assert "not a folder pe-probe demo wrote" in _refused(["demo", "--out", str(out)], capsys)
        assert _tree(out) == before
    (tmp_path / "f").write_text("x")
    assert "is a file" in _refused(["demo", "--out", str(tmp_path / "f")], capsys)


def test_the_demo_refuses_an_empty_out_and_the_current_folder_unless_it_is_a_demo_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trainers.demo, "train_ensemble", _never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    assert "empty path" in _refused(["demo", "--out", ""], capsys)
    assert "notes.txt" in _refused(["demo", "--out", "."], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    (tmp_path / "notes.txt").unlink()
    (tmp_path / DEMO_MARKER).write_text("")
    (tmp_path / "summary.md").write_text("# anything\n")
    assert check_demo_dir(".") == Path(".")  # marked: the demo's own, wherever it is


def test_demo_folders_new_and_old_are_accepted(tmp_path):
    assert check_demo_dir(tmp_path / "new" / "demo") == tmp_path / "new" / "demo"
    (tmp_path / "empty").mkdir()
    check_demo_dir(tmp_path / "empty")
    old = tmp_path / "old"  # written before the marker existed: only the demo's entries
    for sub in ("runs/sigma-0.1/checkpoints", "runs/sigma-2.0", "analysis/sigma-0.1"):
        (old / sub).mkdir(parents=True)
    (old / "compare").mkdir()
    (old / "compare" / MARKER).write_text("written by pe-probe\n")
    (old / "summary.md").write_text("# pe-probe demo: PE initialisation scale\n")
    check_demo_dir(old)
    crashed = tmp_path / "crashed"  # stopped during training: runs/ only
    (crashed / "runs" / "sigma-0.1").mkdir(parents=True)
    check_demo_dir(crashed)


@pytest.mark.parametrize("edit", [
    lambda d: (d / "summary.md").write_text("# my own notes\n"),  # a summary that is not the demo's
    lambda d: (d / "compare" / MARKER).unlink(),  # a compare/ pe-probe did not write
    lambda d: (d / "runs" / "my-run").mkdir(),  # a run the demo does not train
    lambda d: (d / "notes.txt").write_text("x"),  # another file
    lambda d: shutil.rmtree(d / "runs"),  # no runs/: a user's folder that has a compare/ report
])
def test_an_unmarked_folder_is_a_demo_folder_only_when_it_clearly_is_one(tmp_path, edit):
    old = tmp_path / "old"
    (old / "runs" / "sigma-0.1").mkdir(parents=True)
    (old / "compare").mkdir()
    (old / "compare" / MARKER).write_text("written by pe-probe\n")
    (old / "summary.md").write_text("# pe-probe demo: PE initialisation scale\n")
    check_demo_dir(old)
    edit(old)
    with pytest.raises(InputError, match="not a folder pe-probe demo wrote"):
        check_demo_dir(old)


def test_the_demo_marks_its_folder_and_a_bad_setting_found_later_leaves_nothing(tmp_path, monkeypatch):
    seen = []

    def fake_train(cfgs, outs, force=False):
        seen.append((tmp_path / "a" / "demo" / DEMO_MARKER).is_file())  # marked when training starts
        raise InputError("--device cuda requested but no CUDA device is available")

    monkeypatch.setattr(trainers.demo, "train_ensemble", fake_train)
    with pytest.raises(InputError):
        run_demo(tmp_path / "a" / "demo", epochs=1, n_per_level=30)
    assert seen == [True] and not (tmp_path / "a").exists()  # folders it made and the marker taken back


def test_the_demo_resumes_an_old_unmarked_demo_folder_and_marks_it(tmp_path, monkeypatch, capsys):
    """One real (1-epoch, tiny) demo; then the folder, its marker removed (as an older demo wrote it), still
    resumes without retraining, and gets marked."""
    out = tmp_path / "demo"
    run_demo(out, epochs=1, n_per_level=30)
    assert (out / DEMO_MARKER).is_file() and (out / "summary.md").read_text().startswith("# pe-probe demo")
    (out / DEMO_MARKER).unlink()
    capsys.readouterr()
    assert main(["demo", "--out", str(out), "--epochs", "1", "--n-per-level", "30"]) == 0
    assert "already finished" in capsys.readouterr().out and (out / DEMO_MARKER).is_file()


# ----------------------------------------------------------------------------------------------
# 2. an empty --out for train


@pytest.mark.parametrize("argv", [["train", "lst", "--out", "", "--epochs", "1", "--force"],
                                  ["train", "lst", "--out", "", "--ensemble-seeds", "0,1"],
                                  ["train", "netsim", "--out", "", "--epochs", "1"],
                                  ["train", "brain", "--out", "", "--epochs", "1"]])
def test_train_refuses_an_empty_out(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text('{"mine": 1}')
    for module, name in ((trainers.train, "train"), (trainers.ensemble, "train_ensemble"),
                         (trainers.train_masked, "train_masked")):
        monkeypatch.setattr(module, name, _never)
    assert 'empty path' in _refused(argv, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    assert (tmp_path / "config.json").read_text() == '{"mine": 1}'


@pytest.mark.parametrize("argv", [["train", "lst", "--epochs", "1"],
                                  ["train", "lst", "--ensemble-seeds", "0,1"],
                                  ["train", "netsim", "--epochs", "1"],
                                  ["demo", "--epochs", "1"]])
def test_train_and_the_demo_refuse_an_out_whose_name_is_not_utf8(tmp_path, monkeypatch, capsys, argv):
    """They trained, and the demo then failed in its analysis, which refuses such paths (a half-written folder)."""
    monkeypatch.chdir(tmp_path)
    for module, name in ((trainers.train, "train"), (trainers.ensemble, "train_ensemble"),
                         (trainers.train_masked, "train_masked"), (trainers.demo, "train_ensemble")):
        monkeypatch.setattr(module, name, _never)
    out = os.fsdecode(b"run-\xff")
    assert "is not a UTF-8 name" in _refused([*argv, "--out", out], capsys)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# 3. sizes that make a run impossible


@pytest.mark.parametrize("argv, needle", [
    (["lst", "--d-model", "100000000"], "--d-model is 100,000,000, above the 8,192"),
    (["lst", "--layers", "100000"], "--layers is 100,000, above the 256"),
    (["lst", "--heads", "1024", "--d-model", "1024"], "--heads is 1,024, above the 256"),
    (["lst", "--mlp-ratio", "100000"], "the MLP width"),
    (["lst", "--d-model", "8192", "--layers", "256"], "weights, above the 1,000,000,000"),
    (["lst", "--n-per-level", "100000000"], "--n-per-level (data.n_per_level) is 100,000,000, above the 1,000,000"),
    (["lst", "--epochs", "100000000"], "--epochs is 100,000,000, above the 1,000,000"),
    (["lst", "--ensemble-seeds", "0,1", "--layers", "100000"], "--layers is 100,000"),
    (["netsim", "--epochs", "1", "--n-train", "100000000"], "--n-train (data.n_train) is 100,000,000, above the 1,000,000"),
    (["netsim", "--n-nodes", "5000", "--n-train", "500000"], "the simulated data"),
    (["netsim", "--d-model", "100000000"], "--d-model is 100,000,000"),
    (["brain", "--window", "1000000"], "--window (data.window) is 1,000,000, above the 10,000"),
])
def test_train_refuses_sizes_far_above_every_preset_before_building_anything(tmp_path, monkeypatch, capsys, argv, needle):
    for module, name in ((trainers.train, "train"), (trainers.ensemble, "train_ensemble"),
                         (trainers.train_masked, "train_masked")):
        monkeypatch.setattr(module, name, _never)
    out = tmp_path / "run"
    err = _refused(["train", argv[0], "--out", str(out), *argv[1:]], capsys)
    assert needle in err and not out.exists()


@pytest.mark.parametrize("key, value, needle", [("model.d_model", 10**8, "--d-model"), ("model.n_layers", 10**5, "--layers"),
                                                ("optim.epochs", 10**9, "--epochs"), ("data.n_per_level", 10**8, "n_per_level"),
                                                ("data.n_ood_per_level", 10**6, "data.n_ood_per_level")])
def test_set_keys_get_the_same_bounds(key, value, needle):
    with pytest.raises(InputError, match="above the") as e:
        make_config("quick", {key: value})
    assert needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError, match="netsim|above the"):
        make_masked_config("netsim", "quick", {"data.n_train": 10**8})


def test_every_preset_and_the_bounds_themselves_stay_valid():
    for preset in PRESETS:
        make_config(preset)
    for task, presets in MASKED_PRESETS.items():
        for preset in presets:
            make_masked_config(task, preset)
    make_config("paper", {"optim.epochs": MAX_EPOCHS, "data.n_per_level": MAX_N_PER_LEVEL})
    make_config("quick", {"model.d_model": MAX_D_MODEL, "model.n_layers": 1, "model.mlp_ratio": 1.0})
    make_config("quick", {"data.n_ood_per_level": 10**6, "data.ood_puzzles": "ood.csv"})  # read from a file


# ----------------------------------------------------------------------------------------------
# 4. a checkpoint with NaN weights


def _tiny_run(tmp_path: Path) -> Path:
    out = tmp_path / "run1"
    assert main(["train", "lst", "--out", str(out), "--d-model", "16", "--layers", "2", "--heads", "2", "--epochs", "1",
                 "--n-per-level", "12", "--batch-size", "32", "--min-jaccard", "0.5"]) == 0
    return out / "last.pt"


@pytest.mark.parametrize("fill", [float("nan"), float("inf")])
def test_evaluate_refuses_a_checkpoint_with_non_finite_weights(tmp_path, capsys, fill):
    last = _tiny_run(tmp_path)
    capsys.readouterr()
    assert main(["evaluate", str(last)]) == 0  # the unedited run evaluates
    ckpt = torch.load(last, weights_only=True)
    ckpt["model"]["blocks.1.attn.qkv.weight"].fill_(fill)
    bad = tmp_path / "bad.pt"
    torch.save(ckpt, bad)
    err = _refused(["evaluate", str(bad)], capsys)
    assert "blocks.1.attn.qkv.weight" in err and ("NaN" if fill != fill else "Inf") in err
    assert "diverged" in err and str(bad) in err


def test_evaluate_refuses_a_netsim_checkpoint_with_nan_weights(tmp_path, monkeypatch):
    from trainers.checkpoint import make_payload
    from trainers.evaluate import evaluate_checkpoint
    from trainers.tasks.netsim import node_layout
    from trainers.train_masked import build_model

    cfg = make_masked_config("netsim", "quick", {"model.d_model": 16, "data.n_train": 8, "data.n_test": 8})
    gt = node_layout("grid", cfg.data.n_nodes, cfg.data.dim, seed=0)
    model = build_model(cfg, gt.coords, cfg.data.window)
    payload = make_payload(model, cfg.to_dict(), gt, step=1, epoch=1, metrics={})
    payload["model"]["embed.weight"][0, 0] = float("nan")
    path = tmp_path / "netsim.pt"
    torch.save(payload, path)
    monkeypatch.setattr(trainers.train_masked, "load_task_data", _never)
    with pytest.raises(InputError, match="embed.weight holds NaN"):
        evaluate_checkpoint(path)


@pytest.mark.parametrize("argv", [
    ["train", "lst", "--seed", str(2**64)],
    ["train", "lst", "--ensemble-seeds", f"0,{2**63}"],
    ["train", "netsim", "--seed", str(2**64)],
])
def test_seeds_beyond_64_bits_are_refused_before_any_work(tmp_path, capsys, monkeypatch, argv):
    """torch.manual_seed takes at most 64-bit seeds: a larger one failed with a traceback after the puzzles were made."""
    monkeypatch.setattr(trainers.train, "train", _never)
    monkeypatch.setattr(trainers.train_masked, "train_masked", _never)
    monkeypatch.setattr(trainers.ensemble, "train_ensemble", _never)
    err = _refused([*argv, "--epochs", "1", "--out", str(tmp_path / "run")], capsys)
    assert "(2^63 - 1)" in err
    assert not (tmp_path / "run").exists()
