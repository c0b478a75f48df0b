"""Benchmark: attention at our trainers' sizes on the CPU: `trainers.model.attend` against torch's fused
SDPA kernel, and the two paths `attend` chooses between.

Usage:
  python analyses/benchmarks/bench_attention.py              # writes reports/benchmarks/attention.{md,csv}
  python analyses/benchmarks/bench_attention.py --no-write

Why: `attend` computes attention on the CPU as two matrix products and a softmax when there are at most
`trainers.model.math_attention_limit()` keys (float32: 32; bf16 autocast: 512), instead of
`F.scaled_dot_product_attention`; beyond it, under bf16 autocast, it runs the fused kernel in float32.
This measures forward + backward time, one torch thread (as an ensemble worker runs), for the shapes our
trainers meet: 16 tokens (the Latin Square Task), all queries or one (the readout-only last layer),
d_model 64 / 160 with 1 head; 64 and 80 tokens (the netsim and brain models, quick and paper sizes);
and longer sequences. Columns: the fused kernel as called (under autocast: its bf16 kernel), the fused
kernel in float32, the matmul-softmax path, and `attend` itself. float32 and, where the CPU has native
bf16, under bf16 autocast. Best of --rounds interleaved rounds; ratios within this one run.
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
          (128, 1, 32, 32, 64),
          (64, 1, 64, 64, 32), (64, 1, 80, 80, 36), (128, 1, 64, 64, 160), (128, 1, 80, 80, 160),  # netsim, brain
          (32, 1, 128, 128, 64), (32, 1, 256, 256, 64), (16, 1, 512, 512, 64)]


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
    from trainers.model import attend, attention_weights, math_attention_limit

    torch.set_num_threads(1)
    dtypes = ["float32"] + (["bf16 autocast"] if cpu_has_bf16() else [])

    def fused(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    def fused_fp32(q, k, v):
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float())

    def matmul_softmax(q, k, v):
        return attention_weights(q, k).type_as(v) @ v

    paths = (("fused", fused), ("fused_fp32", fused_fp32), ("math", matmul_softmax), ("attend", attend))
    best: dict[tuple, dict[str, float]] = {}
    limits: dict[str, int] = {}
    for _ in range(args.rounds):
        for b, h, tq, t, hs in SHAPES:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(b, h, n, hs, generator=g, requires_grad=True) for n in (tq, t, t))
            for dt in dtypes:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dt != "float32"):
                    limits[dt] = math_attention_limit()
                    for name, fn in paths:
                        if name == "fused_fp32" and dt == "float32":
                            continue  # the same call as `fused`
                        secs = _time_fwd_bwd(fn, q, k, v, args.reps)
                        r = best.setdefault((b, h, tq, t, hs, dt), {})
                        r[name] = min(secs, r.get(name, float("inf")))
    rows = []
    for (b, h, tq, t, hs, dt), r in best.items():
        r.setdefault("fused_fp32", r["fused"])
        rows.append({"sequences": b, "heads": h, "queries": tq, "keys": t, "head_size": hs, "arithmetic": dt,
                     "fused_ms": round(1e3 * r["fused"], 3), "fused_fp32_ms": round(1e3 * r["fused_fp32"], 3),
                     "math_ms": round(1e3 * r["math"], 3), "attend_ms": round(1e3 * r["attend"], 3),
                     "attend_path": "matmul-softmax" if t <= limits[dt] else "fused float32",
                     "fused_fp32_over_math": round(r["fused_fp32"] / r["math"], 2),
                     "speedup": round(r["fused"] / r["attend"], 2)})
    lines = ["| sequences | heads | queries | keys | head size | arithmetic | fused SDPA (ms) | fused float32 (ms) "
             "| matmul-softmax (ms) | attend (ms) | attend's path | fused float32 / matmul-softmax | fused SDPA / attend |",
             "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    lines += [f"| {r['sequences']} | {r['heads']} | {r['queries']} | {r['keys']} | {r['head_size']} | {r['arithmetic']} | "
              f"{r['fused_ms']} | {r['fused_fp32_ms']} | {r['math_ms']} | {r['attend_ms']} | {r['attend_path']} | "
              f"{r['fused_fp32_over_math']} | {r['speedup']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        header = ["# Attention at our trainers' sizes: `trainers.model.attend` vs torch's fused SDPA kernel (CPU)", "",
                  f"Written by `python analyses/benchmarks/bench_attention.py` (raw numbers: `attention.csv`); torch "
                  f"{torch.__version__}, 1 torch thread, forward + backward, best of {args.rounds} rounds of {args.reps} "
                  f"passes. `attend` takes the matmul-softmax path up to {limits['float32']} keys in float32"
                  + (f" and {limits['bf16 autocast']} under bf16 autocast" if "bf16 autocast" in limits else "")
                  + ", the fused kernel beyond (under bf16 autocast in float32). `fused SDPA` is the fused kernel as "
                  "called (under bf16 autocast its bf16 kernel); `fused float32` the kernel `attend` falls back to.", ""]
        write_results(args.out, "attention", rows, "\n".join(header) + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
