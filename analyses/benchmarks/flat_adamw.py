"""AdamW for a single model on the CPU run as one fused-kernel call on flat buffers (an experiment).

torch's fused AdamW takes a list of tensors, but its CPU kernel updates them one at a time, each in its own
parallel region, and bumps each parameter's step counter with its own small op: 56 tensors for the study's
model. `FlatAdamW` lays every trainable parameter and both moments out in flat buffers (the parameters
become views into theirs), gathers the gradients with one ``cat`` and runs the same kernel once, with one
shared step counter. `bench_optimizer.py --single` times the optimizer step alone against torch's; the
experiment flag ``flat_adamw`` (`step_experiments`) times whole training steps with it. Not the trainers'
optimizer: see reports/benchmarks/README.md (Training on the CPU) for what the step-level A/B could and
could not resolve.

The update is torch's: the same kernel on the same values. Where a per-parameter call leaves a tensor's last
few elements (its size modulo the vector width) to the kernel's scalar loop, the flat call may run them in
the vector loop, which can round the last bit differently (within 1e-7 of AdamW in the tests). To
everything outside it is a `torch.optim.AdamW`: the same ``param_groups``, and ``state_dict`` /
``load_state_dict`` in AdamW's own per-parameter format (each parameter its own step tensor), so a run's
checkpoints and resumes would read and write it as before. It falls back to AdamW's own per-parameter step
(for good, with per-parameter step counters) as soon as a trained parameter comes without a gradient, where
AdamW would skip that parameter, or when the group's options leave what the flat step covers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from trainers.train import fused_adamw_supported

# Each parameter's view starts at a multiple of this many elements (64 bytes for float32): compiled steps
# see their parameters aligned as before, whatever the sizes before them. The gaps stay zero: zero gradient
# and zero weight leave them zero through every update.
ALIGN = 16


def takes(params: list[Tensor]) -> bool:
    """Whether `FlatAdamW` takes these parameters: those of torch's fused AdamW, on the CPU."""
    return fused_adamw_supported(params) and all(p.device.type == "cpu" for p in params)


