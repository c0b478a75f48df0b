"""Accuracy per difficulty level, for one split in memory or for a checkpoint on a puzzle file."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from trainers.checkpoint import load_checkpoint
from trainers.config import TrainConfig, puzzle_file_sha256
from trainers.model import PETransformer


@dataclass
class Split:
    """One encoded split on the training device: x (M, 16, 5) float, y (M,) int64 0..3, levels (M,) int64."""

    x: Tensor
    y: Tensor
    levels: Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


def encode_split(ps: Any, device: str | torch.device = "cpu") -> Split:
    """Encode a `PuzzleSet` once into tensors on ``device``."""
    from trainers.tasks.lst import encode

    x, y = encode(ps)
    levels = torch.as_tensor(ps.levels, dtype=torch.int64)
    return Split(torch.as_tensor(x).to(device), torch.as_tensor(y).to(device), levels.to(device))


# Puzzles per evaluation batch (per member in an ensemble). Larger batches fall out of the CPU's cache:
# at 2048 per member an ensemble of 4 evaluated much slower than at 256 on this 2-core CPU.
EVAL_BATCH = 256


def batch_logits(model: torch.nn.Module, split: Split, batch_size: int = EVAL_BATCH) -> Iterator[tuple[Tensor, Tensor]]:
    """``(logits, answers)`` of ``split`` in batches of ``batch_size``, in order (the caller sets eval mode and
    no_grad)."""
    for i in range(0, len(split), batch_size):
        yield model(split.x[i : i + batch_size]), split.y[i : i + batch_size]


@torch.no_grad()
def split_metrics(model: torch.nn.Module, split: Split, prefix: str, batch_size: int = EVAL_BATCH) -> dict[str, float]:
    """``{prefix}_acc``, ``{prefix}_loss`` and ``{prefix}_acc_<level>`` for each level present."""
    from trainers.tasks.lst import LEVELS

    was_training = model.training
    model.eval()
    correct, losses = [], []
    for logits, y in batch_logits(model, split, batch_size):
        correct.append(logits.argmax(-1) == y)
        losses.append(F.cross_entropy(logits, y, reduction="sum"))
    model.train(was_training)
    if not correct:
        return {}
    correct_t = torch.cat(correct).float()
    out = {f"{prefix}_acc": correct_t.mean().item(), f"{prefix}_loss": (torch.stack(losses).sum() / len(split)).item()}
    for i, name in enumerate(LEVELS):
        mask = split.levels == i
        if mask.any():
            out[f"{prefix}_acc_{name.lower()}"] = correct_t[mask].mean().item()
    return out


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda when available, else cpu."""
    from pe_probe.errors import InputError

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda requested but no CUDA device is available; use --device cpu or auto")
    return torch.device(device)


