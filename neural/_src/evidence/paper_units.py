"""Metric rows in the paper's units: the rounds and curves of Afonin & Karimireddy's figures.

``neural`` logs one row per distillation step and agent (``neural._src.kd.experiment``).
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
- **Which accuracy**: the authors' number for a model is its best test accuracy over
  the local epochs (they pass on the last epoch's model). Runs with ``epoch_eval`` log
  it as ``best_epoch_test_accuracy``; ``accuracy="best"`` plots it. EKD's sums are of
  the last-epoch models in either case, as in the authors' code.

:func:`paper_rounds` turns a run's rows into these; the rows of the other papers'
methods and of backfitting (not in the paper) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np

import fedkrr

UNITS = ("paper", "steps")
ACCURACIES = ("last", "best")
PAPER_LABEL = "mean of agents"
BEST = "best_epoch_test_accuracy"


def _combine(protocol: Any) -> str | None:
  """How a KD protocol's models combine (``fedkrr.PROTOCOL_TABLE``); ``None`` for the rest
  (FedAvg, the baselines, the other papers' methods)."""
  return fedkrr.protocol_info(protocol).combine if protocol in fedkrr.PROTOCOLS else None


def _mean_row(r: int, group: Sequence[Mapping[str, Any]], protocol: str,
              accuracy: str) -> dict[str, Any]:
  key = BEST if accuracy == "best" else "test_accuracy"
  row = {"round": r, "agent": PAPER_LABEL, "protocol": protocol,
         "model": "+".join(sorted({str(g.get("model", "?")) for g in group})),
         "test_accuracy": float(np.mean([g[key] for g in group])),
         "test_loss": float(np.mean([g["test_loss"] for g in group])),
         "steps": sorted({int(g["round"]) for g in group}),
         "agent_accuracies": [float(g[key]) for g in group], "accuracy": accuracy}
  if accuracy == "best":
    row["last_epoch_test_accuracy"] = float(np.mean([g["test_accuracy"] for g in group]))
  return row


def has_best(rows: Sequence[Mapping[str, Any]]) -> bool:
  """Whether every per-model row carries the best test accuracy over the local epochs."""
  models = [r for r in rows if isinstance(r.get("agent"), int)]
  return bool(models) and all(BEST in r for r in models)


def default_accuracy(rows: Sequence[Mapping[str, Any]]) -> str:
  """"best" for rows that carry the best epoch (runs with ``epoch_eval``), else "last"."""
  return "best" if has_best(rows) else "last"


def check_accuracy(accuracy: str, rows: Sequence[Mapping[str, Any]]) -> None:
  """Raises ``ValueError`` unless ``accuracy`` is one of ``ACCURACIES`` that ``rows`` carry."""
  if accuracy not in ACCURACIES:
    raise ValueError(f"accuracy: expected one of {', '.join(ACCURACIES)}, got {accuracy!r}")
  protocol = rows[0].get("protocol") if rows else None
  if (accuracy == "best" and protocol is not None and _combine(protocol) not in (
      "alternating-sum", "sum") and not has_best(rows)):
    raise ValueError("accuracy: 'best' needs rows with best_epoch_test_accuracy (a run with "
                     "epoch_eval: true)")


def paper_rounds(rows: Sequence[Mapping[str, Any]], accuracy: str = "last"
                 ) -> list[dict[str, Any]]:
  """The rows of one run in the paper's units (see the module docstring).

  Args:
    rows: the metric rows of one run (``metrics.jsonl``), any order.
    accuracy: "last" (the model at the end of local training, which is passed on)
      or "best" (the best test accuracy over its local epochs, the authors' number;
      needs a run with ``epoch_eval``).

  Returns:
    One row per paper round (``round`` from 1): ``test_accuracy`` and ``test_loss``
    (means over the agents of that round, or EKD's even partial sum), ``steps`` (the
    logged rounds it covers), ``agent_accuracies`` and ``accuracy`` (which one);
    with "best" also ``last_epoch_test_accuracy``. An AKD round that has not
    finished all its M steps is left out. Rows without a KD ``protocol`` (the other
    papers' methods) and backfitting's rows are returned as they are.

  Raises:
    ValueError: an unknown ``accuracy``, or "best" for rows without it.
  """
  check_accuracy(accuracy, rows)
  rows = [dict(r) for r in rows]
  protocol = rows[0].get("protocol") if rows else None
  if protocol is None or _combine(protocol) == "sum":
    return rows
  if _combine(protocol) == "alternating-sum":
    sums = sorted((r for r in rows if r["agent"] == "ensemble" and r["round"] % 2 == 0),
                  key=lambda r: r["round"])
    return [{**r, "round": r["round"] // 2 + 1, "steps": [int(r["round"])]} for r in sums]
  agent_rows = [r for r in rows if isinstance(r["agent"], int)]
  agents = len({r["agent"] for r in agent_rows})
  groups: dict[int, list[dict[str, Any]]] = {}
  for r in agent_rows:
    key = r["round"] // agents if _combine(protocol) == "single" else r["round"]
    groups.setdefault(int(key), []).append(r)
  size = agents if _combine(protocol) == "single" else None
  return [_mean_row(k + 1, sorted(g, key=lambda r: r["agent"]), protocol, accuracy)
          for k, g in sorted(groups.items()) if size is None or len(g) == size]


def unfinished_steps(rows: Sequence[Mapping[str, Any]]) -> list[int]:
  """The logged steps of an AKD run that no finished paper round covers.

  An AKD round is M steps; a run whose steps are not a multiple of M ends with a
  round begun but not finished, which :func:`paper_rounds` leaves out. These are
  its steps (``[]`` for the other protocols, whose every step is drawn: EKD's odd
  partial sums are left out by the paper's definition, not for want of steps).
  """
  if not rows or _combine(rows[0].get("protocol")) != "single":
    return []
  logged = {int(r["round"]) for r in rows if isinstance(r.get("agent"), int)}
  covered = {int(s) for r in paper_rounds(rows) for s in r["steps"]}
  return sorted(logged - covered)


def paper_round_count(protocol: str, steps: int, agents: int) -> int:
  """How many paper rounds a finished run of ``steps`` logged rounds has (AKD: M steps
  each; EKD: its even partial sums; the rest: one step each)."""
  if _combine(protocol) == "single":
    return steps // agents
  if _combine(protocol) == "alternating-sum":
    return (steps + 1) // 2
  return steps


def steps_for_paper_rounds(protocol: str, paper_rounds: int, agents: int) -> int:
  """The logged rounds a run needs for ``paper_rounds`` paper rounds (the inverse of
  :func:`paper_round_count`: AKD M steps each, EKD two, the rest one)."""
  if _combine(protocol) == "single":
    return paper_rounds * agents
  if _combine(protocol) == "alternating-sum":
    return 2 * paper_rounds
  return paper_rounds


def in_units(rows: Sequence[Mapping[str, Any]], units: str, accuracy: str = "last"
             ) -> list[dict[str, Any]]:
  """``rows`` in ``units``: "paper" (:func:`paper_rounds`) or "steps" (as logged).

  With ``accuracy="best"`` the steps' per-model rows show their best epoch too.
  """
  if units not in UNITS:
    raise ValueError(f"units: expected one of {', '.join(UNITS)}, got {units!r}")
  if units == "paper":
    return paper_rounds(rows, accuracy)
  check_accuracy(accuracy, rows)
  return [{**r, "test_accuracy": r[BEST]} if accuracy == "best" and BEST in r else dict(r)
          for r in rows]
