"""Load a positional-encoding table from any SOURCE of DESIGN.md section 2, safely.

Sources: our checkpoint (``pe-probe-checkpoint/1``), plain or nested torch state_dicts
(``.pt``/``.pth``/``.bin``/``.ckpt``), ``.safetensors``, Hugging Face model folders (``config.json`` +
``model.safetensors`` or ``pytorch_model.bin``, sharded or not), and raw tables (``.npy``, ``.npz``,
``.csv``, ``.txt``, a ``.pt`` holding one tensor).

Safety: torch files load with ``torch.load(..., weights_only=True)`` only, numpy files with
``allow_pickle=False``; a file that needs code to unpickle is refused, never executed.

Entry points: `load_table` returns the (N, d) table to analyse plus provenance; `open_state` a
source's tensors by name, each read when first used (for views that also need W_Q/W_K);
`load_state` every tensor of a source, read at once. Tensors are read lazily
(memory-mapped where the format allows), so picking one table out of a large model stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import numpy as np

from pe_probe.errors import InputError, NoPETableError, show_path, torch_load_reason
from pe_probe.errors import first_line as _first_line
from pe_probe.filechecks import (ZIP_MEMBER_ERRORS, check_not_numpy, check_not_special, check_safe_torch_loader,
                                 check_torch_pickle, open_npy, open_npz)
from pe_probe.torchfile import read_torch_file, torch_file_reason
from pe_probe.torchzip import PUT_OPS, mmap_is_safe
from pe_probe.groundtruth import GroundTruth, ground_truth_from_checkpoint, read_number_table
from pe_probe.validation import check_fits_in_memory, check_magnitude, check_tensor_bytes, parse_layer

CHECKPOINT_FORMAT = "pe-probe-checkpoint/1"
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
RAW_NAME = "table"  # the state key of a source that holds one unnamed table (.npy, .csv, tensor .pt)
MIN_POSITIONS = 4
MAX_LISTED = 10

# Dotted-name suffixes of absolute PE tables in common libraries (compared in lower case):
# BERT/ViT/CLIP (HF), GPT-2 (wpe), timm ViT (pos_embed), TransformerLens (W_pos), OPT/BART
# (embed_positions), Swin (absolute_pos_embed), OpenAI CLIP (positional_embedding), and common names.
WELL_KNOWN_PE = (
    "position_embeddings.weight", "position_embeddings", "position_embedding.weight", "position_embedding",
    "wpe.weight", "wpe", "pos_embed", "pos_embed.weight", "w_pos", "embed_positions.weight",
    "embed_positions", "pos_emb", "pos_emb.weight", "pos_embedding", "pos_embedding.weight",
    "pos_embeddings", "pos_embeddings.weight", "positional_embedding", "positional_embedding.weight",
    "positional_embeddings", "positional_encoding", "absolute_pos_embed",
)
# Dotted-name components that mark a tensor as PE-looking (for per-layer tables and ranking).
_PE_WORDS = {
    "pe", "wpe", "pos", "position", "positions", "positional", "pos_embed", "pos_emb", "pos_embedding",
    "pos_embeddings", "position_embedding", "position_embeddings", "positional_embedding",
    "positional_embeddings", "positional_encoding", "pos_encoding", "embed_positions", "w_pos",
    "absolute_pos_embed",
}
# Relative-position tables index offsets, not positions: never picked automatically.
_NOT_ABSOLUTE = re.compile(r"relative|rel_pos|rel_emb|offset_table|_bias|bias_table|exp_avg|momentum", re.IGNORECASE)
# HF model types whose learned position table starts with unused rows, as transformers builds them (checked in
# its source): OPT/BART-style tables hold max_position_embeddings + 2 rows looked up at position + 2;
# RoBERTa-style ones are nn.Embedding(max_position_embeddings, d, padding_idx=pad_token_id) with position ids
# from padding_idx + 1 (MPNet fixes padding_idx at 1; ESM only with position_embedding_type "absolute").
_OFFSET2_TYPES = {"opt", "bart", "mbart", "plbart", "biogpt", "mvp", "trocr", "nystromformer", "mra"}
_PADDING_IDX_TYPES = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text", "ibert",
                      "roberta-prelayernorm", "xmod", "mpnet", "esm", "markuplm", "layoutlmv3", "lilt", "luke",
                      "altclip_text_model"}
_VIT_TYPES = {"vit", "deit", "beit", "dinov2", "dino", "vit_mae", "vit_msn", "vit_hybrid", "clip_vision_model",
              "siglip_vision_model", "dinov2_with_registers", "ijepa"}
# Separate tensors for the rows a ViT table holds before its patches (CLS; DeiT's distillation token).
_CLS_NAMES = {"cls_token", "class_token", "class_embedding", "dist_token", "distillation_token"}
_HF_WEIGHTS = re.compile(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)")
_VIT_NAME = re.compile(r"vit|deit|beit|dino|pos_embed|vision|visual|patch", re.IGNORECASE)


@dataclass
class LoadedTable:
    """A PE table ready to analyse, with where it came from and what was done to it.

    ``table`` is (N, d) float64 after squeezing leading singleton dims, choosing the layer, dropping
    extra leading tokens (ViT CLS/distillation tokens, OPT offset rows) and slicing ``positions``.
    """

    table: np.ndarray
    source: str
    sha256: str
    source_kind: str
    param: str | list[str] | None
    layer: int | str | None
    n_layers: int
    original_shape: tuple[int, ...]
    candidates: list[str]
    extra_tokens: int = 0
    positions: tuple[int, int] | None = None
    row_centred: bool = False
    ground_truth: GroundTruth | None = None
    ground_truth_error: str | None = None  # why the checkpoint's own ground truth cannot be used, if it cannot
    config: dict | None = None
    checkpoint_metrics: dict | None = None
    step: int | None = None
    notes: list[str] = field(default_factory=list)
    grid_hint: str | None = None  # "grid:HxW" when the rows look like an image's patch grid (a ViT table)

    def provenance(self) -> dict[str, Any]:
        """The JSON-able facts a report needs to say exactly which numbers were analysed."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "source_kind": self.source_kind,
            "param": self.param,
            "layer": self.layer,
            "n_layers": self.n_layers,
            "original_shape": list(self.original_shape),
            "extra_tokens": self.extra_tokens,
            "positions": list(self.positions) if self.positions is not None else None,
            "row_centred": self.row_centred,
            "notes": list(self.notes),
        }


@dataclass
class _Store:
    """A source's tensors by name: shapes and dtype kinds known up front, data read on demand.

    ``kinds`` holds numpy dtype kinds: "f" float, "i"/"u" integer, "b" bool, "c" complex, "q" quantized;
    ``dtypes`` the dtype names (for messages); ``problems`` why a tensor cannot be read as numbers at all
    (a sparse layout, a dtype numpy and torch cannot widen), so that choosing it is a one-line error.
    """

    shapes: dict[str, tuple[int, ...]]
    kinds: dict[str, str]
    read: Callable[[str], np.ndarray]
    dtypes: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> _Store:
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        return cls({k: tuple(v.shape) for k, v in arrays.items()}, {k: v.dtype.kind for k, v in arrays.items()},
                   arrays.__getitem__, {k: str(v.dtype) for k, v in arrays.items()})


# ---------------------------------------------------------------------------------------------------
# Public API


