"""`trainers.checkpoint.load_checkpoint`: every refusal is a one-line InputError naming the file and the fix,
with the bare reason kept for callers that give their own fix; a pickle that would run code is refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from pe_probe.groundtruth import grid
from trainers.checkpoint import (
    CONTRACT_KEYS,
    FORMAT,
    CheckpointRefused,
    load_checkpoint,
    make_payload,
    save_checkpoint,
)
from trainers.config import ModelConfig, PEConfig
from trainers.model import PETransformer


class _RunsCode:  # a pickle that would call os.system if unpickled without weights_only
    def __reduce__(self):
        import os

        return os.system, ("echo ran",)


@pytest.mark.parametrize("write, message, reason", [
    (lambda p: p.write_bytes(b"not a zip"), r"cannot read checkpoint .*c\.pt: .*; pass the \.pt file of a run",
     r"^(?!.*pass the).+"),
    (lambda p: torch.save({"format": "other"}, p), rf"c\.pt is not a pe-probe checkpoint \(expected format '{FORMAT}'\)",
     rf"^not format '{FORMAT}'$"),
    (lambda p: torch.save({"format": FORMAT}, p), r"checkpoint .*c\.pt lacks key\(s\) ", r"^lacks key\(s\) "),
    (lambda p: torch.save({"format": FORMAT, "x": _RunsCode()}, p), r"cannot read checkpoint .*weights-only reader refused",
     r"^torch's weights-only reader refused it$"),
    # as `pe-probe analyze` words them (a review saw "EOFError" and a bare "105", a KeyError's text)
    (lambda p: p.write_bytes(b""), r"cannot read checkpoint .*c\.pt: it ends too early: empty or truncated;",
     r"^it ends too early"),
    (lambda p: p.write_bytes(b"hi"), r"cannot read checkpoint .*c\.pt: corrupt, or not written by torch\.save: \w+Error;",
     r"^corrupt, or not written by torch\.save"),
])
def test_refusals_name_the_file_the_fix_and_keep_the_reason(tmp_path, write, message, reason):
    path = tmp_path / "c.pt"
    write(path)
    with pytest.raises(CheckpointRefused, match=message) as e:
        load_checkpoint(path)
    assert isinstance(e.value, InputError) and "\n" not in str(e.value)
    assert e.value.reason and __import__("re").search(reason, e.value.reason)
    again = pickle.loads(pickle.dumps(e.value))  # raised in a worker process, it reaches the parent whole
    assert type(again) is CheckpointRefused and str(again) == str(e.value) and again.reason == e.value.reason


def test_a_legacy_pickle_is_refused_without_torch_warning_and_a_non_utf8_name_reads(tmp_path, recwarn):
    """A protocol-4 pickle made torch warn ("Detected pickle protocol 4"): two stray stderr lines before the one-line
    error. A file name that is not UTF-8 loads (torch's C++ reader takes UTF-8 names only)."""
    import os

    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps({"x": _RunsCode()}, protocol=4))
    with pytest.raises(CheckpointRefused, match="weights-only reader refused"):
        load_checkpoint(path)
    assert not [w for w in recwarn if "pickle protocol" in str(w.message)]
    from pe_probe.torchfile import read_torch_file

    odd = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff.pt"))
    torch.save({"t": torch.arange(3)}, tmp_path / "ok.pt")
    os.replace(tmp_path / "ok.pt", odd)
    for mmap in (False, True):
        assert torch.equal(read_torch_file(odd, mmap=mmap)["t"], torch.arange(3))


def test_the_missing_keys_are_all_named(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"format": FORMAT, CONTRACT_KEYS[1]: 1}, path)  # CONTRACT_KEYS[0] is "format"
    with pytest.raises(CheckpointRefused) as e:
        load_checkpoint(path)
    assert e.value.reason == f"lacks key(s) {', '.join(CONTRACT_KEYS[2:])}"


def _tiny_payload(gt):
    model = PETransformer(ModelConfig(d_model=16, n_layers=1, n_heads=2), PEConfig(), torch.as_tensor(gt.coords))
    return make_payload(model, {}, gt, step=1, epoch=1, metrics={})


def test_a_checkpoint_without_its_pe_params_is_refused(tmp_path):
    """Kills: "pe_params" dropped from CONTRACT_KEYS (test_the_missing_keys_are_all_named reads the constant)."""
    path = tmp_path / "c.pt"
    payload = _tiny_payload(grid(4, 4))
    save_checkpoint(payload, path)
    assert load_checkpoint(path)["pe_params"] == ["pe.table"]
    del payload["pe_params"]
    save_checkpoint(payload, path)
    with pytest.raises(CheckpointRefused, match="lacks key.*pe_params"):
        load_checkpoint(path)


def test_the_ground_truth_coordinates_are_stored_exactly():
    """Kills: coords stored as float32 (a random layout's positions would be rounded)."""
    from trainers.tasks.netsim import node_layout

    gt = node_layout("random", 16, 2, seed=3)  # non-integer positions, float64
    stored = _tiny_payload(gt)["ground_truth"]["coords"]
    assert stored.dtype == torch.float64 and np.array_equal(stored.numpy(), gt.coords)
