"""The typed configuration of one neural experiment, and config files with sweeps.

An :class:`ExperimentConfig` names everything a run depends on: data, partition,
agents and their models, protocol, training settings and seeds. It is saved as
``config.json`` in the run directory; a run started again in that directory must
have the same config (it then resumes).

A *config file* is either one config (a JSON object of :class:`ExperimentConfig`
fields) or a spec with a sweep::

  {"description": "...", "figure": "Fig. 6",
   "base": {... ExperimentConfig fields ...},
   "grid": [{"alpha": [0.0, 0.1, 1.0]},
            {"avgkd": {"protocol": "avgkd"}, "fedavg": {"protocol": "fedavg"}}]}

Each grid axis is either ``{field: [values]}`` (runs named ``field=value``) or
``{name: {field: value, ...}, ...}`` (named variants); the runs are the cartesian
product of the axes, named by joining the axis names with ``__``. The paper's
configs (Afonin & Karimireddy, Sec. 6 and App. H) ship in ``neural/configs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import Any

KD_PROTOCOLS = ("akd", "avgkd", "pkd", "ekd", "backfit-gs", "backfit-jacobi")
RUN_PROTOCOLS = KD_PROTOCOLS + ("fedavg", "central", "local")
LOSSES = ("mse", "ce")
FOREST = "forest"
CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
SEED_LIMIT = 2**32   # seeds reach NumPy, JAX and scikit-learn, which takes 32-bit seeds


class ConfigError(ValueError):
  """A config field (named in the message) has a value that is not allowed."""


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One neural experiment (Afonin & Karimireddy, Sec. 6, App. A and H).

  Attributes:
    dataset: one of ``neural.DATASETS`` ("digits", "mnist-subset", "mnist",
      "cifar10", "synthetic").
    data_dir: directory of the files of "mnist" / "cifar10" (not needed otherwise).
    train_subset: use only this many training points (a seeded random subset;
      ``None``: all), for quick runs.
    test_subset: evaluate on this many test points (``None``: all).
    partition: one of ``neural.PARTITIONS``.
    proportions: "iid" shares per agent (``None``: equal); the paper's same-data
      setting is (0.7, 0.3).
    alpha: "label-split" mixing fraction in [0, 1] (0: disjoint labels, 1: iid).
    beta: Dirichlet concentration of "dirichlet-clients" / "dirichlet-classes".
    shards_per_agent: label shards per agent of "shards" (``None``: 2).
    agents: number of agents M >= 2.
    models: one model name per agent, or one for all (``neural.MODELS`` or
      "forest" for the random forest).
    width: width setting of the networks (``None``: the model's default).
    tiny: tiny variants of the networks (tests, quick runs).
    norm: normalisation layer of VGG / ResNets ("group" by default).
    protocol: a KD protocol of ``fedkrr`` (akd, avgkd, pkd, ekd, backfit-gs,
      backfit-jacobi), "fedavg", or the baselines "central" (each agent's model on
      the pooled data) and "local" (each on its own data); baselines run one round.
    start: starting agent of AKD (0-based).
    rounds: number of rounds (round 0 is local training on the labels).
    epochs, batch_size, learning_rate, weight_decay, loss, warm_start: local
      training (Adam, L2 weight decay added to the gradient; loss "mse": squared
      error of the softmax vs the targets, "ce": soft cross-entropy).
    seed: seed of the data subset, the partition and every initialisation.
    forest_trees, forest_max_depth: random-forest settings (models "forest").
    step_loop: how local training runs its steps: "scan" (one compiled loop per
      epoch), "python" (one jitted step per mini-batch) or "auto" (by backend and
      model, see ``neural.train_loop``).
    agent_batching: agents of one architecture trained together as one vmapped
      program ("vmap"), one after the other ("sequential"), or "auto".
  """

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
  models: tuple[str, ...] = ("cnn",)
  width: int | None = None
  tiny: bool = False
  norm: str = "group"
  protocol: str = "avgkd"
  start: int = 0
  rounds: int = 10
  epochs: int = 20
  batch_size: int = 64
  learning_rate: float = 1e-3
  weight_decay: float = 3e-4
  loss: str = "mse"
  warm_start: bool = False
  seed: int = 0
  forest_trees: int = 100
  forest_max_depth: int | None = None
  step_loop: str = "auto"
  agent_batching: str = "auto"

  def __post_init__(self):
    for name, value in _normalised(self).items():
      object.__setattr__(self, name, value)
    _validate(self)

  @property
  def agent_models(self) -> tuple[str, ...]:
    """The model name of each agent (length ``agents``)."""
    return self.models * self.agents if len(self.models) == 1 else self.models

  @property
  def partition_params(self) -> dict[str, Any]:
    """The keyword arguments of ``neural.partition`` for this partition."""
    name = {"iid": "proportions", "label-split": "alpha", "dirichlet-clients": "beta",
            "dirichlet-classes": "beta", "shards": "shards_per_agent"}.get(self.partition)
    value = getattr(self, name) if name else None
    return {} if value is None else {name: value}

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    for name in ("models", "proportions"):
      if out[name] is not None:
        out[name] = list(out[name])
    return out

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2) + "\n"

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> ExperimentConfig:
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
      raise ConfigError(f"{unknown[0]}: not a config field (fields: {', '.join(FIELDS)})")
    return cls(**values)

  @classmethod
  def from_json(cls, text: str) -> ExperimentConfig:
    return cls.from_dict(json_fields(text))

  def replace(self, **changes) -> ExperimentConfig:
    return self.from_dict({**self.to_dict(), **changes})


