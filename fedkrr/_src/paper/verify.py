"""Numerical checks of the paper's statements on seeded random instances (`fedkrr verify`).

Every check computes a residual on instances of several sizes and seeds; the
row keeps the largest. Two kinds of rows:

* ``identity``: an exact equality or bound the toolkit relies on (two
  independent routes to the same numbers). If one fails, ``fedkrr verify``
  exits with status 1.
* ``claim``: a statement of the paper checked as stated. If it does not hold,
  that is a finding, reported in the table, not an error.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import json

import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import geometry as geo_lib
from fedkrr._src import protocols
from fedkrr._src import rates
from fedkrr._src import special_cases as sc
from fedkrr._src.io.files import atomic_write
from fedkrr._src.kernels import RBF
from fedkrr._src.kernels import Laplace
from fedkrr._src.kernels import Linear
from fedkrr._src.learner import krr_learners
from fedkrr._src.metrics import relative_error
from fedkrr._src.names import ProtocolParams
from fedkrr._src.paper.shipped_findings import known_findings
from fedkrr._src.paper.shipped_findings import search_note
from fedkrr._src.problem import make_problem

SIZES = ((5, 4), (14, 10))
SEEDS = (0, 1)
EXACT = 1e-8   # relative tolerance of exact identities in float64


@dataclasses.dataclass(frozen=True)
class Check:
  id: str
  statement: str
  source: str
  kind: str          # "identity" or "claim"
  tolerance: float
  residual_fn: Callable[[int, tuple[int, ...]], float]
  sizes: tuple[tuple[int, ...], ...] = SIZES


@dataclasses.dataclass(frozen=True)
class CheckRow:
  """One check's result (a row of ``fedkrr verify``'s table).

  Attributes:
    id: the check's id (``prop4-rate-cos2``, say).
    statement: what is checked, in words.
    source: where the paper states it (``Prop. IV``, ``App. B``).
    kind: ``"identity"`` (algebra the toolkit relies on: failing is a bug) or
      ``"claim"`` (the paper's statement as printed: failing is a finding).
    residual: the largest residual over the seeds and sizes.
    tolerance: the residual up to which the statement holds.
    holds: whether the residual is finite and at most the tolerance.
    search: what ``fedkrr search`` found for the statement over all the
      instances it allows (the findings shipped with the toolkit): a
      counterexample's file, the number of instances it held on, or
      ``"not searched"``.
  """

  id: str
  statement: str
  source: str
  kind: str
  residual: float
  tolerance: float
  holds: bool
  search: str = "not searched"

  def as_dict(self) -> dict:
    """The row as a dict of its fields (the JSON object :func:`write_checks` writes)."""
    return dataclasses.asdict(self)


def _data(seed: int, sizes, dim: int = 2, shift: float = 1.0):
  rng = np.random.default_rng(seed)
  xs = [rng.normal(size=(n, dim)) + shift * a for a, n in enumerate(sizes)]
  ys = [rng.normal(size=n) for n in sizes]
  return xs, ys, rng.normal(size=(6, dim))


def _problem(seed, sizes, ridge=0.05, kernels="same"):
  xs, ys, x_eval = _data(seed, sizes)
  if kernels == "same":
    ks = [RBF(0.5)] * len(sizes)
  else:
    ks = [RBF(0.5) if a % 2 == 0 else Laplace(0.4) for a in range(len(sizes))]
  return make_problem(xs, ys, ks, ridge), x_eval


def literal_rounds(problem, name, rounds, x_eval):
  """The protocol's literal rounds (:func:`fedkrr.simulate` with kernel ridge learners)."""
  return protocols.simulate(name, krr_learners(problem), problem.xs, problem.ys, rounds, x_eval)


# ---- Prop. III and App. B: geometry -------------------------------------------------------

def _prop3_reconstruction(seed, sizes):
  worst = 0.0
  for kernels in ("same", "different"):
    for ridge in (0.05, 0.0):
      p, x = _problem(seed, sizes, ridge, kernels)
      worst = max(worst, relative_error(geo_lib.akd_by_projections(p, 6, x),
                                        literal_rounds(p, "akd", 6, x)))
  return worst


def _prop3_idempotent(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "different")
  g = geo_lib.geometry(p)
  return max(relative_error(q @ q, q) for q in (g.p1, g.p2, g.p1_tilde, g.p2_tilde))


def _prop3_contractions(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "different")
  g = geo_lib.geometry(p)
  return max(float(jnp.linalg.norm(m, 2)) - 1.0 for m in (g.c1, g.c2_tilde))


def _prop3_no_fixed_point(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "same")
  g = geo_lib.geometry(p)
  return float(closed_form.spectral_radius(g.p1.T @ g.p2.T))


# ---- Prop. II, IV, VIII: degradation ----------------------------------------------------

def _decay(protocol, rounds, kernels, seed, sizes):
  """``|g_T| / |g_0|`` of a protocol's trajectory with c = 0.05 (T = ``rounds``)."""
  p, x = _problem(seed, sizes, 0.05, kernels)
  traj = closed_form.trajectory(p, protocol, rounds, x)
  return float(jnp.max(jnp.abs(traj[-1])) / jnp.max(jnp.abs(traj[0])))


def _prop4_cos2(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "same")
  return abs(float(rates.degradation_rate(p)) - float(rates.shared_kernel_rate(p)))


def _prop4_geometry_rate(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "different")
  a = geo_lib.geometry(p).two_round_operator()
  return abs(float(closed_form.spectral_radius(a)) - float(rates.degradation_rate(p)))


def _prop4_trend_ridge(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "same")
  rho = np.asarray(rates.sweep_ridge(p, jnp.logspace(-4, 1, 12)))
  return float(max(0.0, np.max(np.diff(rho))))


def _prop4_trend_kernel(seed, sizes):
  p, _ = _problem(seed, sizes, 0.05, "same")
  rho = np.asarray(rates.sweep_bandwidth_ratio(p, jnp.asarray([0.1, 0.3, 1.0, 3.0, 10.0])))
  return float(max(0.0, np.max(rho) - rho[2]))


def _prop4_trend_data(seed, sizes):
  clusters = rates.TwoClusters.draw(seed, sizes[0])
  rho = np.asarray(rates.sweep_separation(clusters, jnp.linspace(0.0, 6.0, 7), 0.05))
  return float(max(0.0, np.max(np.diff(rho))))


# ---- Prop. V, VI, VII: AvgKD and EKD --------------------------------------------------------

def _prop5_recurrence(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "different")
  return relative_error(sc.avgkd_by_projections(p, 6, x), literal_rounds(p, "avgkd", 6, x))


def _prop5_limit(seed, sizes):
  worst = 0.0
  for ridge in (0.05, 0.0):
    p, x = _problem(seed, sizes, ridge, "different")
    lim = sc.avgkd_limit_by_projections(p, x)
    worst = max(worst, relative_error(lim, closed_form.limit(p, "avgkd", x).predictions),
                relative_error(lim, closed_form.trajectory(p, "avgkd", 400, x)[-1]))
  return worst


def _prop5_as_printed(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "different")
  traj = closed_form.trajectory(p, "avgkd", 4, x)
  return max(relative_error(sc.avgkd_partial_sums_as_printed(p, t, x), traj[t, 0])
             for t in (1, 2, 3))


def _weighted_avgkd(seed, sizes):
  """Weighted AvgKD (weights 1..M over their sum): the closed form against the literal
  rounds and the limit against a long run, c > 0 and c = 0."""
  m = len(sizes)
  params = ProtocolParams(weights=tuple((a + 1.0) / (m * (m + 1) / 2) for a in range(m)))
  worst = 0.0
  for ridge in (0.05, 0.0):
    p, x = _problem(seed, sizes, ridge, "different")
    traj = closed_form.trajectory(p, "weighted-avgkd", 400, x, params=params)
    literal = protocols.simulate("weighted-avgkd", krr_learners(p), p.xs, p.ys, 6, x,
                                 params=params)
    worst = max(worst, relative_error(traj[:6], literal),
                relative_error(closed_form.limit(p, "weighted-avgkd", x,
                                                 params=params).predictions, traj[-1]))
  return worst


def _prop6_system8(seed, sizes):
  worst = 0.0
  for ridge in (0.05, 0.0):
    p, x = _problem(seed, sizes, ridge, "different")
    worst = max(worst, relative_error(sc.avgkd_limit_by_system(p, x),
                            closed_form.limit(p, "avgkd", x).predictions))
  return worst


def _prop6_system7(seed, sizes):
  p, _ = _problem(seed, sizes, 0.0, "different")
  worst = 0.0
  for xa in p.xs:
    central = closed_form.central(p, xa)[0]
    worst = max(worst, relative_error(sc.block_system_predictions(p, xa), central))
  return worst


def _prop7_ekd_labels(seed, sizes):
  p, _ = _problem(seed, sizes, 0.0, "different")
  worst = 0.0
  for xa, ya in zip(p.xs, p.ys):
    worst = max(worst, relative_error(closed_form.limit(p, "ekd", xa).predictions, ya))
  return worst


def _prop7_ekd_rounds(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "different")
  return relative_error(closed_form.trajectory(p, "ekd", 2000, x)[-1],
                        sc.block_system_predictions(p, x))


# ---- App. C: no regularisation --------------------------------------------------------------

def _appc_self_distillation(seed, sizes):
  xs, ys, x_eval = _data(seed, sizes[:1])
  p = make_problem([xs[0], xs[0]], [ys[0], ys[0]], [RBF(0.5)] * 2, 0.0)
  traj = closed_form.trajectory(p, "akd", 8, x_eval)
  return relative_error(traj, jnp.broadcast_to(traj[0], traj.shape))


def _appc_positive_definite(seed, sizes):
  p, _ = _problem(seed, sizes, 0.0, "same")
  return float(rates.degradation_rate(p))


def _intersecting_linear(seed, sizes):
  rng = np.random.default_rng(seed)
  n1, n2 = sizes[:2]
  x1 = np.zeros((n1, 3))
  x1[:, :2] = rng.normal(size=(n1, 2))
  x2 = np.zeros((n2, 3))
  x2[:, 1:] = rng.normal(size=(n2, 2))
  p = make_problem([x1, x2], [rng.normal(size=n1), rng.normal(size=n2)], [Linear()] * 2, 0.0)
  return p, rng.normal(size=(6, 3))


def _appc_singular(seed, sizes):
  p, x = _intersecting_linear(seed, sizes)
  target = sc.intersection_limit_linear(p, x)
  if float(jnp.max(jnp.abs(target))) < 1e-6:
    return 1.0   # the limit must be a non-zero point
  return relative_error(closed_form.trajectory(p, "akd", 600, x)[-1], target)


# ---- App. E: PKD ------------------------------------------------------------------------------

def _appe_closed_form(seed, sizes):
  p, x = _problem(seed, sizes, 0.0, "same")
  return relative_error(sc.pkd_by_projections(p, 6, x), literal_rounds(p, "pkd", 6, x))


# ---- App. G: M agents -------------------------------------------------------------------------

M_SIZES = ((5, 4, 6), (8, 6, 7, 5))


def _appg_avgkd(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "different")
  lim = closed_form.limit(p, "avgkd", x)
  if not lim.converges or float(jnp.max(jnp.abs(lim.predictions))) < 1e-8:
    return 1.0
  return relative_error(closed_form.trajectory(p, "avgkd", 300, x)[-1], lim.predictions)


def _appg_ekd(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "same")
  return relative_error(closed_form.limit(p, "ekd", x).predictions, closed_form.central(p, x)[0])


def _appg_backfit(seed, sizes):
  p, x = _problem(seed, sizes, 0.05, "same")
  return relative_error(closed_form.trajectory(p, "backfit-gs", 400, x)[-1],
                        closed_form.central(p, x)[0])


CHECKS = (
    Check("prop3-reconstruction", "AKD's rounds from projections and contractions equal the "
          "literal rounds", "Prop. III, eq. (12)", "identity", EXACT, _prop3_reconstruction),
    Check("prop3-idempotent", "P_1, P_2, P~_1, P~_2 are projections: P^2 = P", "App. B",
          "identity", EXACT, _prop3_idempotent),
    Check("prop3-contractions", "||C_1||_2, ||C~_2||_2 <= 1 (residual: norm - 1)", "App. B",
          "identity", EXACT, _prop3_contractions),
    Check("prop3-no-fixed-point", "P_1^T P_2^T x = x only for x = 0 (residual: spectral radius "
          "of P_1^T P_2^T, holds below 1)", "Prop. III", "claim", 1.0 - 1e-12,
          _prop3_no_fixed_point),
    Check("prop2-akd-to-zero", "AKD with c > 0 degrades to 0 (|g_2000| / |g_0|)", "Prop. II",
          "claim", 1e-8, functools.partial(_decay, "akd", 2000, "different")),
    Check("prop4-rate-cos2", "shared kernel: rho = cos^2 of the smallest principal angle",
          "App. B, Prop. VIII", "identity", EXACT, _prop4_cos2),
    Check("prop4-rate-geometry", "rho of C_1 P~_2^T C~_2 P_1^T (2N x 2N) = rho of the transfer "
          "cycle (N_1 x N_1)", "Prop. III-IV", "identity", EXACT, _prop4_geometry_rate),
    Check("prop4-trend-ridge", "rho decreases as c grows (residual: largest increase)",
          "Prop. IV (i)", "claim", 1e-12, _prop4_trend_ridge),
    Check("prop4-trend-kernel", "rho is largest for equal RBF bandwidths among ratios "
          "0.1..10 (residual: excess over ratio 1)", "Prop. IV (ii)", "claim", 1e-12,
          _prop4_trend_kernel),
    Check("prop4-trend-data", "rho decreases as the agents' clusters move apart (residual: "
          "largest increase)", "Prop. IV (iii)", "claim", 1e-12, _prop4_trend_data),
    Check("prop5-recurrence", "AvgKD's rounds from projections and contractions equal the "
          "literal rounds", "App. D", "identity", EXACT, _prop5_recurrence),
    Check("prop5-limit", "AvgKD's limit by the pseudo-inverse formula equals the fixed point "
          "and round 400", "Prop. V", "identity", 1e-7, _prop5_limit),
    Check("prop5-finite-sums", "Prop. V's finite sums, as printed, equal AvgKD's round t "
          "(t = 1, 2, 3)", "Prop. V", "claim", EXACT, _prop5_as_printed),
    Check("prop6-system8", "AvgKD's limits are beta_1 / 2 and -beta_2 / 2 of system (8)",
          "Prop. VI, eq. (19)", "identity", EXACT, _prop6_system8),
    Check("prop6-system7", "c = 0: system (7) predicts g^1* on the training inputs",
          "Prop. VI", "claim", 1e-6, _prop6_system7),
    Check("prop7-ekd-labels", "c = 0, different kernels: EKD's limit reproduces the training "
          "labels", "Prop. VII", "claim", 1e-6, _prop7_ekd_labels),
    Check("prop7-ekd-rounds", "EKD's partial sums converge to the block system (7)",
          "Prop. VII, App. F", "identity", 1e-7, _prop7_ekd_rounds),
    Check("appc-self-distillation", "c = 0: self-distillation leaves the model unchanged",
          "App. C", "claim", 1e-6, _appc_self_distillation),
    Check("appc-positive-definite", "c = 0, K > 0: AKD degrades to 0 (residual: the rate rho, "
          "holds below 1)", "App. C", "claim", 1.0 - 1e-12, _appc_positive_definite),
    Check("appc-singular", "c = 0, singular K: AKD converges to a non-zero point of the "
          "intersection", "App. C, Fig. 7(a)", "claim", 1e-8, _appc_singular),
    Check("appe-closed-form", "c = 0: PKD is the averaged projection "
          "2^-t P^_1^T (P^_1^T + P^_2^T)^(t-1) (P^_1^T z_1 + P^_2^T z_2)", "App. E", "claim",
          1e-8, _appe_closed_form),
    Check("appe-degrades", "PKD degrades to 0 (|g_3000| / |g_0|, c > 0)", "App. E", "claim",
          1e-3, functools.partial(_decay, "pkd", 3000, "same")),
    Check("pkd-mean-shared", "one shared kernel, c > 0: pkd-mean (PKD as the authors' code runs "
          "it) degrades to 0 (|g_3000| / |g_0|), M = 2 and M > 2", "App. E, authors' code",
          "claim", 1e-3, functools.partial(_decay, "pkd-mean", 3000, "same"), SIZES + M_SIZES),
    Check("pkd-mean-different", "different kernels: pkd-mean degrades to 0 (|g_3000| / |g_0|), "
          "M = 2 and M > 2", "App. E, authors' code", "claim", 1e-3,
          functools.partial(_decay, "pkd-mean", 3000, "different"), SIZES + M_SIZES),
    Check("appg-akd", "M > 2: the AKD cycle degrades to 0 (|g_2000| / |g_0|)", "App. G",
          "claim", 1e-8, functools.partial(_decay, "akd", 2000, "different"), M_SIZES),
    Check("appg-pkd", "M > 2: PKD degrades to 0 (|g_3000| / |g_0|)", "App. G", "claim", 1e-3,
          functools.partial(_decay, "pkd", 3000, "different"), M_SIZES),
    Check("appg-avgkd", "M > 2: AvgKD converges to a non-zero limit", "App. G", "claim", 1e-7,
          _appg_avgkd, M_SIZES),
    Check("weighted-avgkd", "weighted AvgKD (w_i y_i + sum_{j != i} w_j g_j): closed form = "
          "literal rounds, limit = round 400", "DESIGN (protocol table)", "identity", 1e-7,
          _weighted_avgkd, SIZES + M_SIZES),
    Check("appg-ekd-central", "M > 2, shared kernel: cyclic EKD (eq. 32) recovers the "
          "centralised model", "App. G, eq. (32)", "claim", 1e-6, _appg_ekd, M_SIZES),
    Check("appg-backfit-central", "M > 2, shared kernel: Gauss-Seidel backfitting recovers the "
          "centralised model", "DESIGN (backfitting)", "identity", 1e-7, _appg_backfit,
          M_SIZES),
)


def run_checks(seeds=SEEDS, only: str | None = None, progress: bool = False,
               quick: bool = False) -> list[CheckRow]:
  """Runs every check (or those whose id starts with ``only``) and returns the rows.

  Args:
    seeds: the seeds of the random instances; each row keeps the largest residual.
    only: run only the checks whose id starts with this prefix (None: all).
    progress: show a progress bar (tqdm).
    quick: check each statement on its smallest instance only (the main job's
      report uses it; ``fedkrr verify`` checks every size).

  Returns:
    One :class:`CheckRow` per check, in the order of ``CHECKS``.

  Raises:
    ValueError: no check id starts with ``only``.
  """
  checks = [c for c in CHECKS if only is None or c.id.startswith(only)]
  if not checks:
    raise ValueError(f"only: no check id starts with {only!r}; ids: "
                     f"{', '.join(c.id for c in CHECKS)}")
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=len(checks), desc="verify", unit="check")
  found = {r.claim: r for r in known_findings()}
  rows = []
  for check in checks:
    all_sizes = check.sizes[:1] if quick else check.sizes
    residual = max(check.residual_fn(seed, sizes) for seed in seeds for sizes in all_sizes)
    holds = bool(np.isfinite(residual) and residual <= check.tolerance)
    rows.append(CheckRow(check.id, check.statement, check.source, check.kind, float(residual),
                         check.tolerance, holds, search_note(found.get(check.id))))
    if bar is not None:
      bar.update(1)
  if bar is not None:
    bar.close()
  return rows


