"""Training loop for the masked-prediction tasks (netsim, brain), in the shape of `trainers.train`.

``train_masked(cfg, out_dir)``: prepare the run folder (``config.json``; resume from ``last.pt`` when
the config matches; shared with `trainers.train`), build the task's data once, then loop over epochs:
shuffle and draw fresh training masks from a generator seeded by (seed, epoch), step on the MSE of the
masked tokens, evaluate every ``eval_every`` epochs (``metrics.jsonl``: ``train_mse``, ``test_mse``,
``ood_mse``, ``ood_mse_noise``, ... each with ``<key>_zero``, the MSE of predicting zero, i.e. the mean), checkpoint every
``ckpt_every`` epochs and at the end (`trainers.checkpoint`, format ``pe-probe-checkpoint/1``, ground
truth = node / region coordinates). Evaluation masks are fixed per split by ``data.seed``, so every
run of a sweep is scored on the same masked tokens.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pe_probe.errors import InputError
from trainers.checkpoint import load_checkpoint
from trainers.config import MaskedTrainConfig, validate_masked
from trainers.console import print_line
from trainers.memory import keep_freed_memory
from trainers.masked_model import MaskedPETransformer, masked_input, masked_mse
from trainers.provenance import record_session
from trainers.train import (check_run_dir, checkpoints_at, epoch_bar, epoch_seed, evaluates_at, make_optimizer,
                            record_evaluation, restore_run, save_run_checkpoint, seed_everything, speed_setup,
                            start_run_dir)

EVAL_SPLITS_FIRST = ("train", "test", "ood")


@dataclass
class MaskedSplit:
    """x (M, N, T) float values; mask (M, N) bool fixed masks (None: drawn afresh, training); ratio."""

    x: torch.Tensor
    ratio: float
    mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])


def n_masked(ratio: float, n: int) -> int:
    """Tokens masked per example: round(ratio * N), at least 1 and at most N - 1."""
    return int(min(max(round(ratio * n), 1), n - 1))


def random_masks(m: int, n: int, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """(m, n) bool masks with exactly `n_masked(ratio, n)` True per row, uniformly at random."""
    k = n_masked(ratio, n)
    order = torch.rand(m, n, generator=generator).argsort(dim=1)
    mask = torch.zeros(m, n, dtype=torch.bool)
    mask.scatter_(1, order[:, :k], True)
    return mask


def load_task_data(cfg: MaskedTrainConfig) -> dict[str, Any]:
    """The task module's ``load_data`` (ground truth, splits as arrays, info)."""
    if cfg.task == "netsim":
        from trainers.tasks.netsim import load_data
    elif cfg.task == "brain":
        from trainers.tasks.brain import load_data
    else:
        raise InputError(f"unknown masked task {cfg.task!r}")
    return load_data(cfg.data)


def build_splits(cfg: MaskedTrainConfig, data: dict[str, Any], device: torch.device) -> dict[str, MaskedSplit]:
    """Tensors on the device; fixed evaluation masks for every split (training too, for train_mse)."""
    out = {}
    for i, (name, (x, ratio)) in enumerate(data["splits"].items()):
        xt = torch.as_tensor(np.asarray(x, dtype=np.float32))
        g = torch.Generator().manual_seed(cfg.data.seed * 1000 + 17 * i + 1)
        out[name] = MaskedSplit(xt.to(device), float(ratio), random_masks(xt.shape[0], xt.shape[1], ratio, g).to(device))
    return out


def build_model(cfg: MaskedTrainConfig, coords: Any, window: int) -> MaskedPETransformer:
    return MaskedPETransformer(cfg.model, cfg.pe, torch.as_tensor(np.asarray(coords)), n_in=window + 1, n_out=window)


def metric_key(split: str) -> str:
    """Metric name of a split: "train" -> train_mse, "ood" -> ood_mse, "ood_noise" -> ood_mse_noise."""
    head, _, rest = split.partition("_")
    return f"{head}_mse" + (f"_{rest}" if rest else "")


@torch.no_grad()
def split_mse(model: torch.nn.Module, split: MaskedSplit, prefix: str, batch_size: int = 1024) -> dict[str, float]:
    """``metric_key(prefix)`` (MSE over masked tokens) and that key + ``_zero`` (predicting 0 there)."""
    was = model.training
    model.eval()
    se = zero = 0.0
    count = 0
    for i in range(0, len(split), batch_size):
        x, m = split.x[i : i + batch_size], split.mask[i : i + batch_size]
        pred = model(masked_input(x, m))
        se += masked_mse(pred, x, m, reduction="sum").item()
        zero += masked_mse(torch.zeros_like(x), x, m, reduction="sum").item()
        count += int(m.sum().item()) * x.shape[-1]
    model.train(was)
    key = metric_key(prefix)
    return {key: se / max(count, 1), f"{key}_zero": zero / max(count, 1)}


