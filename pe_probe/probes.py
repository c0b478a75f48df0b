"""Cross-validated linear probe: how much of the ground truth is linearly decodable from the table."""

from __future__ import annotations

import numpy as np

ALPHAS = np.logspace(-4, 4, 17)


def probe_r2(table: np.ndarray, coords: np.ndarray, *, seed: int = 0) -> float:
    """Mean over ground-truth axes of the out-of-fold R^2 of a ridge regression from table to coords.

    Leave-one-out below 50 positions, else shuffled 5-fold. The ridge penalty is chosen inside each
    training fold by efficient leave-one-out (`RidgeCV`). The table is scaled by its overall RMS first
    (one number, so rotations are untouched) so the result does not depend on the table's scale.
    R^2 per axis = 1 - SS_res / SS_tot over the pooled out-of-fold predictions.
    """
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold, LeaveOneOut

    x = table - table.mean(axis=0)
    rms = np.sqrt(np.mean(x ** 2))
    x = x / rms if rms > 0 else x
    n = len(x)
    splitter = LeaveOneOut() if n < 50 else KFold(5, shuffle=True, random_state=seed)
    pred = np.empty_like(coords, dtype=np.float64)
    for train, test in splitter.split(x):
        model = RidgeCV(alphas=ALPHAS).fit(x[train], coords[train])
        pred[test] = model.predict(x[test]).reshape(len(test), -1)
    ss_res = np.sum((coords - pred) ** 2, axis=0)
    ss_tot = np.sum((coords - coords.mean(axis=0)) ** 2, axis=0)
    valid = ss_tot > 0
    return float(np.mean(1 - ss_res[valid] / ss_tot[valid]))
