"""Sweep definitions: which runs make up the quick (CPU) and paper (GPU) grids.

A `RunSpec` is one training run: a unique folder name, the trainer preset, dotted config overrides
(``trainers.config.make_config``) and descriptive tags (group, PE label, sigma, placement, control).
`build_grid` returns the specs in priority order: the ones the study's main claim needs come first,
so a sweep stopped early still has the core sigma grid.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pe_probe.errors import InputError

# The study's sigma grid as used by us: 10 values (``default``) or 0.1..2.0 step 0.1 (``full``).
SIGMAS_DEFAULT = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0)
SIGMAS_FULL = tuple(round(0.1 * i, 1) for i in range(1, 21))
# PE types compared with the learned one (learned-uniform = learned table, uniform init, std 0.1)
PE_TYPES = ("none", "sin1d", "sin2d", "random", "relative", "rope1d", "rope2d", "learned-uniform")
CONTROL_SIGMAS = (0.1, 2.0)  # placements and optimiser controls run at a small and a large sigma
WEIGHT_DECAY = 0.1
SGD_LR = 0.01  # momentum 0.9; an 8-epoch pilot on the quick preset: 0.01 learns, 0.1 stays at chance
SGD_LR_ORIGIN = "lr chosen by an 8-epoch pilot on the quick preset"
REFERENCE_PE = "sin2d"  # attention maps are compared with the sin2d run of the same seed

# Per preset: seeds of the sigma grid, seeds of PE types and controls, checkpoints per run.
PRESET_SETTINGS: dict[str, dict[str, Any]] = {
    "quick": {"seeds": 2, "type_seeds": 1, "control_seeds": 1, "n_ckpts": 8},
    "paper": {"seeds": 15, "type_seeds": 15, "control_seeds": 15, "n_ckpts": 8},
}
PRESET_EPOCHS = {"quick": 40, "paper": 4000}
PRESET_EVAL_EVERY = {"quick": 5, "paper": 50}


# dotted config key -> pe-probe train option (booleans become --flag / --no-flag); every key `pe-probe train lst`
# has an option for (tests/analyses/test_lst_sweep.py derives this map from trainers.cli and compares)
CLI_FLAGS = {
    "seed": "--seed", "device": "--device",
    "pe.kind": "--pe", "pe.init": "--pe-init", "pe.init_std": "--pe-init-std", "pe.every_layer": "--pe-every-layer",
    "pe.causal": "--relative-causal",
    "model.d_model": "--d-model", "model.n_layers": "--layers", "model.n_heads": "--heads",
    "model.mlp_ratio": "--mlp-ratio", "model.norm": "--norm", "model.dropout": "--dropout", "model.readout": "--readout",
    "optim.name": "--optimizer", "optim.lr": "--lr", "optim.weight_decay": "--weight-decay",
    "optim.momentum": "--momentum", "optim.batch_size": "--batch-size", "optim.epochs": "--epochs",
    "eval_every": "--eval-every", "ckpt_every": "--ckpt-every", "data.n_per_level": "--n-per-level",
    "data.ood_puzzles": "--ood-puzzles", "data.min_jaccard": "--min-jaccard",
}


class NoTrainOption(ValueError):
    """An override the local backend cannot pass to ``pe-probe train lst``: no option of it sets that key."""


def _show(value: Any) -> str:
    """A value as --set takes it: strings as they are, the rest as JSON (true, 0.1, null)."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class RunSpec:
    """One training run of the sweep."""

    name: str  # folder name under the sweep root, unique in a grid
    preset: str
    overrides: dict[str, Any]
    tags: dict[str, Any] = field(default_factory=dict)  # group, pe, sigma, placement, control, seed

    def train_args(self, out_dir: str) -> list[str]:
        """Arguments of ``pe-probe train`` for this run (after the program name); a key without an option
        raises `NoTrainOption`, and None (the preset's value, as `trainers.config.make_config` skips it) adds none."""
        args = ["train", "lst", "--preset", self.preset, "--out", str(out_dir)]
        for key, value in self.overrides.items():
            if key not in CLI_FLAGS:
                raise NoTrainOption(f"override {key!r} has no pe-probe train option; known: {', '.join(CLI_FLAGS)}")
            flag = CLI_FLAGS[key]
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            elif value is not None:
                args += [flag, str(value)]
        return args

    def check_train_args(self) -> None:
        """Refuse (`NoTrainOption`, or a one-line ValueError) a run the local backend cannot train as planned: a key
        without a ``pe-probe train`` option, or arguments from which ``pe-probe train`` would build another config
        than `config` (it would train, and write to config.json, something else: e.g. a relative
        ``data.ood_puzzles``, which it records resolved). Parses `train_args` as ``pe-probe train`` does."""
        from trainers.cli import config_from_args
        from trainers.train import config_differences

        argv = self.train_args("RUN")[1:]
        try:
            got = config_from_args(_train_parser().parse_args(argv))
        except ValueError as e:  # InputError: argparse's or the config's one-line message
            raise ValueError(f"pe-probe train refuses the arguments of run {self.name} ({' '.join(argv)}): "
                             f"{str(e).splitlines()[0]}") from None
        diff = config_differences(self.config().to_dict(), got.to_dict(), ignore=())
        if diff:
            key, want, made = diff[0]
            raise ValueError(f"--set {key}={_show(want)}: pe-probe train would record {key} as {_show(made)}; "
                             f"give --set {key}={_show(made)}, or use --backend ensemble or ray")

    def config(self):
        """The full TrainConfig this run trains with."""
        from trainers.config import make_config

        return make_config(self.preset, dict(self.overrides))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def _train_parser() -> argparse.ArgumentParser:
    from trainers.cli import train_parser

    return train_parser()