FIELDS = tuple(f.name for f in dataclasses.fields(ExperimentConfig))


def json_fields(text: str) -> dict[str, Any]:
  """The JSON object of config fields in ``text``; ``ConfigError`` if it is not one."""
  try:
    values = json.loads(text)
  except json.JSONDecodeError as e:
    raise ConfigError(f"config: not valid JSON ({e})") from None
  if not isinstance(values, dict):
    raise ConfigError("config: expected a JSON object of config fields")
  return values

# Expected kind of each field: "int", "float", "bool", "str", optional with "?".
_KINDS = {
    "dataset": "str", "data_dir": "str?", "train_subset": "int?", "test_subset": "int?",
    "partition": "str", "proportions": "floats?", "alpha": "float?", "beta": "float?",
    "shards_per_agent": "int?", "agents": "int", "models": "strs", "width": "int?",
    "tiny": "bool", "norm": "str", "protocol": "str", "start": "int", "rounds": "int",
    "epochs": "int", "batch_size": "int", "learning_rate": "float", "weight_decay": "float",
    "loss": "str", "warm_start": "bool", "seed": "int", "forest_trees": "int",
    "forest_max_depth": "int?", "step_loop": "str", "agent_batching": "str",
}


def _is_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def _normalised(config: ExperimentConfig) -> dict[str, Any]:
  """Checks each field's type; returns the fields to store in canonical form."""
  out = {}
  for name, kind in _KINDS.items():
    value = getattr(config, name)
    if kind.endswith("?"):
      if value is None:
        continue
      kind = kind[:-1]
    ok = True
    if kind == "int":
      ok = _is_int(value)
    elif kind == "float":
      ok = _is_number(value)
      if ok:
        out[name] = float(value)
    elif kind == "bool":
      ok = isinstance(value, bool)
    elif kind == "str":
      ok = isinstance(value, str)
    elif kind == "strs":
      if isinstance(value, str):
        value = tuple(v.strip() for v in value.split(","))
      ok = (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(v, str) for v in value))
      if ok:
        out[name] = tuple(value)
    elif kind == "floats":
      ok = (isinstance(value, (list, tuple)) and len(value) > 0
            and all(_is_number(v) for v in value))
      if ok:
        out[name] = tuple(float(v) for v in value)
    if not ok:
      expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                  "str": "a string", "strs": "a non-empty list of names",
                  "floats": "a non-empty list of numbers"}[kind]
      raise ConfigError(f"{name}: expected {expected}, got {value!r}")
  return out


