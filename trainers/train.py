"""The training loop: flat and visible, like nanoGPT's train.py.

One call, ``train(cfg, out_dir)``:
  1. prepare the run folder (``config.json``; resume from ``last.pt`` when the config matches),
  2. build the data once as tensors on the device, the model and the optimiser,
  3. loop over epochs: shuffle, step, evaluate every ``eval_every`` epochs (one JSON line in
     ``metrics.jsonl``), checkpoint every ``ckpt_every`` epochs and at the end.

Exact resume: each epoch's shuffle comes from a ``torch.Generator`` seeded by (seed, epoch), and
torch's global RNG (dropout) is re-seeded from (seed, epoch) at each epoch start, so a run resumed from
an epoch-boundary checkpoint reproduces the uninterrupted run bit for bit (on CPU).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F

from pe_probe.errors import InputError
from trainers.checkpoint import CheckpointRefused, atomic_write, load_checkpoint, make_payload, save_checkpoint
from trainers.config import TrainConfig, check_puzzle_file, validate
from trainers.console import print_line
from trainers.evaluate import bf16_autocast, encode_split, resolve_device, split_metrics, tf32_matmuls
from trainers.memory import keep_freed_memory
from trainers.model import PETransformer
from trainers.provenance import PROVENANCE_FILE, record_session

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
LAST = "last.pt"
CKPT_DIR = "checkpoints"
IGNORED_FOR_RESUME = ("device",)  # settings that may differ between a run and its resumption


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int) -> int:
    """A deterministic per-epoch seed derived from (seed, epoch)."""
    return (seed * 1_000_003 + epoch * 7_919 + 12_345) % (2**63 - 1)


def ground_truth(task: str):
    """The tokens' true coordinates for ``task`` (lst: the 4x4 grid, (row, col), row-major)."""
    from pe_probe.groundtruth import grid

    return grid(4, 4)


def read_ood_puzzles(cfg: TrainConfig) -> Any:
    """The held-out puzzles of ``--ood-puzzles`` (None without one), read and validated: called before
    the run folder is touched too, so a bad file leaves nothing behind."""
    from trainers.tasks.lst import read_puzzle_csv

    path = cfg.data.ood_puzzles
    if path is None:
        return None
    check_puzzle_file(path, "--ood-puzzles")
    return read_puzzle_csv(path)


def load_splits(cfg: TrainConfig) -> dict[str, Any]:
    """Generate train / test / OOD puzzle sets from the data config (OOD from a file when given)."""
    from trainers.tasks.lst import make_splits

    d = cfg.data
    ood = read_ood_puzzles(cfg)
    return make_splits(
        n_per_level=d.n_per_level,
        test_frac=d.test_frac,
        n_ood_per_level=d.n_ood_per_level,
        min_jaccard=d.min_jaccard,
        seed=d.seed,
        ood=ood,
    )


def evaluates_at(cfg: Any, epoch: int) -> bool:
    """Whether the trainers evaluate after ``epoch`` (counted from 1): every ``eval_every`` epochs, at the
    last, and at every checkpoint, so a checkpoint's metrics are those of its own epoch (DESIGN.md)."""
    return epoch % cfg.eval_every == 0 or checkpoints_at(cfg, epoch)


def start_message(name: str, cfg: Any, start_epoch: int, n_train: int, unit: str, device: Any) -> str:
    """The line a trainer prints as its epochs begin: without a progress bar (output piped to a file, or an
    ensemble) nothing else appears until the first evaluation, which can be many minutes away."""
    first = start_epoch + 1
    every = cfg.eval_every
    next_eval = next(e for e in range(first, cfg.optim.epochs + 1) if evaluates_at(cfg, e))
    return (f"{name}: training epochs {first}-{cfg.optim.epochs} on {device} ({n_train} {unit} per epoch); "
            f"evaluating every {every} epoch{'s' if every != 1 else ''}, first after epoch {next_eval}")


def epoch_bar(out: Path, cfg: Any, start_epoch: int, n_train: int, unit: str, device: Any,
              log: Callable[[str], None]) -> Any:
    """The epochs to train, as a progress bar on a terminal; elsewhere (output piped) no bar, and the
    `start_message` line instead."""
    from tqdm.auto import tqdm

    epochs = cfg.optim.epochs
    bar = tqdm(range(start_epoch, epochs), initial=start_epoch, total=epochs, desc=out.name,
               disable=not sys.stderr.isatty(), leave=False)
    if bar.disable:
        log(start_message(str(out), cfg, start_epoch, n_train, unit, device))
    return bar


