"""CUDA checks of the trainer: skipped without a GPU (CI never has one).

Run on a lent GPU by ``analyses/benchmarks/gpu_session.sh``; they check what the CPU tests cannot:
the fused attention kernel on the GPU, the ensemble (one batch of K on a GPU) against solo training there,
and the GPU speed options (bf16 autocast, torch.compile, CUDA graphs, TF32) end to end, for the LST and the
masked (netsim) trainers. Ordered cheapest first (the compiled runs last): the GPU session gives them
a fixed time, and a cut-off run keeps the results of those already done (``pytest -v``).
"""

import json
import math

import pytest
import torch
from test_ensemble import MEMBERS, assert_same_run, grads_outside_param_layout, quiet, tiny

from trainers.ensemble import train_ensemble
from trainers.model import attend, attention_weights
from trainers.train import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_attention_on_the_gpu_is_the_written_out_maths():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(64, 2, 16, 32, device="cuda", generator=g) for _ in range(3))
    bias = torch.randn(64, 2, 16, 16, device="cuda", generator=g)
    want = attention_weights(q.double(), k.double(), bias.double()) @ v.double()
    torch.testing.assert_close(attend(q, k, v, attn_mask=bias).double(), want, rtol=1e-3, atol=1e-4)


def test_attention_past_the_fused_kernels_batch_limit_runs_and_keeps_the_maths():
    """76,800 sequences of one head (an ensemble of 300 evaluating 256 puzzles at a time): one cuDNN call
    failed on the H200; `attend` goes through the kernel in chunks."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(76_800, 1, 16, 32, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    want = attention_weights(q.float(), k.float()) @ v.float()
    torch.testing.assert_close(attend(q, k, v).float(), want, rtol=2e-2, atol=2e-2)


def test_tf32_changes_the_gpus_float32_products_only_inside_its_context():
    from trainers.evaluate import tf32_matmuls

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 512, device="cuda", generator=g)
    b = torch.randn(512, 512, device="cuda", generator=g)
    exact = a.double() @ b.double()
    ieee = a @ b
    with tf32_matmuls(torch.device("cuda")):
        fast = a @ b
    err_ieee, err_tf32 = ((ieee - exact).abs().max().item(), (fast - exact).abs().max().item())
    assert err_tf32 > 10 * err_ieee  # 10-bit mantissa inputs vs float32's 23 bits
    assert torch.equal(a @ b, ieee)  # and off again after the context


SHARED_HYPER = [{"seed": 1, "pe.init_std": 0.1}, {"seed": 2, "pe.init_std": 2.0}]  # one (lr, wd): whole-stack AdamW


@pytest.mark.parametrize("members", [MEMBERS, SHARED_HYPER], ids=["own-lr", "shared-lr"])
def test_ensemble_matches_solo_training_on_the_gpu(tmp_path, members):
    """Per-member optimizer slices (members with their own lr) and the whole stacked tensors (one lr and
    weight decay: the fused kernel on the (K, ...) tensors, linear weights in their transposed layout)."""
    cfgs = [tiny(**m, device="cuda") for m in members]
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / "solo" / str(i), log=quiet)
    train_ensemble(cfgs, [tmp_path / "ens" / str(i) for i in range(len(cfgs))], log=quiet)
    for i in range(len(cfgs)):
        assert_same_run(tmp_path / "solo" / str(i), tmp_path / "ens" / str(i))


def test_training_steps_never_wait_for_the_gpu():
    """The solo and ensemble training steps queue their work without a host synchronisation (which would
    leave the GPU idle while Python prepares the next step): torch's sync debug mode raises on any."""
    import torch.nn.functional as F

    from pe_probe.groundtruth import grid
    from trainers.ensemble import Stack, StackedOptimizer, ensemble_forward, template_model
    from trainers.model import PETransformer
    from trainers.train import make_optimizer

    cfgs = [tiny(seed=s, device="cuda") for s in range(3)]
    coords = torch.as_tensor(grid(4, 4).coords)
    models = [PETransformer(c.model, c.pe, coords).cuda() for c in cfgs]
    x = torch.nn.functional.one_hot(torch.randint(0, 6, (3, 32, 16)), 6)[..., 1:].float().cuda()
    y = torch.randint(0, 4, (3, 32)).cuda()
    solo, solo_opt = models[0], make_optimizer(models[0], cfgs[0])
    stack = Stack.of(models)
    opt, base, params = StackedOptimizer(stack, cfgs, torch.device("cuda")), template_model(models[0]), list(stack.params.values())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            loss = F.cross_entropy(solo(x[0]).float(), y[0])
            solo_opt.zero_grad(set_to_none=True)
            loss.backward()
            solo_opt.step()
            losses = F.cross_entropy(ensemble_forward(base, stack, x).float().transpose(1, 2), y, reduction="none").mean(1)
            grads = torch.autograd.grad(losses.sum(), params)
            opt.step(dict(zip(stack.params, grads)))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("compile,bf16,graphs,tf32", [(False, True, False, False), (True, False, False, False),
                                                      (True, True, False, False), (False, False, True, False),
                                                      (False, True, True, False), (False, False, False, True),
                                                      (True, False, False, True)])
