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
    The positional attention kernel A = softmax((x W_Q)(x W_K)^T / sqrt(d_head)) per head (GPT-Neo:
    unscaled; causal models: masked to j <= i), averaged over heads: (N, N), rows sum to 1. Row i,
    position i's attention profile, is its "table" row. `kernel_distance_correlation` scores whether it
    attends to near positions.

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
* **BERT-style** (Hugging Face; config ``model_type`` bert, roberta, xlm-roberta, camembert, electra,
  albert, distilbert, or none): ``[prefix.]embeddings.position_embeddings.weight`` + row 0 of
  ``embeddings.token_type_embeddings.weight`` (DistilBERT has none), then ``embeddings.LayerNorm``, then
  the first attention layer's query / key Linears: ``encoder.layer.0.attention.self.query`` / ``.key``
  (ALBERT ``encoder.albert_layer_groups.0.albert_layers.0.attention.query`` / ``.key``, DistilBERT
  ``transformer.layer.0.attention.q_lin`` / ``.k_lin``); heads from config ``num_attention_heads``
  (DistilBERT ``n_heads``). Factorised embeddings (embedding width < hidden width) pass a Linear
  between the LayerNorm and attention: ELECTRA ``embeddings_project``, ALBERT
  ``encoder.embedding_hidden_mapping_in``; the views fold it into W_Q / W_K. No word embedding is added
  (the token part is left out). RoBERTa-style offset rows are dropped before the projections, as
  `load_table` drops them.
* **GPT-2-style** (Hugging Face; ``model_type`` gpt2, gpt_neo, or none): ``[transformer.]wpe.weight``,
  ``h.0.ln_1``, then GPT-2's ``h.0.attn.c_attn`` (a Conv1D: x @ W + b, columns [q | k | v]; heads from
  ``n_head``) or GPT-Neo's ``h.0.attn.attention.q_proj`` / ``k_proj`` (Linears without bias; heads from
  ``num_heads``; logits NOT scaled by 1/sqrt(d_head), as GPT-Neo does not scale them; a ``"local"``
  first layer in ``attention_layers`` sees only the last ``window_size`` positions). Both attend
  causally, so the kernel is causal (``info["causal"]``): position i attends to positions <= i only.
* **CLIP's text tower** (``model_type`` clip_text_model, or a clip model's ``text_model.`` part):
  ``embeddings.position_embedding.weight`` -> ``encoder.layers.0.layer_norm1`` (eps: config ``layer_norm_eps``, default
  1e-5) -> ``encoder.layers.0.self_attn.q_proj`` / ``k_proj``; causal, as GPT-2; no token embedding added.
* **Vision Transformers** (Hugging Face; ``model_type`` vit, deit, dinov2, clip_vision_model, or a clip model's
  ``vision_model.`` part), as the first layer reads the table for a blank (all-zero) image: ViT/DeiT
  ``[prefix.]embeddings.position_embeddings`` (1, k + HW, d); a patch's input is the patch conv's bias
  ``embeddings.patch_embeddings.projection.bias`` + P_i; then ``encoder.layer.0.layernorm_before`` (DINOv2
  ``encoder.layer.0.norm1``; eps: config ``layer_norm_eps``, default 1e-12, DINOv2 1e-6) and ``encoder.layer.0.attention.attention.query`` / ``.key`` (no biases when
  config ``qkv_bias`` is false). CLIP ``embeddings.position_embedding.weight``; the patch conv has no bias (token part
  0); then ``pre_layrnorm`` and ``encoder.layers.0.layer_norm1`` (two layer norms, eps default 1e-5), then
  ``encoder.layers.0.self_attn.q_proj`` / ``k_proj``. Heads from ``num_attention_heads``. The k leading rows that
  `load_table` drops (CLS; DeiT: CLS and distillation) are the special tokens' position rows: their inputs
  ``embeddings.cls_token`` (CLIP ``class_embedding``; DeiT also ``distillation_token``) + that row are attended to
  as the ``extra`` keys, as a pe-probe CLS readout is (views cover the HW patch rows; ``cls_attention_mass``). A
  random table for the chance level replaces the patch rows only; at layer 0 the special tokens change no patch's
  q, k or renormalised kernel, so replacing their rows too would draw the same tables.

