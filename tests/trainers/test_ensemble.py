"""Ensemble training: K models in one process give the same runs as training each alone."""

import json
import time
from contextlib import nullcontext
from unittest import mock

import pytest
import torch

from pe_probe.errors import InputError
from trainers.checkpoint import CONTRACT_KEYS, FORMAT, load_checkpoint
from trainers.config import make_config
from trainers.ensemble import group_key, member_name, train_ensemble
from trainers.train import train

torch.set_num_threads(1)

# Tolerances. Solo training uses the fused SDPA kernel and torch.optim.AdamW; the ensemble uses the
# written-out attention and the same AdamW maths on stacked tensors, both in float32. They differ only
# by rounding (~1e-7 relative per op, measured max |diff| of logits 4e-7 at init). Adam divides by
# sqrt(v) + 1e-8, which can turn a rounding difference in a near-zero gradient into a step difference of
# up to lr, so over a few steps weights may differ by a few lr-sized steps on isolated entries: we allow
# atol 2e-4 (lr 3e-3 x a few %) with rtol 1e-3; losses/accuracies at rtol 1e-4 (a systematic error, e.g.
# a wrong data order or a shared optimizer state, moves them by > 1e-2 here).
W_RTOL, W_ATOL = 1e-3, 2e-4
M_RTOL, M_ATOL = 1e-4, 1e-5


def tiny(**over):
    base = {
        "model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2, "model.mlp_ratio": 2.0,
        "optim.batch_size": 16, "optim.epochs": 3, "optim.lr": 3e-3,
        "data.n_per_level": 12, "data.n_ood_per_level": 4, "data.min_jaccard": 0.5,
        "eval_every": 1, "ckpt_every": 2, "seed": 0,
    }
    base.update(over)
    return make_config("quick", base)


def quiet(_msg):
    pass


def lines(run):
    out = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    for d in out:
        d.pop("time")
    return out


def assert_same_run(a, b):
    la, lb = lines(a), lines(b)
    assert [(d["epoch"], d["step"]) for d in la] == [(d["epoch"], d["step"]) for d in lb]
    for da, db in zip(la, lb):
        assert da.keys() == db.keys()
        for key in da:
            assert da[key] == pytest.approx(db[key], rel=M_RTOL, abs=M_ATOL), key
    ca, cb = load_checkpoint(a / "last.pt"), load_checkpoint(b / "last.pt")
    assert ca["config"] == cb["config"] and ca["step"] == cb["step"] and ca["epoch"] == cb["epoch"]
    assert ca["pe_params"] == cb["pe_params"]
    assert ca["model"].keys() == cb["model"].keys()
    for name in ca["model"]:
        wa, wb = ca["model"][name], cb["model"][name]
        if name.endswith("attn.qkv.bias"):
            # The key bias has a zero true gradient (softmax is invariant to adding q.b_k to every logit), so
            # its gradient is pure rounding noise, which Adam rescales into steps of up to ~lr in either run:
            # it is noise in solo training too. Bound it by lr x steps; compare the query/value biases tightly.
            d = wa.shape[0] // 3
            assert (wa[d : 2 * d] - wb[d : 2 * d]).abs().max() <= ca["config"]["optim"]["lr"] * ca["step"]
            wa, wb = torch.cat([wa[:d], wa[2 * d :]]), torch.cat([wb[:d], wb[2 * d :]])
        torch.testing.assert_close(wa, wb, rtol=W_RTOL, atol=W_ATOL, msg=name)
    sa, sb = ca["optimizer"]["state"], cb["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        assert float(sa[i]["step"]) == float(sb[i]["step"])
    assert ca["optimizer"]["param_groups"][0]["lr"] == cb["optimizer"]["param_groups"][0]["lr"]


MEMBERS = [  # differ in seed, sigma and learning rate (one group) and in PE kind (a second group)
    {"seed": 1, "pe.init_std": 0.1},
    {"seed": 2, "pe.init_std": 2.0, "optim.lr": 1e-3},
    {"seed": 3, "pe.kind": "sin2d"},
]


@pytest.mark.parametrize("rows", [None, 10], ids=["whole-batch", "chunks"])
def test_ensemble_matches_solo_training(tmp_path, monkeypatch, rows):
    """Members trained side by side in one stacked group equal each trained alone. One worker, so the first two
    members really share a group (K = 2, checked): with a worker per core they would each train alone. With
    ``rows`` = 10 the CPU group steps take their batches of 16 (and each epoch's last, smaller one) in chunks:
    5 puzzles at a time in the group of 2, 10 in the lone member's (`trainers.ensemble.cpu_chunk`; the default
    128 member-puzzles give chunks of 64 and 128, which exceed these batches)."""
    import trainers.ensemble as E

    monkeypatch.setattr(E, "CPU_CHUNK_ROWS", rows)
    cfgs = [tiny(**m) for m in MEMBERS]
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / "solo" / str(i), log=quiet)
    group_sizes, init = [], E.StackedOptimizer.__init__

    def spy(self, stack, group_cfgs, device):
        group_sizes.append(len(group_cfgs))
        init(self, stack, group_cfgs, device)

    monkeypatch.setattr(E.StackedOptimizer, "__init__", spy)
    res = train_ensemble(cfgs, [tmp_path / "ens" / str(i) for i in range(3)], log=quiet, workers=1)
    assert sorted(group_sizes) == [1, 2]  # MEMBERS[0:2] share a group key; the third differs
    assert len(res) == 3 and all("ood_acc" in r for r in res)
    for i in range(3):
        assert_same_run(tmp_path / "solo" / str(i), tmp_path / "ens" / str(i))
        assert sorted(p.name for p in (tmp_path / "ens" / str(i) / "checkpoints").iterdir()) == \
            sorted(p.name for p in (tmp_path / "solo" / str(i) / "checkpoints").iterdir())


def test_members_really_differ_and_groups_are_split():
    a, b, c = (tiny(**m) for m in MEMBERS)
    assert group_key(a) == group_key(b) != group_key(c)
    assert member_name(b) == "learned_sigma2_lr0.001_seed2"


