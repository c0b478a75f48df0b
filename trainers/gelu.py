"""The MLP's activation: the exact (erf) GELU, the study's, with a faster form for compiled CPU steps.

In a compiled CPU step Inductor writes its own C++ for the GELU and its derivative. On an AVX-512 CPU, on
bf16, it took 1.8x (forward) and 1.6x (backward) as long as ATen's own kernels (2M elements, one thread;
`analyses/benchmarks/bench_gelu.py`, reports/benchmarks/cpu-avx512/gelu/). Its generated code calls Sleef's
exp out of line, with the vector registers spilled around each call (seen in its disassembly; whether that
is the whole difference we did not establish). Its partitioner also recomputes
the forward GELU in the backward pass rather than keeping it. `aten_gelu` therefore wraps ATen's kernels in
an operator Inductor cannot see into (`torch.library.custom_op`): the forward's output is kept for the
backward, and both directions run ATen's kernels, the very ones an eager step runs, so compiled and eager
steps compute the GELU alike.

Only compiled CPU steps take it (`gelu`): eager steps call ``F.gelu`` anyway, and on a GPU Inductor's
Triton kernel fuses the GELU with the bias add before it. The operator has a vmap rule (it is elementwise),
so the vmap path of `trainers.ensemble` (attention-side PEs) compiles with it too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


@torch.library.custom_op("pe_trainers::gelu", mutates_args=())
def aten_gelu(x: Tensor) -> Tensor:
    """The exact GELU by ATen's kernel, opaque to Inductor."""
    return torch.ops.aten.gelu.default(x)


@aten_gelu.register_fake
def _aten_gelu_fake(x: Tensor) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("pe_trainers::gelu_backward", mutates_args=())
def aten_gelu_backward(grad: Tensor, x: Tensor) -> Tensor:
    """The exact GELU's input gradient by ATen's kernel, opaque to Inductor."""
    return torch.ops.aten.gelu_backward.default(grad, x)


@aten_gelu_backward.register_fake
def _aten_gelu_backward_fake(grad: Tensor, x: Tensor) -> Tensor:
    return torch.empty_like(x)


def _save_input(ctx, inputs: tuple[Tensor], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    return aten_gelu_backward(grad, x)


aten_gelu.register_autograd(_backward, setup_context=_save_input)


def mapped_first(t: Tensor, dim: int | None, size: int) -> Tensor:
    """A vmapped input with its mapped dimension first (broadcast to ``size`` if it has none): for the vmap
    rules of custom operators (here, and `trainers.logits.HalfLogits`)."""
    return t.expand(size, *t.shape) if dim is None else t.movedim(dim, 0)


@aten_gelu.register_vmap
def _aten_gelu_vmap(info, in_dims: tuple[int | None], x: Tensor) -> tuple[Tensor, int | None]:
    return aten_gelu(x), in_dims[0]  # elementwise: the batch dimension stays where it is


@aten_gelu_backward.register_vmap
def _aten_gelu_backward_vmap(info, in_dims: tuple[int | None, int | None], grad: Tensor,
                             x: Tensor) -> tuple[Tensor, int]:
    grad, x = mapped_first(grad, in_dims[0], info.batch_size), mapped_first(x, in_dims[1], info.batch_size)
    return aten_gelu_backward(grad, x), 0


def gelu(x: Tensor) -> Tensor:
    """The exact GELU: ``F.gelu(x)``, or `aten_gelu` (the same kernels) while torch.compile traces a CPU step."""
    if x.device.type == "cpu" and torch.compiler.is_compiling():
        return aten_gelu(x)
    return F.gelu(x)
