"""Encoder-only transformer for token-classification puzzles (the study's model, nanoGPT-style).

tokens (B, N, n_in) -> Linear embedding -> PE -> n_layers x Block -> readout token -> Linear -> logits.
The study: 4 layers, 1 head, d_model 160, MLP 640 with GELU, post-LN, no dropout, answer read from
the last token.

PE placement (see `trainers.pe`):
* additive PE, once at the input (default): ``pe.table``;
* additive PE with ``every_layer``: a separate table added at the input of every block
  (the study's companion code): ``blocks.0.pe.table``, ``blocks.1.pe.table``, ...;
* attention PEs (relative, RoPE): one module inside each block's attention, ``blocks.i.attn.pe``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from trainers.config import ModelConfig, PEConfig
from trainers.gelu import gelu
from trainers.logits import flat_bmm, logits_product
from trainers.pe import PESpec, PositionalEncoding, build_pe, pe_class


# On the CPU, up to this many keys the plain matmul-softmax path is faster than the fused kernel (forward +
# backward; ``analyses/benchmarks/bench_attention.py``): in float32 (kept at 32, so the netsim / brain
# models, 64 / 80 tokens, keep the fused kernel their committed reports were trained with) and under
# bf16 autocast (the fused kernel then runs in float32, which the bf16 matrix products beat at every
# length measured, up to 512 keys, except for a single query: the LST readout layer, 0.84x, ~0.2 ms a call).
MATH_ATTENTION_MAX_TOKENS = 32
MATH_ATTENTION_MAX_TOKENS_BF16 = 512
# On a GPU inside a torch.compile'd step, up to this many keys: there Inductor fuses the scale, softmax and
# casts around two batched matrix products, which beat the fused kernel at the study's 16 tokens (H200, the
# compiled K = 300 bf16 ensemble step: 56.7 -> 42.3 ms, reports/benchmarks/profile_cuda_math_attention.md).
# Eager GPU steps keep the fused kernel (not measured the other way).
MATH_ATTENTION_MAX_TOKENS_COMPILED_GPU = 32


def math_attention_limit() -> int:
    """Most keys for which `attend` takes the matmul-softmax path on the CPU, under the current autocast."""
    bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    return MATH_ATTENTION_MAX_TOKENS_BF16 if bf16 else MATH_ATTENTION_MAX_TOKENS


def uses_math_attention(q: Tensor, k: Tensor) -> bool:
    """Whether `attend` runs as matrix products and a softmax (True) or `F.scaled_dot_product_attention`."""
    if q.device.type == "cpu":
        return k.shape[-2] <= math_attention_limit()
    return k.shape[-2] <= MATH_ATTENTION_MAX_TOKENS_COMPILED_GPU and torch.compiler.is_compiling()


def attention_weights(q: Tensor, k: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False,
                      scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) in float32 (or q's dtype if wider), the weights
    `F.scaled_dot_product_attention` applies.

    q (B, nh, Tq, hs), k (B, nh, T, hs) -> (B, nh, Tq, T). A boolean mask keeps True entries; a float
    mask is added to the logits. ``scale`` defaults to 1 / sqrt(hs), as in SDPA. The product q k^T is
    taken in float32 even for bf16 / fp16 inputs or under autocast, as SDPA's fused kernels and its math
    backend do by default: rounding the logits to bf16 first (8 significant bits) would move each by up
    to ~0.4% of its size before the softmax (0.05 at a logit of 13) and, in the test, more than double the
    attention output's mean error of SDPA's own bf16 kernel (tests/trainers/test_model.py). For bf16 q and k
    the backward rounds the logits' gradient to bf16 once and multiplies in bf16; on CUDA the forward is one
    bf16 product written in float32 (`trainers.logits.logits_product`).
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    with torch.autocast(q.device.type, enabled=False):
        logits = logits_product(q, k) * scale
    if is_causal:
        Tq, T = logits.shape[-2:]
        logits = logits.masked_fill(torch.ones(Tq, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else logits + attn_mask
    return torch.softmax(logits, dim=-1)


# Devices where `matmul_attention` makes a bf16 v contiguous before its product. v is a slice of the fused
# qkv projection's output (rows 3 C apart), and ATen's CPU bmm copies such a strided bf16 operand into a
# contiguous one inside the call (float32 products take it as it is): in the forward (the weights times v)
# and again in the backward (the output's gradient times v^T), every layer, every step. Made contiguous once
# here, it is one copy in an eager step, and in a compiled one a layout Inductor writes in the kernel that
# already splits q, k and v; the backward's product reads the saved contiguous v. cuBLAS takes strided
# batches as they are, so the GPU keeps the slice.
CONTIGUOUS_V_DEVICES = frozenset({"cpu"})


def matmul_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(hs) + mask) v as two matrix products and a softmax (`attention_weights`), with
    dropout on the weights as the fused kernel applies it: the form `attend` takes where it pays."""
    w = attention_weights(q, k, attn_mask)
    if v.device.type in CONTIGUOUS_V_DEVICES and v.dtype == torch.bfloat16:
        v = v.contiguous()
    w = F.dropout(w, dropout_p) if dropout_p > 0 else w
    return flat_bmm(w.type_as(v), v)  # 3-d batches, which Inductor does not swap for the fused kernel (`flat_bmm`)


