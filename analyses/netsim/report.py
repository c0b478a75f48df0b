"""Regenerate reports/netsim/ (or reports/netsim-standard/): a sigma sweep on the network simulation task, then its analysis.

    python -m analyses.netsim.report                       # pilot: trains missing runs (runs/report-netsim/), then analyses
    python -m analyses.netsim.report --scale standard      # the larger CPU scale (runs/report-netsim-standard/)

Learned PEs at 4 init sigmas plus the fixed 2D sinusoid and no PE, on an 8x8 grid of nodes. Two scales:
``pilot`` (the quick preset: 2 layers, d_model 32, 10 epochs on 2,000 simulated windows, 2 seeds; about
5 minutes on one CPU core) and ``standard`` (the netsim ``standard`` preset: d_model 64, 30 epochs on
8,000 windows, 4 seeds; about 55 minutes on two cores with --workers 2). Runs resume; a finished run is
skipped. Writes README.md, runs.csv, summary.csv, layers.csv (every layer's PE table), activity_geometry.json,
linear_baseline.json and figures/.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pe_probe.errors import OneLineArgumentParser
from pe_probe.output import staged_dir
from analyses.netsim.sweep import (ALPHA, HOLDS, N_PERM, Plan, Scale, analyse_sweep, at_chance_criteria, claim_levels, outside_legend,
                                   conditions, deterministic_labels, layer_levels, layer_section, level_criteria,
                                   machine_lines, markdown_table, n_clipped, regenerate_lines, report_main, run_sweep,
                                   scale_parser, sigma_figure, summarise, t_value, write_json, write_layers)

ROOT = Path(__file__).resolve().parents[2]
LINEAR = "linear-Gaussian baseline"
SIGMAS = [0.1, 0.3, 1.0, 2.0]
FIXED = ["sin2d", "none"]


SCALES = {
    "pilot": Scale("pilot", "quick", (0, 1), "report-netsim", "netsim", "about 5 minutes on one shared CPU core"),
    "standard": Scale("standard", "standard", (0, 1, 2, 3), "report-netsim-standard", "netsim-standard",
                      "about 55 minutes on two CPU cores"),
}


def layout_figure(results: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(3.0 * len(results), 3.0), constrained_layout=True)
    for ax, (label, r) in zip(np.atleast_1d(axes), results.items()):
        g, e = r.coords, r.embeddings["smacof"]
        for a, b in zip(g, e):
            ax.plot([a[1], b[1]], [a[0], b[0]], color="0.75", lw=0.6)
        ax.scatter(g[:, 1], g[:, 0], s=10, c="k", label="true")
        ax.scatter(e[:, 1], e[:, 0], s=12, c=g[:, 0] * 8 + g[:, 1], cmap="viridis", label="recovered")
        ax.set_title(f"{label}\nSMACOF r2 {r.metrics['recovery_smacof_r2']:.2f}", fontsize=8)
        ax.invert_yaxis()
        ax.set_aspect("equal")
        ax.set_xticks([]), ax.set_yticks([])
    outside_legend(fig, np.atleast_1d(axes)[0], fontsize=7)  # inside, it sat on the bottom-left nodes
    fig.savefig(path, dpi=150)
    plt.close(fig)


def stationary_covariance(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (N*T,) and covariance (N*T, N*T) of windows x (M, N, T), flattened node-major, assuming the
    activity is stationary in time: cov[(i, t), (j, s)] = K_ij(t - s), K averaged over every window and time."""
    x = np.asarray(x, dtype=np.float64)
    m, n, t = x.shape
    mu_n = x.mean(axis=(0, 2))
    xc = x - mu_n[None, :, None]
    k = [np.einsum("mit,mjt->ij", xc[:, :, lag:], xc[:, :, : t - lag]) / (m * (t - lag)) for lag in range(t)]
    c = np.empty((n, t, n, t))
    for a in range(t):
        for b in range(t):
            c[:, a, :, b] = k[a - b] if a >= b else k[b - a].T
    c = c.reshape(n * t, n * t)
    return np.repeat(mu_n, t), (c + c.T) / 2