The chance level of a view (``return_chance``, `pe_probe.chance`) reads random tables of the viewed rows' shape
and scale through the same maps, so what the model adds to any table (a causal mask, a bias) counts as chance.

Another model type is refused with its name; which tensors each family reads is listed in the README
(``--view``).

Every ``info`` dict is JSON-able. Keys for all views: ``view``; ``architecture`` ("pe-probe",
"bert" (also RoBERTa, ELECTRA), "albert", "distilbert", "gpt2", "gpt_neo", "clip_text", "vit", "deit", "dinov2",
"clip_vision"; None for
raw); ``param``
(table name); ``layer`` (index, ``"mean"``, or None for a single table); ``block`` (index of the
attention layer that reads the table; None for raw); ``head`` (None: all heads, concatenated for q/k/qk
and averaged for kernel); ``n_heads``; ``d_head``; ``input`` (what goes into the projections, in
words); ``tensors`` (names of the tensors used); ``extra_tokens``; ``positions`` ([A, B] or None);
``notes``. With layer "mean", ``param``, ``block`` and ``input`` are lists over the averaged layers.
Kernel adds ``scale``, ``causal``, ``window`` (a local layer's window, else None), ``self_attention`` (mean diagonal), ``cls_attention_mass`` (float or
None; a head's own with ``per_head``) and ``kernel_distance_rho`` (against the source's own ground truth when it has one of matching
size, else None).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from pe_probe.chance import ChanceModel
from pe_probe.distances import merge_near_ties, pairwise
from pe_probe.errors import InputError, show_path
from pe_probe.io import (
    _as_table,
    _choose_layer,
    _extra_tokens,
    _find_pe,
    _parse_positions,
    _resolve_param,
    _sub_config,
    store_of,
)
from pe_probe.stats import correlate

VIEWS = ("raw", "qk", "q", "k", "kernel")

_OURS_TABLE = re.compile(r"^(?:pe|blocks\.(\d+)\.pe)\.table$")
_BERT_PE = "embeddings.position_embeddings.weight"
_GPT2_PE = "wpe.weight"
_VIT_PE = "embeddings.position_embeddings"  # ViT/DeiT: a Parameter (1, k + HW, d), no ".weight"
_CLIP_PE = "embeddings.position_embedding.weight"  # CLIP's vision tower: an nn.Embedding (1 + HW, d)
_SUPPORTED = ("--view q/k/qk/kernel reads pe-probe, BERT-style, GPT-2-style, CLIP text and ViT-style (ViT, DeiT, "
              "DINOv2, CLIP vision) models (the list and tensors: README, --view)")


class _HF(NamedTuple):
    """Where a Hugging Face family keeps what reads its table, after the model prefix: the config model types,
    the first attention layer's query and key modules (GPT-2: the fused c_attn, key None), the Linear between the
    embeddings and attention when the embeddings are narrower (None: never), the config key of the head count."""

    types: tuple[str, ...]
    q: str
    k: str | None
    proj: str | None
    heads: str


_BERT_STYLE = {
    "bert": _HF(("bert", "roberta", "xlm-roberta", "camembert", "electra"), "encoder.layer.0.attention.self.query",
                "encoder.layer.0.attention.self.key", "embeddings_project", "num_attention_heads"),
    "albert": _HF(("albert",), "encoder.albert_layer_groups.0.albert_layers.0.attention.query",
                  "encoder.albert_layer_groups.0.albert_layers.0.attention.key", "encoder.embedding_hidden_mapping_in",
                  "num_attention_heads"),
    "distilbert": _HF(("distilbert",), "transformer.layer.0.attention.q_lin", "transformer.layer.0.attention.k_lin",
                      None, "n_heads"),
}
_GPT2_STYLE = {
    "gpt2": _HF(("gpt2",), "h.0.attn.c_attn", None, None, "n_head"),
    "gpt_neo": _HF(("gpt_neo",), "h.0.attn.attention.q_proj", "h.0.attn.attention.k_proj", None, "num_heads"),
}


class _ViT(NamedTuple):
    """Where a vision family keeps what reads its table for a blank image, after the model prefix: the config model
    types, the first attention layer's query and key Linears, the layer norm in front of the encoder (CLIP's
    ``pre_layrnorm``; None: none), block 0's norm before attention, the patch conv (None: it has no bias, so a
    blank image's patch token is 0), the tokens put before the patches (in order; each gets one leading table row),
    and the config's default layer_norm_eps."""

    types: tuple[str, ...]
    q: str
    k: str
    pre_ln: str | None
    ln: str
    patch: str | None
    tokens: tuple[str, ...]
    eps: float


