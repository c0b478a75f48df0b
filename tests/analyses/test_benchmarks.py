"""The benchmark scripts run end to end at toy sizes and write what the reports quote."""

import argparse
import csv
import math
import re
import sys
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "analyses" / "benchmarks"))

import bench_train  # noqa: E402
from side_by_side import side_by_side  # noqa: E402


def test_bench_train_writes_rows_ratios_and_the_arithmetic_bound(tmp_path):
    argv = ["--d-models", "16", "--ks", "2,3", "--steps", "2", "--warmup", "1", "--rounds", "1", "--threads", "1",
            "--no-bf16", "--no-compile", "--out", str(tmp_path)]
    assert bench_train.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "train.csv")))
    configs = {r["config"] for r in rows}
    assert {"naive", "single", "single-nosync", "single-split", "ensemble-2", "ensemble-3"} <= configs
    assert all(float(r["puzzles_per_s"]) > 0 and float(r["x_naive"]) > 0 for r in rows)
    by = {r["config"]: r for r in rows}
    assert float(by["naive"]["x_naive"]) == 1.0 and float(by["naive-parallel"]["x_naive_parallel"]) == 1.0
    assert float(by["single-parallel"]["x_single_parallel"]) == 1.0 and int(by["single-parallel"]["models"]) >= 1
    assert float(by["ensemble-3"]["x_single_parallel"]) > 0  # the ensemble against our trainer, one process per core
    text = (tmp_path / "train.md").read_text()
    assert "Arithmetic bound" in text and "| 16 |" in text and "Targets (issue 7" in text
    (bound,) = csv.DictReader(open(tmp_path / "train_bound.csv"))  # the bound table's inputs, re-derivable
    assert bound["d_model"] == "16" and float(bound["flops_ours"]) < float(bound["flops_naive"])
    rate = float(bound["gemm_fp32"]) / float(bound["flops_ours"])
    assert f"| {rate:.0f} |" in text


def test_bench_train_writes_its_report_after_every_round_so_a_cut_short_run_keeps_its_numbers(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = bench_train.bench_single

    def single_then_cut(*a, **k):  # the lease ends during the second round
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(bench_train, "bench_single", single_then_cut)
    argv = ["--d-models", "16", "--ks", "2", "--steps", "2", "--warmup", "1", "--rounds", "2", "--threads", "1",
            "--no-bf16", "--no-compile", "--out", str(tmp_path)]
    monkeypatch.setattr(bench_train, "plan", lambda args: [c for c in real_plan(args) if "parallel" not in c[0]])
    with pytest.raises(KeyboardInterrupt):
        bench_train.main(argv)
    text = (tmp_path / "train.md").read_text()
    assert "Partial: 1 of 2 rounds" in text and "| 16 | single |" in text
    assert {r["config"] for r in csv.DictReader(open(tmp_path / "train.csv"))} >= {"naive", "single", "ensemble-2"}


def test_a_run_cut_short_in_its_first_round_keeps_the_configurations_already_measured(tmp_path, monkeypatch):
    def cut(*a, **k):  # the lease ends at the first ensemble: the single-model rows must survive
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_train, "bench_ensemble", cut)
    monkeypatch.setattr(bench_train, "plan", lambda args: [c for c in real_plan(args) if "parallel" not in c[0]])
    argv = ["--d-models", "16", "--ks", "2", "--steps", "2", "--warmup", "1", "--rounds", "2", "--threads", "1",
            "--no-bf16", "--no-compile", "--out", str(tmp_path)]
    with pytest.raises(KeyboardInterrupt):
        bench_train.main(argv)
    assert "Partial: 0 of 2 rounds" in (tmp_path / "train.md").read_text()
    assert {r["config"] for r in csv.DictReader(open(tmp_path / "train.csv"))} == {"naive", "single", "single-nosync", "single-split"}


