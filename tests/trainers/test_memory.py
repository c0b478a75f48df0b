"""`trainers.memory`: glibc keeps freed tensor memory mapped, so repeated steps stop page-faulting."""

import subprocess
import sys

import pytest

FAULTS = """
import resource, sys, torch
from trainers.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "ours" else False
def step():  # a training step's pattern: activations kept for the backward pass, then all freed
    acts = [torch.ones(2048, 512)]  # 4 MiB each
    for _ in range(9):
        acts.append(acts[-1] * 1.5)
    return float(acts[-1][0, 0])
for _ in range(5):
    step()
faults = []
for _ in range(21):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(applied, sorted(faults)[10])  # the median step (a one-off growth of the heap does not count)
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
    assert default > 1000  # glibc's defaults: the freed 40 MiB go back to the system and fault in again
    assert ours < 10


def test_keep_freed_memory_is_idempotent():
    from trainers.memory import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory() == first
