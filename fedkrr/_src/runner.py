"""One front door for a protocol's predictions: :func:`run` checks, picks the path, runs it.

:func:`run` is :func:`plan_run` (every check, once: the protocol's row and parameters,
the path, the memory estimate), :func:`check_fits` and :func:`execute` (the path the
plan chose, nothing checked again; the closed form with its limit factorises each
agent's block once). ``fedkrr run`` (the command line) makes the same plan on a problem
file, words its memory hints in its flags, executes it and writes the result. The
paths themselves live in ``closed_form`` (the closed forms), ``protocols`` (literal
round-by-round simulation) and ``matfree`` (rounds by conjugate gradients, no N x N
matrix).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import protocols
from fedkrr._src.learner import krr_learners
from fedkrr._src.names import BASELINES
from fedkrr._src.names import RUN_METHODS
from fedkrr._src.names import ProtocolInfo
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import check_params
from fedkrr._src.names import make_params
from fedkrr._src.names import protocol_info
from fedkrr._src.names import protocol_names
from fedkrr._src.platform import memory
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.scale import matfree
from fedkrr._src.scale import sharded
from fedkrr._src.scale.sharded import SHARDED_PROTOCOLS

MATFREE_OPTIONS = ("landmarks", "tol", "maxiter", "key", "tile_elements", "history")
"""The matrix-free path's options that :func:`run` passes on."""


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` computed.

  Attributes:
    predictions: a protocol's rounds 0, every, 2 every, ... at ``x_eval``:
      ``(T_kept, M, n_eval[, C])``; "central" and "local": each agent's model,
      ``(M, n_eval[, C])``.
    method: the path that ran ("closed-form", "simulate", "matfree" or "sharded").
    limit: the t -> infinity predictions (``limit=True`` where they exist), else ``None``.
    spectral_radius: the recurrence's spectral radius (``limit=True``), else ``None``.
    notes: what a reader should know (no limit for a baseline, a protocol that does
      not converge).
    fixed_point: the recurrence's fixed point (``limit=True``), whether or not the
      rounds converge to it: ``limit`` where they do (spectral radius below one), a
      point they do not reach where they do not (``neural.compare`` draws it either
      way, beside the spectral radius); else ``None``.
  """

  predictions: np.ndarray
  method: str
  limit: np.ndarray | None = None
  spectral_radius: np.ndarray | None = None
  notes: tuple[str, ...] = ()
  fixed_point: np.ndarray | None = None


def method_bytes(problem: FederatedProblem, protocol: str, n_eval: int, kept: int,
                 itemsize: int, limit: bool = False) -> dict[str, int | None]:
  """The peak memory each path would need (``None``: it cannot run this).

  Args:
    problem: the federated problem.
    protocol: one of ``fedkrr.PROTOCOLS`` or "central" / "local".
    n_eval: the number of evaluation points.
    kept: the rounds kept (1 for a baseline).
    itemsize: 8 (float64) or 4 (float32).
    limit: the limit is computed too (one solve with the N x N recurrence matrix).
  """
  baseline = protocol in BASELINES
  sizes, n = problem.sizes, problem.num_points
  outputs = int(np.prod(problem.ys[0].shape[1:], dtype=np.int64))
  dim = int(problem.xs[0].shape[1])
  trajectory = memory.trajectory_bytes(protocol, n, problem.num_agents, outputs, n_eval,
                                       kept, itemsize) if not baseline else 0
  if baseline:
    exact = memory.baseline_bytes(protocol, sizes, outputs, n_eval, itemsize)
  else:
    exact = memory.exact_bytes(protocol, sizes, outputs, n_eval, kept, itemsize)
    if limit:
      exact += 3 * n * n * itemsize
  free = None
  if float(problem.ridge) > 0 and (baseline or not limit):
    free = memory.matfree_bytes(protocol, sizes, dim, outputs, n_eval, kept, itemsize)
  simulate = None if baseline else 2 * max(sizes) ** 2 * itemsize + trajectory
  on_mesh = None
  if not baseline and not limit and protocol_info(protocol).sharded:
    m, n = problem.num_agents, max(sizes)
    # every agent's blocks on the whole mesh (cross blocks, Cholesky factors and roots),
    # the read-outs at x_eval, and the kept rounds twice (computed, then gathered)
    on_mesh = itemsize * ((m * m + 2 * m) * n * n + m * n_eval * n
                          + 2 * kept * m * n_eval * outputs)
  return {"closed-form": exact, "matfree": free, "simulate": simulate, "sharded": on_mesh}


MAX_CLOSED_FORM_BLOCKS = 512
"""The most transfer blocks ``S_i K^j_ij`` (one a pair of agents the protocol couples)
the closed form is planned with. Its program holds one block each, so compiling it
takes time and memory in their number: on the 2-core CPU, AvgKD's M (M - 1) blocks of
one point each took 6 s to compile for M = 10, 38 s for M = 30, and M = 100 (9,900
blocks) had no result after 200 s at 6 GB, where the literal rounds take seconds.
Past this, ``method="auto"`` runs the literal rounds and ``"closed-form"`` is refused."""


def closed_form_blocks(protocol: str, num_agents: int) -> int:
  """The transfer blocks the closed form of ``protocol`` forms for ``num_agents`` agents
  (``fedkrr.PROTOCOLS``' ``transfers``: M for a ring, M^2 for all pairs, else M (M - 1))."""
  m = num_agents
  transfers = protocol_info(protocol).transfers
  return m if transfers == "ring" else m * m if transfers == "all" else m * (m - 1)


def auto_method(need: dict[str, int | None], available: int, blocks: int = 0) -> str:
  """The "auto" rule: the literal rounds if the closed form would form more than
  :data:`MAX_CLOSED_FORM_BLOCKS` transfer blocks (``blocks``, :func:`closed_form_blocks`);
  else the closed form if it fits in half of ``available`` bytes (or the matrix-free
  path cannot run), else the matrix-free path."""
  if blocks > MAX_CLOSED_FORM_BLOCKS and need.get("simulate") is not None:
    return "simulate"   # the closed form's program would not compile in reasonable time
  exact = need["closed-form"] or 0
  return "matfree" if need["matfree"] is not None and exact > available // 2 else "closed-form"


def choose_method(problem: FederatedProblem, protocol: str, rounds: int | None, n_eval: int, *,
                  every: int = 1, limit: bool = False, available: int | None = None) -> str:
  """What ``method="auto"`` of :func:`run` picks: "closed-form", "matfree" or "simulate".

  The closed form when the matrix-free path cannot run (c = 0, or ``limit``) or when
  the closed form's estimated peak memory (:func:`method_bytes`) is at most half of
  ``available`` (default :func:`fedkrr.scale.memory_limit`: the accelerator's memory, else
  the host's available memory; the other half is headroom for the estimate's error and
  the rest of the process); otherwise the matrix-free path, whose memory is O(N (m + d)).
  The literal rounds first when the closed form would form more than
  :data:`MAX_CLOSED_FORM_BLOCKS` transfer blocks (many agents: its program would not
  compile in reasonable time).

  Args:
    problem: the federated problem.
    protocol: one of ``fedkrr.PROTOCOLS``, or "central" / "local".
    rounds: T >= 1 (ignored by "central" and "local").
    n_eval: the number of evaluation points.
    every: the rounds kept are 0, k, 2k, ...
    limit: the limit is computed too.
    available: bytes of memory to plan with.
  """
  return plan_run(problem, protocol, rounds, n_eval, every=every, limit=limit,
                  available=available).method


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """What :func:`plan_run` decided, once, for :func:`run` and ``fedkrr run``.

  Attributes:
    protocol: the protocol's name, or "central" / "local".
    row: its row of the protocol table (``None`` for a baseline).
    params: its parameters, checked (``None`` for a baseline).
    rounds: T (``None`` or ignored for a baseline).
    every: the rounds kept are 0, k, 2k, ...
    limit: the limit is computed too.
    method: the path chosen ("auto" resolved).
    n_eval: the number of evaluation points.
    kept: the rounds kept (1 for a baseline).
    itemsize: bytes per number (8 float64, 4 float32).
    need: :func:`method_bytes`' estimate per path (``None``: it cannot run this).
    available: the bytes of memory planned with.
  """

  protocol: str
  row: ProtocolInfo | None
  params: ProtocolParams | None
  rounds: int | None
  every: int
  limit: bool
  method: str
  n_eval: int
  kept: int
  itemsize: int
  need: dict[str, int | None]
  available: int

  @property
  def size(self) -> int:
    """The bytes the chosen path needs (the literal rounds: the kept predictions and
    coefficients of :func:`fedkrr.trajectory`'s layout)."""
    if self.method == "simulate":
      return self.need["trajectory"] or 0
    return self.need.get(self.method) or 0


def plan_run(problem: FederatedProblem, protocol: str, rounds: int | None, n_eval: int, *,
             method: str = "auto", every: int = 1, limit: bool = False,
             params: ProtocolParams | None = None, available: int | None = None) -> RunPlan:
  """Checks :func:`run`'s arguments once and plans the run: parameters, path, memory.

  Args:
    problem, protocol, rounds, method, every, limit, params: as :func:`run`.
    n_eval: the number of evaluation points.
    available: bytes of memory to plan with (default :func:`fedkrr.scale.memory_limit`).

  Returns:
    A :class:`RunPlan` (whether it fits is :func:`check_fits`'s question).

  Raises:
    ValueError: an argument :func:`check_run` refuses. ``ProblemError``: "matfree"
      with ridge 0.
  """
  params = make_params(params)
  check_run(problem, protocol, rounds, method=method, every=every, limit=limit, params=params)
  baseline = protocol in BASELINES
  row = None if baseline else protocol_info(protocol)
  params = None if baseline else params
  if method == "matfree":
    matfree.check_matfree_problem(problem)
  n_eval = int(n_eval)
  kept = kept_rounds(protocol, rounds, every)
  itemsize = jnp.dtype(problem.ridge.dtype).itemsize
  need: dict[str, int | None] = dict(method_bytes(problem, protocol, n_eval, kept, itemsize,
                                                  limit))
  outputs = int(np.prod(problem.ys[0].shape[1:], dtype=np.int64))
  need["trajectory"] = 0 if baseline else memory.trajectory_bytes(
      protocol, problem.num_points, problem.num_agents, outputs, n_eval, kept, itemsize)
  available = memory.memory_limit() if available is None else int(available)
  if method == "auto" and row is not None and not row.closed_form:
    method = "simulate"   # a registered protocol with its literal rounds only
  elif method == "auto":
    blocks = 0 if baseline else closed_form_blocks(protocol, problem.num_agents)
    method = auto_method(need, available, blocks)
  return RunPlan(protocol, row, params, rounds, every, limit, method, n_eval, kept, itemsize,
                 need, available)


def check_fits(problem: FederatedProblem, plan: RunPlan) -> None:
  """Raises ``SizeError`` before any work if the plan's path needs more memory than it
  planned with (:attr:`RunPlan.size` against :attr:`RunPlan.available`), as ``fedkrr run``
  refuses it: sizes past what the machine holds would otherwise abort the process inside
  XLA."""
  memory.check_memory(plan.size, f"{plan.protocol} by {plan.method} on {problem.num_points} "
                      f"points with {plan.kept} rounds kept and {plan.n_eval} evaluation points",
                      "keep fewer rounds (every=k), or fewer rounds or evaluation points",
                      plan.available)


def kept_rounds(protocol: str, rounds: int | None, every: int) -> int:
  """How many rounds a run keeps (1 for a baseline)."""
  return 1 if protocol in BASELINES else -(-int(rounds or 0) // every)


def check_run(problem: FederatedProblem, protocol: str, rounds: int | None, *,
              method: str = "auto", every: int = 1,
              limit: bool = False, params: ProtocolParams | None = None) -> None:
  """Raises ``ValueError`` naming the argument (``rounds:``, ``start:``, ``every:``,
  ``limit:``, ``method:``, ``protocol:``) unless :func:`run` can take them."""
  if protocol not in protocol_names() + BASELINES:
    raise ValueError(f"protocol: expected one of {', '.join(protocol_names())}, "
                     f"{', '.join(BASELINES)}; got {protocol!r}")
  if method not in RUN_METHODS:
    raise ValueError(f"method: expected one of {', '.join(RUN_METHODS)}, got {method!r}")
  baseline = protocol in BASELINES
  if not baseline and (rounds is None or rounds < 1):
    raise ValueError(f"rounds: protocol {protocol} needs a number of rounds >= 1")
  params = make_params(params)
  if baseline and not 0 <= params.start < problem.num_agents:   # else check_params's
    raise ValueError(f"start: expected an agent index in 0..{problem.num_agents - 1}, "
                     f"got {params.start}")
  if not baseline:
    check_params(protocol, params, problem.num_agents)
    closed_form.check_every(every, protocol, problem.num_agents)
  if method == "sharded":
    if baseline or not protocol_info(protocol).sharded:
      raise ValueError(f"method: sharded runs the protocols {', '.join(SHARDED_PROTOCOLS)} "
                       f"(agents on their own devices), not {protocol}")
    if every != 1 or limit:
      raise ValueError(f"{'every' if every != 1 else 'limit'}: the sharded path keeps every "
                       f"round and has no limit; use --method closed-form for them")
  closed = baseline or protocol_info(protocol).closed_form
  if (method == "closed-form" or limit) and not closed:
    raise ValueError(f"{'method' if method == 'closed-form' else 'limit'}: {protocol} has no "
                     f"closed form; use method 'simulate' (the literal rounds)")
  if not baseline and (method == "closed-form" or limit):
    blocks = closed_form_blocks(protocol, problem.num_agents)
    if blocks > MAX_CLOSED_FORM_BLOCKS:
      raise ValueError(f"{'method' if method == 'closed-form' else 'limit'}: the closed form of "
                       f"{protocol} for {problem.num_agents} agents forms {blocks} transfer "
                       f"blocks, more than the {MAX_CLOSED_FORM_BLOCKS} it compiles in "
                       f"reasonable time; use method 'simulate' (the literal rounds) or "
                       f"'auto'{'' if method == 'closed-form' else ', without the limit'}")
  if method == "matfree" and limit and not baseline:
    raise ValueError("limit: the limit is one solve with the N x N recurrence matrix, which "
                     "the matrix-free path never forms; drop --limit (limit=True), or use "
                     "--method closed-form")


def check_finite(problem: FederatedProblem, preds: np.ndarray, what: str) -> None:
  """Raises ``ValueError`` if ``preds`` holds NaN or inf: from which round, and the likely
  cause (a kernel that is not finite on an agent's inputs, or values that overflow)."""
  bad = ~np.isfinite(preds)
  if not bad.any():
    return
  first = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1))) if preds.ndim > 1 else 0
  causes = []
  for a, x in enumerate(problem.xs):
    gram = np.asarray(problem.gram(a, x, x))
    if not np.all(np.isfinite(gram)):
      causes.append(f"kernel_{a} ({problem.kernels[a].to_dict().get('name', '?')}) is not finite "
                    f"on x_{a} (largest |x| = {float(np.max(np.abs(np.asarray(x)))):.3g}): "
                    f"rescale the inputs or change the kernel's parameters")
  if not causes:
    biggest = max(float(np.max(np.abs(np.asarray(y)))) for y in problem.ys)
    causes.append(f"the values overflow {np.asarray(preds).dtype} (largest |y| = {biggest:.3g}); "
                  f"rescale the labels or drop --float32")
  raise ValueError(f"{what} are not finite (NaN or inf) from round {first} on: {causes[0]}")


def _baseline(problem: FederatedProblem, protocol: str, x_eval: Any, method: str,
              matfree_options: dict[str, Any]) -> Any:
  if method == "closed-form":
    fn = closed_form.central if protocol == "central" else closed_form.local
    return fn(problem, x_eval)
  fit = protocols.central_models if protocol == "central" else protocols.local_models
  learners = (matfree.matfree_learners(problem, **matfree_options) if method == "matfree"
              else krr_learners(problem))
  models = fit(learners, problem.xs, problem.ys)
  return jnp.stack([m.predict(x_eval) for m in models])


def run(problem: FederatedProblem, protocol: str, rounds: int | None, x_eval: Any, *,
        method: str = "auto", start: int | None = None, every: int = 1, limit: bool = False,
        progress: bool = False, params: ProtocolParams | None = None,
        **matfree_options: Any) -> RunResult:
  """A protocol's predictions at ``x_eval`` by the path ``method`` names.

  Args:
    problem: the federated problem (:func:`fedkrr.make_problem`, :func:`fedkrr.load_problem`).
    protocol: one of ``fedkrr.PROTOCOLS``, or "central" / "local" (each agent's
      centralised optimum, or its model on its own data).
    rounds: T >= 1 (ignored by "central" and "local").
    x_eval: (n_eval, d) evaluation points.
    method: "closed-form" (one eigendecomposition, :func:`fedkrr.trajectory`),
      "simulate" (the literal rounds, :func:`fedkrr.simulate`), "matfree" (conjugate
      gradients, no N x N matrix; ridge > 0), "sharded" (each agent on its own device
      of ``fedkrr.scale.agent_mesh(M)``, across processes too:
      :func:`fedkrr.scale.sharded_trajectory`; ``fedkrr.scale.SHARDED_PROTOCOLS``, every
      round, no limit) or "auto"
      (:func:`choose_method`: the closed form if it fits in half the memory, else the
      matrix-free path; never "sharded").
    start: deprecated: ``params=ProtocolParams(start=...)`` (AKD's first agent).
    every: keep rounds 0, k, 2k, ... (AKD: a multiple of M).
    limit: also the t -> infinity limit and the spectral radius (closed form).
    progress: a progress bar over the rounds (simulation, matrix-free path).
    params: the protocol's parameters (:class:`fedkrr.ProtocolParams`: ``start``,
      ``weights``).
    **matfree_options: ``landmarks``, ``tol``, ``maxiter``, ``key``, ``tile_elements``,
      ``history`` of the matrix-free path (:func:`fedkrr.scale.matfree_learners`), where it runs.

  Returns:
    A :class:`RunResult`.

  Raises:
    ValueError: an argument :func:`check_run` refuses, or predictions that are not
      finite (naming the round and the likely cause). ``ProblemError``: "matfree"
      with ridge 0.
  """
  unknown = sorted(set(matfree_options) - set(MATFREE_OPTIONS))
  if unknown:
    raise ValueError(f"matfree_options: unknown {', '.join(unknown)}; expected some of "
                     f"{', '.join(MATFREE_OPTIONS)}")
  plan = plan_run(problem, protocol, rounds, int(np.shape(x_eval)[0]), method=method,
                  every=every, limit=limit, params=make_params(params, start))
  check_fits(problem, plan)
  return execute(problem, plan, x_eval, progress=progress, **matfree_options)


def _limit_result(problem: FederatedProblem, plan: RunPlan, lim: closed_form.Limit,
                  notes: list[str]) -> tuple[Any, Any, Any]:
  """The limit's predictions (where the rounds converge), spectral radius and fixed point."""
  radius, fixed_point = np.asarray(lim.spectral_radius), np.asarray(lim.predictions)
  if lim.converges:
    check_finite(problem, fixed_point[None], "the limit's predictions")
    return fixed_point, radius, fixed_point
  notes.append(f"{plan.protocol} does not converge (spectral radius "
               f"{float(lim.spectral_radius):.6g} >= 1), so no limit was written")
  return None, radius, fixed_point


def execute(problem: FederatedProblem, plan: RunPlan, x_eval: Any, *, progress: bool = False,
            **matfree_options: Any) -> RunResult:
  """Runs a :class:`RunPlan` (:func:`plan_run`) at ``x_eval``: the path it chose, no
  checks repeated. :func:`run` is :func:`plan_run`, :func:`check_fits` and this.

  The closed form with the limit shares one factorisation of each agent's block
  (:func:`fedkrr._src.closed_form.solve`).
  """
  notes: list[str] = []
  lim_preds = radius = fixed_point = None
  protocol, method, params, rounds = plan.protocol, plan.method, plan.params, plan.rounds
  if plan.row is None:
    preds = _baseline(problem, protocol, x_eval, method, matfree_options)
    if plan.limit:
      notes.append(f"{protocol} has no rounds, so no limit was written")
  else:
    assert rounds is not None and params is not None
    lim = None
    if method == "closed-form":
      preds, lim = closed_form.solve(problem, plan.row, params, rounds, x_eval,
                                     every=plan.every, with_limit=plan.limit)
    elif method == "matfree":
      preds = matfree.matfree_trajectory(problem, protocol, rounds, x_eval, every=plan.every,
                                         progress=progress, params=params, **matfree_options)
    elif method == "sharded":   # on fedkrr.scale.agent_mesh(M): every process's devices
      preds = sharded.sharded_trajectory(problem, protocol, rounds, x_eval, params=params)
    else:
      preds = protocols.simulate(protocol, krr_learners(problem), problem.xs, problem.ys,
                                 rounds, x_eval, progress=progress, every=plan.every,
                                 params=params)
    if plan.limit:
      if lim is None:
        lim = closed_form.solve(problem, plan.row, params, 1, x_eval, with_limit=True,
                                with_trajectory=False)[1]
      assert lim is not None
      lim_preds, radius, fixed_point = _limit_result(problem, plan, lim, notes)
  predictions = np.asarray(preds)
  check_finite(problem, predictions if plan.row is not None
               else predictions[None], "the predictions")
  return RunResult(predictions, method, lim_preds, radius, tuple(notes), fixed_point)
