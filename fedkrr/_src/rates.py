"""Degradation rates of AKD (Prop. IV and VIII) and their sweeps.

One pass of AKD around the cycle of agents, started at agent s, maps agent s's
coefficients ``alpha`` to ``W_s alpha`` with
``W_s = T_{s, s-1} ... T_{s+2, s+1} T_{s+1, s}`` and ``T_ij = S_i K^j_ij`` (the
transfer blocks of :func:`fedkrr.transfer`). Its spectral radius ``rho`` is the
degradation rate: the models shrink like ``rho^(t / M)``. For M = 2 it is the
spectral radius of the two-round operator ``A`` of Prop. III, and with one
shared kernel ``rho = cos^2(phi)``, phi the smallest principal angle between the
agents' subspaces in the G geometry (App. B).

:func:`degradation_rate` computes ``rho`` by Krylov methods on the blocks
``B_ij = R_i^T K^j_ij R_j`` of :func:`fedkrr.ridge_root` (Lanczos for two agents with
one shared kernel, restarted Arnoldi otherwise) or, with ``method="dense"``, from the
dense cycle operator; ``docs/theory.md`` ("How rates are computed") compares them.
The sweeps are single jitted, vmapped calls over a grid of one parameter.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import NamedTuple

import jax
from jax import lax
import jax.core
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import krylov
from fedkrr._src import linalg
from fedkrr._src import protocols
from fedkrr._src.geometry import principal_cosines
from fedkrr._src.kernels import RBF
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


def cycle_operator(problem: FederatedProblem, start: int = 0) -> Array:
  """``W_s`` (N_s, N_s): one AKD cycle from agent ``start`` on its coefficients."""
  protocols.check_start(start, problem.num_agents)
  fs = closed_form.factors(problem)
  m = problem.num_agents
  op = jnp.eye(problem.sizes[start], dtype=problem.ridge.dtype)
  for r in range(m):
    a = (start + r) % m
    op = closed_form.transfer(problem, fs, (a + 1) % m, a) @ op
  return op


RATE_METHODS = ("auto", "symmetric", "krylov", "dense")


class RateEstimate(NamedTuple):
  """A degradation rate and its certificate (:func:`rate_estimate`).

  Attributes:
    radius: the estimate of ``rho``, the spectral radius of one AKD cycle.
    residual: the Krylov residual relative to a norm estimate of the cycle map
      (0 for the dense route).
    converged: whether the residual is below the tolerance; when it is not,
      :func:`degradation_rate` returns NaN.
  """

  radius: Array
  residual: Array
  converged: Array


def kernels_shared(problem: FederatedProblem) -> bool | None:
  """True if every agent's kernel is provably the same, False if provably not, None if
  traced values keep it open (e.g. a bandwidth swept under vmap). Decided in Python."""
  first = problem.kernels[0]
  leaves0, tree0 = jax.tree_util.tree_flatten(first)
  for kernel in problem.kernels[1:]:
    if kernel is first:
      continue
    leaves, tree = jax.tree_util.tree_flatten(kernel)
    if type(kernel) is not type(first) or tree != tree0:
      return False
    for a, b in zip(leaves0, leaves):
      if a is b:
        continue
      if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return None
      if not np.array_equal(np.asarray(a), np.asarray(b)):
        return False
  return True


# Up to this many points in all, method="auto" takes the dense route (see resolve_rate_method).
AUTO_DENSE_MAX = closed_form.AUTO_DENSE_MAX


def resolve_rate_method(problem: FederatedProblem, method: str) -> str:
  """The route :func:`degradation_rate` takes for ``method`` (``auto`` resolved).

  ``auto`` is ``dense`` for problems of at most ``AUTO_DENSE_MAX`` (256) points
  (there one general eigen-solve costs less than compiling and running the Krylov
  steps, and is exact), else ``symmetric`` for two agents whose kernels are provably shared and
  ``krylov`` otherwise. Raises ``ValueError`` for an unknown method, or for
  ``symmetric`` with M != 2 or kernels that provably differ.
  """
  if method not in RATE_METHODS:
    raise ValueError(f"method: expected one of {', '.join(RATE_METHODS)}, got {method!r}")
  shared = kernels_shared(problem)
  if method == "auto":
    if problem.num_points <= AUTO_DENSE_MAX:
      return "dense"
    return "symmetric" if problem.num_agents == 2 and shared else "krylov"
  if method == "symmetric":
    if problem.num_agents != 2:
      raise ValueError(f"method: 'symmetric' needs two agents (the cycle operator of M > 2 "
                       f"agents is not symmetrisable), got {problem.num_agents}; use 'krylov'")
    if shared is False:
      raise ValueError("method: 'symmetric' needs one kernel shared by both agents, and "
                       "problem.kernels differ; use 'krylov'")
  return method


def _check_batch_size(batch_size: int | None) -> None:
  if batch_size is not None and (not isinstance(batch_size, int)
                                 or isinstance(batch_size, bool) or batch_size < 1):
    raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")


def _symmetrised_block(problem: FederatedProblem, roots, i: int, j: int) -> Array:
  """``B_ij = R_i^T K^j_ij R_j`` (N_i x N_j): the transfer ``T_ij = R_i B_ij R_j^T`` seen
  in the coordinates ``R^T`` of each agent's ``S_a = R_a R_a^T``."""
  cross = problem.gram(j, problem.xs[i], problem.xs[j])
  return roots[i].root_t @ cross @ roots[j].root_t.T


