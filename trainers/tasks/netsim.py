"""Network simulation task: nodes at known 2D/3D positions, distance-dependent wiring, noisy rate dynamics.

The study's equations are not public; this is our design, stated fully so it can be checked.

Layout
------
N nodes (default 64) at known coordinates, the ground truth: ``grid`` (8x8 in 2D, 4x4x4 in 3D; N must
be a square / cube), ``random`` (uniform in a box of side N^(1/k), so the density is one node per unit
volume whatever k), or ``file`` (an N x k coordinate file read by `pe_probe.groundtruth`).

Wiring (directed, sparse, distance-dependent)
---------------------------------------------
For every ordered pair j -> i (i != j) at distance d_ij, an edge exists with probability
``p_connect * exp(-d_ij / length_scale)``, drawn independently for i -> j and j -> i (so W is directed
and asymmetric). An edge's weight is ``exp(-d_ij / length_scale) * u`` with u ~ U(0.5, 1.5); all weights
are excitatory. W is then scaled so that its spectral radius is ``spectral_radius`` (< 1 keeps the
linearised dynamics stable). With the defaults (length scale 1.5 grid units, p_connect 0.8) a node of an
8x8 grid has about 9 inputs, nearly all from within 3 units.

Dynamics (nonlinear, stochastic)
--------------------------------
A rate model, tau dx = (-x + tanh(W x)) dt + noise * sqrt(tau) dB, integrated with Euler-Maruyama:
``x <- x + dt/tau (-x + tanh(W x)) + noise * sqrt(dt/tau) * xi``, xi ~ N(0, I), dt = 0.05 tau (stable:
dt/tau << 1 and the drift's Jacobian has eigenvalues with real part in [-2, -0.1]). Each trajectory
starts at N(0, 0.5^2), runs ``burn_in`` steps, then is sampled every ``sample_every`` steps;
consecutive ``window`` samples form one example. Trajectories are simulated in parallel as one
(B, N) array: a step is one (B, N) @ (N, N) product, so thousands of windows take about a second.

Tokens and objective
--------------------
One token per node carrying its window of activity (``window`` values, divided by the training set's
standard deviation). A random subset of nodes is masked (values zeroed, a mask flag set); the model
predicts the masked nodes' windows; the score is the MSE over masked values. The network (W and the
coordinates) is fixed per ``data.seed``; held-out sets are fresh simulations (new noise seeds) of the
same network: ``test`` with ``mask_test`` masked, ``ood`` with ``mask_ood`` (default 0.9) masked, ``ood_noise``
at a noise level not seen in training (``mask_test`` masked), and ``ood_noise_mask90`` both (``mask_ood``
masked: the name assumes the default 0.9).

The geometry is recoverable from the activity itself (`activity_geometry`): functional connectivity
(correlation of node time series) falls with distance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pe_probe.errors import InputError
from pe_probe.groundtruth import GroundTruth, grid, parse_ground_truth

LAYOUTS = ("grid", "random", "file")


@dataclass
class Network:
    """A fixed simulated network: ``coords`` (N, k) node positions, ``W`` (N, N), W[i, j] = weight j -> i."""

    ground_truth: GroundTruth
    W: np.ndarray

    @property
    def coords(self) -> np.ndarray:
        return self.ground_truth.coords

    @property
    def n(self) -> int:
        return int(self.W.shape[0])


def node_layout(layout: str = "grid", n_nodes: int = 64, dim: int = 2, seed: int = 0,
                coords_file: str | None = None) -> GroundTruth:
    """Node coordinates: a row-major grid, uniform random points in a box of side N^(1/dim), or a file."""
    if layout == "file":
        if not coords_file:
            raise InputError("netsim layout 'file' needs a coordinate file (--coords-file FILE, N x k numbers)")
        from trainers.config import MIN_NODES

        gt = parse_ground_truth(coords_file)
        if gt.dim not in (2, 3):
            raise InputError(f"netsim coordinates must be 2D or 3D, {coords_file} has {gt.dim} columns")
        if gt.n < MIN_NODES:  # named here: the config's --n-nodes check would name a flag the user did not pass
            raise InputError(f"{coords_file} has {gt.n} row{'' if gt.n == 1 else 's'} (nodes); a network needs at "
                             f"least {MIN_NODES}: give one row of coordinates per node")
        return GroundTruth(gt.coords, gt.spec, "file", None)
    if dim not in (2, 3):
        raise InputError(f"netsim --dim must be 2 or 3, got {dim!r}")
    if layout == "grid":
        side = round(n_nodes ** (1.0 / dim))
        if side**dim != n_nodes:
            raise InputError(f"a {dim}D grid needs a {'square' if dim == 2 else 'cube'} number of nodes, got {n_nodes}")
        return grid(*([side] * dim))
    if layout == "random":
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
        coords = rng.uniform(0.0, n_nodes ** (1.0 / dim), size=(n_nodes, dim))
        return GroundTruth(coords, f"random:{n_nodes}x{dim}", "file", None)
    raise InputError(f"netsim layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def build_network(gt: GroundTruth, *, length_scale: float = 1.5, p_connect: float = 0.8,
                  spectral_radius: float = 0.9, seed: int = 0) -> Network:
    """Directed distance-dependent weights (see the module docstring), scaled to ``spectral_radius``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    c = gt.coords
    d = np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))  # (N, N)
    kernel = np.exp(-d / length_scale)
    edges = rng.random(d.shape) < p_connect * kernel
    np.fill_diagonal(edges, False)
    W = np.where(edges, kernel * rng.uniform(0.5, 1.5, size=d.shape), 0.0)
    rho = np.abs(np.linalg.eigvals(W)).max()
    if rho == 0:
        near = np.sort(d + np.diag(np.full(len(d), np.inf)), axis=1)[:, 0]  # each node's nearest other node
        raise InputError(f"the simulated network has no edges: the wiring length scale {length_scale:g} is short "
                         f"for these coordinates (median nearest-node distance {np.median(near):.3g}); raise "
                         f"--length-scale to about that distance or more")
    return Network(gt, W * (spectral_radius / rho))


