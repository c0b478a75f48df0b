"""provenance.jsonl: which code trained a run, one line per training session."""

import json

from trainers.provenance import (PROVENANCE_FILE, code_version, describe_hardware, describe_versions, read_sessions,
                                 record_session)


def test_a_session_line_names_the_commit_versions_and_settings(tmp_path):
    record_session(tmp_path, device="cpu", start_epoch=0, bf16=False)
    (line,) = read_sessions(tmp_path)
    assert line["device"] == "cpu" and line["start_epoch"] == 0 and line["bf16"] is False
    assert line["torch"] and line["pe_probe"] and line["python"]
    commit = line["git_commit"]
    assert commit is None or (len(commit) == 40 and int(commit, 16) >= 0)  # this checkout's HEAD, or not a checkout
    assert line["time"].endswith("+00:00")


def test_a_session_line_names_the_machine_whose_kernels_set_the_arithmetic(tmp_path, monkeypatch):
    import os

    import torch

    import trainers.provenance as P

    record_session(tmp_path, device="cpu")
    (line,) = read_sessions(tmp_path)
    assert line["cpu"] == P.cpu_model() and line["cpu"]  # a model name, not empty
    assert line["logical_cpus"] == os.cpu_count()
    assert line["cpu_kernels"] == torch.backends.cpu.get_cpu_capability()  # e.g. AVX2, AVX512
    assert "gpu" not in line  # a CPU run names no GPU
    # a CUDA session names its GPU (faked here: this machine may have none)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev: f"Fake GPU {dev}")
    assert P.machine_facts("cuda:1")["gpu"] == "Fake GPU cuda:1"
    assert "gpu" not in P.machine_facts("cpu") and "gpu" not in P.machine_facts(None)


def test_the_cpu_model_falls_back_to_platform_without_proc_cpuinfo(monkeypatch):
    import builtins
    import platform

    import trainers.provenance as P

    real_open = builtins.open

    def no_cpuinfo(path, *a, **k):
        if str(path) == "/proc/cpuinfo":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_cpuinfo)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert P.cpu_model() == "x86_64"


def test_sessions_append_and_a_torn_last_line_is_skipped(tmp_path):
    v = {**code_version(), "git_commit": "a" * 40, "git_dirty": False}
    record_session(tmp_path, v, start_epoch=0)
    record_session(tmp_path, {**v, "git_commit": "b" * 40, "git_dirty": True}, start_epoch=20)
    with open(tmp_path / PROVENANCE_FILE, "a") as f:
        f.write('{"time": "2026-')  # killed mid-write
    assert [s["start_epoch"] for s in read_sessions(tmp_path)] == [0, 20]
    assert describe_versions([tmp_path]) == "aaaaaaa then bbbbbbb+uncommitted: 1 run"


def test_describe_versions_counts_runs_per_commit_and_unrecorded_runs(tmp_path):
    dirs = [tmp_path / str(i) for i in range(4)]
    for i, d in enumerate(dirs):
        d.mkdir()
        if i < 3:
            (d / PROVENANCE_FILE).write_text(json.dumps({"git_commit": ("c" if i < 2 else "d") * 40, "git_dirty": False}) + "\n")
    assert describe_versions(dirs) == "ccccccc: 2 runs; ddddddd: 1 run; not recorded: 1 run"


def test_trainers_record_each_session_and_a_restart_clears_old_lines(tmp_path):
    from test_ensemble import quiet, tiny

    from trainers.ensemble import train_ensemble
    from trainers.train import train

    cfg = tiny(**{"optim.epochs": 1})
    train(cfg, tmp_path / "solo", log=quiet)
    train(cfg, tmp_path / "solo", log=quiet)  # already finished: no new session
    (line,) = read_sessions(tmp_path / "solo")
    assert line["trainer"] == "single" and line["start_epoch"] == 0 and line["device"] == "cpu"
    assert line["bf16"] is False and line["compile"] is False
    train(cfg, tmp_path / "solo", log=quiet, force=True)  # a restart starts a fresh record
    assert len(read_sessions(tmp_path / "solo")) == 1
    train_ensemble([cfg, tiny(**{"optim.epochs": 1, "seed": 1})], [tmp_path / "e0", tmp_path / "e1"], log=quiet, workers=1)
    for d in ("e0", "e1"):
        (line,) = read_sessions(tmp_path / d)
        assert line["trainer"] == "ensemble" and line["group_size"] == 2 and line["torch_threads"] >= 1


def test_describe_versions_names_runs_trained_outside_git(tmp_path):
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps({"git_commit": None, "git_dirty": None}) + "\n")
    assert describe_versions([tmp_path]) == "outside git: 1 run"


def test_describe_hardware_counts_differing_machines_and_runs_that_predate_the_record(tmp_path):
    def run(name, *sessions):
        d = tmp_path / name
        d.mkdir()
        if sessions:
            (d / PROVENANCE_FILE).write_text("".join(json.dumps(s) + "\n" for s in sessions))
        return d

    avx2 = {"cpu": "AMD EPYC", "cpu_kernels": "AVX2", "device": "cpu", "torch": "2.13.0"}
    dirs = [run("a", avx2), run("b", avx2), run("c", {**avx2, "cpu": "Intel Xeon", "cpu_kernels": "AVX512"}),
            run("d", {"device": "cpu", "torch": "2.13.0"}), run("e")]
    text = describe_hardware(dirs)
    assert text.startswith("CPU AMD EPYC (2 runs), Intel Xeon (1 run); torch CPU kernels AVX2 (2 runs), AVX512 (1 run)")
    assert "device cpu; torch 2.13.0" in text  # the same in every recorded run: named once
    assert "recorded for 3 of those 4 runs (the others predate it)" in text
    assert text.endswith("(from the 4 of 5 runs that have a provenance.jsonl)")
    # a resumed run on another machine names both, in session order
    assert describe_hardware([run("f", avx2, {**avx2, "cpu_kernels": "AVX512"})]).startswith(
        "CPU AMD EPYC; torch CPU kernels AVX2 then AVX512")
    assert describe_hardware([dirs[-1]]) == "not recorded (none of the 1 runs has a provenance.jsonl)"


def test_the_bf16_units_are_read_from_the_cpu_flags_fastest_first(tmp_path):
    from trainers.provenance import cpu_bf16_units

    def cpuinfo(flags):
        p = tmp_path / "cpuinfo"
        p.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
        return str(p)

    assert cpu_bf16_units(cpuinfo("fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile")) == "AMX"
    assert cpu_bf16_units(cpuinfo("fpu avx2 avx512f avx512_bf16")) == "AVX512-BF16"
    assert cpu_bf16_units(cpuinfo("fpu avx2 avx512f avx512bw")) == "none"  # avx512bw is not a bf16 unit
    assert cpu_bf16_units(str(tmp_path / "absent")) == "unknown"
    no_flags = tmp_path / "arm"
    no_flags.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert cpu_bf16_units(str(no_flags)) == "unknown"
    record_session(tmp_path, device="cpu")
    assert read_sessions(tmp_path)[0]["cpu_bf16"] == cpu_bf16_units()  # each session line records them
