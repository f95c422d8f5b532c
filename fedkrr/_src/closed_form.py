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
* AvgKD: ``x_0 = a0``, ``A = S O / M``, ``b = a0 / M`` (Prop. V); weighted AvgKD
  with agent weights w: ``A = S O diag(w)``, ``b = diag(w) a0`` (blockwise: block
  (i, j) of A times w_j, block i of b times w_i; w = 1/M is AvgKD);
* PKD (in target space ``tau``, ``alpha = S tau``): ``x_0 = y``,
  ``A = (I + O S) / M``, ``b = 0`` (App. E);
* pkd-mean (the authors' code's PKD): ``x_0 = a0``, ``A = S K / M``, ``b = 0``
  (``K`` with its diagonal blocks: every agent fits the mean of all M models,
  its own included). In target space the map is ``K S / M``, which for c > 0
  equals PKD's ``(I + O S) / M`` minus ``c S / M`` (``K^a_aa S_a = I - c S_a``);
  with c = 0 and invertible ``K^a_aa`` the two protocols are the same;
* EKD: ``sigma_t = (-W)^t a0`` and the predictor after round t is the partial sum
  ``sum_{r <= t} sigma_r`` (eq. 9, 32);
* backfitting, Jacobi: ``x_0 = 0``, ``A = -S O``, ``b = a0``; Gauss-Seidel:
  ``A = -(I + S L)^{-1} S U``, ``b = (I + S L)^{-1} a0`` with L, U the strict
  block lower and upper parts of O.

Each agent's ``c I + K^a_aa`` is factorised once, and only the transfer blocks
``S_i K^j_ij`` a protocol uses are formed (by triangular solves). Trajectories
are then one jitted ``lax.scan`` of matrix-vector products over the blocks that
are not zero by construction (no refitting, no refactorisation); limits are one
linear solve ``x = (I - A)^{-1} b``, valid when the spectral radius of A is below 1.

Numerics: :func:`trajectory` and :func:`limit` run these recurrences on the
agents' *targets* ``tau`` (``alpha = S tau``) rather than on the coefficients:
the blocks become ``K^j_ij S_j`` (agent j's fit on its targets, read on agent i's
inputs) and the read-out ``E_a S_a``, with ``E_a = k_a(x_eval, X_a) / N``. Both
are smoothers, bounded whatever c. On coefficients, an ill-conditioned
``c I + K^a_aa`` (a small c, a low-rank kernel such as the linear one) gives
coefficients of size ``|y| / c`` whose components the next Gram block cancels
exactly; an explicit ``S_i K^j_ij`` does not cancel them, and its rounding
errors, ``eps cond`` times those sizes, reach the predictions: errors of order
``eps cond^2`` where literal refits have ``eps cond`` (``docs/closed_forms.md``,
"Accuracy"). The target-space matrices have the same non-zero eigenvalues (``XY``
and ``YX``), the same fixed points read out, and every protocol keeps the
literal rounds' order of accuracy. :func:`recurrence` still returns the
coefficient-space recurrence of the formulas above.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

from fedkrr._src import krylov
from fedkrr._src import linalg
from fedkrr._src import protocols
from fedkrr._src.names import ProtocolInfo
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import check_params
from fedkrr._src.names import make_params
from fedkrr._src.names import protocol_info
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


class Recurrence(NamedTuple):
  """``x_{t+1} = (identity * I + B) x_t + offset`` from ``initial``.

  ``B`` (N x N) is given by its blocks that are not zero by construction, keyed
  by ``(i, j)`` (agent i's rows, agent j's columns); :func:`recurrence_matrix` assembles it.
  """

  blocks: dict[tuple[int, int], Array]
  identity: float
  offset: Array   # (N,) or (N, C)
  initial: Array  # (N,) or (N, C)


def factors(problem: FederatedProblem, rtol: float | None = None) -> tuple[linalg.RidgeFactor, ...]:
  """Every agent's :class:`RidgeFactor` of ``c I + K^a_aa``: ``S_a = (c I + K^a_aa)^+``."""
  return tuple(linalg.ridge_factor(problem.gram(a, x, x), problem.ridge, rtol)
               for a, x in enumerate(problem.xs))


