"""A run's curves as TensorBoard event files, written from its committed metric rows.

With ``tensorboard=True`` in a run's config, the run keeps one event file in its
directory (:data:`EVENTS_FILE`) that holds, as TensorBoard scalars, every number of its
``metrics.jsonl`` rows: the tag is ``<metric>/<agent>`` (``test_accuracy/agent_0``,
``test_accuracy/ensemble``), the step is the row's round. ``tensorboard --logdir DIR``
then shows each run directory under ``DIR`` as one TensorBoard run named like its
folder, so a figure's sweep opens as one dashboard.

:func:`write_events` is called after each committed round with every row so far: the
file is read back and only the rows past what it holds are appended (through
``fedkrr.io.append_file``, never through a link), so a resumed run continues its
curves without duplicates. A file that does not hold a prefix of the rows (a run
repaired from its checkpoint, a write cut by a kill) is rewritten atomically.

The records are TFRecords of ``Event`` protocol buffers, built with ``tensorboardX``'s
protocol buffers and checksum: an optional extra (``pip install "fedkrr[tensorboard]"``).
"""

from __future__ import annotations

from collections.abc import Sequence
import importlib.util
import os
from pathlib import Path
import struct
import time
from typing import Any

from fedkrr.io import append_file
from fedkrr.io import atomic_write
from neural._src.runtime.config import ConfigError

EVENTS_FILE = "events.out.tfevents.neural"
EXTRA = 'pip install "fedkrr[tensorboard]"'
# The fields of a row that say which curve it is on, not a value.
_KEYS = ("round", "agent")

Scalar = tuple[str, int, float]   # (tag, step, value)


def require_tensorboard() -> None:
  """Raises ``ConfigError`` (one line naming the extra) unless tensorboardX is installed."""
  if importlib.util.find_spec("tensorboardX") is None:
    raise ConfigError(f"tensorboard: event files need the optional extra tensorboard "
                             f"({EXTRA})")


def scalars(rows: Sequence[dict[str, Any]]) -> list[Scalar]:
  """The TensorBoard scalars of metric rows, in row order.

  Every number of a row but its round and agent (booleans and lists are left out)
  becomes one scalar tagged ``<metric>/<agent>`` at step ``round``.

  Example:
    >>> from neural._src.runtime.tensorboard import scalars
    >>> scalars([{"round": 0, "agent": 1, "model": "cnn", "test_accuracy": 0.5}])
    [('test_accuracy/agent_1', 0, 0.5)]
  """
  out = []
  for row in rows:
    agent = row.get("agent")
    name = (f"agent {agent}" if isinstance(agent, int) else str(agent)).replace(" ", "_")
    for key, value in row.items():
      if key in _KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
        continue
      out.append((f"{key}/{name}", int(row["round"]), float(value)))
  return out


def _record(data: bytes) -> bytes:
  from tensorboardX.record_writer import masked_crc32c  # the optional extra

  header = struct.pack("<Q", len(data))
  return (header + struct.pack("<I", masked_crc32c(header)) + data
          + struct.pack("<I", masked_crc32c(data)))


def _protos() -> tuple[Any, Any]:
  """tensorboardX's ``Event`` and ``Summary`` message classes (the optional extra). They
  are made when their generated module is imported, so a type checker does not see them."""
  from tensorboardX.proto import event_pb2  # the optional extra
  from tensorboardX.proto import summary_pb2  # the optional extra

  return getattr(event_pb2, "Event"), getattr(summary_pb2, "Summary")  # noqa: B009


def _event(wall_time: float, scalar: Scalar | None = None) -> bytes:
  event, summary = _protos()
  if scalar is None:
    return event(wall_time=wall_time, file_version="brain.Event:2").SerializeToString()
  tag, step, value = scalar
  values = summary(value=[summary.Value(tag=tag, simple_value=value)])
  return event(wall_time=wall_time, step=step, summary=values).SerializeToString()


def read_events(path: str | os.PathLike) -> tuple[list[Scalar], list[float], bool]:
  """The scalars of an event file, their wall times, and whether the file is whole.

  Returns:
    ``(scalars, wall_times, whole)``: ``whole`` is false when the file ends in a cut
    or damaged record, or holds an event that is not a version or a scalar.
  """
  from tensorboardX.record_writer import masked_crc32c  # the optional extra

  event_class = _protos()[0]
  data = Path(path).read_bytes()
  found: list[Scalar] = []
  times: list[float] = []
  at = 0
  while at < len(data):
    if len(data) - at < 12:
      return found, times, False
    header = data[at:at + 8]
    (length,) = struct.unpack("<Q", header)
    end = at + 12 + length + 4
    if (struct.unpack("<I", data[at + 8:at + 12])[0] != masked_crc32c(header)
        or end > len(data)):
      return found, times, False
    body = data[at + 12:end - 4]
    if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(body):
      return found, times, False
    event = event_class.FromString(body)
    if event.HasField("summary"):
      for value in event.summary.value:
        found.append((value.tag, int(event.step), float(value.simple_value)))
        times.append(event.wall_time)
    elif not event.file_version:
      return found, times, False
    at = end
  return found, times, True


def _same(a: Scalar, b: Scalar) -> bool:
  """Equal up to the float32 rounding of ``simple_value``."""
  return a[:2] == b[:2] and float(struct.unpack("<f", struct.pack("<f", a[2]))[0]) == \
      float(struct.unpack("<f", struct.pack("<f", b[2]))[0])


def write_events(workdir: str | os.PathLike, rows: Sequence[dict[str, Any]]) -> Path:
  """Makes ``workdir``'s event file hold the scalars of ``rows`` (every committed row).

  Appends the scalars past those the file holds; rewrites the file (atomically,
  keeping the wall times of the scalars it keeps) when it does not hold a prefix of
  them. Returns the file's path.

  Raises:
    ConfigError: tensorboardX is not installed.
    WriteError: the file is a link or cannot be written (``fedkrr.io``).
  """
  require_tensorboard()
  path = Path(workdir) / EVENTS_FILE
  wanted = scalars(rows)
  now = time.time()
  held, times, whole = read_events(path) if os.path.lexists(path) else ([], [], False)
  prefix = whole and len(held) <= len(wanted) and all(
      _same(a, b) for a, b in zip(held, wanted))
  if prefix:
    if len(held) < len(wanted):
      append_file(path, b"".join(_record(_event(now, s)) for s in wanted[len(held):]))
    return path
  kept = 0
  while kept < min(len(held), len(wanted)) and _same(held[kept], wanted[kept]):
    kept += 1
  start = times[0] if times else now
  atomic_write(path, _record(_event(start)) + b"".join(
      _record(_event(times[i] if i < kept else now, s)) for i, s in enumerate(wanted)))
  return path
