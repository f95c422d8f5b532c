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
"""

from __future__ import annotations

import dataclasses

import optax

OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine", "polynomial")


class OptimizerError(ValueError):
  """A bad optimiser setting (the message names the field)."""


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """An update rule, its learning-rate schedule and L2 weight decay (hashable: a static setting).

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
  learning_rate: float = 1e-3
  weight_decay: float = 0.0
  momentum: float = 0.0
  schedule: str = "constant"
  decay_steps: int | None = None
  power: float = 1.0
  t0: float = 1.0

  def __post_init__(self):
    if self.name not in OPTIMIZERS:
      raise OptimizerError(f"name: expected one of {OPTIMIZERS}, got {self.name!r}")
    if not float(self.learning_rate) > 0:
      raise OptimizerError(f"learning_rate: expected a number > 0, got {self.learning_rate!r}")
    if not float(self.weight_decay) >= 0:
      raise OptimizerError(f"weight_decay: expected a number >= 0, got {self.weight_decay!r}")
    if not 0 <= float(self.momentum) < 1:
      raise OptimizerError(f"momentum: expected a number in [0, 1), got {self.momentum!r}")
    if self.schedule not in SCHEDULES:
      raise OptimizerError(f"schedule: expected one of {SCHEDULES}, got {self.schedule!r}")
    if self.schedule == "cosine" and not (self.decay_steps and int(self.decay_steps) >= 1):
      raise OptimizerError(f"decay_steps: expected an integer >= 1 for the cosine schedule, "
                           f"got {self.decay_steps!r}")
    if self.schedule == "polynomial" and not (float(self.t0) > 0 and float(self.power) > 0):
      raise OptimizerError(f"t0, power: expected numbers > 0 for the polynomial schedule, got "
                           f"{self.t0!r}, {self.power!r}")

  def learning_rate_at(self):
    """The schedule: a float (constant) or ``step -> lr_t`` (an optax schedule)."""
    lr = float(self.learning_rate)
    if self.schedule == "cosine":
      assert self.decay_steps is not None   # checked by __post_init__
      return optax.cosine_decay_schedule(lr, int(self.decay_steps))
    if self.schedule == "polynomial":
      power, t0 = float(self.power), float(self.t0)
      return lambda step: lr * (t0 / (step + t0)) ** power
    return lr


def make_optimizer(config) -> optax.GradientTransformation:
  """The optimiser of ``config``: an :class:`OptimizerConfig`, or any config with an
  ``optimizer_config()`` method (such as ``neural.TrainConfig``).

  ``chain(add_decayed_weights(wd), rule, scale_by_learning_rate(schedule))`` with
  rule ``scale_by_adam(0.9, 0.999, 1e-8)`` or ``trace(momentum)`` (see the module
  docstring for the update equations).

  Example:
    >>> tx = neural.make_optimizer(neural.OptimizerConfig("sgd", 0.1, weight_decay=5e-4,
    ...                                                   momentum=0.9))
    >>> params = {"w": jnp.ones(3)}
    >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)
    >>> updates["w"].round(6).tolist()   # -0.1 * (1 + 5e-4): no momentum in the first step
    [-0.10005, -0.10005, -0.10005]
  """
  if not isinstance(config, OptimizerConfig):
    config = config.optimizer_config()
  if config.name == "adam":
    rule = optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8)
  elif config.momentum > 0:
    rule = optax.trace(decay=float(config.momentum), nesterov=False)
  else:
    rule = optax.identity()
  return optax.chain(optax.add_decayed_weights(float(config.weight_decay)), rule,
                     optax.scale_by_learning_rate(config.learning_rate_at()))
