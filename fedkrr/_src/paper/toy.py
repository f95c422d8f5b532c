"""The toy experiment of Fig. 3 (Sec. 6.2, App. A): federated linear regression by distillation.

Setup (Afonin & Karimireddy, App. A "Toy experiments"): a linear regression
``A x* = b`` with ``A`` of shape (n, d), ``d = 100`` and ``n = 1.5 d``; the
rows of ``A`` and ``b`` are split between two agents at proportion 0.6 / 0.4,
at random ("same data") or after sorting by ``b`` ("different data"). Both
agents use the linear kernel ``k(x, x') = <x, x'>``, i.e. ridge regression, so
every round of every protocol has a closed form (:func:`fedkrr.trajectory`).
AKD, AvgKD and EKD run for 250 rounds against centralised training
(:func:`fedkrr.central`) and local-only training (:func:`fedkrr.local`), in
three panels: same data, different data, and strong regularisation.

The measured quantity (the y-axis of Fig. 3) is the training loss on the whole
data, the mean squared error over all n points,

    L(f) = (1 / n) sum_{i=1..n} (f(a_i) - b_i)^2,

of each round's predictor f: AKD's round-t model (from either starting agent),
each agent's AvgKD model, EKD's partial sum over rounds 0..t, the centralised
model and each agent's local model. AKD tends to the zero model (Prop. II), so
its loss tends to ``L(0) = mean(b^2)``; EKD's limit is the centralised model
(Prop. VII, shared kernel).

Where the paper is silent, this module chooses (each a :class:`ToyConfig` field):

* ``A`` and ``x*`` have i.i.d. standard normal entries; ``b = A x* + noise * eps``
  with ``noise = 0`` (the paper writes ``A x* = b``, a consistent system);
* the regularisation constant is ``c = 0.03`` in the first two panels (weak:
  EKD needs about 100 rounds to come within 1% of the centralised loss) and
  ``c = 1`` in the strong-regularisation panel, on the Gram convention
  ``K = A A^T / N`` of this package;
* the strong-regularisation panel uses the "same data" split, the very same
  random split as the first panel, so that only ``c`` differs;
* "different data" gives agent 0 (60%) the points with the smallest ``b``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import kernels as kernels_lib
from fedkrr._src.io.files import atomic_savefig
from fedkrr._src.io.files import figure_bytes
from fedkrr._src.io.files import write_files
from fedkrr._src.metrics import mean_squared_error as _mse
from fedkrr._src.names import ProtocolParams
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import make_problem

Array = jax.Array

SPLITS = ("same", "different")


class ToyPanel(NamedTuple):
  """One panel of Fig. 3: a split of the data and a regularisation constant.

  Attributes:
    name: the panel's title.
    split: ``"same"`` (random split) or ``"different"`` (split after sorting by b).
    ridge: the regularisation constant c >= 0.
  """

  name: str
  split: str
  ridge: float


@dataclasses.dataclass(frozen=True)
class ToyConfig:
  """The toy experiment's parameters (defaults: App. A, and the choices of the module docstring).

  Attributes:
    dim: the number of features d.
    points_per_dim: n / d (the paper: 1.5).
    fraction: the share of the points that agent 0 holds (the paper: 0.6).
    noise: the standard deviation of Gaussian noise added to ``b = A x*``.
    rounds: the number of rounds T of every protocol (the paper: 250).
    panels: the panels of the figure.
  """

  dim: int = 100
  points_per_dim: float = 1.5
  fraction: float = 0.6
  noise: float = 0.0
  rounds: int = 250
  panels: tuple[ToyPanel, ...] = (
      ToyPanel("same data", "same", 0.03),
      ToyPanel("different data", "different", 0.03),
      ToyPanel("strong regularisation", "same", 1.0),
  )

  @property
  def num_points(self) -> int:
    """n = round(points_per_dim * d)."""
    return int(round(self.points_per_dim * self.dim))

  @property
  def sizes(self) -> tuple[int, int]:
    """The agents' numbers of points (N_0, N_1)."""
    n0 = int(round(self.fraction * self.num_points))
    return n0, self.num_points - n0

  def to_dict(self) -> dict[str, Any]:
    """The configuration as a JSON-ready dict (panels as dicts)."""
    d = dataclasses.asdict(self)
    d["panels"] = [p._asdict() for p in self.panels]
    return d

  def check(self) -> None:
    """Raises ``ValueError`` naming the first invalid field."""
    if not isinstance(self.dim, int) or self.dim < 1:
      raise ValueError(f"dim: expected an integer >= 1, got {self.dim!r}")
    if not isinstance(self.rounds, int) or isinstance(self.rounds, bool) or self.rounds < 1:
      raise ValueError(f"rounds: expected an integer >= 1, got {self.rounds!r}")
    if not self.noise >= 0:
      raise ValueError(f"noise: expected a number >= 0, got {self.noise!r}")
    if min(self.sizes) < 1:
      raise ValueError(f"fraction, points_per_dim: both agents need points, got sizes "
                       f"{self.sizes}")
    if not self.panels:
      raise ValueError("panels: expected at least one panel")
    for p in self.panels:
      if p.split not in SPLITS:
        raise ValueError(f"panels: split of {p.name!r} must be one of {SPLITS}, got {p.split!r}")
      if not p.ridge >= 0:
        raise ValueError(f"panels: ridge of {p.name!r} must be >= 0, got {p.ridge!r}")