def _apart(residual: float, tolerance: float) -> tuple[str, str]:
  """The residual with the fewest significant digits (at least 3) that tell it from the
  tolerance, and the tolerance exactly (its shortest form): 0.99999214 against
  0.999999999999 reads "0.99999 | 0.999999999999", not "1.00e+00 | 1.0e+00"."""
  exact = next((f"{tolerance:.{d}g}" for d in range(1, 18)
                if float(f"{tolerance:.{d}g}") == tolerance), repr(tolerance))
  for digits in range(3, 18):
    if f"{residual:.{digits}g}" != f"{tolerance:.{digits}g}" or residual == tolerance:
      return f"{residual:.{digits}g}", exact
  return repr(residual), exact


def checks_table(rows: list[CheckRow]) -> str:
  """The rows as a Markdown table (a failing claim reads as a finding, an identity as a failure).

  "holds here" is the verdict on the instances checked here; the last column says
  what ``fedkrr search`` found over every instance the statement allows
  (:func:`fedkrr.paper.known_findings`): a claim may hold here and be broken elsewhere.
  Residual and tolerance show as many digits as it takes to tell them apart.
  """
  lines = ["| id | statement | source | kind | max residual | tolerance | holds here | "
           "search over every allowed instance |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    verdict = "yes" if r.holds else ("NO (finding)" if r.kind == "claim" else "NO (FAILURE)")
    if r.holds and r.search.startswith("counterexample"):
      verdict = "yes here, broken elsewhere"
    statement = r.statement.replace("|", "\\|")   # norms ||x|| would split the row
    residual, tolerance = _apart(r.residual, r.tolerance)
    lines.append(f"| {r.id} | {statement} | {r.source} | {r.kind} | {residual} | "
                 f"{tolerance} | {verdict} | {r.search} |")
  return "\n".join(lines)


def write_checks(rows: list[CheckRow], path) -> None:
  """Writes the rows to ``path``, atomically, as a JSON list (:meth:`CheckRow.as_dict` each)."""
  atomic_write(path, json.dumps([r.as_dict() for r in rows], indent=1))


def failed_checks(rows: list[CheckRow]) -> list[CheckRow]:
  """Identities the toolkit relies on that did not hold (claims that do not are findings)."""
  return [r for r in rows if r.kind == "identity" and not r.holds]
