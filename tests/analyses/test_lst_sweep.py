"""The Latin Square Task sweep: grid definitions, resumability, report generation."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses.lst import grid as G
from analyses.lst import runner as R
from analyses.lst import sweep as S
from pe_probe.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "model.d_model=8", "--set", "data.n_per_level=30"]


# ---------------------------------------------------------------------------------------------------
# grid


def test_quick_grid_covers_the_study():
    g = G.build_grid("quick")
    names = [s.name for s in g]
    assert len(names) == len(set(names))
    sig = [s for s in g if s.tags["group"] == "sigma"]
    assert sorted({s.tags["sigma"] for s in sig}) == sorted(G.SIGMAS_DEFAULT)
    assert {s.tags["seed"] for s in sig} == {0, 1}
    assert {s.tags["pe"] for s in g if s.tags["group"] == "pe_type"} == set(G.PE_TYPES)
    assert {(s.tags["control"], s.tags["sigma"]) for s in g if s.tags["group"] == "control"} == {
        ("wd0.1", 0.1), ("wd0.1", 2.0), ("sgd", 0.1), ("sgd", 2.0)}
    assert {s.tags["sigma"] for s in g if s.tags["group"] == "placement"} == {0.1, 2.0}
    # every seed of the sigma grid has its sin2d reference (attention similarity)
    assert {s.tags["seed"] for s in g if s.tags["pe"] == "sin2d"} == {0, 1}
    # seed 0 of every group comes before seed 1
    first_seed1 = min(i for i, s in enumerate(g) if s.tags["seed"] == 1)
    assert all(s.tags["seed"] == 0 for s in g[:first_seed1]) and len(g[:first_seed1]) == 24
    assert len(g) == 35
    cfg = g[0].config()
    assert cfg.optim.epochs == 40 and cfg.ckpt_every == 5 and cfg.pe.every_layer


def test_sigma_seeds_add_seeds_to_the_sigma_grid_only():
    g = G.build_grid("quick", sigma_seeds=4)
    sig = [s for s in g if s.tags["group"] == "sigma"]
    assert {s.tags["seed"] for s in sig} == {0, 1, 2, 3} and len(sig) == 40
    assert {s.tags["seed"] for s in g if s.tags["pe"] == "sin2d"} == {0, 1, 2, 3}  # a reference per seed
    others = [s for s in g if s.tags["group"] in ("pe_type", "control", "placement") and s.tags["pe"] != "sin2d"]
    assert {s.tags["seed"] for s in others} == {0}
    assert len(g) == 35 + 20 + 2


def test_the_sin2d_reference_has_the_seeds_of_the_groups_it_serves():
    """--groups sigma --seeds 3 --sigma-seeds 1: one sigma seed, so one reference, not the 3 that --seeds gives
    the groups left out; with the PE-type group or the controls in, their seeds count too (every run's attention
    is compared with its seed's reference)."""
    ref = lambda g: sorted(s.tags["seed"] for s in g if s.tags["pe"] == "sin2d")  # noqa: E731
    assert ref(G.build_grid("quick", seeds=3, sigma_seeds=1, include=("sigma",))) == [0]
    assert ref(G.build_grid("quick", seeds=3, sigma_seeds=1, include=("sigma", "pe_type"))) == [0, 1, 2]
    assert ref(G.build_grid("quick", seeds=3, sigma_seeds=1, include=("sigma", "control"))) == [0, 1, 2]
    assert ref(G.build_grid("quick", seeds=3, include=("pe_type",))) == [0, 1, 2]
    assert ref(G.build_grid("quick", seeds=3, include=("control", "placement"))) == []


def test_full_sigmas_paper_preset_and_epochs_override():
    assert G.SIGMAS_FULL == tuple(round(0.1 * i, 1) for i in range(1, 21))
    g = G.build_grid("paper", sigmas="full", include=("sigma",))
    assert len([s for s in g if s.tags["group"] == "sigma"]) == 20 * 15
    cfg = g[0].config()
    assert cfg.model.d_model == 160 and cfg.optim.lr == 1e-4 and cfg.optim.epochs == 4000 and cfg.ckpt_every == 500
    short = G.build_grid("paper", epochs=400, seeds=1, include=("sigma",))[0].config()
    assert short.optim.epochs == 400 and short.ckpt_every == 50


def test_train_args_map_every_override():
    g = {s.name: s for s in G.build_grid("quick")}
    args = g["learned-input-s2-seed0"].train_args("X")
    assert args[:6] == ["train", "lst", "--preset", "quick", "--out", "X"]
    assert "--no-pe-every-layer" in args and args[args.index("--pe-init-std") + 1] == "2.0"
    sgd = g["sgd-s0.1-seed0"].train_args("X")
    assert sgd[sgd.index("--optimizer") + 1] == "sgd" and sgd[sgd.index("--lr") + 1] == str(G.SGD_LR)
    assert g["learned_uniform-s0.1-seed0"].overrides["pe.init"] == "uniform"
    with pytest.raises(G.NoTrainOption, match="override 'data.seed' has no pe-probe train option"):
        G.RunSpec("x", "quick", {"data.seed": 1}).train_args("X")


def every_option_overrides(tmp_path: Path) -> dict:
    """A value other than the quick preset's for each config key pe-probe train lst has an option for (pe.causal needs
    pe.kind relative; task has one value)."""
    return {"task": "lst", "seed": 3, "device": "auto", "pe.kind": "relative", "pe.init": "uniform",
            "pe.init_std": 0.3, "pe.every_layer": False, "pe.causal": True, "model.d_model": 12, "model.n_layers": 2,
            "model.n_heads": 2, "model.mlp_ratio": 2.5, "model.norm": "pre", "model.dropout": 0.1,
            "model.readout": "cls", "optim.name": "sgd", "optim.lr": 0.02, "optim.weight_decay": 0.01,
            "optim.momentum": 0.5, "optim.batch_size": 16, "optim.epochs": 3, "eval_every": 1, "ckpt_every": 2,
            "data.n_per_level": 30, "data.ood_puzzles": str((tmp_path / "held-out.csv").resolve()),
            "data.min_jaccard": 0.5}


def options_of_pe_probe_train() -> dict[str, str]:
    """Config key -> pe-probe train lst option, read from trainers.cli itself: every argument gets a marker
    value, config_from_args runs on them with make_config stubbed to record its overrides, and each key that
    receives an argument's marker maps to that argument's first option string."""
    import argparse
    from unittest import mock

    import trainers.config
    from trainers import cli

    actions = [a for a in cli.train_parser()._actions if a.dest != "help"]
    marks = {a.dest: f"<pe-probe train {a.dest}>" for a in actions}
    seen = []
    with mock.patch.object(trainers.config, "make_config", lambda preset="quick", overrides=None: seen.append(overrides)):
        cli.config_from_args(argparse.Namespace(**marks))
    assert len(seen) == 1, "config_from_args no longer builds its config through trainers.config.make_config"
    out = {}
    for key, value in seen[0].items():  # a marker passed through, or inside what the trainer makes of it (a path)
        dests = [a for a in actions if isinstance(value, str) and marks[a.dest] in value]
        if len(dests) == 1 and dests[0].option_strings:
            out[key] = dests[0].option_strings[0]
    return out


def test_the_local_backend_passes_every_key_pe_probe_train_lst_has_an_option_for(tmp_path):
    """CLI_FLAGS is every config key pe-probe train lst has an option for (it once knew 18 keys and refused
    model.norm, mlp_ratio, dropout, readout, pe.causal and data.min_jaccard), and the arguments it builds give
    pe-probe train the run's own config, key for key."""
    from trainers.cli import config_from_args, train_parser
    from trainers.config import make_config

    assert G.CLI_FLAGS == options_of_pe_probe_train()
    over = every_option_overrides(tmp_path)
    over.pop("task")
    assert set(G.CLI_FLAGS) == set(over)
    spec = G.RunSpec("x", "quick", over)
    argv = spec.train_args("X")
    got = config_from_args(train_parser().parse_args(argv[1:])).to_dict()
    assert got == spec.config().to_dict()
    quick = make_config("quick").to_dict()
    assert all(got[k] != quick[k] for k in got if k not in ("task", "preset"))  # every value went through
    spec.check_train_args()
    assert " ".join(argv).endswith("--pe relative --pe-init uniform --pe-init-std 0.3 --no-pe-every-layer "
                                   "--relative-causal --d-model 12 --layers 2 --heads 2 --mlp-ratio 2.5 --norm pre "
                                   "--dropout 0.1 --readout cls --optimizer sgd --lr 0.02 --weight-decay 0.01 "
                                   "--momentum 0.5 --batch-size 16 --epochs 3 --eval-every 1 --ckpt-every 2 "
                                   f"--n-per-level 30 --ood-puzzles {over['data.ood_puzzles']} --min-jaccard 0.5")


@pytest.mark.parametrize("key,value,flags", [
    ("model.norm", "pre", ["--norm", "pre"]),
    ("model.mlp_ratio", 2, ["--mlp-ratio", "2"]),
    ("model.dropout", 0.1, ["--dropout", "0.1"]),
    ("model.readout", "cls", ["--readout", "cls"]),
    ("data.min_jaccard", 0.5, ["--min-jaccard", "0.5"]),
    ("pe.causal", True, ["--relative-causal"]),
    ("pe.causal", False, ["--no-relative-causal"]),
    ("data.ood_puzzles", None, []),  # None: the preset's value, as make_config skips it
])
def test_train_args_pass_the_model_and_data_options(key, value, flags):
    over = {"pe.kind": "relative", key: value} if key == "pe.causal" else {key: value}
    spec = G.RunSpec("x", "quick", over)
    assert spec.train_args("X")[6:] == [*(["--pe", "relative"] if key == "pe.causal" else []), *flags]
    spec.check_train_args()


@pytest.mark.parametrize("item,flags", [
    ("model.norm=pre", ["--norm", "pre"]),
    ("model.mlp_ratio=2", ["--mlp-ratio", "2"]),
    ("model.dropout=0.1", ["--dropout", "0.1"]),
    ("model.readout=cls", ["--readout", "cls"]),
    ("data.min_jaccard=0.5", ["--min-jaccard", "0.5"]),
    ("pe.causal=false", ["--no-relative-causal"]),  # true: refused for the runs whose PE is not relative
])
def test_the_local_backend_accepts_a_set_of_a_key_pe_probe_train_has_an_option_for(tmp_path, capsys, item, flags):
    """Was: "override 'model.norm' has no pe-probe train option", exit 2."""
    root = tmp_path / "s"
    assert S.main(["--root", str(root), "--set", item, "--dry-run"]) == 0
    assert "error" not in capsys.readouterr().err and not root.exists()
    spec = G.build_grid("quick", base_overrides=S.parse_overrides([item]))[0]
    args = spec.train_args("X")
    assert args[args.index(flags[0]):args.index(flags[0]) + len(flags)] == flags


@pytest.mark.parametrize("include,overrides,key,groups", [
    (("sigma",), {"pe.every_layer": False}, "pe.every_layer", "sigma"),
    (("sigma",), {"seed": 7}, "seed", "sigma"),
    (("sigma",), {"pe.init_std": 0.3}, "pe.init_std", "sigma"),
    (("pe_type",), {"pe.kind": "none"}, "pe.kind", "pe_type"),
    (G.GROUPS, {"optim.lr": 1e-3}, "optim.lr", "control"),  # only the control group's SGD runs set it
    (("placement", "control"), {"pe.init": "uniform"}, "pe.init", "placement, control"),
])
def test_base_overrides_of_keys_the_grid_sets_are_refused(include, overrides, key, groups):
    """The groups' own keys would replace a base override without a word: refused, naming key and groups."""
    with pytest.raises(InputError) as e:
        G.build_grid("quick", seeds=1, include=include, base_overrides={"model.d_model": 8, **overrides})
    assert str(e.value).startswith(f"--set {key}: the runs of group(s) {groups} set {key!r} themselves")


def test_base_overrides_of_keys_the_grid_leaves_alone_reach_every_run():
    over = {"optim.lr": 2e-3, "model.d_model": 8, "optim.epochs": 3}  # no sigma-group run sets optim.lr
    g = G.build_grid("quick", seeds=1, sigmas=(0.1, 2.0), include=("sigma", "placement"), base_overrides=over)
    assert [s.config().optim.lr for s in g] == [2e-3] * len(g) == [2e-3] * 5
    assert {(s.config().model.d_model, s.config().optim.epochs) for s in g} == {(8, 3)}
    assert {s.config().pe.every_layer for s in g} == {True, False}  # the grid's own keys still vary per run


# ---------------------------------------------------------------------------------------------------
# resumability


def _fake_last(run_dir: Path, epoch: int) -> None:
    import torch

    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": epoch}, run_dir / "last.pt")


def test_is_finished_reads_the_epoch(tmp_path):
    spec = G.build_grid("quick", epochs=4, seeds=1, sigmas=(0.1,), include=("sigma",))[0]
    assert not R.is_finished(spec, tmp_path / "none")
    _fake_last(tmp_path / "a", 3)
    assert not R.is_finished(spec, tmp_path / "a")
    _fake_last(tmp_path / "b", 4)
    assert R.is_finished(spec, tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "last.pt").write_bytes(b"torn")
    assert not R.is_finished(spec, tmp_path / "c")


def test_sweep_submits_only_unfinished_runs(tmp_path, monkeypatch):
    submitted = []

    class FakeRunner(R.Runner):
        def submit(self, spec, out_dir):
            submitted.append(spec.name)

        def wait(self):
            return [R.RunResult(n, "", 0, 0.0) for n in submitted]

    monkeypatch.setattr(S, "make_runner", lambda backend, workers, log=None, speed=None: FakeRunner())
    args = ["--root", str(tmp_path), "--sigmas", "0.1,2.0", "--seeds", "1", "--epochs", "3", "--groups", "sigma"]
    _fake_last(tmp_path / "learned-every-s0.1-seed0", 3)  # finished
    _fake_last(tmp_path / "learned-every-s2-seed0", 1)  # interrupted
    import signal

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    assert S.main(args) == 0
    assert submitted == ["learned-every-s2-seed0", "sin2d-seed0"]
    assert json.loads((tmp_path / "grid.json").read_text())["preset"] == "quick"
    # the sweep's stop handlers are gone once it returns: the caller's are back
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_sweep_started_with_sigint_ignored_leaves_it_ignored(tmp_path, monkeypatch):
    import signal

    seen = {}

    class FakeRunner(R.Runner):
        def submit(self, spec, out_dir):
            seen[spec.name] = signal.getsignal(signal.SIGINT)

        def wait(self):
            return [R.RunResult(n, "", 0, 0.0) for n in seen]

    monkeypatch.setattr(S, "make_runner", lambda backend, workers, log=None, speed=None: FakeRunner())
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or `sweep &` in a script
    try:
        assert S.main(["--root", str(tmp_path), "--sigmas", "0.1", "--seeds", "1", "--epochs", "1",
                       "--groups", "sigma"]) == 0
        assert seen and all(h is signal.SIG_IGN for h in seen.values())  # not replaced while training
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.slow
def test_sweep_resumes_after_interruption(tmp_path):
    """Kill the sweep once a run has finished; re-run; finished runs untouched, the rest completed."""
    root = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "analyses.lst.sweep", "--root", str(root), "--sigmas", "0.1,2.0", "--seeds", "1",
           "--epochs", "3", "--groups", "sigma", "--workers", "1", *TINY]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    specs = G.build_grid("quick", sigmas=(0.1, 2.0), seeds=1, epochs=3, include=("sigma",),
                         base_overrides={"model.d_model": 8, "data.n_per_level": 30})
    deadline = time.time() + 300
    try:
        while time.time() < deadline and not R.is_finished(specs[0], root / specs[0].name):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the sweep stops its own trainings
        proc.wait(timeout=60)
    finished = {s.name: _sha(root / s.name / "last.pt") for s in specs if R.is_finished(s, root / s.name)}
    mtimes = {n: (root / n / "last.pt").stat().st_mtime_ns for n in finished}
    assert specs[0].name in finished
    unfinished = [s.name for s in specs if s.name not in finished]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    for n, sha in finished.items():
        assert _sha(root / n / "last.pt") == sha and (root / n / "last.pt").stat().st_mtime_ns == mtimes[n]
    assert all(R.is_finished(s, root / s.name) for s in specs), unfinished
    log = (root / "sweep.log").read_text()
    assert f"{len(finished)} finished, {len(specs) - len(finished)} to train" in log


