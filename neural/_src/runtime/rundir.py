"""Run directories: one run per workdir, its config, checkpoint and metrics, safe to share.

A run directory holds::

  config.json      the run's config (a different config there is an error)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  outcomes.jsonl   with ``record_outcomes``: which test images each row's models got
                   right (``neural._src.runtime.outcomes``), appended with the rows
  checkpoint.npz   the state after the last finished round, with its metric rows
                   (arrays and plain data only: reading it never runs code)
  accuracy.png     test accuracy per round (written at the end)
  events.out.tfevents.neural
                   with the config's ``tensorboard``: the rows as TensorBoard scalars
                   (``neural._src.runtime.tensorboard``)
  .lock            held while a run is in progress

:func:`open_run` opens one for a run:

* a second run on a busy workdir is refused (an exclusive ``filelock`` lock);
* the workdir is checked before anything else (not a file, not under one, not a
  dangling or looping symbolic link, writable); nothing is created until the config
  is valid and the data load, so a refused or failed start leaves no directory
  behind; a run that never finished a round takes a corrected config in place of
  its own; two runs started at once on a new workdir: one runs, the other is told
  the workdir is in use;
* the checkpoint is read as plain data and checked before anything is written:
  its round lies in 0..rounds, its rows are objects with a round of a finished
  round, an agent and finite numbers, its config is the run's, and its state is
  restored into the state the run builds from its config (``expected``: the same
  init that starts a run), every array of the expected shape and dtype. An
  unusable one is an error naming the file, the place and what to do;
* ``metrics.jsonl`` is checked against the rows the checkpoint holds: rows of
  unfinished rounds (a kill between the two writes) are dropped, and a file that
  lost or damaged rows of finished rounds is rewritten from the checkpoint, with
  a note on stderr saying what was repaired; ``outcomes.jsonl`` keeps the lines of
  those rows only, each once (a row whose line was lost has none);
* every round is checked before it is written (:func:`check_round`): a metric or
  a state array that is NaN or infinite (training diverged) stops the run with a
  :class:`DivergenceError` naming the round, the agent and what to change; the
  workdir keeps the last good round and resumes from it. A round's metrics and
  its checkpoint are written in one section that Ctrl-C does not cut.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
import contextlib
import dataclasses
import errno
import json
import os
from pathlib import Path
import sys
from typing import Any
import warnings

import numpy as np

from fedkrr.io import NOT_JSON
from fedkrr.io import ReadError
from fedkrr.io import WriteError
from fedkrr.io import append_file
from fedkrr.io import atomic_write
from fedkrr.io import check_output
from fedkrr.io import commit
from fedkrr.io import read_json
from fedkrr.io import read_json_lines
from fedkrr.io import remove_staging
from neural._src.runtime.checkpoint import CheckpointError
from neural._src.runtime.checkpoint import CheckpointReadFailed
from neural._src.runtime.checkpoint import load_checkpoint_entries
from neural._src.runtime.checkpoint import read_checkpoint
from neural._src.runtime.checkpoint import restore_checkpoint
from neural._src.runtime.checkpoint import save_checkpoint
from neural._src.runtime.config import without_outputs
from neural._src.runtime.outcomes import OUTCOMES_FILE
from neural._src.runtime.outcomes import kept_lines
from neural._src.runtime.outcomes import read_outcome_lines
from neural._src.runtime.tensorboard import EVENTS_FILE

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FILE = "checkpoint.npz"
LOCK_FILE = ".lock"
PLOT_FILE = "accuracy.png"
LEGACY_CHECKPOINT = "checkpoint.pkl"


class ExperimentError(ValueError):
  """A run cannot start or resume (the message names the file or field)."""


class DivergenceError(ExperimentError):
  """A round's metrics or state are NaN or infinite (the message names the round and agent)."""