@functools.partial(jax.jit, static_argnames=("start", "method", "steps"))
def _estimate(problem: FederatedProblem, start: int, method: str, steps: int) -> RateEstimate:
  dtype = problem.ridge.dtype
  if method == "dense":
    rho = closed_form.spectral_radius(cycle_operator(problem, start))
    return RateEstimate(rho, jnp.zeros((), dtype), jnp.ones((), bool))
  roots = [linalg.ridge_root(problem.gram(a, x, x), problem.ridge)
           for a, x in enumerate(problem.xs)]
  m = problem.num_agents
  if method == "symmetric":
    # W_0 = R_0 B_01 B_01^T R_0^{-1} (on range R_0): rho = ||B_01||^2, the top eigenvalue of
    # the symmetric B B^T or B^T B, whichever is smaller.
    block = _symmetrised_block(problem, roots, 0, 1)
    if block.shape[0] > block.shape[1]:
      block = block.T
    est = krylov.lanczos_radius(lambda v: block @ (block.T @ v),
                                krylov.start_vector(block.shape[0], dtype), steps)
  else:
    # W_s and the cyclic product of the blocks B_{a+1, a} from s have the same non-zero
    # eigenvalues (the products R_s Y and Y R_s).
    order = [(start + r) % m for r in range(m)]
    blocks = [_symmetrised_block(problem, roots, (a + 1) % m, a) for a in order]

    def matvec(v):
      for block in blocks:
        v = block @ v
      return v

    est = krylov.arnoldi_radius(matvec, krylov.start_vector(problem.sizes[start], dtype), steps)
  return RateEstimate(*est)


def rate_estimate(problem: FederatedProblem, start: int = 0, method: str = "auto",
                  steps: int = 200) -> RateEstimate:
  """The degradation rate ``rho`` with its convergence certificate.

  Routes (``method``; ``docs/theory.md``, "How rates are computed"):

  * ``symmetric``: two agents, one shared kernel. ``W_0`` is similar to
    ``B B^T`` with ``B = R_0^T K_01 R_1`` (``S_a = R_a R_a^T``, :func:`fedkrr.ridge_root`),
    symmetric positive semi-definite, so ``rho = ||B||^2`` by Lanczos on products with B.
  * ``krylov``: any M and kernels; restarted Arnoldi on products with the blocks
    ``B_{a+1, a} = R_{a+1}^T K^a_{a+1, a} R_a`` around the cycle. The dense cycle
    operator is never formed.
  * ``dense``: ``max |eigvals(W_s)|`` of the dense cycle operator (the reference;
    a general eigen-solver, CPU only in JAX).
  * ``auto``: ``dense`` up to 256 points in all, else ``symmetric`` when M = 2 and the
    kernels are provably shared (the same kernel object, or equal hyper-parameters
    known outside any trace), else ``krylov``.

  Args:
    problem: a :class:`FederatedProblem`.
    start: the agent the cycle starts from (the rate does not depend on it).
    method: one of :data:`RATE_METHODS` (Python-level, resolved before tracing).
    steps: matrix-vector products of the Krylov routes (static).

  Returns:
    A :class:`RateEstimate`.

  Raises:
    ValueError: an unknown ``method``, ``steps`` < 1, or ``symmetric`` where it does
      not apply.
  """
  protocols.check_start(start, problem.num_agents)
  krylov.check_steps(steps)
  return _estimate(problem, start, resolve_rate_method(problem, method), steps)