def checkpoints_at(cfg: Any, epoch: int) -> bool:
    """Whether the trainers write a checkpoint after ``epoch``: every ``ckpt_every`` epochs and at the last."""
    return epoch % cfg.ckpt_every == 0 or epoch == cfg.optim.epochs


def checked_splits(cfg: TrainConfig) -> dict[str, Any]:
    """`load_splits`, refusing (InputError) a training set left empty by the data options."""
    splits = load_splits(cfg)
    if len(splits["train"]) == 0:
        raise InputError("no training puzzles left after filtering; lower --min-jaccard or raise --n-per-level")
    return splits


def check_cuda_graphs(device: torch.device, cuda_graphs: bool) -> None:
    if cuda_graphs and device.type != "cuda":
        raise InputError(f"--cuda-graphs needs a CUDA device (got {device.type}); use --device cuda, or --compile on the CPU")


# torch.compile's mode for a plain --compile (None: its default). An experiment hook for the benchmarks
# (`analyses/benchmarks/profile_step.py --compile-mode`): "max-autotune-no-cudagraphs" lets Inductor time its own
# matrix-product templates (Triton on a GPU, C++ on the CPU) against cuBLAS / oneDNN and fuse bias / GELU
# epilogues into them, at a compile cost measured in minutes (on the H200 it did not finish compiling in 200 s,
# reports/benchmarks/gpu_session.md; on an AVX-512 CPU it gained nothing, reports/benchmarks/cpu-avx512/autotune/).
COMPILE_MODE: str | None = None


def compiled_step(fn: Callable, device: torch.device, compile: bool, cuda_graphs: bool = False,
                  cpp_wrapper: bool = False) -> tuple[Callable, Callable[[], None]]:
    """The training step's function as it runs (eager, `torch.compile`d, or compiled with CUDA graphs)
    and what to call before each step (marks a new CUDA-graph iteration; nothing otherwise).

    ``cuda_graphs`` is torch.compile's ``reduce-overhead`` mode: each compiled graph is recorded once and
    replayed as one CUDA graph launch, removing the per-kernel launch cost that dominates small models on
    a GPU. CUDA only (an `InputError` elsewhere, before anything is written). ``cpp_wrapper``: the compiled
    graphs call their kernels from generated C++ instead of Python (Inductor's C++ wrapper; see
    `CPP_WRAPPER_CPU_FLOAT32`); not with an experiment's `COMPILE_MODE`, which torch.compile takes instead.
    """
    check_cuda_graphs(device, cuda_graphs)
    # dynamic=False: an epoch's last, smaller batch compiles a second static graph. By default it would
    # compile a graph dynamic in the batch size, which Dynamo then runs for every later full batch too.
    if cuda_graphs:
        return torch.compile(fn, mode="reduce-overhead", dynamic=False), torch.compiler.cudagraph_mark_step_begin
    if not compile:
        return fn, lambda: None
    if cpp_wrapper and COMPILE_MODE is None:
        return torch.compile(fn, dynamic=False, options={"cpp_wrapper": True}), lambda: None
    return torch.compile(fn, dynamic=False, mode=COMPILE_MODE), lambda: None


# A compiled float32 single-model step on the CPU runs Inductor's C++ wrapper: the Python one took 8% of the
# step's profiled time at d_model 64 (reports/benchmarks/cpu-avx2-r3/profile-single-compile). Measured on an
# AVX2 CPU, two threads: the step 2.5-2.7% faster (every one of 12 processes of the paired in-process A/B,
# reports/benchmarks/cpu-avx2-r6/; the per-process A/Bs of cpu-avx2-r5/ pointed the same way). bf16 steps
# (not measured) keep the Python one. The ensemble's float32 groups had it unresolved (0.983 [0.964, 1.004]:
# cpu-avx2-r7/) until they took their batch in chunks (`trainers.ensemble.cpu_chunk`, four graph calls a step):
# then 0.966 [0.948, 0.986], two processes side by side (reports/benchmarks/cpu-avx512bf16-intel-r2/paired-cpp-wrapper/),
# so they have it too.
CPP_WRAPPER_CPU_FLOAT32 = True


