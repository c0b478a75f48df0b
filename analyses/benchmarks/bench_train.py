"""Benchmark: training throughput (puzzles / second) of a naive loop, our trainer and our ensemble.

Usage:
  python analyses/benchmarks/bench_train.py                               # CPU: d_model 64 and 160
  python analyses/benchmarks/bench_train.py --device cuda --gpu-full      # one GPU: the full grid
  python analyses/benchmarks/bench_train.py --d-models 64 --ks 4,8 --steps 10 --no-write

Configurations, each measured for a fixed number of optimizer steps (batch 128) after warm-up steps,
all in this one run so their ratios share the machine's state:
* naive: the study's companion-style loop written here: a learned PE table added at the input of
  every layer, `nn.MultiheadAttention` (need_weights left at its default, True), post-LN, MLP 4x with
  GELU, AdamW, batch 128 gathered by indexing, and Python-side `.item()` on the loss and the number
  correct after every step;
* naive-parallel (CPU): the naive loop once per core side by side, each in its own one-thread process
  (`side_by_side`: what launching one companion-style process per core gives; a stricter baseline for
  the ensemble than `naive`);
* single-parallel (CPU): our single-model step (below, no host sync) once per core side by side, one
  one-thread process each: what the LST sweep's ``--backend local`` does, the fair CPU baseline for
  the ensemble (column `x single-parallel`, against the variant of the same precision and compilation:
  with --compile, `single-parallel-compile` and `single-parallel-bf16-compile` compile each process's step);
* single: our `PETransformer` (`trainers.model.attend`: matmul-softmax attention on the CPU at 16 tokens,
  fused SDPA elsewhere; the last layer computes only the readout token) with the trainer's own step,
  `trainers.train.lst_step`;
* single-nosync: the same, accumulating loss / accuracy on the device (no per-step host sync);
* single-split (CPU): the same model with each batch split over the cores, one Python thread and one
  torch thread per part, the parts' gradients summed before one AdamW step (`_split_step`);
* ensemble-K: K members trained as `trainers.ensemble.train_ensemble` trains them: batched groups (stacked
  parameters, one batched matrix product per layer, fused AdamW on member slices, each member with its own batch
  indices); on a GPU one group of K; on the CPU groups of at most 4 trained side by side on one thread per
  core (`cpu_workers`);
* *-bf16: the same under bf16 autocast (default where supported: a GPU, or a CPU with native bf16 such
  as AVX512-BF16);
* *-compile: torch.compile of the step: `single-compile` (`pe-probe train --compile`) and the ensembles
  of --compile-ks (default 8) unless --no-compile, every ensemble with --compile. On the CPU compiled
  groups train as `train_ensemble --compile` trains them: in one-thread worker processes, side by side.
* *-tf32 (GPU only): float32 with TensorFloat-32 matrix products in the step (`--tf32`), for the single
  model and every ensemble, unless --no-tf32;
* *-cudagraphs (GPU only): torch.compile with CUDA graphs (`--cuda-graphs`), for the single model and
  the ensembles of --compile-ks, unless --no-compile.
All of them run with the torch thread count given by --threads (default: torch's default, all cores),
so the naive baseline is one companion-style process using the whole machine, as in the issue.
Also measured: the arithmetic bound, the GEMM rate of the model's matrix shape divided by the training
FLOPs per puzzle (torch's FlopCounterMode), which caps every configuration.
Data are random one-hot puzzles of the task's shape (16 tokens x 5 channels, 4 classes): the cost of a
step does not depend on the puzzles' content. Throughput counts puzzles processed by all models.
Each configuration is measured --rounds times, interleaved with the others, each time right after a
window of the naive loop. `puzzles/s` is the best round; `x naive` divides best rounds, `x naive (paired)`
is the median of the ratios to the naive window just before (robust to the machine's speed drifting).

Writes reports/benchmarks/train.csv (train_cuda.csv on a GPU; unless --no-write) and prints the
markdown table that reports/benchmarks/train.md quotes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

import torch  # noqa: E402
from bench_io import command_line, device_suffix, load, machine, sync, timed, write_results  # noqa: E402
from side_by_side import side_by_side  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

N_TRAIN, N_TOK, N_IN, N_CLS, BATCH = 8100, 16, 5, 4, 128
SWEEP_RUNS, SWEEP_EPOCHS = 300, 4000
SWEEP_PUZZLES = SWEEP_RUNS * SWEEP_EPOCHS * N_TRAIN  # puzzle-passes in the paper's full sweep


# ----------------------------------------------------------------------------------------------
# (a) the naive, companion-style baseline


class NaiveLayer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.pe = nn.Parameter(torch.randn(N_TOK, d) * 0.1)  # a separate learned table per layer
        self.attn = nn.MultiheadAttention(d, 1, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.pe
        a, _ = self.attn(x, x, x)
        x = self.ln1(x + a)
        return self.ln2(x + self.mlp(x))


class NaiveModel(nn.Module):
    def __init__(self, d: int, n_layers: int = 4):
        super().__init__()
        self.embed = nn.Linear(N_IN, d)
        self.layers = nn.ModuleList(NaiveLayer(d) for _ in range(n_layers))
        self.head = nn.Linear(d, N_CLS)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h[:, -1])


def fake_data(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = torch.randint(0, N_IN + 1, (N_TRAIN, N_TOK), generator=g)  # 0..4 shape/target, 5 = blank
    x = F.one_hot(shapes, N_IN + 1)[..., :N_IN].float()
    y = torch.randint(0, N_CLS, (N_TRAIN,), generator=g)
    return x.to(device), y.to(device)


def _naive_step(d, device, seed=0):
    """One companion-style training step function (model, AdamW, host syncs) on its own data order."""
    x, y = fake_data(device)
    torch.manual_seed(seed)
    model = NaiveModel(d).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    perm = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(seed))
    stats = {"loss": 0.0, "correct": 0}

    def step(i):
        idx = perm[(i * BATCH) % (N_TRAIN - BATCH):][:BATCH].to(device)
        xb, yb = x[idx], y[idx]
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        stats["loss"] += loss.item()  # host sync each step, as the companion loop does
        stats["correct"] += (logits.argmax(-1) == yb).sum().item()

    return step


def _tuned(build, **kwargs):
    """``build(**kwargs)`` in a side-by-side worker process, under the malloc settings the CPU trainers use
    (`trainers.memory`; this process gets them in `main`): every configuration, baselines included."""
    from trainers.memory import keep_freed_memory

    keep_freed_memory()
    return build(**kwargs)


def bench_naive(d, device, steps, warmup, **_):
    return _time(_naive_step(d, device), steps, warmup, device), 1


def bench_naive_parallel(d, device, steps, warmup, workers=None, **_):
    """The naive loop once per core side by side, each in its own one-thread process: what a user gets by
    launching one companion-style process per core."""
    from trainers.ensemble import usable_cores

    n = workers or usable_cores()
    return side_by_side(_tuned, [{"build": _naive_step, "d": d, "device": device, "seed": s} for s in range(n)], warmup,
                        steps), n


def _our_model(d, device, seed=0):
    from pe_probe.groundtruth import grid
    from trainers.config import make_config
    from trainers.model import PETransformer
    from trainers.train import make_optimizer

    cfg = make_config("paper", {"model.d_model": d, "seed": seed, "device": device.type})
    torch.manual_seed(seed)
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(grid(4, 4).coords)).to(device)
    return model, make_optimizer(model, cfg), cfg


def _single_step(d, device, nosync=False, compile=False, bf16=False, seed=0, cuda_graphs=False, tf32=False):
    """One step function of our single-model trainer: the trainer's own step, `trainers.train.lst_step`."""
    from trainers.train import lst_step, speed_setup

    x, y = fake_data(device)
    model, opt, _ = _our_model(d, device, seed=seed)
    fwd, mark_step, autocast, precision, _ = speed_setup(model, device, compile=compile, bf16=bf16,
                                                         cuda_graphs=cuda_graphs, tf32=tf32)
    perm = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(seed)).to(device)
    acc = {"loss": torch.zeros((), device=device), "correct": torch.zeros((), device=device, dtype=torch.long),
           "loss_f": 0.0, "correct_i": 0}

    def step(i):
        idx = perm[(i * BATCH) % (N_TRAIN - BATCH):][:BATCH]
        logits, loss = lst_step(fwd, opt, x[idx], y[idx], autocast, precision, mark_step)
        if nosync:
            acc["loss"] += loss.detach() * len(idx)
            acc["correct"] += (logits.argmax(-1) == y[idx]).sum()
        else:
            acc["loss_f"] += loss.item() * len(idx)
            acc["correct_i"] += (logits.argmax(-1) == y[idx]).sum().item()

    return step


