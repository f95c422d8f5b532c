"""Closed forms of the paper's special cases: AvgKD (Prop. V, VI), EKD (Prop. VII),
zero regularisation (App. C) and parallel KD (App. E), in the geometry of App. B.

Each function is an independent route to numbers that :func:`fedkrr.trajectory`
and :func:`fedkrr.limit` also compute, so that the propositions can be checked
against the protocols. Two agents; agent 1 of the paper is agent 0 in code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedkrr._src import linalg
from fedkrr._src.geometry import Geometry
from fedkrr._src.geometry import check_two_agents
from fedkrr._src.geometry import prepare
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


def _avgkd_coordinates(problem: FederatedProblem, geo: Geometry):
  """App. D's ``z_1 = V_1 y_1``, ``z_2 = V~_2 y_2`` and the maps ``C_1 P~_2^T``, ``C~_2 P_1^T``."""
  return (geo.v1 @ problem.ys[0], geo.v2_tilde @ problem.ys[1],
          geo.c1 @ geo.p2_tilde.T, geo.c2_tilde @ geo.p1.T)


def avgkd_by_projections(problem: FederatedProblem, rounds: int, x_eval: ArrayLike,
                         geo: Geometry | None = None) -> Array:
  """AvgKD's rounds from the projections and contractions (App. D, exact recurrence).

  In the coordinates ``u_t = V_1 yhat^1_t`` and ``w_t = V~_2 yhat^2_t``:
  ``u_{t+1} = (z_1 + C_1 P~_2^T w_t) / 2`` and ``w_{t+1} = (z_2 + C~_2 P_1^T u_t) / 2``
  from ``u_0 = z_1 = V_1 y_1``, ``w_0 = z_2 = V~_2 y_2``.

  Returns:
    (T, 2, n_eval[, C]), the layout of ``fedkrr.trajectory(problem, "avgkd", ...)``.
  """
  geo, fits = prepare(problem, x_eval, geo, "Prop. V")
  z1, z2, to_1, to_2 = _avgkd_coordinates(problem, geo)
  u, w, preds = z1, z2, []
  for _ in range(rounds):
    preds.append(jnp.stack([fits[0](geo.v1.T @ u), fits[1](geo.v2_tilde.T @ w)]))
    u, w = 0.5 * (z1 + to_1 @ w), 0.5 * (z2 + to_2 @ u)
  return jnp.stack(preds)


def avgkd_partial_sums_as_printed(problem: FederatedProblem, t: int, x_eval: ArrayLike,
                                  geo: Geometry | None = None) -> Array:
  """Agent 1's AvgKD model at round t by the finite sums of Prop. V, as printed.

  ``g^1_t(x) = F/2 sum_{i<t} (A/4)^i z_1 + F C_1 P~_2^T / 4 sum_{i<t-1} (B/4)^i z_2``
  with ``F = l_x^T (c I + L_11)^{-1} V_1^T``, ``A = C_1 P~_2^T C~_2 P_1^T`` and
  ``B = C~_2 P_1^T C_1 P~_2^T``. Compare with the protocol's round t (a check of
  the statement, not a closed form this toolkit relies on).

  Returns:
    (n_eval[, C]).
  """
  geo, fits = prepare(problem, x_eval, geo, "Prop. V")
  z1, z2, to_1, to_2 = _avgkd_coordinates(problem, geo)
  a_op, b_op = to_1 @ to_2 / 4, to_2 @ to_1 / 4
  first, term = jnp.zeros_like(z1), z1
  for _ in range(t):
    first, term = first + term, a_op @ term
  second, term = jnp.zeros_like(z2), z2
  for _ in range(t - 1):
    second, term = second + term, b_op @ term
  return fits[0](geo.v1.T @ (first / 2 + to_1 @ second / 4))


def avgkd_limit_by_projections(problem: FederatedProblem, x_eval: ArrayLike,
                               geo: Geometry | None = None) -> Array:
  """AvgKD's limit by Prop. V's pseudo-inverse formula, for both agents.

  ``g^1_inf = F/2 (I - A/4)^+ z_1 + F C_1 P~_2^T / 4 (I - B/4)^+ z_2`` and the
  same with the agents' roles swapped.

  Returns:
    (2, n_eval[, C]), the layout of ``fedkrr.limit(problem, "avgkd", x).predictions``.
  """
  geo, fits = prepare(problem, x_eval, geo, "Prop. V")
  z1, z2, to_1, to_2 = _avgkd_coordinates(problem, geo)
  eye = jnp.eye(z1.shape[0], dtype=z1.dtype)
  pinv_a = jnp.linalg.pinv(eye - to_1 @ to_2 / 4)
  pinv_b = jnp.linalg.pinv(eye - to_2 @ to_1 / 4)
  u = pinv_a @ z1 / 2 + to_1 @ pinv_b @ z2 / 4
  w = pinv_b @ z2 / 2 + to_2 @ pinv_a @ z1 / 4
  return jnp.stack([fits[0](geo.v1.T @ u), fits[1](geo.v2_tilde.T @ w)])


