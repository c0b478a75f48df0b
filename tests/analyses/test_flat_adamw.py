"""The flat_adamw experiment: torch's fused AdamW run once on flat buffers, against torch.optim.AdamW itself."""

from __future__ import annotations

import copy
import io
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analyses" / "benchmarks"))

from flat_adamw import ALIGN, FlatAdamW  # noqa: E402

LR, WD = 1e-2, 0.1


def odd_model(seed: int = 0) -> nn.Module:
    """Parameter sizes that are no multiple of any vector width (35, 7, 21, 3) and an unused parameter."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3))
    model.unused = nn.Parameter(torch.randn(6))
    return model


def loss_of(model: nn.Module, x: torch.Tensor, use_unused: bool = False) -> torch.Tensor:
    out = model(x).pow(2).sum()
    return out + model.unused.sum() if use_unused else out


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int = 1, use_unused: bool = True) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(11, 5, generator=g)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, x, use_unused)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def pair() -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, FlatAdamW]:
    ref = odd_model()
    flat = copy.deepcopy(ref)
    return (ref, torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=WD, fused=True),
            flat, FlatAdamW(flat.parameters(), lr=LR, weight_decay=WD))


def assert_same_weights(a: nn.Module, b: nn.Module, atol: float = 1e-7) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q, p, rtol=0, atol=atol, msg=name)


def test_parameters_become_aligned_views_of_one_buffer_with_their_values():
    ref, _, model, opt = pair()
    storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert len(storages) == 1
    assert all(p.storage_offset() % ALIGN == 0 for p in model.parameters())
    assert_same_weights(ref, model, atol=0)
    assert opt.flat


def test_steps_match_torch_fused_adamw():
    ref, ref_opt, model, opt = pair()
    assert train(model, opt, 6) == pytest.approx(train(ref, ref_opt, 6), rel=1e-6)
    assert opt.flat  # every trained parameter had a gradient: the flat kernel ran every step
    assert_same_weights(ref, model)
    steps = [st["step"] for st in opt.state.values()]
    assert all(float(s) == 6.0 for s in steps)


def test_the_gaps_between_parameters_stay_zero():
    _, _, model, opt = pair()
    train(model, opt, 3)
    flat = opt._flat.detach()
    covered = torch.zeros(flat.numel(), dtype=torch.bool)
    for p, o in zip(opt._trained, opt._offsets):
        covered[o : o + p.numel()] = True
    assert (~covered).any() and torch.all(flat[~covered] == 0)


def test_a_parameter_without_gradient_falls_back_to_adamw_exactly():
    ref, ref_opt, model, opt = pair()
    train(ref, ref_opt, 2)
    train(model, opt, 2)
    assert opt.flat
    before = model.unused.detach().clone()
    # now `unused` gets no gradient: AdamW skips it (no weight decay, no momentum step)
    assert train(model, opt, 3, seed=2, use_unused=False) == pytest.approx(
        train(ref, ref_opt, 3, seed=2, use_unused=False), rel=1e-6)
    assert not opt.flat
    assert torch.equal(model.unused.detach(), before)
    assert_same_weights(ref, model)
    assert float(opt.state[model.unused]["step"]) == 2.0 and float(opt.state[model[0].weight]["step"]) == 5.0


def test_state_dict_is_adamws_format_with_a_counter_per_parameter():
    ref, ref_opt, model, opt = pair()
    train(ref, ref_opt, 3)
    train(model, opt, 3)
    sd, ref_sd = opt.state_dict(), ref_opt.state_dict()
    assert sd["param_groups"] == ref_sd["param_groups"]
    assert sd["state"].keys() == ref_sd["state"].keys()
    for i, st in sd["state"].items():
        assert st.keys() == ref_sd["state"][i].keys()
        for key, v in st.items():
            torch.testing.assert_close(v, ref_sd["state"][i][key], rtol=0, atol=1e-7)
    counters = [st["step"] for st in sd["state"].values()]
    assert len({id(c) for c in counters}) == len(counters)  # no shared counter to leak into a plain AdamW
    assert all(st["exp_avg"].untyped_storage().nbytes() == st["exp_avg"].nbytes for st in sd["state"].values())


def test_resume_either_way_between_flat_and_plain_adamw():
    ref, ref_opt, model, opt = pair()
    train(ref, ref_opt, 3)
    train(model, opt, 3)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)

    def restored(flat: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
        buffer.seek(0)
        saved = torch.load(buffer, weights_only=True)
        m = odd_model(seed=5)
        o = (FlatAdamW(m.parameters(), lr=LR, weight_decay=WD) if flat
             else torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD, fused=True))
        m.load_state_dict(saved["model"])
        o.load_state_dict(saved["optimizer"])
        return m, o

    plain_m, plain_o = restored(flat=False)
    flat_m, flat_o = restored(flat=True)
    expected = train(ref, ref_opt, 3, seed=3)
    assert train(plain_m, plain_o, 3, seed=3) == pytest.approx(expected, rel=1e-6)
    assert train(flat_m, flat_o, 3, seed=3) == pytest.approx(expected, rel=1e-6)
    assert flat_o.flat
    for m in (plain_m, flat_m):
        assert_same_weights(ref, m)
    assert all(float(st["step"]) == 6.0 for o in (plain_o, flat_o) for st in o.state.values())


def test_state_set_from_outside_and_a_new_learning_rate_are_taken():
    ref, ref_opt, model, opt = pair()
    train(ref, ref_opt, 2)
    train(model, opt, 1, seed=9)  # flat buffers laid out; the state below replaces what they hold
    # as `StackedOptimizer.member_optimizer` does: state put in by hand, one tensor each
    for p, q in zip(ref.parameters(), model.parameters()):
        q.data.copy_(p.detach())
        opt.state[q] = {key: v.clone() for key, v in ref_opt.state[p].items()}
    for o in (ref_opt, opt):
        o.param_groups[0]["lr"] = LR / 3
    assert train(model, opt, 3, seed=4) == pytest.approx(train(ref, ref_opt, 3, seed=4), rel=1e-6)
    assert opt.flat
    assert_same_weights(ref, model)


def test_refuses_what_the_flat_kernel_does_not_take():
    with pytest.raises(ValueError, match="float32 CPU"):
        FlatAdamW(nn.Linear(2, 2).double().parameters())


def test_the_experiment_flag_gives_the_single_model_trainer_flat_adamw(monkeypatch):
    import bench_train
    import trainers.train
    from step_experiments import EXPERIMENTS

    monkeypatch.setattr(trainers.train, "make_optimizer", trainers.train.make_optimizer)  # restored after the test
    assert type(bench_train._our_model(16, torch.device("cpu"))[1]) is torch.optim.AdamW
    EXPERIMENTS["flat_adamw"][1]()
    model, opt, _ = bench_train._our_model(16, torch.device("cpu"))
    assert isinstance(opt, FlatAdamW) and opt.param_groups[0]["params"] == list(model.parameters())
