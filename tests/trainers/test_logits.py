"""The attention logits q k^T (`trainers.logits`): the float32 product, and `HalfLogits` (float32 logits, a
bf16 backward) that bf16 steps take on CUDA (one product written in float32) and on the CPU (the forward
over the upcast inputs)."""

import pytest
import torch

from trainers.logits import HalfLogits, flat_bmm, float32_logits, half_logits, logits_product, uses_half_logits


def _qk(dtype=torch.float32, shape=(3, 2, 5, 8), keys=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=g).to(dtype)
    k = torch.randn(*shape[:-2], keys, shape[-1], generator=g).to(dtype)
    return q, k


def test_float32_logits_upcast_half_inputs_and_keep_wider_ones():
    q, k = _qk(torch.bfloat16)
    y = float32_logits(q, k)
    assert y.dtype == torch.float32 and y.shape == (3, 2, 5, 7)
    assert torch.equal(y, q.float() @ k.float().transpose(-2, -1))
    assert float32_logits(q.double(), k.double()).dtype == torch.float64


def test_the_cpu_takes_half_logits_for_bf16_inputs_with_the_float32_products_forward():
    """On the CPU the forward of `HalfLogits` is the float32 product itself: the logits are equal bit for bit;
    only the backward (bf16 products) differs."""
    q, k = _qk(torch.bfloat16)
    assert uses_half_logits(q, k)
    assert torch.equal(logits_product(q, k), float32_logits(q, k))
    qs, ks = (t.requires_grad_() for t in _qk(torch.bfloat16))
    gq, gk = torch.autograd.grad(logits_product(qs, ks).sum(), (qs, ks))
    hq, hk = torch.autograd.grad(half_logits(qs, ks).sum(), (qs, ks))
    assert torch.equal(gq, hq) and torch.equal(gk, hk)


def test_the_cpu_takes_the_float32_product_for_float32_inputs():
    q, k = _qk(torch.float32)
    assert not uses_half_logits(q, k)
    assert torch.equal(logits_product(q, k), float32_logits(q, k))


def test_half_logits_on_strided_slices_equal_those_on_contiguous_copies():
    """q and k as the CPU step hands them over, slices of one fused qkv output (made contiguous inside
    `half_logits` on the CPU): the same logits and gradients as on contiguous copies."""
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(6, 1, 5, 24, generator=g).bfloat16().requires_grad_()
    q, k, _ = qkv.split(8, dim=-1)
    assert not q.is_contiguous()
    y = half_logits(q, k)
    w = torch.randn(y.shape, generator=g)
    (gqkv,) = torch.autograd.grad((y * w).sum(), (qkv,))
    qc, kc = (t.detach().contiguous().requires_grad_() for t in (q, k))
    yc = half_logits(qc, kc)
    gq, gk = torch.autograd.grad((yc * w).sum(), (qc, kc))
    assert torch.equal(y, yc)
    assert torch.equal(gqkv[..., :8], gq) and torch.equal(gqkv[..., 8:16], gk)
    assert not gqkv[..., 16:].any()


def test_half_logits_forward_and_backward_against_brute_force():
    """Forward: the float32 product of the same bf16 numbers. Backward: the incoming gradient rounded to bf16
    once, then two products whose results are rounded to bf16 (what a bf16 product under autocast gives)."""
    q, k = (t.requires_grad_() for t in _qk(torch.bfloat16))
    y = half_logits(q, k)
    assert y.dtype == torch.float32 and torch.equal(y, q.float() @ k.float().transpose(-2, -1))
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    gq, gk = torch.autograd.grad((y * w).sum(), (q, k))
    assert gq.dtype == gk.dtype == torch.bfloat16
    wb = w.bfloat16().float()
    assert torch.equal(gq, (wb @ k.float()).bfloat16())
    assert torch.equal(gk, (wb.transpose(-2, -1) @ q.float()).bfloat16())