def bench_single(d, device, steps, warmup, nosync=False, compile=False, bf16=False, cuda_graphs=False, tf32=False, **_):
    return _time(_single_step(d, device, nosync, compile, bf16, cuda_graphs=cuda_graphs, tf32=tf32), steps, warmup, device), 1


def bench_single_parallel(d, device, steps, warmup, bf16=False, compile=False, workers=None, **_):
    """Our single-model trainer once per core side by side, one one-thread process each (what the LST
    sweep's ``--backend local`` does): the fair CPU baseline for the ensemble."""
    from trainers.ensemble import usable_cores

    n = workers or usable_cores()
    kws = [{"build": _single_step, "d": d, "device": device, "nosync": True, "bf16": bf16, "compile": compile, "seed": s}
           for s in range(n)]
    return side_by_side(_tuned, kws, warmup, steps), n


def split_gradients(model: nn.Module, params: list, xs: list, ys: list, n: int, submit) -> list:
    """The gradients of the batch's mean cross-entropy (``n`` puzzles) as the sum of its parts' (``xs``, ``ys``):
    part 0 in this thread, the others through ``submit`` (a thread pool's), each part's loss summed over its
    puzzles and divided by ``n``. The same sum as the whole batch's gradient, in another order (float rounding)."""
    def part(xb, yb):
        return torch.autograd.grad(F.cross_entropy(model(xb), yb, reduction="sum") / n, params, allow_unused=True)

    futures = [submit(part, xb, yb) for xb, yb in zip(xs[1:], ys[1:])]
    total = list(part(xs[0], ys[0]))
    for f in futures:
        for i, g in enumerate(f.result()):
            if g is not None:
                total[i] = g if total[i] is None else total[i].add_(g)
    return total


