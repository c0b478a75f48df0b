"""`pe-probe` command line: a thin layer over the Python API (`pe_probe.api`).

Exit codes: 0 ok, 2 bad input (one line on stderr, no traceback), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from .errors import (InputError, OneLineArgumentParser, ctrl_c_kept, ignore_ctrl_c_while_exiting, interrupted,
                     os_error_message, show_path,
                     to_devnull)

EPILOG_ANALYZE = """\
examples:
  pe-probe analyze runs/lst/last.pt                     # our checkpoint: PE and ground truth found in the file
  pe-probe analyze model.safetensors --ground-truth grid:16x16 --out out/vit
  pe-probe analyze gpt2/ --ground-truth line:1024 --positions 0:128 --out out/gpt2
  pe-probe analyze table.npy --ground-truth coords.csv --pe-metric cosine --methods pca,cmds,umap
  pe-probe analyze builtin:sin2d:8x8 --reference sin2d:8x8 --json

reading the numbers:
  rsa_spearman   rank correlation of PE distances with true distances (1 = same ordering of pairs)
  rsa_p          Mantel permutation p-value (small = geometry not explained by chance labelling)
  recovery_*_r2  share of the true layout's variance explained by the aligned recovered layout
  null_rsa_mean  RSA of random tables of the same shape and scale: the chance level (a --view q/k/qk/kernel
                 reads random PE tables through the same model maps)
"""


def _layer(allow_all: bool = True):
    """An argparse type for --layer: an index, 'mean' and, where one report per layer makes sense, 'all'."""
    def parse(text: str):
        from .validation import parse_layer  # lazily: --help needs no numpy

        try:
            layer = parse_layer(text)
        except ValueError:
            choices = "an integer, 'mean' or 'all'" if allow_all else "an integer or 'mean'"
            raise argparse.ArgumentTypeError(f"--layer takes {choices}, got {text!r}") from None
        if layer == "all" and not allow_all:
            raise argparse.ArgumentTypeError("compare measures one table per source: pass --layer N or --layer mean "
                                             "(pe-probe analyze --layer all reports every layer of one model)")
        return layer

    return parse


def _count(limit: str | None = None, minimum: int = 0):
    """An argparse type: a whole number >= ``minimum`` and, with ``limit``, <= that constant of
    `pe_probe.analysis` (checked here so that the error names the flag, not the API argument)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {v}")
        if limit is not None:
            from . import analysis

            top = getattr(analysis, limit)
            if v > top:
                raise argparse.ArgumentTypeError(f"expected a number <= {top:,}, got {v:,}")
        return v

    return parse