def test_half_logits_stay_within_one_bf16_rounding_of_the_float32_products_gradients():
    """Against the float32 product's backward (the gradient multiplied in float32, rounded once at the end):
    the same logits, input gradients apart by about one bf16 rounding (2^-8 ~ 4e-3) and no more."""
    q, k = (t.requires_grad_() for t in _qk(torch.bfloat16, shape=(64, 1, 16, 32), keys=16))
    w = torch.randn(64, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    outs = []
    for fn in (half_logits, float32_logits):
        y = fn(q, k)
        outs.append((y, *torch.autograd.grad((y * w).sum(), (q, k))))
    rel = [((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(*outs)]
    assert rel[0] == 0.0
    assert all(1e-4 < r < 5e-3 for r in rel[1:]), rel


def test_half_logits_compile_to_the_eager_values():
    """Dynamo traces the autograd.Function (the CUDA steps that use it are compiled)."""
    q, k = (t.requires_grad_() for t in _qk(torch.bfloat16))
    torch._dynamo.reset()
    compiled = torch.compile(half_logits, fullgraph=True)
    y = compiled(q, k)
    assert torch.equal(y, half_logits(q, k))
    g = torch.autograd.grad(y.sum(), (q, k))
    for a, b in zip(g, torch.autograd.grad(half_logits(q, k).sum(), (q, k))):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_logits_product_compiles_on_the_cpu_to_the_float32_products_values():
    """The choice between the two products traces under torch.compile (compiled steps call it)."""
    q, k = _qk(torch.bfloat16)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(logits_product, fullgraph=True)(q, k), float32_logits(q, k))


def test_half_logits_flatten_and_restore_the_leading_dimensions():
    q, k = _qk(torch.bfloat16, shape=(2, 3, 4, 1, 8), keys=6)
    y = half_logits(q, k)
    assert y.shape == (2, 3, 4, 1, 6)
    assert torch.equal(y, HalfLogits.apply(q.reshape(-1, 1, 8), k.reshape(-1, 6, 8)).view(2, 3, 4, 1, 6))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_uses_half_logits_only_for_bf16_inputs(dtype):
    q, k = _qk(dtype)
    assert not uses_half_logits(q, k)


def test_uses_half_logits_needs_bf16_on_both_inputs_and_on_cuda_the_kernel(monkeypatch):
    """The choice itself, on stand-ins for CUDA tensors (only their device type and dtype are read)."""
    from types import SimpleNamespace

    import trainers.logits

    def t(device, dtype):
        return SimpleNamespace(device=SimpleNamespace(type=device), dtype=dtype)

    bf16, cuda = torch.bfloat16, "cuda"
    monkeypatch.setattr(trainers.logits, "HAS_OUT_DTYPE_BMM", True)
    assert uses_half_logits(t(cuda, bf16), t(cuda, bf16))
    assert not uses_half_logits(t(cuda, torch.float16), t(cuda, torch.float16))
    assert not uses_half_logits(t(cuda, bf16), t(cuda, torch.float32))
    assert uses_half_logits(t("cpu", bf16), t("cpu", bf16))
    assert not uses_half_logits(t("cpu", bf16), t("cpu", torch.float32))
    assert not uses_half_logits(t("mps", bf16), t("mps", bf16))
    monkeypatch.setattr(trainers.logits, "HAS_OUT_DTYPE_BMM", False)  # a torch without aten::bmm.dtype
    assert not uses_half_logits(t(cuda, bf16), t(cuda, bf16))
    assert uses_half_logits(t("cpu", bf16), t("cpu", bf16))  # the CPU's forward needs no such kernel


def test_half_logits_under_vmap_equal_the_batched_call():
    """`HalfLogits`' vmap rule (the ensemble's path for attention-side PEs): the logits and gradients of
    vmap over the models equal one call over all of them, also with an input shared by every model."""
    from torch.func import vmap

    g = torch.Generator().manual_seed(4)
    q = torch.randn(3, 4, 1, 5, 8, generator=g).bfloat16().requires_grad_()
    k = torch.randn(3, 4, 1, 6, 8, generator=g).bfloat16().requires_grad_()
    y = vmap(half_logits)(q, k)
    w = torch.randn(y.shape, generator=g)
    got = torch.autograd.grad((y * w).sum(), (q, k))
    direct = half_logits(q, k)
    want = torch.autograd.grad((direct * w).sum(), (q, k))
    assert torch.equal(y, direct)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    shared = vmap(half_logits, in_dims=(0, None))(q, k[0])
    assert shared.shape == (3, 4, 1, 5, 6) and torch.equal(shared[2], half_logits(q[2], k[0]))


@pytest.mark.parametrize("lead", [(), (5,), (3, 2), (2, 3, 2)])
def test_flat_bmm_is_matmul_over_any_leading_dimensions(lead):
    """`flat_bmm` (the attention's products as one 3-d batch) gives torch.matmul's values and gradients for no,
    one, two (batch, heads) and three (models, batch, heads) leading dimensions, transposed operands included,
    and under vmap (the ensemble's path for attention-side PEs)."""
    g = torch.Generator().manual_seed(len(lead))
    a = torch.randn(*lead, 4, 6, generator=g, requires_grad=True)
    b = torch.randn(*lead, 5, 6, generator=g, requires_grad=True)
    ours, ref = flat_bmm(a, b.transpose(-2, -1)), a @ b.transpose(-2, -1)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    w = torch.randn(ref.shape, generator=g)
    for x, y in zip(torch.autograd.grad((ours * w).sum(), (a, b)), torch.autograd.grad((ref * w).sum(), (a, b))):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)
    if lead:
        mapped = torch.func.vmap(flat_bmm)(a.detach(), b.detach().transpose(-2, -1))
        torch.testing.assert_close(mapped, ref.detach(), rtol=1e-6, atol=1e-6)