class FlatAdamW(torch.optim.AdamW):
    """`torch.optim.AdamW` (fused, one parameter group) whose step runs its fused kernel once on flat buffers.

    Construct it before anything else holds the parameters' storage: their ``.data`` become views of one
    buffer (same values, same Parameter objects). Float32 CPU tensors only (`takes`).
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        params = list(params)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        if not takes(params):
            raise ValueError("FlatAdamW takes float32 CPU parameters; use torch.optim.AdamW(fused=True) elsewhere")
        self._trained = [p for p in params if p.requires_grad]
        self._offsets, total = [], 0
        for p in self._trained:
            self._offsets.append(total)
            total += -(-p.numel() // ALIGN) * ALIGN
        self._flat = torch.nn.Parameter(torch.zeros(total), requires_grad=False)
        with torch.no_grad():
            for p, view in zip(self._trained, self._views(self._flat.data)):
                view.copy_(p)
                p.data = view
        self._grad = torch.zeros(total)
        self._pieces = self._gap_fillers()
        self._step: Tensor | None = None  # the shared step counter, once the first step has laid the state out
        self._state_views: list[tuple[Tensor, Tensor]] = []  # each parameter's views of the two moments
        self._kernel = torch.optim.AdamW([self._flat], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        self.flat = True  # False once it has fallen back to AdamW's per-parameter step

    def _views(self, buffer: Tensor) -> list[Tensor]:
        return [buffer[o : o + p.numel()].view(p.shape) for p, o in zip(self._trained, self._offsets)]

    def _gap_fillers(self) -> list[Tensor | None]:
        """The ``cat`` pieces: None where a gradient goes, a zero tensor for each alignment gap after it."""
        pieces: list[Tensor | None] = []
        ends = self._offsets[1:] + [self._grad.numel()]
        for p, o, end in zip(self._trained, self._offsets, ends):
            pieces.append(None)
            if end - o - p.numel():
                pieces.append(torch.zeros(end - o - p.numel()))
        return pieces

    def _flat_ok(self) -> bool:
        """Whether this step can run on the flat buffers: every trained parameter has a dense float32
        gradient and the group's options are those the flat kernel call copies."""
        group = self.param_groups[0]
        if group["amsgrad"] or group["maximize"] or group.get("differentiable") or group.get("capturable"):
            return False
        return all(p.grad is not None and not p.grad.is_sparse and p.grad.dtype == torch.float32 for p in self._trained)

    def _lay_out(self) -> None:
        """Put the step counter and both moments in flat buffers (zeros, or the values in ``state``, which
        `load_state_dict` or a caller may have replaced) and make ``state`` hold views of them."""
        states = [self.state.get(p, {}) for p in self._trained]
        steps = {float(st["step"]) for st in states if st}
        if len(steps) > 1 or (any(states) and not all(states)):
            # counters that differ, or state for some parameters only (from a per-parameter run): AdamW's own
            # step from now on, which starts a parameter without state at step 0 as it would
            self._fall_back()
            return
        step = torch.tensor(steps.pop() if steps else 0.0, dtype=torch.float32)
        exp_avg, exp_avg_sq = torch.zeros_like(self._grad), torch.zeros_like(self._grad)
        self._state_views = []
        for p, st, m, v in zip(self._trained, states, self._views(exp_avg), self._views(exp_avg_sq)):
            if st:
                m.copy_(st["exp_avg"])
                v.copy_(st["exp_avg_sq"])
            self.state[p] = {"step": step, "exp_avg": m, "exp_avg_sq": v}
            self._state_views.append((m, v))
        self._kernel.state[self._flat] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        self._step = step

    def _laid_out(self) -> bool:
        """Whether ``state`` still holds the views `_lay_out` made (nothing has replaced them since)."""
        if self._step is None:
            return False
        for p, (m, v) in zip(self._trained, self._state_views):
            st = self.state.get(p, {})
            if st.get("step") is not self._step or st.get("exp_avg") is not m or st.get("exp_avg_sq") is not v:
                return False
        return True

    def _fall_back(self) -> None:
        """AdamW's own per-parameter step from now on, each parameter with a step counter of its own."""
        self.flat = False
        for p in self._trained:
            st = self.state.get(p)
            if st:
                self.state[p] = {key: v.clone() for key, v in st.items()}
        self._step = None
        self._kernel.state.clear()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:  # type: ignore[override]
        """One AdamW step: on the flat buffers when `_flat_ok`, else AdamW's per-parameter step (for good)."""
        if self.flat and not self._flat_ok():
            self._fall_back()
        if not self.flat:
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._laid_out():
            self._lay_out()
            if not self.flat:
                return super().step()
        grads = iter(self._trained)
        torch.cat([next(grads).grad.reshape(-1) if piece is None else piece for piece in self._pieces], out=self._grad)
        self._flat.grad = self._grad
        inner = self._kernel.param_groups[0]
        for key in ("lr", "betas", "eps", "weight_decay"):
            inner[key] = self.param_groups[0][key]
        self._kernel.step()
        self._flat.grad = None
        return loss

    def state_dict(self) -> dict[str, Any]:
        """AdamW's state dict, each tensor a copy of its own: no step counter shared between parameters
        (a plain AdamW loading shared counters would bump them once per parameter) and no views of the
        flat buffers."""
        sd = super().state_dict()
        sd["state"] = {i: {key: v.clone() if isinstance(v, Tensor) else v for key, v in st.items()}
                       for i, st in sd["state"].items()}
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """AdamW's ``load_state_dict``; the flat buffers take the loaded values at the next step."""
        super().load_state_dict(state_dict)
        self._step = None
        self._kernel.state.clear()