class ToyData(NamedTuple):
  """The regression data and the two orders in which it is split.

  Attributes:
    a: the design matrix A, shape (n, d).
    b: the targets ``A x* + noise``, shape (n,).
    x_star: the true parameter x*, shape (d,).
    orders: ``{"same": permutation, "different": argsort(b)}``, each (n,); agent 0
      holds the first N_0 points of the order, agent 1 the rest.
  """

  a: Array
  b: Array
  x_star: Array
  orders: dict[str, Array]


class ToyResult(NamedTuple):
  """The curves of Fig. 3: training loss (MSE on all n points) per panel and round.

  P panels, T rounds, agents 0 and 1.

  Attributes:
    config: the :class:`ToyConfig` that produced the result.
    akd: (P, 2, T): ``akd[p, s, t]`` is the loss of AKD's round-t model started at agent s.
    avgkd: (P, 2, T): ``avgkd[p, i, t]`` is the loss of agent i's AvgKD model at round t.
    ekd: (P, T): ``ekd[p, t]`` is the loss of EKD's partial sum over rounds 0..t.
    central: (P,): the centralised model's loss.
    local: (P, 2): ``local[p, i]`` is the loss of agent i's model fitted on its own data.
    zero: (): the loss ``mean(b^2)`` of the zero model, AKD's limit (Prop. II).
  """

  config: ToyConfig
  akd: Array
  avgkd: Array
  ekd: Array
  central: Array
  local: Array
  zero: Array


def _canonical_key(key: Array | int) -> Array:
  if isinstance(key, (int, np.integer)):
    return jax.random.key(int(key))
  return key


def toy_data(key: Array | int, config: ToyConfig = ToyConfig(), dtype=None) -> ToyData:
  """Draws ``A``, ``x*`` and ``b = A x* + noise * eps`` and the two split orders.

  Args:
    key: a JAX PRNG key (an int is turned into ``jax.random.key(key)``).
    config: the experiment's parameters.
    dtype: floating dtype; default float64 if x64 is enabled, else float32.

  Returns:
    A :class:`ToyData`: ``a`` (n, d), ``b`` (n,), ``x_star`` (d,) and the orders.
  """
  if dtype is None:
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
  k_a, k_x, k_noise, k_perm = jax.random.split(_canonical_key(key), 4)
  n, d = config.num_points, config.dim
  a = jax.random.normal(k_a, (n, d), dtype)
  x_star = jax.random.normal(k_x, (d,), dtype)
  b = a @ x_star + config.noise * jax.random.normal(k_noise, (n,), dtype)
  orders = {"same": jax.random.permutation(k_perm, n), "different": jnp.argsort(b)}
  return ToyData(a, b, x_star, orders)


def toy_problem(data: ToyData, panel: ToyPanel, config: ToyConfig = ToyConfig()
                ) -> FederatedProblem:
  """The two-agent linear-kernel problem of one panel: the split ``panel.split``, ridge c."""
  n0 = config.sizes[0]
  order = np.asarray(data.orders[panel.split])
  parts = (order[:n0], order[n0:])
  return make_problem([data.a[i] for i in parts], [data.b[i] for i in parts],
                      kernels_lib.Linear(), panel.ridge, dtype=data.a.dtype)


@functools.partial(jax.jit, static_argnames=("rounds",))
def toy_curves(problem: FederatedProblem, a: Array, b: Array, rounds: int
                 ) -> dict[str, Array]:
  """The losses of one panel (one problem): every protocol evaluated on all n points.

  Pure and jitted. It can be vmapped over stacked problems of the same sizes (e.g.
  over c), but see the note in :func:`toy_experiment` on vmap and the CPU runtime.

  Args:
    problem: a two-agent problem whose pooled data is a permutation of (a, b).
    a: all n points, shape (n, d).
    b: their targets, shape (n,).
    rounds: the number of rounds T (static).

  Returns:
    ``akd`` (2, T), ``avgkd`` (2, T), ``ekd`` (T,), ``central`` (), ``local`` (2,):
    the layouts of :class:`ToyResult` without the panel axis.
  """
  akd = jnp.stack([_mse(closed_form.trajectory(problem, "akd", rounds, a,
                                                params=ProtocolParams(start=s)), b)
                   for s in range(problem.num_agents)])
  avgkd = _mse(closed_form.trajectory(problem, "avgkd", rounds, a), b).T  # (M, T)
  ekd = _mse(closed_form.trajectory(problem, "ekd", rounds, a), b)
  central = _mse(closed_form.central(problem, a)[0], b)  # one shared kernel: agent 0's
  local = _mse(closed_form.local(problem, a), b)
  return dict(akd=akd, avgkd=avgkd, ekd=ekd, central=central, local=local)


