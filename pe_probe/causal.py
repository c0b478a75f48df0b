"""How much of a causal attention kernel's geometry is the causal mask's rather than the PE's.

In a causal model position i attends to positions j <= i only. Its positional kernel then carries
position even when the table carries none: with a constant table every row is uniform over its own
prefix (row i puts 1/(i+1) on each j <= i), and rows i and i' are the more alike the more prefix they
share. Against a line that mask-only kernel alone has an RSA of about 0.66 (64 positions), so a causal
kernel's RSA says little about its PE. The PE's part is the excess over the mask-only kernel, with a
paired bootstrap interval over positions (both kernels resampled alike).
"""

from __future__ import annotations

import numpy as np

from . import distances as dist
from . import stats
from .distances import rsa_distances


def mask_only_kernel(n: int, window: int | None = None) -> np.ndarray:
    """The (n, n) causal kernel of a table without positional information: row i uniform over j <= i (over
    i - window < j <= i for a local layer)."""
    mask = np.tril(np.ones((n, n)))
    if window:
        mask -= np.tril(mask, k=-window)
    return mask / mask.sum(axis=1, keepdims=True)


def causal_mask_baseline(kernel: np.ndarray, coords: np.ndarray, *, pe_metric: str = "euclidean",
                         n_boot: int = 1000, seed: int = 0, window: int | None = None) -> dict[str, float]:
    """RSA and kernel-distance correlation of the mask-only kernel, and the kernel's RSA excess over it.

    Keys: ``causal_mask_rsa`` (Spearman RSA of the mask-only kernel's rows against ``coords``, as `analyze`
    computes it), ``causal_mask_kernel_rho`` (its `kernel_distance_correlation`), ``causal_excess_rsa``
    (the kernel's RSA minus the mask's) and its 95% percentile bootstrap interval ``causal_excess_ci_low`` /
    ``_high`` (NaN with ``n_boot`` 0). ``window``: a local attention layer's (`mask_only_kernel`).
    """
    from .views import kernel_distance_correlation

    kernel = np.asarray(kernel, dtype=np.float64)
    coords = np.asarray(coords, dtype=np.float64).reshape(len(kernel), -1)
    mask = mask_only_kernel(len(kernel), window)
    gt = rsa_distances(dist.square_distances(coords, "euclidean"), "euclidean")
    rsa, boots = {}, {}
    for name, table in (("kernel", kernel), ("mask", mask)):
        d = rsa_distances(dist.square_distances(table, pe_metric), pe_metric)
        rsa[name] = float(stats.standardise(stats.rank(*d)) @ stats.standardise(stats.rank(*gt)))
        if n_boot:  # the same seed draws the same resamples of positions for both: a paired bootstrap
            boots[name] = stats.bootstrap_rsa(d[0], gt[0], n_boot=n_boot, seed=seed, orders=(d[1], gt[1])).samples
    low = high = float("nan")
    if n_boot:
        diff = boots["kernel"] - boots["mask"]
        diff = diff[np.isfinite(diff)]
        if len(diff):
            low, high = (float(q) for q in np.quantile(diff, [0.025, 0.975]))
    return {"causal_mask_rsa": rsa["mask"], "causal_mask_kernel_rho": kernel_distance_correlation(mask, coords),
            "causal_excess_rsa": rsa["kernel"] - rsa["mask"], "causal_excess_ci_low": low, "causal_excess_ci_high": high}
