"""The experiment flags of `profile_step.py`: patches to this process's trainers that try another form of
one part of the training step, each run beside the plain step in one GPU lease to measure what it gives.

None of them is the trainers' arithmetic or code path until a lease has measured it and a change adopts it
(as the bmm + bias add of `trainers.ensemble._linear` was, after the third lease). Each either keeps the
step's maths (another summation order at most: --packed-attention, --contiguous-weights, --bias-in-product,
--math-attention, --coordinate-descent, --compile-mode) or says what it changes (--bf16-residual; --bf16-logits,
whose backward rounds the logits' gradient to bf16 as a bf16 product under autocast would). The patches last for the process: `profile_step.main` applies them before it builds a step.
"""

from __future__ import annotations

from typing import Callable

import torch

from trainers.model import logits_product as float32_logits_product  # before any --bf16-logits patch


def _force_math_attention() -> None:
    """Route the trainers' attention through its matmul-softmax form on every device (an experiment flag)."""
    import trainers.ensemble
    import trainers.model

    trainers.model.attend = trainers.model.matmul_attention
    trainers.ensemble.attend = trainers.model.matmul_attention


def _contiguous_weights() -> None:
    """Stack the ensemble's linear weights in their plain (K, out, in) memory order instead of transposed
    (an experiment flag): which order does the compiled GPU step's backward return their gradients in?"""
    import trainers.ensemble

    trainers.ensemble.linear_weight_names = lambda model: set()


def _bias_in_product() -> None:
    """The ensemble's linear layers as ``baddbmm(bias, x, w)`` on every device (an experiment flag; the CPU
    uses it anyway): the GPU's form until the third session, whose bias fill its profiles show as strided
    copies (`trainers.ensemble.BIAS_IN_PRODUCT_DEVICES`)."""
    import trainers.ensemble

    trainers.ensemble.BIAS_IN_PRODUCT_DEVICES = frozenset({"cpu", "cuda"})


def _bf16_residual() -> None:
    """The ensemble's LayerNorms return the autocast dtype (bf16) instead of float32 (an experiment flag): under
    autocast LayerNorm runs in float32, so the post-LN residual stream (every block's input, its residual and
    the tensors saved for the backward pass) is float32, twice the bytes of the bf16 products around it. Here
    the normalisation still computes in float32 and only its output is rounded to bf16, as pure-bf16 training
    keeps activations; the residual sums then round to bf16 too. Not the trainers' arithmetic: it measures
    what the float32 stream costs the step."""
    import trainers.ensemble

    plain = trainers.ensemble._layer_norm

    def layer_norm_in_autocast_dtype(x, w, b):
        y = plain(x, w, b)
        if torch.is_autocast_enabled(x.device.type):
            return y.to(torch.get_autocast_dtype(x.device.type))
        return y

    trainers.ensemble._layer_norm = layer_norm_in_autocast_dtype


