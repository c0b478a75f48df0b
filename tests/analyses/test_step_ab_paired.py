"""step_ab_paired: B compiles its own graphs beside A's, the windows alternate, and the summary's numbers."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "analyses" / "benchmarks"))

import step_ab_paired as P  # noqa: E402


def test_a_distinct_module_and_function_behave_alike_but_compile_anew():
    """Without `build_distinct` Dynamo serves the second model from the first one's cache entry (the trap this
    module exists to avoid); with it, a second graph is compiled, and neither recompiles afterwards."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 4)
    ca = torch.compile(a, backend="eager")
    ca(x)
    torch.compile(b, backend="eager")(x)  # a plain second compile: reused
    assert counters["stats"]["unique_graphs"] == 1
    cb = P.build_distinct(lambda: torch.compile(b, backend="eager"))
    assert type(b).__name__ == "Linear_B" and isinstance(b, torch.nn.Linear) and torch.compile is not None
    assert torch.equal(cb(x), ca(x))
    assert counters["stats"]["unique_graphs"] == 2

    def f(t, k=2):
        return t * k

    g = P.distinct_for_dynamo(f)
    assert g.__code__ is not f.__code__ and g(3) == f(3) == 6 and g.__name__ == "f"
    with pytest.raises(TypeError):
        P.distinct_for_dynamo(3)
    torch._dynamo.reset()


def test_build_distinct_restores_torch_compile_even_when_the_build_fails():
    real = torch.compile
    with pytest.raises(ZeroDivisionError):
        P.build_distinct(lambda: 1 / 0)
    assert torch.compile is real


def test_alternate_swaps_the_order_every_pair_and_times_each_window():
    calls = []
    pairs = P.alternate(lambda i: calls.append(("a", i)), lambda i: calls.append(("b", i)), warmup=1, pairs=3,
                        steps=2)
    assert len(pairs) == 3 and all(a >= 0 and b >= 0 for a, b in pairs)
    assert [c for c, _ in calls] == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert [i for c, i in calls if c == "b"] == [0, 1, 2, 3, 4, 5, 6]  # warm-up, then the same indices as A


def test_alternate_calls_sync_before_every_window():
    events = []
    P.alternate(lambda i: events.append("a"), lambda i: events.append("b"), warmup=1, pairs=2, steps=2,
                sync=lambda: events.append("|"))
    assert events == ["a", "b"] + ["|", "a", "a", "|", "b", "b"] + ["|", "b", "b", "|", "a", "a"]


def test_side_by_side_rounds_keep_each_process_as_its_own_group(tmp_path, monkeypatch):
    """With --side-by-side the processes of a round are separate groups of the bootstrap (and rows say which)."""
    calls = []

    def fake_round(variant, args):
        calls.append((variant, args.side_by_side))
        return [[(10.0, 9.0), (10.0, 9.0)], [(10.0, 11.0), (10.0, 11.0)]]

    monkeypatch.setattr(P, "side_by_side_round", fake_round)
    monkeypatch.setattr(P.subprocess, "run", lambda *a, **k: pytest.fail("ran a process one at a time"))
    argv = ["--float32", "--variants", "plain,whole_batch", "--side-by-side", "2", "--rounds", "2",
            "--out", str(tmp_path / "ab")]
    assert P.main(argv) == 0
    assert calls == [("whole_batch", 2)] * 2
    rows = list(csv.DictReader(open(tmp_path / "ab" / "step_ab_paired.csv")))
    assert len(rows) == 8 and {(r["round"], r["process"]) for r in rows} == {("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")}
    text = (tmp_path / "ab" / "step_ab_paired.md").read_text()
    assert "| 8 | 4 |" in text and "2 at a time, side by side, every window begun together" in text
    assert "Per process (B/A geometric mean): 0.900, 1.100, 0.900, 1.100." in text
    with pytest.raises(SystemExit) as e:
        P.main(["--side-by-side", "0", "--out", str(tmp_path / "bad")])
    assert e.value.code == 2


