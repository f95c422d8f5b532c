"""The methods of the other papers as plug-ins of one resumable experiment runner.

The KD protocols of Afonin & Karimireddy only call ``fit``/``predict`` and run
through ``fedkrr`` (``neural.train_and_evaluate``). The methods of the other
papers exchange more (soft decisions on public data, features, auxiliary heads, a
server model), so each is a :class:`Method`: a typed config (a subclass of
:class:`MethodConfig`), ``init(config, data) -> state`` and ``step(config, data,
state, t) -> (state, rows)`` for one round. :func:`run_method` gives every method
the same run directory as the KD protocols::

  config.json      the method's config (with its "method" name)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  checkpoint.npz   the method's state after the last finished round (arrays, plain data)
  accuracy.png     test accuracy per round per agent (written at the end)

A killed run resumes from its checkpoint to the same numbers, provided the
method derives round t's randomness from ``round_rng(config.seed, t)`` (as all
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
import importlib
import json
import os
import types
import typing
from typing import Any
from typing import NamedTuple

import jax
import numpy as np

from neural._src.config import ConfigError
from neural._src.config import json_fields

# Modules that register methods when imported (lazily, by ``get_method``).
METHOD_MODULES = (
    "neural._src.ddistillation",
    "neural._src.mhd",
    "neural._src.representation_sharing",
    "neural._src.feddkc",
)

_REGISTRY: dict[str, Method] = {}


@dataclasses.dataclass(frozen=True)
class MethodConfig:
  """Fields shared by the configs of all methods (subclass it, frozen, to add yours).

  Field types are checked from the annotations (``int``, ``float``, ``bool``,
  ``str``, ``X | None``, ``tuple[float, ...]``, ``tuple[int, ...]``,
  ``tuple[str, ...]``); lists are stored as tuples and ints as floats where a
  float is expected. Override :meth:`validate` (calling ``super().validate()``)
  for the ranges of your fields, raising through :meth:`need`.

  Attributes:
    method: the registered method name (the discriminator in config files).
    dataset, data_dir, train_subset, test_subset: the data (see ``ExperimentConfig``).
    partition, proportions, alpha, beta, shards_per_agent: the split among agents.
    agents: number of agents (clients, devices) >= 2.
    rounds: communication rounds >= 1.
    seed: seed of the data subset, the split and every random draw.
    step_loop, agent_batching: how ``neural.train_loop`` runs local training
      ("auto": by backend and model; the numbers do not depend on it).
  """

  method: str = ""
  dataset: str = "digits"
  data_dir: str | None = None
  train_subset: int | None = None
  test_subset: int | None = None
  partition: str = "iid"
  proportions: tuple[float, ...] | None = None
  alpha: float | None = None
  beta: float | None = None
  shards_per_agent: int | None = None
  agents: int = 2
  rounds: int = 10
  seed: int = 0
  step_loop: str = "auto"
  agent_batching: str = "auto"

  def __post_init__(self):
    for f in dataclasses.fields(self):
      value = _coerce(f.name, _annotation(type(self), f.name), getattr(self, f.name))
      object.__setattr__(self, f.name, value)
    self.validate()

  def need(self, ok: bool, name: str, expected: str) -> None:
    """Raises ``ConfigError`` naming field ``name`` unless ``ok``."""
    if not ok:
      raise ConfigError(f"{name}: expected {expected}, got {getattr(self, name)!r}")

  def validate(self) -> None:
    """Checks the shared fields; subclasses extend it."""
    from neural._src.data import DATASETS
    from neural._src.partitions import PARTITIONS
    self.need(self.method in registered_methods(), "method",
              f"one of {', '.join(registered_methods())}")
    self.need(self.dataset in DATASETS, "dataset", f"one of {', '.join(DATASETS)}")
    self.need(self.partition in PARTITIONS, "partition", f"one of {', '.join(PARTITIONS)}")
    self.need(self.agents >= 2, "agents", "an integer >= 2")
    self.need(self.rounds >= 1, "rounds", "an integer >= 1")
    from neural._src.config import SEED_LIMIT
    self.need(0 <= self.seed < SEED_LIMIT, "seed", "an integer in 0..2^32 - 1")
    from neural._src.train_loop import AGENT_BATCHING
    from neural._src.train_loop import STEP_LOOPS
    self.need(self.step_loop in STEP_LOOPS, "step_loop", f"one of {', '.join(STEP_LOOPS)}")
    self.need(self.agent_batching in AGENT_BATCHING, "agent_batching",
              f"one of {', '.join(AGENT_BATCHING)}")
    self.need(self.train_subset is None or self.train_subset >= self.agents, "train_subset",
              f"None or an integer >= agents ({self.agents})")
    self.need(self.test_subset is None or self.test_subset >= 1, "test_subset",
              "None or an integer >= 1")
    if self.partition == "iid" and self.proportions is not None:
      self.need(len(self.proportions) == self.agents and all(p > 0 for p in self.proportions)
                and abs(sum(self.proportions) - 1) < 1e-6, "proportions",
                f"{self.agents} positive shares summing to 1")
    if self.partition == "label-split":
      self.need(self.alpha is not None and 0 <= self.alpha <= 1, "alpha",
                "a mixing fraction in [0, 1] (partition 'label-split')")
    if self.partition.startswith("dirichlet"):
      self.need(self.beta is not None and self.beta > 0, "beta",
                f"a concentration > 0 (partition {self.partition!r})")

  @property
  def partition_params(self) -> dict[str, Any]:
    """The keyword arguments of ``neural.partition`` for this partition."""
    name = {"iid": "proportions", "label-split": "alpha", "dirichlet-clients": "beta",
            "dirichlet-classes": "beta", "shards": "shards_per_agent"}.get(self.partition)
    value = getattr(self, name) if name else None
    return {} if value is None else {name: value}

  def to_dict(self) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(self).items()}

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2) + "\n"

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> MethodConfig:
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(fields))
    if unknown:
      raise ConfigError(f"{unknown[0]}: not a field of the {values.get('method', '?')!r} "
                        f"config (fields: {', '.join(fields)})")
    return cls(**values)

  @classmethod
  def from_json(cls, text: str) -> MethodConfig:
    return cls.from_dict(json_fields(text))

  def replace(self, **changes) -> MethodConfig:
    return self.from_dict({**self.to_dict(), **changes})


def _annotation(cls: type, name: str) -> Any:
  return typing.get_type_hints(cls)[name]


def _coerce(name: str, kind: Any, value: Any) -> Any:
  """``value`` in canonical form for annotation ``kind``, or a ``ConfigError``."""
  args = typing.get_args(kind)
  if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
    if value is None:
      return None
    kind = next(a for a in args if a is not type(None))
  if kind is bool:
    ok = isinstance(value, bool)
  elif kind is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif kind is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    value = float(value) if ok else value
  elif kind is str:
    ok = isinstance(value, str)
  elif typing.get_origin(kind) is tuple:
    item = typing.get_args(kind)[0]
    if item is str and isinstance(value, str):
      value = tuple(v.strip() for v in value.split(","))
    ok = isinstance(value, (list, tuple)) and len(value) > 0
    if ok:
      try:
        value = tuple(_coerce(name, item, v) for v in value)
      except ConfigError:
        ok = False
  else:
    return value
  if not ok:
    raise ConfigError(f"{name}: expected {_describe(kind)}, got {value!r}")
  return value


def _describe(kind: Any) -> str:
  if typing.get_origin(kind) is tuple:
    return f"a non-empty list of {_describe(typing.get_args(kind)[0])}s"
  return {bool: "true or false", int: "an integer", float: "a number",
          str: "a string"}.get(kind, str(kind))


class Method(NamedTuple):
  """A method of another paper, as a plug-in of :func:`run_method`.

  Attributes:
    name: the registered name (``config.method``).
    config_cls: its config, a frozen subclass of :class:`MethodConfig`.
    init: ``init(config, data) -> state``: NamedTuples, dicts, tuples and arrays (what
      a checkpoint holds, see ``neural._src.checkpoint``).
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
  """Registers ``method`` under ``method.name`` (called when its module is imported)."""
  if not (isinstance(method.config_cls, type) and issubclass(method.config_cls, MethodConfig)):
    raise TypeError(f"config_cls of {method.name!r}: expected a MethodConfig subclass")
  _REGISTRY[method.name] = method
  return method