def simulate(net: Network, n_traj: int, *, n_samples: int, noise: float = 0.5, tau: float = 1.0,
             dt: float = 0.05, sample_every: int = 4, burn_in: int = 200, seed: int = 0) -> np.ndarray:
    """Euler-Maruyama simulation of ``n_traj`` independent trajectories in parallel.

    Returns (n_traj, N, n_samples) float32 activity sampled every ``sample_every`` steps after ``burn_in``.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
    Wt = net.W.T.astype(np.float64)
    x = rng.normal(0.0, 0.5, size=(n_traj, net.n))  # (B, N)
    h = dt / tau
    s = noise * math.sqrt(h)
    out = np.empty((n_traj, net.n, n_samples), dtype=np.float32)
    total = burn_in + n_samples * sample_every
    k = 0
    for step in range(1, total + 1):
        x = x + h * (-x + np.tanh(x @ Wt)) + s * rng.standard_normal(x.shape)
        if step > burn_in and (step - burn_in) % sample_every == 0:
            out[:, :, k] = x
            k += 1
    return out


def simulate_windows(net: Network, n_windows: int, *, window: int = 16, windows_per_traj: int = 4,
                     seed: int = 0, **kw: Any) -> np.ndarray:
    """(n_windows, N, window) examples: consecutive windows cut from independent trajectories."""
    n_traj = -(-n_windows // windows_per_traj)
    act = simulate(net, n_traj, n_samples=window * windows_per_traj, seed=seed, **kw)  # (B, N, T*w)
    B, N, _ = act.shape
    win = act.reshape(B, N, windows_per_traj, window).transpose(0, 2, 1, 3).reshape(-1, N, window)
    return np.ascontiguousarray(win[:n_windows])


def activity_geometry(activity: np.ndarray, coords: np.ndarray) -> dict[str, float]:
    """Is the geometry in the activity itself? FC (Pearson of node time series) vs Euclidean distance.

    ``activity``: (N, T) or (M, N, T) (windows are concatenated in time). Returns the Spearman and
    Pearson correlations between FC and distance over node pairs (negative = nearby nodes co-vary),
    and the mean FC of nearest-neighbour pairs vs all pairs.
    """
    from scipy.stats import pearsonr, spearmanr

    a = np.asarray(activity, dtype=np.float64)
    if a.ndim == 3:
        a = a.transpose(1, 0, 2).reshape(a.shape[1], -1)
    fc = np.corrcoef(a)
    d = np.sqrt(((coords[:, None] - coords[None]) ** 2).sum(-1))
    iu = np.triu_indices(len(coords), 1)
    near = d[iu] <= np.sort(d[iu])[len(coords)] + 1e-9  # the closest pairs (about N of them)
    return {
        "fc_distance_spearman": float(spearmanr(fc[iu], d[iu])[0]),
        "fc_distance_pearson": float(pearsonr(fc[iu], d[iu])[0]),
        "fc_nearest_mean": float(fc[iu][near].mean()),
        "fc_all_mean": float(fc[iu].mean()),
    }


def check_coords_file(data: Any) -> None:
    """Refuse a coordinate file that is gone or whose bytes differ from the sha256 the run's config recorded
    (``data.coords_file_sha256``; older configs lack it): it would build another network, so every split would
    be another task's (evaluate and resume went on with it silently)."""
    recorded = getattr(data, "coords_file_sha256", None)
    if data.layout != "file" or recorded is None:
        return
    from trainers.config import file_sha256

    path = data.coords_file
    if not Path(path).is_file():
        raise InputError(f"the run's coordinate file {path} (data.coords_file in its config) is not found; restore it "
                         f"there: the run's network and data are built from it")
    if file_sha256(path) != recorded:
        raise InputError(f"the run's coordinate file {path} has changed since the run was trained (its sha256 differs "
                         f"from data.coords_file_sha256 in the config); restore it, or train a new run on it as it is now")