def test_summary_numbers_against_a_hand_computation():
    rows = [{"round": 1, "pair": 0, "a_ms": 10.0, "b_ms": 8.0}, {"round": 1, "pair": 1, "a_ms": 10.0, "b_ms": 12.5},
            {"round": 2, "pair": 0, "a_ms": 20.0, "b_ms": 18.0}]
    s = P.summary(rows)
    ratios = [0.8, 1.25, 0.9]
    assert s["pairs"] == 3 and s["processes"] == 2
    assert s["geo_mean"] == pytest.approx(math.prod(ratios) ** (1 / 3))
    assert s["median"] == pytest.approx(0.9) and s["b_faster"] == pytest.approx(2 / 3)
    assert s["per_process"] == pytest.approx([1.0, 0.9])
    assert min(ratios) <= s["low"] <= s["geo_mean"] <= s["high"] <= max(ratios)
    same = P.summary([{"round": r, "pair": 0, "a_ms": 5.0, "b_ms": 5.0} for r in (1, 2)])
    assert same["geo_mean"] == same["low"] == same["high"] == 1.0


def test_main_refuses_bad_variants_and_writes_the_report(tmp_path, monkeypatch):
    for bad in (["--variants", "plain"], ["--variants", "cpp_wrapper,plain"], ["--variants", "plain,nope"],
                ["--pairs", "0"], ["--single", "--task", "brain"]):
        with pytest.raises(SystemExit) as e:
            P.main(bad + ["--out", str(tmp_path / "ab")])
        assert e.value.code == 2 and not (tmp_path / "ab").exists()
    seen = []

    def fake_run(cmd, **_):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="compiling...\n" + json.dumps([[10.0, 9.0], [10.0, 9.5]]) + "\n")

    monkeypatch.setattr(P.subprocess, "run", fake_run)
    argv = ["--float32", "--single", "--threads", "2", "--variants", "plain,cpp_wrapper", "--rounds", "2",
            "--out", str(tmp_path / "ab")]
    assert P.main(argv) == 0
    assert len(seen) == 2 and seen[0][-2:] == ["--worker", "cpp_wrapper"] and "--float32" in seen[0]
    rows = list(csv.DictReader(open(tmp_path / "ab" / "step_ab_paired.csv")))
    assert len(rows) == 4 and rows[0] == {"round": "1", "process": "0", "pair": "0", "a_ms": "10.0", "b_ms": "9.0"}
    text = (tmp_path / "ab" / "step_ab_paired.md").read_text()
    assert "| 4 | 2 | 0.925 |" in text and "the single-model trainer's step at d_model 64, float32" in text
    assert "C++ wrapper" in text and "2 torch threads" in text


@pytest.mark.slow
def test_a_worker_compiles_both_steps_and_an_a_a_control_runs(tmp_path):
    """A real process at toy size: two compiles of the trainers' single-model step, then alternating windows."""
    done = subprocess.run([sys.executable, str(ROOT / "analyses" / "benchmarks" / "step_ab_paired.py"), "--float32",
                           "--single", "--d-model", "16", "--variants", "plain,plain", "--rounds", "1", "--pairs", "2",
                           "--steps", "1", "--warmup", "1", "--out", str(tmp_path / "ab")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "A/A control" in (tmp_path / "ab" / "step_ab_paired.md").read_text()


@pytest.mark.slow
def test_side_by_side_processes_compile_and_time_their_windows_together(tmp_path):
    """Two real processes at toy size behind one barrier: both finish, each with its own pairs."""
    done = subprocess.run([sys.executable, str(ROOT / "analyses" / "benchmarks" / "step_ab_paired.py"), "--float32",
                           "--d-model", "16", "--k", "2", "--variants", "plain,whole_batch", "--side-by-side", "2",
                           "--rounds", "1", "--pairs", "2", "--steps", "1", "--warmup", "1",
                           "--out", str(tmp_path / "ab")], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "ab" / "step_ab_paired.csv")))
    assert sorted({r["process"] for r in rows}) == ["0", "1"] and len(rows) == 4
