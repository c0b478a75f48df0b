"""Training loop: exact resume, checkpoint contract, atomic writes, run-folder rules."""

import json
import re
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from pe_probe.errors import InputError
from trainers import train as train_mod
from trainers.checkpoint import CONTRACT_KEYS, FORMAT, load_checkpoint
from trainers.config import make_config
from trainers.evaluate import evaluate_checkpoint
from trainers.model import PETransformer
from trainers.tasks.lst import encode, generate
from trainers.train import train

torch.set_num_threads(1)


def tiny_config(**over):
    base = {
        "model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2, "model.mlp_ratio": 2.0,
        "model.dropout": 0.1,  # exercises the per-epoch RNG re-seeding
        "optim.batch_size": 16, "optim.epochs": 4, "optim.lr": 3e-3,
        "data.n_per_level": 12, "data.n_ood_per_level": 4, "data.min_jaccard": 0.5,
        "eval_every": 1, "ckpt_every": 2, "seed": 7,
    }
    base.update(over)
    return make_config("quick", base)


def metric_lines(run):
    lines = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    for d in lines:
        d.pop("time")
    return lines


def quiet(_msg):
    pass


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    cfg = tiny_config()
    full = train(cfg, tmp_path / "full", log=quiet)

    # crash at the start of the 4th evaluation: epochs 1-3 logged, last checkpoint at epoch 2
    calls = {"n": 0}
    real = train_mod.split_metrics

    def crashing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(train_mod, "split_metrics", crashing)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "resumed", log=quiet)
    monkeypatch.setattr(train_mod, "split_metrics", real)
    assert load_checkpoint(tmp_path / "resumed" / "last.pt")["epoch"] == 2
    assert len(metric_lines(tmp_path / "resumed")) == 3

    msgs = []
    resumed = train(cfg, tmp_path / "resumed", log=msgs.append)
    assert any("resuming from epoch 2" in m for m in msgs)
    assert any(m.startswith(f"{tmp_path / 'resumed'}: training epochs 3-4 on cpu (") for m in msgs)
    assert resumed == full
    assert metric_lines(tmp_path / "resumed") == metric_lines(tmp_path / "full")
    a = load_checkpoint(tmp_path / "full" / "last.pt")
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["step"] == b["step"] and a["metrics"] == b["metrics"]


def test_without_a_progress_bar_the_run_says_when_its_first_evaluation_comes(tmp_path):
    """Piped output has no progress bar: the first line must come at the start, not at the first evaluation."""
    msgs = []
    train(tiny_config(**{"eval_every": 3, "ckpt_every": 2}), tmp_path / "run", log=msgs.append)
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'run'))}: training epochs 1-4 on cpu \(\d+ puzzles per epoch\); "
                        r"evaluating every 3 epochs, first after epoch 2", msgs[0])  # the checkpoint at 2 comes first
    assert msgs[1].startswith("epoch 2/4")