def cpu_has_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (oneDNN's check: AVX512-BF16 or AMX)."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_autocast(device: torch.device, enabled: bool = True) -> Any:
    """bf16 autocast on ``device`` (a no-op context when not enabled); an InputError where bf16 is unsupported.

    On a GPU the usual mixed precision. On the CPU it needs native bf16 matrix units (AVX512-BF16 / AMX),
    where the matrix products run about twice as fast (`trainers.model.attend`: attention's two products in
    bf16 up to 512 tokens, the fused float32 kernel beyond); LayerNorm and softmax stay float32 (autocast).
    Results differ from float32 training at bf16 precision (about 3 significant digits per product).
    """
    from pe_probe.errors import InputError

    if not enabled:
        return contextlib.nullcontext()
    if device.type == "cpu" and not cpu_has_bf16():
        raise InputError("--bf16 on the CPU needs native bf16 support (AVX512-BF16 or AMX), which this CPU lacks; "
                         "drop --bf16 or use --device cuda")
    return torch.autocast(device.type, dtype=torch.bfloat16)


class MatmulPrecision:
    """A reusable context that sets torch's float32 matrix-product precision (``"high"``: TF32 on CUDA
    tensor cores; ``"highest"``: IEEE float32) and restores the previous one on exit; re-entered once per
    training step, so the setting covers the step (forward, backward, optimizer) and nothing else:
    evaluation keeps the process's setting. The setting is process-wide: threads that step concurrently
    must use the same value.

    Set through ``torch.set_float32_matmul_precision``, which keeps torch's legacy TF32 flags and the
    newer ``fp32_precision`` ones in agreement: setting only ``torch.backends.cuda.matmul.fp32_precision``
    leaves them mixed, and code that reads the legacy flags then fails ("mix of the legacy and new
    APIs"): torch.compile's lowering of matrix products on the GPU did (pytorch/pytorch#166387, torch 2.10).
    """

    def __init__(self, precision: str):
        self.precision = precision
        self._saved: list[str] = []

    def __enter__(self) -> "MatmulPrecision":
        self._saved.append(torch.get_float32_matmul_precision())
        torch.set_float32_matmul_precision(self.precision)
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.set_float32_matmul_precision(self._saved.pop())


def tf32_matmuls(device: torch.device, enabled: bool = True) -> Any:
    """TensorFloat-32 float32 matrix products on a CUDA GPU (a no-op context when not enabled); an
    InputError on any other device.

    TF32 rounds the inputs of each float32 matrix product to a 10-bit mantissa on the tensor cores and
    accumulates in float32 (torch's ``set_float32_matmul_precision("high")`` for cuBLAS); parameters,
    activations and every other op stay float32. A middle road between float32 and ``--bf16``.
    """
    from pe_probe.errors import InputError

    if not enabled:
        return contextlib.nullcontext()
    if device.type != "cuda":
        raise InputError(f"--tf32 needs a CUDA GPU (TensorFloat-32 is an NVIDIA tensor-core format; the device is "
                         f"{device.type}); drop --tf32, or use --bf16 on a CPU with native bf16")
    return MatmulPrecision("high")


@contextlib.contextmanager
def rebuilding_model(path: Any) -> Iterator[None]:
    """Context for rebuilding a model from a checkpoint's config and weights: a file whose config and
    weights disagree (edited, truncated, or from other code) fails with a one-line InputError naming
    the file, not a traceback from deep inside torch."""
    from pe_probe.errors import InputError

    try:
        yield
    except Exception as exc:
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        if isinstance(exc, InputError):  # the trainer's config checks: they name its flags, so say whose config
            raise InputError(f"{path}: its saved config is not one the trainer accepts ({text}); was the "
                             f"checkpoint edited? re-train or re-save it") from None
        raise InputError(f"{path}: its config and weights do not rebuild the model it was saved from "
                         f"({type(exc).__name__}: {text}); was the checkpoint edited? re-train or re-save it") from None


def model_from_checkpoint(ckpt: dict[str, Any], device: str | torch.device = "cpu",
                          path: Any = "checkpoint") -> tuple[PETransformer, TrainConfig]:
    """Rebuild the model a checkpoint was saved from and load its weights.

    The config's sizes and the ground truth's shape are checked against the stored weights first: an
    edited config (``d_model`` 4096) or a stride-0 ground truth claiming 10^7 positions would otherwise
    allocate gigabytes before load_state_dict noticed.
    """
    from trainers.config import validate

    with rebuilding_model(path):
        cfg = validate(TrainConfig.from_dict(ckpt["config"]))  # the trainer's own checks (heads, widths, ...)
    coords = checked_coords(ckpt.get("ground_truth"), path)
    check_weight_sizes(cfg, ckpt.get("model"), path)
    with rebuilding_model(path):
        model = PETransformer(cfg.model, cfg.pe, coords).to(device)
        model.load_state_dict(ckpt["model"])
    model.eval()
    return model, cfg


_EDITED = "was the checkpoint edited? re-train or re-save it"


def checked_coords(gt: Any, path: Any, want: tuple[int, int] | None = None, what: str = "") -> Tensor:
    """The checkpoint's ground-truth coordinates, which must have shape ``want`` (default: the Latin Square
    Task's 16 x 2 grid; ``what`` names it): checked on the tensor's claimed shape, layout and dtype before
    any copy."""
    from pe_probe.errors import InputError
    from trainers.train import ground_truth

    if want is None:
        want, what = tuple(ground_truth("lst").coords.shape), "the Latin Square Task's"
    coords = gt.get("coords") if isinstance(gt, dict) else None
    if not isinstance(coords, Tensor):
        raise InputError(f"{path}: its ground_truth has no coords tensor; {_EDITED}")
    if coords.is_nested:
        raise InputError(f"{path}: its ground_truth coords are a nested (ragged) tensor, not {what} {want[0]} x "
                         f"{want[1]} positions; {_EDITED}")
    if coords.layout != torch.strided or coords.is_complex() or tuple(coords.shape) != tuple(want):
        layout = "" if coords.layout == torch.strided else str(coords.layout).replace("torch.", "") + " "
        raise InputError(f"{path}: its ground_truth coords are a {layout}{str(coords.dtype).replace('torch.', '')} "
                         f"tensor of shape {tuple(coords.shape)}, not {what} {want[0]} x {want[1]} positions; "
                         f"{_EDITED}")
    coords = coords.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(coords).all()):
        raise InputError(f"{path}: its ground_truth coords contain NaN or Inf; {_EDITED}")
    return coords


