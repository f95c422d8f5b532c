"""Metric rows in the paper's units: the rounds and curves of Afonin & Karimireddy's figures.

``neural`` logs one row per distillation step and agent (``neural._src.experiment``).
The paper's figures, made with its authors' code, count and average differently:

- **AKD**: a round is M steps, every agent training once in turn (agent 0 on the labels
  in round 1, then each on its predecessor's predictions); the plotted value is the mean
  of the M agents' accuracies of that round.
- **AvgKD, PKD (pkd and pkd-mean), FedAvg** and the baselines: one round is one step;
  the plotted value is the mean over the agents (FedAvg: of their local models after
  training, never of the averaged model, which the authors do not evaluate).
- **EKD**: the curve shows the even partial sums only (t = 0, 2, 4, ...; the last term
  positive), one per paper round.
- Rounds are numbered from 1.

:func:`paper_rounds` turns a run's rows into these; the rows of the other papers'
methods and of backfitting (not in the paper) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np

UNITS = ("paper", "steps")
PAPER_LABEL = "mean of agents"


def _mean_row(r: int, group: Sequence[Mapping[str, Any]], protocol: str) -> dict[str, Any]:
  return {"round": r, "agent": PAPER_LABEL, "protocol": protocol,
          "model": "+".join(sorted({str(g.get("model", "?")) for g in group})),
          "test_accuracy": float(np.mean([g["test_accuracy"] for g in group])),
          "test_loss": float(np.mean([g["test_loss"] for g in group])),
          "steps": sorted({int(g["round"]) for g in group}),
          "agent_accuracies": [float(g["test_accuracy"]) for g in group]}


def paper_rounds(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """The rows of one run in the paper's units (see the module docstring).

  Args:
    rows: the metric rows of one run (``metrics.jsonl``), any order.

  Returns:
    One row per paper round (``round`` from 1): ``test_accuracy`` and ``test_loss``
    (means over the agents of that round, or EKD's even partial sum), ``steps`` (the
    logged rounds it covers) and ``agent_accuracies``. An AKD round that has not
    finished all its M steps is left out. Rows without a KD ``protocol`` (the other
    papers' methods) and backfitting's rows are returned as they are.
  """
  rows = [dict(r) for r in rows]
  protocol = rows[0].get("protocol") if rows else None
  if protocol is None or protocol.startswith("backfit"):
    return rows
  if protocol == "ekd":
    sums = sorted((r for r in rows if r["agent"] == "ensemble" and r["round"] % 2 == 0),
                  key=lambda r: r["round"])
    return [{**r, "round": r["round"] // 2 + 1, "steps": [int(r["round"])]} for r in sums]
  agent_rows = [r for r in rows if isinstance(r["agent"], int)]
  agents = len({r["agent"] for r in agent_rows})
  groups: dict[int, list[dict[str, Any]]] = {}
  for r in agent_rows:
    key = r["round"] // agents if protocol == "akd" else r["round"]
    groups.setdefault(int(key), []).append(r)
  size = agents if protocol == "akd" else None
  return [_mean_row(k + 1, sorted(g, key=lambda r: r["agent"]), protocol)
          for k, g in sorted(groups.items()) if size is None or len(g) == size]


def in_units(rows: Sequence[Mapping[str, Any]], units: str) -> list[dict[str, Any]]:
  """``rows`` in ``units``: "paper" (:func:`paper_rounds`) or "steps" (as logged)."""
  if units not in UNITS:
    raise ValueError(f"units: expected one of {', '.join(UNITS)}, got {units!r}")
  return paper_rounds(rows) if units == "paper" else [dict(r) for r in rows]
