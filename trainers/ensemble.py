"""Train K models in one process as one batched ensemble (same results as training each alone).

``train_ensemble(cfgs, out_dirs)`` takes one ordinary `TrainConfig` and one run folder per member and
writes, for each member, exactly what ``trainers.train.train(cfg, out_dir)`` writes: ``config.json``,
``metrics.jsonl``, ``checkpoints/step-XXXXXXXX.pt`` and ``last.pt`` in the pe-probe checkpoint format,
optimizer state included (so a member can later be resumed by the single-model trainer, or analysed
with ``pe-probe analyze RUN/last.pt``).

How: members that share an architecture are one *group*. Their parameters are stacked along a new
leading model axis (K, ...) and one forward pass runs all of them: `explicit_forward` writes the model
with a model axis (every linear layer one batched matrix product, attention by `trainers.model.attend`)
for PEs added to the input; attention-side PEs (relative, RoPE) go through ``torch.func.vmap`` over
``torch.func.functional_call`` of a template `PETransformer`. Each member keeps its own data order
(its own per-epoch permutation, seeded by (its seed, epoch) exactly as in `train`), its own
initialisation (built with its own seed, exactly as in `train`) and its own optimizer state (torch's
fused AdamW kernel on each member's slices of the stacked tensors, as a solo run uses it, or SGD written
out on the stacked tensors; per-member learning rate and weight decay). The loss of the group is the
sum of the members' mean losses, so each member's gradient is its own.

Where: on a GPU a group is trained as one batch of K. On the CPU a step of the study's model is
compute-bound and too small to share 2+ cores well, so groups of at most `CPU_GROUP` members are
trained side by side, one per worker with one torch thread each (`cpu_workers`: threads, or spawned
processes for compiled groups; the results are the same, tested), each float32 step's forward and backward
taking the batch `CPU_CHUNK_ROWS` / K puzzles at a time (`cpu_chunk`: the same gradient up to rounding, tested). Both
ways the last layer computes only the readout token, as `PETransformer` does.

What may differ inside a group: `VARYING` (seed, PE init and sigma, learning rate, weight decay,
momentum). Members that differ in anything else (PE kind, width, epochs, data, ...) go to separate
groups, trained one after the other. A member resuming from a different epoch is its own group too.

Differences from the single-model trainer (documented, tested where exact):
* with attention-side PEs (the vmap path) attention is computed as softmax(q k^T / sqrt(hs) + bias) v
  written out (`attend` may pick the fused SDPA kernel, which has no vmap batching rule on CPU), its
  weights by `trainers.model.attention_weights` as `attend`'s matrix-product path computes them (float32
  logits under bf16 autocast; until 2026-12-06 this path rounded them to bf16); same maths, float32
  rounding differs at ~1e-7;
* with dropout > 0 the dropout masks differ from solo runs (vmap draws different masks per member);
  with the study's dropout 0 the runs match solo training within float tolerance.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import sys
import threading
import time
import types
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, vmap

from pe_probe.errors import InputError
from trainers.config import TrainConfig, validate
from trainers.console import print_line
from trainers.evaluate import EVAL_BATCH, Split, bf16_autocast, encode_split, resolve_device, tf32_matmuls
from trainers.gelu import gelu
from trainers.model import PETransformer, attend, attention_weights
from trainers.memory import keep_freed_memory
from trainers.provenance import code_version, record_session
from trainers.train import (
    METRICS_FILE, SpeedOptions, _trim_metrics, flatten_config, check_run_dir, checked_splits, checkpoints_at, compiled_step,
    cpp_wrapper_for, epoch_seed, evaluates_at, fused_adamw_supported, ground_truth, in_layout_of, make_optimizer, save_run_checkpoint,
    seed_everything, start_message, start_run_dir,
)

WHOLE_STACK_DEVICES = ("cuda",)  # where the fused AdamW call takes stacked tensors whole (`StackedOptimizer`)
VARYING = ("seed", "pe.init", "pe.init_std", "optim.lr", "optim.weight_decay", "optim.momentum")
BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW defaults, as `make_optimizer` uses them


def group_key(cfg: TrainConfig) -> str:
    """Everything that must be equal for two configs to train in one group (all but `VARYING`)."""
    flat = flatten_config(cfg.to_dict())
    return json.dumps({k: v for k, v in sorted(flat.items()) if k not in VARYING})


# ----------------------------------------------------------------------------------------------
# The batched forward


def _math_attention(self, x: Tensor, query: int | None = None) -> Tensor:
    """`SelfAttention.forward` with the attention written out (vmappable; SDPA is not, on CPU)."""
    B, T, C = x.shape
    nh = self.n_heads
    q, k, v = self.qkv(x).split(C, dim=-1)
    q = q.view(B, T, nh, C // nh).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, T, nh, C // nh).transpose(1, 2)  # (B, nh, T, hs)
    v = v.view(B, T, nh, C // nh).transpose(1, 2)  # (B, nh, T, hs)
    bias = None
    if self.pe is not None:
        bias = self.pe.attn_bias(q)
        q, k = self.pe.rotate(q, k)
    att = attention_weights(q, k, bias)  # (B, nh, T, T); float32 logits under bf16 autocast, as `attend`
    if self.training and self.dropout > 0:
        att = F.dropout(att, self.dropout)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, C)
    if query is not None:  # the readout layer: only the query token's output
        y = y[:, query : query + 1]
    return self.proj(y)


def _linear_bias_after(self: torch.nn.Linear, x: Tensor) -> Tensor:
    """`nn.Linear.forward` for the vmap path: the product without the bias, then the bias added in the
    product's dtype (as `_linear` does off `BIAS_IN_PRODUCT_DEVICES`). Under vmap, ``F.linear`` with a bias
    escapes autocast (torch 2.13: its output stays float32 under CPU bf16 autocast, while the product alone
    is bf16), so with it a bf16 group of attention-side PEs ran its linear layers in float32."""
    y = F.linear(x, self.weight)
    return y if self.bias is None else y + self.bias.to(y.dtype)


def template_model(model: PETransformer) -> PETransformer:
    """A copy of ``model`` for functional_call under vmap: attention layers use `_math_attention`, linear
    layers `_linear_bias_after`."""
    base = copy.deepcopy(model)
    for block in base.blocks:
        block.attn.forward = types.MethodType(_math_attention, block.attn)
    for m in base.modules():
        if isinstance(m, torch.nn.Linear):
            m.forward = types.MethodType(_linear_bias_after, m)
    return base


@dataclass
class Stack:
    """K models' parameters and buffers, stacked on a leading model axis."""

    params: dict[str, Tensor]  # name -> (K, ...) leaf tensors with requires_grad
    buffers: dict[str, Tensor]  # name -> (K, ...)

    @classmethod
    def of(cls, models: Sequence[torch.nn.Module]) -> "Stack":
        """Stack ``models``' parameters and buffers. Linear weights (K, out, in) are stored transposed in
        memory (strides of a (K, in, out) tensor; `linear_weight_names`): the batched products read them as
        (K, in, out), so the gradient autograd returns has the parameter's own strides and the optimizer
        updates it in place, with no per-step copy of every weight gradient into (out, in) order."""
        names = [n for n, _ in models[0].named_parameters()]
        transposed = linear_weight_names(models[0])

        def stacked(name: str) -> Tensor:
            ts = [dict(m.named_parameters())[name].detach() for m in models]
            if name in transposed:
                return torch.stack([t.t() for t in ts]).transpose(1, 2)  # (K, out, in), memory (K, in, out)
            return torch.stack(ts)

        params = {n: stacked(n).requires_grad_(True) for n in names}
        bnames = [n for n, _ in models[0].named_buffers()]
        buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in models]) for n in bnames}
        return cls(params, buffers)


