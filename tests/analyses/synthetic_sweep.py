"""Tidy frames of a fake LST sweep (the shape `analyses.lst.analyse.collect` returns), for report tests."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

ACC_KEYS = ("train_acc", "test_acc", "ood_acc", "ood_acc_binary", "ood_acc_ternary", "ood_acc_quaternary")
VIEWS = (("raw", "mean"), ("raw", "0"), ("q", "0"), ("k", "0"), ("qk", "0"), ("kernel", "mean"), ("attention", "mean"))


def synthetic_frames(items: list[tuple], accuracies: Callable[[np.random.Generator], dict[str, float]],
                     attention_similarity: Callable[[np.random.Generator], float],
                     seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, pd.DataFrame]:
    """``items``: (group, pe, sigma, placement, control) per run kind; each kind runs for every seed,
    with checkpoints at epochs 2 and 4 and random identifiability metrics."""
    rng = np.random.default_rng(0)
    runs, evals, ana, lay = [], [], [], []
    coords = np.array([(r, c) for r in range(4) for c in range(4)], float)
    for seed in seeds:
        for group, pe, sigma, place, control in items:
            name = f"{group}-{pe}-{sigma}-{control}-{seed}"
            tags = {"group": group, "pe": pe, "sigma": sigma, "placement": place, "control": control, "seed": seed}
            acc = accuracies(rng)
            runs.append({"run": name, **tags, "epochs": 4, **acc, "train_seconds": 1.0})
            for ep in (2, 4):
                evals.append({"run": name, **tags, "epoch": ep, "step": ep, "time": 1.0, **acc})
                for view, layer in VIEWS:
                    ana.append({"run": name, **tags, "checkpoint": f"step-{ep}", "epoch": ep, "step": ep,
                                "is_last": ep == 4, **{f"eval_{k}": v for k, v in acc.items()},
                                "view": view, "layer": layer, "rsa_spearman": float(rng.uniform(-0.2, 0.9)),
                                "rsa_p": float(rng.uniform(0, 0.2)), "recovery_cmds_r2": float(rng.uniform(0, 1)),
                                "probe_r2": 0.5, "ref_shape_distance": float(rng.uniform(0.5, 1.5)),
                                "ref_procrustes_distance": float(rng.uniform(1, 10)), "kernel_distance_rho": 0.1,
                                "attention_similarity": attention_similarity(rng) if view == "attention" else None})
            for view in ("raw", "kernel", "attention"):
                rec = coords + rng.normal(0, 0.3, coords.shape)
                for pos in range(16):
                    lay.append({"run": name, **tags, "view": view, "layer": "mean", "position": pos,
                                "true_row": coords[pos, 0], "true_col": coords[pos, 1],
                                "cmds_row": rec[pos, 0], "cmds_col": rec[pos, 1]})
    return {"runs": pd.DataFrame(runs), "evals": pd.DataFrame(evals), "analyses": pd.DataFrame(ana),
            "layouts": pd.DataFrame(lay)}


def run_report_command(main: Callable[[list[str]], int], args: list[str], capsys) -> tuple[int, str]:
    """Run an LST report command's ``main`` with few permutations: (exit code, captured stderr)."""
    try:
        code = main(args + ["--n-perm", "5", "--n-boot", "5"])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err