def load_state(source: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every tensor of a source as a numpy array, plus a metadata dict.

    Metadata keys: ``source`` (the path given), ``source_kind``, ``sha256``, ``config``, ``pe_params``, ``ground_truth``
    (a GroundTruth or None), ``step``, ``epoch``, ``metrics``, ``raw`` (True when the source is a
    single unnamed table, stored under the name ``"table"``), ``notes``. To read only the tensors
    you use (a view of a large model needs four or five of them), use `open_state`.
    """
    state, meta = open_state(source)
    return {name: state[name] for name in state}, meta


def open_state(source: str | os.PathLike) -> tuple[LazyState, dict[str, Any]]:
    """A source's tensors as a read-on-access mapping (`LazyState`), plus `load_state`'s metadata dict."""
    store, meta = _open(source)
    return LazyState(store, meta), meta


class LazyState(Mapping):
    """A source's tensors by name; each is read (its claimed size checked first) when first looked up.

    Names, ``in`` and ``len`` cost nothing; ``state[name]`` reads that tensor once and keeps it.
    """

    def __init__(self, store: _Store, meta: dict[str, Any]):
        self.store, self._meta, self._read = store, meta, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._read:
            if name not in self.store.shapes:
                raise KeyError(name)
            label = _tensor_label(self._meta, name)
            if name in self.store.problems:
                raise InputError(f"{label}: {self.store.problems[name]}")
            if self.store.kinds[name] == "c":  # a view's float64 arithmetic would drop the imaginary part
                raise InputError(f"{label}: is a complex tensor ({self.store.dtypes.get(name, 'complex')}), not a real "
                                 f"model weight; save the model's real weights")
            check_tensor_bytes(self.store.shapes[name], label)  # claimed size first: views widen to float64
            self._read[name] = self.store.read(name)
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.store.shapes)

    def __len__(self) -> int:
        return len(self.store.shapes)


def store_of(state: Mapping[str, Any]) -> _Store:
    """The `_Store` behind a state: a `LazyState`'s own (nothing read), else one over the arrays."""
    return state.store if isinstance(state, LazyState) else _Store.from_arrays(state)


def _tensor_label(meta: dict[str, Any], name: str) -> str:
    """How messages name tensor ``name`` of a source: the file alone for a bare table, else NAME in FILE."""
    shown = show_path(meta["source"])
    return shown if meta["raw"] else f"{show_path(name)} in {shown}"


def find_pe_params(state: Mapping[str, np.ndarray], meta: dict[str, Any] | None = None) -> list[str]:
    """The PE table name(s) of a state, in layer order.

    Order of preference: the checkpoint's own ``pe_params``; then well-known names (matched as a
    suffix of the dotted name, e.g. ``wpe.weight`` matches ``transformer.wpe.weight``); then
    PE-looking names (``blocks.{i}.pe.table``...). Several matches that differ only in a layer
    number are per-layer tables, sorted by that number. Integer tensors are never a PE. Raises
    InputError, listing candidates, when nothing matches or the matches are ambiguous.
    """
    return _find_pe(store_of(state), meta or {})


def load_table(
    source: str | os.PathLike,
    *,
    param: str | None = None,
    layer: int | str | None = None,
    positions: str | tuple[int | None, int | None] | None = None,
    drop_extra_tokens: int | None = None,
    min_positions: int = MIN_POSITIONS,
) -> LoadedTable:
    """Load the (N, d) PE table to analyse from ``source``.

    Parameters
    ----------
    param : tensor name (exact, or a unique dotted suffix); found automatically when None.
    layer : with several per-layer tables, an index, ``"mean"`` (their average), or None (layer 0,
        with a note). ``"all"`` is the caller's job: call once per layer ``range(n_layers)``.
    positions : ``"A:B"`` (Python slice, open ends allowed) or ``(A, B)``: rows to keep, counted
        after extra tokens are dropped.
    drop_extra_tokens : leading rows to drop; None detects ViT CLS/distillation tokens and
        OPT/RoBERTa offset rows; 0 keeps every row.
    min_positions : fewest rows accepted (a table read as a reference is checked against the analysed one
        instead, which names the real problem).
    """
    store, meta = _open(source)
    src = os.fspath(source)
    shown = show_path(src)
    notes: list[str] = list(meta["notes"])
    candidates = _candidates(store)

    if meta["raw"]:
        if param is not None:
            raise InputError(f"{shown} holds a single unnamed table; drop --param {param}")
        names = [RAW_NAME]
    elif param is not None:
        names = [_resolve_param(store, param, shown)]
    else:
        names = _find_pe(store, meta, shown)
    n_layers = len(names)
    own_layer = _layer_of(store, meta, names[0], shown) if param is not None and not meta["raw"] else None
    if param is not None and _parsed_layer(layer) not in (None, "mean", own_layer or 0):
        raise InputError(f"{shown}: --param and --layer both choose the table, and --param {show_path(param)} names one "
                         f"tensor (layer {own_layer if own_layer is not None else 'of its own'}); drop --layer, or drop "
                         f"--param and pick the per-layer table with --layer N")
    chosen, layer_out = _choose_layer(names, None if param is not None else layer, shown)
    if own_layer is not None:
        layer_out = own_layer
    if param is None and not meta["raw"] and not meta.get("pe_params"):
        others = _other_pe_looking(candidates, names)
        if others:
            notes.append(f"also holds {_listing(others)}, which look like PE tables too; analysing "
                         f"{show_path(names[0]) if n_layers == 1 else 'the per-layer tables'} "
                         f"(pass --param NAME to analyse another)")
    unused = _unused_table_type(chosen[0], meta["config"])
    if unused and param is None:
        raise NoPETableError(f"{shown}: its config says position_embedding_type {unused}, and transformers adds "
                             f"{show_path(chosen[0])} to the input only for 'absolute': the model never reads this "
                             f"table (its rows are its initialisation, not learned positions); pass --param "
                             f"{show_path(chosen[0])} to analyse it anyway",
                             reason=f"the model has no absolute PE table: config position_embedding_type {unused}")
    if unused:
        notes.append(f"config position_embedding_type {unused}: the model never reads this table (transformers adds it "
                     f"only for 'absolute'), so its rows are its initialisation")
    if n_layers > 1 and layer is None:
        notes.append(f"{n_layers} per-layer tables; analysing layer 0 (use --layer N|mean|all)")
    if n_layers > 1 and not _numbered_from_zero(names):
        notes.append(f"--layer N counts the {n_layers} per-layer tables in order, not the block numbers in their "
                     f"names: {_listing([f'{i}={n}' for i, n in enumerate(names)])}")

    # Everything up to the size guard works on the shapes the source claims; no tensor data is read yet.
    labels = {name: _tensor_label(meta, name) for name in chosen}
    shapes = {name: _table_shape(store, name, labels[name]) for name in chosen}
    original_shape = store.shapes[chosen[0]]
    if len(set(shapes.values())) > 1:
        raise InputError(f"{shown}: per-layer tables differ in shape {sorted(set(shapes.values()))}; pick one with --layer N")
    n_rows, n_dims = shapes[chosen[0]]

    gt: GroundTruth | None = meta["ground_truth"]
    extra, note = _extra_tokens(chosen[0], n_rows, meta["config"], drop_extra_tokens, gt, shown, store)
    if extra:
        notes.append(note)
    start, stop = 0, n_rows - extra
    span: tuple[int, int] | None = None
    if positions is not None:
        start, stop = _parse_positions(positions, n_rows - extra)
        if gt is not None and gt.n == n_rows - extra:
            gt = gt.rows(start, stop)
        span = (start, stop)
        notes.append(f"analysing positions {start}:{stop}")
    if stop - start < min_positions:
        raise InputError(f"{shown}: only {stop - start} positions to analyse; need at least {min_positions} "
                         f"(check --positions / --param)")
    check_fits_in_memory(stop - start)  # before reading: a tiny file can claim a huge table
    check_tensor_bytes((len(chosen), stop - start, n_dims), labels[chosen[0]])

    tables = [_read_rows(store, name, labels[name], extra + start, extra + stop) for name in chosen]
    if len(tables) > 1:
        table = np.mean(tables, axis=0)
        notes.append(f"averaged {len(tables)} per-layer tables")
    else:
        table = tables[0]
    table = np.ascontiguousarray(table, dtype=np.float64)
    centred = _row_centred(table)
    if centred:
        notes.append("row-centred: every row has mean ~0 (e.g. a LayerNorm-ed or mean-subtracted table)")
    if _offset_invariant(table):
        notes.append("the rows' inner products depend only on the offset i - j (to 0.1%), as in a fixed sinusoidal "
                     "encoding (Whisper's encoder, Marian): this table is, or is very close to, one that training "
                     "did not shape")
    return LoadedTable(
        table=table, source=src, sha256=meta["sha256"], source_kind=meta["source_kind"],
        param=None if meta["raw"] else (chosen if layer_out == "mean" else chosen[0]),
        layer=layer_out, n_layers=n_layers, original_shape=tuple(original_shape), candidates=candidates,
        extra_tokens=extra, positions=span, row_centred=centred, ground_truth=gt,
        ground_truth_error=meta["ground_truth_error"], config=meta["config"],
        checkpoint_metrics=meta["metrics"], step=meta["step"], notes=notes,
        grid_hint=None if span else _grid_hint(chosen[0], n_rows - extra, meta["config"], store),
    )


# Model types whose embeddings (transformers 4.x) add their position table only for position_embedding_type
# "absolute"; others that honour relative_key in attention still add it always (MarkupLM, LayoutLM).
_ABSOLUTE_ONLY_TYPES = {"bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "albert",
                        "data2vec-text", "ernie", "megatron-bert", "roberta-prelayernorm", "xmod", "nystromformer"}


def _unused_table_type(name: str, config: dict | None) -> str | None:
    """BERT-family ``position_embedding_type`` relative_key(_query): the ``*.position_embeddings.weight`` table
    exists (transformers 4.x built it) but is added to the input only for "absolute"; the type, else None."""
    cfg = _sub_config(name, config)
    pe_type = str(cfg.get("position_embedding_type", "")).lower()
    if (pe_type in ("relative_key", "relative_key_query") and name.lower().endswith("position_embeddings.weight")
            and str(cfg.get("model_type", "")).lower() in _ABSOLUTE_ONLY_TYPES):
        return pe_type
    return None


def _grid_hint(name: str, n_rows: int, config: dict | None, store: _Store) -> str | None:
    """``grid:HxW`` for a ViT-like table of n_rows patches: the config's patch grid, else a square one."""
    cfg = _sub_config(name, config)
    if not _vit_evidence(name, cfg, store):
        return None
    grid = _patch_grid(cfg)
    if not (grid and grid[0] * grid[1] == n_rows):
        s = _square_side(n_rows)
        grid = (s, s) if s else None
    return f"grid:{grid[0]}x{grid[1]}" if grid else None


# ---------------------------------------------------------------------------------------------------
# Opening sources


def _open(source: str | os.PathLike) -> tuple[_Store, dict[str, Any]]:
    """Dispatch on the kind of source; returns a lazy store and the metadata dict."""
    path = Path(os.fspath(source))
    label = show_path(path)
    if not path.exists():
        raise InputError(f"{label}: not found; give a checkpoint, state_dict, .safetensors, HF model folder, "
                         f".npy, .npz, .csv or .pt file")
    check_not_special(path, "source")
    meta: dict[str, Any] = {"source": os.fspath(source), "source_kind": "", "sha256": "", "config": None,
                            "pe_params": None, "ground_truth": None, "ground_truth_error": None, "step": None, "epoch": None, "metrics": None,
                            "raw": False, "notes": []}
    if path.is_dir():
        return _open_hf_folder(path, meta)
    suffix = path.suffix.lower()
    meta["sha256"] = sha256_file(path)
    if suffix == ".npy":  # header first: its claimed size is checked before any data is read
        meta.update(source_kind="npy", raw=True)
        shape, dtype, read_npy = open_npy(path, "table")
        if dtype.kind not in "biuf":
            raise InputError(f"{label}: holds {dtype} values, not numbers; save the table as floats")
        return _Store({RAW_NAME: shape}, {RAW_NAME: dtype.kind}, lambda _: read_npy(), {RAW_NAME: str(dtype)}), meta
    if suffix in (".csv", ".txt", ".tsv"):
        meta.update(source_kind="csv", raw=True)
        return _Store.from_arrays({RAW_NAME: read_number_table(path, header=True, what="table")}), meta
    if suffix == ".npz":  # members are read lazily: only the one(s) analysed, after the size guard
        meta["source_kind"] = "npz"
        members = open_npz(path)
        return _Store({k: m[0] for k, m in members.items()}, {k: m[1].kind for k, m in members.items()},
                      lambda k: members[k][2](), {k: str(m[1]) for k, m in members.items()}), meta
    if suffix == ".safetensors":
        meta["source_kind"] = "safetensors"
        meta["config"] = _sibling_config(path)
        return _open_safetensors([path]), meta
    if suffix in TORCH_SUFFIXES:
        meta["config"] = _sibling_config(path)
        return _from_torch_object(_torch_load(path), path, meta)
    raise InputError(f"{label}: unsupported file type {suffix or '(none)'}; use .pt/.pth/.bin, .safetensors, "
                     f".npy, .npz, .csv, .txt or a Hugging Face model folder")


def _present(path: Path, what: str) -> bool:
    """Whether ``path`` is a regular file; InputError when something else has its name (a folder, pipe or device, a
    broken or looping link): an unusable config.json was silently ignored, an unusable weights file reported as
    missing."""
    if path.is_file():
        return True
    if os.path.lexists(path):
        raise InputError(f"{show_path(path)}: the {what} is not a regular file (a folder, pipe or device, or a broken or "
                         f"looping link); replace it with the real file")
    return False


def _open_hf_folder(folder: Path, meta: dict[str, Any]) -> tuple[_Store, dict[str, Any]]:
    """A Hugging Face model folder: config.json plus safetensors or PyTorch weights (maybe sharded).

    A sharded model's index (``*.index.json``) is authoritative, as in transformers: each tensor is read
    from the shard its ``weight_map`` names, a tensor a shard holds but the index does not list is
    ignored (a note counts them), and a listed tensor missing from its shard is an error.
    """
    meta["source_kind"] = "hf-folder"
    config_path = folder / "config.json"
    if _present(config_path, "model's config"):
        meta["config"] = _read_json(config_path)
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        weight_map = None
        if _present(folder / single, "weights file"):
            files = [folder / single]
        elif _present(folder / index, "weights index"):
            weight_map = _read_json(folder / index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map or not all(
                    isinstance(f, str) for f in weight_map.values()):
                raise InputError(f"{folder / index}: no usable weight_map (a tensor name -> shard file mapping); "
                                 f"download the model's index file again")
            files = [folder / f for f in dict.fromkeys(weight_map.values())]
            outside = [f for f in dict.fromkeys(weight_map.values())
                       if Path(f).is_absolute() or ".." in Path(f).parts]
            if outside:  # shards live in the model folder; an index must not point elsewhere
                raise InputError(f"{folder / index}: shard paths outside the model folder ({outside[0]}); "
                                 f"an index names files in its own folder")
            not_weights = [f for f in dict.fromkeys(weight_map.values()) if Path(f).suffix not in (".safetensors", ".bin")]
            if not_weights:
                raise InputError(f"{folder / index}: names {show_path(not_weights[0])} as a shard, not a weights file "
                                 f"(.safetensors or .bin); download the model's index file again")
            missing = [str(f) for f in files if not _present(f, "weight shard")]
            if missing:
                raise InputError(f"{folder / index}: shard files missing {missing[:3]}; download the complete model")
            meta["notes"].append(f"{len(files)} weight shards; sha256 is of the shards concatenated in index order")
        else:
            continue
        meta["sha256"] = sha256_file(*files)
        others = [f.name for f in folder.iterdir() if _HF_WEIGHTS.fullmatch(f.name) and f not in files]
        if others:  # which weights were read is otherwise visible only through the sha256
            read = index if weight_map is not None else single  # a sharded model is named by its index
            meta["notes"].append(f"read {show_path(read)}{' and its shards' if weight_map is not None else ''}; "
                                 f"{', '.join(show_path(o) for o in sorted(others)[:3])} beside it not read "
                                 f"(safetensors first, as transformers)")
        # each shard by its own suffix: an index may mix safetensors and .bin shards
        stores = [_open_safetensors([f]) if f.suffix == ".safetensors" else
                  _from_torch_object(_torch_load(f), f, {**meta, "notes": []})[0] for f in files]
        if weight_map is None:
            return _merge(stores), meta
        return _by_index(dict(zip(files, stores)), weight_map, folder, folder / index, meta["notes"]), meta
    hint = ""
    if (folder / "last.pt").exists():
        hint = (f" (a training run folder: analyse {folder / 'last.pt'}, or compare the run's checkpoints with "
                f"pe-probe compare {folder})")
    elif any((sub / "last.pt").exists() for sub in folder.iterdir() if sub.is_dir()):
        hint = f" (a folder of runs: pass each run's last.pt, or compare them with pe-probe compare {folder}/*/)"
    raise InputError(f"{folder}: no model.safetensors or pytorch_model.bin in this folder; give a Hugging Face "
                     f"model folder with PyTorch or safetensors weights{hint}")


def _by_index(stores: dict[Path, _Store], weight_map: dict[str, str], folder: Path, index: Path,
              notes: list[str]) -> _Store:
    """One store of the tensors an HF index lists, each from the shard the index names for it."""
    owner: dict[str, _Store] = {}
    for name, shard in weight_map.items():
        store = stores[folder / shard]
        if name not in store.shapes:
            raise InputError(f"{show_path(index)}: lists tensor {name!r} in {shard}, which does not hold it; "
                             f"download the model (its index and shards) again")
        owner[name] = store
    unlisted = {n for s in stores.values() for n in s.shapes} - set(owner)
    if unlisted:
        notes.append(f"ignored {len(unlisted)} tensor(s) that the shards hold but the index does not list "
                     f"(e.g. {sorted(unlisted)[0]}): the index is authoritative, as in transformers")
    return _Store({n: owner[n].shapes[n] for n in owner}, {n: owner[n].kinds[n] for n in owner},
                  lambda n: owner[n].read(n), {n: owner[n].dtypes.get(n, "") for n in owner},
                  {n: owner[n].problems[n] for n in owner if n in owner[n].problems})


def _open_safetensors(files: list[Path]) -> _Store:
    """Memory-mapped safetensors files; bf16/fp8 tensors are read through torch and widened to float32."""
    from safetensors import SafetensorError, safe_open

    stores = []
    for f in files:
        try:
            handle = safe_open(str(f), framework="np")
            names = list(handle.keys())
            dtypes = {n: handle.get_slice(n).get_dtype() for n in names}
            shapes = {n: tuple(handle.get_slice(n).get_shape()) for n in names}
        except (SafetensorError, OSError) as e:
            raise InputError(f"{show_path(f)}: not a readable .safetensors file ({e}); re-save it with "
                             f"safetensors' save_file or re-download it") from None

        def read(name: str, handle=handle, f=f, dtypes=dtypes) -> np.ndarray:
            try:
                if dtypes[name] in _ST_VIA_TORCH:  # numpy has no bfloat16 / float8
                    with safe_open(str(f), framework="pt") as pt:
                        return pt.get_tensor(name).float().numpy()
                return handle.get_tensor(name)
            except (SafetensorError, TypeError, AttributeError, RuntimeError) as e:
                raise InputError(f"{name} in {show_path(f)}: unsupported dtype {dtypes[name]} ({_first_line(e)}); "
                                 f"convert the table to float (float32) and save it again") from None

        problems = {n: f"unsupported dtype {d}; convert the table to float (float32) and save it again"
                    for n, d in dtypes.items() if d not in _ST_VIA_NUMPY and d not in _ST_VIA_TORCH}
        stores.append(_Store(shapes, {n: _safetensors_kind(d) for n, d in dtypes.items()}, read, dict(dtypes), problems))
    return _merge(stores)


def _torch_load(path: Path) -> Any:
    """``torch.load`` with ``weights_only=True``: tensors and plain containers only, never code."""
    check_safe_torch_loader(path)
    check_not_numpy(path)
    check_torch_pickle(path)  # a crafted multi-MB pickle would take minutes to unpickle
    label = show_path(path)
    mmap = zipfile.is_zipfile(path) and mmap_is_safe(path)  # a record cut short would be read past its end
    try:
        return read_torch_file(path, "cpu", mmap=mmap)
    except pickle.UnpicklingError as e:
        # Either way nothing ran; the wording only tells a corrupt file from one that holds code.
        if _pickle_has_code(path):
            raise InputError(f"{label}: refused to load: the file contains pickled code or objects the weights-only reader "
                             f"does not allow (only tensors and plain containers are allowed). Re-save it with "
                             f"torch.save(model.state_dict()) or as .safetensors") from None
        raise InputError(f"{label}: not a readable torch file (corrupt, truncated, not written by torch.save, or it "
                         f"holds objects other than tensors and plain containers: {torch_load_reason(e)}); re-save the "
                         f"tensors with torch.save(model.state_dict()) or as .safetensors") from None
    except Exception as e:  # a corrupt stream can fail anywhere in the unpickler (KeyError, IndexError, ...)
        raise InputError(f"{label}: not a readable torch file ({torch_file_reason(e)}); re-save or re-download it"
                         ) from None


# Pickles at the start of a legacy (non-zip) torch file: magic number, protocol, system info, the
# object, storage keys; raw tensor bytes follow them.
LEGACY_PICKLES = 5


def _pickle_has_code(path: Path) -> bool:
    """Scan (never execute) the pickle streams of a torch or plain pickle file for globals the weights-only
    reader does not allow (anything but torch's own rebuild helpers, dtypes, storages and plain containers:
    ``torch.hub.load`` or a numpy function too); such a file would run code or build arbitrary objects if
    unpickled. A zip torch file has one stream (data.pkl); a legacy one several in a row, then raw bytes
    (scanning stops there)."""
    import io as _io
    import pickletools

    allowed = _weights_only_globals()

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                names = [n for n in zf.namelist() if n.lower().endswith(".pkl")]
                data = zf.read(names[0]) if names else b""
        else:
            data = path.read_bytes()
    except ZIP_MEMBER_ERRORS:
        return False  # a damaged zip (its first bytes overwritten, an encrypted or unknown-method member)
    stream = _io.BytesIO(data)
    for _ in range(LEGACY_PICKLES):
        if stream.tell() >= len(data):
            break
        pending: list[str] = []
        memo: dict[int, str] = {}  # strings stored in the memo: protocol 4 fetches STACK_GLOBAL's module from it
        memo_len, last = 0, None
        try:
            for op, arg, _ in pickletools.genops(stream):  # stops after this pickle's STOP
                if op.name in PUT_OPS or op.name == "MEMOIZE":
                    index = memo_len if op.name == "MEMOIZE" else int(arg)
                    memo_len = max(memo_len, index + 1)
                    if last is not None:
                        memo[index] = last
                    continue
                last = None
                if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING",
                               "SHORT_BINSTRING"):
                    last = str(arg)
                    pending = (pending + [last])[-2:]
                elif op.name in ("GET", "BINGET", "LONG_BINGET") and int(arg) in memo:
                    last = memo[int(arg)]
                    pending = (pending + [last])[-2:]
                elif op.name == "GLOBAL" or op.name == "STACK_GLOBAL":
                    name = (str(arg) if op.name == "GLOBAL" else " ".join(pending)).replace(" ", ".")
                    if allowed:
                        refused = name not in allowed
                    else:  # a torch that does not list them: its own helpers and the usual containers only
                        refused = not name.startswith(("torch.", "collections.OrderedDict", "_codecs.encode"))
                    if refused:
                        return True
                elif op.name in ("INST", "OBJ"):
                    return True
        except Exception:  # not (or no longer) a pickle: raw tensor bytes or a corrupt stream
            break
    return False


def _weights_only_globals() -> set[str]:
    """The ``module.name`` globals torch's weights-only unpickler accepts (empty if this torch does not say)."""
    try:
        from torch import _weights_only_unpickler as wou

        return {str(k) for k in wou._get_allowed_globals()}
    except (ImportError, AttributeError, TypeError):
        return set()


def _from_torch_object(obj: Any, path: Path, meta: dict[str, Any]) -> tuple[_Store, dict[str, Any]]:
    """Turn what ``torch.load`` returned (tensor, our checkpoint, plain or nested state_dict) into a store."""
    import torch

    path_shown = show_path(path)
    if not meta["source_kind"]:
        meta["source_kind"] = "state_dict"
    if isinstance(obj, torch.Tensor):
        meta.update(source_kind="tensor", raw=True)
        return _torch_store({RAW_NAME: obj}, path_shown), meta
    if not isinstance(obj, dict):
        raise InputError(f"{path_shown}: holds a {type(obj).__name__}, expected a tensor or a dict of tensors")
    fmt = obj.get("format")
    if isinstance(fmt, str) and fmt.startswith("pe-probe-checkpoint"):
        if fmt != CHECKPOINT_FORMAT:
            raise InputError(f"{path_shown}: checkpoint format {fmt!r} is not supported (this pe-probe reads "
                             f"{CHECKPOINT_FORMAT}); upgrade pe-probe")
        if not isinstance(obj.get("model"), dict):
            raise InputError(f"{path_shown}: pe-probe checkpoint without a 'model' state_dict; re-save it")
        config, pe_params = obj.get("config"), obj.get("pe_params") or []
        if config is not None and not isinstance(config, dict):
            raise InputError(f"{path_shown}: its 'config' is a {type(config).__name__}, not a mapping; re-save the checkpoint")
        if not isinstance(pe_params, (list, tuple)) or not all(isinstance(n, str) for n in pe_params):
            raise InputError(f"{path_shown}: its 'pe_params' is not a list of tensor names; re-save the checkpoint, "
                             f"or pick the table with --param NAME")
        meta.update(source_kind="pe-probe-checkpoint", config=plain_meta(config, "config", path_shown),
                    pe_params=list(pe_params), step=_int_or_none(obj.get("step")),
                    epoch=_int_or_none(obj.get("epoch")), metrics=plain_meta(obj.get("metrics"), "metrics", path_shown))
        if obj.get("ground_truth") is not None:
            try:
                meta["ground_truth"] = ground_truth_from_checkpoint(obj["ground_truth"], source=path_shown)
            except InputError as e:  # an error only where it is needed: --ground-truth replaces it
                meta["ground_truth_error"] = str(e)
        return _torch_store(_flatten(obj["model"], where=path_shown), path_shown), meta
    for key in ("state_dict", "model_state_dict", "model", "module", "model_ema", "ema"):
        inner = obj.get(key)
        if isinstance(inner, dict) and _flatten(inner):
            if meta["source_kind"] == "state_dict":
                meta["notes"].append(f"using the state_dict under the {key!r} entry")
            return _torch_store(_flatten(inner, where=path_shown), path_shown), meta
    tensors = _flatten(obj, where=path_shown)
    if not tensors:
        raise InputError(f"{path_shown}: the dict holds no tensors; expected a state_dict")
    return _torch_store(tensors, path_shown), meta


MAX_WALK_NODES = 1_000_000  # containers walked in one state_dict, config or metrics: real ones have at most thousands


def walk_budget(where: str, what: str) -> Callable[[], None]:
    """A counter that raises InputError once more than `MAX_WALK_NODES` containers (dicts, lists...) were walked: a
    few-KB file can hold a "diamond" (each level referring to the next twice: 2^40 containers from 40 levels), which
    no depth limit stops. Numbers and strings do not count: a long loss history is fine."""
    count = [0]

    def visit() -> None:
        count[0] += 1
        if count[0] > MAX_WALK_NODES:
            raise InputError(f"{where}: its {what} holds more than {MAX_WALK_NODES:,} nested containers (shared "
                             f"sub-containers repeated level after level?), which no real checkpoint has; re-save it "
                             f"with a plain {what}")
    return visit


def _flatten(obj: dict, prefix: str = "", where: str = "") -> dict[str, Any]:
    """Tensors of a nested dict, keyed by dotted names; non-tensor entries are ignored. Two tensors that get the
    same name (``{"a": {"b": t}}`` and ``{"a.b": u}``) are refused: one of them was picked silently. A dict that
    contains itself, nesting deeper than `MAX_META_DEPTH` levels or more than `MAX_WALK_NODES` dicts to walk are
    refused (one line: a crafted few-KB file overflowed the stack or never finished)."""
    where = where or "the file"
    return _flatten_into(obj, prefix, where, walk_budget(where, "state_dict"), ())


def _flatten_into(obj: dict, prefix: str, where: str, visit: Callable[[], None], path: tuple[int, ...]) -> dict[str, Any]:
    """`_flatten`'s walk: ``visit`` counts the dicts walked, ``path`` holds the ids of the dicts above this one."""
    import torch

    visit()
    if id(obj) in path:
        raise InputError(f"{where}: its state_dict contains itself (under {show_path(prefix)}); re-save it as a plain "
                         f"dict of tensors")
    if len(path) >= MAX_META_DEPTH:
        raise InputError(f"{where}: its state_dict is nested deeper than {MAX_META_DEPTH} levels, which no real one is; "
                         f"re-save it as a plain dict of tensors")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        found = {name: value} if isinstance(value, torch.Tensor) else (
            _flatten_into(value, name, where, visit, (*path, id(obj))) if isinstance(value, dict) else {})
        for n in found.keys() & out.keys():
            raise InputError(f"{where}: two tensors are named {show_path(n)} (one under nested keys, one under a dotted "
                             f"key); re-save the state_dict with distinct names")
        out.update(found)
    return out


# An expanded (stride-0) tensor can claim far more elements than its storage holds: refused when reading
# it would mean more than this many elements and more than 16 times its stored bytes.
_EXPANDED_MIN_NUMEL = 1 << 20


def _torch_store(tensors: dict[str, Any], where: str = "") -> _Store:
    """A store over torch tensors; reading gives numpy views of them (no copy for float16/32/64)."""
    import torch

    def kind(t: Any) -> str:
        if t.is_quantized:
            return "q"
        if t.dtype.is_floating_point:
            return "f"
        if t.dtype.is_complex:
            return "c"
        return "b" if t.dtype == torch.bool else "i"

    nested = {n for n, t in tensors.items() if t.is_nested}  # ragged: no shape at all (t.shape raises)
    problems = {n: "is a nested (ragged) tensor, which pe-probe does not read; save its parts as separate dense "
                   "tensors and pass --param NAME for the one to analyse" for n in nested}
    problems.update({n: f"is a sparse tensor ({str(t.layout).replace('torch.', '')} layout, shape {tuple(t.shape)}), which "
                        f"pe-probe does not read; save it dense (tensor.to_dense()) and pass that file"
                     for n, t in tensors.items() if n not in nested and t.layout != torch.strided})
    problems.update({n: f"is a tensor on the 'meta' device (shape {tuple(t.shape)}, no values stored), which has nothing to "
                        f"analyse; save the real weights (e.g. after loading them onto the CPU)"
                     for n, t in tensors.items() if t.is_meta})

    def label(name: str) -> str:
        return f"{name} in {where}" if where else name

    def read(name: str) -> np.ndarray:
        if name in problems:
            raise InputError(f"{label(name)}: {problems[name]}")
        t = tensors[name].detach().cpu()
        stored = t.untyped_storage().nbytes()
        if t.numel() > _EXPANDED_MIN_NUMEL and t.numel() * t.element_size() > 16 * stored:
            raise InputError(f"{label(name)}: claims {t.numel():,} elements (shape {tuple(t.shape)}) but stores only {stored:,} "
                             f"bytes (an expanded, stride-0 tensor); save it with tensor.contiguous()")
        if t.is_quantized:
            t = t.dequantize()
        if t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32, torch.float64):
            t = t.float()  # bfloat16 / float8 have no numpy dtype
        return t.numpy()

    return _Store({n: () if n in nested else tuple(t.shape) for n, t in tensors.items()},
                  {n: kind(t) for n, t in tensors.items()}, read,
                  {n: str(t.dtype).replace("torch.", "") for n, t in tensors.items()}, problems)