def _folder(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder, e.g. --out out/report")
    return text


def build_parser() -> argparse.ArgumentParser:
    from .defaults import COMPARE_N_BOOT, COMPARE_N_PERM

    p = OneLineArgumentParser(prog="pe-probe", description="Did a transformer's positional encoding recover the true geometry "
                "of its token positions? Load a PE table from any checkpoint and measure it against ground truth.",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"pe-probe {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)

    a = sub.add_parser("analyze", help="measure how well one PE table recovers ground-truth positions",
                       description="Measure how well a positional-encoding table recovers the ground-truth "
                       "geometry: RSA with permutation p-value and bootstrap CI, PCA/MDS/SMACOF/UMAP recovery "
                       "with Procrustes alignment, linear probe, neighbourhood metrics, spectrum, chance level.",
                       epilog=EPILOG_ANALYZE, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("source", metavar="SOURCE", help="our checkpoint (.pt), a state_dict (.pt/.pth/.bin), .safetensors, "
                   "a Hugging Face model folder, a raw table (.npy/.npz/.csv/.pt tensor) or builtin:sin2d:8x8 / "
                   "builtin:sin1d:N / builtin:random:NxD")
    a.add_argument("--ground-truth", "-g", metavar="SPEC", help="N x k coordinates: a .npy/.csv/.txt file, or line:N, "
                   "grid:HxW, grid:HxWxD (default: the checkpoint's own ground truth)")
    a.add_argument("--param", metavar="NAME", help="tensor to analyse (default: found automatically)")
    a.add_argument("--layer", type=_layer(), metavar="N|mean|all", help="for models with one PE table per layer: "
                   "an index, their mean, or all (one report per layer); default 0")
    a.add_argument("--positions", metavar="A:B", help="analyse rows A..B-1 of the table (e.g. 0:128)")
    a.add_argument("--drop-extra-tokens", type=_count(), metavar="K", help="leading rows to drop (ViT CLS tokens "
                   "are detected automatically; 0 keeps every row)")
    a.add_argument("--view", default="raw", choices=("raw", "q", "k", "qk", "kernel", "attention"),
                   help="what to analyse: raw = the table (default); q/k/qk = the table as the first attention "
                   "layer reading it sees it (after its layer norm, through W_Q/W_K); kernel = the positional "
                   "attention kernel softmax(QK^T/sqrt(d)); attention = attention maps on task data averaged "
                   "over puzzles (our Latin Square Task checkpoints)")
    a.add_argument("--attention-reference", metavar="CKPT", help="with --view attention: a reference checkpoint "
                   "(e.g. the 2D-sinusoid model) for the cosine similarity of attention maps")
    a.add_argument("--out", "-o", type=_folder, metavar="DIR", help="report folder (metrics.json, metrics.csv, embedding.csv, "
                   "figures/, interactive.html, index.html); nothing is written without it")
    a.add_argument("--pe-metric", default="euclidean", choices=("euclidean", "cosine", "correlation"),
                   help="distance between PE rows (default: %(default)s); ground-truth distances are Euclidean")
    a.add_argument("--methods", default="pca,cmds,smacof", metavar="LIST",
                   help="recovery methods, comma-separated from pca,cmds,smacof,umap (default: %(default)s; "
                   "umap compiles for ~15 s on first use)")
    a.add_argument("--n-perm", type=_count("MAX_PERMUTATIONS"), default=1000, metavar="N",
                   help="permutations for Mantel/PROTEST p-values (default: %(default)s; 0 skips)")
    a.add_argument("--n-boot", type=_count("MAX_BOOTSTRAP"), default=1000, metavar="N",
                   help="bootstrap resamples of positions for the RSA 95%% CI (default: %(default)s; 0 skips)")
    a.add_argument("--n-null", type=_count("MAX_NULL_TABLES"), metavar="N", help="random tables for the chance level "
                   "(default: 20, fewer for N > 1000)")
    a.add_argument("--neighbours", type=_count(minimum=1), metavar="K", help="k for trustworthiness/kNN overlap, "
                   "below N/2 (default: min(5, N//2 - 1))")
    a.add_argument("--seed", type=_count("MAX_SEED"), default=0, help="seed for every random step (default: %(default)s)")
    a.add_argument("--reference", metavar="SPEC", help="reference table for ref_shape_distance: sin1d, sin2d:HxW or a file")
    a.add_argument("--no-reflection", action="store_true", help=argparse.SUPPRESS)  # refused: NO_REFLECTION_REFUSED
    a.add_argument("--no-figures", action="store_true", help="write only metrics.json/csv and embedding.csv")
    a.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the summary table")
    a.add_argument("--force", action="store_true", help="replace an existing --out folder not written by pe-probe")
    a.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    c = sub.add_parser("compare", help="compare many checkpoints/runs: tidy table and figures",
                       description="Analyse several checkpoints, tables or run folders and write a tidy table of "
                       "every metric with the configs and evaluation metrics they carry, plus figures. One run "
                       "folder alone expands to all its checkpoints (a training trajectory).",
                       epilog="example:\n  pe-probe compare runs/sweep/*/ --by pe.init_std --out out/sweep",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("sources", nargs="+", metavar="RUN_OR_CKPT",
                   help="run folders, checkpoints, tables or model folders; one run folder alone = its trajectory")
    c.add_argument("--out", "-o", type=_folder, required=True, metavar="DIR",
                   help="report folder: compare.csv, correlations.csv, figures/, index.html")
    c.add_argument("--by", metavar="CONFIG_KEY", help="config key for the x axis, dotted (e.g. pe.init_std)")
    c.add_argument("--ground-truth", "-g", metavar="SPEC",
                   help="ground truth for every source (default: each checkpoint's own; needed for raw tables and "
                   "model folders)")
    c.add_argument("--param", metavar="NAME", help="tensor to analyse in every source (default: found automatically)")
    c.add_argument("--positions", metavar="A:B", help="analyse rows A..B-1 of every table (e.g. 0:128)")
    c.add_argument("--drop-extra-tokens", type=_count(), metavar="K",
                   help="leading rows to drop from every table (default: detect CLS/offset rows; 0 keeps every row)")
    c.add_argument("--layer", type=_layer(allow_all=False), metavar="N|mean",
                   help="for models with one PE table per layer: which one (default: 0; compare.csv's "
                   "param, layer and notes columns say which table each row measured)")
    c.add_argument("--pe-metric", default="euclidean", choices=("euclidean", "cosine", "correlation"),
                   help="distance between PE rows (default: %(default)s)")
    c.add_argument("--methods", default="pca,cmds,smacof", metavar="LIST",
                   help="recovery methods, comma-separated: pca, cmds, smacof, umap (default: %(default)s)")
    c.add_argument("--n-perm", type=_count("MAX_PERMUTATIONS"), default=COMPARE_N_PERM, metavar="N",
                   help="Mantel / PROTEST permutations per source (default: %(default)s)")
    c.add_argument("--n-boot", type=_count("MAX_BOOTSTRAP"), default=COMPARE_N_BOOT, metavar="N",
                   help="bootstrap resamples for the RSA CI per source (default: %(default)s)")
    c.add_argument("--seed", type=_count("MAX_SEED"), default=0, help="seed for every random step (default: %(default)s)")
    c.add_argument("--reference", metavar="SPEC", help="reference table for ref_shape_distance: sin1d, sin2d:HxW or a file")
    c.add_argument("--force", action="store_true", help="replace an existing --out folder not written by pe-probe")
    c.add_argument("--backend", default="local", choices=("local", "ray"),
                   help="ray: analyse each source in a Ray task, on this machine or a cluster (extra `ray`)")
    c.add_argument("--address", metavar="auto|HOST:PORT",
                   help="with --backend ray: join a running Ray cluster (default: start a local instance)")

    for name, text in (("train", "train a model on a task and write checkpoints (see pe-probe train --help)"),
                       ("evaluate", "accuracy per difficulty level (netsim, brain: MSE) of a checkpoint on its own held-out data or a puzzle file"),
                       ("demo", "train a small-sigma and a large-sigma model and report the contrast")):
        sub.add_parser(name, help=text, add_help=False)
    p.command_parsers = {"analyze": a, "compare": c}  # type: ignore[attr-defined]  # errors that name the command
    return p


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, except that an unrecognised option is reported by the command's own parser
    (``pe-probe analyze: error: ... (see pe-probe analyze --help)``), not by ``pe-probe``'s, whose help does
    not list it."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command_parser = getattr(parser, "command_parsers", {}).get(args.command, parser)
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pe-probe")
    except Exception:  # pragma: no cover
        return "unknown"


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) >= 1e-4 or v == 0 else f"{v:.2e}"
    return str(v)


def format_summary(result, title: str = "") -> str:
    """A readable terminal summary of one analysis."""
    m = result.metrics
    prov = result.provenance
    lines = []
    if title:
        lines.append(title)
    src = prov.get("source", "table")
    param = prov.get("param")  # a tensor name from an untrusted file: control characters quoted, like paths
    if isinstance(param, list):  # --layer mean: the tables averaged, named as compare.csv names them
        param = "+".join(map(str, param))
    lines.append(f"source      {show_path(src)}  param={show_path(param) if isinstance(param, str) else param}  "
                 f"layer={prov.get('layer')}")
    if prov.get("original_shape"):
        extra = f", {prov['extra_tokens']} leading row(s) dropped" if prov.get("extra_tokens") else ""
        centred = "; rows look mean-centred (each row's mean ~ 0)" if prov.get("row_centred") else ""
        lines.append(f"tensor      stored shape {tuple(prov['original_shape'])}{extra}{centred}")
    lines.append(f"table       N={m['n_positions']} positions x d={m['pe_dim']} dims; ground truth "
                 f"{show_path(result.gt_spec)} (k={m['gt_dim']}); PE metric {result.pe_metric}")
    for note in prov.get("notes") or []:
        lines.append(f"note        {note}")
    lines.append("")
    rows = [
        ("RSA (Spearman)", m["rsa_spearman"], f"95% CI [{_fmt(m['rsa_ci_low'])}, {_fmt(m['rsa_ci_high'])}], "
         f"Mantel p = {_fmt(m['rsa_p'])}; chance {_fmt(m['null_rsa_mean'])} +- {_fmt(m['null_rsa_sd'])}"),
        ("RSA (Pearson)", m["rsa_pearson"], ""),
        ("RSA (Kendall tau-b)", m["rsa_kendall"], ""),
    ]
    for meth in result.methods:
        rows.append((f"recovery {meth} r2", m[f"recovery_{meth}_r2"],
                     f"RMSE {_fmt(m[f'recovery_{meth}_rmse'])} (true units), PROTEST p = {_fmt(m[f'recovery_{meth}_p'])}"))
    rows += [
        ("linear probe R2", m["probe_r2"], "cross-validated ridge, mean over axes"),
        ("trustworthiness", m["trustworthiness"], f"kNN overlap {_fmt(m['knn_overlap'])}"),
        ("MDS stress-1", m["mds_stress"], "Kruskal (ratio disparities), classical MDS in k dims"),
        ("participation ratio", m["participation_ratio"], f"top-k PCs explain {_fmt(m['explained_variance'])} of variance"),
    ]
    if "kernel_distance_rho" in m:
        rows.append(("kernel vs -distance", m["kernel_distance_rho"], "Spearman: attends to near positions when high"))
    if "causal_mask_rsa" in m:
        rows.append(("causal mask RSA", m["causal_mask_rsa"], f"the mask alone (a table without positions); the kernel's "
                     f"excess {_fmt(m['causal_excess_rsa'])}, 95% CI [{_fmt(m['causal_excess_ci_low'])}, "
                     f"{_fmt(m['causal_excess_ci_high'])}]; mask-only kernel vs -distance {_fmt(m['causal_mask_kernel_rho'])}"))
    if "attention_similarity" in m:
        rows.append(("attention similarity", m["attention_similarity"], "cosine with the reference model's maps"))
    if "ref_shape_distance" in m:
        chance = (f"; chance {_fmt(m['null_ref_shape_distance_mean'])} +- {_fmt(m.get('null_ref_shape_distance_sd'))}"
                  if "null_ref_shape_distance_mean" in m else "")
        rows.append(("shape distance to ref", m["ref_shape_distance"], f"radians{chance}; unnormalised Procrustes "
                     f"{_fmt(m.get('ref_procrustes_distance'))}"))
    width = max(len(r[0]) for r in rows)
    value_width = max(8, *(len(_fmt(r[1])) for r in rows))  # a long value (0.0002604) keeps the column aligned
    for name, val, extra in rows:
        lines.append(f"  {name:<{width}}  {_fmt(val):>{value_width}}  {extra}")
    return "\n".join(lines)


def cmd_analyze(args: argparse.Namespace) -> int:
    from .api import analyze_source, n_layers, write_analysis
    from .output import check_out_dir, metrics_document

    if args.no_reflection:
        from .analysis import NO_REFLECTION_REFUSED

        raise InputError(NO_REFLECTION_REFUSED)
    if args.attention_reference is not None and args.view != "attention":
        raise InputError("--attention-reference applies to --view attention only; add --view attention or drop it")

    if not args.out and (args.force or args.no_figures):  # they would be silently ignored
        given = [f for f, on in (("--force", args.force), ("--no-figures", args.no_figures)) if on]
        flags = " and ".join(given)
        raise InputError(f"{flags} {'act' if len(given) > 1 else 'acts'} on the report folder only: add --out DIR or "
                         f"drop {flags}")
    if args.out:
        check_out_dir(args.out, args.force, inputs=(args.source, args.ground_truth, args.reference, args.attention_reference),
                      kind="analyze")
    kwargs = dict(pe_metric=args.pe_metric, methods=args.methods, n_perm=args.n_perm, n_boot=args.n_boot,
                  seed=args.seed, reference=args.reference, n_null=args.n_null, neighbours=args.neighbours,
                  progress=not args.quiet and not args.json)
    from .api import analyze_view

    load = dict(param=args.param, positions=args.positions, drop_extra_tokens=args.drop_extra_tokens)
    if args.view == "raw":
        layers = [args.layer]
        if args.layer == "all":
            layers = list(range(n_layers(args.source, args.param)))
        results = [(layer, analyze_source(args.source, args.ground_truth, layer=layer, **load, **kwargs))
                   for layer in layers]
    else:
        res_list = analyze_view(args.source, args.view, args.ground_truth, layer=args.layer,
                                attention_reference=args.attention_reference, **load, **kwargs)
        # a source with one table records layer None: its one report is layer 0's, as with the raw view
        results = [(i if r.provenance.get("layer") is None else r.provenance.get("layer"), r)
                   for i, r in enumerate(res_list)]
    multi = len(results) > 1 or args.layer == "all"
    if args.out:
        if multi:
            from .output import staged_dir

            with staged_dir(args.out, args.force, kind="analyze") as stage:
                for layer, res in results:
                    write_analysis(res, stage / f"layer-{layer}", figures=not args.no_figures)
        else:
            write_analysis(results[0][1], args.out, force=args.force, figures=not args.no_figures)
    if args.json:
        docs = [metrics_document(r) for _, r in results]
        print(json.dumps(docs if multi else docs[0], indent=2, allow_nan=False))
    else:
        for layer, res in results:
            title = f"== layer {layer} ({args.view}) ==" if multi else ""
            print(format_summary(res, title))
        if args.out:
            where = [f"{show_path(args.out)}/layer-{layer}/" for layer, _ in results] if multi else [f"{show_path(args.out)}/"]
            page = "" if args.no_figures else "index.html"
            print("\nreport written to " + ", ".join(w + page for w in where))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare

    if args.address is not None and args.backend != "ray":  # it was silently ignored
        raise InputError("--address joins a Ray cluster, an option of --backend ray; add --backend ray or drop --address")
    load = {k: v for k, v in (("layer", args.layer), ("param", args.param), ("positions", args.positions),
                              ("drop_extra_tokens", args.drop_extra_tokens)) if v is not None}
    df = compare(args.sources, args.out, by=args.by, ground_truth=args.ground_truth,
                 analyze_kwargs=dict(pe_metric=args.pe_metric, methods=args.methods, n_perm=args.n_perm,
                                     n_boot=args.n_boot, seed=args.seed, reference=args.reference, **load),
                 force=args.force, backend=args.backend, address=args.address)
    print(f"compared {len(df)} source{'s' if len(df) != 1 else ''}; table and figures in {show_path(args.out)}/ "
          "(compare.csv, index.html)")
    return 0


def _glue_negative_values(argv: list[str]) -> list[str]:
    """``--positions -64:`` reads as two options to argparse (a value may not start with '-'):
    glue such a value to its option, ``--positions=-64:``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--positions" and i + 1 < len(argv) and re.match(r"-\d", argv[i + 1]):
            out.append(f"--positions={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _exit_on_sigterm() -> None:
    """SIGTERM (kill, a batch system's time limit) raises SystemExit like Ctrl-C raises KeyboardInterrupt,
    so half-written report folders are cleaned up on the way out."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    argv = _glue_negative_values(list(sys.argv[1:] if argv is None else argv))
    try:
        if argv and argv[0] in ("train", "evaluate", "demo"):
            from trainers import cli as tcli

            return int({"train": tcli.train_main, "evaluate": tcli.evaluate_main, "demo": tcli.demo_main}[argv[0]](argv[1:]) or 0)
        parser = build_parser()
        args = parse_command_line(parser, argv)
        if args.command is None:
            parser.print_help()
            return 0
        with ctrl_c_kept():
            return {"analyze": cmd_analyze, "compare": cmd_compare}[args.command](args)
    except InputError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "bad input"
        sys.stderr.write(f"{exc.prog or 'pe-probe'}: error: {msg}\n")
        return 2
    except BrokenPipeError:  # output piped into `head` and closed: not an error
        to_devnull("stdout")
        return 0
    except OSError as exc:  # a path the user gave cannot be read or written (permissions, a name too long, ...)
        msg = os_error_message(exc)
        if msg is None:
            raise
        sys.stderr.write(f"pe-probe: error: {msg}\n")
        return 2
    except (KeyboardInterrupt, SystemError) as exc:  # numba-compiled loops wrap a Ctrl-C in a SystemError
        wrapped = exc.__cause__ or exc.__context__
        if isinstance(exc, SystemError) and isinstance(wrapped, SystemExit):  # ... and SIGTERM's exit (143)
            return int(wrapped.code) if isinstance(wrapped.code, int) else 2
        if not interrupted(exc):
            raise
        sys.stderr.write("pe-probe: interrupted\n")
        return 130
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 2


def entry() -> int:
    """The ``pe-probe`` console script: `main` plus process-wide signal handling."""
    _exit_on_sigterm()
    code = main()
    if code == 130:
        ignore_ctrl_c_while_exiting()
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(entry())