# ---------------------------------------------------------------------------------------------------
# report


def _synthetic_frames() -> dict[str, pd.DataFrame]:
    from synthetic_sweep import ACC_KEYS, synthetic_frames

    items = [("sigma", "learned", s, "every", "none") for s in (0.1, 0.2, 1.0, 2.0)]
    items += [("pe_type", "sin2d", None, "every", "none"), ("pe_type", "relative", None, "every", "none"),
              ("control", "learned", 0.1, "every", "wd0.1"), ("placement", "learned", 2.0, "input", "none")]
    return synthetic_frames(
        items, lambda rng: {k: float(rng.uniform(0.25, 1)) for k in (*ACC_KEYS, "train_loss")}, lambda rng: 0.9)


def test_report_from_synthetic_sweep(tmp_path):
    from analyses.lst.report import write_report

    root = tmp_path / "sweep"
    root.mkdir()
    (root / "grid.json").write_text(json.dumps({"preset": "quick", "runs": [{"name": "never-ran"}]}))
    out = tmp_path / "report"
    path = write_report(root, out, _synthetic_frames(), "python -m analyses.lst.report --root X",
                        notes=["runs of seed 1 came from another trainer version"])
    text = path.read_text()
    assert text.count("python -m analyses.lst.report --root X") == 1
    setting = text[text.index("## Setting"):text.index("## Verdicts")]
    assert "- Note: runs of seed 1 came from another trainer version\n" in setting
    for needle in ("Verdicts", "97.7", "never-ran", "Paired tests", "Wilcoxon", "ρ with OOD acc", "by construction"):
        assert needle in text, needle
    for fig in ("accuracy_vs_sigma", "per_level_vs_sigma", "identifiability_vs_sigma",
                "identifiability_vs_generalization", "layouts_small_vs_large_sigma", "trajectories"):
        assert (out / f"{fig}.png").stat().st_size > 1000 and (out / f"{fig}.csv").exists(), fig
        assert f"({fig}.png)" in text
    assert {p.suffix for p in out.iterdir()} <= {".md", ".png", ".csv"}