def _split_step(d, device, parts, submit, seed=0):
    """Our model's step with its batch split into ``parts`` pieces, all but the first run through ``submit`` (a
    thread pool's: torch ops release the GIL), their gradients summed before one AdamW step: data parallelism
    inside one process, a way for one model to use every core with one torch thread each, instead of two torch
    threads per operator (`single`)."""
    x, y = fake_data(device)
    model, opt, _ = _our_model(d, device, seed=seed)
    params = [p for p in model.parameters() if p.requires_grad]
    perm = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(seed)).to(device)

    def step(i):
        idx = perm[(i * BATCH) % (N_TRAIN - BATCH):][:BATCH]
        grads = split_gradients(model, params, list(x[idx].chunk(parts)), list(y[idx].chunk(parts)), len(idx), submit)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    return step


def bench_single_split(d, device, steps, warmup, workers=None, **_):
    """`_split_step` with one part per core and one torch thread (CPU): can splitting one model's batch over the
    cores beat its ops using both cores as torch threads (`single`)?"""
    from concurrent.futures import ThreadPoolExecutor

    from trainers.ensemble import usable_cores

    parts = workers or usable_cores()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # the pool's threads end with the measurement
        with ThreadPoolExecutor(max_workers=max(1, parts - 1), thread_name_prefix="split") as pool:
            return _time(_split_step(d, device, parts, pool.submit), steps, warmup, device), 1
    finally:
        torch.set_num_threads(threads)


def _group_step(d, device, seeds, bf16=False, compile=False, cuda_graphs=False, tf32=False):
    """One step function of a batched group of members: the ensemble's own step, `trainers.ensemble.group_step`."""
    from trainers.ensemble import Stack, StackedOptimizer, cpu_chunk, group_loss, group_step, template_model
    from trainers.evaluate import bf16_autocast, tf32_matmuls
    from trainers.train import compiled_step, cpp_wrapper_for

    x, y = fake_data(device)
    group = [_our_model(d, device, seed=s) for s in seeds]
    stack = Stack.of([m[0] for m in group])
    opt = StackedOptimizer(stack, [m[2] for m in group], device)
    base = template_model(group[0][0])
    perms = torch.stack([torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(s)) for s in seeds]).to(device)
    del group
    fn, mark_step = compiled_step(group_loss(base, stack.buffers, bf16_autocast(device, bf16)), device, compile, cuda_graphs,
                                  cpp_wrapper=cpp_wrapper_for(device, bf16))
    precision = tf32_matmuls(device, tf32)
    chunk = cpu_chunk(device, bf16, len(seeds))

    def step(i):
        idx = perms[:, (i * BATCH) % (N_TRAIN - BATCH):][:, :BATCH]
        group_step(fn, stack, opt, x[idx], y[idx], precision, mark_step, chunk)

    return step


def _groups_step(kws):
    """One step of several groups in turn (a worker process with more than one group)."""
    steps = [_group_step(**kw) for kw in kws]

    def step(i):
        for one in steps:
            one(i)

    return step


