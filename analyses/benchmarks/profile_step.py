"""Where a training step's time goes: wall time against the device's busy time, kernels per step, and
the top operators, for the single model and one batched ensemble group.

Usage:
  python analyses/benchmarks/profile_step.py --device cuda --d-model 160 --k 300   # in gpu_session.sh
  python analyses/benchmarks/profile_step.py --d-model 64 --k 4 --configs single,single-bf16,ensemble,\
      ensemble-bf16,ensemble-bf16-compile --out reports/benchmarks                  # the CPU, one thread

The GPU lease is short and comes rarely, so the session records why a configuration is as fast as it
is, not only how fast: on a GPU a step whose kernels keep the device busy for a small part of its wall
time is bound by kernel launches and host work (where CUDA graphs and bigger ensembles help); one
whose device is busy most of the time is bound by the kernels themselves (where bf16 / TF32 help).

Each configuration builds the step of `bench_train` (`_single_step`, `_group_step`: the trainers'
own steps on random puzzles), runs --warmup steps, times --steps steps, then records --steps more
under torch.profiler. Writes OUT/profile.csv (profile_cuda.* on a GPU) (per configuration: wall ms per step, device-busy ms per
step and its fraction of the wall time, device kernels per step, peak device memory) and
OUT/profile.md (that table and each configuration's top operators by device time, or by CPU time on
the CPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from bench_io import command_line, device_suffix, machine, sync, timed, write_results  # noqa: E402
from step_experiments import (  # noqa: E402
    ACTIVATIONS, EXPERIMENTS, apply_activation, apply_compile_mode, apply_packed_attention)

CONFIGS = ("single", "single-bf16", "ensemble", "ensemble-tf32", "ensemble-bf16")
OPTIONAL = ("single-compile", "single-bf16-compile", "ensemble-compile", "ensemble-bf16-compile")  # --configs only
TOP = 15  # operators listed per configuration (--top)


def build(config: str, d: int, k: int, device: torch.device):
    """(step function, puzzles per step) of one configuration (`bench_train`'s steps)."""
    import bench_train

    parts = config.split("-")
    kw = {"bf16": "bf16" in parts, "tf32": "tf32" in parts, "compile": "compile" in parts}
    if config.startswith("single"):
        return bench_train._single_step(d, device, nosync=True, **kw), bench_train.BATCH
    return bench_train._group_step(d, device, list(range(k)), **kw), k * bench_train.BATCH


def device_events(prof, device: torch.device) -> tuple[float, int]:
    """(busy microseconds, number of kernels and copies) the device ran in the profiled steps.

    GPU user annotations are left out: they are ranges on the device's timeline, not work. Compiled steps
    carry two per step ("## Call CompiledFxGraph ... ##", forward and backward graph) spanning their kernels,
    and counting them (as this did until the third GPU session) gave a busy time 1.86x the wall time;
    torch's own "Self CUDA time total" leaves them out the same way."""
    if device.type != "cuda":
        return float("nan"), 0
    from torch.autograd import DeviceType

    busy, n = 0.0, 0
    for e in prof.events():
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False):
            busy += e.device_time_total
            n += 1
    return busy, n


def fresh_compile(on: bool, kernel_profile: bool):
    """A context in which ``torch.compile`` compiles anew (no Dynamo or FX-graph cache entry reused), with
    or without Inductor's per-kernel profiler rows on the CPU; a no-op context unless ``on``."""
    import contextlib

    if not on:
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()  # new models of the same class would otherwise reuse the compiled code
    return inductor_config.patch({"cpp.enable_kernel_profile": kernel_profile, "fx_graph_cache": False})


def profile_one(config: str, d: int, k: int, device: torch.device, steps: int, warmup: int,
                shapes: bool = False, top: int = TOP) -> tuple[dict, str]:
    from torch.profiler import ProfilerActivity, profile

    per_kernel = device.type == "cpu" and "compile" in config
    with fresh_compile(per_kernel, kernel_profile=False):
        step, puzzles = build(config, d, k, device)
        for i in range(warmup):
            step(i)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    wall = timed(step, warmup, steps, device) / steps
    if per_kernel:
        # a second compiled copy whose generated C++ kernels report themselves to the profiler (one row per
        # fused kernel instead of one per graph); they run slower, so the wall time above is the plain copy's
        with fresh_compile(True, kernel_profile=True):
            step, _ = build(config, d, k, device)
            for i in range(warmup):
                step(i)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=shapes) as prof:
        for i in range(warmup + steps, warmup + 2 * steps):
            step(i)
        sync(device)
    busy_us, kernels = device_events(prof, device)
    row = {"config": config, "d_model": d, "models": 1 if config.startswith("single") else k, "steps": steps,
           "wall_ms_per_step": round(wall * 1e3, 3), "puzzles_per_s": round(puzzles / wall, 1),
           "device_busy_ms_per_step": round(busy_us / 1e3 / steps, 3) if kernels else "",
           "device_busy_fraction": round(busy_us / 1e6 / steps / wall, 3) if kernels else "",
           "kernels_per_step": round(kernels / steps, 1) if kernels else "",
           "peak_device_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device.type == "cuda" else ""}
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=top, max_name_column_width=60)
    if shapes:  # the same operators split by their inputs' shapes: which tensors the copies and products move
        table += (f"\nBy input shapes (top {top}):\n"
                  + prof.key_averages(group_by_input_shape=True).table(sort_by=sort, row_limit=top, max_name_column_width=40,
                                                                      max_shapes_column_width=120))
    return row, table


def stem(device: torch.device) -> str:
    """The report's file name without extension: profile on the CPU, profile_cuda on a GPU."""
    return "profile" + device_suffix(device)