def clip_to_positive_definite(cov: np.ndarray, rel_floor: float = 1e-9) -> tuple[np.ndarray, int]:
    """(cov, 0) if the symmetric ``cov`` is positive definite, else (V max(L, floor) V^T, number of
    eigenvalues raised to floor = rel_floor * the largest). The stationary estimate divides each lag's sum
    by its own count, which keeps it unbiased but does not keep it positive definite: with few windows
    (or long ones) some eigenvalues go negative and the Cholesky solve of the conditional mean fails."""
    lam, vec = np.linalg.eigh(cov)
    floor = rel_floor * max(float(lam[-1]), np.finfo(float).tiny)
    low = lam <= floor
    if not low.any():
        return cov, 0
    fixed = (vec * np.where(low, floor, lam)) @ vec.T
    return (fixed + fixed.T) / 2, int(low.sum())


def conditional_mean_mse(mu: np.ndarray, cov: np.ndarray, x: np.ndarray, mask: np.ndarray,
                         chunk: int = 50) -> tuple[float, float]:
    """MSE over masked values of the Gaussian conditional mean E[x_masked | x_observed] (mu, cov), and of
    predicting zero, for windows x (M, N, T) with node masks (M, N) that mask the same number of nodes each."""
    import torch

    x = np.asarray(x, dtype=np.float64)
    m, n, t = x.shape
    mask = np.asarray(mask, dtype=bool)
    flat = x.reshape(m, n * t) - mu
    c = torch.as_tensor(cov)
    se = zero = 0.0
    count = 0
    for i in range(0, m, chunk):
        mk = np.repeat(mask[i : i + chunk], t, axis=1)
        idx_m = torch.as_tensor(np.stack([np.flatnonzero(r) for r in mk]))
        idx_o = torch.as_tensor(np.stack([np.flatnonzero(~r) for r in mk]))
        xo = torch.gather(torch.as_tensor(flat[i : i + chunk]), 1, idx_o)
        c_oo = c[idx_o[:, :, None], idx_o[:, None, :]]
        c_mo = c[idx_m[:, :, None], idx_o[:, None, :]]
        w = torch.cholesky_solve(xo.unsqueeze(-1), torch.linalg.cholesky(c_oo))
        pred = (c_mo @ w).squeeze(-1).numpy() + mu[idx_m.numpy()]
        target = x[i : i + chunk].reshape(-1, n * t)[np.arange(len(mk))[:, None], idx_m.numpy()]
        se += float(((pred - target) ** 2).sum())
        zero += float((target ** 2).sum())
        count += target.size
    return se / count, zero / count


def clipped_note(base: dict[str, object]) -> str:
    """The report's sentence on a covariance estimate that had to be made positive definite ('' if none)."""
    n = base.get("covariance_eigenvalues_clipped", 0)
    if not n:
        return ""
    return (f"Its covariance estimate was not positive definite ({n} of {base['covariance_size']} eigenvalues at or "
            "below zero, raised to 1e-9 of the largest): too few training windows for the window length, so the "
            "baseline is rougher than it would be with more data. ")


def linear_baseline(cfg) -> dict[str, object]:
    """The linear-Gaussian conditional-mean predictor on the sweep's held-out windows and evaluation masks
    (the same `build_splits` masks every run is scored on): MSE and MSE / zero per split, and how many of the
    covariance's eigenvalues had to be raised to make it positive definite (`clip_to_positive_definite`)."""
    import torch

    from trainers.train_masked import build_splits, load_task_data, metric_key

    data = load_task_data(cfg)
    splits = build_splits(cfg, data, torch.device("cpu"))
    mu, cov = stationary_covariance(splits["train"].x.numpy())
    cov, clipped = clip_to_positive_definite(cov)
    out: dict[str, object] = {"ood_reuses_test_windows": bool(data["splits"]["ood"][0] is data["splits"]["test"][0]),
                              "covariance_eigenvalues_clipped": clipped, "covariance_size": len(cov)}
    for name in ("test", "ood", "ood_noise"):
        mse, zero = conditional_mean_mse(mu, cov, splits[name].x.numpy(), splits[name].mask.numpy())
        key = metric_key(name)
        out.update({key: mse, f"{key}_zero": zero})
    return out


def parser() -> OneLineArgumentParser:
    """The report's command-line options."""
    return scale_parser("netsim", __doc__, SCALES, "pilot (quick preset, 2 seeds, default) or standard (d_model 64, 30 epochs on "
                        "8,000 windows, 4 seeds)")