def bench_ensemble(d, device, steps, warmup, k=8, compile=False, bf16=False, workers=None, cuda_graphs=False,
                   tf32=False, **_):
    """K members as `trainers.ensemble.train_ensemble` trains them: batched groups (all K on a GPU; at most
    `CPU_GROUP` on the CPU), groups side by side on `cpu_workers` threads on the CPU, or in one-thread
    processes when compiled (`in_processes`)."""
    from trainers.config import make_config
    from trainers.ensemble import _run_jobs, cpu_workers, group_size, in_processes

    cfg = make_config("paper", {"model.d_model": d, "device": device.type})
    n_workers = cpu_workers(workers, [cfg], device, compile)
    size = group_size(k, n_workers)
    seed_groups = [list(range(lo, min(k, lo + size))) for lo in range(0, k, size)]
    kws = [{"d": d, "device": device, "seeds": seeds, "bf16": bf16, "compile": compile, "cuda_graphs": cuda_graphs,
            "tf32": tf32} for seeds in seed_groups]
    if in_processes(n_workers, device, compile):  # worker j trains groups j, j + n, ... each step
        n = min(n_workers, len(kws))
        return side_by_side(_tuned, [{"build": _groups_step, "kws": kws[j::n]} for j in range(n)], warmup, steps), k
    groups = [_group_step(**kw) for kw in kws]

    def run(step, first, n):
        for i in range(first, first + n):
            step(i)

    _run_jobs(groups, n_workers, lambda step, stop: run(step, 0, warmup))
    sync(device)
    t = time.perf_counter()
    _run_jobs(groups, n_workers, lambda step, stop: run(step, warmup, steps))
    sync(device)
    return time.perf_counter() - t, k


def _time(step, steps, warmup, device):
    for i in range(warmup):
        step(i)
    return timed(step, warmup, steps, device)


# ----------------------------------------------------------------------------------------------


