"""What ``fedkrr search`` measures for each statement, and how it replays a counterexample.

Each :class:`ClaimSearch` has the id of a ``fedkrr verify`` row, the
:class:`~fedkrr._src.paper.search_space.Space` of instances the statement allows, a
``residual`` (a traceable function of one problem; the statement holds on an
instance when the residual is at most ``tolerance``), and a ``replay``: the same
number recomputed by an independent route, the protocol's literal rounds
through :func:`fedkrr.simulate` (or, for statements about linear systems rather
than rounds, NumPy's solvers on the raw Gram matrices). A counterexample stands
only if its replay also exceeds the tolerance.

Statements that something "degrades to 0" or "converges" are measured by the
spectral radius of the round map (AKD: of one cycle of M rounds); a
counterexample needs a radius above 1 (``RATE_TOLERANCE``). The replay
estimates the same radius from the growth of the literal rounds' predictions.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import geometry as geo_lib
from fedkrr._src import protocols
from fedkrr._src import rates
from fedkrr._src import special_cases as sc
from fedkrr._src.learner import krr_learners
from fedkrr._src.metrics import relative_error
from fedkrr._src.paper.search_space import Space
from fedkrr._src.paper.verify import literal_rounds
from fedkrr._src.problem import FederatedProblem

Array = jax.Array
# A spectral radius breaks "degrades to 0" only above 1: a radius of 1 - 1e-11 still
# degrades (over 1e11 rounds), and no float64 computation tells 1 from 1 - 1e-15. The margin
# rule of `search.confirms` keeps a radius above 1 only if it is above by more than rounding.
RATE_TOLERANCE = 1.0
# The search climbs these radii by reverse-mode gradients: the dense route (a general
# eigen-solver) has them, the Krylov routes' ridge_root (custom_vmap) does not.
DIFFERENTIABLE = "dense"
RIDGE_GRID = tuple(np.logspace(-6, 1, 15))
RATIO_GRID = tuple(np.logspace(-1, 1, 9))   # entry 4 is the ratio 1
SEPARATION_GRID = tuple(np.linspace(0.0, 6.0, 13))


@dataclasses.dataclass(frozen=True)
class ClaimSearch:
  """How to search one statement (module docstring).

  Attributes:
    id: the ``fedkrr verify`` id.
    space: the instances the statement allows.
    measure: what the residual is, in words.
    tolerance: the statement holds on an instance iff residual <= tolerance.
    residual: ``f(problem, x_eval) -> scalar`` (traceable, vmappable).
    replay: ``f(problem, x_eval) -> float``, the residual by an independent route.
    route: the independent route, in words.
    command: a ``fedkrr run`` command (without ``--problem`` and ``--out``) that
      replays the protocol a counterexample is about, or ``""``.
    valid: ``f(problem) -> bool`` (traceable): a further condition of the
      statement on an instance, or None.
  """

  id: str
  space: Space
  measure: str
  tolerance: float
  residual: Callable[[FederatedProblem, Array], Array]
  replay: Callable[[FederatedProblem, np.ndarray], float]
  route: str
  command: str = ""
  valid: Callable[[FederatedProblem], Array] | None = None


def map_radius(protocol: str) -> Callable[[FederatedProblem, Array], Array]:
  """The spectral radius of a protocol's round map (AKD: of one cycle)."""
  if protocol == "akd":
    return lambda p, x: rates.degradation_rate(p, method=DIFFERENTIABLE)

  def radius(p, x):
    return closed_form.spectral_radius(
        closed_form.recurrence_matrix(p, closed_form.recurrence(p, protocol)))
  return radius


# ---- literal rounds ----------------------------------------------------------------------

def _literal(p: FederatedProblem, protocol: str, rounds: int, x_eval) -> np.ndarray:
  return np.asarray(literal_rounds(p, protocol, rounds, x_eval))