def _validate(c: ExperimentConfig) -> None:
  from neural._src.data import DATASETS
  from neural._src.models import MODELS
  from neural._src.partitions import PARTITIONS
  from neural._src.train_loop import AGENT_BATCHING
  from neural._src.train_loop import STEP_LOOPS

  def need(ok: bool, name: str, expected: str):
    if not ok:
      raise ConfigError(f"{name}: expected {expected}, got {getattr(c, name)!r}")

  need(c.dataset in DATASETS, "dataset", f"one of {', '.join(DATASETS)}")
  need(c.partition in PARTITIONS, "partition", f"one of {', '.join(PARTITIONS)}")
  need(c.protocol in RUN_PROTOCOLS, "protocol", f"one of {', '.join(RUN_PROTOCOLS)}")
  need(c.agents >= 2, "agents", "an integer >= 2")
  need(c.rounds >= 1, "rounds", "an integer >= 1")
  need(c.epochs >= 1, "epochs", "an integer >= 1")
  need(c.batch_size >= 1, "batch_size", "an integer >= 1")
  need(c.learning_rate > 0, "learning_rate", "a number > 0")
  need(c.weight_decay >= 0, "weight_decay", "a number >= 0")
  need(c.loss in LOSSES, "loss", "'mse' or 'ce'")
  need(0 <= c.seed < SEED_LIMIT, "seed", "an integer in 0..2^32 - 1")
  need(0 <= c.start < c.agents, "start", f"an agent index in 0..{c.agents - 1}")
  need(c.train_subset is None or c.train_subset >= c.agents, "train_subset",
       f"None or an integer >= agents ({c.agents})")
  need(c.test_subset is None or c.test_subset >= 1, "test_subset", "None or an integer >= 1")
  need(c.width is None or c.width >= 1, "width", "None or an integer >= 1")
  need(c.forest_trees >= 1, "forest_trees", "an integer >= 1")
  need(c.step_loop in STEP_LOOPS, "step_loop", f"one of {', '.join(STEP_LOOPS)}")
  need(c.agent_batching in AGENT_BATCHING, "agent_batching",
       f"one of {', '.join(AGENT_BATCHING)}")
  need(c.forest_max_depth is None or c.forest_max_depth >= 1, "forest_max_depth",
       "None or an integer >= 1")
  names = MODELS + (FOREST,)
  need(len(c.models) in (1, c.agents), "models",
       f"one model name, or one per agent ({c.agents})")
  need(all(m in names for m in c.models), "models", f"names from {', '.join(names)}")
  if c.protocol == "fedavg":
    need(len(set(c.agent_models)) == 1 and FOREST not in c.models, "models",
         "one neural architecture for all agents (FedAvg averages parameters)")
  if c.partition == "iid" and c.proportions is not None:
    need(len(c.proportions) == c.agents and all(p > 0 for p in c.proportions)
         and abs(sum(c.proportions) - 1) < 1e-6, "proportions",
         f"{c.agents} positive shares summing to 1")
  if c.partition == "label-split":
    need(c.alpha is not None and 0 <= c.alpha <= 1, "alpha",
         "a mixing fraction in [0, 1] (partition 'label-split')")
  if c.partition.startswith("dirichlet"):
    need(c.beta is not None and c.beta > 0, "beta",
         f"a concentration > 0 (partition {c.partition!r})")
  need(c.shards_per_agent is None or c.shards_per_agent >= 1, "shards_per_agent",
       "None (2 shards) or an integer >= 1")