def test_member_names_carry_the_non_default_init_and_optimizer_settings():
    """Ensembles differing only in weight decay or PE init got the same folder names: a second command into the
    same --out was refused as another config (and its --force hint would have deleted the first runs)."""
    import dataclasses

    b = tiny(**MEMBERS[1])
    wd = dataclasses.replace(b, optim=dataclasses.replace(b.optim, weight_decay=0.1))
    zeros = dataclasses.replace(b, pe=dataclasses.replace(b.pe, init="zeros"))
    sgd = dataclasses.replace(b, optim=dataclasses.replace(b.optim, name="sgd", momentum=0.5))
    names = {member_name(c) for c in (b, wd, zeros, sgd)}
    assert len(names) == 4 and member_name(b) == "learned_sigma2_lr0.001_seed2"
    assert member_name(wd) == "learned_sigma2_lr0.001_seed2_wd0.1"
    assert member_name(zeros) == "learned_sigma2_lr0.001_seed2_initzeros"
    assert member_name(sgd) == "learned_sigma2_lr0.001_seed2_sgd_mom0.5"


def test_ensemble_checkpoint_is_an_ordinary_checkpoint(tmp_path, capsys):
    from pe_probe.cli import main

    cfgs = [tiny(seed=s, **{"optim.epochs": 2}) for s in (0, 1)]
    msgs = []
    train_ensemble(cfgs, [tmp_path / "a", tmp_path / "b"], log=msgs.append, workers=1)
    assert msgs[0].startswith("ensemble of 2 (a, ...): training epochs 1-2 on cpu (")  # an ensemble has no bar
    ckpt = torch.load(tmp_path / "a" / "last.pt", weights_only=True)
    assert ckpt["format"] == FORMAT and all(k in ckpt for k in CONTRACT_KEYS)
    assert ckpt["pe_params"] == ["blocks.0.pe.table", "blocks.1.pe.table"]
    (step_path,) = (tmp_path / "a" / "checkpoints").glob("step-*.pt")  # as `train` writes them: no optimizer state
    assert "optimizer" in ckpt and "optimizer" not in torch.load(step_path, weights_only=True)
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "a" / "last.pt")]) == 0
    assert "rsa" in capsys.readouterr().out.lower()


def test_ensemble_resumes_and_solo_trainer_resumes_an_ensemble_run(tmp_path):
    cfgs = [tiny(seed=s, **{"optim.epochs": 2, "ckpt_every": 2}) for s in (4, 5)]
    train_ensemble(cfgs, [tmp_path / "a", tmp_path / "b"], log=quiet)
    longer = [tiny(seed=s, **{"optim.epochs": 4, "ckpt_every": 2}) for s in (4, 5)]
    # the config changed (epochs), so the folders are refused without --force ...
    with pytest.raises(InputError):
        train_ensemble(longer, [tmp_path / "a", tmp_path / "b"], log=quiet)
    # ... a finished ensemble run is reported, not retrained
    res = train_ensemble(cfgs, [tmp_path / "a", tmp_path / "b"], log=quiet)
    assert res[0] == load_checkpoint(tmp_path / "a" / "last.pt")["metrics"]
    # an interrupted ensemble (epoch 2 of 4) resumed by the ensemble equals the uninterrupted run
    full = [tmp_path / "full4", tmp_path / "full5"]
    train_ensemble(longer, full, log=quiet)
    part = [tmp_path / "p4", tmp_path / "p5"]
    for p in part:
        p.mkdir()
    import trainers.ensemble as ens

    calls = {"n": 0}
    real = ens.ensemble_split_metrics

    def crash(*a, **k):
        calls["n"] += 1
        if calls["n"] == 7:  # 3 splits per evaluation: crash during epoch 3's evaluation
            raise KeyboardInterrupt
        return real(*a, **k)

    ens.ensemble_split_metrics = crash
    try:
        with pytest.raises(KeyboardInterrupt):
            train_ensemble(longer, part, log=quiet, workers=1)  # one thread: a deterministic crash point
    finally:
        ens.ensemble_split_metrics = real
    assert load_checkpoint(part[0] / "last.pt")["epoch"] == 2
    train_ensemble(longer[:1], part[:1], log=quiet)  # member 0 by the ensemble
    train(longer[1], part[1], log=quiet)  # member 1 by the single-model trainer
    for a, b in zip(full, part):
        assert_same_run(a, b)


def test_bad_input():
    with pytest.raises(InputError):
        train_ensemble([tiny()], [], log=quiet)
    with pytest.raises(InputError):
        train_ensemble([tiny(), tiny(seed=1)], ["x", "x"], log=quiet)


