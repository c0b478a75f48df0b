"""Positional encodings (PE): one small module per variant behind one interface, plus a registry.

Two families:

* **additive** PEs hold a table ``.table`` (N, d) and return ``x + table`` from ``forward``. Learned
  tables are Parameters; fixed ones (sinusoids, random) are persistent buffers, so they are saved in
  the state_dict and can be analysed like the learned ones.
* **attention** PEs act inside self-attention: ``rotate(q, k)`` (RoPE) rotates queries and keys,
  ``attn_bias(q)`` (relative) returns an additive float logit bias for
  ``F.scaled_dot_product_attention``.

Every variant is built from one `PESpec` (model width, heads, the tokens' true coordinates and the
init settings), so a new variant is one class plus one line in `PE_KINDS`. Positions come from the
task's coordinates: 2D/3D variants use them directly, 1D variants use the token index.

When the sequence carries extra leading tokens (a CLS token), PEs act on the last N tokens only and
leave the extra tokens untouched (no table added, no rotation, no relative bias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from pe_probe.errors import InputError

INITS = ("normal", "uniform", "zeros")


@dataclass
class PESpec:
    """What every PE module is built from.

    coords: (N, k) true coordinates of the N tokens, row-major token order (e.g. (row, col)).
    init / init_std: initialisation of learned tables: ``normal`` N(0, std^2), ``uniform`` U(-a, a)
        with a = std * sqrt(3) (so the std is ``init_std``), or ``zeros``.
    causal: relative PE only: mask attention to later tokens.
    """

    d_model: int
    n_heads: int
    coords: Tensor
    init: str = "normal"
    init_std: float = 0.1
    causal: bool = False

    @property
    def n_positions(self) -> int:
        return int(self.coords.shape[0])

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# ----------------------------------------------------------------------------------------------
# Helpers


def sinusoid_table(coords: Tensor, d: int, base: float = 10000.0) -> Tensor:
    """Fixed sinusoid of k-dimensional coordinates, (N, k) -> (N, d) float32; the definition is
    `pe_probe.reference.sinusoid` (the study's 2D form for k = 2), so the trainer's fixed tables and
    the analysis references are the same function."""
    from pe_probe.reference import sinusoid

    return torch.from_numpy(sinusoid(coords.double().numpy(), d, base)).float()


def init_table_(t: Tensor, init: str, std: float) -> Tensor:
    """Initialise a table in place: normal N(0, std^2), uniform with the same std, or zeros."""
    with torch.no_grad():
        if init == "normal":
            t.normal_(0.0, std)
        elif init == "uniform":
            a = std * math.sqrt(3.0)
            t.uniform_(-a, a)
        elif init == "zeros":
            t.zero_()
        else:
            raise InputError(f"unknown PE init {init!r}; choose one of {', '.join(INITS)}")
    return t


def rotary_angles(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """RoPE angles, (N,) positions -> (N, dim/2): pos * base^(-2i/dim) for pair i."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    return (pos.double()[:, None] * inv_freq).float()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (2i, 2i+1) of the last dim of x (..., T, hs) by angles given as cos/sin (T, hs/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, hs/2)
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, hs/2, 2)
    return out.flatten(-2)  # (..., T, hs)


# ----------------------------------------------------------------------------------------------
# Base classes


class PositionalEncoding(nn.Module):
    """Interface of every PE. ``placement`` says where the model puts it: "input", "attention", "none"."""

    placement = "none"
    coords_dim: int | None = None  # the coordinate dimension it needs (sin2d, rope2d: 2; sin3d: 3); None: any

    def forward(self, x: Tensor) -> Tensor:  # additive PEs override
        return x

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:  # RoPE overrides
        return q, k

    def attn_bias(self, q: Tensor) -> Tensor | None:  # relative PE overrides
        return None


class AdditivePE(PositionalEncoding):
    """A (N, d) table added to the token embeddings: x (B, T, d) with T >= N -> x + table on the last N."""

    placement = "input"
    table: Tensor

    def forward(self, x: Tensor) -> Tensor:
        n = self.table.shape[0]
        if x.shape[1] == n:
            return x + self.table
        extra = x.shape[1] - n  # leading CLS token(s) get no position
        return torch.cat([x[:, :extra], x[:, extra:] + self.table], dim=1)


class AttentionPE(PositionalEncoding):
    placement = "attention"


# ----------------------------------------------------------------------------------------------
# Variants


class NoPE(PositionalEncoding):
    """No positional information at all (a permutation-invariant baseline)."""

    def __init__(self, spec: PESpec):
        super().__init__()


class Sin1D(AdditivePE):
    """Fixed 1D sinusoid over the token index (Vaswani et al. 2017)."""

    def __init__(self, spec: PESpec):
        super().__init__()
        idx = torch.arange(spec.n_positions, dtype=torch.float64)[:, None]  # (N, 1)
        self.register_buffer("table", sinusoid_table(idx, spec.d_model))


class _SinND(AdditivePE):
    coords_dim = 2

    def __init__(self, spec: PESpec):
        super().__init__()
        if spec.coords.shape[1] != self.coords_dim:
            raise InputError(
                f"pe {type(self).__name__.lower()} needs {self.coords_dim}D coordinates, the task has "
                f"{spec.coords.shape[1]}D; pick another --pe"
            )
        self.register_buffer("table", sinusoid_table(spec.coords, spec.d_model))


class Sin2D(_SinND):
    """Fixed 2D sinusoid of (row, col): first half of dims encodes the column, second half the row."""

    coords_dim = 2


class Sin3D(_SinND):
    """Fixed 3D sinusoid of (x, y, z), in thirds (last axis first), for 3D tasks."""

    coords_dim = 3


