"""compare(): tidy table, relations with their Spearman correlations, trajectories, and all-or-nothing output."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pe_probe.compare import compare, expand_sources, flatten
from pe_probe.errors import InputError
from pe_probe.report.compare_figures import identifiability_metrics, steps_frame, summary_frame
from pe_probe.report.compare_index import _strength, correlation_sentence, smallest_exact_p
from pe_probe.report.trajectory import chain_align, rotation_align, write_trajectory

from .conftest import grid_coords, write_checkpoint

FAST = {"methods": ("pca", "cmds"), "n_perm": 19, "n_boot": 0}
NOISES = (0.0, 0.5, 1.0, 2.0, 4.0)


def planted(n_side: int, noise: float, seed: int, d: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    g = grid_coords(n_side, n_side)
    return g @ rng.normal(size=(2, d)) + noise * rng.normal(size=(len(g), d))


@pytest.fixture
def noise_sweep(tmp_path):
    """10 checkpoints on grid 6x6: 5 noise levels x 2 seeds; 'test_acc' falls with noise."""
    g = grid_coords(6, 6)
    paths = []
    for noise in NOISES:
        for seed in (0, 1):
            p = tmp_path / "ckpts" / f"noise{noise}-seed{seed}.pt"
            p.parent.mkdir(exist_ok=True)
            write_checkpoint(p, planted(6, noise, seed), g, (6, 6), config={"data": {"noise": noise}, "seed": seed},
                             metrics={"test_acc": 1.0 - noise / 5 + 0.01 * seed})
            paths.append(p)
    return paths


def parent_is_clean(out) -> bool:
    return not any(p.name.startswith(f".{out.name}.") for p in out.parent.iterdir())


def test_noise_sweep_relation_and_outputs(noise_sweep, tmp_path, analyze_source_available):
    out = tmp_path / "cmp"
    frame = compare(noise_sweep, out, by="data.noise", analyze_kwargs=FAST, progress=False, formats=("png",))
    assert len(frame) == 10
    csv = pd.read_csv(out / "compare.csv")
    assert {"source", "label", "rsa_spearman", "recovery_cmds_r2", "data.noise", "seed", "eval.test_acc"} <= set(csv.columns)
    corr = pd.read_csv(out / "correlations.csv")
    rsa_vs_noise = corr[(corr.x == "data.noise") & (corr.y == "rsa_spearman")]["spearman_rho"].item()
    assert rsa_vs_noise < -0.8
    # mean RSA per noise level decreases monotonically, with a CI from the 2 seeds
    summ = pd.read_csv(out / "figures" / "metrics_vs_data.noise.csv")
    rsa = summ[summ.metric == "rsa_spearman"].sort_values("data.noise")
    assert (np.diff(rsa["mean"].to_numpy()) < 0).all()
    assert (rsa["n"] == 2).all() and (rsa["ci_low"] <= rsa["mean"]).all() and (rsa["mean"] <= rsa["ci_high"]).all()
    # identifiability vs generalization: positive across models (less noise, higher both)
    gen = corr[(corr.x == "rsa_spearman") & (corr.y == "eval.test_acc")]["spearman_rho"].item()
    assert gen > 0.8
    gcsv = pd.read_csv(out / "figures" / "identifiability_vs_generalization.csv")
    assert {"label", "metric", "value", "eval.test_acc"} <= set(gcsv.columns)
    for name in ("metrics_vs_data.noise", "identifiability_vs_generalization"):
        assert (out / "figures" / f"{name}.png").is_file() and (out / "figures" / f"{name}.csv").is_file()
    index = (out / "index.html").read_text()
    assert "rsa_spearman falls as data.noise rises" in index
    assert parent_is_clean(out)


def test_different_n_refuses_and_leaves_nothing(tmp_path, analyze_source_available):
    a = tmp_path / "a.pt"
    b = tmp_path / "b.pt"
    write_checkpoint(a, planted(6, 0.1, 0), grid_coords(6, 6), (6, 6), config={}, metrics={})
    write_checkpoint(b, planted(7, 0.1, 0), grid_coords(7, 7), (7, 7), config={}, metrics={})
    out = tmp_path / "out"
    with pytest.raises(InputError, match="different numbers of positions") as info:
        compare([a, b], out, analyze_kwargs=FAST, progress=False)
    assert "\n" not in str(info.value)
    assert not out.exists() and parent_is_clean(out)


def test_different_ground_truths_refused(tmp_path, analyze_source_available):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    g = grid_coords(6, 6)
    write_checkpoint(a, planted(6, 0.1, 0), g, (6, 6), config={}, metrics={})
    write_checkpoint(b, planted(6, 0.1, 0), g[::-1].copy(), (6, 6), config={}, metrics={})
    with pytest.raises(InputError, match="different ground truths"):
        compare([a, b], tmp_path / "out", analyze_kwargs=FAST, progress=False)
    assert not (tmp_path / "out").exists()


def test_failure_while_writing_leaves_no_folder(noise_sweep, tmp_path, monkeypatch, analyze_source_available):
    import pe_probe.compare as cmp

    def broken(folder, *args, **kwargs):
        (folder / "compare.csv").write_text("partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(cmp, "_write_outputs", broken)
    out = tmp_path / "cmp"
    with pytest.raises(RuntimeError, match="disk full"):
        compare(noise_sweep[:2], out, analyze_kwargs=FAST, progress=False)
    assert not out.exists() and parent_is_clean(out)


def test_output_folder_rules(noise_sweep, tmp_path, monkeypatch, analyze_source_available):
    import pe_probe.compare as cmp

    monkeypatch.setattr(cmp, "_write_outputs", lambda folder, frame, **kw: frame.to_csv(folder / "compare.csv"))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not written by pe-probe"):
        compare(noise_sweep[:2], foreign, analyze_kwargs=FAST, progress=False)
    assert (foreign / "notes.txt").read_text() == "mine"
    compare(noise_sweep[:2], foreign, analyze_kwargs=FAST, progress=False, force=True, formats=("png",))
    assert (foreign / "compare.csv").is_file() and not (foreign / "notes.txt").exists()
    # a previous pe-probe output is replaced without force
    compare(noise_sweep[2:4], foreign, analyze_kwargs=FAST, progress=False, formats=("png",))
    assert len(pd.read_csv(foreign / "compare.csv")) == 2 and parent_is_clean(foreign)


def test_unknown_by_key_lists_available_keys(noise_sweep, tmp_path, analyze_source_available):
    with pytest.raises(InputError, match="data.noise"):
        compare(noise_sweep[:2], tmp_path / "o", by="pe.init_std", analyze_kwargs=FAST, progress=False)
    assert not (tmp_path / "o").exists()


def _run_folder(tmp_path, n_steps=5):
    """A run folder whose PE goes from noise to a rotated/reflected grid, with a random rotation per step."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    g = grid_coords(5, 5)
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2, 10))
    noise = rng.normal(size=(25, 10))
    for s in range(n_steps):
        q, _ = np.linalg.qr(rng.normal(size=(10, 10)))  # the table's basis changes: embeddings may flip
        t = ((s / (n_steps - 1)) * g @ base + (1 - s / (n_steps - 1)) * 3 * noise) @ q
        write_checkpoint(run / "checkpoints" / f"step-{s * 100:08d}.pt", t, g, (5, 5), config={"seed": 0},
                         metrics={"test_acc": s / n_steps}, step=s * 100)
    (run / "last.pt").write_bytes((run / "checkpoints" / f"step-{(n_steps - 1) * 100:08d}.pt").read_bytes())
    return run