@dataclasses.dataclass(frozen=True)
class ConfigSpec:
  """A config file: base fields, sweep axes and a description."""

  base: dict[str, Any]
  grid: tuple[dict[str, Any], ...] = ()
  description: str = ""
  figure: str = ""

  def expand(self, overrides: Mapping[str, Any] | None = None
             ) -> list[tuple[str, ExperimentConfig]]:
    """The runs of the sweep as ``(name, config)``; ``overrides`` win over everything.

    A spec without a grid gives one run named ``""``.
    """
    axes = []
    for i, axis in enumerate(self.grid):
      axes.append(_axis_entries(axis, f"grid[{i}]"))
    runs = []
    for combo in itertools.product(*axes):
      values = dict(self.base)
      names = []
      for name, changes in combo:
        values.update(changes)
        names.append(name)
      values.update(overrides or {})
      runs.append(("__".join(names), config_from_dict(values)))
    seen = set()
    for name, _ in runs:
      if name in seen:
        raise ConfigError(f"grid: two runs are both named {name!r}")
      seen.add(name)
    return runs


def _axis_entries(axis: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
  if not isinstance(axis, dict) or not axis:
    raise ConfigError(f"{where}: expected a non-empty object")
  if len(axis) == 1 and isinstance(next(iter(axis.values())), list):
    (field, values), = axis.items()
    if field not in FIELDS and field not in _method_fields():
      raise ConfigError(f"{where}: {field!r} is not a config field")
    return [(f"{field}={_fmt(v)}", {field: v}) for v in values]
  entries = []
  for name, changes in axis.items():
    if not isinstance(changes, dict):
      raise ConfigError(f"{where}.{name}: expected an object of config fields")
    entries.append((name, changes))
  return entries


def config_from_dict(values: Mapping[str, Any]) -> Any:
  """An ``ExperimentConfig``, or a method's config when ``values`` has a "method" field."""
  if "method" in values:
    from neural._src.methods import method_config_from_dict
    return method_config_from_dict(values)
  return ExperimentConfig.from_dict(values)


def _method_fields() -> set[str]:
  from neural._src.methods import get_method
  from neural._src.methods import registered_methods
  return {f.name for name in registered_methods()
          for f in dataclasses.fields(get_method(name).config_cls)}


def _fmt(value: Any) -> str:
  if isinstance(value, (list, tuple)):
    return ",".join(_fmt(v) for v in value)
  return str(value)


def shipped_configs() -> dict[str, Path]:
  """The configs shipped with the package, by name (file name without ``.json``)."""
  return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.json"))}


def load_spec(source: str | os.PathLike) -> ConfigSpec:
  """Reads a config file, or a shipped config by name (see ``neural configs``).

  Raises:
    ConfigError: if the file does not exist, is not JSON, or a field is wrong.
  """
  path = Path(source)
  if not path.is_file():
    shipped = shipped_configs()
    if str(source) not in shipped:
      raise ConfigError(f"config: {str(source)!r} is neither a file nor a shipped config "
                        f"(see `neural configs`)")
    path = shipped[str(source)]
  try:
    data = json.loads(path.read_bytes().decode("utf-8"))
  except UnicodeDecodeError as e:
    raise ConfigError(f"config: {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
  except json.JSONDecodeError as e:
    raise ConfigError(f"config: {path} is not valid JSON ({e})") from None
  if not isinstance(data, dict):
    raise ConfigError(f"config: {path} must hold a JSON object")
  if "base" not in data:
    return ConfigSpec(base=data)
  extra = sorted(set(data) - {"base", "grid", "description", "figure"})
  if extra:
    raise ConfigError(f"config: unknown key {extra[0]!r} in {path} "
                      f"(expected base, grid, description, figure)")
  grid = data.get("grid", [])
  if not isinstance(grid, list):
    raise ConfigError(f"grid: expected a list of axes in {path}")
  spec = ConfigSpec(dict(data["base"]), tuple(grid), data.get("description", ""),
                    data.get("figure", ""))
  spec.expand()   # validates every run
  return spec


def describe(configs: Sequence[tuple[str, Path]] | None = None) -> list[str]:
  """One line per shipped config: name, number of runs, description."""
  configs = list(configs or shipped_configs().items())
  width = max((len(name) for name, _ in configs), default=0)
  lines = []
  for name, path in configs:
    spec = load_spec(path)
    runs = len(spec.expand())
    lines.append(f"{name:{width}s} {runs:3d} run{'s' if runs > 1 else ' '}  {spec.description}")
  return lines
