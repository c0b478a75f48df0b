"""The attention logits q k^T, always accumulated and written in float32 (or the inputs' wider dtype).

Rounding the logits to bf16 before the softmax would move each by up to ~0.4% of its size, and more than
double the attention output's error in `tests/trainers/test_model.py`; SDPA's kernels keep them in float32
too. Two ways to get float32 logits from the bf16 q and k of an autocast step:

- upcast q and k and take a float32 product (`float32_logits`), whose backward multiplies the logits'
  float32 gradient in float32 too; but on a GPU at the study's 16 tokens cuBLAS runs that batch of 38,400
  tiny float32 products at 7 TFLOP/s (H200, third lease), and on the CPU its two float32 backward
  products are slower than bf16 ones of the same shape;
- `HalfLogits`: a forward that writes float32 from the half-precision inputs (CUDA's
  ``torch.bmm(..., out_dtype=torch.float32)``, the same products summed in another order; the CPU has no
  such kernel and takes the float32 product of the upcast inputs, the very values of `float32_logits`),
  and a backward that rounds the incoming gradient to bf16 once and takes dq = g k and dk = g^T q as bf16
  products, as the backward of a bf16 product under autocast does. The fourth GPU lease measured the
  compiled K = 300 bf16 step at 35.66 ms with the first and 33.13 ms with this one (1.076x;
  reports/benchmarks/gpu_session.md), the logits 1.7e-7 apart (relative norm) and the input gradients
  2.6e-3 (the backward's one bf16 rounding). On the CPU the forward is unchanged and the compiled bf16 group
  step 1.036-1.038x faster with it (reports/benchmarks/cpu-avx512/step-ab-half-logits/).

`logits_product` takes the second for bf16 inputs on CUDA (with the out_dtype kernel) and on the CPU, the
first everywhere else (float32 training, fp16). On the CPU q and k are made contiguous first
(`CONTIGUOUS_OPERANDS_DEVICES`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainers.gelu import mapped_first

HALF = (torch.bfloat16,)  # the dtype measured on a GPU; fp16 (which the trainers never use) keeps the float32 product
# torch.bmm(..., out_dtype=...) is the overload aten::bmm.dtype, which older torch releases lack; looked up once here,
# not inside compiled steps
HAS_OUT_DTYPE_BMM = "dtype" in torch.ops.aten.bmm.overloads()
# Devices where `half_logits` makes q and k contiguous before its products. They are slices of the fused qkv
# projection's output (rows 3 C apart), and ATen's CPU bmm copies such a strided bf16 operand into a
# contiguous one inside every call that reads it: the backward's two products would each copy one
# (`tests/trainers/test_model.py` counts those copies). Made contiguous here,
# it is a layout Inductor writes in the kernel that splits q, k and v, as for v
# (`trainers.model.CONTIGUOUS_V_DEVICES`). cuBLAS takes strided batches as they are.
CONTIGUOUS_OPERANDS_DEVICES = frozenset({"cpu"})


def on_flat_batch(product, a: Tensor, b: Tensor) -> Tensor:
    """``product`` of 3-d batches applied to a (..., n, m) and b (..., r, s) with the same leading dimensions:
    those flattened into one batch dimension for the call, and restored on the result."""
    out = product(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*a.shape[:-2], *out.shape[-2:])


def flat_bmm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for (..., n, m) @ (..., m, p) with the same leading dimensions, as one ``torch.bmm`` over them
    flattened: the products `torch.matmul` would run, written as 3-d batches.

    Why not ``a @ b``: Inductor's attention-fusion pass (``torch._inductor.fx_passes.fuse_attention``) matches
    a 4-d matmul-softmax-matmul chain and swaps in the fused SDPA kernel, which on the CPU is slower than the
    two products and a softmax at the study's 16 tokens: ``attend`` picks the matmul path there for that
    reason, and in compiled float32 CPU steps the pass undid that choice. With 4-d products the compiled
    float32 single-model step on two threads was 1.30x and 1.23x slower (AVX2, two A/B runs of 4 rounds,
    reports/benchmarks/cpu-avx2-r3/step-ab-single*); one-thread steps showed no consistent difference. The test
    ``test_compiled_cpu_step_keeps_the_matmul_attention`` checks that the pass finds nothing to rewrite."""
    return on_flat_batch(torch.bmm, a, b)


def float32_logits(q: Tensor, k: Tensor) -> Tensor:
    """q k^T in float32, or in q's dtype if wider: the inputs upcast, then one product (`flat_bmm`)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    return flat_bmm(q.to(dtype), k.to(dtype).transpose(-2, -1))


def float32_out_bmm(a: Tensor, b: Tensor) -> Tensor:
    """a @ b of half-precision batches (N, n, m) @ (N, m, p), accumulated and written in float32: CUDA's
    out_dtype kernel, elsewhere (the CPU's `HalfLogits` forward) the float32 product of the upcast inputs,
    the same values up to the order of the sums."""
    if a.device.type == "cuda":
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


class HalfLogits(torch.autograd.Function):
    """q k^T of half-precision batches (N, Tq, hs), (N, T, hs) as one product written in float32, with its
    own backward (CUDA's out_dtype kernel has none: "derivative for aten::bmm is not implemented"). The
    backward rounds the incoming float32 gradient to the inputs' dtype and takes dq = g k and dk = g^T q in
    it, as a bf16 product under autocast does; the float32 product's backward would multiply in float32 and
    round only the result.

    It runs under ``torch.func.vmap`` too (the ensemble's path for attention-side PEs): its vmap rule folds the
    mapped dimension into the product's batch, one call for all models, where vmap's generic fallback would
    loop over them (CUDA's out_dtype product has no batching rule of its own)."""

    @staticmethod
    def forward(q: Tensor, k: Tensor) -> Tensor:
        return float32_out_bmm(q, k.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        q, k = ctx.saved_tensors
        g = grad.to(q.dtype)
        return torch.bmm(g, k), torch.bmm(g.transpose(1, 2), q)

    @staticmethod
    def vmap(info, in_dims: tuple[int | None, int | None], q: Tensor, k: Tensor) -> tuple[Tensor, int]:
        q, k = (mapped_first(t, d, info.batch_size) for t, d in zip((q, k), in_dims))
        return on_flat_batch(HalfLogits.apply, q, k), 0  # (V, N, ...): the models' axis joins the batch


def half_logits(q: Tensor, k: Tensor) -> Tensor:
    """q k^T of half-precision (..., Tq, hs), (..., T, hs) as `HalfLogits` over the flattened batch."""
    if q.device.type in CONTIGUOUS_OPERANDS_DEVICES:
        q, k = q.contiguous(), k.contiguous()
    return on_flat_batch(HalfLogits.apply, q, k)


def uses_half_logits(q: Tensor, k: Tensor) -> bool:
    """Whether `logits_product` takes `HalfLogits`: bf16 inputs (`HALF`) on the CPU, or on CUDA with a torch
    that has the out_dtype kernel."""
    if q.dtype not in HALF or k.dtype != q.dtype:
        return False
    return q.device.type == "cpu" or (q.device.type == "cuda" and HAS_OUT_DTYPE_BMM)


def logits_product(q: Tensor, k: Tensor) -> Tensor:
    """q k^T in float32 (or q's dtype if wider): (..., Tq, hs), (..., T, hs) -> (..., Tq, T); for bf16 inputs
    on CUDA and the CPU `HalfLogits` (float32 logits, a bf16 backward), elsewhere the float32 product of the
    upcast inputs and its float32 backward."""
    return half_logits(q, k) if uses_half_logits(q, k) else float32_logits(q, k)
