"""Model-agnostic distillation protocols, written once against fit/predict.

Each protocol is a :class:`Protocol` ``(init, step)`` pair of pure pieces, in the
spirit of ``optax.GradientTransformation``: ``init(ys)`` returns the protocol's
state and ``step(state, learners, xs, ys)`` runs one round, returning the new
state and a :class:`RoundOutput` (the models of the round and how they combine
into the round's predictor). Only ``learner.fit`` and ``model.predict`` are
called, so the same code runs exact kernel ridge learners (``fedkrr``) and
neural or random-forest learners (``neural``).

Protocols (agents a = 0..M-1; DESIGN.md, Afonin & Karimireddy Sec. 4-5, App. G):

* ``akd(start)``: round 0 fits agent ``start`` on its labels; round t's model
  belongs to agent ``(start + t) mod M`` and is fitted on the previous model's
  predictions on that agent's inputs.
* ``avgkd()``: ``yhat_i(t+1) = (y_i + sum_{j != i} g_j(t)(X_i)) / M``.
* weighted AvgKD (``get_protocol("weighted-avgkd", params=ProtocolParams(weights=w))``):
  ``yhat_i(t+1) = w_i y_i + sum_{j != i} w_j g_j(t)(X_i)``, weights summing to 1
  (equal weights 1/M: AvgKD).
* ``pkd()``: ``yhat_i(t+1) = (yhat_i(t) + sum_{j != i} g_j(t)(X_i)) / M`` (the
  paper's equations, App. E).
* ``pkd_mean()``: ``yhat_i(t+1) = sum_j g_j(t)(X_i) / M``, agent i's own model
  included and no labels: the PKD of the authors' code.
* ``ekd()``: AKD from every agent s; round t's predictor is the partial sum
  ``f_t = sum_{r <= t} (-1)^r sum_s g^s_r``.
* ``backfit(order)``: from all-zero models, agent i refits on
  ``y_i - sum_{j != i} h_j(X_i)``, in index order with the latest models
  (``"gauss-seidel"``) or all from the previous sweep (``"jacobi"``); the
  predictor is ``sum_i h_i``.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedkrr._src.learner import Learner
from fedkrr._src.learner import Model
from fedkrr._src.learner import WarmStartLearner
from fedkrr._src.learner import check_learners
from fedkrr._src.learner import fit_all
from fedkrr._src.learner import has_capability
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import check_params
from fedkrr._src.names import make_params
from fedkrr._src.names import protocol_info

Array = jax.Array
ArrayLike = jax.typing.ArrayLike



class RoundOutput(NamedTuple):
  """What one round produced.

  Attributes:
    models: the models of this round.
    agents: the agent that owns (fitted) each model.
    weights: ``None`` if each model is its own predictor (AvgKD, PKD,
      pkd-mean); else the round's predictor is ``sum_k weights[k] * models[k]``.
    cumulative: if true, the protocol's predictor after round t is the sum of
      the weighted predictors of rounds 0..t (EKD).
  """

  models: tuple[Model, ...]
  agents: tuple[int, ...]
  weights: tuple[float, ...] | None
  cumulative: bool = False


class Protocol(NamedTuple):
  """A distillation protocol as a pair of pure pieces.

  Attributes:
    name: the protocol's name.
    init: ``ys -> state``.
    step: ``(state, learners, xs, ys) -> (state, RoundOutput)``.
  """

  name: str
  init: Callable[[Sequence[Array]], Any]
  step: Callable[[Any, Sequence[Learner], Sequence[Array], Sequence[Array]],
                 tuple[Any, RoundOutput]]


class AKDState(NamedTuple):
  round: int
  agent: int       # the agent that fits next
  targets: Array   # its targets


class AveragedState(NamedTuple):
  round: int
  targets: tuple[Array, ...]


class EKDState(NamedTuple):
  round: int
  runs: tuple[AKDState, ...]


class BackfitState(NamedTuple):
  round: int
  models: tuple[Model | None, ...]   # None: the all-zero model


def check_start(start: int, num_agents: int) -> None:
  """Raises ``ValueError`` unless ``start`` is an agent index."""
  if not isinstance(start, int) or not 0 <= start < num_agents:
    raise ValueError(f"start: expected an agent index in 0..{num_agents - 1}, got {start!r}")


def check_rounds(rounds: int) -> None:
  """Raises ``ValueError`` unless ``rounds`` is an integer >= 1."""
  if not isinstance(rounds, int) or rounds < 1:
    raise ValueError(f"rounds: expected an integer >= 1, got {rounds!r}")


def check_every(every: int) -> None:
  """Raises ``ValueError`` unless ``every`` (keep every k-th round) is an integer >= 1."""
  if not isinstance(every, int) or isinstance(every, bool) or every < 1:
    raise ValueError(f"every: expected an integer >= 1, got {every!r}")


def check_protocol_name(name: str) -> None:
  """Raises ``ValueError`` unless ``name`` is one of ``PROTOCOLS``."""
  protocol_info(name)


def _akd_step(state: AKDState, learners, xs) -> tuple[AKDState, Model]:
  a = state.agent
  model = learners[a].fit(xs[a], state.targets)
  nxt = (a + 1) % len(xs)
  return AKDState(state.round + 1, nxt, model.predict(xs[nxt])), model


def akd(start: int = 0) -> Protocol:
  """Alternating KD started at agent ``start`` (M-agent cycle, App. G)."""

  def init(ys):
    check_start(start, len(ys))
    return AKDState(0, start, ys[start])

  def step(state, learners, xs, ys):
    agent = state.agent
    state, model = _akd_step(state, learners, xs)
    return state, RoundOutput((model,), (agent,), (1.0,))

  return Protocol("akd", init, step)


def _averaged(name: str, own: str, params: ProtocolParams | None = None) -> Protocol:
  """Every agent refits on ``(own_i + sum_{j != i} g_j(t)(X_i)) / M``.

  ``own`` names agent i's own term: ``"labels"`` (``y_i``, AvgKD), ``"targets"``
  (its previous targets ``yhat_i(t)``, PKD) or ``"model"`` (its own model's
  predictions ``g_i(t)(X_i)``, pkd-mean). With ``params`` (a protocol with agent
  weights w, summing to 1; ``None``: 1/M each) the average is weighted:
  ``w_i own_i + sum_{j != i} w_j g_j(t)(X_i)``.
  """

  def init(ys):
    if params is not None:
      check_params(name, params, len(ys))
    return AveragedState(0, tuple(ys))

  def step(state, learners, xs, ys):
    m = len(xs)
    models = fit_all(learners, xs, state.targets)
    targets = []
    for i in range(m):
      if own == "labels":
        base = ys[i]
      elif own == "targets":
        base = state.targets[i]
      else:
        base = models[i].predict(xs[i])
      if params is None:
        others = sum(models[j].predict(xs[i]) for j in range(m) if j != i)
        targets.append((base + others) / m)
      else:
        w = params.agent_weights(m)
        targets.append(w[i] * base + sum(w[j] * models[j].predict(xs[i])
                                         for j in range(m) if j != i))
    return (AveragedState(state.round + 1, tuple(targets)),
            RoundOutput(models, tuple(range(m)), None))

  return Protocol(name, init, step)


def avgkd() -> Protocol:
  """Averaged KD: every agent refits on the average of its labels and the others' predictions."""
  return _averaged("avgkd", own="labels")


