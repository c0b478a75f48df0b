"""The `pe-probe analyze` command as a user runs it: outputs, exit codes, one-line errors, nothing half-written."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pe_probe.cli import main
from pe_probe.groundtruth import grid
from pe_probe.reference import sinusoid_2d

FAST = ["--n-perm", "50", "--n-boot", "50", "--n-null", "3", "--quiet"]


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_input_error(code, err, *needles):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n.lower() in err.lower(), err


@pytest.fixture
def sin_npy(tmp_path):
    p = tmp_path / "sin.npy"
    np.save(p, sinusoid_2d(4, 4, 16))
    return p


def test_analyze_writes_data_files_and_json(tmp_path, sin_npy, capsys):
    out = tmp_path / "rep"
    code, stdout, err = run(["analyze", sin_npy, "-g", "grid:4x4", "--out", out, "--no-figures", "--json", *FAST], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    for key in ("n_positions", "rsa_spearman", "rsa_p", "rsa_ci_low", "recovery_cmds_r2", "probe_r2",
                "trustworthiness", "knn_overlap", "mds_stress", "participation_ratio", "null_rsa_mean"):
        assert key in doc
    assert doc["n_positions"] == 16
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["rsa_spearman"] == pytest.approx(doc["rsa_spearman"])
    prov = saved["provenance"]
    assert prov["sha256"] and prov["source"].endswith("sin.npy") and prov["analysis"]["seed"] == 0
    assert "row_centred" in prov
    emb = (out / "embedding.csv").read_text().splitlines()
    assert emb[0].startswith("position,true_0,true_1,pca_0")
    assert len(emb) == 17
    tidy = (out / "metrics.csv").read_text().splitlines()
    assert tidy[:4] == ["metric,value", "n_positions,16", "pe_dim,16", "gt_dim,2"]  # counts as integers
    assert float(dict(r.split(",") for r in tidy[1:])["rsa_spearman"]) == pytest.approx(doc["rsa_spearman"])


def test_summary_table_on_terminal(sin_npy, capsys):
    code, stdout, _ = run(["analyze", sin_npy, "-g", "grid:4x4", *FAST], capsys)
    assert code == 0
    assert "RSA (Spearman)" in stdout and "recovery cmds r2" in stdout and "Mantel p" in stdout


def test_checkpoint_without_arguments(tmp_path, capsys):
    """Our checkpoint format carries its own ground truth and PE names."""
    table = torch.tensor(sinusoid_2d(4, 4, 16), dtype=torch.float32)
    ckpt = {"format": "pe-probe-checkpoint/1", "model": {"pe.table": table, "head.weight": torch.randn(4, 16)},
            "config": {"pe": {"init_std": 0.1}}, "pe_params": ["pe.table"],
            "ground_truth": {"coords": torch.tensor(grid(4, 4).coords), "kind": "grid", "shape": [4, 4]},
            "step": 10, "epoch": 1, "metrics": {"ood_acc": 0.5}}
    path = tmp_path / "last.pt"
    torch.save(ckpt, path)
    code, stdout, err = run(["analyze", path, "--json", *FAST], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["provenance"]["param"] == "pe.table"
    assert doc["provenance"]["ground_truth"]["spec"] == "checkpoint"
    assert doc["rsa_spearman"] > 0.5


@pytest.mark.parametrize("view", [None, "qk"])
def test_a_checkpoint_whose_own_ground_truth_is_unreadable_needs_and_takes_ground_truth(tmp_path, capsys, view):
    """The refusal says "pass --ground-truth"; passing it used to be refused all the same, because the
    checkpoint's own ground truth was read (and refused) whether or not it was needed."""
    table = torch.tensor(sinusoid_2d(4, 4, 16), dtype=torch.float32)
    model = {"pe.table": table, "embed.weight": torch.randn(16, 5), "embed.bias": torch.randn(16),
             "blocks.0.attn.qkv.weight": torch.randn(48, 16), "blocks.0.attn.qkv.bias": torch.randn(48),
             "blocks.0.ln1.weight": torch.ones(16), "blocks.0.ln1.bias": torch.zeros(16)}
    config = {"model": {"n_heads": 2, "norm": "post", "readout": "last"}}
    ckpt = {"format": "pe-probe-checkpoint/1", "model": model, "config": config, "pe_params": ["pe.table"],
            "ground_truth": {"coords": torch.tensor(grid(4, 4).coords).to_sparse(), "kind": "grid"},
            "step": 10, "epoch": 1, "metrics": {}}
    path = tmp_path / "last.pt"
    torch.save(ckpt, path)
    extra = ["--view", view] if view else []
    code, _, err = run(["analyze", path, "--out", tmp_path / "o", *extra, *FAST], capsys)
    assert_input_error(code, err, "sparse", "--ground-truth", str(path))
    assert not (tmp_path / "o").exists()
    code, stdout, err = run(["analyze", path, "-g", "grid:4x4", "--json", *extra, *FAST], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["provenance"]["ground_truth"]["spec"] == "grid:4x4"


def test_per_layer_tables_all_and_mean(tmp_path, capsys):
    rng = np.random.default_rng(0)
    sd = {f"blocks.{i}.pe.table": torch.tensor(rng.normal(size=(16, 8)), dtype=torch.float32) for i in range(3)}
    path = tmp_path / "sd.pt"
    torch.save(sd, path)
    code, stdout, err = run(["analyze", path, "-g", "grid:4x4", "--layer", "all", "--json", "--out",
                             tmp_path / "o", "--no-figures", *FAST], capsys)
    assert code == 0, err
    docs = json.loads(stdout)
    assert [d["provenance"]["layer"] for d in docs] == [0, 1, 2]
    assert (tmp_path / "o" / "layer-2" / "metrics.json").exists()
    code, stdout, _ = run(["analyze", path, "-g", "grid:4x4", "--layer", "mean", "--json", *FAST], capsys)
    assert code == 0 and json.loads(stdout)["provenance"]["layer"] == "mean"
    # the summary names the folders it wrote, not a top-level page that does not exist
    code, stdout, err = run(["analyze", path, "-g", "grid:4x4", "--layer", "all", "--out", tmp_path / "o2",
                             "--no-figures", *FAST], capsys)
    assert code == 0, err
    written = stdout.split("report written to ")[1].split(", ")
    assert [w.strip() for w in written] == [f"{tmp_path / 'o2'}/layer-{i}/" for i in range(3)]
    assert all(os.path.isdir(w.strip()) for w in written)


def test_positions_slice_and_ground_truth_slice(tmp_path, capsys):
    table = np.random.default_rng(1).normal(size=(32, 8))
    np.save(tmp_path / "t.npy", table)
    code, stdout, err = run(["analyze", tmp_path / "t.npy", "-g", "line:16", "--positions", "0:16", "--json", *FAST], capsys)
    assert code == 0, err
    assert json.loads(stdout)["n_positions"] == 16
    # a ground truth for the whole table is sliced alike
    code, stdout, err = run(["analyze", tmp_path / "t.npy", "-g", "line:32", "--positions", "8:24", "--json", *FAST], capsys)
    assert code == 0, err
    assert json.loads(stdout)["n_positions"] == 16
    # a negative start is a value, not an option: `--positions -16:` as README writes it
    code, stdout, err = run(["analyze", tmp_path / "t.npy", "-g", "line:16", "--positions", "-16:", "--json", *FAST], capsys)
    assert code == 0, err
    assert json.loads(stdout)["n_positions"] == 16


def test_hf_folder_picks_float_table_over_position_ids(tmp_path, capsys):
    from safetensors.torch import save_file

    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 16}))
    save_file({"embeddings.position_embeddings.weight": torch.tensor(sinusoid_2d(4, 4, 16), dtype=torch.float32),
               "embeddings.position_ids": torch.arange(16).unsqueeze(0),
               "embeddings.word_embeddings.weight": torch.randn(30, 16)}, str(folder / "model.safetensors"))
    code, stdout, err = run(["analyze", folder, "-g", "grid:4x4", "--json", *FAST], capsys)
    assert code == 0, err
    assert json.loads(stdout)["provenance"]["param"] == "embeddings.position_embeddings.weight"


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("case", [
    "missing", "n_mismatch", "nan", "few", "one_d", "three_d", "unknown_param", "bad_spec", "bad_csv",
    "pickle", "bad_method", "bad_metric_option", "bad_positions", "name_too_long", "unreadable",
    "npy_named_pt", "npz_named_pt", "short_reference", "long_reference",
])
def test_bad_input_exit_2_one_line_nothing_written(case, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    src = tmp_path / "t.npy"
    np.save(src, np.random.default_rng(0).normal(size=(16, 8)))
    gt = "grid:4x4"
    extra: list[str] = []
    needles: tuple[str, ...] = ()
    if case == "missing":
        src, needles = tmp_path / "nope.npy", ("not found",)
    elif case == "n_mismatch":
        gt, needles = "grid:3x3", ("9 positions", "16")
    elif case == "nan":
        a = np.ones((16, 8)); a[3, 2] = np.nan; np.save(src, a); needles = ("nan",)
    elif case == "few":
        np.save(src, np.ones((3, 8))); gt = "line:3"; needles = ("at least 4",)
    elif case == "one_d":
        np.save(src, np.arange(16.0)); needles = ("shape (16,)", "2-D")
    elif case == "three_d":
        src = tmp_path / "t3.pt"; torch.save({"pos": torch.randn(2, 16, 8, 3)}, src); extra = ["--param", "pos"]
    elif case == "unknown_param":
        src = tmp_path / "sd.pt"
        torch.save({"wpe.weight": torch.randn(16, 8), "wte.weight": torch.randn(30, 8)}, src)
        extra, needles = ["--param", "nope"], ("wpe.weight",)
    elif case == "bad_spec":
        gt, needles = "grid:4x", ("grid:HxW",)
    elif case == "bad_csv":
        src = tmp_path / "t.csv"
        src.write_text("1,2,3\n4,five,6\n" + "\n".join("1,2,3" for _ in range(14)) + "\n")
        needles = ("line 2",)
    elif case == "pickle":
        src = tmp_path / "evil.pt"
        marker = tmp_path / "pwned"
        with open(src, "wb") as fh:
            pickle.dump({"w": Evil(marker)}, fh)
        needles = ("refused",)
    elif case == "bad_method":
        extra, needles = ["--methods", "pca,tsne"], ("tsne",)
    elif case == "bad_metric_option":
        extra, needles = ["--pe-metric", "manhattan"], ("manhattan",)
    elif case == "bad_positions":
        extra, needles = ["--positions", "10:2"], ("positions",)
    elif case == "name_too_long":  # an OSError (ENAMETOOLONG) was a traceback, exit 1
        src, needles = tmp_path / ("s" * 300 + ".npy"), ("File name too long", "use a shorter one")
    elif case == "unreadable":  # as root chmod cannot take read access away: the loader's open() is made to fail
        import builtins

        real_open = builtins.open
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (_ for _ in ()).throw(
            PermissionError(13, "Permission denied", str(f))) if str(f) == str(src) else real_open(f, *a, **k))
        needles = ("t.npy: Permission denied; check its permissions",)
    elif case in ("npy_named_pt", "npz_named_pt"):  # torch called these "pickled code" or corrupt
        src = tmp_path / "table.pt"
        table = np.random.default_rng(0).normal(size=(16, 8))
        with open(src, "wb") as fh:
            np.save(fh, table) if case == "npy_named_pt" else np.savez(fh, pe=table)
        real = ".npy" if case == "npy_named_pt" else ".npz"
        needles = (f"NumPy {real} file", f"rename it to table{real}")
    elif case in ("short_reference", "long_reference"):  # 3 rows were blamed on --positions / --param
        ref = tmp_path / "ref.npy"
        np.save(ref, np.ones((3 if case == "short_reference" else 20, 8)))
        extra = ["--reference", ref]
        needles = ("has 3 positions" if case == "short_reference" else "has 20 positions", "table has 16",
                   "one row per analysed position")
    code, _, err = run(["analyze", src, "-g", gt, "--out", out, *extra, *FAST], capsys)
    assert_input_error(code, err, *needles)
    assert not out.exists()
    assert not list(tmp_path.glob(".out.staging-*"))
    if case == "pickle":
        assert not (tmp_path / "pwned").exists()


