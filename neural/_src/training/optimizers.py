"""The one optimiser factory of ``neural``: every method's optimiser comes from here.

An :class:`OptimizerConfig` names an update rule, a learning-rate schedule and an
L2 weight decay that is added to the gradient *before* the update rule, as
PyTorch's ``torch.optim.Adam(weight_decay=...)`` and ``SGD(weight_decay=...)`` do
(not AdamW's decoupled decay). With gradient g, parameters p and step t = 0, 1, ...:

* ``"adam"``: ``g <- g + wd p``; ``m <- b1 m + (1 - b1) g``; ``v <- b2 v + (1 - b2) g^2``;
  ``p <- p - lr_t (m / (1 - b1^(t+1))) / (sqrt(v / (1 - b2^(t+1))) + eps)``
  (b1 = 0.9, b2 = 0.999, eps = 1e-8: the paper's optimiser, Afonin & Karimireddy App. A);
* ``"sgd"``: ``g <- g + wd p``; ``m <- momentum m + g``; ``p <- p - lr_t m``
  (heavy ball as PyTorch's SGD; ``momentum = 0`` is plain SGD).

Schedules of ``lr_t``: ``"constant"`` (lr), ``"cosine"`` (lr decays to 0 along a
half cosine over ``decay_steps``, then stays 0) and ``"polynomial"``
(``lr (t0 / (t + t0))^power``, D-Distillation's Theorem 3 step sizes). The step t
is the optimiser's own count, so an optimiser state carried across rounds keeps
its place in the schedule.

The learning rate and the weight decay are data, not compiled constants:
:func:`neural.training.train_loop` hands them to its compiled step as arrays
(:class:`Hyperparameters`), so one program trains every value and runs can be
vmapped over learning rates. A Python float becomes a weakly typed array, which
rounds into the float32 arithmetic as the float did: the numbers are the same.
The settings' fields and ranges are declared once, in ``neural.training.TrainingSettings``
(every config that trains derives from it); :func:`optimizer_config` is the one
conversion from a config to an :class:`OptimizerConfig`.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from neural._src.settings import TrainingSettings
from neural._src.settings import optimizer_problem


class OptimizerError(ValueError):
  """A bad optimiser setting (the message names the field)."""


class Hyperparameters(NamedTuple):
  """The optimiser's numbers that reach the compiled step as data (traced, not static).

  Attributes:
    learning_rate: lr, the peak of the schedule: a scalar array (weakly typed when it
      comes from a Python float, so it rounds as the float did).
    weight_decay: the L2 coefficient, likewise.
  """

  learning_rate: Any
  weight_decay: Any


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """An update rule, its learning-rate schedule and L2 weight decay.

  The rule, the schedule's shape and whether there is a decay at all are static
  (:meth:`rule`, part of a compiled step); the learning rate and the weight decay
  are data (:meth:`hyperparameters`): one compiled program trains every value, and
  they may be arrays, e.g. traced under ``jax.vmap`` over learning rates.

  Attributes:
    name: "adam" or "sgd".
    learning_rate: lr (the peak of the schedule), > 0.
    weight_decay: L2 coefficient added to the gradient, >= 0.
    momentum: heavy-ball momentum of "sgd", in [0, 1) (ignored by "adam").
    schedule: "constant", "cosine" or "polynomial".
    decay_steps: steps of the cosine decay (needed by "cosine").
    power, t0: the polynomial schedule ``lr (t0 / (t + t0))^power``.
  """

  name: str = "adam"
  learning_rate: Any = 1e-3
  weight_decay: Any = 0.0
  momentum: float = 0.0
  schedule: str = "constant"
  decay_steps: int | None = None
  power: float = 1.0
  t0: float = 1.0

  def __post_init__(self):
    problem = optimizer_problem(**{f.name: getattr(self, f.name)
                                   for f in dataclasses.fields(self)})
    if problem is not None:
      name, expected = problem
      got = repr(getattr(self, name))
      raise OptimizerError(f"{name}: expected {expected}, got "
                           f"{got if len(got) <= 80 else got[:77] + '...'}")

  @property
  def decays(self) -> bool:
    """Whether there is a weight decay (static: a decay of 0 adds nothing, not even 0 p)."""
    return not (isinstance(self.weight_decay, numbers.Real) and float(self.weight_decay) == 0)

  def rule(self) -> OptimizerConfig:
    """The static part: these settings with learning rate 1 and weight decay 1 or 0.

    Hashable whatever the learning rate and decay are; with :meth:`hyperparameters`
    it gives back this optimiser (``make_optimizer(rule, hyperparameters)``).
    """
    return dataclasses.replace(self, learning_rate=1.0, weight_decay=1.0 if self.decays else 0.0)

  def hyperparameters(self) -> Hyperparameters:
    """The learning rate and weight decay as arrays (a Python float stays weakly typed)."""
    return Hyperparameters(jnp.asarray(self.learning_rate), jnp.asarray(self.weight_decay))

  def learning_rate_at(self):
    """The schedule: a float (constant) or ``step -> lr_t`` (an optax schedule)."""
    return _schedule(self, float(self.learning_rate))


def _schedule(config: OptimizerConfig, lr):
  """``lr_t`` of ``config``'s schedule with peak ``lr`` (a float or an array)."""
  if config.schedule == "cosine":
    assert config.decay_steps is not None   # checked by __post_init__
    return optax.cosine_decay_schedule(lr, int(config.decay_steps))
  if config.schedule == "polynomial":
    power, t0 = float(config.power), float(config.t0)
    return lambda step: lr * (t0 / (step + t0)) ** power
  return lr