def _sig(s: float) -> str:
    return f"{s:g}"


def learned(sigma: float, seed: int, preset: str, base: dict[str, Any], *, every_layer: bool = True,
            group: str = "sigma", control: str = "none", extra: dict[str, Any] | None = None,
            init: str = "normal", name: str | None = None, pe_label: str = "learned") -> RunSpec:
    place = "every" if every_layer else "input"
    ov = {**base, "pe.kind": "learned", "pe.init": init, "pe.init_std": sigma, "pe.every_layer": every_layer,
          "seed": seed, **(extra or {})}
    name = name or f"learned-{place}-s{_sig(sigma)}-seed{seed}"
    tags = {"group": group, "pe": pe_label, "sigma": sigma, "placement": place, "control": control, "seed": seed}
    return RunSpec(name, preset, ov, tags)


def pe_type(kind: str, seed: int, preset: str, base: dict[str, Any]) -> RunSpec:
    if kind == "learned-uniform":
        return learned(0.1, seed, preset, base, group="pe_type", init="uniform",
                       name=f"learned_uniform-s0.1-seed{seed}", pe_label="learned-uniform")
    ov = {**base, "pe.kind": kind, "pe.every_layer": True, "seed": seed}
    tags = {"group": "pe_type", "pe": kind, "sigma": None, "placement": "every", "control": "none", "seed": seed}
    return RunSpec(f"{kind}-seed{seed}", preset, ov, tags)


def controls(sigma: float, seed: int, preset: str, base: dict[str, Any]) -> list[RunSpec]:
    return [
        learned(sigma, seed, preset, base, every_layer=False, group="placement"),
        learned(sigma, seed, preset, base, group="control", control=f"wd{WEIGHT_DECAY:g}",
                extra={"optim.weight_decay": WEIGHT_DECAY}, name=f"wd{WEIGHT_DECAY:g}-s{_sig(sigma)}-seed{seed}"),
        learned(sigma, seed, preset, base, group="control", control="sgd",
                extra={"optim.name": "sgd", "optim.lr": SGD_LR, "optim.momentum": 0.9},
                name=f"sgd-s{_sig(sigma)}-seed{seed}"),
    ]


GROUPS = ("sigma", "pe_type", "placement", "control")


