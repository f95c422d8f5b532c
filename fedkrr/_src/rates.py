"""Degradation rates of AKD (Prop. IV and VIII) and their sweeps.

One pass of AKD around the cycle of agents, started at agent s, maps agent s's
coefficients ``alpha`` to ``W_s alpha`` with
``W_s = T_{s, s-1} ... T_{s+2, s+1} T_{s+1, s}`` and ``T_ij = S_i K^j_ij`` (the
transfer blocks of :func:`fedkrr.rates.transfer`). Its spectral radius ``rho`` is the
degradation rate: the models shrink like ``rho^(t / M)``. For M = 2 it is the
spectral radius of the two-round operator ``A`` of Prop. III, and with one
shared kernel ``rho = cos^2(phi)``, phi the smallest principal angle between the
agents' subspaces in the G geometry (App. B).

:func:`degradation_rate` computes ``rho`` by Krylov methods on the blocks
``B_ij = R_i^T K^j_ij R_j`` of :func:`fedkrr.ridge_root` (Lanczos for two agents with
one shared kernel, restarted Arnoldi otherwise) or, with ``method="dense"``, from the
dense cycle operator; where a Krylov estimate does not converge (small ridges, where the
top eigenvalues crowd near 1) a dense eigen-solver of the same blocks takes over
(:func:`where_unconverged`). ``docs/theory.md`` ("How rates are computed") compares them.
The sweeps are single jitted calls over a grid of one parameter: :func:`sweep_ridge`
decomposes each agent's Gram block once for every c, :func:`rate_grid` once per mixing
fraction, the bandwidth sweeps start each instance's Krylov estimate from the previous
one's (:func:`warm_sweep`), and the other sweeps are vmapped (:func:`sweep`).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any
from typing import NamedTuple

import jax
from jax import custom_batching
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
from fedkrr._src.platform import xla_env
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
  """``B_ij = R_i^T K^j_ij R_j`` (N_i x N_j): the transfer ``T_ij = S_i K^j_ij`` seen in the
  coordinates ``alpha_a = R_a u_a`` of each agent's ``S_a = R_a R_a^T``
  (``T_ij R_j = R_i B_ij``)."""
  cross = problem.gram(j, problem.xs[i], problem.xs[j])
  return roots[i].root_t @ cross @ roots[j].root_t.T


@functools.partial(jax.jit, static_argnames=("start", "method", "steps"))
def _estimate(problem: FederatedProblem, start: int, method: str, steps: int) -> RateEstimate:
  return _estimate_with_blocks(problem, start, method, steps)[0]


def _estimate_with_blocks(problem: FederatedProblem, start: int, method: str, steps: int
                          ) -> tuple[RateEstimate, tuple[Array, ...]]:
  """The route's estimate and the explicit blocks it ran on (none for ``dense``)."""
  dtype = problem.ridge.dtype
  if method == "dense":
    rho = closed_form.spectral_radius(cycle_operator(problem, start))
    return RateEstimate(rho, jnp.zeros((), dtype), jnp.ones((), bool)), ()
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
    return RateEstimate(*est), (block,)
  # W_s and the cyclic product of the blocks B_{a+1, a} from s have the same non-zero
  # eigenvalues (the products R_s Y and Y R_s).
  order = [(start + r) % m for r in range(m)]
  blocks = [_symmetrised_block(problem, roots, (a + 1) % m, a) for a in order]

  def matvec(v):
    for block in blocks:
      v = block @ v
    return v

  est = krylov.arnoldi_radius(matvec, krylov.start_vector(problem.sizes[start], dtype), steps)
  return RateEstimate(*est), tuple(blocks)


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


def where_unconverged(value: Array, converged: Array, fallback: Callable[[Any], Array],
                      operand: object) -> Array:
  """``value`` if ``converged``, else ``fallback(operand)`` (a ``lax.cond``).

  Under ``vmap`` a plain ``lax.cond`` becomes a select that runs the fallback for every
  instance; here the batched rule runs the instances one after the other (``lax.map``),
  each with its own ``lax.cond``, so that only the unconverged ones pay for the fallback.
  """

  @custom_batching.custom_vmap
  def pick(value, converged, operand):
    return lax.cond(converged, lambda _: value, fallback, operand)

  @pick.def_vmap
  def _pick_vmap(axis_size, in_batched, value, converged, operand):
    def full(x, batched):
      return x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
    value_b, converged_b, operand_b = in_batched
    lanes = (full(value, value_b), full(converged, converged_b),
             jax.tree_util.tree_map(full, operand, operand_b))
    out = lax.map(lambda lane: lax.cond(lane[1], lambda _: lane[0], fallback, lane[2]), lanes)
    return out, True

  return pick(value, converged, operand)


