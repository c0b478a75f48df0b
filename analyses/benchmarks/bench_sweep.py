"""Benchmark: one batched group of the paper sweep trained end to end, and the full sweep projected from it.

`bench_train` times the training step alone, on random data at full batches. This script runs the real
trainer, `trainers.ensemble.train_ensemble` (what ``python -m analyses.lst.sweep --backend ensemble`` and
``pe-probe train lst --ensemble-...`` call), on the study's sigma grid at the paper preset: 20 sigmas x 15
seeds of the learned PE, the 300 runs of the paper sweep, one batched group on a GPU. It trains a few
epochs, evaluating after every one and writing one round of checkpoints at the end, and times each part:

* setup: building the models, stacking them on the device, encoding the puzzles (up to the first step);
* the first epoch's training: includes torch.compile's compilations (the full batch and the epoch's last,
  smaller batch) with --compile;
* each later epoch's training steps (the epoch's wall time minus its evaluation);
* one evaluation of every member on the train / test / OOD splits;
* one checkpoint round (every member's ``checkpoints/step-N.pt`` and ``last.pt``).

The device's queue is drained before each evaluation is timed, so the steps queued before it count as
training. From the medians of the later epochs it projects the full sweep at the paper's schedule (4,000
epochs, evaluation every 50, checkpoints every 250): `bench_train`'s projection covers training only.

Usage:
  python analyses/benchmarks/bench_sweep.py --device cuda --bf16 --compile   # one GPU: the 300-run group
  python analyses/benchmarks/bench_sweep.py --d-model 16 --sigmas 0.1,2 --seeds 2 --epochs 3 --no-write
Writes reports/benchmarks/sweep.{md,csv} (sweep_cuda.* on a GPU) unless --no-write.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

import torch  # noqa: E402
from pe_probe.errors import InputError  # noqa: E402
from bench_io import command_line, device_suffix, load, machine, sync, write_results  # noqa: E402

EPOCH_LINE = re.compile(r"epoch (\d+)/\d+ step")  # the trainer's line after each evaluation


def paper_schedule() -> tuple[int, int, int]:
    """(epochs, evaluate every, checkpoint every) of the paper preset."""
    from trainers.config import PRESETS

    p = PRESETS["paper"]
    return p["optim.epochs"], p["eval_every"], p["ckpt_every"]


def sweep_configs(sigmas: list[float], seeds: int, d_model: int | None, epochs: int, device: str) -> list:
    """The paper preset's learned-PE runs of the sigma grid, evaluating every epoch, one checkpoint at the end."""
    from trainers.config import make_config

    base = {"device": device, "model.d_model": d_model, "optim.epochs": epochs, "eval_every": 1, "ckpt_every": epochs,
            "pe.kind": "learned", "pe.init": "normal"}
    return [make_config("paper", {**base, "pe.init_std": s, "seed": seed}) for s in sigmas for seed in range(seeds)]


class Timeline:
    """Wall-clock marks of one `train_ensemble` call, taken through the trainer's own hooks: its group step
    (first call: the end of setup), its evaluation (timed with the device drained) and its log lines."""

    def __init__(self, device: torch.device):
        self.device = device
        self.first_step: float | None = None
        self.epoch_ends: list[float] = []  # after each epoch's evaluation (its log line)
        self.evals: list[float] = []  # seconds of evaluation per epoch
        self._pending_eval = 0.0
        self.puzzles = 0  # training puzzles seen (per member)

    def wrap_step(self, step):
        def timed_step(step_loss, stack, opt, xb, yb, *rest):
            if self.first_step is None:
                sync(self.device)
                self.first_step = time.perf_counter()
            self.puzzles += xb.shape[1]
            return step(step_loss, stack, opt, xb, yb, *rest)
        return timed_step

    def wrap_eval(self, evaluate):
        def timed_eval(*args, **kwargs):
            sync(self.device)  # the steps queued so far are training time
            t = time.perf_counter()
            out = evaluate(*args, **kwargs)
            sync(self.device)
            self._pending_eval += time.perf_counter() - t
            return out
        return timed_eval

    def log(self, msg: str) -> None:
        if EPOCH_LINE.search(msg):
            self.epoch_ends.append(time.perf_counter())
            self.evals.append(self._pending_eval)
            self._pending_eval = 0.0
            start = self.epoch_ends[-2] if len(self.epoch_ends) > 1 else self.first_step
            # as it goes: a run stopped by a time limit still leaves its epoch times in the log
            msg += f"  [training {self.epoch_ends[-1] - start - self.evals[-1]:.3f} s, evaluation {self.evals[-1]:.3f} s]"
        print(msg, flush=True)


