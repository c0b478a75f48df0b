"""numba's on-disk cache is read and written under pe-probe's file lock, so processes that start together do
not corrupt it (`pe_probe.kernels.cache_lock`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

KERNEL_CALL = """
import numpy as np, sys, time
from pe_probe import kernels
kernels._numba()  # numba imported before the clock starts
x = np.random.default_rng(0).normal(size=(6, 2)); d = np.abs(np.random.default_rng(1).normal(size=(6, 6)))
d = d + d.T; np.fill_diagonal(d, 0)
print("calling", flush=True)
kernels.guttman_step(x, d)
print(f"done {time.time()!r}", flush=True)
"""

HOLD_LOCK = """
import sys, time
from pe_probe.kernels import cache_lock
with cache_lock():
    print("held", flush=True)
    sys.stdin.readline()  # until the kernel process is about to call
    time.sleep(3)
    print(f"released {time.time()!r}", flush=True)
"""


def test_a_kernel_waits_for_the_cache_lock_to_load(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    subprocess.run([sys.executable, "-c", KERNEL_CALL], env=env, check=True, capture_output=True, timeout=300)  # cache it
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        caller = subprocess.Popen([sys.executable, "-c", KERNEL_CALL], env=env, stdout=subprocess.PIPE, text=True)
        assert caller.stdout.readline().strip() == "calling"
        holder.stdin.write("go\n")
        holder.stdin.flush()
        released = float(holder.stdout.readline().split()[1])
        done = float(caller.stdout.readline().split()[1])
        assert caller.wait(timeout=60) == 0
    finally:
        holder.kill()
    # the cached kernel loads in well under a second; it could only finish after the lock was released
    assert done >= released, (done, released, time.time())
