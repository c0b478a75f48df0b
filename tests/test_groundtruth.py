"""Ground truths: built-in specs, files, checkpoint dicts, and their error messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from pe_probe.groundtruth import GroundTruth, ground_truth_from_checkpoint, grid, line, parse_ground_truth


def test_line() -> None:
    gt = line(5)
    assert gt.coords.shape == (5, 1) and gt.coords.dtype == np.float64
    np.testing.assert_array_equal(gt.coords[:, 0], [0, 1, 2, 3, 4])
    assert (gt.kind, gt.shape, gt.spec, gt.n, gt.dim) == ("line", (5,), "line:5", 5, 1)


def test_grid_2d_is_row_major() -> None:
    gt = grid(4, 4)
    assert gt.coords.shape == (16, 2) and gt.shape == (4, 4) and gt.kind == "grid"
    for i, (r, c) in enumerate(gt.coords):
        assert i == int(r) * 4 + int(c)
    np.testing.assert_array_equal(gt.coords[:5], [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0]])


def test_grid_non_square_matches_numpy_flattening() -> None:
    # coords of a flattened H x W image must match np.unravel_index of the flat index
    gt = grid(2, 3)
    rows, cols = np.unravel_index(np.arange(6), (2, 3))
    np.testing.assert_array_equal(gt.coords, np.stack([rows, cols], axis=1))


def test_grid_3d_index_formula() -> None:
    gt = parse_ground_truth("grid:2x3x4")
    assert gt.coords.shape == (24, 3) and gt.shape == (2, 3, 4) and gt.dim == 3
    for i, (r, c, z) in enumerate(gt.coords.astype(int)):
        assert i == (r * 3 + c) * 4 + z


@pytest.mark.parametrize("spec", ["grid:4x4", "GRID:4X4", " grid : 4 x 4 ", "Grid:4 x4"])
def test_builtin_specs_are_case_and_space_tolerant(spec: str) -> None:
    gt = parse_ground_truth(spec)
    np.testing.assert_array_equal(gt.coords, grid(4, 4).coords)


@pytest.mark.parametrize("spec", ["grid:4x", "grid:4", "grid:", "grid:axb", "line:", "line:4x4", "grid:2x2x2x2",
                                  "line:-3", "grid:4.5x4"])
def test_malformed_builtin_spec_names_the_accepted_forms(spec: str) -> None:
    with pytest.raises(InputError) as e:
        parse_ground_truth(spec)
    msg = str(e.value)
    assert "\n" not in msg and "grid:HxW" in msg and "line:N" in msg


@pytest.mark.parametrize("spec", ["line:0", "grid:0x4", "grid:4x0x2"])
def test_sizes_below_one_are_refused(spec: str) -> None:
    with pytest.raises(InputError, match=">= 1"):
        parse_ground_truth(spec)


def test_npy_file_and_1d_promotion(tmp_path) -> None:
    coords = np.arange(12.0).reshape(6, 2)
    np.save(tmp_path / "c.npy", coords)
    gt = parse_ground_truth(tmp_path / "c.npy")
    np.testing.assert_array_equal(gt.coords, coords)
    assert gt.kind == "file" and gt.shape is None and gt.spec == str(tmp_path / "c.npy")
    np.save(tmp_path / "d.npy", np.array([3, 1, 2], dtype=np.int64))
    gt = parse_ground_truth(str(tmp_path / "d.npy"))
    assert gt.coords.shape == (3, 1) and gt.coords.dtype == np.float64


def test_csv_with_and_without_header(tmp_path) -> None:
    (tmp_path / "h.csv").write_text("x,y,z\n1,2,3\n4,5,6.5\n")
    (tmp_path / "n.csv").write_text("1,2,3\n4,5,6.5\n\n")
    for name in ("h.csv", "n.csv"):
        gt = parse_ground_truth(tmp_path / name)
        np.testing.assert_array_equal(gt.coords, [[1, 2, 3], [4, 5, 6.5]])


def test_our_own_embedding_csv_gives_its_true_columns(tmp_path) -> None:
    """An analysis's embedding.csv (position, true_*, recovered columns) was read as a 9-column ground truth."""
    from pe_probe.api import analyze_source, write_analysis

    result = analyze_source("builtin:sin2d:6x4", n_perm=99, n_boot=0, methods=("pca",))
    write_analysis(result, tmp_path / "report", figures=False)
    gt = parse_ground_truth(tmp_path / "report" / "embedding.csv")
    np.testing.assert_array_equal(gt.coords, grid(6, 4).coords)
    # columns in any order; a gap in the numbering is refused
    (tmp_path / "swapped.csv").write_text("true_1,position,true_0\n5,0,1\n6,1,2\n")
    np.testing.assert_array_equal(parse_ground_truth(tmp_path / "swapped.csv").coords, [[1, 5], [2, 6]])
    (tmp_path / "gap.csv").write_text("position,true_0,true_2\n0,1,5\n1,2,6\n")
    with pytest.raises(InputError, match=r"true_0, true_2; .* without gaps"):
        parse_ground_truth(tmp_path / "gap.csv")
    # a review's cases: a trailing comma, a name count that disagrees, a true_ column named twice
    (tmp_path / "trail.csv").write_text("position,true_0,true_1,\n0,1,5\n1,2,6\n")
    np.testing.assert_array_equal(parse_ground_truth(tmp_path / "trail.csv").coords, [[1, 5], [2, 6]])
    (tmp_path / "fewer.csv").write_text("true_0,true_1\n0,1,5\n1,2,6\n")
    with pytest.raises(InputError, match=r"names 2 columns but its rows have 3"):
        parse_ground_truth(tmp_path / "fewer.csv")
    (tmp_path / "dup.csv").write_text("position,true_0,true_0,true_1\n0,1,2,5\n1,2,3,6\n")
    with pytest.raises(InputError, match=r"names a true_ column twice"):
        parse_ground_truth(tmp_path / "dup.csv")
    # only the true_ columns must be numbers (README: "only those are read"); text elsewhere was refused
    (tmp_path / "label.csv").write_text("label,true_0,true_1,method\np0,1,5,cmds\np1,2,6,cmds\n")
    np.testing.assert_array_equal(parse_ground_truth(tmp_path / "label.csv").coords, [[1, 5], [2, 6]])
    (tmp_path / "bad.csv").write_text("label,true_0,true_1\np0,1,5\np1,x,6\n")
    with pytest.raises(InputError, match=r"line 3, column 2: 'x' is not a number"):
        parse_ground_truth(tmp_path / "bad.csv")


