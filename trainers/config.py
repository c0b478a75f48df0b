"""Run configuration: a dataclass tree that serialises to a nested JSON dict, plus presets.

``config.json`` and the checkpoint's ``"config"`` hold `TrainConfig.to_dict()`, so dotted keys such as
``pe.init_std`` or ``optim.lr`` address one setting (``pe-probe compare --by pe.init_std``).
`validate` checks every option once, at the boundary, raising a one-line `InputError`.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from pe_probe.errors import InputError
from pe_probe.validation import MAX_SEED
from trainers.pe import INITS, PE_KINDS, TABLE_INIT_KINDS, init_matters, pe_kinds_for

TASKS = ("lst",)
DEVICES = ("cpu", "cuda", "auto")


@dataclass
class ModelConfig:
    d_model: int = 160
    n_layers: int = 4
    n_heads: int = 1
    mlp_ratio: float = 4.0
    norm: str = "post"  # "post" (the study's, as nn.TransformerEncoderLayer) or "pre"
    dropout: float = 0.0  # one setting for embeddings, attention, residuals and MLP
    readout: str = "last"  # "last" token (the study's) or a prepended "cls" token


@dataclass
class PEConfig:
    kind: str = "learned"
    init: str = "normal"  # learned / relative tables: "normal" | "uniform" | "zeros"
    init_std: float = 0.1  # sigma of the init (the study sweeps 0.1 .. 2.0)
    every_layer: bool = False  # additive PEs: a separate table at the input of every layer
    causal: bool = False  # relative PE: also mask later tokens (the companion code's behaviour)


@dataclass
class OptimConfig:
    name: str = "adamw"  # "adamw" | "sgd"
    lr: float = 1e-4
    weight_decay: float = 0.0
    momentum: float = 0.9  # sgd only
    batch_size: int = 128
    epochs: int = 4000


@dataclass
class DataConfig:
    n_per_level: int = 3000
    test_frac: float = 0.1
    n_ood_per_level: int = 36
    min_jaccard: float = 0.8
    seed: int = 0
    ood_puzzles: str | None = None  # study-format CSV used as the held-out (OOD) set
    # sha256 of that file's bytes, recorded by `make_config`: resuming or evaluating the run with an edited file is
    # refused (the path alone let both go on with other puzzles)
    ood_puzzles_sha256: str | None = None


@dataclass
class RunConfig:
    """The settings every run has, whatever its task, in the order ``config.json`` lists them. The task
    configs below redefine ``task`` and ``data`` (a redefined dataclass field keeps its place)."""

    task: str = "lst"
    seed: int = 0
    preset: str = "quick"
    device: str = "cpu"
    model: ModelConfig = field(default_factory=ModelConfig)
    pe: PEConfig = field(default_factory=PEConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: Any = None
    eval_every: int = 5
    ckpt_every: int = 10

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainConfig(RunConfig):
    """Config of a Latin Square Task run."""

    data: DataConfig = field(default_factory=DataConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Inverse of `to_dict`; unknown keys raise InputError."""
        return _from_dict(cls, d, "")


