"""Attention maps of our LST checkpoints, averaged over puzzles, and the study's similarity of two maps.

`attention_maps` rebuilds the model from a checkpoint (`trainers.evaluate.model_from_checkpoint`),
runs it on task puzzles and records, for every layer, the attention weights
softmax(q k^T / sqrt(hs) + bias), averaged over heads and puzzles. The weights are taken from the
model's own attention code path: while the model runs, the name ``attend`` inside `trainers.model`
points to a wrapper that also records the weights `trainers.model.attention_weights` computes from the
q, k and mask it is given (so RoPE rotations and relative-PE biases are included exactly as the model
applies them). Nothing in `trainers.model` changes; the model's outputs are those of the real function.
The swap is undone on exit and is not thread-safe.

With a CLS readout the sequence holds 1 + N tokens; the maps returned cover the N grid tokens only
(CLS row and column dropped, rows renormalised to sum to 1 for each puzzle and head before
averaging: the attention among grid tokens), so models with either readout compare. This matches
the ``kernel`` view of `pe_probe.views`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor

from pe_probe.errors import InputError
from trainers.model import attention_weights  # re-exported: the weights the model applies


@contextlib.contextmanager
def recording_attention() -> Iterator[list[Tensor]]:
    """Within the block, every attention call of `trainers.model` appends its weights (B, nh, T, T) to the list."""
    import trainers.model as model_module

    records: list[Tensor] = []
    original = model_module.attend

    def recording_attend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0) -> Tensor:
        records.append(attention_weights(q, k, attn_mask))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)

    model_module.attend = recording_attend
    try:
        yield records
    finally:
        model_module.attend = original


@torch.no_grad()
def model_attention_maps(model: torch.nn.Module, x: Tensor | np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Attention of ``model`` on inputs ``x`` (M, N, n_in): (n_layers, N, N), mean over heads and inputs.

    With a CLS token the CLS row and column are dropped and rows renormalised per input and head
    before averaging (see the module docstring).
    """
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x, dtype=torch.float32)
    if x.ndim != 3 or len(x) == 0:
        raise InputError(f"inputs must be a non-empty (M, N, n_in) array, got shape {tuple(x.shape)}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    n_layers = len(model.blocks)
    total: list[Tensor] | None = None
    try:
        for i in range(0, len(x), batch_size):
            with recording_attention() as records:
                model(x[i : i + batch_size].to(device), readout_only=False)  # every token, every layer
            if len(records) != n_layers:
                raise RuntimeError(f"recorded {len(records)} attention calls for {n_layers} layers")
            sums = [_grid_part(w.double(), x.shape[1]).sum(dim=(0, 1)).cpu() for w in records]  # (N, N) each
            total = sums if total is None else [a + b for a, b in zip(total, sums)]
    finally:
        model.train(was_training)
    n_heads = records[0].shape[1]
    return torch.stack(total).numpy() / (len(x) * n_heads)  # (n_layers, N, N)


def _grid_part(w: Tensor, n: int) -> Tensor:
    """Weights (B, nh, T, T) among the last n tokens, rows renormalised per input and head (drops CLS)."""
    extra = w.shape[-1] - n
    if not extra:
        return w
    w = w[..., extra:, extra:]
    return w / w.sum(-1, keepdim=True)


def attention_maps(
    ckpt_path: str | os.PathLike,
    puzzles: Any = None,
    n_puzzles: int = 500,
    seed: int = 0,
    *,
    batch_size: int = 256,
    device: str = "cpu",
) -> np.ndarray:
    """Average attention maps (n_layers, N, N) of an LST checkpoint over task puzzles.

    ``puzzles``: None (generate about ``n_puzzles`` fresh puzzles, balanced over the three levels,
    with ``seed``), a study-format CSV path, a `PuzzleSet`, an (M, 16) array of puzzle digits
    (0 blank, 1-4 shapes, 5 target), or already encoded inputs (M, 16, 5). ``n_puzzles`` caps how
    many are used (the first ones of a given set). Each map is averaged over heads and puzzles; row i
    is where token i attends, rows sum to 1.
    """
    model, x = attention_model(ckpt_path, puzzles, n_puzzles, seed, device=device)
    return model_attention_maps(model, x, batch_size=batch_size)


def attention_model(ckpt_path: str | os.PathLike, puzzles: Any = None, n_puzzles: int = 500, seed: int = 0, *,
                    device: str = "cpu") -> tuple[torch.nn.Module, np.ndarray]:
    """The model of an LST checkpoint and the encoded puzzles (M, 16, 5) `attention_maps` runs it on."""
    from trainers.checkpoint import load_checkpoint
    from trainers.evaluate import model_from_checkpoint, resolve_device

    if isinstance(n_puzzles, bool) or not isinstance(n_puzzles, (int, np.integer)) or n_puzzles < 1:
        raise InputError(f"n_puzzles must be an integer >= 1, got {n_puzzles!r}")
    dev = resolve_device(device)
    ckpt = load_checkpoint(ckpt_path, map_location=dev)
    config = ckpt.get("config")
    task = config.get("task") if isinstance(config, dict) else None
    if task != "lst":
        raise InputError(f"{ckpt_path}: --view attention runs the model on Latin Square Task puzzles, and this is a "
                         f"{task!r} checkpoint; analyse its PE with --view raw, q, k, qk or kernel")
    model, _ = model_from_checkpoint(ckpt, dev, ckpt_path)
    return model, _inputs(puzzles, int(n_puzzles), seed)


def pe_tables(model: torch.nn.Module) -> list[tuple[str, Tensor]]:
    """The model's PE tables, which a chance level replaces by random ones: every additive table (learned or
    fixed) and every relative-offset table. Rotary PEs and no PE have none."""
    from trainers.pe import AdditivePE, RelativePE

    out = []
    for name, module in model.named_modules():
        if isinstance(module, AdditivePE):
            out.append((f"{name}.table", module.table))
        elif isinstance(module, RelativePE):
            out.append((f"{name}.offset_table", module.offset_table))
    return out


@torch.no_grad()
def random_pe_attention_maps(model: torch.nn.Module, x: Tensor | np.ndarray, rng: np.random.Generator,
                             batch_size: int = 256) -> np.ndarray:
    """`model_attention_maps` with every PE table (`pe_tables`) replaced by a random Gaussian table of its shape
    and overall standard deviation (1 for a constant one), drawn from ``rng``; the tables are restored after."""
    tables = [t for _, t in pe_tables(model)]
    if not tables:
        raise InputError("the model has no PE table to replace (rotary PE or no PE)")
    saved = [t.detach().clone() for t in tables]
    try:
        for t in tables:
            sd = float(t.double().std(unbiased=False)) or 1.0
            t.copy_(torch.as_tensor(rng.normal(0.0, sd, tuple(t.shape)), dtype=t.dtype))
        return model_attention_maps(model, x, batch_size=batch_size)
    finally:
        for t, s in zip(tables, saved):
            t.copy_(s)


def attention_similarity(maps_a: np.ndarray, maps_b: np.ndarray) -> np.ndarray:
    """Cosine similarity of the flattened maps, per layer: (n_layers,) (the study's attention measure).

    NaN for a layer where either map is all zeros.
    """
    a, b = np.asarray(maps_a, dtype=np.float64), np.asarray(maps_b, dtype=np.float64)
    if a.ndim != 3 or a.shape != b.shape:
        raise InputError(f"attention maps must both be (n_layers, N, N) of the same shape, got {a.shape} and {b.shape}")
    fa, fb = a.reshape(len(a), -1), b.reshape(len(b), -1)
    norms = np.linalg.norm(fa, axis=1) * np.linalg.norm(fb, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, np.sum(fa * fb, axis=1) / norms, np.nan)


def _inputs(puzzles: Any, n: int, seed: int) -> np.ndarray:
    """Encoded model inputs (M, 16, 5) float32 from any accepted form of ``puzzles``."""
    from trainers.tasks.lst import PuzzleSet, encode, generate, read_puzzle_csv

    if puzzles is None:
        ps = generate(-(-n // 3), seed=seed)
        keep = np.sort(np.random.default_rng(seed).permutation(len(ps))[:n])
        return encode(ps.subset(keep))[0]
    if isinstance(puzzles, (str, os.PathLike)):
        return encode(read_puzzle_csv(puzzles))[0][:n]
    if isinstance(puzzles, PuzzleSet):
        return encode(puzzles)[0][:n]
    arr = np.asarray(puzzles)
    if arr.ndim == 3 and arr.shape[1:] == (16, 5):
        return arr.astype(np.float32)[:n]
    digits = arr.ndim == 2 and arr.shape[1] == 16 and arr.dtype.kind in "iu" and arr.size > 0
    if digits and 0 <= arr.min() and arr.max() <= 5:
        x = np.zeros((len(arr), 16, 5), dtype=np.float32)
        for v in range(1, 6):
            x[:, :, v - 1] = arr == v
        return x[:n]
    raise InputError(f"puzzles must be a CSV path, a PuzzleSet, (M, 16) digits 0-5 or (M, 16, 5) inputs; got "
                     f"{type(puzzles).__name__} of shape {getattr(arr, 'shape', None)}")