def _top_eigvalsh(block: Array) -> Array:
  """``||block||^2``, the largest eigenvalue of ``block @ block.T``: its tridiagonal form
  (Householder) and bisection for the top eigenvalue only (no eigenvectors: about half the
  time of ``eigvalsh``, which computes them)."""
  gram = block @ block.T
  n = gram.shape[0]
  if n == 1:
    return gram[0, 0]
  _, diagonal, off, _ = lax.linalg.tridiagonal(0.5 * (gram + gram.T), lower=True)
  return jax.scipy.linalg.eigh_tridiagonal(diagonal, off, eigvals_only=True, select="i",
                                           select_range=(n - 1, n - 1))[0]


def _product_radius(blocks: tuple[Array, ...]) -> Array:
  """``max |eig(blocks[-1] @ ... @ blocks[0])|`` (a general eigen-solver)."""
  product = blocks[0]
  for block in blocks[1:]:
    product = block @ product
  return jnp.max(jnp.abs(jnp.linalg.eigvals(product))).astype(product.dtype)


@functools.partial(jax.jit, static_argnames=("start", "method", "steps"))
def _rate(problem: FederatedProblem, start: int, method: str, steps: int) -> Array:
  est, blocks = _estimate_with_blocks(problem, start, method, steps)
  if method == "dense":
    return est.radius
  fallback = _top_eigvalsh if method == "symmetric" else _product_radius
  operand = blocks[0] if method == "symmetric" else blocks
  return where_unconverged(est.radius, est.converged, fallback, operand)


def degradation_rate(problem: FederatedProblem, start: int = 0, method: str = "auto",
                     steps: int = 200) -> Array:
  """The degradation rate ``rho``: spectral radius of one AKD cycle (Prop. IV, VIII).

  ``rho < 1`` means AKD decays to 0 geometrically, by ``rho`` per cycle of M
  rounds (two rounds for M = 2); smaller is faster. It does not depend on
  ``start`` (the cycle operators are cyclic products of the same factors).

  The Krylov routes (``method`` ``auto``, ``symmetric``, ``krylov``; see
  :func:`rate_estimate`) run on matrix-vector products and vmap as batches of small
  matrix products. Where an estimate's residual has not converged within ``steps``
  products (small ridges, where the top eigenvalues crowd near 1), the route computes
  the radius from the same explicit blocks by a dense eigen-solver instead: the
  symmetric ``eigvalsh(B B^T)`` for ``symmetric``, ``eigvals`` of the blocks' cycle
  product for ``krylov``; under ``vmap`` only the unconverged instances do
  (:func:`where_unconverged`). ``dense`` uses a general eigen-solver
  (``jnp.linalg.eigvals``) on the dense cycle operator.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> rho = fedkrr.rates.degradation_rate(problem)   # AKD loses a factor rho every two rounds
    >>> 0.0 < float(rho) < 1.0
    True
  """
  protocols.check_start(start, problem.num_agents)
  krylov.check_steps(steps)
  return _rate(problem, start, resolve_rate_method(problem, method), steps)


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
    >>> per_cycle = fedkrr.rates.degradation_rate_per_cycle(problem)
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
  xla_env.warn_if_backend_started_unsafe()
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


