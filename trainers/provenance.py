"""Which code trained a run: one line per training session in ``RUN/provenance.jsonl``.

A run can be trained in several sessions (resume) and by different versions of the code; the
arithmetic of a version (kernels, summation order, bf16) changes single runs at 40 epochs by several
points (`reports/benchmarks/precision.md`), so reports say which code produced their runs. Each line
holds the time, the git commit of this checkout (and whether trainer or core files had uncommitted
changes), the package, torch and Python versions, the machine (`machine_facts`: CPU model, logical CPUs, the
instruction set of torch's CPU kernels, its bf16 units, the GPU), the device and the speed options used.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

PROVENANCE_FILE = "provenance.jsonl"
# provenance.jsonl keys that describe the training machine, with their labels (hostname / platform: if recorded;
# cpu .. gpu: `machine_facts`, recorded since 2026-12-03)
HARDWARE_KEYS = (("hostname", "host"), ("platform", "platform"), ("cpu", "CPU"), ("logical_cpus", "logical CPUs"),
                 ("cpu_kernels", "torch CPU kernels"), ("cpu_bf16", "CPU bf16 units"), ("gpu", "GPU"), ("device", "device"), ("torch", "torch"),
                 ("python", "Python"), ("torch_threads", "torch threads per process"))
MACHINE_KEYS = ("hostname", "platform", "cpu", "gpu")
_REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=_REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def code_version() -> dict[str, Any]:
    """git commit (None outside a git checkout), dirty flag for `trainers/` and `pe_probe/`, versions."""
    import torch

    from pe_probe import __version__

    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", "trainers", "pe_probe") if commit else None
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None,
            "pe_probe": __version__, "torch": torch.__version__, "python": platform.python_version()}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# /proc/cpuinfo flags of the units that run bf16 matrix products, fastest first: oneDNN sends torch's bf16
# GEMMs to AMX tiles where the CPU has them, else to AVX512-BF16
# dot products; without either, bf16 is emulated and slower than float32 (README, benchmarks)
_BF16_FLAGS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"))


def cpu_flags(cpuinfo_text: str) -> set[str] | None:
    """The instruction-set flags of ``/proc/cpuinfo``'s text (its first ``flags`` line), None without one."""
    line = next((ln for ln in cpuinfo_text.splitlines() if ln.startswith("flags")), None)
    return None if line is None else set(line.split(":", 1)[1].split())


def cpu_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> str:
    """'AMX', 'AVX512-BF16' or 'none': the CPU's native bf16 matrix units (what ``--bf16`` on the CPU runs on);
    'unknown' where ``/proc/cpuinfo`` cannot be read or names no flags."""
    try:
        flags = cpu_flags(Path(cpuinfo).read_text())
    except OSError:
        return "unknown"
    if flags is None:
        return "unknown"
    return next((name for flag, name in _BF16_FLAGS if flag in flags), "none")


def machine_facts(device: str | None = None) -> dict[str, Any]:
    """What in the machine shapes a run's arithmetic: CPU model, logical CPUs, and the instruction set of
    torch's CPU kernels (AVX2, AVX512, ...), which sets their summation order: the same code and seed train
    to other numbers on an AVX2 and an AVX-512 CPU (README, the LST sweep); and its native bf16 units
    (`cpu_bf16_units`), which run ``--bf16``. On a CUDA ``device``, the GPU too."""
    import torch

    facts: dict[str, Any] = {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
                             "cpu_kernels": torch.backends.cpu.get_cpu_capability(), "cpu_bf16": cpu_bf16_units()}
    if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(torch.device(str(device)))
    return facts


def record_session(run_dir: str | Path, version: dict[str, Any] | None = None, **settings: Any) -> None:
    """Append this training session's line to ``run_dir/provenance.jsonl``.

    ``version``: a `code_version()` result to reuse (an ensemble asks git once for all its members);
    ``settings``: what else shaped the arithmetic (device, start_epoch, bf16, compile, ...); the machine's
    facts (`machine_facts`) are added.
    """
    line = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **(version or code_version()), **machine_facts(settings.get("device")), **settings}
    with open(Path(run_dir) / PROVENANCE_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")


def read_sessions(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's recorded sessions, oldest first ([] for runs trained before provenance was recorded)."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line (killed mid-write) is skipped, not fatal
    return out


def describe_versions(run_dirs: list[Path]) -> str:
    """'5c076cc: 26 runs; not recorded: 57 runs' — which commits trained these runs (all sessions)."""
    counts: dict[str, int] = {}
    for d in run_dirs:
        sessions = read_sessions(d)
        keys = list(dict.fromkeys((s["git_commit"][:7] if s.get("git_commit") else "outside git")
                                  + ("+uncommitted" if s.get("git_dirty") else "")
                                  for s in sessions)) or ["not recorded"]  # in session order
        key = " then ".join(keys) if len(keys) > 1 else keys[0]
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{k}: {n} run{'s' if n != 1 else ''}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def counted(values: Counter, n: int) -> str:
    """"cpu" when every one of the ``n`` runs has that value, else "cpu (3 runs), cuda (2 runs)"."""
    if len(values) == 1 and sum(values.values()) == n:
        return str(next(iter(values)))
    return ", ".join(f"{v} ({c} run{'s' if c != 1 else ''})" for v, c in values.most_common())


def describe_hardware(run_dirs: list[Path]) -> str:
    """What trained the runs, from their ``provenance.jsonl`` (CPU model and kernels, GPU, device, torch, Python,
    threads; host and platform where recorded); values that differ between runs are listed with their counts."""
    values: dict[str, Counter] = {k: Counter() for k, _ in HARDWARE_KEYS}
    recorded = machine = 0
    for run_dir in run_dirs:
        sessions = read_sessions(run_dir)
        recorded += bool(sessions)
        machine += any(s.get(k) for s in sessions for k in MACHINE_KEYS)
        for key, _ in HARDWARE_KEYS:
            seen = list(dict.fromkeys(str(s[key]) for s in sessions if s.get(key) is not None))
            if seen:
                values[key][" then ".join(seen)] += 1
    if not recorded:
        return f"not recorded (none of the {len(run_dirs)} runs has a provenance.jsonl)"
    text = "; ".join(f"{label} {counted(values[k], recorded)}" for k, label in HARDWARE_KEYS if values[k])
    if not machine:
        text += "; the machine itself (CPU or GPU model, cores) is not recorded"
    elif machine < recorded:
        text += (f"; the machine (CPU or GPU model) is recorded for {machine} of those {recorded} runs (the others "
                 "predate it)")
    if recorded < len(run_dirs):
        text += f" (from the {recorded} of {len(run_dirs)} runs that have a provenance.jsonl)"
    return text