def _from_dict(cls, d: dict[str, Any], where: str):
    if not isinstance(d, dict):
        raise InputError(f"config{where}: expected an object, got {type(d).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(d) - set(known)
    if unknown:
        raise InputError(f"config{where}: unknown key(s) {', '.join(sorted(unknown))}")
    kw = {}
    for name, value in d.items():
        default = getattr(cls(), name)
        kw[name] = _from_dict(type(default), value, f"{where}.{name}") if is_dataclass(default) else value
    return cls(**kw)


# Presets: overrides on top of the dataclass defaults, as dotted keys.
PRESETS: dict[str, dict[str, Any]] = {
    # The study (Ito et al. 2024) and its companion code: 4 layers, 1 head, d 160, MLP 640, post-LN,
    # AdamW 1e-4 without weight decay, batch 128, 4000 epochs, a PE table at every layer's input.
    "paper": {
        "model.d_model": 160,
        "optim.lr": 1e-4,
        "optim.epochs": 4000,
        "pe.every_layer": True,
        "eval_every": 50,
        "ckpt_every": 250,
    },
    # CPU-friendly: same depth, heads and PE placement, narrower, 10x the learning rate, 40 epochs
    # (~2 min on 2 cores). Measured numbers (seed 0, by machine) are in README's demo section and reports/lst:
    # at sigma 2.0 with one table at the input only the models still generalise; the per-layer tables carry the
    # effect (reports/seed-blocked: +7.5 points for sigma 0.1 over 2.0 input-only, +67.5 at every layer).
    "quick": {
        "model.d_model": 64,
        "optim.lr": 1e-3,
        "optim.epochs": 40,
        "pe.every_layer": True,
        "eval_every": 5,
        "ckpt_every": 10,
    },
}


def set_dotted(cfg: TrainConfig, key: str, value: Any) -> None:
    """Set ``cfg.<a>.<b> = value`` from the dotted key "a.b"."""
    obj = cfg
    *parents, last = key.split(".")
    for p in parents:
        if not is_dataclass(obj) or p not in {f.name for f in fields(obj)}:
            raise InputError(f"unknown config key {key!r}: {p!r} is not a section of the config")
        obj = getattr(obj, p)
    if not is_dataclass(obj) or last not in {f.name for f in fields(obj)}:
        raise InputError(f"unknown config key {key!r}")
    if is_dataclass(getattr(obj, last)):
        names = ", ".join(f"{key}.{f.name}" for f in fields(getattr(obj, last)))
        raise InputError(f"config key {key!r} is a section, not a setting; set one of its keys ({names})")
    setattr(obj, last, value)


def reset_ignored_init(pe: PEConfig) -> None:
    """Put the init settings this PE ignores back to their defaults (``init`` for PEs without a trainable table,
    ``init_std`` also for zero-initialised tables), so that the same model always has the same config, whatever
    was asked (a plain ``--pe sin2d`` resumes a run asked with ``--pe-init-std 0.5``, and a comparison by
    pe.init_std does not split identical models)."""
    if pe.kind not in TABLE_INIT_KINDS:
        pe.init = PEConfig.init
    if not init_matters(pe.kind, pe.init):
        pe.init_std = PEConfig.init_std


def make_config(preset: str = "quick", overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, then the preset, then explicit overrides (dotted keys; None values are skipped)."""
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    cfg = TrainConfig(preset=preset)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in {**PRESETS[preset], **given}.items():
        set_dotted(cfg, key, value)
    validate(cfg)
    reset_ignored_init(cfg.pe)
    reset_ignored_momentum(cfg.optim)
    cfg.data.ood_puzzles_sha256 = puzzle_file_sha256(cfg.data.ood_puzzles)
    return cfg


def reset_ignored_momentum(o: OptimConfig) -> None:
    """Put momentum back to its default for optimisers without one (AdamW): the same model then has the same
    config whatever was asked through the API or ``--set`` (``pe-probe train`` refuses ``--momentum`` there)."""
    if o.name != "sgd":
        o.momentum = OptimConfig.momentum


def check_puzzle_file(path: str | os.PathLike, option: str) -> Path:
    """``path`` as a puzzle file given with ``option``, or a one-line InputError naming what it is instead."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {path} is a folder, not a puzzle file; pass a study-format CSV "
                         f"(puzzles,solutions,condition)")
    if not p.is_file():
        raise InputError(f"{option} file {path} not found; pass a study-format CSV")
    return p


def puzzle_file_sha256(path: str | None) -> str | None:
    """sha256 of the held-out puzzle file (None without one, or where it is no file: the trainers refuse that)."""
    return file_sha256(path)


def file_sha256(path: str | None) -> str | None:
    """sha256 of a file a run reads (None without one, or where it is no file), recorded in its config."""
    if path is None or not Path(path).is_file():
        return None
    from pe_probe.io import sha256_file

    return sha256_file(path)


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise InputError(msg)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# Upper bounds far above every preset (LST paper: d_model 160, 4 layers, 1 head, MLP 640, 4,000 epochs, 3,000
# puzzles a level; netsim paper: 64 nodes, 20,000 windows of 16 samples). A value above one is a typo that makes
# the run impossible (allocating terabytes, or generating data for days): refused in one line before anything is
# built, for the trainers' flags and for --set / config.json keys alike. `pe-probe evaluate` gets them with the config.
MAX_D_MODEL = 8192
MAX_LAYERS = 256
MAX_HEADS = 256
MAX_MLP_WIDTH = 32768
MAX_PARAMS = 1_000_000_000  # ~4 GB of float32 weights, ~16 GB with gradients and AdamW state
MAX_EPOCHS = 1_000_000
MAX_N_PER_LEVEL = 1_000_000  # ~4 s per 100,000 puzzles a level to generate
MAX_OOD_PER_LEVEL = 10_000  # the default --min-jaccard leaves no pool above ~200 a level
MAX_NETSIM = {"n_nodes": 10_000, "n_train": 1_000_000, "n_test": 1_000_000, "window": 10_000, "sample_every": 1_000,
              "burn_in": 1_000_000}
MIN_NODES = 4  # netsim: the fewest nodes a network may have
MAX_NETSIM_VALUES = 2_000_000_000  # (n_train + 2 n_test) x n_nodes x window float32 samples: 8 GB
MAX_WINDOW = 10_000  # brain: TRs per token (a scan has about 1,200)


def _seed(value: Any) -> bool:
    return _int(value) and 0 <= value <= MAX_SEED


def _at_most(value: Any, limit: int, option: str, fix: str = "", unit: str = "") -> None:
    """Refuse a size above ``limit`` in one line naming ``option`` and ``fix``: a typo (10x too many zeros) would
    otherwise fail deep inside torch or numpy with a traceback, or run out of memory or time silently.
    Non-integers are left to the type checks."""
    if _int(value) and value > limit:
        raise InputError(f"{option} is {value:,}{unit}, above the {limit:,} pe-probe trains (far above every preset); "
                         f"{fix or f'use at most {limit:,}'}")


def n_params(m: ModelConfig) -> int:
    """About how many weights a model of these sizes has (attention 4 d^2 and MLP 2 d w a layer): for the bound."""
    width = int(round(m.mlp_ratio * m.d_model))
    return m.n_layers * (4 * m.d_model ** 2 + 2 * m.d_model * width)


def validate(cfg: TrainConfig, coords_dim: int | None = 2) -> TrainConfig:
    """Check every option; raise a one-line InputError naming the option and the allowed values.

    ``coords_dim``: the dimension of the task's positions (the Latin Square grid: 2), which limits the PE kinds;
    None when the config alone does not fix it (then building the model checks the PE against the positions)."""
    m, pe, o, d = cfg.model, cfg.pe, cfg.optim, cfg.data
    _check(cfg.task in TASKS, f"unknown task {cfg.task!r}; choose one of {', '.join(TASKS)}")
    _check(_seed(cfg.seed), f"--seed must be an integer from 0 to {MAX_SEED:,} (2^63 - 1), got {cfg.seed!r}")
    _check(cfg.device in DEVICES, f"--device must be one of {', '.join(DEVICES)}, got {cfg.device!r}")
    # model
    _check(_int(m.n_layers) and m.n_layers >= 1, f"--layers must be an integer >= 1, got {m.n_layers!r}")
    _check(_int(m.n_heads) and m.n_heads >= 1, f"--heads must be an integer >= 1, got {m.n_heads!r}")
    _check(_int(m.d_model) and m.d_model >= 1, f"--d-model must be an integer >= 1, got {m.d_model!r}")
    _at_most(m.n_layers, MAX_LAYERS, "--layers")
    _at_most(m.n_heads, MAX_HEADS, "--heads")
    _at_most(m.d_model, MAX_D_MODEL, "--d-model")
    _check(m.d_model % m.n_heads == 0, f"--d-model ({m.d_model}) must be divisible by --heads ({m.n_heads})")
    _check(_finite(m.mlp_ratio) and m.mlp_ratio > 0, f"--mlp-ratio must be a finite number > 0, got {m.mlp_ratio!r}")
    _at_most(int(round(m.mlp_ratio * m.d_model)), MAX_MLP_WIDTH, f"the MLP width (--mlp-ratio {m.mlp_ratio:g} x "
             f"--d-model {m.d_model})", "lower --mlp-ratio or --d-model")
    _at_most(n_params(m), MAX_PARAMS, f"the model (--d-model {m.d_model}, --layers {m.n_layers}, --mlp-ratio "
             f"{m.mlp_ratio:g})", "lower --d-model or --layers", unit=" weights")
    _check(int(round(m.mlp_ratio * m.d_model)) >= 1,  # the MLP's width, as `trainers.model` rounds it
           f"--mlp-ratio {m.mlp_ratio} x --d-model {m.d_model} rounds to an MLP of width 0; use --mlp-ratio "
           f"above {0.5 / m.d_model:.3g}")
    _check(m.norm in ("post", "pre"), f"--norm must be 'post' or 'pre', got {m.norm!r}")
    _check(_finite(m.dropout) and 0 <= m.dropout < 1, f"--dropout must be in [0, 1), got {m.dropout!r}")
    _check(m.readout in ("last", "cls"), f"--readout must be 'last' or 'cls', got {m.readout!r}")
    # positional encoding
    kinds = pe_kinds_for(coords_dim) if coords_dim is not None else list(PE_KINDS)
    _check(pe.kind in PE_KINDS, f"unknown PE kind {pe.kind!r}; choose one of {', '.join(kinds)}")
    _check(pe.kind in kinds, f"--pe {pe.kind} needs {PE_KINDS[pe.kind].coords_dim}D positions and this task's are "
                             f"{coords_dim}D; choose one of {', '.join(kinds)}")
    _check(pe.init in INITS, f"--pe-init must be one of {', '.join(INITS)}, got {pe.init!r}")
    _check(  # also for init "zeros", which does not use it: config.json records it
        _finite(pe.init_std) and pe.init_std > 0,
        f"--pe-init-std must be a finite number > 0, got {pe.init_std!r}",
    )
    _check(isinstance(pe.every_layer, bool), f"pe.every_layer must be true or false, got {pe.every_layer!r}")
    _check(isinstance(pe.causal, bool), f"pe.causal must be true or false, got {pe.causal!r}")
    _check(not pe.causal or pe.kind == "relative",
           f"--relative-causal applies to --pe relative only (it masks later tokens there), not to --pe {pe.kind}; drop it")
    # optimiser
    _check(o.name in ("adamw", "sgd"), f"--optimizer must be 'adamw' or 'sgd', got {o.name!r}")
    _check(_finite(o.lr) and o.lr > 0, f"--lr must be a finite number > 0, got {o.lr!r}")
    _check(_finite(o.weight_decay) and o.weight_decay >= 0, f"--weight-decay must be >= 0, got {o.weight_decay!r}")
    _check(_finite(o.momentum) and 0 <= o.momentum < 1, f"--momentum must be in [0, 1), got {o.momentum!r}")
    _check(_int(o.batch_size) and o.batch_size >= 1, f"--batch-size must be an integer >= 1, got {o.batch_size!r}")
    _check(_int(o.epochs) and o.epochs >= 1, f"--epochs must be an integer >= 1, got {o.epochs!r}")
    _at_most(o.epochs, MAX_EPOCHS, "--epochs")
    # data
    _check(_int(d.n_per_level) and d.n_per_level >= 2, f"--n-per-level must be an integer >= 2, got {d.n_per_level!r}")
    _at_most(d.n_per_level, MAX_N_PER_LEVEL, "--n-per-level (data.n_per_level)")
    _check(_finite(d.test_frac) and 0 < d.test_frac < 1, f"data.test_frac must be in (0, 1), got {d.test_frac!r}")
    n_test = round(d.n_per_level * d.test_frac)  # the split's test share of each level's n puzzles
    if not 1 <= n_test < d.n_per_level:
        least = next((n for n in range(2, 10_000) if 1 <= round(n * d.test_frac) < n), "more")
        raise InputError(f"--n-per-level {d.n_per_level} leaves {'no test' if n_test < 1 else 'no training'} puzzles "
                         f"per level (test fraction {d.test_frac}); use --n-per-level >= {least}")
    _check(_int(d.n_ood_per_level) and d.n_ood_per_level >= 1, f"data.n_ood_per_level must be an integer >= 1, got {d.n_ood_per_level!r}")
    if d.ood_puzzles is None:  # else the held-out set is read from that file, not generated
        _at_most(d.n_ood_per_level, MAX_OOD_PER_LEVEL, "data.n_ood_per_level")
    _check(_finite(d.min_jaccard) and 0 <= d.min_jaccard <= 1, f"--min-jaccard must be in [0, 1], got {d.min_jaccard!r}")
    _check(_seed(d.seed), f"data.seed must be an integer from 0 to {MAX_SEED:,} (2^63 - 1), got {d.seed!r}")
    _check(d.ood_puzzles is None or isinstance(d.ood_puzzles, str), "--ood-puzzles must be a file path")
    # schedule
    _check(_int(cfg.eval_every) and cfg.eval_every >= 1, f"--eval-every must be an integer >= 1, got {cfg.eval_every!r}")
    _check(_int(cfg.ckpt_every) and cfg.ckpt_every >= 1, f"--ckpt-every must be an integer >= 1, got {cfg.ckpt_every!r}")
    return cfg


# ----------------------------------------------------------------------------------------------
# Masked-prediction tasks (netsim, brain): their own config tree, so the LST config (and the
# config.json of existing LST runs) is untouched. Same model / PE / optimiser dataclasses.

MASKED_TASKS = ("netsim", "brain")


@dataclass
class NetsimDataConfig:
    """`trainers.tasks.netsim`: layout, wiring, dynamics, data sizes, masking. One seed fixes it all."""

    n_nodes: int = 64
    dim: int = 2  # 2 or 3 (grid / random layouts)
    layout: str = "grid"  # "grid" | "random" | "file"
    coords_file: str | None = None  # N x k coordinates for layout "file"
    # sha256 of that file's bytes, recorded by `make_masked_config`: resuming or evaluating the run with an edited file
    # is refused (the path alone let both go on with another network)
    coords_file_sha256: str | None = None
    length_scale: float = 1.5  # kernel exp(-d / length_scale) for edge probability and weight
    p_connect: float = 0.8  # edge probability at distance 0
    spectral_radius: float = 0.9
    tau: float = 1.0
    dt: float = 0.05  # Euler-Maruyama step
    sample_every: int = 4  # integration steps per sample
    burn_in: int = 200  # steps discarded at the start of each trajectory
    window: int = 16  # samples per token
    noise: float = 0.5  # training noise level
    ood_noise: float = 1.0  # held-out noise level (never seen in training)
    n_train: int = 4000
    n_test: int = 500
    mask_train: float = 0.5
    mask_test: float = 0.5
    mask_ood: float = 0.9
    seed: int = 0


@dataclass
class BrainDataConfig:
    """`trainers.tasks.brain`: windows, leave-subjects-out split, masking."""

    window: int = 20  # TRs per token (0.72 s each)
    stride: int = 10  # training windows; held-out windows do not overlap
    test_subjects: str = ""  # comma-separated ids; "" = the last n_test_subjects in sorted order
    n_test_subjects: int = 2  # with test_subjects: their number
    mask_train: float = 0.5
    mask_test: float = 0.5
    mask_ood: float = 0.9  # the study's test: 90% of regions masked on held-out subjects
    seed: int = 0


MASKED_DATA = {"netsim": NetsimDataConfig, "brain": BrainDataConfig}


@dataclass
class MaskedTrainConfig(RunConfig):
    """Config of a masked-prediction run; ``data`` is the task's data config."""

    task: str = "netsim"
    data: Any = field(default_factory=NetsimDataConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MaskedTrainConfig":
        if not isinstance(d, dict) or d.get("task") not in MASKED_TASKS:
            raise InputError(f"config: task must be one of {', '.join(MASKED_TASKS)}")
        d = dict(d)
        data = _from_dict(MASKED_DATA[d["task"]], d.pop("data", {}), ".data")
        cfg = _from_dict(cls, d, "")
        cfg.data = data
        return cfg


_MASKED_COMMON = {
    # CPU-tiny: 2 layers, 1 head, d 32, a PE table at every layer's input (as the LST presets).
    "quick": {"model.d_model": 32, "model.n_layers": 2, "model.mlp_ratio": 2.0, "pe.every_layer": True,
              "optim.lr": 2e-3, "optim.batch_size": 64},
    # The study's model size (4 layers, 1 head, d 160, MLP 640, lr 1e-4); epochs are our choice.
    "paper": {"model.d_model": 160, "model.n_layers": 4, "model.mlp_ratio": 4.0, "pe.every_layer": True,
              "optim.lr": 1e-4, "optim.batch_size": 128},
}
MASKED_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "netsim": {
        "quick": {**_MASKED_COMMON["quick"], "optim.epochs": 10, "data.n_train": 2000, "data.n_test": 400,
                  "eval_every": 5, "ckpt_every": 5},
        # Between the two, sized for a CPU: quick's shape at d 64, 4x the windows, 3x the epochs (about 1.5 min
        # on one core). The quick models are undertrained (a linear predictor beats them; reports/netsim).
        "standard": {**_MASKED_COMMON["quick"], "model.d_model": 64, "optim.epochs": 30, "data.n_train": 8000,
                     "data.n_test": 400, "eval_every": 10, "ckpt_every": 10},
        "paper": {**_MASKED_COMMON["paper"], "optim.epochs": 300, "data.n_train": 20000, "data.n_test": 2000,
                  "eval_every": 10, "ckpt_every": 50},
    },
    "brain": {
        # d_model 36: divisible by 6, as the 3D sinusoid (sin3d) needs
        "quick": {**_MASKED_COMMON["quick"], "model.d_model": 36, "optim.epochs": 40, "eval_every": 10, "ckpt_every": 20},
        # quick at d 72 (a multiple of 6, as sin3d needs) for 100 epochs: about a minute a run on one core
        "standard": {**_MASKED_COMMON["quick"], "model.d_model": 72, "optim.epochs": 100, "eval_every": 25,
                     "ckpt_every": 50},
        "paper": {**_MASKED_COMMON["paper"], "optim.epochs": 2000, "eval_every": 50, "ckpt_every": 250},
    },
}


def make_masked_config(task: str, preset: str = "quick", overrides: dict[str, Any] | None = None) -> MaskedTrainConfig:
    """Defaults, then the task's preset, then explicit overrides (dotted keys; None values skipped)."""
    if task not in MASKED_TASKS:
        raise InputError(f"unknown masked task {task!r}; choose one of {', '.join(MASKED_TASKS)}")
    if preset not in MASKED_PRESETS[task]:
        raise InputError(f"unknown preset {preset!r}; choose one of {', '.join(MASKED_PRESETS[task])}")
    cfg = MaskedTrainConfig(task=task, preset=preset, data=MASKED_DATA[task]())
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in {**MASKED_PRESETS[task][preset], **given}.items():
        set_dotted(cfg, key, value)
    if task == "brain" and given.get("data.test_subjects") and "data.n_test_subjects" in given:
        raise InputError("give either --test-subjects IDS (those subjects held out) or --n-test-subjects N (the last N "
                         "in sorted order), not both")
    validate_masked(cfg)
    reset_ignored_init(cfg.pe)
    reset_ignored_momentum(cfg.optim)
    if task == "netsim":  # the config records the coordinate file's content, not just its path
        cfg.data.coords_file_sha256 = file_sha256(cfg.data.coords_file)
    if task == "brain" and cfg.data.test_subjects.strip():  # the config records how many the ids hold out
        cfg.data.n_test_subjects = len(subject_id_list(cfg.data.test_subjects))
    return cfg


def subject_id_list(text: str) -> list[str]:
    """The subject ids of a comma-separated ``--test-subjects`` value, blanks dropped."""
    return [t.strip() for t in text.split(",") if t.strip()]


def _ratio(x: Any) -> bool:
    return _finite(x) and 0 < x < 1


def validate_masked(cfg: MaskedTrainConfig) -> MaskedTrainConfig:
    """Check a masked-task config; shared model / PE / optimiser checks come from `validate`."""
    _check(cfg.task in MASKED_TASKS, f"unknown task {cfg.task!r}; choose one of {', '.join(MASKED_TASKS)}")
    _check(isinstance(cfg.data, MASKED_DATA[cfg.task]), f"data config of task {cfg.task!r} has the wrong type")
    # reuse the LST validator for everything but task and data
    shadow = TrainConfig(task="lst", seed=cfg.seed, preset=cfg.preset, device=cfg.device, model=cfg.model,
                         pe=cfg.pe, optim=cfg.optim, eval_every=cfg.eval_every, ckpt_every=cfg.ckpt_every)
    d = cfg.data
    # brain: 3D MNI positions; netsim: its --dim, unless a coordinate file (read later) or a bad --dim decides
    dim = 3 if cfg.task != "netsim" else d.dim if d.layout != "file" and d.dim in (2, 3) else None
    validate(shadow, coords_dim=dim)
    for name in ("mask_train", "mask_test", "mask_ood"):
        _check(_ratio(getattr(d, name)), f"data.{name} must be in (0, 1), got {getattr(d, name)!r}")
    _check(_seed(d.seed), f"data.seed must be an integer from 0 to {MAX_SEED:,} (2^63 - 1), got {d.seed!r}")
    if cfg.task == "netsim":
        _check(_int(d.n_nodes) and d.n_nodes >= MIN_NODES, f"--n-nodes must be an integer >= {MIN_NODES}, got {d.n_nodes!r}")
        _check(d.dim in (2, 3), f"--dim must be 2 or 3, got {d.dim!r}")
        _check(d.layout in ("grid", "random", "file"), f"--layout must be grid, random or file, got {d.layout!r}")
        _check(d.layout != "file" or isinstance(d.coords_file, str), "--layout file needs --coords-file FILE")
        _check(d.layout == "file" or d.coords_file is None,
               f"--coords-file applies only with --layout file (this run's layout is {d.layout}); add --layout file or drop it")
        _check(d.coords_file_sha256 is None or isinstance(d.coords_file_sha256, str),
               "data.coords_file_sha256 must be the coordinate file's sha256 (text) or null")
        for name in ("length_scale", "p_connect", "spectral_radius", "tau", "dt", "noise", "ood_noise"):
            _check(_finite(getattr(d, name)) and getattr(d, name) > 0, f"data.{name} must be a finite number > 0")
        _check(d.p_connect <= 1, f"data.p_connect must be <= 1, got {d.p_connect!r}")
        _check(d.dt <= 0.2 * d.tau, f"data.dt must be <= 0.2 * tau for a stable Euler-Maruyama scheme, got {d.dt!r}")
        for name in ("sample_every", "window", "n_train", "n_test"):
            _check(_int(getattr(d, name)) and getattr(d, name) >= 1, f"data.{name} must be an integer >= 1")
        _check(_int(d.burn_in) and d.burn_in >= 0, f"data.burn_in must be an integer >= 0, got {d.burn_in!r}")
        for name, limit in MAX_NETSIM.items():
            _at_most(getattr(d, name), limit, f"--{name.replace('_', '-')} (data.{name})"
                     if name in ("n_nodes", "n_train", "window") else f"data.{name}")
        _at_most((d.n_train + 2 * d.n_test) * d.n_nodes * d.window, MAX_NETSIM_VALUES,
                 f"the simulated data ((--n-train {d.n_train:,} + 2 x data.n_test {d.n_test:,}) windows x --n-nodes "
                 f"{d.n_nodes:,} x --window {d.window:,})", "lower --n-train, --n-nodes or --window", unit=" values")
    else:
        _check(_int(d.window) and d.window >= 2, f"--window must be an integer >= 2, got {d.window!r}")
        _at_most(d.window, MAX_WINDOW, "--window (data.window)")
        _check(_int(d.stride) and d.stride >= 1, f"--stride must be an integer >= 1, got {d.stride!r}")
        _check(isinstance(d.test_subjects, str), "--test-subjects must be comma-separated subject ids")
        ids = subject_id_list(d.test_subjects)
        _check(len(set(ids)) == len(ids), f"--test-subjects lists a subject twice ({d.test_subjects!r}); give each once")
        _check(_int(d.n_test_subjects) and d.n_test_subjects >= 1, f"--n-test-subjects must be an integer >= 1, got {d.n_test_subjects!r}")
    return cfg
