"""The protocol table, baselines and run methods, in a module that imports no JAX.

A protocol is one value: a row of :data:`PROTOCOL_TABLE` (:class:`ProtocolInfo`, the facts
every consumer reads: the literal rounds, the closed form and its limit, ``fedkrr.run``,
the memory planner, ``neural``'s configs and reports) and its parameters, one
:class:`ProtocolParams`. ``neural``'s configs and both command lines offer and check these
names before they import JAX (``neural --help`` and ``fedkrr --help`` start at once);
:mod:`protocols`, which implements them, takes them from here, so there is one copy of each.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal
import warnings

Rounds = Literal["relay", "ensemble", "averaged", "backfit"]
"""How a round forms its targets (:attr:`ProtocolInfo.rounds`)."""
Own = Literal["labels", "targets", "model", "gauss-seidel", "jacobi"]
"""An averaged protocol's own term, or a backfitting protocol's order (:attr:`ProtocolInfo.own`)."""
Combine = Literal["per-agent", "single", "alternating-sum", "sum"]
"""How a round's models combine into its predictor (:attr:`ProtocolInfo.combine`)."""
LimitKind = Literal["zero", "fixed-point"]
"""The t -> infinity limit (:attr:`ProtocolInfo.limit`)."""
Transfers = Literal["ring", "others", "all"]
"""The transfer blocks a closed form forms (:attr:`ProtocolInfo.transfers`)."""


@dataclasses.dataclass(frozen=True)
class ProtocolParams:
  """A protocol's parameters, one object (hashable: a static argument under ``jax.jit``).

  Attributes:
    start: the agent AKD starts at (protocols with ``"start"`` in their parameters).
    weights: one weight per agent, finite, positive, summing to 1 (weighted AvgKD;
      ``None``: equal weights 1/M); ``None`` where the protocol has no weights.
  """

  def __post_init__(self):
    # a list or an array of weights as a tuple: hashable, as jax.jit's static arguments
    # must be (a list failed in the closed form only, with JAX's message)
    w = self.weights
    if w is not None and not isinstance(w, (tuple, str, bytes)):
      try:
        values = w.tolist() if hasattr(w, "tolist") else list(w)
      except TypeError:
        return   # not a sequence: check_weights names it
      if isinstance(values, list):
        object.__setattr__(self, "weights", tuple(values))

  def agent_weights(self, num_agents: int) -> tuple[float, ...]:
    """``weights``, or equal weights 1/M where they are ``None``."""
    return (1.0 / num_agents,) * num_agents if self.weights is None else self.weights

  start: int = 0
  weights: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True)
class ProtocolInfo:
  """One row of the protocol table: what a protocol is, for every consumer.

  Attributes:
    name: the name users pass (``fedkrr.trajectory(problem, name, ...)``,
      ``neural run --protocol name``).
    display: the name figures and reports print.
    rounds: how a round forms its targets: ``"relay"`` (one agent fits the previous
      model's predictions, AKD), ``"ensemble"`` (a relay from every agent, EKD),
      ``"averaged"`` (every agent refits on an average of its own term and the
      others' predictions) or ``"backfit"`` (every agent refits on its labels minus
      the others' predictions).
    own: an averaged protocol's own term of agent i: ``"labels"`` (``y_i``),
      ``"targets"`` (its previous targets) or ``"model"`` (its own model's
      predictions); a backfitting protocol's order: ``"gauss-seidel"`` or ``"jacobi"``.
    combine: how a round's models combine into its predictor: ``"per-agent"`` (each
      model is its own predictor, rows ``(M, n_eval[, C])``), ``"single"`` (the
      round's one model), ``"alternating-sum"`` (partial sums of the rounds' models
      with signs ``(-1)^t``) or ``"sum"`` (the sum of the agents' current models).
    limit: the t -> infinity limit: ``"zero"`` or ``"fixed-point"`` (a linear solve).
    closed_form: whether :func:`fedkrr.trajectory` and :func:`fedkrr.limit` have it.
    coefficient_copies: copies of the stacked coefficients a closed-form trajectory
      holds per kept round (the memory planner's term).
    transfers: the transfer blocks ``(i, j)`` its closed form forms: ``"ring"``
      (``(j + 1) mod M, j``), ``"others"`` (``i != j``) or ``"all"``.
    parameters: the fields of :class:`ProtocolParams` it reads.
    sharded: whether :func:`fedkrr.scale.sharded_trajectory` runs it.
  """

  name: str
  display: str
  rounds: Rounds
  own: Own | None
  combine: Combine
  limit: LimitKind
  closed_form: bool = True
  coefficient_copies: int = 1
  transfers: Transfers = "others"
  parameters: tuple[str, ...] = ()
  sharded: bool = True

  @property
  def per_agent(self) -> bool:
    """Whether each agent's model is its own predictor (rows ``(M, n_eval[, C])``)."""
    return self.combine == "per-agent"

  @property
  def cycles(self) -> bool:
    """Whether its models move around the ring of agents, one agent per round (AKD, EKD)."""
    return self.rounds in ("relay", "ensemble")

  @property
  def one_fit_per_round(self) -> bool:
    """Whether a round fits one agent (AKD) rather than every agent."""
    return self.rounds == "relay"


