"""D-Distillation (Bistritz, Mann & Bambos, 2020) and its baselines D-SGD and Silo-SGD.

N devices on a strongly connected graph hold private labelled data and a public,
unlabelled reference set D_r (Q points). Device n keeps its parameters theta^n and
network soft-decisions z^n(x) in the simplex for every x in D_r. At iteration t all
devices draw the *same* reference batch S^r_t (b points) and their own private
batch S^p_t, and (Algorithm 1, eq. 5 and 6), with one step size eta_t:

  theta^n <- theta^n - eta_t grad J^n(theta^n),
  J^n(theta) = (M_n / |S^p|) sum_{S^p} L(s(theta, x), y)
               + beta Q / (N b) sum_{x in S^r} ||s(theta, x) - z^n(x)||^2   (z held fixed)
  z^n(x) <- sum_m W[m, n] z^m(x) - 2 beta eta_t (z^n(x) - s(theta^n, x)),  x in S^r

where s = softmax(logits) and both updates use time-t quantities. Only the
soft-decisions z^n(x), x in S^r, travel: b * K numbers to each out-neighbour per
iteration. ``grad J`` equals the explicit form of eq. 5, since
grad_theta ||s - z||^2 = 2 (d s / d theta)^T (s - z).

Baselines (Sec. 6): D-SGD gossips the parameters over the same graph and W,
``theta^n <- sum_m W[m, n] theta^m - eta_t (M_n/|S^p|) sum grad L`` (combine then
adapt, from a common initialisation), sending the P parameters to each
out-neighbour per iteration; Silo-SGD takes the private SGD step alone (D-SGD
with W = I).

Step sizes (Theorem 3): eta_t = eta0 (t0 / (t + t0))^a with a in (1/2, 1] gives
sum eta_t = inf, sum eta_t^2 < inf and eta_{t+1}/eta_t -> 1. z stays in the
simplex when 2 beta eta_t <= min_n W[n, n] (then eq. 6 is a convex combination);
the paper only argues the sums (see :func:`check_z_step`).

One *round* of :func:`run_method` is ``steps_per_round`` iterations, then every
device is evaluated on the test set (the paper plots mean device accuracy).

Devices may have different architectures (Fig. 3: LeNet-5 and ResNets on CIFAR-10;
``DDistConfig.models``). They are grouped by architecture
(:func:`architecture_groups`): each group's devices are stacked and vmapped over
their own model, while z, eq. 6 and the communication act on all devices. D-SGD
cannot average different architectures, so with mixed models it runs "on each
subset of devices separately" (Sec. 6): one D-SGD per group, on a graph of the
config's kind among that group's devices (its W is block diagonal).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any
from typing import NamedTuple
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from neural._src.choices import LOSSES
from neural._src.datasets import graphs
from neural._src.datasets.run_data import load_train_test
from neural._src.datasets.run_data import split_agents
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import test_scores
from neural._src.models.models import MODELS
from neural._src.models.models import get_model
from neural._src.training.optimizers import OptimizerConfig
from neural._src.training.optimizers import make_optimizer
from neural._src.training.train_loop import Loop
from neural._src.training.train_loop import Schedule
from neural._src.training.train_loop import train_loop
from neural._src.training.training import init_variables
from neural._src.training.training import per_example_loss

METHODS = ("d-distillation", "d-sgd", "silo-sgd")
Z_INITS = ("uniform", "model")


class DDistError(ValueError):
  """Invalid D-Distillation setting; the message names the argument and what was expected."""


# ---------------------------------------------------------------------------
# Step sizes (Theorem 3, assumption on eta_t)


def check_step_size(eta0: float, power: float, t0: float) -> None:
  """Checks that ``eta_t = eta0 (t0 / (t + t0))^power`` meets Theorem 3's conditions.

  sum_t eta_t = inf needs power <= 1, sum_t eta_t^2 < inf needs power > 1/2, and
  eta_{t+1}/eta_t = ((t + t0)/(t + 1 + t0))^power -> 1 always exists.

  Raises:
    DDistError: eta0 <= 0, t0 <= 0, or power outside (1/2, 1].
  """
  if not eta0 > 0:
    raise DDistError(f"eta0: expected a step size > 0, got {eta0!r}")
  if not t0 > 0:
    raise DDistError(f"eta_t0: expected a time offset > 0, got {t0!r}")
  if not 0.5 < power <= 1.0:
    raise DDistError(f"eta_power: expected a in (1/2, 1] so that sum eta_t = inf and "
                     f"sum eta_t^2 < inf (Theorem 3), got {power!r}")


def polynomial_step_size(eta0: float, power: float, t0: float) -> Callable[[Any], Any]:
  """``t -> eta0 (t0 / (t + t0))^power`` (eta at t = 0 is eta0), checked for Theorem 3.

  Works on Python numbers and traced JAX scalars (t counts iterations from 0).

  Raises:
    DDistError: see :func:`check_step_size`.
  """
  check_step_size(eta0, power, t0)

  def eta(t):
    return eta0 * (t0 / (t + t0)) ** power

  return eta


def check_z_step(beta: float, eta0: float, weights) -> None:
  """Checks ``2 beta eta_t <= min_n W[n, n]`` for all t (eta_t <= eta0).

  Then eq. 6 writes z^n_{t+1} as a convex combination of the z^m_t and s_n, so
  z stays a probability vector (nonnegative as well as summing to 1).

  Raises:
    DDistError: the condition fails, with the largest admissible eta0.

  ``weights`` may be a stack (B, N, N) of the rounds' matrices of a time-varying graph.
  """
  w_min = float(np.min(np.diagonal(np.asarray(weights), axis1=-2, axis2=-1)))
  if 2.0 * beta * eta0 > w_min + 1e-12:
    raise DDistError(f"eta0: expected 2 * beta * eta0 <= min_n W[n, n] = {w_min:.4g} so that z "
                     f"stays in the simplex, got 2 * {beta:g} * {eta0:g}; use eta0 <= "
                     f"{w_min / (2 * beta):.4g} or a smaller distill_beta")


# ---------------------------------------------------------------------------
# The pure pieces of Algorithm 1


def distillation_regulariser(s, z):
  """``sum_{x in S^r} ||s(x) - z(x)||^2`` for one device; s, z of shape (b, K)."""
  return jnp.sum((s - z) ** 2)


def z_update(z, s, weights, beta, eta):
  """Eq. 6 on the shared reference batch, all devices at once.

  ``z'^n(x) = sum_m W[m, n] z^m(x) - 2 beta eta (z^n(x) - s^n(x))``.

  Args:
    z: (N, b, K) network soft-decisions at time t.
    s: (N, b, K) soft-decisions s(theta^n_t, x) at time t.
    weights: (N, N) doubly stochastic W (``W[m, n]``: n's weight on m's message).
    beta: the coupling beta (a scalar).
    eta: the step size eta_t (a scalar).

  Returns:
    (N, b, K) z at time t + 1.
  """
  mixed = jnp.einsum("mn,mbk->nbk", weights, z)
  return mixed - 2.0 * beta * eta * (z - s)


def consensus_error(z):
  """``mean_x sum_n ||z^n(x) - zbar(x)||^2`` (Lemma 4's quantity per reference point)."""
  dev = z - z.mean(axis=0, keepdims=True)     # NumPy or JAX arrays alike
  return (dev ** 2).sum(axis=(0, 2)).mean()


def gossip(weights, tree):
  """``theta^n <- sum_m W[m, n] theta^m`` for every leaf (N, ...) of a stacked PyTree."""
  return jax.tree.map(lambda a: jnp.einsum("mn,m...->n...", weights.astype(a.dtype), a), tree)


def num_params(params) -> int:
  """Number of scalars in one device's parameters (stacked leaves: per device)."""
  return int(sum(np.prod(np.shape(leaf)[1:]) for leaf in jax.tree.leaves(params)))


def architecture_groups(models) -> tuple[tuple[str, tuple[int, ...]], ...]:
  """The devices grouped by architecture: ``((name, devices), ...)`` in order of first use.

  Example:
    >>> architecture_groups(("lenet5", "resnet8", "lenet5"))
    (('lenet5', (0, 2)), ('resnet8', (1,)))
  """
  groups: dict[str, list[int]] = {}
  for n, name in enumerate(models):
    groups.setdefault(name, []).append(n)
  return tuple((name, tuple(devices)) for name, devices in groups.items())


def comm_floats(method: str, out_degrees, *, network_batch_size: int, num_classes: int,
                params_per_device: int, steps: int = 1) -> np.ndarray:
  """(N,) numbers each device sends in ``steps`` iterations.

  d-distillation: b * K per out-neighbour per iteration (the z^n(x), x in S^r; no
  indices, S^r is common). d-sgd: P per out-neighbour per iteration. silo-sgd: 0.
  """
  out_degrees = np.asarray(out_degrees, dtype=np.int64)
  per_link = {"d-distillation": network_batch_size * num_classes, "d-sgd": params_per_device,
              "silo-sgd": 0}
  if method not in per_link:
    raise DDistError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
  return steps * per_link[method] * out_degrees


# ---------------------------------------------------------------------------
# Config, data, state


@dataclasses.dataclass(frozen=True)
class DDistConfig(MethodConfig):
  """D-Distillation / D-SGD / Silo-SGD on a communication graph (one config, three methods).

  Attributes (beyond :class:`MethodConfig`):
    model: the devices' architecture (a ``neural.get_model`` name).
    width: width setting of that architecture (``None``: the model's default).
    tiny: tiny variants of the networks (tests, quick runs).
    models: ``None`` (every device has ``model``), one architecture for all, or one
      per device (length ``agents``; Fig. 3's mixes), each with ``width`` and ``tiny``
      (as ``ExperimentConfig.models``).
    loss: the private loss L, "ce" or "mse" (the paper does not name it).
    graph: the communication graph (``neural.data.make_graph``: "ring", "complete",
      "random" with maximum degree ``graph_degree`` as in the paper's Fig. 2, or
      "directed-ring"), seeded by ``data_seed``; W is its Metropolis matrix (uniform
      1/(d+1) for the directed ring).
    graph_degree: d, the maximum degree of the "random" graph.
    graph_window: B = 1 keeps the graph fixed; B > 1 makes it time-varying
      (:func:`neural.data.edge_schedule`): its edges are dealt into B parts and round t
      uses part ``t mod B`` with that part's Metropolis W_t, so only the union over
      B rounds is connected (undirected graphs; not in the paper's experiments).
    reference_fraction: share of the training data taken (labels dropped) as the
      public reference set D_r (0.4 in Fig. 2); the rest is split among devices.
    steps_per_round: iterations t per round (per evaluation and checkpoint).
    batch_size: private mini-batch |S^p|.
    network_batch_size: b = |S^r|.
    distill_beta: beta (coupling of eq. 5 and 6; ``beta`` is the Dirichlet field).
    eta0: eta_0, the first step size of eta_t = eta0 (eta_t0 / (t + eta_t0))^eta_power.
    eta_power: a, the power of the step-size decay, in (1/2, 1] (Theorem 3).
    eta_t0: t_0, the time offset of the step-size decay (> 0).
    z_init: "uniform" (1/K) or "model" (each device's initial s(theta_0, x)).
    z_step_scale: c >= 1 multiplying the z step of eq. 6, ``2 beta c eta_t``; 1 is
      the paper. Not in the paper: with its one eta_t the theta step carries M_n
      (eq. 5) and a z(x) is touched once per Q/b iterations, so at MNIST scale z
      barely moves; c > 1 keeps the fixed point z = mean_n s^n (see the docs).
  """

  method: str = "d-distillation"
  model: str = "mlp"
  models: tuple[str, ...] | None = None
  width: int | None = None
  tiny: bool = False
  loss: str = "ce"
  graph: str = "random"
  graph_degree: int = 3
  graph_window: int = 1
  reference_fraction: float = 0.4
  steps_per_round: int = 50
  batch_size: int = 32
  network_batch_size: int = 32
  distill_beta: float = 5.0
  eta0: float = 0.01
  eta_power: float = 0.6
  eta_t0: float = 100.0
  z_init: str = "uniform"
  z_step_scale: float = 1.0

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    self.need(self.method in METHODS, "method", f"one of {', '.join(METHODS)}")
    self.need(self.model in MODELS, "model", f"one of {', '.join(MODELS)}")
    self.need(self.models is None or (len(self.models) in (1, self.agents) and
                                      all(m in MODELS for m in self.models)), "models",
              f"None, one architecture for all or one per device (1 or {self.agents} names, "
              f"each one of {', '.join(MODELS)})")
    self.need(self.graph_window == 1 or self.method != "d-sgd" or len(self.groups) == 1,
              "graph_window", "1 for D-SGD with mixed models (one graph per group)")
    self.need(self.width is None or self.width >= 1, "width", "None or an integer >= 1")
    self.need(self.loss in LOSSES, "loss", f"one of {', '.join(LOSSES)}")
    self.need(self.graph in graphs.GRAPHS, "graph", f"one of {', '.join(graphs.GRAPHS)}")
    self.need(self.graph_degree >= 1, "graph_degree", "an integer >= 1")
    self.need(self.graph_window >= 1, "graph_window", "an integer >= 1 (1: a fixed graph)")
    self.need(self.graph_window == 1 or self.graph != "directed-ring", "graph_window",
              "1 for the directed ring (a time-varying graph splits undirected edges)")
    self.need(0 < self.reference_fraction < 1, "reference_fraction", "a fraction in (0, 1)")
    self.need(self.steps_per_round >= 1, "steps_per_round", "an integer >= 1")
    self.need(self.batch_size >= 1, "batch_size", "an integer >= 1")
    self.need(self.network_batch_size >= 1, "network_batch_size", "an integer >= 1")
    self.need(self.distill_beta > 0, "distill_beta", "a coupling > 0")
    self.need(self.z_step_scale >= 1, "z_step_scale", "a factor >= 1 (1: the paper)")
    self.need(self.z_init in Z_INITS, "z_init", f"one of {', '.join(Z_INITS)}")
    self.need(self.eta0 > 0, "eta0", "a step size > 0")
    self.need(self.eta_t0 > 0, "eta_t0", "a time offset > 0")
    self.need(0.5 < self.eta_power <= 1, "eta_power",
              "a in (1/2, 1] (sum eta_t = inf, sum eta_t^2 < inf; Theorem 3)")

  @property
  def device_models(self) -> tuple[str, ...]:
    """The architecture of each device (length ``agents``)."""
    if self.models is None:
      return (self.model,) * self.agents
    return self.models * self.agents if len(self.models) == 1 else self.models

  @property
  def groups(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """:func:`architecture_groups` of :attr:`device_models`."""
    return architecture_groups(self.device_models)


class DDistData(NamedTuple):
  """Stacked device data, the reference set and the graph.

  Attributes:
    xs: (N, M_max, H, W, C) private inputs, zero-padded past ``sizes``.
    labels: (N, M_max) int labels (0 in the padding).
    sizes: (N,) M_n.
    x_ref: (Q, H, W, C) the public reference inputs (no labels).
    x_test, y_test: the test set.
    num_classes: K.
    adjacency: (B, N, N) booleans of each round's graph; weights: (B, N, N) float32
      W_t (B = ``graph_window``; round t uses index ``t mod B``).
  """

  xs: np.ndarray
  labels: np.ndarray
  sizes: np.ndarray
  x_ref: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  adjacency: np.ndarray
  weights: np.ndarray


class DDistState(NamedTuple):
  """``params``: stacked per-device variables (mixed models: a tuple, one stack per
  architecture group of :func:`architecture_groups`); ``z``: (N, Q, K) or None, in device
  order; ``comm``: (N,) totals; ``opt_state``: the SGD states, stacked like ``params``
  (their step count drives eta_t)."""

  params: Any
  z: Any
  comm: np.ndarray
  opt_state: Any = None


def make_graph_and_weights(config: DDistConfig) -> tuple[np.ndarray, np.ndarray]:
  """Each round's adjacency and checked mixing matrix, stacked (B, N, N) for B = graph_window.

  The graph is seeded by ``[data_seed, 3]``; with ``graph_window`` > 1 its edges are dealt
  into B parts (:func:`neural.data.edge_schedule`) by the same generator. D-SGD with mixed
  models gets one graph per architecture group (B = 1), seeded ``[data_seed, 3, g]``,
  so its adjacency and W are block diagonal (a group of one device keeps W = 1).
  """
  if config.method == "d-sgd" and len(config.groups) > 1:
    adjacency = np.zeros((config.agents, config.agents), bool)
    weights = np.zeros((config.agents, config.agents))
    for g, (_, devices) in enumerate(config.groups):
      block = np.ix_(devices, devices)
      if len(devices) == 1:
        weights[block] = 1.0
        continue
      graph = graphs.make_graph(config.graph, len(devices), degree=config.graph_degree,
                                rng=np.random.default_rng([config.data_seed, 3, g]))
      adjacency[block], weights[block] = graph.adjacency, graphs.mixing_matrix(graph)
    return adjacency[None], weights[None]
  rng = np.random.default_rng([config.data_seed, 3])
  graph = graphs.make_graph(config.graph, config.agents, degree=config.graph_degree, rng=rng)
  if config.graph_window == 1:
    return graph.adjacency[None], graphs.mixing_matrix(graph)[None]
  schedule = graphs.edge_schedule(graph, config.graph_window, rng)
  rounds = range(config.graph_window)
  return (np.stack([schedule.at(t).adjacency for t in rounds]),
          np.stack([schedule.mixing_matrix(t) for t in rounds]))


def load_data(config: DDistConfig) -> DDistData:
  """Reference/private split (a random ``reference_fraction`` of the training set), the
  private part split among devices by the config's partition, and the graph.

  Raises:
    DDistError: the step-size condition of :func:`check_z_step` fails for W.
  """
  rng = np.random.default_rng(config.data_seed)
  x_train, y_train, x_test, y_test, num_classes = load_train_test(config, rng)
  order = rng.permutation(len(y_train))
  q = int(round(config.reference_fraction * len(y_train)))
  if q < 1 or len(y_train) - q < config.agents:
    raise DDistError(f"reference_fraction: leaves {q} reference and {len(y_train) - q} private "
                     f"points for {config.agents} devices; use more data")
  if config.network_batch_size > q:
    raise DDistError(f"network_batch_size: expected at most the {q} reference points "
                     f"(b = |S^r| is drawn without replacement), got {config.network_batch_size}")
  ref, private = order[:q], np.sort(order[q:])
  xs, _, labels = split_agents(config, x_train[private], y_train[private], num_classes, rng)
  sizes = np.array([len(lab) for lab in labels], dtype=np.int64)
  m = int(sizes.max())
  x_pad = np.zeros((config.agents, m, *xs[0].shape[1:]), np.float32)
  y_pad = np.zeros((config.agents, m), np.int32)
  for a, (x, lab) in enumerate(zip(xs, labels)):
    x_pad[a, :len(lab)] = x
    y_pad[a, :len(lab)] = lab
  adjacency, weights = make_graph_and_weights(config)
  if config.method == "d-distillation":
    check_z_step(config.distill_beta, config.eta0 * config.z_step_scale, weights)
  return DDistData(x_pad, y_pad, sizes, np.asarray(x_train[ref], np.float32), x_test,
                   np.asarray(y_test), num_classes, adjacency, weights.astype(np.float32))


def _model(config: DDistConfig, num_classes: int, name: str | None = None):
  return get_model(config.model if name is None else name, num_classes, width=config.width,
                   tiny=config.tiny)


def _to_numpy(tree: Any) -> Any:
  return jax.tree.map(np.asarray, jax.device_get(tree))


@functools.lru_cache(maxsize=16)
def _init_fn(model, input_shape: tuple[int, ...]):
  return jax.jit(jax.vmap(lambda k: init_variables(model, k, input_shape)))


@functools.lru_cache(maxsize=16)
def _proba_fn(model):
  return jax.jit(jax.vmap(lambda p, x: jax.nn.softmax(model.apply(p, x)), in_axes=(0, None)))


def _in_device_order(parts, groups):
  """Stacks per-group arrays (leading axis: the group's devices) back in device order."""
  order = np.argsort(np.concatenate([devices for _, devices in groups]))
  return jnp.concatenate(parts)[order]


def init(config: DDistConfig, data: DDistData) -> DDistState:
  """Per-device initial variables (one common init for D-SGD, per architecture group) and
  z_0 in the simplex. With mixed models ``params`` is a tuple, one stack per group."""
  keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(config.init_seed), 10**6),
                          config.agents)
  groups = config.groups
  if config.method == "d-sgd":   # a common initialisation within each group
    for _, devices in groups:
      keys = keys.at[np.asarray(devices)].set(keys[devices[0]])
  models = [_model(config, data.num_classes, name) for name, _ in groups]
  params = tuple(_init_fn(model, tuple(data.xs.shape[2:]))(keys[np.asarray(devices)])
                 for model, (_, devices) in zip(models, groups))
  z = None
  if config.method == "d-distillation":
    q, k = data.x_ref.shape[0], data.num_classes
    if config.z_init == "uniform":
      z = jnp.full((config.agents, q, k), 1.0 / k, jnp.float32)
    elif len(groups) == 1:   # unjitted, as before mixed models (the same numbers)
      z = jax.vmap(lambda p: jax.nn.softmax(cast(jax.Array, models[0].apply(p, data.x_ref))))(
          params[0])
    else:
      x_ref = jnp.asarray(data.x_ref)
      z = _in_device_order([_proba_fn(model)(p, x_ref) for model, p in zip(models, params)],
                           groups)
  if len(groups) == 1:   # one architecture: the stack itself
    params = params[0]
  opt_state = jax.vmap(make_optimizer(_step_size(config)).init)(params) if len(groups) == 1 \
      else tuple(jax.vmap(make_optimizer(_step_size(config)).init)(p) for p in params)
  return DDistState(_to_numpy(params), _to_numpy(z), np.zeros(config.agents, np.int64),
                    _to_numpy(opt_state))


