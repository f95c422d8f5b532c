"""Figures of the degradation rate of AKD (Prop. IV and VIII): curves, heat maps, decay.

The numbers come from the vmapped sweeps of :mod:`fedkrr._src.rates`; this module
only arranges and draws them. Computation and drawing are separate:
:func:`rate_curves` returns the sweeps as a :class:`RateCurves` (plain NumPy
arrays), :func:`plot_rate_curves` draws them, so a test or a notebook can check
the very numbers a figure shows.

Prop. IV (informal) says that AKD degrades faster (smaller spectral radius
``rho`` of one AKD cycle, see :func:`fedkrr.rates.degradation_rate`) with

1. a larger regularisation constant c,
2. more different kernels,
3. more different data sets (as measured by the kernel).

For trend 2 two sweeps are drawn. The one-sided sweep changes agent 2's RBF
bandwidth only (``gamma_2 = gamma_1 * ratio``), which changes both the mismatch
and agent 2's smoothness: a smoother (wider) kernel for agent 2 can degrade
*slower* than the shared kernel, so that sweep is not always maximal at ratio
1. The symmetric sweep (:func:`sweep_kernel_mismatch`) keeps the geometric mean
of the two bandwidths fixed (``gamma_1 = gamma / sqrt(ratio)``,
``gamma_2 = gamma * sqrt(ratio)``) and isolates the mismatch; its ``rho`` is
maximal at ratio 1 on every instance we tried.

The figures are made with ``matplotlib.figure.Figure`` (no pyplot), so they
never switch a backend or keep global figure state; ``path`` saves a PNG.
Plotting never changes JAX's configuration.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import rates
from fedkrr._src.io.files import atomic_savefig
from fedkrr._src.io.files import atomic_write
from fedkrr._src.kernels import RBF
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
ArrayLike = jax.typing.ArrayLike

DEFAULT_RIDGES = tuple(float(c) for c in np.logspace(-4, 0, 17))
DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
DEFAULT_MIXINGS = tuple(float(p) for p in np.linspace(0.0, 1.0, 11))
DEFAULT_SEPARATIONS = tuple(float(s) for s in np.linspace(0.0, 6.0, 13))


def sweep_kernel_mismatch(problem: FederatedProblem, ratios: Array) -> Array:
  """``rho`` when the two agents' RBF bandwidths differ by ``ratio`` around agent 1's.

  Agent 1 gets ``RBF(gamma / sqrt(ratio))`` and agent 2 ``RBF(gamma * sqrt(ratio))``
  with ``gamma`` agent 1's bandwidth in ``problem``: the geometric mean stays
  ``gamma`` and ``gamma_2 / gamma_1 = ratio``. Ratio 1 is the shared kernel.
  One jitted call of :func:`fedkrr.rates.warm_sweep`'s route (each ratio's Krylov estimate started
  from the previous one's), compiled once per problem shape. Prop. IV, second trend.

  Args:
    problem: a two-agent problem whose first kernel is an :class:`fedkrr.RBF`.
    ratios: (n,) bandwidth ratios > 0.

  Returns:
    (n,) degradation rates.

  Raises:
    ValueError: if the first kernel is not an RBF kernel.
  """
  first = problem.kernels[0]
  if not isinstance(first, RBF):
    raise ValueError(f"problem.kernels[0]: expected an RBF kernel, got {type(first).__name__}")

  return rates.warm_sweep_of(_mismatched, problem, jnp.asarray(ratios, problem.ridge.dtype),
                                200)


def _mismatched(problem: FederatedProblem, ratio: Array) -> FederatedProblem:
  """The problem with RBF bandwidths ``gamma / sqrt(ratio)`` and ``gamma * sqrt(ratio)``."""
  gamma = problem.kernels[0].gamma
  root = jnp.sqrt(ratio)
  kernels = (RBF(gamma / root), RBF(gamma * root)) + tuple(problem.kernels[2:])
  return dataclasses.replace(problem, kernels=kernels)


class RateCurves(NamedTuple):
  """The four sweeps of Prop. IV on one :class:`fedkrr.rates.TwoClusters` draw (NumPy arrays).

  Attributes:
    ridges, rho_ridge: (n_c,) regularisation constants c and ``rho`` at each
      (mixing ``mixing``, shared kernel).
    ratios, rho_ratio, rho_mismatch: (n_r,) bandwidth ratios; ``rho`` when only
      agent 2's bandwidth is scaled (:func:`fedkrr.rates.sweep_bandwidth_ratio`) and
      when both are, symmetrically (:func:`sweep_kernel_mismatch`); at ``ridge``
      and ``mixing``.
    mixings, rho_mixing: (n_p,) mixing fractions (0 = disjoint clusters, 1 = iid)
      and ``rho`` at ``ridge`` (:func:`fedkrr.rates.sweep_heterogeneity`).
    separations, rho_separation: (n_s,) distances between the cluster centres
      and ``rho`` at ``ridge`` and ``mixing`` (:func:`fedkrr.rates.sweep_separation`).
    ridge: the c of every sweep but the first.
    mixing: the mixing fraction of every sweep but the third.
  """

  ridges: np.ndarray
  rho_ridge: np.ndarray
  ratios: np.ndarray
  rho_ratio: np.ndarray
  rho_mismatch: np.ndarray
  mixings: np.ndarray
  rho_mixing: np.ndarray
  separations: np.ndarray
  rho_separation: np.ndarray
  ridge: float
  mixing: float


def rate_curves(clusters: rates.TwoClusters, ridge: float = 1e-2, mixing: float = 0.0,
                ridges=DEFAULT_RIDGES, ratios=DEFAULT_RATIOS, mixings=DEFAULT_MIXINGS,
                separations=DEFAULT_SEPARATIONS) -> RateCurves:
  """Computes the sweeps of Prop. IV's three trends (each one vmapped jitted call).

  Args:
    clusters: the data (a :class:`fedkrr.rates.TwoClusters` draw; shared RBF kernel).
    ridge: the regularisation constant c of the bandwidth, mixing and separation sweeps.
    mixing: the mixing fraction of the ridge, bandwidth and separation sweeps.
    ridges: (n_c,) values of c > 0.
    ratios: (n_r,) bandwidth ratios > 0.
    mixings: (n_p,) mixing fractions in [0, 1].
    separations: (n_s,) distances >= 0 between the clusters' centres.

  Returns:
    A :class:`RateCurves`.

  Example:
    >>> curves = fedkrr.paper.rate_curves(fedkrr.rates.TwoClusters.draw(0, 20))
    >>> bool(np.all(np.diff(curves.rho_ridge) < 0))   # more regularisation, faster decay
    True
    >>> fig = fedkrr.paper.plot_rate_curves(curves)   # pass path="rates.png" to write it
  """
  base = clusters.problem(mixing, ridge)
  as_np = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
  ratios = jnp.asarray(ratios, base.ridge.dtype)
  return RateCurves(
      ridges=as_np(ridges),
      rho_ridge=as_np(rates.sweep_ridge(base, ridges)),
      ratios=as_np(ratios),
      rho_ratio=as_np(rates.sweep_bandwidth_ratio(base, ratios)),
      rho_mismatch=as_np(sweep_kernel_mismatch(base, ratios)),
      mixings=as_np(mixings),
      rho_mixing=as_np(rates.sweep_heterogeneity(clusters, jnp.asarray(mixings, base.ridge.dtype),
                                                 ridge)),
      separations=as_np(separations),
      rho_separation=as_np(rates.sweep_separation(
          clusters, jnp.asarray(separations, base.ridge.dtype), ridge, mixing)),
      ridge=float(ridge), mixing=float(mixing))


def _save(fig, path) -> None:
  if path is not None:
    directory = os.path.dirname(os.fspath(path))
    if directory:
      os.makedirs(directory, exist_ok=True)
    atomic_savefig(fig, path, dpi=120)


def plot_rate_curves(curves: RateCurves, path: str | os.PathLike | None = None):
  """Draws ``rho`` against c, the bandwidth ratio, the mixing fraction and the separation.

  Four panels in a 2 x 2 grid (readable in a page's column), one per sweep of
  :class:`RateCurves` (Prop. IV): c and the
  bandwidth ratio on log x axes; the bandwidth panel has two lines (agent 2's
  bandwidth only, and the symmetric mismatch of :func:`sweep_kernel_mismatch`).
  Every panel's y axis is ``rho``, the degradation rate per AKD cycle.

  Args:
    curves: the sweeps (:func:`rate_curves`).
    path: if given, the figure is saved there as a PNG.

  Returns:
    The ``matplotlib.figure.Figure`` (four axes, in the order above).
  """
  from matplotlib.figure import Figure  # no pyplot: no backend switch, no global state

  fig = Figure(figsize=(10.0, 7.2), layout="constrained")
  ax_c, ax_r, ax_p, ax_s = fig.subplots(2, 2).ravel()
  ax_c.plot(curves.ridges, curves.rho_ridge, "o-", label="shared kernel")
  ax_c.set_xscale("log")
  ax_c.set_xlabel("regularisation c")
  ax_c.set_title(f"trend 1: larger c (mixing {curves.mixing:g})")

  ax_r.plot(curves.ratios, curves.rho_ratio, "o-", label=r"$\gamma_2 = \gamma_1 r$")
  ax_r.plot(curves.ratios, curves.rho_mismatch, "s--",
            label=r"$\gamma_{1,2} = \gamma\, r^{\mp 1/2}$")
  ax_r.set_xscale("log")
  ax_r.set_xlabel(r"bandwidth ratio $r = \gamma_2 / \gamma_1$")
  ax_r.set_title(f"trend 2: kernel mismatch (c = {curves.ridge:g})")
  ax_r.legend(fontsize="small")

  ax_p.plot(curves.mixings, curves.rho_mixing, "o-")
  ax_p.set_xlabel("mixing fraction (0 = disjoint clusters, 1 = iid)")
  ax_p.set_title(f"trend 3: data heterogeneity (c = {curves.ridge:g})")

  ax_s.plot(curves.separations, curves.rho_separation, "o-")
  ax_s.set_xlabel("distance between the cluster centres")
  ax_s.set_title(f"trend 3: cluster separation (mixing {curves.mixing:g})")

  for ax in (ax_c, ax_r, ax_p, ax_s):
    ax.set_ylabel(r"degradation rate $\rho$")
    ax.grid(True, alpha=0.3)
  _save(fig, path)
  return fig


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
  """Cell edges around sorted centres (geometric midpoints on a log axis)."""
  v = np.log10(values) if log else np.asarray(values, dtype=np.float64)
  if v.size == 1:
    edges = np.array([v[0] - 0.5, v[0] + 0.5])
  else:
    mid = 0.5 * (v[1:] + v[:-1])
    edges = np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])
  return 10.0 ** edges if log else edges


def plot_rate_heatmap(grid: ArrayLike, ridges: ArrayLike, mixings: ArrayLike,
                      path: str | os.PathLike | None = None, title: str | None = None,
                      log_scale: bool = False):
  """A heat map of ``rho`` over (c, mixing fraction): the output of :func:`fedkrr.rates.rate_grid`.

  Args:
    grid: (n_c, n_p) degradation rates, ``grid[i, j]`` at ``ridges[i]`` and ``mixings[j]``.
    ridges: (n_c,) increasing values of c > 0 (log x axis).
    mixings: (n_p,) increasing mixing fractions (y axis).
    path: if given, the figure is saved there as a PNG.
    title: the axes' title (a default names the statement).
    log_scale: a logarithmic colour scale (shows the heterogeneity trend where
      ``rho`` is small, at large c); linear on [0, 1] otherwise.

  Returns:
    The ``matplotlib.figure.Figure``; its first axes hold the map (a
    ``QuadMesh`` whose array is ``grid`` transposed), the second the colour bar.

  Raises:
    ValueError: if the shapes do not agree.
  """
  from matplotlib.colors import LogNorm
  from matplotlib.colors import Normalize
  from matplotlib.figure import Figure

  grid = np.asarray(grid, dtype=np.float64)
  ridges = np.asarray(ridges, dtype=np.float64)
  mixings = np.asarray(mixings, dtype=np.float64)
  if grid.shape != (ridges.size, mixings.size):
    raise ValueError(f"grid: expected shape ({ridges.size}, {mixings.size}) = "
                     f"(len(ridges), len(mixings)), got {grid.shape}")
  fig = Figure(figsize=(6.4, 4.8), layout="constrained")
  ax = fig.subplots()
  if log_scale:
    norm = LogNorm(vmin=max(float(np.min(grid)), 1e-300), vmax=1.0)
  else:
    norm = Normalize(vmin=0.0, vmax=1.0)
  mesh = ax.pcolormesh(_edges(ridges, True), _edges(mixings, False), grid.T, cmap="viridis",
                       norm=norm)
  ax.set_xscale("log")
  ax.set_xlabel("regularisation c")
  ax.set_ylabel("mixing fraction (0 = disjoint clusters, 1 = iid)")
  ax.set_title(title or r"degradation rate $\rho$ of AKD (Prop. IV)")
  bar = fig.colorbar(mesh, ax=ax)
  bar.set_label(r"$\rho$ (per cycle of two rounds)")
  _save(fig, path)
  return fig


def akd_decay(problem: FederatedProblem, rounds: int,
              x_eval: ArrayLike) -> tuple[np.ndarray, float]:
  """``|g_t|`` (the Euclidean norm of AKD's round-t predictions at ``x_eval``) and ``rho``.

  For t large, ``|g_t|`` behaves like ``C_{t mod M} rho^(t / M)`` (Prop. II, IV,
  VIII): on a log scale, a line of slope ``log(rho) / M`` (per agent, the constant
  depends on whose model it is).

  Args:
    problem: any problem with c > 0.
    rounds: the number of AKD rounds T (from agent 0).
    x_eval: (n_eval, d) evaluation points.

  Returns:
    ``(norms, rho)``: (T,) norms (summed over label columns) and the degradation rate.
  """
  preds = np.asarray(closed_form.trajectory(problem, "akd", rounds, x_eval), dtype=np.float64)
  norms = np.sqrt(np.sum(preds.reshape(rounds, -1) ** 2, axis=1))
  return norms, float(rates.degradation_rate(problem))


def plot_akd_decay(problem: FederatedProblem, rounds: int, x_eval: ArrayLike,
                   path: str | os.PathLike | None = None):
  """``log |g_t|`` of AKD against t, with the predicted slope ``log(rho) / M``.

  The dashed line has slope ``log(rho) / M`` and passes through the last
  round's point; the measured curve becomes parallel to it once the leading
  eigenvalue of the AKD cycle dominates.

  Args:
    problem: any problem with c > 0.
    rounds: the number of AKD rounds T.
    x_eval: (n_eval, d) evaluation points.
    path: if given, the figure is saved there as a PNG.

  Returns:
    The ``matplotlib.figure.Figure``; its axes' first line is ``log |g_t|``, the
    second the prediction.
  """
  from matplotlib.figure import Figure

  norms, rho = akd_decay(problem, rounds, x_eval)
  t = np.arange(rounds)
  slope = np.log(rho) / problem.num_agents
  log_norms = np.log(norms)
  fig = Figure(figsize=(6.4, 4.2), layout="constrained")
  ax = fig.subplots()
  ax.plot(t, log_norms, ".-", label=r"AKD: $\log \|g_t\|$")
  ax.plot(t, log_norms[-1] + slope * (t - t[-1]), "--",
          label=rf"slope $\log(\rho) / {problem.num_agents}$ = {slope:.3g}")
  ax.set_xlabel("round t")
  ax.set_ylabel(r"$\log \|g_t(X_{eval})\|$")
  ax.set_title(rf"AKD decays at the predicted rate ($\rho$ = {rho:.4g})")
  ax.legend()
  ax.grid(True, alpha=0.3)
  _save(fig, path)
  return fig


class DegradationReport(NamedTuple):
  """What :func:`degradation_report` computed and wrote.

  Attributes:
    curves: the sweeps (:class:`RateCurves`).
    grid: (n_c, n_p) ``rho`` over ``ridges x mixings``.
    ridges: (n_c,) values of c of the grid.
    mixings: (n_p,) mixing fractions of the grid.
    paths: the files written, keyed by ``curves``, ``heatmap`` and ``numbers``.
  """

  curves: RateCurves
  grid: np.ndarray
  ridges: np.ndarray
  mixings: np.ndarray
  paths: dict[str, str]


def degradation_report(seed: int, out_dir: str | os.PathLike, points_per_agent: int = 50,
                       grid_size: int = 12, ridge: float = 1e-2,
                       mixing: float = 0.0) -> DegradationReport:
  """Computes the standard sweeps of Prop. IV on a seeded draw and writes the figures.

  Writes into ``out_dir``: ``rate_curves.png`` (:func:`plot_rate_curves`),
  ``rate_heatmap.png`` (:func:`plot_rate_heatmap`, log colour scale, of a ``grid_size x grid_size``
  :func:`fedkrr.rates.rate_grid` over c in [1e-4, 1] and mixing in [0, 1]) and
  ``rates.json`` (every number behind both figures).

  Args:
    seed: the seed of :meth:`fedkrr.rates.TwoClusters.draw`.
    out_dir: the output directory (created if missing).
    points_per_agent: points per agent (N = 2 * points_per_agent).
    grid_size: points per axis of the heat map.
    ridge: c of the bandwidth, mixing and separation sweeps.
    mixing: the mixing fraction of the ridge, bandwidth and separation sweeps.

  Returns:
    A :class:`DegradationReport`.

  Example:
    >>> import os, tempfile
    >>> out = tempfile.mkdtemp()
    >>> report = fedkrr.paper.degradation_report(0, out, points_per_agent=10, grid_size=3)
    >>> sorted(os.listdir(out))
    ['rate_curves.png', 'rate_heatmap.png', 'rates.json']
  """
  os.makedirs(out_dir, exist_ok=True)
  clusters = rates.TwoClusters.draw(seed, points_per_agent)
  curves = rate_curves(clusters, ridge=ridge, mixing=mixing)
  ridges = np.logspace(-4, 0, grid_size)
  mixings = np.linspace(0.0, 1.0, grid_size)
  dtype = jnp.asarray(1.0).dtype  # float64 where the entry point enabled it
  grid = np.asarray(rates.rate_grid(clusters, jnp.asarray(ridges, dtype),
                                    jnp.asarray(mixings, dtype)), dtype=np.float64)
  paths = {name: os.path.join(os.fspath(out_dir), file) for name, file in
           (("curves", "rate_curves.png"), ("heatmap", "rate_heatmap.png"),
            ("numbers", "rates.json"))}
  plot_rate_curves(curves, paths["curves"])
  plot_rate_heatmap(grid, ridges, mixings, paths["heatmap"], log_scale=True)
  numbers = {"seed": seed, "points_per_agent": points_per_agent, "dtype": str(dtype),
             **{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in curves._asdict().items()},
             "grid": {"ridges": ridges.tolist(), "mixings": mixings.tolist(),
                      "rho": grid.tolist()}}
  atomic_write(paths["numbers"], json.dumps(numbers, indent=1))
  return DegradationReport(curves, grid, ridges, mixings, paths)