def literal_rate(p: FederatedProblem, protocol: str) -> float:
  """The round map's spectral radius estimated from the literal rounds' growth.

  Runs the protocol round by round (predictions at all training inputs) for a
  number of rounds chosen from the closed form's radius, and returns the growth
  per cycle (AKD: M rounds; PKD, AvgKD: one round) over the second half of the
  run. AvgKD is affine, so its successive differences are measured.
  """
  rho = float(map_radius(protocol)(p, p.pooled_x()))
  per = p.num_agents if protocol == "akd" else 1
  cycles = int(np.clip(60.0 / max(abs(math.log(max(rho, 1e-300))), 1e-3), 8, 600))
  rounds = 2 * cycles * per + 1
  preds = _literal(p, protocol, rounds, p.pooled_x())
  series = preds.reshape(preds.shape[0], -1)
  if protocol == "avgkd":
    series = np.diff(series, axis=0)
  norms = np.max(np.abs(series), axis=1)
  half = len(norms) // 2
  lo, hi = norms[half - half % per], norms[-1 - (len(norms) - 1) % per]
  span = (len(norms) - 1 - (len(norms) - 1) % per) - (half - half % per)
  if lo <= 0.0 or not np.isfinite(hi) or span <= 0:
    return float("nan") if not np.isfinite(hi) else 0.0
  return float((hi / lo) ** (per / span))


def _replay_rate(protocol: str):
  return lambda p, x: literal_rate(p, protocol)


def _rate_search(claim: str, space: Space, measure: str, protocol: str,
                 route: str = "") -> ClaimSearch:
  """A "degrades to 0" / "converges" statement: the radius of the protocol's round map,
  replayed by its literal rounds' growth."""
  return ClaimSearch(claim, space, measure, RATE_TOLERANCE, map_radius(protocol),
                     _replay_rate(protocol), route or LITERAL,
                     f"--protocol {protocol} --rounds 100 --method simulate")


# ---- Prop. III, IV ------------------------------------------------------------------------

def _no_fixed_point(p, x):
  g = geo_lib.geometry(p)
  return closed_form.spectral_radius(g.p1.T @ g.p2.T)


def _replay_fixed_point(p, x):
  """NumPy: 1 - how far the eigenvector of P_1^T P_2^T nearest to fixed moves (1: a fixed point)."""
  g = geo_lib.geometry(p)
  op = np.asarray(g.p1).T @ np.asarray(g.p2).T
  _, v = np.linalg.eig(op)
  moved = np.linalg.norm(op @ v - v, axis=0) / np.maximum(np.linalg.norm(v, axis=0), 1e-300)
  return float(1.0 - np.min(moved))


def _ridge_curve(p):
  return jax.vmap(lambda c: rates.degradation_rate(dataclasses.replace(p, ridge=c),
                                                    method=DIFFERENTIABLE))(
      jnp.asarray(RIDGE_GRID, p.ridge.dtype))


def _trend_ridge(p, x):
  return jnp.max(jnp.diff(_ridge_curve(p)))


def _replay_trend_ridge(p, x):
  i = int(np.argmax(np.diff(np.asarray(_ridge_curve(p)))))
  lo, hi = (dataclasses.replace(p, ridge=jnp.asarray(RIDGE_GRID[j], p.ridge.dtype))
            for j in (i, i + 1))
  return literal_rate(hi, "akd") - literal_rate(lo, "akd")


def _with_ratio(p, ratio):
  first = p.kernels[0]
  return dataclasses.replace(p, kernels=(first, type(first)(first.gamma * ratio)))


def _ratio_curve(p):
  return jax.vmap(lambda r: rates.degradation_rate(_with_ratio(p, r), method=DIFFERENTIABLE))(
      jnp.asarray(RATIO_GRID, p.ridge.dtype))


