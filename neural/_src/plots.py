"""Plots of test accuracy per round per agent, like the paper's Figs. 4-6.

Agents are shown 1-based ("agent 1", "agent 2") as in the paper; round 0 (local
training on the labels) is the paper's round 1. With ``units="paper"`` the curves
are the paper's (:mod:`neural._src.paper_units`): one line, the agents' mean.
Runs of a single round (the baselines "central" and "local") are drawn as dashed
horizontal lines in a sweep's panels. Colours follow the agent (agent 1 blue,
agent 2 red, as in the paper), markers the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import os
from typing import Any

from matplotlib.figure import Figure

from fedkrr import atomic_savefig
from neural._src.paper_units import default_accuracy
from neural._src.paper_units import in_units

# Agent 1 blue, agent 2 red as in the paper's figures; the ensemble black, FedAvg green.
_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:gray", "gold")


def _curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
  """``label -> {"rounds", "accs", "color"}`` for each predictor in the rows."""
  curves: dict[str, dict[str, Any]] = {}
  for row in rows:
    agent = row["agent"]
    if isinstance(agent, int):
      label, color = f"agent {agent + 1} ({row.get('model', '?')})", _COLORS[agent % 10]
      if "start" in row:
        label = f"AKD from agent {row['start'] + 1}"
        color = _COLORS[row["start"] % 10]
    elif agent == "server":
      label, color = "FedAvg server", "tab:green"
    else:
      label, color = str(agent), "black"
    curve = curves.setdefault(label, dict(rounds=[], accs=[], color=color))
    curve["rounds"].append(int(row["round"]))
    curve["accs"].append(float(row["test_accuracy"]))
  return curves


_MARKERS = ("o", "s", "^", "v", "D", "P", "X")
_XLABEL = {"steps": "round (0: local training on the labels)",
           "paper": "round, the paper's (AKD: M steps; EKD: even sums)"}


def _draw(ax, rows, prefix: str = "", run_index: int = 0, max_round: int | None = None) -> None:
  """One run's curves: colour by agent, marker by run; single-round runs as dashed lines."""
  from matplotlib.ticker import MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  curves = _curves(rows)
  single = all(len(c["rounds"]) == 1 for c in curves.values())
  for label, c in curves.items():
    width = 2 if c["color"] in ("black", "tab:green") else 1.2
    name = f"{prefix}{label}"
    if single and max_round is not None and max_round > 0:
      ax.hlines(c["accs"][0], 0, max_round, linestyles="dashed", label=name, color=c["color"],
                linewidth=1)
    else:
      ax.plot(c["rounds"], c["accs"], marker=_MARKERS[run_index % len(_MARKERS)], markersize=3,
              label=name, color=c["color"], linewidth=width)


_YLABEL = {"last": "test accuracy (end of local training)",
           "best": "test accuracy (best local epoch)"}


def plot_run(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "",
             units: str = "steps", accuracy: str | None = None) -> None:
  """Test accuracy per round, one line per agent (and ensemble / server), into ``path`` (PNG).

  ``units="paper"`` draws the paper's curve instead (:func:`neural.paper_rounds`: AKD
  rounds of M steps, means over the agents, EKD's even partial sums). ``accuracy``:
  "last" (end of local training) or "best" (best local epoch, the authors' number);
  ``None``: "best" where the rows carry it (runs with ``epoch_eval``).
  """
  accuracy = accuracy or default_accuracy(rows)
  rows = in_units(rows, units, accuracy)
  fig = Figure(figsize=(6.5, 4))
  ax = fig.subplots()
  _draw(ax, rows)
  ax.set_xlabel(_XLABEL[units])
  ax.set_ylabel(_YLABEL[accuracy])
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
  fig.tight_layout()
  atomic_savefig(fig, path, dpi=120)


def plot_sweep(results: Mapping[str, Sequence[Mapping[str, Any]]], path: str | os.PathLike,
               title: str = "", units: str = "steps") -> None:
  """The runs of a sweep, one panel per first name component (before ``__``), into ``path``.

  Args:
    results: metric rows by run name; names join the grid axes with ``__``
      (e.g. ``alpha=0.1__avgkd``); the runs sharing the first part share a panel.
    path: the PNG file.
    title: the figure title.
    units: "steps" (as logged) or "paper" (:func:`neural.paper_rounds`).

  Each run shows its best local epoch where its rows carry it (``epoch_eval``), else
  the end of local training.
  """
  results = {name: in_units(rows, units, default_accuracy(rows))
             for name, rows in results.items()}
  panels: dict[str, list[tuple[str, Sequence[Mapping[str, Any]]]]] = {}
  for name, rows in results.items():
    head, _, rest = name.partition("__")
    panels.setdefault(head, []).append((rest, rows))
  n = len(panels)
  cols = min(n, 3)
  nrows = -(-n // cols)
  fig = Figure(figsize=(5.5 * cols, 3.6 * nrows))
  axes = fig.subplots(nrows, cols, squeeze=False, sharey=True)
  for ax, (head, runs) in zip(axes.ravel(), panels.items()):
    max_round = max((int(r["round"]) for _, rows in runs for r in rows), default=0)
    for i, (rest, rows) in enumerate(runs):
      _draw(ax, rows, prefix=f"{rest}: " if rest else "", run_index=i, max_round=max_round)
    ax.set_title(head, fontsize=9)
    ax.set_xlabel(_XLABEL[units])
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
  for ax in axes.ravel()[n:]:
    ax.set_visible(False)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  atomic_savefig(fig, path, dpi=110)