def sweep_ridge(problem: FederatedProblem, ridges: Array, steps: int = 200) -> Array:
  """``rho`` for each regularisation constant c in ``ridges`` (Prop. IV, first trend).

  One jitted call that reuses what does not depend on c. Each agent's Gram block is
  decomposed once, ``K^a_aa = U_a diag(w_a) U_a^T``, and the blocks
  ``C_{a+1, a} = U_{a+1}^T K^a_{a+1, a} U_a`` around the cycle are formed once; for each
  c the cycle map from agent 0 is similar to
  ``D_0 C_{0, M-1} D_{M-1}^2 ... D_1^2 C_{1, 0} D_0`` with the diagonal
  ``D_a = (w_a + c)^(-1/2)`` (at c = 0 the pseudo-inverse's cut-off, as
  :func:`fedkrr.ridge_root`). Along the ridges (in decreasing order) its radius comes from
  restarted Arnoldi started from the previous c's Ritz vector and stopped once converged
  (:func:`fedkrr._src.krylov.arnoldi_continued`); for two agents whose kernels are provably
  shared, the map is ``B B^T`` with ``B = D_0 C_01 D_1`` and the block Krylov method of
  :func:`rate_grid` runs instead. Where the Krylov method does not converge within
  ``steps`` products (small c: the top eigenvalues crowd near 1), that c and every smaller
  one take a dense eigen-solver of the same small matrices (``eigvals`` of the explicit
  product, or ``eigvalsh(B B^T)``). Called outside ``jit``, any NaN left is recomputed on
  the dense route, as :func:`sweep` does.

  Args:
    problem: the federated problem (its own ridge is ignored).
    ridges: (n,) values of c >= 0, in any order.
    steps: Krylov products per ridge at most (static).

  Returns:
    (n,) rates, in the order of ``ridges``.
  """
  xla_env.warn_if_backend_started_unsafe()
  krylov.check_steps(steps)
  ridges = jnp.asarray(ridges, problem.ridge.dtype)
  shared = problem.num_agents == 2 and bool(kernels_shared(problem))
  rates = _ridge_sweep(problem, ridges, steps, shared)
  if not isinstance(rates, jax.core.Tracer):
    rates = dense_where_nan(lambda c: dataclasses.replace(problem, ridge=c), ridges, rates)
  return rates


def _eigen_bases(problem: FederatedProblem) -> list[tuple[Array, Array, Array]]:
  """Each agent's ``(w_a, U_a, floor_a)``: the eigen-decomposition of its Gram block and the
  pseudo-inverse's cut-off (as :func:`fedkrr.ridge_root`'s)."""
  out = []
  for a, x in enumerate(problem.xs):
    gram = problem.gram(a, x, x)
    w, u = jnp.linalg.eigh(0.5 * (gram + gram.T))
    floor = linalg.default_rtol(x.shape[0], gram.dtype) * jnp.max(jnp.abs(w))
    out.append((w, u, floor))
  return out


def _inv_root(w: Array, c: Array, floor: Array) -> Array:
  """``(w + c)^(-1/2)``, 0 where c = 0 and w is below the pseudo-inverse's cut-off."""
  keep = (c > 0) | (w > floor)
  tiny = jnp.finfo(w.dtype).tiny
  return jnp.where(keep, lax.rsqrt(jnp.maximum(jnp.where(keep, w + c, 1.0), tiny)), 0.0)


def _symmetric_column(core: Array, basis0, basis1, sorted_c: Array, steps: int,
                      eigh_fallback: bool) -> tuple[Array, Array]:
  """``||B(c)||^2`` for ``B(c) = D_0(c) core D_1(c)`` along decreasing c, and the route of
  each (0: block Krylov, 1: ``eigvalsh``, 2: NaN): :func:`krylov.block_top_eigen` started from
  the previous c's Ritz block; once it fails, that c and every smaller one take
  ``eigvalsh(B B^T)`` (with ``eigh_fallback``; else NaN, Krylov tried at each c)."""
  (w0, _, floor0), (w1, _, floor1) = basis0, basis1
  if core.shape[0] > core.shape[1]:       # Krylov on the smaller of B B^T and B^T B
    core, w0, w1, floor0, floor1 = core.T, w1, w0, floor1, floor0
  n = core.shape[0]
  dtype = core.dtype

  def one(carry, c):
    block, alive = carry
    b = core * _inv_root(w0, c, floor0)[:, None] * _inv_root(w1, c, floor1)[None, :]
    est, new_block = krylov.block_top_eigen(lambda v: b @ (b.T @ v), block, steps,
                                            restart=RESTART, active=alive)
    ok = est.converged
    if eigh_fallback:
      rho = where_unconverged(est.radius, ok, _top_eigvalsh, b)
      route = jnp.where(ok, 0, 1)
      alive = alive & ok
    else:
      rho = jnp.where(ok, est.radius, jnp.nan)
      route = jnp.where(ok, 0, 2)
    return (jnp.where(ok, new_block, block), alive), (rho, route)

  start = jax.random.normal(jax.random.key(0), (min(BLOCK, n), n), dtype)
  return lax.scan(one, (start, jnp.ones((), bool)), sorted_c)[1]