def linear_weight_names(model: torch.nn.Module) -> set[str]:
    """Parameter names of ``model``'s `nn.Linear` weights (the matrices `_linear` multiplies by)."""
    return {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def ensemble_forward(base: PETransformer, stack: Stack, x: Tensor, shared_input: bool = False) -> Tensor:
    """Logits (K, B, n_classes) of K models; x (K, B, N, n_in), or (B, N, n_in) with ``shared_input``.

    Models whose PE acts on the input (learned, sinusoids, random, none) take `explicit_forward`
    (batched matrix products over the model axis, fused attention); attention PEs (relative, RoPE)
    take vmap over functional_call, which supports any module but is slower on CPU.
    """
    if all(b.attn.pe is None for b in base.blocks):
        K = next(iter(stack.params.values())).shape[0]
        if shared_input:
            x = x.expand(K, *x.shape)
        return explicit_forward(base, stack, x)

    def one(p, b, xx):
        return functional_call(base, (p, b), (xx,))

    return vmap(one, in_dims=(0, 0, None if shared_input else 0), randomness="different")(stack.params, stack.buffers, x)


# Devices whose batched linear layers add the bias inside the product, ``baddbmm(bias, x, w)``. On the CPU
# its kernel does so in the product's own pass (in interleaved timings a separate add was mostly slower in eager
# groups there and within a few percent, either way, in compiled ones).
# On a GPU, baddbmm first fills its whole output with the broadcast bias by a strided copy kernel (19 such
# bf16 copies per K = 300 step, ~6 ms of the compiled step's 42 ms: reports/benchmarks/gpu_session.md),
# then multiplies with beta = 1, reading it back; there the product comes alone and the bias is added
# after it, which torch.compile folds into the next elementwise kernel (the GELU's, for the MLP). Measured in
# one lease, the compiled K = 300 bf16 step: 35.6 ms this way, 42.7 ms with baddbmm (1.20x; gpu_session.md).
BIAS_IN_PRODUCT_DEVICES = frozenset({"cpu"})


def _linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """x (K, ..., in), w (K, out, in), b (K, out) -> (K, ..., out): one batched matmul and the bias
    (inside the product on `BIAS_IN_PRODUCT_DEVICES`, else added in the product's dtype, bf16 under
    autocast as baddbmm's output)."""
    K, *mid, n_in = x.shape
    x2, wt = x.reshape(K, -1, n_in), w.transpose(1, 2)
    if x.device.type in BIAS_IN_PRODUCT_DEVICES:
        y = torch.baddbmm(b.unsqueeze(1), x2, wt)  # (K, M, out)
    else:
        y = torch.bmm(x2, wt)
        y = y + b.unsqueeze(1).to(y.dtype)
    return y.view(K, *mid, w.shape[1])


def _out_rows(w: Tensor, lo: int, hi: int) -> Tensor:
    """Output rows lo:hi of stacked weights w (K, out, in), sliced in w's memory order (K, in, out): the
    gradient autograd assembles from such slices then comes back in w's own layout (no copy for the
    optimizer), where slicing the (K, out, in) view directly would give it contiguous (K, out, in)."""
    return w.transpose(1, 2)[:, :, lo:hi].transpose(1, 2)


def _layer_norm(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    K = x.shape[0]
    shape = (K,) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return F.layer_norm(x, x.shape[-1:]) * w.view(shape) + b.view(shape)


def explicit_forward(base: PETransformer, stack: Stack, x: Tensor) -> Tensor:
    """`PETransformer.forward` for K stacked models written with a model axis; x (K, B, N, n_in)."""
    P = {**stack.buffers, **stack.params}
    cfg = base.cfg
    p_drop = cfg.dropout if base.training else 0.0

    def drop(t: Tensor) -> Tensor:
        return F.dropout(t, p_drop) if p_drop > 0 else t

    def add_pe(h: Tensor, table: Tensor) -> Tensor:  # table (K, N, d) on the last N tokens
        n = table.shape[1]
        if h.shape[2] == n:
            return h + table.unsqueeze(1)
        return torch.cat([h[:, :, :-n], h[:, :, -n:] + table.unsqueeze(1)], dim=2)

    K, B = x.shape[:2]
    h = _linear(x, P["embed.weight"], P["embed.bias"])  # (K, B, N, d)
    if base.cls is not None:
        h = torch.cat([P["cls"].expand(K, B, 1, -1), h], dim=2)  # (K, B, 1 + N, d)
    if base.pe is not None and "pe.table" in P:
        h = add_pe(h, P["pe.table"])
    if not base.blocks or base.blocks[0].pe is None:  # as `PETransformer.forward`: block 0 drops out its own input
        h = drop(h)
    T, C = h.shape[2], h.shape[3]
    nh, hs = cfg.n_heads, C // cfg.n_heads
    readout = 0 if base.cls is not None else T - 1
    for i, block in enumerate(base.blocks):
        pre = f"blocks.{i}."
        if block.pe is not None and pre + "pe.table" in P:
            h = drop(add_pe(h, P[pre + "pe.table"]))
        # the last block computes only the readout token (as `PETransformer.forward(readout_only=True)`)
        query = readout if i == len(base.blocks) - 1 else None

        def attn(z: Tensor) -> Tensor:  # (K, B, T, C) -> (K, B, Tq, C), Tq = T or 1
            w, b = P[pre + "attn.qkv.weight"], P[pre + "attn.qkv.bias"]
            if query is None:
                q, k, v = _linear(z, w, b).split(C, dim=-1)
            else:
                q = _linear(z[:, :, query : query + 1], _out_rows(w, 0, C), b[:, :C])
                k, v = _linear(z, _out_rows(w, C, 3 * C), b[:, C:]).split(C, dim=-1)
            Tq = q.shape[2]
            q = q.reshape(K * B, Tq, nh, hs).transpose(1, 2)  # (K B, nh, Tq, hs)
            k = k.reshape(K * B, T, nh, hs).transpose(1, 2)  # (K B, nh, T, hs)
            v = v.reshape(K * B, T, nh, hs).transpose(1, 2)  # (K B, nh, T, hs)
            y = attend(q, k, v, dropout_p=p_drop)
            y = y.transpose(1, 2).reshape(K, B, Tq, C)  # (K, B, Tq, C)
            return _linear(y, P[pre + "attn.proj.weight"], P[pre + "attn.proj.bias"])

        def mlp(z: Tensor) -> Tensor:
            z = gelu(_linear(z, P[pre + "mlp.fc.weight"], P[pre + "mlp.fc.bias"]))
            return _linear(drop(z), P[pre + "mlp.proj.weight"], P[pre + "mlp.proj.bias"])

        ln1 = (P[pre + "ln1.weight"], P[pre + "ln1.bias"])
        ln2 = (P[pre + "ln2.weight"], P[pre + "ln2.bias"])
        keep = h if query is None else h[:, :, query : query + 1]  # the residual stream of the kept tokens
        if block.pre_ln:
            h = keep + drop(attn(_layer_norm(h, *ln1)))
            h = h + drop(mlp(_layer_norm(h, *ln2)))
        else:
            h = _layer_norm(keep + drop(attn(h)), *ln1)
            h = _layer_norm(h + drop(mlp(h)), *ln2)
    if "ln_f.weight" in P:
        h = _layer_norm(h, P["ln_f.weight"], P["ln_f.bias"])
    out = h[:, :, 0] if base.cls is not None or len(base.blocks) else h[:, :, -1]  # (K, B, d)
    return _linear(out, P["head.weight"], P["head.bias"])  # (K, B, n_classes)


def group_step(step_loss: Callable[..., Tensor], stack: Stack, opt: "StackedOptimizer", xb: Tensor, yb: Tensor,
               precision: Any, mark_step: Callable[[], None], chunk: int | None = None) -> None:
    """One optimizer step of a batched group: ``step_loss`` (`group_loss`, compiled or not) on each member's
    batch (xb (K, b, N, n_in), yb (K, b)), gradients of the summed losses (each member's own), the stacked
    optimizer; under ``precision`` (TF32 with --tf32) throughout, as `trainers.train.lst_step`.

    ``chunk``: the forward and backward passes take the batch ``chunk`` puzzles at a time and sum the
    gradients before the one optimizer step (`cpu_chunk`): the same gradient as the whole batch's, summed in
    another order (float rounding), with each pass's activations small enough to stay in the core's cache.
    """
    params = list(stack.params.values())
    b = xb.shape[1]
    with precision:
        if not chunk or chunk >= b:  # one pass (a GPU's step, a bf16 one, or a batch no larger than the chunk)
            mark_step()
            losses = step_loss(stack.params, xb, yb)  # (K,)
            grads = list(torch.autograd.grad(losses.sum(), params))
        else:
            for lo in range(0, b, chunk):
                xc, yc = xb[:, lo : lo + chunk], yb[:, lo : lo + chunk]
                mark_step()
                losses = step_loss(stack.params, xc, yc)  # (K,) each member's mean over its chunk
                part = torch.autograd.grad(losses.sum() * (xc.shape[1] / b), params)
                grads = list(part) if lo == 0 else [g.add_(p) for g, p in zip(grads, part)]
        opt.step(dict(zip(stack.params, grads)))


def group_loss(base: PETransformer, buffers: dict[str, Tensor], autocast: Any = None) -> Callable[..., Tensor]:
    """The batched training loss of a group, (params, xb (K, b, N, n_in), yb (K, b)) -> (K,): each
    member's mean cross-entropy on its own batch (under ``autocast`` if given). The function a training
    step compiles (made once, with the autocast context outside it: creating that context inside a
    compiled function breaks its graph)."""
    def loss_fn(params: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
        with autocast or nullcontext():
            logits = ensemble_forward(base, Stack(params, buffers), xb).float()  # (K, b, C)
        return F.cross_entropy(logits.transpose(1, 2), yb, reduction="none").mean(1)  # (K,)

    return loss_fn


# ----------------------------------------------------------------------------------------------
# Optimisers on stacked tensors (torch's fused AdamW kernel on member slices, or the maths of torch.optim.AdamW / SGD)


def _dense_transposed(p: Tensor) -> bool:
    """Whether the fused AdamW kernel reads a stacked tensor's member slices fastest transposed: a linear
    weight's slice (out, in) is stored transposed (`Stack.of`), so its transpose (in, out) is contiguous. The
    kernel is elementwise, and on the CPU it clones each non-contiguous parameter into a contiguous tensor and
    copies it back every step (a clone and a copy per member per linear weight); handed the transpose, it
    updates the same elements in place, bit for bit as before (tested). Every member's slice has the same
    strides, so member 0's decides for all."""
    t = p[0]
    return t.dim() == 2 and not t.is_contiguous() and t.t().is_contiguous()


def _member_slices(t: Tensor, transposed: bool) -> tuple[Tensor, ...]:
    """The K member slices of a stacked tensor (K, ...) as views, transposed when ``transposed``: one call
    for all K, not K indexings and layout checks in Python."""
    return (t.transpose(1, 2) if transposed else t).unbind(0)


class StackedOptimizer:
    """AdamW or SGD over stacked parameters with per-member lr / weight decay / momentum (K,)."""

    def __init__(self, stack: Stack, cfgs: Sequence[TrainConfig], device: torch.device):
        self.name = cfgs[0].optim.name
        self.stack = stack
        self.lr = torch.tensor([c.optim.lr for c in cfgs], dtype=torch.float32, device=device)
        self.wd = torch.tensor([c.optim.weight_decay for c in cfgs], dtype=torch.float32, device=device)
        self.momentum = torch.tensor([c.optim.momentum for c in cfgs], dtype=torch.float32, device=device)
        self.t = 0  # optimizer steps taken (same for every member of a group)
        self._step = torch.zeros((), device=device)  # self.t on the device, for the fused kernel
        self.fused = fused_adamw_supported(stack.params.values())  # where `make_optimizer` uses it too
        # members by (lr, weight decay): the fused kernel takes one pair per call. Grouped once here (not
        # from the device tensors each step, a host sync on a GPU), with the values rounded to float32 as
        # the (K,) tensors hold them, which is what the kernel has been given since it was introduced
        hyper = torch.tensor([[c.optim.lr, c.optim.weight_decay] for c in cfgs], dtype=torch.float32).tolist()
        self.by_hyper: dict[tuple[float, float], list[int]] = {}
        for k, (lr, wd) in enumerate(hyper):
            self.by_hyper.setdefault((lr, wd), []).append(k)
        self.state: dict[str, dict[str, Tensor]] = {}
        self._slices: dict[tuple[float, float], tuple[list, tuple]] = {}  # `_fused_slices`, per (lr, wd)

    @staticmethod
    def _k(v: Tensor, like: Tensor) -> Tensor:
        return v.view(-1, *([1] * (like.dim() - 1)))  # (K,) -> (K, 1, ..., 1)

    @torch.no_grad()
    def step(self, grads: dict[str, Tensor]) -> None:
        self.t += 1
        if self.name == "adamw" and self.fused:
            return self._fused_adamw_step(grads)
        for name, p in self.stack.params.items():
            g = grads[name]
            lr, wd = self._k(self.lr, p), self._k(self.wd, p)
            if self.name == "adamw":
                st = self._adam_state(name)
                p.mul_(1 - lr * wd)
                st["exp_avg"].lerp_(g, 1 - BETAS[0])
                st["exp_avg_sq"].mul_(BETAS[1]).addcmul_(g, g, value=1 - BETAS[1])
                bc1 = 1 - BETAS[0] ** self.t
                bc2_sqrt = math.sqrt(1 - BETAS[1] ** self.t)
                denom = (st["exp_avg_sq"].sqrt() / bc2_sqrt).add_(EPS)
                p.sub_((lr / bc1) * st["exp_avg"] / denom)
            else:  # sgd (dampening 0, no nesterov), as torch.optim.SGD
                d_p = g + wd * p
                if name not in self.state:
                    self.state[name] = {"momentum_buffer": d_p.clone()}
                else:
                    buf = self.state[name]["momentum_buffer"]
                    buf.mul_(self._k(self.momentum, p)).add_(d_p)
                p.sub_(lr * self.state[name]["momentum_buffer"])

    def _adam_state(self, name: str) -> dict[str, Tensor]:
        p = self.stack.params[name]
        if name not in self.state:  # (not setdefault: its default would allocate two zero tensors every call)
            self.state[name] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
        return self.state[name]

    def _fused_adamw_step(self, grads: dict[str, Tensor]) -> None:
        """torch's fused AdamW kernel (what `make_optimizer` gives a solo run) on every member's slices:
        one call per distinct (lr, weight decay) among the members, each over all their parameters.

        On a GPU, when every member shares them (a sweep over seeds or sigma), the call takes the stacked
        (K, ...) tensors whole: one tensor per parameter instead of K slices (at K = 300, 35 tensors
        instead of 10,500 built in Python every step, host time the GPU would wait on). The kernel is
        elementwise, so the maths is the same; on the CPU its vectorised loop rounds a few elements
        differently (the last bit of Adam's second moment) when the slices are joined, so the CPU keeps
        the slices, which reproduce solo runs exactly, at small K where building them costs little.
        """
        # read, not advanced, by the kernel; filled in place: a new tensor from a Python number each step
        # would be a host-to-device copy, which on a GPU waits for the queued work
        step = self._step.fill_(float(self.t))
        for (lr, wd), ks in self.by_hyper.items():
            ps, m1, m2, transposed, whole = self._fused_slices(lr, wd, ks)
            gs = []
            for (name, p), t in zip(self.stack.params.items(), transposed):
                g = in_layout_of(grads[name], p)
                if whole:
                    gs.append(g)
                else:
                    slices = _member_slices(g, t)
                    gs.extend(slices[k] for k in ks)
            torch._fused_adamw_(ps, gs, m1, m2, [], [step] * len(ps), lr=lr, beta1=BETAS[0], beta2=BETAS[1],
                                weight_decay=wd, eps=EPS, amsgrad=False, maximize=False)

    def _fused_slices(self, lr: float, wd: float, ks: list[int]) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[bool], bool]:
        """(parameters, first moments, second moments, per parameter whether its slices are transposed, whole)
        the fused call of members ``ks`` updates: the stacked tensors themselves (``whole``) where every member
        shares (lr, wd) on a device where that pays, else the members' slices (`_member_slices`). Built once and kept: parameters and moments
        are updated in place, so their views stay valid (rebuilt if a tensor is replaced)."""
        tensors = []
        for name, p in self.stack.params.items():
            st = self._adam_state(name)
            tensors.append((p, st["exp_avg"], st["exp_avg_sq"]))
        cached = self._slices.get((lr, wd))
        if cached is not None and len(cached[0]) == len(tensors) and all(
                a is b for old, new in zip(cached[0], tensors) for a, b in zip(old, new)):
            return cached[1]
        # every member shares (lr, wd), on a device where that pays: the stacked tensors themselves
        whole = len(ks) == len(self.lr) and self.lr.device.type in WHOLE_STACK_DEVICES
        ps, m1, m2, transposed = [], [], [], []
        for p, exp_avg, exp_avg_sq in tensors:
            transposed.append(not whole and _dense_transposed(p))
            for out, t in ((ps, p), (m1, exp_avg), (m2, exp_avg_sq)):
                if whole:
                    out.append(t)
                else:
                    slices = _member_slices(t, transposed[-1])
                    out.extend(slices[k] for k in ks)
        plan = (ps, m1, m2, transposed, whole)
        self._slices[(lr, wd)] = (tensors, plan)
        return plan

    def member_optimizer(self, model: torch.nn.Module, cfg: TrainConfig, k: int) -> torch.optim.Optimizer:
        """A torch optimizer for member k's model holding member k's state (for its checkpoint)."""
        opt = make_optimizer(model, cfg)
        for name, p in model.named_parameters():
            if name not in self.state:
                continue
            # in the member parameter's own layout (contiguous), not the stack's: see `trainers.train.match_state_layout`
            st = {key: torch.empty_like(p, device="cpu").copy_(v[k]) for key, v in self.state[name].items()}
            if self.name == "adamw":
                st["step"] = torch.tensor(float(self.t))
            opt.state[p] = st
        return opt

    def load_member(self, k: int, opt_state: dict[str, Any], names: list[str]) -> None:
        """Copy member k's state from a torch optimizer ``state_dict()`` (param i = names[i])."""
        for i, name in enumerate(names):
            st = opt_state["state"].get(i, opt_state["state"].get(str(i)))
            if not st:
                continue
            p = self.stack.params[name]
            keys = ("exp_avg", "exp_avg_sq") if self.name == "adamw" else ("momentum_buffer",)
            dst = self._adam_state(name) if self.name == "adamw" else self.state.setdefault(name, {"momentum_buffer": torch.zeros_like(p)})
            for key in keys:
                dst[key][k] = st[key].to(p.device, p.dtype)
            if self.name == "adamw":
                self.t = int(float(st["step"]))


# ----------------------------------------------------------------------------------------------
# Evaluation of all members at once


@torch.no_grad()
def ensemble_split_metrics(base: PETransformer, stack: Stack, split: Split, prefix: str,
                           batch_size: int = EVAL_BATCH, amp: Any = None) -> list[dict[str, float]]:
    """`trainers.evaluate.split_metrics` for each member: acc, loss, acc per level."""
    from trainers.tasks.lst import LEVELS

    if len(split) == 0:
        return [{} for _ in range(next(iter(stack.params.values())).shape[0])]
    base.eval()
    correct, losses = [], []
    for i in range(0, len(split), batch_size):
        with amp or nullcontext():
            logits = ensemble_forward(base, stack, split.x[i : i + batch_size], shared_input=True).float()  # (K, b, C)
        y = split.y[i : i + batch_size]
        correct.append(logits.argmax(-1) == y)  # (K, b)
        losses.append(F.cross_entropy(logits.transpose(1, 2), y.expand(logits.shape[0], -1), reduction="none").sum(1))
    base.train()
    correct_t = torch.cat(correct, dim=1).float()  # (K, M)
    acc = correct_t.mean(1).tolist()
    loss = (torch.stack(losses).sum(0) / len(split)).tolist()
    per_level = {}
    for i, name in enumerate(LEVELS):
        mask = split.levels == i
        if mask.any():
            per_level[name.lower()] = correct_t[:, mask].mean(1).tolist()
    out = []
    for k in range(len(acc)):
        m = {f"{prefix}_acc": acc[k], f"{prefix}_loss": loss[k]}
        m.update({f"{prefix}_acc_{lvl}": v[k] for lvl, v in per_level.items()})
        out.append(m)
    return out


# ----------------------------------------------------------------------------------------------
# The loop


@dataclass
class _Member:
    index: int
    cfg: TrainConfig
    out: Path
    model: PETransformer
    resume: dict[str, Any] | None
    splits: dict[str, Any]  # the puzzles of its data config (`checked_splits`), shared by the members that use them


def train_ensemble(
    cfgs: Sequence[TrainConfig],
    out_dirs: Sequence[str | os.PathLike],
    *,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    max_group: int | None = None,
    compile: bool = False,
    amp: bool = False,
    workers: int | None = None,
    cuda_graphs: bool = False,
    tf32: bool = False,
) -> list[dict[str, float]]:
    """Train (or resume, or report finished) one run per (cfg, out_dir); return each run's last metrics.

    max_group: at most this many members per batched group (default: all on a GPU, `CPU_GROUP` on
    the CPU); compile: ``torch.compile`` the batched training step (cuda_graphs: with CUDA graphs, GPU
    only, see `trainers.train.compiled_step`); amp: bf16 autocast (GPU, or a CPU
    with native bf16, see `trainers.evaluate.bf16_autocast`); tf32: TensorFloat-32 matrix products in the
    training steps (CUDA GPU, see `trainers.evaluate.tf32_matmuls`); workers: on the CPU, batched groups
    trained side by side, one thread and one core each (default: one per core; see `cpu_workers`).
    """
    if len(cfgs) != len(out_dirs):
        raise InputError(f"train_ensemble: {len(cfgs)} configs but {len(out_dirs)} run folders")
    if not cfgs:
        raise InputError("train_ensemble: no runs given")
    outs = [Path(o) for o in out_dirs]
    if len({o.resolve() for o in outs}) != len(outs):
        raise InputError("train_ensemble: two members share a run folder; give each its own")
    if max_group is not None and max_group < 1:
        raise InputError(f"--ensemble-max must be >= 1, got {max_group}")
    log = log or print_line
    results: list[dict[str, float] | None] = [None] * len(cfgs)
    gt = ground_truth(cfgs[0].task)
    for cfg in cfgs:
        validate(cfg)
    # settings that can fail are checked before any run folder is touched
    device = resolve_device(cfgs[0].device)
    SpeedOptions(compile=compile, bf16=amp, cuda_graphs=cuda_graphs, tf32=tf32).check(device)
    if device.type == "cpu":
        keep_freed_memory()  # malloc keeps freed activation memory mapped (worker processes: _init_process)
    n_workers = cpu_workers(workers, cfgs, device, compile)

    models = []
    for cfg in cfgs:  # every model first: a bad PE / width combination fails before any folder is written
        seed_everything(cfg.seed)  # the same init as `train`
        models.append(PETransformer(cfg.model, cfg.pe, torch.as_tensor(gt.coords)))

    # every folder checked, and the data of every member still to train made, before any folder is written
    resumes = [check_run_dir(cfg, out, force) for cfg, out in zip(cfgs, outs)]
    finished = {i for i, (cfg, r) in enumerate(zip(cfgs, resumes)) if r is not None and r["epoch"] >= cfg.optim.epochs}
    data_keys = [json.dumps(cfg.to_dict()["data"], sort_keys=True) for cfg in cfgs]
    splits_of = {}  # data config -> puzzles (a bad --ood-puzzles file or data options fail here)
    for i, cfg in enumerate(cfgs):
        if i not in finished and data_keys[i] not in splits_of:
            splits_of[data_keys[i]] = checked_splits(cfg)
    groups: dict[tuple[str, int], list[_Member]] = {}
    for i, (cfg, out, model, resume) in enumerate(zip(cfgs, outs, models, resumes)):
        if i in finished:
            log(f"{out}: run already finished at epoch {resume['epoch']}")
            results[i] = dict(resume["metrics"])
            continue
        start_run_dir(cfg, out, resume)
        start = resume["epoch"] if resume is not None else 0
        groups.setdefault((group_key(cfg), start), []).append(_Member(i, cfg, out, model, resume, splits_of[data_keys[i]]))

    jobs = []
    for members in groups.values():
        size = group_size(len(members), n_workers, max_group)
        jobs += [members[j : j + size] for j in range(0, len(members), size)]
    processes = in_processes(n_workers, device, compile)  # compiled groups: one spawned process per core
    train_job = functools.partial(_train_group, gt=gt, log=_print if processes else log, compile=compile, amp=amp,
                                  cuda_graphs=cuda_graphs, tf32=tf32)
    runs = _run_jobs(jobs, n_workers, train_job, processes=processes)
    for job, metrics in zip(jobs, runs):
        for m, mk in zip(job, metrics):
            results[m.index] = mk
    return [r if r is not None else {} for r in results]


CPU_GROUP = 4  # members per batched group on the CPU: K = 2..4 keeps one group's activations in cache
CPU_CHUNK_ROWS = 128  # members x puzzles per forward / backward pass of a float32 CPU group step (`cpu_chunk`)


def cpu_chunk(device: torch.device, bf16: bool = False, members: int = 1) -> int | None:
    """Puzzles per forward / backward pass of a group step of ``members`` models (`group_step`'s ``chunk``):
    `CPU_CHUNK_ROWS` // members for float32 on the CPU (32 for the usual group of 4; a lone model's batch of 128
    whole), else None, the whole batch.

    Why: on the CPU a group of 4 at the study's batch of 128 moves float32 activations of several MB per layer
    (the MLP's hidden layer alone 4 x 128 x 16 x 256 floats, 2 MB), more than a core's L2 cache; passes of 128
    member-puzzles keep them there. Measured with `analyses/benchmarks/step_ab_paired.py --side-by-side 2` (two
    one-thread processes at once, compiled, d_model 64, an Intel Xeon with AVX-512;
    reports/benchmarks/cpu-avx512bf16-intel-r2/): a group of 4 in chunks of 32 1.12x faster [95% interval 1.10,
    1.14] than whole; a lone model in chunks of 32 1.23x *slower*, so the chunk scales with the group; bf16 groups
    of 4, whose activations are half the bytes, 1.11x slower in chunks, so they take the whole batch. A GPU
    wants few, large kernels.
    """
    if device.type != "cpu" or bf16 or not CPU_CHUNK_ROWS:
        return None
    return max(1, CPU_CHUNK_ROWS // members)


def cpu_workers(workers: int | None, cfgs: Sequence[TrainConfig], device: torch.device, compile: bool) -> int:
    """How many batched groups train side by side: on the CPU one per core unless told otherwise.

    Why: at the study's sizes one model's step is compute-bound and too small for torch's intra-op
    threads to share well (2 threads: ~1.2-1.5x one), while independent groups on separate cores scale
    ~2x. Always 1 on a GPU. Eager groups run on worker threads, so 1 with dropout > 0 (the dropout masks
    come from torch's global RNG, which threads would share); compiled groups run in worker processes
    (`in_processes`), each with its own RNG.
    """
    if workers is not None and workers < 1:
        raise InputError(f"--ensemble-workers must be >= 1, got {workers}")
    if device.type != "cpu" or (not compile and any(c.model.dropout > 0 for c in cfgs)):
        return 1
    return workers if workers is not None else usable_cores()


def in_processes(n_workers: int, device: torch.device, compile: bool) -> bool:
    """Whether CPU workers are spawned processes rather than threads: for compiled groups.

    Threads suit eager groups (torch ops release the GIL; no start-up cost), but torch.compile is not
    thread-safe (its guards even depend on the thread count) and a compiled step's Python wrapper holds
    the GIL between kernels. Each process compiles its own step (once per group; about a minute or more on a
    2-core CPU).
    Measured (``reports/benchmarks/train.md``, d_model 64, 8 members on 2 cores): bf16 1.07x the eager
    threads, float32 0.98x.
    """
    return device.type == "cpu" and compile and n_workers > 1


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def group_size(n_members: int, n_workers: int, max_group: int | None = None) -> int:
    """Members per batched group: ``max_group`` if given, else all of them with one worker (a GPU), else
    at most `CPU_GROUP` and few enough that every worker gets a group."""
    if max_group:
        return max_group
    return n_members if n_workers == 1 else min(CPU_GROUP, math.ceil(n_members / n_workers))


class _Stopped(Exception):
    """Raised inside a worker thread when another worker failed or the user interrupted."""


def _run_jobs(jobs: list[Any], n_workers: int, fn: Callable[[Any, Any], Any], processes: bool = False) -> list[Any]:
    """fn(job, stop) for every job, in order; on ``n_workers`` workers with one torch thread each when > 1.

    Workers are threads, or with ``processes`` spawned processes (then ``fn`` and the jobs must pickle;
    module-level functions, `functools.partial` of them). When a job fails (or Ctrl-C reaches the main
    process) ``stop`` (an Event) is set; the other workers leave at their next step (their runs resume
    from their last checkpoint) and the first error is re-raised.
    """
    if n_workers == 1 or len(jobs) <= 1:
        return [fn(job, threading.Event()) for job in jobs]
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, ThreadPoolExecutor, wait

    n = min(n_workers, len(jobs))
    threads = torch.get_num_threads()
    if processes:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # fork would copy torch's thread pools mid-use
        stop: Any = ctx.Event()
        pool: Any = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_process, initargs=(stop,))
        submit = lambda job: pool.submit(_call_in_process, fn, job)  # noqa: E731
    else:
        stop = threading.Event()
        torch.set_num_threads(1)  # each worker thread runs its ops on its own core
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="ensemble")
        submit = lambda job: pool.submit(fn, job, stop)  # noqa: E731
    futures: list[Any] = []
    try:
        futures = [submit(job) for job in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:  # the first failure stops the rest at once (raised here, handled below)
            if f in done and f.exception() is not None:
                raise f.exception()
        return [f.result() for f in futures]
    except BaseException:
        stop.set()
        for f in futures:
            f.cancel()
        raise
    finally:
        pool.shutdown(wait=True)
        torch.set_num_threads(threads)


_PROCESS_STOP: Any = None  # the pool's stop Event, in a worker process


def _init_process(stop: Any) -> None:
    """Worker-process start: one torch thread (one core), malloc keeping freed memory, the pool's stop Event."""
    global _PROCESS_STOP
    _PROCESS_STOP = stop
    torch.set_num_threads(1)
    keep_freed_memory()


def _call_in_process(fn: Callable[[Any, Any], Any], job: Any) -> Any:
    return fn(job, _PROCESS_STOP)


def _print(line: str) -> None:
    """The log of a worker process (a parent's log function may not pickle)."""
    print(line, flush=True)


def _train_group(members: list[_Member], stop: Any = None, *, gt: Any, log: Callable[[str], None], compile: bool,
                 amp: bool, cuda_graphs: bool = False, tf32: bool = False) -> list[dict[str, float]]:
    cfg0 = members[0].cfg
    K = len(members)
    name_of = members[0].out.name if K == 1 else f"ensemble of {K} ({members[0].out.name}, ...)"  # for log lines
    device = resolve_device(cfg0.device)
    autocast = bf16_autocast(device) if amp else None
    precision = tf32_matmuls(device, tf32)  # the whole step (forward, backward, optimizer); evaluation outside

    for m in members:
        m.model.to(device)
        if m.resume is not None:
            m.model.load_state_dict(m.resume["model"])
    names = [n for n, _ in members[0].model.named_parameters()]
    stack = Stack.of([m.model for m in members])
    opt = StackedOptimizer(stack, [m.cfg for m in members], device)
    start_epoch, step, elapsed = 0, 0, [0.0] * K
    metrics: list[dict[str, float]] = [{} for _ in members]
    notes: list[str | None] = []
    for k, m in enumerate(members):
        if m.resume is not None:
            opt.load_member(k, m.resume["optimizer"], names)
            start_epoch, step = m.resume["epoch"], m.resume["step"]
            metrics[k] = dict(m.resume["metrics"])
            elapsed[k] = float(m.resume.get("elapsed_s", 0.0))
            notes.append(_trim_metrics(m.out / METRICS_FILE, start_epoch))
    if start_epoch:
        log(f"{name_of}: resuming from epoch {start_epoch} (step {step})")
    for note in filter(None, notes):
        log(note)
    base = template_model(members[0].model)

    splits = {name: encode_split(ps, device) for name, ps in members[0].splits.items()}  # one data config per group
    train_split = splits["train"]
    n_train = len(train_split)
    version = code_version()  # git once for the group
    chunk = cpu_chunk(device, amp, K)
    for m in members:
        record_session(m.out, version, trainer="ensemble", device=str(device), start_epoch=start_epoch, group_size=K,
                       chunk=chunk,
                       torch_threads=torch.get_num_threads(),
                       **SpeedOptions(compile=compile, bf16=amp, cuda_graphs=cuda_graphs, tf32=tf32).recorded())

    step_loss, mark_step = compiled_step(group_loss(base, stack.buffers, autocast), device, compile, cuda_graphs,
                                         cpp_wrapper=cpp_wrapper_for(device, amp))

    def checkpoint(epoch: int) -> None:
        now = time.time() - t0
        with torch.no_grad():
            for k, m in enumerate(members):
                for name, p in m.model.named_parameters():
                    p.copy_(stack.params[name][k])
                save_run_checkpoint(m.out, m.model, opt.member_optimizer(m.model, m.cfg, k), m.cfg.to_dict(), gt,
                                    step=step, epoch=epoch, metrics=metrics[k], elapsed_s=elapsed[k] + now)

    epochs, bs = cfg0.optim.epochs, cfg0.optim.batch_size
    base.train()
    log(start_message(name_of, cfg0, start_epoch, n_train, "puzzles", device))  # no progress bar here
    t0 = time.time()
    for epoch in range(start_epoch, epochs):
        # per-member data order from (seed, epoch), as in `train`; one global RNG seed for dropout
        perms = torch.stack([torch.randperm(n_train, generator=torch.Generator().manual_seed(epoch_seed(m.cfg.seed, epoch)))
                             for m in members]).to(device)  # (K, n_train)
        torch.manual_seed(epoch_seed(cfg0.seed, epoch))
        for i in range(0, n_train, bs):
            if stop is not None and stop.is_set():
                raise _Stopped(f"{name_of}: stopped at epoch {epoch} because another worker failed")
            idx = perms[:, i : i + bs]  # (K, b)
            group_step(step_loss, stack, opt, train_split.x[idx], train_split.y[idx], precision, mark_step, chunk)
            step += 1

        done = epoch + 1
        if evaluates_at(cfg0, done):
            metrics = [{} for _ in members]
            for name, split in splits.items():
                for k, mk in enumerate(ensemble_split_metrics(base, stack, split, name, amp=autocast)):
                    metrics[k].update(mk)
            now = time.time() - t0
            for k, m in enumerate(members):
                line = {"epoch": done, "step": step, "time": round(elapsed[k] + now, 3), **metrics[k]}
                with open(m.out / METRICS_FILE, "a") as f:
                    f.write(json.dumps(line) + "\n")
            ood = torch.tensor([mk.get("ood_acc", float("nan")) for mk in metrics])
            if K == 1:
                log(f"{name_of}: epoch {done}/{epochs} step {step}: train_loss {metrics[0]['train_loss']:.4f}  "
                    f"ood_acc {ood[0]:.3f}")
            else:
                log(f"{name_of}: epoch {done}/{epochs} step {step}: train_loss mean "
                    f"{sum(mk['train_loss'] for mk in metrics) / K:.4f}  ood_acc min/mean/max "
                    f"{ood.min():.3f}/{ood.mean():.3f}/{ood.max():.3f}")
        if checkpoints_at(cfg0, done):
            checkpoint(done)
    return metrics


def member_base_name(cfg: TrainConfig) -> str:
    """``<pe>_sigma<σ>_lr<lr>_seed<seed>``: a member's folder name before 2026-12-07, and the start of it since."""
    return f"{cfg.pe.kind}_sigma{cfg.pe.init_std:g}_lr{cfg.optim.lr:g}_seed{cfg.seed}"


def member_name(cfg: TrainConfig) -> str:
    """Run-folder name of a member: ``<pe>_sigma<σ>_lr<lr>_seed<seed>``, then ``_init<init>``, ``_<optimizer>``,
    ``_wd<weight decay>`` and ``_mom<momentum>`` (SGD) for each that is not the default, so that ensembles that
    differ in them can share one ``--out`` (they were refused there as another config)."""
    from trainers.config import OptimConfig, PEConfig
    from trainers.pe import TABLE_INIT_KINDS

    name = member_base_name(cfg)
    if cfg.pe.kind in TABLE_INIT_KINDS and cfg.pe.init != PEConfig.init:
        name += f"_init{cfg.pe.init}"
    if cfg.optim.name != OptimConfig.name:
        name += f"_{cfg.optim.name}"
    if cfg.optim.weight_decay != OptimConfig.weight_decay:
        name += f"_wd{cfg.optim.weight_decay:g}"
    if cfg.optim.name == "sgd" and cfg.optim.momentum != OptimConfig.momentum:
        name += f"_mom{cfg.optim.momentum:g}"
    return name


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `pe-probe train lst --ensemble-seeds ...` or trainers.ensemble.train_ensemble")