def make_network(data: Any) -> Network:
    """The fixed network of a netsim data config (`trainers.config.NetsimDataConfig`)."""
    check_coords_file(data)
    gt = node_layout(data.layout, data.n_nodes, data.dim, data.seed, data.coords_file)
    return build_network(gt, length_scale=data.length_scale, p_connect=data.p_connect,
                         spectral_radius=data.spectral_radius, seed=data.seed)


def load_data(data: Any) -> dict[str, Any]:
    """Network, ground truth and splits for a netsim data config.

    Returns ``{"ground_truth": GroundTruth, "splits": {name: (x (M, N, T) float32, mask_ratio)},
    "info": {...}}``. Everything is a function of ``data`` (its seed included), so evaluation later
    regenerates exactly the same held-out sets.
    """
    net = make_network(data)
    sim = dict(window=data.window, tau=data.tau, dt=data.dt, sample_every=data.sample_every, burn_in=data.burn_in)
    base = data.seed * 1000
    train = simulate_windows(net, data.n_train, noise=data.noise, seed=base + 1, **sim)
    test = simulate_windows(net, data.n_test, noise=data.noise, seed=base + 2, **sim)
    ood_noise = simulate_windows(net, data.n_test, noise=data.ood_noise, seed=base + 3, **sim)
    scale = float(train.std())
    train, test, ood_noise = train / scale, test / scale, ood_noise / scale
    splits = {
        "train": (train, data.mask_train),
        "test": (test, data.mask_test),
        "ood": (test, data.mask_ood),
        "ood_noise": (ood_noise, data.mask_test),
        "ood_noise_mask90": (ood_noise, data.mask_ood),
    }
    return {"ground_truth": net.ground_truth, "splits": splits,
            "info": {"scale": scale, "n_edges": int((net.W > 0).sum()), "network": net}}
