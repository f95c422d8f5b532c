"""Distillation through a public reference set, for exact kernel ridge agents.

Kernel agents distilling through shared unlabelled inputs, after D-Distillation
(Bistritz, Mann & Bambos, 2020, eq. 2 and 4): agents share reference inputs ``Z``
(n_Z, d) and each agent fits its own data plus a weighted term pulling its
predictions on ``Z`` toward one mixing step of the previous round's predictions.

What it is, exactly: Jacobi best-response rounds on the penalty of eq. 2 with the
consensus target ``m_a = sum_b W[b, a] g_b(Z)``. It has *no* network soft-decision
state z (eq. 6 keeps z^n as a running consensus variable with its own gradient
step). D-Distillation's stationary points put every z^n at the global average
``mean_b s_b``, whatever the graph, so with kernel agents they solve
``v_a = b_a + H_a mean_b v_b`` (below). This recurrence's fixed point solves
``v_a = b_a + H_a sum_b W[b, a] v_b``: it coincides with D-Distillation's only
for ``W = 11^T / M`` (the default); for any other W it depends on W (a
neighbourhood equilibrium; tested). In the project's conventions (Gram blocks scaled by the total
private count ``N = sum_a N_a``, ridge ``c``), agent a's round-(t+1) model solves

    g_a^{t+1} = argmin_{g in H_a}  (1/N) sum_{i in a} (g(x_i) - y_i)^2
                                 + (lambda/N) sum_{j < n_Z} (g(z_j) - m_a^t(z_j))^2
                                 + c ||g||_{H_a}^2,

    m_a^t(Z) = sum_b W[b, a] g_b^t(Z),

with ``W`` a doubly stochastic (M, M) mixing matrix (default ``11^T / M``, the plain
average; ``W[b, a]`` is the weight agent a puts on agent b's value, as in
``neural``'s graphs and eq. 6 of the paper). ``lambda >= 0`` is the weight of one
public point relative to one private point: the paper's rho, which also multiplies
a *sum* over the reference set. ``N`` does not include ``n_Z``, so ``lambda = 0`` is
exactly the local fit and ``lambda = 1`` is a plain :class:`fedkrr.KRRLearner` fit
on the stacked data ``[X_a; Z]``. Round 0 is the local fit (no consensus yet).

Closed form. With ``D_a = diag(1_{N_a}, lambda 1_{n_Z})`` on the stacked inputs
``S_a = [X_a; Z]`` and ``G_a = D_a^{1/2} K^a[S_a, S_a] D_a^{1/2}``, the fit on
targets ``t`` is ``alpha = D_a^{1/2} (c I + G_a)^+ D_a^{1/2} t`` (minimum-norm when
``c = 0``) and ``g(x) = k_a(x, S_a) alpha / N``. It is linear in the targets, so
with ``v_t[a] = g_a^t(Z)`` the rounds are the affine recurrence

    v_{t+1}[a] = b_a + H_a sum_b W[b, a] v_t[b],   v_0[a] = local fit of a on Z,

``H_a`` (n_Z, n_Z) the public-to-public smoother of agent a and ``b_a`` its
predictions on Z when fitted on ``(y_a, 0)``. ``H_a`` is the (Z, Z) block of
``G_a (c I + G_a)^+`` up to the factor ``lambda`` on both sides, hence symmetric
positive semi-definite with eigenvalues below ``mu / (mu + c) < 1`` (``mu`` the
largest eigenvalue of ``G_a``). As ``||W||_2 <= 1`` for a doubly stochastic W, the
spectral radius of the recurrence is at most ``max_a ||H_a||_2 < 1`` whenever
``c > 0``: the rounds converge, for any lambda and any W, to the unique fixed point
``v* = (I - A)^{-1} b``.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools
from typing import Any
from typing import NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import linalg
from fedkrr._src.io.files import atomic_savefig
from fedkrr._src.learner import KRRModel
from fedkrr._src.metrics import mean_squared_error as _mse
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import ProblemError
from fedkrr._src.problem import check_eval_points
from fedkrr._src.problem import check_nonnegative
from fedkrr._src.protocols import check_rounds
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


# ----------------------------------------------------------------------------- learner


@pytree_dataclass
class WeightedKRRLearner:
  """Kernel ridge regression with a weight per training point.

  Fitting on ``(X, t, w)`` minimises ``(1/N) sum_i w_i (g(x_i) - t_i)^2 + c ||g||^2``:
  ``alpha = W^{1/2} (c I + W^{1/2} K W^{1/2})^+ W^{1/2} t`` with ``K = k(X, X) / N``
  (a symmetric solve through :func:`fedkrr.ridge_factor`; minimum-norm when c = 0),
  and the model predicts ``g(x) = k(x, X) alpha / N`` (a :class:`fedkrr.learners.KRRModel`).
  With ``weights=None`` (all ones) this is :class:`fedkrr.KRRLearner`.

  Attributes:
    kernel: the agent's kernel.
    ridge: the regularisation constant c >= 0.
    num_points: N, the scale of every Gram block.
    rtol: eigenvalue cut-off of the pseudo-inverse (c = 0); None for ``n * eps``.
  """

  kernel: Any
  ridge: Array
  num_points: Array
  rtol: float | None = dataclasses.field(default=None, metadata=dict(static=True))

  def fit(self, x: ArrayLike, targets: ArrayLike, weights: ArrayLike | None = None) -> KRRModel:
    """Weighted kernel ridge regression; ``weights=None`` weighs every point 1 (plain KRR)."""
    dtype = jnp.asarray(self.ridge).dtype
    x = jnp.asarray(x, dtype)
    if weights is None:
      weights = jnp.ones(x.shape[:1], dtype)
    return _weighted_fit(self, x, jnp.asarray(targets, dtype), jnp.asarray(weights, dtype))


def _scale_rows(r: Array, t: Array) -> Array:
  """``diag(r) @ t`` for t of shape (n,) or (n, k), broadcasting written out."""
  return r.reshape(r.shape + (1,) * (t.ndim - 1)) * t


@jax.jit
def _weighted_fit(learner: WeightedKRRLearner, x: Array, targets: Array,
                  weights: Array) -> KRRModel:
  root = jnp.sqrt(weights)
  gram = learner.kernel(x, x) / learner.num_points
  factor = linalg.ridge_factor(root[:, None] * gram * root[None, :], learner.ridge, learner.rtol)
  alpha = _scale_rows(root, factor.solve(_scale_rows(root, targets)))
  return KRRModel(learner.kernel, x, alpha, learner.num_points)


def weighted_krr_learners(problem: FederatedProblem,
                          rtol: float | None = None) -> tuple[WeightedKRRLearner, ...]:
  """One :class:`WeightedKRRLearner` per agent, with its kernel, the ridge and N."""
  n = jnp.asarray(problem.num_points, dtype=problem.ridge.dtype)
  return tuple(WeightedKRRLearner(k, problem.ridge, n, rtol) for k in problem.kernels)


# ----------------------------------------------------------------------------- validation


def _is_traced(value: Any) -> bool:
  return isinstance(value, jax.core.Tracer)


def check_weight(weight: Any) -> None:
  """Raises ``ProblemError`` unless ``weight`` (lambda) is a finite number >= 0."""
  if _is_traced(weight):
    if jnp.ndim(weight) != 0:
      raise ProblemError(f"weight: expected a scalar, got shape {jnp.shape(weight)}")
    return
  check_nonnegative(weight, "weight")


def check_mixing(mixing: Any, num_agents: int, dtype, atol: float = 1e-6) -> Array:
  """The (M, M) mixing matrix: ``11^T / M`` for None, else a checked doubly stochastic W.

  Raises:
    ProblemError: ``mixing`` is not (M, M), has a negative or non-finite entry, or a
      row or column that does not sum to 1 (within ``atol``).
  """
  m = num_agents
  if mixing is None:
    return jnp.full((m, m), 1.0 / m, dtype)
  if jnp.shape(mixing) != (m, m):
    raise ProblemError(f"mixing: expected an ({m}, {m}) matrix (one row and column per agent), "
                       f"got shape {jnp.shape(mixing)}")
  if _is_traced(mixing):
    return jnp.asarray(mixing, dtype)
  w = np.asarray(mixing, dtype=np.float64)
  if not np.all(np.isfinite(w)):
    raise ProblemError("mixing: expected finite entries")
  if np.any(w < 0):
    raise ProblemError(f"mixing: expected nonnegative entries, got minimum {w.min():.3g}")
  for axis, what in ((1, "row"), (0, "column")):
    sums = w.sum(axis=axis)
    if not np.allclose(sums, 1.0, rtol=0, atol=atol):
      raise ProblemError(f"mixing: expected a doubly stochastic matrix, got {what} sums in "
                         f"[{sums.min():.6g}, {sums.max():.6g}]")
  return jnp.asarray(w, dtype)


def _check_reference(problem: FederatedProblem, reference: Any) -> Array:
  if _is_traced(reference):
    d = problem.xs[0].shape[1]
    if reference.ndim != 2 or reference.shape[1] != d:
      raise ProblemError(f"reference: expected shape (n_Z, {d}), got {reference.shape}")
    z = jnp.asarray(reference, problem.ridge.dtype)
  else:
    z = check_eval_points(problem, reference, "reference")
  if z.shape[0] == 0:
    raise ProblemError("reference: expected at least one public point, got none")
  return z


def _check(problem, reference, weight, mixing, x_eval):
  check_weight(weight)
  z = _check_reference(problem, reference)
  w = check_mixing(mixing, problem.num_agents, problem.ridge.dtype)
  if _is_traced(x_eval):
    x = jnp.asarray(x_eval, problem.ridge.dtype)
  else:
    x = check_eval_points(problem, x_eval)
  return z, jnp.asarray(weight, problem.ridge.dtype), w, x


# ----------------------------------------------------------------------------- recurrence


class PublicDistillation(NamedTuple):
  """The affine recurrence of the agents' predictions on the reference set.

  ``v_{t+1}[a] = offset[a] + transfer[a] @ sum_b mixing[b, a] v_t[b]``, from
  ``v_0 = initial`` (the local fits); :meth:`matrix` is its (M n_Z, M n_Z) matrix A.

  Attributes:
    transfer: (M, n_Z, n_Z) ``H_a``: agent a's predictions on Z per unit of consensus.
    offset: (M, n_Z[, C]) ``b_a``: agent a's predictions on Z fitted on ``(y_a, 0)``.
    initial: (M, n_Z[, C]) the local fits' predictions on Z (round 0).
    mixing: (M, M) the doubly stochastic W.
  """

  transfer: Array
  offset: Array
  initial: Array
  mixing: Array

  def matrix(self) -> Array:
    """``A``: block (a, b) is ``W[b, a] H_a``."""
    m, n = self.transfer.shape[:2]
    return jnp.einsum("ajk,ba->ajbk", self.transfer, self.mixing).reshape(m * n, m * n)

  def consensus(self, v: Array) -> Array:
    """``m[a] = sum_b W[b, a] v[b]`` for v of shape (M, n_Z[, C])."""
    return jnp.einsum("ba,b...->a...", self.mixing, v)

  def step(self, v: Array) -> Array:
    """One round: ``v -> b + H (W^T ⊗ I) v``."""
    return self.offset + jnp.einsum("ajk,ak...->aj...", self.transfer, self.consensus(v))


class _Readout(NamedTuple):
  local: Array     # (M, n[, C]) round 0 at the evaluation points
  offset: Array    # (M, n[, C]) fitted on (y_a, 0)
  transfer: Array  # (M, n, n_Z) per unit of consensus on Z


def _operators(problem: FederatedProblem, reference: Array, weight: Array, points: Array,
               rtol: float | None) -> _Readout:
  """Each agent's fit, as linear maps of its consensus targets, read out at ``points``."""
  dtype = problem.ridge.dtype
  n_z = reference.shape[0]
  local, offset, transfer = [], [], []
  for a, (x, y) in enumerate(zip(problem.xs, problem.ys)):
    n_a = x.shape[0]
    local_factor = linalg.ridge_factor(problem.gram(a, x, x), problem.ridge, rtol)
    local.append(problem.gram(a, points, x) @ local_factor.solve(y))
    stacked = jnp.concatenate([x, reference], axis=0)
    root = jnp.concatenate([jnp.ones((n_a,), dtype),
                            jnp.full((n_z,), jnp.sqrt(weight), dtype)])
    gram = problem.gram(a, stacked, stacked)
    factor = linalg.ridge_factor(root[:, None] * gram * root[None, :], problem.ridge, rtol)
    readout = problem.gram(a, points, stacked) * root[None, :]   # k_a(P, S_a) D^{1/2} / N
    labels = jnp.concatenate([y, jnp.zeros((n_z,) + y.shape[1:], dtype)], axis=0)
    offset.append(readout @ factor.solve(_scale_rows(root, labels)))
    select = jnp.concatenate([jnp.zeros((n_a, n_z), dtype),
                              jnp.sqrt(weight) * jnp.eye(n_z, dtype=dtype)], axis=0)
    transfer.append(readout @ factor.solve(select))
  return _Readout(jnp.stack(local), jnp.stack(offset), jnp.stack(transfer))


