"""Benchmark: attention at the study's sizes, `trainers.model.attend` vs torch's fused SDPA kernel (CPU).

Usage:
  python analyses/benchmarks/bench_attention.py              # writes reports/benchmarks/attention.{md,csv}
  python analyses/benchmarks/bench_attention.py --no-write

Why: `attend` computes attention on the CPU as two matrix products and a softmax when there are at most
`MATH_ATTENTION_MAX_TOKENS` keys, instead of `F.scaled_dot_product_attention`. This measures forward +
backward time of both, one torch thread (as an ensemble worker runs), for the shapes our trainers meet:
16 tokens (the Latin Square Task), all queries or one (the readout-only last layer), d_model 64 / 160
with 1 head, and a few longer sequences to show where the fused kernel wins. float32 and, where the CPU
has native bf16, under bf16 autocast (`attend` then keeps the fused kernel in float32 beyond the
threshold). Best of --rounds interleaved rounds; ratios within this one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_io beside this script

import torch  # noqa: E402
from bench_io import write_results  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# (batch of sequences, heads, query tokens, key tokens, head size)
SHAPES = [(512, 1, 16, 16, 64), (512, 1, 1, 16, 64), (512, 1, 16, 16, 160), (128, 4, 16, 16, 16),
          (128, 1, 32, 32, 64), (64, 1, 64, 64, 64), (32, 1, 256, 256, 64)]


def _time_fwd_bwd(fn, q, k, v, reps: int) -> float:
    g = torch.randn(q.shape[:-1] + (v.shape[-1],), dtype=torch.float32)
    for _ in range(3):
        torch.autograd.grad(fn(q, k, v).float(), (q, k, v), g)
    t = time.perf_counter()
    for _ in range(reps):
        torch.autograd.grad(fn(q, k, v).float(), (q, k, v), g)
    return (time.perf_counter() - t) / reps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=20, help="forward+backward passes per timing")
    p.add_argument("--out", default=str(ROOT / "reports" / "benchmarks"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    from trainers.evaluate import cpu_has_bf16
    from trainers.model import MATH_ATTENTION_MAX_TOKENS, attend

    torch.set_num_threads(1)
    dtypes = ["float32"] + (["bf16 autocast"] if cpu_has_bf16() else [])

    def fused(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    best: dict[tuple, dict[str, float]] = {}
    for _ in range(args.rounds):
        for b, h, tq, t, hs in SHAPES:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(b, h, n, hs, generator=g, requires_grad=True) for n in (tq, t, t))
            for dt in dtypes:
                for name, fn in (("fused SDPA", fused), ("attend", attend)):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dt != "float32"):
                        secs = _time_fwd_bwd(fn, q, k, v, args.reps)
                    key = (b, h, tq, t, hs, dt)
                    best.setdefault(key, {})
                    best[key][name] = min(secs, best[key].get(name, float("inf")))
    rows = [{"sequences": b, "heads": h, "queries": tq, "keys": t, "head_size": hs, "arithmetic": dt,
             "fused_ms": round(1e3 * r["fused SDPA"], 3), "attend_ms": round(1e3 * r["attend"], 3),
             "attend_path": "matmul-softmax" if t <= MATH_ATTENTION_MAX_TOKENS else "fused",
             "speedup": round(r["fused SDPA"] / r["attend"], 2)} for (b, h, tq, t, hs, dt), r in best.items()]
    lines = ["| sequences | heads | queries | keys | head size | arithmetic | fused SDPA (ms) | attend (ms) | attend's path | fused / attend |",
             "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |"]
    lines += [f"| {r['sequences']} | {r['heads']} | {r['queries']} | {r['keys']} | {r['head_size']} | {r['arithmetic']} | "
              f"{r['fused_ms']} | {r['attend_ms']} | {r['attend_path']} | {r['speedup']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        header = ["# Attention at the study's sizes: `trainers.model.attend` vs torch's fused SDPA kernel (CPU)", "",
                  f"Written by `python analyses/benchmarks/bench_attention.py` (raw numbers: `attention.csv`); torch "
                  f"{torch.__version__}, 1 torch thread, forward + backward, best of {args.rounds} rounds of {args.reps} "
                  f"passes. `attend` takes the matmul-softmax path up to {MATH_ATTENTION_MAX_TOKENS} keys and the fused "
                  "kernel beyond (there the columns differ only under bf16 autocast, where `attend` runs the fused kernel in "
                  "float32).", ""]
        write_results(args.out, "attention", rows, "\n".join(header) + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
