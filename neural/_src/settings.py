"""Training settings declared once: the optimiser fields the configs share, checked in one place.

Every config that trains with the one optimiser factory (:func:`neural.training.make_optimizer`)
holds its settings by deriving from :class:`TrainingSettings` (batch size, learning
rate, L2 weight decay: Adam's), :class:`OptimizerChoice` (plus the update rule and
SGD's momentum) and :class:`EpochSettings` (plus local epochs) as it has them: the
KD experiment's config, ``neural.training.TrainConfig`` and the configs of the methods of the
other papers (D-Distillation, whose step sizes are Theorem 3's ``eta0``, ``eta_power``,
``eta_t0``, builds its ``neural.training.OptimizerConfig`` from them). The fields stay flat,
so config files,
``config.json`` of run directories and the command-line flags (``--lr``,
``--batch-size``, ``--weight-decay``) name them as before; a config changes only a
default, by declaring the field again with its own value.

The ranges are checked here once (:func:`optimizer_problem`, :meth:`TrainingSettings.
training_problems`), by ``neural.Config.validate``, ``neural.training.TrainConfig`` and
``neural.training.OptimizerConfig`` alike, each raising its own error type. The one conversion
to what training needs is :meth:`TrainingSettings.optimizer_settings` (the keyword
arguments of ``neural.training.OptimizerConfig``; ``neural.training.optimizer_config`` builds it).

Imports nothing of JAX: the configs load without it.
"""

from __future__ import annotations

from collections.abc import Iterator
import dataclasses
import math
import numbers
from typing import Any
from typing import ClassVar

OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine", "polynomial")
# Local epochs: far past any run of the papers (20 rounds of 20 epochs), short of runs
# that would never end.
MAX_EPOCHS = 100_000


def _number(value: Any) -> bool:
  """A Python or NumPy number (checked); an array, traced under ``jax.vmap`` say, is data."""
  return isinstance(value, numbers.Real)


def _finite(value: Any) -> float | None:
  """``value`` as a finite float, or ``None`` for anything else (a bool, None, a string,
  a list, NaN, an integer too large for a float)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    return None
  try:
    number = float(value)
  except (OverflowError, ValueError):
    return None
  return number if math.isfinite(number) else None


def _above(value: Any, low: float, high: float = math.inf, closed: bool = False) -> bool:
  """Whether ``value`` is a finite number in (low, high) (``[low, high)`` if ``closed``)."""
  number = _finite(value)
  return number is not None and (number >= low if closed else number > low) and number < high


def optimizer_problem(name: str = "adam", learning_rate: Any = 1e-3, weight_decay: Any = 0.0,
                      momentum: float = 0.0, schedule: str = "constant",
                      decay_steps: int | None = None, power: float = 1.0,
                      t0: float = 1.0) -> tuple[str, str] | None:
  """The first bad optimiser setting as ``(field, what it expects)``, or ``None``.

  The arguments are those of ``neural.training.OptimizerConfig``. A learning rate or weight
  decay given as an array (traced: one compiled program trains every value) is not
  range-checked.
  """
  if not isinstance(name, str) or name not in OPTIMIZERS:
    return "name", f"one of {OPTIMIZERS}"
  if (_number(learning_rate) or not hasattr(learning_rate, "shape")) \
      and not _above(learning_rate, 0):
    return "learning_rate", "a finite number > 0"
  if (_number(weight_decay) or not hasattr(weight_decay, "shape")) \
      and not _above(weight_decay, 0, closed=True):
    return "weight_decay", "a finite number >= 0"
  if not _above(momentum, 0, 1, closed=True):
    return "momentum", "a number in [0, 1)"
  if not isinstance(schedule, str) or schedule not in SCHEDULES:
    return "schedule", f"one of {SCHEDULES}"
  if decay_steps is not None and (isinstance(decay_steps, bool) or not isinstance(
      decay_steps, numbers.Integral) or decay_steps < 1):
    return "decay_steps", "None or an integer >= 1"
  if schedule == "cosine" and decay_steps is None:
    return "decay_steps", "an integer >= 1 for the cosine schedule"
  if not _above(t0, 0):
    return "t0", "a finite number > 0"
  if not _above(power, 0):
    return "power", "a finite number > 0"
  return None


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
  """Local training's mini-batch and Adam's settings (a base of the configs that train).

  The defaults are Afonin & Karimireddy's (App. A): batch 64, learning rate 1e-3,
  weight decay 3e-4; a config with other defaults declares the field again.

  Attributes:
    batch_size: points per mini-batch of local training.
    learning_rate: the optimiser's step size (the peak of its schedule).
    weight_decay: L2 coefficient added to the gradient before the optimiser, as
      PyTorch's ``weight_decay``.
  """

  batch_size: int = 64
  learning_rate: float = 1e-3
  weight_decay: float = 3e-4

  def optimizer_settings(self) -> dict[str, Any]:
    """The keyword arguments of ``neural.training.OptimizerConfig`` these settings name.

    The one conversion from a config to its optimiser (``neural.training.optimizer_config``);
    a config with a schedule extends it.
    """
    return dict(name="adam", learning_rate=self.learning_rate, weight_decay=self.weight_decay)

  def training_settings(self) -> dict[str, Any]:
    """These settings' fields by name: what another config that holds them is built from
    (the KD experiment's and representation sharing's ``neural.training.TrainConfig``)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(TrainingSettings)}

  def training_problems(self) -> Iterator[tuple[str, str]]:
    """Each bad setting as ``(field, what it expects)``: the one check of the fields.

    A field the optimiser names differently (``name``) is reported by its config's name.
    """
    if not self.batch_size >= 1:
      yield "batch_size", "an integer >= 1"
    problem = optimizer_problem(**self.optimizer_settings())
    if problem is not None:
      yield ("optimizer", problem[1]) if problem[0] == "name" else problem


@dataclasses.dataclass(frozen=True)
class OptimizerChoice(TrainingSettings):
  """:class:`TrainingSettings` with the update rule to choose.

  Attributes:
    optimizer: "adam" or "sgd" (heavy ball with ``momentum``, PyTorch's SGD).
    momentum: heavy-ball momentum of "sgd", in [0, 1) (ignored by "adam").
  """

  optimizer: str = "adam"
  momentum: float = 0.0

  def optimizer_settings(self) -> dict[str, Any]:
    """The keyword arguments of ``neural.training.OptimizerConfig`` (rule and momentum included)."""
    return {**super().optimizer_settings(), "name": self.optimizer, "momentum": self.momentum}

  def training_settings(self) -> dict[str, Any]:
    """These settings' fields by name (the rule and momentum included)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(OptimizerChoice)}


@dataclasses.dataclass(frozen=True)
class EpochSettings(TrainingSettings):
  """:class:`TrainingSettings` of a config that trains in epochs.

  Attributes:
    epochs: local epochs (shuffled passes over the data) per round.
  """

  epochs: int = 20
  # the range of epochs: (least, most or None)
  epochs_range: ClassVar[tuple[int, int | None]] = (1, MAX_EPOCHS)

  def training_problems(self) -> Iterator[tuple[str, str]]:
    """Each bad setting as ``(field, what it expects)``, ``epochs`` first."""
    least, most = self.epochs_range
    if most is None and not self.epochs >= least:
      yield "epochs", f"an integer >= {least}"
    elif most is not None and not least <= self.epochs <= most:
      yield "epochs", f"an integer in {least}..{most}"
    yield from super().training_problems()

  def training_settings(self) -> dict[str, Any]:
    """These settings' fields by name (``epochs`` included)."""
    return {**super().training_settings(), "epochs": self.epochs}