def pkd() -> Protocol:
  """Parallel KD: like AvgKD with the previous targets in place of the labels (App. E)."""
  return _averaged("pkd", own="targets")


def pkd_mean() -> Protocol:
  """Parallel KD as the authors' code runs it: every agent refits on the mean of all M models.

  Round 0 fits every agent on its labels; then

      yhat_i(t+1) = (1 / M) sum_{j = 0..M-1} g_j(t)(X_i),

  agent i's own model included and no labels: the ``PKD`` loss of the authors'
  code (AfoninAndrei/ICLR2022, ``src/methods.py``), which is passed all M
  agents' models. It is :func:`pkd` (the paper's equations, App. E) with the own
  model's predictions ``g_i(t)(X_i)`` in place of the own previous targets
  ``yhat_i(t)``. For kernel ridge agents the difference is the ridge's shrinkage
  of the own term, ``yhat_i(t) - g_i(t)(X_i) = c S_i yhat_i(t)`` with
  ``S_i = (c I + K^i_ii)^{-1}``, so with c = 0 and invertible Gram blocks the two
  protocols are the same. The closed form, its limit (0) and its rate are in
  :func:`fedkrr.trajectory` and :func:`fedkrr.limit`.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> fedkrr.simulate(fedkrr.protocols.pkd_mean(), fedkrr.krr_learners(problem), problem.xs,
    ...                 problem.ys, 3, x).shape   # (rounds, agents, points)
    (3, 2, 8)
  """
  return _averaged("pkd-mean", own="model")