PROTOCOL_TABLE = (
    ProtocolInfo("akd", "AKD", "relay", None, "single", "zero", coefficient_copies=0,
                 transfers="ring", parameters=("start",)),
    ProtocolInfo("avgkd", "AvgKD", "averaged", "labels", "per-agent", "fixed-point"),
    ProtocolInfo("weighted-avgkd", "weighted AvgKD", "averaged", "labels", "per-agent",
                 "fixed-point", parameters=("weights",), sharded=False),
    ProtocolInfo("pkd", "PKD", "averaged", "targets", "per-agent", "zero",
                 coefficient_copies=2),
    ProtocolInfo("pkd-mean", "PKD (authors' code: mean of all M)", "averaged", "model",
                 "per-agent", "zero", transfers="all"),
    ProtocolInfo("ekd", "EKD", "ensemble", None, "alternating-sum", "fixed-point",
                 coefficient_copies=2, transfers="ring"),
    ProtocolInfo("backfit-gs", "backfitting (Gauss-Seidel)", "backfit", "gauss-seidel", "sum",
                 "fixed-point", sharded=False),
    ProtocolInfo("backfit-jacobi", "backfitting (Jacobi)", "backfit", "jacobi", "sum",
                 "fixed-point"),
)
PROTOCOLS = tuple(row.name for row in PROTOCOL_TABLE)
BASELINES = ("central", "local")
# The paths of fedkrr.run (and `fedkrr run --method`): closed form, literal rounds,
# conjugate gradients without an N x N matrix, agents on their own devices (the agent
# mesh, across processes too), or the memory rule's choice.
RUN_METHODS = ("closed-form", "simulate", "matfree", "sharded", "auto")

# The protocols known now: the table's, then those a user registered
# (fedkrr.protocols.register_protocol adds a row here and its behaviour to each layer's mapping).
_BY_NAME = {row.name: row for row in PROTOCOL_TABLE}


def protocol_names() -> tuple[str, ...]:
  """Every protocol's name: :data:`PROTOCOLS`, then those registered
  (:func:`fedkrr.protocols.register_protocol`)."""
  return tuple(_BY_NAME)


def add_row(row: ProtocolInfo) -> None:
  """Adds ``row`` to the protocols known (``fedkrr.protocols.register_protocol``'s first step).

  Raises:
    ValueError: its name is already a protocol's or a baseline's.
  """
  check_new_row(row)
  _BY_NAME[row.name] = row


def check_new_row(row: ProtocolInfo) -> None:
  """Raises ``ValueError`` unless ``row`` is a :class:`ProtocolInfo` of a name not taken
  (by a protocol or a baseline)."""
  if not isinstance(row, ProtocolInfo):
    raise ValueError(f"row: expected a fedkrr.ProtocolInfo, got {type(row).__name__}")
  if row.name in _BY_NAME or row.name in BASELINES:
    raise ValueError(f"row: {row.name!r} is already a protocol's name")