def test_the_bound_table_has_a_column_group_per_precision_measured(monkeypatch):
    rows = [{"config": "naive", "d_model": 160, "models": 1, "steps": 2, "seconds": 1.0, "puzzles_per_s": 1000.0,
             "worst_round": 900.0, "x_naive": 1.0, "x_naive_paired": 1.0, "x_naive_parallel": "",
             "x_single_parallel": "", "sweep_hours": 2700.0}]
    bounds = {160: {"flops_naive": 120e6, "flops_ours": 96e6, "gemm_fp32": 40e12, "gemm_tf32": 200e12, "gemm_bf16": 400e12}}
    args = type("A", (), {"rounds": 1})()
    text = bench_train.report(rows, torch.device("cpu"), [0.5], args, bounds)
    header = next(line for line in text.splitlines() if line.startswith("| d_model | MFLOP"))
    assert [c for c in ("fp32", "tf32", "bf16") if f"GEMM {c} (GFLOP/s)" in header] == ["fp32", "tf32", "bf16"]
    row = next(line for line in text.splitlines() if line.startswith("| 160 | 120.0"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(header.strip("|").split("|")) == 15
    # 40 TFLOP/s / 96 MFLOP per puzzle = 416,667/s, 416.67x naive, 9.72e9 puzzle-passes in 6.5 h
    assert cells[3:7] == ["40000", "416667", "416.67", "6.5"]
    assert "bounds one model only" not in text  # on the CPU it bounds the ensembles too
    monkeypatch.setattr(bench_train, "machine", lambda device: "a GPU machine")  # no CUDA here to describe
    assert "On a GPU it bounds one model only" in bench_train.report(rows, torch.device("cuda"), [0.5], args, bounds)


real_plan = bench_train.plan


def test_our_model_needs_fewer_flops_per_puzzle_than_the_naive_loop():
    """Readout-only last layer: at 4 layers about a fifth fewer training FLOPs than the full model."""
    dev = torch.device("cpu")
    ours, _, _ = bench_train._our_model(32, dev)
    full = bench_train.flops_per_puzzle(ours, dev, readout_only=False)
    pruned = bench_train.flops_per_puzzle(ours, dev)
    naive = bench_train.flops_per_puzzle(bench_train.NaiveModel(32), dev)
    assert pruned < 0.85 * full
    assert full == pytest.approx(naive, rel=0.05)  # same architecture when nothing is pruned


def _sleepy_loop(path, fail=False):
    """A side-by-side loop (module level, so it pickles): records its process and thread count, then sleeps."""
    import os
    import time

    if fail:
        raise ValueError("no such width")
    Path(path).write_text(f"{os.getpid()} {torch.get_num_threads()}")
    return lambda i: time.sleep(0.1)


def test_side_by_side_runs_each_loop_in_its_own_one_thread_process_at_the_same_time(tmp_path):
    import os

    files = [tmp_path / "a", tmp_path / "b"]
    secs = side_by_side(_sleepy_loop, [{"path": str(f)} for f in files], warmup=1, steps=5)
    assert 0.45 < secs < 0.95  # 5 sleeps of 0.1 s each, the two loops at once (one after the other: >= 1 s)
    seen = [f.read_text().split() for f in files]
    assert len({pid for pid, _ in seen}) == 2 and str(os.getpid()) not in {pid for pid, _ in seen}
    assert all(threads == "1" for _, threads in seen)


def test_side_by_side_surfaces_a_workers_error():
    with pytest.raises(RuntimeError, match="ValueError: no such width"):
        side_by_side(_sleepy_loop, [{"path": "unused", "fail": True}, {"path": "unused2", "fail": True}], 1, 1)


@pytest.mark.slow
def test_compiled_ensemble_benchmark_runs_groups_in_worker_processes():
    secs, k = bench_train.bench_ensemble(16, torch.device("cpu"), 2, 1, k=3, compile=True, workers=2)
    assert k == 3 and secs > 0


def test_split_batch_gradients_equal_the_whole_batchs_and_the_split_step_trains():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch.nn.functional as F

    dev = torch.device("cpu")
    model, _, _ = bench_train._our_model(16, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    x, y = (t[:10] for t in bench_train.fake_data(dev))  # 10 puzzles in uneven parts: 4 + 4 + 2
    whole = torch.autograd.grad(F.cross_entropy(model(x), y), params)
    with ThreadPoolExecutor(2) as pool:
        split = bench_train.split_gradients(model, params, list(x.chunk(3)), list(y.chunk(3)), len(x), pool.submit)
    assert len(split) == len(whole)
    for a, b in zip(whole, split):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    assert not torch.equal(whole[0], torch.zeros_like(whole[0]))
    before = [p.detach().clone() for p in params]
    threads = torch.get_num_threads()
    secs, k = bench_train.bench_single_split(16, dev, 2, 1, workers=2)
    assert k == 1 and secs > 0 and torch.get_num_threads() == threads  # the thread count is restored
    assert not [th for th in threading.enumerate() if th.name.startswith("split")]  # its pool's threads ended
    assert all(torch.equal(a, p) for a, p in zip(before, params))  # the benchmark trains its own model


def test_ensemble_benchmark_runs_groups_on_worker_threads():
    secs, k = bench_train.bench_ensemble(16, torch.device("cpu"), 2, 1, k=3, workers=2)
    assert k == 3 and secs > 0


@pytest.mark.slow
def test_precision_check_trains_three_arithmetics_and_reports(tmp_path):
    import precision_check

    argv = ["--seeds", "0", "--sigmas", "0.1,2.0", "--epochs", "1", "--work", str(tmp_path / "runs"),
            "--out", str(tmp_path / "out")]
    assert precision_check.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "out" / "precision.csv")))
    assert len(rows) == 2 and "ood_fp32-solo" in rows[0]
    assert "Mean OOD at sigma 0.1 minus at sigma 2" in (tmp_path / "out" / "precision.md").read_text()