def cpp_wrapper_for(device: torch.device, bf16: bool) -> bool:
    """Whether a compiled training step runs Inductor's C++ wrapper: float32 steps on the CPU
    (`CPP_WRAPPER_CPU_FLOAT32`)."""
    return CPP_WRAPPER_CPU_FLOAT32 and device.type == "cpu" and not bf16


@dataclass(frozen=True)
class SpeedOptions:
    """The trainers' speed options, which are not part of a run's config: as `train` / `train_masked`
    keywords (`kwargs`), as ``pe-probe train`` flags (`cli_args`), checked for a device (`check`)."""

    compile: bool = False
    bf16: bool = False
    cuda_graphs: bool = False
    tf32: bool = False

    def kwargs(self) -> dict[str, bool]:
        return {"compile": self.compile, "bf16": self.bf16, "cuda_graphs": self.cuda_graphs, "tf32": self.tf32}

    def cli_args(self) -> list[str]:
        return [flag for flag, on in (("--compile", self.compile), ("--bf16", self.bf16),
                                      ("--cuda-graphs", self.cuda_graphs), ("--tf32", self.tf32)) if on]

    def gpu_only(self) -> list[str]:
        """The flags of the options that are on and run only on a CUDA GPU."""
        return [flag for flag, on in (("--cuda-graphs", self.cuda_graphs), ("--tf32", self.tf32)) if on]

    def check(self, device: torch.device) -> None:
        """An `InputError` (one line) where ``device`` cannot run these options."""
        check_cuda_graphs(device, self.cuda_graphs)
        bf16_autocast(device, self.bf16)
        tf32_matmuls(device, self.tf32)

    def recorded(self) -> dict[str, bool]:
        """The settings a training session records in ``provenance.jsonl`` (CUDA graphs compile too)."""
        return {"bf16": self.bf16, "compile": self.compile or self.cuda_graphs, "cuda_graphs": self.cuda_graphs,
                "tf32": self.tf32}


def speed_setup(model: torch.nn.Module, device: torch.device, *, compile: bool = False, bf16: bool = False,
                cuda_graphs: bool = False, tf32: bool = False) -> tuple[Callable, Callable[[], None], Any, Any, dict[str, bool]]:
    """The speed options of a single-model trainer (LST and masked tasks alike), checked before anything
    is written: (the model as the training step calls it, what to call before each step, the autocast
    context for the forward pass and loss, the precision context for the whole step (forward, backward,
    optimizer: TF32 matrix products with ``tf32``), the settings to record in ``provenance.jsonl``).

    The stepping model shares its parameters with ``model``; evaluation keeps using ``model`` (eager,
    float32, outside both contexts), so metrics are comparable across speed options.
    """
    speed = SpeedOptions(compile=compile, bf16=bf16, cuda_graphs=cuda_graphs, tf32=tf32)
    speed.check(device)
    step_model, mark_step = compiled_step(model, device, compile, cuda_graphs, cpp_wrapper=cpp_wrapper_for(device, bf16))
    return step_model, mark_step, bf16_autocast(device, bf16), tf32_matmuls(device, tf32), speed.recorded()