def note(message: str) -> None:
  """A one-line note on stderr (what a run repaired or replaced)."""
  print(f"neural: note: {message}", file=sys.stderr, flush=True)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
  """A ``warnings.showwarning`` for the commands: neural's own warnings as one-line
  notes, any other as Python shows it."""
  if category.__module__.startswith("neural."):
    note(" ".join(str(message).split()))
  else:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _metric_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
  """The intact rows of a metrics file and a description of each line dropped."""
  rows, dropped = [], []
  if not os.path.lexists(path):
    return [], []
  try:
    lines = read_json_lines(path, "metrics file")
  except ReadError as e:
    raise ExperimentError(f"{e}; move it away to start the run again") from None
  for number, row in lines:
    if row is NOT_JSON:
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


def _lines(rows: Sequence[dict[str, Any]]) -> str:
  """JSON Lines of ``rows``; a non-finite number is an error, never an invalid ``NaN``."""
  try:
    return "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
  except ValueError as e:
    raise ExperimentError(f"{METRICS_FILE}: a row holds a number that is not finite "
                          f"({e})") from None


def _write_metrics(workdir: Path, rows: Sequence[dict[str, Any]]) -> None:
  atomic_write(workdir / METRICS_FILE, _lines(rows))


def append_metrics(workdir: Path, rows: Sequence[dict[str, Any]]) -> None:
  """Appends metric rows to ``metrics.jsonl`` (flushed and synced; valid JSON only), never
  through a symbolic or hard link (``fedkrr.io.append_file``: ``WriteError``)."""
  append_file(workdir / METRICS_FILE, _lines(rows))   # never through a link


def append_outcomes(workdir: Path, lines: Sequence[dict[str, Any]]) -> None:
  """Appends outcome lines to ``outcomes.jsonl`` as :func:`append_metrics` appends rows."""
  if lines:
    append_file(workdir / OUTCOMES_FILE, _lines(lines))


def _refuse_links(path: Path) -> None:
  """Refuses a run whose appended file is a link before any round runs (``append_file``
  checks again, on the opened file, before each write)."""
  try:
    info = os.lstat(path)
  except FileNotFoundError:
    return
  except OSError as e:
    raise ExperimentError(f"workdir: cannot read {path} ({e.strerror or e})") from None
  if os.path.islink(path) or info.st_nlink > 1:
    kind = "a symbolic link" if os.path.islink(path) else f"a file of {info.st_nlink} hard links"
    raise ExperimentError(f"workdir: {path} is {kind}, which a run never writes through; "
                          f"move it away (or copy it in its place) to resume")


def _saved_config(workdir: Path, from_dict: Callable[[dict[str, Any]], Any]) -> Any:
  path = workdir / CONFIG_FILE
  if not os.path.lexists(path):
    return None
  try:
    values = read_json(path, "config")
    if not isinstance(values, dict):
      raise ValueError("not a JSON object of config fields")
    return from_dict(values)
  except (ValueError, TypeError) as e:   # ConfigError, ReadError are ValueErrors
    raise ExperimentError(f"workdir: {path} holds an unusable config "
                          f"({' '.join(str(e).split())[:160]}); use another workdir") from None


def _differs(saved: Any, config: Any) -> bool:
  """Whether two typed configs differ in more than :data:`OUTPUT_FIELDS`."""
  return without_outputs(saved.to_dict()) != without_outputs(config.to_dict())


def _difference(config: Any, saved: Any) -> str:
  ours, theirs = without_outputs(config.to_dict()), without_outputs(saved.to_dict())
  diff = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
  return ", ".join(f"{k}={theirs.get(k)!r} there, {ours.get(k)!r} here" for k in diff[:3])


def _outcomes_hint(config: Any, saved: Any) -> str:
  """How to resume a run that recorded no per-image outcomes under a config that asks for
  them (the shipped paper configs do), where that is the one difference."""
  ours, theirs = without_outputs(config.to_dict()), without_outputs(saved.to_dict())
  diff = {k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)}
  if diff == {"record_outcomes"} and ours.get("record_outcomes"):
    return (" (the run there records no per-image outcomes, so its earlier rounds have "
            "none: resume it with --set record_outcomes=false)")
  return ""


