"""Bad files and bad options from an adversarial review: each is a one-line error with exit code 2, no
traceback, and nothing left on disk (the project's rule for bad input)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import zipfile

import numpy as np
import pytest
import torch

import pe_probe
from pe_probe.cli import main
from pe_probe.errors import InputError
from pe_probe.groundtruth import grid

FAST = ["--n-perm", "10", "--n-boot", "10", "--n-null", "3", "--quiet"]


def refuse(argv, capsys, needle: str) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    return err


def _corrupt_files(tmp_path):
    (tmp_path / "text.pt").write_text("hello world\nthis is not torch\n")
    (tmp_path / "empty.npy").write_bytes(b"")
    np.save(tmp_path / "ok.npy", np.random.default_rng(0).normal(size=(16, 4)))
    (tmp_path / "trunc.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:100])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}] * 16, dtype=object), allow_pickle=True)
    (tmp_path / "empty.npz").write_bytes(b"")
    np.savez(tmp_path / "ok.npz", t=np.ones((16, 4)))
    (tmp_path / "trunc.npz").write_bytes((tmp_path / "ok.npz").read_bytes()[:60])
    (tmp_path / "bin.csv").write_bytes(bytes(range(128, 256)) * 3)
    (tmp_path / "text.npy").write_bytes(b"not npy")  # numpy takes it for a pickle and suggests loading it unsafely
    return tmp_path


@pytest.mark.parametrize("name,needle", [
    ("text.pt", "not a readable torch file"), ("empty.npy", "not a readable .npy"),
    ("trunc.npy", ".npy"), ("obj.npy", "not a plain numeric .npy"), ("empty.npz", "not a readable .npz"),
    ("trunc.npz", "not a readable .npz"), ("bin.csv", "not a text file"),
    ("text.npy", "not a .npy file (no NumPy header)"),
])
def test_corrupt_tables_ground_truths_and_references(tmp_path, capsys, name, needle):
    d = _corrupt_files(tmp_path)
    err = refuse(["analyze", d / name, "-g", "line:16", *FAST], capsys, needle)
    assert "allow_pickle" not in err and "pickle.load" not in err  # never advice to load a file unsafely
    if name.endswith((".npy", ".csv")):  # the same readers serve --ground-truth and --reference
        refuse(["analyze", d / "ok.npy", "-g", d / name, *FAST], capsys, needle)
        refuse(["analyze", d / "ok.npy", "-g", "line:16", "--reference", d / name, *FAST], capsys, needle)


def test_hugging_face_shard_index_is_checked(tmp_path, capsys):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a"]}))
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "no usable weight_map")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"pos_embed": "../x.safetensors"}}))
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "outside the model folder")


@pytest.mark.parametrize("argv,needle", [
    (["-g", "line:99999999999999999999"], "more than 1,000,000 positions"),
    (["-g", "grid:100000x100000"], "more than 1,000,000 positions"),
    (["-g", "line:16", "--n-perm", "99999999999999999999"], "argument --n-perm: expected a number <= 1,000,000"),
    (["-g", "line:16", "--n-boot", "99999999999999999999"], "argument --n-boot: expected a number <= 100,000"),
    (["-g", "line:16", "--n-null", "1001"], "argument --n-null: expected a number <= 1,000, got 1,001"),
    (["-g", "line:16", "--neighbours", "0"], "argument --neighbours: expected a number >= 1, got 0"),
    (["-g", "line:16", "--neighbours", "-1"], "argument --neighbours: expected a number >= 1, got -1"),
    (["-g", "line:16", "--seed", str(2**63)], "argument --seed: expected a number <= 9,223,372,036,854,775,807"),
    (["-g", "line:16", "--neighbours", "15"], "neighbours (--neighbours) must be below N/2 = 8 for this table"),
    (["-g", "line:16", "--neighbours", "8"], "choose a smaller k, at most 7"),  # gave trustworthiness > 1 before
    (["-g", "line:16", "--seed", "-1"], "expected a number >= 0"),
    (["-g", "line:16", "--attention-reference", "x.pt"], "--view attention only"),
    (["-g", "line:16", "--drop-extra-tokens", "16"], "--drop-extra-tokens 16 must be"),
])
def test_absurd_options_are_refused_before_any_work(tmp_path, capsys, argv, needle):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    refuse(["analyze", tmp_path / "t.npy", *FAST, *argv, "--out", tmp_path / "out"], capsys, needle)
    assert not (tmp_path / "out").exists()


def test_unwritable_or_self_replacing_out_is_refused_up_front(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    (tmp_path / "afile").write_text("x")
    refuse(["analyze", tmp_path / "t.npy", "-g", "line:16", "--out", tmp_path / "afile" / "x", *FAST], capsys,
           "is a file, not a folder")
    monkeypatch.chdir(tmp_path)
    refuse(["analyze", "t.npy", "-g", "line:16", "--out", ".", "--force", *FAST], capsys, "current folder")
    assert sorted(os.listdir(tmp_path)) == ["afile", "t.npy"]  # no staging or .old folders left behind


def test_finished_report_folder_has_the_usual_permissions(tmp_path, capsys):
    np.save(tmp_path / "t.npy", np.random.default_rng(0).normal(size=(16, 4)))
    assert main(["analyze", str(tmp_path / "t.npy"), "-g", "line:16", "--out", str(tmp_path / "o"), "--no-figures",
                 *FAST]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700


def test_zero_width_and_integer_tables(tmp_path, capsys):
    torch.save({"pos_embed": torch.zeros(16, 0)}, tmp_path / "col0.pt")
    refuse(["analyze", tmp_path / "col0.pt", "-g", "line:16", *FAST], capsys, "no dimensions per position")
    np.save(tmp_path / "ints.npy", np.random.default_rng(0).integers(0, 9, size=(16, 4)))
    assert main(["analyze", str(tmp_path / "ints.npy"), "-g", "line:16", "--json", *FAST]) == 0  # numbers are numbers


def test_tampered_checkpoints_fail_cleanly(tmp_path, capsys):
    """A real checkpoint with its config or weights edited: every reader says so in one line."""
    from trainers.checkpoint import load_checkpoint
    from trainers.config import make_config
    from trainers.train import train

    cfg = make_config("quick", {"model.d_model": 8, "model.n_layers": 1, "optim.epochs": 1, "data.n_per_level": 8,
                                "data.min_jaccard": 0.5, "eval_every": 1, "ckpt_every": 1})
    train(cfg, tmp_path / "run", log=lambda *_: None)
    good = load_checkpoint(tmp_path / "run" / "last.pt")

    def tampered(name, edit):
        ck = {**good, "config": json.loads(json.dumps(good["config"])), "model": dict(good["model"])}
        edit(ck)
        torch.save(ck, tmp_path / name)
        return tmp_path / name

    heads0 = tampered("heads0.pt", lambda c: c["config"]["model"].update(n_heads=0))
    missing = tampered("missing.pt", lambda c: c["model"].pop("blocks.0.attn.qkv.weight"))
    config_str = tampered("configstr.pt", lambda c: c.update(config="oops"))
    for path, needle in ((heads0, "--heads must be an integer >= 1"), (missing, "do not rebuild the model")):
        refuse(["evaluate", path], capsys, needle)
        refuse(["analyze", path, "--view", "attention", *FAST], capsys, needle)
    refuse(["analyze", heads0, "--view", "qk", *FAST], capsys, "heads")
    refuse(["analyze", config_str, "--view", "qk", *FAST], capsys, "not a mapping")
    refuse(["evaluate", tmp_path / "run"], capsys, "is a folder, not a checkpoint file; pass")


def test_train_checks_ood_puzzles_and_out_before_writing(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("puzzles,solutions,condition\n123,1,Binary\n")
    refuse(["train", "lst", "--out", tmp_path / "t1", "--ood-puzzles", bad, "--epochs", "1"], capsys, "line 2")
    assert not (tmp_path / "t1").exists()
    (tmp_path / "afile").write_text("x")
    refuse(["train", "lst", "--out", tmp_path / "afile", "--epochs", "1"], capsys, "is a file, not a run folder")
    refuse(["train", "lst", "--out", tmp_path / "afile" / "x", "--epochs", "1"], capsys, "cannot create it")


def test_vit_ground_truth_counting_the_cls_row_gets_a_hint(tmp_path, capsys):
    pe = np.random.default_rng(0).normal(size=(1, 17, 8)).astype(np.float32)
    torch.save({"pos_embed": torch.tensor(pe), "cls_token": torch.zeros(1, 1, 8)}, tmp_path / "vit.pth")
    refuse(["analyze", tmp_path / "vit.pth", "-g", "line:17", *FAST], capsys, "--drop-extra-tokens 0")
    assert zipfile.is_zipfile(tmp_path / "vit.pth")


# ------------------------------------------------- files whose headers claim more than they hold (QA fuzzing)


def _npy_header_only(shape, descr="<f8") -> bytes:
    """A .npy header claiming ``shape``, followed by 64 bytes of data: a file that lies about its size."""
    hdr = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    hdr += " " * (118 - len(hdr)) + "\n"
    return b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + bytes(64)


def test_tiny_files_claiming_huge_tables_are_refused_before_reading(tmp_path, capsys):
    # a 1 KB torch zip holding an expanded (stride-0) tensor: converting it used to raise MemoryError
    torch.save({"wpe.weight": torch.zeros(1, 1).expand(10**6, 10**7)}, tmp_path / "stride0.pt")
    assert (tmp_path / "stride0.pt").stat().st_size < 4096
    refuse(["analyze", tmp_path / "stride0.pt", "-g", "line:16", *FAST], capsys, "1,000,000 positions need about")
    refuse(["analyze", tmp_path / "stride0.pt", "-g", "line:16", "--positions", "0:16", *FAST], capsys,
           "an expanded, stride-0 tensor")
    # a 200-byte .npy whose header claims 10^11 rows
    (tmp_path / "hdr.npy").write_bytes(_npy_header_only((10**11, 2)))
    err = refuse(["analyze", tmp_path / "hdr.npy", "-g", "line:16", *FAST], capsys, "header claims 1,600,000,000,000 bytes")
    assert "the file holds 64" in err and "truncated or crafted" in err
    refuse(["analyze", tmp_path / "hdr.npy", "-g", "line:16", *FAST], capsys, "truncated or crafted")
    # the same header as an .npz member
    with zipfile.ZipFile(tmp_path / "hdr.npz", "w") as zf:
        zf.writestr("wpe.npy", _npy_header_only((2 * 10**11, 2)))
    refuse(["analyze", tmp_path / "hdr.npz", "-g", "line:16", *FAST], capsys, "(array 'wpe'): its header claims")


def test_npz_members_are_read_only_when_chosen(tmp_path):
    from pe_probe.io import load_table

    np.savez(tmp_path / "two.npz", pos_embed=np.random.default_rng(0).normal(size=(16, 4)), junk=np.ones((64, 64)))
    data = bytearray((tmp_path / "two.npz").read_bytes())
    start = data.index(b"\x93NUMPY", data.index(b"junk.npy")) + 200  # inside junk's data, past its header
    data[start:start + 8] = b"\xff" * 8  # junk's CRC no longer matches: reading it fails
    (tmp_path / "two.npz").write_bytes(bytes(data))
    assert load_table(tmp_path / "two.npz", param="pos_embed").table.shape == (16, 4)


def _pickle_bomb(path, name: str = "a/data.pkl"):
    with zipfile.ZipFile(path, "w") as zf:  # 17 MiB of NONE opcodes, deflated to ~17 KB
        zf.writestr("a/byteorder", "little")
        zf.writestr("a/version", "3\n")
        zf.writestr(name, b"\x80\x02(" + b"N" * (17 << 20) + b".", compress_type=zipfile.ZIP_DEFLATED)
    return path


@pytest.mark.parametrize("name", ["a/data.pkl", "a/DATA.PKL"])  # torch's zip reader finds either
def test_torch_zip_with_a_huge_pickle_is_refused_before_unpickling(tmp_path, capsys, name):
    bomb = _pickle_bomb(tmp_path / "bomb.pt", name)
    refuse(["analyze", bomb, "-g", "line:16", *FAST], capsys, "its pickle (data.pkl) is 17,825,796 bytes")


def test_trainers_checkpoint_reader_refuses_a_huge_pickle_too(tmp_path, capsys):
    """`evaluate` and `analyze --attention-reference` read checkpoints through trainers.checkpoint."""
    from trainers.checkpoint import last_epoch, load_checkpoint

    bomb = _pickle_bomb(tmp_path / "last.pt")
    with pytest.raises(InputError, match="its pickle"):
        load_checkpoint(bomb)
    assert last_epoch(tmp_path) is None  # unreadable, at once


def _npy_with_header(header: bytes) -> bytes:
    import struct

    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def _zip_flag_member(src, dst, offset: int, value: bytes):
    """A copy of zip ``src`` with bytes at ``offset`` of both headers of its first member replaced (local header
    offset, and the central directory's same field 16 bytes further on, as zip lays them out)."""
    data = bytearray(src.read_bytes())
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    data[local + offset:local + offset + len(value)] = value
    data[central + offset + 2:central + offset + 2 + len(value)] = value
    dst.write_bytes(bytes(data))
    return dst


def test_damaged_npy_and_npz_files_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "tok.npy").write_bytes(_npy_with_header(b"{'descr': ("))  # numpy's tokenizer fails on it
    refuse(["analyze", tmp_path / "tok.npy", "-g", "line:16", *FAST], capsys, "malformed or truncated header")
    refuse(["analyze", tmp_path / "tok.npy", "-g", "line:16", *FAST], capsys, "np.save")
    np.save(tmp_path / "ok.npy", np.ones((16, 4)))
    refuse(["analyze", tmp_path / "ok.npy", "-g", tmp_path / "tok.npy", *FAST], capsys, "malformed or truncated header")
    (tmp_path / "neg.npy").write_bytes(_npy_with_header(b"{'descr': '<f8', 'fortran_order': False, 'shape': (-16, 8), }\n"))
    refuse(["analyze", tmp_path / "neg.npy", "-g", "line:16", *FAST], capsys, "claims a negative size")
    np.savez(tmp_path / "ok.npz", pos_embed=np.ones((16, 4)))
    enc = _zip_flag_member(tmp_path / "ok.npz", tmp_path / "enc.npz", 6, b"\x01\x00")  # "encrypted"
    refuse(["analyze", enc, "-g", "line:16", *FAST], capsys, "not a readable .npz")
    unk = _zip_flag_member(tmp_path / "ok.npz", tmp_path / "unk.npz", 8, b"\x63\x00")  # compression method 99
    refuse(["analyze", unk, "-g", "line:16", *FAST], capsys, "not a readable .npz")
    with zipfile.ZipFile(tmp_path / "dup.npz", "w") as zf, zipfile.ZipFile(tmp_path / "ok.npz") as src:
        member = src.read("pos_embed.npy")
        zf.writestr("pos_embed.npy", member)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("pos_embed.npy", member)
    refuse(["analyze", tmp_path / "dup.npz", "-g", "line:16", *FAST], capsys, "holds two arrays named 'pos_embed'")