def _split(ops: _Readout, n_z: int, mixing: Array) -> tuple[PublicDistillation, _Readout]:
  """Operators read out at ``[Z; x_eval]`` -> the recurrence on Z and the x_eval read-out."""
  head = lambda v: v[:, :n_z]  # noqa: E731
  tail = lambda v: v[:, n_z:]  # noqa: E731
  rec = PublicDistillation(head(ops.transfer), head(ops.offset), head(ops.local), mixing)
  return rec, _Readout(tail(ops.local), tail(ops.offset), tail(ops.transfer))


@functools.partial(jax.jit, static_argnames=("rtol",))
def _build(problem, reference, weight, mixing, x_eval, rtol):
  """The recurrence on Z and the read-out at x_eval: every factorisation, one compilation."""
  ops = _operators(problem, reference, weight, jnp.concatenate([reference, x_eval], axis=0), rtol)
  return _split(ops, reference.shape[0], mixing)


def _read(rec: PublicDistillation, out: _Readout, v: Array) -> Array:
  """Predictions at x_eval of the round after the one whose Z-predictions are ``v``."""
  return out.offset + jnp.einsum("ajk,ak...->aj...", out.transfer, rec.consensus(v))


def public_distillation(problem: FederatedProblem, reference: Array, weight: float | Array,
                        mixing: ArrayLike | None = None,
                        rtol: float | None = None) -> PublicDistillation:
  """The recurrence ``v_{t+1} = A v_t + b`` of the agents' predictions on ``reference``.

  Args:
    problem: a validated :class:`FederatedProblem` (M agents, N private points, ridge c).
    reference: the public inputs Z, shape (n_Z, d).
    weight: lambda >= 0, the weight of one public point relative to one private point.
    mixing: doubly stochastic (M, M) W (agent a averages ``sum_b W[b, a] g_b``);
      None for the plain average ``11^T / M``.
    rtol: pseudo-inverse cut-off when c = 0 (see :func:`fedkrr.ridge_factor`).

  Returns:
    A :class:`PublicDistillation` (module docstring; Bistritz et al., eq. 2 and 6).

  Raises:
    ProblemError: ``reference`` not (n_Z, d), ``weight`` negative, or ``mixing`` not a
      doubly stochastic (M, M) matrix.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> z = jnp.linspace(-1.0, 1.0, 5)[:, None]   # the public reference points
    >>> rec = fedkrr.public.public_distillation(problem, z, weight=1.0)
    >>> rec.step(rec.initial).shape   # every agent's round-1 predictions on z
    (2, 5)
  """
  z, lam, w, _ = _check(problem, reference, weight, mixing, reference)
  return _build(problem, z, lam, w, z, rtol)[0]   # read out at Z: one shape fewer to compile