def _merge(stores: list[_Store]) -> _Store:
    if len(stores) == 1:
        return stores[0]
    owner = {name: s for s in stores for name in s.shapes}
    return _Store({n: owner[n].shapes[n] for n in owner}, {n: owner[n].kinds[n] for n in owner},
                  lambda n: owner[n].read(n), {n: owner[n].dtypes.get(n, "") for n in owner},
                  {n: owner[n].problems[n] for n in owner if n in owner[n].problems})


# ---------------------------------------------------------------------------------------------------
# Finding the table


def _candidates(store: _Store) -> list[str]:
    """Float tensors with >= 2 dims, well-known PE names first, then PE-looking names, then the rest."""
    floats = [n for n in store.shapes if store.kinds[n] == "f" and len(store.shapes[n]) >= 2]
    return sorted(floats, key=lambda n: 0 if _well_known(n) else 1 if _pe_looking(n) else 2)


def _find_pe(store: _Store, meta: dict[str, Any], src: str = "source") -> list[str]:
    pe_params = meta.get("pe_params")
    if pe_params == []:  # our checkpoint says: no table (relative offsets, RoPE, none); never guess one by name
        pe_cfg = meta["config"].get("pe") if isinstance(meta.get("config"), dict) else None
        kind = pe_cfg.get("kind") if isinstance(pe_cfg, dict) else None
        raise NoPETableError(f"{src}: this checkpoint records no PE table (pe_params is empty"
                             f"{f'; its PE kind is {kind}' if kind else ''}: not a table of positions); "
                             f"pass --param NAME to analyse one of its tensors anyway",
                             reason=f"its pe_params is empty{f'; PE kind {kind}' if kind else ''}")
    if pe_params:
        missing = [p for p in pe_params if p not in store.shapes]
        if missing:
            raise InputError(f"{src}: checkpoint lists pe_params {missing[:3]} that are not in its model; "
                             f"pass --param NAME (candidates: {_listing(_candidates(store))})")
        return list(pe_params)
    # Float tensors, and complex or quantized ones: picked by name like floats, so that reading one names its
    # dtype and the fix instead of reporting no table at all. Integer tensors (position ids) are never picked.
    tables = [n for n in store.shapes if store.kinds[n] in ("f", "c", "q")]
    # A well-known name is taken whatever its shape (a wrong shape then gets a clear message); a name
    # that only looks PE-ish must also look like a table (>= 2 dims) to be picked.
    for rule, min_dims in ((_well_known, 0), (_pe_looking, 2)):
        hits = [n for n in tables
                if rule(n) and len(store.shapes[n]) >= min_dims and not _NOT_ABSOLUTE.search(n)]
        if hits:
            return _layer_order(hits, src)
    why = _no_table_reason(store, meta.get("config"))
    if len(store.shapes) == 1 and tables and not why:
        return tables  # a file that holds one float (or complex, quantized) tensor: that is the table, unless its
        # config or name says the model has none (a Llama folder holding only embed_tokens: the token table)
    if why:
        raise NoPETableError(f"{src}: no positional-encoding table found: this model has no absolute PE table "
                             f"({why}), so there is nothing to analyse; pass --param NAME to analyse one of its "
                             f"tensors anyway (candidates: {_listing(_candidates(store))})",
                             reason=f"the model has no absolute PE table: {why}")
    raise InputError(f"{src}: no positional-encoding table found automatically; pass --param NAME "
                     f"(candidates: {_listing(_candidates(store))})")