def transfer(problem: FederatedProblem, fs, i: int, j: int) -> Array:
  """``S_i K^j_ij`` (N_i x N_j): agent i's coefficients after fitting agent j's predictions."""
  return fs[i].solve(problem.gram(j, problem.xs[i], problem.xs[j]))


def _slices(problem: FederatedProblem) -> list[slice]:
  return [slice(o, o + n) for o, n in zip(problem.offsets, problem.sizes)]


def _stack_solve(problem: FederatedProblem, fs, x: Array) -> Array:
  """``S @ x`` blockwise, x of shape (N, ...)."""
  return jnp.concatenate([f.solve(x[sl]) for f, sl in zip(fs, _slices(problem))], axis=0)


def recurrence_matrix(problem: FederatedProblem, rec: Recurrence) -> Array:
  """The recurrence matrix ``identity * I + B`` as one (N x N) array."""
  sizes = problem.sizes
  dtype = rec.initial.dtype
  rows = []
  for i, ni in enumerate(sizes):
    row = []
    for j, nj in enumerate(sizes):
      block = rec.blocks.get((i, j), jnp.zeros((ni, nj), dtype))
      if i == j and rec.identity:
        block = block + rec.identity * jnp.eye(ni, dtype=dtype)
      row.append(block)
    rows.append(jnp.concatenate(row, axis=1))
  return jnp.concatenate(rows, axis=0)


def _others(m: int) -> list[tuple[int, int]]:
  return [(i, j) for i in range(m) for j in range(m) if i != j]


def _cycle(m: int) -> list[tuple[int, int]]:
  return [((j + 1) % m, j) for j in range(m)]


def _per_point(problem: FederatedProblem, values, like: Array) -> Array:
  """``values[a]`` on each of agent a's points, shaped to multiply ``like`` (N[, C])."""
  column = jnp.concatenate([jnp.full((n,), values[a], like.dtype)
                            for a, n in enumerate(problem.sizes)])
  return column.reshape((-1,) + (1,) * (like.ndim - 1))


def _akd(problem, params, fs, block, own):
  keep = _per_point(problem, [float(a == params.start) for a in range(problem.num_agents)],
                    problem.pooled_y())
  return Recurrence({ij: block(*ij) for ij in _cycle(problem.num_agents)}, 0.0,
                    jnp.zeros_like(problem.pooled_y()), own * keep)


def _ekd(problem, params, fs, block, own):
  return Recurrence({ij: -block(*ij) for ij in _cycle(problem.num_agents)}, 0.0,
                    jnp.zeros_like(problem.pooled_y()), own)


def _avgkd(problem, params, fs, block, own):
  m = problem.num_agents
  return Recurrence({ij: block(*ij) / m for ij in _others(m)}, 0.0, own / m, own)


def _weighted_avgkd(problem, params, fs, block, own):
  w = params.agent_weights(problem.num_agents)
  return Recurrence({(i, j): block(i, j) * w[j] for i, j in _others(problem.num_agents)}, 0.0,
                    own * _per_point(problem, w, problem.pooled_y()), own)


def _pkd(problem, params, fs, block, own):
  # Target space: tau_{t+1} = (tau_t + O S tau_t) / M, with (O S)_ij = K^j_ij S_j.
  m, labels = problem.num_agents, problem.pooled_y()
  return Recurrence({(i, j): _predictor(problem, fs, i, j) / m for i, j in _others(m)},
                    1.0 / m, jnp.zeros_like(labels), labels)


def _pkd_mean(problem, params, fs, block, own):
  # Every agent fits the mean of all M models, its own included.
  m = problem.num_agents
  every = [(i, j) for i in range(m) for j in range(m)]
  return Recurrence({ij: block(*ij) / m for ij in every}, 0.0,
                    jnp.zeros_like(problem.pooled_y()), own)


