"""Random federated problems for ``fedkrr search``: what a statement allows, drawn and traced.

An instance splits into a :class:`Family` (everything static under ``jit``: the
agents' sizes, the input dimension, the kernel classes with their integer
settings, whether c = 0 and whether the agents share data) and its parameters,
a PyTree of float arrays that the search draws in batches, vmaps over and
moves by gradient ascent:

* ``xs``, ``ys``: the agents' inputs and labels (one array for all agents
  when they hold the same data), and ``x_eval``;
* ``log_k``: the logarithms of each kernel's positive hyper-parameters
  (bandwidths, offsets, variances), one tuple per distinct kernel;
* ``log_ridge``: the logarithm of c (ignored when the family has c = 0).

A :class:`Space` says what a statement allows: how many agents, which
kernels (one shared kernel, or any kernel per agent), c > 0 or c = 0, the data
layout, and whether the Gram matrices must be well conditioned (statements
that assume ``K > 0``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import kernels as kernels_lib
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
Params = dict[str, Any]

KINDS = ("linear", "polynomial", "rbf", "laplace", "relu_nngp", "relu_ntk")
DIMS = (1, 2, 3, 5, 10, 20)
RIDGE_MIN = 1e-6       # the smallest c > 0 searched
MIN_CONDITION = 1e-6   # smallest eigenvalue / largest of a Gram matrix that counts as K > 0
ZERO_BELOW = 1e-12     # with c = 0, eigenvalue ratios below this are zeros (the pseudo-inverse
                       # drops them); ratios between this and MIN_CONDITION are too close to
                       # call, and such instances are skipped


@dataclasses.dataclass(frozen=True)
class Space:
  """What a statement allows: the search draws instances from it.

  Attributes:
    agents: the least and the most number of agents M.
    kernels: ``"any"`` (each agent its own kernel from ``kinds``) or
      ``"shared"`` (one kernel for all agents).
    kinds: the kernel catalogue to draw from (names of ``fedkrr.kernel_from_dict``).
    ridge: ``"positive"`` (c log-uniform in [1e-6, 1], and kept there by the
      ascent) or ``"zero"``.
    data: ``"clusters"`` (each agent a Gaussian cluster, from one shared
      cluster to far-apart ones), ``"duplicate"`` (every agent holds the same
      data: self-distillation) or ``"subspaces"`` (each agent fewer points than
      dimensions, together more: for linear kernels, row spaces that intersect).
    well_conditioned: keep only instances whose Gram matrices (each kernel on
      all the points) have eigenvalue ratio at least ``MIN_CONDITION``: the
      statements that assume ``K > 0``.
    max_points: the most points per agent.
  """

  agents: tuple[int, int] = (2, 2)
  kernels: str = "any"
  kinds: tuple[str, ...] = KINDS
  ridge: str = "positive"
  data: str = "clusters"
  well_conditioned: bool = False
  max_points: int = 8

  def describe(self) -> dict[str, Any]:
    """The space as a JSON-ready dict (the search's output records it)."""
    out = dataclasses.asdict(self)
    out["dims"] = list(DIMS)
    out["ridges"] = "0" if self.ridge == "zero" else "log-uniform in [1e-6, 1]"
    return out


@dataclasses.dataclass(frozen=True)
class Family:
  """The static part of an instance: the same family compiles once.

  Attributes:
    sizes: each agent's number of points.
    dim: the input dimension.
    kernels: per distinct kernel, ``(name, static settings)`` (one entry
      when the kernel is shared, else one per agent).
    zero_ridge: c = 0.
    duplicate: every agent holds the same data (``sizes`` are all equal).
    num_eval: the number of evaluation points.
  """

  sizes: tuple[int, ...]
  dim: int
  kernels: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
  zero_ridge: bool
  duplicate: bool = False
  num_eval: int = 4

  @property
  def num_agents(self) -> int:
    """The number of agents M."""
    return len(self.sizes)

  @property
  def shared(self) -> bool:
    """Whether all agents share one kernel."""
    return len(self.kernels) == 1 and self.num_agents > 1

  def kernel_objects(self, log_k) -> tuple[Any, ...]:
    """The agents' kernels with hyper-parameters ``exp(log_k)`` (traceable)."""
    made = []
    for (name, static), logs in zip(self.kernels, log_k):
      cls = kernels_lib.BUILTIN_KERNELS[name]
      floats = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("static")]
      made.append(cls(**dict(static), **{n: jnp.exp(v) for n, v in zip(floats, logs)}))
    return tuple(made) * self.num_agents if self.shared else tuple(made)

  def problem(self, params: Params) -> FederatedProblem:
    """The instance's problem (unvalidated, traceable: build it inside jit and vmap)."""
    xs, ys = tuple(params["xs"]), tuple(params["ys"])
    if self.duplicate:
      xs, ys = xs * self.num_agents, ys * self.num_agents
    # the ascent may push c out of the space: it is clipped to [RIDGE_MIN, 1]
    ridge = (jnp.zeros_like(params["log_ridge"]) if self.zero_ridge
             else jnp.exp(jnp.clip(params["log_ridge"], math.log(RIDGE_MIN), 0.0)))
    return FederatedProblem(xs, ys, self.kernel_objects(params["log_k"]), ridge)


