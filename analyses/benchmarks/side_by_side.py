"""Time training loops side by side, one spawned one-thread process each (no shared GIL, no shared RNG).

`side_by_side(build, kwargs_list, warmup, steps)` starts one process per kwargs; each builds its step
function with ``build(**kwargs)`` (a module-level function, so it pickles), runs ``warmup`` steps (compiling
there if it compiles), waits for the others, runs ``steps`` timed steps and waits again. The parent times
the span between the two meeting points: the wall time of all loops running at once, as when a user
launches one training process per core.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from typing import Any, Callable

BARRIER_TIMEOUT_S = 900.0  # generous: a first torch.compile in every process at once takes minutes on 2 cores


def side_by_side(build: Callable[..., Callable[[int], Any]], kwargs_list: list[dict[str, Any]], warmup: int,
                 steps: int) -> float:
    """Seconds for ``steps`` steps of every loop at once (after ``warmup`` steps each); raises a worker's error."""
    ctx = multiprocessing.get_context("spawn")
    n = len(kwargs_list)
    barrier = ctx.Barrier(n + 1)  # the workers and this process
    errors = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(build, kw, warmup, steps, barrier, errors), daemon=True)
             for kw in kwargs_list]
    for p in procs:
        p.start()
    try:
        barrier.wait(BARRIER_TIMEOUT_S)  # every loop built and warmed up
        t = time.perf_counter()
        barrier.wait(BARRIER_TIMEOUT_S)  # every loop done
        return time.perf_counter() - t
    except Exception as e:  # a worker failed (it broke the barrier) or timed out
        barrier.abort()
        try:  # the failing worker's message (a queue's put lands asynchronously: wait for it)
            detail = errors.get(timeout=10)
        except queue.Empty:
            detail = type(e).__name__
        raise RuntimeError(f"side-by-side worker failed: {detail}") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()


def _worker(build: Callable[..., Callable[[int], Any]], kwargs: dict[str, Any], warmup: int, steps: int,
            barrier: Any, errors: Any) -> None:
    import torch

    torch.set_num_threads(1)
    try:
        step = build(**kwargs)
        for i in range(warmup):
            step(i)
        barrier.wait(BARRIER_TIMEOUT_S)
        for i in range(steps):
            step(warmup + i)
        barrier.wait(BARRIER_TIMEOUT_S)
    except threading.BrokenBarrierError:  # another worker failed (its message is the one to report) or time ran out
        return
    except Exception as e:
        errors.put(f"{type(e).__name__}: {e}".splitlines()[0])
        barrier.abort()
