"""FedAvg (McMahan et al., 2017) as a protocol of the same ``(init, step)`` shape.

Each round every agent starts from the global parameters, trains locally on its
own labels (the Flax learner's training, warm-started from the global
parameters; no second training loop), and the server averages the agents'
parameters weighted by their numbers of points:
``w(t+1) = sum_a (N_a / N) w_a(t)`` (McMahan et al.), or with equal weights
``1 / M`` as the code of Afonin & Karimireddy does. FedAvg needs one architecture
for all agents; the paper compares it with AvgKD in the same-model setting (Fig. 6, 9).
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import NamedTuple
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr.learners import fit_all
from fedkrr.learners import has_capability
from fedkrr.protocols import Protocol
from fedkrr.protocols import RoundOutput
from neural._src.capabilities import EpochScoredModel
from neural._src.capabilities import ParameterLearner
from neural._src.choices import WEIGHTINGS
from neural._src.training.training import init_variables


class FedAvgError(ValueError):
  """FedAvg was asked for learners it cannot average (named in the message)."""


class FedAvgState(NamedTuple):
  """State of FedAvg.

  Attributes:
    round: rounds done.
    variables: the global (server) variables that the next round starts from.
    model: the global model after the last round (``None`` before round 0).
  """

  round: int
  variables: Any
  model: Any = None


def check_same_architecture(learners: Sequence[Any]) -> None:
  """Raises :class:`FedAvgError` unless all learners are Flax learners of one architecture."""
  for a, learner in enumerate(learners):
    if not has_capability(learner, ParameterLearner, f"learners[{a}]"):
      raise FedAvgError(f"learners[{a}]: FedAvg needs Flax learners (parameters to average), "
                        f"got {type(learner).__name__}")
    if not learner.config.warm_start:
      raise FedAvgError(f"learners[{a}]: FedAvg needs TrainConfig(warm_start=True) so that "
                        f"local training starts from the global parameters")
  first = learners[0]
  for a, learner in enumerate(learners[1:], start=1):
    if learner.model != first.model or tuple(learner.input_shape) != tuple(first.input_shape):
      raise FedAvgError(f"learners[{a}]: FedAvg needs one architecture for all agents; "
                        f"agent {a} has {type(learner.model).__name__} and agent 0 has "
                        f"{type(first.model).__name__} (or other settings)")


def average(stacked: Any, weights: Sequence[float] | np.ndarray) -> Any:
  """The server's average ``sum_k weights[k] * stacked[k]``, leaf by leaf.

  The one FedAvg average of the project (FedAvg here, MHD's and representation
  sharing's FedAvg baselines).

  Args:
    stacked: a pytree whose leaves hold the M agents' parameters stacked on a
      leading axis, shape ``(M, ...)``.
    weights: M finite non-negative weights (``N_a / N`` or ``1 / M``).

  Returns:
    The averaged pytree (leaves of the stacked leaves' shapes without the agent
    axis, and their dtypes). The sum runs agent by agent in each leaf's dtype,
    one rounded product and one rounded sum per agent (``out + w_k * x_k``, as
    McMahan et al. write it), op by op rather than in one fused program, so that
    the order of the sum is fixed.
  """
  w = np.asarray(weights, np.float64)
  leaves = jax.tree.leaves(stacked)
  if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
    raise FedAvgError(f"weights: expected a vector of finite non-negative numbers, got {w!r}")
  for leaf in leaves:
    if np.ndim(leaf) < 1 or np.shape(leaf)[0] != w.shape[0]:
      raise FedAvgError(f"stacked: expected leaves with a leading axis of {w.shape[0]} agents "
                        f"(one per weight), got a leaf of shape {np.shape(leaf)}")

  def combine(leaf):
    leaf = jnp.asarray(leaf)
    out = jnp.zeros(leaf.shape[1:], leaf.dtype)
    for k, w_k in enumerate(w):
      out = out + jnp.asarray(w_k, dtype=leaf.dtype) * leaf[k]
    return out
  return jax.tree.map(combine, stacked)


def stack(trees: Sequence[Any]) -> Any:
  """The agents' pytrees stacked leaf by leaf on a new leading axis."""
  return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def starting_variables(learners: Sequence[Any], key: jax.Array, init: str = "one") -> Any:
  """FedAvg's round-0 global variables for learners of one architecture (checked).

  Args:
    learners: the agents' learners (:func:`check_same_architecture`).
    key: the PRNG key of the initialisation.
    init: "one" (one initialisation from ``key``) or "mean" (the average of M
      initialisations from ``split(key, M)``, as the authors' code starts).
  """
  check_same_architecture(learners)
  first = learners[0]
  if init == "one":
    return init_variables(first.model, key, first.input_shape)
  m = len(learners)
  inits = [init_variables(first.model, k, first.input_shape) for k in jax.random.split(key, m)]
  return average(stack(inits), [1 / m] * m)


def fedavg(initial_variables: Any, weighting: str = "size") -> Protocol:
  """FedAvg from the global variables ``initial_variables`` (one init for all agents).

  ``weighting``: "size" averages the agents' parameters weighted by their numbers of
  points (McMahan et al.), "equal" with weights 1/M (the authors' code of Afonin &
  Karimireddy; the same when the agents hold equally many points).

  The learners must be Flax learners of one architecture with
  ``TrainConfig(warm_start=True)``; each round they start from the global
  variables (``learner.with_init``) and train as one vmapped program
  (``fedkrr.learners.fit_all``).

  Returns:
    A ``fedkrr.protocols.Protocol`` named "fedavg" for ``fedkrr.protocols.iterate``. Its
    :class:`RoundOutput` holds the agents' models at the end of local training
    (``weights=None``); the averaged global model is ``state.model``.
  """

  if weighting not in WEIGHTINGS:
    raise FedAvgError(f"weighting: expected one of {', '.join(WEIGHTINGS)}, got {weighting!r}")

  def init(ys):
    return FedAvgState(0, initial_variables)

  def step(state, learners, xs, ys):
    check_same_architecture(learners)
    local = [learner.with_init(state.variables) for learner in learners]
    models = cast(tuple[Any, ...], fit_all(local, xs, ys))   # Flax models (with variables)
    sizes = [int(x.shape[0]) if weighting == "size" else 1 for x in xs]
    weights = [n / sum(sizes) for n in sizes]
    variables = average(stack([m.variables for m in models]), weights)
    first = models[0]   # the server's model: agent 0's module, not its variables or scores
    scored = ({"epoch_accuracy": (), "best_epoch_right": b""}
              if has_capability(first, EpochScoredModel) else {})
    model = dataclasses.replace(cast(Any, first), variables=variables, **scored)
    return (FedAvgState(state.round + 1, variables, model),
            RoundOutput(models, tuple(range(len(xs))), None))

  return Protocol("fedavg", init, step)