def flops_per_puzzle(model: nn.Module, device, **kw) -> float:
    """Training FLOPs (forward + backward) per puzzle, counted by torch's FlopCounterMode on one batch.

    Attention runs on the math SDPA backend here: the fused CPU kernel has no FLOP formula and would
    count as zero.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    x, y = fake_data(device)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        F.cross_entropy(model(x[:BATCH], **kw), y[:BATCH]).backward()
    return counter.get_total_flops() / BATCH


def gemm_rate(d, device, dtype) -> float:
    """FLOP/s of this device's matrix product at the model's shape (B*16 x d) @ (d x 4d), current threads."""
    a = torch.randn(BATCH * N_TOK, d, device=device, dtype=dtype)
    b = torch.randn(d, 4 * d, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < 0.5:
        a @ b
        n += 1
    sync(device)
    return 2 * a.shape[0] * d * 4 * d * n / (time.perf_counter() - t)


def arithmetic_bound(d, device) -> dict:
    """The most puzzles/s any trainer of this model could reach if it did nothing but matrix products at
    the measured rate: FLOPs per puzzle (naive: every token through every layer; ours: readout-only last
    layer) over the GEMM rate, in float32 and bf16. A ratio target above it cannot be met."""
    from trainers.evaluate import cpu_has_bf16

    ours, _, _ = _our_model(d, device)
    out = {"flops_naive": flops_per_puzzle(NaiveModel(d).to(device), device), "flops_ours": flops_per_puzzle(ours, device),
           "gemm_fp32": gemm_rate(d, device, torch.float32)}
    if device.type == "cuda":
        from trainers.evaluate import tf32_matmuls

        with tf32_matmuls(device):
            out["gemm_tf32"] = gemm_rate(d, device, torch.float32)
    if device.type == "cuda" or cpu_has_bf16():
        out["gemm_bf16"] = gemm_rate(d, device, torch.bfloat16)
    return out


def plan(args):
    """(name, d, fn, kwargs, steps) for every configuration."""
    out = []
    for d in args.d_models:
        s = args.steps
        out += [("naive", d, bench_naive, {}, s)]
        if args.device == "cpu":
            out.append(("naive-parallel", d, bench_naive_parallel, {}, s))
            out.append(("single-parallel", d, bench_single_parallel, {}, s))
            if args.bf16:
                out.append(("single-parallel-bf16", d, bench_single_parallel, {"bf16": True}, s))
            if not args.no_compile:  # the per-core baseline of the compiled ensembles
                out.append(("single-parallel-compile", d, bench_single_parallel, {"compile": True}, s))
                if args.bf16:
                    out.append(("single-parallel-bf16-compile", d, bench_single_parallel, {"bf16": True, "compile": True}, s))
        out += [("single", d, bench_single, {}, s),
                ("single-nosync", d, bench_single, {"nosync": True}, s)]
        if args.device == "cpu":  # one model's batch split over the cores (data parallel threads)
            out.append(("single-split", d, bench_single_split, {}, s))
        if not args.no_compile:  # the single-model trainer's --compile (the ensemble's only with --compile)
            out.append(("single-compile", d, bench_single, {"nosync": True, "compile": True}, s))
        if args.bf16:
            out.append(("single-bf16", d, bench_single, {"nosync": True, "bf16": True}, s))
            if not args.no_compile:
                out.append(("single-bf16-compile", d, bench_single, {"nosync": True, "bf16": True, "compile": True}, s))
        if args.tf32:  # TensorFloat-32: GPU only
            out.append(("single-tf32", d, bench_single, {"nosync": True, "tf32": True}, s))
        if args.device == "cuda" and not args.no_compile:  # CUDA graphs: GPU only
            out.append(("single-cudagraphs", d, bench_single, {"nosync": True, "cuda_graphs": True}, s))
            if args.bf16:
                out.append(("single-bf16-cudagraphs", d, bench_single, {"nosync": True, "bf16": True, "cuda_graphs": True}, s))
        for k in args.ks:
            if args.device == "cpu" and k * d > args.cpu_max_kd:
                continue  # too slow / large for the shared CPU
            ks = max(2, s * 4 // k) if args.device == "cpu" else s  # fixed, fewer steps for big K on CPU
            out.append((f"ensemble-{k}", d, bench_ensemble, {"k": k}, ks))
            if args.tf32:
                out.append((f"ensemble-{k}-tf32", d, bench_ensemble, {"k": k, "tf32": True}, ks))
            if args.bf16:
                out.append((f"ensemble-{k}-bf16", d, bench_ensemble, {"k": k, "bf16": True}, ks))
            if args.compile or (k in args.compile_ks and not args.no_compile):
                out.append((f"ensemble-{k}-compile", d, bench_ensemble, {"k": k, "compile": True}, ks))
                if args.bf16:
                    out.append((f"ensemble-{k}-bf16-compile", d, bench_ensemble, {"k": k, "bf16": True, "compile": True}, ks))
                if args.device == "cuda":
                    out.append((f"ensemble-{k}-cudagraphs", d, bench_ensemble, {"k": k, "cuda_graphs": True}, ks))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--d-models", default="64,160", help="comma-separated widths (default 64,160)")
    p.add_argument("--ks", default="4,8,32,128", help="ensemble sizes (default 4,8,32,128)")
    p.add_argument("--steps", type=int, default=32, help="timed steps per configuration (default 32; CPU ensembles of K > 4 use max(2, 4*steps/K))")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="measure each configuration this many times, interleaved; keep the best")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's default)")
    p.add_argument("--cpu-max-kd", type=int, default=64 * 128, help="on CPU, skip ensembles with K x d_model above this")
    p.add_argument("--gpu-full", action="store_true", help="GPU grid: K up to 300, 50 steps, with --compile and --bf16 variants")
    p.add_argument("--compile", action="store_true", help="time every ensemble size compiled too (by default only "
                   "those in --compile-ks)")
    p.add_argument("--compile-ks", default="8", help="ensemble sizes also timed with torch.compile (default 8, the "
                   "target's; on the CPU compiled groups train in one-thread processes, each compiling its step)")
    p.add_argument("--no-compile", action="store_true", help="no torch.compile variants (by default the single-model "
                   "trainer and the ensembles of --compile-ks are also timed with --compile)")
    p.add_argument("--bf16", action="store_true", help="add bf16-autocast variants (default where supported: a GPU, "
                   "or a CPU with native bf16)")
    p.add_argument("--no-bf16", action="store_true", help="no bf16 variants")
    p.add_argument("--no-tf32", action="store_true", help="no TensorFloat-32 variants (by default a GPU times the "
                   "single model and every ensemble with --tf32 too)")
    p.add_argument("--only", default=None, metavar="LIST", help="time only these configurations, e.g. "
                   "single,ensemble-300-bf16-compile (the naive baseline always runs: every ratio needs it); "
                   "for a short GPU lease")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.d_models = [int(v) for v in args.d_models.split(",")]
    args.ks = [int(v) for v in args.ks.split(",")]
    args.compile_ks = [int(v) for v in args.compile_ks.split(",") if v]
    if args.gpu_full:
        args.ks = sorted(set(args.ks) | {4, 8, 32, 64, 128, 300})
        args.steps, args.compile, args.bf16 = max(args.steps, 50), True, True
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device available")
    from trainers.evaluate import cpu_has_bf16
    from trainers.memory import keep_freed_memory

    keep_freed_memory()  # as the CPU trainers run, for every configuration (the naive baselines too)

    args.bf16 = (args.bf16 or device.type == "cuda" or cpu_has_bf16()) and not args.no_bf16
    args.tf32 = device.type == "cuda" and not args.no_tf32
    configs = plan(args)
    if args.only:
        wanted = set(args.only.split(",")) | {"naive"}
        unknown = sorted(wanted - {c[0] for c in configs})
        if unknown:
            p.error(f"--only: {', '.join(unknown)} not among this run's configurations "
                    f"({', '.join(dict.fromkeys(c[0] for c in configs))})")
        configs = [c for c in configs if c[0] in wanted]
    bounds = {d: arithmetic_bound(d, device) for d in args.d_models}
    best: dict[tuple[str, int], dict] = {}
    paired: dict[tuple[str, int], list[float]] = {}  # rate / the naive window measured just before it
    load_seen = []

    def measure(name, d, fn, kw, steps, r):
        lo = load()
        load_seen.append(lo)
        try:
            secs, k = fn(d, device, steps, args.warmup, **kw)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # memory: record and move on
            print(f"{name} d{d}: failed: {str(e).splitlines()[0]}", flush=True)
            return None
        rate = steps * BATCH * k / secs
        row = {"device": device.type, "d_model": d, "config": name, "models": k, "steps": steps,
               "seconds": round(secs, 3), "puzzles_per_s": round(rate, 1), "load1": round(lo, 2)}
        print(f"round {r} {name:>22} d{d:<4} K={k:<4} {steps:>3} steps {secs:7.2f} s  {rate:10.0f} puzzles/s  load {lo:.2f}", flush=True)
        worst = min(rate, best[(name, d)]["worst_round"]) if (name, d) in best else rate
        if (name, d) not in best or rate > best[(name, d)]["puzzles_per_s"]:
            best[(name, d)] = row
        best[(name, d)]["worst_round"] = round(worst, 1)
        return rate

    naive_cfg = {c[1]: c for c in configs if c[0] == "naive"}  # d_model -> the naive configuration
    for r in range(args.rounds):
        for name, d, fn, kw, steps in configs:
            if r > 0 and name.startswith("ensemble") and int(name.split("-")[1]) >= 128 and device.type == "cpu":
                continue  # one round for the biggest CPU ensembles (tens of seconds each)
            if name == "naive":
                continue
            # the naive loop right before each configuration: their ratio shares the machine's state
            base = measure(*naive_cfg[d], r)
            rate = measure(name, d, fn, kw, steps, r)
            if base and rate:
                paired.setdefault((name, d), []).append(rate / base)
            if not args.no_write:  # after every configuration: a run cut short (a GPU lease ending) keeps what it measured
                write(best, paired, device, load_seen, args, bounds, argv, rounds_done=r)
        if not args.no_write:
            write(best, paired, device, load_seen, args, bounds, argv, rounds_done=r + 1)
    if args.no_write:
        print(report(finish(best, paired), device, load_seen, args, bounds))
    return 0


def per_core_baseline(config: str) -> str:
    """The `single-parallel` variant a configuration is compared with: same precision, same compilation."""
    return ("single-parallel" + ("-bf16" if "bf16" in config else "")
            + ("-compile" if "compile" in config or "cudagraphs" in config else ""))


def finish(best: dict, paired: dict) -> list[dict]:
    """The result rows: best rounds with their ratios to the baselines and the sweep projection."""
    rows = [dict(r) for r in best.values()]
    for row in rows:
        key = (row["config"], row["d_model"])

        def ratio(baseline: str):  # this row's best round over the baseline's best round at the same width
            b = best.get((baseline, row["d_model"]))
            return round(row["puzzles_per_s"] / b["puzzles_per_s"], 2) if b else ""

        row["x_naive"] = ratio("naive")
        row["x_naive_paired"] = 1.0 if row["config"] == "naive" else (round(statistics.median(paired[key]), 2) if key in paired else "")
        row["x_naive_parallel"] = ratio("naive-parallel")
        row["x_single_parallel"] = ratio(per_core_baseline(row["config"]))
        row["sweep_hours"] = round(SWEEP_PUZZLES / row["puzzles_per_s"] / 3600, 1)
    return rows


def write(best, paired, device, loads, args, bounds, argv, rounds_done: int) -> None:
    """Write train.csv / train.md (train_cuda.* on a GPU) from the rounds measured so far."""
    final = rounds_done == args.rounds
    rows = finish(best, paired)
    text = report(rows, device, loads, args, bounds)
    if final:
        print(text)
    suffix = device_suffix(device)
    cmd = command_line("bench_train.py", argv)
    header = ["# Training throughput: naive loop vs our trainer vs the batched ensemble", "",
              f"Written by `{cmd.strip()}` (raw numbers: `train{suffix}.csv`). Each configuration runs a fixed "
              "number of optimizer steps (batch 128) after warm-up, interleaved over rounds, each right after a window "
              "of the naive loop; `puzzles/s` is its best round. `x naive` and `x naive-parallel` divide best "
              "rounds by best rounds (conservative: the baselines at their fastest); `x naive (paired)` is the "
              "median over rounds of the rate over the naive window just before it (robust to slow drift). On this "
              "VM, processes whose torch ops span both cores (naive, single) switch between a fast and a ~30% "
              "slower mode from one window to the next; one-thread workers (naive-parallel, ensembles) do not. "
              "`sweep_hours` projects the full paper sweep (300 runs x 4,000 epochs x 8,100 puzzles, training "
              "only) at the best measured aggregate rate. Every process runs with the malloc settings of the CPU "
              "trainers (`trainers.memory`), the naive baselines included (conservative: they gain a little too; "
              "`memory.md`).", ""]
    if not final:
        header += [f"**Partial: {rounds_done} of {args.rounds} rounds complete (and the configurations measured so far in "
                   "the next); the run had not finished when this was written.**", ""]
    write_results(args.out, f"train{suffix}", rows, "\n".join(header) + text + "\n")
    write_bounds(Path(args.out) / f"train_bound{suffix}.csv", bounds)


BOUND_FIELDS = ("d_model", "flops_naive", "flops_ours", "gemm_fp32", "gemm_tf32", "gemm_bf16")


def write_bounds(path: Path, bounds: dict) -> None:
    """The arithmetic bound's measured inputs, one row per width (FLOPs per puzzle, GEMM FLOP/s per
    precision; empty where not measured): the report's bound table is these divided."""
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=BOUND_FIELDS)
        w.writeheader()
        for d, b in bounds.items():
            w.writerow({"d_model": d, **{k: round(b[k], 1) for k in BOUND_FIELDS[1:] if k in b}})


