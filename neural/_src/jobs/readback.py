"""Runs read back for a verdict: the one reader of finished runs and of seed folders.

Everything that decides something from run directories (the claim scripts of
``benchmarks/``, a figure's statements) reads them here, never ``metrics.jsonl``
alone: the metrics say what was logged, not whether the run finished. A run stopped
by ``--max-rounds`` or a kill holds the rows of its first rounds only, and a verdict
drawn from it (or from seeds stopped at different rounds) decides a statement about
rounds that were never run.

:func:`read_run` reads one run directory: its ``config.json`` (the rounds it has in
all), its checkpoint and its metrics (``neural._src.runtime.rundir.run_status``).
:func:`read_seeds` reads a workdir of seeds, ``WORKDIR/seed=S/RUN`` (a folder
named exactly ``seed=`` and an integer; ``seed=01`` or ``seed=0.bak`` are not seeds),
or ``WORKDIR/RUN`` as one seed, and refuses unfinished runs and a run whose seeds
have different rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
from pathlib import Path
import re
from typing import Any
from typing import NamedTuple

from fedkrr.io import ReadError
from fedkrr.io import read_json
from neural._src.jobs.specs import config_from_dict
from neural._src.runtime.config import shown
from neural._src.runtime.rundir import CONFIG_FILE
from neural._src.runtime.rundir import METRICS_FILE
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import run_status

_SEED_DIR = re.compile(r"seed=(-?(?:0|[1-9][0-9]*))")


class RunRecord(NamedTuple):
  """A run directory read back (:func:`read_run`).

  Attributes:
    workdir: the run directory.
    rows: the metric rows of the rounds done (all of them when finished).
    rounds: the rounds the run has in all (its config's).
    done: the rounds done.
    problem: ``""`` for a finished run, else one line saying what is not finished.
  """

  workdir: Path
  rows: list[dict[str, Any]]
  rounds: int
  done: int
  problem: str

  @property
  def finished(self) -> bool:
    """Whether the run did all its rounds and its metrics are its checkpoint's."""
    return not self.problem


def read_run(workdir: str | os.PathLike, *, finished: bool = True) -> RunRecord:
  """The run in ``workdir``, its rows and whether it finished (its rounds against its config).

  Reads only: nothing is written, no data or model is loaded.

  Args:
    workdir: a run directory (``config.json``, ``metrics.jsonl``, ``checkpoint.npz``).
    finished: refuse a run that is not finished (else return it, marked by its
      ``problem``).

  Returns:
    The :class:`RunRecord`.

  Raises:
    ExperimentError: ``workdir`` is not a run directory, its config or metrics are
      unusable, or (with ``finished``) the run is not finished; one line naming the
      directory.

  Example:
    >>> import tempfile
    >>> try:
    ...   neural.read_run(tempfile.mkdtemp())
    ... except neural.ExperimentError as e:
    ...   print("holds no config.json" in str(e))
    True
  """
  path = Path(workdir)
  if not path.is_dir():
    raise ExperimentError(f"workdir: {shown(str(workdir))} is not a directory")
  if not (path / CONFIG_FILE).is_file():
    raise ExperimentError(f"workdir: {path} holds no {CONFIG_FILE}: not a run directory")
  try:
    values = read_json(path / CONFIG_FILE, "config")
    if not isinstance(values, dict):
      raise ExperimentError("not a JSON object of config fields")
    config = config_from_dict(values)
  except (ReadError, ValueError, TypeError) as e:   # ConfigError is a ValueError
    raise ExperimentError(f"workdir: {path / CONFIG_FILE} holds an unusable config "
                          f"({' '.join(str(e).split())[:160]})") from None
  rounds = config.total_rounds
  rows, done, problem = run_status(path, config, rounds)
  if finished and problem:
    raise ExperimentError(f"{path}: {problem}; a verdict needs finished runs")
  return RunRecord(path, rows, rounds, done, problem)


def seed_folders(workdir: str | os.PathLike) -> dict[str, Path]:
  """``{"seed=S": folder}`` of the folders of ``workdir`` named exactly ``seed=S`` (S an
  integer as ``str(int)`` writes it), in the order of S; ``{"": workdir}`` without any.

  Raises:
    ExperimentError: ``workdir`` is not a directory.
  """
  path = Path(workdir)
  if not path.is_dir():
    raise ExperimentError(f"workdir: {shown(str(workdir))} is not a directory")
  seeds = sorted(((int(m.group(1)), p) for p in path.iterdir()
                  if (m := _SEED_DIR.fullmatch(p.name)) and p.is_dir()),
                 key=lambda item: item[0])
  return {p.name: p for _, p in seeds} if seeds else {"": path}


def read_seeds(workdir: str | os.PathLike, runs: Sequence[str] | None = None
               ) -> dict[str, dict[str, RunRecord]]:
  """Every run of every seed of ``workdir``, finished and with the same rounds per run.

  Args:
    workdir: a folder of seeds ``seed=S`` (see :func:`seed_folders`), each a sweep's
      workdir (its runs in folders) or one run; or one such workdir (one seed).
    runs: the run names to read (``None``: every run folder, one that holds a
      ``config.json`` or ``metrics.jsonl``; ``""`` names a seed folder that is itself
      a run).

  Returns:
    ``{seed: {run: RunRecord}}``, the seeds in the order of S (``""`` for one seed).

  Raises:
    ExperimentError: no run there, a run that is not finished, or a run whose seeds
      have different rounds (the message names the folder).
  """
  out: dict[str, dict[str, RunRecord]] = {}
  for seed, folder in seed_folders(workdir).items():
    if runs is not None:
      names = list(runs)
    elif (folder / CONFIG_FILE).is_file():
      names = [""]
    else:
      names = sorted(p.name for p in folder.iterdir() if p.is_dir() and (
          (p / CONFIG_FILE).is_file() or (p / METRICS_FILE).exists()))
    out[seed] = {name: read_run(folder / name) for name in names
                 if runs is None or (folder / name).is_dir()}
  if not any(out.values()):
    raise ExperimentError(f"workdir: {shown(str(workdir))} holds no runs (folders with "
                          f"{CONFIG_FILE} and {METRICS_FILE}, or seed=S folders of them)")
  by_run: dict[str, dict[int, str]] = {}
  for seed, records in out.items():
    for name, record in records.items():
      by_run.setdefault(name, {}).setdefault(record.rounds, seed or str(workdir))
  for name, rounds in by_run.items():
    if len(rounds) > 1:
      (a, sa), (b, sb) = sorted(rounds.items())[:2]
      raise ExperimentError(f"{name or 'the run'}: its seeds have different rounds ({a} in "
                            f"{sa}, {b} in {sb}); a verdict needs the same rounds on every "
                            f"seed")
  return out
