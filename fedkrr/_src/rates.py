"""Degradation rates of AKD (Prop. IV and VIII) and their sweeps.

One pass of AKD around the cycle of agents, started at agent s, maps agent s's
coefficients ``alpha`` to ``W_s alpha`` with
``W_s = T_{s, s-1} ... T_{s+2, s+1} T_{s+1, s}`` and ``T_ij = S_i K^j_ij`` (the
transfer blocks of :func:`fedkrr.transfer`). Its spectral radius ``rho`` is the
degradation rate: the models shrink like ``rho^(t / M)``. For M = 2 it is the
spectral radius of the two-round operator ``A`` of Prop. III, and with one
shared kernel ``rho = cos^2(phi)``, phi the smallest principal angle between the
agents' subspaces in the G geometry (App. B).

The sweeps are single jitted, vmapped calls over a grid of one parameter.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
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


@functools.partial(jax.jit, static_argnames=("start",))
def degradation_rate(problem: FederatedProblem, start: int = 0) -> Array:
  """The degradation rate ``rho``: spectral radius of one AKD cycle (Prop. IV, VIII).

  ``rho < 1`` means AKD decays to 0 geometrically, by ``rho`` per cycle of M
  rounds (two rounds for M = 2); smaller is faster. It does not depend on
  ``start`` (the cycle operators are cyclic products of the same factors).

  Uses a general eigen-solver (``jnp.linalg.eigvals``).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> rho = fedkrr.degradation_rate(problem)   # AKD loses a factor rho every two rounds
    >>> 0.0 < float(rho) < 1.0
    True
  """
  return closed_form.spectral_radius(cycle_operator(problem, start))


def shared_kernel_rate(problem: FederatedProblem) -> Array:
  """``cos^2(phi)`` of the smallest principal angle (kernel of agent 1); equals
  :func:`degradation_rate` when both agents share that kernel (App. B)."""
  return principal_cosines(problem, 0)[0] ** 2


def sweep(make_problem_fn: Callable[[Array], FederatedProblem], values: Array,
          rate_fn: Callable[[FederatedProblem], Array] | None = None) -> Array:
  """``rate_fn(make_problem_fn(v))`` for every ``v`` in ``values``, as one vmapped jitted call.

  Args:
    make_problem_fn: a function of one traced scalar returning a problem (its
      shapes must not depend on the value).
    values: the parameter grid, shape (n,) (or (n, k) for k parameters).
    rate_fn: the quantity to sweep; :func:`degradation_rate` by default.

  Returns:
    (n,) rates.
  """
  rate_fn = degradation_rate if rate_fn is None else rate_fn
  return jax.jit(jax.vmap(lambda v: rate_fn(make_problem_fn(v))))(jnp.asarray(values))


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
              rate_fn: Callable[[FederatedProblem], Array] | None = None) -> Array:
  """``rho`` on the grid ``ridges x mixings`` as one vmapped jitted call: (n_c, n_p)."""
  rate_fn = degradation_rate if rate_fn is None else rate_fn
  grid_c, grid_p = jnp.meshgrid(jnp.asarray(ridges), jnp.asarray(mixings), indexing="ij")
  flat = sweep(lambda v: clusters.problem(v[1], v[0]), jnp.stack([grid_c.ravel(),
                                                                 grid_p.ravel()], axis=1),
               rate_fn)
  return flat.reshape(grid_c.shape)