def degradation_rate(problem: FederatedProblem, start: int = 0, method: str = "auto",
                     steps: int = 200) -> Array:
  """The degradation rate ``rho``: spectral radius of one AKD cycle (Prop. IV, VIII).

  ``rho < 1`` means AKD decays to 0 geometrically, by ``rho`` per cycle of M
  rounds (two rounds for M = 2); smaller is faster. It does not depend on
  ``start`` (the cycle operators are cyclic products of the same factors).

  The Krylov routes (``method`` ``auto``, ``symmetric``, ``krylov``; see
  :func:`rate_estimate`) run on matrix-vector products and vmap as batches of small
  matrix products; an estimate whose residual has not converged within ``steps``
  products is NaN, never a silently wrong number. ``dense`` uses a general
  eigen-solver (``jnp.linalg.eigvals``) on the dense cycle operator.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> rho = fedkrr.degradation_rate(problem)   # AKD loses a factor rho every two rounds
    >>> 0.0 < float(rho) < 1.0
    True
  """
  est = rate_estimate(problem, start, method, steps)
  if method == "dense":
    return est.radius
  return jnp.where(est.converged, est.radius, jnp.nan)


def degradation_rate_per_cycle(problem: FederatedProblem, start: int = 0,
                               method: str = "auto", steps: int = 200) -> Array:
  """:func:`degradation_rate`, named with its unit: AKD's contraction per cycle of M rounds.

  Per round, the factor is its M-th root: the ``spectral_radius`` (also
  ``spectral_radius_per_round``) of :func:`fedkrr.limit` for "akd".

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> per_cycle = fedkrr.degradation_rate_per_cycle(problem)
    >>> per_round = fedkrr.limit(problem, "akd", x).spectral_radius_per_round
    >>> bool(jnp.allclose(per_cycle, per_round ** 2, rtol=1e-4))   # M = 2 rounds per cycle
    True
  """
  return degradation_rate(problem, start, method, steps)


def shared_kernel_rate(problem: FederatedProblem) -> Array:
  """``cos^2(phi)`` of the smallest principal angle (kernel of agent 1); equals
  :func:`degradation_rate` when both agents share that kernel (App. B)."""
  return principal_cosines(problem, 0)[0] ** 2


def sweep(make_problem_fn: Callable[[Array], FederatedProblem], values: Array,
          rate_fn: Callable[[FederatedProblem], Array] | None = None,
          batch_size: int | None = None) -> Array:
  """``rate_fn(make_problem_fn(v))`` for every ``v`` in ``values``, as one vmapped jitted call.

  Args:
    make_problem_fn: a function of one traced scalar returning a problem (its
      shapes must not depend on the value).
    values: the parameter grid, shape (n,) (or (n, k) for k parameters).
    rate_fn: the quantity to sweep; :func:`degradation_rate` by default.
    batch_size: vmap this many instances at a time (``jax.lax.map`` in the same
      jitted call), bounding the memory; default all at once.

  Returns:
    (n,) rates. With the default ``rate_fn``, called outside ``jit``, an instance
    whose Krylov estimate did not converge (NaN, see :func:`degradation_rate`) is
    recomputed on the dense route, one jitted call per such instance; under ``jit``
    the NaN stays.
  """
  values = jnp.asarray(values)
  fallback = rate_fn is None
  rate_fn = degradation_rate if rate_fn is None else rate_fn
  one = lambda v: rate_fn(make_problem_fn(v))  # noqa: E731
  if batch_size is None:
    rates = jax.jit(jax.vmap(one))(values)
  else:
    _check_batch_size(batch_size)
    rates = jax.jit(lambda vs: lax.map(one, vs, batch_size=batch_size))(values)
  if fallback and not isinstance(rates, jax.core.Tracer):
    rates = dense_where_nan(make_problem_fn, values, rates)
  return rates


def dense_where_nan(make_problem_fn: Callable[[Array], FederatedProblem], values: Array,
                    rates: Array) -> Array:
  """``rates`` with each NaN entry (an unconverged Krylov estimate) replaced by the
  dense route's ``rho`` for ``make_problem_fn(values[i])``; concrete arrays only."""
  missing = np.flatnonzero(np.isnan(np.asarray(rates)))
  if missing.size == 0:
    return rates
  dense = jax.jit(lambda v: degradation_rate(make_problem_fn(v), method="dense"))
  for i in missing:
    rates = rates.at[i].set(dense(values[i]))
  return rates


def sweep_ridge(problem: FederatedProblem, ridges: Array) -> Array:
  """``rho`` for each regularisation constant c in ``ridges`` (Prop. IV, first trend)."""
  ridges = jnp.asarray(ridges, problem.ridge.dtype)
  return sweep(lambda c: dataclasses.replace(problem, ridge=c), ridges)


