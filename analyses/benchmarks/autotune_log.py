"""Summarise the matrix-product autotuning in a torch.compile max-autotune log: which kernel won each shape.

Inductor's ``max-autotune`` times its own matrix-product templates (Triton on a GPU, C++ micro-GEMMs on the
CPU) against the extern ATen kernel (cuBLAS on a GPU, oneDNN / MKL on the CPU) for every matrix-product
shape of a graph and prints one ``AUTOTUNE bmm(BxMxK, BxKxN)`` block per shape, fastest choice first. The
templates are what can fuse a bias or GELU epilogue into the product, so a log in which the extern kernel
wins the large shapes says that mode has little to gain. This reads such a log (for example
``reports/benchmarks/h200-s3/profile_autotune.log``, from ``profile_step.py --compile-mode
max-autotune-no-cudagraphs`` in ``gpu_session.sh``) and prints a markdown table: shape, dtype, GFLOP, the
extern and best template times (blank: not among the fastest choices the log lists), the winner and its
rate (TFLOP/s for a GPU log, GFLOP/s for a CPU one, told apart by the templates' names).

Usage:
  python analyses/benchmarks/autotune_log.py reports/benchmarks/h200-s3/profile_autotune.log
  python analyses/benchmarks/autotune_log.py reports/benchmarks/cpu-avx512/autotune/profile_autotune.log
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

HEADER = re.compile(r"^AUTOTUNE (\w+)\((\d+)x(\d+)x(\d+), (\d+)x(\d+)x(\d+)\)")
CHOICE = re.compile(r"^  (\S+) ([\d.]+) ms ")


class Labels(NamedTuple):
    """How one device's log names its choices, and how its table shows them."""

    extern: str  # the extern ATen kernel's library
    template: str  # Inductor's templates
    prefix: str  # how the template choices' names start in the log
    unit: str  # the rate's unit
    per_gflop_ms: float  # that unit per GFLOP/ms
    digits: int  # GFLOP decimals (a CPU group's products are small)


LABELS = {"cuda": Labels("cuBLAS", "Triton", "triton", "TFLOP/s", 1.0, 1),
          "cpu": Labels("ATen", "C++ template", "cpp_", "GFLOP/s", 1e3, 3)}


def log_device(text: str) -> str:
    """"cpu" if the log's choices include Inductor's C++ templates, else "cuda"."""
    cpu = any((c := CHOICE.match(line)) and c.group(1).startswith(LABELS["cpu"].prefix) for line in text.splitlines())
    return "cpu" if cpu else "cuda"


def is_template(name: str) -> bool:
    return name.startswith(tuple(labels.prefix for labels in LABELS.values()))


def summarize(text: str, device: str | None = None) -> list[dict]:
    """One row per AUTOTUNE block of a batched product: op, (B, M, K, N), the inputs' dtype, GFLOP, the extern
    choice's and the best template choice's milliseconds (None when the log does not list it: Inductor prints
    only the fastest choices, so a missing extern kernel was slower than all of them), the winner (listed
    first, named as `LABELS` names it for ``device``, by default the log's) and its rate in GFLOP per millisecond."""
    labels = LABELS[device or log_device(text)]
    rows: list[dict] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if not m:
            continue
        op, b, rows_m, k, b2, k2, n = m.group(1), *map(int, m.groups()[1:])
        if b != b2 or k != k2:
            continue  # not a batched product's shapes
        choices, dtype = [], ""
        for nxt in lines[i + 1:]:
            if nxt.startswith("dtypes:"):
                dtype = ", ".join(sorted({d.strip().removeprefix("torch.") for d in nxt[7:].split(",")}))
                continue
            if nxt.startswith("strides:"):
                continue
            c = CHOICE.match(nxt)
            if not c:
                break
            choices.append((c.group(1), float(c.group(2))))
        if not choices:
            continue
        extern = next((ms for name, ms in choices if not is_template(name)), None)
        template = next((ms for name, ms in choices if is_template(name)), None)
        winner, best = choices[0]
        gflop = 2 * b * rows_m * k * n / 1e9
        rows.append({"op": op, "shape": f"{b}x{rows_m}x{k} @ {b}x{k}x{n}", "dtype": dtype, "gflop": gflop, "extern_ms": extern,
                     "template_ms": template, "winner": labels.template if is_template(winner) else labels.extern,
                     "gflop_per_ms": gflop / best})  # GFLOP / ms = TFLOP/s
    return rows


def markdown(rows: list[dict], device: str = "cuda") -> str:
    """The table of `summarize`'s rows, its headers and rate unit (TFLOP/s or GFLOP/s) those of ``device``."""
    labels = LABELS[device]

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.4f}"

    out = [f"| product | dtype | GFLOP | {labels.extern} ms | best {labels.template} ms | winner | winner {labels.unit} |",
           "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    out += [f"| {r['op']} {r['shape']} | {r['dtype']} | {r['gflop']:.{labels.digits}f} | {ms(r['extern_ms'])} | {ms(r['template_ms'])} | "
            f"{r['winner']} | {r['gflop_per_ms'] * labels.per_gflop_ms:.0f} |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="a torch.compile max-autotune log (stdout and stderr)")
    args = p.parse_args(argv)
    path = Path(args.log)
    if not path.is_file():
        p.error(f"{path}: no such file; give the log profile_step.py --compile-mode max-autotune... printed")
    text = path.read_text(errors="replace")
    device = log_device(text)
    rows = summarize(text, device)
    if not rows:
        p.error(f"{path}: no 'AUTOTUNE bmm(...)' blocks; was it written with --compile-mode max-autotune... "
                "(with TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 if it compiled before: cached choices are not logged)?")
    sys.stdout.write(markdown(rows, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