def test_torch_zip_with_damaged_magic_and_tensors_of_many_dims_are_one_line_errors(tmp_path, capsys):
    torch.save({"pos_embed": torch.randn(16, 8)}, tmp_path / "ok.pt")
    data = bytearray((tmp_path / "ok.pt").read_bytes())
    data[:4] = b"\0" * 4  # torch then takes it for a legacy file; the zip directory is still there
    (tmp_path / "zero4.pt").write_bytes(bytes(data))
    refuse(["analyze", tmp_path / "zero4.pt", "-g", "line:16", *FAST], capsys, "zero4.pt")
    torch.save({"pos_embed": torch.randn(16, 8).reshape((1,) * 70 + (16, 8))}, tmp_path / "dims70.pt")
    refuse(["analyze", tmp_path / "dims70.pt", "-g", "line:16", *FAST], capsys, "72 dimensions, more than the 64")


def _safetensors(path, dtype, shape, data: bytes):
    import struct

    h = json.dumps({"wpe.weight": {"dtype": dtype, "shape": list(shape), "data_offsets": [0, len(data)]}}).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def test_unreadable_tensors_get_one_line_errors(tmp_path, capsys):
    torch.save({"wpe.weight": torch.randn(16, 8).to_sparse()}, tmp_path / "sparse.pt")
    np.save(tmp_path / "ok.npy", np.random.default_rng(0).normal(size=(16, 8)))
    refuse(["analyze", tmp_path / "sparse.pt", "-g", "line:16", *FAST], capsys, "is a sparse tensor (sparse_coo layout")
    refuse(["analyze", tmp_path / "ok.npy", "-g", "line:16", "--reference", tmp_path / "sparse.pt", *FAST], capsys,
           "save it dense")
    layers = {f"blocks.{i}.pe.table": torch.randn(16, 8) for i in range(3)}
    torch.save({**layers, "blocks.1.pe.table": torch.randn(16, 8).to_sparse()}, tmp_path / "layers.pt")
    # a view reads only the tensors it uses (tests/test_views.py): here every layer's table is used
    refuse(["analyze", tmp_path / "layers.pt", "--layer", "all", "-g", "line:16", *FAST], capsys,
           f"blocks.1.pe.table in {tmp_path / 'layers.pt'}: is a sparse tensor")
    refuse(["analyze", _safetensors(tmp_path / "f4.safetensors", "F4", (16, 8), bytes(64)), "-g", "line:16", *FAST],
           capsys, "unsupported dtype F4; convert the table to float")
    refuse(["analyze", _safetensors(tmp_path / "f6.safetensors", "F6_E2M3", (16, 8), bytes(96)), "-g", "line:16",
            *FAST], capsys, "unsupported dtype F6_E2M3; convert the table to float")