@dataclasses.dataclass
class Run:
  """An open run directory (see :func:`open_run`).

  Attributes:
    workdir: the directory.
    checkpoint: the last checkpoint (a dict), or ``None`` before the first round.
    done: rounds finished.
    rows: the metric rows of those rounds.
    data: what ``load_data`` returned (``None`` when the run was already complete).
    config: the run's config (for the hints of :func:`check_round`).
  """

  workdir: Path
  checkpoint: dict[str, Any] | None
  done: int
  rows: list[dict[str, Any]]
  data: Any
  config: Any = None

  def finish_round(self, t: int, rows: Sequence[dict[str, Any]], state: dict[str, Any],
                   on_round_end: Callable[[int], None] | None = None,
                   outcomes: Sequence[dict[str, Any]] = ()) -> None:
    """Checks round t (:func:`check_round`), appends its rows (and its ``outcomes`` lines:
    ``neural._src.runtime.outcomes``), then checkpoints ``state`` with every row so far;
    the writes are one section that Ctrl-C does not cut."""
    check_round(t, rows, state.get("state"), self.config)
    with commit():
      append_metrics(self.workdir, rows)
      append_outcomes(self.workdir, outcomes)
      self.rows.extend(rows)
      if on_round_end is not None:
        on_round_end(t)
      save_checkpoint(self.workdir / CHECKPOINT_FILE,
                      {**state, "round": t + 1, "rows": self.rows})
    self.done = t + 1


def _nonfinite(value: Any) -> bool:
  """Whether a row's value is (or holds) a number that is NaN or infinite."""
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return False
  if isinstance(value, (int, float, np.number)):
    return not np.isfinite(value)
  if isinstance(value, (list, tuple)):
    return any(_nonfinite(v) for v in value)
  if isinstance(value, dict):
    return any(_nonfinite(v) for v in value.values())
  return False


def _hint(config: Any) -> str:
  rates = [f"{name}={getattr(config, name):g}" for name in ("learning_rate", "eta0")
           if isinstance(getattr(config, name, None), float)]
  rate = f"a smaller learning rate ({', '.join(rates)} now)" if rates else "a smaller learning rate"
  return f"try {rate} and check the inputs for NaN or infinite values"


def check_round(t: int, rows: Sequence[dict[str, Any]], state: Any, config: Any = None) -> None:
  """Raises :class:`DivergenceError` if round t's rows or state hold NaN or infinity.

  The rows are checked first (they name the agent: a network whose training loss
  became NaN predicts NaN probabilities, so its test loss is NaN), then every
  floating-point array of the state (the parameters), named by its path.
  """
  stop = (f"the run stopped before writing round {t}; its workdir keeps rounds "
          f"0..{t - 1} and resumes from round {t}" if t else
          "the run stopped before writing round 0 (nothing of it was kept)")
  for row in rows:
    for key, value in row.items():
      if _nonfinite(value):
        agent = row.get("agent", "?")
        raise DivergenceError(f"round {t}, agent {agent}: {key} is not finite ({value!r}): "
                              f"training diverged; {_hint(config)}; {stop}")
  import jax  # deferred: JAX (a finished run's rerun reads rows only)

  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    if isinstance(leaf, (np.ndarray, np.generic, jax.Array)) and np.issubdtype(
        np.asarray(leaf).dtype, np.inexact):
      if not np.all(np.isfinite(np.asarray(leaf))):
        raise DivergenceError(f"round {t}: the state's state{jax.tree_util.keystr(path)} holds "
                              f"NaN or infinite values: training diverged; {_hint(config)}; "
                              f"{stop}")


def _restart() -> str:
  return f"delete it and {METRICS_FILE} to start the run again, or use another workdir"