def all_metrics(model: torch.nn.Module, splits: dict[str, MaskedSplit]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, split in splits.items():
        out.update(split_mse(model, split, name))
    return out


def masked_step(step_model: Callable, optimizer: torch.optim.Optimizer, x: torch.Tensor, mask: torch.Tensor,
                autocast: Any, precision: Any, mark_step: Callable[[], None]) -> torch.Tensor:
    """One optimizer step on the MSE of the masked tokens; returns the (detached) loss, left on the device.

    ``step_model``, ``autocast``, ``precision`` and ``mark_step`` come from `trainers.train.speed_setup`; the
    loss is taken in float32 whatever the autocast.
    """
    mark_step()
    with precision:
        with autocast:
            loss = masked_mse(step_model(masked_input(x, mask)).float(), x, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.detach()


def train_masked(
    cfg: MaskedTrainConfig,
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

    ``compile``, ``bf16``, ``cuda_graphs`` and ``tf32`` are the speed options of `trainers.train.train` (see
    `trainers.train.speed_setup`): not part of the config, so a run resumes with or without them; the loss
    is taken in float32 and evaluation runs the float32 eager model.
    """
    from trainers.evaluate import resolve_device

    validate_masked(cfg)
    out = Path(out_dir)
    log = log or print_line
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        keep_freed_memory()  # malloc keeps freed activation memory mapped: no page faults every step

    data = load_task_data(cfg)  # before the model: it fixes N, the coordinates and the window
    gt = data["ground_truth"]
    window = int(np.asarray(data["splits"]["train"][0]).shape[-1])

    seed_everything(cfg.seed)
    model = build_model(cfg, gt.coords, window).to(device)
    optimizer = make_optimizer(model, cfg)
    # speed options fail here, before the run folder is touched, where unsupported
    step_model, mark_step, autocast, precision, speed = speed_setup(model, device, compile=compile, bf16=bf16,
                                                                   cuda_graphs=cuda_graphs, tf32=tf32)

    resume = check_run_dir(cfg, out, force)
    if resume is not None and resume["epoch"] >= cfg.optim.epochs:
        log(f"{out}: run already finished at epoch {resume['epoch']} (ood_mse {resume['metrics'].get('ood_mse', float('nan')):.4f})")
        return dict(resume["metrics"])

    splits = build_splits(cfg, data, device)
    train_x = splits["train"].x
    n_train, n_tok = train_x.shape[0], train_x.shape[1]
    start_run_dir(cfg, out, resume)

    start_epoch, step, metrics, elapsed = restore_run(resume, model, optimizer, out, log)
    record_session(out, trainer="masked", device=str(device), start_epoch=start_epoch, torch_threads=torch.get_num_threads(),
                   **speed)

    def checkpoint(epoch: int) -> None:
        save_run_checkpoint(out, model, optimizer, cfg.to_dict(), gt, step=step, epoch=epoch, metrics=metrics,
                            elapsed_s=elapsed + time.time() - t0)

    epochs, bs, ratio = cfg.optim.epochs, cfg.optim.batch_size, cfg.data.mask_train
    t0 = time.time()
    bar = epoch_bar(out, cfg, start_epoch, n_train, "windows", device, log)
    for epoch in bar:
        g = torch.Generator().manual_seed(epoch_seed(cfg.seed, epoch))
        perm = torch.randperm(n_train, generator=g).to(device)
        masks = random_masks(n_train, n_tok, ratio, g).to(device)  # fresh masks every epoch
        torch.manual_seed(epoch_seed(cfg.seed, epoch))
        model.train()
        # the running loss stays on the device (no host synchronisation inside the step loop), summed in
        # float64 exactly as a Python float would sum it
        loss_sum, seen = torch.zeros((), dtype=torch.float64, device=device), 0
        for i in range(0, n_train, bs):
            idx = perm[i : i + bs]
            loss = masked_step(step_model, optimizer, train_x[idx], masks[idx], autocast, precision, mark_step)
            step += 1
            loss_sum += loss.double() * len(idx)
            seen += len(idx)
        if not bar.disable:  # one synchronisation per epoch, only when a progress bar is shown
            bar.set_postfix(loss=f"{loss_sum.item() / seen:.4f}")

        done = epoch + 1
        if evaluates_at(cfg, done):
            metrics = {"train_loss": loss_sum.item() / seen, **all_metrics(model, splits)}
            msg = (f"epoch {done}/{epochs} step {step}: train_mse {metrics['train_mse']:.4f} "
                   f"test_mse {metrics['test_mse']:.4f} ood_mse {metrics['ood_mse']:.4f} "
                   f"(zero: {metrics['ood_mse_zero']:.4f})")
            record_evaluation(out, metrics, epoch=done, step=step, seconds=elapsed + time.time() - t0, msg=msg,
                              bar=bar, log=log)
        if checkpoints_at(cfg, done):
            checkpoint(done)
    bar.close()
    return metrics


def evaluate_masked_checkpoint(path: str | os.PathLike, device: str = "cpu") -> dict[str, float | int]:
    """MSE of a netsim / brain checkpoint on every split of its own (regenerated) data."""
    from trainers.config import validate_masked
    from trainers.evaluate import check_weight_sizes, checked_coords, rebuilding_model, resolve_device

    dev = resolve_device(device)
    ckpt = load_checkpoint(path, map_location=dev)
    with rebuilding_model(path):
        cfg = validate_masked(MaskedTrainConfig.from_dict(ckpt["config"]))
    # an untrusted checkpoint: data sizes were checked with its config (`validate_masked`), weights before the model is built
    check_weight_sizes(cfg, ckpt.get("model"), path, n_in=cfg.data.window + 1)
    data = load_task_data(cfg)
    window = int(np.asarray(data["splits"]["train"][0]).shape[-1])
    coords = checked_coords(ckpt.get("ground_truth"), path, tuple(data["ground_truth"].coords.shape),
                            f"the {cfg.task} task's")
    with rebuilding_model(path):
        model = build_model(cfg, coords.to(ckpt["ground_truth"]["coords"].dtype), window).to(dev)  # as stored
        model.load_state_dict(ckpt["model"])
    splits = build_splits(cfg, data, dev)
    out = all_metrics(model, splits)
    for name, s in splits.items():
        out[f"{metric_key(name)}_n"] = len(s)  # a count: an integer in --json
    return out
