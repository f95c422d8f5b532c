"""Typed configs: one base with one coercer, the fields every run shares, the KD experiment.

Every config is a frozen dataclass derived from :class:`Config`. Field types are
checked from the annotations by one coercer (``int``, ``float``, ``bool``,
``str``, ``X | None``, ``tuple[X, ...]``); lists are stored as tuples, ints as
floats where a float is expected, a comma-separated string is accepted for a
tuple of strings and one number for a tuple of numbers. Ranges are checked by
``validate`` (subclasses extend it and raise through :meth:`Config.need`). The
field descriptions in each class's ``Attributes:`` docstring section are what
``neural run --help`` and ``neural configs --fields NAME`` print: the
command-line flags are generated from the fields.

:class:`RunConfig` holds the fields every run has (data, split, agents, rounds,
seeds, how local training runs its steps); :class:`ExperimentConfig` adds those of
the KD protocols of Afonin & Karimireddy, and each method of the other papers adds
its own (``neural.methods``).

Seeds: ``data_seed`` draws the data subsets, the partition and the communication
graph; ``init_seed`` every initialisation and the randomness of training. Both
default to ``seed``, so a config that names only ``seed`` (every config written
before the two existed) means what it meant.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import functools
import inspect
import json
import math
import re
import types
import typing
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Self

from fedkrr import BASELINES
from fedkrr import PROTOCOLS
from fedkrr import ProtocolParams
from fedkrr import check_weights
from fedkrr import protocol_info
from fedkrr.io import ReadError
from fedkrr.io import parse_json
from neural._src.choices import AGENT_BATCHING
from neural._src.choices import AUGMENTS
from neural._src.choices import LOSSES
from neural._src.choices import MAX_FOREST_TREES
from neural._src.choices import MODELS
from neural._src.choices import STEP_LOOPS
from neural._src.choices import WEIGHTINGS
from neural._src.datasets.data import DATASETS
from neural._src.datasets.partitions import PARTITIONS
from neural._src.settings import EpochSettings
from neural._src.settings import TrainingSettings

KD_PROTOCOLS = PROTOCOLS   # fedkrr's protocols, by the same names
RUN_PROTOCOLS = KD_PROTOCOLS + ("fedavg",) + BASELINES
FEDAVG_INITS = ("one", "mean")
DEVICE_CHOICES = ("one", "all")
FOREST = "forest"
SEED_LIMIT = 2**32   # seeds reach NumPy, JAX and scikit-learn, which takes 32-bit seeds
SEED_FIELDS = ("data_seed", "init_seed")
# Fields that choose what a run writes beside its numbers, never the numbers: a run's
# saved config and checkpoint are compared without them (see ``without_outputs``).
OUTPUT_FIELDS = ("tensorboard",)
# Every other integer of a config sizes work that XLA indexes with 32-bit integers: larger
# values abort the process inside XLA, so each is refused first, naming its field.
INT_LIMIT = 2**31 - 1
# Rounds: far past any run of the papers (20 rounds of 20 epochs), short of runs that would
# never end (local epochs: neural.training.EpochSettings, MAX_EPOCHS).
MAX_ROUNDS = 100_000


class ConfigError(ValueError):
  """A config field (named in the message) has a value that is not allowed."""


def shown(value: Any, limit: int = 80) -> str:
  """``repr(value)``, cut to about ``limit`` characters (error messages stay one short line)."""
  text = repr(value)
  return text if len(text) <= limit else text[:limit - 3] + "..."


def json_fields(text: str) -> dict[str, Any]:
  """The JSON object of config fields in ``text``; ``ConfigError`` if it is not one."""
  try:
    values = parse_json(text, "config")
  except ReadError as e:
    raise ConfigError(str(e)) from None
  if not isinstance(values, dict):
    raise ConfigError("config: expected a JSON object of config fields")
  return values


def with_changes(values: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
  """``values`` updated by ``changes``; a ``seed`` in ``changes`` also sets the seeds it leaves out.

  ``seed`` is the default of ``data_seed`` and ``init_seed``: changing it changes
  both unless the same changes name them.
  """
  out = {**values, **changes}
  if "seed" in changes:
    for name in SEED_FIELDS:
      if name not in changes:
        out.pop(name, None)
  return out


@dataclasses.dataclass(frozen=True)
class Config:
  """Base of every config: type checks from the annotations, ranges in :meth:`validate`."""

  def __post_init__(self):
    hints = _hints(type(self))
    for f in dataclasses.fields(self):
      object.__setattr__(self, f.name, coerce(f.name, hints[f.name], getattr(self, f.name)))
    self.validate()

  def need(self, ok: bool, name: str, expected: str) -> None:
    """Raises ``ConfigError`` naming field ``name`` unless ``ok``."""
    if not ok:
      raise ConfigError(f"{name}: expected {expected}, got {shown(getattr(self, name))}")

  def validate(self) -> None:
    """Checks the ranges of the fields (subclasses extend it, calling ``super()``): here,
    that every integer but the seeds is at most :data:`INT_LIMIT`, and the training
    settings of a config that has them (``neural.training.TrainingSettings``, checked there)."""
    for f in dataclasses.fields(self):
      if f.name in ("seed",) + SEED_FIELDS:
        continue
      value = getattr(self, f.name)
      values = value if isinstance(value, tuple) else (value,)
      if any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > INT_LIMIT
             for v in values):
        self.need(False, f.name, f"integers of at most 2^31 - 1 ({INT_LIMIT})")
    if isinstance(self, TrainingSettings):
      for name, expected in self.training_problems():
        self.need(False, name, expected)

  def to_dict(self) -> dict[str, Any]:
    """The config as a JSON-ready dict (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v
            for k, v in dataclasses.asdict(self).items()}

  def to_json(self) -> str:
    """The config as indented JSON, as run directories store it."""
    return json.dumps(self.to_dict(), indent=2) + "\n"

  @classmethod
  def field_names(cls) -> tuple[str, ...]:
    """The names of the config's fields, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls))

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> Self:
    """The config of ``values`` (a mapping of field names); unknown names are an error."""
    fields = cls.field_names()
    unknown = sorted(set(values) - set(fields))
    if unknown:
      raise ConfigError(f"{unknown[0]}: not a field of {cls.config_name(values)} "
                        f"(fields: {', '.join(fields)})")
    return cls(**values)

  @classmethod
  def config_name(cls, values: Mapping[str, Any] | None = None) -> str:
    """How error messages name this config."""
    return f"{cls.__name__}"

  @classmethod
  def from_json(cls, text: str) -> Self:
    """Reads a config from JSON text, validated (``ConfigError`` names a bad field)."""
    return cls.from_dict(json_fields(text))

  def replace(self, **changes) -> Self:
    """A copy with ``changes`` (``seed`` also changes the seeds it does not name)."""
    return self.from_dict(with_changes(self.to_dict(), changes))


def without_outputs(values: Mapping[str, Any]) -> dict[str, Any]:
  """A config's fields (a dict) without :data:`OUTPUT_FIELDS`: what a resume compares."""
  return {k: v for k, v in values.items() if k not in OUTPUT_FIELDS}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
  return typing.get_type_hints(cls)