def test_single_run_folder_is_a_trajectory(tmp_path, analyze_source_available):
    run = _run_folder(tmp_path)
    srcs, traj = expand_sources([run])
    assert traj and [s.path.name for s in srcs] == [f"step-{s * 100:08d}.pt" for s in range(5)]
    out = tmp_path / "traj"
    frame = compare([run], out, analyze_kwargs=FAST, progress=False, formats=("png",))
    assert frame["step"].tolist() == [0, 100, 200, 300, 400]
    steps = pd.read_csv(out / "figures" / "metrics_over_steps.csv")
    assert {"step", "metric", "value"} <= set(steps.columns)
    rsa = steps[steps.metric == "rsa_spearman"].sort_values("step")["value"].to_numpy()
    assert rsa[-1] > rsa[0]
    page = (out / "trajectory.html").read_text()
    assert 'data-frames="5"' in page and "sliders" in page
    layouts = pd.read_csv(out / "figures" / "trajectory_layouts.csv")  # the page's frames, re-plottable
    assert list(layouts.columns) == ["step", "position", "aligned_0", "aligned_1", "true_0", "true_1"]
    assert sorted(layouts.step.unique()) == [0, 100, 200, 300, 400] and set(layouts.groupby("step").size()) == {25}
    last = layouts[layouts.step == 400]
    assert np.corrcoef(last.aligned_0, last.true_0)[0, 1] > 0.5  # aligned onto the true layout
    assert 'href="figures/trajectory_layouts.csv"' in (out / "index.html").read_text()  # linked as README says
    # two run folders: each becomes its last.pt, no trajectory
    srcs2, traj2 = expand_sources([run, _run_folder(tmp_path / "second")])
    assert not traj2 and all(s.path.name == "last.pt" for s in srcs2)