def test_finite_values_too_large_for_float64_arithmetic_are_refused(tmp_path, capsys):
    table = np.random.default_rng(0).normal(size=(16, 4)) * 1e300
    np.save(tmp_path / "huge.npy", table)
    err = refuse(["analyze", tmp_path / "huge.npy", "-g", "line:16", *FAST], capsys, "overflow float64 arithmetic")
    assert str(tmp_path / "huge.npy") in err and "rescale" in err
    np.save(tmp_path / "big.npy", table / 1e160)  # 1e140: large but safe
    assert main(["analyze", str(tmp_path / "big.npy"), "-g", "line:16", "--json", *FAST]) == 0


def test_config_with_non_string_architectures(tmp_path, capsys):
    from safetensors.numpy import save_file

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"architectures": [1, 2]}))
    save_file({"wpe.weight": np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32)},
              str(tmp_path / "m" / "model.safetensors"))
    assert main(["analyze", str(tmp_path / "m"), "-g", "line:16", "--json", *FAST]) == 0


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates quantize_per_tensor
@pytest.mark.parametrize("dtype_table,needle", [
    (lambda: torch.randn(16, 8, dtype=torch.complex64), "is a complex tensor (complex64, shape (16, 8))"),
    (lambda: torch.quantize_per_tensor(torch.randn(16, 8), 0.1, 0, torch.qint8),
     "is a quantized tensor (qint8, shape (16, 8))"),
])
def test_param_of_the_wrong_dtype_names_that_dtype(tmp_path, capsys, dtype_table, needle):
    torch.save({"wpe.weight": dtype_table()}, tmp_path / "t.pt")
    err = refuse(["analyze", tmp_path / "t.pt", "--param", "wpe.weight", "-g", "line:16", *FAST], capsys, needle)
    assert "integer/bool" not in err
    # found by name without --param too (a review found "no float tensor" there, or an unrelated float
    # matrix offered as the candidate), alone in its file or beside other weights and integer position ids
    refuse(["analyze", tmp_path / "t.pt", "-g", "line:16", *FAST], capsys, needle)
    torch.save({"h.weight": torch.randn(8, 8), "position_ids": torch.arange(16)[None], "wpe.weight": dtype_table()},
               tmp_path / "t2.pt")
    refuse(["analyze", tmp_path / "t2.pt", "-g", "line:16", *FAST], capsys, needle)


