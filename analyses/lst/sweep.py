"""``python -m analyses.lst.sweep``: train the Latin Square Task grid, resumably.

    python -m analyses.lst.sweep --preset quick --workers 2 --root runs/lst-sweep
    python -m analyses.lst.sweep --preset quick --backend ensemble --root runs/lst-sweep  # batched ensembles
    python -m analyses.lst.sweep --preset paper --sigmas full --seeds 15 --set device=cuda --root runs/lst-paper
    python -m analyses.lst.sweep --preset paper --sigmas full --seeds 15 --set device=cuda --backend ensemble \\
        --bf16 --cuda-graphs --root runs/lst-paper                       # the whole sweep batched on one GPU
    python -m analyses.lst.sweep --preset paper --epochs 400 ...      # a shorter paper-setting sweep
    python -m analyses.lst.sweep --preset paper --backend ray --address auto --set device=cuda --gpus-per-run 0.25 \\
        --root s3://bucket/lst-paper                                       # on a Ray cluster (extra `ray`)

Finished runs (last.pt at the configured epoch) are skipped; unfinished ones resume from their
last.pt (the trainer's exact resume). The grid is written to ROOT/grid.json (merged with an earlier call's:
its other runs are kept and every call's argv is recorded), progress to ROOT/sweep.log; ``--dry-run`` only
prints the runs and their state, and writes nothing. Analyses are a separate, cached step:
``python -m analyses.lst.analyse --root ROOT``.
Every option, every run's config and the speed options are checked before anything is written: a bad
value (``--workers 0``, ``--seeds 0``, duplicate ``--sigmas``, a ``--root`` that is a file, a Ray option
without ``--backend ray`` ...), a bad ``--set``, a ``--set`` of a key the grid sets itself (seed, pe.*, the
controls' optimiser), an option the device cannot run, or a run folder holding files that are not the run's
is a one-line error (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import signal
import sys
import time
from pathlib import Path

from analyses.lst.grid import GROUPS, PRESET_SETTINGS, NoTrainOption, RunSpec, build_grid
from analyses.lst.ray_runner import join, resolve, run_is_finished
from analyses.lst.runner import make_runner
from pe_probe.errors import InputError, OneLineArgumentParser, check_utf8_out, first_line, to_devnull
from trainers.console import print_line
from trainers.ensemble import usable_cores
from trainers.train import SpeedOptions


def parse_overrides(items: list[str]) -> dict:
    """``key=value`` pairs (dotted config keys); values parsed as JSON when possible."""
    out = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not key or not eq:
            raise InputError(f"--set {item!r}: give KEY=VALUE, e.g. --set model.d_model=8")
        if key == "optim.epochs":  # the checkpoint and evaluation cadence follow --epochs, not this
            raise InputError(f"--set {item}: use --epochs {raw}, which also spaces the checkpoints (~8 a run; "
                             "--set ckpt_every=N to choose them)")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def parse_sigmas(text: str) -> str | tuple[float, ...]:
    """``default``, ``full`` or a comma list of positive numbers."""
    if text in ("default", "full"):
        return text
    try:
        sigmas = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--sigmas {text!r}: give default, full or a comma list of numbers such as 0.1,0.5,2.0") from None
    if not all(math.isfinite(v) and v > 0 for v in sigmas):
        raise InputError(f"--sigmas {text!r}: every sigma must be > 0 and finite")
    return sigmas


def parse_groups(text: str) -> tuple[str, ...]:
    """A comma list of groups (spaces allowed); `build_grid` checks the names."""
    groups = tuple(g.strip() for g in text.split(","))
    if "" in groups:
        raise InputError(f"--groups {text!r}: give a comma list of groups from {', '.join(GROUPS)}")
    return groups


def check_folder(flag: str, path: str) -> None:
    """A local folder that exists or can be made: not empty, not a file, not below a file, and named in UTF-8
    (the runs trained there could not be analysed otherwise)."""
    if not path:
        raise InputError(f"{flag} '': give a folder")
    check_utf8_out(path, flag)
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        what = "is a file" if p == Path(path) else f"is below {p}, which is a file"
        raise InputError(f"{flag} {path}: {what}, not a folder; give a folder path")


def check_grid(grid: list[RunSpec], backend: str, speed: SpeedOptions, sets: list[str] | None = None) -> None:
    """Every run's config builds (unknown keys, bad values), the local backend can pass its overrides as
    ``pe-probe train lst`` options that give the run that config (`RunSpec.check_train_args`), and the speed
    options run on the device of every run trained in this process (the Ray workers check their own). Raises a
    one-line `InputError`; a config error names the ``sets`` (the ``--set`` items) it came from."""
    from trainers.evaluate import resolve_device

    devices = set()
    try:
        for spec in grid:
            devices.add(spec.config().device)
            if backend == "local":
                try:
                    spec.check_train_args()
                except NoTrainOption as e:
                    raise InputError(f"{e}; use --backend ensemble or ray for other keys") from None
    except ValueError as e:
        msg = first_line(e)
        if sets and not msg.startswith("--set "):  # the config's checks name the trainer's flags; here the
            # values came from --set (messages that start with --set name it already)
            msg += f" (from --set {' --set '.join(sets)})"
        raise InputError(msg) from None
    if backend == "ray":
        return
    for device in sorted(devices):
        try:
            dev = resolve_device(device)
        except InputError:  # the trainer's message names its --device flag; here the device is a --set
            raise InputError("--set device=cuda: no CUDA device is available here; drop it, or use "
                             "--backend ray with GPU workers") from None
        gpu_only = speed.gpu_only() if dev.type != "cuda" else []  # worded for the sweep: its device is a --set
        if gpu_only:
            raise InputError(f"{gpu_only[0]} needs the runs on a GPU (they are on {dev.type!r}): add --set device=cuda, "
                             f"or drop {gpu_only[0]}")
        speed.check(dev)


def config_clashes(grid: list[RunSpec], run_dir) -> list[str]:
    """``NAME (key: old -> new, ...)`` for each run of ``grid`` whose local folder's config.json differs from
    the run's config (what the trainer would refuse to resume, and what the sweep would skip if finished)."""
    from trainers.train import CONFIG_FILE, config_differences

    out = []
    for s in grid:
        path = Path(run_dir(s)) / CONFIG_FILE
        if not path.is_file():
            continue
        try:
            old = json.loads(path.read_text())
        except ValueError:
            continue  # the trainer names a broken config.json itself
        diff = config_differences(old, s.config().to_dict())
        if diff:
            out.append(f"{s.name} ({', '.join(f'{k}: {was!r} -> {now!r}' for k, was, now in diff[:3])})")
    return out