def _cycle_radii(cores: list[Array], bases, sorted_c: Array, steps: int
                 ) -> tuple[Array, Array]:
  """The radius of ``D_0 C_{0, M-1} D_{M-1}^2 ... D_1^2 C_{1, 0} D_0`` along decreasing c
  (``cores[a] = C_{a+1, a}``) and the route of each (0: Arnoldi, 1: ``eigvals``)."""
  m = len(cores)
  dtype = cores[0].dtype

  def scales(c):
    return [_inv_root(w, c, floor) for w, _, floor in bases]

  def matvec_for(d):
    def matvec(v):
      v = d[0] * v
      for a in range(m):
        nxt = (a + 1) % m
        v = cores[a] @ v
        v = d[nxt] * v if nxt == 0 else (d[nxt] * d[nxt]) * v
      return v
    return matvec

  def dense(d):
    product = cores[0] * d[0][None, :]
    for a in range(1, m):
      product = cores[a] @ ((d[a] * d[a])[:, None] * product)
    product = d[0][:, None] * product
    return jnp.max(jnp.abs(jnp.linalg.eigvals(product))).astype(dtype)

  def one(carry, c):
    vector, previous, alive = carry
    d = scales(c)
    # The start: the last two Ritz vectors extrapolated (c moves smoothly along the sweep).
    previous = jnp.where(vector @ previous < 0, -previous, previous)
    guess = 2.0 * vector - previous
    est, new_vector = krylov.arnoldi_continued(matvec_for(d), guess, steps, active=alive)
    ok = est.converged
    rho = lax.cond(ok, lambda _: est.radius, dense, d)
    new_vector = new_vector / jnp.maximum(jnp.linalg.norm(new_vector), jnp.finfo(dtype).tiny)
    return ((jnp.where(ok, new_vector, vector), vector, alive & ok),
            (rho, jnp.where(ok, 0, 1)))

  start = krylov.start_vector(cores[-1].shape[0], dtype)
  start = start / jnp.linalg.norm(start)
  return lax.scan(one, (start, start, jnp.ones((), bool)), sorted_c)[1]


@functools.partial(jax.jit, static_argnames=("steps", "shared"))
def _ridge_sweep(problem: FederatedProblem, ridges: Array, steps: int, shared: bool) -> Array:
  order = jnp.argsort(-ridges)
  sorted_c = ridges[order]
  bases = _eigen_bases(problem)
  m = problem.num_agents
  if shared:
    x0, x1 = problem.xs
    core = bases[0][1].T @ problem.gram(1, x0, x1) @ bases[1][1]
    rates = _symmetric_column(core, bases[0], bases[1], sorted_c, steps, True)[0]
  else:
    cores = []
    for a in range(m):
      nxt = (a + 1) % m
      cross = problem.gram(a, problem.xs[nxt], problem.xs[a])   # K^a_{a+1, a}
      cores.append(bases[nxt][1].T @ cross @ bases[a][1])
    rates = _cycle_radii(cores, bases, sorted_c, steps)[0]
  return rates[jnp.argsort(order)]


def warm_sweep(make_problem_fn: Callable[[Array], FederatedProblem], values: Array,
               steps: int = 200) -> Array:
  """``degradation_rate(make_problem_fn(v))`` along ``values``, one after the other, each
  Krylov estimate started from the previous value's.

  For sweeps in which every instance has other Gram blocks (a bandwidth or kernel-mismatch
  sweep), so that nothing is shared between values: a ``lax.scan`` over the values (keep
  neighbours close) in which each instance factors its agents' ``c I + K^a_aa``
  (:func:`fedkrr.ridge_root`), applies the symmetrised blocks ``B_{a+1, a}`` as products
  (never formed) and runs :func:`fedkrr._src.krylov.arnoldi_continued` from the previous
  value's Ritz vector until converged: usually one cycle of 20 products, against the
  fixed ``steps`` of a vmapped :func:`degradation_rate`. Where it does not converge, the
  explicit blocks' cycle product takes a general eigen-solver (a ``lax.cond``). Problems of
  at most ``AUTO_DENSE_MAX`` points use the vmapped dense route instead (:func:`sweep`).

  Args:
    make_problem_fn: a function of one traced value returning a problem.
    values: (n,) the sweep.
    steps: Krylov products per value at most (static).

  Returns:
    (n,) rates.
  """
  krylov.check_steps(steps)
  return warm_sweep_of(lambda _, v: make_problem_fn(v), None, jnp.asarray(values), steps)