def test_messages_name_the_file_and_survive_odd_file_names(tmp_path, capsys):
    bad = np.random.default_rng(0).normal(size=(16, 8))
    bad[3, 1] = np.inf
    torch.save({"wpe.weight": torch.tensor(bad)}, tmp_path / "inf.pt")
    refuse(["analyze", tmp_path / "inf.pt", "-g", "line:16", *FAST], capsys,
           f"wpe.weight in {tmp_path / 'inf.pt'}: contains NaN or Inf (first in row 3)")
    odd = tmp_path / "empty\nline.npy"
    odd.write_bytes(b"")
    err = refuse(["analyze", odd, "-g", "line:16", *FAST], capsys, "not a readable .npy file (empty)")
    assert repr(str(odd)) in err


def test_torch_globals_outside_the_weights_only_allowlist_are_named_as_code(tmp_path, capsys):
    torch.save({"wpe.weight": torch.randn(16, 8)}, tmp_path / "good.pt")
    payload = b"\x80\x02ctorch.hub\nload\nX\x03\x00\x00\x00abc\x85R."  # would call torch.hub.load('abc')
    with zipfile.ZipFile(tmp_path / "good.pt") as src, zipfile.ZipFile(tmp_path / "hub.pt", "w") as dst:
        for info in src.infolist():
            dst.writestr(info, payload if info.filename.endswith("data.pkl") else src.read(info))
    refuse(["analyze", tmp_path / "hub.pt", "-g", "line:16", *FAST], capsys,
           "contains pickled code or objects the weights-only reader does not allow")