# ---------------------------------------------------------------------------
# One round: ``steps_per_round`` iterations of ``neural.training.train_loop``


def _reference_batch(shared_key, q: int, b: int):
  """The common reference batch S^r_t: b of the Q reference points, without replacement."""
  return jax.random.choice(shared_key, q, (b,), replace=False)


def _step_size(config: DDistConfig) -> OptimizerConfig:
  """Plain SGD (eq. 5: theta <- theta - eta_t grad), eta_t = eta0 (t0 / (t + t0))^a (Theorem 3)."""
  return OptimizerConfig("sgd", config.eta0, schedule="polynomial", power=config.eta_power,
                         t0=config.eta_t0)


@dataclasses.dataclass(frozen=True)
class _DeviceLoss:
  """J^n of eq. 5 for one device (``batch.context``: its size M_n and soft-decisions z^n).

  ``(M_n / |S^p|) sum_{S^p} L(s(theta, x), y)`` plus, for D-Distillation,
  ``beta Q / (N b) sum_{x in S^r} ||s(theta, x) - z^n(x)||^2`` on the step's common
  reference batch (then the aux output is s on S^r, for eq. 6).
  """

  model: Any
  distills: bool
  loss: str
  network_batch_size: int
  beta: float

  def __call__(self, params, batch):
    logits = self.model.apply(params, batch.data["x"])
    targets = jax.nn.one_hot(batch.data["y"], logits.shape[-1], dtype=jnp.float32)
    size = batch.context["size"]
    private = size / logits.shape[0] * jnp.sum(per_example_loss(logits, targets, self.loss))
    if not self.distills:
      return private
    x_ref = batch.shared["x_ref"]
    q, num_devices = x_ref.shape[0], batch.shared["weights"].shape[0]
    ref = _reference_batch(batch.shared_key, q, self.network_batch_size)
    s = jax.nn.softmax(self.model.apply(params, x_ref[ref]))
    scale = self.beta * q / (num_devices * self.network_batch_size)
    return private + scale * distillation_regulariser(s, batch.context["z"][ref]), s