def check_weight_sizes(cfg: Any, state: Any, path: Any, n_in: int = 5) -> None:
    """Refuse a config whose sizes (d_model, layers, MLP width; ``n_in`` input features a token) differ from
    the stored weights' shapes, before the model is built: building the config's model is what would cost
    the memory."""
    from pe_probe.errors import InputError, shorten, show_path

    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise InputError(f"{path}: its 'model' is not a dict of tensors; {_EDITED}")
    odd_keys = [k for k in state if not isinstance(k, str)]  # a model's weights are named by strings (None too)
    if odd_keys:
        shown = shorten(repr(odd_keys[0]), 60)
        raise InputError(f"{path}: its 'model' has a weight keyed by the {type(odd_keys[0]).__name__} {shown}, not a "
                         f"name, which no model of ours holds; {_EDITED}")
    ragged = next((k for k, v in state.items() if v.is_nested), None)  # has no shape: t.shape raises
    if ragged is not None:
        raise InputError(f"{path}: its weight {show_path(ragged)} is a nested (ragged) tensor, which no model of ours "
                         f"holds; {_EDITED}")
    odd = next((k for k, v in state.items() if v.is_complex() or v.is_quantized), None)  # loading would drop the
    if odd is not None:  # imaginary part with only a warning, or fail on a quantized one
        what = "complex" if state[odd].is_complex() else "quantized"
        raise InputError(f"{path}: its weight {show_path(odd)} is a {what} tensor "
                         f"({str(state[odd].dtype).replace('torch.', '')}), which no model of ours holds; {_EDITED}")
    m = cfg.model
    blocks = {int(k.split(".")[1]) for k in state if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    implied = {"embed.weight": (m.d_model, n_in),
               "blocks.0.mlp.fc.weight": (int(round(m.mlp_ratio * m.d_model)), m.d_model)}
    for name, shape in implied.items():
        stored = tuple(state[name].shape) if name in state else None
        if stored != shape:
            raise InputError(f"{path}: its config (d_model {m.d_model}, mlp_ratio {m.mlp_ratio}) implies {name} of "
                             f"shape {shape}, the weights hold {stored or 'none'}; {_EDITED}")
    if len(blocks) != m.n_layers:
        raise InputError(f"{path}: its config says {m.n_layers} layers, the weights hold {len(blocks)} blocks; {_EDITED}")
    if blocks and max(blocks) != m.n_layers - 1:  # as many blocks, so one is numbered past n - 1 (n may be 10^12)
        raise InputError(f"{path}: its config says {m.n_layers} layers (blocks 0 to {m.n_layers - 1}), the weights "
                         f"hold block {max(blocks)}; {_EDITED}")
    check_finite_weights(state, path)  # every reader of a checkpoint's model (LST, netsim, brain) comes here


def check_finite_weights(state: dict[str, Tensor], path: Any) -> None:
    """Refuse weights holding NaN or Inf, naming the first such tensor: a diverged run (or a damaged file)
    gives NaN logits, whose argmax is class 0, and evaluation then printed plausible accuracies near
    chance with exit 0. Only dense float tensors up to the largest model pe-probe trains are scanned (an
    edited, oversized one fails loading on its shape anyway)."""
    from pe_probe.errors import InputError
    from trainers.config import MAX_PARAMS

    for name, t in state.items():
        if (t.layout != torch.strided or t.device.type == "meta" or t.numel() > MAX_PARAMS
                or not (t.is_floating_point() or t.is_complex())):
            continue
        if t.is_floating_point() and t.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            t = t.float()  # float8: torch has no isfinite for it
        if not bool(torch.isfinite(t).all()):
            bad = "NaN" if bool(torch.isnan(t).any()) else "Inf"
            raise InputError(f"{path}: its weight {name} holds {bad}: the run diverged or the file is damaged; "
                             f"evaluate an earlier checkpoint (RUN/checkpoints/step-N.pt) or re-train")


def check_run_coords_file(config: dict[str, Any], path: Any) -> None:
    """A netsim run's coordinate file must still hold what it held when the run was trained (its sha256 is in the
    config): the splits are regenerated from the network it builds, so an edited file gave other metrics silently."""
    from pe_probe.errors import InputError
    from trainers.config import MaskedTrainConfig, validate_masked
    from trainers.tasks.netsim import check_coords_file

    with rebuilding_model(path):
        cfg = validate_masked(MaskedTrainConfig.from_dict(config))
    try:
        check_coords_file(cfg.data)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def evaluate_checkpoint(
    path: str | os.PathLike, puzzles: str | os.PathLike | None = None, device: str = "cpu"
) -> dict[str, float | int]:
    """Accuracy overall and per level, keyed as in the run's metrics.jsonl: ``ood_acc``, ``ood_acc_binary``,
    ..., ``ood_loss``, ``ood_n`` for the run's own held-out set; ``puzzles_acc``, ... for a ``puzzles`` file.

    netsim / brain checkpoints: MSE per split instead (``test_mse``, ``ood_mse``, ...; see
    `trainers.train_masked.evaluate_masked_checkpoint`).

    ``puzzles``: a study-format CSV; default: the checkpoint's own OOD set, regenerated from its
    data config (or re-read from its ``data.ood_puzzles`` file).
    """
    from trainers.tasks.lst import read_puzzle_csv
    from trainers.train import load_splits

    dev = resolve_device(device)
    ckpt = load_checkpoint(path, map_location=dev)
    task = ckpt["config"].get("task") if isinstance(ckpt.get("config"), dict) else None
    if task in ("netsim", "brain"):  # masked-prediction tasks: MSE per split (trainers.train_masked)
        from trainers.train_masked import evaluate_masked_checkpoint

        if puzzles is not None:
            from pe_probe.errors import InputError

            raise InputError(f"--puzzles applies to the Latin Square Task only; {path} is a {task} checkpoint")
        if task == "netsim":
            check_run_coords_file(ckpt["config"], path)
        return evaluate_masked_checkpoint(path, device=device)
    model, cfg = model_from_checkpoint(ckpt, dev, path)
    if puzzles is None:  # data sizes above every preset were refused with the config (`trainers.config.validate`)
        if cfg.data.ood_puzzles is not None and not os.path.isfile(cfg.data.ood_puzzles):  # moved since training
            from pe_probe.errors import InputError

            raise InputError(f"{path}: the run's held-out puzzle file {cfg.data.ood_puzzles} (data.ood_puzzles in its "
                             f"config) is not found; pass it, or another study-format CSV, with --puzzles FILE")
        recorded = cfg.data.ood_puzzles_sha256
        if recorded is not None and puzzle_file_sha256(cfg.data.ood_puzzles) != recorded:  # edited since training
            from pe_probe.errors import InputError

            raise InputError(f"{path}: the run's held-out puzzle file {cfg.data.ood_puzzles} has changed since the run "
                             f"was trained (its sha256 differs from the config's); restore it, or evaluate on it as it "
                             f"is now with --puzzles {cfg.data.ood_puzzles}")
    ps = read_puzzle_csv(puzzles) if puzzles is not None else load_splits(cfg)["ood"]
    prefix = "ood" if puzzles is None else "puzzles"
    out: dict[str, float | int] = dict(split_metrics(model, encode_split(ps, dev), prefix))
    out[f"{prefix}_n"] = len(ps)  # a count: an integer in --json
    return out