def test_checkpoints_follow_the_contract(tmp_path):
    cfg = tiny_config(**{"pe.every_layer": True, "optim.epochs": 3})
    metrics = train(cfg, tmp_path / "run", log=quiet)
    run = tmp_path / "run"
    assert (run / "config.json").exists() and json.loads((run / "config.json").read_text()) == cfg.to_dict()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert all(re.fullmatch(r"step-\d{8}\.pt", n) for n in names) and len(names) == 2  # epochs 2 and 3
    ckpt = torch.load(run / "last.pt", weights_only=True)
    assert set(CONTRACT_KEYS) <= set(ckpt) and ckpt["format"] == FORMAT
    assert ckpt["pe_params"] == ["blocks.0.pe.table", "blocks.1.pe.table"]
    assert all(n in ckpt["model"] for n in ckpt["pe_params"])
    gt = ckpt["ground_truth"]
    assert gt["kind"] == "grid" and gt["shape"] == [4, 4] and tuple(gt["coords"].shape) == (16, 2)
    assert gt["coords"][5].tolist() == [1.0, 1.0]  # row-major (row, col)
    steps_per_epoch = -(-len_train(cfg) // cfg.optim.batch_size)
    assert ckpt["epoch"] == 3 and ckpt["step"] == 3 * steps_per_epoch
    assert names[-1] == f"step-{ckpt['step']:08d}.pt"
    # the step file holds last.pt's weights and metrics; only last.pt (what a resume reads) the optimizer state
    step_file = torch.load(run / "checkpoints" / names[-1], weights_only=True)
    assert "optimizer" in ckpt and "optimizer" not in step_file
    assert all(torch.equal(step_file["model"][k], v) for k, v in ckpt["model"].items())
    assert step_file["metrics"] == ckpt["metrics"] and step_file["step"] == ckpt["step"]
    assert ckpt["config"]["pe"]["init_std"] == cfg.pe.init_std
    assert ckpt["metrics"] == metrics
    for key in ("train_acc", "train_loss", "test_acc", "ood_acc", "ood_acc_binary", "ood_acc_ternary",
                "ood_acc_quaternary", "test_acc_binary"):
        assert 0 <= ckpt["metrics"][key] <= (1 if "acc" in key else 100)
    assert [d["epoch"] for d in metric_lines(run)] == [1, 2, 3]
    # evaluate regenerates the same OOD set from the stored data config
    ev = evaluate_checkpoint(run / "last.pt")
    assert ev["ood_acc"] == pytest.approx(metrics["ood_acc"]) and ev["ood_n"] == 12


def len_train(cfg):
    return len(train_mod.load_splits(cfg)["train"])


def test_crash_while_writing_a_checkpoint_keeps_the_previous_last(tmp_path, monkeypatch):
    cfg = tiny_config(**{"optim.epochs": 3, "ckpt_every": 1, "model.dropout": 0.0})
    run = tmp_path / "run"
    real_save = torch.save
    calls = {"n": 0}

    def flaky_save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] <= 4:  # epochs 1 and 2: step file + last.pt each
            return real_save(obj, f, *a, **k)
        f.write(b"PK\x03\x04 partial")  # a torn write, then the crash
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", flaky_save)
    with pytest.raises(OSError, match="disk full"):
        train(cfg, run, log=quiet)
    monkeypatch.setattr(torch, "save", real_save)
    last = load_checkpoint(run / "last.pt")
    assert last["epoch"] == 2
    leftovers = [p.name for p in run.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    assert len(list((run / "checkpoints").iterdir())) == 2
    final = train(cfg, run, log=quiet)  # resumes and finishes
    assert load_checkpoint(run / "last.pt")["epoch"] == 3 and "ood_acc" in final


def test_finished_run_says_so_and_config_changes_are_refused(tmp_path):
    cfg = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0})
    run = tmp_path / "run"
    first = train(cfg, run, log=quiet)
    msgs = []
    again = train(cfg, run, log=msgs.append)
    assert again == first and any("already finished" in m for m in msgs)
    other = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0, "pe.init_std": 0.5})
    with pytest.raises(InputError, match="pe.init_std") as e:
        train(other, run, log=quiet)
    assert "\n" not in str(e.value)
    # device may differ between a run and its resumption
    moved = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0, "device": "auto"})
    assert train(moved, run, log=quiet) == first
    train(other, run, force=True, log=quiet)
    assert load_checkpoint(run / "last.pt")["config"]["pe"]["init_std"] == 0.5
    assert len(metric_lines(run)) == 1


def test_same_seed_same_run_different_seed_different_init(tmp_path):
    a = train(tiny_config(**{"optim.epochs": 1}), tmp_path / "a", log=quiet)
    b = train(tiny_config(**{"optim.epochs": 1}), tmp_path / "b", log=quiet)
    assert a == b
    ka = load_checkpoint(tmp_path / "a" / "last.pt")["model"]["blocks.0.pe.table"]
    train(tiny_config(**{"optim.epochs": 1, "seed": 8}), tmp_path / "c", log=quiet)
    kc = load_checkpoint(tmp_path / "c" / "last.pt")["model"]["blocks.0.pe.table"]
    assert not torch.equal(ka, kc)