def _import_all() -> None:
  for module in METHOD_MODULES:
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name != module:
        raise


def registered_methods() -> tuple[str, ...]:
  """The names of all registered methods, sorted."""
  _import_all()
  return tuple(sorted(_REGISTRY))


def get_method(name: str) -> Method:
  """The registered method ``name``; a ``ConfigError`` listing the names otherwise."""
  _import_all()
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
  from neural._src.experiment import load_run_data
  return load_run_data(config)


def round_rng(seed: int, t: int) -> jax.Array:
  """The key of round t: ``fold_in(PRNGKey(seed), t)`` (the same on resume)."""
  return jax.random.fold_in(jax.random.PRNGKey(seed), t)


def test_scores(probs: Any, y_test: np.ndarray) -> dict[str, float]:
  """``{"test_accuracy", "test_loss"}`` of probabilities (n, C) vs int labels (loss: CE)."""
  probs = np.asarray(probs, dtype=np.float64)
  y_test = np.asarray(y_test)
  if probs.ndim != 2 or probs.shape[0] != y_test.shape[0]:
    raise ValueError(f"probs: expected shape ({y_test.shape[0]}, C), got {probs.shape}")
  picked = np.clip(probs[np.arange(len(y_test)), y_test], 1e-7, 1.0)
  return {"test_accuracy": float(np.mean(np.argmax(probs, axis=1) == y_test)),
          "test_loss": float(-np.mean(np.log(picked)))}


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
  from tqdm.auto import tqdm

  from neural._src.plots import plot_run
  from neural._src.rundir import PLOT_FILE
  from neural._src.rundir import open_run
  method = get_method(config.method)
  load = lambda: (method.load_data or load_method_data)(config)
  with open_run(workdir, config, from_dict=method_config_from_dict, rounds=config.rounds,
                load_data=load) as run:
    if run.done < config.rounds:
      state = method.init(config, run.data) if run.checkpoint is None \
          else run.checkpoint["state"]
      stop = config.rounds if max_rounds is None else min(config.rounds, run.done + max_rounds)
      bar = tqdm(total=config.rounds, initial=run.done, desc=f"{config.method} rounds",
                 unit="round", disable=not progress)
      try:
        for t in range(run.done, stop):
          state, rows = method.step(config, run.data, state, t)
          rows = [{"round": t, "method": config.method, **row} for row in rows]
          run.finish_round(t, rows, {"state": state, "config": config.to_dict()}, on_round_end)
          bar.update(1)
      finally:
        bar.close()
    if run.done >= config.rounds:
      plot_run(run.rows, run.workdir / PLOT_FILE,
               title=f"{config.method} on {config.dataset} ({config.partition}, "
                     f"{config.agents} agents)")
    return list(run.rows)
