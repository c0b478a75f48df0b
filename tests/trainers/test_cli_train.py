"""`pe-probe train / evaluate / demo` command lines: options, validation, output."""

import json
import re

import pytest
import torch

from pe_probe.errors import InputError
from trainers.cli import config_from_args, evaluate_main, train_main, train_parser

torch.set_num_threads(1)

TINY = ["--d-model", "16", "--layers", "1", "--heads", "2", "--epochs", "1", "--n-per-level", "12",
        "--batch-size", "32", "--min-jaccard", "0.5"]


def cfg_of(argv):
    return config_from_args(train_parser().parse_args(["lst", "--out", "x", *argv]))


def test_preset_values_apply_and_explicit_options_win():
    quick = cfg_of([])
    assert (quick.model.d_model, quick.optim.lr, quick.optim.epochs, quick.model.n_layers) == (64, 1e-3, 40, 4)
    assert quick.pe.every_layer is True and cfg_of(["--no-pe-every-layer"]).pe.every_layer is False
    paper = cfg_of(["--preset", "paper"])
    assert (paper.model.d_model, paper.optim.lr, paper.optim.epochs, paper.pe.every_layer) == (160, 1e-4, 4000, True)
    assert paper.model.norm == "post" and paper.model.n_heads == 1 and paper.optim.weight_decay == 0.0
    c = cfg_of(["--preset", "paper", "--d-model", "32", "--no-pe-every-layer", "--pe-init", "uniform",
                "--pe-init-std", "0.3", "--optimizer", "sgd", "--seed", "3"])
    assert (c.model.d_model, c.pe.every_layer, c.pe.init, c.pe.init_std) == (32, False, "uniform", 0.3)
    assert cfg_of(["--pe", "relative", "--relative-causal"]).pe.causal is True
    assert (c.optim.name, c.seed, c.optim.epochs) == ("sgd", 3, 4000)
    assert c.to_dict()["pe"]["init_std"] == 0.3  # nested, for `compare --by pe.init_std`


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--pe", "sin4d"], "unknown PE kind"),
        (["--pe-init-std", "0"], "--pe-init-std"),
        (["--pe-init-std", "-0.1"], "--pe-init-std"),
        (["--pe-init-std", "nan"], "--pe-init-std"),
        (["--pe-init-std", "inf"], "--pe-init-std"),
        (["--pe-init", "orthogonal"], "--pe-init"),
        (["--lr", "0"], "--lr"),
        (["--lr", "abc"], "--lr"),
        (["--epochs", "0"], "--epochs"),
        (["--dropout", "1.5"], "--dropout"),
        (["--batch-size", "0"], "--batch-size"),
        (["--heads", "3"], "divisible"),
        (["--momentum", "1"], "--momentum"),
        (["--min-jaccard", "2"], "--min-jaccard"),
        (["--eval-every", "0"], "--eval-every"),
        (["--norm", "mid"], "--norm"),
        (["--no-such-option"], "unrecognized"),
        (["--pe", "sin3d"], r"--pe sin3d needs 3D positions and this task's are 2D; choose one of none, sin1d, sin2d,"),
        (["--pe", "rope2d", "--d-model", "24", "--heads", "4"], "divisible by 4"),
    ],
)
def test_bad_options_raise_one_line_input_error(tmp_path, argv, needle):
    with pytest.raises(InputError) as e:
        train_main(["lst", "--out", str(tmp_path / "r"), *argv])
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "r").exists()  # rejected before the run folder is touched


def test_usage_errors_name_the_subcommand_once(capsys):
    from pe_probe.cli import main

    assert main(["train", "lst", "--epochs", "x"]) == 2
    err = capsys.readouterr().err
    assert err == "pe-probe train: error: argument --epochs: invalid int value: 'x' (see pe-probe train --help)\n"
    assert main(["evaluate"]) == 2  # same form as pe-probe analyze's usage errors
    assert capsys.readouterr().err.startswith("pe-probe evaluate: error: the following arguments are required")
    assert main(["analyze"]) == 2
    assert capsys.readouterr().err.startswith("pe-probe analyze: error: the following arguments are required")