def report(rows: list[dict], tables: dict[str, str], device: torch.device, argv, top: int = TOP) -> str:
    lines = ["# Where a training step's time goes", "",
             f"Written by `{command_line('profile_step.py', argv).strip()}` (raw numbers: `{stem(device)}.csv`). "
             "`wall` is a timed step; `device busy` sums the device's kernels and copies in the profiled steps "
             "(the profiler adds a little host time, not device time); a busy fraction well below 1 means the "
             "step waits on kernel launches and host work, not on arithmetic. Compiled CPU steps are profiled "
             "in a second compiled copy that reports each generated kernel (slower than the timed copy: read "
             "their tables as shares).",
             f"Device: {device.type}; machine: {machine(device)}.", "",
             "| config | d_model | models | wall ms/step | puzzles/s | device busy ms/step | busy fraction "
             "| kernels/step | peak device MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['d_model']} | {r['models']} | {r['wall_ms_per_step']} | "
                     f"{r['puzzles_per_s']:.0f} | {r['device_busy_ms_per_step']} | {r['device_busy_fraction']} | "
                     f"{r['kernels_per_step']} | {r['peak_device_mib']} |")
    for config, table in tables.items():
        lines += ["", f"## {config}: top {top} operators", "", "```", table.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--k", type=int, default=4, help="members of the ensemble group (default 4)")
    p.add_argument("--configs", default=None, help=f"comma list of {', '.join(CONFIGS + OPTIONAL)} (default: "
                   "the uncompiled ones the device runs; tf32 GPU only, bf16 where supported; compiled steps list "
                   "Inductor's generated kernels one by one)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", default="out/profile", help="folder for profile.md / .csv (default out/profile)")
    for name, (tag, _apply, help_text) in EXPERIMENTS.items():
        p.add_argument("--" + name.replace("_", "-"), action="store_true",
                       help=f"experiment: {help_text}. Rows tagged '{tag}'.")
    p.add_argument("--compile-mode", default=None,
                   choices=["default", "max-autotune-no-cudagraphs", "max-autotune"],
                   help="experiment: torch.compile's mode for the compiled configurations (rows tagged "
                        "'+MODE'); max-autotune times Inductor's matrix-product templates (Triton on a GPU, C++ on "
                        "the CPU) against the library kernels (cuBLAS, oneDNN) and fuses bias / GELU epilogues into "
                        "the templates that win, compiling for minutes; on the CPU run it with "
                        "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 to log its choices (autotune_log.py)")
    p.add_argument("--packed-attention", type=int, default=0, metavar="P",
                   help="experiment: attention over P puzzles at a time as one sequence with a block-diagonal mask "
                        "(same maths; larger, fewer products) where the matmul-softmax path runs: the CPU and compiled "
                        "GPU steps (rows tagged '+packedP'; default 0: off)")
    p.add_argument("--activation", default=None, choices=sorted(ACTIVATIONS),
                   help="experiment: the MLP's activation replaced by GELU's tanh approximation or ReLU (rows tagged "
                        "'+ACTIVATION'): not the study's model (its exact erf GELU stays the trainers'); what the exact "
                        "GELU costs the step, the most any faster kernel for it could give")
    p.add_argument("--top", type=int, default=TOP, help=f"operators listed per configuration (default {TOP})")
    p.add_argument("--shapes", action="store_true", help="also list the top operators split by their input "
                   "shapes (torch.profiler record_shapes): which tensors the copies and matrix products move")
    args = p.parse_args(argv)
    if args.top < 1:
        p.error(f"--top must be >= 1, got {args.top}")
    if args.packed_attention < 0 or args.packed_attention == 1:
        p.error(f"--packed-attention must be 0 (off) or >= 2 puzzles, got {args.packed_attention}")
    chosen = [name for name in EXPERIMENTS if getattr(args, name)]
    for name in chosen:
        EXPERIMENTS[name][1]()
    if args.compile_mode:
        apply_compile_mode(args.compile_mode)
    if args.packed_attention:
        apply_packed_attention(args.packed_attention)
    if args.activation:
        apply_activation(args.activation)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device available")
    torch.set_num_threads(args.threads)
    from trainers.evaluate import cpu_has_bf16
    from trainers.memory import keep_freed_memory

    keep_freed_memory()
    if args.configs:
        configs = args.configs.split(",")
        unknown = sorted(set(configs) - set(CONFIGS + OPTIONAL))
        if unknown:
            p.error(f"unknown --configs {', '.join(unknown)}; choose from {', '.join(CONFIGS + OPTIONAL)}")
    else:
        bf16 = device.type == "cuda" or cpu_has_bf16()
        configs = [c for c in CONFIGS if (bf16 or "bf16" not in c) and (device.type == "cuda" or "tf32" not in c)]
    rows, tables = [], {}
    for config in configs:
        try:
            row, table = profile_one(config, args.d_model, args.k, device, args.steps, args.warmup, args.shapes, args.top)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # record and go on: the lease is short
            print(f"{config}: failed: {str(e).splitlines()[0]}", flush=True)
            continue
        row["config"] += "".join(EXPERIMENTS[name][0] for name in chosen)
        if args.packed_attention:
            row["config"] += f"+packed{args.packed_attention}"
        if args.activation:
            row["config"] += "+" + args.activation
        if args.compile_mode and "compile" in config:
            row["config"] += "+" + args.compile_mode
        rows.append(row)
        tables[row["config"]] = table
        print(f"{config:>14} wall {row['wall_ms_per_step']:9.3f} ms/step  busy {row['device_busy_fraction']}  "
              f"kernels/step {row['kernels_per_step']}", flush=True)
        write_results(args.out, stem(device), rows, report(rows, tables, device, argv, args.top))  # after each: a cut-off keeps it
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
