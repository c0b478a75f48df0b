"""Ray backend of the sweep runner, on a real local Ray instance (2 CPUs) shared by the module.

Skipped only when the ``ray`` extra is not installed (``pip install -e ".[ray]"``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from analyses.lst.grid import RunSpec  # noqa: E402
from analyses.lst.runner import LocalRunner, is_finished  # noqa: E402
from analyses.lst import ray_runner as rr  # noqa: E402
from analyses.lst.ray_runner import RayRunner, run_is_finished, train_run  # noqa: E402

TINY = {"model.d_model": 8, "model.n_layers": 1, "model.n_heads": 1, "data.n_per_level": 20,
        "optim.batch_size": 16, "optim.epochs": 2, "eval_every": 1, "ckpt_every": 1}


def spec(name: str, sigma: float, seed: int = 0, **over) -> RunSpec:
    ov = {**TINY, "pe.kind": "learned", "pe.init_std": sigma, "pe.every_layer": True, "seed": seed, **over}
    return RunSpec(name, "quick", ov, {"group": "sigma", "sigma": sigma, "seed": seed})


@pytest.fixture(scope="module")
def ray_instance():
    if ray.is_initialized():  # pragma: no cover - another module left one running
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # ship this module's helpers (the injected train functions) to the workers by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def quiet(_msg: str) -> None:
    pass


def run_state(run: Path) -> dict:
    """What a finished run holds: final model tensors, checkpoint epochs, metric lines (without time)."""
    last = torch.load(run / "last.pt", map_location="cpu", weights_only=True)
    lines = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    for d in lines:
        d.pop("time")
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    return {"model": last["model"], "epoch": last["epoch"], "metrics": lines, "steps": steps}


def assert_same_run(a: Path, b: Path) -> None:
    sa, sb = run_state(a), run_state(b)
    assert sa["epoch"] == sb["epoch"]
    assert sa["steps"] == sb["steps"]
    assert sa["metrics"] == sb["metrics"]
    assert sa["model"].keys() == sb["model"].keys()
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k]), k


def attempts_in_log(run: Path) -> list[int]:
    """Worker pids of the attempts recorded in RUN/train.log."""
    return [int(m) for m in re.findall(r"ray attempt \d+ host \S+ pid (\d+)", (run / "train.log").read_text())]


# ----------------------------------------------------------------------------------------------


def test_ray_sweep_equals_local_backend_and_second_call_skips_finished(ray_instance, tmp_path):
    specs = [spec("learned-s0.1-seed0", 0.1, 0), spec("learned-s2-seed1", 2.0, 1)]

    local = LocalRunner(2, log=quiet)
    for s in specs:
        local.submit(s, tmp_path / "local" / s.name)
    assert [r.returncode for r in local.wait()] == [0, 0]

    # the Ray sweep writes to a file:// URL, staged through a local temp folder and uploaded
    root = f"file://{tmp_path / 'ray'}"
    logs: list[str] = []
    runner = RayRunner(max_retries=1, stage=True, log=logs.append)
    for s in specs:
        runner.submit(s, rr.join(root, s.name))
    results = runner.wait()
    assert {r.name: r.returncode for r in results} == {s.name: 0 for s in specs}
    for s in specs:
        run = tmp_path / "ray" / s.name
        assert is_finished(s, run) and run_is_finished(s, rr.join(root, s.name))
        assert_same_run(tmp_path / "local" / s.name, run)
        assert json.loads((run / "spec.json").read_text())["name"] == s.name
        assert not list(run.rglob("*.uploading")) and not list(run.rglob("*.tmp"))
        assert len(attempts_in_log(run)) == 1
    # another sigma and seed give another model (the equality above is not vacuous)
    a, b = run_state(tmp_path / "ray" / specs[0].name), run_state(tmp_path / "ray" / specs[1].name)
    assert not all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])

    # second invocation: nothing is trained again
    before = {s.name: (tmp_path / "ray" / s.name / "last.pt").stat().st_mtime_ns for s in specs}
    again = RayRunner(max_retries=1, stage=True, log=quiet)
    for s in specs:
        again.submit(s, rr.join(root, s.name))
    res2 = again.wait()
    assert sorted(again.skipped) == sorted(s.name for s in specs)
    assert again.attempts == {} and [r.returncode for r in res2] == [0, 0]
    after = {s.name: (tmp_path / "ray" / s.name / "last.pt").stat().st_mtime_ns for s in specs}
    assert after == before


def failing_train(preset, overrides, out, threads=1):
    """Injected train function: runs named 'bad' always raise; 'flaky' raises on its first attempt (its
    marker beside the run folder: the trainer refuses a folder holding files that are not the run's)."""
    marker = Path(out).with_name(Path(out).name + ".flaky-marker")
    if "bad" in str(out):
        raise RuntimeError("deliberate failure")
    if "flaky" in str(out) and not marker.exists():
        marker.write_text("failed once\n")
        raise RuntimeError("transient failure")
    return train_run(preset, overrides, out, threads=threads)


def test_failing_run_is_retried_then_reported_while_others_finish(ray_instance, tmp_path):
    specs = [spec("bad", 0.1), spec("flaky", 0.1, 1), spec("good", 0.5)]
    logs: list[str] = []
    runner = RayRunner(max_retries=2, log=logs.append, train_fn=failing_train)
    for s in specs:
        runner.submit(s, tmp_path / s.name)
    results = {r.name: r for r in runner.wait()}
    assert results["bad"].returncode == 1 and results["flaky"].returncode == 0 and results["good"].returncode == 0
    assert runner.attempts == {"bad": 3, "flaky": 2, "good": 1}
    assert "deliberate failure" in runner.errors["bad"] and set(runner.errors) == {"bad"}
    assert len(attempts_in_log(tmp_path / "bad")) == 3
    assert (tmp_path / "bad" / "train.log").read_text().count("RuntimeError: deliberate failure") >= 3
    assert is_finished(specs[1], tmp_path / "flaky") and is_finished(specs[2], tmp_path / "good")
    assert not (tmp_path / "bad" / "last.pt").exists()
    assert sum("retry" in line for line in logs) == 3 and any("FAILED" in line and "bad" in line for line in logs)


def slow_train(preset, overrides, out, threads=1):
    """The real training, with a pause after each checkpoint write (a wide window to kill it in)."""
    import trainers.train as T

    real = T.save_checkpoint

    def save_then_pause(payload, path):
        real(payload, path)
        time.sleep(0.1)

    T.save_checkpoint = save_then_pause
    try:
        return train_run(preset, overrides, out, threads=threads)
    finally:
        T.save_checkpoint = real


def test_killed_worker_leaves_no_corrupt_checkpoint_and_run_completes(ray_instance, tmp_path):
    s = spec("killed", 0.2, 3, **{"optim.epochs": 20})
    run = tmp_path / "killed"
    runner = RayRunner(max_retries=2, log=quiet, train_fn=slow_train)
    runner.submit(s, run)

    deadline = time.time() + 120
    while time.time() < deadline:  # wait until it is mid-run: a checkpoint written, far from the end
        ep = rr.run_last_epoch(run)
        if ep is not None and ep >= 2:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the run never wrote its second checkpoint")
    pid = attempts_in_log(run)[0]
    killed_at = rr.run_last_epoch(run)
    assert killed_at < 20
    os.kill(pid, signal.SIGKILL)  # the Ray worker process that is training the run

    [res] = runner.wait()
    assert res.returncode == 0
    pids = attempts_in_log(run)
    assert len(pids) == 2 and pids[0] == pid and pids[1] != pid  # Ray retried it in a new worker
    assert re.search(r"resuming from epoch \d+", (run / "train.log").read_text())
    # no torn files: every checkpoint loads, no temp files, metrics have each epoch once
    from trainers.checkpoint import load_checkpoint

    for p in [run / "last.pt", *sorted((run / "checkpoints").iterdir())]:
        assert p.suffix == ".pt", p
        load_checkpoint(p)
    assert not list(run.rglob("*.tmp"))
    assert [d["epoch"] for d in run_state(run)["metrics"]] == list(range(1, 21))
    # and the resumed run is the uninterrupted one, bit for bit
    from trainers.train import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the worker: results depend on the thread count
    try:
        train(s.config(), tmp_path / "reference", log=quiet)
    finally:
        torch.set_num_threads(threads)
    assert_same_run(tmp_path / "reference", run)


def test_staged_run_to_memory_url_resumes_from_uploaded_state(tmp_path, monkeypatch):
    """fsspec staging in-process (memory:// is per process, so no Ray here): an attempt cut after its
    first epoch uploads its progress; the next attempt resumes from it and finishes."""
    import trainers.train

    fsspec = pytest.importorskip("fsspec")
    url = f"memory://pe-probe-test-{os.getpid()}/sweep/run"
    s = spec("mem", 0.1)
    real_save = trainers.train.save_run_checkpoint

    def save_then_cut(*args, **kwargs):  # the worker dies right after the epoch-1 checkpoint
        real_save(*args, **kwargs)
        raise RuntimeError("worker cut")

    monkeypatch.setattr(trainers.train, "save_run_checkpoint", save_then_cut)
    out = rr.run_task(s.to_dict(), url, 1, 1, None)
    assert not out.ok and "worker cut" in out.error
    fs = fsspec.filesystem("memory")
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.find(url))
    assert {"last.pt", "config.json", "metrics.jsonl", "spec.json", "train.log"} <= set(names)
    assert not [n for n in names if n.endswith(".uploading")]
    assert rr.run_last_epoch(url) == 1 and not run_is_finished(s, url)

    monkeypatch.setattr(trainers.train, "save_run_checkpoint", real_save)
    out2 = rr.run_task(s.to_dict(), url, 2, 1, None)
    assert out2.ok, out2.error
    assert rr.run_last_epoch(url) == 2 and run_is_finished(s, url)
    assert len([p for p in fs.find(url) if "/checkpoints/" in p]) == 2
    with fs.open(f"{url}/train.log", "rb") as f:
        log = f.read().decode()
    assert "resuming from epoch 1" in log and "ray attempt 2" in log
    with fs.open(f"{url}/metrics.jsonl", "rb") as f:
        assert [json.loads(x)["epoch"] for x in f.read().decode().splitlines()] == [1, 2]
    fs.rm(url.rsplit("/sweep", 1)[0], recursive=True)


