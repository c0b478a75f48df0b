"""The ensemble's stacked AdamW step on the CPU: the trainers' optimizer against its form before it kept the
fused kernel's lists of member slices (`step_experiments.restore_per_step_slices`: slices rebuilt every step,
two zero tensors allocated per parameter per step), one torch thread. With --single, the single-model
trainer's AdamW (torch's fused kernel over the parameters one by one) against `flat_adamw.FlatAdamW` (the
same kernel once, on flat buffers), at --threads torch threads (default 2 there, as the single trainer runs).

Usage:
  python analyses/benchmarks/bench_optimizer.py --out reports/benchmarks/cpu-avx512/optimizer
  python analyses/benchmarks/bench_optimizer.py --single --out reports/benchmarks/cpu-avx2-r5/optimizer-single

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


class GradStepper:
    """A torch optimizer behind `StackedOptimizer`'s ``step(grads)``: the gradients set, then one step."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer):
        self.params, self.opt = list(model.parameters()), opt

    def step(self, grads: list[torch.Tensor]) -> None:
        for p, g in zip(self.params, grads):
            p.grad = g
        self.opt.step()


def single_optimizers(d_model: int) -> tuple[list[torch.Tensor], dict[str, GradStepper]]:
    """(gradients, {form: optimizer}) for the single-model trainer's model, each form on its own copy."""
    from bench_train import _our_model
    from flat_adamw import FlatAdamW

    model, opt, cfg = _our_model(d_model, torch.device("cpu"))
    twin = _our_model(d_model, torch.device("cpu"))[0]
    flat = FlatAdamW(twin.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) * 1e-3 for p in model.parameters()]
    return grads, {"per_parameter": GradStepper(model, opt), "flat": GradStepper(twin, flat)}


def fastest_ms(forms: dict, grads: object, rounds: int, steps: int) -> dict[str, float]:
    """Each form's fastest round in ms per ``step(grads)``: 20 warm-up steps each, then ``rounds`` interleaved
    rounds of ``steps`` steps."""
    for opt in forms.values():
        for _ in range(20):
            opt.step(grads)
    best = {name: float("inf") for name in forms}
    for _ in range(rounds):
        for name, opt in forms.items():
            t = time.perf_counter()
            for _ in range(steps):
                opt.step(grads)
            best[name] = min(best[name], (time.perf_counter() - t) / steps * 1e3)
    return best


def report_head(title: str, argv: list[str], description: str) -> list[str]:
    """The report's title, the command that wrote it, the machine and what the table shows."""
    return [f"# {title}", "", f"Written by `{command_line('bench_optimizer.py', argv)}` (raw numbers: `optimizer.csv`).",
            f"Machine: {machine(torch.device('cpu'))}. {description}", ""]


def main_single(args: argparse.Namespace, argv: list[str], error) -> int:
    """--single: the single model's per-parameter fused AdamW against `FlatAdamW` (``error``: the parser's)."""
    grads, forms = single_optimizers(args.d_model)
    if not forms["per_parameter"].opt.defaults.get("fused"):
        error("torch's fused AdamW is not available on this CPU build: nothing to compare")
    best = fastest_ms(forms, grads, args.rounds, args.steps)
    params = forms["per_parameter"].params
    diff = max((a - b).abs().max().item() for a, b in zip(params, forms["flat"].params))
    row = {"d_model": args.d_model, "threads": torch.get_num_threads(), "parameters": len(params),
           "elements": sum(p.numel() for p in params), "per_parameter_ms": round(best["per_parameter"], 3),
           "flat_ms": round(best["flat"], 3), "per_parameter_over_flat": round(best["per_parameter"] / best["flat"], 2),
           "max_weight_difference": diff}
    print(row, flush=True)
    lines = report_head(
        "The single model's AdamW step: torch's fused kernel per parameter against once on flat buffers", argv,
        f"The LST model at d_model {args.d_model} ({row['parameters']} parameters, {row['elements']:,} elements), "
        f"the same random gradients every step; fastest of {args.rounds} interleaved rounds of {args.steps} steps, "
        "ms per optimizer step. `max weight difference`: the largest difference between the two copies' weights "
        "after all the steps (`flat_adamw`'s docstring says where rounding may differ).") + [
             "| d_model | threads | per parameter (ms) | flat (ms) | per parameter / flat | max weight difference |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |",
             f"| {args.d_model} | {row['threads']} | {row['per_parameter_ms']} | {row['flat_ms']} | "
             f"{row['per_parameter_over_flat']} | {diff:.3g} |"]
    write_results(args.out, "optimizer", [row], "\n".join(lines) + "\n")
    return 0 if diff < 1e-5 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--k", type=int, default=4, help="members in the group (default 4: one process of the CPU ensemble of 8)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=100, help="optimizer steps per round")
    p.add_argument("--out", default="out/optimizer")
    p.add_argument("--single", action="store_true",
                   help="the single-model trainer's AdamW against flat_adamw.FlatAdamW instead (--k unused)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: 1, one process of the CPU ensemble; with --single 2)")
    args = p.parse_args(argv)
    if min(args.d_model, args.k, args.rounds, args.steps, args.threads or 1) < 1:
        p.error("--d-model, --k, --rounds, --steps and --threads must be >= 1")
    torch.set_num_threads(args.threads or (2 if args.single else 1))
    from trainers.memory import keep_freed_memory

    keep_freed_memory()  # as the CPU trainers run
    if args.single:
        return main_single(args, argv, p.error)
    grads, forms = optimizers(args.d_model, args.k)
    if not forms["kept"].fused:
        p.error("torch's fused AdamW is not available on this CPU build: nothing to compare")
    best = fastest_ms(forms, grads, args.rounds, args.steps)
    same = all(torch.equal(a, b) for a, b in zip(forms["kept"].stack.params.values(), forms["per_step"].stack.params.values()))
    stack = forms["kept"].stack
    row = {"d_model": args.d_model, "k": args.k, "parameters": len(stack.params),
           "elements": sum(t.numel() for t in stack.params.values()), "fused_calls_per_step": len(forms["kept"].by_hyper),
           "kept_ms": round(best["kept"], 3), "per_step_ms": round(best["per_step"], 3),
           "per_step_over_kept": round(best["per_step"] / best["kept"], 2), "same_weights": same}
    print(row, flush=True)
    lines = report_head(
        "The ensemble's stacked AdamW step: slices kept against rebuilt every step", argv,
        f"One group of K = {args.k} at d_model {args.d_model} ({row['parameters']} stacked tensors, "
        f"{row['elements']:,} elements); fastest of {args.rounds} interleaved rounds of {args.steps} steps, ms per "
        "optimizer step. `same weights`: both forms' weights bit for bit equal after all the steps.") + [
             "| d_model | K | kept (ms) | rebuilt per step (ms) | rebuilt / kept | same weights |",
             "| ---: | ---: | ---: | ---: | ---: | --- |",
             f"| {args.d_model} | {args.k} | {row['kept_ms']} | {row['per_step_ms']} | {row['per_step_over_kept']} | {same} |"]
    write_results(args.out, "optimizer", [row], "\n".join(lines) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
