"""The MLP's GELU (`trainers.gelu`): ATen's kernels behind an operator opaque to Inductor in compiled CPU steps."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from trainers.gelu import aten_gelu, aten_gelu_backward, gelu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_operator_is_torchs_exact_gelu_forward_and_backward(dtype):
    x = (torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 3).to(dtype).requires_grad_(True)
    up = torch.randn(5, 7, generator=torch.Generator().manual_seed(1)).to(dtype)
    y = aten_gelu(x)
    (gx,) = torch.autograd.grad(y, x, up)
    ref = F.gelu(x)
    (ref_gx,) = torch.autograd.grad(ref, x, up)
    assert y.dtype == dtype and torch.equal(y, ref) and torch.equal(gx, ref_gx)
    assert not torch.equal(y, F.gelu(x, approximate="tanh"))  # the exact (erf) form, not the tanh one


def test_its_vmap_rules_batch_along_any_dimension():
    x = torch.randn(3, 4, 5)
    assert torch.equal(vmap(aten_gelu, in_dims=1)(x), F.gelu(x).movedim(1, 0))
    grad = torch.randn(4, 5)
    # one input batched, the other shared: the shared one is broadcast over the batch
    out = vmap(aten_gelu_backward, in_dims=(None, 0))(grad, x)
    assert torch.equal(out, torch.ops.aten.gelu_backward(grad.expand(3, 4, 5), x))
    out = vmap(aten_gelu_backward, in_dims=(2, 0))(x.permute(1, 2, 0), x.permute(0, 1, 2)[:, :4, :5].contiguous())
    assert torch.equal(out, torch.ops.aten.gelu_backward(x, x))


def test_eager_calls_are_plain_torch_gelu_and_compiled_cpu_ones_the_opaque_operator():
    """Outside torch.compile `gelu` is ``F.gelu`` (no operator in between); in a compiled CPU function the
    graph calls the operator, so Inductor neither generates its own GELU kernels nor recomputes the GELU in the
    backward. The compiled forward and gradients equal the eager ones bit for bit (the same ATen kernels)."""
    from torch._inductor.utils import run_and_get_code
    from torch.profiler import profile

    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).requires_grad_(True)
    with profile() as prof:
        gelu(x)
    assert not any("pe_trainers" in e.key for e in prof.key_averages())

    torch._dynamo.reset()
    fn = torch.compile(lambda t: (gelu(t * 2) * 3).sum(), dynamic=False)
    loss, codes = run_and_get_code(lambda: torch.autograd.grad(fn(x), x)[0])
    text = "\n".join(codes)
    assert "pe_trainers.gelu" in text and "pe_trainers.gelu_backward" in text
    assert ".erf()" not in text  # Inductor wrote no GELU of its own
    (ref,) = torch.autograd.grad((F.gelu(x * 2) * 3).sum(), x)
    assert torch.equal(loss, ref)


def test_a_compiled_training_step_gives_the_eager_steps_gradients():
    """A compiled ensemble group's gradients against the eager group's (the GELU was the part of the step
    whose kernels differed most between the two)."""
    from tests.trainers.test_ensemble import two_member_group
    from trainers.ensemble import group_loss, template_model

    _, models, stack, x, y = two_member_group()
    base = template_model(models[0])
    loss = group_loss(base, stack.buffers)
    torch._dynamo.reset()
    grads = [torch.autograd.grad(f(stack.params, x, y).sum(), list(stack.params.values()))
             for f in (loss, torch.compile(loss, dynamic=False))]
    for (name, _), eager, compiled in zip(stack.params.items(), *grads):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6, msg=name)
