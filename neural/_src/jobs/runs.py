"""Running configs: one run (``train_and_evaluate`` or ``run_method``), or a sweep of runs
into one directory each, with ``sweep.json`` and the figure side by side; a run's
checkpoint read back.

The rerun of a finished run needs neither JAX nor the methods: the experiment runner and
the methods' registry are imported when a run has rounds to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import json
import os
from pathlib import Path
import time
from typing import Any
from typing import cast

from fedkrr.io import ReadError
from fedkrr.io import WriteError
from fedkrr.io import atomic_write
from fedkrr.io import check_output
from fedkrr.io import read_json
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import RunConfig
from neural._src.runtime.config import shown
from neural._src.runtime.plots import plot_is_current
from neural._src.runtime.plots import plot_sweep
from neural._src.runtime.rundir import METRICS_FILE
from neural._src.runtime.rundir import PLOT_FILE
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import finished_rows
from neural._src.runtime.rundir import read_run_checkpoint
from neural._src.runtime.tensorboard import write_events

SWEEP_FILE = "sweep.json"


def run_one(config: RunConfig, workdir: str | os.PathLike, units: str = "paper",
            **kwargs) -> list[dict[str, Any]]:
  """``train_and_evaluate`` for a KD-protocol config, ``run_method`` for a method's config.

  ``units`` (the rounds of the KD runs' figure, see ``neural.evidence.paper_rounds``) does not
  apply to the methods, whose rows have no KD protocol. A finished run whose figure
  is current is read back without loading its models, its data or JAX.
  """
  kd = isinstance(config, ExperimentConfig)
  rows = finished_rows(workdir, config, config.total_rounds)
  plot = Path(workdir) / PLOT_FILE
  if rows is not None and plot_is_current(plot, units if kd else "steps",
                                          Path(workdir) / METRICS_FILE):
    if config.tensorboard:   # a finished run's curves, asked for after it finished
      write_events(workdir, rows)
    return rows
  if not kd:
    from neural._src.methods.registry import run_method  # deferred: JAX, the methods
    return run_method(cast(Any, config), workdir, **kwargs)
  from neural._src.kd.experiment import train_and_evaluate  # deferred: JAX, Flax, Optax
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
  from neural._src.datasets.run_data import load_run_data  # deferred: JAX
  from neural._src.kd.experiment import expected_state  # deferred: JAX, Flax, Optax
  from neural._src.methods.registry import MethodConfig  # deferred: JAX, the methods
  from neural._src.methods.registry import get_method  # deferred: JAX, the methods
  from neural._src.methods.registry import load_method_data  # deferred: JAX, the methods

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


def _duration(seconds: float) -> str:
  return f"{seconds:.0f} s" if seconds < 90 else (
      f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h")


def _time_left(started: float, ran: int, left: int) -> str:
  """`` (k runs in T, about U left)``: the runs left at the mean of those this call ran."""
  if ran == 0:
    return ""
  spent = time.monotonic() - started
  return f" ({ran} run{'s' if ran > 1 else ''} in {_duration(spent)}, about " \
         f"{_duration(spent / ran * left)} left)"


def run_configs(runs: Sequence[tuple[str, RunConfig]], workdir: str | os.PathLike, *,
                progress: bool = False, description: str = "",
                max_rounds: int | None = None,
                units: str = "paper",
                done: Mapping[str, list[dict[str, Any]]] | None = None,
                ) -> dict[str, list[dict[str, Any]]]:
  """Runs (or resumes) named runs: a single unnamed run in ``workdir``, else one subdirectory each.

  With several runs, ``workdir/sweep.json`` lists them and ``workdir/accuracy.png``
  shows them side by side (one panel per value of the first grid axis), in ``units``
  ("paper": the paper's rounds and agent means, ``neural.evidence.paper_rounds``; "steps").
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
  started, ran = time.monotonic(), 0
  for i, ((name, config), path) in enumerate(zip(runs, paths, strict=True)):
    if progress and name not in done:
      print(f"[{i + 1}/{len(runs)}] {name}{_time_left(started, ran, len(runs) - i)}",
            flush=True)
      ran += 1
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