def test_pickled_torch_files_are_refused_with_a_torch_whose_loader_has_known_flaws(tmp_path, capsys, monkeypatch):
    """torch.load(weights_only=True) could run code from a crafted file before torch 2.6 and corrupt memory before
    2.10: with such a torch every pickled file is refused before it is opened; numpy files still load."""
    from pe_probe.filechecks import check_safe_torch_loader
    from pe_probe.errors import InputError
    from trainers.checkpoint import load_checkpoint

    for ok in ("2.10.0", "2.13.0+cpu", "2.11.0+cu130"):
        check_safe_torch_loader(tmp_path / "x.pt", ok)
    table = np.random.default_rng(0).normal(size=(16, 4))
    torch.save({"wpe.weight": torch.tensor(table)}, tmp_path / "model.pt")
    np.save(tmp_path / "table.npy", table)
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    refuse(["analyze", tmp_path / "model.pt", "-g", "line:16", *FAST], capsys, "refused to load with torch 2.5.1")
    with pytest.raises(InputError, match="CVE-2025-32434"):
        load_checkpoint(tmp_path / "model.pt")
    assert main(["analyze", str(tmp_path / "table.npy"), "-g", "line:16", *FAST]) == 0


@contextlib.contextmanager
def fails_instead_of_hanging(seconds: int):
    """Turn a hang (a read from a pipe or /dev/zero) into a test failure after ``seconds`` (SIGALRM, main thread)."""
    def hung(signum, frame):
        raise AssertionError(f"still running after {seconds} s: a pipe or device was read instead of refused")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_values_too_small_for_float64_arithmetic_are_refused(tmp_path, capsys):
    """Rows differing by ~1e-160 gave squared distances in float64's subnormal range: the metrics moved (RSA
    0.8374 became 0.8374473 at 1e-160, smacof R² moved at 1e-155) and 1e-170 was refused as 'a constant table'."""
    rng = np.random.default_rng(0)
    table = np.hstack([grid(4, 4).coords, np.zeros((16, 3))]) + 0.4 * rng.normal(size=(16, 5))
    for scale in (1e-160, 1e-170):
        np.save(tmp_path / "tiny.npy", table * scale)
        err = refuse(["analyze", tmp_path / "tiny.npy", "-g", "grid:4x4", *FAST], capsys, "underflows float64 arithmetic")
        assert "rescale the table" in err
        np.save(tmp_path / "tiny_g.npy", grid(4, 4).coords * scale)
        np.save(tmp_path / "t.npy", table)
        refuse(["analyze", tmp_path / "t.npy", "-g", tmp_path / "tiny_g.npy", *FAST], capsys, "coordinates differ by at most")
    with pytest.raises(InputError, match="underflows"):
        pe_probe.analyze(table * 1e-160, grid(4, 4), n_perm=0, n_boot=0, n_null=0)
    # small but safe: the numbers are those of the unscaled table (every metric is scale-free)
    base = pe_probe.analyze(table, grid(4, 4), n_perm=0, n_boot=0, n_null=0, methods="pca").metrics
    small = pe_probe.analyze(table * 1e-90, grid(4, 4), n_perm=0, n_boot=0, n_null=0, methods="pca").metrics
    for key in ("rsa_spearman", "recovery_pca_r2", "probe_r2", "trustworthiness"):
        assert small[key] == pytest.approx(base[key], rel=1e-9), key