def float32_out_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for bf16 / fp16 batches (N, n, m) @ (N, m, p), accumulated and written in float32: one CUDA
    kernel (``torch.bmm(..., out_dtype=torch.float32)``), elsewhere the float32 product of the upcast inputs,
    which has the same values (products of two bf16 numbers are exact in float32) up to the order of the sums.
    The fallback lets the CPU tests run `HalfLogits` forward and backward as the GPU does."""
    if a.device.type == "cuda":
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


class HalfLogits(torch.autograd.Function):
    """q k^T of bf16 / fp16 batches (N, Tq, hs), (N, T, hs) as a half-precision product written in float32
    (`float32_out_bmm`), with its own backward: the CUDA out_dtype kernel has no derivative (the fourth GPU
    lease's first try stopped on "derivative for aten::bmm is not implemented"). The backward rounds the
    incoming float32 gradient to the inputs' dtype and takes the two products in it, as a bf16 product under
    autocast does; the float32 product's backward instead multiplies in float32 and rounds the result."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(q, k)
        return float32_out_bmm(q, k.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = ctx.saved_tensors
        g = grad.to(q.dtype)
        return torch.bmm(g, k), torch.bmm(g.transpose(1, 2), q)


def half_logits_product(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q k^T of bf16 / fp16 inputs as `HalfLogits` (a half-precision batched product that accumulates and
    writes float32); float32 inputs as `trainers.model.logits_product`. The logits equal the float32
    product's but for the order of the sums; the float32 product at the study's 16 tokens ran at 7 TFLOP/s
    on the H200 (reports/benchmarks/gpu_session.md)."""
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype:
        return float32_logits_product(q, k)
    *lead, tq, hs = q.shape
    out = HalfLogits.apply(q.reshape(-1, tq, hs), k.reshape(-1, k.shape[-2], hs))
    return out.view(*lead, tq, k.shape[-2])


def check_half_logits(device: torch.device, tol: float = 1e-5, grad_tol: float = 1e-2) -> tuple[float, float]:
    """Relative differences (norm of the difference over the norm) between `half_logits_product` and the
    float32 product on fresh random bf16 inputs of the training step's attention shape: (logits, worst of the
    two input gradients). Raises past ``tol`` for the logits (the same products, summed in another order)
    or ``grad_tol`` for the gradients, which may round the incoming gradient to bf16 (~3e-3) but no more."""
    g = torch.Generator(device=device).manual_seed(0)
    q, k = (torch.randn(512, 1, 16, 160, device=device, generator=g).bfloat16().requires_grad_() for _ in range(2))
    w = torch.randn(512, 1, 16, 16, device=device, generator=g)
    outs = []
    for fn in (half_logits_product, float32_logits_product):
        y = fn(q, k)
        gq, gk = torch.autograd.grad((y * w).sum(), (q, k))
        outs.append((y.float(), gq.float(), gk.float()))
    diff = [((a - b).norm() / b.norm()).item() for a, b in zip(*outs)]
    logits, grads = diff[0], max(diff[1:])
    if not (logits <= tol and grads <= grad_tol):
        raise RuntimeError(f"--bf16-logits: the product differs from the float32 one by {logits:.2e} (logits; at most "
                           f"{tol:g}) and {grads:.2e} (gradients; at most {grad_tol:g})")
    return logits, grads


def _bf16_logits() -> None:
    """The attention logits as `half_logits_product` (an experiment flag; `trainers.model.logits_product`)."""
    import trainers.model

    trainers.model.logits_product = half_logits_product


def apply_compile_mode(mode: str) -> None:
    """torch.compile's ``mode`` for the compiled configurations (an experiment flag; `trainers.train.COMPILE_MODE`)."""
    import trainers.train

    trainers.train.COMPILE_MODE = mode


def _coordinate_descent() -> None:
    """Inductor's coordinate-descent tuning of its generated kernels' launch configurations (block sizes,
    warps) for the compiled configurations (an experiment flag): the compiled GPU step's LayerNorm, GELU,
    softmax and layout kernels are memory-bound and took over a third of its time in the fourth lease's profile."""
    import torch._inductor.config as inductor_config

    inductor_config.coordinate_descent_tuning = True


def block_diagonal_mask(puzzles: int, tq: int, t: int, device: torch.device) -> torch.Tensor:
    """(puzzles tq, puzzles t) boolean mask, True where a query and a key belong to the same puzzle."""
    rows = torch.arange(puzzles * tq, device=device) // tq
    cols = torch.arange(puzzles * t, device=device) // t
    return rows[:, None] == cols[None, :]


def packed_attention(puzzles: int) -> Callable[..., torch.Tensor]:
    """An `attend` that runs the matmul-softmax path over ``puzzles`` puzzles at a time as one sequence with a
    block-diagonal mask: (B, nh, Tq, hs) -> (B / puzzles, nh, puzzles Tq, hs). The masked logits are -inf, so
    their weights are exactly 0 and each puzzle's attention is the same maths as alone (the products sum the
    same terms plus exact zeros). At the study's 16 tokens the products are 38,400 16 x 16 ones per layer for
    a K = 300 group, far too small for the GPU's matrix units; packed, they are 8x fewer and 8x larger each
    way (and do 8x the arithmetic). Elsewhere (a mask, a batch not divisible by ``puzzles``, or where `attend`
    would take the fused kernel) it is `trainers.model.attend` unchanged."""
    import trainers.model

    plain = trainers.model.attend

    def attend(q, k, v, attn_mask=None, dropout_p=0.0):
        B, nh, tq, hs = q.shape
        t = k.shape[-2]
        if attn_mask is not None or B % puzzles or not trainers.model.uses_math_attention(q, k):
            return plain(q, k, v, attn_mask, dropout_p)

        def pack(x: torch.Tensor) -> torch.Tensor:
            n = x.shape[-2]
            return x.reshape(B // puzzles, puzzles, nh, n, hs).transpose(1, 2).reshape(B // puzzles, nh, puzzles * n, hs)

        mask = block_diagonal_mask(puzzles, tq, t, q.device)
        y = trainers.model.matmul_attention(pack(q), pack(k), pack(v), mask, dropout_p)
        return y.reshape(B // puzzles, nh, puzzles, tq, hs).transpose(1, 2).reshape(B, nh, tq, hs)

    return attend


def apply_packed_attention(puzzles: int) -> None:
    """Route the trainers' attention through `packed_attention` (an experiment flag with a value)."""
    import trainers.ensemble
    import trainers.model

    trainers.model.attend = trainers.ensemble.attend = packed_attention(puzzles)


# The experiment flags: --NAME -> (the tag its rows get, the patch it applies to this process, its help; the
# parser adds the tag to the help).
EXPERIMENTS: dict[str, tuple[str, Callable[[], None], str]] = {
    "math_attention": ("+math-attn", _force_math_attention,
                       "attention as two matrix products and a softmax on every device and in eager steps too, not "
                       "the fused kernel (`trainers.model.attend` takes that path on the CPU and in compiled GPU steps "
                       "with <= 32 keys): a test of whether it pays in eager GPU steps"),
    "contiguous_weights": ("+contiguous-w", _contiguous_weights,
                           "the ensemble's stacked linear weights in plain (K, out, in) memory order, not the "
                           "transposed order `trainers.ensemble.Stack.of` stores them in (a gradient returned in the "
                           "other order costs the optimizer a copy per weight per step)"),
    "bias_in_product": ("+baddbmm", _bias_in_product,
                        "the ensemble's linear layers as baddbmm(bias, x, w) on a GPU too, which fills each output "
                        "with the broadcast bias before the product, instead of a product and a separate add (the "
                        "CPU's form anyway; run with and without it to compare)"),
    "bf16_residual": ("+bf16-residual", _bf16_residual,
                      "the ensemble's LayerNorm outputs rounded to the autocast dtype (bf16), so the post-LN residual "
                      "stream is stored in bf16 rather than autocast's float32 (not the trainers' arithmetic: what "
                      "the float32 stream costs)"),
    "bf16_logits": ("+bf16-logits", _bf16_logits,
                    "the attention logits q k^T as one bf16 batched product that accumulates and writes float32 "
                    "(torch.bmm out_dtype, CUDA only) instead of a float32 product of the upcast bf16 q and k (same "
                    "products, other summation order; checked against the float32 product first)"),
    "coordinate_descent": ("+coord-descent", _coordinate_descent,
                           "Inductor's coordinate-descent tuning of its generated kernels' block sizes and warps "
                           "(torch._inductor.config.coordinate_descent_tuning) for the compiled configurations"),
}