def _backfit_jacobi(problem, params, fs, block, own):
  return Recurrence({ij: -block(*ij) for ij in _others(problem.num_agents)}, 0.0, own,
                    jnp.zeros_like(problem.pooled_y()))


def _backfit_gs(problem, params, fs, block, own):
  # (I + L) x_{k+1} = own - U x_k, with L, U the strict block triangles of the blocks
  # (their diagonal blocks are zero).
  m, zeros = problem.num_agents, jnp.zeros_like(problem.pooled_y())
  o = recurrence_matrix(problem, Recurrence({ij: block(*ij) for ij in _others(m)}, 0.0, zeros,
                                            zeros))
  lower, upper = jnp.tril(o, -1), jnp.triu(o, 1)
  eye = jnp.eye(problem.num_points, dtype=o.dtype)
  solve = functools.partial(jax.scipy.linalg.solve_triangular, eye + lower, lower=True,
                            unit_diagonal=True)
  matrix = -solve(upper)
  sl = _slices(problem)
  blocks = {(i, j): matrix[sl[i], sl[j]] for i in range(m) for j in range(1, m)}
  return Recurrence(blocks, 0.0, solve(own), zeros)


RecurrenceFn = Callable[[FederatedProblem, ProtocolParams, tuple[linalg.RidgeFactor, ...],
                         Callable[[int, int], Array], Array], Recurrence]
"""``(problem, params, fs, block, own) -> Recurrence``: a protocol's recurrence from
``block(i, j)`` (what agent i's state gets from agent j's: :func:`transfer` on
coefficients, :func:`_predictor` on targets) and ``own`` (every agent fitted on its own
labels: ``S y`` on coefficients, ``y`` on targets); ``fs`` are the agents' factors."""

RECURRENCES: dict[str, RecurrenceFn] = {
    "akd": _akd,
    "avgkd": _avgkd,
    "weighted-avgkd": _weighted_avgkd,
    "pkd": _pkd,               # in targets whichever space is asked
    "pkd-mean": _pkd_mean,
    "ekd": _ekd,
    "backfit-gs": _backfit_gs,
    "backfit-jacobi": _backfit_jacobi,
}
"""Each protocol's recurrence (module docstring), by name: this layer's one mapping from
the protocol to its behaviour (``fedkrr.protocols.register_protocol`` adds to it)."""


def _recurrence_of(problem: FederatedProblem, row: ProtocolInfo, params: ProtocolParams, fs,
                   block, own: Array) -> Recurrence:
  """The recurrence of the protocol of ``row`` (:data:`RECURRENCES`)."""
  if row.name not in RECURRENCES:
    raise ValueError(f"protocol: {row.name} has no closed form")
  return RECURRENCES[row.name](problem, params, fs, block, own)


def recurrence(problem: FederatedProblem, protocol: str, start: int | None = None,
               fs: tuple[linalg.RidgeFactor, ...] | None = None,
               params: ProtocolParams | None = None) -> Recurrence:
  """The affine recurrence of ``protocol`` on stacked coefficients (module docstring)."""
  if fs is None:
    fs = factors(problem)
  return _recurrence_of(problem, protocol_info(protocol), make_params(params, start), fs,
                        functools.partial(transfer, problem, fs),
                        _stack_solve(problem, fs, problem.pooled_y()))


def _predictor(problem: FederatedProblem, fs, i: int, j: int) -> Array:
  """``K^j_ij S_j`` (N_i x N_j): agent j's fit on targets, predicted on agent i's inputs."""
  return fs[j].solve(problem.gram(j, problem.xs[i], problem.xs[j]).T).T


