"""Config files (one config, or a sweep), the shipped paper configs, and running them.

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

The KD experiments' configs, and the rerun of a finished run, need neither JAX
nor the methods: the experiment runner and the methods' registry are imported
when a run has rounds to do or a config names a method.
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
from typing import cast

from fedkrr.io import ReadError
from fedkrr.io import WriteError
from fedkrr.io import atomic_write
from fedkrr.io import check_output
from fedkrr.io import read_json
from neural._src.config import ConfigError
from neural._src.config import ExperimentConfig
from neural._src.config import RunConfig
from neural._src.config import shown
from neural._src.config import with_changes
from neural._src.plots import plot_is_current
from neural._src.plots import plot_sweep
from neural._src.rundir import METRICS_FILE
from neural._src.rundir import PLOT_FILE
from neural._src.rundir import ExperimentError
from neural._src.rundir import finished_rows
from neural._src.rundir import read_run_checkpoint

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
SWEEP_FILE = "sweep.json"
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
    return tuple(dict.fromkeys(values.get("method") for _, values in self.run_values()))


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


def _check_run_name(name: str, where: str) -> None:
  """A grid entry's name becomes a folder under the workdir: a plain folder name only."""
  if (not name or name in (".", "..") or any(c in name for c in "/\\\0")
      or os.path.isabs(name) or len(name.encode("utf-8", "surrogatepass")) > 200):
    raise ConfigError(f"{where}: the run name {shown(name)} is not a plain folder name "
                      f"(expected 1-200 bytes, no / or \\, not . or ..); it names the run's "
                      f"folder under the workdir")


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


# ---------------------------------------------------------------------------
# Running


def run_one(config: RunConfig, workdir: str | os.PathLike, units: str = "paper",
            **kwargs) -> list[dict[str, Any]]:
  """``train_and_evaluate`` for a KD-protocol config, ``run_method`` for a method's config.

  ``units`` (the rounds of the KD runs' figure, see ``neural.paper_rounds``) does not
  apply to the methods, whose rows have no KD protocol. A finished run whose figure
  is current is read back without loading its models, its data or JAX.
  """
  kd = isinstance(config, ExperimentConfig)
  rows = finished_rows(workdir, config, config.total_rounds)
  plot = Path(workdir) / PLOT_FILE
  if rows is not None and plot_is_current(plot, units if kd else "steps",
                                          Path(workdir) / METRICS_FILE):
    return rows
  if not kd:
    from neural._src.methods.registry import run_method  # deferred: JAX, the methods
    return run_method(cast(Any, config), workdir, **kwargs)
  from neural._src.experiment import train_and_evaluate  # deferred: JAX, Flax, Optax
  return train_and_evaluate(cast(ExperimentConfig, config), workdir, units=units, **kwargs)


def load_run_checkpoint(config: RunConfig, workdir: str | os.PathLike) -> dict[str, Any]:
  """The checkpoint of ``config``'s run in ``workdir``, restored into the state the config
  builds (read only; the same checks as a resume).

  Returns:
    ``{"round", "rows", "config", "state", ...}``: the KD protocols' checkpoints also hold
    ``inits`` (the warm starts) and ``running`` (EKD's running test predictions).

  Raises:
    ExperimentError: no checkpoint there, or one that does not fit the config.
  """
  from neural._src.experiment import expected_state  # deferred: JAX, Flax, Optax
  from neural._src.methods.registry import MethodConfig  # deferred: JAX, the methods
  from neural._src.methods.registry import get_method  # deferred: JAX, the methods
  from neural._src.methods.registry import load_method_data  # deferred: JAX, the methods
  from neural._src.run_data import load_run_data  # deferred: JAX

  if isinstance(config, MethodConfig):
    method = get_method(config.method)
    return read_run_checkpoint(
        workdir, config, rounds=config.rounds,
        load_data=lambda: (method.load_data or load_method_data)(config),
        expected=lambda data, done: {"state": method.init(config, data)})
  kd = cast(ExperimentConfig, config)
  return read_run_checkpoint(workdir, kd, rounds=kd.total_rounds,
                             load_data=lambda: load_run_data(kd),
                             expected=lambda data, done: expected_state(kd, data, done))


