"""Run directories: one run per workdir, its config, checkpoint and metrics, safe to share.

A run directory holds::

  config.json      the run's config (a different config there is an error)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  checkpoint.npz   the state after the last finished round, with its metric rows
                   (arrays and plain data only: reading it never runs code)
  accuracy.png     test accuracy per round (written at the end)
  .lock            held while a run is in progress

:func:`open_run` opens one for a run:

* a second run on a busy workdir is refused (an exclusive ``filelock`` lock);
* nothing is created until the config is valid and the data load, so a refused or
  failed start leaves no directory behind; a run that never finished a round takes
  a corrected config in place of its own;
* the checkpoint is read without unpickling; an unusable one is an error naming
  the file and what to do;
* ``metrics.jsonl`` is checked against the rows the checkpoint holds: rows of
  unfinished rounds (a kill between the two writes) are dropped, and a file that
  lost or damaged rows of finished rounds is rewritten from the checkpoint, with
  a note on stderr saying what was repaired.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
import contextlib
import dataclasses
import json
import os
from pathlib import Path
import sys
from typing import Any

from fedkrr import atomic_write
from neural._src.checkpoint import CheckpointError
from neural._src.checkpoint import load_checkpoint
from neural._src.checkpoint import load_checkpoint_entries
from neural._src.checkpoint import save_checkpoint

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FILE = "checkpoint.npz"
LOCK_FILE = ".lock"
PLOT_FILE = "accuracy.png"
LEGACY_CHECKPOINT = "checkpoint.pkl"


class ExperimentError(ValueError):
  """A run cannot start or resume (the message names the file or field)."""


def note(message: str) -> None:
  """A one-line note on stderr (what a run repaired or replaced)."""
  print(f"neural: note: {message}", file=sys.stderr, flush=True)


def _metric_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
  """The intact rows of a metrics file and a description of each line dropped."""
  rows, dropped = [], []
  try:
    text = path.read_bytes().decode("utf-8", errors="replace")
  except FileNotFoundError:
    return [], []
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      dropped.append(f"line {number} is not JSON")
      continue
    if not isinstance(row, dict) or not isinstance(row.get("round"), int) or row["round"] < 0:
      dropped.append(f"line {number} has no round")
      continue
    rows.append(row)
  return rows, dropped


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
  """The metric rows of a run directory: every intact row (objects with an int ``round``)."""
  return _metric_rows(Path(workdir) / METRICS_FILE)[0]


def _write_metrics(workdir: Path, rows: Sequence[dict[str, Any]]) -> None:
  atomic_write(workdir / METRICS_FILE, "".join(json.dumps(r) + "\n" for r in rows))


def append_metrics(workdir: Path, rows: Sequence[dict[str, Any]]) -> None:
  """Appends metric rows to ``metrics.jsonl`` (flushed and synced)."""
  with open(workdir / METRICS_FILE, "a") as f:
    f.write("".join(json.dumps(r) + "\n" for r in rows))
    f.flush()
    os.fsync(f.fileno())


def _saved_config(workdir: Path, from_dict: Callable[[dict[str, Any]], Any]) -> Any:
  path = workdir / CONFIG_FILE
  if not path.exists():
    return None
  try:
    return from_dict(json.loads(path.read_bytes().decode("utf-8")))
  except (ValueError, TypeError) as e:   # ConfigError, JSON and UTF-8 errors are ValueErrors
    raise ExperimentError(f"workdir: {path} holds an unusable config "
                          f"({' '.join(str(e).split())[:160]}); use another workdir") from None


def _difference(config: Any, saved: Any) -> str:
  ours, theirs = config.to_dict(), saved.to_dict()
  diff = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
  return ", ".join(f"{k}={theirs.get(k)!r} there, {ours.get(k)!r} here" for k in diff[:3])


@dataclasses.dataclass
class Run:
  """An open run directory (see :func:`open_run`).

  Attributes:
    workdir: the directory.
    checkpoint: the last checkpoint (a dict), or ``None`` before the first round.
    done: rounds finished.
    rows: the metric rows of those rounds.
    data: what ``load_data`` returned (``None`` when the run was already complete).
  """

  workdir: Path
  checkpoint: dict[str, Any] | None
  done: int
  rows: list[dict[str, Any]]
  data: Any

  def finish_round(self, t: int, rows: Sequence[dict[str, Any]], state: dict[str, Any],
                   on_round_end: Callable[[int], None] | None = None) -> None:
    """Appends round t's rows, then checkpoints ``state`` with every row so far."""
    append_metrics(self.workdir, rows)
    self.rows.extend(rows)
    if on_round_end is not None:
      on_round_end(t)
    save_checkpoint(self.workdir / CHECKPOINT_FILE, {**state, "round": t + 1, "rows": self.rows})
    self.done = t + 1