def test_refuses_foreign_output_folder_unless_force(tmp_path, sin_npy, capsys):
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    code, _, err = run(["analyze", sin_npy, "-g", "grid:4x4", "--out", out, "--no-figures", *FAST], capsys)
    assert_input_error(code, err, "--force")
    assert (out / "thesis.tex").read_text() == "precious"
    code, _, err = run(["analyze", sin_npy, "-g", "grid:4x4", "--out", out, "--no-figures", "--force", *FAST], capsys)
    assert code == 0, err
    assert (out / "metrics.json").exists() and not (out / "thesis.tex").exists()
    # our own folder is replaced without --force
    code, _, err = run(["analyze", sin_npy, "-g", "grid:4x4", "--out", out, "--no-figures", *FAST], capsys)
    assert code == 0, err


def test_force_never_replaces_a_folder_that_holds_an_input(tmp_path, sin_npy, capsys):
    models = tmp_path / "models"
    models.mkdir()
    table = models / "sin.npy"
    table.write_bytes(sin_npy.read_bytes())
    (tmp_path / "gt").mkdir()
    coords = tmp_path / "gt" / "coords.npy"
    np.save(coords, grid(4, 4).coords)
    for argv in (["analyze", table, "-g", "grid:4x4", "--out", models, "--no-figures", *FAST],  # the source's folder
                 ["analyze", table, "-g", "grid:4x4", "--out", tmp_path, "--no-figures", *FAST],  # a folder above it
                 ["analyze", sin_npy, "-g", coords, "--out", tmp_path / "gt", "--no-figures", *FAST],  # the ground truth's
                 ["compare", sin_npy, table, "-g", "grid:4x4", "--out", models, "--n-perm", "0"]):
        code, _, err = run([*argv, "--force"], capsys)
        assert_input_error(code, err, "holds the input", "-report")
        assert table.read_bytes() == sin_npy.read_bytes() and coords.exists()