def field_type(cls: type, name: str) -> Any:
  """The annotation of field ``name`` of config class ``cls`` (strings resolved)."""
  return _hints(cls)[name]


def optional_inner(kind: Any) -> tuple[Any, bool]:
  """``(T, True)`` for an annotation ``T | None`` (or ``Optional[T]``), else ``(kind, False)``."""
  args = typing.get_args(kind)
  if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
    return next(a for a in args if a is not type(None)), True
  return kind, False


def coerce(name: str, kind: Any, value: Any) -> Any:
  """``value`` in canonical form for annotation ``kind``, or a ``ConfigError`` naming ``name``."""
  kind, optional = optional_inner(kind)
  if optional and value is None:
    return None
  if kind is bool:
    ok = isinstance(value, bool)
  elif kind is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif kind is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
      value = float(value) if ok else value
    except OverflowError:   # an integer of hundreds of digits
      raise ConfigError(f"{name}: expected a finite number, got an integer of "
                        f"{len(str(abs(value)))} digits") from None
    if ok and not math.isfinite(value):
      raise ConfigError(f"{name}: expected a finite number, got {value!r}")
  elif kind is str:
    ok = isinstance(value, str)
    if ok and not _utf8(value):   # a lone surrogate ("\udc80"): no file, plot or JSON takes it
      raise ConfigError(f"{name}: expected UTF-8 text, got {shown(value)} (a lone surrogate)")
  elif typing.get_origin(kind) is tuple:
    item = typing.get_args(kind)[0]
    if item is str and isinstance(value, str):
      value = tuple(v.strip() for v in value.split(","))
    elif item in (int, float) and type(value) in (int, float):
      value = (value,)   # one number for a tuple of numbers (not a bool)
    ok = isinstance(value, (list, tuple)) and len(value) > 0
    if ok:
      try:
        value = tuple(coerce(name, item, v) for v in value)
      except ConfigError:
        ok = False
  else:
    return value
  if not ok:
    raise ConfigError(f"{name}: expected {describe_type(kind)}, got {shown(value)}")
  return value