def test_txt_whitespace_or_comma_with_comments(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("# x y\n0 0\n0\t1  # trailing comment\n1,0\n")
    gt = parse_ground_truth(tmp_path / "a.txt")
    np.testing.assert_array_equal(gt.coords, [[0, 0], [0, 1], [1, 0]])


def test_non_numeric_csv_names_line_and_column(tmp_path) -> None:
    (tmp_path / "bad.csv").write_text("x,y\n1,2\n3,oops\n")
    with pytest.raises(InputError, match=r"line 3, column 2: 'oops'"):
        parse_ground_truth(tmp_path / "bad.csv")


def test_txt_has_no_header_allowance(tmp_path) -> None:
    (tmp_path / "h.txt").write_text("x y\n1 2\n")
    with pytest.raises(InputError, match="line 1, column 1"):
        parse_ground_truth(tmp_path / "h.txt")


def test_ragged_rows_are_refused(tmp_path) -> None:
    (tmp_path / "r.csv").write_text("1,2\n3\n")
    with pytest.raises(InputError, match="line 2 has 1 values, expected 2"):
        parse_ground_truth(tmp_path / "r.csv")


@pytest.mark.parametrize("bad", [np.array([[0.0, 1.0], [np.nan, 2.0]]), np.array([[0.0], [np.inf]])])
def test_nan_inf_refused(tmp_path, bad) -> None:
    np.save(tmp_path / "b.npy", bad)
    with pytest.raises(InputError, match="NaN or Inf.*row 1"):
        parse_ground_truth(tmp_path / "b.npy")


def test_empty_and_3d_refused(tmp_path) -> None:
    (tmp_path / "e.csv").write_text("x,y\n")
    with pytest.raises(InputError, match="empty"):
        parse_ground_truth(tmp_path / "e.csv")
    np.save(tmp_path / "e.npy", np.zeros((0, 2)))
    with pytest.raises(InputError, match="empty"):
        parse_ground_truth(tmp_path / "e.npy")
    np.save(tmp_path / "t.npy", np.zeros((2, 2, 2)))
    with pytest.raises(InputError, match=r"N x k.*\(2, 2, 2\)"):
        parse_ground_truth(tmp_path / "t.npy")


def test_missing_file_and_unknown_spec(tmp_path) -> None:
    with pytest.raises(InputError, match="not found"):
        parse_ground_truth(tmp_path / "nope.npy")
    with pytest.raises(InputError, match="unknown ground truth 'circle:5'"):
        parse_ground_truth("circle:5")


def test_an_existing_path_of_another_kind_says_what_it_is(tmp_path) -> None:
    """/dev/zero, a folder or a .dat file was an 'unknown ground truth' spec; each now gets its own reason."""
    with pytest.raises(InputError, match="not a regular file"):
        parse_ground_truth("/dev/zero")
    (tmp_path / "coords").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        parse_ground_truth(tmp_path / "coords")
    (tmp_path / "coords.dat").write_text("0 0\n1 1\n")
    with pytest.raises(InputError, match="reads .npy, .csv or .txt files; save the coordinates"):
        parse_ground_truth(tmp_path / "coords.dat")


def test_object_npy_is_not_unpickled(tmp_path) -> None:
    np.save(tmp_path / "o.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="not a plain numeric"):
        parse_ground_truth(tmp_path / "o.npy")


def test_from_checkpoint_tensor_and_kind() -> None:
    coords = torch.tensor(grid(4, 4).coords, dtype=torch.float32)
    gt = ground_truth_from_checkpoint({"coords": coords, "kind": "grid", "shape": [4, 4]})
    np.testing.assert_array_equal(gt.coords, grid(4, 4).coords)
    assert (gt.kind, gt.shape, gt.spec) == ("grid", (4, 4), "checkpoint")
    other = ground_truth_from_checkpoint({"coords": np.zeros((5, 3)), "kind": "network3d", "shape": None})
    assert (other.kind, other.shape) == ("checkpoint", None)
    mismatched = ground_truth_from_checkpoint({"coords": np.zeros((5, 2)), "kind": "grid", "shape": [4, 4]})
    assert mismatched.shape is None
    with pytest.raises(InputError):
        ground_truth_from_checkpoint({"kind": "grid"})


def test_rows_keeps_grid_shape_only_for_whole_rows() -> None:
    gt = grid(4, 4)
    top = gt.rows(0, 8)
    assert top.shape == (2, 4) and top.n == 8 and top.spec == "grid:4x4[0:8]"
    np.testing.assert_array_equal(top.coords, gt.coords[:8])
    assert gt.rows(1, 8).shape is None
    assert line(10).rows(2, 5).shape == (3,)
    assert isinstance(top, GroundTruth)


# --- checkpoint coordinates are untrusted: refuse in one line, before copying anything -------------

_GRID = torch.tensor(grid(4, 4).coords, dtype=torch.float32)


def _refusal(gt: dict) -> str:
    with pytest.raises(InputError) as e:
        ground_truth_from_checkpoint(gt, source="runs/x/last.pt")
    msg = str(e.value)
    assert "\n" not in msg and "runs/x/last.pt" in msg
    return msg


@pytest.mark.parametrize("rows, k", [(10**12, 2), (1000, 10**9)])
def test_checkpoint_coords_claiming_a_huge_size_are_refused_before_copying(rows: int, k: int) -> None:
    # a few bytes of storage expanded (stride 0) to a claimed 16 TB: the old code copied it to float64
    coords = torch.zeros(1, 1).expand(rows, k)
    msg = _refusal({"coords": coords, "kind": "grid"})
    assert "--ground-truth" in msg and "claim shape" in msg


def test_checkpoint_coords_of_three_dims_are_refused_by_their_claimed_shape() -> None:
    msg = _refusal({"coords": torch.zeros(1, 1, 1).expand(10**6, 10**6, 10**6)})
    assert "N x k" in msg


@pytest.mark.parametrize("coords, what", [
    (_GRID.to_sparse(), "sparse"),
    (_GRID.to(torch.float8_e4m3fn), "float8_e4m3fn"),
    ([[1.0, 2.0], [3.0]], "ragged"),
])
def test_unreadable_checkpoint_coords_are_one_line_errors(coords, what: str) -> None:
    msg = _refusal({"coords": coords, "kind": "grid", "shape": [4, 4]})
    assert what in msg and "--ground-truth" in msg


def test_checkpoint_coords_in_bfloat16_or_expanded_within_limits_are_read() -> None:
    gt = ground_truth_from_checkpoint({"coords": _GRID.to(torch.bfloat16), "kind": "grid", "shape": [4, 4]})
    np.testing.assert_array_equal(gt.coords, grid(4, 4).coords)
    flat = ground_truth_from_checkpoint({"coords": torch.arange(16.0)[:, None].expand(16, 2)})
    assert flat.coords.shape == (16, 2) and flat.coords.flags.writeable


@pytest.mark.parametrize("shape", [torch.zeros(2, 1).expand(2, 5 * 10**11), [-4, -4], "abc", [10**30, 1], [1, 1, 1, 16]])
def test_a_checkpoint_layout_shape_that_cannot_describe_the_coords_is_dropped(shape) -> None:
    # a stride-0 shape claiming 10^12 sizes is dropped unread (the old code copied it)
    gt = ground_truth_from_checkpoint({"coords": _GRID, "kind": "grid", "shape": shape})
    assert gt.shape is None and gt.kind == "grid"


def test_a_checkpoint_kind_that_is_not_text_becomes_checkpoint() -> None:
    gt = ground_truth_from_checkpoint({"coords": _GRID, "kind": torch.zeros(3), "shape": [4, 4]})
    assert (gt.kind, gt.shape) == ("checkpoint", (4, 4))


def test_a_ground_truth_npy_whose_header_claims_more_than_the_file_holds_is_refused_unread(tmp_path) -> None:
    """`--ground-truth x.npy` went through np.load, which allocates what a 200-byte header claims first."""
    from numpy.lib import format as npf

    from pe_probe.groundtruth import load_npy

    path = tmp_path / "gt.npy"
    with open(path, "wb") as f:
        npf.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (2 * 10**11, 2)})
        f.write(b"\0" * 64)
    with pytest.raises(InputError, match=r"header claims 3,200,000,000,000 bytes .* the file holds 64"):
        load_npy(path, "ground truth")
    np.save(path, grid(4, 4).coords)  # a real one still loads, as a plain (not memory-mapped) array
    arr = load_npy(path, "ground truth")
    assert type(arr) is np.ndarray and np.array_equal(arr, grid(4, 4).coords)


