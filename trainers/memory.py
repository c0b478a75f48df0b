"""glibc malloc settings for CPU training: keep freed activation memory mapped in the process.

PyTorch's CPU allocator takes every tensor from malloc and returns it as soon as it dies. glibc serves
large blocks with a fresh ``mmap`` and hands freed memory at the top of its heaps back to the system
(trimming), so a training step that allocates and frees megabytes of activations maps that memory in
anew, page by page, every step. Ensemble groups, whose activations are K times a model's, spend a large
share of their step in those page faults (`analyses/benchmarks/bench_memory.py` counts them and times the
step with and without this setting: ``reports/benchmarks/memory.md``).

`keep_freed_memory` raises glibc's mmap threshold to its maximum (32 MiB on 64-bit systems) and turns
trimming off, so freed blocks are reused. Arithmetic is unchanged (same kernels, same order); the
process keeps its peak memory mapped until it exits. It is a process-wide setting: the CPU trainers
call it (`trainers.train.train`, `trainers.train_masked.train_masked`, `trainers.ensemble`'s parent and
worker processes); it does nothing off Linux/glibc.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit systems (HEAP_MAX_SIZE / 2)
NO_TRIM = 2**31 - 1

_applied = False


def keep_freed_memory() -> bool:
    """Apply the settings once per process; True when they are in force (glibc), False elsewhere."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to reach, or a libc without mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1 and mallopt(M_TRIM_THRESHOLD, NO_TRIM) == 1
    return _applied
