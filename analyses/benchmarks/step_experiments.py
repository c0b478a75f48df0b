"""The experiment flags of `profile_step.py`: patches to this process's trainers that try another form of
one part of the training step, each run beside the plain step in one GPU lease to measure what it gives.

None of them is the trainers' arithmetic or code path until a lease has measured it and a change adopts it
(as the bmm + bias add of `trainers.ensemble._linear` was after the third lease, and the bf16 logits
product of `trainers.logits` after the fourth, and ATen's GELU kernels of `trainers.gelu` after CPU
timings). Each either keeps the step's maths (another summation order at most: --packed-attention,
--contiguous-weights, --bias-in-product, --math-attention, --coordinate-descent, --compile-mode,
--cpp-wrapper, --unfused-bias, --whole-batch, --chunked-bf16; another rounding of the GELU: --inductor-gelu; the same update:
--copying-adamw, --per-step-slices, --flat-adamw, this one up to the last bit; the same products:
--strided-v, --four-d-attention-products) or says what it changes (--bf16-residual; --activation;
--float32-logits, whose backward multiplies the logits' gradient in float32 where the trainers' CUDA
product rounds it to bf16). The patches last for the process: `profile_step.main` applies them before it
builds a step.
"""

from __future__ import annotations

from typing import Callable

import torch


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


def _whole_batch() -> None:
    """A float32 CPU group step's forward and backward over the whole batch at once (an experiment flag), as before
    `trainers.ensemble.cpu_chunk` split it into chunks of `trainers.ensemble.CPU_CHUNK_ROWS` // K puzzles."""
    import trainers.ensemble

    trainers.ensemble.CPU_CHUNK_ROWS = None


def _chunked_bf16() -> None:
    """bf16 CPU group steps in chunks of `trainers.ensemble.CPU_CHUNK_ROWS` // K puzzles too (an experiment flag;
    the trainers chunk only float32 steps, `trainers.ensemble.cpu_chunk`)."""
    import trainers.ensemble

    plain = trainers.ensemble.cpu_chunk
    trainers.ensemble.cpu_chunk = lambda device, bf16=False, members=1: plain(device, False, members)


def _float32_logits() -> None:
    """The attention logits as the float32 product of the upcast q and k, and its float32 backward, on every
    device (an experiment flag; `trainers.model.logits_product`): the bf16 steps' form until `trainers.logits`
    took `HalfLogits` (bf16 backward products), on CUDA after the fourth lease measured it, on the CPU after
    step_ab did (reports/benchmarks/cpu-avx512/step-ab-half-logits/)."""
    import trainers.logits
    import trainers.model

    trainers.model.logits_product = trainers.logits.float32_logits


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


