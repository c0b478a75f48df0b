"""--tf32: TensorFloat-32 matrix products in the training step (GPU only).

TF32 only changes CUDA matrix products, so on the CPU these tests check the option's plumbing: it is
refused off a GPU before anything is written, and with the device check bypassed the flag is on exactly
during the training steps (forward, backward, optimizer) and off during evaluation, for the single-model,
masked and ensemble trainers. tests/trainers/test_cuda.py trains with it on a GPU.
"""

from contextlib import nullcontext

import pytest
import torch

import trainers.ensemble as ens
import trainers.train as tr
from pe_probe.errors import InputError
from pe_probe.cli import main
from trainers.cli import train_main
from trainers.evaluate import MatmulPrecision, tf32_matmuls

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # the recording hooks' own warning

TINY = ["--d-model", "16", "--layers", "1", "--heads", "2", "--epochs", "1", "--n-per-level", "12",
        "--batch-size", "32", "--min-jaccard", "0.5"]


def flag() -> str:
    """torch's float32 matrix-product precision: "high" is TF32 on CUDA, "highest" IEEE float32."""
    return torch.get_float32_matmul_precision()


def test_the_precision_context_sets_the_flag_and_restores_it_every_time():
    before = flag()
    ctx = MatmulPrecision("high")
    for _ in range(2):  # re-entered once per training step
        with ctx:
            assert flag() == "high" and torch.backends.cuda.matmul.allow_tf32
            if hasattr(torch.backends, "fp32_precision"):  # torch >= 2.9: the new flag agrees (no "mixed API" state)
                assert torch.backends.cuda.matmul.fp32_precision == "tf32"
            with MatmulPrecision("highest"):
                assert flag() == "highest"
            assert flag() == "high"
        assert flag() == before
    with pytest.raises(ZeroDivisionError):
        with ctx:
            1 / 0
    assert flag() == before


def test_tf32_is_refused_off_a_gpu_with_a_one_line_error():
    with pytest.raises(InputError, match="--tf32 needs a CUDA GPU") as e:
        tf32_matmuls(torch.device("cpu"))
    assert "\n" not in str(e.value)
    with tf32_matmuls(torch.device("cpu"), enabled=False):
        assert flag() == "highest"
    assert tr.SpeedOptions(tf32=True).cli_args() == ["--tf32"]
    assert tr.SpeedOptions(tf32=True).recorded()["tf32"] is True


def test_tf32_on_the_cpu_writes_nothing(tmp_path):
    for argv in (["--out", str(tmp_path / "run")], ["--out", str(tmp_path / "ens"), "--ensemble-seeds", "0,1"]):
        with pytest.raises(InputError, match="--tf32 needs a CUDA GPU"):
            train_main(["lst", "--tf32", "--device", "cpu", *argv, *TINY])
    assert main(["train", "netsim", "--out", str(tmp_path / "masked"), "--tf32", "--device", "cpu"]) == 2
    assert not any(tmp_path.iterdir())


@pytest.fixture
def tf32_anywhere(monkeypatch):
    """Bypass the GPU check: the flag is set on the CPU too, where it changes no arithmetic."""

    def any_device(device, enabled=True):
        return MatmulPrecision("high") if enabled else nullcontext()

    import trainers.evaluate

    for module in (trainers.evaluate, tr, ens):
        monkeypatch.setattr(module, "tf32_matmuls", any_device)


def record_flags():
    """(flag, grad enabled) in every module forward and backward of the single-model trainers."""
    seen = {"train_forward": set(), "backward": set(), "eval_forward": set()}

    def forward(module, args, out):
        seen["train_forward" if torch.is_grad_enabled() else "eval_forward"].add(flag())

    def backward(module, grad_in, grad_out):
        seen["backward"].add(flag())

    hooks = [torch.nn.modules.module.register_module_forward_hook(forward),
             torch.nn.modules.module.register_module_full_backward_hook(backward)]
    return seen, hooks


def test_tf32_covers_the_training_step_and_not_evaluation(tmp_path, tf32_anywhere):
    import json

    before = flag()
    seen, hooks = record_flags()
    try:
        assert train_main(["lst", "--out", str(tmp_path / "tf32"), "--tf32", *TINY]) == 0
    finally:
        for h in hooks:
            h.remove()
    assert seen == {"train_forward": {"high"}, "backward": {"high"}, "eval_forward": {before}}
    assert flag() == before
    prov = [json.loads(s) for s in (tmp_path / "tf32" / "provenance.jsonl").read_text().splitlines()]
    assert prov[-1]["tf32"] is True


def test_tf32_covers_the_masked_step_and_not_evaluation(tmp_path, tf32_anywhere):
    before = flag()
    seen, hooks = record_flags()
    try:
        assert main(["train", "netsim", "--out", str(tmp_path / "m"), "--tf32", "--epochs", "1", "--n-train", "64",
                     "--d-model", "12"]) == 0
    finally:
        for h in hooks:
            h.remove()
    assert seen == {"train_forward": {"high"}, "backward": {"high"}, "eval_forward": {before}}


def test_tf32_covers_the_ensemble_step_and_not_evaluation(tmp_path, tf32_anywhere, monkeypatch):
    before = flag()
    seen = {"forward": set(), "backward": set(), "optimizer": set(), "eval": set()}
    real_forward, real_step, real_eval = ens.explicit_forward, ens.StackedOptimizer.step, ens.ensemble_split_metrics

    def forward(*args, **kw):
        out = real_forward(*args, **kw)
        if torch.is_grad_enabled():
            seen["forward"].add(flag())
            out.register_hook(lambda g: seen["backward"].add(flag()))
        return out

    def step(self, grads):
        seen["optimizer"].add(flag())
        return real_step(self, grads)

    def evaluate(*args, **kw):
        seen["eval"].add(flag())
        return real_eval(*args, **kw)

    monkeypatch.setattr(ens, "explicit_forward", forward)
    monkeypatch.setattr(ens.StackedOptimizer, "step", step)
    monkeypatch.setattr(ens, "ensemble_split_metrics", evaluate)
    argv = ["lst", "--out", str(tmp_path / "ens"), "--ensemble-seeds", "0,1", "--ensemble-workers", "1", "--tf32", *TINY]
    assert train_main(argv) == 0
    assert seen == {"forward": {"high"}, "backward": {"high"}, "optimizer": {"high"}, "eval": {before}}
    assert flag() == before