def test_chain_align_removes_flips():
    rng = np.random.default_rng(3)
    base = grid_coords(4, 4) + 0.05 * rng.normal(size=(16, 2))
    frames = []
    for t in range(6):
        q, _ = np.linalg.qr(rng.normal(size=(2, 2)))  # random rotation or reflection per frame
        frames.append((base + 0.01 * t) @ q * (1 + t) + rng.normal(size=2))
    aligned = chain_align(frames, grid_coords(4, 4))
    for a, b in zip(aligned, aligned[1:]):
        assert np.abs(a - b).max() < 0.2  # consecutive frames coincide: no flip, no jump
    ref = grid_coords(4, 4)
    radius = np.sqrt(((ref - ref.mean(0)) ** 2).sum(1).mean())
    for a in aligned:  # every frame keeps the true layout's size: the chain does not shrink
        assert np.sqrt(((a - a.mean(0)) ** 2).sum(1).mean()) == pytest.approx(radius)
    unaligned_jump = max(np.abs(a - b).max() for a, b in zip(frames, frames[1:]))
    assert unaligned_jump > 1.0


def test_flatten_joins_keys_with_dots():
    assert flatten({"pe": {"init_std": 0.2, "kind": "learned"}, "seed": 3, "grid": [4, 4]}) == {
        "pe.init_std": 0.2, "pe.kind": "learned", "seed": 3, "grid": "4x4"}


