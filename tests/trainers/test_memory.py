"""`trainers.memory`: glibc keeps freed tensor memory mapped, so repeated steps stop page-faulting."""

import subprocess
import sys

import pytest

FAULTS = """
import resource, sys, torch
from trainers.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "ours" else False
def step(i):  # a step's activations, a little larger each time (as in a growing batch or sequence)
    acts = [torch.ones(1024 * 1024 + 16384 * i)]  # 4 MiB + 64 KiB per step
    for _ in range(4):
        acts.append(acts[-1] * 1.5)
    return float(acts[-1][0])
for i in range(5):
    step(i)
faults = []
for i in range(5, 26):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(i)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(applied, sorted(faults)[10])  # the median step
"""


def faults_per_step(mode: str) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout
    applied, faults = out.split()
    return applied == "True", float(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_freed_tensor_memory_is_reused_instead_of_page_faulted_in_again():
    applied, ours = faults_per_step("ours")
    _, default = faults_per_step("default")
    assert applied
    # glibc's defaults map each block above the last freed one afresh: ~1,000 pages per block, every step
    # (a fixed-size pattern would depend on the heap's layout, which even the environment's size changes)
    assert default > 2000
    assert ours < 200  # ours: heap memory reused; only the 64 KiB growth per block is new


def test_keep_freed_memory_is_idempotent():
    from trainers.memory import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory() == first