def warm_sweep_of(make: Callable[[Any, Array], FederatedProblem], problem: object,
                     values: Array, steps: int) -> Array:
  """:func:`warm_sweep` of ``v -> make(problem, v)``; with a module-level ``make`` the
  compiled program is cached across calls (``problem`` is traced)."""
  probe = jax.eval_shape(make, problem, values[0])
  if sum(probe.sizes) <= AUTO_DENSE_MAX:
    return sweep(lambda v: make(problem, v), values)
  rates = _warm_sweep_jit(make, problem, values, steps)
  if not isinstance(rates, jax.core.Tracer):
    rates = dense_where_nan(lambda v: make(problem, v), values, rates)
  return rates


@functools.partial(jax.jit, static_argnames=("make", "steps"))
def _warm_sweep_jit(make, problem, values: Array, steps: int) -> Array:
  return _warm_sweep(lambda v: make(problem, v), values, steps)


def _warm_sweep(make_problem_fn, values: Array, steps: int) -> Array:
  def one(vector, value):
    problem = make_problem_fn(value)
    m = problem.num_agents
    roots = [linalg.ridge_root(problem.gram(a, x, x), problem.ridge).root_t
             for a, x in enumerate(problem.xs)]
    crosses = [problem.gram(a, problem.xs[(a + 1) % m], problem.xs[a]) for a in range(m)]

    def matvec(v):
      for a in range(m):
        v = roots[(a + 1) % m] @ (crosses[a] @ (roots[a].T @ v))
      return v

    def dense(_):
      blocks = tuple(roots[(a + 1) % m] @ crosses[a] @ roots[a].T for a in range(m))
      return _product_radius(blocks)

    est, new_vector = krylov.arnoldi_continued(matvec, vector, steps)
    rho = lax.cond(est.converged, lambda _: est.radius, dense, None)
    return jnp.where(est.converged, new_vector, vector), rho

  probe = jax.eval_shape(make_problem_fn, values[0])
  start = krylov.start_vector(probe.sizes[0], probe.ridge.dtype)
  return lax.scan(one, start, values)[1]


def sweep_bandwidth_ratio(problem: FederatedProblem, ratios: Array) -> Array:
  """``rho`` when agent 2's RBF bandwidth is agent 1's times each ratio (second trend).

  Agent 1 keeps its kernel (an :class:`fedkrr.RBF`); agent 2 gets
  ``RBF(gamma_1 * ratio)``. A ratio of 1 is the shared-kernel case. One jitted call of
  :func:`warm_sweep` (each ratio's Krylov estimate started from the previous one's).
  """
  first = problem.kernels[0]
  if not isinstance(first, RBF):
    raise ValueError(f"problem.kernels[0]: expected an RBF kernel, got {type(first).__name__}")
  return warm_sweep_of(_second_bandwidth_scaled, problem,
                          jnp.asarray(ratios, problem.ridge.dtype), 200)


def _second_bandwidth_scaled(problem: FederatedProblem, ratio: Array) -> FederatedProblem:
  first = problem.kernels[0]
  kernels = (first, RBF(first.gamma * ratio)) + tuple(problem.kernels[2:])
  return dataclasses.replace(problem, kernels=kernels)


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


GRID_ROUTES = ("krylov", "eigvalsh", "nan")
"""The routes of :func:`rate_grid`'s entries (``with_routes=True``), by code 0, 1, 2."""