def test_cli_ensemble_writes_one_run_folder_per_combination(tmp_path, capsys):
    from trainers.cli import train_main

    common = ["lst", "--d-model", "16", "--layers", "1", "--heads", "2", "--epochs", "1", "--n-per-level", "6",
              "--min-jaccard", "0.5", "--batch-size", "16", "--out", str(tmp_path)]
    assert train_main(common + ["--ensemble-seeds", "0-1", "--ensemble-sigmas", "0.1,2"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"learned_sigma{s}_lr0.001_seed{n}" for s in ("0.1", "2") for n in (0, 1)]
    for n in names:
        ckpt = load_checkpoint(tmp_path / n / "last.pt")
        assert ckpt["config"]["pe"]["init_std"] == float(n.split("sigma")[1].split("_")[0])
    with pytest.raises(InputError, match="--seed"):
        train_main(common + ["--seed", "3", "--ensemble-seeds", "0,1"])
    with pytest.raises(InputError, match="ensemble-sigmas"):
        train_main(common + ["--ensemble-sigmas", "0.1,x"])


def test_cli_ensemble_trains_a_fixed_pe_once_across_sigmas(tmp_path, capsys):
    """sin2d ignores the init sigma: learned,sin2d x two sigmas is 2 learned runs + 1 sin2d run, not 4."""
    from trainers.cli import train_main
    from trainers.pe import init_matters

    common = ["lst", "--d-model", "16", "--layers", "1", "--heads", "2", "--epochs", "1", "--n-per-level", "6",
              "--min-jaccard", "0.5", "--batch-size", "16", "--out", str(tmp_path)]
    assert train_main(common + ["--ensemble-pes", "learned,sin2d", "--ensemble-sigmas", "0.1,2"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["learned_sigma0.1_lr0.001_seed0", "learned_sigma2_lr0.001_seed0", "sin2d_sigma0.1_lr0.001_seed0"]
    assert "sin2d ignores the PE init sigma: 1 duplicate run(s)" in capsys.readouterr().err
    # the sin2d run does not depend on the order of the sigmas, and a single-run command resumes it
    assert train_main(common + ["--ensemble-pes", "learned,sin2d", "--ensemble-sigmas", "2,0.1"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    capsys.readouterr()
    assert train_main(common[:-1] + [str(tmp_path / names[2]), "--pe", "sin2d"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert init_matters("learned", "normal") and init_matters("relative", "uniform")
    assert not init_matters("learned", "zeros") and not init_matters("sin2d", "normal")


@pytest.mark.parametrize("kind,norm,readout", [("learned", "post", "last"), ("sin2d", "pre", "cls"), ("relative", "post", "last")])
def test_batched_forward_equals_each_members_full_forward(kind, norm, readout):
    """ensemble_forward (stacked weights, pruned readout layer) == every member's own full forward."""
    from pe_probe.groundtruth import grid
    from trainers.config import ModelConfig, PEConfig
    from trainers.ensemble import Stack, ensemble_forward, template_model
    from trainers.model import PETransformer

    coords = torch.as_tensor(grid(4, 4).coords, dtype=torch.float32)
    cfg = ModelConfig(d_model=16, n_layers=3, n_heads=2, mlp_ratio=2.0, norm=norm, readout=readout)
    models = []
    for s in range(3):
        torch.manual_seed(s)
        models.append(PETransformer(cfg, PEConfig(kind=kind, every_layer=kind == "learned", init_std=0.5), coords))
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.one_hot(torch.randint(0, 6, (3, 9, 16), generator=g), 6)[..., 1:].float()
    got = ensemble_forward(template_model(models[0]), Stack.of(models), x)
    want = torch.stack([m(x[k], readout_only=False) for k, m in enumerate(models)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_cpu_worker_threads_give_the_same_runs_as_one_thread(tmp_path):
    """Groups trained side by side on worker threads (the CPU default) equal serial training and solo runs."""
    cfgs = [tiny(seed=s, **{"optim.epochs": 2}) for s in (0, 1, 2)]
    threads = torch.get_num_threads()
    train_ensemble(cfgs, [tmp_path / "serial" / str(i) for i in range(3)], log=quiet, workers=1)
    train_ensemble(cfgs, [tmp_path / "threads" / str(i) for i in range(3)], log=quiet, workers=2, max_group=1)
    train(cfgs[2], tmp_path / "solo", log=quiet)
    for i in range(3):
        assert_same_run(tmp_path / "serial" / str(i), tmp_path / "threads" / str(i))
    assert_same_run(tmp_path / "solo", tmp_path / "threads" / "2")
    assert torch.get_num_threads() == threads  # the caller's torch thread count is restored


def test_a_failing_worker_stops_the_others_and_the_error_surfaces(tmp_path):
    import trainers.ensemble as ens

    cfgs = [tiny(seed=s, **{"optim.epochs": 6, "ckpt_every": 1, "eval_every": 1}) for s in (0, 1)]
    real = ens.ensemble_split_metrics
    state = {"n": 0}

    def fail_once(*a, **k):  # the first evaluation fails; every later one is slow
        state["n"] += 1
        if state["n"] == 1:
            raise RuntimeError("disk full")
        time.sleep(0.05)
        return real(*a, **k)

    ens.ensemble_split_metrics = fail_once
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            train_ensemble(cfgs, [tmp_path / "a", tmp_path / "b"], log=quiet, workers=2, max_group=1)
    finally:
        ens.ensemble_split_metrics = real
    epochs = [load_checkpoint(p / "last.pt")["epoch"] for p in (tmp_path / "a", tmp_path / "b") if (p / "last.pt").exists()]
    assert all(e < 6 for e in epochs)  # the surviving worker left early instead of finishing its run


def _square_or_fail(job, stop):
    """A worker-process job (module level, so it pickles): square, fail, or wait for ``stop``."""
    if job == "fail":
        time.sleep(0.5)  # let the other job start first
        raise RuntimeError("disk full")
    if job == "wait":
        for _ in range(600):
            if stop.is_set():
                return "stopped"
            time.sleep(0.05)
        return "never stopped"
    return job * job, torch.get_num_threads()


def test_worker_processes_return_results_in_order_on_one_torch_thread_each():
    from trainers.ensemble import _run_jobs

    threads = torch.get_num_threads()
    assert _run_jobs([1, 2, 3], 2, _square_or_fail, processes=True) == [(1, 1), (4, 1), (9, 1)]
    assert torch.get_num_threads() == threads


def test_a_failing_worker_process_stops_the_others_and_the_error_surfaces():
    from trainers.ensemble import _run_jobs

    t = time.time()
    with pytest.raises(RuntimeError, match="disk full"):
        _run_jobs(["wait", "fail"], 2, _square_or_fail, processes=True)
    assert time.time() - t < 25  # the waiting worker saw the stop event instead of running out its 30 s


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="reads process states from /proc (Linux)")
def test_ctrl_c_stops_the_worker_processes_at_once_and_leaves_none_behind(tmp_path):
    """Ctrl-C in a terminal reaches the whole process group: parent and workers leave within seconds."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    script = tmp_path / "jobs.py"
    script.write_text(
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parents[1])!r}]\n"
        "from test_ensemble import _square_or_fail\n"
        "from trainers.ensemble import _run_jobs\n"
        "if __name__ == '__main__':\n"
        "    print(_run_jobs(['wait', 'wait'], 2, _square_or_fail, processes=True), flush=True)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(8)  # workers started and waiting (their jobs would run 30 s)
    t = time.time()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.time() - t < 15 and proc.returncode != 0 and "KeyboardInterrupt" in err and "never stopped" not in out
    time.sleep(1)
    states = []  # (state) of every process in that group, from /proc/PID/stat: "pid (comm) state ppid pgrp ..."
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == proc.pid:
            states.append(fields[0])
    assert all(st == "Z" for st in states), states  # nothing of it still runs (zombies wait for init to reap them)


@pytest.mark.slow
def test_compiled_groups_in_worker_processes_match_eager_serial_runs(tmp_path):
    """--compile on the CPU: groups trained in two spawned processes give the eager runs (up to reordering)."""
    cfgs = [tiny(seed=s, **{"optim.epochs": 2}) for s in (0, 1)]
    train_ensemble(cfgs, [tmp_path / "eager" / str(i) for i in range(2)], log=quiet, workers=1)
    torch.set_num_threads(2)  # the parent's count; each worker process runs one
    try:
        train_ensemble(cfgs, [tmp_path / "procs" / str(i) for i in range(2)], log=quiet, workers=2, max_group=1, compile=True)
        assert torch.get_num_threads() == 2  # the parent's count is restored
    finally:
        torch.set_num_threads(1)
    for i in range(2):
        assert_same_run(tmp_path / "eager" / str(i), tmp_path / "procs" / str(i))
    prov = [json.loads(s) for s in (tmp_path / "procs" / "0" / "provenance.jsonl").read_text().splitlines()]
    assert prov[-1]["compile"] is True and prov[-1]["torch_threads"] == 1  # trained in a 1-thread worker process


def test_worker_count_rules():
    from trainers.ensemble import cpu_workers

    cpu, cfg = torch.device("cpu"), tiny()
    assert cpu_workers(3, [cfg], cpu, compile=False) == 3
    assert cpu_workers(3, [cfg], cpu, compile=True) == 3  # compiled groups: worker processes
    assert cpu_workers(3, [tiny(**{"model.dropout": 0.1})], cpu, compile=False) == 1  # threads share the RNG
    assert cpu_workers(3, [tiny(**{"model.dropout": 0.1})], cpu, compile=True) == 3  # processes do not
    from trainers.ensemble import in_processes

    assert in_processes(2, cpu, compile=True) and not in_processes(2, cpu, compile=False)
    assert not in_processes(1, cpu, compile=True)
    assert cpu_workers(None, [cfg], cpu, compile=False) >= 1
    from trainers.ensemble import CPU_GROUP, group_size

    assert group_size(8, 1) == 8  # one worker (a GPU): one batch of all members
    assert group_size(8, 2) == CPU_GROUP and group_size(3, 2) == 2 and group_size(2, 2) == 1
    assert group_size(8, 2, max_group=3) == 3
    with pytest.raises(InputError):
        cpu_workers(0, [cfg], cpu, compile=False)


def test_bad_settings_fail_before_any_run_folder_is_written(tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(InputError, match="workers"):
        train_ensemble([tiny(), tiny(seed=1)], outs, log=quiet, workers=0)
    with pytest.raises(InputError):  # the second member's PE does not fit its width: nothing written for the first
        train_ensemble([tiny(), tiny(seed=1, **{"pe.kind": "sin3d", "model.d_model": 16})], outs, log=quiet)
    assert not any(o.exists() for o in outs)
    with pytest.raises(InputError, match="--min-jaccard"):  # data that cannot be made: no folder either
        train_ensemble([tiny(**{"data.min_jaccard": 1.0}), tiny(seed=1, **{"data.min_jaccard": 1.0})], outs, log=quiet)
    assert not any(o.exists() for o in outs)
    train(tiny(seed=5), outs[1], log=quiet)  # the second member's folder holds another run
    before = {p: p.read_bytes() for p in outs[1].rglob("*") if p.is_file()}
    with pytest.raises(InputError, match="different config: seed"):
        train_ensemble([tiny(), tiny(seed=1)], outs, log=quiet)
    assert not outs[0].exists() and {p: p.read_bytes() for p in outs[1].rglob("*") if p.is_file()} == before


def _small_models(n: int = 3) -> list:
    """n tiny MLPs with LayerNorm (matrices, vectors), seeded 0..n-1."""
    models = []
    for s in range(n):
        torch.manual_seed(s)
        models.append(torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 2)))
    return models


def _assert_stack_steps_like_solos(stack, opt, models, solos, n_steps: int = 4) -> None:
    """Feed the same random gradients to the stacked optimizer and to each member's torch optimizer, then
    compare every member's weights."""
    g = torch.Generator().manual_seed(0)
    for _ in range(n_steps):
        grads = {name: torch.randn(p.shape, generator=g) for name, p in stack.params.items()}
        opt.step(grads)
        for k, (m, solo) in enumerate(zip(models, solos)):
            for name, p in m.named_parameters():
                p.grad = grads[name][k].clone()
            solo.step()
    for k, m in enumerate(models):
        for name, p in m.named_parameters():
            torch.testing.assert_close(stack.params[name][k], p.detach(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fused", [True, False])
def test_stacked_adamw_is_torch_adamw_on_each_member(fused):
    """Three members with their own lr / weight decay: the stacked step equals torch's fused AdamW (what a
    solo run uses) per member, to float rounding, with the fused kernel and with the written-out maths."""
    from trainers.ensemble import Stack, StackedOptimizer

    hyper = [(3e-3, 0.01), (1e-3, 0.01), (3e-3, 0.1)]
    models = _small_models()
    cfgs = [tiny(**{"optim.lr": lr, "optim.weight_decay": wd}) for lr, wd in hyper]
    stack = Stack.of(models)
    opt = StackedOptimizer(stack, cfgs, torch.device("cpu"))
    opt.fused = fused
    solos = [torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=wd, fused=True) for m, (lr, wd) in zip(models, hyper)]
    _assert_stack_steps_like_solos(stack, opt, models, solos)


@pytest.mark.parametrize("whole", [True, False])
def test_members_sharing_lr_and_weight_decay_take_one_fused_call_on_the_stack(whole, monkeypatch):
    """All members with one (lr, wd): on a GPU the fused kernel runs on the stacked tensors whole (forced here
    on the CPU), which must give what it gives on each member's slices (the kernel is elementwise; the CPU's
    vectorised loop rounds a few second-moment entries differently in the last bit). On the CPU by default
    it takes the slices: exactly the per-member arithmetic."""
    import trainers.ensemble as ens
    from trainers.ensemble import BETAS, EPS, Stack, StackedOptimizer

    monkeypatch.setattr(ens, "WHOLE_STACK_DEVICES", ("cuda", "cpu") if whole else ("cuda",))

    models = []
    for s in range(4):
        torch.manual_seed(s)
        models.append(torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 2)))
    cfgs = [tiny(seed=s) for s in range(4)]
    opt = StackedOptimizer(Stack.of(models), cfgs, torch.device("cpu"))
    (lr, wd), = opt.by_hyper  # one group: every member
    ref = {n: p.detach().clone() for n, p in opt.stack.params.items()}  # the same step on member slices
    ref_m1 = {n: torch.zeros_like(p) for n, p in ref.items()}
    ref_m2 = {n: torch.zeros_like(p) for n, p in ref.items()}
    calls, real = [], torch._fused_adamw_
    g = torch.Generator().manual_seed(0)
    try:
        torch._fused_adamw_ = lambda ps, *a, **k: (calls.append(len(ps)), real(ps, *a, **k))
        for t in range(1, 6):
            # in each parameter's memory layout (linear weights are stored transposed): the CPU's fused
            # kernel silently mixes up elements when a parameter and its gradient have different strides
            grads = {name: torch.empty_like(p).copy_(torch.randn(p.shape, generator=g))
                     for name, p in opt.stack.params.items()}
            opt.step(grads)
            ps = [ref[n][k] for n in ref for k in range(4)]
            real(ps, [grads[n][k] for n in ref for k in range(4)], [ref_m1[n][k] for n in ref for k in range(4)],
                 [ref_m2[n][k] for n in ref for k in range(4)], [], [torch.tensor(float(t))] * len(ps), lr=lr,
                 beta1=BETAS[0], beta2=BETAS[1], weight_decay=wd, eps=EPS, amsgrad=False, maximize=False)
    finally:
        torch._fused_adamw_ = real
    assert calls == [len(ref) * (1 if whole else 4)] * 5  # one tensor per parameter, or per member and parameter
    for name, p in opt.stack.params.items():
        if whole:
            torch.testing.assert_close(p, ref[name], rtol=1e-6, atol=1e-9)
            torch.testing.assert_close(opt.state[name]["exp_avg_sq"], ref_m2[name], rtol=1e-6, atol=0)
        else:
            assert torch.equal(p, ref[name]) and torch.equal(opt.state[name]["exp_avg_sq"], ref_m2[name])


@pytest.mark.slow
def test_the_cuda_graph_code_path_trains_like_eager_when_run_on_the_cpu(tmp_path, monkeypatch):
    """--cuda-graphs is GPU only, but its code path (torch.compile mode reduce-overhead, a CUDA-graph step mark
    before every step) also runs on the CPU, where the mode has no graphs to record: with the GPU check
    bypassed it must train the same runs as eager (up to compiled float reordering), solo and ensemble."""
    import trainers.train as tr

    monkeypatch.setattr(tr, "check_cuda_graphs", lambda device, graphs: None)  # the one GPU check (SpeedOptions too)
    cfgs = [tiny(seed=s, **{"optim.epochs": 2}) for s in (0, 1)]
    train(cfgs[0], tmp_path / "solo-eager", log=quiet)
    train(cfgs[0], tmp_path / "solo-graphs", log=quiet, cuda_graphs=True)
    assert_same_run(tmp_path / "solo-eager", tmp_path / "solo-graphs")
    train_ensemble(cfgs, [tmp_path / "ens" / str(i) for i in range(2)], log=quiet, workers=1, cuda_graphs=True)
    assert_same_run(tmp_path / "solo-eager", tmp_path / "ens" / "0")
    prov = [json.loads(s) for s in (tmp_path / "ens" / "1" / "provenance.jsonl").read_text().splitlines()]
    assert prov[-1]["cuda_graphs"] is True and prov[-1]["compile"] is True


def two_member_group():
    """Two tiny LST members (seeds 0 and 1) stacked, and a batch of 8 random puzzles for each:
    (cfgs, models, stack, x (2, 8, 16, 5), y (2, 8))."""
    from trainers.ensemble import Stack
    from trainers.model import PETransformer

    cfgs = [tiny(seed=s) for s in (0, 1)]
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(PETransformer(c.model, c.pe, torch.tensor([[i // 4, i % 4] for i in range(16)], dtype=torch.float32)))
    x = torch.nn.functional.one_hot(torch.randint(0, 5, (2, 8, 16)), 5).float()
    y = torch.randint(0, 4, (2, 8))
    return cfgs, models, Stack.of(models), x, y


def test_linear_weights_are_stored_so_their_gradients_need_no_copy():
    """Stacked linear weights keep the (K, out, in) shape but (K, in, out) memory, the layout the batched
    products read: the gradients autograd returns already have each parameter's strides, so the optimizer
    takes them as they are (on a GPU at K = 300 the copy was ~1.5 GB per step). Member state written into
    checkpoints is contiguous, as a solo run's fused AdamW needs."""
    from trainers.ensemble import StackedOptimizer, group_loss, linear_weight_names, template_model
    from trainers.train import in_layout_of

    cfgs, models, stack, x, y = two_member_group()
    names = linear_weight_names(models[0])
    assert "blocks.0.attn.qkv.weight" in names and "head.weight" in names and "blocks.0.pe.table" not in names
    for name, p in stack.params.items():
        assert p.shape[1:] == dict(models[0].named_parameters())[name].shape
        assert p.is_contiguous() is (name not in names)
        torch.testing.assert_close(p[1], dict(models[1].named_parameters())[name].detach(), rtol=0, atol=0)
    losses = group_loss(template_model(models[0]), stack.buffers)(stack.params, x, y)
    grads = torch.autograd.grad(losses.sum(), list(stack.params.values()))
    for (name, p), g in zip(stack.params.items(), grads):  # the readout layer's qkv weight too (two slices)
        assert g.stride() == p.stride(), name
        assert in_layout_of(g, p) is g
    opt = StackedOptimizer(stack, cfgs, torch.device("cpu"))
    opt.step(dict(zip(stack.params, grads)))
    state = opt.member_optimizer(models[1], cfgs[1], 1).state_dict()["state"]
    assert state and all(v.is_contiguous() for st in state.values() for v in st.values())


def test_fused_adamw_updates_each_members_weights_in_place_with_no_copy():
    """The fused AdamW kernel clones a non-contiguous parameter and copies it back on the CPU; the stacked
    linear weights' member slices are transposed in memory, so the optimizer hands it their contiguous
    transposes (`_dense_transposed`). The same update bit for bit as the slices themselves, and no copies."""
    from torch.profiler import profile

    from trainers.ensemble import StackedOptimizer, _dense_transposed, _member_slices, group_loss, template_model

    cfgs, models, stack, x, y = two_member_group()
    losses = group_loss(template_model(models[0]), stack.buffers)(stack.params, x, y)
    grads = dict(zip(stack.params, torch.autograd.grad(losses.sum(), list(stack.params.values()))))
    w = stack.params["blocks.0.mlp.fc.weight"]
    b = stack.params["blocks.0.mlp.fc.bias"]
    assert _dense_transposed(w) and not _dense_transposed(b)
    dense = _member_slices(w, True)[1]
    assert not w[1].is_contiguous() and dense.is_contiguous()
    assert dense.data_ptr() == w[1].data_ptr() and torch.equal(dense.t(), w[1])
    assert all(torch.equal(s, b[k]) and s.data_ptr() == b[k].data_ptr() for k, s in enumerate(_member_slices(b, False)))

    def stepped(dense):
        params = {n: p.detach().clone(memory_format=torch.preserve_format) for n, p in stack.params.items()}
        opt = StackedOptimizer(type(stack)(params, stack.buffers), cfgs, torch.device("cpu"))
        assert opt.fused
        with mock.patch("trainers.ensemble._dense_transposed", dense), profile() as prof:
            for _ in range(2):
                opt.step(grads)
        copies = sum(e.count for e in prof.key_averages() if e.key in ("aten::clone", "aten::copy_"))
        return params, opt.state, copies

    new, new_state, new_copies = stepped(_dense_transposed)
    old, old_state, old_copies = stepped(lambda p: False)
    assert new_copies == 0 and old_copies > 0  # the copies it saves are there without it
    for name in new:
        assert torch.equal(new[name], old[name]), name
        assert new[name].stride() == stack.params[name].stride()
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(new_state[name][key], old_state[name][key]), (name, key)
    assert not torch.equal(new["blocks.0.mlp.fc.weight"], stack.params["blocks.0.mlp.fc.weight"])  # it stepped


def test_fused_adamw_keeps_its_member_slices_and_rebuilds_them_for_a_replaced_tensor():
    """The fused step's lists of member slices are built once per (lr, wd) group and kept (views of tensors
    updated in place): the same weights bit for bit as rebuilding them every step, with two groups of
    members; and a moment tensor replaced behind its back (a resume assigning new state) is picked up."""
    from trainers.ensemble import Stack, StackedOptimizer

    hyper = [(3e-3, 0.01), (1e-3, 0.01), (3e-3, 0.01)]
    cfgs = [tiny(**{"optim.lr": lr, "optim.weight_decay": wd}) for lr, wd in hyper]

    def run(rebuild: bool, replace_at: int | None = None):
        stack = Stack.of(_small_models())
        opt = StackedOptimizer(stack, cfgs, torch.device("cpu"))
        assert opt.fused and len(opt.by_hyper) == 2
        g = torch.Generator().manual_seed(0)
        for t in range(4):
            if rebuild:
                opt._slices.clear()
            if t == replace_at:
                name = next(iter(stack.params))
                opt.state[name]["exp_avg"] = opt.state[name]["exp_avg"].clone()
            grads = {n: torch.empty_like(p).copy_(torch.randn(p.shape, generator=g)) for n, p in stack.params.items()}
            opt.step(grads)
        return stack.params, opt

    kept, opt = run(rebuild=False)
    assert len(opt._slices) == 2
    rebuilt, _ = run(rebuild=True)
    for name in kept:
        assert torch.equal(kept[name], rebuilt[name]), name
    replaced, opt = run(rebuild=False, replace_at=2)
    for name in kept:
        assert torch.equal(replaced[name], kept[name]), name  # the new tensor's values were the old ones
    name = next(iter(replaced))
    moments = opt._slices[next(iter(opt.by_hyper))][1][1]  # the first group: members 0 and 2
    assert moments[0].data_ptr() == opt.state[name]["exp_avg"].data_ptr()  # views of the replacement


@pytest.mark.parametrize("bf16", [False, True])
def test_the_gpu_form_of_the_linear_layers_fills_no_output_from_a_broadcast_bias(bf16, monkeypatch):
    """Off `BIAS_IN_PRODUCT_DEVICES` (a GPU; forced here on the CPU) no operator of a group's forward and
    backward fills a tensor from a broadcast (zero-stride) one, as ``baddbmm(bias, ...)`` does before
    each product (on the H200, 19 strided bf16 copies per K = 300 step, ~14% of its GPU time). The CPU's
    baddbmm form is the control (the detector sees its fills), and both forms give the same losses and
    gradients. bf16 autocast runs on any CPU here (emulated where it lacks native bf16, which only `--bf16`
    refuses, for speed): this test is about the operators dispatched, not their speed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import trainers.ensemble as E
    import trainers.evaluate
    from trainers.evaluate import bf16_autocast

    monkeypatch.setattr(trainers.evaluate, "cpu_has_bf16", lambda: True)

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.broadcast_fills, self.products = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.products += name in ("bmm", "baddbmm")
            if name == "copy_" and 0 in args[1].stride() and args[0].numel() > 1:
                self.broadcast_fills.append(tuple(args[0].shape))
            if name == "baddbmm" and 0 in args[0].expand(args[1].shape[0], args[1].shape[1], args[2].shape[2]).stride():
                self.broadcast_fills.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    _, models, stack, x, y = two_member_group()
    loss_fn = E.group_loss(E.template_model(models[0]), stack.buffers,
                           bf16_autocast(torch.device("cpu"), True) if bf16 else None)

    def step(devices):
        monkeypatch.setattr(E, "BIAS_IN_PRODUCT_DEVICES", devices)
        with Calls() as calls:
            losses = loss_fn(stack.params, x, y)
            grads = torch.autograd.grad(losses.sum(), list(stack.params.values()))
        return calls, losses, grads

    gpu_form, losses, grads = step(frozenset())
    cpu_form, cpu_losses, cpu_grads = step(frozenset({"cpu"}))
    assert gpu_form.broadcast_fills == [] and gpu_form.products > 3 * len(models[0].blocks)
    assert len(cpu_form.broadcast_fills) >= 3 * len(models[0].blocks)  # the detector sees baddbmm's fills
    tol = {"rtol": 2e-2, "atol": 2e-2} if bf16 else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(losses, cpu_losses, **tol)
    for g, h in zip(grads, cpu_grads):
        assert g.stride() == h.stride()  # the optimizer's in-place layout either way
        torch.testing.assert_close(g, h, **tol)


def test_resumed_optimizer_state_is_put_in_each_parameters_layout():
    """A checkpoint's optimizer state in another memory layout than its parameter (what the ensemble wrote
    before its state was made contiguous) resumes correctly: torch's fused CPU AdamW would silently mix up
    elements (checked here: without `match_state_layout` the step is wrong)."""
    import copy

    from trainers.train import match_state_layout

    def fresh():
        torch.manual_seed(0)
        m = torch.nn.Linear(5, 3)
        return m, torch.optim.AdamW(m.parameters(), lr=0.1, fused=True)

    m, opt = fresh()
    for _ in range(2):
        opt.zero_grad()
        m(torch.randn(4, 5)).square().sum().backward()
        opt.step()
    weights, saved = copy.deepcopy(m.state_dict()), copy.deepcopy(opt.state_dict())  # (both share live tensors)
    for st in saved["state"].values():  # same values, transposed memory for the weight's state
        for key in ("exp_avg", "exp_avg_sq"):
            if st[key].dim() == 2:
                st[key] = st[key].t().contiguous().t()
    x = torch.randn(4, 5)

    def resumed_step(fix: bool) -> torch.Tensor:
        m2, opt2 = fresh()
        m2.load_state_dict(weights)
        opt2.load_state_dict(saved)
        if fix:
            match_state_layout(opt2)
            assert all(v.stride() == p.stride() for p, st in opt2.state.items() for v in st.values() if v.dim())
        m2(x).square().sum().backward()
        opt2.step()
        return m2.weight.detach().clone()

    opt.zero_grad()
    m(x).square().sum().backward()
    opt.step()
    torch.testing.assert_close(resumed_step(True), m.weight.detach(), rtol=1e-6, atol=1e-7)
    assert not torch.allclose(resumed_step(False), m.weight.detach(), atol=1e-3)  # the silent error it prevents


def grads_outside_param_layout(device: str, compile: bool, bf16: bool) -> list[str]:
    """Parameters of a stacked group whose gradient (from the group's loss, compiled or not) comes back
    in another memory layout than the parameter: each costs the fused AdamW a copy every step
    (`trainers.train.in_layout_of`). The linear weights are stored transposed (`Stack.of`) for this."""
    from pe_probe.groundtruth import grid
    from trainers.ensemble import Stack, group_loss, template_model
    from trainers.evaluate import bf16_autocast
    from trainers.model import PETransformer
    from trainers.train import compiled_step

    cfgs = [tiny(seed=s, device=device) for s in range(3)]
    coords = torch.as_tensor(grid(4, 4).coords)
    models = [PETransformer(c.model, c.pe, coords).to(device) for c in cfgs]
    stack, base = Stack.of(models), template_model(models[0])
    torch._dynamo.reset()
    fn, _ = compiled_step(group_loss(base, stack.buffers, bf16_autocast(torch.device(device), bf16)), torch.device(device), compile)
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.one_hot(torch.randint(0, 6, (3, 32, 16), generator=g), 6)[..., 1:].float().to(device)
    y = torch.randint(0, 4, (3, 32), generator=g).to(device)
    grads = torch.autograd.grad(fn(stack.params, x, y).sum(), list(stack.params.values()))
    assert any(not p.is_contiguous() for p in stack.params.values())  # the transposed storage is there to test
    return [n for (n, p), gr in zip(stack.params.items(), grads) if p.stride() != gr.stride()]


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_group_gradients_arrive_in_the_parameters_layout(compile):
    assert grads_outside_param_layout("cpu", compile, bf16=False) == []


def test_the_returned_metrics_are_each_members_own_in_order(tmp_path):
    """Kills: a job's member metrics assigned to the wrong members in train_ensemble's result list."""
    cfgs = [tiny(seed=s, **{"optim.epochs": 1}) for s in (0, 1, 2)]
    outs = [tmp_path / str(s) for s in range(3)]
    res = train_ensemble(cfgs, outs, log=quiet, workers=1)  # one group of 3
    assert res == [load_checkpoint(o / "last.pt")["metrics"] for o in outs]
    assert res[0] != res[2]  # not vacuous: the members' metrics differ


def test_stacked_sgd_is_torch_sgd_on_each_member():
    """Kills: per-member lr misassigned, weight decay dropped, or one member's momentum used for all (SGD path)."""
    from trainers.ensemble import Stack, StackedOptimizer

    hyper = [(3e-2, 0.0, 0.9), (1e-2, 0.1, 0.5), (2e-2, 0.01, 0.0)]  # (lr, weight decay, momentum)
    models = _small_models()
    cfgs = [tiny(**{"optim.name": "sgd", "optim.lr": lr, "optim.weight_decay": wd, "optim.momentum": mo})
            for lr, wd, mo in hyper]
    stack = Stack.of(models)
    opt = StackedOptimizer(stack, cfgs, torch.device("cpu"))
    solos = [torch.optim.SGD(m.parameters(), lr=lr, momentum=mo, weight_decay=wd) for m, (lr, wd, mo) in zip(models, hyper)]
    _assert_stack_steps_like_solos(stack, opt, models, solos)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])  # compiling: ~30 s
def test_attention_side_pe_groups_train_under_cpu_bf16(compile, monkeypatch):
    """Relative-PE members take the vmap path, whose bf16 attention logits go through
    `trainers.logits.HalfLogits` (an autograd.Function: it needs its own vmap rule, without which vmap
    refuses it). Under CPU bf16 autocast, eager and compiled, the group's losses and gradients match each
    member's own (bf16 tolerance: another batching of the same bf16 products). A CPU without native bf16
    computes bf16 too, only slower (which is why `bf16_autocast` refuses it): so the check runs there as well."""
    import trainers.evaluate
    from trainers.ensemble import Stack, group_loss, template_model
    from trainers.evaluate import bf16_autocast
    from trainers.model import PETransformer
    from trainers.train import compiled_step

    cfgs = [tiny(seed=s, **{"pe.kind": "relative"}) for s in (0, 1)]
    coords = torch.tensor([[i // 4, i % 4] for i in range(16)], dtype=torch.float32)
    models = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        models.append(PETransformer(c.model, c.pe, coords))
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.one_hot(torch.randint(0, 5, (2, 8, 16), generator=g), 5).float()
    y = torch.randint(0, 4, (2, 8), generator=g)
    stack = Stack.of(models)
    monkeypatch.setattr(trainers.evaluate, "cpu_has_bf16", lambda: True)
    autocast = bf16_autocast(torch.device("cpu"), True)
    torch._dynamo.reset()
    fn, _ = compiled_step(group_loss(template_model(models[0]), stack.buffers, autocast), torch.device("cpu"), compile)
    losses = fn(stack.params, x, y)
    grads = torch.autograd.grad(losses.sum(), list(stack.params.values()))
    for i, m in enumerate(models):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = m(x[i]).float()
        loss = torch.nn.functional.cross_entropy(logits, y[i])
        torch.testing.assert_close(losses[i], loss, rtol=2e-2, atol=2e-2)
        own = dict(zip([n for n, _ in m.named_parameters()], torch.autograd.grad(loss, list(m.parameters()))))
        for name, gr in zip(stack.params, grads):
            torch.testing.assert_close(gr[i].float(), own[name].float(), rtol=5e-2, atol=5e-2)


def test_the_vmap_paths_linear_layers_follow_bf16_autocast():
    """Under vmap, ``F.linear`` with a bias escapes CPU bf16 autocast (its output stays float32: the control
    below), so the vmap path's template model adds the bias after the product (`_linear_bias_after`): bf16
    under autocast, and in float32 the same values as ``nn.Linear`` up to rounding."""
    from torch.func import functional_call, vmap

    from trainers.ensemble import _linear_bias_after

    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(6, 5)
    params = {"weight": torch.randn(3, 5, 6, generator=g), "bias": torch.randn(3, 5, generator=g)}
    x = torch.randn(3, 7, 6, generator=g)
    patched = torch.nn.Linear(6, 5)
    patched.forward = _linear_bias_after.__get__(patched)

    def run(module):
        return vmap(lambda p, xx: functional_call(module, p, (xx,)))(params, x)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert run(lin).dtype == torch.float32  # torch's behaviour this works around
        assert run(patched).dtype == torch.bfloat16
    torch.testing.assert_close(run(patched), run(lin), rtol=1e-6, atol=1e-6)


def test_a_run_under_its_older_folder_name_is_named_for_renaming_not_retrained(tmp_path, capsys):
    """Member names gained _wd/_init/_sgd/_mom suffixes: rerunning an older ensemble's command trained its runs from
    scratch beside their old folders, without a word."""
    from pe_probe.cli import main

    argv = ["train", "lst", "--n-per-level", "30", "--epochs", "1", "--d-model", "16", "--layers", "1", "--heads", "1",
            "--ensemble-seeds", "0", "--weight-decay", "0.1", "--out", str(tmp_path / "ens")]
    assert main(argv) == 0
    new = tmp_path / "ens" / "learned_sigma0.1_lr0.001_seed0_wd0.1"
    old = tmp_path / "ens" / "learned_sigma0.1_lr0.001_seed0"
    new.rename(old)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "older pe-probe versions" in err and f"rename it to {new.name}" in err and not new.exists()
    other = [*argv[:-4], "--weight-decay", "0.2", "--out", str(tmp_path / "ens")]  # another config: no claim on it
    assert main(other) == 0 and (tmp_path / "ens" / "learned_sigma0.1_lr0.001_seed0_wd0.2").is_dir()


@pytest.mark.parametrize("chunk", [3, 4, 8])
def test_a_chunked_group_step_takes_the_whole_batchs_gradient(chunk):
    """`group_step` with ``chunk`` sums each chunk's gradients, weighted by its share of the batch (3 + 3 + 2 of
    8: unequal chunks), and hands the optimizer one gradient per parameter: the whole batch's, up to float
    rounding. (Compared before the optimizer: Adam turns rounding noise in a near-zero gradient into steps of
    ~lr, see `assert_same_run`.) Unweighted chunks would give the wrong sum."""
    from trainers.ensemble import Stack, group_loss, group_step, template_model
    from trainers.model import PETransformer

    cfgs = [tiny(seed=s) for s in (0, 1)]
    coords = torch.tensor([[i // 4, i % 4] for i in range(16)], dtype=torch.float32)
    models = []
    for cfg in cfgs:
        torch.manual_seed(cfg.seed)
        models.append(PETransformer(cfg.model, cfg.pe, coords))
    stack = Stack.of(models)
    fn = group_loss(template_model(models[0]), stack.buffers)
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.one_hot(torch.randint(0, 5, (2, 8, 16), generator=g), 5).float()
    y = torch.randint(0, 4, (2, 8), generator=g)

    class Recorder:
        def step(self, grads):
            self.grads = grads

    def grads(c):
        opt = Recorder()
        group_step(fn, stack, opt, x, y, nullcontext(), lambda: None, c)
        return opt.grads

    whole, chunked = grads(None), grads(chunk)
    assert whole.keys() == chunked.keys() == stack.params.keys()
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], rtol=1e-5, atol=1e-7, msg=name)
    assert any((whole[n] - chunked[n]).abs().max() > 0 for n in whole) or chunk == 8  # really another summation


def test_float32_cpu_group_steps_are_chunked_by_group_size_and_bf16_and_gpu_ones_are_not():
    from trainers.ensemble import CPU_CHUNK_ROWS, cpu_chunk

    cpu = torch.device("cpu")
    assert CPU_CHUNK_ROWS == 128
    assert [cpu_chunk(cpu, members=k) for k in (1, 2, 4, 8, 300)] == [128, 64, 32, 16, 1]  # 1: a whole batch of 128
    assert cpu_chunk(cpu, bf16=True, members=4) is None
    assert cpu_chunk(torch.device("cuda"), members=4) is None


def test_an_ensemble_run_records_its_chunk(tmp_path):
    """provenance.jsonl says how each step's batch was taken (rounding differs with the chunk)."""
    train_ensemble([tiny(**{"optim.epochs": 1})], [tmp_path / "a"], log=quiet, workers=1)
    session = json.loads((tmp_path / "a" / "provenance.jsonl").read_text().splitlines()[-1])
    assert session["trainer"] == "ensemble" and session["group_size"] == 1 and session["chunk"] == 128


def test_a_compiled_float32_cpu_ensemble_takes_inductors_cpp_wrapper(tmp_path, monkeypatch):
    """Float32 CPU groups compile with the C++ wrapper, as single models do (measured 0.966x the step time with
    chunked steps); torch.compile is recorded here and the step runs eagerly."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    train_ensemble([tiny(**{"optim.epochs": 1})], [tmp_path / "a"], log=quiet, workers=1, compile=True)
    assert {"dynamic": False, "options": {"cpp_wrapper": True}} in calls