def test_rows_ending_mid_row_of_a_grid_keep_no_grid_shape() -> None:
    gt = grid(4, 4)
    part = gt.rows(0, 6)  # one whole row and half of the next: not a 1x4 or 2x4 grid
    assert part.shape is None
    np.testing.assert_array_equal(part.coords, np.indices((4, 4)).reshape(2, -1).T[:6])
    assert gt.rows(4, 14).shape is None
    mid = gt.rows(4, 12)
    assert mid.shape == (2, 4)
    np.testing.assert_array_equal(mid.coords, np.indices((4, 4)).reshape(2, -1).T[4:12])


def test_rows_of_a_3d_grid_keep_its_shape_only_for_whole_planes() -> None:
    gt = grid(3, 2, 2)  # inner size 2 * 2 = 4
    assert gt.rows(4, 12).shape == (2, 2, 2)
    assert gt.rows(4, 10).shape is None


def test_numbers_are_ascii_numbers_not_whatever_float_accepts(tmp_path) -> None:
    """float("1_0") is 10 and float("\\u0663") is 3: such cells were read silently (hostile-input QA, review)."""
    (tmp_path / "u.csv").write_text("0,0\n1_0,1\n2,2\n3,3\n")
    with pytest.raises(InputError, match=r"line 2, column 1: '1_0' is not a number"):
        parse_ground_truth(tmp_path / "u.csv")
    (tmp_path / "d.csv").write_text("0,0\n1,\u0663\n2,2\n3,3\n", encoding="utf-8")  # an Arabic-Indic 3
    with pytest.raises(InputError, match=r"line 2, column 2: .* is not a number"):
        parse_ground_truth(tmp_path / "d.csv")
    (tmp_path / "ok.csv").write_text("x,y\n-1.5e3,+.5\n2.,inf\n3E-2,-0\n4,5\n")
    from pe_probe.groundtruth import read_number_table

    np.testing.assert_array_equal(read_number_table(tmp_path / "ok.csv", header=True),
                                  [[-1500, 0.5], [2, np.inf], [0.03, 0], [4, 5]])


def test_text_tables_stream_stop_at_a_cap_and_word_their_errors(tmp_path, monkeypatch):
    import pe_probe.groundtruth as gtm

    path = tmp_path / "big.csv"
    path.write_text("".join("1.5,2.5\n" for _ in range(50)))
    monkeypatch.setattr(gtm, "MAX_TEXT_VALUES", 60)  # refused as soon as it is passed, not after reading all
    with pytest.raises(InputError, match="more than 60 numbers"):
        gtm.read_named_table(path, header=True)
    monkeypatch.undo()
    names, values, _ = gtm.read_named_table(path, header=True)
    assert names is None and values.shape == (50, 2) and values[0].tolist() == [1.5, 2.5]
    (tmp_path / "quote.csv").write_text('"x,y\n1,2\n3,4\n')  # an unclosed quote: the whole file is one cell
    with pytest.raises(InputError, match="header row but no rows of numbers"):
        gtm.read_named_table(tmp_path / "quote.csv", header=True)
    (tmp_path / "long.csv").write_text("1,2\n" + "x" * 100_000 + ",3\n")
    with pytest.raises(InputError) as e:
        gtm.read_named_table(tmp_path / "long.csv", header=True)
    assert len(str(e.value)) < 300 and "is not a number" in str(e.value)
