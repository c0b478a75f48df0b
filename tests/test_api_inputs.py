"""The Python API's boundary: wrong inputs are one-line InputErrors, options are honoured or refused (never
dropped), and a result does not share memory with the caller's arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pe_probe
from pe_probe.cli import main
from pe_probe.errors import InputError
from pe_probe.groundtruth import grid

FAST = {"n_perm": 0, "n_boot": 0, "methods": "pca", "n_null": 2}


@pytest.fixture
def table(grid_table):
    return grid_table


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two tiny untrained pe-probe checkpoints (per-layer learned tables; 2D RoPE, no table), as the trainer saves them."""
    from trainers.checkpoint import make_payload, save_checkpoint
    from trainers.config import make_config
    from trainers.model import PETransformer
    from trainers.train import ground_truth, seed_everything

    folder = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for name, over in (("learned", {}), ("rope", {"pe.kind": "rope2d"})):
        cfg = make_config("quick", {"model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2,
                                    "model.mlp_ratio": 2.0, "optim.epochs": 1, "seed": 3, **over})
        gt = ground_truth(cfg.task)
        seed_everything(cfg.seed)
        model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(gt.coords))
        paths[name] = folder / f"{name}.pt"
        save_checkpoint(make_payload(model, cfg.to_dict(), gt, step=0, epoch=0, metrics={}), paths[name])
    return paths


# --------------------------------------------------------------------------- options honoured or refused


@pytest.mark.parametrize("option, flag", [({"positions": "0:8"}, "--positions"), ({"param": "bogus"}, "--param"),
                                          ({"drop_extra_tokens": 3}, "--drop-extra-tokens")])
def test_the_attention_view_refuses_options_it_cannot_honour(checkpoints, option, flag):
    with pytest.raises(InputError, match=f"attention.*takes no {flag}"):
        pe_probe.analyze_view(checkpoints["learned"], "attention", n_puzzles=10, **option, **FAST)