def attend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0) -> Tensor:
    """Attention output softmax(q k^T / sqrt(hs) + mask) v: `F.scaled_dot_product_attention`'s maths.

    On the CPU with at most `math_attention_limit` keys (float32: 32, the study's 16 tokens; bf16
    autocast: 512, the netsim / brain models' 64 / 80 too) it runs as two matrix products and a softmax,
    faster there than the fused CPU kernel (forward + backward; ``analyses/benchmarks/bench_attention.py``
    and its report); so it does on a GPU inside a compiled step with at most 32 keys
    (`MATH_ATTENTION_MAX_TOKENS_COMPILED_GPU`). Elsewhere the fused kernel runs, in float32 under CPU
    bf16 autocast (the CPU's bf16 kernel is several times slower at these sizes).
    """
    if uses_math_attention(q, k):
        return matmul_attention(q, k, v, attn_mask, dropout_p)
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            mask = attn_mask.float() if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p)
    if q.device.type == "cuda" and q.shape[0] * q.shape[1] > CUDA_SDPA_MAX_ROWS:
        return sdpa_in_chunks(q, k, v, attn_mask, dropout_p, CUDA_SDPA_MAX_ROWS)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


# cuDNN's fused attention failed on an H200 (torch 2.11, "mha_graph.execute ... is_good()") for 300 x 256 =
# 76,800 sequences of one head (an ensemble of 300 evaluated 256 puzzles at a time) and ran for 38,400 (the
# training batch). Where between the two the limit lies was not measured; calls of more rows (batch x
# heads) than this go through the kernel in chunks of at most this many.
CUDA_SDPA_MAX_ROWS = 32768


def sdpa_in_chunks(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout_p: float, max_rows: int) -> Tensor:
    """`F.scaled_dot_product_attention` over slices of the batch with at most ``max_rows`` (batch x heads)
    each, concatenated: the same values, for batches a fused kernel refuses."""
    step = max(1, max_rows // q.shape[1])
    per_row_mask = attn_mask is not None and attn_mask.dim() == 4 and attn_mask.shape[0] == q.shape[0] > 1
    return torch.cat([F.scaled_dot_product_attention(q[i : i + step], k[i : i + step], v[i : i + step],
                                                     attn_mask=attn_mask[i : i + step] if per_row_mask else attn_mask,
                                                     dropout_p=dropout_p)
                      for i in range(0, q.shape[0], step)])


class SelfAttention(nn.Module):
    """Multi-head self-attention (bidirectional) with an optional attention-side PE."""

    def __init__(self, cfg: ModelConfig, pe: PositionalEncoding | None = None):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self.pe = pe

    def forward(self, x: Tensor, query: int | None = None) -> Tensor:
        """x (B, T, C) -> (B, T, C); with ``query`` only that token's output (B, 1, C) is computed.

        The readout-only form projects one query instead of T (keys and values still see every token);
        with an attention-side PE it runs the full attention and keeps the query's row. Same maths.
        """
        B, T, C = x.shape
        nh, hs = self.n_heads, C // self.n_heads
        one_query = query is not None and self.pe is None  # project only the query token's q
        if one_query:
            w_q, w_kv = self.qkv.weight.split([C, 2 * C])
            b_q, b_kv = self.qkv.bias.split([C, 2 * C])
            q = F.linear(x[:, query : query + 1], w_q, b_q)
            k, v = F.linear(x, w_kv, b_kv).split(C, dim=2)
        else:
            q, k, v = self.qkv(x).split(C, dim=2)
        Tq = q.shape[1]
        q = q.view(B, Tq, nh, hs).transpose(1, 2)  # (B, nh, Tq, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        bias = None
        if self.pe is not None:
            bias = self.pe.attn_bias(q)  # None or (B, nh, T, T) additive float logit bias
            q, k = self.pe.rotate(q, k)
        y = attend(q, k, v, attn_mask=bias, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, Tq, C)  # (B, Tq, C)
        if query is not None and not one_query:
            y = y[:, query : query + 1]  # attention-side PE: full attention, keep the query's row
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = int(round(cfg.mlp_ratio * cfg.d_model))
        self.fc = nn.Linear(cfg.d_model, hidden)
        self.proj = nn.Linear(hidden, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.drop(gelu(self.fc(x))))


class Block(nn.Module):
    """One transformer layer; post-LN (x = LN(x + f(x)), the study's) or pre-LN (x = x + f(LN(x)))."""

    def __init__(self, cfg: ModelConfig, pe: PositionalEncoding | None = None, attn_pe: PositionalEncoding | None = None):
        super().__init__()
        self.pe = pe  # additive PE at this layer's input (every_layer) or None
        self.pre_ln = cfg.norm == "pre"
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg, attn_pe)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, query: int | None = None) -> Tensor:
        """x (B, T, d) -> (B, T, d), or only token ``query``'s output (B, 1, d) (the readout layer)."""
        if self.pe is not None:
            x = self.drop(self.pe(x))
        keep = x if query is None else x[:, query : query + 1]  # the residual stream of the kept tokens
        if self.pre_ln:
            x = keep + self.drop(self.attn(self.ln1(x), query))
            x = x + self.drop(self.mlp(self.ln2(x)))
        else:
            x = self.ln1(keep + self.drop(self.attn(x, query)))
            x = self.ln2(x + self.drop(self.mlp(x)))
        return x


