"""Where a sweep's runs run: one front for the executors of ``neural reproduce`` and
``neural run --config GRID``.

- ``local`` (the default, nothing to install): the runs in the command's own process, or
  ``jobs`` at a time in worker processes on this machine
  (:func:`neural._src.jobs.workers.run_in_workers`: every GPU of the machine);
- ``ray``: every run (or batch) a Ray task on a cluster
  (:func:`neural._src.jobs.ray_executor.run_in_ray`; Ray, an optional extra).

With either, ``batch`` > 1 trains up to that many runs that share a protocol and shapes as
one program (:mod:`neural._src.jobs.batched`): one batch after another in this process,
one batch per worker process, or one batch per Ray task.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
from pathlib import Path
from typing import Any

from neural._src.jobs.ray_executor import EXECUTORS
from neural._src.jobs.ray_executor import import_ray
from neural._src.jobs.ray_executor import run_in_ray
from neural._src.jobs.runs import run_dirs
from neural._src.jobs.runs import write_sweep
from neural._src.jobs.workers import Task
from neural._src.jobs.workers import run_grouped
from neural._src.jobs.workers import run_in_batches
from neural._src.jobs.workers import run_in_workers
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import RunConfig


def check_executor(executor: str, address: str | None, jobs: int | str = 1) -> None:
  """Checks an executor's settings before anything runs (Ray installed where asked for).

  Raises:
    ConfigError: an unknown executor, an address without Ray, ``jobs`` beside Ray (the
      cluster's resources decide there), or Ray not installed (one line naming the extra).
  """
  if executor not in EXECUTORS:
    raise ConfigError(f"executor: expected one of {', '.join(EXECUTORS)}, got {executor!r}")
  if address is not None and executor != "ray":
    raise ConfigError("address: a Ray cluster's address, for executor 'ray' only")
  if executor == "ray" and jobs != 1:
    raise ConfigError("jobs: runs at a time on this machine; with executor 'ray' the "
                      "cluster's resources decide (leave jobs at 1)")
  if executor == "ray":
    import_ray()


def run_tasks(tasks: Sequence[Task], *, jobs: int = 1, batch: int = 1,
              executor: str = "local", address: str | None = None,
              max_rounds: int | None = None, progress: bool = False,
              label: str = "runs", units: str = "paper") -> list[list[dict[str, Any]]]:
  """Runs (or resumes) every ``(name, config, directory)`` of ``tasks`` by ``executor``.

  Args:
    tasks: the runs (their directories claimed already, ``run_dirs``).
    jobs: with "local": worker processes (1: the runs in this process).
    batch: runs per batch (1: one run a program), see the module docstring.
    executor: "local" or "ray".
    address: with "ray": the cluster (``None``: start Ray on this machine).
    max_rounds: at most this many rounds of each run in this call.
    progress: a bar over the finished runs.
    label: the bar's description.
    units: the rounds of the runs' own figures ("paper" or "steps").

  Returns:
    Each task's metric rows, in the order of ``tasks``.

  Raises:
    ExperimentError: the first failed run's error (or ``ConfigError``, ``DataError``),
      named by its run; the others are stopped first.
  """
  if executor == "ray":
    def in_ray(parts: Sequence[Task | Sequence[Task]]) -> list[Any]:
      if progress:
        print(f"{label}: {len(tasks)} runs as {len(parts)} Ray tasks", flush=True)
      return run_in_ray(parts, address=address, max_rounds=max_rounds, progress=progress,
                        label=label)

    return run_grouped(tasks, batch, in_ray)
  if progress and batch > 1:
    print(f"{label}: {len(tasks)} runs in batches of up to {batch}" + (
        f", {jobs} batches at a time in worker processes" if jobs > 1 else ""), flush=True)
  elif progress:
    print(f"{label}: {len(tasks)} runs, {jobs} at a time in worker processes", flush=True)
  if batch == 1:
    return run_in_workers(tasks, jobs, max_rounds=max_rounds, progress=progress, label=label)
  return run_in_batches(tasks, batch, jobs, max_rounds=max_rounds, progress=progress,
                        label=label, units=units)


def run_sweep(runs: Sequence[tuple[str, RunConfig]], workdir: str | os.PathLike, *,
              description: str = "", jobs: int = 1, batch: int = 1,
              executor: str = "local", address: str | None = None,
              max_rounds: int | None = None, progress: bool = False,
              units: str = "paper") -> dict[str, list[dict[str, Any]]] | None:
  """The runs of a sweep by :func:`run_tasks`, for ``run_configs(done=...)``, which then
  writes the sweep's figure without running anything again; ``None`` where they run one
  after another in this process (``run_configs`` runs them: executor "local", ``jobs``
  and ``batch`` 1, or a single unnamed run without Ray).

  The directory is checked and claimed first (``sweep.json``), as ``run_configs`` does.

  Returns:
    The metric rows of each run, by name, or ``None``.
  """
  check_executor(executor, address, jobs)
  if executor == "local" and (jobs == 1 and batch == 1 or len(runs) == 1):
    return None
  paths = run_dirs(runs, workdir)
  if len(paths) > 1:
    Path(workdir).mkdir(parents=True, exist_ok=True)
    write_sweep(runs, workdir, description)
  tasks = [(name or "the run", config, path)
           for (name, config), path in zip(runs, paths, strict=True)]
  rows = run_tasks(tasks, jobs=jobs, batch=batch, executor=executor, address=address,
                   max_rounds=max_rounds, progress=progress, units=units)
  return {name: run_rows for (name, _), run_rows in zip(runs, rows, strict=True)}
