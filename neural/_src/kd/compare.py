"""Theory side by side: a neural KD run next to its closed-form kernel twin.

For an :class:`ExperimentConfig` of a KD protocol (akd, avgkd, pkd, pkd-mean,
ekd, backfit-gs, backfit-jacobi), :func:`compare` runs (or resumes) the network
experiment with :func:`neural.train_and_evaluate`, then computes the
``fedkrr`` closed form of the same protocol on the same data
(:func:`neural.load_run_data`: same subset, same split, inputs flattened,
one-hot targets), for the same rounds and starting agent, with

* each agent's kernel taken from its architecture (``kernel``):

  - ``"ntk"``: the empirical NTK (logit-averaged, :func:`neural.training.ntk_kernel`)
    of the agent's network at the initialisation of round 0 of the run: the
    variables that agent's learner draws from ``round_key(seed, 0, a)``
    (Jacot et al. 2018; Lee et al. 2019). Rounds t > 0 of the run start from
    other fresh initialisations (in AKD every agent but the start one first
    trains in a later round, so from another draw); the theory keeps the
    round-0 draw's kernel for every round;
  - ``"nngp"`` / ``"relu-ntk"``: the analytic kernels of a ReLU MLP of the
    agent's depth and width in the standard parametrisation of Flax's
    ``nn.Dense`` (:class:`fedkrr.ReluNNGP`, :class:`fedkrr.ReluNTK` with
    ``parametrization="standard"``, ``weight_var = 1``: LeCun initialisation,
    weight variance 1 / fan-in; ``bias_var = 0``: zero biases): the read-out
    kernel (training the last layer alone) and the expected NTK at
    initialisation, on the scale of the network's own gradients, so that the
    ridge matched to the weight decay means the same; MLP agents only;
  - ``"rbf"``: ``exp(-gamma |x - x'|^2)`` with ``gamma = 1 / (d var(x))`` over
    the flat training inputs (scikit-learn's "scale"): cheap, not a network kernel;

* the ridge matched to the weight decay. Local training minimises (App. A;
  :mod:`neural._src.training.training`) ``(1 / (N_a C)) sum_i |s(x_i) - t_i|^2`` plus
  the L2 term whose gradient ``wd theta`` is added to Adam's gradient, i.e.
  ``+ (wd / 2) |theta|^2``. For the network linearised at initialisation,
  regressing its logits (not the softmax) with the logit-averaged NTK ``k``,
  the minimiser is ``k(x, X_a) (k(X_a, X_a) + lambda_a I)^{-1} t`` with
  ``lambda_a = N_a C wd / 2``. In ``fedkrr``'s convention (Gram blocks
  ``k / N``, one ridge c) that is agent a's kernel scaled by ``N / N_a`` with
  ``c = C wd / 2``; the default of ``ridge``.

  Caveat: Adam with mini-batches for finitely many epochs, dropout, the
  softmax in the loss, the decay pulling theta to 0 rather than to its initial
  value, and the finite width (the kernel moves in training) all break this
  identity; the theory is the kernel regime's prediction, not the network's
  minimiser.

Everything is evaluated on the run's test set: per round, the test accuracy
(argmax of the predicted scores) and the squared error ``mean_{i,c} (f_c(x_i)
- y_ic)^2`` of the theory's predictions (raw regression outputs) and of the
network (its softmax probabilities: the run's ``test_loss`` when the loss is
"mse"; not available for "ce" runs). The curves are matched as the run's metric
rows are written: each agent's model for AvgKD, PKD and pkd-mean, the chain of
models for AKD (round t belongs to agent ``(start + t) mod M``), the running sum
("ensemble") for EKD and backfitting.

Rates, and their units. ``spectral_radius_per_round`` (``spectral_radius``) is
the spectral radius of the protocol's round map (:func:`fedkrr.limit`): the
factor per round by which the iterates approach their limit. For AKD and EKD it
is ``rho^(1/M)`` with rho the degradation rate per cycle of M rounds
(:func:`fedkrr.rates.degradation_rate`, Prop. IV / VIII), reported as
``degradation_rate_per_cycle`` (``degradation_rate``). The *fitted rate* of a
curve is a rate per round too, measured on the curve rather than computed from
the kernels, with one estimator for the theory and the network
(:func:`geometric_rate`): the per-round changes ``d_t = |v_{t+1} - v_t|`` are
fitted by ``log d_t = a + t log r`` (least squares); if ``v_t = v_inf + B r^t``
exactly, it returns r. A few rounds show the transient, not the rate: curves of
fewer than ``MIN_FIT_ROUNDS`` rounds get no fitted rate (``None``).

Rounds are numbered as the run logs them (round 0: local training on the
labels; an AKD round is one agent's step), in the tables, in ``compare.png`` and
in the run's own ``accuracy.png``, which :func:`compare` draws in these units.

Cost. The kernels are evaluated only on ``(training + test points) x (the
agent's own points)``; the NTK costs about ``2 (N + n_test) N C P`` flops for P
parameters, so use the config's ``train_subset`` / ``test_subset``; runs with
more than ``max_points`` training plus test points are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import json
import math
import numbers
import os
from pathlib import Path
import time
from typing import Any
from typing import NamedTuple
from typing import cast

import jax
import jax.numpy as jnp
from matplotlib.figure import Figure
import numpy as np

import fedkrr
from fedkrr import FederatedProblem
from fedkrr import pytree_dataclass
from fedkrr.io import atomic_savefig
from fedkrr.io import atomic_write
from fedkrr.io import figure_bytes
from fedkrr.io import write_files
from neural._src.datasets.data import one_hot
from neural._src.datasets.run_data import RunData
from neural._src.datasets.run_data import load_run_data
from neural._src.kd.experiment import round_key
from neural._src.kd.experiment import train_and_evaluate
from neural._src.learners.ntk import ntk_kernel
from neural._src.models.models import MLP
from neural._src.models.models import get_model
from neural._src.runtime.config import FOREST
from neural._src.runtime.config import KD_PROTOCOLS
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import read_metrics
from neural._src.training.training import init_variables
from neural._src.training.training import scores

KERNELS = ("ntk", "nngp", "relu-ntk", "rbf")
COMPARE_JSON = "compare.json"
COMPARE_MD = "compare.md"
COMPARE_PNG = "compare.png"
ESTIMATOR = ("geometric fit of the per-round change: least squares of log|v_{t+1} - v_t| "
             "on t, rate = exp(slope); changes below 1e-12 of the largest are dropped; "
             "NaN with fewer than 2 changes")
MIN_FIT_ROUNDS = 8
"""Fewest rounds of a curve whose rate is fitted: 7 changes, past the first transient."""

Array = jax.Array


class CompareError(ValueError):
  """A config or option that the comparison cannot use (the message names it)."""


@pytree_dataclass
class GramColumns:
  """A kernel that looks up a precomputed Gram block by point index.

  Points are represented by their row index in a table of points (as floats in
  a (n, 1) array). ``gram`` holds ``k(point_i, own_j)`` for every point i and
  the agent's own points j = ``offset`` .. ``offset + n_own - 1``: a call
  ``k(x1, x2)`` must take ``x2`` among the agent's own points (as every Gram
  block of ``fedkrr.trajectory``, ``limit`` and ``degradation_rate`` does for
  agent a's kernel); other columns give NaN.
  """

  gram: Array                       # (n_points, n_own)
  offset: int = 0

  def __call__(self, x1: Array, x2: Array) -> Array:
    rows = x1[:, 0].astype(jnp.int32)
    cols = x2[:, 0].astype(jnp.int32) - self.offset
    block = jnp.take(self.gram, rows, axis=0, mode="fill", fill_value=jnp.nan)
    return jnp.take(block, cols, axis=1, mode="fill", fill_value=jnp.nan)


class TheoryProblem(NamedTuple):
  """The closed-form twin of a run.

  Attributes:
    problem: the :class:`fedkrr.FederatedProblem`; its inputs are row indices
      into ``points`` ((N_a, 1) each), its kernels :class:`GramColumns`.
    x_eval: (n_test, 1) indices of the test points.
    points: (N + n_test, d) flat inputs: agent 0's points, ..., agent M-1's, test.
    kernel: the kernel option.
    ridge: c (fedkrr convention).
    scales: each agent's kernel scale ``N / N_a`` (the per-agent ridge, see module docstring).
  """

  problem: FederatedProblem
  x_eval: Array
  points: np.ndarray
  kernel: str
  ridge: float
  scales: tuple[float, ...]


class Comparison(NamedTuple):
  """The result of :func:`compare` (also written to ``compare.json``).

  Attributes:
    config: the experiment.
    kernel: the kernel option.
    ridge: c in fedkrr's convention; agent a's kernel is scaled by ``scales[a]``.
    scales: ``N / N_a`` per agent.
    spectral_radius: of the protocol's round map, per round (also
      ``spectral_radius_per_round``).
    degradation_rate: AKD's rate per cycle of M rounds (akd, ekd; else None; also
      ``degradation_rate_per_cycle``).
    rows: one dict per (round, series): ``round``, ``series``, ``agent``,
      ``theory_accuracy``, ``theory_sq_error``, ``network_accuracy``,
      ``network_sq_error`` (None where the network has no value).
    rates: per series: ``spectral_radius`` (per round), ``theory_fit_sq_error``,
      ``network_fit_sq_error``, ``theory_fit_accuracy``, ``network_fit_accuracy``
      (fitted rates per round, ``None`` below ``MIN_FIT_ROUNDS`` rounds),
      ``theory_limit_accuracy``, ``theory_limit_sq_error``.
    timings: seconds of ``network``, ``kernels``, ``theory``.
    paths: the files written.
  """

  config: ExperimentConfig
  kernel: str
  ridge: float
  scales: tuple[float, ...]
  spectral_radius: float
  degradation_rate: float | None
  rows: list[dict[str, Any]]
  rates: dict[str, dict[str, Any]]
  timings: dict[str, float]
  paths: dict[str, str]

  @property
  def spectral_radius_per_round(self) -> float:
    """``spectral_radius``, named with its unit: the contraction factor per round."""
    return self.spectral_radius

  @property
  def degradation_rate_per_cycle(self) -> float | None:
    """``degradation_rate``, named with its unit: AKD's factor per cycle of M rounds."""
    return self.degradation_rate

  def to_dict(self) -> dict[str, Any]:
    """The comparison's settings and curves as a JSON-ready dict (``compare.json``).

    The radius and the rate are written under their old names and under names with
    their units (``spectral_radius_per_round``, ``degradation_rate_per_cycle``).
    """
    return {"config": self.config.to_dict(), "kernel": self.kernel, "ridge": self.ridge,
            "kernel_scales": list(self.scales), "spectral_radius": self.spectral_radius,
            "spectral_radius_per_round": self.spectral_radius,
            "degradation_rate": self.degradation_rate,
            "degradation_rate_per_cycle": self.degradation_rate,
            "rate_estimator": ESTIMATOR, "min_fit_rounds": MIN_FIT_ROUNDS,
            "rows": self.rows, "rates": self.rates, "timings": self.timings}