def pe_and_blocks(cfg: ModelConfig, pe_cfg: PEConfig, coords: Tensor) -> tuple[PositionalEncoding | None, nn.ModuleList]:
    """The input PE (or None) and the n_layers blocks, each PE placed as its kind and ``every_layer`` say:
    one table at the input, a separate table at every block's input, or an attention PE in every block.
    Shared by every model here so their checkpoints name PE tables alike (``pe.table`` / ``blocks.i.pe.table``).
    """
    coords = torch.as_tensor(coords, dtype=torch.float32)
    spec = PESpec(cfg.d_model, cfg.n_heads, coords, pe_cfg.init, pe_cfg.init_std, pe_cfg.causal)

    def make():  # a fresh PE module (own table) per call
        return build_pe(pe_cfg.kind, spec)

    placement = pe_class(pe_cfg.kind).placement
    pe = make() if placement == "input" and not pe_cfg.every_layer else None
    blocks = nn.ModuleList(
        Block(
            cfg,
            pe=make() if placement == "input" and pe_cfg.every_layer else None,
            attn_pe=make() if placement == "attention" else None,
        )
        for _ in range(cfg.n_layers)
    )
    return pe, blocks


def pe_param_names(pe: nn.Module | None, blocks: nn.ModuleList) -> list[str]:
    """state_dict names of the additive PE tables in layer order ([] for none/relative/rope)."""
    if pe is not None:
        return ["pe.table"]
    return [f"blocks.{i}.pe.table" for i, b in enumerate(blocks) if b.pe is not None]


class PETransformer(nn.Module):
    """The whole model. ``coords`` (N, k) are the tokens' true positions, used by the PE."""

    def __init__(self, cfg: ModelConfig, pe_cfg: PEConfig, coords: Tensor, n_in: int = 5, n_classes: int = 4):
        super().__init__()
        self.cfg, self.pe_cfg = cfg, pe_cfg
        self.embed = nn.Linear(n_in, cfg.d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if cfg.readout == "cls" else None
        self.pe, self.blocks = pe_and_blocks(cfg, pe_cfg, coords)
        self.drop = nn.Dropout(cfg.dropout)
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.head = nn.Linear(cfg.d_model, n_classes)

    def forward(self, x: Tensor, readout_only: bool = True) -> Tensor:
        """x (B, N, n_in) one-hot tokens -> logits (B, n_classes).

        readout_only: the last block computes only the readout token (its queries, attention output and
        MLP for one token instead of all; about a fifth of the training FLOPs at 4 layers). The logits are
        the same as with the full last layer (up to float rounding); ``False`` runs every token through
        every layer (used where all tokens' attention is recorded, `trainers.attention`).
        """
        h = self.embed(x)  # (B, N, d)
        if self.cls is not None:
            h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)  # (B, 1 + N, d)
        if self.pe is not None:
            h = self.pe(h)
        if not self.blocks or self.blocks[0].pe is None:  # a table at every layer: block 0 adds it, then drops out
            h = self.drop(h)  # (the embedding is dropped out once either way)
        readout = 0 if self.cls is not None else h.shape[1] - 1
        for i, block in enumerate(self.blocks):
            last = readout_only and i == len(self.blocks) - 1
            h = block(h, readout if last else None)
        h = self.ln_f(h)
        out = h[:, 0] if self.cls is not None or readout_only else h[:, -1]  # (B, d)
        return self.head(out)

    def pe_param_names(self) -> list[str]:
        return pe_param_names(self.pe, self.blocks)
