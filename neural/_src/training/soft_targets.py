"""Distillation targets that are evaluated on the inputs training sees (augmented batches).

``fedkrr``'s protocols form every round's targets as a linear combination of
labels and the previous models' predictions on an agent's inputs: AKD's
``g(X)``, AvgKD's ``(y + sum_j g_j(X)) / M``, backfitting's ``y - sum_j g_j(X)``.
With data augmentation the authors of Afonin & Karimireddy evaluate the teachers
on the augmented batch, so the targets are not one array: they are
``fixed + sum_k w_k softmax(teacher_k(x))`` for whatever ``x`` a step draws.

A :class:`Teacher` wraps a trained network so that ``predict(X)`` returns such
a combination (:class:`SoftTargets`) instead of an array; the protocols' own
arithmetic (``+``, ``-``, ``*`` and ``/`` by numbers, ``sum``) builds the
combination, and :class:`neural.FlaxLearner` evaluates it inside its compiled
step. Both are NamedTuples of arrays and Flax models, so protocol states that
hold them are checkpointed like any other.
"""

from __future__ import annotations

import numbers
from typing import Any
from typing import NamedTuple

import numpy as np


class SoftTargets(NamedTuple):
  """Targets ``fixed + sum_k w_k * teacher_k.predict(x)`` for the inputs ``x`` of a step.

  Attributes:
    fixed: the part that does not depend on the inputs' augmentation (labels and
      their multiples), shape (n, C), or ``None`` for 0.
    teachers: ``((w_k, model_k), ...)``: weights and trained networks
      (``neural.training.FlaxModel``) whose softmax outputs are added.
  """

  fixed: Any
  teachers: tuple[tuple[float, Any], ...]

  __array_ufunc__ = None   # NumPy arrays defer their arithmetic with SoftTargets to us

  def scaled(self, c: float) -> SoftTargets:
    """``c`` times these targets."""
    fixed = None if self.fixed is None else c * self.fixed
    return SoftTargets(fixed, tuple((c * w, m) for w, m in self.teachers))

  def __add__(self, other: Any) -> SoftTargets:
    if isinstance(other, SoftTargets):
      return SoftTargets(_add(self.fixed, other.fixed), self.teachers + other.teachers)
    if isinstance(other, numbers.Number) and other == 0:   # sum()'s start
      return self
    if isinstance(other, numbers.Number):
      raise TypeError("SoftTargets: add an array of targets, not a number")
    return SoftTargets(_add(self.fixed, other), self.teachers)

  __radd__ = __add__

  def __neg__(self) -> SoftTargets:
    return self.scaled(-1.0)

  def __sub__(self, other: Any) -> SoftTargets:
    return self + (-other)

  def __rsub__(self, other: Any) -> SoftTargets:
    return (-self) + other

  def __mul__(self, c: Any) -> SoftTargets:
    return self.scaled(_number(c))

  __rmul__ = __mul__

  def __truediv__(self, c: Any) -> SoftTargets:
    return self.scaled(1.0 / _number(c))

  def on(self, x: Any) -> np.ndarray:
    """The targets evaluated on the inputs ``x`` (no augmentation): an (n, C) array."""
    out = None if self.fixed is None else np.asarray(self.fixed, np.float32)
    for w, model in self.teachers:
      term = np.float32(w) * np.asarray(model.predict(x), np.float32)
      out = term if out is None else out + term
    if out is None:
      raise ValueError("SoftTargets: no fixed part and no teachers")
    return out


def _add(a: Any, b: Any) -> Any:
  if a is None:
    return b
  return a if b is None else a + b


def _number(c: Any) -> float:
  if not isinstance(c, numbers.Real) or isinstance(c, bool):
    raise TypeError(f"SoftTargets: expected a number to scale by, got {type(c).__name__}")
  return float(c)


class Teacher(NamedTuple):
  """A trained network whose predictions are deferred: ``predict(x)`` is a :class:`SoftTargets`.

  Attributes:
    network: the trained ``neural.training.FlaxModel``; metrics read it directly.
  """

  network: Any

  def predict(self, x: Any) -> SoftTargets:
    """This network's softmax output, as targets to be evaluated on the step's inputs."""
    del x   # the targets are evaluated on the inputs of each step (n is that of x)
    return SoftTargets(None, ((1.0, self.network),))

  @property
  def variables(self) -> Any:
    """The network's variables (warm starts read them)."""
    return self.network.variables


def concrete(model: Any) -> Any:
  """The model whose ``predict`` gives arrays: a :class:`Teacher`'s network, else ``model``."""
  return model.network if isinstance(model, Teacher) else model