@functools.partial(jax.jit, static_argnames=("rounds",))
def _scan(rec: PublicDistillation, out: _Readout, rounds: int) -> Array:
  def body(v, _):
    return rec.step(v), _read(rec, out, v)

  _, later = jax.lax.scan(body, rec.initial, None, length=rounds - 1)
  return jnp.concatenate([out.local[None], later], axis=0)


def public_distillation_trajectory(problem: FederatedProblem, reference: Array, rounds: int,
                                   x_eval: ArrayLike, weight: float | Array,
                                   mixing: ArrayLike | None = None,
                                   rtol: float | None = None) -> Array:
  """Every agent's predictions at ``x_eval`` for rounds 0..rounds-1, without refitting.

  One factorisation per agent, then a ``lax.scan`` of ``v -> b + H (W^T ⊗ I) v``.

  Args:
    problem: as in :func:`public_distillation`.
    reference: as in :func:`public_distillation`.
    weight: as in :func:`public_distillation`.
    mixing: as in :func:`public_distillation`.
    rtol: as in :func:`public_distillation`.
    rounds: T >= 1 (static).
    x_eval: evaluation points (n_eval, d).

  Returns:
    (rounds, M, n_eval[, C]): entry [t, a] is agent a's round-t model (round 0: local).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> z = jnp.linspace(-1.0, 1.0, 5)[:, None]
    >>> fedkrr.public.public_distillation_trajectory(problem, z, 50, x, weight=1.0).shape
    (50, 2, 8)
  """
  check_rounds(rounds)
  z, lam, w, x = _check(problem, reference, weight, mixing, x_eval)
  return _scan(*_build(problem, z, lam, w, x, rtol), rounds)