def rate_grid(clusters: TwoClusters, ridges: ArrayLike, mixings: ArrayLike,
              rate_fn: Callable[[FederatedProblem], Array] | None = None,
              batch_size: int | None = None, steps: int = 200, eigh_fallback: bool = True,
              with_routes: bool = False) -> Array | tuple[Array, Array]:
  """``rho`` on the grid ``ridges x mixings`` as one jitted call: (n_c, n_p).

  With the default ``rate_fn`` the grid uses its structure: both agents share one
  kernel, so ``rho = ||B||^2`` with ``B = (w_0 + c)^(-1/2) U_0^T K_01 U_1 (w_1 + c)^(-1/2)``
  for the eigen-decompositions ``K_aa = U_a diag(w_a) U_a^T`` (the pseudo-inverse's
  cut-off at ``c = 0``, as :func:`fedkrr.ridge_root`). Each mixing fraction's
  decompositions are computed once and serve every ``c``; along ``c`` (in decreasing
  order) :func:`fedkrr._src.krylov.block_top_eigen` starts from the previous ``c``'s
  block of Ritz vectors and stops once converged (``docs/theory.md``, "How rates are
  computed"). At small c the top eigenvalues of ``B B^T`` crowd near 1 and no Krylov
  method converges within a few hundred products; from the first c of a column where it
  does not, that c and every smaller one take ``eigvalsh(B B^T)`` of the same explicit B
  (``eigh_fallback``; under the vmap only those entries pay for it). ``batch_size`` mixing
  fractions are vmapped at a time (default ``GRID_BATCH`` = 8: on a CPU more lanes push
  the blocks out of cache); ``steps`` bounds the Krylov products per instance.
  Another ``rate_fn`` is vmapped over the flattened grid as in :func:`sweep`
  (``batch_size`` instances at a time). Outside ``jit``, NaN entries are recomputed on
  the dense route, as in :func:`sweep`. With ``with_routes`` (default rate only) the
  result is ``(grid, routes)``, ``routes`` the entries' codes in :data:`GRID_ROUTES`
  (``eigh_fallback=False`` leaves the Krylov route's failures NaN, code 2, before that
  recomputation), for a count of what each route computed.
  """
  xla_env.warn_if_backend_started_unsafe()
  ridges, mixings = jnp.asarray(ridges), jnp.asarray(mixings)
  grid_c, grid_p = jnp.meshgrid(ridges, mixings, indexing="ij")
  flat = jnp.stack([grid_c.ravel(), grid_p.ravel()], axis=1)
  make = lambda v: clusters.problem(v[1], v[0])  # noqa: E731
  if rate_fn is not None:
    if with_routes:
      raise ValueError("with_routes: only for rate_grid's own route (rate_fn=None)")
    return sweep(make, flat, rate_fn, batch_size).reshape(grid_c.shape)
  krylov.check_steps(steps)
  _check_batch_size(batch_size)
  grid, routes = jax.jit(lambda cs, ps: _shared_kernel_grid(
      clusters, cs, ps, batch_size, steps, eigh_fallback))(ridges, mixings)
  if not isinstance(grid, jax.core.Tracer):
    grid = dense_where_nan(make, flat, grid.ravel()).reshape(grid_c.shape)
  return (grid, routes) if with_routes else grid


# The grid's Krylov cycles: basis vectors per cycle, and Ritz vectors carried from one c to
# the next (their thick restart keeps a cluster of top eigenvalues converging).
RESTART = 24
BLOCK = 4
# Mixing fractions vmapped at a time by default (benchmarks/rates.py: 1, 4, 8, 16 gave
# 15x, 37x, 28x, 33x the dense loop on 2 CPU cores).
GRID_BATCH = 8


def _shared_kernel_grid(clusters: TwoClusters, ridges: Array, mixings: Array,
                        batch_size: int | None, steps: int, eigh_fallback: bool = True
                        ) -> tuple[Array, Array]:
  order = jnp.argsort(-ridges)       # decreasing c: the top eigenvalues spread out most at
  sorted_c = ridges[order]           # large c, where the first (cold) start converges fastest

  def column(mixing):
    problem = clusters.problem(mixing, sorted_c[0])
    x0, x1 = problem.xs
    bases = _eigen_bases(problem)
    core = bases[0][1].T @ problem.gram(1, x0, x1) @ bases[1][1]
    return _symmetric_column(core, bases[0], bases[1], sorted_c, steps, eigh_fallback)

  size = min(GRID_BATCH if batch_size is None else batch_size, mixings.shape[0])
  rates, routes = lax.map(column, mixings, batch_size=size)     # (n_p, n_c), c sorted
  back = jnp.argsort(order)
  return rates.T[back], routes.T[back]