def run_dirs(runs: Sequence[tuple[str, RunConfig]], workdir: str | os.PathLike) -> list[Path]:
  """Where :func:`run_configs` puts each run: ``workdir`` itself for a single unnamed run,
  else ``workdir/<name>``; checks first that ``workdir`` can take them.

  Raises:
    ExperimentError: ``workdir`` is not a usable directory, or it holds a sweep of
      other runs.
  """
  try:   # before Path(): Path("") is the current directory
    check_output(workdir, "workdir", directory=True)
  except WriteError as e:
    raise ExperimentError(str(e)) from None
  workdir = Path(workdir)
  if len(runs) == 1 and runs[0][0] == "":
    return [workdir]
  names = [name for name, _ in runs]
  sweep_path = workdir / SWEEP_FILE
  if os.path.lexists(sweep_path):
    try:
      saved = read_json(sweep_path, "sweep file")
    except ReadError as e:
      raise ExperimentError(f"workdir: {e}; use another workdir") from None
    if not isinstance(saved, dict) or saved.get("runs") != names:
      others = saved.get("runs") if isinstance(saved, dict) else None
      listed = ", ".join(map(str, others[:3])) if isinstance(others, list) else "?"
      raise ExperimentError(f"workdir: {workdir} holds a sweep of other runs "
                            f"({shown(listed)}...); use another workdir")
  return [workdir / name for name in names]


def write_sweep(runs: Sequence[tuple[str, RunConfig]], workdir: str | os.PathLike,
                description: str = "") -> None:
  """Writes ``workdir/sweep.json`` (the description and the runs' names) unless it is there."""
  path = Path(workdir) / SWEEP_FILE
  if not os.path.lexists(path):
    sweep = {"description": description, "runs": [name for name, _ in runs]}
    atomic_write(path, json.dumps(sweep, indent=2) + "\n")


def run_configs(runs: Sequence[tuple[str, RunConfig]], workdir: str | os.PathLike, *,
                progress: bool = False, description: str = "",
                max_rounds: int | None = None,
                units: str = "paper",
                done: Mapping[str, list[dict[str, Any]]] | None = None,
                ) -> dict[str, list[dict[str, Any]]]:
  """Runs (or resumes) named runs: a single unnamed run in ``workdir``, else one subdirectory each.

  With several runs, ``workdir/sweep.json`` lists them and ``workdir/accuracy.png``
  shows them side by side (one panel per value of the first grid axis), in ``units``
  ("paper": the paper's rounds and agent means, ``neural.paper_rounds``; "steps").
  ``done``: the rows of runs already run in this call (by name, e.g. by worker
  processes); they are not run again.

  Returns:
    The metric rows of each run, by name.
  """
  done = dict(done or {})
  paths = run_dirs(runs, workdir)
  workdir = Path(workdir)
  if len(runs) == 1 and runs[0][0] == "":
    if "" in done:
      return {"": done[""]}
    return {"": run_one(runs[0][1], workdir, units, progress=progress, max_rounds=max_rounds)}
  names = [name for name, _ in runs]
  results = {}
  for i, ((name, config), path) in enumerate(zip(runs, paths, strict=True)):
    if progress and name not in done:
      print(f"[{i + 1}/{len(runs)}] {name}", flush=True)
    if i > 0:   # once the first run started: its data loaded, its directory made
      write_sweep(runs, workdir, description)
    results[name] = done[name] if name in done else run_one(
        config, path, units, progress=progress, max_rounds=max_rounds)
  write_sweep(runs, workdir, description)
  if not plot_is_current(workdir / PLOT_FILE, units, workdir / SWEEP_FILE) or any(
      not plot_is_current(workdir / PLOT_FILE, units, workdir / name / METRICS_FILE)
      for name in names):
    plot_sweep(results, workdir / PLOT_FILE, title=description, units=units)
  return results