def sweep_bandwidth_ratio(problem: FederatedProblem, ratios: Array) -> Array:
  """``rho`` when agent 2's RBF bandwidth is agent 1's times each ratio (second trend).

  Agent 1 keeps its kernel (an :class:`fedkrr.RBF`); agent 2 gets
  ``RBF(gamma_1 * ratio)``. A ratio of 1 is the shared-kernel case.
  """
  first = problem.kernels[0]
  if not isinstance(first, RBF):
    raise ValueError(f"problem.kernels[0]: expected an RBF kernel, got {type(first).__name__}")

  def make(ratio):
    kernels = (first, RBF(first.gamma * ratio)) + tuple(problem.kernels[2:])
    return dataclasses.replace(problem, kernels=kernels)

  return sweep(make, jnp.asarray(ratios, problem.ridge.dtype))


@dataclasses.dataclass(frozen=True)
class TwoClusters:
  """Two agents drawing points from two Gaussian clusters, mixed by a fraction p.

  Agent a's i-th point comes from its own cluster unless ``u_ai < p / 2``, in
  which case it comes from the other agent's cluster: ``p = 0`` gives disjoint
  clusters (full heterogeneity), ``p = 1`` i.i.d. agents (like the paper's
  Alpha). The random draws are fixed at construction, so :meth:`problem` is a
  pure function of ``p`` (and of ``ridge``) and can be vmapped.
  """

  noise: np.ndarray       # (2, n, d) standard normal draws
  uniforms: np.ndarray    # (2, n) uniform draws
  labels_w: np.ndarray    # (d,) the regression direction
  separation: float
  gamma: float

  @classmethod
  def draw(cls, seed: int, points_per_agent: int = 50, dim: int = 2,
           separation: float = 3.0, gamma: float = 0.5) -> TwoClusters:
    """Fixes the random draws: ``points_per_agent`` points in ``dim`` dimensions per agent."""
    rng = np.random.default_rng(seed)
    return cls(rng.normal(size=(2, points_per_agent, dim)),
               rng.uniform(size=(2, points_per_agent)),
               rng.normal(size=dim) / np.sqrt(dim), separation, gamma)

  def inputs(self, mixing: ArrayLike, separation: ArrayLike | None = None) -> tuple[Array, Array]:
    """The two agents' inputs at mixing fraction ``mixing`` (traceable, like :meth:`problem`)."""
    sep = self.separation if separation is None else separation
    centre = jnp.zeros(self.noise.shape[-1]).at[0].set(0.5 * sep)
    xs = []
    for a, sign in ((0, -1.0), (1, 1.0)):
      swap = jnp.asarray(self.uniforms[a]) < 0.5 * mixing
      own = jnp.where(swap, -sign, sign)
      xs.append(jnp.asarray(self.noise[a]) + own[:, None] * centre[None, :])
    return xs[0], xs[1]

  def problem(self, mixing: ArrayLike, ridge: ArrayLike, separation: ArrayLike | None = None,
              dtype=None) -> FederatedProblem:
    """The two-agent problem at mixing fraction ``mixing`` (unvalidated, traceable)."""
    dtype = jnp.asarray(1.0).dtype if dtype is None else dtype
    xs = tuple(x.astype(dtype) for x in self.inputs(mixing, separation))
    ys = tuple(jnp.sin(x @ jnp.asarray(self.labels_w, dtype)) for x in xs)
    kernel = RBF(jnp.asarray(self.gamma, dtype))
    return FederatedProblem(xs, ys, (kernel, kernel), jnp.asarray(ridge, dtype))


def sweep_heterogeneity(clusters: TwoClusters, mixings: ArrayLike, ridge: float,
                        separation: float | None = None) -> Array:
  """``rho`` for each mixing fraction (third trend: less mixing, faster degradation)."""
  return sweep(lambda p: clusters.problem(p, ridge, separation), jnp.asarray(mixings))


def sweep_separation(clusters: TwoClusters, separations: ArrayLike, ridge: float,
                     mixing: float = 0.0) -> Array:
  """``rho`` for each distance between the two clusters' centres."""
  return sweep(lambda s: clusters.problem(mixing, ridge, s), jnp.asarray(separations))