_LAYER_NUMBER = re.compile(r"(?<![^.])\d+(?![^.])")  # a dotted part that is a number: a layer index


def _other_pe_looking(candidates: list[str], picked: list[str]) -> list[str]:
    """Of the float tables ``candidates`` (`_candidates`), those besides ``picked`` whose names look like absolute PE
    tables: the automatic pick is named beside them (timm MAE's encoder ``pos_embed`` next to ``decoder_pos_embed``)."""
    return [n for n in candidates
            if n not in picked and (_well_known(n) or _pe_looking(n)) and not _NOT_ABSOLUTE.search(n)]


def _layer_order(names: list[str], src: str) -> list[str]:
    """One name, or names differing only in their layer number(s), sorted by layer; else ambiguous."""
    if len(names) == 1:
        return names
    templates = {_LAYER_NUMBER.sub("{i}", n) for n in names}
    if len(templates) == 1:
        return sorted(names, key=_layer_numbers)
    raise InputError(f"{src}: several possible PE tables ({_listing(names)}); pass --param NAME to pick one")


def _numbered_from_zero(names: list[str]) -> bool:
    """Whether per-layer names carry the layer numbers 0..n-1 (blocks.0, blocks.1, ...), so that --layer N
    is also the number in the name; False for gaps such as blocks.{0,1,2,10}."""
    return any(list(col) == list(range(len(names))) for col in zip(*map(_layer_numbers, names)))


