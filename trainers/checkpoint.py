"""Checkpoints in the pe-probe format (DESIGN.md section 3): atomic writes, safe loads.

A checkpoint is a plain dict of tensors, numbers, strings and lists, so it loads with
``torch.load(path, weights_only=True)`` (no code is ever unpickled). Writes go to a temporary file in
the same folder, are flushed and fsynced, then renamed over the target, so a crash mid-write never
leaves a corrupt file under the final name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

import torch

from pe_probe.errors import InputError
from pe_probe.filechecks import check_safe_torch_loader
from pe_probe.torchfile import read_torch_file, torch_file_reason

FORMAT = "pe-probe-checkpoint/1"
CONTRACT_KEYS = ("format", "model", "config", "pe_params", "ground_truth", "step", "epoch", "metrics")


def make_payload(
    model: torch.nn.Module,
    config: dict[str, Any],
    ground_truth: Any,
    *,
    step: int,
    epoch: int,
    metrics: dict[str, float],
) -> dict[str, Any]:
    """Assemble the checkpoint dict. ``ground_truth`` has ``coords`` (N, k), ``kind`` and ``shape``."""
    payload: dict[str, Any] = {
        "format": FORMAT,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "config": config,
        "pe_params": list(model.pe_param_names()),
        "ground_truth": {
            "coords": torch.as_tensor(ground_truth.coords, dtype=torch.float64).clone(),
            "kind": str(ground_truth.kind),
            "shape": [int(s) for s in ground_truth.shape] if ground_truth.shape is not None else None,
        },
        "step": int(step),
        "epoch": int(epoch),
        "metrics": {str(k): float(v) for k, v in metrics.items()},
    }
    return payload


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a temp file in ``path``'s folder, flush + fsync, then ``os.replace`` it.

    A crash at any point leaves either the old file or the new one under ``path``, never a torn one;
    the temp file is removed on failure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 files; use the usual permissions
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable; not every filesystem allows fsync on a folder
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_checkpoint(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Write ``payload`` to ``path`` atomically with `torch.save` (see `atomic_write`)."""
    atomic_write(path, lambda f: torch.save(payload, f))


class CheckpointRefused(InputError):
    """`load_checkpoint`'s refusal of a file that is there: the message names the file and the fix;
    ``reason`` says only what is wrong with it, for callers that give their own fix (`check_run_dir`)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):  # raised in a worker process, it must unpickle in the parent
        return type(self), (str(self), self.reason)

    @property
    def brief(self) -> str:
        """The reason's first sentence: torch's miniz message runs on for 300 characters."""
        return self.reason.split(". ")[0]


TABLE_SUFFIXES = (".npy", ".npz", ".safetensors", ".csv", ".txt", ".json")  # files pe-probe analyze reads, not runs


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a pe-probe checkpoint with ``weights_only=True``; bad files raise InputError."""
    path = Path(path)
    if path.is_dir():
        hint = f"pass {path / 'last.pt'}" if (path / "last.pt").is_file() else "pass the .pt file of a run (e.g. RUN/last.pt)"
        raise InputError(f"{path} is a folder, not a checkpoint file; {hint}")
    if not path.is_file():
        raise InputError(f"checkpoint {path} not found; pass the .pt file of a run (e.g. RUN/last.pt)")
    if path.suffix.lower() in TABLE_SUFFIXES:  # else torch's reader words the refusal, about pickles
        raise CheckpointRefused(f"{path} is a {path.suffix} file, not a pe-probe checkpoint; pass the .pt file of a run "
                                f"(e.g. RUN/last.pt), or analyse a table with pe-probe analyze",
                                f"a {path.suffix} file, not a checkpoint")
    check_safe_torch_loader(path)
    try:
        ckpt = read_torch_file(path, map_location)
    except InputError as e:  # refused before torch read it (a pickle larger than any checkpoint's)
        raise CheckpointRefused(str(e), str(e).split("; ")[0]) from None
    except Exception as e:  # truncated file, foreign pickle, not a torch file at all, ...
        reason = torch_file_reason(e)
        raise CheckpointRefused(f"cannot read checkpoint {path}: {reason}; pass the .pt file of a run (e.g. RUN/last.pt)",
                                reason) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointRefused(f"{path} is not a pe-probe checkpoint (expected format {FORMAT!r}); pass the .pt file "
                                f"of a run of pe-probe train (e.g. RUN/last.pt), or analyse another model's PE table "
                                f"with pe-probe analyze", f"not format {FORMAT!r}")
    missing = [k for k in CONTRACT_KEYS if k not in ckpt]
    if missing:
        raise CheckpointRefused(f"checkpoint {path} lacks key(s) {', '.join(missing)}",
                                f"lacks key(s) {', '.join(missing)}")
    return ckpt


def last_epoch(run_dir: str | os.PathLike) -> int | None:
    """Epoch stored in RUN_DIR/last.pt, or None when there is none (or it cannot be read)."""
    path = Path(run_dir) / "last.pt"
    if not path.exists():
        return None
    check_safe_torch_loader(path)
    try:
        return int(read_torch_file(path)["epoch"])
    except Exception:  # a torn or foreign file: not finished
        return None