def lst_step(step_model: Callable, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
             autocast: Any, precision: Any, mark_step: Callable[[], None]) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on the cross-entropy of a batch; returns (logits, loss), left on the device.

    ``step_model``, ``autocast``, ``precision`` and ``mark_step`` come from `speed_setup`: the precision
    context covers the whole step (forward, backward, optimizer), autocast the forward pass; the loss is
    taken in float32 whatever the autocast.
    """
    mark_step()
    with precision:  # TF32 matrix products for the whole step with --tf32 (a no-op otherwise)
        with autocast:
            logits = step_model(x)
            loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return logits, loss


def fused_adamw_supported(params: Iterable[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW kernel takes these tensors (float32 on CPU or CUDA)."""
    return all(p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 for p in params)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (torch's fused kernel on CPU and CUDA: one pass over all parameters, ~7% faster steps on
    this CPU than the default; same update rule) or SGD with momentum."""
    o = cfg.optim
    if o.name == "adamw":
        fused = fused_adamw_supported(model.parameters())
        return torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=o.weight_decay, fused=fused or None)
    return torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)


# ----------------------------------------------------------------------------------------------
# Run folder


def flatten_config(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as dotted keys: {"optim.lr": 0.001, ...}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# Keys older configs lack: absent in a run's stored config, they do not make a resume "another config"
RECORDED_SINCE = ("data.ood_puzzles_sha256", "data.coords_file_sha256")
# sha256 keys of files a run reads -> the key of that file's path (a resume with the file edited names it)
FILE_HASHES = {"data.ood_puzzles_sha256": "data.ood_puzzles", "data.coords_file_sha256": "data.coords_file"}


def config_differences(old: dict[str, Any], new: dict[str, Any],
                       ignore: tuple[str, ...] = IGNORED_FOR_RESUME) -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) for each setting that differs between two config dicts (nested or
    already flat), sorted by key, keys in ``ignore`` left out; a key missing on one side has the value None there.
    Momentum is left out where neither side trains with SGD: AdamW ignores it (configs written before
    `trainers.config.reset_ignored_momentum` may hold any value)."""
    a, b = flatten_config(old), flatten_config(new)
    if "sgd" not in (a.get("optim.name"), b.get("optim.name")):
        ignore = (*ignore, "optim.momentum")
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if k not in ignore and a.get(k) != b.get(k) and not (k in RECORDED_SINCE and a.get(k) is None)]


def edited_file(diff: list[tuple[str, Any, Any]], new: dict[str, Any]) -> str | None:
    """The path of a file the run reads whose content changed (its sha256 differs, its path does not), if any."""
    changed, flat = {k for k, _, _ in diff}, flatten_config(new)
    return next((flat[path] for key, path in FILE_HASHES.items()
                 if key in changed and path not in changed and flat.get(path) is not None), None)


def _write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


RUN_FILES = (LAST, METRICS_FILE, CONFIG_FILE, PROVENANCE_FILE)  # what a run writes in its folder, with CKPT_DIR
# What pe-probe's own sweep pipelines (analyses.lst: runner, ray_runner, analyse) put in a run folder: the
# run's spec and log, written before the trainer starts, and the analysis cache. They belong to the run:
# `check_run_dir` accepts them and a fresh start keeps them.
PIPELINE_FILES = ("spec.json", "train.log", "analysis.json")


def _is_run_temp(name: str) -> bool:
    """A temp file `atomic_write` left behind when the process was killed mid-write (``.last.pt.x1y2.tmp``)."""
    return name.endswith(".tmp") and any(name.startswith(f".{f}.") for f in RUN_FILES)