def test_compare_with_ray_backend_equals_local(ray_instance, tmp_path):
    import numpy as np

    from pe_probe.compare import compare

    rng = np.random.default_rng(0)
    coords = np.indices((4, 4)).reshape(2, -1).T.astype(float)
    paths = []
    for i, noise in enumerate((0.01, 0.5, 3.0)):
        p = tmp_path / f"table{i}.npy"
        np.save(p, coords @ rng.normal(size=(2, 8)) + noise * rng.normal(size=(16, 8)))
        paths.append(p)
    kw = dict(ground_truth="grid:4x4", analyze_kwargs=dict(methods="pca,cmds", n_perm=20, n_boot=20, seed=0),
              progress=False, formats=("png",))
    local = compare(paths, tmp_path / "local", **kw)
    dist = compare(paths, tmp_path / "ray", backend="ray", **kw)
    assert list(dist["label"]) == ["table0", "table1", "table2"]
    assert dist.drop(columns=["source"]).equals(local.drop(columns=["source"]))
    assert (tmp_path / "ray" / "compare.csv").is_file()
    assert dist["rsa_spearman"].iloc[0] > dist["rsa_spearman"].iloc[2]  # the columns carry real values


def recording_train(preset, overrides, out, threads=1, **speed):
    """Records the speed options a worker's train function receives (beside the run folder), then trains."""
    Path(out).with_name(Path(out).name + ".speed.json").write_text(json.dumps(speed))
    return train_run(preset, overrides, out, threads=threads, **speed)


def test_speed_options_reach_the_ray_workers(ray_instance, tmp_path):
    from trainers.train import SpeedOptions

    runner = RayRunner(log=quiet, train_fn=recording_train, speed=SpeedOptions(compile=False, bf16=False, cuda_graphs=False))
    runner.submit(spec("plain", 0.1), tmp_path / "plain")
    assert [r.returncode for r in runner.wait()] == [0]
    assert json.loads((tmp_path / "plain.speed.json").read_text()) == {}  # none on: train_fn called as before
    runner = RayRunner(log=quiet, train_fn=recording_train, speed=SpeedOptions(cuda_graphs=True))
    runner.submit(spec("graphs", 0.1), tmp_path / "graphs")
    assert [r.returncode for r in runner.wait()] == [1]  # a CPU worker refuses CUDA graphs
    assert json.loads((tmp_path / "graphs.speed.json").read_text()) == {"cuda_graphs": True}
    assert "--cuda-graphs needs a CUDA device" in runner.errors["graphs"]