# ---------------------------------------------------------------------------
# Pure pieces


def geometric_rate(curve: Sequence[float], floor: float = 1e-12) -> float:
  """The per-round rate r of a curve approaching its limit geometrically.

  With ``d_t = |v_{t+1} - v_t|`` (t = 0..T-2), fits ``log d_t = a + t log r``
  by least squares over the changes above ``floor * max(d)`` and returns
  ``r = exp(slope)``. For ``v_t = v_inf + B r^t`` (or ``B (-r)^t``), r > 0,
  it returns r exactly, whatever ``v_inf`` and B.

  Args:
    curve: the values v_0, ..., v_{T-1} (e.g. a test error per round).
    floor: changes below this fraction of the largest one are dropped (no signal).

  Returns:
    r, or NaN when fewer than two changes remain (T < 3, or a flat curve).

  Raises:
    CompareError: ``curve`` is not a finite 1-D sequence.
  """
  v = np.asarray(curve, dtype=np.float64)
  if v.ndim != 1 or not np.all(np.isfinite(v)):
    raise CompareError(f"curve: expected a finite 1-D sequence of numbers, got shape {v.shape}")
  d = np.abs(np.diff(v))
  if d.size == 0 or not np.max(d) > 0:
    return float("nan")
  t = np.flatnonzero(d > floor * np.max(d))
  if t.size < 2:
    return float("nan")
  slope = np.polyfit(t.astype(np.float64), np.log(d[t]), 1)[0]
  return float(np.exp(slope))