@dataclasses.dataclass(frozen=True)
class _Gossip:
  """The communication of every iteration (``neural.training.train_loop``'s communicate step).

  D-Distillation: eq. 6 on the common reference batch, with the step's eta_t.
  D-SGD (and Silo-SGD, W = I): combine then adapt,
  ``theta^n <- sum_m W[m, n] theta^m_t - eta_t grad`` = ``W theta_t + (theta_sgd - theta_t)``;
  with architecture ``groups`` (params a tuple of stacks) each group gossips with its
  block of the (block diagonal) W.
  """

  distills: bool
  network_batch_size: int
  beta: float
  z_step_scale: float
  step_size: OptimizerConfig
  groups: tuple[tuple[int, ...], ...] | None = None

  def __call__(self, ex):
    weights = ex.shared["weights"]
    if not self.distills:
      if self.groups is None:
        mixed = gossip(weights, ex.params_before)
      else:
        mixed = tuple(gossip(weights[np.asarray(d)][:, np.asarray(d)], p)
                      for d, p in zip(self.groups, ex.params_before))
      return jax.tree.map(lambda m, new, old: m + (new - old), mixed, ex.params,
                          ex.params_before), ex.context
    schedule = cast(Callable[..., Any], self.step_size.learning_rate_at())  # polynomial schedule
    eta = schedule(ex.step)
    ref = _reference_batch(ex.shared_key, ex.shared["x_ref"].shape[0], self.network_batch_size)
    z = ex.context["z"]
    z = z.at[:, ref].set(z_update(z[:, ref], ex.aux, weights, self.beta,
                                  self.z_step_scale * eta))
    return ex.params, {**ex.context, "z": z}