def _draw_kernel(name: str, dim: int, rng: np.random.Generator):
  """A kernel of the catalogue with hyper-parameters over decades, scaled to ``dim``."""
  u = lambda lo, hi: 10.0 ** rng.uniform(lo, hi)  # noqa: E731
  if name == "linear":
    return (), ()
  if name == "polynomial":
    return (("degree", int(rng.integers(1, 4))),), (u(-1, 1) / dim, u(-2, 1))
  if name == "rbf":
    return (), (u(-2, 1.5) / dim,)
  if name == "laplace":
    return (), (u(-2, 1) / math.sqrt(dim),)
  if name in ("relu_nngp", "relu_ntk"):
    return (("depth", int(rng.integers(1, 3))),), (u(-0.3, 0.5), u(-2, 0))
  raise ValueError(f"kinds: unknown kernel {name!r}; expected one of {KINDS}")


def draw_family(space: Space, rng: np.random.Generator) -> tuple[Family, list[tuple]]:
  """A random family from ``space`` and its kernels' drawn hyper-parameters (one per kernel)."""
  m = int(rng.integers(space.agents[0], space.agents[1] + 1))
  dim = int(rng.choice(DIMS))
  if space.data == "subspaces":
    dim = max(dim, 3)
    sizes = []
    for _ in range(m):
      sizes.append(int(rng.integers(max(1, dim // 2 + 1), dim)))
  elif space.data == "duplicate":
    sizes = [int(rng.integers(1, space.max_points + 1))] * m
  else:
    # mostly a handful of points, sometimes up to max_points
    sizes = [int(min(space.max_points, rng.integers(1, 5) if rng.uniform() < 0.6
                     else rng.integers(1, space.max_points + 1))) for _ in range(m)]
  count = 1 if space.kernels == "shared" else m
  kernels, values = [], []
  for _ in range(count):
    name = str(rng.choice(space.kinds))
    static, floats = _draw_kernel(name, dim, rng)
    kernels.append((name, static))
    values.append(floats)
  family = Family(tuple(sizes), dim, tuple(kernels), space.ridge == "zero",
                  space.data == "duplicate")
  return family, values


def draw_params(family: Family, kernel_values: list[tuple], rng: np.random.Generator,
                batch: int, jitter: float = 1.0) -> Params:
  """``batch`` parameter sets of ``family`` (leading axis ``batch`` on every leaf).

  The first set keeps the drawn kernel hyper-parameters; the others multiply
  them by ``exp(jitter * N(0, 1))``. Each set draws its own cluster centres
  (from one shared cluster to far apart), inputs, labels, evaluation points
  and ridge.
  """
  d = family.dim
  agents = 1 if family.duplicate else family.num_agents
  sizes = family.sizes[:agents]
  # separation of the clusters: 0 (shared) in a quarter of the sets, else over two decades
  sep = np.where(rng.uniform(size=batch) < 0.25, 0.0, 10.0 ** rng.uniform(-1, 1, size=batch))
  xs, ys = [], []
  for n in sizes:
    centre = rng.normal(size=(batch, 1, d))
    centre *= sep[:, None, None] / np.maximum(np.linalg.norm(centre, axis=-1, keepdims=True),
                                              1e-12)
    xs.append(centre + rng.normal(size=(batch, n, d)))
    ys.append(rng.normal(size=(batch, n)))
  x_eval = rng.normal(size=(batch, family.num_eval, d)) * (1.0 + sep[:, None, None])
  log_k = []
  for floats in kernel_values:
    logs = []
    for v in floats:
      noise = np.concatenate([[0.0], jitter * rng.normal(size=batch - 1)]) if batch > 1 else 0.0
      logs.append(np.log(v) + noise)
    log_k.append(tuple(logs))
  log_ridge = rng.uniform(math.log(RIDGE_MIN), 0.0, size=batch)
  return {"xs": tuple(xs), "ys": tuple(ys), "x_eval": x_eval, "log_k": tuple(log_k),
          "log_ridge": log_ridge}


def take(params: Params, index: int) -> Params:
  """One parameter set of a batch (numpy, float64)."""
  return jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64)[index], params)


def _ratios(matrix: Array) -> Array:
  w = jnp.abs(jnp.linalg.eigvalsh(0.5 * (matrix + matrix.T)))
  return w / jnp.maximum(jnp.max(w), 1e-300)


def conditioned(family: Family, problem: FederatedProblem, positive_definite: bool) -> Array:
  """Whether a c = 0 instance's Gram matrices can be trusted in float64.

  Each kernel's Gram matrix on all the points and each agent's own block must
  have a clear gap: every eigenvalue ratio below ``ZERO_BELOW`` (a zero of the
  pseudo-inverse) or above ``MIN_CONDITION``. With ``positive_definite``
  (statements that assume ``K > 0``) every ratio must be above
  ``MIN_CONDITION``, and with different kernels so must the singular values of
  the mixed block matrix of system (7) (block (i, j): ``k_j(X_i, X_j)``).
  """
  x_all = problem.pooled_x()
  ok = jnp.asarray(True)
  grams = [k(x_all, x_all) for k in problem.kernels[:len(family.kernels)]]
  grams += [k(x, x) for k, x in zip(problem.kernels, problem.xs)]
  for g in grams:
    r = _ratios(g)
    if positive_definite:
      ok = ok & (jnp.min(r) >= MIN_CONDITION)
    else:
      ok = ok & jnp.all((r <= ZERO_BELOW) | (r >= MIN_CONDITION))
  if positive_definite and not family.shared:
    blocks = jnp.concatenate([jnp.concatenate([problem.kernels[j](xi, xj)
                                               for j, xj in enumerate(problem.xs)], axis=1)
                              for xi in problem.xs], axis=0)
    s = jnp.linalg.svd(blocks, compute_uv=False)
    ok = ok & (s[-1] >= MIN_CONDITION * s[0])
  return ok


def shrink_candidates(family: Family, params: Params, space: Space):
  """Smaller instances than ``(family, params)``: a point, an agent or a dimension fewer.

  Yields ``(family, params)`` pairs (single parameter sets, numpy).
  """
  # a point fewer (from the largest agent first)
  agents = 1 if family.duplicate else family.num_agents
  order = sorted(range(agents), key=lambda a: -family.sizes[a])
  for a in order:
    n = family.sizes[a]
    if n <= 1:
      continue
    for drop in range(n):
      keep = [i for i in range(n) if i != drop]
      xs = list(params["xs"])
      ys = list(params["ys"])
      xs[a], ys[a] = xs[a][keep], ys[a][keep]
      sizes = list(family.sizes)
      if family.duplicate:
        sizes = [n - 1] * family.num_agents
      else:
        sizes[a] = n - 1
      yield (dataclasses.replace(family, sizes=tuple(sizes)),
             dict(params, xs=tuple(xs), ys=tuple(ys)))
  # an agent fewer
  if family.num_agents > space.agents[0] and not family.duplicate:
    for a in range(family.num_agents):
      keep = [i for i in range(family.num_agents) if i != a]
      kernels = family.kernels if family.shared else tuple(family.kernels[i] for i in keep)
      log_k = params["log_k"] if family.shared else tuple(params["log_k"][i] for i in keep)
      yield (dataclasses.replace(family, sizes=tuple(family.sizes[i] for i in keep),
                                 kernels=kernels),
             dict(params, xs=tuple(params["xs"][i] for i in keep),
                  ys=tuple(params["ys"][i] for i in keep), log_k=log_k))
  # a dimension fewer
  if family.dim > 1:
    for j in range(family.dim):
      cols = [i for i in range(family.dim) if i != j]
      yield (dataclasses.replace(family, dim=family.dim - 1),
             dict(params, xs=tuple(x[:, cols] for x in params["xs"]),
                  x_eval=params["x_eval"][:, cols]))


def size_key(family: Family) -> tuple[int, int, int]:
  """How big an instance is: (number of points, agents, dimension)."""
  points = family.sizes[0] if family.duplicate else sum(family.sizes)
  return (points, family.num_agents, family.dim)