def test_second_review_bad_inputs_are_one_line_errors(tmp_path, capsys):
    """A symbolic link loop or a dangling link as --out, a meta-device tensor, coordinates that overflow float64, a
    pipe or device as a source, ground truth or reference: each used to crash (traceback), hang or give garbage."""
    table = np.random.default_rng(0).normal(size=(16, 4))
    np.save(tmp_path / "t.npy", table)
    t = tmp_path / "t.npy"
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    refuse(["analyze", t, "-g", "line:16", "--out", tmp_path / "loop1", *FAST], capsys, "cannot be resolved")
    refuse(["analyze", t, "-g", "line:16", "--out", tmp_path / "loop1" / "sub", *FAST], capsys, "cannot be resolved")
    refuse(["compare", t, t, "-g", "line:16", "--out", tmp_path / "loop1"], capsys, "cannot be resolved")
    refuse(["analyze", t, "-g", "line:16", "--out", tmp_path / "dangling", *FAST], capsys, "does not exist")
    torch.save({"wpe.weight": torch.empty(16, 8, device="meta")}, tmp_path / "meta.pt")
    refuse(["analyze", tmp_path / "meta.pt", "-g", "line:16", *FAST], capsys, "'meta' device")
    np.save(tmp_path / "huge.npy", np.random.default_rng(1).normal(size=(16, 2)) * 1e200)
    refuse(["analyze", t, "-g", tmp_path / "huge.npy", *FAST], capsys, "overflow float64")
    os.mkfifo(tmp_path / "fifo.npy")
    os.symlink("/dev/zero", tmp_path / "zero.pt")
    with fails_instead_of_hanging(60):  # without the check, opening the pipe blocks for ever
        refuse(["analyze", tmp_path / "fifo.npy", "-g", "line:16", *FAST], capsys, "not a regular file")
        refuse(["analyze", tmp_path / "zero.pt", "-g", "line:16", *FAST], capsys, "not a regular file")
        refuse(["analyze", t, "-g", tmp_path / "fifo.npy", *FAST], capsys, "ground truth is not a regular file")
        refuse(["analyze", t, "-g", "line:16", "--reference", tmp_path / "fifo.npy", *FAST], capsys,
               "reference is not a regular file")
    (tmp_path / "folder.npy").mkdir()
    refuse(["analyze", t, "-g", tmp_path / "folder.npy", *FAST], capsys, "is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t.npy", "loop1", "loop2", "dangling", "meta.pt", "huge.npy", "fifo.npy", "zero.pt", "folder.npy"])


def test_compare_takes_the_drop_extra_tokens_its_error_suggests(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(17, 4)))
    argv = ["compare", tmp_path / "a.npy", tmp_path / "b.npy", "-g", "line:16", "--n-perm", "5", "--n-boot", "5"]
    err = refuse([*argv, "--out", tmp_path / "c"], capsys, "pass --drop-extra-tokens 1")
    assert "a.npy: ground truth has 16 positions" in err  # which source, among several
    assert main([str(a) for a in [*argv, "--out", tmp_path / "c", "--drop-extra-tokens", "1"]]) == 0
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "c" / "compare.csv").n_positions) == [16, 16]


@pytest.mark.parametrize("version", ["2.5.1", "2.6.0", "2.8.0+cu126", "2.9.1"])
def test_torch_loaders_before_2_10_are_refused_including_the_2_6_to_2_9_memory_corruption_range(tmp_path, version):
    import re

    from pe_probe.errors import InputError
    from pe_probe.filechecks import check_safe_torch_loader

    # CVE-2026-24747 affects weights-only loading before 2.10; 2.9 must not pass a lexicographic or 2.6-only check.
    with pytest.raises(InputError, match=re.escape(f"refused to load with torch {version}")):
        check_safe_torch_loader(tmp_path / "x.pt", version)


@pytest.mark.parametrize("version", ["2.10.0", "2.10.1+cpu", "2.13.0", "3.0.0"])
def test_torch_loaders_from_2_10_on_are_accepted(tmp_path, version):
    from pe_probe.filechecks import check_safe_torch_loader

    check_safe_torch_loader(tmp_path / "x.pt", version)


def _diamond(levels: int, leaf):
    """Each level refers to the next twice: a few KB on disk, 2^levels entries to walk."""
    cur = leaf
    for _ in range(levels):
        cur = {"a": cur, "b": cur}
    return cur


@pytest.mark.parametrize("build, needle", [
    (lambda t: (lambda d: d.update(self=d) or d)({"wpe.weight": t}), "its state_dict contains itself (under self)"),
    (lambda t: {**_diamond(40, {"x": torch.zeros(1)}), "wpe.weight": t}, "its state_dict holds more than 1,000,000"),
    (lambda t: {"format": "pe-probe-checkpoint/1", "model": {"wpe.weight": t}, "config": _diamond(40, {"x": 1})},
     "its config holds more than 1,000,000"),
    (lambda t: {"format": "pe-probe-checkpoint/1", "model": {"wpe.weight": t}, "metrics": _diamond(40, [1.0])},
     "its metrics holds more than 1,000,000 nested containers"),
    (lambda t: {"format": "pe-probe-checkpoint/1", "model": {"wpe.weight": t},
                "config": (lambda c: c.update(me=c) or c)({"a": 1})}, "its config contains itself"),
])
def test_self_referencing_or_diamond_checkpoints_are_refused_not_crashed_or_hung(tmp_path, capsys, build, needle):
    """QA: a dict containing itself overflowed the stack (RecursionError traceback); a 2.7 KB 'diamond' never
    finished (2^40 entries walked); the same for a checkpoint's config or metrics."""
    path = tmp_path / "crafted.pt"
    torch.save(build(torch.randn(16, 8)), path)
    assert path.stat().st_size < 20_000
    refuse(["analyze", path, "-g", "line:16", *FAST], capsys, needle)


def _rezipped(src, out, mutate, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out, "w", compression) as b:
        for name, data in mutate({n: a.read(n) for n in a.namelist()}).items():
            b.writestr(name, data)
    return out