def _cpp_wrapper() -> None:
    """Inductor's C++ wrapper (`torch._inductor.config.cpp_wrapper`) for the compiled configurations (an
    experiment flag): the code that calls a compiled graph's kernels and matrix products, and allocates their
    buffers, generated as C++ instead of Python. A d_model 64 CPU step runs ~100 kernels and products in some
    40 ms, and its profile shows the graphs' Python wrapper as their largest self-time after the products.
    Since 2026-12-07 compiled float32 single-model CPU steps have it anyway (`trainers.train.CPP_WRAPPER_CPU_FLOAT32`),
    and since 2026-12-08 float32 ensemble groups: there this flag changes nothing; for bf16 steps it still does."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp_wrapper = True


def unfused_linear_forward(self, x: torch.Tensor) -> torch.Tensor:
    """`torch.nn.Linear.forward` with the bias added after the product in compiled CPU steps (``x @ W^T + b``)."""
    if self.bias is not None and x.device.type == "cpu" and torch.compiler.is_compiling():
        return torch.matmul(x, self.weight.t()) + self.bias
    return torch.nn.functional.linear(x, self.weight, self.bias)


def _unfused_bias() -> None:
    """The single model's linear layers as a product and a separate bias add in compiled CPU steps (an
    experiment flag), not ``addmm``: ATen's CPU addmm first copies the bias into every row of its output
    (one such copy per layer, a (2048, 256) buffer for the MLP's first layer at d_model 64), where Inductor
    can fold a separate add into the elementwise kernel that follows (the residual add and LayerNorm)."""
    torch.nn.Linear.forward = unfused_linear_forward


def _flat_adamw() -> None:
    """The single-model trainer's AdamW as `flat_adamw.FlatAdamW` on the CPU (an experiment flag): torch's fused
    kernel run once on one flat buffer of all parameters instead of once per parameter."""
    import trainers.train
    from flat_adamw import FlatAdamW, takes

    plain = trainers.train.make_optimizer

    def make_optimizer(model, cfg):
        params = list(model.parameters())
        if cfg.optim.name == "adamw" and takes(params):
            return FlatAdamW(params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        return plain(model, cfg)

    trainers.train.make_optimizer = make_optimizer


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
    a K = 300 group, far too small for the GPU's matrix units; packed, they are P times fewer and P times
    larger each way (and do P times the arithmetic; the fourth lease: the step 2.3% faster at P = 4, 0.3%
    slower at P = 8). Elsewhere (a mask, a batch not divisible by ``puzzles``, or where `attend` would take
    the fused kernel) it is `trainers.model.attend` unchanged."""
    import trainers.model

    plain = trainers.model.attend

    def attend(q, k, v, attn_mask=None, dropout_p=0.0):
        B, nh, tq, hs = q.shape
        t = k.shape[-2]
        if attn_mask is not None or B % puzzles or not trainers.model.uses_math_attention(q, k):
            return plain(q, k, v, attn_mask, dropout_p)

        def pack(x: torch.Tensor) -> torch.Tensor:
            n = x.shape[-2]
            grouped = x.reshape(B // puzzles, puzzles, nh, n, hs).transpose(1, 2)
            return grouped.reshape(B // puzzles, nh, puzzles * n, hs)

        mask = block_diagonal_mask(puzzles, tq, t, q.device)
        y = trainers.model.matmul_attention(pack(q), pack(k), pack(v), mask, dropout_p)
        return y.reshape(B // puzzles, nh, puzzles, tq, hs).transpose(1, 2).reshape(B, nh, tq, hs)

    return attend


def apply_packed_attention(puzzles: int) -> None:
    """Route the trainers' attention through `packed_attention` (an experiment flag with a value)."""
    import trainers.ensemble
    import trainers.model

    trainers.model.attend = trainers.ensemble.attend = packed_attention(puzzles)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh-gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "relu": torch.nn.functional.relu,
}
"""--activation's choices: stand-ins for the MLP's exact (erf) GELU, the study's activation, which stays the
trainers' one. Neither is the study's model: they measure what the exact GELU costs a step, so an upper bound
on what any faster kernel for it could give (the tanh form: the cheaper formula; ReLU: the cheapest activation)."""


def apply_activation(name: str) -> None:
    """Replace the MLP's GELU in this process's trainers by ``ACTIVATIONS[name]`` (an experiment flag with a
    value): the trainers call `trainers.gelu.gelu` through their modules' name ``gelu``, which compiled steps
    trace."""
    import trainers.ensemble
    import trainers.model

    trainers.model.gelu = trainers.ensemble.gelu = ACTIVATIONS[name]


def _copying_adamw() -> None:
    """The stacked optimizer hands torch's fused AdamW each member's weight slices as they are, transposed in
    memory, so the CPU kernel clones and copies back each one every step (an experiment flag): the trainers'
    form until `trainers.ensemble._dense_transposed` had them passed as their contiguous transposes."""
    import trainers.ensemble

    trainers.ensemble._dense_transposed = lambda p: False


def per_step_fused_slices(self, lr: float, wd: float, ks: list[int]):
    """`StackedOptimizer._fused_slices` building its lists of member slices anew on every call, as the
    optimizer did before it kept them."""
    self._slices.clear()
    return type(self)._kept_fused_slices(self, lr, wd, ks)


def allocating_adam_state(self, name: str) -> dict:
    """`StackedOptimizer._adam_state` as it was: a ``setdefault`` whose default allocates (and zeroes) two
    tensors the size of the parameter on every call, used or not."""
    p = self.stack.params[name]
    return self.state.setdefault(name, {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)})


def restore_per_step_slices(cls: type) -> None:
    """Give an optimizer class (`trainers.ensemble.StackedOptimizer` or a subclass) the per-step form."""
    if cls.__dict__.get("_fused_slices") is per_step_fused_slices:
        return  # already (a second patch would make the kept method this one, and recurse)
    cls._kept_fused_slices = cls._fused_slices
    cls._fused_slices = per_step_fused_slices
    cls._adam_state = allocating_adam_state


def _per_step_slices() -> None:
    """The stacked optimizer builds the fused AdamW's lists of member slices anew every step and allocates two
    zero tensors per parameter per step in its moment lookup (an experiment flag): the trainers' form until
    `trainers.ensemble.StackedOptimizer._fused_slices` kept the slices (hundreds of Python-level views and
    layout checks per CPU group step) and `_adam_state` stopped calling ``setdefault``."""
    import trainers.ensemble

    restore_per_step_slices(trainers.ensemble.StackedOptimizer)


def _strided_v() -> None:
    """The attention's v as the strided slice of the qkv output on the CPU too (an experiment flag): the
    trainers' form until `trainers.model.CONTIGUOUS_V_DEVICES`, where ATen's bmm copies it inside the call."""
    import trainers.model

    trainers.model.CONTIGUOUS_V_DEVICES = frozenset()


def _four_d_attention_products() -> None:
    """The attention's two products as 4-d ``@`` (an experiment flag): the trainers' form until
    `trainers.logits.flat_bmm`, which Inductor's attention-fusion pass rewrites into the fused SDPA kernel
    in compiled float32 steps."""
    import trainers.logits
    import trainers.model

    trainers.logits.flat_bmm = trainers.model.flat_bmm = lambda a, b: a @ b


def _inductor_gelu() -> None:
    """The MLP's GELU as plain ``F.gelu`` in compiled CPU steps too, so Inductor generates its kernels (an
    experiment flag): the trainers' form until `trainers.gelu` ran ATen's kernels there instead."""
    import trainers.ensemble
    import trainers.model

    trainers.model.gelu = trainers.ensemble.gelu = torch.nn.functional.gelu


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
    "float32_logits": ("+fp32-logits", _float32_logits,
                       "the attention logits as the float32 product of the upcast bf16 q and k with its float32 "
                       "backward, not `trainers.logits.HalfLogits` (float32 logits, the gradient rounded to bf16 "
                       "once and multiplied in bf16: the trainers' form for bf16 steps on CUDA and the CPU; run "
                       "with and without it to compare)"),
    "whole_batch": ("+whole-batch", _whole_batch,
                    "a float32 CPU ensemble group's forward and backward over the whole batch at once, not in chunks of "
                    "`trainers.ensemble.CPU_CHUNK_ROWS` // K puzzles with their gradients summed (`trainers.ensemble.cpu_chunk`, "
                    "the trainers' form; run with and without it to compare)"),
    "chunked_bf16": ("+chunked-bf16", _chunked_bf16,
                     "bf16 CPU ensemble group steps in chunks of `trainers.ensemble.CPU_CHUNK_ROWS` // K puzzles too, as float32 "
                     "ones are (`trainers.ensemble.cpu_chunk` gives bf16 steps the whole batch)"),
    "inductor_gelu": ("+inductor-gelu", _inductor_gelu,
                      "the MLP's GELU left to Inductor in compiled CPU steps (its generated kernels, the GELU "
                      "recomputed in the backward), not ATen's kernels behind an opaque operator "
                      "(`trainers.gelu`, the trainers' form; run with and without it to compare)"),
    "copying_adamw": ("+copying-adamw", _copying_adamw,
                      "the fused AdamW handed each member's weight slices transposed in memory, as before "
                      "`trainers.ensemble._dense_transposed` (on the CPU it then clones and copies back each one per step)"),
    "per_step_slices": ("+per-step-slices", _per_step_slices,
                        "the fused AdamW's lists of member slices rebuilt every step and two zero tensors allocated per "
                        "parameter per step, as before `trainers.ensemble.StackedOptimizer._fused_slices` kept "
                        "them and `_adam_state` dropped setdefault (the CPU's per-member slices)"),
    "strided_v": ("+strided-v", _strided_v,
                  "the attention's v left as the strided slice of the qkv output on the CPU, as before "
                  "`trainers.model.CONTIGUOUS_V_DEVICES` (ATen's CPU bmm then copies it inside the forward's "
                  "product and, transposed, the backward's)"),
    "four_d_attention_products": ("+4d-attn-products", _four_d_attention_products,
                                  "the attention's two products as 4-d `@`, as before `trainers.logits.flat_bmm`: "
                                  "in compiled float32 steps Inductor's attention-fusion pass then swaps the "
                                  "matmul-softmax chain for the fused SDPA kernel"),
    "coordinate_descent": ("+coord-descent", _coordinate_descent,
                           "Inductor's coordinate-descent tuning of its generated kernels' block sizes and warps "
                           "(torch._inductor.config.coordinate_descent_tuning) for the compiled configurations"),
    "unfused_bias": ("+unfused-bias", _unfused_bias,
                     "the single model's nn.Linear layers as x @ W^T + b in compiled CPU steps, not addmm (which "
                     "copies the bias into its output first): Inductor may fold the add into the next kernel"),
    "flat_adamw": ("+flat-adamw", _flat_adamw,
                   "the single model's AdamW on the CPU as flat_adamw.FlatAdamW: torch's fused kernel once on one "
                   "flat buffer of all parameters, not once per parameter"),
    "cpp_wrapper": ("+cpp-wrapper", _cpp_wrapper,
                    "Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper): the compiled graphs call their "
                    "kernels from generated C++, not Python (longer compiles)"),
}
