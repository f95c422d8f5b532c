"""What a learner may offer beyond ``fit``, declared for ``fedkrr.learners.has_capability``.

A protocol needs only ``fedkrr.learners.Learner`` (``fit``); some runs use more where a learner
has it: ``fedkrr.learners.BatchLearner`` (fitted together),
``fedkrr.learners.WarmStartLearner`` (next fit from the last model), and these two of
``neural``'s. The tooling's wrappers around a learner derive from :class:`LearnerWrapper`,
which declares what they forward.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
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
    """Fits one model (``fedkrr.learners.Learner``)."""
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
    """Fits one model (``fedkrr.learners.Learner``)."""
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
    """Predictions (``fedkrr.learners.Model``)."""
    ...


@runtime_checkable
class EpochScoredModel(Protocol):
  """A fitted network that scored the test set after each epoch (``epoch_eval``).

  Attributes:
    epoch_accuracy: the test accuracy after each epoch of its fit (empty if not scored).
    best_epoch_right: ``numpy.packbits`` of which test points the best of those epochs
      got right (empty unless kept: ``record_outcomes``).
  """

  epoch_accuracy: Any
  best_epoch_right: Any

  def predict(self, x: Any) -> Any:
    """Predictions (``fedkrr.learners.Model``)."""
    ...


class LearnerWrapper:
  """Base of the tooling's wrappers around one learner (a dataclass field ``learner``).

  A wrapper has a capability exactly when the learner it wraps has it, on every Python:
  each forwarded member is declared here as a property that reads the wrapped learner's
  (``AttributeError``, so "absent" to ``fedkrr.learners.has_capability``, when that has none),
  never reached through ``__getattr__``, which Python 3.12 and later do not see in a
  capability check. Forwarded: :class:`ParameterLearner`'s ``model``, ``input_shape``,
  ``config`` and ``with_init``, and ``fedkrr.learners.WarmStartLearner``'s ``warm_start_from``;
  the last two return the same wrapper around the learner they give
  (:meth:`rewrapped`). Subclasses define ``fit`` and the batch members themselves.
  """

  learner: Any

  @property
  def model(self) -> Any:
    """The wrapped learner's Flax module (:class:`ParameterLearner`)."""
    return self.learner.model

  @property
  def input_shape(self) -> Any:
    """The wrapped learner's input shape (:class:`ParameterLearner`)."""
    return self.learner.input_shape

  @property
  def config(self) -> Any:
    """The wrapped learner's training config (:class:`ParameterLearner`)."""
    return self.learner.config

  @property
  def with_init(self) -> Callable[[Any], Any]:
    """``with_init(variables)``: this wrapper around the wrapped learner's ``with_init``."""
    forward = self.learner.with_init
    return lambda variables: self.rewrapped(forward, variables)

  @property
  def warm_start_from(self) -> Callable[[Any], Any]:
    """``warm_start_from(model)``: this wrapper around the wrapped learner's, given the
    model that learner fitted (:meth:`fitted_model` of what this wrapper's fit returned)."""
    forward = self.learner.warm_start_from
    return lambda model: self.rewrapped(forward, self.fitted_model(model))

  def fitted_model(self, model: Any) -> Any:
    """The wrapped learner's model inside what this wrapper's ``fit`` returned."""
    return model

  def rewrapped(self, method: Callable[[Any], Any], argument: Any) -> Any:
    """The wrapper around ``method(argument)``, a learner the wrapped learner derives."""
    return dataclasses.replace(self, learner=method(argument))   # type: ignore[type-var]
