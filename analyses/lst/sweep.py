"""``python -m analyses.lst.sweep``: train the Latin Square Task grid, resumably.

    python -m analyses.lst.sweep --preset quick --workers 2 --root runs/lst-sweep
    python -m analyses.lst.sweep --preset paper --sigmas full --seeds 15 --device cuda --root runs/lst-paper
    python -m analyses.lst.sweep --preset paper --epochs 400 ...      # a shorter paper-setting sweep

Finished runs (last.pt at the configured epoch) are skipped; unfinished ones resume from their
last.pt (the trainer's exact resume). The grid is written to ROOT/grid.json, progress to
ROOT/sweep.log. Analyses are a separate, cached step: ``python -m analyses.lst.analyse --root ROOT``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from analyses.lst.grid import PRESET_SETTINGS, build_grid
from analyses.lst.runner import is_finished, make_runner


def parse_overrides(items: list[str]) -> dict:
    """``key=value`` pairs (dotted config keys); values parsed as JSON when possible."""
    out = {}
    for item in items:
        key, _, raw = item.partition("=")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analyses.lst.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="quick", choices=sorted(PRESET_SETTINGS))
    p.add_argument("--sigmas", default="default", help="default (10 values 0.01..2.0), full (0.1..2.0 step 0.1) or a comma list")
    p.add_argument("--seeds", type=int, default=None, help="seeds per group (quick: 2 for the sigma grid, 1 otherwise; paper: 15)")
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs (quick 40, paper 4000)")
    p.add_argument("--workers", type=int, default=2, help="parallel training processes (1 thread each)")
    p.add_argument("--backend", default="local", help="runner backend (local)")
    p.add_argument("--root", default="runs/lst-sweep", help="sweep folder: one subfolder per run")
    p.add_argument("--groups", default="sigma,pe_type,placement,control", help="subset of groups to run")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override for every run (e.g. device=cuda, model.d_model=8)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their state, train nothing")
    args = p.parse_args(argv)

    sigmas = args.sigmas if args.sigmas in ("default", "full") else tuple(float(s) for s in args.sigmas.split(","))
    grid = build_grid(args.preset, sigmas=sigmas, seeds=args.seeds, epochs=args.epochs,
                      base_overrides=parse_overrides(args.overrides), include=tuple(args.groups.split(",")))
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    logf = open(root / "sweep.log", "a")

    def log(msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    (root / "grid.json").write_text(json.dumps({"preset": args.preset, "argv": sys.argv[1:] if argv is None else argv,
                                                 "runs": [s.to_dict() for s in grid]}, indent=1) + "\n")
    todo = [s for s in grid if not is_finished(s, root / s.name)]
    log(f"sweep {args.preset}: {len(grid)} runs, {len(grid) - len(todo)} finished, {len(todo)} to train "
        f"({args.workers} workers)")
    if args.dry_run:
        for s in grid:
            print(f"  {'done' if s not in todo else 'todo'}  {s.name}")
        return 0
    runner = make_runner(args.backend, args.workers, log=log)

    def stop(signum, frame):  # noqa: ARG001
        log(f"signal {signum}: stopping the running trainings (they resume on the next call)")
        if hasattr(runner, "terminate"):
            runner.terminate()
        sys.exit(130)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    t0 = time.time()
    for s in todo:
        runner.submit(s, root / s.name)
    results = runner.wait()
    failed = [r.name for r in results if r.returncode != 0]
    log(f"sweep done in {time.time() - t0:.0f} s: {len(results) - len(failed)} trained, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