def test_a_torch_zip_record_cut_short_is_refused_and_a_deflated_one_read_right(tmp_path, capsys):
    """QA: with mmap=True torch read a storage record cut to 10 bytes past its end (garbage analysed, exit 0) and a
    deflate-compressed record as its compressed bytes (a NaN message, or garbage)."""
    table = torch.randn(16, 8)
    base = tmp_path / "base.pt"
    torch.save({"wpe.weight": table}, base)
    short = _rezipped(base, tmp_path / "short.pt", lambda d: {k: v[:10] if "/data/" in k else v for k, v in d.items()})
    refuse(["analyze", short, "-g", "line:16", *FAST], capsys, "holds 10 bytes but its tensor's storage needs 512 bytes: the file "
                                                             "is truncated or edited")
    deflated = _rezipped(base, tmp_path / "deflated.pt", lambda d: d, zipfile.ZIP_DEFLATED)
    assert pe_probe.analyze_source(str(deflated), "line:16", n_perm=0, n_boot=0, n_null=0).table.tolist() == \
        table.double().tolist()


def test_well_formed_torch_zips_keep_the_memory_mapped_load_and_torch_format_strings_stay_out_of_messages(tmp_path):
    from pe_probe.errors import torch_load_reason
    from pe_probe.torchzip import mmap_is_safe

    state = {"wpe.weight": torch.randn(16, 8), "h": {"b": torch.zeros(3, dtype=torch.bfloat16)},
             "ids": torch.arange(5), "shared": None, "f8": torch.randn(4).to(torch.float8_e4m3fn),
             "u16": torch.zeros(3, dtype=torch.uint16)}  # these two are pickled as torch.storage.UntypedStorage
    state["shared"] = state["wpe.weight"][2:]  # a view: one storage, two tensors
    torch.save(state, tmp_path / "ok.pt")
    assert mmap_is_safe(tmp_path / "ok.pt")
    reason = torch_load_reason(RuntimeError("storage has wrong byte size: expected %ld got %ld400000000000512"))
    assert reason == "storage has wrong byte size (the file is truncated or edited)"


def test_hugging_face_files_that_are_not_regular_files_or_not_weights_are_named(tmp_path, capsys):
    """QA: a config.json that was a folder, FIFO or looping link was silently ignored; a weights file that was a
    FIFO was 'missing'; an index naming config.json as a shard got 'not a readable torch file'; a .bin shard after a
    .safetensors one was read as safetensors; a struct.error read as the reason 'error'."""
    from safetensors.torch import save_file

    folder = tmp_path / "hf"
    folder.mkdir()
    save_file({"pos_embed": torch.randn(16, 8)}, str(folder / "model.safetensors"))
    (folder / "config.json").mkdir()
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "config.json: the model's config is not a regular file")
    (folder / "config.json").rmdir()
    os.symlink("config.json", folder / "config.json")  # a link to itself: a loop
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "config.json: the model's config is not a regular file")
    os.unlink(folder / "config.json")
    os.rename(folder / "model.safetensors", folder / "real.safetensors")
    os.mkfifo(folder / "model.safetensors")
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "model.safetensors: the weights file is not a regular")
    os.unlink(folder / "model.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"pos_embed": "config.json"}}))
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "names config.json as a shard, not a weights file")
    # mixed shards: each read by its own suffix
    save_file({"pos_embed": torch.randn(16, 8)}, str(folder / "a.safetensors"))
    torch.save({"other": torch.randn(3, 3)}, folder / "b.bin")
    index.write_text(json.dumps({"weight_map": {"pos_embed": "a.safetensors", "other": "b.bin"}}))
    assert main(["analyze", str(folder), "-g", "line:16", *FAST]) == 0
    (folder / "b.bin").write_bytes(b"\x80\x02junk")
    refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "b.bin: not a readable torch file")
    (folder / "b.bin").write_bytes(b"0123456789")
    err = refuse(["analyze", folder, "-g", "line:16", *FAST], capsys, "b.bin: not a readable torch file")
    assert "torch.save: error)" not in err