@pytest.mark.slow
def test_tiny_sweep_end_to_end(tmp_path):
    root = tmp_path / "sweep"
    run = [sys.executable, "-m", "analyses.lst.sweep", "--root", str(root), "--sigmas", "0.1,2.0", "--seeds", "1",
           "--epochs", "2", "--groups", "sigma", "--workers", "2", *TINY]
    subprocess.run(run, cwd=REPO, check=True, capture_output=True, timeout=300)
    out = tmp_path / "report"
    subprocess.run([sys.executable, "-m", "analyses.lst.report", "--root", str(root), "--out", str(out),
                    "--n-perm", "50", "--n-boot", "50"], cwd=REPO, check=True, capture_output=True, timeout=600)
    ana = pd.read_csv(root / "analysis" / "analyses.csv")
    last = ana[ana.is_last]
    assert {"raw", "q", "k", "qk", "kernel", "attention"} <= set(last.view)
    assert last[(last.view == "attention") & (last.run == "sin2d-seed0")].attention_similarity.dropna().round(6).eq(1).all()
    assert (ana.groupby("run").epoch.nunique() == 2).all()  # trajectories: every checkpoint
    cache = json.loads((root / "learned-every-s0.1-seed0" / "analysis.json").read_text())
    assert all("sha256" in e for e in cache["checkpoints"].values())
    mtime = (root / "learned-every-s0.1-seed0" / "analysis.json").stat().st_mtime_ns
    subprocess.run([sys.executable, "-m", "analyses.lst.report", "--root", str(root), "--out", str(out),
                    "--n-perm", "50", "--n-boot", "50"], cwd=REPO, check=True, capture_output=True, timeout=600)
    assert (root / "learned-every-s0.1-seed0" / "analysis.json").stat().st_mtime_ns == mtime  # cached
    assert (out / "README.md").exists()


