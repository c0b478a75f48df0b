"""Encoder for masked-token regression (netsim, brain): the LST model's parts with a per-token readout.

tokens (B, N, n_in) -> Linear embedding -> PE -> n_layers x `trainers.model.Block` -> LN -> Linear per
token -> (B, N, n_out). A token's input is its window of values (zeroed when masked) plus a mask flag.
PE placement is the one of `trainers.model.PETransformer` (one input table, a table per layer with
``every_layer``, or attention PEs inside each block), so checkpoints name their tables alike
(``pe.table`` or ``blocks.i.pe.table``) and ``pe-probe analyze`` finds them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from trainers.config import ModelConfig, PEConfig
from trainers.model import pe_and_blocks, pe_param_names


class MaskedPETransformer(nn.Module):
    """Per-token regression transformer. ``coords`` (N, k) are the tokens' true positions (for the PE)."""

    def __init__(self, cfg: ModelConfig, pe_cfg: PEConfig, coords: Tensor, n_in: int, n_out: int):
        super().__init__()
        self.cfg, self.pe_cfg = cfg, pe_cfg
        self.embed = nn.Linear(n_in, cfg.d_model)
        self.pe, self.blocks = pe_and_blocks(cfg, pe_cfg, coords)
        self.drop = nn.Dropout(cfg.dropout)
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.head = nn.Linear(cfg.d_model, n_out)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, N, n_in) -> predictions (B, N, n_out), one per token."""
        h = self.embed(x)  # (B, N, d)
        if self.pe is not None:
            h = self.pe(h)
        if not self.blocks or self.blocks[0].pe is None:  # a table at every layer: block 0 adds it, then drops out
            h = self.drop(h)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))  # (B, N, n_out)

    def pe_param_names(self) -> list[str]:
        return pe_param_names(self.pe, self.blocks)


def masked_input(x: Tensor, mask: Tensor) -> Tensor:
    """Values (B, N, T) and mask (B, N) bool -> model input (B, N, T + 1): masked values zeroed, flag appended."""
    m = mask.unsqueeze(-1).to(x.dtype)  # (B, N, 1)
    return torch.cat([x * (1 - m), m], dim=-1)


def masked_mse(pred: Tensor, x: Tensor, mask: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error over the masked tokens' values: mean (default) or sum."""
    m = mask.unsqueeze(-1).to(x.dtype)  # (B, N, 1)
    se = ((pred - x) ** 2 * m).sum()
    return se if reduction == "sum" else se / (m.sum() * x.shape[-1]).clamp_min(1)