def _plain(value: Any) -> bool:
  """Whether ``value`` is JSON data: None, bools, ints, finite floats, strings, lists, dicts."""
  if value is None or isinstance(value, (bool, int, str)):
    return True
  if isinstance(value, float):
    return bool(np.isfinite(value))
  if isinstance(value, (list, tuple)):
    return all(_plain(v) for v in value)
  if isinstance(value, dict):
    return all(isinstance(k, str) and _plain(v) for k, v in value.items())
  return False


def _same_config(saved: Any, config: Any) -> bool:
  """Whether a checkpoint's config (a plain dict) is ``config``'s. A field added to the
  config class since the checkpoint was written (absent from it) counts if ``config``
  holds its default: runs written before the field existed still resume and read back."""
  if not isinstance(saved, dict):
    return False
  current = without_outputs(config.to_dict())
  saved = without_outputs(saved)
  defaults = {f.name: f.default for f in dataclasses.fields(config)
              if f.default is not dataclasses.MISSING}
  added = {k for k, v in current.items()
           if k not in saved and k in defaults and v == defaults[k]}
  return saved == {k: v for k, v in current.items() if k not in added}


def _check_checkpoint(raw: Any, config: Any, rounds: int) -> tuple[int, list[dict[str, Any]]]:
  """The round and rows of a checkpoint read as plain data, checked (a ``CheckpointError``
  names what is wrong): its schema comes before any of its state is used or written."""
  if not isinstance(raw, dict):
    raise CheckpointError("it is not a run's checkpoint (not a dict)")
  missing = [k for k in ("round", "rows", "state", "config") if k not in raw]
  if missing:
    raise CheckpointError(f"it is not a run's checkpoint (no {', '.join(missing)})")
  done = raw["round"]
  if not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= rounds:
    raise CheckpointError(f"its round {done!r} is not a round count in 0..{rounds} (the "
                          f"config's rounds)")
  if not _same_config(raw["config"], config):
    raise CheckpointError(f"it holds the state of another config than {CONFIG_FILE}'s")
  rows = raw["rows"]
  if not isinstance(rows, list):
    raise CheckpointError("its rows are not a list")
  seen = set()
  for i, row in enumerate(rows):
    if not isinstance(row, dict) or not _plain(row):
      raise CheckpointError(f"rows[{i}] is not a JSON object of finite values")
    r, agent = row.get("round"), row.get("agent")
    if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < done:
      raise CheckpointError(f"rows[{i}]: round {r!r} is not one of the finished rounds "
                            f"0..{done - 1}")
    if not isinstance(agent, (int, str)) or isinstance(agent, bool):
      raise CheckpointError(f"rows[{i}]: agent {agent!r} is not an agent")
    if not isinstance(row.get("test_accuracy"), (int, float)) or isinstance(
        row.get("test_accuracy"), bool):
      raise CheckpointError(f"rows[{i}]: no test_accuracy")
    seen.add(r)
  if seen != set(range(done)):
    lost = sorted(set(range(done)) - seen)
    raise CheckpointError(f"it holds no rows of round {lost[0]}")
  return done, rows