def toy_experiment(key: Array | int, config: ToyConfig = ToyConfig(), dtype=None,
                   progress: bool = False) -> ToyResult:
  """Runs the toy experiment of Fig. 3: AKD, AvgKD, EKD vs central and local training.

  The data is drawn once (:func:`toy_data`); each panel's problem splits it as
  the panel says and sets its ridge, and :func:`toy_curves` computes its curves.

  Args:
    key: a JAX PRNG key (an int is turned into ``jax.random.key(key)``).
    config: the experiment's parameters (:class:`ToyConfig`).
    dtype: floating dtype; default float64 if x64 is enabled, else float32.
    progress: a progress bar over the panels.

  Returns:
    A :class:`ToyResult` of training losses (MSE on all n points).

  Raises:
    ValueError: a field of ``config`` is invalid.

  Example:
    >>> jax.config.update("jax_enable_x64", True)   # in your entry point
    >>> result = fedkrr.paper.toy_experiment(jax.random.key(0))
    >>> bool(jnp.allclose(result.ekd[:, -1], result.central, rtol=1e-3))   # EKD reaches central
    True
  """
  config.check()
  data = toy_data(key, config, dtype)
  # One jitted call per panel (the panels share shapes, so one compilation). Not a vmap over
  # the stacked panels: under vmap the c = 0 branch of every ridge factor runs too, as a
  # batched eigh, and two batched eighs that XLA's CPU runtime runs side by side can
  # deadlock its intra-op thread pool (seen with jax 0.10.2 on a 2-core machine).
  panels = config.panels
  if progress:
    from tqdm.auto import tqdm
    panels = tqdm(panels, desc="toy panels", unit="panel")
  per_panel = [toy_curves(toy_problem(data, panel, config), data.a, data.b, config.rounds)
               for panel in panels]
  curves = {k: jnp.stack([c[k] for c in per_panel]) for k in per_panel[0]}
  return ToyResult(config=config, zero=jnp.mean(data.b ** 2), **curves)


def _first_round_within(curve: np.ndarray, target: float, rtol: float) -> int | None:
  hits = np.nonzero(np.abs(curve - target) <= rtol * abs(target))[0]
  return int(hits[0]) if hits.size else None


def toy_summary(result: ToyResult) -> list[str]:
  """One line per panel: central, local, and each protocol at round 0 and at the last round."""
  cfg = result.config
  last = cfg.rounds - 1
  lines = []
  for p, panel in enumerate(cfg.panels):
    akd, avg = np.asarray(result.akd[p]), np.asarray(result.avgkd[p])
    ekd, central = np.asarray(result.ekd[p]), float(result.central[p])
    local = np.asarray(result.local[p])
    hit = _first_round_within(ekd, central, 0.01)
    gap = (ekd[-1] - central) / central if central else ekd[-1]
    lines.append(
        f"{panel.name} ({panel.split} split, c={panel.ridge:g}): "
        f"central {central:.4g} | local {local[0]:.4g} / {local[1]:.4g} | "
        f"AKD from 0: {akd[0, 0]:.4g} -> {akd[0, -1]:.4g} (zero model {float(result.zero):.4g}) | "
        f"AvgKD round {last}: {avg[0, -1]:.4g} / {avg[1, -1]:.4g} | "
        f"EKD round {last}: {ekd[-1]:.4g} ({gap:+.2%} vs central; within 1% from round "
        f"{hit if hit is not None else 'never'})")
  return lines


CSV_FIELDS: tuple[str, ...] = ("panel", "split", "ridge", "protocol", "agent", "round", "mse")


def toy_rows(result: ToyResult) -> list[dict[str, Any]]:
  """The numbers behind the figure, one row per panel, protocol (agent) and round.

  ``protocol`` is akd (``agent`` = the starting agent), avgkd (``agent`` = the
  model's agent), ekd, central or local (``agent`` = the agent); ``round`` and
  ``agent`` are ``""`` where they do not apply. There are ``5 T + 3`` rows per panel.
  """
  rows = []
  for p, panel in enumerate(result.config.panels):
    base = dict(panel=panel.name, split=panel.split, ridge=panel.ridge)

    def add(protocol, agent, curve, base=base):
      for t, v in enumerate(np.asarray(curve).tolist()):
        rows.append(dict(base, protocol=protocol, agent=agent, round=t, mse=v))

    for s in range(2):
      add("akd", s, result.akd[p, s])
    for i in range(2):
      add("avgkd", i, result.avgkd[p, i])
    add("ekd", "", result.ekd[p])
    rows.append(dict(base, protocol="central", agent="", round="",
                     mse=float(result.central[p])))
    for i in range(2):
      rows.append(dict(base, protocol="local", agent=i, round="", mse=float(result.local[p, i])))
  return rows


