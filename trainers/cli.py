"""Command lines for ``pe-probe train``, ``pe-probe evaluate`` and ``pe-probe demo``.

A thin layer over `trainers.train.train`, `trainers.evaluate.evaluate_checkpoint` and
`trainers.demo.run_demo`. Bad input raises `InputError` (the dispatcher in ``pe_probe.cli`` prints it
on one line and exits 2); argparse's own usage errors are turned into InputError too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pe_probe.errors import InputError


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors raise a one-line InputError instead of exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise InputError(f"{self.prog}: {message} (see {self.prog} --help)")


def _bool_flag(p, name: str, help: str) -> None:
    p.add_argument(name, action=argparse.BooleanOptionalAction, default=None, help=help)


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
"""


def train_parser() -> argparse.ArgumentParser:
    from trainers.config import PRESETS, TASKS
    from trainers.pe import INITS, PE_KINDS

    p = _Parser(prog="pe-probe train", description="Train a small transformer on a task and save pe-probe checkpoints.",
                epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", metavar="TASK", help=f"task to train on: {', '.join(TASKS)} (Latin Square Task)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run folder (config.json, metrics.jsonl, checkpoints/, last.pt)")
    p.add_argument("--preset", default="quick", choices=sorted(PRESETS), help="base settings (default: quick)")
    p.add_argument("--seed", type=int, default=None, help="training seed: init, shuffling, dropout (default: 0)")
    p.add_argument("--device", default=None, choices=["cpu", "cuda", "auto"], help="where to train (default: cpu)")
    p.add_argument("--force", action="store_true", help="delete a previous run in RUN_DIR and start from scratch")

    g = p.add_argument_group("positional encoding")
    g.add_argument("--pe", default=None, metavar="KIND", help=f"one of {', '.join(PE_KINDS)} (default: learned)")
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
    g.add_argument("--momentum", type=float, default=None, help="SGD momentum (default: 0.9)")
    g.add_argument("--batch-size", type=int, default=None, help="batch size (default: 128)")
    g.add_argument("--epochs", type=int, default=None, help="epochs (quick 40, paper 4000)")
    g.add_argument("--eval-every", type=int, default=None, help="evaluate every N epochs and at the end (quick 5, paper 50)")
    g.add_argument("--ckpt-every", type=int, default=None, help="checkpoint every N epochs and at the end (quick 10, paper 250)")

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
    return make_config(args.preset, overrides)


def train_main(argv: list[str]) -> int:
    """``pe-probe train``: parse, build the config, train (or resume); print the final metrics."""
    from trainers.train import train

    args = train_parser().parse_args(argv)
    cfg = config_from_args(args)
    if cfg.data.ood_puzzles is not None and not Path(cfg.data.ood_puzzles).is_file():
        raise InputError(f"--ood-puzzles file {args.ood_puzzles} not found; pass a study-format CSV")
    metrics = train(cfg, args.out, force=args.force)
    print(f"{args.out}: train_acc {metrics.get('train_acc', float('nan')):.3f}  test_acc {metrics.get('test_acc', float('nan')):.3f}"
          f"  ood_acc {metrics.get('ood_acc', float('nan')):.3f}  (checkpoint: {Path(args.out) / 'last.pt'})")
    return 0


# ----------------------------------------------------------------------------------------------
# evaluate

EVAL_EPILOG = """\
examples:
  pe-probe evaluate runs/lst-s0.1/last.pt                       # the run's own held-out (OOD) set
  pe-probe evaluate runs/lst-s0.1/last.pt --puzzles my.csv --json

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
    if args.puzzles is not None and not Path(args.puzzles).is_file():
        raise InputError(f"--puzzles file {args.puzzles} not found; pass a study-format CSV")
    m = evaluate_checkpoint(args.ckpt, args.puzzles, device=args.device)
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    print(f"{'level':<12}{'accuracy':>10}")
    for name in LEVELS:
        key = f"acc_{name.lower()}"
        if key in m:
            print(f"{name:<12}{m[key]:>10.3f}")
    print(f"{'all':<12}{m['acc']:>10.3f}   ({int(m['n'])} puzzles, loss {m['loss']:.4f})")
    return 0


# ----------------------------------------------------------------------------------------------
# demo

DEMO_EPILOG = """\
examples:
  pe-probe demo                      # writes ./pe-probe-demo
  pe-probe demo --out out/demo       # re-running skips finished runs and analyses

Trains two learned-PE models on the Latin Square Task with the quick preset, one initialised with
sigma 0.1 and one with sigma 2.0, then asks whether each PE table recovered the 4x4 grid.
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
    p.add_argument("--force", action="store_true", help="redo everything from scratch")
    args = p.parse_args(argv)
    summary = run_demo(args.out, epochs=args.epochs, n_per_level=args.n_per_level, device=args.device, force=args.force)
    print(summary.read_text())
    return 0