class RandomPE(AdditivePE):
    """Fixed random table N(0, 1), never trained: positions are distinguishable but carry no geometry."""

    def __init__(self, spec: PESpec):
        super().__init__()
        self.register_buffer("table", torch.randn(spec.n_positions, spec.d_model))


class LearnedPE(AdditivePE):
    """Learned table (a Parameter) initialised normal / uniform with std ``init_std``, or zeros."""

    def __init__(self, spec: PESpec):
        super().__init__()
        self.table = nn.Parameter(init_table_(torch.empty(spec.n_positions, spec.d_model), spec.init, spec.init_std))


class RelativePE(AttentionPE):
    """Learned relative-position embeddings in the attention logits (Shaw et al. 2018, key term).

    logit_ij += q_i . a_{clip(j - i)} / sqrt(hs), one vector a per clipped token offset, shared by the
    heads of a layer. Bidirectional by default; ``causal`` also masks later tokens (j > i).
    The table is initialised with the spec's init / init_std.
    """

    def __init__(self, spec: PESpec, max_offset: int | None = None):
        super().__init__()
        n = spec.n_positions
        k = n - 1 if max_offset is None else max_offset
        self.causal = spec.causal
        self.offset_table = nn.Parameter(init_table_(torch.empty(2 * k + 1, spec.head_dim), spec.init, spec.init_std))
        i = torch.arange(n)
        self.register_buffer("offset_idx", (i[None, :] - i[:, None]).clamp(-k, k) + k, persistent=False)  # (N, N)

    def attn_bias(self, q: Tensor) -> Tensor:
        B, nh, T, hs = q.shape
        n = self.offset_idx.shape[0]
        extra = T - n
        a = self.offset_table[self.offset_idx]  # (N, N, hs)
        rel = torch.einsum("bhid,ijd->bhij", q[:, :, extra:], a) / math.sqrt(hs)  # (B, nh, N, N)
        if self.causal:
            future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            rel = rel.masked_fill(future, float("-inf"))
        if extra == 0:
            return rel
        bias = q.new_zeros(B, nh, T, T)
        bias[:, :, extra:, extra:] = rel
        return bias


class _Rotary(AttentionPE):
    """Shared RoPE machinery: cos/sin tables (N, hs/2) as non-persistent buffers (derived, not state)."""

    def _set_angles(self, ang: Tensor) -> None:
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        # q, k: (B, nh, T, hs); rotation over the token axis only, identical for every batch element
        extra = q.shape[-2] - self.cos.shape[0]
        if extra:
            q = torch.cat([q[..., :extra, :], apply_rotary(q[..., extra:, :], self.cos, self.sin)], dim=-2)
            k = torch.cat([k[..., :extra, :], apply_rotary(k[..., extra:, :], self.cos, self.sin)], dim=-2)
            return q, k
        return apply_rotary(q, self.cos, self.sin), apply_rotary(k, self.cos, self.sin)


class Rope1D(_Rotary):
    """Rotary PE over the token index (Su et al. 2021): logits depend only on the index offset."""

    def __init__(self, spec: PESpec):
        super().__init__()
        if spec.head_dim % 2:
            raise InputError(f"rope1d needs an even head dim, got {spec.head_dim}; change --d-model or --heads")
        self._set_angles(rotary_angles(torch.arange(spec.n_positions), spec.head_dim))


class Rope2D(_Rotary):
    """Axial 2D RoPE: the first half of each head's dims rotates by row, the second half by column."""

    coords_dim = 2

    def __init__(self, spec: PESpec):
        super().__init__()
        hs = spec.head_dim
        if hs % 4:
            raise InputError(f"rope2d needs a head dim divisible by 4, got {hs}; change --d-model or --heads")
        if spec.coords.shape[1] != 2:
            raise InputError(f"rope2d needs 2D coordinates, the task has {spec.coords.shape[1]}D; pick another --pe")
        row = rotary_angles(spec.coords[:, 0], hs // 2)  # (N, hs/4)
        col = rotary_angles(spec.coords[:, 1], hs // 2)  # (N, hs/4)
        self._set_angles(torch.cat([row, col], dim=1))  # (N, hs/2)


PE_KINDS: dict[str, type[PositionalEncoding]] = {
    "none": NoPE,
    "sin1d": Sin1D,
    "sin2d": Sin2D,
    "sin3d": Sin3D,
    "random": RandomPE,
    "learned": LearnedPE,
    "relative": RelativePE,
    "rope1d": Rope1D,
    "rope2d": Rope2D,
}


TABLE_INIT_KINDS = ("learned", "relative")  # the PEs with a trainable table drawn by ``init`` / ``init_std``


def init_matters(kind: str, init: str) -> bool:
    """Whether ``init_std`` changes a model with this PE: only initialised trainable tables (learned,
    relative) drawn from a distribution; fixed PEs, RoPE, no PE and zero-initialised tables ignore it."""
    return kind in TABLE_INIT_KINDS and init != "zeros"


def pe_kinds_for(coords_dim: int) -> list[str]:
    """The PE kinds that can encode positions with ``coords_dim``-dimensional coordinates."""
    return [k for k, cls in PE_KINDS.items() if cls.coords_dim in (None, coords_dim)]


def pe_class(kind: str) -> type[PositionalEncoding]:
    """The class registered as ``kind``; its ``placement`` says where the model puts it."""
    if kind not in PE_KINDS:
        raise InputError(f"unknown PE kind {kind!r}; choose one of {', '.join(PE_KINDS)}")
    return PE_KINDS[kind]


def build_pe(kind: str, spec: PESpec) -> PositionalEncoding:
    """Build the PE named ``kind`` (a key of `PE_KINDS`) from ``spec``."""
    return pe_class(kind)(spec)