def remove_row(name: str) -> None:
  """Forgets the registered protocol ``name`` (one of the table's cannot be removed)."""
  if name in PROTOCOLS:
    raise ValueError(f"name: {name} is one of fedkrr.PROTOCOLS, which stay")
  _BY_NAME.pop(name, None)


def protocol_info(name: str) -> ProtocolInfo:
  """The row of :data:`PROTOCOL_TABLE` (or a registered row) called ``name``.

  Raises:
    ValueError: ``name`` is not one of :func:`protocol_names`.
  """
  if name not in _BY_NAME:
    raise ValueError(f"protocol: expected one of {', '.join(_BY_NAME)}, got {name!r}")
  return _BY_NAME[name]


def display_name(name: str) -> str:
  """The name figures and reports print for protocol ``name`` (``name`` itself if unknown)."""
  row = _BY_NAME.get(name)
  return name if row is None else row.display


def check_weights(weights, num_agents: int, argument: str = "weights") -> tuple[float, ...]:
  """``weights`` as a tuple of floats, checked: M of them, finite, positive, summing to 1.

  Raises:
    ValueError: naming ``argument``, unless ``weights`` are M finite numbers > 0 whose
      sum is 1 (to 1e-9).
  """
  shown = repr(weights)
  shown = shown if len(shown) <= 80 else shown[:77] + "..."
  try:
    if isinstance(weights, (str, bytes)) or any(isinstance(w, (bool, str, bytes))
                                                 for w in weights):
      raise TypeError(argument)
    values = tuple(float(w) for w in weights)
  except (TypeError, ValueError, OverflowError):   # OverflowError: an integer of 400 digits
    raise ValueError(f"{argument}: expected {num_agents} numbers (one per agent), "
                     f"got {shown}") from None
  if len(values) != num_agents:
    raise ValueError(f"{argument}: expected one weight per agent ({num_agents}), "
                     f"got {len(values)}")
  # each in (0, 1] before summing: fsum of 1e308s overflows
  if not all(math.isfinite(w) and 0 < w <= 1 for w in values):
    raise ValueError(f"{argument}: expected finite weights in (0, 1] summing to 1, got "
                     f"{shown}")
  if abs(math.fsum(values) - 1.0) > 1e-9:
    raise ValueError(f"{argument}: expected weights summing to 1, got a sum of "
                     f"{math.fsum(values)!r}")
  return values


def check_params(name: str, params: ProtocolParams, num_agents: int) -> None:
  """Raises ``ValueError`` naming the parameter unless ``params`` suit protocol ``name``.

  ``start`` must be an agent index; ``weights`` are taken only by a protocol with
  ``"weights"`` in its parameters (:func:`check_weights`; ``None``: equal weights).
  """
  row = protocol_info(name)
  start = params.start
  if not isinstance(start, int) or not 0 <= start < num_agents:
    raise ValueError(f"start: expected an agent index in 0..{num_agents - 1}, got {start!r}")
  if "weights" in row.parameters:
    if params.weights is not None:
      check_weights(params.weights, num_agents)
  elif params.weights is not None:
    raise ValueError(f"weights: protocol {name} takes no weights, got {params.weights!r}")


def make_params(params: ProtocolParams | None, start: int | None = None) -> ProtocolParams:
  """``params`` (``None``: :class:`ProtocolParams`'s defaults), or from ``start``, the older
  keyword, with a ``DeprecationWarning``: ``start=S`` is ``params=ProtocolParams(start=S)``.

  Raises:
    ValueError: both given, with different starts.
  """
  if start is not None:
    warnings.warn("start= is deprecated and will be removed: pass "
                  "params=fedkrr.ProtocolParams(start=...)", DeprecationWarning, stacklevel=3)
    if params is None:
      return ProtocolParams(start=start)
    if start != params.start:
      raise ValueError(f"start: given as {start!r} and as params.start={params.start!r}")
  return ProtocolParams() if params is None else params
