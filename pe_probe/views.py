"""Views of a PE table: the table itself, or what the first attention layer that consumes it reads.

A learned table can carry geometry that only shows after the model's own maps: a layer norm, then
W_Q and W_K. So the analyses can run on these "views" instead of the raw table:

``raw``
    The table itself, exactly as `pe_probe.io.load_table` gives it (per layer, or the mean).
``q``, ``k``, ``qk``
    The table as the first attention layer that reads it sees it: x = (blank-token embedding) + P,
    passed through the layer norm in front of attention (when the architecture has one there), then
    projected by W_Q / W_K with their biases. ``qk`` is [Q, K] concatenated per position.
``kernel``
    The positional attention kernel A = softmax((x W_Q)(x W_K)^T / sqrt(d_head)) per head, averaged
    over heads: (N, N), rows sum to 1. Row i, position i's attention profile, is its "table" row.
    `kernel_distance_correlation` scores whether it attends to near positions.

Architectures (anything else gets the raw view only, and an InputError for the others):

* **pe-probe checkpoints** (`trainers.model`): blank-token embedding ``embed.bias`` (a blank is the
  all-zero one-hot, so Linear(5 -> d) gives its bias); ``pe.table`` (added once, read by block 0)
  or ``blocks.{i}.pe.table`` (read by block i); ``blocks.{i}.attn.qkv`` (rows [q; k; v]);
  ``config.model.norm`` "post" (attention sees x) or "pre" (attention sees ``blocks.{i}.ln1(x)``).
  For a per-layer table i > 0 the block's input also carries the previous layers' output, which
  depends on the puzzle; the view uses P_i alone there (no token embedding). A CLS readout token
  gets no PE (see `trainers.pe.AdditivePE`): the views cover the N grid rows; the kernel is the
  attention among grid positions (renormalised), and at layer 0, where the CLS input is known
  (the ``cls`` parameter), ``info["cls_attention_mass"]`` says how much of it went to CLS.
* **BERT-style** (Hugging Face): ``[prefix.]embeddings.position_embeddings.weight`` + row 0 of
  ``embeddings.token_type_embeddings.weight``, then ``embeddings.LayerNorm``, then
  ``encoder.layer.0.attention.self.query`` / ``.key``; heads from config ``num_attention_heads``.
  No word embedding is added (the token part is left out). RoBERTa-style offset rows are dropped
  before the projections, as `load_table` drops them.
* **GPT-2-style** (Hugging Face): ``[transformer.]wpe.weight``, ``h.0.ln_1``, then ``h.0.attn.c_attn``
  (a Conv1D: x @ W + b, columns [q | k | v]); heads from ``n_head``. GPT-2 attends causally, so its
  kernel is causal (``info["causal"]``): position i attends to positions <= i only.

Every ``info`` dict is JSON-able. Keys for all views: ``view``; ``architecture`` ("pe-probe",
"bert", "gpt2"; None for raw); ``param`` (table name); ``layer`` (index, ``"mean"``, or None for a
single table); ``block`` (index of the attention layer that reads the table; None for raw);
``head`` (None: all heads, concatenated for q/k/qk and averaged for kernel); ``n_heads``; ``d_head``;
``input`` (what goes into the projections, in words); ``tensors`` (names of the tensors used);
``extra_tokens``; ``positions`` ([A, B] or None); ``notes``. With layer "mean", ``param``, ``block``
and ``input`` are lists over the averaged layers. Kernel adds ``scale``, ``causal``,
``self_attention`` (mean diagonal), ``cls_attention_mass`` (float or None) and
``kernel_distance_rho`` (against the source's own ground truth when it has one of matching size,
else None).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pe_probe.distances import merge_near_ties, pairwise
from pe_probe.errors import InputError
from pe_probe.io import (
    _as_table,
    _choose_layer,
    _extra_tokens,
    _parse_positions,
    _resolve_param,
    find_pe_params,
    store_of,
)
from pe_probe.stats import correlate

VIEWS = ("raw", "qk", "q", "k", "kernel")

_OURS_TABLE = re.compile(r"^(?:pe|blocks\.(\d+)\.pe)\.table$")
_BERT_PE = "embeddings.position_embeddings.weight"
_GPT2_PE = "wpe.weight"
_EXPECTED = (
    "pe-probe checkpoint (embed.bias, blocks.{i}.attn.qkv.weight/bias, config.model.n_heads/norm); "
    "BERT-style (embeddings.position_embeddings.weight, embeddings.token_type_embeddings.weight, "
    "embeddings.LayerNorm.weight/bias, encoder.layer.0.attention.self.query/key.weight/bias, config "
    "num_attention_heads); GPT-2-style (wpe.weight, h.0.ln_1.weight/bias, h.0.attn.c_attn.weight/bias, "
    "config n_head)"
)

View = tuple[str, np.ndarray, dict[str, Any]]


# ---------------------------------------------------------------------------------------------------
# Public API


def view_tables(
    state: Mapping[str, np.ndarray],
    meta: dict[str, Any],
    view: str,
    *,
    layer: int | str | None = None,
    pe_param: str | None = None,
    per_head: bool = False,
    positions: str | tuple[int | None, int | None] | None = None,
    drop_extra_tokens: int | None = None,
) -> list[View]:
    """The PE table(s) of a loaded source seen through ``view``, as ``[(label, table, info)]``.

    Parameters
    ----------
    state, meta : what `pe_probe.io.open_state` (read on access) or `load_state` returns.
    view : one of `VIEWS`.
    layer : with several per-layer tables: an index, ``"mean"`` (one entry: the average of the
        per-layer views; for raw the mean table), ``"all"`` (one entry per layer), or None (layer 0,
        with a note). With one table: None, 0, "mean" or "all" all give that table.
    pe_param : tensor name of the table (exact or a unique dotted suffix); found automatically when None.
    per_head : q/k/qk/kernel: one entry per attention head (tables (N, d_head), (N, 2 d_head) for
        qk, or the head's (N, N) kernel) instead of one for all heads. Ignored by raw.
    positions : ``"A:B"`` or ``(A, B)``: keep these rows (after extra tokens are dropped) BEFORE the
        projections, so a kernel is the attention among those positions only.
    drop_extra_tokens : leading rows to drop (None: detect as `load_table` does).

    Tables are float64, (N, d) for raw, (N, d) or (N, d_head) for q and k, twice that for qk, and
    (N, N) for kernel. See the module docstring for what each view computes and what ``info`` holds.
    """
    if view not in VIEWS:
        raise InputError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    meta = meta or {}
    store = store_of(state)
    src = str(meta.get("source") or "source")
    names = [_resolve_param(store, pe_param, src)] if pe_param is not None else find_pe_params(state, meta)
    per_layer = len(names) > 1
    all_layers = isinstance(layer, str) and layer.strip().lower() == "all"
    if all_layers:
        chosen, layers = names, (list(range(len(names))) if per_layer else [None])
    else:
        chosen, layer_out = _choose_layer(names, layer, src)
        layers = [layer_out] * len(chosen)
    notes = []
    if per_layer and layer is None:
        notes.append(f"{len(names)} per-layer tables; viewing layer 0 (use layer=N, 'mean' or 'all')")

    # Each chosen table -> its view(s) (one per head with per_head), keyed by head; and its ground truth.
    per_table, gts = [], []
    for name in chosen:
        views, gt = _view_one(state, meta, store, name, view, per_head, positions, drop_extra_tokens)
        per_table.append(views)
        gts.append(gt)

    out: list[View] = []
    if not all_layers and len(chosen) > 1:  # "mean": average the per-layer views
        for head in per_table[0]:
            tables = [pt[head][0] for pt in per_table]
            if len({t.shape for t in tables}) > 1:
                raise InputError(f"the per-layer {view} views differ in shape {sorted({t.shape for t in tables})}; "
                                 f"pick one layer")
            infos = [pt[head][1] for pt in per_table]
            info = dict(infos[0], param=list(chosen), layer="mean", block=[i["block"] for i in infos],
                        input=[i["input"] for i in infos], tensors=sorted({t for i in infos for t in i["tensors"]}),
                        notes=notes + [f"averaged the {view} views of {len(chosen)} per-layer tables"]
                        + infos[0]["notes"])
            table = np.mean(tables, axis=0)
            if view == "kernel":
                masses = [i["cls_attention_mass"] for i in infos]
                info.update(_kernel_stats(table, gts[0]),
                            cls_attention_mass=None if None in masses else float(np.mean(masses)))
            out.append((_label(f"mean({len(chosen)} layers)", view, head), table, info))
        return out
    for name, lay, views in zip(chosen, layers, per_table):
        for head, (table, info) in views.items():
            info["layer"] = lay
            info["notes"] = notes + info["notes"]
            out.append((_label(name, view, head), table, info))
    return out


def kernel_distance_correlation(A: np.ndarray, coords: np.ndarray) -> float:
    """Spearman correlation between a positional attention kernel and closeness in the ground truth.

    The kernel is symmetrised, S = (A + A^T) / 2; its off-diagonal entries (i < j) are correlated
    with the NEGATIVE Euclidean distances between ``coords`` rows i and j. High (near 1): positions
    attend to their near neighbours; 0: attention ignores the geometry. NaN when either side is
    constant (e.g. a uniform kernel). Values that differ only by rounding are merged into ties first
    (`distances.merge_near_ties`), so rotating or scaling the coordinates does not change the result.
    """
    A = np.asarray(A, dtype=np.float64)
    coords = np.asarray(coords, dtype=np.float64)
    if coords.ndim == 1:
        coords = coords[:, None]
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputError(f"a kernel must be a square (N, N) matrix, got shape {A.shape}")
    if coords.ndim != 2 or coords.shape[0] != A.shape[0]:
        raise InputError(f"coords must be (N, k) with N = {A.shape[0]} (the kernel's size), got shape {coords.shape}")
    if A.shape[0] < 3:
        raise InputError(f"a kernel over {A.shape[0]} positions has too few pairs to correlate; need at least 3")
    S = (A + A.T) / 2.0
    iu = np.triu_indices(A.shape[0], k=1)
    # as `analyze`: values equal in exact arithmetic (a grid's distances once scaled or rotated) are one tie
    return correlate(merge_near_ties(S[iu]), -merge_near_ties(pairwise(coords)), "spearman")


# ---------------------------------------------------------------------------------------------------
# How the first attention layer reads a table


@dataclass
class _Reader:
    """The maps between a PE table P (N, d) and the first attention layer that reads it.

    x = P + offset -> layer norm (``ln``: weight, bias, eps, or None) -> q = x @ wq + bq, k = x @ wk + bk.
    ``extra`` (m, d) or None: inputs of leading tokens that carry no PE but that this layer attends to
    (a CLS token), before the layer norm.
    """

    architecture: str
    block: int
    n_heads: int
    offset: np.ndarray | None
    ln: tuple[np.ndarray, np.ndarray, float] | None
    wq: np.ndarray
    bq: np.ndarray
    wk: np.ndarray
    bk: np.ndarray
    causal: bool = False
    scale: float | None = None  # None: 1 / sqrt(d_head)
    extra: np.ndarray | None = None
    input: str = ""
    tensors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def d_head(self) -> int:
        return self.wq.shape[1] // self.n_heads

    def inputs(self, P: np.ndarray) -> np.ndarray:
        x = P + self.offset if self.offset is not None else P
        return _layer_norm(x, *self.ln) if self.ln is not None else x

    def project(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x @ self.wq + self.bq, x @ self.wk + self.bk

    def kernels(self, P: np.ndarray) -> tuple[np.ndarray, float | None]:
        """Per-head kernels (n_heads, N, N) over the table's positions, and the mass sent to ``extra``."""
        q, k = self.project(self.inputs(P))
        n = P.shape[0]
        m = 0
        if self.extra is not None:
            xe = _layer_norm(self.extra, *self.ln) if self.ln is not None else self.extra
            k = np.concatenate([xe @ self.wk + self.bk, k])  # extra keys first, as in the model
            m = self.extra.shape[0]
        h, dh = self.n_heads, self.d_head
        qh = q.reshape(n, h, dh).transpose(1, 0, 2)  # (h, N, dh)
        kh = k.reshape(n + m, h, dh).transpose(1, 0, 2)  # (h, m + N, dh)
        scale = 1.0 / math.sqrt(dh) if self.scale is None else self.scale
        logits = qh @ kh.transpose(0, 2, 1) * scale  # (h, N, m + N)
        if self.causal:
            later = np.triu(np.ones((n, n), dtype=bool), k=1)
            logits[:, :, m:][:, later] = -np.inf
        w = _softmax(logits)
        grid = w[:, :, m:]
        mass = None
        if m:
            mass = float(1.0 - grid.sum(-1).mean())
            grid = grid / grid.sum(-1, keepdims=True)
        return grid, mass


def _reader(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, view: str) -> _Reader:
    if _OURS_TABLE.match(name) and "embed.bias" in state and "blocks.0.attn.qkv.weight" in state:
        return _ours(state, meta, name)
    if name.endswith(_BERT_PE):
        return _bert(state, meta, name)
    if name == _GPT2_PE or name.endswith("." + _GPT2_PE):
        return _gpt2(state, meta, name)
    raise InputError(f"the {view} view needs the attention weights that read {name}, and this architecture is not "
                     f"recognised; available view: raw; expected one of: {_EXPECTED}")


def _ours(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    model = ((meta.get("config") or {}).get("model")) or {}
    if not isinstance(model, dict) or "n_heads" not in model:
        raise InputError(f"{name}: the checkpoint's config lacks model.n_heads (and model.norm); the q/k/kernel "
                         f"views need a pe-probe checkpoint with its config; available view: raw")
    block = int(_OURS_TABLE.match(name).group(1) or 0)
    p = f"blocks.{block}."
    need = [p + "attn.qkv.weight", p + "attn.qkv.bias"]
    pre = model.get("norm", "post") == "pre"
    if pre:
        need += [p + "ln1.weight", p + "ln1.bias"]
    _require(state, need, name)
    w, b = _f64(state[p + "attn.qkv.weight"]), _f64(state[p + "attn.qkv.bias"])  # (3d, d), rows [q; k; v]
    d = w.shape[1]
    heads = _heads(model, ("n_heads",), name)
    if w.shape != (3 * d, d) or b.shape != (3 * d,) or d % heads:
        raise InputError(f"{name}: {p}attn.qkv has shape {w.shape} (bias {b.shape}) for {heads} head(s); a pe-probe "
                         f"checkpoint has (3d, d) with d divisible by the heads: was it edited? available view: raw")
    offset, what = None, "P"
    tensors = list(need)
    if block == 0:
        offset, what = _f64(state["embed.bias"]), "embed.bias + P"
        tensors.insert(0, "embed.bias")
    notes = []
    if block > 0:
        notes.append(f"block {block} also reads the previous layers' output (puzzle-dependent); this view uses "
                     f"P_{block} alone")
    extra = None
    if model.get("readout") == "cls":
        if block == 0 and "cls" in state:
            extra = _f64(state["cls"]).reshape(1, d)
            tensors.append("cls")
        notes.append("CLS readout: the CLS token carries no PE; views cover the grid rows, the kernel is the "
                     "attention among grid positions (renormalised)")
    eps = 1e-5  # torch.nn.LayerNorm's default, used by trainers.model
    ln = (_f64(state[p + "ln1.weight"]), _f64(state[p + "ln1.bias"]), eps) if pre else None
    return _Reader(
        "pe-probe", block, heads, offset, ln,
        w[:d].T, b[:d], w[d : 2 * d].T, b[d : 2 * d], extra=extra,
        input=(f"{what} -> {p}ln1 -> {p}attn.qkv" if pre
               else f"{what} -> {p}attn.qkv (post-LN: no norm before attention)"),
        tensors=tensors, notes=notes,
    )


def _bert(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    pre = name[: -len(_BERT_PE)]
    emb, att = pre + "embeddings.", pre + "encoder.layer.0.attention.self."
    need = [emb + "LayerNorm.weight", emb + "LayerNorm.bias"] + [att + f"{m}.{t}" for m in ("query", "key")
                                                                  for t in ("weight", "bias")]
    _require(state, need, name)
    config = meta.get("config") or {}
    heads = _heads(config, ("num_attention_heads",), name)
    notes = []
    offset, what = None, "P"
    tt = emb + "token_type_embeddings.weight"
    if tt in state:
        offset, what = _f64(state[tt])[0], "P + token_type_embeddings[0]"
        need.insert(0, tt)
    else:
        notes.append("no token_type_embeddings: nothing added to P")
    notes.append("no word embedding added: the view is of positions alone")
    eps = float(config.get("layer_norm_eps", 1e-12))
    ln = (_f64(state[emb + "LayerNorm.weight"]), _f64(state[emb + "LayerNorm.bias"]), eps)
    return _Reader(
        "bert", 0, heads, offset, ln,
        _f64(state[att + "query.weight"]).T, _f64(state[att + "query.bias"]),
        _f64(state[att + "key.weight"]).T, _f64(state[att + "key.bias"]),
        input=f"{what} -> {emb}LayerNorm -> {att}query/key", tensors=need, notes=notes,
    )


def _gpt2(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    pre = name[: -len(_GPT2_PE)]
    blk = pre + "h.0."
    need = [blk + "ln_1.weight", blk + "ln_1.bias", blk + "attn.c_attn.weight", blk + "attn.c_attn.bias"]
    _require(state, need, name)
    config = meta.get("config") or {}
    heads = _heads(config, ("n_head", "num_attention_heads"), name)
    w, b = _f64(state[blk + "attn.c_attn.weight"]), _f64(state[blk + "attn.c_attn.bias"])  # Conv1D: (d, 3d)
    d = w.shape[0]
    eps = float(config.get("layer_norm_epsilon", 1e-5))
    ln = (_f64(state[blk + "ln_1.weight"]), _f64(state[blk + "ln_1.bias"]), eps)
    scale = None if config.get("scale_attn_weights", True) else 1.0
    return _Reader(
        "gpt2", 0, heads, None, ln, w[:, :d], b[:d], w[:, d : 2 * d], b[d : 2 * d], causal=True, scale=scale,
        input=f"P -> {blk}ln_1 -> {blk}attn.c_attn", tensors=need,
        notes=["no token embedding added: the view is of positions alone", "causal attention: i attends to j <= i"],
    )


# ---------------------------------------------------------------------------------------------------
# One table -> its view


def _view_one(state, meta, store, name, view, per_head, positions, drop_extra_tokens):
    """({head: (table, info)}, ground truth of the viewed rows or None) for one table; head None = all heads."""
    P = _as_table(store, name, name).astype(np.float64)
    gt = meta.get("ground_truth")
    extra, note = _extra_tokens(name, P.shape[0], meta.get("config"), drop_extra_tokens, gt, str(meta.get("source") or "source"))
    notes = [note] if extra else []
    P = P[extra:]
    span, n_rows = None, P.shape[0]
    if gt is not None and gt.n != P.shape[0]:
        gt = None
    if positions is not None:
        start, stop = _parse_positions(positions, P.shape[0])
        P, span = P[start:stop], [start, stop]
        gt = gt.rows(start, stop) if gt is not None else None
        notes.append(f"viewing positions {start}:{stop}")
    base = {"view": view, "architecture": None, "param": name, "layer": None, "block": None, "head": None,
            "n_heads": None, "d_head": None, "input": "P", "tensors": [name], "extra_tokens": int(extra),
            "positions": span, "n_rows": n_rows, "notes": notes}
    if view == "raw":
        return {None: (P, base)}, gt

    r = _reader(state, meta, name, view)
    d = P.shape[1]
    if r.wq.shape[0] != d or (r.offset is not None and r.offset.shape[-1] != d):
        raise InputError(f"{name} has width {d} but the attention weights that read it expect {r.wq.shape[0]}; "
                         f"pick the right table with --param")
    if r.wq.shape[1] % r.n_heads:
        raise InputError(f"{name}: {r.wq.shape[1]} query dims do not split into {r.n_heads} heads; check the config")
    base.update(architecture=r.architecture, block=r.block, n_heads=r.n_heads, d_head=r.d_head, input=r.input,
                tensors=[name] + r.tensors, notes=notes + r.notes)
    heads = list(range(r.n_heads)) if per_head else [None]

    if view == "kernel":
        ker, mass = r.kernels(P)
        out = {}
        for h in heads:
            A = ker.mean(0) if h is None else ker[h]
            info = dict(base, head=h, notes=list(base["notes"]), causal=r.causal, cls_attention_mass=mass,
                        scale=float(1.0 / math.sqrt(r.d_head) if r.scale is None else r.scale), **_kernel_stats(A, gt))
            out[h] = (A, info)
        return out, gt

    q, k = r.project(r.inputs(P))
    out = {}
    for h in heads:
        cols = slice(None) if h is None else slice(h * r.d_head, (h + 1) * r.d_head)
        table = {"q": q[:, cols], "k": k[:, cols], "qk": np.concatenate([q[:, cols], k[:, cols]], axis=1)}[view]
        out[h] = (np.ascontiguousarray(table), dict(base, head=h, notes=list(base["notes"])))
    return out, gt


def _kernel_stats(A: np.ndarray, gt: Any) -> dict[str, Any]:
    """Mean self-attention, and the kernel-distance correlation against ``gt`` when its size matches."""
    rho = None
    if gt is not None and gt.n == A.shape[0] and A.shape[0] >= 3:
        rho = kernel_distance_correlation(A, gt.coords)
        rho = None if math.isnan(rho) else rho
    return {"self_attention": float(np.mean(np.diag(A))), "kernel_distance_rho": rho}


# ---------------------------------------------------------------------------------------------------
# Small helpers


def _label(name: str, view: str, head: int | None) -> str:
    label = name if view == "raw" else f"{name}:{view}"
    return label if head is None else f"{label}:head{head}"


def _require(state: Mapping[str, np.ndarray], names: list[str], param: str) -> None:
    missing = [n for n in names if n not in state]
    if missing:
        raise InputError(f"{param}: the tensors that read it are missing ({', '.join(missing[:4])}); available "
                         f"view: raw; expected one of: {_EXPECTED}")


def _heads(config: dict[str, Any], keys: tuple[str, ...], param: str) -> int:
    for key in keys:
        if isinstance(config.get(key), int) and config[key] >= 1:
            return int(config[key])
    raise InputError(f"{param}: the number of attention heads is unknown (config.json key {keys[0]}); give the "
                     f"model folder with its config.json; available view: raw")


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - mu) / np.sqrt(var + eps) * weight + bias


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)