def foreign_folders(grid: list[RunSpec], root: Path) -> list[str]:
    """``NAME: reason`` for each run folder under ``root`` without last.pt that the trainer would refuse to start
    in (`trainers.train.check_run_dir`: files that are not the run's); folders with last.pt: `config_clashes`."""
    from trainers.train import LAST, RunDirRefused, check_run_dir

    out = []
    for s in grid:
        folder = root / s.name
        if not folder.is_dir() or (folder / LAST).exists():
            continue
        try:
            check_run_dir(s.config(), folder, force=False)
        except RunDirRefused as e:  # its reason without the trainer's fix, which names the trainer's flags
            inside = "" if e.subject == folder else f"{e.subject.relative_to(folder)} "
            out.append(f"{s.name}: {inside}{e.reason}")
    return out


def merged_grid(path: Path, preset: str, argv: list[str], grid: list[RunSpec]) -> dict:
    """grid.json after this call: an earlier call's runs not in ``grid`` (by name) kept, then ``grid``'s; every
    call's preset and argv in "calls" ("argv": this call's; "preset": the calls' presets, comma-separated if they
    differ). Raises a one-line `InputError` for an unreadable earlier grid.json."""
    from analyses.lst.setting import read_grid

    old = read_grid(path.parent, fix="it records the earlier calls' runs), or use another --root") or {}
    names = {s.name for s in grid}
    runs = [r for r in old.get("runs", []) if not (isinstance(r, dict) and r.get("name") in names)]
    calls = [c for c in old.get("calls") or ([{"preset": old.get("preset"), "argv": old.get("argv")}] if old else [])
             if isinstance(c, dict)] + [{"preset": preset, "argv": argv}]
    presets = dict.fromkeys(str(c["preset"]) for c in calls if c.get("preset"))
    return {"preset": ",".join(presets), "argv": argv, "calls": calls, "runs": runs + [s.to_dict() for s in grid]}