def test_load_checkpoint_rejects_foreign_and_truncated_files(tmp_path):
    bad = tmp_path / "bad.pt"
    torch.save({"weights": torch.zeros(2)}, bad)
    with pytest.raises(InputError, match="not a pe-probe checkpoint"):
        load_checkpoint(bad)
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(InputError, match="cannot read"):
        load_checkpoint(bad)
    with pytest.raises(InputError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_longer_run_passes_through_the_shorter_runs_state(tmp_path):
    """The learning rate is constant and every epoch's randomness comes from (seed, epoch): the first 2 epochs
    of a 4-epoch run are the 2-epoch run exactly (what `analyses.lst.length` relies on to compare a run with
    itself at the quick preset's end)."""
    short = train(tiny_config(**{"optim.epochs": 2}), tmp_path / "short", log=quiet)
    train(tiny_config(), tmp_path / "long", log=quiet)
    a = load_checkpoint(tmp_path / "short" / "last.pt")
    b = load_checkpoint(tmp_path / "long" / "checkpoints" / "step-{:08d}.pt".format(a["step"]))
    assert b["epoch"] == 2 and b["metrics"] == short
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    assert metric_lines(tmp_path / "long")[:2] == metric_lines(tmp_path / "short")


def test_a_compiled_step_keeps_its_full_batch_graph_after_the_epochs_smaller_last_batch(monkeypatch):
    """The last batch of an epoch is smaller (8,100 puzzles = 63 x 128 + 36). `compiled_step` compiles it
    as a second static graph; torch.compile's default would compile a batch-dynamic graph and run that one
    for every later full batch too (slower kernels than the ones benchmarked)."""
    real_compile, ran = torch.compile, []

    def recording_compile(fn, **kwargs):
        graphs = []

        def backend(gm, example_inputs):
            index, static = len(graphs), all(isinstance(t, torch.Tensor) for t in example_inputs)
            graphs.append(index)

            def run(*args):
                ran.append((index, static))
                return gm.forward(*args)
            return run
        kwargs.pop("mode", None)
        return real_compile(fn, backend=backend, **kwargs)

    monkeypatch.setattr(torch, "compile", recording_compile)
    torch._dynamo.reset()
    step, _ = train_mod.compiled_step(lambda x: (x * 2).sum(1), torch.device("cpu"), compile=True)
    for batch in (128, 36, 128, 36):
        step(torch.ones(3, batch))
    assert ran == [(0, True), (1, True), (0, True), (1, True)]  # each batch size its own static graph


def test_compiled_float32_cpu_steps_of_a_single_model_take_inductors_cpp_wrapper(monkeypatch):
    """speed_setup compiles a float32 CPU step with Inductor's C++ wrapper (measured 2.5-2.7% faster); an
    experiment's COMPILE_MODE, which torch.compile takes instead of options, keeps the Python wrapper."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    model = torch.nn.Linear(2, 2)
    train_mod.speed_setup(model, torch.device("cpu"), compile=True)
    assert calls[-1] == {"dynamic": False, "options": {"cpp_wrapper": True}}
    train_mod.speed_setup(model, torch.device("cpu"), compile=False)
    assert len(calls) == 1  # eager: nothing compiled
    train_mod.compiled_step(model, torch.device("cpu"), compile=True)  # compiled_step's default: Python's
    assert calls[-1] == {"dynamic": False, "mode": None}
    assert train_mod.cpp_wrapper_for(torch.device("cpu"), bf16=False)
    assert not train_mod.cpp_wrapper_for(torch.device("cpu"), bf16=True)
    assert not train_mod.cpp_wrapper_for(torch.device("cuda"), bf16=False)
    monkeypatch.setattr(train_mod, "COMPILE_MODE", "max-autotune-no-cudagraphs")
    train_mod.compiled_step(model, torch.device("cpu"), compile=True, cpp_wrapper=True)
    assert calls[-1] == {"dynamic": False, "mode": "max-autotune-no-cudagraphs"}


def test_a_step_checkpoint_copied_over_last_is_refused_with_a_one_line_error(tmp_path):
    """Step files leave the optimizer state out, so one copied over last.pt (to roll a run back) cannot
    resume exactly: an InputError (exit 2 on the command line), not a KeyError, and nothing is changed."""
    import shutil

    cfg = tiny_config(**{"optim.epochs": 2, "ckpt_every": 1})
    run = tmp_path / "run"
    train(cfg, run, log=quiet)
    first = sorted((run / "checkpoints").glob("step-*.pt"))[0]
    shutil.copy(first, run / "last.pt")
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="holds no optimizer state.*--force"):
        train(cfg, run, log=quiet)
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    train(cfg, run, log=quiet, force=True)  # the way out the message names
    assert load_checkpoint(run / "last.pt")["epoch"] == 2


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_folder_that_is_not_this_run_is_refused_untouched(tmp_path):
    """No last.pt to resume from: only this run's own early files may be replaced, never another
    program's files or step checkpoints whose last.pt was removed; --force is the way out."""
    cfg = tiny_config(**{"optim.epochs": 2, "ckpt_every": 1, "model.dropout": 0.0})
    foreign = tmp_path / "hf"
    (foreign / "checkpoints").mkdir(parents=True)
    (foreign / "checkpoints" / "ckpt-1000.bin").write_text("precious")
    (foreign / "notes.txt").write_text("mine")
    run = tmp_path / "run"
    train(cfg, run, log=quiet)
    (run / "last.pt").unlink()
    for folder, needle in ((foreign, "not this run's"), (run, "checkpoints/ but no last.pt")):
        before = snapshot(folder)
        with pytest.raises(InputError, match=needle + ".*--force") as e:
            train(cfg, folder, log=quiet)
        assert "\n" not in str(e.value) and snapshot(folder) == before
    train(cfg, run, log=quiet, force=True)
    assert load_checkpoint(run / "last.pt")["epoch"] == 2
    # what a run writes before its first checkpoint is replaced by the same config, refused for another
    early = tmp_path / "early"
    early.mkdir()
    (early / "config.json").write_text(json.dumps(cfg.to_dict()))
    (early / "provenance.jsonl").write_text("{}\n")
    (early / ".last.pt.abc123.tmp").write_bytes(b"torn")  # a kill mid-write
    other = tiny_config(**{"optim.epochs": 2, "ckpt_every": 1, "model.dropout": 0.0, "seed": 8})
    with pytest.raises(InputError, match="the start of a run with a different config: seed"):
        train(other, early, log=quiet)
    train(cfg, early, log=quiet)
    assert load_checkpoint(early / "last.pt")["epoch"] == 2 and not (early / ".last.pt.abc123.tmp").exists()


def test_data_errors_leave_no_folder_and_force_keeps_the_old_run_until_data_is_made(tmp_path):
    bad = tiny_config(**{"data.min_jaccard": 1.0})  # no puzzle can be that far from every held-out one
    with pytest.raises(InputError, match="--min-jaccard"):
        train(bad, tmp_path / "new", log=quiet)
    assert not (tmp_path / "new").exists()
    run = tmp_path / "run"
    train(tiny_config(**{"optim.epochs": 1}), run, log=quiet)
    before = snapshot(run)
    with pytest.raises(InputError, match="--min-jaccard"):
        train(bad, run, force=True, log=quiet)
    assert snapshot(run) == before


def test_every_checkpoint_carries_the_metrics_of_its_own_epoch(tmp_path):
    """--ckpt-every not a multiple of --eval-every: the checkpoint epochs are evaluated too (they carried
    no metrics, or an older epoch's)."""
    from trainers.ensemble import train_ensemble

    cfg = tiny_config(**{"optim.epochs": 5, "eval_every": 2, "ckpt_every": 3, "model.dropout": 0.0})
    train(cfg, tmp_path / "solo", log=quiet)
    train_ensemble([cfg], [tmp_path / "ens"], log=quiet)
    for run in (tmp_path / "solo", tmp_path / "ens"):
        by_epoch = {d["epoch"]: d for d in metric_lines(run)}
        assert sorted(by_epoch) == [2, 3, 4, 5]
        for path in sorted((run / "checkpoints").glob("step-*.pt")):
            ck = load_checkpoint(path)
            expected = {k: v for k, v in by_epoch[ck["epoch"]].items() if k not in ("epoch", "step")}
            assert ck["metrics"] == pytest.approx(expected), path


def test_run_folder_refusals_carry_the_refused_path_and_the_reason_apart_from_the_fix(tmp_path):
    """Every refusal of `check_run_dir` is a `RunDirRefused` whose message is ``[--out ]SUBJECT REASON; FIX``
    and whose ``subject`` / ``reason`` the sweep pipelines show without the trainer's fix (its flags)."""
    from trainers.train import RunDirRefused, check_run_dir

    cfg = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0})
    run = tmp_path / "run"
    train(cfg, run, log=quiet)
    (tmp_path / "file").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{")
    cases = [  # (folder, refused subject, reason)
        (tmp_path / "file", tmp_path / "file", "is a file, not a run folder"),
        (tmp_path / "foreign", tmp_path / "foreign", "holds files that are not this run's (notes.txt)"),
        (tmp_path / "broken", tmp_path / "broken" / "config.json", "is not valid JSON"),
    ]
    for folder, subject, reason in cases:
        with pytest.raises(RunDirRefused) as e:
            check_run_dir(cfg, folder, force=False)
        assert (e.value.subject, e.value.reason) == (subject, reason)
        assert re.fullmatch(rf"(--out )?{re.escape(str(subject))} {re.escape(reason)}; .+", str(e.value))
    other = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0, "seed": 8})
    with pytest.raises(RunDirRefused, match=r"a run with a different config: seed \(7 -> 8\)") as e:
        check_run_dir(other, run, force=False)
    assert e.value.subject == run and e.value.reason.startswith("holds a run with a different config")
    assert e.value.differences == (("seed", 7, 8),)  # all of them, for callers that show more than 3
    many = tiny_config(**{"optim.epochs": 2, "model.dropout": 0.0, "seed": 8, "optim.lr": 0.5, "eval_every": 9})
    with pytest.raises(RunDirRefused, match=r"\) and 1 more; use another --out"):  # the message said 3 of 4
        check_run_dir(many, run, force=False)
    masked = json.loads((run / "config.json").read_text())  # another task sorts first: it explains the rest
    masked["task"] = "netsim"
    (run / "config.json").write_text(json.dumps(masked))
    with pytest.raises(RunDirRefused, match=r"different config: task \('netsim' -> 'lst'\)"):
        check_run_dir(other, run, force=False)


