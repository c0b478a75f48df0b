"""Group a GPU step profile's top kernels by what they do: matrix products, optimizer, GELU, LayerNorm, ...

`profile_step.py` lists a configuration's top operators by device time (``--top 60`` in ``gpu_session.sh``),
one row per kernel: cuBLAS's ``nvjet_*`` / ``*gemm*`` products, Inductor's fused ``triton_*`` kernels (named
after the operations they fuse), ATen's own kernels. To see where a step's time goes by kind of work, this
reads such a ``profile_cuda.md``, sums each group's kernels per step and prints a markdown table per
configuration, with what the listed kernels leave out of the profiler's "Self CUDA time total".

Rows that are not kernels are skipped: ``aten::*`` operators (their device time is their kernels'), the
``## Call CompiledFxGraph`` annotations, ``Command Buffer Full``. A Triton kernel is listed twice, as an
operator and as a kernel, with the same name, time and calls, on adjacent rows: the second is dropped.

Usage:
  python analyses/benchmarks/kernel_groups.py reports/benchmarks/h200-s4/profile_cuda.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# (group, name patterns): the first group with a matching pattern takes the kernel
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix products (cuBLAS)", ("nvjet_", "gemm", "gemv", "xmma")),
    ("optimizer (fused AdamW)", ("multi_tensor_appl",)),  # the name is cut at 60 characters
    ("GELU (with the bias add)", ("gelu",)),
    ("LayerNorm", ("layer_norm",)),
    ("softmax", ("softmax",)),
    ("layout (split / cat / transpose)", ("transpose", "_cat_", "split")),
    ("other Inductor kernels", ("triton_",)),
    ("other ATen kernels (fills, copies)", ("at::native",)),
)
OTHER = "other"
SKIP = ("##", "aten::", "Command Buffer Full")
TOTAL = re.compile(r"Self CUDA time total: ([\d.]+(?:ms|us|s))\b")
# name, then ten columns: Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, Self CUDA, Self CUDA %,
# CUDA total, CUDA time avg, # of Calls
ROW = re.compile(r"^\s*(\S.*?)\s{2,}" + r"(\S+)\s+" * 9 + r"(\d+)\s*$")
UNIT = {"s": 1e3, "ms": 1.0, "us": 1e-3}


def to_ms(text: str) -> float:
    """A profiler time (``12.075ms``, ``804.978us``, ``1.2s``) in milliseconds."""
    m = re.fullmatch(r"([\d.]+)(ms|us|s)", text)
    if not m:
        raise ValueError(f"not a profiler time: {text!r}")
    return float(m.group(1)) * UNIT[m.group(2)]


def group_of(name: str) -> str:
    for group, patterns in GROUPS:
        if any(p in name for p in patterns):
            return group
    return OTHER


def kernels(table: str) -> list[tuple[str, float, int]]:
    """(name, self device ms over the profiled steps, calls) of each kernel row of one top-operators table."""
    rows, last = [], None
    for line in table.splitlines():
        m = ROW.match(line)
        if not m or m.group(1).startswith(SKIP) or m.group(1) == "Name":
            continue
        key = (m.group(1), m.group(7), m.group(11))  # name, Self CUDA, calls
        if key == last:  # a Triton kernel's second row
            continue
        last = key
        rows.append((m.group(1), to_ms(m.group(7)), int(m.group(11))))
    return rows


def sections(text: str) -> dict[str, str]:
    """{configuration: its top-operators table} of a profile_step report (the by-shape tables left out)."""
    out = {}
    for m in re.finditer(r"^## (\S+): top \d+ operators\n\n```\n(.*?)```", text, re.S | re.M):
        out[m.group(1)] = m.group(2).split("\nBy input shapes")[0]
    return out


DEFAULT_STEPS = 5  # profile_step.py's --steps default (not imported: that module loads torch)


def steps_of(text: str) -> int:
    """The profiled steps per configuration, from the report's "Written by `...`" command line (``--steps N``;
    without it, profile_step.py's default)."""
    m = re.search(r"^Written by `[^`]*--steps (\d+)", text, re.M)
    return int(m.group(1)) if m else DEFAULT_STEPS


def summarize(table: str, steps: int) -> tuple[list[tuple[str, float, int]], float]:
    """([(group, ms per step, kernels listed)] largest first, the profiler's device total in ms per step)."""
    groups: dict[str, list[float]] = {}
    for name, ms, _calls in kernels(table):
        g = groups.setdefault(group_of(name), [0.0, 0])
        g[0] += ms / steps
        g[1] += 1
    total = TOTAL.search(table)
    if not total:
        raise ValueError("no 'Self CUDA time total' line: not a GPU profile (profile_step.py --device cuda)")
    return (sorted(((g, v[0], v[1]) for g, v in groups.items()), key=lambda r: -r[1]),
            to_ms(total.group(1)) / steps)


def markdown(config: str, rows: list[tuple[str, float, int]], total: float) -> str:
    lines = [f"### {config}", "", "| kernels | ms/step | share of GPU time | kernels listed |",
             "| --- | ---: | ---: | ---: |"]
    for group, ms, n in rows:
        lines.append(f"| {group} | {ms:.2f} | {ms / total:.1%} | {n} |")
    listed = sum(r[1] for r in rows)
    lines.append(f"| not in the listed top kernels | {total - listed:.2f} | {(total - listed) / total:.1%} | |")
    lines.append(f"| **GPU total** | **{total:.2f}** | 100% | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", type=Path, help="a profile_cuda.md written by profile_step.py --device cuda")
    args = p.parse_args(argv)
    if not args.profile.is_file():
        p.error(f"{args.profile}: no such file; pass a profile_cuda.md from profile_step.py")
    text = args.profile.read_text()
    tables = sections(text)
    if not tables:
        p.error(f"{args.profile}: no '## CONFIG: top N operators' tables; pass a report of profile_step.py")
    steps = steps_of(text)
    out = []
    for config, table in tables.items():
        try:
            rows, total = summarize(table, steps)
        except ValueError as e:
            p.error(f"{args.profile}: {config}: {e}")
        out.append(markdown(config, rows, total))
    print(f"Per step ({steps} profiled steps), from {args.profile}:\n\n" + "\n".join(out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