def test_the_command_line_refuses_them_alike(checkpoints, capsys):
    code = main(["analyze", str(checkpoints["learned"]), "--view", "attention", "--positions", "0:8", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "takes no --positions" in err


@pytest.mark.parametrize("view", ["raw", "q", "kernel"])
def test_attention_reference_for_another_view_is_refused(checkpoints, view):
    with pytest.raises(InputError, match="applies to --view attention only"):
        pe_probe.analyze_view(checkpoints["learned"], view, attention_reference=str(checkpoints["learned"]), **FAST)


# --------------------------------------------------------------------------- no shared memory


def test_a_result_keeps_its_own_copy_of_a_reused_buffer(table):
    buf, coords = table.copy(), grid(4, 4).coords.copy()
    r0 = pe_probe.analyze(buf, coords, **FAST)
    buf[:] = 2 * table + 1
    coords[:] = coords[::-1]
    r1 = pe_probe.analyze(buf, coords, **FAST)
    np.testing.assert_array_equal(r0.table, table)
    np.testing.assert_array_equal(r0.coords, grid(4, 4).coords)
    assert not np.shares_memory(r0.table, r1.table) and not np.shares_memory(r0.coords, coords)


def test_a_float64_tensor_is_copied_too(table):
    t = torch.from_numpy(table.copy())
    res = pe_probe.analyze(t, grid(4, 4), **FAST)
    t.zero_()
    np.testing.assert_array_equal(res.table, table)


# --------------------------------------------------------------------------- sources that are not paths


@pytest.mark.parametrize("source", [{"wpe.weight": torch.zeros(16, 8)}, torch.zeros(16, 8), np.zeros((16, 8)), None, 3])
@pytest.mark.parametrize("call", [lambda s: pe_probe.analyze_source(s, "line:16"), lambda s: pe_probe.n_layers(s),
                                  lambda s: pe_probe.analyze_view(s, "kernel")])
def test_a_source_that_is_not_a_path_points_to_analyze(source, call):
    with pytest.raises(InputError, match=r"source must be a path .*pe_probe\.analyze\(table, ground_truth\)"):
        call(source)


# --------------------------------------------------------------------------- wrongly typed arguments


@pytest.mark.parametrize("seed", ["x", None, -1, 1.5])
@pytest.mark.parametrize("source", ["builtin:sin1d:16", "learned"])
def test_a_bad_seed_is_an_input_error_before_anything_runs(checkpoints, source, seed):
    with pytest.raises(InputError, match="seed must be"):
        pe_probe.analyze_source(checkpoints.get(source, source), **{**FAST, "seed": seed})


@pytest.mark.parametrize("kwargs, match", [({"seed": "x"}, "seed must be an integer"),
                                           ({"layer": "x"}, "layer must be an integer index, 'mean' or 'all'"),
                                           ({"layer": 0.0}, "layer must be an integer"),
                                           ({"n_puzzles": 0}, "n_puzzles must be >= 1")])
def test_the_attention_view_checks_its_arguments(checkpoints, kwargs, match):
    with pytest.raises(InputError, match=match):
        pe_probe.analyze_view(checkpoints["learned"], "attention", **{"n_puzzles": 10, **FAST, **kwargs})


@pytest.mark.parametrize("methods", [None, 3, ["pca", 3]])
def test_methods_of_the_wrong_type_are_refused(table, methods):
    with pytest.raises(InputError, match="methods must be a comma-separated string or a list"):
        pe_probe.analyze(table, grid(4, 4), **{**FAST, "methods": methods})


def test_a_reference_array_gives_what_the_same_table_in_a_file_gives(table, tmp_path, rng):
    ref = rng.normal(size=(16, 5))
    np.save(tmp_path / "ref.npy", ref)
    from_file = pe_probe.analyze(table, grid(4, 4), reference=str(tmp_path / "ref.npy"), **FAST)
    from_array = pe_probe.analyze(table, grid(4, 4), reference=ref, **FAST)
    from_tensor = pe_probe.analyze(table, grid(4, 4), reference=torch.as_tensor(ref), **FAST)
    assert from_array.metrics["ref_shape_distance"] == from_file.metrics["ref_shape_distance"] > 0
    assert from_tensor.metrics["ref_procrustes_distance"] == from_file.metrics["ref_procrustes_distance"]
    assert from_array.provenance["analysis"]["reference"] == "array"
    from pe_probe.reference import procrustes_distance, shape_distance

    assert from_array.metrics["ref_procrustes_distance"] == pytest.approx(procrustes_distance(table, ref), abs=1e-12)
    assert from_array.metrics["ref_shape_distance"] == pytest.approx(shape_distance(table, ref), abs=1e-12)
    with pytest.raises(InputError, match=r"reference array has shape \(15, 5\).*N = 16"):
        pe_probe.analyze(table, grid(4, 4), reference=ref[:15], **FAST)


def test_a_whole_table_reference_is_cut_by_positions_like_the_ground_truth(tmp_path, rng):
    """With --positions a:b, a reference of the whole table (a file, sin2d:HxW) is cut to rows a:b, as a whole-table
    ground truth is; a reference of the analysed rows is taken as it is. Once the reference was refused with an
    error that suggested the very --positions in use."""
    from pe_probe.reference import procrustes_distance, shape_distance, sinusoid_2d

    whole = rng.normal(size=(30, 8))
    ref = rng.normal(size=(30, 6))
    np.save(tmp_path / "pe.npy", whole)
    np.save(tmp_path / "ref.npy", ref)
    np.save(tmp_path / "ref10.npy", ref[5:15])
    run = dict(ground_truth="grid:6x5", positions="5:15", **FAST)
    cut = pe_probe.analyze_source(str(tmp_path / "pe.npy"), reference=str(tmp_path / "ref.npy"), **run)
    assert cut.metrics["ref_shape_distance"] == pytest.approx(shape_distance(whole[5:15], ref[5:15]), abs=1e-12)
    assert cut.metrics["ref_procrustes_distance"] == pytest.approx(procrustes_distance(whole[5:15], ref[5:15]), abs=1e-12)
    assert cut.provenance["analysis"]["reference"].endswith("ref.npy[5:15]")
    rows = pe_probe.analyze_source(str(tmp_path / "pe.npy"), reference=str(tmp_path / "ref10.npy"), **run)
    assert rows.metrics["ref_shape_distance"] == cut.metrics["ref_shape_distance"]
    sin = pe_probe.analyze_source(str(tmp_path / "pe.npy"), reference="sin2d:6x5", **run)
    assert sin.metrics["ref_shape_distance"] == pytest.approx(shape_distance(whole[5:15], sinusoid_2d(6, 5, 8)[5:15]),
                                                              abs=1e-12)
    assert sin.provenance["analysis"]["reference"] == "sin2d:6x5[5:15]"
    with pytest.raises(InputError, match=r"has 12 positions but the table has 10; give sin2d:HxW with H x W = 10"):
        pe_probe.analyze_source(str(tmp_path / "pe.npy"), reference="sin2d:4x3", **run)
    np.save(tmp_path / "ref12.npy", ref[:12])
    with pytest.raises(InputError, match="has 12 positions but the table has 10; .*one per row of the whole table"):
        pe_probe.analyze_source(str(tmp_path / "pe.npy"), reference=str(tmp_path / "ref12.npy"), **run)


@pytest.mark.parametrize("coords, match", [(["a"] * 16, "ground truth: holds text, not numbers"), (None, "no ground truth"),
                                           (grid(4, 4).coords + 1j, "ground truth: holds complex values")])
def test_ground_truth_that_is_not_real_numbers_is_refused(table, coords, match):
    with pytest.raises(InputError, match=match):
        pe_probe.analyze(table, coords, **FAST)


def test_bf16_coordinates_are_widened(table):
    coords = torch.as_tensor(grid(4, 4).coords).to(torch.bfloat16)  # small integers: exact in bf16
    res = pe_probe.analyze(table, coords, **FAST)
    assert res.metrics == pytest.approx(pe_probe.analyze(table, grid(4, 4), **FAST).metrics, nan_ok=True)


def test_write_analysis_refuses_a_list_a_missing_folder_and_other_objects(table, tmp_path):
    res = pe_probe.analyze(table, grid(4, 4), **FAST)
    with pytest.raises(InputError, match="write_analysis takes one result; analyze_view returns a list: write each"):
        pe_probe.write_analysis([res], tmp_path / "a")
    with pytest.raises(InputError, match="out_dir must be a folder path, got NoneType"):
        pe_probe.write_analysis(res, None)
    with pytest.raises(InputError, match="takes an AnalysisResult"):
        pe_probe.write_analysis(res.metrics, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_write_analysis_takes_one_format_as_a_string(table, tmp_path):
    res = pe_probe.analyze(table, grid(4, 4), **FAST)
    out = pe_probe.write_analysis(res, tmp_path / "r", formats="png")
    suffixes = {p.suffix for p in (out / "figures").iterdir()}
    assert ".png" in suffixes and ".pdf" not in suffixes


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_tensors_are_widened_as_the_loaders_do(table, dtype):
    t = torch.as_tensor(table).to(dtype)
    res = pe_probe.analyze(t, grid(4, 4), **FAST)
    np.testing.assert_array_equal(res.table, t.float().numpy().astype(np.float64))
    assert res.metrics["rsa_spearman"] > 0.9


@pytest.mark.parametrize("make", [lambda a: a + 1j, lambda a: torch.as_tensor(a + 0.5j)])
def test_complex_tables_are_refused_not_cut_to_their_real_part(table, make):
    with pytest.raises(InputError, match="table: holds complex values"):
        pe_probe.analyze(make(table), grid(4, 4), **FAST)


# --------------------------------------------------------------------------- too few resamples or random tables


def test_too_few_bootstrap_resamples_or_random_tables_leave_a_note(table):
    few = pe_probe.analyze(table, grid(4, 4), n_perm=0, n_boot=1, n_null=1, methods="pca")
    notes = " ".join(few.provenance["notes"])
    assert few.metrics["rsa_ci_low"] == few.metrics["rsa_ci_high"]  # the reason for the note
    assert "bootstrap CI from only 1 resamples" in notes and "unreliable" in notes
    assert "single random table" in notes and np.isnan(few.metrics["null_rsa_sd"])
    enough = pe_probe.analyze(table, grid(4, 4), n_perm=0, n_boot=50, n_null=2, methods="pca")
    skipped = pe_probe.analyze(table, grid(4, 4), n_perm=0, n_boot=0, n_null=0, methods="pca")
    for res in (enough, skipped):
        assert not any("resamples" in n or "random table" in n for n in res.provenance["notes"])
    assert enough.provenance["notes"] == []  # always a list, as in metrics.json (README: res.provenance["notes"])


# --------------------------------------------------------------------------- messages that fit the API


def test_layer_errors_say_what_analyze_source_takes(checkpoints):
    with pytest.raises(InputError, match=r"--layer 5 is out of range.*valid: 0\.\.1 or mean \(every layer") as e:
        pe_probe.analyze_source(checkpoints["learned"], layer=5, **FAST)
    assert "mean or all" not in str(e.value)
    for bad in (0.0, True, "x"):
        with pytest.raises(InputError, match="layer must be an integer index or 'mean'"):
            pe_probe.analyze_source(checkpoints["learned"], layer=bad, **FAST)
    assert pe_probe.analyze_source(checkpoints["learned"], layer=np.int64(1), **FAST).provenance["layer"] == 1


def test_a_view_of_a_checkpoint_without_a_table_names_the_file(checkpoints):
    with pytest.raises(InputError, match="records no PE table") as e:
        pe_probe.analyze_view(checkpoints["rope"], "kernel", **FAST)
    assert str(e.value).startswith(f"{checkpoints['rope']}: ")


def test_integer_limits_are_inclusive_and_tensor_size_limit_is_half_the_memory():
    from pe_probe.validation import check_positive_int, check_tensor_bytes

    assert check_positive_int(7, "n", maximum=7) == 7
    with pytest.raises(InputError, match="n must be <= 7, got 8"):
        check_positive_int(8, "n", maximum=7)
    check_tensor_bytes((1000, 2), "t", memory=2 * 1000 * 2 * 8)  # needs exactly half: accepted
    with pytest.raises(InputError, match="more than half"):
        check_tensor_bytes((1001, 2), "t", memory=2 * 1000 * 2 * 8)


@pytest.mark.parametrize("extra", [1, 2])
def test_a_table_with_one_or_two_extra_rows_names_drop_extra_tokens(table, extra):
    """CLS (1) or CLS + distillation (2) rows ahead of the positions: the error names the fix for both."""
    tall = np.vstack([np.zeros((extra, table.shape[1])), table])
    with pytest.raises(InputError, match=f"pass --drop-extra-tokens {extra}"):
        pe_probe.analyze(tall, grid(4, 4), **FAST)


def test_text_masked_and_columnless_inputs_are_refused_not_parsed_or_crashed(table):
    """QA: numeric strings were parsed silently (scikit-learn refuses them), a mask was ignored (the masked values
    analysed), and (16, 0) coordinates crashed with numpy's 'zero-size array' message."""
    with pytest.raises(InputError, match=r"table: holds text, not numbers \(dtype <U"):
        pe_probe.analyze(table.astype(str), grid(4, 4), **FAST)
    with pytest.raises(InputError, match="holds text"):
        pe_probe.analyze(table.astype(str).astype(object), grid(4, 4), **FAST)
    masked = np.ma.masked_array(table, mask=np.zeros(table.shape, bool))
    masked.mask[3, 1] = True
    with pytest.raises(InputError, match=r"table: is a masked array with 1 masked value\(s\); fill them"):
        pe_probe.analyze(masked, grid(4, 4), **FAST)
    nothing_masked = pe_probe.analyze(np.ma.masked_array(table), grid(4, 4), **FAST)
    assert nothing_masked.metrics == pytest.approx(pe_probe.analyze(table, grid(4, 4), **FAST).metrics, nan_ok=True)
    with pytest.raises(InputError, match=r"ground truth: has no columns \(shape \(16, 0\)\)"):
        pe_probe.analyze(table, np.zeros((16, 0)), **FAST)


def test_a_result_prints_in_one_line_and_exports_valid_json(table):
    import json

    res = pe_probe.analyze(table, grid(4, 4), n_perm=0, n_boot=0, n_null=0)
    line = repr(res)
    assert "\n" not in line and len(line) < 300 and "n_positions=16" in line and "rsa_spearman=" in line
    doc = res.to_dict()
    text = json.dumps(doc, allow_nan=False)  # n_perm=0: rsa_p is NaN in metrics, None here
    assert doc["rsa_p"] is None and json.loads(text)["rsa_spearman"] == pytest.approx(res.metrics["rsa_spearman"])
    assert doc["provenance"]["ground_truth"]["kind"] == "grid"