def test_a_last_pt_that_does_not_load_is_refused_with_the_trainer_s_fix(tmp_path):
    """A torn or foreign last.pt: the trainer's way out (--force, another --out), not the loader's advice to
    "pass the .pt file of a run", which is no option of a training command; nothing is changed."""
    from trainers.train import RunDirRefused

    cfg = tiny_config(**{"optim.epochs": 1, "model.dropout": 0.0})
    run = tmp_path / "run"
    train(cfg, run, log=quiet)
    (run / "last.pt").write_bytes(b"PK\x03\x04 torn")
    before = snapshot(run)
    with pytest.raises(RunDirRefused, match=r"last.pt does not load as a pe-probe checkpoint.*--force") as e:
        train(cfg, run, log=quiet)
    assert "pass the .pt file" not in str(e.value) and e.value.subject == run / "last.pt"
    assert "(PytorchStreamReader failed reading zip archive: not a ZIP archive)" in str(e.value)  # the loader's reason
    assert "\n" not in str(e.value) and "miniz" not in str(e.value)  # its first sentence only
    assert snapshot(run) == before
    torch.save({"format": "something else"}, run / "last.pt")
    with pytest.raises(RunDirRefused, match=r"does not load as a pe-probe checkpoint \(not format '[^']+'\)"):
        train(cfg, run, log=quiet)
    train(cfg, run, log=quiet, force=True)
    assert load_checkpoint(run / "last.pt")["epoch"] == 1