def test_gpu_speed_options_train_to_finite_metrics(tmp_path, compile, bf16, graphs, tf32):
    cfg = tiny(device="cuda")
    metrics = train(cfg, tmp_path / "run", log=quiet, compile=compile, bf16=bf16, cuda_graphs=graphs, tf32=tf32)
    assert math.isfinite(metrics["train_loss"]) and 0 <= metrics["ood_acc"] <= 1
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["epoch"] == cfg.optim.epochs
    ens = train_ensemble([tiny(seed=s, device="cuda") for s in (0, 1)], [tmp_path / "e0", tmp_path / "e1"],
                         log=quiet, compile=compile, amp=bf16, cuda_graphs=graphs, tf32=tf32)
    assert all(math.isfinite(m["train_loss"]) for m in ens)
    prov = [json.loads(s) for s in (tmp_path / "e1" / "provenance.jsonl").read_text().splitlines()]
    assert prov[-1]["tf32"] is tf32 and torch.get_float32_matmul_precision() == "highest"  # restored after training


@pytest.mark.parametrize("compile,bf16,graphs,tf32", [(False, True, False, False), (True, True, False, False),
                                                      (False, False, True, False), (False, False, False, True)])
def test_masked_trainer_gpu_speed_options_train_to_finite_metrics(tmp_path, compile, bf16, graphs, tf32):
    from trainers.config import make_masked_config
    from trainers.train_masked import train_masked

    cfg = make_masked_config("netsim", "quick", {"device": "cuda", "model.d_model": 16, "optim.epochs": 2,
                                                 "data.n_train": 96, "data.n_test": 32})
    metrics = train_masked(cfg, tmp_path / "run", log=quiet, compile=compile, bf16=bf16, cuda_graphs=graphs, tf32=tf32)
    assert math.isfinite(metrics["train_loss"]) and math.isfinite(metrics["ood_mse"])


def test_compiled_attention_on_the_gpu_takes_the_matmul_softmax_path_and_keeps_the_maths(monkeypatch):
    """Inside a compiled function with 16 keys `attend` does not call the fused kernel (the path measured
    faster on the H200) and gives the same values and gradients as float64 maths."""
    import torch.nn.functional as F

    calls = []
    real = F.scaled_dot_product_attention

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(64, 2, 16, 32, device="cuda", generator=g, requires_grad=True) for _ in range(3))
    torch._dynamo.reset()
    out = torch.compile(attend)(q, k, v)
    assert not calls
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    want = attention_weights(qd, kd) @ vd
    torch.testing.assert_close(out.double(), want, rtol=1e-3, atol=1e-4)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    for a, b in zip(grads, torch.autograd.grad(want.sum(), (qd, kd, vd))):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-4)
    attend(q, k, v)  # eager: the fused kernel
    assert calls


def test_compiled_ensemble_on_the_gpu_trains_like_the_eager_one(tmp_path):
    """The compiled group step (matmul-softmax attention, Inductor's kernels) gives the eager run's
    metrics and weights within the ensemble-vs-solo tolerances."""
    cfgs = [tiny(**m, device="cuda") for m in SHARED_HYPER]
    train_ensemble(cfgs, [tmp_path / "eager" / str(i) for i in range(2)], log=quiet)
    torch._dynamo.reset()
    train_ensemble(cfgs, [tmp_path / "compiled" / str(i) for i in range(2)], log=quiet, compile=True)
    for i in range(2):
        assert_same_run(tmp_path / "eager" / str(i), tmp_path / "compiled" / str(i))


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_group_gradients_arrive_in_the_parameters_layout_on_the_gpu(compile):
    """The second lease's compiled K = 300 bf16 step spent 14% of its GPU time in about 20 elementwise
    copies per step, as many as the stack's transposed weights (18): a gradient in another layout than its
    parameter would be one such copy (`trainers.train.in_layout_of`). This says whether it is."""
    assert grads_outside_param_layout("cuda", compile, bf16=True) == []


def test_bf16_attention_logits_on_the_gpu_are_one_product_written_in_float32():
    """On CUDA, bf16 q and k give their logits through CUDA's out_dtype kernel (`trainers.logits.HalfLogits`):
    the float32 product's values up to the order of the sums, and its input gradients up to about one bf16
    rounding of the incoming gradient (the fourth lease: 1.7e-7 and 2.6e-3)."""
    from trainers.logits import float32_logits, logits_product, uses_half_logits

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(512, 1, 16, 160, device="cuda", generator=g).bfloat16().requires_grad_() for _ in range(2))
    w = torch.randn(512, 1, 16, 16, device="cuda", generator=g)
    assert uses_half_logits(q, k)
    outs = []
    for fn in (logits_product, float32_logits):
        y = fn(q, k)
        assert y.dtype == torch.float32
        outs.append((y, *torch.autograd.grad((y * w).sum(), (q, k))))
    rel = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(*outs)]
    assert rel[0] < 1e-5 and max(rel[1:]) < 1e-2, rel


def test_bf16_attention_logits_under_vmap_on_the_gpu_equal_the_batched_call():
    """`HalfLogits`' vmap rule (the ensemble's path for attention-side PEs) on CUDA, where its forward is the
    out_dtype product, which has no batching rule of its own: one call over all models, the same values and
    gradients as calling it on the stacked batch directly."""
    from torch.func import vmap

    from trainers.logits import half_logits

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(3, 64, 1, 16, 32, device="cuda", generator=g).bfloat16().requires_grad_() for _ in range(2))
    w = torch.randn(3, 64, 1, 16, 16, device="cuda", generator=g)
    y = vmap(half_logits)(q, k)
    direct = half_logits(q, k)
    assert y.dtype == torch.float32 and torch.equal(y, direct)
    got = torch.autograd.grad((y * w).sum(), (q, k))
    want = torch.autograd.grad((direct * w).sum(), (q, k))
    assert all(torch.equal(a, b) for a, b in zip(got, want))