def _utf8(text: str) -> bool:
  """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    return False
  return True


def describe_type(kind: Any) -> str:
  """Words for an annotation: "an integer", "a non-empty list of numbers", ..."""
  kind = optional_inner(kind)[0]
  if typing.get_origin(kind) is tuple:
    item = {bool: "true/false value", int: "integer", float: "number",
            str: "name"}.get(typing.get_args(kind)[0], "value")
    return f"a non-empty list of {item}s"
  return {bool: "true or false", int: "an integer", float: "a number",
          str: "a string"}.get(kind, str(kind))


def field_help(cls: type) -> dict[str, str]:
  """The description of each field, from the ``Attributes:`` sections of ``cls`` and its bases.

  An entry ``name: text`` describes one field; ``a, b, c: text`` several.
  """
  out: dict[str, str] = {}
  for klass in reversed(cls.__mro__):
    # cleandoc: Python 3.13 strips the docstrings' common indentation itself, 3.11 does not.
    doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
    section = re.split(r"\nAttributes[^\n]*:\n", doc, maxsplit=1)[1:] or [""]
    section = re.split(r"\n\s*\n(?=\S)", section[0])[0]   # up to the next section
    entries = re.split(r"\n  (?=[A-Za-z_][\w, ]*:)", "\n" + section)
    for entry in entries:
      head, colon, text = entry.partition(":")
      if not colon:
        continue
      text = " ".join(text.split())
      for name in (n.strip() for n in head.split(",")):
        if name:
          out[name] = text
  return out


@dataclasses.dataclass(frozen=True)
class RunConfig(Config):
  """The fields every run has: data, split, agents, rounds, seeds, training's loop.

  Attributes:
    dataset: one of ``neural.DATASETS`` ("digits", "mnist-subset", "mnist",
      "cifar10", "cinic10", "synthetic").
    data_dir: directory of the files of "mnist" / "cifar10" / "cinic10" (not needed
      otherwise).
    train_subset: use only this many training points (a seeded random subset;
      ``None``: all), for quick runs.
    test_subset: evaluate on this many test points (``None``: all).
    normalize: standardise the inputs per channel, as the authors' code does: MNIST
      (and the MNIST subset) by mean 0.1307 and std 0.3081, CIFAR-10 and CINIC-10 by
      their channel means and stds, other data by the training subset's own (off:
      inputs in [0, 1]).
    partition: one of ``neural.PARTITIONS``.
    proportions: "iid" shares per agent (``None``: equal); the paper's same-data
      setting is (0.7, 0.3).
    alpha: "label-split" mixing fraction in [0, 1] (0: disjoint labels, 1: iid).
    beta: Dirichlet concentration of "dirichlet-clients" / "dirichlet-classes".
    shards_per_agent: label shards per agent of "shards" (``None``: 2).
    agents: number of agents M >= 2 (M = 1 where a method allows it: the
      centralised baseline of representation sharing).
    rounds: number of rounds (round 0 is local training on the labels).
    seed: the default of data_seed and init_seed.
    data_seed: seed of the data subsets, the partition and the communication
      graph (``None``: seed).
    init_seed: seed of every initialisation and of training's randomness
      (``None``: seed).
    step_loop: how local training runs its steps: "scan" (one compiled loop per
      epoch), "python" (one jitted step per mini-batch) or "auto" (by backend and
      model, see ``neural.training.train_loop``); the numbers do not depend on it.
    agent_batching: agents of one architecture trained together as one vmapped
      program ("vmap"), one after the other ("sequential"), or "auto".
    tensorboard: also write the run's metric rows as a TensorBoard event file into its
      directory after each round (``tensorboard --logdir DIR`` shows every run under
      DIR, named like its folder); needs the optional extra ``fedkrr[tensorboard]``. It
      changes no number: a run started without it resumes (and reads back) with it.
  """

  dataset: str = "digits"
  data_dir: str | None = None
  train_subset: int | None = None
  test_subset: int | None = None
  normalize: bool = False
  partition: str = "iid"
  proportions: tuple[float, ...] | None = None
  alpha: float | None = None
  beta: float | None = None
  shards_per_agent: int | None = None
  agents: int = 2
  rounds: int = 10
  seed: int = 0
  # None (the default) is replaced by ``seed`` in __post_init__, so a built config holds ints:
  # the type checker is told so, the runtime (and the API reference) see the real default.
  if not TYPE_CHECKING:
    data_seed: int | None = None
    init_seed: int | None = None
  else:
    data_seed: int = 0
    init_seed: int = 0
  step_loop: str = "auto"
  agent_batching: str = "auto"
  tensorboard: bool = False
  # The fewest agents a run may have: a subclass whose runs make sense alone lowers it.
  min_agents: ClassVar[int] = 2

  def __post_init__(self):
    super().__post_init__()
    for name in SEED_FIELDS:
      if getattr(self, name) is None:
        object.__setattr__(self, name, self.seed)

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    need = self.need
    need(self.dataset in DATASETS, "dataset", f"one of {', '.join(DATASETS)}")
    need(self.partition in PARTITIONS, "partition", f"one of {', '.join(PARTITIONS)}")
    need(self.agents >= self.min_agents, "agents", f"an integer >= {self.min_agents}")
    need(1 <= self.rounds <= MAX_ROUNDS, "rounds", f"an integer in 1..{MAX_ROUNDS}")
    for name in ("seed",) + SEED_FIELDS:
      value = getattr(self, name)
      need(value is None or 0 <= value < SEED_LIMIT, name, "an integer in 0..2^32 - 1")
    need(self.step_loop in STEP_LOOPS, "step_loop", f"one of {', '.join(STEP_LOOPS)}")
    need(self.agent_batching in AGENT_BATCHING, "agent_batching",
         f"one of {', '.join(AGENT_BATCHING)}")
    need(self.train_subset is None or self.train_subset >= self.agents, "train_subset",
         f"None or an integer >= agents ({self.agents})")
    need(self.test_subset is None or self.test_subset >= 1, "test_subset",
         "None or an integer >= 1")
    if self.partition == "iid" and self.proportions is not None:
      need(len(self.proportions) == self.agents and all(p > 0 for p in self.proportions)
           and abs(sum(self.proportions) - 1) < 1e-6, "proportions",
           f"{self.agents} positive shares summing to 1")
    if self.partition == "label-split":
      need(self.alpha is not None and 0 <= self.alpha <= 1, "alpha",
           "a mixing fraction in [0, 1] (partition 'label-split')")
    if self.partition.startswith("dirichlet"):
      need(self.beta is not None and self.beta > 0, "beta",
           f"a concentration > 0 (partition {self.partition!r})")
    need(self.shards_per_agent is None or self.shards_per_agent >= 1, "shards_per_agent",
         "None (2 shards) or an integer >= 1")

  @property
  def total_rounds(self) -> int:
    """The rounds a run of this config does in all (``rounds``)."""
    return self.rounds

  @property
  def partition_params(self) -> dict[str, Any]:
    """The keyword arguments of ``neural.partition`` for this partition."""
    name = {"iid": "proportions", "label-split": "alpha", "dirichlet-clients": "beta",
            "dirichlet-classes": "beta", "shards": "shards_per_agent"}.get(self.partition)
    value = getattr(self, name) if name else None
    return {} if name is None or value is None else {name: value}


@dataclasses.dataclass(frozen=True)
class ExperimentConfig(RunConfig, EpochSettings):
  """One neural experiment with a KD protocol (Afonin & Karimireddy, Sec. 6, App. A and H).

  Local training is Adam with the settings of ``neural.training.EpochSettings``
  (``epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``: the paper's by default).

  Attributes:
    models: one model name per agent, or one for all (``neural.MODELS`` or
      "forest" for the random forest).
    width: width setting of the networks (channels of the CNN's first layer, hidden
      units of the MLP, ...): one per agent, or one for all (``None``: each model's
      default). One per agent gives a CNN and an MLP each its own, e.g. (8, 512).
    tiny: tiny variants of the networks (tests, quick runs).
    norm: normalisation layer of VGG / ResNets ("group" by default).
    protocol: a KD protocol of ``fedkrr`` (akd, avgkd, weighted-avgkd, pkd, pkd-mean,
      ekd, backfit-gs, backfit-jacobi; pkd follows the paper's equations, pkd-mean the
      authors' code: the mean of all M models, own included), "fedavg", or the
      baselines "central" (each agent's model on the pooled data) and "local" (each
      on its own data); baselines run one round.
    start: starting agent of AKD (0-based).
    agent_weights: weighted-avgkd's weight of each agent (``agents`` of them, finite,
      > 0, summing to 1; ``None``: 1/M each, which is AvgKD).
    epochs: local epochs per round.
    learning_rate: Adam's step size (1e-3 in the paper).
    weight_decay: L2 coefficient added to the gradient before Adam (3e-4 in the paper,
      0 for its 'no regularisation' runs).
    loss: "mse" (squared error of the softmax vs the targets) or "ce" (soft
      cross-entropy).
    warm_start: start each round from the agent's previous model.
    augment: "none", or "crop-flip": every training batch randomly flipped and
      cropped from the image padded by 4 black pixels (the authors' CIFAR-10 recipe),
      the teachers' targets taken on the augmented batch as in their code (networks
      only: a random forest cannot be evaluated inside the training step).
    epoch_eval: score the test set after every local epoch and log the best of
      these per model (``best_epoch_test_accuracy``: what the paper's figures show,
      as its authors' code reports it) beside the last epoch's (``test_accuracy``).
      The model passed on is the last epoch's either way.
    record_outcomes: record which test images each model (and EKD's sum, FedAvg's
      server) got right at every evaluation a paper curve uses, the best local epoch's
      too, in ``outcomes.jsonl`` beside ``metrics.jsonl`` (which stays the same): a
      paired test-set term in ``neural reproduce``'s verdicts at paper scale, where
      every seed is scored on the same test images (the paper-scale figure configs
      set it).
    fedavg_init: FedAvg's round-0 global model: "one" initialisation, or "mean": the
      average of M independent initialisations (the authors' code).
    fedavg_weights: FedAvg's server average: "size" (by the agents' numbers of points,
      McMahan et al.) or "equal" (1/M, the authors' code).
    forest_trees: trees of the random forest (models "forest").
    forest_max_depth: depth limit of its trees (``None``: none).
    devices: "one" (everything on the default device) or "all": the agents of one
      architecture, trained together as one vmapped program, are spread over
      ``fedkrr.scale.agent_mesh(k)`` for the k agents of that architecture (the largest
      number of ``jax.devices()`` that divides k), each device training its own
      agents (``neural.FlaxLearner``'s ``mesh``); the same numbers up to float32
      rounding. With one device, or k = 1, the same as "one".
  """

  models: tuple[str, ...] = ("cnn",)
  width: tuple[int, ...] | None = None
  tiny: bool = False
  norm: str = "group"
  protocol: str = "avgkd"
  start: int = 0
  agent_weights: tuple[float, ...] | None = None
  loss: str = "mse"
  warm_start: bool = False
  augment: str = "none"
  epoch_eval: bool = False
  record_outcomes: bool = False
  fedavg_init: str = "one"
  fedavg_weights: str = "size"
  forest_trees: int = 100
  forest_max_depth: int | None = None
  devices: str = "one"

  @classmethod
  def config_name(cls, values: Mapping[str, Any] | None = None) -> str:
    """The config's name in error messages."""
    return "the KD experiment config"

  @property
  def total_rounds(self) -> int:
    """The rounds a run does: ``rounds``, or 1 for the baselines "central" and "local"."""
    return 1 if self.protocol in BASELINES else self.rounds

  @property
  def protocol_params(self) -> ProtocolParams:
    """The KD protocol's parameters as one value (:class:`fedkrr.ProtocolParams`)."""
    return ProtocolParams(start=self.start, weights=self.agent_weights)

  @property
  def agent_models(self) -> tuple[str, ...]:
    """The model name of each agent (length ``agents``)."""
    return self.models * self.agents if len(self.models) == 1 else self.models

  @property
  def agent_widths(self) -> tuple[int | None, ...]:
    """The width setting of each agent's network (length ``agents``; ``None``: the default)."""
    if self.width is None:
      return (None,) * self.agents
    return self.width * self.agents if len(self.width) == 1 else self.width

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    need = self.need
    need(self.protocol in RUN_PROTOCOLS, "protocol", f"one of {', '.join(RUN_PROTOCOLS)}")
    if self.agent_weights is not None:
      takes = self.protocol in KD_PROTOCOLS and "weights" in protocol_info(
          self.protocol).parameters
      need(takes, "agent_weights", f"None for protocol {self.protocol} (only weighted-avgkd "
           "takes weights)")
      try:
        check_weights(self.agent_weights, self.agents, "agent_weights")
      except ValueError as e:
        raise ConfigError(str(e)) from None
    need(self.loss in LOSSES, "loss", "'mse' or 'ce'")
    need(self.augment in AUGMENTS, "augment", f"one of {', '.join(AUGMENTS)}")
    if self.augment != "none":
      need(FOREST not in self.models, "augment", "'none' with a random forest agent (the "
           "teachers are evaluated on each augmented batch inside the compiled step)")
    need(self.fedavg_init in FEDAVG_INITS, "fedavg_init", "'one' or 'mean'")
    need(self.fedavg_weights in WEIGHTINGS, "fedavg_weights", "'size' or 'equal'")
    need(0 <= self.start < self.agents, "start", f"an agent index in 0..{self.agents - 1}")
    need(self.width is None or (len(self.width) in (1, self.agents)
                                and all(w >= 1 for w in self.width)),
         "width", f"None, or integers >= 1: one, or one per agent ({self.agents})")
    need(1 <= self.forest_trees <= MAX_FOREST_TREES, "forest_trees",
         f"an integer in 1..{MAX_FOREST_TREES}")
    need(self.forest_max_depth is None or self.forest_max_depth >= 1, "forest_max_depth",
         "None or an integer >= 1")
    need(self.devices in DEVICE_CHOICES, "devices", "'one' or 'all'")
    names = MODELS + (FOREST,)
    need(len(self.models) in (1, self.agents), "models",
         f"one model name, or one per agent ({self.agents})")
    need(all(m in names for m in self.models), "models", f"names from {', '.join(names)}")
    if self.protocol == "fedavg":
      need(len(set(self.agent_models)) == 1 and FOREST not in self.models, "models",
           "one neural architecture for all agents (FedAvg averages parameters)")