def _clear_run(out: Path) -> None:
    """Remove what a previous run wrote (only our own files)."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for p in out.glob(".*.tmp"):
        if _is_run_temp(p.name):
            p.unlink(missing_ok=True)
    if (out / CKPT_DIR).is_dir():
        shutil.rmtree(out / CKPT_DIR)


def _trim_metrics(path: Path, max_epoch: int) -> str | None:
    """Keep only metric lines up to ``max_epoch`` (lines written after the last checkpoint are redone). Returns a
    note when the log is missing although a run resumes after epoch 0 (the resumed log starts at that epoch: the
    lines before it are gone, the checkpoints keep their own epochs' metrics)."""
    if not path.exists():
        if max_epoch > 0:
            return (f"note: {path} is missing, so the log restarts after epoch {max_epoch} (the evaluations before it "
                    f"are not in it; each checkpoint in {path.parent / 'checkpoints'} keeps its own epoch's metrics)")
        return None
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["epoch"] <= max_epoch:
                keep.append(line)
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line from a crash
    _write_text_atomic(path, "".join(line + "\n" for line in keep))
    return None


class RunDirRefused(InputError):
    """`check_run_dir`'s refusal of a run folder. The message is ``[--out ]SUBJECT REASON; FIX``; ``subject``
    (the folder, or the file in it, that is refused) and ``reason`` (why, without the fix, whose flags are the
    trainer's) are kept apart for callers that name the folder their own way (the sweep pipelines), and so are
    all the config ``differences`` ((key, old, new), `config_differences`) when another config was refused."""

    def __init__(self, subject: Path, reason: str, fix: str, flag: bool = False,
                 differences: tuple[tuple[str, Any, Any], ...] = ()):
        super().__init__(f"{'--out ' if flag else ''}{subject} {reason}; {fix}")
        self.subject, self.reason, self.fix, self.flag = subject, reason, fix, flag
        self.differences = tuple(differences)

    def __reduce__(self):  # raised in a worker process (a sweep's process pool), it must unpickle in the parent
        return type(self), (self.subject, self.reason, self.fix, self.flag, self.differences)


def _read_config(out: Path) -> dict[str, Any]:
    from pe_probe.errors import InputError
    from pe_probe.io import MAX_META_DEPTH, plain_meta

    path = out / CONFIG_FILE
    try:  # plain_meta: also what config_differences can walk
        return plain_meta(json.loads(path.read_text()), CONFIG_FILE, str(path))
    except (InputError, RecursionError):  # nested past MAX_META_DEPTH, or past json's own stack (InputError first:
        reason = f"is nested deeper than {MAX_META_DEPTH} levels, not a run's config"  # it is a ValueError)
    except ValueError:
        reason = "is not valid JSON"
    raise RunDirRefused(path, reason, f"use --force to restart the run in {out}") from None


def _shown(key: str, value: Any) -> str:
    """A config value for a refusal: a file's sha256 cut to its first 12 digits (64 made the line unreadable)."""
    return repr(f"{value[:12]}...") if key in FILE_HASHES and isinstance(value, str) else repr(value)


def _refuse_other_config(out: Path, old: dict[str, Any], new: dict[str, Any], what: str) -> None:
    diff = config_differences(old, new)
    if diff:
        diff.sort(key=lambda d: d[0] != "task")  # another task first: it explains every other difference
        shown = ", ".join(f"{k} ({_shown(k, was)} -> {_shown(k, now)})" for k, was, now in diff[:3])
        shown += f" and {len(diff) - 3} more" if len(diff) > 3 else ""
        edited = edited_file(diff, new)  # in the reason: the sweep pipelines show it with their own fix
        shown += f" ({edited} has changed since the run was trained)" if edited else ""
        fix = f"{'restore it, or ' if edited else ''}use another --out, or --force to restart"
        raise RunDirRefused(out, f"holds {what} with a different config: {shown}", fix, differences=tuple(diff))


def check_run_dir(cfg: TrainConfig, out: Path, force: bool) -> dict[str, Any] | None:
    """Whether ``out`` may take this run, and the checkpoint to resume from (None: start fresh); writes nothing.

    A folder with ``last.pt`` is resumed only with the same config. Without one, a folder may hold only
    what this same run wrote before its first checkpoint (config.json, metrics.jsonl, provenance.jsonl),
    which a fresh start replaces, and the sweep pipelines' `PIPELINE_FILES`; anything else (another
    program's files, step checkpoints whose ``last.pt`` was removed) is refused rather than deleted.
    ``force`` restarts, deleting the run files. A refusal is a `RunDirRefused` (a one-line `InputError`).
    """
    if out.exists() and not out.is_dir():
        raise RunDirRefused(out, "is a file, not a run folder", "choose another path", flag=True)
    if force or not out.is_dir():
        return None
    new = cfg.to_dict()
    if (out / LAST).exists():
        if not (out / CONFIG_FILE).exists():
            raise RunDirRefused(out, f"has {LAST} but no {CONFIG_FILE}", "use another --out, or --force to restart")
        _refuse_other_config(out, _read_config(out), new, "a run")
        try:
            resume = load_checkpoint(out / LAST)
        except CheckpointRefused as e:  # torn or foreign; the loader's fix ("pass the .pt file of a run") is not ours
            raise RunDirRefused(out / LAST, f"does not load as a pe-probe checkpoint ({e.brief}), so the run cannot "
                                "resume", "use --force to restart it, or another --out") from None
        if "optimizer" not in resume and resume["epoch"] < cfg.optim.epochs:
            raise RunDirRefused(out / LAST, "holds no optimizer state (a checkpoints/step-*.pt copied over it?), so the "
                                "run cannot resume exactly", "use --force to restart it")
        return resume
    names = {p.name for p in out.iterdir() if not _is_run_temp(p.name)}
    other = sorted(names - {CONFIG_FILE, METRICS_FILE, PROVENANCE_FILE, *PIPELINE_FILES})
    if other:
        what = (f"{CKPT_DIR}/ but no {LAST} to resume from" if other == [CKPT_DIR] else
                f"files that are not this run's ({', '.join(other[:4])}{', ...' if len(other) > 4 else ''})")
        raise RunDirRefused(out, f"holds {what}", f"choose another --out, or pass --force to start over there "
                            f"(which deletes its {', '.join(RUN_FILES)} and {CKPT_DIR}/)", flag=True)
    if CONFIG_FILE in names:
        _refuse_other_config(out, _read_config(out), new, "the start of a run")
    return None


def start_run_dir(cfg: TrainConfig, out: Path, resume: dict[str, Any] | None) -> None:
    """Create the run folder for a run `check_run_dir` accepted; a fresh start clears earlier run files."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create it ({e.strerror or e}); choose another folder") from None
    if resume is None:
        _clear_run(out)
    _write_text_atomic(out / CONFIG_FILE, json.dumps(cfg.to_dict(), indent=2) + "\n")


# ----------------------------------------------------------------------------------------------
# The loop


def in_layout_of(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` in ``like``'s memory layout (strides), keeping t's dtype: t itself when they already agree, else
    a copy. torch's fused AdamW on the CPU silently mixes up elements when a parameter and its gradient or
    state differ in strides (a first step measured off by 2 lr)."""
    return t if t.stride() == like.stride() else torch.empty_like(like, dtype=t.dtype).copy_(t)


def match_state_layout(optimizer: torch.optim.Optimizer) -> None:
    """Put each loaded state tensor (exp_avg, momentum_buffer, ...) in its parameter's memory layout
    (`in_layout_of`): ``load_state_dict`` keeps the saved tensors' strides, so a checkpoint whose state was
    written in another layout must not reach the fused kernel as it is."""
    for p, st in optimizer.state.items():
        for key, v in st.items():
            if isinstance(v, torch.Tensor) and v.shape == p.shape and v.dim():
                st[key] = in_layout_of(v, p)


def restore_run(resume: dict[str, Any] | None, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                out: Path, log: Callable[[str], None]) -> tuple[int, int, dict[str, float], float]:
    """Load a resumed run's weights and optimizer state; return (epoch, step, metrics, elapsed seconds)."""
    if resume is None:
        return 0, 0, {}, 0.0
    model.load_state_dict(resume["model"])
    optimizer.load_state_dict(resume["optimizer"])
    match_state_layout(optimizer)
    note = _trim_metrics(out / METRICS_FILE, resume["epoch"])
    log(f"{out}: resuming from epoch {resume['epoch']} (step {resume['step']})")
    if note:
        log(note)
    return resume["epoch"], resume["step"], dict(resume["metrics"]), float(resume.get("elapsed_s", 0.0))


def save_run_checkpoint(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg_dict: dict,
                        gt: Any, *, step: int, epoch: int, metrics: dict[str, float], elapsed_s: float) -> None:
    """Write checkpoints/step-XXXXXXXX.pt with the weights and metrics (what the analyses read) and last.pt
    with the optimizer state too (what a resume needs), each atomically. Why not the optimizer state in
    every step file: Adam's two moments are twice the weights, so a paper run's 16 step files would hold
    32 copies of its weights for nothing (the paper sweep: ~71 GiB of checkpoints instead of ~27 GiB)."""
    payload = make_payload(model, cfg_dict, gt, step=step, epoch=epoch, metrics=metrics)
    payload["elapsed_s"] = elapsed_s
    save_checkpoint(payload, out / CKPT_DIR / f"step-{step:08d}.pt")
    save_checkpoint({**payload, "optimizer": optimizer.state_dict()}, out / LAST)


def record_evaluation(out: Path, metrics: dict[str, float], *, epoch: int, step: int, seconds: float, msg: str,
                      bar: Any, log: Callable[[str], None]) -> None:
    """Append one line to metrics.jsonl and show ``msg`` (above the progress bar when one is shown)."""
    line = {"epoch": epoch, "step": step, "time": round(seconds, 3), **metrics}
    with open(out / METRICS_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")
    if bar.disable:
        log(msg)
    else:
        bar.write(msg)


def train(
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    *,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    compile: bool = False,
    bf16: bool = False,
    cuda_graphs: bool = False,
    tf32: bool = False,
) -> dict[str, float]:
    """Train (or resume, or report a finished run) and return the last evaluation's metrics.

    ``compile`` wraps the model in `torch.compile` for the training steps (``cuda_graphs``: with CUDA
    graphs, see `compiled_step`); ``bf16`` runs them under bf16 autocast (GPU, or a CPU with native
    bf16; see `bf16_autocast`); ``tf32`` runs their float32 matrix products in TensorFloat-32 (CUDA
    GPU; see `trainers.evaluate.tf32_matmuls`). All are speed options, not
    part of the run's config, so a run can be resumed with or without them (results then differ within
    floating-point tolerance).
    """
    validate(cfg)
    out = Path(out_dir)
    log = log or print_line
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        keep_freed_memory()  # malloc keeps freed activation memory mapped: no page faults every step
    gt = ground_truth(cfg.task)

    # model and optimiser first (init depends on the seed only; bad PE/width combinations fail here,
    # before the run folder is touched)
    seed_everything(cfg.seed)
    model = PETransformer(cfg.model, cfg.pe, torch.as_tensor(gt.coords)).to(device)
    optimizer = make_optimizer(model, cfg)
    # speed options fail here, before the run folder is touched, where unsupported
    step_model, mark_step, autocast, precision, speed = speed_setup(model, device, compile=compile, bf16=bf16,
                                                                   cuda_graphs=cuda_graphs, tf32=tf32)

    resume = check_run_dir(cfg, out, force)
    if resume is not None and resume["epoch"] >= cfg.optim.epochs:
        log(f"{out}: run already finished at epoch {resume['epoch']} (ood_acc {resume['metrics'].get('ood_acc', float('nan')):.3f})")
        return dict(resume["metrics"])

    # data, once, as tensors on the device (a bad --ood-puzzles file or data options fail here, before
    # the run folder is touched)
    splits = {name: encode_split(ps, device) for name, ps in checked_splits(cfg).items()}
    train_split = splits["train"]
    n_train = len(train_split)
    start_run_dir(cfg, out, resume)

    start_epoch, step, metrics, elapsed = restore_run(resume, model, optimizer, out, log)
    record_session(out, trainer="single", device=str(device), start_epoch=start_epoch,
                   torch_threads=torch.get_num_threads(), **speed)

    def checkpoint(epoch: int) -> None:
        save_run_checkpoint(out, model, optimizer, cfg.to_dict(), gt, step=step, epoch=epoch, metrics=metrics,
                            elapsed_s=elapsed + time.time() - t0)

    epochs, bs = cfg.optim.epochs, cfg.optim.batch_size
    t0 = time.time()
    bar = epoch_bar(out, cfg, start_epoch, n_train, "puzzles", device, log)
    for epoch in bar:
        # per-epoch randomness derived from (seed, epoch): the shuffle and the global RNG (dropout)
        g = torch.Generator().manual_seed(epoch_seed(cfg.seed, epoch))
        perm = torch.randperm(n_train, generator=g).to(device)
        torch.manual_seed(epoch_seed(cfg.seed, epoch))
        model.train()
        # running loss / accuracy stay on the device: no host synchronisation inside the step loop
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = 0
        for i in range(0, n_train, bs):
            idx = perm[i : i + bs]
            logits, loss = lst_step(step_model, optimizer, train_split.x[idx], train_split.y[idx], autocast, precision,
                                    mark_step)
            step += 1
            loss_sum += loss.detach() * len(idx)
            correct += (logits.argmax(-1) == train_split.y[idx]).sum()
            seen += len(idx)
        if not bar.disable:  # one synchronisation per epoch, only when a progress bar is shown
            bar.set_postfix(loss=f"{loss_sum.item() / seen:.3f}", acc=f"{correct.item() / seen:.3f}")

        done = epoch + 1
        if evaluates_at(cfg, done):
            metrics = {}
            for name, split in splits.items():
                metrics.update(split_metrics(model, split, name))
            msg = (f"epoch {done}/{epochs} step {step}: train_loss {metrics['train_loss']:.4f} "
                   f"train_acc {metrics['train_acc']:.3f} test_acc {metrics.get('test_acc', float('nan')):.3f} "
                   f"ood_acc {metrics.get('ood_acc', float('nan')):.3f}")
            record_evaluation(out, metrics, epoch=done, step=step, seconds=elapsed + time.time() - t0, msg=msg,
                              bar=bar, log=log)
        if checkpoints_at(cfg, done):
            checkpoint(done)
    bar.close()
    return metrics