def rate_grid(clusters: TwoClusters, ridges: ArrayLike, mixings: ArrayLike,
              rate_fn: Callable[[FederatedProblem], Array] | None = None,
              batch_size: int | None = None, steps: int = 200) -> Array:
  """``rho`` on the grid ``ridges x mixings`` as one jitted call: (n_c, n_p).

  With the default ``rate_fn`` the grid uses its structure: both agents share one
  kernel, so ``rho = ||B||^2`` with ``B = (w_0 + c)^(-1/2) U_0^T K_01 U_1 (w_1 + c)^(-1/2)``
  for the eigen-decompositions ``K_aa = U_a diag(w_a) U_a^T`` (the pseudo-inverse's
  cut-off at ``c = 0``, as :func:`fedkrr.ridge_root`). Each mixing fraction's
  decompositions are computed once and serve every ``c``; along ``c`` (in decreasing
  order) :func:`fedkrr._src.krylov.block_top_eigen` starts from the previous ``c``'s
  block of Ritz vectors and stops once converged (``docs/theory.md``, "How rates are
  computed"). ``batch_size`` mixing fractions are vmapped at a time (default
  ``GRID_BATCH`` = 8: on a CPU more lanes push the blocks out of cache); ``steps``
  bounds the Krylov products per instance.
  Another ``rate_fn`` is vmapped over the flattened grid as in :func:`sweep`
  (``batch_size`` instances at a time). Outside ``jit``, unconverged entries are
  recomputed on the dense route, as in :func:`sweep`.
  """
  ridges, mixings = jnp.asarray(ridges), jnp.asarray(mixings)
  grid_c, grid_p = jnp.meshgrid(ridges, mixings, indexing="ij")
  flat = jnp.stack([grid_c.ravel(), grid_p.ravel()], axis=1)
  make = lambda v: clusters.problem(v[1], v[0])  # noqa: E731
  if rate_fn is not None:
    return sweep(make, flat, rate_fn, batch_size).reshape(grid_c.shape)
  krylov.check_steps(steps)
  _check_batch_size(batch_size)
  grid = jax.jit(lambda cs, ps: _shared_kernel_grid(clusters, cs, ps, batch_size, steps))(
      ridges, mixings)
  if not isinstance(grid, jax.core.Tracer):
    grid = dense_where_nan(make, flat, grid.ravel()).reshape(grid_c.shape)
  return grid


# The grid's Krylov cycles: basis vectors per cycle, and Ritz vectors carried from one c to
# the next (their thick restart keeps a cluster of top eigenvalues converging).
RESTART = 24
BLOCK = 4
# Mixing fractions vmapped at a time by default (benchmarks/rates.py: 1, 4, 8, 16 gave
# 15x, 37x, 28x, 33x the dense loop on 2 CPU cores).
GRID_BATCH = 8


def _shared_kernel_grid(clusters: TwoClusters, ridges: Array, mixings: Array,
                        batch_size: int | None, steps: int) -> Array:
  order = jnp.argsort(-ridges)       # decreasing c: the top eigenvalues spread out most at
  sorted_c = ridges[order]           # large c, where the first (cold) start converges fastest
  probe = clusters.problem(mixings[0], sorted_c[0])
  dtype = probe.ridge.dtype
  cut = linalg.default_rtol(max(probe.sizes), dtype)

  def column(mixing):
    problem = clusters.problem(mixing, sorted_c[0])
    x0, x1 = problem.xs
    w0, u0 = jnp.linalg.eigh(problem.gram(0, x0, x0))
    w1, u1 = jnp.linalg.eigh(problem.gram(1, x1, x1))
    core = u0.T @ problem.gram(1, x0, x1) @ u1
    if core.shape[0] > core.shape[1]:       # Lanczos on the smaller of B B^T and B^T B
      core, w0, w1 = core.T, w1, w0
    floor0, floor1 = cut * jnp.max(jnp.abs(w0)), cut * jnp.max(jnp.abs(w1))

    def inv_root(w, c, floor):
      keep = (c > 0) | (w > floor)
      return jnp.where(keep, lax.rsqrt(jnp.maximum(jnp.where(keep, w + c, 1.0),
                                                   jnp.finfo(dtype).tiny)), 0.0)

    def one(block, c):
      b = core * inv_root(w0, c, floor0)[:, None] * inv_root(w1, c, floor1)[None, :]
      est, block = krylov.block_top_eigen(lambda v: b @ (b.T @ v), block, steps,
                                          restart=RESTART)
      return block, jnp.where(est.converged, est.radius, jnp.nan)

    n = core.shape[0]
    start = jax.random.normal(jax.random.key(0), (min(BLOCK, n), n), dtype)
    return lax.scan(one, start, sorted_c)[1]

  size = min(GRID_BATCH if batch_size is None else batch_size, mixings.shape[0])
  columns = lax.map(column, mixings, batch_size=size)     # (n_p, n_c), c sorted
  return columns.T[jnp.argsort(order)]