def ray_installed() -> bool:
    """Whether Ray can be imported here (the `ray` extra); checked before a --backend ray sweep plans anything."""
    return importlib.util.find_spec("ray") is not None


MAX_WORKERS_PER_CORE = 4  # local / ensemble workers past this many per core only oversubscribe the machine


def check_options(args: argparse.Namespace) -> None:
    """The options `build_grid` does not see: workers, backend and its options, ``--root`` and ``--state-dir``
    (made later: a file there, or an unknown URL, is refused now). Raises a one-line `InputError`."""
    ray_only = [f for f, v in (("--address", args.address), ("--max-retries", args.max_retries),
                                ("--cpus-per-run", args.cpus_per_run), ("--gpus-per-run", args.gpus_per_run))
                if v is not None]
    url = "://" in args.root
    cores = usable_cores()
    problems = [
        (args.workers < 1, f"--workers must be >= 1, got {args.workers}"),
        (args.backend != "ray" and args.workers > MAX_WORKERS_PER_CORE * cores,
         f"--workers {args.workers} is more than {MAX_WORKERS_PER_CORE}x this machine's {cores} usable core(s): each "
         f"worker trains on a core of its own ({'a process' if args.backend == 'local' else 'a thread'} with one torch "
         f"thread); use at most {MAX_WORKERS_PER_CORE * cores} (the fastest: {cores}), or --backend ray for a cluster"),
        (url and args.backend != "ray", "a URL --root needs --backend ray"),
        (args.ensemble_max is not None and args.backend != "ensemble",
         "--ensemble-max needs --backend ensemble; add it, or drop --ensemble-max"),
        (args.ensemble_max is not None and args.ensemble_max < 1,
         f"--ensemble-max must be >= 1, got {args.ensemble_max}"),
        (bool(ray_only) and args.backend != "ray",
         f"{(ray_only or [''])[0]} is an option of --backend ray; add --backend ray, or drop it"),
        (args.max_retries is not None and args.max_retries < 0, f"--max-retries must be >= 0, got {args.max_retries}"),
        (args.cpus_per_run is not None and not (math.isfinite(args.cpus_per_run) and args.cpus_per_run > 0),
         f"--cpus-per-run must be a finite number > 0, got {args.cpus_per_run}"),
        (args.gpus_per_run is not None and not (math.isfinite(args.gpus_per_run) and args.gpus_per_run >= 0),
         f"--gpus-per-run must be a finite number >= 0, got {args.gpus_per_run}"),
        (args.backend == "ray" and not ray_installed(),
         "--backend ray needs Ray, which is not installed here: pip install -e \".[ray]\", or use --backend local "
         "or ensemble"),
    ]
    for bad, msg in problems:
        if bad:
            raise InputError(msg)
    if not url:
        check_folder("--root", args.root)
        return
    check_utf8_out(args.root, "--root")
    check_folder("--state-dir", args.state_dir)  # grid.json and sweep.log of a URL root
    try:
        _, path, local = resolve(args.root)
    except (ImportError, ValueError) as e:  # no fsspec, an unknown protocol, its package missing (s3fs ...)
        raise InputError(f"--root {args.root}: {first_line(e)}; give an fsspec URL whose filesystem is installed "
                         f"(s3:// needs s3fs, gs:// gcsfs), or a local folder") from None
    if local:  # file://
        check_folder("--root", path)