def matched_ridge(config: ExperimentConfig, num_classes: int) -> float:
  """``c = C wd / 2``: the ridge of the linearised network's loss (module docstring).

  Goes with each agent's kernel scaled by ``N / N_a``.
  """
  return float(num_classes) * float(config.weight_decay) / 2.0


def check_options(ridge: Any = None, max_points: Any = 5000, ntk_batch_size: Any = 64) -> None:
  """Raises :class:`CompareError` (naming the option) unless the comparison's numbers are
  usable: ``ridge`` None or a finite number >= 0, ``max_points`` and ``ntk_batch_size``
  integers >= 1. Checked before anything trains."""
  if ridge is not None and (isinstance(ridge, bool) or not isinstance(ridge, numbers.Real)
                            or not math.isfinite(float(ridge)) or float(ridge) < 0):
    raise CompareError(f"ridge: expected a finite number >= 0, got {ridge!r}")
  for name, value in (("max_points", max_points), ("ntk_batch_size", ntk_batch_size)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
      raise CompareError(f"{name}: expected an integer >= 1, got {value!r}")


def check_config(config: ExperimentConfig, kernel: str) -> None:
  """Raises :class:`CompareError` unless the run can have a closed-form twin."""
  if not isinstance(config, ExperimentConfig):
    raise CompareError(f"config: expected a neural ExperimentConfig, got {type(config).__name__}")
  if config.protocol not in KD_PROTOCOLS:
    raise CompareError(f"config.protocol: expected a KD protocol with a closed form "
                       f"({', '.join(KD_PROTOCOLS)}), got {config.protocol!r}")
  if kernel not in KERNELS:
    raise CompareError(f"kernel: expected one of {', '.join(KERNELS)}, got {kernel!r}")
  for a, name in enumerate(config.agent_models):
    if name == FOREST:
      raise CompareError(f"config.models: agent {a} is a random forest, which has no kernel: "
                         f"the comparison needs network agents (no closed-form twin)")
    if kernel in ("nngp", "relu-ntk") and name != "mlp":
      raise CompareError(f"kernel: {kernel!r} is the infinite-width kernel of a ReLU MLP, but "
                         f"agent {a} is {name!r}; use kernel='ntk' or 'rbf'")


def _flat(x: np.ndarray) -> np.ndarray:
  return np.asarray(x, np.float32).reshape(x.shape[0], -1)


def _gram_columns(config: ExperimentConfig, data: RunData, kernel: str, a: int,
                  points: np.ndarray, own: np.ndarray, dtype, ntk_batch_size: int) -> np.ndarray:
  """Agent a's raw kernel ``k_a(points, own)`` as a float64 NumPy array."""
  if kernel == "rbf":
    train = np.concatenate([_flat(x) for x in data.xs])
    gamma = 1.0 / (train.shape[1] * max(float(np.var(train)), 1e-12))
    k = fedkrr.RBF(gamma)
    return np.asarray(k(jnp.asarray(points, dtype), jnp.asarray(own, dtype)), np.float64)
  model = get_model(config.agent_models[a], data.num_classes, width=config.agent_widths[a],
                    tiny=config.tiny, norm=config.norm)
  if kernel in ("nngp", "relu-ntk"):
    cls = fedkrr.ReluNNGP if kernel == "nngp" else fedkrr.ReluNTK
    k = cls(depth=int(model.depth), weight_var=1.0, bias_var=0.0, parametrization="standard",
            width=int(model.width))
    return np.asarray(k(jnp.asarray(points, dtype), jnp.asarray(own, dtype)), np.float64)
  input_shape = tuple(data.xs[0].shape[1:])
  init_key = jax.random.split(round_key(config.init_seed, 0, a))[0]   # as FlaxLearner._start
  variables = init_variables(model, init_key, input_shape)
  if isinstance(model, MLP):
    return np.asarray(mlp_ntk(model, variables["params"], jnp.asarray(points, jnp.float32),
                              jnp.asarray(own, jnp.float32)), np.float64)
  k = ntk_kernel(model, variables, input_shape, batch_size=ntk_batch_size)
  # float32, like the network; the theory then works on its float64 copy.
  return np.asarray(k(jnp.asarray(points, jnp.float32), jnp.asarray(own, jnp.float32)),
                    np.float64)


@functools.partial(jax.jit, static_argnames=("model",))
def mlp_ntk(model: Any, params: Any, x1: Array, x2: Array) -> Array:
  """The logit-averaged empirical NTK of :class:`neural.models.MLP` in closed form, (n1, n2).

  For a stack of dense layers ``h_l = W_l a_{l-1} + b_l``, ``a_l = relu(h_l)``,
  the gradient of logit c with respect to ``W_l`` is ``delta_lc a_{l-1}^T``
  (``delta_lc = df_c / dh_l``) and with respect to ``b_l`` is ``delta_lc``, so

      k(x, x') = (1 / C) sum_l (<a_{l-1}(x), a_{l-1}(x')> + 1) sum_c <delta_lc(x), delta_lc(x')>,

  the same kernel as :func:`neural.training.ntk_kernel` (dropout off, relu' (0) = 0) at a
  cost of ``n1 n2 C (sum of widths)`` instead of ``n1 n2 C P``.

  Args:
    model: an :class:`neural.models.MLP` (static).
    params: its parameters ``{"Dense_0": {"kernel", "bias"}, ...}``.
    x1: flat inputs (n1, d).
    x2: flat inputs (n2, d).
  """
  depth = int(model.depth)
  dense = [params[f"Dense_{i}"] for i in range(depth + 1)]

  def forward(x):
    acts, masks = [x], []
    for layer in dense[:-1]:
      h = acts[-1] @ layer["kernel"] + layer["bias"][None, :]
      masks.append((h > 0).astype(x.dtype))
      acts.append(jnp.maximum(h, 0))
    num_classes = dense[-1]["kernel"].shape[1]
    deltas = [jnp.broadcast_to(jnp.eye(num_classes, dtype=x.dtype)[None],
                               (x.shape[0], num_classes, num_classes))]
    for i in range(depth - 1, -1, -1):   # delta_i = (delta_{i+1} W_{i+1}^T) * relu'(h_i)
      back = jnp.einsum("ncj,kj->nck", deltas[0], dense[i + 1]["kernel"])
      deltas.insert(0, back * masks[i][:, None, :])
    return acts, deltas

  acts1, deltas1 = forward(x1.reshape(x1.shape[0], -1))
  acts2, deltas2 = forward(x2.reshape(x2.shape[0], -1))
  gram = jnp.zeros((x1.shape[0], x2.shape[0]), x1.dtype)
  for a1, a2, d1, d2 in zip(acts1, acts2, deltas1, deltas2):
    gram = gram + (a1 @ a2.T + 1.0) * jnp.einsum("nci,mci->nm", d1, d2)
  return gram / deltas1[-1].shape[1]


def _psd_block(block: np.ndarray) -> np.ndarray:
  """The symmetric part of a square block with negative eigenvalues (rounding) set to 0."""
  sym = 0.5 * (block + block.T)
  w, u = np.linalg.eigh(sym)
  return (u * np.maximum(w, 0.0)) @ u.T


def theory_problem(config: ExperimentConfig, data: RunData | None = None, *,
                   kernel: str = "ntk", ridge: float | None = None, max_points: int = 5000,
                   ntk_batch_size: int = 64, progress: bool = False, dtype=None
                   ) -> TheoryProblem:
  """The ``fedkrr`` problem of the run ``config``: its data, per-agent kernels and ridge.

  Args:
    config: a KD-protocol experiment.
    data: ``load_run_data(config)`` (loaded if ``None``).
    kernel: one of :data:`KERNELS` (module docstring).
    ridge: c; ``None`` for :func:`matched_ridge`.
    max_points: refuse runs with more training plus test points (kernel cost).
    ntk_batch_size: points per block of the empirical NTK.
    progress: a tqdm bar over the agents' kernels.
    dtype: the problem's dtype (default float64 if x64 is on, else float32).

  Returns:
    A :class:`TheoryProblem`.

  Raises:
    CompareError: a protocol without closed form, a forest agent, an analytic
      kernel for a non-MLP agent, or more than ``max_points`` points.
  """
  check_config(config, kernel)
  data = load_run_data(config) if data is None else data
  sizes = [int(x.shape[0]) for x in data.xs]
  n, n_test = sum(sizes), int(data.x_test.shape[0])
  if n + n_test > max_points:
    raise CompareError(f"max_points: the run has {n} training and {n_test} test points "
                       f"({n + n_test} > {max_points}); set the config's train_subset / "
                       f"test_subset, or raise max_points (kernel cost ~ (N + n_test) N)")
  if dtype is None:
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
  c = matched_ridge(config, data.num_classes) if ridge is None else float(ridge)
  if not (math.isfinite(c) and c >= 0):
    raise CompareError(f"ridge: expected a finite number >= 0, got {ridge!r}")
  points = np.concatenate([_flat(x) for x in data.xs] + [_flat(data.x_test)])
  offsets = np.cumsum([0] + sizes)
  from tqdm.auto import tqdm
  kernels, xs, scales = [], [], []
  for a in tqdm(range(config.agents), desc=f"{kernel} kernels", unit="agent",
                disable=not progress):
    lo, hi = int(offsets[a]), int(offsets[a + 1])
    gram = np.array(_gram_columns(config, data, kernel, a, points, points[lo:hi], dtype,
                                  ntk_batch_size))
    if kernel == "ntk":   # float32 rounding: not exactly symmetric / PSD
      gram[lo:hi] = _psd_block(gram[lo:hi])
    scale = n / sizes[a]
    scales.append(scale)
    kernels.append(GramColumns(jnp.asarray(scale * gram, dtype), lo))
    xs.append(jnp.arange(lo, hi, dtype=dtype)[:, None])
  ys = tuple(jnp.asarray(y, dtype) for y in data.ys)
  problem = FederatedProblem(tuple(xs), ys, tuple(kernels), jnp.asarray(c, dtype))
  x_eval = jnp.arange(n, n + n_test, dtype=dtype)[:, None]
  return TheoryProblem(problem, x_eval, points, kernel, c, tuple(scales))


class TheoryCurves(NamedTuple):
  """Per-series predictions of the closed form.

  Attributes:
    predictions: series -> (T, n_test, C) predictions of rounds 0..T-1.
    agents: series -> per round, the agent of the ``agent`` field of the run's rows.
    limits: series -> (n_test, C) t -> infinity predictions.
    spectral_radius: of the round map.
    degradation_rate: AKD's per-cycle rate (akd, ekd) or None.
  """

  predictions: dict[str, np.ndarray]
  agents: dict[str, list[Any]]
  limits: dict[str, np.ndarray]
  spectral_radius: float
  degradation_rate: float | None


def theory_curves(theory: TheoryProblem, config: ExperimentConfig) -> TheoryCurves:
  """Rounds 0..rounds-1 of ``config.protocol`` in closed form (:func:`fedkrr.run`), and its
  fixed point (the limit where the rounds converge)."""
  protocol, rounds, start = config.protocol, config.rounds, config.start
  row = fedkrr.protocol_info(protocol)
  run = fedkrr.run(theory.problem, protocol, rounds, theory.x_eval, method="closed-form",
                   limit=True, params=config.protocol_params)
  preds, lim_preds = run.predictions, cast(np.ndarray, run.fixed_point)
  m = config.agents
  if row.per_agent:
    names = [f"agent {a}" for a in range(m)]
    predictions = {s: preds[:, a] for a, s in enumerate(names)}
    agents = {s: [a] * rounds for a, s in enumerate(names)}
    limits = {s: lim_preds[a] for a, s in enumerate(names)}
  elif row.one_fit_per_round:
    predictions = {"chain": preds}
    agents = {"chain": [(start + t) % m for t in range(rounds)]}
    limits = {"chain": lim_preds}
  else:
    predictions = {"ensemble": preds}
    agents = {"ensemble": ["ensemble"] * rounds}
    limits = {"ensemble": lim_preds}
  rate = None
  if row.cycles:
    rate = float(fedkrr.rates.degradation_rate(theory.problem, start))
  return TheoryCurves(predictions, agents, limits, float(cast(np.ndarray, run.spectral_radius)),
                      rate)


def _network_row(rows: Sequence[dict[str, Any]], t: int, agent: Any) -> dict[str, Any] | None:
  for row in rows:
    if row["round"] == t and row["agent"] == agent and "start" not in row:
      return row
  return None


def comparison_rows(config: ExperimentConfig, data: RunData, curves: TheoryCurves,
                    network_rows: Sequence[dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
  """The per-(round, series) table and the per-series rates (see :class:`Comparison`)."""
  targets = one_hot(data.y_test, data.num_classes)
  rows, rates = [], {}
  for series, preds in curves.predictions.items():
    th_acc, th_err, nn_acc, nn_err = [], [], [], []
    for t in range(preds.shape[0]):
      acc, err = scores(preds[t], data.y_test, targets, "mse")
      agent = curves.agents[series][t]
      net = _network_row(network_rows, t, agent)
      n_acc = None if net is None else float(net["test_accuracy"])
      n_err = None if net is None or config.loss != "mse" else float(net["test_loss"])
      rows.append({"round": t, "series": series, "agent": agent, "theory_accuracy": acc,
                   "theory_sq_error": err, "network_accuracy": n_acc,
                   "network_sq_error": n_err})
      th_acc.append(acc)
      th_err.append(err)
      nn_acc.append(n_acc)
      nn_err.append(n_err)
    lim_acc, lim_err = scores(curves.limits[series], data.y_test, targets, "mse")
    rates[series] = {
        "spectral_radius": curves.spectral_radius,
        "theory_fit_sq_error": _fit_or_none(th_err),
        "network_fit_sq_error": _fit_or_none(nn_err),
        "theory_fit_accuracy": _fit_or_none(th_acc),
        "network_fit_accuracy": _fit_or_none(nn_acc),
        "theory_limit_accuracy": lim_acc if np.isfinite(lim_err) else None,
        "theory_limit_sq_error": lim_err if np.isfinite(lim_err) else None,
    }
  return rows, rates


def _nan_to_none(value: float) -> float | None:
  return None if value is None or not np.isfinite(value) else float(value)


def _fit_or_none(values: Sequence[float | None]) -> float | None:
  """The fitted rate of a curve, or ``None``: a missing value, or too few rounds to fit."""
  known = [v for v in values if v is not None]
  if len(known) < len(values) or len(known) < MIN_FIT_ROUNDS:
    return None
  return _nan_to_none(geometric_rate(known))


# ---------------------------------------------------------------------------
# Files


def _fmt(value: Any, digits: int = 4) -> str:
  if value is None:
    return "-"
  if isinstance(value, float):
    return f"{value:.{digits}f}"
  return str(value)


def write_markdown(comparison: Comparison, path: str | os.PathLike) -> None:
  """``compare.md``: the settings, the per-round table and the rates table."""
  atomic_write(path, markdown_text(comparison))


def markdown_text(comparison: Comparison) -> str:
  """The text of ``compare.md`` (see :func:`write_markdown`)."""
  c = comparison.config
  lines = [
      f"# Theory vs network: {c.protocol} on {c.dataset}",
      "",
      f"Models {', '.join(c.agent_models)}; partition {c.partition}"
      f"{' ' + str(c.partition_params) if c.partition_params else ''}; "
      f"{c.rounds} rounds from agent {c.start}; "
      f"{c.epochs} epochs, weight decay {c.weight_decay:g}, loss {c.loss}.",
      f"Theory: fedkrr closed form with the {comparison.kernel} kernel of each agent "
      f"(scaled by N/N_a = {', '.join(f'{s:.3g}' for s in comparison.scales)}), "
      f"ridge c = {comparison.ridge:.4g}.",
      f"Spectral radius of the round map: {comparison.spectral_radius:.6f} per round"
      + (f"; AKD degradation rate: {comparison.degradation_rate:.6f} per cycle of "
         f"{c.agents} rounds" if comparison.degradation_rate is not None else "") + ".",
      "Rounds as logged: round 0 is local training on the labels"
      + ("; an AKD round is one agent's step." if fedkrr.protocol_info(c.protocol).cycles
         else "."),
      "",
      "| round | series | agent | theory acc | network acc | theory sq err | network sq err |",
      "| --- | --- | --- | --- | --- | --- | --- |",
  ]
  for r in comparison.rows:
    lines.append(f"| {r['round']} | {r['series']} | {r['agent']} | "
                 f"{_fmt(r['theory_accuracy'])} | {_fmt(r['network_accuracy'])} | "
                 f"{_fmt(r['theory_sq_error'], 5)} | {_fmt(r['network_sq_error'], 5)} |")
  lines += [
      "",
      f"Rates per round. The spectral radius is computed from the kernels; a *fitted rate* "
      f"is measured on a curve: {ESTIMATOR}. Curves of fewer than {MIN_FIT_ROUNDS} rounds "
      f"show the transient, not the rate: no fitted rate (-).",
      "",
      "| series | spectral radius | fit theory sq err | fit network sq err | "
      "fit theory acc | fit network acc | theory limit acc | theory limit sq err |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for series, r in comparison.rates.items():
    lines.append(f"| {series} | {_fmt(r['spectral_radius'])} | "
                 f"{_fmt(r['theory_fit_sq_error'])} | {_fmt(r['network_fit_sq_error'])} | "
                 f"{_fmt(r['theory_fit_accuracy'])} | {_fmt(r['network_fit_accuracy'])} | "
                 f"{_fmt(r['theory_limit_accuracy'])} | "
                 f"{_fmt(r['theory_limit_sq_error'], 5)} |")
  return "\n".join(lines) + "\n"


_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:gray", "gold")


def plot_comparison(comparison: Comparison, path: str | os.PathLike) -> None:
  """``compare.png``: accuracy, squared error and per-round changes (log scale) per round.

  Theory dashed, network solid, one colour per series; the rates in the title.
  """
  atomic_savefig(comparison_figure(comparison), path, dpi=110)


def comparison_figure(comparison: Comparison) -> Figure:
  """The figure of ``compare.png`` (see :func:`plot_comparison`)."""
  fig = Figure(figsize=(15, 4.4), layout="constrained")
  axes = fig.subplots(1, 3)
  series_names = list(comparison.rates)
  for k, series in enumerate(series_names):
    color = "black" if series in ("ensemble", "chain") else _COLORS[k % len(_COLORS)]
    rows = [r for r in comparison.rows if r["series"] == series]
    t = [r["round"] for r in rows]
    for ax, key in ((axes[0], "accuracy"), (axes[1], "sq_error")):
      ax.plot(t, [r[f"theory_{key}"] for r in rows], "--o", color=color, ms=3,
              label=f"{series}: theory")
      net = [r[f"network_{key}"] for r in rows]
      if all(v is not None for v in net):
        ax.plot(t, net, "-s", color=color, ms=3, label=f"{series}: network")
    for side, style in (("theory", "--o"), ("network", "-s")):
      values = [r[f"{side}_sq_error"] for r in rows]
      if len(values) > 1 and all(v is not None for v in values):
        changes = np.abs(np.diff(values))
        keep = changes > 0
        axes[2].semilogy(np.asarray(t[:-1])[keep], changes[keep], style, color=color, ms=3,
                         label=f"{series}: {side}")
  rounds = "round (0: local training on the labels)"
  axes[0].set(xlabel=rounds, ylabel="test accuracy", title="accuracy")
  axes[1].set(xlabel=rounds, ylabel="test squared error", title="squared error")
  axes[2].set(xlabel="round t", ylabel="|err(t+1) - err(t)|", title="per-round change")
  from matplotlib.ticker import MaxNLocator
  for ax in axes:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
  handles, labels = axes[0].get_legend_handles_labels()
  fig.legend(handles, labels, fontsize=8, loc="outside right center")
  fitted = [f"{s}: theory {_fmt(r['theory_fit_sq_error'], 3)}, network "
            f"{_fmt(r['network_fit_sq_error'], 3)}" for s, r in comparison.rates.items()
            if r["theory_fit_sq_error"] is not None or r["network_fit_sq_error"] is not None]
  c = comparison.config
  fig.suptitle(f"{c.protocol} ({', '.join(c.agent_models)}; {c.partition}), "
               f"{comparison.kernel} kernel, c = {comparison.ridge:.3g}: spectral radius "
               f"{comparison.spectral_radius:.4f} per round"
               + (f"\nfitted rates of the squared error, per round: {'; '.join(fitted)}"
                  if fitted else ""), fontsize=9)
  return fig


# ---------------------------------------------------------------------------
# The command


def compare(config: ExperimentConfig, workdir: str | os.PathLike, *, kernel: str = "ntk",
            progress: bool = False, run_network: bool = True, ridge: float | None = None,
            max_points: int = 5000, ntk_batch_size: int = 64) -> Comparison:
  """A KD run and its closed-form kernel twin, side by side (module docstring).

  Writes ``compare.json`` (:meth:`Comparison.to_dict`), ``compare.md`` (tables)
  and ``compare.png`` into ``workdir``, beside the run's own files.

  Args:
    config: a KD-protocol :class:`ExperimentConfig` without forest agents.
    workdir: the run directory (the run resumes there if started before).
    kernel: "ntk" (empirical NTK at initialisation), "nngp", "relu-ntk" (MLPs) or "rbf".
    progress: progress bars (training rounds, kernels).
    run_network: if false, do not train: use the metrics already in ``workdir``
      (the network columns are None where there are none).
    ridge: c; ``None`` for the weight-decay match :func:`matched_ridge`.
    max_points: refuse runs with more training plus test points.
    ntk_batch_size: points per block of the empirical NTK.

  Returns:
    The :class:`Comparison`.

  Raises:
    CompareError: see :func:`theory_problem`. ``ExperimentError``: a different
      run in ``workdir``.

  Example:
    >>> import tempfile
    >>> config = neural.ExperimentConfig(dataset="digits", train_subset=26, test_subset=12,
    ...                                  models=("mlp",), width=8, rounds=4, epochs=1,
    ...                                  protocol="akd")
    >>> cmp = neural.compare(config, tempfile.mkdtemp(), kernel="ntk")
    >>> sorted(cmp.rates["chain"])   # AKD's one series, the chain of models
    ['network_fit_accuracy', 'network_fit_sq_error', 'spectral_radius', 'theory_fit_accuracy',
     'theory_fit_sq_error', 'theory_limit_accuracy', 'theory_limit_sq_error']
    >>> sorted(cmp.paths)
    ['figure', 'json', 'markdown']
  """
  check_config(config, kernel)
  check_options(ridge, max_points, ntk_batch_size)   # before anything trains
  workdir = Path(workdir)
  data = load_run_data(config)
  n = sum(int(x.shape[0]) for x in data.xs) + int(data.x_test.shape[0])
  if n > max_points:   # fail before training
    theory_problem(config, data, kernel=kernel, max_points=max_points)
  timings = {}
  start = time.perf_counter()
  if run_network:
    network_rows = train_and_evaluate(config, workdir, progress=progress, units="steps")
  else:
    network_rows = read_metrics(workdir)
  timings["network"] = time.perf_counter() - start
  start = time.perf_counter()
  theory = theory_problem(config, data, kernel=kernel, ridge=ridge, max_points=max_points,
                          ntk_batch_size=ntk_batch_size, progress=progress)
  jax.block_until_ready(theory.problem.kernels[-1].gram)
  timings["kernels"] = time.perf_counter() - start
  start = time.perf_counter()
  curves = theory_curves(theory, config)
  rows, rates = comparison_rows(config, data, curves, network_rows)
  timings["theory"] = time.perf_counter() - start
  workdir.mkdir(parents=True, exist_ok=True)
  paths = {"json": str(workdir / COMPARE_JSON), "markdown": str(workdir / COMPARE_MD),
           "figure": str(workdir / COMPARE_PNG)}
  result = Comparison(config, kernel, theory.ridge, theory.scales, curves.spectral_radius,
                      curves.degradation_rate, rows, rates,
                      {k: round(v, 3) for k, v in timings.items()}, paths)
  write_files({paths["json"]: json.dumps(result.to_dict(), indent=2) + "\n",   # one set
               paths["markdown"]: markdown_text(result),
               paths["figure"]: figure_bytes(comparison_figure(result), paths["figure"],
                                             dpi=110)})
  return result
