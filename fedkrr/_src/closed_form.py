"""Closed forms of every protocol, for exact kernel ridge agents.

Every model in these protocols is a kernel ridge model ``g(x) = k_a(x, X_a) alpha / N``
of some agent a, and every fit is linear in its targets, ``alpha = S_a t`` with
``S_a = (c I + K^a_aa)^+``. Stacking the agents' coefficients into one vector of
length N turns each protocol into an affine recurrence

    x_{t+1} = A x_t + b,

with a read-out matrix to the evaluation points. The matrices are built from

* ``K`` (N x N): block (i, j) is ``K^j_ij = k_j(X_i, X_j) / N`` -- the predictions
  of agent j's models on agent i's inputs, i.e. the block system of Prop. VI/VII;
* ``O``: ``K`` with its diagonal blocks set to zero;
* ``S = blockdiag(S_a)``, and ``a0 = S y`` (every agent fitted on its labels).

Protocol by protocol (M agents, blocks indexed by agent):

* AKD from s: ``x_0 = a0`` restricted to block s, ``A = W`` where W keeps the
  blocks (i+1, i) of ``S O`` (agent i+1 fits agent i's predictions), ``b = 0``
  (Prop. II for M = 2, App. G);
* AvgKD: ``x_0 = a0``, ``A = S O / M``, ``b = a0 / M`` (Prop. V);
* PKD (in target space ``tau``, ``alpha = S tau``): ``x_0 = y``,
  ``A = (I + O S) / M``, ``b = 0`` (App. E);
* EKD: ``sigma_t = (-W)^t a0`` and the predictor after round t is the partial sum
  ``sum_{r <= t} sigma_r`` (eq. 9, 32);
* backfitting, Jacobi: ``x_0 = 0``, ``A = -S O``, ``b = a0``; Gauss-Seidel:
  ``A = -(I + S L)^{-1} S U``, ``b = (I + S L)^{-1} a0`` with L, U the strict
  block lower and upper parts of O.

Trajectories are computed by one jitted ``lax.scan`` of matrix-vector products
(no refitting, no refactorisation), limits by one linear solve
``x = (I - A)^{-1} b``, valid when the spectral radius of A is below 1.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

from fedkrr._src import linalg
from fedkrr._src.problem import FederatedProblem

Array = jax.Array


class Recurrence(NamedTuple):
  """The affine recurrence ``x_{t+1} = matrix @ x_t + offset`` from ``initial``."""

  matrix: Array   # (N, N)
  offset: Array   # (N,) or (N, C)
  initial: Array  # (N,) or (N, C)


class Blocks(NamedTuple):
  """The matrices every closed form is built from (see the module docstring)."""

  gram: Array                 # K, (N, N): block (i, j) = k_j(X_i, X_j) / N
  solves: tuple[Array, ...]   # S_a = (c I + K^a_aa)^+, (N_a, N_a)
  labels: Array               # y stacked, (N,) or (N, C)


def blocks(problem: FederatedProblem, rtol: float | None = None) -> Blocks:
  """Builds ``K`` (block (i, j) with agent j's kernel) and every ``S_a``."""
  rows = [jnp.concatenate([problem.gram(j, xi, xj) for j, xj in enumerate(problem.xs)], axis=1)
          for xi in problem.xs]
  gram = jnp.concatenate(rows, axis=0)
  solves = tuple(
      linalg.ridge_factor(problem.gram(a, x, x), problem.ridge, rtol).matrix()
      for a, x in enumerate(problem.xs))
  return Blocks(gram, solves, problem.pooled_y())


def _slices(problem: FederatedProblem) -> list[slice]:
  return [slice(o, o + n) for o, n in zip(problem.offsets, problem.sizes)]


def _mask(problem: FederatedProblem, keep) -> Array:
  """0/1 matrix (N x N) keeping the blocks (i, j) with ``keep(i, j)``."""
  rows = [jnp.concatenate([jnp.full((ni, nj), 1.0 if keep(i, j) else 0.0, problem.ridge.dtype)
                           for j, nj in enumerate(problem.sizes)], axis=1)
          for i, ni in enumerate(problem.sizes)]
  return jnp.concatenate(rows, axis=0)


def _off_diagonal(problem: FederatedProblem, gram: Array) -> Array:
  return gram * _mask(problem, lambda i, j: i != j)


def _apply_s(problem: FederatedProblem, b: Blocks, x: Array) -> Array:
  """``S @ x`` blockwise (x of shape (N, ...))."""
  return jnp.concatenate([s @ x[sl] for s, sl in zip(b.solves, _slices(problem))], axis=0)


def _right_apply_s(problem: FederatedProblem, b: Blocks, x: Array) -> Array:
  """``x @ S`` blockwise (x of shape (..., N))."""
  return jnp.concatenate([x[:, sl] @ s for s, sl in zip(b.solves, _slices(problem))], axis=1)


def _s_o(problem: FederatedProblem, b: Blocks) -> Array:
  return _apply_s(problem, b, _off_diagonal(problem, b.gram))


def akd_step_matrix(problem: FederatedProblem, b: Blocks) -> Array:
  """W: one AKD round, agent i's coefficients -> agent (i+1) mod M's (N x N)."""
  m = problem.num_agents
  return _s_o(problem, b) * _mask(problem, lambda i, j: i == (j + 1) % m)


def _restrict(problem: FederatedProblem, x: Array, agent: int) -> Array:
  selector = jnp.concatenate([jnp.full((n,), 1.0 if a == agent else 0.0, x.dtype)
                              for a, n in enumerate(problem.sizes)])
  return x * selector.reshape((-1,) + (1,) * (x.ndim - 1))


def recurrence(problem: FederatedProblem, protocol: str, start: int = 0,
               b: Blocks | None = None) -> Recurrence:
  """The affine recurrence of ``protocol`` (see the module docstring)."""
  if b is None:
    b = blocks(problem)
  n = problem.num_points
  m = problem.num_agents
  eye = jnp.eye(n, dtype=b.gram.dtype)
  zeros = jnp.zeros_like(b.labels)
  a0 = _apply_s(problem, b, b.labels)
  if protocol in ("akd", "ekd"):
    w = akd_step_matrix(problem, b)
    if protocol == "akd":
      return Recurrence(w, zeros, _restrict(problem, a0, start))
    return Recurrence(-w, zeros, a0)
  if protocol == "avgkd":
    return Recurrence(_s_o(problem, b) / m, a0 / m, a0)
  if protocol == "pkd":
    o_s = _right_apply_s(problem, b, _off_diagonal(problem, b.gram))
    return Recurrence((eye + o_s) / m, zeros, b.labels)
  if protocol == "backfit-jacobi":
    return Recurrence(-_s_o(problem, b), a0, zeros)
  if protocol == "backfit-gs":
    s_o = _s_o(problem, b)
    lower = s_o * _mask(problem, lambda i, j: j < i)
    upper = s_o * _mask(problem, lambda i, j: j > i)
    solve = functools.partial(jax.scipy.linalg.solve_triangular, eye + lower,
                              lower=True, unit_diagonal=True)
    return Recurrence(-solve(upper), solve(a0), zeros)
  raise ValueError(f"protocol: expected one of akd, avgkd, pkd, ekd, backfit-gs, "
                   f"backfit-jacobi, got {protocol!r}")


def readout(problem: FederatedProblem, x_eval: Array) -> list[Array]:
  """Per-agent read-outs ``E_a = k_a(x_eval, X_a) / N``, each (n_eval, N_a)."""
  return [problem.gram(a, x_eval, x) for a, x in enumerate(problem.xs)]


def _scan(rec: Recurrence, steps: int) -> Array:
  """x_0 .. x_{steps-1} of the recurrence, stacked on axis 0."""

  def body(x, _):
    return rec.matrix @ x + rec.offset, x

  _, xs = lax.scan(body, rec.initial, None, length=steps)
  return xs


def _per_agent(problem: FederatedProblem, evals: list[Array], coeffs: Array) -> Array:
  """(T, N, ...) stacked coefficients -> (T, M, n_eval, ...) per-agent predictions."""
  preds = [jnp.einsum("nk,tk...->tn...", e, coeffs[:, sl])
           for e, sl in zip(evals, _slices(problem))]
  return jnp.stack(preds, axis=1)


@functools.partial(jax.jit, static_argnames=("protocol", "rounds", "start", "rtol"))
def trajectory(problem: FederatedProblem, protocol: str, rounds: int, x_eval: Array,
               start: int = 0, rtol: float | None = None) -> Array:
  """Predictions of every round 0..rounds-1 at ``x_eval``, without refitting.

  The layout equals that of :func:`fedkrr.simulate` with kernel ridge learners:
  ``(rounds, M, n_eval[, C])`` for AvgKD and PKD (agent i's round-t model),
  ``(rounds, n_eval[, C])`` otherwise (AKD: the round-t model of the run from
  ``start``; EKD: the partial sum over rounds 0..t; backfitting: the sum of the
  agents' models after sweep t + 1).

  Args:
    problem: a validated :class:`FederatedProblem`.
    protocol: one of akd, avgkd, pkd, ekd, backfit-gs, backfit-jacobi.
    rounds: the number of rounds T >= 1 (static).
    x_eval: evaluation points, shape (n_eval, d).
    start: the starting agent of AKD.
    rtol: pseudo-inverse cut-off when c = 0 (see :func:`fedkrr.ridge_factor`).

  Returns:
    The predictions, in ``problem``'s dtype.

  Example:
    >>> preds = fedkrr.trajectory(problem, "avgkd", 100, x_test)  # (100, M, n_test)
  """
  b = blocks(problem, rtol)
  rec = recurrence(problem, protocol, start, b)
  evals = readout(problem, x_eval)
  stacked_eval = jnp.concatenate(evals, axis=1)
  if protocol in ("backfit-gs", "backfit-jacobi"):
    rec = rec._replace(initial=rec.matrix @ rec.initial + rec.offset)  # after sweep 1
  coeffs = _scan(rec, rounds)
  if protocol == "avgkd":
    return _per_agent(problem, evals, coeffs)
  if protocol == "pkd":
    alphas = jax.vmap(lambda tau: _apply_s(problem, b, tau))(coeffs)
    return _per_agent(problem, evals, alphas)
  if protocol == "ekd":
    coeffs = jnp.cumsum(coeffs, axis=0)
  return jnp.einsum("nk,tk...->tn...", stacked_eval, coeffs)


class Limit(NamedTuple):
  """A protocol's t -> infinity limit and whether the iteration converges to it.

  Attributes:
    predictions: the fixed point's predictions at the evaluation points, in the
      per-round layout of :func:`trajectory` without the round axis.
    spectral_radius: of the recurrence matrix (for EKD, of the AKD round W);
      the limit exists (and the iteration reaches it from any start) iff < 1.
  """

  predictions: Array
  spectral_radius: Array

  @property
  def converges(self) -> bool:
    return bool(self.spectral_radius < 1.0)


def spectral_radius(matrix: Array) -> Array:
  """``max |eig(matrix)|``, the asymptotic contraction factor per round."""
  return jnp.max(jnp.abs(jnp.linalg.eigvals(matrix)))


@functools.partial(jax.jit, static_argnames=("protocol", "start", "rtol"))
def limit(problem: FederatedProblem, protocol: str, x_eval: Array, start: int = 0,
          rtol: float | None = None) -> Limit:
  """The t -> infinity limit of a protocol, by one linear solve.

  * AKD and PKD: 0 (Prop. II; App. E), reached iff the spectral radius < 1.
  * AvgKD: ``x = (I - S O / M)^{-1} a0 / M``; it solves system (8) of Prop. VI
    (M = 2: ``alpha_1 = beta_1 / 2``, ``alpha_2 = -beta_2 / 2``).
  * EKD: ``(I + W)^{-1} a0``. For M = 2 this is the block system
    ``(c I + K) alpha = y`` of Prop. VII; for M > 2 the cyclic scheme of eq. (32)
    couples each agent to its predecessor only.
  * Backfitting (both orders): the block system ``(c I + K) alpha = y``; with a
    shared kernel it is the centralised model at every x.

  The spectral radius uses a general eigen-solver, available on CPU.
  """
  b = blocks(problem, rtol)
  rec = recurrence(problem, protocol, start, b)
  evals = readout(problem, x_eval)
  stacked_eval = jnp.concatenate(evals, axis=1)
  eye = jnp.eye(problem.num_points, dtype=b.gram.dtype)
  rho = spectral_radius(rec.matrix)
  if protocol in ("akd", "pkd"):
    fixed = jnp.zeros_like(rec.initial)
  else:
    fixed = jnp.linalg.solve(eye - rec.matrix, rec.offset if protocol != "ekd" else rec.initial)
  if protocol == "avgkd":
    return Limit(_per_agent(problem, evals, fixed[None])[0], rho)
  if protocol == "pkd":
    return Limit(jnp.zeros((problem.num_agents,) + x_eval.shape[:1] + fixed.shape[1:],
                           fixed.dtype), rho)
  return Limit(stacked_eval @ fixed, rho)


@functools.partial(jax.jit, static_argnames=("rtol",))
def central(problem: FederatedProblem, x_eval: Array, rtol: float | None = None) -> Array:
  """Each agent's centralised optimum g^a* (eq. 5) at ``x_eval``: (M, n_eval[, C])."""
  x_all, y_all = problem.pooled_x(), problem.pooled_y()
  preds = []
  for a in range(problem.num_agents):
    factor = linalg.ridge_factor(problem.gram(a, x_all, x_all), problem.ridge, rtol)
    preds.append(problem.gram(a, x_eval, x_all) @ factor.solve(y_all))
  return jnp.stack(preds)


@functools.partial(jax.jit, static_argnames=("rtol",))
def local(problem: FederatedProblem, x_eval: Array, rtol: float | None = None) -> Array:
  """Each agent's model fitted on its own data only, at ``x_eval``: (M, n_eval[, C])."""
  preds = []
  for a, (x, y) in enumerate(zip(problem.xs, problem.ys)):
    factor = linalg.ridge_factor(problem.gram(a, x, x), problem.ridge, rtol)
    preds.append(problem.gram(a, x_eval, x) @ factor.solve(y))
  return jnp.stack(preds)