def _affine_power(rec: PublicDistillation, steps: Array, bits: int = 31) -> Array:
  """``v_steps = A^steps v_0 + sum_{s < steps} A^s b`` in one shot.

  Raises the homogenised matrix ``[[A, b], [0, I]]`` to the (traced) power ``steps``
  by repeated squaring over ``bits`` bits. Its powers stay bounded, since
  ``rho(A) <= 1`` for every valid input (module docstring).
  """
  m, n_z = rec.transfer.shape[:2]
  n = m * n_z
  b = rec.offset.reshape(n, -1)
  k = b.shape[1]
  a = rec.matrix()
  top = jnp.concatenate([a, b], axis=1)
  bottom = jnp.concatenate([jnp.zeros((k, n), a.dtype), jnp.eye(k, dtype=a.dtype)], axis=1)
  base = jnp.concatenate([top, bottom], axis=0)

  def body(i, carry):
    result, base = carry
    bit = (steps >> i) & 1
    result = jnp.where(bit == 1, result @ base, result)
    return result, base @ base

  power, _ = jax.lax.fori_loop(0, bits, body, (jnp.eye(n + k, dtype=a.dtype), base))
  v = power[:n, :n] @ rec.initial.reshape(n, -1) + power[:n, n:]
  return v.reshape(rec.offset.shape)