def target_recurrence(problem: FederatedProblem, protocol: str, start: int | None = None,
                      fs: tuple[linalg.RidgeFactor, ...] | None = None,
                      params: ProtocolParams | None = None) -> Recurrence:
  """:func:`recurrence` on the agents' targets ``tau`` (``alpha = S tau``), blocks ``K^j_ij S_j``.

  Round by round the same protocol: ``tau`` holds the targets each agent fits (AKD,
  EKD: the current model's agent), so ``A_tau = S^{-1} A S`` where S is invertible
  and ``A_tau`` has the non-zero eigenvalues of A in any case (module docstring,
  "Numerics"). Read out with :func:`target_readout`.
  """
  if fs is None:
    fs = factors(problem)
  return _recurrence_of(problem, protocol_info(protocol), make_params(params, start), fs,
                        functools.partial(_predictor, problem, fs), problem.pooled_y())


def target_readout(problem: FederatedProblem, x_eval: ArrayLike,
                   fs: tuple[linalg.RidgeFactor, ...] | None = None) -> list[Array]:
  """Per-agent read-outs of targets ``E_a S_a`` (n_eval, N_a): a fit on ``tau`` predicts
  ``E_a S_a tau`` at ``x_eval``."""
  if fs is None:
    fs = factors(problem)
  return [f.solve(e.T).T for f, e in zip(fs, readout(problem, x_eval))]


def _check_arguments(problem: FederatedProblem, protocol: str, params: ProtocolParams,
                     rounds: int = 1) -> ProtocolInfo:
  row = protocol_info(protocol)
  check_params(protocol, params, problem.num_agents)
  protocols.check_rounds(rounds)
  if not row.closed_form:
    raise ValueError(f"protocol: {protocol} has no closed form")
  return row


def readout(problem: FederatedProblem, x_eval: ArrayLike) -> list[Array]:
  """Per-agent read-outs ``E_a = k_a(x_eval, X_a) / N``, each (n_eval, N_a)."""
  return [problem.gram(a, x_eval, x) for a, x in enumerate(problem.xs)]