def step(config: DDistConfig, data: DDistData, state: DDistState, t: int
               ) -> tuple[DDistState, list[dict[str, Any]]]:
  """Round t: ``steps_per_round`` iterations of the method, then per-device test scores.

  Iteration keys come from ``round_rng(init_seed, t)`` (shared reference batch, per-device
  private batches), so a resumed run repeats the same numbers.
  """
  groups = config.groups
  models = [_model(config, data.num_classes, name) for name, _ in groups]
  grouped = len(groups) > 1
  distills = config.method == "d-distillation"
  this_round = t % data.weights.shape[0]   # the graph of round t (time-varying if B > 1)
  weights = np.eye(config.agents, dtype=np.float32) if config.method == "silo-sgd" \
      else data.weights[this_round]
  context = {"size": jnp.asarray(data.sizes, jnp.float32)}
  if distills:
    context["z"] = jnp.asarray(state.z)
  key = round_rng(config.init_seed, t)
  mask = np.arange(data.xs.shape[1])[None, :] < data.sizes[:, None]
  losses = tuple(_DeviceLoss(model, distills, config.loss, config.network_batch_size,
                             config.distill_beta) for model in models)
  out = train_loop(
      losses if grouped else losses[0], state.params, {"x": data.xs, "y": data.labels},
      optimizer=_step_size(config),
      key=jax.random.split(key, config.agents), shared_key=jax.random.fold_in(key, config.agents),
      schedule=Schedule(config.batch_size, steps=config.steps_per_round,
                        first_step=t * config.steps_per_round),
      mask=mask, context=context,
      shared={"x_ref": jnp.asarray(data.x_ref), "weights": jnp.asarray(weights)},
      opt_state=state.opt_state, stacked=True, has_aux=distills,
      communicate=_Gossip(distills, config.network_batch_size, config.distill_beta,
                          config.z_step_scale, _step_size(config),
                          tuple(d for _, d in groups) if grouped else None),
      loop=Loop(config.step_loop, config.agent_batching),
      groups=tuple(d for _, d in groups) if grouped else None)
  params, opt_state = out.params, out.opt_state
  z = out.context["z"] if distills else None
  group_params = params if grouped else (params,)
  x_test = jnp.asarray(data.x_test)
  probs = np.asarray(_in_device_order(
      [_proba_fn(model)(p, x_test) for model, p in zip(models, group_params)], groups))
  out_degrees = data.adjacency[this_round].sum(axis=1)
  sent = np.zeros(config.agents, np.int64)
  for (_, devices), p in zip(groups, group_params):
    sent[list(devices)] = comm_floats(
        config.method, out_degrees[list(devices)], network_batch_size=config.network_batch_size,
        num_classes=data.num_classes, params_per_device=num_params(p),
        steps=config.steps_per_round)
  comm = state.comm + sent
  eta_end = float(polynomial_step_size(config.eta0, config.eta_power, config.eta_t0)(
      (t + 1) * config.steps_per_round - 1))
  extra = {"eta": eta_end}
  if z is not None:
    extra["consensus_error"] = float(consensus_error(z))
  rows = []
  names = config.device_models
  for a in range(config.agents):
    rows.append({"agent": a, "model": names[a], **test_scores(probs[a], data.y_test),
                 "comm_floats": int(sent[a]), "comm_floats_total": int(comm[a]), **extra})
  mean = {key: float(np.mean([r[key] for r in rows]))
          for key in ("test_accuracy", "test_loss", "comm_floats", "comm_floats_total")}
  rows.append({"agent": "mean", "model": config.model if not grouped else "+".join(
      name for name, _ in groups), **mean, **extra})
  return DDistState(_to_numpy(params), _to_numpy(z), comm, _to_numpy(opt_state)), rows


_DESCRIPTIONS = {
    "d-distillation": "D-Distillation (Bistritz et al., 2020): soft decisions on a shared "
                      "reference batch, gossiped over a graph (Alg. 1)",
    "d-sgd": "D-SGD: parameter gossip over the same graph and W (baseline of Bistritz et al.)",
    "silo-sgd": "Silo-SGD: private SGD, no communication (baseline of Bistritz et al.)",
}

for _name in METHODS:
  register_method(Method(_name, DDistConfig, init, step, load_data,
                         _DESCRIPTIONS[_name]))