_CLIP_MODEL = "clip"  # a full CLIP model: its vision_model part is read as clip_vision_model, text_model as _CLIP_TEXT
_CLIP_TEXT = "clip_text_model"
# what a causal text model's view (GPT-2-style, CLIP text) leaves out and how it attends
_CAUSAL_POSITIONS_NOTES = ("no token embedding added: the view is of positions alone", "causal attention: i attends to j <= i")
_VIT_BLOCK = "encoder.layer.0."
# DeiT first: with no config, its distillation token tells it from ViT (same names otherwise); DINOv2 differs from
# ViT in its block's norm (norm1) and eps. Register tokens (dinov2_with_registers) get no position row: not read.
_VIT_STYLE = {
    arch: _ViT((arch,), _VIT_BLOCK + "attention.attention.query", _VIT_BLOCK + "attention.attention.key", None,
               _VIT_BLOCK + ln, "embeddings.patch_embeddings.projection", tokens, eps)
    for arch, tokens, ln, eps in (("deit", ("embeddings.cls_token", "embeddings.distillation_token"), "layernorm_before", 1e-12),
                                  ("vit", ("embeddings.cls_token",), "layernorm_before", 1e-12),
                                  ("dinov2", ("embeddings.cls_token",), "norm1", 1e-6))
}
_CLIP_STYLE = {
    "clip_vision": _ViT(("clip_vision_model",), "encoder.layers.0.self_attn.q_proj",
                        "encoder.layers.0.self_attn.k_proj", "pre_layrnorm", "encoder.layers.0.layer_norm1", None,
                        ("embeddings.class_embedding",), 1e-5),
}
# a first-layer query/key weight of any model, to name what reads the table in an unsupported one
_FIRST_QK = re.compile(r"(?:^|\.)0\.(?:.*\.)?(?:q|k|query|key|qkv|wqkv|c_attn|query_key_value|in_proj"
                       r"|[qk]_(?:proj|lin))[._]weight$", re.IGNORECASE)