def build_grid(preset: str = "quick", *, sigmas: str | tuple[float, ...] = "default", seeds: int | None = None,
               sigma_seeds: int | None = None, epochs: int | None = None, base_overrides: dict[str, Any] | None = None,
               include: tuple[str, ...] = GROUPS) -> list[RunSpec]:
    """The sweep's runs in priority order.

    ``sigmas``: "default" (10 values), "full" (0.1..2.0 step 0.1) or a tuple. ``seeds`` overrides the
    preset's number of seeds for every group; ``sigma_seeds`` then for the sigma grid alone (its 2D-sinusoid
    reference runs follow, one per seed). ``epochs`` shortens/lengthens runs (checkpoints are spread
    to keep ~``n_ckpts`` per run). ``base_overrides``: dotted keys applied to every run (tests use a tiny
    model). ``include`` picks the groups. An empty or odd grid is refused (`check_counts`).
    """
    if preset not in PRESET_SETTINGS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_SETTINGS)}")
    unknown = [g for g in include if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    st = PRESET_SETTINGS[preset]
    sig = {"default": SIGMAS_DEFAULT, "full": SIGMAS_FULL}[sigmas] if isinstance(sigmas, str) else tuple(sigmas)
    check_counts(sig, seeds, sigma_seeds, epochs, include)
    n_seeds = sigma_seeds if sigma_seeds is not None else seeds if seeds is not None else st["seeds"]
    n_type = seeds if seeds is not None else st["type_seeds"]
    n_ctrl = seeds if seeds is not None else st["control_seeds"]
    n_epochs = epochs if epochs is not None else PRESET_EPOCHS[preset]
    ckpt_every = max(1, n_epochs // st["n_ckpts"])
    # evaluate at least at every checkpoint (so each checkpoint carries fresh metrics), and as often as the preset
    eval_every = math.gcd(PRESET_EVAL_EVERY[preset], ckpt_every)
    base: dict[str, Any] = {"optim.epochs": n_epochs, "ckpt_every": ckpt_every, "eval_every": eval_every}
    # the builders below set some keys themselves (pe.*, seed, the controls' optimiser), after the base: a base
    # override of one of them would be dropped without a word, so it is refused
    own = grid_keys(_build(preset, base, sig, n_seeds, n_type, n_ctrl, include), base, include)
    check_base_overrides(base_overrides or {}, own, include)
    base.update(base_overrides or {})
    return _build(preset, base, sig, n_seeds, n_type, n_ctrl, include)


def check_counts(sig: tuple[float, ...], seeds: int | None, sigma_seeds: int | None, epochs: int | None,
                 include: tuple[str, ...]) -> None:
    """Refuse (one-line `InputError`, naming the sweep's option) what would plan an empty or odd grid:
    no groups, no or duplicate sigmas, seeds or epochs < 1, ``sigma_seeds`` without the sigma group."""
    names = [_sig(s) for s in sig]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    problems = [
        (not include, f"--groups: give at least one of {', '.join(GROUPS)}"),
        (len(set(include)) < len(include), f"--groups {','.join(include)}: give each group once"),
        (not sig, "--sigmas: give at least one sigma"),
        (twice is not None, f"--sigmas: sigma {twice} is given twice (run names keep 6 significant digits); "
                            "give each sigma once"),
        (seeds is not None and seeds < 1, f"--seeds must be >= 1, got {seeds}; to leave groups out use --groups"),
        (sigma_seeds is not None and sigma_seeds < 1, f"--sigma-seeds must be >= 1, got {sigma_seeds}; to leave the "
                                                      "sigma grid out, leave sigma out of --groups"),
        (sigma_seeds is not None and "sigma" not in include,
         "--sigma-seeds sets the sigma group's seeds, which --groups leaves out: add sigma to --groups, or drop "
         "--sigma-seeds"),
        (epochs is not None and epochs < 1, f"--epochs must be >= 1, got {epochs}"),
    ]
    for bad, msg in problems:
        if bad:
            raise InputError(msg)


def _build(preset: str, base: dict[str, Any], sig: tuple[float, ...], n_seeds: int, n_type: int, n_ctrl: int,
           include: tuple[str, ...]) -> list[RunSpec]:
    specs: list[RunSpec] = []
    # the sin2d reference (planned with the sigma grid or the PE-type group) has a seed for every seed of an
    # included group: every run's attention maps are compared with the reference of its own seed
    wanted = {"sigma": n_seeds, "pe_type": n_type, "control": n_ctrl, "placement": n_ctrl}
    n_ref = max(wanted[g] for g in include) if {"sigma", "pe_type"} & set(include) else 0
    for seed in range(max(n_seeds, n_type, n_ctrl)):
        # priority within a seed: the sigma grid (+ the sin2d reference), then controls, then PE types
        if seed < n_seeds and "sigma" in include:
            specs += [learned(s, seed, preset, base) for s in sig]
        if seed < n_ref:
            specs.append(pe_type(REFERENCE_PE, seed, preset, base))
        if seed < n_ctrl:
            for s in CONTROL_SIGMAS:
                specs += [c for c in controls(s, seed, preset, base) if c.tags["group"] in include]
        if seed < n_type and "pe_type" in include:
            specs += [pe_type(k, seed, preset, base) for k in PE_TYPES if k != REFERENCE_PE]
    # priority: seed 0 of every group first (sigma grid + sin2d, controls, PE types), then the other seeds
    # in the same order, so a sweep stopped early covers every claim with at least one seed
    def tier(s: RunSpec) -> tuple[int, int]:
        g = s.tags["group"]
        if g == "sigma" or s.tags["pe"] == REFERENCE_PE:
            t = 0
        elif g in ("placement", "control"):
            t = 1
        else:
            t = 2
        return (min(s.tags["seed"], 1), t)
    specs.sort(key=lambda s: (tier(s), s.tags["seed"]))  # stable: keeps the order within a tier
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), "duplicate run names in the grid"
    return specs


# How to change what a grid-set key controls, for the error that refuses it as a --set
_GRID_KEY_FIX = {
    "seed": "the runs' seeds are 0..N-1: set N with --seeds (--sigma-seeds for the sigma grid alone)",
    "pe.init_std": "the learned tables' sigmas come from --sigmas",
    "pe.kind": "each group fixes the PE types it compares: choose groups with --groups",
    "pe.init": "each group fixes the PE types it compares: choose groups with --groups",
    "pe.every_layer": "the placement group's tables are input-only, the other groups' in every layer: choose groups "
                      "with --groups",
}


def grid_keys(specs: list[RunSpec], base: dict[str, Any], include: tuple[str, ...] = GROUPS) -> dict[str, list[str]]:
    """The config keys the grid sets per run on top of ``base`` (pe.*, seed, the controls' optimiser
    settings) -> the selected groups (in `GROUPS` order) whose runs set them. The sigma grid's sin2d
    references are tagged pe_type: without that group they count as the sigma group's runs."""
    out: dict[str, set[str]] = {}
    for s in specs:
        group = s.tags["group"] if s.tags["group"] in include else "sigma"
        for key in s.overrides:
            if key not in base:
                out.setdefault(key, set()).add(group)
    return {k: [g for g in GROUPS if g in v] for k, v in out.items()}


def check_base_overrides(overrides: dict[str, Any], own: dict[str, list[str]], include: tuple[str, ...]) -> None:
    """Refuse (one-line `InputError`) an override of a key in ``own`` (`grid_keys`), or of the section
    holding one (``pe``): the grid's own value would replace it, so it would be ignored."""
    clash = [k for k in overrides if k in own or any(o.startswith(k + ".") for o in own)]
    if not clash:
        return
    key = clash[0]
    groups = sorted({g for o, gs in own.items() if o == key or o.startswith(key + ".") for g in gs}, key=GROUPS.index)
    fix = _GRID_KEY_FIX.get(key)
    if fix is None:
        others = [g for g in GROUPS if g in include and g not in groups]
        fix = (f"to change it for the other runs, leave out {'/'.join(groups)} with --groups {','.join(others)}"
               if others else "")
    more = f" (also refused: {', '.join('--set ' + k for k in clash[1:])})" if clash[1:] else ""
    what = repr(key) if key in own else f"{key}.* keys"  # a whole section such as pe
    raise InputError(f"--set {key}: the runs of group(s) {', '.join(groups)} set {what} themselves, so this value "
                     f"would be ignored there; {fix + ', or ' if fix else ''}drop the --set{more}")