@jax.jit
def _at_round(rec: PublicDistillation, out: _Readout, t: Array) -> Array:
  later = _read(rec, out, _affine_power(rec, jnp.maximum(t - 1, 0)))
  return jnp.where(t == 0, out.local, later)


def public_distillation_round(problem: FederatedProblem, reference: Array, t: int | Array,
                              x_eval: ArrayLike, weight: float | Array,
                              mixing: ArrayLike | None = None,
                              rtol: float | None = None) -> Array:
  """Every agent's round-t predictions at ``x_eval`` in one shot (no iteration).

  ``v_{t-1} = A^{t-1} v_0 + sum_{s < t-1} A^s b`` is read off the power of the
  homogenised matrix ``[[A, b], [0, I]]`` (repeated squaring, 31 products, so
  ``0 <= t < 2^31``), valid for any spectral radius. ``t`` may be traced (vmap
  over rounds).

  Args:
    problem: as in :func:`public_distillation_trajectory`.
    reference: as in :func:`public_distillation_trajectory`.
    t: the round, an integer >= 0.
    x_eval: as in :func:`public_distillation_trajectory`.
    weight: as in :func:`public_distillation_trajectory`.
    mixing: as in :func:`public_distillation_trajectory`.
    rtol: as in :func:`public_distillation_trajectory`.

  Returns:
    (M, n_eval[, C]): agent a's round-t model at ``x_eval``.
  """
  if not _is_traced(t):
    if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or not 0 <= t < 2 ** 31:
      raise ProblemError(f"t: expected an integer round in [0, 2^31), got {t!r}")
  z, lam, w, x = _check(problem, reference, weight, mixing, x_eval)
  return _at_round(*_build(problem, z, lam, w, x, rtol), jnp.asarray(t, jnp.int32))


@jax.jit
def _fixed_point(rec: PublicDistillation, out: _Readout) -> closed_form.Limit:
  m, n_z = rec.transfer.shape[:2]
  a = rec.matrix()
  b = rec.offset.reshape((m * n_z,) + rec.offset.shape[2:])
  fixed = jnp.linalg.solve(jnp.eye(m * n_z, dtype=a.dtype) - a, b).reshape(rec.offset.shape)
  return closed_form.Limit(_read(rec, out, fixed), closed_form.spectral_radius(a, "auto"))


