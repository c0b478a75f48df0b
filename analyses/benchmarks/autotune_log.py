"""Summarise the matrix-product autotuning in a torch.compile max-autotune log: which kernel won each shape.

Inductor's ``max-autotune`` times its own Triton templates against the extern cuBLAS kernel for every
matrix-product shape of a graph and prints one ``AUTOTUNE bmm(BxMxK, BxKxN)`` block per shape, fastest
choice first. The Triton templates are what can fuse a bias or GELU epilogue into the product, so a log
in which cuBLAS wins the large shapes says that mode has little to gain. This reads such a log (for
example ``reports/benchmarks/h200-s3/profile_autotune.log``, from ``profile_step.py --compile-mode
max-autotune-no-cudagraphs`` in ``gpu_session.sh``) and prints a markdown table: shape, dtype, GFLOP, the
cuBLAS and best Triton times (blank: not among the fastest choices the log lists), the winner and its rate.

Usage:
  python analyses/benchmarks/autotune_log.py reports/benchmarks/h200-s3/profile_autotune.log
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HEADER = re.compile(r"^AUTOTUNE (\w+)\((\d+)x(\d+)x(\d+), (\d+)x(\d+)x(\d+)\)")
CHOICE = re.compile(r"^  (\S+) ([\d.]+) ms ")


def summarize(text: str) -> list[dict]:
    """One row per AUTOTUNE block of a batched product: op, (B, M, K, N), the inputs' dtype, GFLOP, the cuBLAS
    choice's and the best Triton choice's milliseconds (None when the log does not list it: Inductor prints
    only the fastest choices, so a missing cuBLAS was slower than all of them), the winner (listed first)."""
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
        extern = next((ms for name, ms in choices if not name.startswith("triton")), None)
        triton = next((ms for name, ms in choices if name.startswith("triton")), None)
        winner, best = choices[0]
        gflop = 2 * b * rows_m * k * n / 1e9
        rows.append({"op": op, "shape": f"{b}x{rows_m}x{k} @ {b}x{k}x{n}", "dtype": dtype, "gflop": gflop, "cublas_ms": extern,
                     "triton_ms": triton, "winner": "cuBLAS" if not winner.startswith("triton") else "Triton",
                     "tflops": gflop / best})  # GFLOP / ms = TFLOP/s
    return rows


def markdown(rows: list[dict]) -> str:
    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.4f}"

    out = ["| product | dtype | GFLOP | cuBLAS ms | best Triton ms | winner | winner TFLOP/s |",
           "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    out += [f"| {r['op']} {r['shape']} | {r['dtype']} | {r['gflop']:.1f} | {ms(r['cublas_ms'])} | {ms(r['triton_ms'])} | "
            f"{r['winner']} | {r['tflops']:.0f} |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="a torch.compile max-autotune log (stdout and stderr)")
    args = p.parse_args(argv)
    path = Path(args.log)
    if not path.is_file():
        p.error(f"{path}: no such file; give the log profile_step.py --compile-mode max-autotune... printed")
    rows = summarize(path.read_text(errors="replace"))
    if not rows:
        p.error(f"{path}: no 'AUTOTUNE bmm(...)' blocks; was it written with --compile-mode max-autotune...?")
    sys.stdout.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