def test_no_reflection_is_refused_with_the_reason(sin_npy, capsys):
    code, _, err = run(["analyze", sin_npy, "-g", "grid:4x4", "--no-reflection", *FAST], capsys)
    assert_input_error(code, err, "--no-reflection", "arbitrary")


@pytest.mark.parametrize("argv,prog,unknown", [
    (["analyze", "t.npy", "--ground-truht", "grid:4x4"], "pe-probe analyze", "--ground-truht grid:4x4"),
    (["compare", "a", "b", "--out", "o", "--bye", "x"], "pe-probe compare", "--bye x"),
    (["--bogus"], "pe-probe", "--bogus"),
])
def test_a_misspelled_option_points_to_the_command_s_own_help(argv, prog, unknown, capsys):
    """QA: `pe-probe analyze ... --ground-truht` said `pe-probe: error ... (see pe-probe --help)`, whose help
    does not list analyze's options; train and evaluate already named themselves."""
    code, _, err = run(argv, capsys)
    assert code == 2 and err == f"{prog}: error: unrecognized arguments: {unknown} (see {prog} --help)\n"


def test_console_script_bad_input_has_no_traceback(tmp_path):
    exe = Path(sys.executable).parent / "pe-probe"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pe_probe.cli"]
    proc = subprocess.run(cmd + ["analyze", str(tmp_path / "missing.npy"), "-g", "line:8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    help_proc = subprocess.run(cmd + ["analyze", "--help"], capture_output=True, text=True, timeout=120)
    assert help_proc.returncode == 0 and "--ground-truth" in help_proc.stdout and "examples:" in help_proc.stdout


def test_view_kernel_and_qk_on_bert_folder(tmp_path, capsys):
    """--view reads the table through the first attention layer (here identity projections)."""
    from safetensors.torch import save_file

    d = 16
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_attention_heads": 2}))
    pe = torch.tensor(sinusoid_2d(4, 4, d), dtype=torch.float32)
    save_file({"embeddings.position_embeddings.weight": pe,
               "embeddings.token_type_embeddings.weight": torch.zeros(2, d),
               "embeddings.LayerNorm.weight": torch.ones(d), "embeddings.LayerNorm.bias": torch.zeros(d),
               "encoder.layer.0.attention.self.query.weight": torch.eye(d),
               "encoder.layer.0.attention.self.query.bias": torch.zeros(d),
               "encoder.layer.0.attention.self.key.weight": torch.eye(d),
               "encoder.layer.0.attention.self.key.bias": torch.zeros(d)}, str(folder / "model.safetensors"))
    code, stdout, err = run(["analyze", folder, "-g", "grid:4x4", "--view", "kernel", "--json", *FAST], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["provenance"]["view"]["view"] == "kernel"
    assert doc["pe_dim"] == 16 and "kernel_distance_rho" in doc
    assert doc["kernel_distance_rho"] > 0.3  # a sinusoid's self-similarity kernel favours near positions
    code, stdout, err = run(["analyze", folder, "-g", "grid:4x4", "--view", "qk", "--json", *FAST], capsys)
    assert code == 0, err
    assert json.loads(stdout)["pe_dim"] == 2 * d
    code, _, err = run(["analyze", folder, "-g", "grid:4x4", "--view", "attention", *FAST], capsys)
    assert_input_error(code, err, "attention")
    # --positions with a whole-table -g: the views slice the ground truth as the raw view does
    docs = {}
    for view in ("raw", "qk", "kernel"):
        code, stdout, err = run(["analyze", folder, "-g", "grid:4x4", "--view", view, "--positions", "8:16", "--json",
                                 *FAST], capsys)
        assert code == 0, err
        docs[view] = json.loads(stdout)
    assert {doc["n_positions"] for doc in docs.values()} == {8}
    assert docs["kernel"]["gt_dim"] == docs["raw"]["gt_dim"] == 2
    from pe_probe.api import analyze_view

    kernel = analyze_view(folder, "kernel", "grid:4x4", positions="8:16", n_perm=0, n_boot=0)[0]
    np.testing.assert_array_equal(kernel.coords, grid(4, 4).coords[8:16])


def test_builtin_tables_refuse_layer_options_and_record_their_shape(capsys):
    code, _, err = run(["analyze", "builtin:sin2d:4x4", "--layer", "3", *FAST], capsys)
    assert code == 2 and "drop --param / --layer" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["analyze", "builtin:sin2d:4x4", "--view", "kernel", *FAST], capsys)  # was "not found"
    assert_input_error(code, err, "no kernel view", "--view raw")
    code, stdout, err = run(["analyze", "builtin:sin2d:4x4", "--json", *FAST], capsys)
    assert code == 0, err
    prov = json.loads(stdout)["provenance"]
    assert prov["original_shape"] == [16, 64] and prov["row_centred"] is False


def test_summary_values_stay_in_one_column_when_one_is_long():
    """Audit: a 9-character value (stress 0.0002604) pushed its row out of the column."""
    import re

    import pe_probe
    from pe_probe.cli import format_summary

    coords = grid(8, 8).coords
    table = coords @ np.random.default_rng(0).normal(size=(2, 16)) + 0.05 * np.random.default_rng(1).normal(size=(64, 16))
    text = format_summary(pe_probe.analyze(table, "grid:8x8", n_perm=0, n_boot=0, methods="pca"))
    rows = [ln for ln in text.splitlines() if ln.startswith("  ")]
    ends = {m.end() for m in (re.match(r"  .*?\s{2}(\S+)", ln) for ln in rows)}
    assert len(rows) > 5 and len(ends) == 1, text


def test_analysis_scripts_turn_ctrl_c_into_one_line_and_exit_130(capsys):
    """`python -m analyses.netsim.report` (and the other report scripts) printed a 26-72 line traceback on
    Ctrl-C, exit 1; numba's SMACOF wraps the interrupt in a SystemError."""
    from pe_probe.errors import script_exit

    def interrupted_in_numba():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set") from e

    for main in (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), interrupted_in_numba):
        with pytest.raises(SystemExit) as e:
            script_exit(main, "python -m analyses.x")
        assert e.value.code == 130 and capsys.readouterr().err == "python -m analyses.x: interrupted\n"
    with pytest.raises(SystemExit) as e:
        script_exit(lambda: 3, "python -m analyses.x")
    assert e.value.code == 3
    with pytest.raises(ZeroDivisionError):  # a real error keeps its traceback
        script_exit(lambda: 1 // 0, "python -m analyses.x")
    for name in ("lst.report", "lst.analyse", "lst.length", "lst.sweep", "netsim.report", "brain.report"):
        text = (Path(__file__).parents[1] / "analyses" / (name.replace(".", "/") + ".py")).read_text()
        assert f'script_exit(main, "python -m analyses.{name}")' in text, name


def test_printed_paths_and_tensor_names_cannot_forge_output_lines(tmp_path, capsys) -> None:
    """File names and a checkpoint's tensor names are untrusted text: a newline or terminal escape in them
    is shown quoted, so the summary's lines stay its own."""
    from safetensors.torch import save_file

    folder = tmp_path / "a\nRSA (Spearman)  1.0000"
    folder.mkdir()
    save_file({"pos\x1b[31membed": torch.randn(16, 8)}, str(folder / "m.safetensors"))
    out = tmp_path / "rep\nort"
    assert main(["analyze", str(folder / "m.safetensors"), "--param", "pos\x1b[31membed", "--ground-truth", "grid:4x4",
                 "--out", str(out), "--no-figures", "--n-perm", "99", "--n-boot", "0", "--methods", "pca"]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and not any(line.startswith("RSA (Spearman)  1.0000") for line in text.splitlines())
    assert repr(str(folder / "m.safetensors")) in text and repr("pos\x1b[31membed") in text
    assert f"report written to {repr(str(out))}/" in text and (out / "metrics.json").exists()


def test_tensor_names_in_error_messages_are_quoted_when_they_hold_control_characters(tmp_path, capsys) -> None:
    from safetensors.torch import save_file

    save_file({"a\x1b[2Jb": torch.randn(3, 4, 5), "c\nd": torch.randn(3, 4, 5)}, str(tmp_path / "m.safetensors"))
    assert main(["analyze", str(tmp_path / "m.safetensors"), "--ground-truth", "line:4"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1 and repr("c\nd") in err


def test_a_ground_truth_that_counts_dropped_rows_names_why_they_were_dropped(tmp_path, capsys) -> None:
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 8)))
    assert main(["analyze", str(tmp_path / "t.npy"), "-g", "grid:4x4", "--drop-extra-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert "the table has 14 after dropping 2 leading row(s) as --drop-extra-tokens asked;" in err  # not "found"
    torch.save({"pos_embed": torch.randn(1, 17, 8)}, tmp_path / "vit.pt")  # a ViT's CLS row, detected
    assert main(["analyze", str(tmp_path / "vit.pt"), "-g", "line:17"]) == 2
    assert "after dropping 1 leading row(s) found to be CLS / offset rows;" in capsys.readouterr().err


def test_show_path_quotes_every_control_character_not_only_ascii_ones() -> None:
    from pe_probe.errors import show_path

    for bad in ("a\x9b31mb", "a\u2028b", "a\x85b", "a\nb", "a\x1bb", "a\x7fb"):  # C1 CSI, line separator, NEL, ...
        assert show_path(bad) == repr(bad) and "\\" in show_path(bad)
    assert show_path("naïve é 東京 a b") == "naïve é 東京 a b"  # printable text stays as it is


def test_a_view_refuses_a_ground_truth_that_counts_dropped_offset_rows(tmp_path, capsys, rng):
    """The raw view said 'pass --drop-extra-tokens 0'; --view q gave only the generic size mismatch."""
    from safetensors.torch import save_file

    n, d = 16, 8
    att = "roberta.encoder.layer.0.attention.self."
    state = {"roberta.embeddings.position_embeddings.weight": rng.normal(size=(n + 2, d)),
             "roberta.embeddings.token_type_embeddings.weight": np.zeros((1, d)),
             "roberta.embeddings.LayerNorm.weight": np.ones(d), "roberta.embeddings.LayerNorm.bias": np.zeros(d),
             att + "query.weight": rng.normal(size=(d, d)), att + "query.bias": np.zeros(d),
             att + "key.weight": rng.normal(size=(d, d)), att + "key.bias": np.zeros(d)}
    folder = tmp_path / "roberta"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta", "num_attention_heads": 2,
                                                    "max_position_embeddings": n + 2}))
    save_file({k: torch.tensor(v, dtype=torch.float32) for k, v in state.items()}, str(folder / "model.safetensors"))
    for view in ("raw", "q", "kernel"):
        code, _, err = run(["analyze", folder, "--view", view, "-g", f"line:{n + 2}", *FAST], capsys)
        assert_input_error(code, err, "after dropping 2 leading row(s)", "--drop-extra-tokens 0")
    code, out, _ = run(["analyze", folder, "--view", "q", "-g", f"line:{n}", *FAST], capsys)
    assert code == 0 and "2 leading row(s) dropped" in out


def test_a_table_one_or_two_rows_longer_than_its_ground_truth_suggests_dropping_extra_tokens(tmp_path, capsys, rng):
    """--positions :64 keeps a CLS row and drops a patch; the mismatch message now names --drop-extra-tokens first."""
    np.save(tmp_path / "t.npy", rng.normal(size=(17, 4)))
    code, _, err = run(["analyze", tmp_path / "t.npy", "-g", "grid:4x4", *FAST], capsys)
    assert_input_error(code, err, "16 positions but the PE table has 17", "--drop-extra-tokens 1", "--positions")
    code, _, err = run(["analyze", tmp_path / "t.npy", "-g", "grid:3x3", *FAST], capsys)
    assert_input_error(code, err, "--positions")
    assert "--drop-extra-tokens" not in err  # 8 extra rows: not tokens


def test_sigterm_inside_a_numba_loop_exits_143_not_with_a_traceback(monkeypatch, capsys):
    """SIGTERM's handler raises SystemExit(143); inside SMACOF's numba loop that arrives wrapped in a SystemError,
    which exited 1 with a 40-line traceback (found by a review, 2 kills in ~35)."""
    import pe_probe.cli as cli

    def killed_in_numba(args):
        try:
            raise SystemExit(143)
        except SystemExit as e:
            raise SystemError("CPUDispatcher(guttman_step) returned a result with an exception set") from e

    monkeypatch.setattr(cli, "cmd_analyze", killed_in_numba)
    assert cli.main(["analyze", "builtin:sin1d:8", "-g", "line:8"]) == 143
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--force"], ["--no-figures"], ["--force", "--no-figures"]])
def test_report_folder_options_without_out_are_refused_not_ignored(sin_npy, capsys, flags):
    code, _, err = run(["analyze", sin_npy, "-g", "grid:4x4", *flags, *FAST], capsys)
    assert_input_error(code, err, " and ".join(flags), "on the report folder only: add --out DIR or drop")


def test_summary_names_the_averaged_tables_as_compare_does(tmp_path, capsys):
    table = np.asarray(sinusoid_2d(4, 4, 8))
    torch.save({f"blocks.{i}.pe.table": torch.tensor(table + i) for i in range(3)}, tmp_path / "sd.pt")
    code, stdout, err = run(["analyze", tmp_path / "sd.pt", "-g", "grid:4x4", "--layer", "mean", *FAST], capsys)
    assert code == 0, err
    assert "param=blocks.0.pe.table+blocks.1.pe.table+blocks.2.pe.table  layer=mean" in stdout