def public_distillation_limit(problem: FederatedProblem, reference: Array, x_eval: ArrayLike,
                              weight: float | Array, mixing: ArrayLike | None = None,
                              rtol: float | None = None) -> closed_form.Limit:
  """The t -> infinity fixed point ``v* = (I - A)^{-1} b`` read out at ``x_eval``.

  The rounds converge to it from any start iff the spectral radius of A is below
  1, which holds for every ``c > 0``, ``lambda >= 0`` and doubly stochastic W
  (``rho(A) <= max_a ||H_a||_2 < 1``; module docstring). With ``c = 0`` it can be 1
  (an agent interpolating Z copies the consensus: ``H_a = I``), and then the limit,
  if any, depends on the start and is not the value returned.

  Returns:
    A :class:`fedkrr.Limit`: ``predictions`` (M, n_eval[, C]), agent a's fixed-point
    model, and ``spectral_radius`` of A (:func:`fedkrr.rates.spectral_radius` with
    ``method="auto"``: Arnoldi above 256 rows, a general eigen-solver below or where
    Arnoldi did not converge).

  Raises:
    ProblemError: as :func:`public_distillation`.
  """
  z, lam, w, x = _check(problem, reference, weight, mixing, x_eval)
  return _fixed_point(*_build(problem, z, lam, w, x, rtol))


# ----------------------------------------------------------------------------- literal runner


def public_distillation_simulate(problem: FederatedProblem, reference: Array, rounds: int,
                                 x_eval: ArrayLike, weight: float | Array,
                                 mixing: ArrayLike | None = None,
                                 learners: Sequence[Any] | None = None,
                                 rtol: float | None = None) -> Array:
  """The protocol round by round: every agent refits on ``[X_a; Z]`` each round.

  Round 0 fits each agent on its own data; round t + 1 fits agent a on the stacked
  inputs ``[X_a; Z]`` with targets ``[y_a; sum_b W[b, a] g_b^t(Z)]`` and point weights
  ``[1, ..., 1, lambda, ..., lambda]``. Only ``learner.fit(x, targets, weights)`` and
  ``model.predict(x)`` are called.

  Args:
    problem: as in :func:`public_distillation`.
    reference: as in :func:`public_distillation`.
    weight: as in :func:`public_distillation`.
    mixing: as in :func:`public_distillation`.
    rounds: T >= 1.
    x_eval: evaluation points (n_eval, d).
    learners: one learner per agent with ``fit(x, targets, weights)``; default
      :func:`weighted_krr_learners` of the problem.
    rtol: the default learners' pseudo-inverse cut-off when c = 0 (pass the same
      to the closed form); ignored with ``learners``.

  Returns:
    (rounds, M, n_eval[, C]), the layout of :func:`public_distillation_trajectory`.
  """
  check_rounds(rounds)
  z, lam, w, x = _check(problem, reference, weight, mixing, x_eval)
  if learners is None:
    learners = weighted_krr_learners(problem, rtol)
  if len(learners) != problem.num_agents:
    raise ProblemError(f"learners: expected one learner per agent ({problem.num_agents}), "
                       f"got {len(learners)}")
  dtype = problem.ridge.dtype
  models = [learner.fit(xa, ya) for learner, xa, ya in zip(learners, problem.xs, problem.ys)]
  rows = [jnp.stack([model.predict(x) for model in models])]
  for _ in range(1, rounds):
    on_public = jnp.stack([model.predict(z) for model in models])
    consensus = jnp.einsum("ba,b...->a...", w, on_public)
    models = []
    for a, (learner, xa, ya) in enumerate(zip(learners, problem.xs, problem.ys)):
      weights = jnp.concatenate([jnp.ones(xa.shape[:1], dtype),
                                 jnp.full(z.shape[:1], lam, dtype)])
      models.append(learner.fit(jnp.concatenate([xa, z]), jnp.concatenate([ya, consensus[a]]),
                                weights))
    rows.append(jnp.stack([model.predict(x) for model in models]))
  return jnp.stack(rows)


# ----------------------------------------------------------------------------- coverage


class CoverageSweep(NamedTuple):
  """How the reference set changes the fixed point, one row per reference set.

  Attributes:
    test_mse: (R, M) mean squared error of agent a's fixed point on the test set.
    average_mse: (R,) the error of the agents' average fixed-point model.
    central_gap: (R, M) ``||g*_a - g^central_a|| / ||g^central_a||`` on the test points.
    spectral_radius: (R,) of the recurrence (convergence iff < 1).
    local_mse: (M,) the local fits' errors (lambda = 0, the no-distillation baseline).
    central_mse: (M,) the centralised fits' errors.
  """

  test_mse: Array
  average_mse: Array
  central_gap: Array
  spectral_radius: Array
  local_mse: Array
  central_mse: Array