def main(argv: list[str] | None = None) -> int:
    """Check every input (one-line errors, exit 2, nothing written), train the sweep, write the report."""
    return report_main(parser(), argv, "netsim", SCALES, ROOT, conditions(SIGMAS, FIXED), build)


def build(plan: Plan, conds: list[dict], workers: int, force: bool) -> None:
    """Train the sweep into ``plan.runs``, analyse it and write the report folder ``plan.out`` atomically."""
    from trainers.config import make_masked_config
    from trainers.tasks.netsim import activity_geometry, make_network, simulate_windows

    scale, runs = plan.scale, plan.runs
    # 1. the ground truth is in the activity itself
    cfg = make_masked_config("netsim", scale.preset)
    d = cfg.data
    net = make_network(d)
    act = simulate_windows(net, 500, window=d.window, noise=d.noise, seed=99)
    geo = activity_geometry(act, net.coords)
    geo_ood = activity_geometry(simulate_windows(net, 500, window=d.window, noise=d.ood_noise, seed=98), net.coords)
    base = linear_baseline(cfg)
    base.update(test_rel=base["test_mse"] / base["test_mse_zero"], ood_rel=base["ood_mse"] / base["ood_mse_zero"],
                ood_noise_rel=base["ood_mse_noise"] / base["ood_mse_noise_zero"])

    # 2. sweep
    print(f"netsim sweep ({scale.name}): {len(conds) * len(scale.seeds)} runs in {runs}")
    df = pd.DataFrame(run_sweep("netsim", runs, conds, list(scale.seeds), preset=scale.preset, workers=workers))

    # 3. PE geometry, every layer's table
    df, layers, results = analyse_sweep(df)
    df["ood_rel"] = df["ood_mse"] / df["ood_mse_zero"]
    df["test_rel"] = df["test_mse"] / df["test_mse_zero"]
    df["ood_noise_rel"] = df["ood_mse_noise"] / df["ood_mse_noise_zero"]
    cols = ["train_mse", "test_mse", "ood_mse", "ood_mse_noise", "test_rel", "ood_rel", "ood_noise_rel",
            "rsa_spearman", "recovery_smacof_r2", "probe_r2", "trustworthiness"]
    summ = summarise(df, cols)
    for k in ("test_mse_zero", "ood_mse_zero", "ood_mse_noise_zero"):  # same windows and masks as every run
        if not np.allclose(df[k], base[k], rtol=1e-4):
            raise RuntimeError(f"linear baseline {k} {base[k]} differs from the runs' {df[k].unique()}")
    base_row = pd.DataFrame([{"label": LINEAR, "pe": "baseline", "sigma": float("nan"), "n_seeds": 0,
                              **{k: base[k] for k in ("test_mse", "ood_mse", "ood_mse_noise", "test_rel", "ood_rel",
                                                      "ood_noise_rel")}}])

    # 4. the report folder: staged, renamed into place only when complete
    with staged_dir(plan.out, force, kind="netsim-report") as out:
        (out / "figures").mkdir()
        write_json(out / "activity_geometry.json", {"train_noise": geo, "ood_noise": geo_ood,
                                                    "n_edges": int((net.W > 0).sum())})
        write_json(out / "linear_baseline.json", base)
        df[[c for c in df.columns if c != "run"]].to_csv(out / "runs.csv", index=False)
        summ.to_csv(out / "summary.csv", index=False)
        layer_summ = write_layers(layers, out, LAYER_COLS)
        sigma_figure(df, pd.concat([summ, base_row], ignore_index=True), out / "figures" / "mse_vs_sigma.png",
                     [("test_rel", "test MSE / zero-predictor"), ("ood_rel", "OOD (90% masked) / zero"),
                      ("ood_noise_rel", "unseen noise / zero")])
        sigma_figure(df, summ, out / "figures" / "identifiability_vs_sigma.png",
                     [("rsa_spearman", "RSA (Spearman)"), ("recovery_smacof_r2", "SMACOF recovery r2"),
                      ("probe_r2", "linear probe R2")])
        pick = {k: results[k] for k in (f"learned σ={SIGMAS[0]:g}", f"learned σ={SIGMAS[-1]:g}", "sin2d") if k in results}
        layout_figure(pick, out / "figures" / "layouts.png")
        (out / "README.md").write_text(readme(df, summ, geo, geo_ood, cfg, base, base_row, plan, layers, layer_summ))


