"""What a learner may offer beyond ``fit``, declared (``isinstance`` checks them).

A protocol needs only ``fedkrr.Learner`` (``fit``); some runs use more where a learner
has it: ``fedkrr.BatchLearner`` (fitted together), ``fedkrr.WarmStartLearner`` (next
fit from the last model), and these two of ``neural``'s.
"""

from __future__ import annotations

from typing import Any
from typing import Protocol
from typing import runtime_checkable


@runtime_checkable
class ReseedableLearner(Protocol):
  """A learner whose randomness comes from a JAX key it can be given anew (each round).

  Learners without it that are dataclasses with an int ``seed`` (the random forest)
  are re-seeded through that field instead.
  """

  def fit(self, x: Any, targets: Any) -> Any:
    """Fits one model (``fedkrr.Learner``)."""
    ...

  def with_key(self, key: Any) -> Any:
    """The same learner with the PRNG key ``key``."""
    ...


@runtime_checkable
class ParameterLearner(Protocol):
  """A network learner with parameters to average (what FedAvg needs).

  Attributes:
    model: the Flax module (architectures compare equal when they are the same).
    input_shape: the shape of one input.
    config: the training config (``warm_start`` must be on for FedAvg).
  """

  model: Any
  input_shape: Any
  config: Any

  def fit(self, x: Any, targets: Any) -> Any:
    """Fits one model (``fedkrr.Learner``)."""
    ...

  def with_init(self, variables: Any) -> Any:
    """The same learner starting its next fit from ``variables``."""
    ...


@runtime_checkable
class ParameterModel(Protocol):
  """A fitted network: its variables (a next fit can start from them; FedAvg averages them).

  The random forest's models have none.
  """

  variables: Any

  def predict(self, x: Any) -> Any:
    """Predictions (``fedkrr.Model``)."""
    ...


@runtime_checkable
class EpochScoredModel(Protocol):
  """A fitted network that scored the test set after each epoch (``epoch_eval``).

  Attributes:
    epoch_accuracy: the test accuracy after each epoch of its fit (empty if not scored).
  """

  epoch_accuracy: Any

  def predict(self, x: Any) -> Any:
    """Predictions (``fedkrr.Model``)."""
    ...