def ekd() -> Protocol:
  """Ensembled KD: AKD from every agent, summed with alternating signs (eq. 9, 32)."""

  def init(ys):
    return EKDState(0, tuple(AKDState(0, s, ys[s]) for s in range(len(ys))))

  def step(state, learners, xs, ys):
    agents = tuple(run.agent for run in state.runs)   # distinct agents: fitted together
    models = fit_all([learners[a] for a in agents], [xs[a] for a in agents],
                     [run.targets for run in state.runs])
    runs = []
    for run, model in zip(state.runs, models):
      nxt = (run.agent + 1) % len(xs)
      runs.append(AKDState(run.round + 1, nxt, model.predict(xs[nxt])))
    sign = -1.0 if state.round % 2 else 1.0
    return (EKDState(state.round + 1, tuple(runs)),
            RoundOutput(models, agents, (sign,) * len(models), cumulative=True))

  return Protocol("ekd", init, step)


def _residual(i, models, xs, ys):
  """Agent i's labels minus the other agents' models (None: zero) on its inputs."""
  residual = ys[i]
  for j, model in enumerate(models):
    if j != i and model is not None:
      residual = residual - model.predict(xs[i])
  return residual


def backfit(order: str = "gauss-seidel") -> Protocol:
  """Backfitting KD: each agent refits on its labels minus the others' predictions."""
  if order not in ("gauss-seidel", "jacobi"):
    raise ValueError(f"order: expected 'gauss-seidel' or 'jacobi', got {order!r}")

  def init(ys):
    return BackfitState(0, (None,) * len(ys))

  def step(state, learners, xs, ys):
    m = len(xs)
    if order == "jacobi":
      residuals = [_residual(i, state.models, xs, ys) for i in range(m)]
      current = fit_all(learners, xs, residuals)
      return (BackfitState(state.round + 1, current),
              RoundOutput(current, tuple(range(m)), (1.0,) * m))
    current = list(state.models)
    for i in range(m):
      current[i] = learners[i].fit(xs[i], _residual(i, current, xs, ys))
    return (BackfitState(state.round + 1, tuple(current)),
            RoundOutput(tuple(current), tuple(range(m)), (1.0,) * m))

  name = "backfit-gs" if order == "gauss-seidel" else "backfit-jacobi"
  return Protocol(name, init, step)


ROUNDS: dict[str, Callable[[ProtocolParams], Protocol]] = {
    "akd": lambda params: akd(params.start),
    "avgkd": lambda params: avgkd(),
    "weighted-avgkd": lambda params: _averaged("weighted-avgkd", "labels", params),
    "pkd": lambda params: pkd(),
    "pkd-mean": lambda params: pkd_mean(),
    "ekd": lambda params: ekd(),
    "backfit-gs": lambda params: backfit("gauss-seidel"),
    "backfit-jacobi": lambda params: backfit("jacobi"),
}
"""Each protocol's literal rounds, by name: ``params -> Protocol`` (its parameters, a
:class:`fedkrr.ProtocolParams`). This layer's one mapping from the protocol to its
behaviour (``fedkrr.protocols.register_protocol`` adds to it)."""


def get_protocol(name: str, start: int | None = None,
                 params: ProtocolParams | None = None) -> Protocol:
  """The protocol called ``name`` (one of ``PROTOCOLS``, or a registered one): its rounds.

  Args:
    name: a protocol's name (``fedkrr.PROTOCOL_TABLE``).
    start: deprecated: ``params=ProtocolParams(start=...)`` (AKD's first agent).
    params: the protocol's parameters (:class:`fedkrr.ProtocolParams`).
  """
  row = protocol_info(name)
  return ROUNDS[row.name](make_params(params, start))