def test_sources_without_a_pe_table_are_skipped(noise_sweep, tmp_path, capsys, analyze_source_available):
    import torch

    rel = tmp_path / "relative.pt"
    torch.save({"format": "pe-probe-checkpoint/1", "model": {"blocks.0.attn.pe.offset_table": torch.randn(71, 12)},
                "config": {"pe": {"kind": "relative"}}, "pe_params": [], "ground_truth": None, "step": 0,
                "epoch": 0, "metrics": {}}, rel)
    (tmp_path / "relative2.pt").write_bytes(rel.read_bytes())
    frame = compare([noise_sweep[0], rel, noise_sweep[1]], tmp_path / "out", progress=False,
                    analyze_kwargs={"n_perm": 0, "n_boot": 0}, formats=("png",))
    assert len(frame) == 2 and capsys.readouterr().err.count("skipping relative") == 1  # said once a source is kept
    frame = compare([rel, noise_sweep[0], noise_sweep[1]], tmp_path / "out", progress=False,
                    analyze_kwargs={"n_perm": 0, "n_boot": 0}, formats=("png",))
    err = capsys.readouterr().err
    assert len(frame) == 2 and err.count("skipping relative") == 1  # held, then said
    assert "skipping relative: no PE table to compare (its pe_params is empty; PE kind relative)" in err
    # a Hugging Face folder has no pe_params: its config says why (it used to be told its pe_params is empty)
    from safetensors.torch import save_file

    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text('{"model_type": "llama", "rope_theta": 10000.0}')
    save_file({"model.embed_tokens.weight": torch.randn(50, 8),
               "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8)}, str(llama / "model.safetensors"))
    frame = compare([noise_sweep[0], llama], tmp_path / "out", progress=False, force=True,
                    analyze_kwargs={"n_perm": 0, "n_boot": 0}, formats=("png",))
    err = capsys.readouterr().err
    assert len(frame) == 1 and "skipping llama: no PE table to compare (the model has no absolute PE table: rotary" in err
    assert "pe_params" not in err
    with pytest.raises(InputError, match="no source has a PE table"):
        compare([rel, tmp_path / "relative2.pt"], tmp_path / "none", progress=False, analyze_kwargs={"n_perm": 0})
    assert not (tmp_path / "none").exists() and "skipping" not in capsys.readouterr().err  # the error alone: one line


def test_by_init_std_leaves_out_the_pes_that_ignore_it(tmp_path, capsys, analyze_source_available):
    """A fixed PE's config records the default σ 0.1 (identical models, identical configs): compared by
    pe.init_std it sat at σ 0.1 in compare.csv, the figures and the correlations against σ."""
    g = grid_coords(6, 6)
    paths = []
    for i, (kind, init, std, noise) in enumerate([("learned", "normal", 0.1, 0.0), ("learned", "normal", 0.5, 1.0),
                                                 ("learned", "normal", 2.0, 4.0), ("learned", "normal", 0.1, 0.5),
                                                 ("sin2d", "normal", 0.1, 8.0), ("learned", "zeros", 0.1, 8.0)]):
        p = tmp_path / f"run{i}.pt"
        write_checkpoint(p, planted(6, noise, i), g, (6, 6), config={"pe": {"kind": kind, "init": init, "init_std": std}},
                         metrics={"test_acc": 1.0 - noise / 10})
        paths.append(p)
    frame = compare(paths, tmp_path / "out", by="pe.init_std", analyze_kwargs=FAST, progress=False, formats=("png",))
    err = capsys.readouterr().err
    assert "2 of 6 sources have a PE that ignores pe.init_std (learned, sin2d)" in err
    csv = pd.read_csv(tmp_path / "out" / "compare.csv")
    assert csv["pe.init_std"].isna().tolist() == [False] * 4 + [True] * 2
    assert frame["pe.init_std"].isna().sum() == 2
    corr = pd.read_csv(tmp_path / "out" / "correlations.csv")
    assert corr[(corr.x == "pe.init_std") & (corr.y == "rsa_spearman")]["n"].item() == 4
    assert corr[(corr.x == "rsa_spearman") & (corr.y == "eval.test_acc")]["n"].item() == 6  # all models here
    summ = pd.read_csv(tmp_path / "out" / "figures" / "metrics_vs_pe.init_std.csv")
    assert summ[(summ.metric == "rsa_spearman") & (summ["pe.init_std"] == 0.1)]["n"].item() == 2
    # by another key nothing is blanked
    frame = compare(paths, tmp_path / "out2", by="pe.kind", analyze_kwargs=FAST, progress=False, formats=("png",))
    assert "ignores" not in capsys.readouterr().err and frame["pe.init_std"].notna().all()


def test_rows_say_which_table_they_measured(tmp_path, capsys, analyze_source_available):
    import torch

    from pe_probe.cli import main

    g = grid_coords(4, 4)
    for seed in (0, 1):
        p = write_checkpoint(tmp_path / f"s{seed}.pt", planted(4, 0.2, seed), g, (4, 4), config={"seed": seed}, metrics={})
        obj = torch.load(p, weights_only=True)
        obj["model"]["blocks.1.pe.table"] = obj["model"].pop("pe.table")
        obj["model"]["blocks.0.pe.table"] = obj["model"]["blocks.1.pe.table"] * 2
        obj["pe_params"] = ["blocks.0.pe.table", "blocks.1.pe.table"]
        torch.save(obj, p)
    frame = compare([tmp_path / "s0.pt", tmp_path / "s1.pt"], tmp_path / "a", progress=False, analyze_kwargs={"n_perm": 0})
    assert list(frame["param"]) == ["blocks.0.pe.table"] * 2 and list(frame["layer"]) == [0, 0]
    assert all("analysing layer 0" in n for n in frame["notes"])
    frame = compare([tmp_path / "s0.pt", tmp_path / "s1.pt"], tmp_path / "b", progress=False,
                    analyze_kwargs={"n_perm": 0, "layer": "mean", "positions": "0:8"})
    assert list(frame["param"]) == ["blocks.0.pe.table+blocks.1.pe.table"] * 2 and list(frame["layer"]) == ["mean"] * 2
    assert list(frame["n_positions"]) == [8, 8]
    assert main(["compare", str(tmp_path / "s0.pt"), str(tmp_path / "s1.pt"), "-o", str(tmp_path / "c"), "--layer", "all"]) == 2
    assert "--layer N or --layer mean" in capsys.readouterr().err and not (tmp_path / "c").exists()
    # --address belongs to --backend ray: without it, it was silently ignored
    assert main(["compare", str(tmp_path / "s0.pt"), "-o", str(tmp_path / "c"), "--address", "auto"]) == 2
    assert "an option of --backend ray" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_missing_source_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        expand_sources([tmp_path / "nope.pt"])
    # a generated table is no file: say so and what takes it (it read "source not found; check the path")
    with pytest.raises(InputError, match="not generated tables such as builtin:sin2d:4x4: analyse it with pe-probe "
                                         "analyze, or .* --reference sin1d or sin2d:HxW"):
        expand_sources(["builtin:sin2d:4x4", tmp_path / "nope.pt"])


def test_the_same_source_twice_is_refused_by_any_name(tmp_path):
    """Twice the same checkpoint counted twice in every correlation of compare.csv."""
    run = _run_folder(tmp_path)
    other = _run_folder(tmp_path / "b")
    with pytest.raises(InputError, match="is given twice; give each source once"):
        expand_sources([run, other, run])
    with pytest.raises(InputError, match="are the same source"):
        expand_sources([run, run / "last.pt"])  # a run folder stands for its last.pt
    (tmp_path / "link.pt").symlink_to(other / "last.pt")
    with pytest.raises(InputError, match="are the same source"):
        expand_sources([other, tmp_path / "link.pt"])
    assert len(expand_sources([run, other])[0]) == 2


def test_compare_layer_all_is_refused_by_the_parser_without_offering_it(tmp_path, capsys):
    from pe_probe.cli import main

    assert main(["compare", str(tmp_path), "-o", str(tmp_path / "c"), "--layer", "two"]) == 2
    err = capsys.readouterr().err
    assert "an integer or 'mean'" in err and "'all'" not in err


def test_sweep_glob_skips_folders_that_are_not_runs(tmp_path, capsys):
    """`compare ROOT/*/` also matches the sweep's analysis/ folder: skipped with a line, not an error."""
    run = _run_folder(tmp_path)
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "runs.csv").write_text("run\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    srcs, traj = expand_sources([run, tmp_path / "analysis", hf])
    assert not traj and [s.path for s in srcs] == [run / "last.pt", hf]
    assert "skipping" in capsys.readouterr().err
    with pytest.raises(InputError, match="no run, model or checkpoint"):
        expand_sources([tmp_path / "analysis", tmp_path / "analysis"])


class _Result:
    """Just what `result_row` reads of an analysis result."""

    def __init__(self, checkpoint_metrics):
        self.metrics = {"rsa_spearman": 0.5}
        self.provenance = {"checkpoint_metrics": checkpoint_metrics, "config": {"seed": 1}}


@pytest.mark.parametrize("metrics", [[1, 2, 3], "abc", 3.0, None])
def test_checkpoint_metrics_that_are_not_a_dict_are_no_metrics(tmp_path, metrics):
    """An edited checkpoint's list or string `metrics` (which analyze only records) gave AttributeError .items()."""
    from pe_probe.compare import _Source, result_row

    row = result_row(_Result(metrics), _Source(tmp_path / "a.pt", "a"))
    assert not [k for k in row if k.startswith("eval.")] and row["rsa_spearman"] == 0.5 and row["seed"] == 1


def test_nested_checkpoint_metrics_become_dotted_columns(tmp_path):
    from pe_probe.compare import _Source, result_row

    row = result_row(_Result({"ood": {"acc": 0.75, "per_level": [1, 2]}, "loss": "n/a", "big": 10**400}),
                     _Source(tmp_path / "a.pt", "a"))
    assert row["eval.ood.acc"] == 0.75 and row["eval.ood.per_level"] == "1x2" and row["eval.loss"] == "n/a"
    assert row["eval.big"] == 10**400  # too large for a float: kept as it is, not an OverflowError


def test_compare_takes_checkpoints_whose_metrics_are_a_list(noise_sweep, tmp_path, analyze_source_available):
    import torch

    odd = tmp_path / "odd.pt"
    obj = torch.load(noise_sweep[1], weights_only=True)
    obj["metrics"] = [1, 2, 3]
    torch.save(obj, odd)
    frame = compare([noise_sweep[0], odd], tmp_path / "out", progress=False, analyze_kwargs={"n_perm": 0, "n_boot": 0},
                    formats=("png",))
    assert len(frame) == 2 and (tmp_path / "out" / "compare.csv").is_file()


def test_compare_refuses_a_float8_checkpoint_ground_truth_in_one_line(noise_sweep, tmp_path, analyze_source_available):
    import torch

    odd = tmp_path / "fp8.pt"
    obj = torch.load(noise_sweep[1], weights_only=True)
    obj["ground_truth"]["coords"] = obj["ground_truth"]["coords"].to(torch.float8_e4m3fn)
    torch.save(obj, odd)
    with pytest.raises(InputError, match="float8_e4m3fn") as e:
        compare([noise_sweep[0], odd], tmp_path / "out", progress=False, analyze_kwargs={"n_perm": 0, "n_boot": 0})
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


# ---- values the comparison shows (a mutation audit changed each without a test failing)

def test_the_mean_and_95_ci_per_value_are_scipys_t_interval():
    frame = pd.DataFrame({"noise": [0.1] * 4 + [0.2] * 3, "rsa_spearman": [0.9, 0.8, 0.85, 0.7, 0.5, 0.6, 0.4]})
    s = summary_frame(frame, "noise", ["rsa_spearman"]).set_index("noise")
    for value, g in frame.groupby("noise"):
        v = g.rsa_spearman.to_numpy()
        lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
        assert s.loc[value, "sd"] == pytest.approx(np.std(v, ddof=1))
        np.testing.assert_allclose([s.loc[value, "ci_low"], s.loc[value, "ci_high"]], [lo, hi])


def test_identifiability_metrics_keep_every_base_metric_in_order():
    names = ["rsa_spearman", "recovery_pca_r2", "probe_r2", "trustworthiness", "knn_overlap", "participation_ratio",
             "ref_shape_distance"]
    assert identifiability_metrics(pd.DataFrame({n: [0.5] for n in names})) == names


def test_steps_frame_is_in_step_order():
    s = steps_frame(pd.DataFrame({"step": [200, 0, 100], "rsa_spearman": [0.9, 0.1, 0.5]}), ["rsa_spearman"])
    assert s["step"].tolist() == [0, 100, 200] and s["value"].tolist() == [0.1, 0.5, 0.9]


def test_each_frame_is_aligned_onto_the_previous_one():
    rng = np.random.default_rng(0)
    ref = grid_coords(4, 4)
    frames = [rng.normal(size=(16, 2)) for _ in range(4)]  # unrelated layouts: onto-reference and chained differ
    out = chain_align(frames, ref)
    size = np.sqrt(((ref - ref.mean(0)) ** 2).sum(1).mean())
    for t in range(1, 4):
        np.testing.assert_allclose(out[t], rotation_align(frames[t], out[t - 1], size))


def test_trajectory_axes_match_their_titles(tmp_path):
    g = grid_coords(3, 5)  # not square: axis 0 spans 2, axis 1 spans 4
    page = write_trajectory([0, 1], [g, g], g, tmp_path / "t.html", method="pca").read_text()
    data = json.loads(re.search(r"Plotly\.newPlot\(\s*\"pe-probe-trajectory\",\s*(\[.*?\]),\s*\{", page, re.S).group(1))
    x, y = np.asarray(data[1]["x"], float), np.asarray(data[1]["y"], float)
    assert re.search(r'"xaxis":\{"title":\{"text":"([^"]+)"', page).group(1) == "true axis 1"
    np.testing.assert_allclose([np.ptp(x), np.ptp(y)], [np.ptp(g[:, 1]), np.ptp(g[:, 0])], rtol=1e-3)


def test_strength_words_of_the_index_page_at_their_cut_offs():
    assert [_strength(r) for r in (0.8, 0.6, 0.4, 0.39)] == ["very strong", "strong", "moderate", "weak"]


def test_ties_above_the_exact_limit_raise_the_smallest_reachable_p():
    x = np.array([0.0] * 8 + [1.0])  # 9 models, 8 tied: 8! of the 9! orderings reach the extreme
    y = np.arange(9.0)
    assert smallest_exact_p(9, x, y) == pytest.approx(math.factorial(8) / math.factorial(9))
    sentence = correlation_sentence({"x": "noise", "y": "rsa", "spearman_rho": 0.6, "p_value": 0.01, "n": 9}, x, y)
    assert "too few points" in sentence and "tied values" in sentence


def test_run_folder_without_last_pt_stands_for_its_latest_step(tmp_path):
    a, b = _run_folder(tmp_path / "a"), _run_folder(tmp_path / "b")
    (a / "last.pt").unlink()
    srcs, traj = expand_sources([a, b])
    assert not traj and srcs[0].path == a / "checkpoints" / "step-00000400.pt" and srcs[1].path == b / "last.pt"


def test_trajectory_steps_are_in_numeric_order_without_zero_padding(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for s in (1000, 900, 20, 3):
        (run / "checkpoints" / f"step-{s}.pt").write_bytes(b"")
    srcs, traj = expand_sources([run])
    assert traj and [s.path.name for s in srcs] == ["step-3.pt", "step-20.pt", "step-900.pt", "step-1000.pt"]


def test_sources_with_the_same_name_get_labels_from_their_paths(tmp_path):
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "table.npy").write_bytes(b"")
    srcs, _ = expand_sources([tmp_path / "x" / "table.npy", tmp_path / "y" / "table.npy"])
    labels = [s.label for s in srcs]
    assert len(set(labels)) == 2 and all("table.npy" in label for label in labels)


def test_a_config_key_named_like_a_column_does_not_overwrite_it(tmp_path):
    from pe_probe.compare import _Source, result_row

    res = _Result({})
    res.provenance["config"] = {"rsa_spearman": "cfg", "step": 7, "seed": 1}
    row = result_row(res, _Source(tmp_path / "a.pt", "a"))
    assert row["rsa_spearman"] == 0.5 and row["config.rsa_spearman"] == "cfg"
    assert row["step"] is None and row["config.step"] == 7 and row["seed"] == 1


def test_trajectory_shows_the_classical_mds_layout_first(tmp_path, analyze_source_available):
    run = _run_folder(tmp_path, n_steps=2)
    compare([run], tmp_path / "traj", analyze_kwargs=FAST, progress=False, formats=("png",))  # methods pca, cmds
    assert "Recovered layout over training (cmds)" in (tmp_path / "traj" / "trajectory.html").read_text()


def test_a_sweep_compare_reruns_into_an_out_folder_its_glob_matches(noise_sweep, tmp_path, capsys,
                                                                     analyze_source_available):
    """`compare runs/sweep/*/ --out runs/sweep/analysis` twice: the second call's glob matches the first's output,
    which compare skips as not a run folder; the out check refused it as an input (README walkthrough)."""
    sweep = tmp_path / "sweep"
    for i, ckpt in enumerate(noise_sweep[:3]):
        (sweep / f"r{i}").mkdir(parents=True)
        (sweep / f"r{i}" / "last.pt").write_bytes(ckpt.read_bytes())
    out = sweep / "analysis"
    for _ in range(2):
        frame = compare(sorted(p for p in sweep.iterdir() if p.is_dir()), out, analyze_kwargs=FAST, progress=False,
                        formats=("png",))
        assert len(frame) == 3 and (out / "compare.csv").is_file()
    assert "skipping" in capsys.readouterr().err  # the second call skipped its own earlier output
    with pytest.raises(InputError, match="is or holds the input"):  # a run folder itself is still protected
        compare([sweep / "r0", sweep / "r1"], sweep / "r0", analyze_kwargs=FAST, progress=False)


def test_python_compare_uses_the_command_lines_permutation_and_bootstrap_defaults(noise_sweep, tmp_path, monkeypatch):
    """README says compare() returns compare.csv's frame; it analysed with analyze's 1000/1000, the CLI 200/200."""
    import pe_probe.compare as cmp
    from pe_probe.cli import build_parser

    seen = []
    def record(path, ground_truth, analyze_kwargs):
        seen.append(dict(analyze_kwargs))
        raise InputError("stop")

    monkeypatch.setattr(cmp, "_analyze_one", record)
    with pytest.raises(InputError, match="stop"):
        compare(noise_sweep[:2], tmp_path / "o", progress=False)
    cli = build_parser().parse_args(["compare", "a", "b", "--out", "o"])
    assert (seen[0]["n_perm"], seen[0]["n_boot"]) == (cli.n_perm, cli.n_boot) == (200, 200)


def test_an_empty_by_is_refused_before_any_work(noise_sweep, tmp_path):
    with pytest.raises(InputError, match="--by is empty; give a dotted config key"):
        compare(noise_sweep[:2], tmp_path / "o", by=" ", analyze_kwargs=FAST, progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("sigmas,scale", [([0.01, 0.05, 0.1, 0.5, 1.0, 2.0], "log"), ([0.5, 1.0, 2.0], "linear"),
                                          ([0.0, 0.1, 2.0], "linear"), ([0.1, 2.0], "linear")])
def test_a_sigma_grid_over_decades_gets_a_log_axis(sigmas, scale):
    """σ from 0.01 to 2 on a linear axis put the small σ on the spine (figure QA); zero or two values stay linear."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from pe_probe.report.compare_figures import metrics_vs_by_figure, summary_frame

    frame = pd.DataFrame({"pe.init_std": [s for s in sigmas for _ in range(2)],
                          "rsa_spearman": np.linspace(0.1, 0.9, 2 * len(sigmas))})
    fig = metrics_vs_by_figure(summary_frame(frame, "pe.init_std", ["rsa_spearman"]), frame, "pe.init_std",
                               ["rsa_spearman"])
    ax = fig.axes[0]
    assert ax.get_xscale() == scale
    assert ax.get_xlabel() == ("pe.init_std (log scale)" if scale == "log" else "pe.init_std")
    plt.close(fig)