def test_unknown_task_and_missing_out(tmp_path):
    with pytest.raises(InputError, match="unknown task"):
        train_main(["sudoku", "--out", str(tmp_path / "r")])
    with pytest.raises(InputError, match="--out"):
        train_main(["lst"])


def test_malformed_or_missing_puzzle_file_raises_input_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("puzzles,solutions,condition\n1234,9,Binary\n")
    with pytest.raises(InputError) as e:
        train_main(["lst", "--out", str(tmp_path / "r"), "--ood-puzzles", str(bad), *TINY])
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="not found"):
        train_main(["lst", "--out", str(tmp_path / "r"), "--ood-puzzles", str(tmp_path / "nope.csv"), *TINY])
    with pytest.raises(InputError, match=r"--ood-puzzles .* is a folder, not a puzzle file; pass a study-format CSV"):
        train_main(["lst", "--out", str(tmp_path / "r"), "--ood-puzzles", str(tmp_path), *TINY])  # it said "not found"
    assert not (tmp_path / "r").exists()


def test_an_edited_held_out_file_is_refused_by_evaluate_and_by_a_resume(tmp_path, capsys):
    """The config records the --ood-puzzles file's sha256: evaluating or resuming the run with other content in that
    file is refused (it went on with the new puzzles, evaluate calling them the run's own held-out set); a config
    written before the key existed still resumes."""
    from trainers.tasks.lst import make_splits, write_puzzle_csv
    from trainers.train import config_differences

    csv, run = tmp_path / "held.csv", tmp_path / "run"
    write_puzzle_csv(make_splits(n_per_level=4, n_ood_per_level=3, seed=11)["ood"], csv)
    assert train_main(["lst", "--out", str(run), "--ood-puzzles", str(csv), *TINY]) == 0
    recorded = json.loads((run / "config.json").read_text())
    assert len(recorded["data"]["ood_puzzles_sha256"]) == 64
    write_puzzle_csv(make_splits(n_per_level=4, n_ood_per_level=2, seed=12)["ood"], csv)  # edited in place
    with pytest.raises(InputError, match=r"held-out puzzle file .*held.csv has changed since the run was trained.*"
                                         r"--puzzles "):
        evaluate_main([str(run / "last.pt")])
    assert evaluate_main([str(run / "last.pt"), "--puzzles", str(csv)]) == 0  # the file as it is now, named as such
    with pytest.raises(InputError, match=r"different config: data.ood_puzzles_sha256"):
        train_main(["lst", "--out", str(run), "--ood-puzzles", str(csv), *TINY, "--epochs", "2"])
    older = {**recorded, "data": {k: v for k, v in recorded["data"].items() if k != "ood_puzzles_sha256"}}
    assert config_differences(older, recorded) == []
    assert config_differences(recorded, older) == [("data.ood_puzzles_sha256", recorded["data"]["ood_puzzles_sha256"],
                                                    None)]