def _check_data(learners, xs, ys) -> None:
  if len(xs) < 2 or len(xs) != len(ys):
    raise ValueError(f"xs, ys: expected one array each per agent (at least 2), "
                     f"got {len(xs)} and {len(ys)}")
  check_learners(learners, len(xs))


def iterate(protocol: Protocol, learners: Sequence[Learner], xs: Sequence[Array],
            ys: Sequence[Array], rounds: int, state: Any = None,
            progress: bool = False) -> Iterator[tuple[Any, RoundOutput]]:
  """Runs ``rounds`` rounds, yielding ``(state, output)`` after each.

  Pass a saved ``state`` to resume; its ``round`` field says where. A learner with a
  ``warm_start_from(model) -> learner`` method (the matrix-free learner, whose CG then
  starts from the agent's previous solution) is replaced after each round by
  ``learner.warm_start_from(model)`` with the model it fitted in that round; the
  protocols still call only ``fit`` and ``predict``.
  """
  _check_data(learners, xs, ys)
  check_rounds(rounds)
  learners = list(learners)
  if state is None:
    state = protocol.init(ys)
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=rounds, initial=state.round, desc=protocol.name, unit="round")
  while state.round < rounds:
    state, output = protocol.step(state, learners, xs, ys)
    for agent, model in zip(output.agents, output.models):
      learner = learners[agent]
      if has_capability(learner, WarmStartLearner, f"learners[{agent}]"):
        learners[agent] = learner.warm_start_from(model)
    if bar is not None:
      bar.update(1)
    yield state, output
  if bar is not None:
    bar.close()


def simulate(protocol: Protocol | str, learners: Sequence[Learner], xs: Sequence[Array],
             ys: Sequence[Array], rounds: int, x_eval: ArrayLike, start: int | None = None,
             progress: bool = False, every: int = 1,
             params: ProtocolParams | None = None) -> Array:
  """Runs a protocol round by round and evaluates its predictors at ``x_eval``.

  Returns:
    For protocols whose models are their own predictors (AvgKD, PKD, pkd-mean), shape
    ``(rounds, M, n_eval[, C])``: entry ``[t, i]`` is agent i's round-t model.
    Otherwise ``(rounds, n_eval[, C])``: row t is the round-t predictor (AKD: the
    round-t model; EKD: the partial sum over rounds 0..t; backfitting: the sum
    of the agents' models after sweep t + 1). With ``every`` = k only rounds
    0, k, 2k, ... are kept (``ceil(rounds / k)`` rows).
  """
  check_every(every)
  if isinstance(protocol, str):
    protocol = get_protocol(protocol, start, params)
  rows, running = [], None
  for t, (_, out) in enumerate(iterate(protocol, learners, xs, ys, rounds, progress=progress)):
    keep = t % every == 0
    if not keep and not out.cumulative:
      continue
    preds = [model.predict(x_eval) for model in out.models]
    if out.weights is None:
      rows.append(jnp.stack(preds))
      continue
    combined = sum(w * p for w, p in zip(out.weights, preds))
    if out.cumulative:
      running = combined if running is None else running + combined
      combined = running
    if keep:
      rows.append(combined)
  return jnp.stack(rows)


def central_models(learners: Sequence[Learner], xs: Sequence[Array],
                   ys: Sequence[Array]) -> tuple[Model, ...]:
  """Each agent's learner fitted on the pooled data (the centralised optimum g^a*, eq. 5)."""
  _check_data(learners, xs, ys)
  x_all, y_all = jnp.concatenate(list(xs)), jnp.concatenate(list(ys))
  return tuple(learner.fit(x_all, y_all) for learner in learners)


def local_models(learners: Sequence[Learner], xs: Sequence[Array],
                 ys: Sequence[Array]) -> tuple[Model, ...]:
  """Each agent's learner fitted on its own data only."""
  _check_data(learners, xs, ys)
  return tuple(learner.fit(x, y) for learner, x, y in zip(learners, xs, ys))