def optimizer_config(settings: OptimizerConfig | TrainingSettings | Any) -> OptimizerConfig:
  """The :class:`OptimizerConfig` of a config's training settings (the one conversion).

  Args:
    settings: an :class:`OptimizerConfig` (returned as is), or a config deriving from
      ``neural.training.TrainingSettings`` (every config that trains: the KD experiment's,
      ``neural.training.TrainConfig``, the methods'), converted through its
      ``optimizer_settings()``.

  Raises:
    OptimizerError: ``settings`` is neither.
  """
  if isinstance(settings, OptimizerConfig):
    return settings
  if isinstance(settings, TrainingSettings):
    return OptimizerConfig(**settings.optimizer_settings())
  raise OptimizerError(f"optimizer: expected a neural.training.OptimizerConfig or training "
                       f"settings, got {type(settings).__name__}")


def make_optimizer(config, hyperparameters: Hyperparameters | None = None
                   ) -> optax.GradientTransformation:
  """The optimiser of ``config``: an :class:`OptimizerConfig` or a config's training settings.

  ``chain(add_decayed_weights(wd), rule, scale_by_learning_rate(schedule))`` with
  rule ``scale_by_adam(0.9, 0.999, 1e-8)`` or ``trace(momentum)`` (see the module
  docstring for the update equations).

  Args:
    config: an :class:`OptimizerConfig`, or anything :func:`optimizer_config` converts.
    hyperparameters: the learning rate and weight decay to use in place of
      ``config``'s (arrays, traced inside a compiled step); ``None``: ``config``'s.
      Whether a decay is added at all is ``config``'s (:attr:`OptimizerConfig.decays`).

  Example:
    >>> tx = neural.training.make_optimizer(neural.training.OptimizerConfig(
    ...     "sgd", 0.1, weight_decay=5e-4, momentum=0.9))
    >>> params = {"w": jnp.ones(3)}
    >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)
    >>> updates["w"].round(6).tolist()   # -0.1 * (1 + 5e-4): no momentum in the first step
    [-0.10005, -0.10005, -0.10005]
  """
  config = optimizer_config(config)
  lr, wd = (config.learning_rate, config.weight_decay) if hyperparameters is None \
      else hyperparameters
  if config.name == "adam":
    rule = optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8)
  elif config.momentum > 0:
    rule = optax.trace(decay=float(config.momentum), nesterov=False)
  else:
    rule = optax.identity()
  if not isinstance(lr, jax.Array):
    lr = float(lr)
  # no decay is no term at all (optax skips a constant 0), not 0 * p added
  wd = (wd if isinstance(wd, jax.Array) else float(wd)) if config.decays else 0.0
  return optax.chain(optax.add_decayed_weights(wd), rule,
                     optax.scale_by_learning_rate(_schedule(config, lr)))