@contextlib.contextmanager
def open_run(workdir: str | os.PathLike, config: Any, *,
             from_dict: Callable[[dict[str, Any]], Any], rounds: int,
             load_data: Callable[[], Any]) -> Iterator[Run]:
  """Opens (creates, locks, checks, repairs) the run directory of ``config``.

  Args:
    workdir: the run directory.
    config: the run's typed config (``to_json``, ``to_dict``, ``==``).
    from_dict: reads a saved config.
    rounds: the rounds the run has in all.
    load_data: loads the run's data; called before anything is written, unless
      the run is already complete.

  Raises:
    ExperimentError: another run holds the workdir, it holds a run with another
      config, an unusable config or checkpoint, or a pickled checkpoint of an older
      version; errors of ``load_data`` pass through, with nothing created.
  """
  from filelock import FileLock
  from filelock import Timeout

  workdir = Path(workdir)
  if workdir.exists() and not workdir.is_dir():
    raise ExperimentError(f"workdir: {workdir} is a file; expected a directory")
  data = None
  if not workdir.exists():
    data = load_data()                       # fails before anything is created
    workdir.mkdir(parents=True)
  lock = FileLock(workdir / LOCK_FILE)
  try:
    lock.acquire(timeout=0)
  except Timeout:
    raise ExperimentError(f"workdir: {workdir} is in use by another run (it holds "
                          f"{workdir / LOCK_FILE}); wait for that run or use another "
                          f"workdir") from None
  try:
    if (workdir / LEGACY_CHECKPOINT).exists():
      raise ExperimentError(f"workdir: {workdir / LEGACY_CHECKPOINT} is a pickled checkpoint "
                            f"of an older version, which is never read (unpickling can run "
                            f"code); delete it and {METRICS_FILE} to start the run again")
    checkpoint = None
    if (workdir / CHECKPOINT_FILE).exists():
      try:
        checkpoint = load_checkpoint(workdir / CHECKPOINT_FILE)
        if not (isinstance(checkpoint, dict) and isinstance(checkpoint.get("round"), int)
                and isinstance(checkpoint.get("rows"), list)):
          raise CheckpointError(f"checkpoint {workdir / CHECKPOINT_FILE} is unusable: it is "
                                f"not a run's checkpoint")
      except CheckpointError as e:
        raise ExperimentError(f"{e}; delete it and {METRICS_FILE} to start the run again, "
                              f"or use another workdir") from None
    saved = _saved_config(workdir, from_dict)
    replace = saved is None
    if saved is not None and saved != config:
      if checkpoint is not None:
        raise ExperimentError(f"workdir: {workdir} holds a run with a different config "
                              f"({_difference(config, saved)}); use another workdir, or the "
                              f"same config to resume")
      note(f"{workdir} holds the config of a run that finished no round; it is replaced")
      replace = True
    if saved is None and (checkpoint is not None or _metric_rows(workdir / METRICS_FILE)[0]):
      raise ExperimentError(f"workdir: {workdir} holds a checkpoint or metrics but no "
                            f"{CONFIG_FILE}; use an empty directory")
    done = 0 if checkpoint is None else checkpoint["round"]
    if data is None and done < rounds:
      data = load_data()                     # fails before the config is written
    if replace:
      atomic_write(workdir / CONFIG_FILE, config.to_json())
    rows = [] if checkpoint is None else list(checkpoint["rows"])
    _repair_metrics(workdir, rows, done)
    yield Run(workdir, checkpoint, done, rows, data)
  finally:
    lock.release()


def finished_rows(workdir: str | os.PathLike, config: Any, rounds: int
                  ) -> list[dict[str, Any]] | None:
  """The metric rows of ``workdir`` if it holds the finished run of ``config``, else ``None``.

  Reads ``config.json``, the checkpoint's round and rows (not its models) and
  ``metrics.jsonl``, under the run's lock, and loads no data: the rerun of a finished
  run costs milliseconds. ``None`` (go through :func:`open_run`, which says what is
  wrong or repairs it) unless the saved config is ``config``'s, the checkpoint has
  all ``rounds`` and the metrics file holds exactly its rows.
  """
  from filelock import FileLock
  from filelock import Timeout

  workdir = Path(workdir)
  if not (workdir / CHECKPOINT_FILE).is_file() or not (workdir / CONFIG_FILE).is_file():
    return None
  lock = FileLock(workdir / LOCK_FILE)
  try:
    lock.acquire(timeout=0)
  except (Timeout, OSError):
    return None
  try:
    try:
      saved = json.loads((workdir / CONFIG_FILE).read_bytes().decode("utf-8"))
      entries = load_checkpoint_entries(workdir / CHECKPOINT_FILE, ("round", "rows"))
    except (OSError, ValueError):   # CheckpointError, JSON and UTF-8 errors are ValueErrors
      return None
    if saved != json.loads(config.to_json()):
      return None
    done, rows = entries["round"], entries["rows"]
    if not (isinstance(done, int) and isinstance(rows, list) and done >= rounds):
      return None
    found, dropped = _metric_rows(workdir / METRICS_FILE)
    return rows if found == rows and not dropped else None
  finally:
    lock.release()


def _repair_metrics(workdir: Path, rows: list[dict[str, Any]], done: int) -> None:
  """Makes ``metrics.jsonl`` hold exactly the rows of the finished rounds."""
  path = workdir / METRICS_FILE
  found, dropped = _metric_rows(path)
  finished = [r for r in found if r["round"] < done]
  if finished == rows and not dropped:
    if len(finished) != len(found):          # rows of a round cut short by a kill
      _write_metrics(workdir, rows)
    return
  if not path.exists() and not rows:
    return
  lost = sum(1 for r in rows if r not in finished)
  what = ([f"{lost} rows of finished rounds were missing or changed"] if lost else []) \
      + dropped[:3]
  _write_metrics(workdir, rows)
  note(f"{path} did not match the checkpoint ({'; '.join(what)}); rewrote it from the "
       f"checkpoint ({len(rows)} rows of rounds 0..{done - 1})")