View = tuple[str, np.ndarray, dict[str, Any]]
ViewWithChance = tuple[str, np.ndarray, dict[str, Any], "ChanceModel | None"]


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
    return_chance: bool = False,
) -> list[View] | list[ViewWithChance]:
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
    return_chance : also return each entry's chance model, ``(label, table, info, chance)``: random tables put in
        the PE table's place and read through the same maps (`pe_probe.chance`; None for raw, whose chance level
        is `analyze`'s default).

    Tables are float64, (N, d) for raw, (N, d) or (N, d_head) for q and k, twice that for qk, and
    (N, N) for kernel. See the module docstring for what each view computes and what ``info`` holds.
    """
    if view not in VIEWS:
        raise InputError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    meta = meta or {}
    store = store_of(state)
    src = show_path(str(meta.get("source") or "source"))  # as messages name it
    names = [_resolve_param(store, pe_param, src)] if pe_param is not None else _find_pe(store, meta, src)
    per_layer = len(names) > 1
    all_layers = isinstance(layer, str) and layer.strip().lower() == "all"
    if all_layers:
        chosen, layers = names, (list(range(len(names))) if per_layer else [None])
    else:
        chosen, layer_out = _choose_layer(names, layer, src)
        layers = [layer_out] * len(chosen)
    notes = []
    if per_layer and layer is None:
        notes.append(f"{len(names)} per-layer tables; viewing layer 0 (use --layer N|mean|all)")

    # Each chosen table -> its view(s) (one per head with per_head), keyed by head; and its ground truth.
    per_table, gts, sources = [], [], []
    for name in chosen:
        views, gt, source = _view_one(state, meta, store, name, view, per_head, positions, drop_extra_tokens)
        per_table.append(views)
        gts.append(gt)
        sources.append(source)

    def entry(label: str, table: np.ndarray, info: dict[str, Any], read: list, head: int | None) -> tuple:
        if not return_chance:
            return label, table, info
        return label, table, info, None if view == "raw" else _through_view(read, view, head)

    out: list = []
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
            out.append(entry(_label(f"mean({len(chosen)} layers)", view, head), table, info, sources, head))
        return out
    for name, lay, views, source in zip(chosen, layers, per_table, sources):
        for head, (table, info) in views.items():
            info["layer"] = lay
            info["notes"] = notes + info["notes"]
            out.append(entry(_label(name, view, head), table, info, [source], head))
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

    x = P + offset -> layer norm(s) -> q = x @ wq + bq, k = x @ wk + bk. The norms: ``pre_ln`` (CLIP's
    ``pre_layrnorm`` after its embeddings), then ``ln`` (the block's own before attention); each weight, bias, eps,
    or None. ``extra`` (m, d) or None: inputs of leading tokens that this layer attends to but that the view does not
    cover (a CLS token, with its own position row if it has one), before the layer norms.
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
    window: int | None = None  # causal and local: i attends to i - window < j <= i only
    scale: float | None = None  # None: 1 / sqrt(d_head)
    extra: np.ndarray | None = None
    pre_ln: tuple[np.ndarray, np.ndarray, float] | None = None
    input: str = ""
    tensors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def d_head(self) -> int:
        return self.wq.shape[1] // self.n_heads

    def inputs(self, P: np.ndarray) -> np.ndarray:
        return self.normed(P + self.offset if self.offset is not None else P)

    def normed(self, x: np.ndarray) -> np.ndarray:
        """Token inputs ``x`` through the layer norms in front of attention (none, one, or CLIP's two)."""
        for ln in (self.pre_ln, self.ln):
            x = _layer_norm(x, *ln) if ln is not None else x
        return x

    def project(self, x: np.ndarray, head: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Queries and keys of inputs ``x``: all heads' columns, or one head's."""
        c = slice(None) if head is None else slice(head * self.d_head, (head + 1) * self.d_head)
        return x @ self.wq[:, c] + self.bq[c], x @ self.wk[:, c] + self.bk[c]

    def kernels(self, P: np.ndarray, head: int | None = None) -> tuple[np.ndarray, float | None]:
        """Per-head kernels (n_heads, N, N) over the table's positions (one head's, (1, N, N), with ``head``),
        and the attention mass sent to ``extra`` (averaged over those heads)."""
        q, k = self.project(self.inputs(P), head)
        n = P.shape[0]
        m = 0
        if self.extra is not None:
            k = np.concatenate([self.project(self.normed(self.extra), head)[1], k])  # extra keys first, as in the model
            m = self.extra.shape[0]
        h, dh = (self.n_heads if head is None else 1), self.d_head
        qh = q.reshape(n, h, dh).transpose(1, 0, 2)  # (h, N, dh)
        kh = k.reshape(n + m, h, dh).transpose(1, 0, 2)  # (h, m + N, dh)
        scale = 1.0 / math.sqrt(dh) if self.scale is None else self.scale
        logits = qh @ kh.transpose(0, 2, 1) * scale  # (h, N, m + N)
        if self.causal:
            hidden = np.triu(np.ones((n, n), dtype=bool), k=1)
            if self.window:
                hidden |= np.tril(np.ones((n, n), dtype=bool), k=-self.window)
            logits[:, :, m:][:, hidden] = -np.inf
        w = _softmax(logits)
        grid = w[:, :, m:]
        mass = None
        if m:
            mass = float(1.0 - grid.sum(-1).mean())
            grid = grid / grid.sum(-1, keepdims=True)
        return grid, mass


def _reader(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, lead: np.ndarray) -> _Reader:
    """What reads table ``name`` in its first attention layer; ``lead``: the leading rows dropped from the table
    (a ViT's CLS row(s), which go into those tokens' inputs)."""
    if _OURS_TABLE.match(name) and (meta.get("source_kind") == "pe-probe-checkpoint"
                                    or "embed.bias" in state and "blocks.0.attn.qkv.weight" in state):
        return _ours(state, meta, name)
    if name.endswith(_BERT_PE):
        return _bert(state, meta, name)
    if name == _GPT2_PE or name.endswith("." + _GPT2_PE):
        return _gpt2(state, meta, name)
    if name == _VIT_PE or name.endswith("." + _VIT_PE):
        return _vision(state, meta, name, lead, _VIT_PE, _VIT_STYLE)
    if name == _CLIP_PE or name.endswith("." + _CLIP_PE):
        if _part_type(state, meta, name, name[: -len(_CLIP_PE)]) == _CLIP_TEXT:
            return _clip_text(state, meta, name)
        return _vision(state, meta, name, lead, _CLIP_PE, _CLIP_STYLE)
    model_type = _part_type(state, meta, name, "")
    known = model_type in (_CLIP_MODEL, _CLIP_TEXT) or any(model_type in hf.types for hf in (
        *_BERT_STYLE.values(), *_GPT2_STYLE.values(), *_VIT_STYLE.values(), *_CLIP_STYLE.values()))
    raise _unsupported(_kind(model_type) if model_type is not None and not known
                       else f"{show_path(name)} is none of their PE tables")


def _ours(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    model = ((meta.get("config") or {}).get("model")) or {}
    if not isinstance(model, dict) or "n_heads" not in model:
        raise InputError(f"{name}: the checkpoint's config lacks model.n_heads (and model.norm); the q/k/kernel "
                         f"views need a pe-probe checkpoint with its config; available view: raw")
    block = int(_OURS_TABLE.match(name).group(1) or 0)
    p = f"blocks.{block}."
    need = (["embed.bias"] if block == 0 else []) + [p + "attn.qkv.weight", p + "attn.qkv.bias"]
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
    emb = pre + "embeddings."
    arch, hf = _layout(state, meta, name, pre, _BERT_STYLE)
    q, k = pre + hf.q, pre + hf.k
    need = [emb + "LayerNorm.weight", emb + "LayerNorm.bias"] + [f"{m}.{t}" for m in (q, k) for t in ("weight", "bias")]
    _require(state, need, name)
    config = _sub_config(name, meta.get("config"))  # an encoder-decoder's part: its own config
    heads = _heads(config, (hf.heads,), name)
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
    (wq, bq), (wk, bk) = _linear(state, q), _linear(state, k)
    path = f"{emb}LayerNorm"
    proj = pre + hf.proj if hf.proj else None
    if proj and (proj + ".weight" in state or ln[0].shape[0] != wq.shape[0]):  # factorised: LayerNorm -> proj -> q/k
        _require(state, [proj + ".weight", proj + ".bias"], name)
        wp, bp = _linear(state, proj)
        wq, bq, wk, bk = wp @ wq, bp @ wq + bq, wp @ wk, bp @ wk + bk  # (x W_p + b_p) W + b, folded
        need += [proj + ".weight", proj + ".bias"]
        path += f" -> {proj}"
    return _Reader(arch, 0, heads, offset, ln, wq, bq, wk, bk,
                   input=f"{what} -> {path} -> {q}/{hf.k.rsplit('.', 1)[1]}", tensors=need, notes=notes)


def _gpt2(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    pre = name[: -len(_GPT2_PE)]
    blk = pre + "h.0."
    arch, hf = _layout(state, meta, name, pre, _GPT2_STYLE)
    q = pre + hf.q
    attn = [q + ".weight", q + ".bias"] if hf.k is None else [q + ".weight", pre + hf.k + ".weight"]
    need = [blk + "ln_1.weight", blk + "ln_1.bias"] + attn
    _require(state, need, name)
    config = _sub_config(name, meta.get("config"))
    heads = _heads(config, (hf.heads, "num_attention_heads"), name)
    eps = float(config.get("layer_norm_epsilon", 1e-5))
    ln = (_f64(state[blk + "ln_1.weight"]), _f64(state[blk + "ln_1.bias"]), eps)
    notes = list(_CAUSAL_POSITIONS_NOTES)
    window = None
    if hf.k is None:  # GPT-2's c_attn, a Conv1D: x @ W + b, W (d, 3d), columns [q | k | v]
        w, b = _f64(state[q + ".weight"]), _f64(state[q + ".bias"])
        d = w.shape[0]
        wq, bq, wk, bk = w[:, :d], b[:d], w[:, d : 2 * d], b[d : 2 * d]
        scale = None if config.get("scale_attn_weights", True) else 1.0
    else:  # GPT-Neo: bias-free Linears, and q k^T is not scaled (GPTNeoSelfAttention._attn)
        wq, wk = _f64(state[q + ".weight"]).T, _f64(state[pre + hf.k + ".weight"]).T
        bq = bk = np.zeros(wq.shape[1])
        scale = 1.0
        kinds = config.get("attention_layers")
        if isinstance(kinds, list) and kinds and kinds[0] == "local":
            window = config.get("window_size", 256)  # GPTNeoConfig's default
            if isinstance(window, bool) or not isinstance(window, int) or window < 1:
                raise InputError(f"{name}: config.json window_size {window!r} is not a positive integer; fix it, or "
                                 f"use --view raw")
            notes.append(f"local attention: i attends to the {window} positions i - {window} < j <= i")
    return _Reader(arch, 0, heads, None, ln, wq, bq, wk, bk, causal=True, window=window, scale=scale,
                   input=f"P -> {blk}ln_1 -> {q}" + ("" if hf.k is None else f"/{hf.k.rsplit('.', 1)[1]}"),
                   tensors=need, notes=notes)


def _vision(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, lead: np.ndarray, suffix: str,
            layouts: dict[str, _ViT]) -> _Reader:
    """ViT, DeiT or CLIP's vision tower, as the first attention layer reads its table for a blank (all-zero) image:
    a patch token is the patch conv's bias (none in CLIP: 0) + its position row; the CLS (DeiT: and distillation)
    token is its tensor + its own leading row (``lead``), attended to as a key that the view does not cover."""
    pre = name[: -len(suffix)]
    arch, lay = _vision_layout(state, meta, name, pre, layouts)
    cfg = _sub_config(name, meta.get("config"))
    q, k = pre + lay.q, pre + lay.k
    tokens = [pre + t for t in lay.tokens]
    norms = ([pre + lay.pre_ln] if lay.pre_ln else []) + [pre + lay.ln]
    biased = cfg.get("qkv_bias", True) is not False  # ViTConfig.qkv_bias: False saves no query/key bias
    need = tokens + ([pre + lay.patch + ".bias"] if lay.patch else [])
    need += [f"{m}.{t}" for m in norms for t in ("weight", "bias")]
    need += [f"{m}.{t}" for m in (q, k) for t in (("weight", "bias") if biased else ("weight",))]
    _require(state, need, name)
    m, d = lead.shape
    if m != len(tokens):
        what = "CLS row" if len(tokens) == 1 else "CLS and distillation rows"
        raise InputError(f"{show_path(name)}: a {arch} table starts with {len(tokens)} {what} (the views cover the "
                         f"patches), but {m} row(s) were dropped; use --drop-extra-tokens {len(tokens)}, or --view raw")
    extra = []
    for t, row in zip(tokens, lead):
        token = _f64(state[t]).reshape(-1)
        if token.shape != (d,):
            raise InputError(f"{show_path(t)} has {token.size} values but the table {show_path(name)} has width {d}; "
                             f"pick the right table with --param")
        extra.append(token + row)
    heads = _heads(cfg, ("num_attention_heads",), name)
    eps = float(cfg.get("layer_norm_eps", lay.eps))
    lns = [(_f64(state[n + ".weight"]), _f64(state[n + ".bias"]), eps) for n in norms]
    ln_pre, ln = (lns[0] if lay.pre_ln else None), lns[-1]
    (wq, bq), (wk, bk) = _linear(state, q, biased), _linear(state, k, biased)
    offset = _f64(state[pre + lay.patch + ".bias"]) if lay.patch else None
    what = f"{pre}{lay.patch}.bias + P" if lay.patch else "P"
    names = " + ".join(t.rsplit(".", 1)[1] for t in tokens)
    notes = [f"blank (all-zero) image: a patch's token part is "
             + (f"the patch conv's bias ({pre}{lay.patch}.bias)" if lay.patch else "0 (the patch conv has no bias)"),
             f"{names}: attended to (each its tensor + its own position row), not covered by the views; the kernel "
             f"is the attention among patches (renormalised); random tables for the chance level replace the patch "
             f"rows only"]
    return _Reader(arch, 0, heads, offset, ln, wq, bq, wk, bk, extra=np.stack(extra), pre_ln=ln_pre,
                   input=f"{what} -> {' -> '.join(norms)} -> {q}/{lay.k.rsplit('.', 1)[1]}", tensors=need, notes=notes)


def _vision_layout(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, pre: str,
                   layouts: dict[str, _ViT]) -> tuple[str, _ViT]:
    """The vision family of this table: by the model_type of its part's config (a full CLIP model: the tower the
    table sits in), else the first layout whose tokens and block norm are all beside the table; another model type is
    refused."""
    model_type = _part_type(state, meta, name, pre)
    for arch, lay in layouts.items():
        if model_type in lay.types if model_type is not None else all(
                pre + t in state for t in (*lay.tokens, lay.ln + ".weight")):
            return arch, lay
    if model_type is None:  # _require will say what is missing
        return list(layouts.items())[-1]
    raise _unsupported(_kind(model_type))


def _part_type(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, pre: str) -> str | None:
    """The model_type of the part that holds table ``name``: its own config's (a composite model's part), a full CLIP
    model's tower by the table's prefix, or, with no config, CLIP's text tower when a token embedding and no class
    embedding sit beside the table."""
    config = meta.get("config") or {}
    model_type = _sub_config(name, config).get("model_type") or config.get("model_type")
    if model_type == _CLIP_MODEL:  # a CLIP config without its towers' model types
        model_type = "clip_vision_model" if pre.endswith("vision_model.") else _CLIP_TEXT
    if model_type is None and pre + "embeddings.token_embedding.weight" in state \
            and pre + "embeddings.class_embedding" not in state:
        model_type = _CLIP_TEXT
    return model_type


def _clip_text(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str) -> _Reader:
    """CLIP's text tower: P -> layer 0's layer_norm1 -> self_attn.q_proj / k_proj (biases; scale 1/sqrt(d_head)),
    causal (CLIPTextTransformer masks later tokens). No token embedding is added: the view is of positions alone."""
    pre = name[: -len(_CLIP_PE)]
    cfg = _sub_config(name, meta.get("config"))
    ln, q, k = (pre + "encoder.layers.0." + m for m in ("layer_norm1", "self_attn.q_proj", "self_attn.k_proj"))
    need = [f"{m}.{t}" for m in (ln, q, k) for t in ("weight", "bias")]
    _require(state, need, name)
    (wq, bq), (wk, bk) = _linear(state, q), _linear(state, k)
    norm = (_f64(state[ln + ".weight"]), _f64(state[ln + ".bias"]), float(cfg.get("layer_norm_eps", 1e-5)))
    return _Reader("clip_text", 0, _heads(cfg, ("num_attention_heads",), name), None, norm, wq, bq, wk, bk, causal=True,
                   input=f"P -> {ln} -> {q}/k_proj", tensors=need,
                   notes=list(_CAUSAL_POSITIONS_NOTES))


def _layout(state: Mapping[str, np.ndarray], meta: dict[str, Any], name: str, pre: str,
            layouts: dict[str, _HF]) -> tuple[str, _HF]:
    """The family layout of this model: by its part's config's model_type (`_part_type`: an encoder-decoder's
    encoder or decoder), else by which query tensor it has. A given model type decides, since another architecture
    may use the same names for other maps (ESM: a LayerNorm before them)."""
    model_type = _part_type(state, meta, name, pre)
    for arch, hf in layouts.items():
        if model_type in hf.types if model_type is not None else pre + hf.q + ".weight" in state:
            return arch, hf
    found = [show_path(n[: -len(".weight")]) for n in state if _FIRST_QK.search(n)]
    if model_type is None and not found:  # nothing reads the table: _require will say what is missing
        return next(iter(layouts.items()))
    reads = f" (its attention reads the table through {found[0]}{', ...' if len(found) > 1 else ''})" if found else ""
    raise _unsupported((_kind(model_type) if model_type is not None else "this is another model") + reads)


# ---------------------------------------------------------------------------------------------------
# One table -> its view


def _view_one(state, meta, store, name, view, per_head, positions, drop_extra_tokens):
    """({head: (table, info)}, ground truth of the viewed rows or None, (reader or None for raw, the viewed rows))
    for one table; head None = all heads."""
    table = _as_table(store, name, name).astype(np.float64)
    gt = meta.get("ground_truth")
    extra, note = _extra_tokens(name, table.shape[0], meta.get("config"), drop_extra_tokens, gt,
                                str(meta.get("source") or "source"), store)
    notes = [note] if extra else []
    P = table[extra:]
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
        return {None: (P, base)}, gt, (None, P)

    r = _reader(state, meta, name, table[:extra])
    d = P.shape[1]
    if r.wq.shape[0] != d or (r.offset is not None and r.offset.shape[-1] != d):
        raise InputError(f"{name} has width {d} but the attention weights that read it expect {r.wq.shape[0]}; "
                         f"pick the right table with --param")
    if r.wq.shape[1] % r.n_heads:
        raise InputError(f"{name}: {r.wq.shape[1]} query dims do not split into {r.n_heads} heads; check the config")
    base.update(architecture=r.architecture, block=r.block, n_heads=r.n_heads, d_head=r.d_head, input=r.input,
                tensors=[name] + r.tensors, notes=notes + r.notes)
    out = {}
    for h in list(range(r.n_heads)) if per_head else [None]:
        table, mass = _view_table(r, P, view, h)
        if not np.isfinite(table).all():  # the PE table was checked: the weights that read it are not finite
            bad = [t for t in r.tensors if t in store.shapes and not np.isfinite(store.read(t)).all()]
            raise InputError(f"the {view} view of {name} has NaN/Inf values: "
                             + (f"{', '.join(bad[:3])} {'holds' if len(bad) == 1 else 'hold'} NaN/Inf (the PE table "
                                f"itself is finite)" if bad else "its values overflow")
                             + "; analyse the raw table (--view raw), or fix the model's weights")
        info = dict(base, head=h, notes=list(base["notes"]))
        if view == "kernel":
            info.update(causal=r.causal, window=r.window, cls_attention_mass=mass,
                        scale=float(1.0 / math.sqrt(r.d_head) if r.scale is None else r.scale), **_kernel_stats(table, gt))
        out[h] = (table, info)
    return out, gt, (r, P)


def _view_table(r: _Reader, P: np.ndarray, view: str, head: int | None) -> tuple[np.ndarray, float | None]:
    """The q, k, qk or kernel view of table ``P`` read by ``r`` (head None: all heads, concatenated or, for the
    kernel, averaged), and the kernel's attention mass on extra tokens (None for the others)."""
    if view == "kernel":
        ker, mass = r.kernels(P, head)
        return ker.mean(0), mass
    q, k = r.project(r.inputs(P), head)
    return np.ascontiguousarray(q if view == "q" else k if view == "k" else np.concatenate([q, k], axis=1)), None


