"""The ensemble's stacked AdamW step on the CPU: the trainers' optimizer against its form before it kept the
fused kernel's lists of member slices (`step_experiments.restore_per_step_slices`: slices rebuilt every step,
two zero tensors allocated per parameter per step), one torch thread.

Usage:
  python analyses/benchmarks/bench_optimizer.py --out reports/benchmarks/cpu-avx512/optimizer

One group of --k members of the paper's LST model at --d-model (as one one-thread process of the CPU ensemble
of 8 holds: K = 4 at d_model 64), the same random gradients every step. Each form runs --steps optimizer
steps per round, --rounds rounds interleaved, after 20 warm-up steps; the table gives the fastest round's ms
per step and the old form's time over the trainers'. Writes OUT/optimizer.csv and OUT/optimizer.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from bench_io import command_line, machine, write_results  # noqa: E402


def optimizers(d_model: int, k: int) -> tuple[dict, dict[str, object]]:
    """(gradients, {form: optimizer}) for one stacked group of k members, each form on its own copy."""
    from bench_train import _our_model
    from step_experiments import restore_per_step_slices

    from trainers.ensemble import Stack, StackedOptimizer

    class PerStepSlices(StackedOptimizer):
        """The optimizer before `_fused_slices` kept its slices."""

    restore_per_step_slices(PerStepSlices)
    group = [_our_model(d_model, torch.device("cpu"), seed=s) for s in range(k)]
    cfgs = [cfg for _, _, cfg in group]
    stacks = [Stack.of([model for model, _, _ in group]) for _ in range(2)]
    g = torch.Generator().manual_seed(0)
    grads = {n: torch.empty_like(p).copy_(torch.randn(p.shape, generator=g) * 1e-3) for n, p in stacks[0].params.items()}
    forms = {"kept": StackedOptimizer(stacks[0], cfgs, torch.device("cpu")),
             "per_step": PerStepSlices(stacks[1], cfgs, torch.device("cpu"))}
    return grads, forms


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--k", type=int, default=4, help="members in the group (default 4: one process of the CPU ensemble of 8)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=100, help="optimizer steps per round")
    p.add_argument("--out", default="out/optimizer")
    args = p.parse_args(argv)
    if min(args.d_model, args.k, args.rounds, args.steps) < 1:
        p.error("--d-model, --k, --rounds and --steps must be >= 1")
    torch.set_num_threads(1)
    from trainers.memory import keep_freed_memory

    keep_freed_memory()  # as the CPU trainers run
    grads, forms = optimizers(args.d_model, args.k)
    if not forms["kept"].fused:
        p.error("torch's fused AdamW is not available on this CPU build: nothing to compare")
    for opt in forms.values():
        for _ in range(20):
            opt.step(grads)
    best = {name: float("inf") for name in forms}
    for _ in range(args.rounds):
        for name, opt in forms.items():
            t = time.perf_counter()
            for _ in range(args.steps):
                opt.step(grads)
            best[name] = min(best[name], (time.perf_counter() - t) / args.steps * 1e3)
    same = all(torch.equal(a, b) for a, b in zip(forms["kept"].stack.params.values(), forms["per_step"].stack.params.values()))
    stack = forms["kept"].stack
    row = {"d_model": args.d_model, "k": args.k, "parameters": len(stack.params),
           "elements": sum(t.numel() for t in stack.params.values()), "fused_calls_per_step": len(forms["kept"].by_hyper),
           "kept_ms": round(best["kept"], 3), "per_step_ms": round(best["per_step"], 3),
           "per_step_over_kept": round(best["per_step"] / best["kept"], 2), "same_weights": same}
    print(row, flush=True)
    lines = ["# The ensemble's stacked AdamW step: slices kept against rebuilt every step", "",
             f"Written by `{command_line('bench_optimizer.py', argv)}` (raw numbers: `optimizer.csv`).",
             f"Machine: {machine(torch.device('cpu'))}. One group of K = {args.k} at d_model {args.d_model} "
             f"({row['parameters']} stacked tensors, {row['elements']:,} elements); fastest of {args.rounds} "
             f"interleaved rounds of {args.steps} steps, ms per optimizer step. `same weights`: both forms' "
             "weights bit for bit equal after all the steps.", "",
             "| d_model | K | kept (ms) | rebuilt per step (ms) | rebuilt / kept | same weights |",
             "| ---: | ---: | ---: | ---: | ---: | --- |",
             f"| {args.d_model} | {args.k} | {row['kept_ms']} | {row['per_step_ms']} | {row['per_step_over_kept']} | {same} |"]
    write_results(args.out, "optimizer", [row], "\n".join(lines) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