def test_a_run_folder_refusal_survives_a_trip_through_a_worker_process(tmp_path):
    """Review: a RunDirRefused raised in a process pool worker did not unpickle in the parent (BrokenProcessPool
    and a traceback instead of the one-line error)."""
    import pickle

    from trainers.train import RunDirRefused

    e = RunDirRefused(tmp_path / "run", "holds files that are not this run's (x)", "choose another --out", flag=True,
                      differences=(("seed", 7, 8),))
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is RunDirRefused and str(back) == str(e)
    assert (back.subject, back.reason, back.fix, back.flag) == (e.subject, e.reason, e.fix, e.flag)
    assert back.differences == (("seed", 7, 8),)


def test_each_epoch_visits_every_training_puzzle_once_in_a_new_order(tmp_path, monkeypatch):
    """Kills: the shuffle seeded by the seed alone (the same order every epoch)."""
    cfg = tiny_config(**{"optim.epochs": 2, "model.dropout": 0.0, "ckpt_every": 2, "eval_every": 2})
    batches = []
    real = train_mod.lst_step

    def spy(step_model, optimizer, x, y, *rest):
        batches.append(x.detach().clone())
        return real(step_model, optimizer, x, y, *rest)

    monkeypatch.setattr(train_mod, "lst_step", spy)
    train(cfg, tmp_path / "run", log=quiet)
    per_epoch = -(-len_train(cfg) // cfg.optim.batch_size)
    assert len(batches) == 2 * per_epoch
    epochs = [torch.cat(batches[i * per_epoch : (i + 1) * per_epoch]) for i in range(2)]
    train_x = torch.as_tensor(encode(train_mod.load_splits(cfg)["train"])[0])
    rows = lambda t: sorted(r.numpy().tobytes() for r in t)  # noqa: E731
    assert rows(epochs[0]) == rows(epochs[1]) == rows(train_x)  # each epoch: the training set, permuted
    assert not torch.equal(epochs[0], epochs[1])


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_the_optimizer_takes_the_configured_hyperparameters_for_every_parameter(name):
    """Kills: SGD without the configured momentum (weight decay applies to every parameter, PE tables included,
    as the ensemble's optimizer does too)."""
    cfg = tiny_config(**{"optim.name": name, "optim.lr": 0.02, "optim.weight_decay": 0.05, "optim.momentum": 0.7})
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(train_mod.ground_truth("lst").coords))
    opt = train_mod.make_optimizer(model, cfg)
    assert isinstance(opt, torch.optim.AdamW if name == "adamw" else torch.optim.SGD)
    (group,) = opt.param_groups
    assert group["lr"] == 0.02 and group["weight_decay"] == 0.05
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    if name == "sgd":
        assert group["momentum"] == 0.7


def test_a_training_step_reports_the_plain_cross_entropy_of_its_batch():
    """Kills: a modified training loss (e.g. label smoothing) in lst_step."""
    cfg = tiny_config(**{"model.dropout": 0.0})
    torch.manual_seed(0)
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(train_mod.ground_truth("lst").coords))
    x, y = (torch.as_tensor(a) for a in encode(generate(4, seed=1)))
    with torch.no_grad():
        want = F.cross_entropy(model(x), y).item()
    _, loss = train_mod.lst_step(model, torch.optim.SGD(model.parameters(), lr=0.0), x, y, nullcontext(),
                                 nullcontext(), lambda: None)
    assert loss.item() == pytest.approx(want, rel=1e-6)
