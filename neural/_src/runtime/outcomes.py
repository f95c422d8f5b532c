"""Per-image test outcomes beside a run's metrics: ``outcomes.jsonl``.

A run with ``record_outcomes`` writes, for each metric row whose test accuracy a
paper curve uses, which test images were right: one JSON line per row, appended in
the same committed section as the row (``neural._src.runtime.rundir``), so the file
holds the lines of the finished rounds, each once. Every seed of a paper-scale run is
scored on the same test images, and these give ``neural reproduce``'s verdicts a
paired test-set term (``neural.evidence.Curve.outcomes``). A line is::

  {"round": 3, "agent": 1, "count": 10000, "right": "<base64>", "best": "<base64>"}

``round`` and ``agent`` name the metric row (one row per pair); ``count`` is the
number of test images; ``right`` is ``base64(numpy.packbits(correct))`` of the row's
``test_accuracy`` (the model at the end of training, EKD's running sum, FedAvg's
server); ``best``, where the row has ``best_epoch_test_accuracy``, that of the best
local epoch's model. The mean of the bits is the row's accuracy. Plain JSON and bits:
reading it never runs code.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
import os
from pathlib import Path
from typing import Any

import numpy as np

from fedkrr.io import NOT_JSON
from fedkrr.io import ReadError
from fedkrr.io import read_json_lines

OUTCOMES_FILE = "outcomes.jsonl"

# (round, agent): the metric row an outcome line belongs to.
RowKey = tuple[int, Any]


def pack(right: np.ndarray) -> str:
  """``base64(numpy.packbits(right))`` of a (n,) bool vector, as text."""
  return base64.b64encode(np.packbits(np.asarray(right, dtype=bool)).tobytes()).decode("ascii")


def unpack(text: str | bytes, count: int) -> np.ndarray:
  """The (count,) bool vector :func:`pack` (or raw ``packbits`` bytes) holds.

  Raises:
    ValueError: not base64, or too few bits for ``count``.
  """
  raw = text if isinstance(text, bytes) else base64.b64decode(text, validate=True)
  if len(raw) != (count + 7) // 8:
    raise ValueError(f"{len(raw)} bytes do not hold {count} bits")
  return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=count).astype(bool)


def outcome_line(t: int, agent: Any, right: np.ndarray, best: bytes = b"") -> dict[str, Any]:
  """The outcome line of metric row (``t``, ``agent``): its ``right`` bits, and the best
  epoch's (raw ``packbits`` bytes, a model's ``best_epoch_right``) where given."""
  line = {"round": t, "agent": agent, "count": int(len(right)), "right": pack(right)}
  if best:
    line["best"] = base64.b64encode(best).decode("ascii")
  return line


def row_key(row: dict[str, Any]) -> RowKey:
  """The (round, agent) of a metric or outcome row."""
  return int(row["round"]), row["agent"]


def _valid(line: Any) -> bool:
  if not isinstance(line, dict):
    return False
  t, agent, count = line.get("round"), line.get("agent"), line.get("count")
  return (isinstance(t, int) and not isinstance(t, bool) and t >= 0
          and isinstance(agent, (int, str)) and not isinstance(agent, bool)
          and isinstance(count, int) and not isinstance(count, bool) and count >= 0
          and isinstance(line.get("right"), str)
          and isinstance(line.get("best", ""), str))


def read_outcome_lines(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
  """The intact lines of an outcomes file (first of each row) and how many were dropped."""
  if not os.path.lexists(path):
    return [], 0
  try:
    parsed = read_json_lines(path, "outcomes file")
  except ReadError:
    return [], 0
  lines, seen, dropped = [], set(), 0
  for _, line in parsed:
    if line is NOT_JSON or not _valid(line) or row_key(line) in seen:
      dropped += 1
      continue
    seen.add(row_key(line))
    lines.append(line)
  return lines, dropped


def read_outcomes(workdir: str | os.PathLike) -> dict[RowKey, dict[str, Any]]:
  """A run directory's outcome lines by (round, agent) (``{}`` where it recorded none).

  Each line (see the module docstring) says which test images that metric row's model
  got right; :func:`neural.evidence.paper_curves` turns them into the curves' per-image outcomes.

  Example:
    >>> neural.read_outcomes("a-run-without-record-outcomes")
    {}
  """
  return {row_key(line): line for line in read_outcome_lines(Path(workdir) / OUTCOMES_FILE)[0]}


def kept_lines(lines: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]
               ) -> list[dict[str, Any]]:
  """The outcome lines that belong to ``rows`` (the finished rounds' metric rows)."""
  keys = {row_key(r) for r in rows}
  return [line for line in lines if row_key(line) in keys]