def coverage_sweep(problem: FederatedProblem, references: Sequence[Array], x_test: ArrayLike,
                   y_test: ArrayLike, weight: float | Array, mixing: ArrayLike | None = None,
                   rtol: float | None = None) -> CoverageSweep:
  """The fixed point's test error and distance to the centralised model, per reference set.

  Use it to see what the public set's coverage of the agents' data does: a set far
  from every agent's inputs (relative to the kernels' length scales) leaves the
  local fits unchanged; one that covers the pooled inputs pulls the agents toward
  each other (toward the centralised model with ridge M c as lambda grows; see
  ``docs/public_distillation.md``).

  Args:
    problem: as in :func:`public_distillation`.
    weight: as in :func:`public_distillation`.
    mixing: as in :func:`public_distillation`.
    rtol: as in :func:`public_distillation`.
    references: R reference sets, each (n_Z_r, d) (sizes may differ).
    x_test: (n_test, d); y_test: (n_test,) or (n_test, C) like the labels.

  Returns:
    A :class:`CoverageSweep`.
  """
  x = check_eval_points(problem, x_test, "x_test")
  y = jnp.asarray(y_test, problem.ridge.dtype)
  if y.shape[:1] != x.shape[:1] or y.shape[1:] != problem.ys[0].shape[1:]:
    raise ProblemError(f"y_test: expected shape {x.shape[:1] + problem.ys[0].shape[1:]}, "
                       f"got {y.shape}")
  if len(references) == 0:
    raise ProblemError("references: expected at least one reference set")
  options = {} if rtol is None else {"rtol": rtol}   # the defaults share jit's cache
  central = closed_form.central(problem, x, **options)
  central_norm = jnp.sqrt(jnp.sum(central.reshape(central.shape[0], -1) ** 2, axis=1))
  rows = []
  for z in references:
    lim = public_distillation_limit(problem, z, x, weight, mixing, rtol)
    gap = jnp.sqrt(jnp.sum((lim.predictions - central).reshape(central.shape[0], -1) ** 2,
                           axis=1)) / central_norm
    rows.append((_mse(lim.predictions, y), _mse(jnp.mean(lim.predictions, axis=0)[None], y)[0],
                 gap, lim.spectral_radius))
  test_mse, average_mse, gaps, rhos = (jnp.stack(col) for col in zip(*rows))
  return CoverageSweep(test_mse, average_mse, gaps, rhos,
                       _mse(closed_form.local(problem, x, **options), y), _mse(central, y))


def plot_coverage(sweep: CoverageSweep, labels: Sequence[str], path: str | None = None,
                  title: str = "Public distillation: reference-set coverage"):
  """Bar chart of the fixed point's test error and central gap per reference set.

  matplotlib is imported here, not with the package.

  Args:
    sweep: the sweep (:func:`coverage_sweep`).
    labels: one label per reference set.
    path: if given, the figure is saved there (the format follows the extension).
    title: the figure's title.

  Returns:
    The ``matplotlib.figure.Figure`` (made without pyplot, so no backend is switched).

  Raises:
    ValueError: not one label per reference set.
  """
  from matplotlib.figure import Figure  # no pyplot: no backend switch, no global state

  if len(labels) != sweep.test_mse.shape[0]:
    raise ValueError(f"labels: expected one label per reference set "
                     f"({sweep.test_mse.shape[0]}), got {len(labels)}")
  test_mse = np.asarray(sweep.test_mse)
  gaps = np.asarray(sweep.central_gap)
  r, m = test_mse.shape
  pos = np.arange(r)
  width = 0.8 / m
  fig = Figure(figsize=(10, 3.8))
  ax_err, ax_gap = fig.subplots(1, 2)
  for a in range(m):
    ax_err.bar(pos + (a - (m - 1) / 2) * width, test_mse[:, a], width, label=f"agent {a}")
    ax_gap.bar(pos + (a - (m - 1) / 2) * width, gaps[:, a], width, label=f"agent {a}")
  for a in range(m):
    ax_err.axhline(float(sweep.local_mse[a]), color=f"C{a}", ls=":", lw=1)
  ax_err.axhline(float(np.mean(np.asarray(sweep.central_mse))), color="k", ls="--", lw=1,
                 label="centralised")
  ax_err.set_ylabel("test MSE of the fixed point (dotted: local)")
  ax_gap.set_ylabel("relative distance to the centralised model")
  for ax in (ax_err, ax_gap):
    ax.set_xticks(pos)
    ax.set_xticklabels(labels, rotation=20)
  ax_err.legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  if path is not None:
    atomic_savefig(fig, path, dpi=120)
  return fig