GPU_D, GPU_X_NAIVE, GPU_SWEEP_HOURS = 160, 20.0, 2.0  # issue 7's GPU targets


def gpu_targets(by: dict, bounds: dict) -> list[str]:
    """The report's lines on issue 7's GPU targets at d_model 160: the best configuration against one naive
    process, the best projected full sweep, and the training arithmetic rate the sweep target needs."""
    rows = [r for (cfg, d), r in by.items() if d == GPU_D and cfg != "naive"]
    lines = ["", f"Targets (issue 7, GPU, d_model {GPU_D}):"]
    if not rows:
        return lines + [f"- not measured at d_model {GPU_D}"]
    fast = max(rows, key=lambda r: r["x_naive"] if r["x_naive"] != "" else -1)
    quick = min(rows, key=lambda r: r["sweep_hours"])
    for what, r, ok in ((f">= {GPU_X_NAIVE:g}x one naive process", fast, fast["x_naive"] != "" and fast["x_naive"] >= GPU_X_NAIVE),
                        (f"full paper sweep < {GPU_SWEEP_HOURS:g} h", quick, quick["sweep_hours"] < GPU_SWEEP_HOURS)):
        lines.append(f"- {what}: best {r['config']} at {r['x_naive']}x, {r['sweep_hours']} h: **{'met' if ok else 'NOT met'}**")
    if GPU_D in bounds:
        need = SWEEP_PUZZLES * bounds[GPU_D]["flops_ours"] / (GPU_SWEEP_HOURS * 3600)
        lines.append(f"- the {GPU_SWEEP_HOURS:g}-hour sweep needs {need / 1e12:.0f} TFLOP/s of training arithmetic, "
                     f"sustained ({bounds[GPU_D]['flops_ours'] / 1e6:.1f} MFLOP per puzzle x {SWEEP_PUZZLES:.3g} "
                     "puzzle-passes); compare the GEMM rates above")
    return lines