def test_a_ctrl_c_swallowed_by_a_callback_still_stops_the_run_before_the_report_is_written(tmp_path, capsys,
                                                                                          monkeypatch):
    """QA: Ctrl-C raised inside a callback (numba's compiler via ctypes, a weakref callback) was printed as
    'Exception ignored ... KeyboardInterrupt' and the run went on to write its report with exit 0."""
    import pe_probe.api

    real = pe_probe.api.analyze_source

    class PressedDuringCleanup:
        def __del__(self):  # as a callback: what it raises is swallowed
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)

    def analyze_then_ctrl_c(*args, **kwargs):
        result = real(*args, **kwargs)
        obj = PressedDuringCleanup()
        del obj
        return result

    monkeypatch.setattr(pe_probe.api, "analyze_source", analyze_then_ctrl_c)
    out = tmp_path / "report"
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh process (another test may differ)
    try:
        assert main(["analyze", "builtin:sin2d:4x4", "--out", str(out), *FAST]) == 130
        err = capsys.readouterr().err
        assert err.strip() == "pe-probe: interrupted" and not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report")]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored for the next command
        monkeypatch.setattr(pe_probe.api, "analyze_source", real)
        assert main(["analyze", "builtin:sin2d:4x4", *FAST]) == 0  # nothing left pending
        # a process started with Ctrl-C ignored (cmd &, nohup) keeps it ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from pe_probe.errors import ctrl_c_kept

        with ctrl_c_kept():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_record_check_builds_nothing_big_from_a_crafted_pickle(tmp_path):
    """Review: the check's unpickler made a class per GLOBAL (2.4 GB from a 5 MB pickle) and CPython sizes its memo
    by the largest PUT index (a 14-byte pickle asked for 2-32 GB). Such pickles are left to torch's own reader."""
    import struct

    from pe_probe.torchzip import MAX_GLOBALS, OPS_SLACK, _PersistentIds, _scan_is_plain

    assert not _scan_is_plain(b"\x80\x02N" + b"r" + struct.pack("<I", 0x7FFFFFFF) + b".")
    assert not _scan_is_plain(b"\x80\x04" + b"\x8f" * (OPS_SLACK + 10) + b".")  # empty sets, no storage: 3.9 GB
    repeated = b"\x80\x04\x8c\x01a\x94\x8c\x01b\x94(" + b"h\x00h\x01\x93" * 10_000 + b"l."
    reader = _PersistentIds(repeated)
    reader.load()
    assert len(reader.classes) == 1  # one stub class per distinct name, not per GLOBAL
    names = b"".join(b"c" + b"m\n" + f"n{i}".encode() + b"\n" for i in range(MAX_GLOBALS + 1))
    with pytest.raises(Exception, match="too many distinct globals"):
        _PersistentIds(b"\x80\x02(" + names + b"l.").load()


def test_a_long_flat_loss_history_is_not_mistaken_for_a_crafted_walk(tmp_path):
    """Review: leaves counted against the walk budget, so 1,000,001 per-step losses refused the checkpoint."""
    from pe_probe.io import MAX_WALK_NODES

    path = tmp_path / "long.pt"
    torch.save({"format": "pe-probe-checkpoint/1", "model": {"wpe.weight": torch.randn(16, 8)},
                "pe_params": ["wpe.weight"], "metrics": {"train_loss_per_step": [0.1] * (MAX_WALK_NODES + 1)}}, path)
    res = pe_probe.analyze_source(str(path), "line:16", n_perm=0, n_boot=0, n_null=0)
    assert res.n_positions == 16


def test_zip_names_that_torch_would_confuse_skip_the_memory_map(tmp_path, capsys):
    """Re-attack: torch's zip reader matches names ignoring case and takes the first; a file holding data/A (4 bytes)
    and data/a (the checked 512) was memory-mapped from the short one and its garbage analysed with exit 0."""
    from pe_probe.torchzip import mmap_is_safe

    base = tmp_path / "base.pt"
    torch.save({"wpe.weight": torch.randn(16, 8)}, base)

    def twin(d):
        key = next(k for k in d if "/data/" in k)
        return {**{key.upper() if "/data/" in k else k: (v[:4] if "/data/" in k else v) for k, v in d.items()}, key: d[key]}

    twins = _rezipped(base, tmp_path / "twins.pt", twin)
    assert not mmap_is_safe(twins)
    code = main(["analyze", str(twins), "-g", "line:16", *FAST])
    assert code in (0, 2)  # torch's own (unmapped) reader decides: never garbage read past a record
    if code == 0:
        res = pe_probe.analyze_source(str(twins), "line:16", n_perm=0, n_boot=0, n_null=0)
        assert np.abs(res.table).max() < 10  # the real values (randn), not header bytes read as floats
    capsys.readouterr()


def test_a_protocol_4_torch_file_is_not_said_to_hold_code(tmp_path):
    """Re-attack: protocol 4 fetches STACK_GLOBAL's module name from the memo, and the code scan paired the wrong
    strings ('x_float16.HalfStorage'), so a torch file that torch itself cannot read was said to hold pickled code."""
    from pe_probe.io import _pickle_has_code

    torch.save({"wpe.weight": torch.randn(16, 8), "x": torch.zeros(3, dtype=torch.float16)}, tmp_path / "p4.pt",
               pickle_protocol=4)
    assert not _pickle_has_code(tmp_path / "p4.pt")
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"a": Evil()}, protocol=4))
    assert _pickle_has_code(tmp_path / "evil.pkl")  # still found through the memo


def test_a_longer_ground_truth_is_not_told_to_slice_the_table(capsys):
    err = refuse(["analyze", "builtin:sin2d:4x4", "-g", "grid:5x5", *FAST], capsys, "slicing the table cannot add rows")
    assert "--positions" not in err
    refuse(["analyze", "builtin:sin2d:4x4", "-g", "grid:3x3", *FAST], capsys, "select the table's rows with --positions A:B")


def test_evaluate_names_what_it_scored_and_points_tables_to_analyze(tmp_path, capsys):
    np.save(tmp_path / "pe.npy", np.ones((16, 4)))
    err = refuse(["evaluate", tmp_path / "pe.npy"], capsys, "is a .npy file, not a pe-probe checkpoint")
    assert "pe-probe analyze" in err and "weights-only" not in err
    torch.save({"pos_embed": torch.randn(16, 4)}, tmp_path / "sd.pt")
    refuse(["evaluate", tmp_path / "sd.pt"], capsys, "or analyse another model's PE table with pe-probe analyze")
