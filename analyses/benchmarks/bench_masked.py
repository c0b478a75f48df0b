"""Benchmark: the masked-prediction trainer (netsim, brain) with its speed options, in one run.

Usage:
  python analyses/benchmarks/bench_masked.py                 # writes reports/benchmarks/masked.{md,csv}
  python analyses/benchmarks/bench_masked.py --presets paper --rounds 2 --no-write
  python analyses/benchmarks/bench_masked.py --device cuda   # on a GPU (adds CUDA-graph rows)

What it times: `trainers.train_masked.masked_step`, the trainer's own step, on the model of each task and
preset (netsim: 64 nodes x 16 samples; brain: 80 regions x 20 TRs), at the preset's batch size, on random
windows with the trainer's random masks. Configurations: float32 eager (the default), ``--bf16`` (where
the device has native bf16), ``--compile``, both, and on a GPU ``--tf32`` and ``--cuda-graphs``. Rounds are interleaved
and each configuration's best round is kept; ``x eager`` divides it by the eager best round of the same
task and preset, ``x eager (paired)`` is the median over rounds of the rate over the eager rate of that
round. ``paper run (h)`` projects one paper-preset run (training steps only) at the measured rate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

import torch  # noqa: E402
from bench_io import command_line, device_suffix, load, machine, timed, write_results  # noqa: E402
from step_experiments import EXPERIMENTS  # noqa: E402

TASK_SHAPES = {"netsim": (64, 2), "brain": (80, 3)}  # tokens, coordinate dimensions (the window is the config's)
N_DATA = 4096  # random windows to draw batches from


def paper_windows(task: str) -> tuple[int, int | None]:
    """(epochs, training windows) of one paper-preset run: netsim's windows from its config, brain's from
    its data (None without it)."""
    from trainers.config import make_masked_config

    cfg = make_masked_config(task, "paper")
    if task == "netsim":
        return cfg.optim.epochs, cfg.data.n_train
    try:
        from trainers.train_masked import load_task_data

        return cfg.optim.epochs, len(load_task_data(cfg)["splits"]["train"][0])
    except Exception:  # the brain data wheels are optional  # noqa: BLE001
        return cfg.optim.epochs, None


def make_step(task: str, preset: str, device: torch.device, *, compile: bool = False, bf16: bool = False,
              cuda_graphs: bool = False, tf32: bool = False, seed: int = 0):
    """(step function of the masked trainer on random data, batch size)."""
    from trainers.config import make_masked_config
    from trainers.train import make_optimizer, speed_setup
    from trainers.train_masked import build_model, masked_step, random_masks

    cfg = make_masked_config(task, preset, {"device": device.type})
    n_tok, dim = TASK_SHAPES[task]
    window, bs = cfg.data.window, cfg.optim.batch_size
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_DATA, n_tok, window, generator=g).to(device)
    masks = random_masks(N_DATA, n_tok, cfg.data.mask_train, g).to(device)
    torch.manual_seed(seed)
    model = build_model(cfg, torch.randn(n_tok, dim, generator=g), window).to(device)
    opt = make_optimizer(model, cfg)
    step_model, mark_step, autocast, precision, _ = speed_setup(model, device, compile=compile, bf16=bf16,
                                                                cuda_graphs=cuda_graphs, tf32=tf32)
    perm = torch.randperm(N_DATA, generator=g).to(device)

    def step(i: int) -> None:
        idx = perm[(i * bs) % (N_DATA - bs):][:bs]
        masked_step(step_model, opt, x[idx], masks[idx], autocast, precision, mark_step)

    return step, bs


def configs(device: torch.device, bf16: bool, compile: bool) -> list[tuple[str, dict]]:
    out = [("eager", {})]
    if device.type == "cuda":  # TensorFloat-32 matrix products: GPU only
        out.append(("tf32", {"tf32": True}))
    if bf16:
        out.append(("bf16", {"bf16": True}))
    if compile:
        out.append(("compile", {"compile": True}))
        if bf16:
            out.append(("bf16-compile", {"bf16": True, "compile": True}))
    if device.type == "cuda" and compile:
        out.append(("cudagraphs", {"cuda_graphs": True}))
        if bf16:
            out.append(("bf16-cudagraphs", {"bf16": True, "cuda_graphs": True}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--tasks", default="netsim,brain", help="comma-separated (default netsim,brain)")
    p.add_argument("--presets", default="quick,paper", help="comma-separated model presets (default quick,paper)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per round (default: 40 quick, 6 paper on the CPU; 50 on a GPU)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compiling happens here)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each configuration's best is kept")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows (each compiles for ~20-60 s on a CPU)")
    p.add_argument("--no-bf16", action="store_true", help="skip the bf16 rows (default: where the device has bf16)")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--float32-logits", action="store_true",
                   help="the attention logits' float32 product with its float32 backward, not the trainers' "
                        "HalfLogits (step_experiments.py's flag: run once with and once without it to compare "
                        "the bf16 rows, each against its own run's float32 eager baseline)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device available")
    from tqdm.auto import tqdm

    from trainers.evaluate import cpu_has_bf16
    from trainers.memory import keep_freed_memory

    keep_freed_memory()  # as the trainer runs (`trainers.memory`)
    if args.float32_logits:
        EXPERIMENTS["float32_logits"][1]()
    bf16 = (device.type == "cuda" or cpu_has_bf16()) and not args.no_bf16
    cases = [(t, pr) for t in args.tasks.split(",") for pr in args.presets.split(",")]
    plan = [(t, pr, name, kw) for t, pr in cases for name, kw in configs(device, bf16, not args.no_compile)]

    def n_steps(preset: str) -> int:
        return args.steps or (50 if device.type == "cuda" else 40 if preset == "quick" else 6)

    steps = {}
    for t, pr, name, kw in tqdm(plan, desc="build + warm up", disable=not sys.stderr.isatty()):
        fn, bs = make_step(t, pr, device, **kw)
        for i in range(args.warmup):
            fn(i)
        steps[(t, pr, name)] = (fn, bs)
    rates: dict[tuple, list[float]] = {}
    loads = []
    for r in range(args.rounds):
        for t, pr, name, _ in plan:
            fn, bs = steps[(t, pr, name)]
            loads.append(load())
            n = n_steps(pr)
            secs = timed(fn, args.warmup + r * n, n, device)
            rates.setdefault((t, pr, name), []).append(n * bs / secs)
            print(f"round {r} {t:>6} {pr:>5} {name:>16}: {n * bs / secs:9.0f} windows/s", flush=True)
    windows = {t: paper_windows(t) for t in {t for t, _ in cases}}
    rows = []
    for t, pr, name, _ in plan:
        mine, eager = rates[(t, pr, name)], rates[(t, pr, "eager")]
        best = max(mine)
        epochs, n_windows = windows[t]
        hours = round(epochs * n_windows / best / 3600, 2) if pr == "paper" and n_windows else None
        rows.append({"device": device.type, "task": t, "preset": pr, "config": name,
                     "windows_per_s": round(best, 1), "worst_round": round(min(mine), 1),
                     "x_eager": round(best / max(eager), 2),
                     "x_eager_paired": round(statistics.median(a / b for a, b in zip(mine, eager)), 2),
                     "paper_run_h": hours})
    md = report(rows, device, loads, args, argv, windows)
    if args.no_write:
        print(md)
    else:
        print(f"wrote {write_results(args.out, 'masked' + device_suffix(device), rows, md)}")
    return 0


def report(rows: list[dict], device: torch.device, loads: list[float], args, argv, windows: dict) -> str:
    head = ["task", "preset", "config", "windows/s", "worst round", "x eager", "x eager (paired)", "paper run (h)"]
    lines = [
        "# Masked-prediction trainer (netsim, brain): speed options",
        "",
        f"Written by `{command_line('bench_masked.py', argv)}` (raw numbers: `masked{device_suffix(device)}.csv`). "
        + "It times " + (__doc__.split("What it times: ", 1)[1].strip().replace("\n", " ")),
        f"Device: {device.type}; machine: {machine(device)}.",
        f"Load average (1 min) during the run: {min(loads):.2f} .. {max(loads):.2f}.",
        *([f"Experiment: --float32-logits, {EXPERIMENTS['float32_logits'][2]}; float32 rows are unaffected."]
          if getattr(args, "float32_logits", False) else []),
        "",
        "| " + " | ".join(head) + " |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in head[3:]) + " |",
    ]
    for r in rows:
        h = "" if r["paper_run_h"] is None else r["paper_run_h"]
        lines.append(f"| {r['task']} | {r['preset']} | {r['config']} | {r['windows_per_s']:.0f} | {r['worst_round']:.0f} | "
                     f"{r['x_eager']} | {r['x_eager_paired']} | {h} |")
    lines += ["", "paper run = the paper preset's epochs x its training windows ("
              + ", ".join(f"{t}: {w if w else 'data not installed'}" for t, (_, w) in sorted(windows.items()))
              + ") at the measured rate; evaluation and checkpoints not included.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