def test_train_then_evaluate(tmp_path, capsys):
    from trainers.tasks.lst import make_splits, write_puzzle_csv

    # a user-supplied held-out file: training puzzles are filtered against it
    held = make_splits(n_per_level=4, n_ood_per_level=3, seed=11)["ood"]
    csv = tmp_path / "held.csv"
    write_puzzle_csv(held, csv)
    run = tmp_path / "run"
    assert train_main(["lst", "--out", str(run), "--ood-puzzles", str(csv), *TINY]) == 0
    out = capsys.readouterr().out
    assert "ood_acc" in out and (run / "last.pt").exists()
    ckpt = torch.load(run / "last.pt", weights_only=True)
    assert ckpt["config"]["data"]["ood_puzzles"] == str(csv.resolve())

    assert evaluate_main([str(run / "last.pt"), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["ood_n"] == len(held) and type(m["ood_n"]) is int  # a count, not 108.0
    # the keys of the run's own log, and the same values
    assert {k: m[k] for k in ckpt["metrics"] if k.startswith("ood_")} == pytest.approx(
        {k: v for k, v in ckpt["metrics"].items() if k.startswith("ood_")})
    assert {"ood_acc_binary", "ood_acc_ternary", "ood_acc_quaternary", "ood_loss"} <= set(m)

    assert evaluate_main([str(run / "last.pt"), "--puzzles", str(csv)]) == 0
    table = capsys.readouterr().out
    assert "Binary" in table and "Quaternary" in table and f"({len(held)} puzzles" in table
    assert evaluate_main([str(run / "last.pt"), "--puzzles", str(csv), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)  # a file is not the run's held-out split: its own prefix
    assert m["puzzles_n"] == len(held) and m["puzzles_acc"] == pytest.approx(ckpt["metrics"]["ood_acc"])

    # the same run again: already finished, exit 0
    assert train_main(["lst", "--out", str(run), "--ood-puzzles", str(csv), *TINY]) == 0
    # a different config in the same folder is refused
    with pytest.raises(InputError, match="different config"):
        train_main(["lst", "--out", str(run), "--ood-puzzles", str(csv), *TINY, "--pe", "sin2d"])


def test_evaluate_rejects_bad_inputs(tmp_path):
    not_ckpt = tmp_path / "w.pt"
    torch.save({"a": torch.zeros(1)}, not_ckpt)
    with pytest.raises(InputError, match="not a pe-probe checkpoint"):
        evaluate_main([str(not_ckpt)])
    with pytest.raises(InputError, match="not found"):
        evaluate_main([str(not_ckpt), "--puzzles", str(tmp_path / "none.csv")])


@pytest.mark.parametrize("main", [train_main, evaluate_main])
def test_help_teaches(main, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "default" in text


@pytest.mark.slow
def test_quick_preset_learns_with_small_sigma(tmp_path):
    """The quick preset (40 epochs, d 64) brings a sigma=0.1 learned PE well above chance OOD."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert train_main(["lst", "--out", str(tmp_path / "q"), "--pe-init-std", "0.1"]) == 0
    finally:
        torch.set_num_threads(threads)
    m = torch.load(tmp_path / "q" / "last.pt", weights_only=True)["metrics"]
    assert m["ood_acc"] > 0.6 and m["test_acc"] > 0.8


@pytest.mark.slow
def test_demo_writes_runs_analyses_comparison_and_summary(tmp_path, capsys):
    from trainers.cli import demo_main

    out = tmp_path / "demo"
    argv = ["--out", str(out), "--epochs", "2", "--n-per-level", "30"]
    assert demo_main(argv) == 0
    for name in ("sigma-0.1", "sigma-2.0"):
        assert (out / "runs" / name / "last.pt").exists()
        assert (out / "analysis" / name / "metrics.json").exists()
    assert any((out / "compare").iterdir())
    summary = (out / "summary.md").read_text()
    assert "ood_acc" in summary and "sigma 2.0" in summary
    capsys.readouterr()
    assert demo_main(argv) == 0  # resumable: a second call skips finished work
    assert "already finished" in capsys.readouterr().out


def test_bf16_on_a_cpu_without_native_bf16_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    import trainers.evaluate

    monkeypatch.setattr(trainers.evaluate, "cpu_has_bf16", lambda: False)
    run = tmp_path / "run"
    with pytest.raises(InputError, match="bf16"):
        train_main(["lst", "--out", str(run), "--bf16", *TINY])
    assert not run.exists() or not any(run.iterdir())
    with pytest.raises(InputError, match="bf16"):
        train_main(["lst", "--out", str(tmp_path / "ens"), "--bf16", "--ensemble-seeds", "0,1", *TINY])
    assert not (tmp_path / "ens").exists() or not any((tmp_path / "ens").rglob("*.pt"))


def test_cuda_graphs_off_a_gpu_is_refused_and_writes_nothing(tmp_path):
    for argv in (["--out", str(tmp_path / "run")], ["--out", str(tmp_path / "ens"), "--ensemble-seeds", "0,1"]):
        with pytest.raises(InputError, match="--cuda-graphs needs a CUDA device") as e:
            train_main(["lst", "--cuda-graphs", "--device", "cpu", *argv, *TINY])
        assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists() and not (tmp_path / "ens").exists()


@pytest.mark.skipif(not __import__("trainers.evaluate").evaluate.cpu_has_bf16(), reason="CPU without native bf16")
def test_bf16_on_the_cpu_trains_close_to_float32(tmp_path):
    """bf16 autocast is a speed option: the same run, with the linear layers' products rounded to bf16."""
    assert train_main(["lst", "--out", str(tmp_path / "fp32"), *TINY]) == 0
    assert train_main(["lst", "--out", str(tmp_path / "bf16"), "--bf16", *TINY]) == 0
    a = torch.load(tmp_path / "fp32" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "bf16" / "last.pt", weights_only=True)
    assert abs(a["metrics"]["train_loss"] - b["metrics"]["train_loss"]) < 0.02
    diffs = [(a["model"][k] - b["model"][k]).abs().max().item() for k in a["model"]]
    assert 0 < max(diffs) < 0.05  # different rounding, same run


@pytest.mark.slow
def test_compiled_training_matches_eager_within_tolerance(tmp_path):
    """torch.compile is a speed option: same run, same metrics up to floating-point reordering."""
    assert train_main(["lst", "--out", str(tmp_path / "eager"), *TINY]) == 0
    assert train_main(["lst", "--out", str(tmp_path / "compiled"), "--compile", *TINY]) == 0
    a = torch.load(tmp_path / "eager" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "compiled" / "last.pt", weights_only=True)
    for name, t in a["model"].items():
        torch.testing.assert_close(b["model"][name], t, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("key,needle", [("foo.bar", "not a section"), ("model", "is a section"),
                                        ("optim.foo", "unknown config key"), ("model.d_model.x", "unknown config key"),
                                        ("data.window", "unknown config key")])
def test_bad_dotted_keys_are_one_line_input_errors(key, needle):
    from trainers.config import make_config, make_masked_config

    with pytest.raises(InputError, match=needle) as e:
        make_config("quick", {key: 3})
    assert "\n" not in str(e.value)
    assert make_masked_config("brain", "quick", {"data.window": 24}).data.window == 24  # a brain key there


@pytest.mark.parametrize("argv,needle", [
    (["--ensemble-sigmas", "0.1,-1"], "--ensemble-sigmas value must be"),
    (["--ensemble-seeds", "-1"], "--ensemble-seeds value must be"),
    (["--ensemble-sigmas", "0.1,0.1000001"], "share the folder"),
    (["--mlp-ratio", "0.001"], "width 0"),
    (["--pe-init", "zeros", "--pe-init-std", "-1"], "--pe-init-std"),
    (["--n-per-level", "5"], "no test puzzles per level"),
    (["--pe", "sin2d", "--relative-causal"], "--relative-causal applies to --pe relative only"),
    # the PE kinds a 2D task can take: sin3d was offered, then refused when the model was built
    (["--pe", "bogus"], r"unknown PE kind 'bogus'; choose one of none, sin1d, sin2d, random, learned, relative, rope1d, rope2d$"),
    (["--ensemble-pes", "learned,sin3d"], r"--ensemble-pes value sin3d needs 3D positions"),
    # a typo'd range built a config per run until memory ran out (a review: 6.4 GB after 20 s, no output)
    (["--ensemble-seeds", "0-99999999"], r"--ensemble-seeds 0-99999999 would train 100,000,000 runs; one command "
                                         r"trains at most 10,000"),
    (["--ensemble-seeds", "0,5-10004"], r"would train 10,001 runs"),
    (["--ensemble-seeds", "0-999", "--ensemble-sigmas", ",".join(str(i / 10) for i in range(1, 12))],
     r"the --ensemble-\* lists would train 11,000 runs"),
])
def test_options_that_cannot_make_a_sensible_run_are_refused(tmp_path, argv, needle):
    with pytest.raises(InputError, match=needle) as e:
        train_main(["lst", "--out", str(tmp_path / "r"), *argv])
    assert "\n" not in str(e.value) and not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv,needle", [
    # options that were silently ignored (a new user's walk-through)
    (["lst", "--ensemble-max", "2"], "--ensemble-max shapes an ensemble, and none is asked for"),
    (["lst", "--ensemble-workers", "2", "--ensemble-max", "2"], "--ensemble-max and --ensemble-workers shape an ensemble"),
    (["foo"], "unknown task 'foo'; choose one of lst, netsim, brain"),
])
def test_mistyped_train_command_lines_are_usage_errors_that_name_the_help(tmp_path, capsys, argv, needle):
    from pe_probe.cli import main

    assert main(["train", *argv, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pe-probe train: error: ") and needle in err and err.endswith("(see pe-probe train --help)\n")
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_an_ensemble_into_a_single_runs_folder_is_refused(tmp_path, monkeypatch):
    """Its member folders used to nest inside the finished run's folder."""
    run = tmp_path / "run"
    assert train_main(["lst", "--out", str(run), *TINY]) == 0
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(InputError, match=rf"--out {re.escape(str(run))} is a single run's folder \(it holds last.pt\); "
                                         r".* choose another --out, e.g. .*run-ensemble") as e:
        train_main(["lst", "--out", str(run), "--ensemble-seeds", "0,1", *TINY])
    assert "\n" not in str(e.value) and sorted(p.name for p in run.iterdir()) == before
    with pytest.raises(InputError, match=rf"e\.g\. {re.escape(str(run.absolute()))}-ensemble$"):  # not "-ensemble"
        monkeypatch.chdir(run)
        train_main(["lst", "--out", ".", "--ensemble-seeds", "0,1", *TINY])


@pytest.mark.parametrize("argv,needle", [
    (["netsim", "--dim", "3", "--pe", "rope2d"], r"--pe rope2d needs 2D positions and this task's are 3D; choose one of "
                                                r"none, sin1d, sin3d, random, learned, relative, rope1d$"),
    (["netsim", "--pe", "sin3d"], r"--pe sin3d needs 3D positions and this task's are 2D"),
    (["brain", "--pe", "nope"], r"unknown PE kind 'nope'; choose one of none, sin1d, sin3d,"),
])
def test_masked_tasks_offer_the_pe_kinds_of_their_dimension(tmp_path, argv, needle):
    with pytest.raises(InputError, match=needle):
        train_main([*argv, "--out", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()


def test_brain_test_subjects_listed_twice_are_refused():
    from trainers.config import make_masked_config

    with pytest.raises(InputError, match="twice"):
        make_masked_config("brain", "quick", {"data.test_subjects": "101309, 101309"})


def test_brain_test_subject_ids_and_a_count_conflict_and_the_ids_set_the_recorded_count(tmp_path):
    """--test-subjects with --n-test-subjects ran with the ids and recorded the other count; now refused, and the ids
    alone record their own number."""
    from trainers.config import make_masked_config

    with pytest.raises(InputError, match="give either --test-subjects IDS .* or --n-test-subjects N .*, not both"):
        train_main(["brain", "--test-subjects", "101309", "--n-test-subjects", "3", "--out", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()
    assert make_masked_config("brain", "quick", {"data.test_subjects": "101309, 377451"}).data.n_test_subjects == 2
    assert make_masked_config("brain", "quick", {"data.test_subjects": "101309"}).data.n_test_subjects == 1
    assert make_masked_config("brain", "quick", {"data.n_test_subjects": 3}).data.n_test_subjects == 3



def test_netsim_coordinate_files_set_the_config_and_are_checked(tmp_path):
    """--layout file recorded the default 64 nodes in 2D whatever the file held; --coords-file without it was
    ignored; a layout with no edges named a flag that does not exist (--p-connect)."""
    import numpy as np

    coords = tmp_path / "c.csv"
    np.savetxt(coords, np.random.default_rng(0).uniform(0, 5, size=(27, 3)), delimiter=",")
    out = tmp_path / "r"
    with pytest.raises(InputError, match="--coords-file applies only with --layout file"):
        train_main(["netsim", "--coords-file", str(coords), "--out", str(out)])
    with pytest.raises(InputError, match=r"--n-nodes 64 disagrees with --coords-file .* \(27 nodes in 3D\)"):
        train_main(["netsim", "--layout", "file", "--coords-file", str(coords), "--n-nodes", "64", "--out", str(out)])
    far = tmp_path / "far.csv"
    np.savetxt(far, np.random.default_rng(0).uniform(0, 1000, size=(27, 3)), delimiter=",")
    with pytest.raises(InputError, match=r"no edges: .* raise --length-scale to about that distance"):
        train_main(["netsim", "--layout", "file", "--coords-file", str(far), "--out", str(out)])
    assert not out.exists()
    assert train_main(["netsim", "--layout", "file", "--coords-file", str(coords), "--epochs", "1", "--n-train", "32",
                              "--out", str(out)]) == 0
    data = json.loads((out / "config.json").read_text())["data"]
    assert (data["n_nodes"], data["dim"], data["layout"]) == (27, 3, "file")


def test_an_interrupted_training_says_what_a_rerun_will_do(tmp_path, capsys):
    """Ctrl-C printed only 'pe-probe: interrupted': a paper-preset run stopped before its first checkpoint
    (every 250 epochs) lost everything without saying so."""
    from pe_probe.groundtruth import grid
    from trainers.checkpoint import make_payload, save_checkpoint
    from trainers.cli import where_it_stopped
    from trainers.config import make_config
    from trainers.model import PETransformer

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), where_it_stopped(run, 40):
        raise KeyboardInterrupt
    assert capsys.readouterr().err == "pe-probe train: stopped; no checkpoint was written yet: a rerun starts over\n"
    cfg = make_config("quick", {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 1})
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(grid(4, 4).coords))
    run.mkdir()
    save_checkpoint(make_payload(model, cfg.to_dict(), grid(4, 4), step=9, epoch=3, metrics={}), run / "last.pt")
    with pytest.raises(SystemExit), where_it_stopped(run, 40):
        raise SystemExit(143)  # a kill
    assert f"the last checkpoint is epoch 3 of 40 ({run / 'last.pt'}): rerun the same command" in capsys.readouterr().err
    with pytest.raises(SystemExit), where_it_stopped(run, 40):
        raise SystemExit(0)  # not a stop
    assert capsys.readouterr().err == ""


def test_an_interrupted_ensemble_and_a_closed_pipe_say_what_a_rerun_will_do(tmp_path, capsys, monkeypatch):
    """An ensemble's Ctrl-C said only 'pe-probe: interrupted' (a kill nothing at all), and `train ... | head` stopped
    training with exit 0 and no word, leaving an unfinished run that looked finished."""
    import sys

    from pe_probe.groundtruth import grid
    from trainers.checkpoint import make_payload, save_checkpoint
    from trainers.cli import where_it_stopped
    from trainers.config import make_config
    from trainers.model import PETransformer

    runs = [tmp_path / "root" / name for name in ("a", "b", "c")]
    cfg = make_config("quick", {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 1})
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(grid(4, 4).coords))
    for run, epoch in zip(runs[:2], (6, 9)):
        run.mkdir(parents=True)
        save_checkpoint(make_payload(model, cfg.to_dict(), grid(4, 4), step=9, epoch=epoch, metrics={}), run / "last.pt")
    with pytest.raises(KeyboardInterrupt), where_it_stopped(runs, 40):
        raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert err.startswith("pe-probe train: stopped; 2 of 3 runs have a checkpoint (epochs 6-9 of 40, under ")
    assert err.endswith("rerun the same command to resume them; the other 1 start over\n")
    with pytest.raises(KeyboardInterrupt), where_it_stopped(runs[2:], 40):
        raise KeyboardInterrupt
    assert "no checkpoint was written yet" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test: the handler points it at devnull
    with pytest.raises(SystemExit) as e, where_it_stopped(runs[0], 40):
        raise BrokenPipeError
    assert e.value.code == 141
    assert capsys.readouterr().err.startswith("pe-probe train: stopped: its output was closed (a broken pipe")


def test_the_pe_dimension_check_waits_for_a_coordinate_file_and_a_valid_dim(tmp_path):
    """A review found make_masked_config refusing sin3d for a 3D --layout file (the config's dim was the default
    2) and an invalid --dim 4 reported as 'this task's are 3D'."""
    from trainers.config import make_masked_config

    coords = tmp_path / "c.csv"
    coords.write_text("0,0,0\n1,0,0\n0,1,0\n0,0,1\n1,1,1\n")
    cfg = make_masked_config("netsim", "quick", {"data.layout": "file", "data.coords_file": str(coords), "pe.kind": "sin3d"})
    assert cfg.pe.kind == "sin3d"
    with pytest.raises(InputError, match=r"--dim must be 2 or 3, got 4"):
        make_masked_config("netsim", "quick", {"data.dim": 4, "pe.kind": "sin2d"})


def test_the_documented_pe_init_defaults_are_the_configs(capsys):
    """Kills: PEConfig default init / init_std changed (the --help text says normal / 0.1)."""
    from trainers.config import BrainDataConfig, NetsimDataConfig

    with pytest.raises(SystemExit):
        train_parser().parse_args(["lst", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: normal)" in text and "(default: 0.1)" in text
    cfg = cfg_of([])
    assert (cfg.pe.init, cfg.pe.init_std) == ("normal", 0.1)
    # the study's held-out test masks 90% of the tokens (README: "--mask-ood masked: 90% by default")
    assert NetsimDataConfig().mask_ood == BrainDataConfig().mask_ood == 0.9


@pytest.mark.parametrize("section", [None, "pe"])
def test_a_config_with_an_unknown_key_is_refused_naming_it(section):
    """Kills: the unknown-key check of _from_dict removed (an AttributeError instead of a one-line InputError)."""
    from trainers.config import TrainConfig

    d = cfg_of([]).to_dict()
    (d if section is None else d[section])["sigma"] = 2.0  # a typo for pe.init_std
    with pytest.raises(InputError, match=r"unknown key\(s\) sigma"):
        TrainConfig.from_dict(d)


@pytest.mark.parametrize("argv, pe", [
    (["--pe", "sin2d", "--pe-init", "uniform", "--pe-init-std", "0.5"], ("sin2d", "normal", 0.1)),
    (["--pe", "rope2d", "--pe-init-std", "2"], ("rope2d", "normal", 0.1)),
    (["--pe", "learned", "--pe-init", "zeros", "--pe-init-std", "0.5"], ("learned", "zeros", 0.1)),
    (["--pe", "relative", "--pe-init", "uniform", "--pe-init-std", "0.5"], ("relative", "uniform", 0.5)),
    (["--pe", "learned", "--pe-init-std", "2"], ("learned", "normal", 2.0)),
])
def test_init_settings_a_pe_ignores_are_recorded_as_the_defaults(argv, pe):
    """A PE without a trainable table ignores --pe-init and --pe-init-std, a zero-initialised table ignores the
    sigma: the config records the defaults, so identical models have identical configs (they recorded the asked
    values, and a plain rerun of the run was then refused as a different config)."""
    c = cfg_of(argv)
    assert (c.pe.kind, c.pe.init, c.pe.init_std) == pe


def test_a_run_asked_with_an_ignored_sigma_says_so_and_a_plain_command_resumes_it(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert train_main(["lst", *TINY, "--pe", "sin2d", "--pe-init-std", "0.5", "--out", out]) == 0
    err = capsys.readouterr().err
    assert "pe-probe: --pe sin2d ignores --pe-init-std; the run records the default (init normal, sigma 0.1)" in err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["pe"]["init_std"] == 0.1
    assert train_main(["lst", *TINY, "--pe", "sin2d", "--out", out]) == 0
    assert "already finished" in capsys.readouterr().out
    assert train_main(["lst", *TINY, "--pe", "learned", "--pe-init-std", "0.5", "--out", str(tmp_path / "l")]) == 0
    assert "ignores" not in capsys.readouterr().err


@pytest.mark.parametrize("pe,flag,said", [("rope1d", "--no-pe-every-layer", True), ("none", "--pe-every-layer", False),
                                          ("relative", "--no-pe-every-layer", True), ("sin2d", "--no-pe-every-layer", False),
                                          ("rope1d", None, False)])
def test_a_placement_flag_for_a_pe_that_adds_no_table_says_it_changes_nothing(tmp_path, capsys, pe, flag, said):
    """rope/relative/none runs with and without --no-pe-every-layer trained to bit-identical weights with configs
    that differ (trainer review): the flag is now named as changing nothing, and the record as kept."""
    out = str(tmp_path / "run")
    assert train_main(["lst", *TINY, "--pe", pe, *([flag] if flag else []), "--out", out]) == 0
    err = capsys.readouterr().err
    assert ("changes nothing in the model" in err) == said
    if said:
        assert f"pe-probe: --pe {pe} adds no table to the layers' inputs, so {flag} changes nothing" in err


def test_a_resume_without_its_metrics_log_says_the_log_restarts(tmp_path):
    """A deleted metrics.jsonl made a resume restart the log silently: 15 of 28 lines were left, epochs 5-42 gone."""
    from trainers.train import _trim_metrics

    log = tmp_path / "metrics.jsonl"
    note = _trim_metrics(log, 42)
    assert note.startswith(f"note: {log} is missing, so the log restarts after epoch 42") and not log.exists()
    assert _trim_metrics(log, 0) is None  # a fresh start: nothing lost
    log.write_text("".join(f'{{"epoch": {e}}}\n' for e in range(1, 6)))
    assert _trim_metrics(log, 3) is None and log.read_text().count("\n") == 3


def test_a_closed_pipe_that_also_took_stderr_still_exits_141_and_a_finished_run_is_called_finished(tmp_path,
                                                                                                     capsys, monkeypatch):
    """With `2>&1 | head` the stop message itself hit the closed pipe, and that second broken pipe became exit 0;
    a run whose last checkpoint is its final epoch was told to 'resume from it'."""
    import io
    import sys

    from pe_probe.groundtruth import grid
    from trainers.checkpoint import make_payload, save_checkpoint
    from trainers.cli import where_it_stopped
    from trainers.config import make_config
    from trainers.model import PETransformer

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", ClosedPipe())
    with pytest.raises(SystemExit) as e, where_it_stopped(tmp_path / "run", 40):
        raise BrokenPipeError
    assert e.value.code == 141
    monkeypatch.undo()
    run = tmp_path / "done"
    run.mkdir()
    cfg = make_config("quick", {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 1})
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(grid(4, 4).coords))
    save_checkpoint(make_payload(model, cfg.to_dict(), grid(4, 4), step=9, epoch=40, metrics={}), run / "last.pt")
    with pytest.raises(KeyboardInterrupt), where_it_stopped(run, 40):
        raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert "the run is finished (epoch 40 of 40" in err and "resume" not in err
