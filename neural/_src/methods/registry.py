"""The registry of the other papers' methods and ``run_method``, which runs them.

The KD protocols of Afonin & Karimireddy only call ``fit``/``predict`` and run
through ``fedkrr`` (``neural.train_and_evaluate``). The methods of the other
papers exchange more (soft decisions on public data, features, auxiliary heads, a
server model), so each is a :class:`Method`: a typed config (a subclass of
:class:`MethodConfig`), ``init(config, data) -> state`` and ``step(config, data,
state, t) -> (state, rows)`` for one round. :func:`run_method` runs a method through
the round loop of every run (``neural._src.runtime.rounds.run_rounds``, the KD protocols'
too), so every method has the same run directory as the KD protocols::

  config.json      the method's config (with its "method" name)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  checkpoint.npz   the method's state after the last finished round (arrays, plain data)
  accuracy.png     test accuracy per round per agent (written at the end)

A killed run resumes from its checkpoint to the same numbers, provided the
method derives round t's randomness from ``round_rng(config.init_seed, t)`` (as all
registered methods do) and not from state outside ``state``.

Metric rows hold ``round``, ``agent`` (0-based int, or a string such as
``"server"``), ``method``, ``model``, ``test_accuracy``, ``test_loss`` (cross-
entropy of the predicted probabilities) and method-specific extras such as
``comm_floats`` (numbers sent by that agent in that round).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import os
from typing import Any
from typing import NamedTuple

import jax
import numpy as np

from neural._src.datasets.run_data import load_run_data
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import RunConfig
from neural._src.runtime.rounds import RoundResult
from neural._src.runtime.rounds import Step
from neural._src.runtime.rounds import run_rounds
from neural._src.training.training import scores

_REGISTRY: dict[str, Method] = {}


@dataclasses.dataclass(frozen=True)
class MethodConfig(RunConfig):
  """Fields shared by the configs of all methods (subclass it, frozen, to add yours).

  The fields of :class:`neural.RunConfig` (data, split, agents, rounds, seeds,
  training's loop) and the method's name. Field types are checked from the
  annotations (see ``neural.Config``); override :meth:`validate` (calling
  ``super().validate()``) for the ranges of your fields, raising through
  :meth:`need`.

  Attributes:
    method: the registered method name (the discriminator in config files).
  """

  method: str = ""

  @classmethod
  def config_name(cls, values: Mapping[str, Any] | None = None) -> str:
    """The config's name in error messages (by its method)."""
    return f"the {(values or {}).get('method', '?')!r} config"

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    self.need(self.method in registered_methods(), "method",
              f"one of {', '.join(registered_methods())}")
    super().validate()


class Method(NamedTuple):
  """A method of another paper, as a plug-in of :func:`run_method`.

  Attributes:
    name: the registered name (``config.method``).
    config_cls: its config, a frozen subclass of :class:`MethodConfig`.
    init: ``init(config, data) -> state``: NamedTuples, dicts, tuples, lists, arrays and
      plain values. It is also the target a checkpoint is restored into (see
      ``neural._src.runtime.checkpoint``): the state after any round must have the structure,
      shapes and dtypes of ``init``'s, and no type is ever read from a file.
    step: ``step(config, data, state, t) -> (state, rows)``: round t and its metric rows.
    load_data: ``load_data(config) -> data`` (default :func:`load_method_data`).
    description: one line for listings.
  """

  name: str
  config_cls: type
  init: Callable[..., Any]
  step: Callable[..., Any]
  load_data: Callable[..., Any] | None = None
  description: str = ""


def register_method(method: Method) -> Method:
  """Registers ``method`` under ``method.name`` (called when its module is imported).

  Its checkpoints need no type registered: a resumed run restores them into
  ``method.init(config, data)``, the state the method builds from its config.
  """
  if not (isinstance(method.config_cls, type) and issubclass(method.config_cls, MethodConfig)):
    raise TypeError(f"config_cls of {method.name!r}: expected a MethodConfig subclass")
  _REGISTRY[method.name] = method
  return method


def registered_methods() -> tuple[str, ...]:
  """The names of all registered methods, sorted."""
  return tuple(sorted(_REGISTRY))


def method_configs() -> dict[str, type]:
  """The config class of each registered method, by name."""
  return {name: _REGISTRY[name].config_cls for name in registered_methods()}


def get_method(name: str) -> Method:
  """The registered method ``name``; a ``ConfigError`` listing the names otherwise."""
  if name not in _REGISTRY:
    raise ConfigError(f"method: expected one of {', '.join(sorted(_REGISTRY))}, got {name!r}")
  return _REGISTRY[name]


def method_config_from_dict(values: Mapping[str, Any]) -> MethodConfig:
  """The typed config of ``values["method"]`` built from ``values``."""
  name = values.get("method")
  if not isinstance(name, str):
    raise ConfigError(f"method: expected a method name, got {name!r}")
  return get_method(name).config_cls.from_dict(values)


# ---------------------------------------------------------------------------
# Data


def load_method_data(config: Any) -> Any:
  """The default data of a method: ``neural.load_run_data(config)`` (a ``RunData``)."""
  return load_run_data(config)


def round_rng(seed: int, t: int) -> jax.Array:
  """The key of round t: ``fold_in(PRNGKey(seed), t)`` (the same on resume)."""
  return jax.random.fold_in(jax.random.PRNGKey(seed), t)


def test_scores(probs: Any, y_test: np.ndarray) -> dict[str, float]:
  """``{"test_accuracy", "test_loss"}`` of probabilities (n, C) vs int labels (loss: CE)."""
  accuracy, loss = scores(probs, y_test, None, "ce")
  return {"test_accuracy": accuracy, "test_loss": loss}


# ---------------------------------------------------------------------------
# The run


def run_method(config: MethodConfig, workdir: str | os.PathLike, *, progress: bool = False,
               max_rounds: int | None = None,
               on_round_end: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
  """Runs (or resumes) the method experiment ``config`` in ``workdir``.

  Args:
    config: the method's config (``config.method`` names the method).
    workdir: the run directory (created); a run of the same config there resumes
      after its last checkpointed round, a different config is an error.
    progress: show a tqdm bar over rounds.
    max_rounds: do at most this many rounds in this call.
    on_round_end: called with t after round t's metrics are written, before its checkpoint.

  Returns:
    All metric rows of the run so far.

  Raises:
    ExperimentError: a different config in ``workdir``; ``ConfigError``, ``DataError``:
      bad settings.
  """
  method = get_method(config.method)

  def begin(data: Any, checkpoint: dict[str, Any] | None) -> Step:
    state = method.init(config, data) if checkpoint is None else checkpoint["state"]

    def step(t: int) -> RoundResult:
      nonlocal state
      state, rows = method.step(config, data, state, t)
      return RoundResult([{"round": t, "method": config.method, **row} for row in rows],
                         {"state": state})

    return step

  return run_rounds(config, workdir, from_dict=method_config_from_dict, rounds=config.rounds,
                    load_data=lambda: (method.load_data or load_method_data)(config),
                    expected=lambda data, done: {"state": method.init(config, data)},
                    begin=begin, desc=f"{config.method} rounds",
                    title=f"{config.method} on {config.dataset} ({config.partition}, "
                          f"{config.agents} agents)",
                    progress=progress, max_rounds=max_rounds, on_round_end=on_round_end)