def bound_header(precisions: list[str]) -> str:
    """The arithmetic-bound table's header: four columns per precision measured."""
    cols = ["d_model", "MFLOP/puzzle naive", "MFLOP/puzzle ours"]
    for p in precisions:
        cols += [f"GEMM {p} (GFLOP/s)", f"bound {p} (puzzles/s)", f"bound {p} x naive", f"full sweep at bound {p} (h)"]
    return "| " + " | ".join(cols) + " |"


def report(rows, device, loads, args, bounds) -> str:
    lines = [f"Device: {device.type}; machine: {machine(device)}.",
             f"Load average (1 min) during the run: {min(loads):.2f} .. {max(loads):.2f} "
             f"(anything else running on the machine lowers absolute rates). `puzzles/s` is the best round, `worst "
             f"round` the slowest: processes whose torch ops span both cores (naive, single) vary most between rounds "
             f"on this virtual machine.", "",
             "| d_model | config | models | steps | seconds | puzzles/s | worst round | x naive | x naive (paired) | x naive-parallel "
             "| x single-parallel | full sweep (h) |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['d_model']} | {r['config']} | {r['models']} | {r['steps']} | {r['seconds']} | "
                     f"{r['puzzles_per_s']:.0f} | {r['worst_round']:.0f} | {r['x_naive']} | {r['x_naive_paired']} | "
                     f"{r['x_naive_parallel']} | {r['x_single_parallel']} | {r['sweep_hours']} |")
    lines.append("")
    lines.append(f"full sweep = {SWEEP_RUNS} runs x {SWEEP_EPOCHS} epochs x {N_TRAIN} puzzles at the measured rate "
                 f"(for ensembles, the aggregate rate; evaluation and checkpoint time not included).")
    by = {(r["config"], r["d_model"]): r for r in rows}
    precisions = [p for p in ("fp32", "tf32", "bf16") if any(f"gemm_{p}" in b for b in bounds.values())]
    lines += ["", "Arithmetic bound (measured in this run): training FLOPs per puzzle counted by torch's FlopCounterMode "
              "(naive: all 16 tokens through all 4 layers; ours: the last layer computes only the readout token), and "
              f"the rate of one matrix product of the model's shape, (128x16 x d) @ (d x 4d), at {torch.get_num_threads()} "
              "torch threads. `bound` = GEMM rate / FLOPs per puzzle: what a trainer doing only matrix products at that "
              "rate would reach, with zero cost for everything else (attention softmax, GELU, LayerNorm, optimizer)."
              + (" On a GPU it bounds one model only: a product of one model's shape is too small to reach the "
                 "device's rate, and batched ensembles pass it (K = 300 products ran at 280-490 TFLOP/s on an H200, "
                 "reports/benchmarks/gpu_session.md)." if device.type == "cuda" else ""), "",
              bound_header(precisions), "| ---: " * (3 + 4 * len(precisions)) + "|"]
    for d, b in bounds.items():
        naive = by.get(("naive", d), {}).get("puzzles_per_s")
        cells = [f"{b['flops_naive'] / 1e6:.1f}", f"{b['flops_ours'] / 1e6:.1f}"]
        for key in (f"gemm_{p}" for p in precisions):
            if key not in b:
                cells += ["", "", "", ""]
                continue
            bound = b[key] / b["flops_ours"]
            ratio = f"{bound / naive:.2f}" if naive else ""
            cells += [f"{b[key] / 1e9:.0f}", f"{bound:.0f}", ratio, f"{SWEEP_PUZZLES / bound / 3600:.1f}"]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    if device.type == "cuda":
        lines += gpu_targets(by, bounds)
    if device.type == "cpu":
        lines += ["", "Targets (issue 7, CPU, d_model 64), against `naive` (one companion-style process using every "
                  "core, the issue's baseline) and, stricter, `naive-parallel` (one such process per core, side by side):"]
        for cfg, target in (("ensemble-8", 3.0), ("ensemble-8-compile", 3.0), ("single", 1.5), ("single-compile", 1.5),
                            ("ensemble-8-bf16", 3.0), ("ensemble-8-bf16-compile", 3.0), ("single-bf16", 1.5),
                            ("single-bf16-compile", 1.5)):
            r = by.get((cfg, 64))
            if r is None:
                lines.append(f"- {cfg} >= {target}x naive: not measured")
                continue
            verdict = "met" if r["x_naive"] != "" and r["x_naive"] >= target else "NOT met"
            par = f"; {r['x_naive_parallel']}x naive-parallel" if r["x_naive_parallel"] != "" else ""
            lines.append(f"- {cfg} >= {target}x naive: measured {r['x_naive']}x (paired {r['x_naive_paired']}x): "
                         f"**{verdict}**{par}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