def _trend_kernel(p, x):
  curve = _ratio_curve(p)
  return jnp.max(curve) - curve[len(RATIO_GRID) // 2]


def _replay_trend_kernel(p, x):
  i = int(np.argmax(np.asarray(_ratio_curve(p))))
  return (literal_rate(_with_ratio(p, RATIO_GRID[i]), "akd")
          - literal_rate(_with_ratio(p, 1.0), "akd"))


def _moved(p, s):
  """Agent 2's inputs moved by ``s`` along the line from agent 1's mean to agent 2's."""
  x1, x2 = p.xs
  u = jnp.mean(x2, 0) - jnp.mean(x1, 0) + 1e-9 * jnp.eye(x1.shape[1], dtype=x1.dtype)[0]
  return dataclasses.replace(p, xs=(x1, x2 + s * (u / jnp.linalg.norm(u))[None, :]))


def _separation_curve(p):
  return jax.vmap(lambda s: rates.degradation_rate(_moved(p, s), method=DIFFERENTIABLE))(
      jnp.asarray(SEPARATION_GRID, p.ridge.dtype))


def _trend_data(p, x):
  return jnp.max(jnp.diff(_separation_curve(p)))


def _replay_trend_data(p, x):
  i = int(np.argmax(np.diff(np.asarray(_separation_curve(p)))))
  return (literal_rate(_moved(p, SEPARATION_GRID[i + 1]), "akd")
          - literal_rate(_moved(p, SEPARATION_GRID[i]), "akd"))


# ---- Prop. V, VI, VII ----------------------------------------------------------------------

def _finite_sums(p, x):
  traj = closed_form.trajectory(p, "avgkd", 4, x)
  return jnp.max(jnp.stack([relative_error(sc.avgkd_partial_sums_as_printed(p, t, x), traj[t, 0])
                            for t in (1, 2, 3)]))


def _replay_finite_sums(p, x):
  lit = _literal(p, "avgkd", 4, x)
  return max(relative_error(sc.avgkd_partial_sums_as_printed(p, t, x), lit[t, 0])
             for t in (1, 2, 3))


def _np_gram(p, a, x1, x2) -> np.ndarray:
  return np.asarray(p.gram(a, x1, x2), np.float64)


def _system7(p, x):
  return jnp.max(jnp.stack([relative_error(sc.block_system_predictions(p, xa),
                                           closed_form.central(p, xa)[0]) for xa in p.xs]))


def _replay_system7(p, x):
  """NumPy: system (7) solved with the raw Gram blocks, against agent 1's centralised fit."""
  xs = [np.asarray(v, np.float64) for v in p.xs]
  x_all, y_all = np.concatenate(xs), np.concatenate([np.asarray(y) for y in p.ys])
  blocks = np.block([[_np_gram(p, j, xi, xj) for j, xj in enumerate(xs)] for xi in xs])
  beta = np.linalg.solve(blocks, y_all)
  alpha = np.linalg.solve(_np_gram(p, 0, x_all, x_all), y_all)
  worst = 0.0
  for xa in xs:
    mine = np.concatenate([_np_gram(p, j, xa, xj) for j, xj in enumerate(xs)], axis=1) @ beta
    worst = max(worst, relative_error(mine, _np_gram(p, 0, xa, x_all) @ alpha))
  return worst


def _ekd_residual(target_fn):
  """``rel(EKD's limit, target)``, or at least 1 when EKD's series diverges (no limit)."""
  def residual(p, x):
    worst = radius = jnp.asarray(0.0, p.ridge.dtype)
    for xa, target in target_fn(p, x):
      lim = closed_form.limit(p, "ekd", xa)
      worst = jnp.maximum(worst, relative_error(lim.predictions, target))
      radius = lim.spectral_radius
    return jnp.where(radius < 1.0, worst, jnp.maximum(worst, radius))
  return residual


def _labels(p, x):
  return list(zip(p.xs, p.ys))


def _central_at_eval(p, x):
  return [(x, closed_form.central(p, x)[0])]


def _replay_ekd(target_literal):
  """Literal EKD rounds (partial sums) against literal targets; when the closed form says the
  series diverges, the literal partial sums' growth per round instead."""
  def replay(p, x):
    rho = float(closed_form.limit(p, "ekd", p.xs[0]).spectral_radius)
    if rho >= 1.0:
      sums = _literal(p, "ekd", 201, p.pooled_x())
      terms = np.max(np.abs(np.diff(sums.reshape(sums.shape[0], -1), axis=0)), axis=1)
      return float((terms[-1] / terms[99]) ** (1.0 / 100)) if terms[99] > 0 else 0.0
    rounds = int(np.clip(40.0 / max(-math.log(max(rho, 1e-300)), 1e-3), 20, 3000))
    worst = 0.0
    for xa, target in target_literal(p, x):
      worst = max(worst, relative_error(_literal(p, "ekd", rounds, xa)[-1], target))
    return worst
  return replay


def _labels_literal(p, x):
  return [(np.asarray(xa), np.asarray(ya)) for xa, ya in zip(p.xs, p.ys)]


def _central_literal(p, x):
  model = protocols.central_models(krr_learners(p), p.xs, p.ys)[0]
  return [(np.asarray(x), np.asarray(model.predict(x)))]


# ---- App. C, E ---------------------------------------------------------------------------------

def _self_distillation(p, x):
  traj = closed_form.trajectory(p, "akd", 8, x)
  return relative_error(traj, jnp.broadcast_to(traj[0], traj.shape))


def _replay_self_distillation(p, x):
  lit = _literal(p, "akd", 8, x)
  return relative_error(lit, np.broadcast_to(lit[0], lit.shape))


SINGULAR_ROUNDS = 2000
SINGULAR_GAP = 0.95


def _singular(p, x):
  # the target's full SVD has no derivative in JAX: climb through the rounds only
  target = sc.intersection_limit_linear(jax.lax.stop_gradient(p), x)
  traj = closed_form.trajectory(p, "akd", SINGULAR_ROUNDS + 1, x)
  scale = jnp.maximum(jnp.max(jnp.abs(target)), 1e-3 * jnp.max(jnp.abs(traj[0])))
  return jnp.max(jnp.abs(traj[-1] - target)) / scale


def _replay_singular(p, x):
  target = np.asarray(sc.intersection_limit_linear(p, x))
  lit = _literal(p, "akd", SINGULAR_ROUNDS + 1, x)
  scale = max(float(np.max(np.abs(target))), 1e-3 * float(np.max(np.abs(lit[0]))))
  return float(np.max(np.abs(lit[-1] - target)) / scale)


def _fast_enough(p):
  """The row spaces' largest principal cos^2 below 1 (outside their intersection) <= 0.95:
  AKD then converges within 2000 rounds far below the tolerance, so round 2000 judges the limit."""
  proj1, proj2 = (sc.row_space_projector(x, 1e-10) for x in p.xs)
  w = jnp.linalg.eigvalsh(proj1 @ proj2 @ proj1)
  return jnp.max(jnp.where(w < 1.0 - 1e-6, w, 0.0)) <= SINGULAR_GAP


def _pkd_closed_form(p, x):
  return relative_error(sc.pkd_by_projections(p, 6, x), closed_form.trajectory(p, "pkd", 6, x))


def _replay_pkd_closed_form(p, x):
  return relative_error(sc.pkd_by_projections(p, 6, x), _literal(p, "pkd", 6, x))


# ---- identities (the search should find nothing) --------------------------------------------

def _cos2(p, x):
  return jnp.abs(rates.degradation_rate(p, method=DIFFERENTIABLE) - rates.shared_kernel_rate(p))


def _replay_cos2(p, x):
  return abs(literal_rate(p, "akd") - float(rates.shared_kernel_rate(p)))


def _avgkd_recurrence(p, x):
  return relative_error(sc.avgkd_by_projections(p, 6, x), closed_form.trajectory(p, "avgkd", 6, x))


def _replay_avgkd_recurrence(p, x):
  return relative_error(sc.avgkd_by_projections(p, 6, x), _literal(p, "avgkd", 6, x))


TWO_ANY = Space()
TWO_SHARED = Space(kernels="shared")
MANY_ANY = Space(agents=(3, 5))
STATIONARY = ("rbf", "laplace")
LITERAL = "literal rounds (fedkrr.simulate): growth per cycle over the second half of the run"

SEARCHES = (
    ClaimSearch("prop3-no-fixed-point", TWO_SHARED,
                "spectral radius of P_1^T P_2^T (a fixed point x != 0 needs 1)", RATE_TOLERANCE,
                _no_fixed_point, _replay_fixed_point,
                "NumPy eigenvectors of P_1^T P_2^T: 1 - how far the one nearest to fixed moves"),
    _rate_search("prop2-akd-to-zero", TWO_ANY, "spectral radius of one AKD cycle", "akd"),
    ClaimSearch("prop4-trend-ridge", TWO_ANY,
                "largest increase of the AKD rate rho along c = 1e-6 .. 10 (15 points)", 1e-9,
                _trend_ridge, _replay_trend_ridge,
                "literal AKD rounds at the two ridges of the largest increase"),
    ClaimSearch("prop4-trend-kernel", Space(kinds=("rbf",)),
                "largest excess of rho over the equal-bandwidth rho, agent 2's RBF bandwidth "
                "times 0.1 .. 10 (9 ratios)", 1e-9, _trend_kernel, _replay_trend_kernel,
                "literal AKD rounds at the worst ratio and at ratio 1"),
    ClaimSearch("prop4-trend-data", Space(kinds=STATIONARY),
                "largest increase of rho as agent 2's inputs move 0 .. 6 away from agent 1's "
                "(13 steps)", 1e-9, _trend_data, _replay_trend_data,
                "literal AKD rounds at the two separations of the largest increase"),
    ClaimSearch("prop5-finite-sums", TWO_ANY,
                "relative error of Prop. V's printed finite sums against AvgKD's rounds 1-3",
                1e-8, _finite_sums, _replay_finite_sums, "literal AvgKD rounds",
                "--protocol avgkd --rounds 4 --method simulate"),
    ClaimSearch("prop6-system7", Space(ridge="zero", well_conditioned=True),
                "relative error of system (7)'s predictions against g^1* on the training inputs",
                1e-6, _system7, _replay_system7,
                "NumPy: system (7) and the centralised fit solved from the raw Gram matrices",
                "--protocol central"),
    ClaimSearch("prop7-ekd-labels", Space(ridge="zero", well_conditioned=True),
                "relative error of EKD's limit against the training labels (at least the "
                "spectral radius of the AKD round when EKD's series diverges)", 1e-6,
                _ekd_residual(_labels), _replay_ekd(_labels_literal),
                "literal EKD rounds (partial sums) on the training inputs",
                "--protocol ekd --rounds 100 --method simulate"),
    ClaimSearch("appc-self-distillation",
                Space(kernels="shared", ridge="zero", data="duplicate"),
                "largest relative change of the model over 8 rounds of self-distillation", 1e-6,
                _self_distillation, _replay_self_distillation, "literal AKD rounds",
                "--protocol akd --rounds 8 --method simulate"),
    _rate_search("appc-positive-definite", Space(kernels="shared", ridge="zero",
                                                 well_conditioned=True),
                 "spectral radius of one AKD cycle", "akd"),
    ClaimSearch("appc-singular", Space(kernels="shared", kinds=("linear",), ridge="zero",
                                       data="subspaces"),
                "distance of AKD's round 2000 from the intersection limit, relative to it "
                "(instances whose rounds converge by a factor 0.95 per cycle or faster)", 1e-6,
                _singular, _replay_singular,
                "literal AKD rounds (2000) against the intersection limit",
                "--protocol akd --rounds 2001 --every 2 --method simulate", _fast_enough),
    ClaimSearch("appe-closed-form", Space(kernels="shared", ridge="zero",
                                          well_conditioned=True),
                "relative error of App. E's averaged projections against PKD's rounds 0-5",
                1e-8, _pkd_closed_form, _replay_pkd_closed_form, "literal PKD rounds",
                "--protocol pkd --rounds 6 --method simulate"),
    _rate_search("appe-degrades", TWO_SHARED, "spectral radius of PKD's round map", "pkd"),
    _rate_search("pkd-mean-shared", Space(agents=(2, 4), kernels="shared"),
                 "spectral radius of pkd-mean's round map S K / M", "pkd-mean"),
    _rate_search("pkd-mean-different", Space(agents=(2, 4)),
                 "spectral radius of pkd-mean's round map S K / M", "pkd-mean"),
    _rate_search("appg-akd", MANY_ANY, "spectral radius of one AKD cycle of M rounds", "akd"),
    _rate_search("appg-pkd", MANY_ANY, "spectral radius of PKD's round map", "pkd"),
    _rate_search("appg-avgkd", MANY_ANY,
                 "spectral radius of AvgKD's round map (the rounds converge iff below 1)",
                 "avgkd", "literal AvgKD rounds: growth of successive differences"),
    ClaimSearch("appg-ekd-central", Space(agents=(3, 5), kernels="shared"),
                "relative error of cyclic EKD's limit against the centralised model (at least "
                "the spectral radius of the AKD cycle when the series diverges)", 1e-6,
                _ekd_residual(_central_at_eval), _replay_ekd(_central_literal),
                "literal EKD rounds against the literal centralised fit",
                "--protocol ekd --rounds 100 --method simulate"),
    # identities: a search over them should find nothing
    ClaimSearch("prop4-rate-cos2", TWO_SHARED,
                "|rho - cos^2 of the smallest principal angle|", 1e-8, _cos2, _replay_cos2,
                "literal AKD rounds' growth against the principal angle"),
    ClaimSearch("prop5-recurrence", TWO_ANY,
                "relative error of AvgKD by projections against the closed form, rounds 0-5",
                1e-8, _avgkd_recurrence, _replay_avgkd_recurrence, "literal AvgKD rounds",
                "--protocol avgkd --rounds 6 --method simulate"),
)

BY_ID = {s.id: s for s in SEARCHES}