def test_precision_report_summarises_the_spread_between_arithmetics():
    """Largest and median per-run spread (the median of an even count is the mean of the middle two) and the
    sigma contrast per arithmetic."""
    import precision_check

    variants = ["a", "b"]
    oods = [(0.90, 0.95), (0.20, 0.35), (0.80, 0.84), (0.30, 0.42)]  # spreads 0.05, 0.15, 0.04, 0.12
    rows = [{"seed": i // 2, "sigma": (0.1, 2.0)[i % 2], "ood_a": a, "ood_b": b, "rsa_a": 0.1, "rsa_b": 0.1 + i / 100}
            for i, (a, b) in enumerate(oods)]
    text = precision_check.report(rows, variants, 40, [])
    assert "OOD 0.150 (median 0.085); RSA 0.030." in text
    assert "per arithmetic: a +0.600, b +0.510." in text


def _run_gpu_session(out: Path, timeout: int, **env: str):
    """`gpu_session.sh OUT` at toy size on the CPU (DEVICE=cpu), with ``env`` added to the environment."""
    import os
    import subprocess

    env = {**os.environ, "DEVICE": "cpu", "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", "analyses/benchmarks/gpu_session.sh", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_prepared_gpu_session_script_runs_end_to_end_at_toy_size_on_the_cpu(tmp_path):
    """`gpu_session.sh` is run once on a lent GPU; this keeps it working between such sessions."""
    from trainers.provenance import _git  # git in this checkout: its output, or None where git fails

    clean = _git("status", "--porcelain") == ""  # before the run: a clean checkout (CI's clone) must stay one
    res = _run_gpu_session(tmp_path, 3000, SENT_COMMIT="abc1234")  # the script's own limits (x5 on the CPU) stop it first
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    # two files come back (the device tool returns at most 8): the archive of every output, and a summary
    assert {p.name for p in tmp_path.iterdir()} == {"gpu_session.tgz", "summary.txt"}
    with tarfile.open(tmp_path / "gpu_session.tgz") as tar:
        names = {Path(n).name for n in tar.getnames()}
        machine = tar.extractfile("./machine.txt").read().decode()
        tests_log = tar.extractfile("./cuda_tests.log").read().decode()
        experiments = {n for n in tar.getnames() if n.endswith("/profile.md")}
    assert {"machine.txt", "cuda_tests.log", "bench.log", "train.csv", "train.md", "profile.log", "profile.csv",
            "profile.md", "sweep.log", "sweep.csv", "sweep.md"} <= names
    assert experiments == {"./profile.md", "./fp32logits/profile.md"}
    assert "profile exit 0, sweep exit 0, cuda tests exit 0, benchmark exit 0; experiment: float32 logits exit 0" in machine
    assert "skipped" in tests_log  # no GPU here: the CUDA tests skip, not fail
    # which code ran: the commit the caller names, and the tree hash that names it where .git is stale
    sent = re.search(r"^commit sent: abc1234; working tree: ([0-9a-f]{40})$", machine, re.M)
    assert sent and _git("cat-file", "-t", sent.group(1)) == "tree"
    if clean:
        assert sent.group(1) == _git("rev-parse", "HEAD^{tree}")
    summary = (tmp_path / "summary.txt").read_text()
    assert "| d_model | config |" in summary and "| config | d_model |" in summary and "| part | hours |" in summary
    assert "| ensemble+fp32-logits |" in summary


def test_the_gpu_session_scripts_experiment_plan_profiles_each_flag_in_its_own_process(tmp_path):
    """PLAN=experiments: machine.txt and one profile per experiment, nothing else (a lease's second call)."""
    res = _run_gpu_session(tmp_path, 1500, PLAN="experiments")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    with tarfile.open(tmp_path / "gpu_session.tgz") as tar:
        names = set(tar.getnames())
        machine = tar.extractfile("./machine.txt").read().decode()
    profiles = {n for n in names if n.endswith("/profile.md")}
    assert profiles == {f"./experiments/{e}/profile.md" for e in ("plain", "fp32logits", "packed4", "packed4_cd")}
    assert not {"./cuda_tests.log", "./sweep.log", "./bench.log"} & names
    assert "experiments exit: plain=0 fp32logits=0 packed4=0 packed4_cd=0" in machine
    summary = (tmp_path / "summary.txt").read_text()
    assert "| ensemble+fp32-logits |" in summary and "| ensemble+coord-descent+packed4 |" in summary


def test_the_gpu_session_script_keeps_to_its_budget_and_skips_what_does_not_fit(tmp_path):
    """One deadline for the whole script: a lease's call must return with what was measured, so a step is cut
    at what is left of the budget and the steps after it are skipped (exit 125), not started."""
    import time

    t0 = time.monotonic()
    res = _run_gpu_session(tmp_path, 600, BUDGET_CPU="16")
    assert time.monotonic() - t0 < 120  # the budget, plus start-up and packing; unbudgeted it runs for minutes
    assert res.returncode != 0  # the needed steps did not all run
    with tarfile.open(tmp_path / "gpu_session.tgz") as tar:
        machine = tar.extractfile("./machine.txt").read().decode()
        skipped = tar.extractfile("./bench.log").read().decode()
    assert "float32 logits exit 125" in machine and "benchmark exit 125" in machine
    assert skipped.startswith("skipped:") and "of the 16 s budget" in skipped


def test_profile_step_writes_wall_time_and_top_operators_per_configuration(tmp_path, monkeypatch):
    import profile_step

    argv = ["--d-model", "16", "--k", "2", "--steps", "2", "--warmup", "1", "--configs", "single,ensemble",
            "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    rows = {r["config"]: r for r in csv.DictReader(open(tmp_path / "profile.csv"))}
    assert set(rows) == {"single", "ensemble"} and rows["ensemble"]["models"] == "2"
    assert all(float(r["wall_ms_per_step"]) > 0 and float(r["puzzles_per_s"]) > 0 for r in rows.values())
    assert all(r["device_busy_fraction"] == "" for r in rows.values())  # the CPU has no device timeline
    text = (tmp_path / "profile.md").read_text()
    assert "## single: top 15 operators" in text and "aten::" in text and "(raw numbers: `profile.csv`)" in text
    assert "By input shapes" not in text
    import trainers.ensemble

    # --contiguous-weights: an experiment on the stack's weight layout (patched for this process; restored after)
    monkeypatch.setattr(trainers.ensemble, "linear_weight_names", trainers.ensemble.linear_weight_names)
    assert profile_step.main(argv[:-2] + ["--configs", "ensemble", "--shapes", "--contiguous-weights",
                                          "--out", str(tmp_path / "shapes")]) == 0
    assert trainers.ensemble.linear_weight_names(None) == set()
    shaped = (tmp_path / "shapes" / "profile.md").read_text()
    # (K, chunk, tokens, d_model) activations: the CPU group of 2 takes its batch of 128 in chunks of 64
    assert "By input shapes" in shaped and "[2, 64, 16, 16]" in shaped
    assert "| ensemble+contiguous-w | 16 | 2 |" in shaped
    # --bias-in-product: baddbmm on a GPU too (the CPU's form anyway: a GPU's form is forced first)
    monkeypatch.setattr(trainers.ensemble, "BIAS_IN_PRODUCT_DEVICES", frozenset())
    assert profile_step.main(argv[:-2] + ["--configs", "ensemble", "--out", str(tmp_path / "gpu-form")]) == 0
    assert "aten::baddbmm" not in (tmp_path / "gpu-form" / "profile.md").read_text()
    assert profile_step.main(argv[:-2] + ["--configs", "ensemble", "--bias-in-product",
                                          "--out", str(tmp_path / "baddbmm")]) == 0
    badd = (tmp_path / "baddbmm" / "profile.md").read_text()
    assert "aten::baddbmm" in badd and "| ensemble+baddbmm | 16 | 2 |" in badd
    assert trainers.ensemble.BIAS_IN_PRODUCT_DEVICES == {"cpu", "cuda"}
    # --bf16-residual: the LayerNorms return the autocast dtype (a no-op outside autocast)
    monkeypatch.setattr(trainers.ensemble, "_layer_norm", trainers.ensemble._layer_norm)
    assert profile_step.main(argv[:-2] + ["--configs", "ensemble", "--bf16-residual",
                                          "--out", str(tmp_path / "bf16res")]) == 0
    assert "| ensemble+bf16-residual | 16 | 2 |" in (tmp_path / "bf16res" / "profile.md").read_text()
    x, w, b = torch.randn(2, 3, 8), torch.randn(2, 8), torch.randn(2, 8)
    assert trainers.ensemble._layer_norm(x, w, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = trainers.ensemble._layer_norm(x, w, b)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), torch.nn.functional.layer_norm(x, (8,)) * w[:, None] + b[:, None],
                               rtol=1e-2, atol=2e-2)
    with pytest.raises(SystemExit):
        profile_step.main(["--configs", "single,nope", "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_device_busy_time_leaves_out_the_gpus_user_annotations():
    """A compiled step's graph annotations span its kernels on the device timeline: counting them doubled
    the busy time of the third GPU session's profiles (66.3 ms in a 35.6 ms step)."""
    from types import SimpleNamespace

    import profile_step
    from torch.autograd import DeviceType

    def event(device_type, us, annotation=False):
        return SimpleNamespace(device_type=device_type, device_time_total=us, is_user_annotation=annotation)

    events = [event(DeviceType.CUDA, 300.0), event(DeviceType.CUDA, 200.0), event(DeviceType.CPU, 999.0),
              event(DeviceType.CUDA, 500.0, annotation=True)]  # "## Call CompiledFxGraph ... ##"
    prof = SimpleNamespace(events=lambda: events)
    assert profile_step.device_events(prof, torch.device("cuda")) == (500.0, 2)
    busy, n = profile_step.device_events(prof, torch.device("cpu"))
    assert math.isnan(busy) and n == 0


def test_float32_logits_experiment_restores_the_float32_product(tmp_path, monkeypatch):
    """--float32-logits points `trainers.model.logits_product`, which every attention-weights call goes through,
    at the float32 product of the upcast inputs (the GPU's form before the fourth lease) and tags the rows."""
    import profile_step

    import trainers.logits
    import trainers.model

    monkeypatch.setattr(trainers.model, "logits_product", trainers.model.logits_product)
    argv = ["--d-model", "16", "--k", "2", "--steps", "1", "--warmup", "1", "--configs", "ensemble",
            "--float32-logits", "--top", "3", "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    assert trainers.model.logits_product is trainers.logits.float32_logits
    assert "| ensemble+fp32-logits | 16 | 2 |" in (tmp_path / "profile.md").read_text()
    with pytest.raises(SystemExit):
        profile_step.main(argv[:-4] + ["--top", "0", "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("nh, tq", [(1, 16), (2, 16), (1, 1)])
def test_packed_attention_is_each_puzzles_attention_alone(nh, tq):
    """Packing P puzzles into one sequence with a block-diagonal mask changes the products' shapes, not the
    maths: the same outputs and gradients as attending puzzle by puzzle (to float32 rounding), for the study's
    16 tokens, several heads, and the readout layer's single query."""
    import step_experiments as ex

    from trainers.model import matmul_attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(12, nh, tq, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(12, nh, 16, 8, generator=g, requires_grad=True) for _ in range(2))
    packed = ex.packed_attention(4)
    y = packed(q, k, v)
    ref = matmul_attention(q, k, v)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    w = torch.randn(y.shape, generator=g)
    for a, b in zip(torch.autograd.grad((y * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    mask = ex.block_diagonal_mask(3, 2, 4, torch.device("cpu"))
    assert mask.shape == (6, 12) and mask[1, :4].all() and not mask[1, 4:].any() and mask[5, 8:].all()
    # a batch of 10 does not split into 4s: the plain attention, unchanged
    torch.testing.assert_close(packed(q[:10], k[:10], v[:10]), ref[:10])


def test_profile_step_packed_attention_and_coordinate_descent_flags(tmp_path, monkeypatch):
    """--packed-attention P routes the trainers' attention through `packed_attention` and tags the rows;
    --coordinate-descent sets Inductor's flag; a P of 1 or below 0 is refused before anything is written."""
    import profile_step
    import torch._inductor.config as inductor_config

    import trainers.ensemble
    import trainers.model

    monkeypatch.setattr(trainers.model, "attend", trainers.model.attend)
    monkeypatch.setattr(trainers.ensemble, "attend", trainers.ensemble.attend)
    # not monkeypatch.setattr: its undo deletes the attribute, which hides the option from Inductor for good
    before = inductor_config.coordinate_descent_tuning
    argv = ["--d-model", "16", "--k", "2", "--steps", "1", "--warmup", "1", "--configs", "ensemble",
            "--top", "3", "--packed-attention", "4", "--coordinate-descent", "--out", str(tmp_path)]
    try:
        assert profile_step.main(argv) == 0
        assert inductor_config.coordinate_descent_tuning is True
    finally:
        inductor_config.coordinate_descent_tuning = before
    assert trainers.ensemble.attend is trainers.model.attend and trainers.model.attend.__qualname__.startswith("packed_attention")
    assert "| ensemble+coord-descent+packed4 | 16 | 2 |" in (tmp_path / "profile.md").read_text()
    for bad in ("1", "-2"):
        with pytest.raises(SystemExit):
            profile_step.main(argv[:-3] + [bad, "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name", ["tanh-gelu", "relu"])
def test_profile_step_activation_flag_swaps_only_the_mlps_gelu(tmp_path, monkeypatch, name):
    """--activation NAME replaces the trainers' modules' ``gelu`` by the stand-in (the model's MLP then
    computes it: checked on a single model against the stand-in by hand), leaves torch's own functions alone,
    tags the rows, and refuses an unknown name before writing."""
    import torch.nn.functional as F

    import profile_step
    import step_experiments as ex

    import trainers.ensemble
    import trainers.gelu
    import trainers.model
    from trainers.config import ModelConfig
    from trainers.model import MLP

    monkeypatch.setattr(trainers.model, "gelu", trainers.model.gelu)
    monkeypatch.setattr(trainers.ensemble, "gelu", trainers.ensemble.gelu)
    argv = ["--d-model", "16", "--k", "2", "--steps", "1", "--warmup", "1", "--configs", "ensemble",
            "--top", "3", "--activation", name, "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    assert trainers.model.gelu is trainers.ensemble.gelu is ex.ACTIVATIONS[name]
    assert trainers.gelu.gelu is not ex.ACTIVATIONS[name] and F.gelu is not ex.ACTIVATIONS[name]
    mlp = MLP(ModelConfig(d_model=8))
    x = torch.randn(3, 8)
    expected = mlp.proj(F.gelu(mlp.fc(x), approximate="tanh") if name == "tanh-gelu" else F.relu(mlp.fc(x)))
    torch.testing.assert_close(mlp(x), expected)
    assert not torch.allclose(mlp(x), mlp.proj(F.gelu(mlp.fc(x))))
    assert f"| ensemble+{name} | 16 | 2 |" in (tmp_path / "profile.md").read_text()
    with pytest.raises(SystemExit):
        profile_step.main(argv[:-3] + ["swish", "--out", str(tmp_path / "bad")])
    assert not (tmp_path / "bad").exists()


def test_profile_step_compile_mode_reaches_torch_compile_and_tags_compiled_rows_only(tmp_path, monkeypatch):
    """--compile-mode sets `trainers.train.COMPILE_MODE`, which `compiled_step` hands to torch.compile."""
    import profile_step

    import trainers.train

    monkeypatch.setattr(trainers.train, "COMPILE_MODE", None)
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)  # no compilation: eager
    argv = ["--d-model", "16", "--k", "2", "--steps", "1", "--warmup", "1", "--configs", "ensemble,ensemble-compile",
            "--compile-mode", "max-autotune-no-cudagraphs", "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    # the compiled configuration only (twice on the CPU: the timed copy and the per-kernel profiled one)
    assert seen and all(kw == {"dynamic": False, "mode": "max-autotune-no-cudagraphs"} for kw in seen)
    configs = [r["config"] for r in csv.DictReader(open(tmp_path / "profile.csv"))]
    assert configs == ["ensemble", "ensemble-compile+max-autotune-no-cudagraphs"]
    trainers.train.COMPILE_MODE = None
    trainers.train.compiled_step(lambda: None, torch.device("cpu"), compile=True)
    assert seen[-1] == {"dynamic": False, "mode": None}  # the trainers' default: torch's default mode


@pytest.mark.slow
def test_profile_step_lists_the_generated_kernels_of_a_compiled_cpu_step(tmp_path):
    import profile_step

    argv = ["--d-model", "16", "--k", "2", "--steps", "2", "--warmup", "1", "--configs", "single-compile", "--top", "60",
            "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    text = (tmp_path / "profile.md").read_text()
    assert "| single-compile | 16 | 1 |" in text and "cpp_fused" in text  # one row per Inductor kernel


def test_bench_attention_writes_every_path_for_every_shape(tmp_path):
    import bench_attention

    from trainers.evaluate import cpu_has_bf16

    assert bench_attention.main(["--rounds", "1", "--reps", "1", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "attention.csv")))
    assert {int(r["keys"]) for r in rows} == {s[3] for s in bench_attention.SHAPES}
    assert all(float(r[c]) > 0 for r in rows for c in ("fused_ms", "fused_fp32_ms", "math_ms", "attend_ms"))
    paths = {(r["arithmetic"], int(r["keys"])): r["attend_path"] for r in rows}
    assert paths[("float32", 16)] == "matmul-softmax" and paths[("float32", 64)] == "fused float32"
    if cpu_has_bf16():
        assert paths[("bf16 autocast", 80)] == "matmul-softmax"
    assert {r["fused_ms"] == r["fused_fp32_ms"] for r in rows if r["arithmetic"] == "float32"} == {True}
    assert "fused SDPA" in (tmp_path / "attention.md").read_text()


def test_bench_masked_times_the_trainers_step_per_task_preset_and_speed_option(tmp_path, monkeypatch):
    import bench_masked

    from trainers.evaluate import cpu_has_bf16

    argv = ["--tasks", "netsim,brain", "--presets", "quick", "--steps", "2", "--warmup", "1", "--rounds", "2",
            "--no-compile", "--out", str(tmp_path)]
    assert bench_masked.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "masked.csv")))
    want = {"eager", "bf16"} if cpu_has_bf16() else {"eager"}
    assert {(r["task"], r["config"]) for r in rows} == {(t, c) for t in ("netsim", "brain") for c in want}
    assert all(float(r["windows_per_s"]) >= float(r["worst_round"]) > 0 for r in rows)
    assert all(float(r["x_eager"]) == 1.0 for r in rows if r["config"] == "eager")
    assert "paper run" in (tmp_path / "masked.md").read_text()
    assert "(raw numbers: `masked.csv`)" in (tmp_path / "masked.md").read_text()
    monkeypatch.setattr(bench_masked, "machine", lambda device: "a GPU")  # no CUDA to ask here
    cuda = bench_masked.report([], torch.device("cuda"), [0.0], argparse.Namespace(), argv, {})
    assert "(raw numbers: `masked_cuda.csv`)" in cuda  # the file a GPU run writes (it named masked.csv)


def test_bench_masked_float32_logits_flag_patches_the_product_and_says_so(tmp_path, monkeypatch):
    """--float32-logits runs the bf16 rows with the float32 logits product (the A/B of `HalfLogits` on the
    masked models) and the report names the experiment; without it the trainers' product stays."""
    import bench_masked

    import trainers.logits
    import trainers.model

    monkeypatch.setattr(trainers.model, "logits_product", trainers.model.logits_product)  # restored afterwards
    argv = ["--tasks", "netsim", "--presets", "quick", "--steps", "1", "--warmup", "1", "--rounds", "1",
            "--no-compile", "--no-bf16", "--out", str(tmp_path)]
    assert bench_masked.main(argv) == 0
    assert trainers.model.logits_product is trainers.logits.logits_product
    assert "Experiment:" not in (tmp_path / "masked.md").read_text()
    assert bench_masked.main(argv + ["--float32-logits"]) == 0
    assert trainers.model.logits_product is trainers.logits.float32_logits
    assert "Experiment: --float32-logits" in (tmp_path / "masked.md").read_text()


def test_bench_masked_projects_a_paper_run_from_the_paper_config():
    import bench_masked

    from trainers.config import make_masked_config

    cfg = make_masked_config("netsim", "paper")
    assert bench_masked.paper_windows("netsim") == (cfg.optim.epochs, cfg.data.n_train)


def test_gpu_targets_name_the_best_configuration_and_the_rate_the_sweep_needs():
    rows = {("naive", 160): {"x_naive": 1.0, "sweep_hours": 300.0, "config": "naive"},
            ("ensemble-32", 160): {"x_naive": 12.5, "sweep_hours": 3.1, "config": "ensemble-32"},
            ("ensemble-300-bf16", 160): {"x_naive": 31.0, "sweep_hours": 1.4, "config": "ensemble-300-bf16"},
            ("single", 64): {"x_naive": 99.0, "sweep_hours": 0.1, "config": "single"}}  # another width: ignored
    lines = bench_train.gpu_targets(rows, {160: {"flops_ours": 96.5e6}})
    text = "\n".join(lines)
    assert "best ensemble-300-bf16 at 31.0x, 1.4 h: **met**" in text
    need = bench_train.SWEEP_PUZZLES * 96.5e6 / 7200 / 1e12
    assert f"needs {need:.0f} TFLOP/s" in text
    rows[("ensemble-300-bf16", 160)].update(x_naive=15.0, sweep_hours=2.5)
    assert "**met**" not in "\n".join(bench_train.gpu_targets(rows, {}))


def test_bench_memory_measures_each_setting_in_its_own_process(tmp_path):
    import bench_memory

    argv = ["--cases", "single d64", "--rounds", "1", "--steps", "1", "--warmup", "1", "--out", str(tmp_path)]
    assert bench_memory.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "memory.csv")))
    assert [(r["case"], r["malloc"]) for r in rows] == [("single d64", "default"), ("single d64", "ours")]
    if sys.platform.startswith("linux"):  # glibc: the default process really ran untouched, ours tuned
        assert [r["applied"] for r in rows] == ["False", "True"]
    assert all(float(r["per_s"]) > 0 for r in rows) and rows[0]["x_default"] == "1.0"


def test_each_configuration_is_compared_with_the_per_core_single_of_its_precision_and_compilation():
    pick = bench_train.per_core_baseline
    assert pick("ensemble-8") == "single-parallel" and pick("ensemble-8-bf16") == "single-parallel-bf16"
    assert pick("ensemble-8-compile") == "single-parallel-compile"
    assert pick("ensemble-8-bf16-compile") == pick("single-parallel-bf16-compile") == "single-parallel-bf16-compile"


def test_bench_sweep_times_the_real_trainers_parts_and_projects_the_paper_schedule(tmp_path):
    import bench_sweep

    runs = tmp_path / "runs"
    argv = ["--d-model", "8", "--sigmas", "0.1,2", "--seeds", "1", "--epochs", "3", "--runs", str(runs), "--out", str(tmp_path)]
    assert bench_sweep.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "sweep.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert all(float(r["train_s"]) > 0 and float(r["eval_s"]) > 0 for r in rows)
    assert len({(r["setup_s"], r["ckpt_round_s"], r["ckpt_round_bytes"]) for r in rows}) == 1  # one-off parts, on every row
    assert float(rows[0]["setup_s"]) > 0 and int(rows[0]["ckpt_round_bytes"]) > 0
    # the trainer wrote ordinary runs: 2 members, each with its metrics after every epoch and one checkpoint round
    folders = sorted(p.name for p in runs.iterdir())
    assert folders == ["learned_sigma0.1_lr0.0001_seed0", "learned_sigma2_lr0.0001_seed0"]
    assert len((runs / folders[0] / "metrics.jsonl").read_text().splitlines()) == 3
    assert len(list((runs / folders[0] / "checkpoints").glob("*.pt"))) == 1
    text = (tmp_path / "sweep.md").read_text()
    assert "| **total** |" in text and "4000 epochs, evaluation every 50, checkpoints every 250" in text


def test_bench_sweep_projection_adds_the_parts_at_the_paper_schedule():
    import bench_sweep

    m = {"setup_s": 36.0, "train_s": [100.0, 2.0, 4.0, 3.0], "eval_s": [9.0, 1.0, 1.0, 1.0], "ckpt_s": 18.0,
         "puzzles_per_epoch": 8100}
    proj = bench_sweep.project(m, 300)
    assert proj["epoch_s"] == 3.0 and proj["first_extra_s"] == 97.0
    # setup + compile extra + 4000 epochs + 80 evaluations + 16 checkpoint rounds
    assert proj["total_h"] == pytest.approx((36 + 97 + 4000 * 3 + 80 * 1 + 16 * 18) / 3600)
    assert proj["puzzles_per_s"] == pytest.approx(300 * 8100 / 3.0)


def test_bench_sweep_refuses_a_used_runs_folder_and_too_few_epochs(tmp_path, capsys):
    import bench_sweep

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("")
    for argv, message in ((["--runs", str(tmp_path / "old")], "is not empty"), (["--epochs", "2"], "must be >= 3"),
                          (["--sigmas", "a,b"], "comma list of numbers"), (["--seeds", "0"], "--seeds must be >= 1"),
                          (["--cuda-graphs", "--d-model", "8", "--seeds", "1", "--sigmas", "0.1"], "cuda")):
        with pytest.raises(SystemExit) as e:
            bench_sweep.main(argv + ["--no-write"])
        assert e.value.code == 2 and message in capsys.readouterr().err


AUTOTUNE_LOG = """Autotune Choices Stats:
{"num_choices": 3}
AUTOTUNE bmm(300x2048x160, 300x160x640)
strides: [327680, 160, 1], [102400, 640, 1]
dtypes: torch.bfloat16, torch.bfloat16
  bmm 0.3000 ms 100.0% 
  triton_bmm_89 0.4500 ms 66.7% ACC_TYPE='tl.float32', BLOCK_K=32
SingleProcess AUTOTUNE benchmarking takes 7.4 seconds
AUTOTUNE bmm(38400x16x16, 38400x16x160)
strides: [256, 16, 1], [7680, 480, 1]
dtypes: torch.float32, torch.float32
  triton_bmm_52 0.1000 ms 100.0% ACC_TYPE='tl.float32'
  triton_bmm_53 0.2000 ms 50.0% ACC_TYPE='tl.float32'
AUTOTUNE mm(64x32, 32x16)
  mm 0.0100 ms 100.0%
"""


def test_autotune_log_table_names_each_products_winner_and_rate(tmp_path, capsys):
    import autotune_log

    rows = autotune_log.summarize(AUTOTUNE_LOG)
    assert [r["shape"] for r in rows] == ["300x2048x160 @ 300x160x640", "38400x16x16 @ 38400x16x160"]  # not mm
    big, small = rows
    assert big["winner"] == "cuBLAS" and big["extern_ms"] == 0.3 and big["template_ms"] == 0.45
    assert big["gflop"] == pytest.approx(2 * 300 * 2048 * 160 * 640 / 1e9)
    assert big["gflop_per_ms"] == pytest.approx(big["gflop"] / 0.3)  # GFLOP per ms = TFLOP/s
    assert small["winner"] == "Triton" and small["extern_ms"] is None and small["dtype"] == "float32"
    log = tmp_path / "autotune.log"
    log.write_text(AUTOTUNE_LOG)
    assert autotune_log.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "| bmm 300x2048x160 @ 300x160x640 | bfloat16 | 125.8 | 0.3000 | 0.4500 | cuBLAS | 419 |" in out
    assert "| bmm 38400x16x16 @ 38400x16x160 | float32 | 3.1 |  | 0.1000 | Triton | 31 |" in out
    (tmp_path / "empty.log").write_text("no autotuning here\n")
    for bad in (tmp_path / "missing.log", tmp_path / "empty.log"):
        with pytest.raises(SystemExit) as e:
            autotune_log.main([str(bad)])
        assert e.value.code == 2
    assert "FORCE_DISABLE_CACHES" in capsys.readouterr().err  # why a log may have no blocks


CPU_AUTOTUNE_LOG = """AUTOTUNE bmm(4x2048x64, 4x64x256)
strides: [131072, 64, 1], [16384, 256, 1]
dtypes: torch.bfloat16, torch.bfloat16
  bmm 1.0000 ms 100.0% 
  cpp_CppMicroGemmFP32Vec_47 4.0000 ms 25.0% 
AUTOTUNE bmm(512x16x16, 512x16x64)
dtypes: torch.bfloat16, torch.bfloat16
  cpp_CppMicroGemmAMX_3 0.1000 ms 100.0% 
  baddbmm 0.2000 ms 50.0% 
"""


def test_autotune_log_reads_a_cpu_log_as_aten_against_cpp_templates(tmp_path, capsys):
    import autotune_log

    assert autotune_log.log_device(CPU_AUTOTUNE_LOG) == "cpu" and autotune_log.log_device(AUTOTUNE_LOG) == "cuda"
    big, small = autotune_log.summarize(CPU_AUTOTUNE_LOG)
    assert (big["winner"], big["extern_ms"], big["template_ms"]) == ("ATen", 1.0, 4.0)
    assert (small["winner"], small["extern_ms"], small["template_ms"]) == ("C++ template", 0.2, 0.1)
    log = tmp_path / "cpu.log"
    log.write_text(CPU_AUTOTUNE_LOG)
    assert autotune_log.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "| product | dtype | GFLOP | ATen ms | best C++ template ms | winner | winner GFLOP/s |" in out
    assert "| bmm 4x2048x64 @ 4x64x256 | bfloat16 | 0.268 | 1.0000 | 4.0000 | ATen | 268 |" in out  # 0.268 GFLOP in 1 ms


def test_profile_step_inductor_gelu_flag_restores_torchs_gelu(tmp_path, monkeypatch):
    """--inductor-gelu makes the trainers' MLPs call plain ``F.gelu`` (which a compiled step leaves to
    Inductor) instead of `trainers.gelu.gelu`, and tags the rows."""
    import torch.nn.functional as F

    import profile_step

    import trainers.ensemble
    import trainers.gelu
    import trainers.model

    monkeypatch.setattr(trainers.model, "gelu", trainers.model.gelu)
    monkeypatch.setattr(trainers.ensemble, "gelu", trainers.ensemble.gelu)
    assert trainers.model.gelu is trainers.gelu.gelu
    argv = ["--d-model", "16", "--k", "2", "--steps", "1", "--warmup", "1", "--configs", "ensemble",
            "--top", "3", "--inductor-gelu", "--out", str(tmp_path)]
    assert profile_step.main(argv) == 0
    assert trainers.model.gelu is trainers.ensemble.gelu is F.gelu
    assert "| ensemble+inductor-gelu | 16 | 2 |" in (tmp_path / "profile.md").read_text()


def test_step_ab_reads_variants_and_summarises_against_the_first(tmp_path):
    """step_ab's variants are plain or experiment names joined by +; an unknown one is refused (exit 2)
    before any worker starts; the summary divides each variant's mean fastest window and median window by
    the first variant's."""
    import step_ab

    assert step_ab.parse_variant("plain") == []
    assert step_ab.parse_variant("inductor_gelu+copying_adamw") == ["inductor_gelu", "copying_adamw"]
    assert step_ab.parse_variant("per_step_slices") == ["per_step_slices"]
    for bad in ("gelu", "inductor_gelu+", "plain+inductor_gelu"):
        with pytest.raises(ValueError, match="unknown experiment"):
            step_ab.parse_variant(bad)
    with pytest.raises(SystemExit) as e:
        step_ab.main(["--variants", "plain,nope", "--out", str(tmp_path / "ab")])
    assert e.value.code == 2 and not (tmp_path / "ab").exists()
    rows = [{"variant": "plain", "fastest_ms": 80.0, "median_ms": 84.0},
            {"variant": "plain", "fastest_ms": 82.0, "median_ms": 90.0},
            {"variant": "inductor_gelu", "fastest_ms": 90.0, "median_ms": 92.0},
            {"variant": "inductor_gelu", "fastest_ms": 92.0, "median_ms": 100.0}]
    table = step_ab.summary(rows, ["plain", "inductor_gelu"])
    assert [r["mean_fastest_ms"] for r in table] == [81.0, 91.0]
    assert [r["median_median_ms"] for r in table] == [87.0, 96.0]
    assert table[0]["fastest_vs_first"] == 1.0 and table[1]["fastest_vs_first"] == round(91 / 81, 3)
    assert table[1]["median_vs_first"] == round(96 / 87, 3) and table[1]["processes"] == 2


def test_step_ab_times_the_masked_step_with_task_and_names_it(tmp_path):
    """--task netsim / brain: the workers time the masked trainer's step (`build_step` builds it from
    `bench_masked.make_step`) and the report says which; an unknown task is refused (exit 2)."""
    import argparse

    import step_ab

    with pytest.raises(SystemExit) as e:
        step_ab.main(["--task", "lstm", "--out", str(tmp_path / "ab")])
    assert e.value.code == 2 and not (tmp_path / "ab").exists()
    args = argparse.Namespace(task="brain", side_by_side=2, k=4, d_model=64, warmup=1, windows=1, steps=1, rounds=1)
    rows = [{"variant": "plain", "fastest_ms": 1.0, "median_ms": 1.0}]
    text = step_ab.report(rows, ["plain"], args, ["--task", "brain"])
    assert text.startswith("# A/B of the compiled CPU masked step (brain)")
    assert "the masked trainer's step of the brain paper model" in text and "K = 4" not in text
    args.task = "lst"
    assert "one group of K = 4 at d_model 64" in step_ab.report(rows, ["plain"], args, [])


def test_bench_gelu_times_both_kernels_in_both_directions(tmp_path):
    """A tiny run writes one row per dtype and direction with both implementations' times and their ratio
    (a ratio of 64-element calls, noise: only its presence is checked)."""
    import bench_gelu

    assert bench_gelu.main(["--elements", "64", "--rounds", "1", "--calls", "1", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "gelu.csv")))
    assert [(r["dtype"], r["direction"]) for r in rows] == [
        ("bfloat16", "forward"), ("bfloat16", "backward"), ("float32", "forward"), ("float32", "backward")]
    for r in rows:
        assert float(r["aten_ms"]) > 0 and float(r["inductor_ms"]) > 0
        assert 0 < float(r["inductor_over_aten"]) < math.inf
    assert "| bfloat16 | forward |" in (tmp_path / "gelu.md").read_text()


def test_bench_optimizer_times_both_forms_and_checks_they_agree(tmp_path):
    """A tiny run times the kept and the rebuilt-per-step slices on one group, and both forms trained the same
    weights bit for bit; the old form is a subclass, so the trainers' own optimizer class is left as it is."""
    import bench_optimizer

    from trainers.ensemble import StackedOptimizer

    kept = StackedOptimizer._fused_slices
    assert bench_optimizer.main(["--d-model", "16", "--k", "2", "--rounds", "1", "--steps", "2", "--out", str(tmp_path)]) == 0
    assert StackedOptimizer._fused_slices is kept
    row, = csv.DictReader(open(tmp_path / "optimizer.csv"))
    assert row["same_weights"] == "True" and row["k"] == "2" and int(row["parameters"]) > 0
    assert float(row["kept_ms"]) > 0 and float(row["per_step_ms"]) > 0
    assert "| 16 | 2 |" in (tmp_path / "optimizer.md").read_text()
    with pytest.raises(SystemExit) as e:
        bench_optimizer.main(["--steps", "0", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2 and not (tmp_path / "bad").exists()


def test_bench_optimizer_single_times_per_parameter_against_flat_adamw(tmp_path):
    """--single times the single model's fused AdamW per parameter against FlatAdamW on twin copies, and the
    twins' weights agree (up to the last-bit rounding FlatAdamW may differ by)."""
    import bench_optimizer

    threads = torch.get_num_threads()
    try:
        assert bench_optimizer.main(["--single", "--d-model", "16", "--rounds", "1", "--steps", "2", "--threads", "1",
                                     "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    row, = csv.DictReader(open(tmp_path / "optimizer.csv"))
    assert row["threads"] == "1" and int(row["parameters"]) > 10
    assert float(row["per_parameter_ms"]) > 0 and float(row["flat_ms"]) > 0
    assert float(row["max_weight_difference"]) < 1e-6
    assert "| 16 | 1 |" in (tmp_path / "optimizer.md").read_text()


def test_step_ab_single_and_float32_options_reach_the_worker_and_the_report(tmp_path, monkeypatch):
    """--single / --float32 / --threads travel to each worker's command line and name the step in the report;
    --single with a masked task and --threads 0 are refused (exit 2) before anything is written."""
    import argparse

    import step_ab

    for bad in (["--single", "--task", "netsim"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as e:
            step_ab.main(bad + ["--out", str(tmp_path / "ab")])
        assert e.value.code == 2 and not (tmp_path / "ab").exists()
    seen = []

    class FakeProcess:
        returncode = 0

        def __init__(self, cmd, **_):
            seen.append(cmd)

        def communicate(self):
            return '{"fastest_ms": 1.0, "median_ms": 1.0}\n', None

    monkeypatch.setattr(step_ab.subprocess, "Popen", FakeProcess)
    args = argparse.Namespace(task="lst", side_by_side=1, k=4, d_model=64, warmup=1, windows=1, steps=1, rounds=1,
                              threads=2, float32=True, single=True)
    assert step_ab.run_round("plain", args) == [{"fastest_ms": 1.0, "median_ms": 1.0}]
    cmd = seen[0]
    assert cmd[cmd.index("--threads") + 1] == "2" and "--float32" in cmd and "--single" in cmd
    text = step_ab.report([{"variant": "plain", "fastest_ms": 1.0, "median_ms": 1.0}], ["plain"], args, [])
    assert text.startswith("# A/B of the compiled CPU single-model step")
    assert "the single-model trainer's step at d_model 64, float32, torch.compile" in text
    assert "each worker runs 2 torch threads" in text and "K = 4" not in text
    args.single, args.float32, args.threads = False, False, 1
    assert "one group of K = 4 at d_model 64, bf16 autocast" in step_ab.report(
        [{"variant": "plain", "fastest_ms": 1.0, "median_ms": 1.0}], ["plain"], args, [])


def test_four_d_products_experiment_restores_the_4d_products_with_the_same_attention(monkeypatch):
    """--four-d-attention-products puts 4-d ``@`` back in both modules that call `flat_bmm` (what Inductor's
    attention-fusion pass matches); the attention's output is the same either way."""
    import step_experiments as ex

    import trainers.logits
    import trainers.model

    monkeypatch.setattr(trainers.logits, "flat_bmm", trainers.logits.flat_bmm)
    monkeypatch.setattr(trainers.model, "flat_bmm", trainers.model.flat_bmm)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 16, 8, generator=g) for _ in range(3))
    ref = trainers.model.matmul_attention(q, k, v)
    ex.EXPERIMENTS["four_d_attention_products"][1]()
    assert trainers.logits.flat_bmm is trainers.model.flat_bmm
    assert trainers.model.flat_bmm.__name__ == "<lambda>"
    torch.testing.assert_close(trainers.model.matmul_attention(q, k, v), ref)


def test_cpp_wrapper_experiment_turns_on_inductors_cpp_wrapper():
    import step_experiments as ex
    import torch._inductor.config as inductor_config

    # restored by assignment: monkeypatch's undo deletes the attribute, which hides an Inductor config option
    before = inductor_config.cpp_wrapper
    try:
        inductor_config.cpp_wrapper = False
        ex.EXPERIMENTS["cpp_wrapper"][1]()
        assert inductor_config.cpp_wrapper is True
    finally:
        inductor_config.cpp_wrapper = before
    assert inductor_config.cpp_wrapper is before


def test_unfused_bias_experiment_adds_the_bias_after_the_product_only_while_compiling(monkeypatch):
    """--unfused-bias: nn.Linear as x @ W^T + b where Dynamo traces a CPU step (same values), F.linear elsewhere."""
    import step_experiments as ex

    monkeypatch.setattr(torch.nn.Linear, "forward", torch.nn.Linear.forward)
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(8, 5), torch.randn(3, 4, 8)
    ref = layer(x)
    ex.EXPERIMENTS["unfused_bias"][1]()
    assert torch.nn.Linear.forward is ex.unfused_linear_forward
    assert torch.equal(layer(x), ref)  # eager: F.linear, unchanged
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(layer, backend=backend)(x)
    torch._dynamo.reset()
    torch.testing.assert_close(out, ref)
    assert not any("linear" in t for t in seen) and any("matmul" in t for t in seen)