def _layer_numbers(name: str) -> list[int]:
    """The whole dotted parts of a tensor name that are numbers (blocks.10.pe.table -> [10])."""
    return [int(x) for x in _LAYER_NUMBER.findall(name)]


def _resolve_param(store: _Store, param: str, src: str) -> str:
    if param in store.shapes:
        return param
    hits = [n for n in store.shapes if n.endswith("." + param)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise InputError(f"{src}: --param {param} matches several tensors ({_listing(hits)}); give the full name")
    raise InputError(f"{src}: no tensor named {param!r}; candidates: {_listing(_candidates(store))}")


def _well_known(name: str) -> bool:
    low = name.lower()
    return any(low == s or low.endswith("." + s) for s in WELL_KNOWN_PE)


def _pe_looking(name: str) -> bool:
    parts = name.lower().split(".")
    return any(p in _PE_WORDS or "pos_emb" in p or "position_emb" in p or "positional" in p for p in parts)


def _listing(names: list[str]) -> str:
    if not names:
        return "none: no float tensor with 2 or more dims"
    shown = ", ".join(show_path(n) for n in names[:MAX_LISTED])  # untrusted names: control characters quoted
    return shown + (f", ... and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def _parsed_layer(layer: int | str | None) -> int | str | None:
    """`parse_layer`, with what it cannot parse passed through (`_choose_layer` words that error)."""
    try:
        return parse_layer(layer)
    except ValueError:
        return layer


def _layer_of(store: _Store, meta: dict[str, Any], name: str, src: str) -> int | None:
    """The layer index of tensor ``name`` among the source's per-layer PE tables (what --layer N would pick),
    or None when it is not one of several."""
    try:
        found = _find_pe(store, meta, src)
    except InputError:
        return None
    return found.index(name) if len(found) > 1 and name in found else None


def _choose_layer(names: list[str], layer: int | str | None, src: str) -> tuple[list[str], int | str | None]:
    """The tensor names to read and the layer to record (None when the source holds one table)."""
    n = len(names)
    given = layer
    try:
        layer = parse_layer(layer)
    except ValueError:
        raise InputError(f"--layer {given!r} is not understood; use an index 0..{n - 1}, mean or all") from None
    if layer == "mean":
        return names, ("mean" if n > 1 else None)
    if layer == "all":
        raise InputError("layer='all' means one analysis per layer: call once per layer i in range(n_layers(source)) (the CLI's --layer all does this)")
    if layer is None:
        return names[:1], (0 if n > 1 else None)
    if not 0 <= layer < n:
        valid = "0" if n == 1 else f"0..{n - 1}"
        raise InputError(f"{src}: --layer {layer} is out of range; this source has {n} PE table(s), valid: "
                         f"{valid} or mean (every layer: --layer all, in Python analyze_view(source, 'raw', "
                         f"layer='all'))")
    return [names[int(layer)]], (int(layer) if n > 1 else None)


# ---------------------------------------------------------------------------------------------------
# Shaping and checking the table


def _as_table(store: _Store, name: str, label: str) -> np.ndarray:
    """Read one tensor as a finite 2-D float table, squeezing leading singleton dims (all its rows)."""
    rows, _ = _table_shape(store, name, label)
    check_tensor_bytes(store.shapes[name], label)
    return _read_rows(store, name, label, 0, rows)


MAX_TENSOR_DIMS = 64  # numpy's limit (NPY_MAXDIMS)


def _table_shape(store: _Store, name: str, label: str) -> tuple[int, int]:
    """The (rows, dims) a tensor would give as a table, from its claimed dtype and shape alone (nothing is read);
    InputError when it cannot be a table."""
    shape = store.shapes[name]
    raw = name == RAW_NAME  # a bare array (.npy/.csv): integers are numbers like any other
    kind, dtype = store.kinds[name], store.dtypes.get(name, "")
    dtype_note = f"{dtype}, " if dtype else ""
    if name in store.problems:
        raise InputError(f"{label}: {store.problems[name]}")
    if kind != "f" and not (raw and kind in "iu"):
        fix = "save the table as floats" if raw else "pass --param NAME of a float table"
        if kind == "c":
            raise InputError(f"{label}: is a complex tensor ({dtype_note}shape {shape}), not a real-valued PE table; "
                             f"{'save its real part as floats' if raw else fix}")
        if kind == "q":
            raise InputError(f"{label}: is a quantized tensor ({dtype_note}shape {shape}); save it dequantized "
                             f"(tensor.dequantize()) as floats, or {fix}")
        if kind in "iub":
            raise InputError(f"{label}: is an integer/bool tensor ({dtype_note}shape {shape}), e.g. position ids, not a "
                             f"PE table; {fix}")
        raise InputError(f"{label}: holds {dtype or kind} values, not numbers; {fix}")
    if len(shape) > MAX_TENSOR_DIMS:  # numpy holds at most 64: the conversion would fail after every check
        raise InputError(f"{label}: has {len(shape)} dimensions, more than the {MAX_TENSOR_DIMS} numpy can hold; "
                         f"reshape it to (positions, dims) and save it again")
    dims = list(shape)
    while len(dims) > 2 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 2:
        fix = "reshape it to (positions, dims) and save it again" if raw else "pass --param NAME of such a tensor"
        raise InputError(f"{label}: has shape {shape}; a PE table must be 2-D (positions x dims) after dropping "
                         f"leading 1s; {fix}")
    if dims[1] == 0:
        fix = "save a table with at least one column" if raw else "pass --param NAME of a real table"
        raise InputError(f"{label}: has shape {shape}, no dimensions per position; {fix}")
    return dims[0], dims[1]


def _read_rows(store: _Store, name: str, label: str, start: int, stop: int) -> np.ndarray:
    """Rows start..stop-1 of a tensor checked by `_table_shape`, as finite float64 of a sane magnitude.

    Only those rows are converted (memory-mapped sources read only them)."""
    arr = store.read(name)
    while arr.ndim > 2 and arr.shape[0] == 1:
        arr = arr[0]
    arr = np.array(arr[start:stop], dtype=np.float64)
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(np.argwhere(~finite)[0, 0]) + start
        raise InputError(f"{label}: contains NaN or Inf (first in row {bad}); the table must be finite")
    check_magnitude(arr, label)
    return arr


def _extra_tokens(name: str, n_rows: int, config: dict | None, explicit: int | None,
                  gt: GroundTruth | None, src: str, store: _Store | None = None) -> tuple[int, str]:
    """How many leading rows to drop, and the note that says why.

    Evidence: the config of the model (or of the part that holds the table, in a composite model), else the
    table's name, and with ``store`` the tensors beside it (a CLS token) or its zero padding row."""
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, (int, np.integer)) or not 0 <= explicit < n_rows:
            raise InputError(f"{src}: --drop-extra-tokens {explicit!r} must be an integer in 0..{n_rows - 1} "
                             f"(the table has {n_rows} rows)")
        return int(explicit), f"dropped {explicit} leading row(s) as asked"
    if gt is not None and gt.n == n_rows:
        return 0, ""  # the table already matches its own ground truth
    keep = "keep them with --drop-extra-tokens 0, or drop_extra_tokens=0 in Python"
    cfg = _sub_config(name, config)
    k, why = _offset_rows(name, n_rows, cfg, store, src)
    if k:
        return k, f"dropped {k} offset row{'s' if k > 1 else ''} at the top ({why}; {keep})"
    if _vit_evidence(name, cfg, store):
        found = _patch_rows(n_rows, cfg)
        tokens = _hf_tokens_beside(store, name) if store is not None and not _patch_grid(cfg) else []
        if tokens and n_rows - len(tokens) >= MIN_POSITIONS and (not found or found[0] != len(tokens)):
            k = len(tokens)  # they overrule the square-grid guess: these rows are certain
            return k, (f"dropped {k} leading row{'s' if k > 1 else ''} for {', '.join(map(show_path, tokens))} beside "
                       f"the table (a Hugging Face ViT-style table holds their rows first, whatever its patch grid; {keep})")
        if found:
            k, gh, gw = found
            what = "CLS token" if k == 1 else "CLS + distillation tokens"
            return k, f"dropped {k} {what} ({n_rows} rows = {k} + {gh}x{gw} patches; {keep})"
    return 0, ""


def _hf_tokens_beside(store: _Store, name: str) -> list[str]:
    """The CLS / distillation tokens in the module of a Hugging Face-named table (``embeddings.position_embeddings``,
    CLIP's ``embeddings.position_embedding.weight``): transformers' ViT, DeiT and CLIP always give them the
    table's first rows, so no patch grid is needed to know (a loose 14x16-patch ViT table of 225 rows looked like
    a 15x15 grid). timm's ``pos_embed`` is left to the grid rule: its ``no_embed_class`` tables hold patches only."""
    if not (name.endswith(".position_embeddings") or name.endswith(".position_embedding.weight")):
        return []
    parent, width = _parent(name), math.prod(store.shapes[name][-1:])
    return [n for n, s in store.shapes.items()
            if _parent(n) == parent and n.rsplit(".", 1)[-1] in _CLS_NAMES and math.prod(s) == width > 0]


def _offset_rows(name: str, n_rows: int, cfg: dict, store: _Store | None, src: str) -> tuple[int, str]:
    """Unused rows on top of a text model's learned table (OPT/BART offset, RoBERTa padding), and why."""
    low = "." + name.lower()
    model_type = str(cfg.get("model_type", "")).lower()
    max_pos = cfg.get("max_position_embeddings")
    if low.endswith((".embed_positions.weight", ".position_embeddings.weight")):
        if model_type in _OFFSET2_TYPES and max_pos in (None, n_rows - 2):
            return 2, f"{model_type} position ids start at 2"
        pad = 1 if model_type == "mpnet" else cfg.get("pad_token_id", 1)
        if (model_type in _PADDING_IDX_TYPES and max_pos in (None, n_rows) and type(pad) is int
                and 0 <= pad < n_rows - 1
                and (model_type != "esm" or cfg.get("position_embedding_type") in (None, "absolute"))):
            return pad + 1, f"{model_type} position ids start at padding_idx + 1 = {pad + 1}"
    if cfg or not _is_pow2(n_rows - 2):
        return 0, ""
    # No config: a fairseq-style name (encoder and decoder alike) with 2 + 2^j rows is an OPT/BART table; a
    # BERT-style name needs more, its padding row: nn.Embedding keeps row padding_idx = 1 at exactly zero.
    if low.endswith(".embed_positions.weight"):
        return 2, f"{n_rows} = 2 + {n_rows - 2}: OPT/BART-style table"
    if low.endswith(".position_embeddings.weight") and store is not None:
        label = f"{show_path(name)} in {src}"
        check_tensor_bytes(store.shapes[name], label)
        padding_row, first = _read_rows(store, name, label, 1, 3)
        if not padding_row.any() and first.any():
            return 2, f"{n_rows} = 2 + {n_rows - 2} and row 1, the padding row, is all zeros: RoBERTa-style table"
    return 0, ""


def _patch_rows(n_rows: int, cfg: dict) -> tuple[int, int, int] | None:
    """(k, gh, gw) when the table is k = 1 or 2 CLS-like rows then a gh x gw patch grid: the config's grid
    (image_size / patch_size), else a square one; None when it is all patches."""
    grid = _patch_grid(cfg)
    if grid and grid[0] * grid[1] == n_rows:
        return None
    for k in (1, 2):
        if grid and grid[0] * grid[1] == n_rows - k:
            return k, *grid
    for k in (1, 2):  # no grid in the config (or a stale one): a square grid, unless the table itself is one
        s = _square_side(n_rows - k)
        if s and not _is_square(n_rows):
            return k, s, s
    return None


def _patch_grid(cfg: dict) -> tuple[int, int] | None:
    """(rows, cols) of image patches from a config's image_size and patch_size (ints or [h, w] pairs)."""
    img, patch = _pair(cfg.get("image_size")), _pair(cfg.get("patch_size"))
    if img and patch and img[0] >= patch[0] and img[1] >= patch[1]:
        return img[0] // patch[0], img[1] // patch[1]
    return None


def _pair(value: Any) -> tuple[int, int] | None:
    value = list(value) if isinstance(value, (list, tuple)) else [value, value]
    return (value[0], value[1]) if len(value) == 2 and all(type(v) is int and v > 0 for v in value) else None


def _vit_like(name: str, cfg: dict) -> bool:
    if str(cfg.get("model_type", "")).lower() in _VIT_TYPES:
        return True
    archs = cfg.get("architectures") or []
    archs = " ".join(map(str, archs)) if isinstance(archs, (list, tuple)) else str(archs)
    return bool(_VIT_NAME.search(name) or re.search(r"vit|deit|beit|dino", archs, re.IGNORECASE))


def _vit_evidence(name: str, cfg: dict, store: _Store | None) -> bool:
    """Whether the table is a ViT-style one (CLS row(s), then patches): by config or name, or a CLS token beside it."""
    return _vit_like(name, cfg) or (store is not None and _cls_beside(store, name))


def _cls_beside(store: _Store, name: str) -> bool:
    """Whether the table's own module holds a CLS (or distillation) token of the table's width: the table
    then has that token's row on top (HF ViT/DeiT ``embeddings.cls_token``, timm ``cls_token``, CLIP
    ``class_embedding``). A token of another module (a multimodal model's other tower) is no evidence."""
    parent, width = _parent(name), store.shapes[name][-1:]
    return any(_parent(n) == parent and n.rsplit(".", 1)[-1] in _CLS_NAMES and math.prod(s) == math.prod(width) > 0
               for n, s in store.shapes.items())


def _parent(name: str) -> str:
    """The module that holds a tensor: ``embeddings`` for ``embeddings.position_embedding.weight``."""
    return name.removesuffix(".weight").rpartition(".")[0]


def _sub_config(name: str, config: dict | None) -> dict:
    """The config that describes tensor ``name``: in a composite model the part's own (a vision-encoder-decoder's
    ``encoder`` for ``encoder.*``, CLIP's ``vision_config`` for ``vision_model.*``), else the config itself."""
    config = config or {}
    head = name.split(".", 1)[0]
    for key in (head, f"{head}_config", head.removesuffix("_model") + "_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return config


# Evidence that a model encodes positions without an absolute table, consulted only when no table is found (some
# configs carry rope_theta beside an absolute table, ESM's): config keys, position_embedding_type, model types
# and tensor names.
_ROTARY, _RELATIVE, _ALIBI = "rotary position embeddings", "relative position biases", "ALiBi attention biases"
_COMPUTED = "a fixed sinusoid computed at run time (a non-persistent buffer, not stored in the weights)"
_NO_TABLE_KEYS = {"alibi": _ALIBI, "rotary_dim": _ROTARY, "rope_theta": _ROTARY, "rope_scaling": _ROTARY,
                  "rope_parameters": _ROTARY, "rotary_pct": _ROTARY, "rotary_emb_base": _ROTARY,
                  "relative_attention_num_buckets": _RELATIVE, "use_relative_position_bias": _RELATIVE,
                  "use_shared_relative_position_bias": _RELATIVE, "relative_attention": _RELATIVE}
_NO_TABLE_PE_TYPES = {"rotary": _ROTARY, "relative_key": _RELATIVE, "relative_key_query": _RELATIVE, "alibi": _ALIBI}
_NO_TABLE_MODEL_TYPES = {
    **dict.fromkeys(("llama", "mistral", "mixtral", "gpt_neox", "gptj", "codegen", "qwen2", "qwen3", "gemma",
                     "gemma2", "phi", "phi3", "roformer"), _ROTARY),
    **dict.fromkeys(("t5", "mt5", "umt5", "longt5", "swin", "swinv2", "deberta-v2"), _RELATIVE),
    **dict.fromkeys(("bloom", "mpt"), _ALIBI),
    **dict.fromkeys(("m2m_100", "xglm", "ctrl"), _COMPUTED),  # transformers 5.25: nn.Buffer(..., persistent=False)
    "funnel": _RELATIVE,
}
_NO_TABLE_NAME = re.compile(r"(rotary_emb|inv_freq)|relative_position_bias|relative_attention_bias|rel_embeddings",
                            re.IGNORECASE)


def _no_table_reason(store: _Store, config: dict | None) -> str:
    """``KIND, from EVIDENCE`` when the config or the tensor names show how the model encodes positions without
    an absolute table (rotary, relative, ALiBi); '' when nothing says so."""
    found: dict[str, list[str]] = {}
    for cfg in [config or {}] + [v for v in (config or {}).values() if isinstance(v, dict) and "model_type" in v]:
        for key, kind in _NO_TABLE_KEYS.items():
            if cfg.get(key) not in (None, False):
                found.setdefault(kind, []).append(f"config {key}")
        pe_type = str(cfg.get("position_embedding_type", "")).lower()
        if pe_type in _NO_TABLE_PE_TYPES:
            found.setdefault(_NO_TABLE_PE_TYPES[pe_type], []).append(f"config position_embedding_type {pe_type}")
        for key in ("use_absolute_embeddings", "use_absolute_position_embeddings"):
            if cfg.get(key) is False:
                found.setdefault(_RELATIVE, []).append(f"config {key} false")
        model_type = str(cfg.get("model_type", "")).lower()
        if model_type in _NO_TABLE_MODEL_TYPES:
            found.setdefault(_NO_TABLE_MODEL_TYPES[model_type], []).append(f"model_type {model_type}")
    for n in store.shapes:
        if m := _NO_TABLE_NAME.search(n):
            found.setdefault(_ROTARY if m.group(1) else _RELATIVE, []).append(f"tensor {show_path(n)}")
    if not found:
        return ""
    kind, evidence = next(iter(found.items()))
    return f"{kind}, from {', '.join(list(dict.fromkeys(evidence))[:3])}"


def _parse_positions(positions: str | tuple, n: int) -> tuple[int, int]:
    """``"A:B"`` or ``(A, B)`` with Python slice semantics, resolved against n rows.

    Unlike a Python slice, a bound past the table is an error, not clamped: ``0:1024`` on a 512-row
    table would otherwise analyse 512 rows while the user believes 1,024 were analysed.
    """
    usage = "use A:B with integers, open ends allowed (e.g. 0:128 or :128)"
    if isinstance(positions, str):
        m = re.fullmatch(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*", positions)
        if not m:
            raise InputError(f"malformed --positions {positions!r}: {usage}")
        a, b = (int(g) if g is not None else None for g in m.groups())
    elif isinstance(positions, (tuple, list)) and len(positions) == 2 and all(
            v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in positions):
        a, b = positions
    else:
        raise InputError(f"malformed --positions {positions!r}: {usage}")
    outside = [v for v in (a, b) if v is not None and not -n <= v <= n]
    if outside:
        raise InputError(f"--positions {_fmt_span(a, b)} reaches past the {n}-row table (bounds run from {-n} to "
                         f"{n}); use bounds within it, e.g. 0:{n} or :{n}")
    start, stop, _ = slice(a, b).indices(n)
    if stop <= start:
        raise InputError(f"--positions {_fmt_span(a, b)} selects no rows of the {n}-row table; {usage}")
    return start, stop


def _offset_invariant(table: np.ndarray, rtol: float = 1e-3, max_rows: int = 4096) -> bool:
    """Whether the Gram matrix T T^T is Toeplitz (each diagonal constant to ``rtol`` of its largest entry): the mark
    of a 1-D sinusoidal encoding whatever its column order or frequencies, and of no learned table. Checked up to
    ``max_rows`` rows (the Gram matrix is N x N)."""
    n = len(table)
    if not 8 <= n <= max_rows:
        return False
    gram = table @ table.T
    scale = float(np.max(np.abs(gram)))
    if scale == 0 or np.ptp(gram) <= rtol * scale:  # constant: no geometry at all, refused by the analysis anyway
        return False
    return all(np.ptp(np.diagonal(gram, k)) <= rtol * scale for k in range(n - 1))


def _row_centred(table: np.ndarray) -> bool:
    rms = np.sqrt(np.mean(table**2, axis=1))
    means = np.abs(table.mean(axis=1))
    return bool(np.all(rms > 0) and np.all(means < 1e-6 * rms))


# ---------------------------------------------------------------------------------------------------
# Small helpers


def sha256_file(*paths: Path | str, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file (or of several files concatenated), streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
    return h.hexdigest()


def _sibling_config(path: Path) -> dict | None:
    """The config.json next to a weights file named like Hugging Face's (model.safetensors, pytorch_model.bin)."""
    cfg = path.parent / "config.json"
    if _HF_WEIGHTS.fullmatch(path.name) and _present(cfg, "model's config"):
        return _read_json(cfg)
    return None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise InputError(f"{path}: nested deeper than Python's JSON reader can follow; not a model's config or index "
                         f"(replace the file)") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return plain_meta(data, path.name, show_path(path))


MAX_META_DEPTH = 64  # levels of nesting in a config or metrics mapping: real ones have a few


def plain_meta(value: Any, what: str, where: str) -> Any:
    """A checkpoint's ``config`` or ``metrics`` (or a config.json) as plain JSON values, which the reports write
    and ``compare`` groups by: a tensor becomes its number or list of numbers (a string past 10,000 elements),
    a set a sorted list, bytes and complex numbers strings, mapping keys strings. torch's safe loader accepts
    all of these, and ``analyze --out`` then failed writing metrics.json with a traceback. Nesting deeper than
    `MAX_META_DEPTH` levels is refused (one line) rather than overflowing Python's stack later."""
    import numpy as np
    import torch

    visit = walk_budget(where, what)

    def plain(v: Any, path: tuple[int, ...] = ()) -> Any:  # path: the ids of the containers above v
        if len(path) > MAX_META_DEPTH:
            raise InputError(f"{where}: its {what} is nested deeper than {MAX_META_DEPTH} levels, which no real config "
                             f"has; re-save it with a plain {what}")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            visit()
            if id(v) in path:
                raise InputError(f"{where}: its {what} contains itself; re-save it with a plain {what}")
            inner = (*path, id(v))
            if isinstance(v, dict):
                return {str(k): plain(x, inner) for k, x in v.items()}
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            return [plain(x, inner) for x in items]
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).replace("torch.", "")
            if v.is_nested or v.layout != torch.strided or v.is_meta or v.numel() > 10_000:
                return f"a {dtype} tensor pe-probe does not read into a config"
            t = v.detach().cpu()
            if t.is_complex():
                return str(t.resolve_conj().tolist())
            return plain((t.double() if t.is_floating_point() else t).tolist(), path)  # float8/bf16 have no tolist
        if isinstance(v, np.generic):
            return plain(v.item(), path)
        if isinstance(v, bytes):
            return v.decode("utf-8", "backslashreplace")
        return str(v)  # complex, torch.Size, dtypes, anything else the safe loader allows

    return plain(value)


# safetensors dtypes pe-probe reads: through numpy, or through torch (widened to float32). Others (F4, F6_E2M3,
# ... packed sub-byte floats) are named in a one-line error when chosen.
_ST_VIA_NUMPY = {"F64", "F32", "F16", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL"}
_ST_VIA_TORCH = {"BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"}


def _safetensors_kind(dtype: str) -> str:
    if dtype.startswith(("F", "BF")):
        return "f"
    if dtype.startswith("C"):
        return "c"
    if dtype == "BOOL":
        return "b"
    return "u" if dtype.startswith("U") else "i"



def _int_or_none(x: Any) -> int | None:
    try:
        return int(x) if x is not None else None
    except (TypeError, ValueError):
        return None


def _square_side(n: int) -> int | None:
    """s when n = s * s with s >= 2 (a square patch grid), else None."""
    s = math.isqrt(max(n, 0))
    return s if s >= 2 and s * s == n else None


def _is_square(n: int) -> bool:
    return n >= 0 and math.isqrt(n) ** 2 == n


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _fmt_span(a: int | None, b: int | None) -> str:
    return f"{'' if a is None else a}:{'' if b is None else b}"