def avgkd_limit_by_system(problem: FederatedProblem, x_eval: ArrayLike) -> Array:
  """AvgKD's limit from the linear system (8)/(19) of Prop. VI.

  ``[[c I + L_11, M_12 / 2], [L_21 / 2, c I + M_22]] (beta_1; beta_2) = (y_1; -y_2)``
  and ``g^1_inf(x) = l_x^T beta_1 / 2``, ``g^2_inf(x) = -m_x^T beta_2 / 2``.

  Returns:
    (2, n_eval[, C]).
  """
  check_two_agents(problem, "Prop. VI")
  x_eval = jnp.asarray(x_eval, problem.ridge.dtype)
  x1, x2 = problem.xs
  n1 = x1.shape[0]
  c = problem.ridge
  system = jnp.block([
      [problem.gram(0, x1, x1) + c * jnp.eye(n1, dtype=c.dtype), problem.gram(1, x1, x2) / 2],
      [problem.gram(0, x2, x1) / 2, problem.gram(1, x2, x2) + c * jnp.eye(x2.shape[0],
                                                                             dtype=c.dtype)]])
  beta = jnp.linalg.lstsq(system, jnp.concatenate([problem.ys[0], -problem.ys[1]]))[0]
  g1 = problem.gram(0, x_eval, x1) @ beta[:n1] / 2
  g2 = -problem.gram(1, x_eval, x2) @ beta[n1:] / 2
  return jnp.stack([g1, g2])


def block_system_predictions(problem: FederatedProblem, x_eval: ArrayLike) -> Array:
  """The predictor of system (7) / (27): ``f(x) = sum_a k_a(x, X_a) beta_a / N`` with
  ``(c I + K) beta = y``, ``K_ij = k_j(X_i, X_j) / N`` (EKD's limit, Prop. VII).

  Returns:
    (n_eval[, C]).
  """
  x_eval = jnp.asarray(x_eval, problem.ridge.dtype)
  rows = [jnp.concatenate([problem.gram(j, xi, xj) for j, xj in enumerate(problem.xs)], axis=1)
          for xi in problem.xs]
  system = jnp.concatenate(rows, axis=0)
  system = system + problem.ridge * jnp.eye(system.shape[0], dtype=system.dtype)
  beta = jnp.linalg.lstsq(system, problem.pooled_y())[0]
  readout = jnp.concatenate([problem.gram(j, x_eval, xj) for j, xj in enumerate(problem.xs)],
                            axis=1)
  return readout @ beta


def pkd_by_projections(problem: FederatedProblem, rounds: int, x_eval: ArrayLike,
                       geo: Geometry | None = None) -> Array:
  """PKD with c = 0 by App. E's averaged-projection form (one shared kernel).

  With ``P^_a = V_a (V_a^T D V_a)^+ V_a^T D`` and ``z_a = V_a y_a``,
  ``gbar_t = 2^{-t} (P^_1^T + P^_2^T)^{t-1} (P^_1^T z_1 + P^_2^T z_2)`` and agent a's
  round-t model fits ``V_a^T gbar_t / 2`` (round 0: ``y_a``).

  Valid when each agent's own Gram block is invertible (then every fit
  interpolates its targets, which App. E assumes).

  Returns:
    (T, 2, n_eval[, C]), the layout of ``fedkrr.trajectory(problem, "pkd", ...)``.
  """
  geo, fits = prepare(problem, x_eval, geo, "App. E")
  bases = (geo.v1, geo.v2)
  projs = (geo.p1.T, geo.p2.T)
  z = [b @ y for b, y in zip(bases, problem.ys)]
  total = projs[0] @ z[0] + projs[1] @ z[1]  # gbar_1 * 2
  preds = [jnp.stack([fits[a](problem.ys[a]) for a in range(2)])]
  scale = 0.5
  for _ in range(1, rounds):
    preds.append(jnp.stack([fits[a](scale * (bases[a].T @ total)) for a in range(2)]))
    total = (projs[0] + projs[1]) @ total
    scale = scale / 2
  return jnp.stack(preds)


def row_space_projector(x: Array, rtol: float) -> Array:
  """The orthogonal projector (d, d) onto the row space of ``x`` (n, d).

  Singular values at most ``rtol`` times the largest count as zero.
  """
  _, s, vt = jnp.linalg.svd(x, full_matrices=True)
  keep = (jnp.arange(x.shape[1]) < jnp.sum(s > rtol * s[0])).astype(x.dtype)
  return (vt.T * keep[None, :]) @ vt


def intersection_limit_linear(problem: FederatedProblem, x_eval: ArrayLike) -> Array:
  """AKD's limit for linear kernels and c = 0 when the agents' spans intersect (App. C).

  With ``k(x, x') = x^T x'`` a minimum-norm fit is a weight vector, and one AKD
  round maps agent 1's weights ``w`` to the orthogonal projection of ``w`` onto
  the row space of the next agent's inputs. The rounds converge to the
  projection of agent 1's first fit ``w_0`` onto the intersection of the two row
  spaces (von Neumann), which is non-zero when ``w_0`` has a component there.

  Returns:
    (n_eval[, C]): ``x_eval @ P_cap w_0``.
  """
  check_two_agents(problem, "App. C")
  x1, x2 = problem.xs
  w0 = jnp.linalg.pinv(x1) @ problem.ys[0]

  proj1, proj2 = (row_space_projector(x, linalg.default_rtol(max(x.shape), x.dtype))
                  for x in (x1, x2))
  d = x1.shape[1]
  # the intersection is the eigenvalue-1 eigenspace of proj1 proj2 proj1
  w, u = jnp.linalg.eigh(proj1 @ proj2 @ proj1)
  keep = (w > 1.0 - 1e3 * linalg.default_rtol(d, x1.dtype)).astype(x1.dtype)
  cap = (u * keep[None, :]) @ u.T
  return jnp.asarray(x_eval, x1.dtype) @ (cap @ w0)