def run_group(cfgs: list, runs: Path, *, compile: bool, bf16: bool, cuda_graphs: bool, tf32: bool) -> dict:
    """Train ``cfgs`` as one batched group under a `Timeline`; the measured parts in seconds."""
    import trainers.ensemble as ens

    device = torch.device(cfgs[0].device)
    tl = Timeline(device)
    outs = [runs / ens.member_name(c) for c in cfgs]
    originals = ens.group_step, ens.ensemble_split_metrics
    ens.group_step, ens.ensemble_split_metrics = tl.wrap_step(ens.group_step), tl.wrap_eval(ens.ensemble_split_metrics)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        start = time.perf_counter()
        ens.train_ensemble(cfgs, outs, log=tl.log, workers=1, compile=compile, amp=bf16, cuda_graphs=cuda_graphs, tf32=tf32)
        end = time.perf_counter()
    finally:
        ens.group_step, ens.ensemble_split_metrics = originals
    epochs = len(tl.epoch_ends)
    if tl.first_step is None or epochs != cfgs[0].optim.epochs:
        raise RuntimeError(f"the trainer logged {epochs} of {cfgs[0].optim.epochs} epochs: was a run folder reused?")
    bounds = [tl.first_step, *tl.epoch_ends]
    train_s = [bounds[i + 1] - bounds[i] - tl.evals[i] for i in range(epochs)]
    ckpt_bytes = sum(p.stat().st_size for out in outs for p in out.rglob("*.pt"))
    return {"setup_s": tl.first_step - start, "train_s": train_s, "eval_s": tl.evals, "ckpt_s": end - tl.epoch_ends[-1],
            "ckpt_bytes": ckpt_bytes, "puzzles_per_epoch": tl.puzzles // epochs,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")}


def project(m: dict, k: int) -> dict:
    """The full paper sweep of K runs from one group's measured parts (steady state: epochs after the first)."""
    epochs, eval_every, ckpt_every = paper_schedule()
    epoch_s = statistics.median(m["train_s"][1:])
    eval_s = statistics.median(m["eval_s"][1:])
    first_extra = m["train_s"][0] - epoch_s  # compilation and other first-epoch costs
    parts = {"setup": m["setup_s"], "first-epoch extra (compile)": first_extra, "training": epochs * epoch_s,
             "evaluation": epochs // eval_every * eval_s, "checkpoints": epochs // ckpt_every * m["ckpt_s"]}
    return {"epoch_s": epoch_s, "eval_s": eval_s, "first_extra_s": first_extra, "parts_h": {p: s / 3600 for p, s in parts.items()},
            "total_h": sum(parts.values()) / 3600, "puzzles_per_s": k * m["puzzles_per_epoch"] / epoch_s,
            "schedule": (epochs, eval_every, ckpt_every)}


def report(m: dict, proj: dict, cfgs: list, args: argparse.Namespace, argv, loads: tuple[float, float]) -> tuple[str, list[dict]]:
    """The markdown report and its CSV rows (one per epoch, each with the setup, checkpoint-round and memory figures)."""
    device = torch.device(cfgs[0].device)
    k, speed = len(cfgs), [f for f in ("compile", "bf16", "cuda_graphs", "tf32") if getattr(args, f)]
    epochs, eval_every, ckpt_every = proj["schedule"]
    # the run's one-off parts repeat on every row, so the CSV alone holds every number the report quotes
    once = {"setup_s": round(m["setup_s"], 3), "ckpt_round_s": round(m["ckpt_s"], 3), "ckpt_round_bytes": m["ckpt_bytes"],
            "peak_gib": round(m["peak_gib"], 2)}
    rows = [{"epoch": i + 1, "train_s": round(t, 3), "eval_s": round(v, 3), **once}
            for i, (t, v) in enumerate(zip(m["train_s"], m["eval_s"]))]
    lines = [
        "# The paper sweep end to end: one batched group through the real trainer", "",
        f"Written by `{command_line('bench_sweep.py', argv).strip()}` (per-epoch numbers: `sweep{device_suffix(device)}.csv`).",
        "", f"Device: {device.type}; machine: {machine(device)}. Load average (1 min): {loads[0]:.2f} before, "
        f"{loads[1]:.2f} after.", "",
        f"Group: {k} runs (learned PE, sigmas {', '.join(f'{s:g}' for s in args.sigmas)} x {args.seeds} seeds), "
        f"d_model {cfgs[0].model.d_model}, the paper preset otherwise; speed options: {', '.join(speed) or 'none'}; "
        f"{len(rows)} epochs of {m['puzzles_per_epoch']} puzzles per run"
        + (f"; peak GPU memory {m['peak_gib']:.1f} GiB." if device.type == "cuda" else "."), "",
        "| part | measured (s) |", "| --- | ---: |",
        f"| setup (models, data, up to the first step) | {m['setup_s']:.2f} |",
        f"| first epoch's training (with compilation) | {m['train_s'][0]:.2f} |",
        f"| later epochs' training, median of {len(rows) - 1} | {proj['epoch_s']:.3f} |",
        f"| one evaluation of all runs (train, test, OOD), median of {len(rows) - 1} | {proj['eval_s']:.3f} |",
        f"| one checkpoint round ({m['ckpt_bytes'] / 2**30:.2f} GiB) | {m['ckpt_s']:.2f} |", "",
        f"Training rate in the later epochs: {proj['puzzles_per_s']:,.0f} puzzles/s over the group "
        f"({k} x {m['puzzles_per_epoch']} puzzles per epoch).", "",
        f"## The full sweep projected ({k} runs x {epochs} epochs, evaluation every {eval_every}, checkpoints every "
        f"{ckpt_every})", "", "| part | hours |", "| --- | ---: |",
        *[f"| {p} | {h:.3f} |" for p, h in proj["parts_h"].items()],
        f"| **total** | **{proj['total_h']:.2f}** |", "",
        f"Issue 7's GPU target is the full sweep of 300 runs under 2 hours on one H200"
        + (f": {'met' if proj['total_h'] < 2 and k >= 300 else 'NOT met'} at {k} runs." if device.type == "cuda" else
           " (this run is on the CPU)."), "",
        "Per epoch (training seconds exclude the evaluation after the epoch):", "",
        "| epoch | training (s) | evaluation (s) |", "| ---: | ---: | ---: |",
        *[f"| {r['epoch']} | {r['train_s']:.3f} | {r['eval_s']:.3f} |" for r in rows], ""]
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> int:
    from analyses.lst.grid import SIGMAS_FULL

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sigmas", default="full", help="'full' (the paper's 0.1..2.0 step 0.1) or a comma list")
    p.add_argument("--seeds", type=int, default=15, help="seeds per sigma (default 15, the paper's)")
    p.add_argument("--d-model", type=int, default=None, help="width (default: the paper preset's, 160)")
    p.add_argument("--epochs", type=int, default=6, help="epochs to train (>= 3: the first compiles; default 6)")
    for flag, what in (("--compile", "torch.compile the step"), ("--bf16", "bf16 autocast"),
                       ("--cuda-graphs", "GPU only: CUDA graphs"), ("--tf32", "GPU only: TF32 products")):
        p.add_argument(flag, action="store_true", help=what)
    p.add_argument("--runs", default=None, help="keep the run folders here (default: a temporary folder, removed)")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.epochs < 3:
        p.error("--epochs must be >= 3 (the first epoch compiles; the medians need two more)")
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    try:
        args.sigmas = list(SIGMAS_FULL) if args.sigmas == "full" else [float(s) for s in args.sigmas.split(",")]
    except ValueError:
        p.error(f"--sigmas: 'full' or a comma list of numbers, got {args.sigmas!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    cfgs = sweep_configs(args.sigmas, args.seeds, args.d_model, args.epochs, args.device)
    runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    if args.runs and runs.exists() and any(runs.iterdir()):
        p.error(f"--runs {runs} is not empty; give a new folder (a resumed run would not be timed)")
    loads = [load()]
    try:
        m = run_group(cfgs, runs, compile=args.compile, bf16=args.bf16, cuda_graphs=args.cuda_graphs, tf32=args.tf32)
    except InputError as e:  # e.g. --cuda-graphs off a GPU: the trainer's one-line reason
        p.error(str(e))
    finally:
        if not args.runs:
            shutil.rmtree(runs, ignore_errors=True)
    loads.append(load())
    proj = project(m, len(cfgs))
    text, rows = report(m, proj, cfgs, args, argv, tuple(loads))
    print(text)
    if not args.no_write:
        write_results(args.out, f"sweep{device_suffix(torch.device(args.device))}", rows, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
