"""Config files (one config, or a sweep) and the shipped paper configs (run by ``runs``).

A *config file* is either one config (a JSON object of config fields) or a spec
with a sweep::

  {"description": "...", "figure": "Fig. 6",
   "base": {... config fields ...},
   "grid": [{"alpha": [0.0, 0.1, 1.0]},
            {"avgkd": {"protocol": "avgkd"}, "fedavg": {"protocol": "fedavg"}}]}

Each grid axis is either ``{field: [values]}`` (runs named ``field=value``) or
``{name: {field: value, ...}, ...}`` (named variants); the runs are the cartesian
product of the axes, named by joining the axis names with ``__``. A config with a
``"method"`` field is a method's config (``neural.methods``); one without is an
:class:`ExperimentConfig` of the KD protocols. The paper's configs (Afonin &
Karimireddy, Sec. 6 and App. H, and the other papers' tables) ship in
``neural/configs``.

The KD experiments' configs need neither JAX nor the methods: the methods' registry is
imported when a config names a method.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import itertools
import os
from pathlib import Path
from typing import Any

from fedkrr.io import ReadError
from fedkrr.io import read_json
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import RunConfig
from neural._src.runtime.config import shown
from neural._src.runtime.config import with_changes

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
MAX_CONFIG_BYTES = 4 * 2**20


def config_from_dict(values: Mapping[str, Any]) -> RunConfig:
  """An ``ExperimentConfig``, or a method's config when ``values`` has a "method" field."""
  if "method" in values:
    from neural._src.methods.registry import method_config_from_dict  # deferred: JAX
    return method_config_from_dict(values)
  return ExperimentConfig.from_dict(values)


def all_fields() -> set[str]:
  """The fields of the KD experiment config and of every registered method's config."""
  from neural._src.methods.registry import method_configs  # deferred: JAX

  names = set(ExperimentConfig.field_names())
  for cls in method_configs().values():
    names.update(cls.field_names())
  return names


@dataclasses.dataclass(frozen=True)
class ConfigSpec:
  """A config file: base fields, sweep axes and a description."""

  base: dict[str, Any]
  grid: tuple[dict[str, Any], ...] = ()
  description: str = ""
  figure: str = ""

  def expand(self, overrides: Mapping[str, Any] | None = None) -> list[tuple[str, RunConfig]]:
    """The runs of the sweep as ``(name, config)``; ``overrides`` win over everything.

    A spec without a grid gives one run named ``""``. A ``seed`` set by an axis
    or an override also sets ``data_seed`` and ``init_seed`` unless the same
    layer names them.
    """
    runs = [(name, config_from_dict(values)) for name, values in self.run_values(overrides)]
    seen = set()
    for name, _ in runs:
      if len(name.encode("utf-8", "surrogatepass")) > 255:
        raise ConfigError(f"grid: the run name {shown(name[:60] + '...')} is longer than a "
                          f"folder name may be (255 bytes); name the grid's entries")
      if name in seen:
        raise ConfigError(f"grid: two runs are both named {name!r}")
      seen.add(name)
    return runs


  def run_values(self, overrides: Mapping[str, Any] | None = None
                 ) -> list[tuple[str, dict[str, Any]]]:
    """The runs of the sweep as ``(name, field values)``, before their configs are built."""
    axes = [_axis_entries(axis, f"grid[{i}]") for i, axis in enumerate(self.grid)]
    runs = []
    for combo in itertools.product(*axes):
      values = dict(self.base)
      names = []
      for name, changes in combo:
        values = with_changes(values, changes)
        names.append(name)
      runs.append(("__".join(names), with_changes(values, overrides or {})))
    return runs

  def methods(self) -> tuple[str | None, ...]:
    """The methods the runs name (``"method"``; ``None`` for a KD experiment), each once."""
    methods = [values.get("method") for _, values in self.run_values()]
    for method in methods:
      if method is not None and not isinstance(method, str):
        raise ConfigError(f"method: expected a method name, got {shown(method)}")
    return tuple(dict.fromkeys(methods))


def _axis_entries(axis: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
  if not isinstance(axis, dict) or not axis:
    raise ConfigError(f"{where}: expected a non-empty object")
  if len(axis) == 1 and isinstance(next(iter(axis.values())), list):
    (field, values), = axis.items()
    if field not in ExperimentConfig.field_names() and field not in all_fields():
      raise ConfigError(f"{where}: {shown(field)} is not a config field")
    if not values:
      raise ConfigError(f"{where}: {field!r} has no values (expected a non-empty list)")
    return [(f"{field}={_fmt(v)}", {field: v}) for v in values]
  entries = []
  for name, changes in axis.items():
    _check_run_name(name, where)
    if not isinstance(changes, dict):
      raise ConfigError(f"{where}.{name}: expected an object of config fields")
    entries.append((name, changes))
  return entries


# The files a sweep's workdir (and a reproduction's) holds beside its runs' folders, and
# a run directory's own: a run named so would collide with one of them.
RESERVED_NAMES = frozenset({"sweep.json", "accuracy.png", "reproduce.md", "reproduce.json",
                            "reproduce.png", "config.json", "metrics.jsonl", "checkpoint.npz",
                            ".lock"})


def _check_run_name(name: str, where: str) -> None:
  """A grid entry's name becomes a folder under the workdir: a plain folder name only,
  UTF-8 text, and none of the files beside it (:data:`RESERVED_NAMES`)."""
  if (not name or name in (".", "..") or any(c in name for c in "/\\\0")
      or os.path.isabs(name) or len(name.encode("utf-8", "surrogatepass")) > 200
      or name != name.encode("utf-8", "replace").decode("utf-8")):
    raise ConfigError(f"{where}: the run name {shown(name)} is not a plain folder name "
                      f"(expected 1-200 bytes of UTF-8, no / or \\, not . or ..); it names "
                      f"the run's folder under the workdir")
  if name.lower() in RESERVED_NAMES:
    raise ConfigError(f"{where}: the run name {shown(name)} is the name of a file the sweep "
                      f"writes beside its runs ({', '.join(sorted(RESERVED_NAMES))}); "
                      f"rename the run")


def _fmt(value: Any) -> str:
  """A grid value in its run's name: separators and % percent-encoded, so that the name
  stays one folder under the workdir (``data_dir=a%2Fb`` for "a/b")."""
  if isinstance(value, (list, tuple)):
    return ",".join(_fmt(v) for v in value)
  text = str(value)
  for char, code in (("%", "%25"), ("/", "%2F"), ("\\", "%5C"), ("\0", "%00")):
    text = text.replace(char, code)
  return text


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
    data = read_json(path, "config file", limit=MAX_CONFIG_BYTES)
  except ReadError as e:
    raise ConfigError(f"config: {e}") from None
  if not isinstance(data, dict):
    raise ConfigError(f"config: {path} must hold a JSON object")
  if "base" not in data:
    return ConfigSpec(base=data)
  extra = sorted(set(data) - {"base", "grid", "description", "figure"})
  if extra:
    raise ConfigError(f"config: unknown key {shown(extra[0])} in {path} "
                      f"(expected base, grid, description, figure)")
  grid = data.get("grid", [])
  if not isinstance(data["base"], dict):
    raise ConfigError(f"base: expected an object of config fields in {path}, got "
                      f"{shown(data['base'])}")
  if not isinstance(grid, list):
    raise ConfigError(f"grid: expected a list of axes in {path}")
  for key in ("description", "figure"):
    if not isinstance(data.get(key, ""), str):
      raise ConfigError(f"{key}: expected a string in {path}, got {shown(data[key])}")
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