def plot_toy(result: ToyResult, path: str | os.PathLike | None = None):
  """Draws the three-panel figure of Fig. 3 (training loss against rounds, log scale).

  Colours follow the paper: AKD solid red, AvgKD solid blue, EKD black, centralised
  dashed green, local-only dashed blue (agent 0) and red (agent 1). The second
  AKD run (from agent 1) and agent 1's AvgKD model are dash-dotted, in darker
  shades, with markers (triangles, squares) placed between those of the other
  lines, so that each stays visible where it runs on top of another.

  Args:
    result: a :class:`ToyResult`.
    path: where to save the figure (the format follows the extension); None: do not save.

  Returns:
    The ``matplotlib.figure.Figure`` (made without pyplot, so no backend is switched).
  """
  from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

  cfg = result.config
  rounds = np.arange(cfg.rounds)
  num = len(cfg.panels)
  fig = Figure(figsize=(4.6 * num, 4.0))
  axes = fig.subplots(1, num, sharey=True, squeeze=False)
  for p, (ax, panel) in enumerate(zip(axes[0], cfg.panels)):
    every = (max(cfg.rounds // 10, 1) // 2, max(cfg.rounds // 10, 1))
    ax.plot(rounds, result.akd[p, 0], color="tab:red", lw=1.8, label="AKD from agent 0")
    ax.plot(rounds, result.akd[p, 1], color="darkred", lw=1.3, ls="-.", marker="^",
            markersize=4, markevery=every, label="AKD from agent 1")
    ax.plot(rounds, result.avgkd[p, 0], color="tab:blue", lw=1.8, label="AvgKD agent 0")
    ax.plot(rounds, result.avgkd[p, 1], color="navy", lw=1.3, ls="-.", marker="s",
            markersize=3.5, markevery=(0, every[1]), label="AvgKD agent 1")
    ax.plot(rounds, result.ekd[p], color="black", lw=1.8, label="EKD")
    ax.axhline(float(result.central[p]), color="tab:green", ls="--", lw=1.4, label="centralised")
    ax.axhline(float(result.local[p, 0]), color="tab:blue", ls="--", lw=1.0, label="local agent 0")
    ax.axhline(float(result.local[p, 1]), color="tab:red", ls="--", lw=1.0, label="local agent 1")
    ax.axhline(float(result.zero), color="gray", ls=":", lw=1.0, label="zero model (AKD limit)")
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_title(f"{panel.name} (c = {panel.ridge:g})")
  axes[0, 0].set_ylabel("training loss (MSE on all points)")
  handles, labels = axes[0, 0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
  fig.tight_layout(rect=(0, 0.12, 1, 1))
  if path is not None:
    atomic_savefig(fig, path, dpi=120)
  return fig


def write_toy(result: ToyResult, out_dir: str | os.PathLike, seed: int | None = None
              ) -> dict[str, str]:
  """Writes toy.png, toy.pdf (the figure), toy.csv (:func:`toy_rows`) and toy_config.json.

  The four files are written as one set (``fedkrr.io.write_files``): all of them or,
  on an error such as a full disk, none (the previous files stay).

  Args:
    result: a :class:`ToyResult`.
    out_dir: the output directory (created if missing).
    seed: the seed of the run, recorded in toy_config.json (``None``: not recorded).

  Returns:
    The paths written, keyed by ``png``, ``pdf``, ``csv`` and ``config``.

  Raises:
    WriteError: a file could not be written (named); none of the four was.
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {kind: os.path.join(out_dir, name) for kind, name in
           [("png", "toy.png"), ("pdf", "toy.pdf"), ("csv", "toy.csv"),
            ("config", "toy_config.json")]}
  table = io.StringIO(newline="")
  writer = csv.DictWriter(table, fieldnames=CSV_FIELDS)
  writer.writeheader()
  writer.writerows(toy_rows(result))
  fig = plot_toy(result)   # everything is computed before the first file is replaced
  config = result.config.to_dict() if seed is None else {"seed": int(seed),
                                                          **result.config.to_dict()}
  write_files({paths["csv"]: table.getvalue(),
               paths["config"]: json.dumps(config, indent=2),
               paths["png"]: figure_bytes(fig, paths["png"], dpi=120),
               paths["pdf"]: figure_bytes(fig, paths["pdf"], dpi=120)})
  return paths
