"""A reproduced figure drawn as the paper draws it: ``reproduce.png``."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import os
from typing import Any

from matplotlib.figure import Figure
import numpy as np

from fedkrr import PROTOCOLS
from fedkrr import display_name
from fedkrr.io import atomic_savefig
from neural._src.evidence.curves import Curve

# ---------------------------------------------------------------------------
# The figure

_AGENT_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
                 "tab:olive", "tab:cyan", "tab:gray", "gold")
# (colour, line style, marker) per run variant; AKD from agent 1 and from agent 2 apart.
_STYLES = {"avgkd": ("tab:blue", "-", "o"), "pkd": ("tab:orange", "-", "s"),
           "pkd-mean": ("tab:olive", "--", "D"), "ekd": ("black", "-", "P"),
           "fedavg": ("tab:purple", "-", "X"), "akd": ("tab:red", "-", "v"),
           "akd-from-agent1": ("tab:red", ":", "v"), "akd-from-agent2": ("tab:brown", "-.", "^"),
           "from-agent1": ("tab:blue", "-", "o"), "from-agent2": ("tab:red", "-", "s")}


def _display(name: str) -> str | None:
  """The printed name of a protocol (``fedkrr.display_name``; FedAvg too), else ``None``."""
  if name == "fedavg":
    return "FedAvg"
  return display_name(name) if name in PROTOCOLS else None


def _baseline(curve: Curve) -> bool:
  return curve.protocol in ("central", "local")


def _panels(curves: Mapping[str, Curve], per_agent: bool) -> list[tuple[str, list[Curve]]]:
  """``(title, curves)`` per panel: one per setting (per agent: per setting and protocol run)."""
  settings: dict[str, list[Curve]] = {}
  for curve in curves.values():
    settings.setdefault(curve.setting, []).append(curve)
  panels = []
  for setting, group in settings.items():
    lines = [c for c in group if not _baseline(c)]
    baselines = [c for c in group if _baseline(c)]
    if per_agent and len(lines) > 1:
      panels += [(f"{setting}: {c.variant}", [c, *baselines]) for c in lines]
    else:
      panels.append((setting, group))
  return panels


def _agent_labels(curve: Curve) -> list[str]:
  return [f"agent {a + 1}" + (f" ({curve.models[a]})" if a < len(curve.models) else "")
          for a in range(len(curve.agents[0]) if curve.agents else 0)]


def _line(curve: Curve) -> tuple[str, str, str, str]:
  """(label, colour, line style, marker) of a run's mean curve."""
  inner = curve.variant.partition(":")[2]
  if inner == "server":   # FedAvg's averaged model (its own curve: the clients)
    return "FedAvg (averaged model)", "tab:purple", "--", "x"
  if inner:   # an AKD run inside an EKD run
    color, style, marker = _STYLES.get(inner, ("tab:red", ":", "v"))
    return (f"{display_name('akd')} from agent {inner[-1]} ({display_name('ekd')})", color,
            style, marker)
  if curve.variant.startswith("from-agent"):
    color, style, marker = _STYLES.get(curve.variant, ("tab:gray", "-", "o"))
    return f"{display_name('akd')} from agent {curve.variant[-1]}", color, style, marker
  color, style, marker = _STYLES.get(curve.variant, _STYLES.get(curve.protocol,
                                                                ("tab:gray", "-", "o")))
  name = _display(curve.variant) or _display(curve.protocol) or curve.protocol
  return name, color, style, marker


def _band(ax: Any, rounds: np.ndarray, values: np.ndarray, color: str, **kwargs: Any) -> None:
  """The mean over the seeds, with a band of one standard deviation when there are several."""
  mean = values.mean(axis=0)
  ax.plot(rounds, mean, color=color, markersize=3, **kwargs)
  if len(values) > 1:
    sd = values.std(axis=0, ddof=1)
    ax.fill_between(rounds, mean - sd, mean + sd, color=color, alpha=0.15, linewidth=0)


def _draw_panel(ax: Any, curves: Sequence[Curve], per_agent: bool) -> None:
  from matplotlib.ticker import MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  lines = [c for c in curves if not _baseline(c) and c.done]
  last = max((c.done for c in lines), default=1)
  for i, curve in enumerate(lines):
    rounds = np.arange(1, curve.done + 1)
    if per_agent and curve.agents:
      markers = ("o", "s", "^", "v", "D")
      for a, label in enumerate(_agent_labels(curve)):
        _band(ax, rounds, curve.agent_array()[:, a, :], _AGENT_COLORS[a % len(_AGENT_COLORS)],
              marker=markers[i % len(markers)], linewidth=1.2, label=label)
      continue
    label, color, style, marker = _line(curve)
    _band(ax, rounds, curve.array(), color, linestyle=style, marker=marker, linewidth=1.6,
          label=label)
  for curve in curves:
    if _baseline(curve) and curve.done:
      ax.hlines(curve.array()[:, 0].mean(), 1, max(last, 2), linestyles="dashed",
                color="tab:green", linewidth=1.2,
                label="centralised" if curve.protocol == "central" else "local")
  ax.set_xlim(0.8, max(last, 2) + 0.2)


def plot_reproduction(figure: str, curves: Mapping[str, Curve], path: str | os.PathLike,
                      title: str = "", per_agent: bool = False) -> None:
  """Draws a figure's runs like the paper, one panel per setting, into ``path`` (PNG).

  Each line is the mean over the seeds, with a band of one standard deviation when
  there are several; one legend for the figure, below the panels.

  Args:
    figure: "Fig. N" (the y-axis names the accuracy the curves use).
    curves: the runs' curves (:func:`paper_curves`, :func:`merge_seeds`), by run name.
    path: the PNG file (written atomically).
    title: the figure's title.
    per_agent: one line per agent (colour: agent 1 blue, agent 2 red) and a panel
      per setting and protocol run, as the paper's Figs. 5, 12-15; else one line per
      run (the agents' mean; AKD from agent 1 and from agent 2 in their own styles).
  """
  panels = _panels(curves, per_agent)
  settings = len({c.setting for c in curves.values()})
  cols = max(1, min(settings, 4, len(panels)))
  rows = -(-len(panels) // cols)
  fig = Figure(figsize=(4.2 * cols, 3.3 * rows + 1.2), layout="constrained")
  axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharey=True)).ravel()
  accuracy = {c.accuracy for c in curves.values() if c.done}
  legend: dict[str, Any] = {}
  for ax, (name, group) in zip(axes, panels):
    _draw_panel(ax, group, per_agent)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("round (the paper's, from 1)")
    ax.grid(alpha=0.3)
    for handle, label in zip(*ax.get_legend_handles_labels()):
      legend.setdefault(label, handle)
  axes[0].set_ylabel("test accuracy (" + ("best local epoch" if accuracy == {"best"} else
                                          "end of local training" if accuracy == {"last"}
                                          else "best local epoch where logged") + ")")
  for ax in axes[len(panels):]:
    ax.set_visible(False)
  if legend:
    fig.legend(list(legend.values()), list(legend), loc="outside lower center",
               ncols=min(len(legend), 5), fontsize=8)
  fig.suptitle(title or figure, fontsize=10)
  atomic_savefig(fig, path, dpi=110)
