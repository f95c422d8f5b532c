"""Plots of test accuracy per round per agent, like the paper's Figs. 4-6.

Agents are shown 1-based ("agent 1", "agent 2") as in the paper; round 0 (local
training on the labels) is the paper's round 1. Runs of a single round (the
baselines "central" and "local") are drawn as dashed horizontal lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import os
from typing import Any

_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:gray", "tab:green")


def _curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list[int], list[float]]]:
  """``label -> (rounds, test accuracies)`` for each predictor in the rows."""
  curves: dict[str, tuple[list[int], list[float]]] = {}
  for row in rows:
    agent = row["agent"]
    if isinstance(agent, int):
      label = f"agent {agent + 1} ({row.get('model', '?')})"
      if "start" in row:
        label = f"AKD from agent {row['start'] + 1}"
    elif agent == "server":
      label = "FedAvg server"
    else:
      label = str(agent)
    rounds, accs = curves.setdefault(label, ([], []))
    rounds.append(int(row["round"]))
    accs.append(float(row["test_accuracy"]))
  return curves


def _style(label: str, index: int) -> dict[str, Any]:
  if label == "ensemble":
    return dict(color="black", linewidth=2)
  if label == "FedAvg server":
    return dict(color="tab:green", linewidth=2)
  return dict(color=_COLORS[index % len(_COLORS)], linewidth=1.2)


def _draw(ax, rows, prefix: str = "", index0: int = 0, max_round: int | None = None) -> int:
  curves = _curves(rows)
  single = all(len(r) == 1 for r, _ in curves.values())
  for i, (label, (rounds, accs)) in enumerate(curves.items()):
    style = _style(label, index0 + i)
    name = f"{prefix}{label}"
    if single and max_round is not None and max_round > 0:
      ax.hlines(accs[0], 0, max_round, linestyles="dashed", label=name, **style)
    else:
      ax.plot(rounds, accs, marker="o", markersize=3, label=name, **style)
  return index0 + len(curves)


def plot_run(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "") -> None:
  """Test accuracy per round, one line per agent (and ensemble / server), into ``path`` (PNG)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6.5, 4))
  _draw(ax, rows)
  ax.set_xlabel("round (0: local training on the labels)")
  ax.set_ylabel("test accuracy (end of local training)")
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_sweep(results: Mapping[str, Sequence[Mapping[str, Any]]], path: str | os.PathLike,
               title: str = "") -> None:
  """The runs of a sweep, one panel per first name component (before ``__``), into ``path``.

  Args:
    results: metric rows by run name; names join the grid axes with ``__``
      (e.g. ``alpha=0.1__avgkd``); the runs sharing the first part share a panel.
    path: the PNG file.
    title: the figure title.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  panels: dict[str, list[tuple[str, Sequence[Mapping[str, Any]]]]] = {}
  for name, rows in results.items():
    head, _, rest = name.partition("__")
    panels.setdefault(head, []).append((rest, rows))
  n = len(panels)
  cols = min(n, 3)
  nrows = -(-n // cols)
  fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 3.6 * nrows), squeeze=False,
                           sharey=True)
  for ax, (head, runs) in zip(axes.ravel(), panels.items()):
    max_round = max((int(r["round"]) for _, rows in runs for r in rows), default=0)
    index = 0
    for rest, rows in runs:
      index = _draw(ax, rows, prefix=f"{rest}: " if rest else "", index0=index,
                    max_round=max_round)
    ax.set_title(head, fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
  for ax in axes.ravel()[n:]:
    ax.set_visible(False)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