SPLITS = [("test_rel", "50%-masked test"), ("ood_rel", "90%-masked OOD"), ("ood_noise_rel", "unseen noise")]
LAYER_COLS = [("rsa_spearman", "RSA"), ("recovery_smacof_r2", "SMACOF r2"), ("probe_r2", "probe R2")]


def every_pe_beats_none(df: pd.DataFrame, s: pd.DataFrame) -> str:
    """Per split: how many PEs beat no PE with non-overlapping intervals."""
    from analyses.netsim.sweep import compare

    pes = [r["label"] for _, r in s.iterrows() if r["pe"] != "none"]
    none = s[s.pe == "none"].iloc[0]["label"]
    out = []
    for col, name in SPLITS:
        k = sum(compare(df, p, none, col, "lower") == HOLDS for p in pes)
        out.append(f"{name} {k} of {len(pes)}")
    return "PEs that beat no PE with non-overlapping intervals, per split: " + ", ".join(out)


def readme(df: pd.DataFrame, s: pd.DataFrame, geo: dict, geo_ood: dict, cfg, base: dict, base_row: pd.DataFrame,
           plan: Plan, layers: pd.DataFrame, layer_summ: pd.DataFrame) -> str:
    """The report's README.md from the runs (``df``), their summary (``s``), the activity geometry, the run
    config ``cfg`` (a `MaskedTrainConfig` of the scale's preset), the linear baseline, the invocation (``plan``:
    `resolve_scale`) and every layer's table (``layers``, ``layer_summ``: `analyse_sweep`, `layer_summary`)."""
    from analyses.netsim.sweep import chance_summary, above_chance_text, fmt, table_provenance

    d, m, scale = cfg.data, cfg.model, plan.scale
    where = "in this pilot" if scale.name == "pilot" else f"at the {scale.name} scale"

    L = s[s.pe == "learned"].sort_values("sigma")
    small, large = L.iloc[0], L.iloc[-1]
    none = s[s.pe == "none"].iloc[0]
    sin = s[s.pe == "sin2d"].iloc[0]
    n_seeds = len(df.seed.unique())
    tv = t_value(n_seeds)
    at_chance, chance_text = chance_summary(df)
    small_runs = df[(df.pe == "learned") & (df.sigma == small["sigma"])]

    # geometry claims
    if at_chance:
        geo_claim = (f"**not testable {where}**: every learned table is at chance ({chance_text}); RSA "
                     f"{small['rsa_spearman']:.3f} at σ={small['sigma']:g} vs {large['rsa_spearman']:.3f} at "
                     f"σ={large['sigma']:g}, both at chance")
        chance_claim = (f"**not testable {where}** (every learned table is at chance, see above; "
                        f"σ={small['sigma']:g} Mantel p = {', '.join(f'{v:.3f}' for v in small_runs['rsa_p'])})")
    else:
        from analyses.netsim.sweep import compare
        geo_claim = (f"**{compare(df, small['label'], large['label'], 'rsa_spearman', 'higher')}** (RSA "
                     f"{fmt(small, 'rsa_spearman')} at σ={small['sigma']:g} vs {fmt(large, 'rsa_spearman')} at "
                     f"σ={large['sigma']:g})")
        chance_claim = above_chance_text(small_runs["rsa_p"].to_numpy())

    gen_levels, gen_text = claim_levels(df, small, large, SPLITS, "lower")
    mixed = len(set(gen_levels)) > 1
    help_levels, help_text = claim_levels(df, small, none, SPLITS, "lower")

    # linear baseline vs the transformer runs
    pe_runs = df
    beaten = [name for c, name in SPLITS if (pe_runs[c] > base[c]).all()]
    close = any(pe_runs[c].min() - base[c] < 0.005 for c, _ in SPLITS)  # within 0.005 / zero on some split
    gaps = ", ".join(f"{name} {pe_runs[c].min() - base[c]:+.3f}" for c, name in SPLITS)
    ranges = "; ".join(f"{name} {pe_runs[c].min():.3f} to {pe_runs[c].max():.3f} (baseline {base[c]:.3f})"
                       for c, name in SPLITS)
    ood_words = ("the `test` windows again, with separate masks" if base["ood_reuses_test_windows"]
                 else "a separate fresh simulation")
    fixed_geo = deterministic_labels(df, ["rsa_spearman", "recovery_smacof_r2", "probe_r2", "trustworthiness"])
    geo_cols = [("rsa_spearman", "RSA (Spearman)"), ("recovery_smacof_r2", "SMACOF r2"), ("probe_r2", "probe R2"),
                ("trustworthiness", "trustworthiness")]
    mse_cols = [("test_mse", "test MSE"), ("ood_mse", "OOD MSE (90% masked)"), ("ood_mse_noise", "unseen-noise MSE"),
                ("test_rel", "test / zero"), ("ood_rel", "OOD / zero"), ("ood_noise_rel", "unseen noise / zero")]
    n_clip = n_clipped(s, [c for c, _ in mse_cols + geo_cols])
    clip_note = (f"Intervals are clipped to each metric's possible range (correlations to [-1, 1], trustworthiness to "
                 f"[0, 1], R2 to at most 1, MSE to at least 0); a clipped end is marked †, and `summary.csv` keeps the "
                 f"unclipped t-intervals ({n_clip} ends clipped in these tables).")
    above_sin = [r["label"] for _, r in L.iterrows() if r["rsa_spearman"] > sin["rsa_spearman"]]
    lines = [
        "# Network simulation task: do learned PEs recover a 2D node layout?",
        "",
        *regenerate_lines(plan),
        f"**Scale.** The `{cfg.preset}` preset of `pe-probe train netsim`: {m.n_layers} layers, {m.n_heads} "
        f"head{'s' if m.n_heads > 1 else ''}, d_model {m.d_model}, {cfg.optim.epochs} epochs on {d.n_train} simulated "
        f"windows, {n_seeds} seeds per condition (the study's size is the `paper` preset: 4 layers, d_model 160). "
        f"The 95% intervals below are t-intervals over {n_seeds} seeds (t = {tv:.1f})"
        + (", so they are wide; treat every statement as a pilot result. The same sweep at a larger scale: "
           "[`reports/netsim-standard/`](../netsim-standard/README.md)." if scale.name == "pilot" else
           ". The same sweep at the pilot scale (quick preset, 2 seeds): [`reports/netsim/`](../netsim/README.md)."),
        "",
        *machine_lines(df),
        "## Task (see `trainers/tasks/netsim.py` for the full definition)",
        "",
        f"{d.n_nodes} nodes on an 8x8 grid (ground truth: grid coordinates). Directed edges j -> i exist with "
        f"probability {d.p_connect} exp(-d/{d.length_scale}), weight exp(-d/{d.length_scale}) x U(0.5, 1.5), all "
        f"excitatory, scaled to spectral radius {d.spectral_radius}. Rate dynamics tau dx = (-x + tanh(Wx)) dt + "
        f"noise dB, Euler-Maruyama with dt = {d.dt} tau, sampled every {d.sample_every} steps; a token is a node "
        f"carrying {d.window} samples. Train: {d.mask_train:.0%} of nodes masked, noise {d.noise}. Held out: `test` "
        f"(a fresh simulation of the same network, {d.n_test} windows, {d.mask_test:.0%} masked), `ood` "
        f"({ood_words}, {d.mask_ood:.0%} masked), `ood_noise` (another fresh simulation at noise {d.ood_noise}, never "
        f"seen in training, {d.mask_test:.0%} masked). Evaluation masks are fixed, so every run is scored on the same "
        "masked tokens. MSE over masked values; `/ zero` divides by the MSE of predicting 0 (the mean), so 1.0 = no "
        "skill.",
        "",
        "## Is the geometry recoverable from the activity itself?",
        "",
        f"Partly: functional connectivity (correlation of node time series, 500 windows) falls with distance: Spearman "
        f"{geo['fc_distance_spearman']:.3f} at the training noise, {geo_ood['fc_distance_spearman']:.3f} at the "
        f"held-out noise; nearest-neighbour pairs have mean FC {geo['fc_nearest_mean']:.3f} vs {geo['fc_all_mean']:.3f} "
        f"over all pairs at the training noise ({geo_ood['fc_nearest_mean']:.3f} vs {geo_ood['fc_all_mean']:.3f} at the "
        "held-out noise; `activity_geometry.json`; guarded by `tests/trainers/test_netsim.py`). The signal is weak "
        "per pair.",
        "",
        "## Held-out MSE vs σ (mean [95% t-interval] over seeds)",
        "",
        markdown_table(pd.concat([s, base_row], ignore_index=True), mse_cols),
        f"`{LINEAR}`: the Gaussian conditional mean E[masked | observed] under the mean and covariance of the "
        f"{d.n_train} training windows (covariance assumed stationary in time, so one lag-covariance matrix per lag), "
        "evaluated on the same held-out windows and masks as the runs (`linear_baseline.json`); it has no seeds, so "
        "no interval. " + clipped_note(base) + (f"It is better than every transformer run on "
                           f"{'every held-out split' if len(beaten) == len(SPLITS) else ', '.join(beaten)}" if beaten else
                           "It is not better than every transformer run on any split") +
        f" (transformer runs' range per split, / zero: {ranges}). "
        + (f"So these models do not {'quite ' if close else ''}reach what a linear predictor gets from the same training data (the best run "
           f"minus the baseline, / zero: {gaps}), and even the linear predictor leaves {base['test_rel']:.0%} of the "
           "zero predictor's MSE on the 50%-masked test."
           if beaten else f"Even the linear predictor leaves {base['test_rel']:.0%} of the zero predictor's MSE on "
           "the 50%-masked test."),
        "",
        "![MSE vs sigma](figures/mse_vs_sigma.png)",
        "",
        "## Identifiability of the node layout from the layer-0 PE table vs σ",
        "",
        markdown_table(s[s.pe != "none"], geo_cols),
        f"Note: {table_provenance(df)}. "
        f"`sin2d` is a fixed reference table, not a ceiling: it is linearly decodable (probe R2 {sin['probe_r2']:.3f}) "
        f"but its RSA is {sin['rsa_spearman']:.3f}, where a PE equal to the coordinates would give RSA 1; learned PEs "
        f"with a higher mean RSA than it: {', '.join(above_sin) if above_sin else 'none'}. "
        + (f"{', '.join(f'`{x}`' for x in fixed_geo)} gives the same table in every seed (deterministic), so its "
           "geometry intervals have zero width. " if fixed_geo else "")
        + f"{clip_note} No PE has no table. Per-run numbers, Mantel p-values and the chance level (`null_rsa_mean`) "
        "are in `runs.csv`.",
        "",
        "![identifiability vs sigma](figures/identifiability_vs_sigma.png)",
        "",
        "Recovered layouts (seed 0, 2D SMACOF of the PE table, Procrustes-aligned onto the grid; grey lines join each "
        "node's true and recovered position):",
        "",
        "![layouts](figures/layouts.png)",
        "",
        *layer_section(layer_summ, LAYER_COLS, "Mantel p-values"),
        "## Which claims hold here",
        "",
        level_criteria(n_seeds, tv) + " " + at_chance_criteria(ALPHA, N_PERM),
        "",
        f"- Small-σ learned PEs encode the layout better than large-σ ones: {geo_claim}.",
        f"- The small-σ PE's layout is above chance in every seed (Mantel p < {ALPHA:g}): {chance_claim}.",
        f"- Small-σ learned PEs encode the layout better than large-σ ones, layer by layer (RSA, σ={small['sigma']:g} "
        f"vs σ={large['sigma']:g}): "
        f"{layer_levels(layers, layer_summ, small['label'], large['label'], 'rsa_spearman', 'higher')}.",
        f"- Small σ generalises better (σ={small['sigma']:g} vs σ={large['sigma']:g}, MSE / zero, lower is better): "
        f"{gen_text}." + (" The picture is mixed across the held-out splits." if mixed else ""),
        f"- A position code helps at all (σ={small['sigma']:g} learned vs no PE, MSE / zero): {help_text}; "
        f"sin2d {fmt(sin, 'test_rel')} / {fmt(sin, 'ood_rel')} / {fmt(sin, 'ood_noise_rel')} on the three splits. "
        f"{every_pe_beats_none(df, s)}.",
        "",
        f"Caveats: {n_seeds} seeds, a small model ({m.n_layers} layers, d_model {m.d_model}, {cfg.optim.epochs} "
        "epochs), one network; the claims other than the per-layer one read the layer-0 table.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.netsim.report")