def _restore_state(path: Path, raw: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
  """The parts of a checkpoint named by ``target``, restored into it (ExperimentError if not)."""
  try:
    missing = [k for k in target if k not in raw]
    if missing:
      raise CheckpointError(f"it holds no {', '.join(missing)}")
    return restore_checkpoint({k: raw[k] for k in target}, target)
  except CheckpointError as e:
    raise ExperimentError(f"checkpoint {path} is unusable: {e}; {_restart()}") from None


def read_run_checkpoint(workdir: str | os.PathLike, config: Any, *, rounds: int,
                        load_data: Callable[[], Any],
                        expected: Callable[[Any, int], dict[str, Any]]) -> dict[str, Any]:
  """The checkpoint of a run directory, checked and restored as :func:`open_run` does it.

  Reads only (no lock, nothing written). The arguments are those of :func:`open_run`.

  Returns:
    ``{"round", "rows", "config"}`` and the parts of ``expected(data, round)``.

  Raises:
    ExperimentError: no checkpoint, or an unusable one (the message names the place).
  """
  path = Path(workdir) / CHECKPOINT_FILE
  try:
    raw = read_checkpoint(path)
    done, rows = _check_checkpoint(raw, config, rounds)
  except CheckpointError as e:
    raise ExperimentError(f"{e}" if str(e).startswith("checkpoint ") else
                          f"checkpoint {path} is unusable: {e}") from None
  return {"round": done, "rows": rows, "config": raw["config"],
          **_restore_state(path, raw, expected(load_data(), done))}


@contextlib.contextmanager
def open_run(workdir: str | os.PathLike, config: Any, *,
             from_dict: Callable[[dict[str, Any]], Any], rounds: int,
             load_data: Callable[[], Any],
             expected: Callable[[Any, int], dict[str, Any]]) -> Iterator[Run]:
  """Opens (creates, locks, checks, repairs) the run directory of ``config``.

  Args:
    workdir: the run directory.
    config: the run's typed config (``to_json``, ``to_dict``, ``==``).
    from_dict: reads a saved config.
    rounds: the rounds the run has in all.
    load_data: loads the run's data; called before anything is written, unless
      the run is already complete.
    expected: ``expected(data, done)``: what the run checkpoints besides its round,
      rows and config, as the run builds it from its config after ``done`` rounds
      (its shapes and types; the values are not used): the target the checkpoint
      is restored into (``neural._src.runtime.checkpoint.restore_checkpoint``).

  Raises:
    ExperimentError: another run holds the workdir, it is not a usable directory,
      it holds a run with another config, an unusable config or checkpoint, or a
      pickled checkpoint of an older version; errors of ``load_data`` pass through,
      with nothing created.
  """
  from filelock import FileLock
  from filelock import Timeout

  workdir = Path(workdir)
  try:
    check_output(workdir, "workdir", directory=True)
  except WriteError as e:
    raise ExperimentError(str(e)) from None
  data = None
  created = False
  if not workdir.exists():
    data = load_data()                       # fails before anything is created
    try:
      workdir.mkdir(parents=True)
      created = True
    except FileExistsError:
      pass                                   # a run started at the same time: its lock
    except OSError as e:
      raise ExperimentError(f"workdir: cannot create {workdir} ({e.strerror or e})") from None
  lock = FileLock(workdir / LOCK_FILE)
  try:
    lock.acquire(timeout=0)
  except Timeout:
    raise ExperimentError(f"workdir: {workdir} is in use by another run (it holds "
                          f"{workdir / LOCK_FILE}); wait for that run or use another "
                          f"workdir") from None
  try:
    # under the lock no other process writes here: a killed run's staging files go
    remove_staging(workdir, (CONFIG_FILE, METRICS_FILE, OUTCOMES_FILE, CHECKPOINT_FILE,
                             PLOT_FILE, EVENTS_FILE))
    _refuse_links(workdir / METRICS_FILE)
    _refuse_links(workdir / OUTCOMES_FILE)
    if (workdir / LEGACY_CHECKPOINT).exists():
      raise ExperimentError(f"workdir: {workdir / LEGACY_CHECKPOINT} is a pickled checkpoint "
                            f"of an older version, which is never read (unpickling can run "
                            f"code); delete it and {METRICS_FILE} to start the run again")
    raw = None
    path = workdir / CHECKPOINT_FILE
    if os.path.lexists(path):
      try:
        raw = read_checkpoint(path)
      except CheckpointReadFailed as e:   # the disk, not the file: never advise deleting it
        raise ExperimentError(f"{e}; the file may be intact: check the disk and run the same "
                              f"command again (do not delete it)") from None
      except CheckpointError as e:
        raise ExperimentError(f"{e}; {_restart()}") from None
    saved = _saved_config(workdir, from_dict)
    replace = saved is None
    if saved is not None and saved != config and not _differs(saved, config):
      replace = True                         # an output field (OUTPUT_FIELDS): the same run
    elif saved is not None and saved != config:
      if raw is not None:
        raise ExperimentError(f"workdir: {workdir} holds a run with a different config "
                              f"({_difference(config, saved)}); use another workdir, or the "
                              f"same config to resume{_outcomes_hint(config, saved)}")
      note(f"{workdir} holds the config of a run that finished no round; it is replaced")
      replace = True
    if saved is None and (raw is not None or _metric_rows(workdir / METRICS_FILE)[0]):
      raise ExperimentError(f"workdir: {workdir} holds a checkpoint or metrics but no "
                            f"{CONFIG_FILE}; use an empty directory")
    checkpoint, done, rows = None, 0, []
    if raw is not None:
      try:
        done, rows = _check_checkpoint(raw, config, rounds)
      except CheckpointError as e:
        raise ExperimentError(f"checkpoint {path} is unusable: {e}; {_restart()}") \
            from None
      checkpoint = {"round": done, "rows": rows, "config": raw["config"]}
    if data is None and done < rounds:
      data = load_data()                     # fails before the config is written
    if raw is not None and done < rounds:
      assert checkpoint is not None
      checkpoint.update(_restore_state(path, raw, expected(data, done)))
    if replace:
      atomic_write(workdir / CONFIG_FILE, config.to_json())
    _repair_metrics(workdir, rows, done)
    _repair_outcomes(workdir, rows)
    run = Run(workdir, checkpoint, done, list(rows), data, config)
    try:
      yield run
    except BaseException:
      if raw is None and run.done == 0:      # a start that failed leaves nothing behind
        _undo_start(workdir, replace)
      else:
        created = False
      raise
    created = False
  finally:
    lock.release()
    if created:
      _remove_empty(workdir)


def _undo_start(workdir: Path, wrote_config: bool) -> None:
  """Removes what a start that finished no round wrote: its config, an empty metrics file."""
  try:
    if wrote_config:
      (workdir / CONFIG_FILE).unlink(missing_ok=True)
    for metrics in (workdir / METRICS_FILE, workdir / OUTCOMES_FILE):
      if metrics.is_file() and not metrics.is_symlink() and metrics.stat().st_size == 0:
        metrics.unlink()
  except OSError:
    pass


def _remove_empty(workdir: Path) -> None:
  """Removes a workdir this call created, if only its lock is left in it."""
  try:
    if {p.name for p in workdir.iterdir()} <= {LOCK_FILE}:
      (workdir / LOCK_FILE).unlink(missing_ok=True)
      workdir.rmdir()
  except OSError:
    pass


def finished_rows(workdir: str | os.PathLike, config: Any, rounds: int
                  ) -> list[dict[str, Any]] | None:
  """The metric rows of ``workdir`` if it holds the finished run of ``config``, else ``None``.

  Reads ``config.json``, the checkpoint's round and rows (not its models) and
  ``metrics.jsonl``, under the run's lock, and loads no data: the rerun of a finished
  run costs milliseconds. ``None`` (go through :func:`open_run`, which says what is
  wrong, as on a resume, or repairs it) unless the saved config is ``config``'s, the
  checkpoint passes the resume's checks (its config is ``config``'s, its rows are those
  of its rounds) with exactly ``rounds`` rounds, and the metrics file holds exactly its
  rows. On read-only media (the lock cannot be created) it reads without the lock: no
  run can write there.
  """
  from filelock import FileLock
  from filelock import Timeout

  workdir = Path(workdir)
  if not (workdir / CHECKPOINT_FILE).is_file() or not (workdir / CONFIG_FILE).is_file():
    return None
  lock = FileLock(workdir / LOCK_FILE)
  held = True
  try:
    lock.acquire(timeout=0)
  except Timeout:
    return None
  except OSError as e:   # read-only media: no run can write here, so read without the lock
    if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
      return None
    held = False
  try:
    try:
      saved = read_json(workdir / CONFIG_FILE, "config")
      entries = load_checkpoint_entries(workdir / CHECKPOINT_FILE,
                                        ("round", "rows", "config"))
      if not isinstance(saved, dict) or without_outputs(saved) != without_outputs(
          json.loads(config.to_json())):
        return None
      done, rows = _check_checkpoint({**entries, "state": None}, config, rounds)
    except (OSError, ValueError):   # CheckpointError, JSON and UTF-8 errors are ValueErrors
      return None
    if done != rounds:
      return None
    found, dropped = _metric_rows(workdir / METRICS_FILE)
    return rows if found == rows and not dropped else None
  finally:
    if held:
      lock.release()


def run_status(workdir: str | os.PathLike, config: Any, rounds: int
               ) -> tuple[list[dict[str, Any]], int, str]:
  """Whether ``workdir`` holds the finished run of ``config``: what a verdict may read.

  A run's metrics say what was logged, not whether the run finished: a run stopped by
  ``--max-rounds`` or a kill holds the rows of its first rounds only. The run is
  finished when its checkpoint passes the resume's checks (its config is ``config``'s,
  its rows are those of its rounds) with exactly ``rounds`` rounds and
  ``metrics.jsonl`` holds exactly those rows. Reads only (no lock, nothing written,
  no data loaded), so a finished run on read-only media reads back.

  Returns:
    ``(rows, done, problem)``: the rows of the rounds done (the checkpoint's, else the
    intact rows logged), how many rounds are done, and ``""`` for a finished run, else
    one line saying what is not finished.

  Raises:
    ExperimentError: ``metrics.jsonl`` cannot be read.
  """
  workdir = Path(workdir)
  logged, dropped = _metric_rows(workdir / METRICS_FILE)
  seen = {r["round"] for r in logged}
  done = next(t for t in range(len(seen) + 1) if t not in seen)
  path = workdir / CHECKPOINT_FILE
  if not os.path.lexists(path):
    return logged, done, (f"unfinished: {done} of its {rounds} rounds logged and no "
                          f"{CHECKPOINT_FILE}")
  try:
    entries = load_checkpoint_entries(path, ("round", "rows", "config"))
    done, rows = _check_checkpoint({**entries, "state": None}, config, rounds)
  except (OSError, ValueError) as e:   # CheckpointError is a ValueError
    text = " ".join(str(e).split())
    return logged, done, text if text.startswith("checkpoint ") else \
        f"checkpoint {path} is unusable: {text}"
  if done < rounds:
    return rows, done, f"unfinished: {done} of its {rounds} rounds done"
  if logged != rows or dropped:
    return rows, done, (f"{METRICS_FILE} does not match its checkpoint's {len(rows)} rows "
                        f"(run it again to repair it)")
  return rows, done, ""


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


def _repair_outcomes(workdir: Path, rows: list[dict[str, Any]]) -> None:
  """Makes ``outcomes.jsonl`` hold only lines of the finished rounds' ``rows``, each once
  (lines of a round cut short by a kill go; a line that was lost is not made up)."""
  path = workdir / OUTCOMES_FILE
  if not os.path.lexists(path):
    return
  lines, dropped = read_outcome_lines(path)
  kept = kept_lines(lines, rows)
  if dropped or len(kept) != len(lines):
    atomic_write(path, _lines(kept))


def process_workdir(workdir: str | os.PathLike, process: int) -> Path:
  """The run directory that process ``process`` of a run across processes writes.

  Process 0 writes ``workdir``; process i > 0 the sibling ``WORKDIR.process-i``.
  Every process of a ``jax.distributed`` run computes the same rounds and writes
  the same files into its own directory (docs/devices.md, "Across hosts"), so each
  resumes from its own checkpoint without a shared file system, and processes on
  one machine, or on one shared file system, never write one directory together:
  ``runs/a`` becomes ``runs/a.process-1`` for process 1.
  """
  path = Path(workdir)
  if process == 0:
    return path
  if path.name in ("", ".."):   # "." or "..": name the folder
    path = Path(os.path.abspath(path))
  return path.with_name(f"{path.name}.process-{process}")