def _scan(problem: FederatedProblem, rec: Recurrence, steps: int, every: int = 1,
          accumulate: bool = False) -> Array:
  """x_0, x_k, x_2k, ... (k = ``every``, rounds < ``steps``) of the recurrence, on axis 0.

  With ``accumulate``, the partial sums ``x_0 + ... + x_t`` of those rounds instead.
  Each step is memory-bound (one pass over the matrix), so only the blocks that
  are not zero by construction are touched.
  """
  slices = _slices(problem)
  m = problem.num_agents

  def advance(x):
    parts = [x[sl] for sl in slices]
    new = []
    for i, sl in enumerate(slices):
      row = rec.offset[sl] + rec.identity * parts[i]
      for j in range(m):
        if (i, j) in rec.blocks:
          row = row + rec.blocks[i, j] @ parts[j]
      new.append(row)
    return jnp.concatenate(new, axis=0)

  if every == 1 and not accumulate:
    _, xs = lax.scan(lambda x, _: (advance(x), x), rec.initial, None, length=steps)
    return xs

  def chunk(carry, _):
    x, total = carry
    out = total + x if accumulate else x
    inner = lambda _, c: (advance(c[0]), c[1] + c[0] if accumulate else c[1])
    return lax.fori_loop(0, every, inner, (x, total)), out

  zeros = jnp.zeros_like(rec.initial)
  _, xs = lax.scan(chunk, (rec.initial, zeros), None, length=-(-steps // every))
  return xs


def _akd_scan(problem: FederatedProblem, rec: Recurrence, steps: int, start: int,
              evals: list[Array], every: int = 1) -> Array:
  """AKD predictions of rounds 0, k, 2k, ... < steps (k = ``every``, a multiple of M):
  one block per round, a cycle per scan step."""
  m = problem.num_agents
  sl = _slices(problem)[start]

  def cycle(x, _):
    preds = []
    for r in range(m):
      a = (start + r) % m
      preds.append(evals[a] @ x)
      x = rec.blocks[(a + 1) % m, a] @ x
    return x, jnp.stack(preds)

  if every == 1:
    cycles = -(-steps // m)
    _, preds = lax.scan(cycle, rec.initial[sl], None, length=cycles)
    return preds.reshape((cycles * m,) + preds.shape[2:])[:steps]

  def chunk(x, _):   # round t = multiple of every, hence of M: the start agent's round
    return lax.fori_loop(0, every // m, lambda _, x: cycle(x, None)[0], x), evals[start] @ x

  _, preds = lax.scan(chunk, rec.initial[sl], None, length=-(-steps // every))
  return preds


def check_every(every: int, protocol: str, num_agents: int) -> None:
  """Raises ``ValueError`` unless ``every`` >= 1 (and, for AKD, a multiple of M)."""
  protocols.check_every(every)
  if protocol_info(protocol).one_fit_per_round and every > 1 and every % num_agents:
    raise ValueError(f"every: AKD's rounds cycle through the {num_agents} agents, so keeping "
                     f"every k-th round needs k a multiple of {num_agents}, got {every}")


def _per_agent(problem: FederatedProblem, evals: list[Array], coeffs: Array) -> Array:
  """(T, N, ...) stacked coefficients -> (T, M, n_eval, ...) per-agent predictions."""
  preds = [jnp.einsum("nk,tk...->tn...", e, coeffs[:, sl])
           for e, sl in zip(evals, _slices(problem))]
  return jnp.stack(preds, axis=1)


@functools.partial(jax.jit, static_argnames=("protocol", "rounds", "start", "rtol", "every",
                                             "params"))
def trajectory(problem: FederatedProblem, protocol: str, rounds: int, x_eval: ArrayLike,
               start: int | None = None, rtol: float | None = None, every: int = 1,
               params: ProtocolParams | None = None) -> Array:
  """Predictions of every round 0..rounds-1 (or every k-th) at ``x_eval``, without refitting.

  The layout equals that of :func:`fedkrr.simulate` with kernel ridge learners:
  ``(rounds, M, n_eval[, C])`` for AvgKD, PKD and pkd-mean (agent i's round-t model),
  ``(rounds, n_eval[, C])`` otherwise (AKD: the round-t model of the run from
  ``start``; EKD: the partial sum over rounds 0..t; backfitting: the sum of the
  agents' models after sweep t + 1).

  Args:
    problem: a validated :class:`FederatedProblem`.
    protocol: one of ``fedkrr.PROTOCOLS`` (akd, avgkd, pkd, pkd-mean, ekd, backfit-gs,
      backfit-jacobi, ...).
    rounds: the number of rounds T >= 1 (static).
    x_eval: evaluation points, shape (n_eval, d).
    start: deprecated: ``params=ProtocolParams(start=...)`` (AKD's starting agent).
    rtol: pseudo-inverse cut-off when c = 0 (see :func:`fedkrr.ridge_factor`).
    every: keep only rounds 0, k, 2k, ... < rounds for k = ``every`` (static; the
      memory of a long run): ``ceil(rounds / k)`` rows. For AKD a multiple of M.
    params: the protocol's parameters (:class:`fedkrr.ProtocolParams`, static).

  Returns:
    The predictions, in ``problem``'s dtype.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> fedkrr.trajectory(problem, "avgkd", 100, x).shape   # (rounds, agents, points)
    (100, 2, 8)
  """
  params = make_params(params, start)
  row = _check_arguments(problem, protocol, params, rounds)
  check_every(every, protocol, problem.num_agents)
  preds = _solve(problem, row, params, rounds, x_eval, every=every, rtol=rtol)[0]
  assert preds is not None
  return preds


def _trajectory_of(problem: FederatedProblem, row: ProtocolInfo, params: ProtocolParams,
                   rounds: int, every: int, rec: Recurrence, evals: list[Array]) -> Array:
  """:func:`trajectory` from the target recurrence and read-outs of the agents' factors."""
  if row.combine == "single":
    return _akd_scan(problem, rec, rounds, params.start, evals, every)
  if row.rounds == "backfit":
    rec = rec._replace(initial=rec.offset)  # the models after sweep 1 (from all-zero models)
  cumulative = row.combine == "alternating-sum"
  if cumulative and every > 1:   # partial sums over all rounds, kept every k-th
    targets = _scan(problem, rec, rounds, every, accumulate=True)
    return jnp.einsum("nk,tk...->tn...", jnp.concatenate(evals, axis=1), targets)
  targets = _scan(problem, rec, rounds, every)
  if row.per_agent:
    return _per_agent(problem, evals, targets)
  if cumulative:
    targets = jnp.cumsum(targets, axis=0)
  return jnp.einsum("nk,tk...->tn...", jnp.concatenate(evals, axis=1), targets)


def _solve(problem: FederatedProblem, row: ProtocolInfo, params: ProtocolParams,
           rounds: int | None, x_eval: ArrayLike, *, every: int = 1, rtol: float | None = None,
           with_trajectory: bool = True, with_limit: bool = False, method: str = "auto",
           steps: int = 400) -> tuple[Array | None, Limit | None]:
  """:func:`solve` unjitted: each agent's block factorised once for both answers."""
  x_eval = jnp.asarray(x_eval, problem.ridge.dtype)
  fs = factors(problem, rtol)
  # On targets, not coefficients: the literal rounds' accuracy (module docstring, "Numerics").
  rec = _recurrence_of(problem, row, params, fs, functools.partial(_predictor, problem, fs),
                       problem.pooled_y())
  evals = target_readout(problem, x_eval, fs)
  preds = lim = None
  if with_trajectory:
    assert rounds is not None
    preds = _trajectory_of(problem, row, params, rounds, every, rec, evals)
  if with_limit:
    lim = _limit_of(problem, row, x_eval, rec, evals, method, steps)
  return preds, lim


class Limit(NamedTuple):
  """A protocol's t -> infinity limit and whether the iteration converges to it.

  Attributes:
    predictions: the fixed point's predictions at the evaluation points, in the
      per-round layout of :func:`trajectory` without the round axis.
    spectral_radius: of the recurrence matrix (for EKD, of the AKD round W): the
      asymptotic contraction factor *per round* (also
      :attr:`spectral_radius_per_round`; AKD's degradation rate per cycle of M
      rounds, :func:`fedkrr.rates.degradation_rate_per_cycle`, is its M-th power).
      Below 1, the rounds converge to this fixed point from any start. At 1
      (e.g. c = 0, App. C) they may still converge, to a point that depends on
      the start and is not computed here.
  """

  predictions: Array
  spectral_radius: Array

  @property
  def spectral_radius_per_round(self) -> Array:
    """``spectral_radius``, named with its unit: the contraction factor per round."""
    return self.spectral_radius

  @property
  def converges(self) -> bool:
    """Whether the rounds converge to the limit (spectral radius below one)."""
    return bool(self.spectral_radius < 1.0)


RADIUS_METHODS = ("auto", "krylov", "dense")

AUTO_DENSE_MAX = 256
"""Up to this many rows, ``method="auto"`` takes the dense route: one general eigen-solve
there costs less than compiling and running the Krylov steps, and is exact."""


def spectral_radius(matrix: ArrayLike, method: str = "dense", steps: int = 400,
                    cycle: int = 1) -> Array:
  """``max |eig(matrix)|``, the asymptotic contraction factor per round.

  Args:
    matrix: a square (n, n) real matrix.
    method: ``"dense"``: a general eigen-solver (``jnp.linalg.eigvals``, ``O(n^3)``;
      the reference, on the CPU and GPU backends). ``"krylov"``: restarted Arnoldi
      on products with ``matrix`` (:func:`fedkrr._src.krylov.arnoldi_radius`,
      ``O(steps n^2)``, no general eigen-solver: it runs on any backend), NaN if
      its residual has not converged within ``steps`` products. ``"auto"``:
      ``dense`` up to ``AUTO_DENSE_MAX`` (256) rows; above, Krylov, and the dense
      route only where Krylov did not converge (a ``lax.cond``; under ``vmap`` it
      becomes a select and both routes run).
    steps: matrix-vector products of the Krylov route (static; 5 cycles of 80), each
      with ``matrix ** cycle``.
    cycle: the Krylov route works on ``matrix ** cycle`` and returns the ``cycle``-th
      root of its radius. For a map that moves a state around a cycle of k blocks (AKD's
      round with M = k >= 3 agents), the dominant eigenvalues are ``rho`` times the k-th
      roots of unity: k of one modulus, which Arnoldi cannot resolve (it resolves a
      real eigenvalue or one pair); their k-th powers are one, ``rho^k``.

  Raises:
    ValueError: an unknown ``method``, ``steps`` or ``cycle`` < 1, or a matrix that is
      not square.
  """
  if method not in RADIUS_METHODS:
    raise ValueError(f"method: expected one of {', '.join(RADIUS_METHODS)}, got {method!r}")
  krylov.check_steps(steps)
  if not isinstance(cycle, int) or isinstance(cycle, bool) or cycle < 1:
    raise ValueError(f"cycle: expected an integer >= 1, got {cycle!r}")
  matrix = jnp.asarray(matrix)
  if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
    raise ValueError(f"matrix: expected a square (n, n) matrix, got shape {matrix.shape}")
  if not jnp.issubdtype(matrix.dtype, jnp.floating):
    matrix = matrix.astype(jnp.asarray(0.0).dtype)
  n = matrix.shape[0]

  def dense():
    return jnp.max(jnp.abs(jnp.linalg.eigvals(matrix))).astype(matrix.dtype)

  if method == "dense" or (method == "auto" and n <= AUTO_DENSE_MAX):
    return dense()
  def power(v):
    for _ in range(cycle):
      v = matrix @ v
    return v

  est = krylov.arnoldi_radius(power, krylov.start_vector(n, matrix.dtype), steps,
                              restart=min(80, steps))
  radius = est.radius if cycle == 1 else est.radius ** (1.0 / cycle)
  if method == "krylov":
    return jnp.where(est.converged, radius, jnp.nan)
  return lax.cond(est.converged, lambda: radius, dense)


@functools.partial(jax.jit, static_argnames=("protocol", "start", "rtol", "method", "steps",
                                             "params"))
def limit(problem: FederatedProblem, protocol: str, x_eval: ArrayLike,
          start: int | None = None,
          rtol: float | None = None, method: str = "auto", steps: int = 400,
          params: ProtocolParams | None = None) -> Limit:
  """The t -> infinity limit of a protocol, by one linear solve.

  * AKD and PKD: 0 (Prop. II; App. E), reached iff the spectral radius < 1.
  * pkd-mean: 0 as well, reached iff the spectral radius of ``S K / M`` is < 1.
    With one shared kernel and c > 0 its target-space map is similar to the
    symmetric ``S^(1/2) K S^(1/2) / M``, whose eigenvalues lie in [0, 1), and
    PKD's to that plus ``c S / M`` (positive definite): both degrade to 0
    without oscillating, and pkd-mean strictly faster (smaller radius). With
    different kernels neither bound holds in general: either radius can exceed
    1, and pkd-mean's is usually, not always, the smaller
    (``docs/closed_forms.md``).
  * AvgKD: ``x = (I - S O / M)^{-1} a0 / M``; it solves system (8) of Prop. VI
    (M = 2: ``alpha_1 = beta_1 / 2``, ``alpha_2 = -beta_2 / 2``).
  * EKD: ``(I + W)^{-1} a0``. For M = 2 this is the block system
    ``(c I + K) alpha = y`` of Prop. VII; for M > 2 the cyclic scheme of eq. (32)
    couples each agent to its predecessor only.
  * Backfitting (both orders): the block system ``(c I + K) alpha = y``; with a
    shared kernel it is the centralised model at every x.

  The spectral radius is :func:`spectral_radius`'s with ``method`` and ``steps``: by
  default (``auto``) restarted Arnoldi on products with the recurrence matrix above
  256 points, with a general eigen-solver only where Arnoldi did not converge and on
  small problems; ``dense`` is the general eigen-solver alone, ``krylov`` never calls
  it (NaN where it did not converge).
  """
  params = make_params(params, start)
  row = _check_arguments(problem, protocol, params)
  lim = _solve(problem, row, params, None, x_eval, rtol=rtol, with_trajectory=False,
               with_limit=True, method=method, steps=steps)[1]
  assert lim is not None
  return lim


def _limit_of(problem: FederatedProblem, row: ProtocolInfo, x_eval: Array, rec: Recurrence,
              evals: list[Array], method: str, steps: int) -> Limit:
  """:func:`limit` from the target recurrence and read-outs (on targets: module docstring,
  "Numerics"; the same non-zero eigenvalues and fixed point, read out through E_a S_a)."""
  matrix = recurrence_matrix(problem, rec)
  # AKD's round (and EKD's W) moves one agent's model to the next: with M >= 3 agents its
  # top eigenvalues are the radius times the M-th roots of unity (spectral_radius's cycle).
  cycle = problem.num_agents if row.cycles and problem.num_agents > 2 else 1
  rho = spectral_radius(matrix, method, steps, cycle)
  if row.limit == "zero":
    agents = (problem.num_agents,) if row.per_agent else ()
    shape = agents + x_eval.shape[:1] + rec.initial.shape[1:]
    return Limit(jnp.zeros(shape, matrix.dtype), rho)
  eye = jnp.eye(problem.num_points, dtype=matrix.dtype)
  rhs = rec.initial if row.combine == "alternating-sum" else rec.offset
  fixed = jnp.linalg.solve(eye - matrix, rhs)
  if row.per_agent:
    return Limit(_per_agent(problem, evals, fixed[None])[0], rho)
  return Limit(jnp.concatenate(evals, axis=1) @ fixed, rho)


@functools.partial(jax.jit, static_argnames=("row", "params", "rounds", "every", "rtol",
                                             "with_trajectory", "with_limit", "method",
                                             "steps"))
def solve(problem: FederatedProblem, row: ProtocolInfo, params: ProtocolParams,
          rounds: int | None, x_eval: ArrayLike, *, every: int = 1, rtol: float | None = None,
          with_trajectory: bool = True, with_limit: bool = False, method: str = "auto",
          steps: int = 400) -> tuple[Array | None, Limit | None]:
  """:func:`trajectory` and :func:`limit` at once, each agent's block factorised once.

  The arguments are taken as checked (``fedkrr.run``'s plan, ``runner.plan_run``,
  checked them once): ``row`` is the protocol's table row, ``params`` its parameters.

  Returns:
    ``(predictions, limit)``: :func:`trajectory`'s predictions (``None`` without
    ``with_trajectory``) and :func:`limit`'s :class:`Limit` (``None`` without
    ``with_limit``).
  """
  return _solve(problem, row, params, rounds, x_eval, every=every, rtol=rtol,
                with_trajectory=with_trajectory, with_limit=with_limit, method=method,
                steps=steps)


@functools.partial(jax.jit, static_argnames=("rtol",))
def central(problem: FederatedProblem, x_eval: ArrayLike, rtol: float | None = None) -> Array:
  """Each agent's centralised optimum g^a* (eq. 5) at ``x_eval``: (M, n_eval[, C])."""
  x_eval = jnp.asarray(x_eval, problem.ridge.dtype)
  x_all, y_all = problem.pooled_x(), problem.pooled_y()
  preds = []
  for a in range(problem.num_agents):
    factor = linalg.ridge_factor(problem.gram(a, x_all, x_all), problem.ridge, rtol)
    preds.append(problem.gram(a, x_eval, x_all) @ factor.solve(y_all))
  return jnp.stack(preds)


@functools.partial(jax.jit, static_argnames=("rtol",))
def local(problem: FederatedProblem, x_eval: ArrayLike, rtol: float | None = None) -> Array:
  """Each agent's model fitted on its own data only, at ``x_eval``: (M, n_eval[, C])."""
  preds = [e @ f.solve(y) for e, f, y in
           zip(readout(problem, x_eval), factors(problem, rtol), problem.ys)]
  return jnp.stack(preds)