def test_ensemble_backend_trains_the_sweep_in_process_and_skips_finished_runs(tmp_path, capsys):
    from analyses.lst.sweep import main
    from trainers.provenance import read_sessions

    root = tmp_path / "sweep"
    argv = ["--root", str(root), "--sigmas", "0.1,2.0", "--seeds", "1", "--epochs", "2", "--groups", "sigma",
            "--backend", "ensemble", "--workers", "2", *TINY]
    assert main(argv) == 0
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    assert [r.name for r in runs] == ["learned-every-s0.1-seed0", "learned-every-s2-seed0", "sin2d-seed0"]
    for run in runs:
        assert (run / "last.pt").exists() and (run / "spec.json").exists()
        assert [s["trainer"] for s in read_sessions(run)] == ["ensemble"]
    assert main(argv) == 0
    assert "3 finished, 0 to train" in (root / "sweep.log").read_text().splitlines()[-2]


@pytest.mark.parametrize("argv,needle", [
    (["--set", "foo=1"], "unknown config key 'foo'"),
    (["--set", "model.d_model=abc"], "--d-model must be an integer >= 1"),
    (["--set", "model.d_model=8.0"], "--d-model must be an integer >= 1, got 8.0"),
    (["--set", "model.dropout=1.5"], "got 1.5 (from --set model.dropout=1.5)"),  # names where the value came from
    (["--set", "data.test_frac=0.2"], "override 'data.test_frac' has no pe-probe train option; known: seed, "),
    (["--set", "data.seed=1"], "use --backend ensemble or ray for other keys"),  # no pe-probe train flag for it
    # pe-probe train records --ood-puzzles resolved: the run's config.json would not be the sweep's
    (["--set", "data.ood_puzzles=held-out.csv"], "--set data.ood_puzzles=held-out.csv: pe-probe train would record "
                                                 "data.ood_puzzles as /"),
    (["--sigmas", "0.1,x"], "--sigmas '0.1,x'"),
    (["--sigmas", "0.1,-1"], "every sigma must be > 0"),
    (["--groups", "sigma,nope"], "unknown group(s) nope"),
    (["--cuda-graphs"], "--cuda-graphs needs the runs on a GPU"),
    (["--tf32"], "--tf32 needs the runs on a GPU"),
    (["--ensemble-max", "4"], "--ensemble-max needs --backend ensemble"),
    # keys the selected groups set themselves: refused (the grid's value would silently win), dry run or not
    (["--groups", "sigma", "--sigmas", "0.1", "--seeds", "1", "--dry-run", "--set", "pe.every_layer=false", "--set",
      "seed=7"], "--set pe.every_layer: the runs of group(s) sigma set 'pe.every_layer' themselves"),
    (["--groups", "sigma", "--set", "seed=7"], "so this value would be ignored there; the runs' seeds are 0..N-1: "
                                               "set N with --seeds"),
    (["--set", "seed=1.5", "--dry-run"], "--set seed: the runs of group(s) sigma, pe_type, placement, control"),
    (["--set", "pe.every_layer=yes"], "--set pe.every_layer:"),
    (["--set", "pe.init_std=0.3"], "sigmas come from --sigmas"),
    (["--set", "optim.lr=0.001"], "--set optim.lr: the runs of group(s) control set 'optim.lr' themselves, so this "
                                  "value would be ignored there; to change it for the other runs, leave out control "
                                  "with --groups sigma,pe_type,placement, or drop the --set (see"),
    (["--groups", "control", "--set", "optim.name=sgd"], "themselves, so this value would be ignored there; drop the "
                                                         "--set (see"),
    (["--groups", "sigma", "--set", "optim.lr=abc"], "--lr must be a finite number > 0, got 'abc'"),  # a key that applies
])
def test_bad_sweep_input_is_a_one_line_error_before_anything_is_written(tmp_path, capsys, argv, needle):
    root = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        S.main(["--root", str(root), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err  # one line, no usage dump
    assert needle in err and "Traceback" not in err
    assert not root.exists()


def test_a_set_of_a_key_the_selected_groups_leave_alone_is_accepted(tmp_path, capsys):
    # optim.lr is set by the control group's SGD runs only: fine without that group
    argv = ["--root", str(tmp_path / "s"), "--groups", "sigma,pe_type,placement", "--set", "optim.lr=0.002",
            "--dry-run"]
    assert S.main(argv) == 0
    assert "error" not in capsys.readouterr().err


def test_dry_run_writes_nothing(tmp_path, capsys, as_if_ray_installed):
    """--dry-run prints the plan (the runs and their state) and leaves ROOT as it was: no grid.json, no sweep.log."""
    argv = ["--sigmas", "0.1,2.0", "--seeds", "1", "--epochs", "3", "--groups", "sigma", "--dry-run"]
    fresh = tmp_path / "fresh"
    assert S.main(["--root", str(fresh), *argv]) == 0
    assert not fresh.exists()
    out = capsys.readouterr().out
    assert "sweep quick: 3 runs, 0 finished, 3 to train" in out and "  todo  sin2d-seed0" in out

    root = tmp_path / "sweep"  # a sweep under way: its state is listed, nothing is added or changed
    _fake_last(root / "learned-every-s0.1-seed0", 3)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    assert S.main(["--root", str(root), *argv]) == 0
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    out = capsys.readouterr().out
    assert "1 finished, 2 to train" in out and "  done  learned-every-s0.1-seed0" in out
    assert "  todo  learned-every-s2-seed0" in out

    state = tmp_path / "state"  # the Ray backend's --state-dir (grid.json, sweep.log for a URL root) stays unmade too
    argv_ray = ["--root", str(tmp_path / "r"), "--backend", "ray", "--state-dir", str(state), *argv]
    assert S.main(argv_ray) == 0
    assert not state.exists() and not (tmp_path / "r").exists()


def test_keys_without_a_cli_flag_are_fine_for_the_in_process_backends(tmp_path):
    argv = ["--root", str(tmp_path / "s"), "--set", "data.test_frac=0.2", "--backend", "ensemble", "--dry-run"]
    assert S.main(argv) == 0


def test_the_local_backend_trains_with_a_model_option_and_records_it(tmp_path):
    """--set model.norm=pre reaches each pe-probe train subprocess as --norm pre and its config.json."""
    root = tmp_path / "sweep"
    argv = ["--root", str(root), "--sigmas", "0.5", "--seeds", "1", "--epochs", "1", "--groups", "sigma",
            "--set", "model.norm=pre", "--set", "model.readout=cls", *TINY]
    assert S.main(argv) == 0
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    assert [r.name for r in runs] == ["learned-every-s0.5-seed0", "sin2d-seed0"]
    for run in runs:
        assert (run / "last.pt").exists()
        model = json.loads((run / "config.json").read_text())["model"]
        assert (model["norm"], model["readout"], model["d_model"]) == ("pre", "cls", 8)
        assert "--norm pre --readout cls" in (run / "train.log").read_text().splitlines()[0]
    assert S.main(argv) == 0  # resumes: the runs' config.json match the sweep's
    assert "2 finished, 0 to train" in (root / "sweep.log").read_text()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU error")
def test_a_cuda_sweep_without_a_gpu_is_refused_unless_ray_workers_train_it(tmp_path, capsys, as_if_ray_installed):
    with pytest.raises(SystemExit):
        S.main(["--root", str(tmp_path / "s"), "--set", "device=cuda"])
    assert "no CUDA device is available here" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    argv = ["--root", str(tmp_path / "r"), "--set", "device=cuda", "--backend", "ray", "--cuda-graphs", "--dry-run"]
    assert S.main(argv) == 0  # the Ray workers (which may have GPUs) check their own device


@pytest.mark.skipif(not __import__("trainers.evaluate").evaluate.cpu_has_bf16(), reason="CPU without native bf16")
@pytest.mark.parametrize("backend", ["local", "ensemble"])
def test_speed_options_reach_every_run_of_the_sweep(tmp_path, backend):
    from trainers.provenance import read_sessions

    root = tmp_path / "sweep"
    argv = ["--root", str(root), "--sigmas", "0.5", "--seeds", "1", "--epochs", "1", "--groups", "sigma",
            "--backend", backend, "--bf16", *TINY]
    assert S.main(argv) == 0
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    assert [r.name for r in runs] == ["learned-every-s0.5-seed0", "sin2d-seed0"]
    for run in runs:
        assert [(s["bf16"], s["compile"]) for s in read_sessions(run)] == [(True, False)]
        if backend == "local":
            assert " --bf16" in (run / "train.log").read_text().splitlines()[0]


def test_run_folders_of_another_config_are_refused_before_anything_is_written(tmp_path, capsys):
    """A re-run with other options would have skipped the old runs as finished (and rewritten grid.json)."""
    argv = ["--root", str(tmp_path), "--sigmas", "0.1", "--seeds", "1", "--epochs", "3", "--groups", "sigma"]
    spec = next(s for s in G.build_grid("quick", sigmas=(0.1,), seeds=1, epochs=3, include=("sigma",))
                if s.name == "learned-every-s0.1-seed0")
    old = spec.config().to_dict()
    old["data"]["n_per_level"] = 30
    (tmp_path / spec.name).mkdir()
    (tmp_path / spec.name / "config.json").write_text(json.dumps(old))
    with pytest.raises(SystemExit) as e:
        S.main([*argv, "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "hold runs of another config, e.g. learned-every-s0.1-seed0 (data.n_per_level: 30 -> 3000)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.name]  # no grid.json, no sweep.log


# ---- what a mutation audit found untested

def test_the_sweep_exits_1_when_a_run_failed(tmp_path, monkeypatch):
    class FailingRunner(R.Runner):
        def __init__(self):
            self.names = []

        def submit(self, spec, out_dir):
            self.names.append(spec.name)

        def wait(self):
            return [R.RunResult(n, "", 1 if i == 0 else 0, 0.0) for i, n in enumerate(self.names)]

    monkeypatch.setattr(S, "make_runner", lambda backend, workers, log=None, speed=None: FailingRunner())
    args = ["--root", str(tmp_path), "--sigmas", "0.1", "--seeds", "1", "--epochs", "3", "--groups", "sigma"]
    assert S.main(args) == 1
    assert "1 failed (learned-every-s0.1-seed0)" in (tmp_path / "sweep.log").read_text()


def test_a_second_call_replaces_its_runs_in_grid_json(tmp_path):
    grid = G.build_grid("quick", sigmas=(0.1,), seeds=1, epochs=3, include=("sigma",))
    (tmp_path / "grid.json").write_text(json.dumps(S.merged_grid(tmp_path / "grid.json", "quick", ["a"], grid)))
    names = [r["name"] for r in S.merged_grid(tmp_path / "grid.json", "quick", ["b"], grid)["runs"]]
    assert sorted(names) == sorted(s.name for s in grid) and len(names) == len(set(names))


def test_every_seed_0_run_comes_first_and_the_sigma_grid_before_the_second_seed_of_controls():
    g = G.build_grid("quick", sigmas=(0.1, 2.0), seeds=3, epochs=3, include=("sigma", "control"))
    order = [(s.tags["seed"], s.tags["group"]) for s in g]
    assert max(i for i, (_, group) in enumerate(order) if group == "sigma") < order.index((1, "control"))
    assert all(seed == 0 for seed, _ in order[: order.index((1, "sigma"))])


def test_the_ensemble_runner_reports_unfinished_runs_as_failed(tmp_path, monkeypatch):
    """A group whose training raised (here after finishing one of its two runs) must not be reported as trained:
    the sweep's exit code and its 'N failed' line come from these return codes."""
    import trainers.ensemble
    from analyses.lst.ensemble_runner import EnsembleRunner

    specs = G.build_grid("quick", epochs=4, seeds=1, sigmas=(0.1, 2.0), include=("sigma",))[:2]

    def half_then_crash(configs, outs, **kwargs):
        _fake_last(outs[0], 4)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(trainers.ensemble, "train_ensemble", half_then_crash)
    lines = []
    runner = EnsembleRunner(1, log=lines.append)
    for s in specs:
        runner.submit(s, tmp_path / s.name)
    assert [(r.name, r.returncode) for r in runner.wait()] == [(specs[0].name, 0), (specs[1].name, 1)]
    assert "ensemble training failed: RuntimeError: out of memory" in lines


# ---- staging a run folder to a URL (ray_runner), in-process

@pytest.fixture
def mem():
    """An in-memory fsspec filesystem (no Ray) and a root of its own."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/pe-probe-staging-{os.getpid()}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_download_skips_uploads_that_were_cut_short(tmp_path, mem):
    from analyses.lst.ray_runner import download_run

    fs, root = mem
    remote = f"{root}/run"
    fs.pipe(f"{remote}/metrics.jsonl", b'{"epoch": 1}\n')
    fs.pipe(f"{remote}/checkpoints/epoch_1.pt", b"ckpt")
    fs.pipe(f"{remote}/last.pt.0123abcd.uploading", b"torn")  # a worker died mid-upload
    fs.pipe(f"{remote}/checkpoints/epoch_2.pt.89abcdef.uploading", b"torn")
    n = download_run(fs, remote, tmp_path)
    got = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert got == ["checkpoints/epoch_1.pt", "metrics.jsonl"] and n == 2
    assert download_run(fs, f"{root}/none", tmp_path / "x") == 0


def test_upload_moves_last_pt_into_place_after_every_other_file(tmp_path, mem, monkeypatch):
    """last.pt marks a run finished: a reader that sees it must see a complete run folder."""
    from analyses.lst.ray_runner import upload_run

    fs, root = mem
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("last.pt", "metrics.jsonl", "config.json", "train.log", "checkpoints/epoch_1.pt",
                 "checkpoints/epoch_2.pt", "zzz.txt"):
        (run / name).write_text(name)
    (run / ".last.pt.1234.tmp").write_text("partial atomic write")  # never uploaded
    moved = []
    real_mv = fs.mv

    def mv(src, dst, **kw):
        # when last.pt arrives, every other file must already be in its final place
        if dst.endswith("/last.pt"):
            others = {p for p in fs.find(f"{root}/run") if not p.endswith(".uploading")}
            assert len(others) == 6, sorted(others)
        moved.append(dst.rsplit("/run/", 1)[1])
        return real_mv(src, dst, **kw)

    monkeypatch.setattr(fs, "mv", mv)
    assert upload_run(run, fs, f"{root}/run") == 7
    assert moved[-1] == "last.pt" and sorted(moved) == sorted(
        ["last.pt", "metrics.jsonl", "config.json", "train.log", "checkpoints/epoch_1.pt", "checkpoints/epoch_2.pt",
         "zzz.txt"])
    assert not [p for p in fs.find(f"{root}/run") if p.endswith(".uploading") or p.endswith(".tmp")]


# ---- the sweep's inputs and its local runner

@pytest.mark.parametrize("text", ["0", "0.1,0", "0.0,2.0", "-0.0"])
def test_a_zero_sigma_is_refused(text):
    with pytest.raises(InputError, match="every sigma must be > 0"):
        S.parse_sigmas(text)


def test_a_zero_sigma_on_the_command_line_is_a_one_line_error(tmp_path, capsys):
    root = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        S.main(["--root", str(root), "--sigmas", "0.1,0", "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "every sigma must be > 0" in err and len(err.strip().splitlines()) == 1
    assert not root.exists()


def test_local_runner_runs_at_most_workers_trainings_at_once_and_all_of_them(tmp_path, monkeypatch):
    # each "training" is a short sleep: the runner's bookkeeping is what is measured
    monkeypatch.setattr(R, "pe_probe_command", lambda: [sys.executable, "-c", "import time; time.sleep(0.4)"])
    peak = []
    real_start = R.LocalRunner._start

    def start(self, spec, out):
        real_start(self, spec, out)
        peak.append(len(self._running))

    monkeypatch.setattr(R.LocalRunner, "_start", start)
    specs = G.build_grid("quick", sigmas=(0.1, 0.2, 0.5, 1.0, 2.0), seeds=1, epochs=2, include=("sigma",))[:5]
    runner = R.LocalRunner(2, log=lambda _m: None, poll_s=0.05)
    for s in specs:
        runner.submit(s, tmp_path / s.name)
    t0 = time.time()
    results = runner.wait()
    assert sorted(r.name for r in results) == sorted(s.name for s in specs)
    assert all(r.returncode == 0 for r in results)
    assert len(peak) == 5 and max(peak) == 2  # two at a time, never three
    assert time.time() - t0 >= 0.4 * 2  # five 0.4 s jobs two at a time take at least three rounds (first already going)


@pytest.mark.parametrize("preset,epochs", [("quick", 12), ("quick", 40), ("paper", 300), ("paper", 4000)])
def test_the_grids_eval_every_divides_its_checkpoint_spacing(preset, epochs):
    cfg = G.build_grid(preset, epochs=epochs, seeds=1, sigmas=(0.1,), include=("sigma",))[0].config()
    assert cfg.ckpt_every % cfg.eval_every == 0  # every checkpoint falls on a regular evaluation
    assert cfg.eval_every <= G.PRESET_EVAL_EVERY[preset]


def test_a_failed_run_says_why_on_the_sweeps_line(tmp_path, monkeypatch):
    """'FAILED (rc 2) <run> in 5 s' gave no reason; the trainer's refusal was only in RUN/train.log."""
    script = ("import sys; print('epoch 1'); sys.stderr.write('pe-probe train: error: could not generate 30 puzzles "
              "per level; lower --min-jaccard\\n'); sys.exit(2)")
    monkeypatch.setattr(R, "pe_probe_command", lambda: [sys.executable, "-c", script])
    lines = []
    spec = G.build_grid("quick", sigmas=(0.1,), seeds=1, epochs=2, include=("sigma",))[0]
    runner = R.LocalRunner(1, log=lines.append, poll_s=0.05)
    runner.submit(spec, tmp_path / spec.name)
    assert [r.returncode for r in runner.wait()] == [2]
    failed = [ln for ln in lines if "FAILED" in ln]
    assert failed and "lower --min-jaccard" in failed[0] and str(tmp_path / spec.name / "train.log") in failed[0]
    assert R.last_error(tmp_path / "missing.log") == "no log"