def main(argv: list[str] | None = None) -> int:
    p = OneLineArgumentParser(prog="python -m analyses.lst.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="quick", choices=sorted(PRESET_SETTINGS),
                   help="trainer preset of every run: quick (CPU: d_model 64, 40 epochs) or paper (d_model 160, 4,000 "
                        "epochs; for a GPU) (default: %(default)s)")
    p.add_argument("--sigmas", default="default", help="default (10 values 0.01..2.0), full (0.1..2.0 step 0.1) or a comma list")
    p.add_argument("--seeds", type=int, default=None, help="seeds per group (quick: 2 for the sigma grid, 1 otherwise; paper: 15)")
    p.add_argument("--sigma-seeds", type=int, default=None, metavar="N",
                   help="seeds of the sigma grid alone (and its sin2d reference), e.g. 4 for firmer sigma statistics")
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs (quick 40, paper 4000)")
    p.add_argument("--workers", type=int, default=2, help="parallel training processes, or ensemble worker threads "
                   "(1 thread each) (default: %(default)s)")
    p.add_argument("--backend", default="local", choices=("local", "ensemble", "ray"),
                   help="local: one subprocess per run (--workers at a time; the fastest on a CPU); ensemble: every run "
                        "in this process as batched ensembles on --workers threads (same results as training alone; "
                        "meant for a GPU: on a 2-core CPU it only tied local); ray: one Ray task per run "
                        "(extra `ray`) (default: %(default)s)")
    p.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                   help="ray: join this running cluster; default: start a local Ray instance")
    p.add_argument("--max-retries", type=int, default=None, metavar="N",
                   help="ray: re-run a failed run up to N times (default 2)")
    p.add_argument("--cpus-per-run", type=float, default=None,
                   help="ray: CPUs (= torch threads) each run declares (default 1)")
    p.add_argument("--gpus-per-run", type=float, default=None,
                   help="ray: GPUs each run declares (with --set device=cuda; default 0)")
    p.add_argument("--root", default="runs/lst-sweep",
                   help="sweep folder: one subfolder per run; with --backend ray also an fsspec URL (s3://...) "
                        "(default: %(default)s)")
    p.add_argument("--state-dir", default="runs/sweep-state", help="where grid.json and sweep.log go when --root is a URL "
                   "(default: %(default)s)")
    p.add_argument("--groups", default=",".join(GROUPS), help=f"subset of groups to run (default: all of {', '.join(GROUPS)})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override for every run (e.g. device=cuda, model.d_model=8); not for the keys "
                        "the selected groups set themselves (seed, pe.*; with the control group optim.name, lr, momentum, "
                        "weight_decay)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their state; train and write nothing")
    g = p.add_argument_group("speed (every run; not part of the runs' configs, so a sweep resumes with or without them)")
    g.add_argument("--bf16", action="store_true", help="bf16 autocast (a GPU, or a CPU with native bf16)")
    g.add_argument("--compile", action="store_true", help="torch.compile each run's training step (~95 s per run "
                   "or ensemble group to compile on a CPU)")
    g.add_argument("--cuda-graphs", action="store_true", help="GPU only: --compile with CUDA graphs")
    g.add_argument("--tf32", action="store_true", help="GPU only: TensorFloat-32 float32 matrix products in the "
                   "training steps (evaluation stays float32)")
    g.add_argument("--ensemble-max", type=int, default=None, metavar="K",
                   help="ensemble backend: at most K runs per batched group (default: all on a GPU, 4 on the CPU)")
    args = p.parse_args(argv)

    speed = SpeedOptions(compile=args.compile, bf16=args.bf16, cuda_graphs=args.cuda_graphs, tf32=args.tf32)
    url = "://" in args.root
    try:
        check_options(args)
        grid = build_grid(args.preset, sigmas=parse_sigmas(args.sigmas), seeds=args.seeds, sigma_seeds=args.sigma_seeds,
                          epochs=args.epochs, base_overrides=parse_overrides(args.overrides),
                          include=parse_groups(args.groups))
        check_grid(grid, args.backend, speed, args.overrides)
    except ValueError as e:  # InputError, and build_grid's unknown preset or group
        p.error(first_line(e))
    root = Path(args.state_dir) if url else Path(args.root)  # grid.json and sweep.log

    def run_dir(s):
        return join(args.root, s.name) if url else root / s.name

    if not url:  # a run folder holding another config would be skipped as finished (or refused run by run)
        files = [s.name for s in grid if root.joinpath(s.name).exists() and not root.joinpath(s.name).is_dir()]
        if files:
            p.error(f"{len(files)} run folder(s) under {args.root} are files, e.g. {files[0]}; move them away, "
                    f"or use another --root")
        clashes = config_clashes(grid, run_dir)
        if clashes:
            p.error(f"{len(clashes)} run folder(s) under {args.root} hold runs of another config, e.g. {clashes[0]}; "
                    f"use another --root, or the options that made them")
        foreign = foreign_folders(grid, root)
        if foreign:
            p.error(f"{len(foreign)} run folder(s) under {args.root} cannot take their run, e.g. "
                    f"{foreign[0]}; move those files away, or delete the folder")
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        record = merged_grid(root / "grid.json", args.preset, argv, grid)
    except InputError as e:
        p.error(str(e))
    todo = [s for s in grid if not run_is_finished(s, run_dir(s))]
    summary = (f"sweep {args.preset}: {len(grid)} runs, {len(grid) - len(todo)} finished, {len(todo)} to train "
               f"({'ray' if args.backend == 'ray' else f'{args.workers} workers'})")
    if args.dry_run:  # the plan only: no folder, grid.json or sweep.log
        try:
            print(f"{time.strftime('%H:%M:%S')} {summary} [dry run: nothing written]", flush=True)
            for s in grid:
                print(f"  {'done' if s not in todo else 'todo'}  {s.name}")
            sys.stdout.flush()
        except BrokenPipeError:  # `--dry-run | head`: the reader has what it wanted; as `pe-probe analyze --json`
            to_devnull("stdout")
        return 0
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # e.g. no permission: still nothing written
        p.error(f"{'--state-dir' if url else '--root'} {root}: cannot make it ({e.strerror}); give another folder")
    logf = open(root / "sweep.log", "a")

    def log(msg: str) -> None:  # called from the ensemble backend's worker threads too
        print_line(f"{time.strftime('%H:%M:%S')} {msg}", copy_to=logf)

    (root / "grid.json").write_text(json.dumps(record, indent=1) + "\n")
    log(summary)
    if args.backend == "ray":
        from analyses.lst.ray_runner import RayRunner

        runner = RayRunner(args.address, max_retries=2 if args.max_retries is None else args.max_retries,
                           cpus_per_run=1 if args.cpus_per_run is None else args.cpus_per_run,
                           gpus_per_run=0 if args.gpus_per_run is None else args.gpus_per_run, log=log, speed=speed)
    elif args.backend == "ensemble":
        from analyses.lst.ensemble_runner import EnsembleRunner

        runner = EnsembleRunner(args.workers, log=log, speed=speed, max_group=args.ensemble_max)
    else:
        runner = make_runner(args.backend, args.workers, log=log, speed=speed)

    def stop(signum, frame):  # noqa: ARG001
        log(f"signal {signum}: stopping the running trainings (they resume on the next call)")
        if hasattr(runner, "terminate"):
            runner.terminate()
        sys.exit(130)

    # the sweep's own handlers while it trains, the caller's back afterwards (main() called from Python, tests);
    # a signal the caller ignores (nohup, `cmd &` in a script) stays ignored, as the Ctrl-C guard of analyze does
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN and handler is not None:  # None: set outside Python, cannot be put back
            signal.signal(sig, stop)
    try:
        t0 = time.time()
        for s in todo:
            runner.submit(s, run_dir(s))
        results = runner.wait()
        if hasattr(runner, "close"):
            runner.close()
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
    failed = [r.name for r in results if r.returncode != 0]
    log(f"sweep done in {time.time() - t0:.0f} s: {len(results) - len(failed)} trained, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.lst.sweep")
