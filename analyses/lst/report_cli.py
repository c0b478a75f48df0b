"""What the two LST report commands (`analyses.lst.report`, `analyses.lst.length`) share: their common
options, the regenerate command their README prints, and writing the folder staged (whole or not at all)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Callable

from pe_probe.errors import InputError
from pe_probe.output import staged_dir

DEFAULT_COUNT = 500  # permutations and bootstrap resamples per analysis


def add_common_options(p: argparse.ArgumentParser, perm_help: str) -> None:
    """--n-perm, --n-boot, --note and --force (--root and --out differ per command)."""
    p.add_argument("--n-perm", type=int, default=DEFAULT_COUNT, help=f"{perm_help} (default: %(default)s)")
    p.add_argument("--n-boot", type=int, default=DEFAULT_COUNT, help="bootstrap resamples per RSA CI (default: %(default)s)")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="an extra line for the report's Setting section, e.g. where the runs came from (repeatable)")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder not written by pe-probe")


def regenerate_command(module: str, options: list[tuple[str, str]], args: argparse.Namespace) -> str:
    """``python -m MODULE`` with ``options`` ((flag, value) pairs, shell-quoted), the counts where they are not
    the defaults, and one ``--note`` per line."""
    cmd = f"python -m {module}" + "".join(f" {flag} {shlex.quote(value)}" for flag, value in options)
    cmd += "".join(f" --{k.replace('_', '-')} {v}" for k, v in (("n_perm", args.n_perm), ("n_boot", args.n_boot))
                   if v != DEFAULT_COUNT)
    return cmd + "".join(f" \\\n    --note {shlex.quote(n)}" for n in args.note)


def write_staged(p: argparse.ArgumentParser, out: str, force: bool, kind: str, write: Callable[[Path], object]) -> None:
    """``write(stage)`` into a staging folder that replaces ``out`` only once it returns (a report of ``kind``,
    `pe_probe.output.staged_dir`); an `InputError` is a usage error of ``p`` (one line, exit 2) and leaves ``out``
    as it was."""
    try:
        with staged_dir(out, force, kind=kind) as stage:
            write(stage)
    except InputError as e:
        p.error(str(e))
    print(f"report written to {Path(out) / 'README.md'}")