def _through_view(sources: list[tuple[_Reader, np.ndarray]], view: str, head: int | None) -> ChanceModel:
    """The chance level of a view: a random table N(0, var(P)) of each read table P's shape in its place (one per
    layer, averaged as the mean view averages them), read through the same maps."""
    scales = [float(np.std(P)) or 1.0 for _, P in sources]

    def draw(rng: np.random.Generator) -> np.ndarray:
        return np.mean([_view_table(r, rng.normal(0.0, sd, P.shape), view, head)[0]
                        for (r, P), sd in zip(sources, scales)], axis=0)

    r, P = sources[0]
    what = (f"the {len(sources)} per-layer tables each replaced by a random Gaussian table of its shape and scale"
            if len(sources) > 1 else f"the viewed rows replaced by random Gaussian tables N(0, {scales[0]:.4g}^2) of "
            f"their shape {list(P.shape)}")
    return ChanceModel("through-view", f"{what}, read through the same maps ({r.input})", draw)


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


def _unsupported(what: str) -> InputError:
    return InputError(f"{_SUPPORTED}; {what}; use --view raw")


def _kind(model_type: Any) -> str:
    return f"this is model_type {show_path(str(model_type))[:40]}"


def _require(state: Mapping[str, np.ndarray], names: list[str], param: str) -> None:
    missing = [n for n in names if n not in state]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise InputError(f"{show_path(param)}: the tensors that read it are missing from the file "
                         f"({', '.join(map(show_path, missing[:3]))}{more}); give the whole model, or use --view raw")


def _heads(config: dict[str, Any], keys: tuple[str, ...], param: str) -> int:
    for key in keys:
        if isinstance(config.get(key), int) and config[key] >= 1:
            return int(config[key])
    raise InputError(f"{param}: the number of attention heads is unknown (config.json key {keys[0]}); give the "
                     f"model folder with its config.json; available view: raw")


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _linear(state: Mapping[str, np.ndarray], module: str, bias: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A torch Linear (weight (out, in)) as (W, b) with x @ W + b (b = 0 for a Linear without bias)."""
    w = _f64(state[module + ".weight"]).T
    return w, _f64(state[module + ".bias"]) if bias else np.zeros(w.shape[1])


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)  # biased, as torch.nn.LayerNorm
    return (x - mu) / np.sqrt(var + eps) * weight + bias


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)
