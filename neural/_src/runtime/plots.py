"""Plots of test accuracy per round per agent, like the paper's Figs. 4-6.

Agents are numbered from 0, as in the metric rows, the configs (``start``) and
everything ``neural`` prints (the paper counts from 1). The rounds are those of
the rows: with ``units="steps"`` round 0 is local training on the labels; with
``units="paper"`` the paper's rounds, from 1 (:mod:`neural._src.evidence.paper_units`: one
line, the agents' mean; an AKD round of M steps; EKD's even partial sums), and a
note under the axis names the logged steps an unfinished AKD round leaves out. The
other papers' methods count their rounds from 0. Labels come from the rows: the
agent and its model, the server of the run's method (``"feddkc server
(resnet20)"``), the ensemble. Runs of a single round (the baselines "central" and
"local") are dashed horizontal lines in a sweep's panels. Colours follow the agent
and markers the run; where every run of a panel has one curve, colours follow the
run. Legends and titles stay outside the axes, wrapped to the figure's width.

Each PNG records how it was drawn (the ``neural-plot`` text chunk: version and
units), so that the rerun of a finished run redraws it only when that changed
(:func:`plot_is_current`).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import os
from pathlib import Path
import struct
import textwrap
from typing import Any

from fedkrr import __version__
from fedkrr import display_name
from fedkrr.io import atomic_savefig
from neural._src.evidence.paper_units import default_accuracy
from neural._src.evidence.paper_units import in_units
from neural._src.evidence.paper_units import unfinished_steps

PLOT_INFO_KEY = "neural-plot"

# Agent 0 blue, agent 1 red as in the paper's figures; the ensemble black, a server green.
_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
           "tab:olive", "tab:cyan", "tab:gray", "gold")
_RUN_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown",
               "tab:pink", "tab:olive", "tab:cyan", "tab:gray")
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")
_YLABEL = {"last": "test accuracy (end of local training)",
           "best": "test accuracy (best local epoch)"}


def curve_label(row: Mapping[str, Any]) -> tuple[str, str]:
  """``(label, colour)`` of the predictor a metric row belongs to, from the row alone.

  ``"agent 0 (cnn)"`` for agent 0 (numbered from 0, as printed); ``"AKD from agent
  1"`` for EKD's chains; ``"<method> server (<model>)"`` for a server, named by the
  row's ``method`` (other papers) or ``protocol`` (FedAvg); the agent's name otherwise
  (``"ensemble"``, ``"mean of agents"``).
  """
  agent = row.get("agent")
  if isinstance(agent, int):
    if "start" in row:
      label = f"{display_name('akd')} from agent {row['start']}"
      return label, _COLORS[int(row["start"]) % len(_COLORS)]
    return f"agent {agent} ({row.get('model', '?')})", _COLORS[agent % len(_COLORS)]
  if agent == "server":
    owner = row.get("method") or row.get("protocol") or "the"
    return f"{owner} server ({row.get('model', '?')})", "tab:green"
  return str(agent), "black"


def _curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
  """``label -> {"rounds", "accs", "color"}`` for each predictor in the rows."""
  curves: dict[str, dict[str, Any]] = {}
  for row in rows:
    label, color = curve_label(row)
    curve = curves.setdefault(label, dict(rounds=[], accs=[], color=color))
    curve["rounds"].append(int(row["round"]))
    curve["accs"].append(float(row["test_accuracy"]))
  return curves


def round_axis_label(rows: Sequence[Mapping[str, Any]], units: str) -> str:
  """The x-axis name for ``rows`` drawn in ``units``: which rounds, counted from what.

  Only the protocols present are described (a method's rows have none).
  """
  protocols = sorted({str(r["protocol"]) for r in rows if r.get("protocol")})
  if not protocols:
    return "round (from 0)"
  if units == "steps" or all(p.startswith("backfit") for p in protocols):
    return "round (0: local training on the labels)"
  notes = []
  if "akd" in protocols:
    notes.append(f"{display_name('akd')}: M steps each")
  if "ekd" in protocols:
    notes.append(f"{display_name('ekd')}: even partial sums")
  return "paper round (1: local training" + "".join(f"; {n}" for n in notes) + ")"


def _unfinished_note(results: Mapping[str, Sequence[Mapping[str, Any]]], units: str) -> str:
  """A line naming the logged AKD steps that no finished paper round covers."""
  if units != "paper":
    return ""
  left = {name: unfinished_steps(rows) for name, rows in results.items()}
  left = {name: steps for name, steps in left.items() if steps}
  if not left:
    return ""
  parts = [f"{name + ': ' if name else ''}step{'s' if len(s) > 1 else ''} "
           f"{', '.join(map(str, s))}" for name, s in left.items()]
  return (f"not drawn (an AKD round unfinished: fewer than M steps): {'; '.join(parts)} "
          f"(--units steps draws every step)")


def _draw(ax, rows, prefix: str = "", marker: str = "o", color: str | None = None,
          span: tuple[int, int] | None = None) -> list[tuple[str, Any]]:
  """One run's curves (colour by agent unless ``color``); single-round runs dashed over
  ``span``. Returns ``(label, artist)`` per curve."""
  from matplotlib.ticker import MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  curves = _curves(rows)
  single = all(len(c["rounds"]) == 1 for c in curves.values())
  drawn = []
  for label, c in curves.items():
    width = 2 if c["color"] in ("black", "tab:green") else 1.2
    line_color = color or c["color"]
    name = f"{prefix}{label}"
    if single and span is not None and span[1] > span[0]:
      artist = ax.hlines(c["accs"][0], span[0], span[1], linestyles="dashed", label=name,
                         color=line_color, linewidth=1)
    else:
      artist, = ax.plot(c["rounds"], c["accs"], marker=marker, markersize=3.5, label=name,
                        color=line_color, linewidth=width)
    drawn.append((name, artist))
  return drawn


def _wrap(text: str, width_inches: float, fontsize: float) -> str:
  """``text`` wrapped to lines that fit ``width_inches`` at ``fontsize`` points."""
  chars = max(20, int(width_inches * 72 / (0.55 * fontsize)))
  return "\n".join(textwrap.fill(line, chars) for line in text.split("\n")) if text else ""


def run_figure(rows: Sequence[Mapping[str, Any]], title: str = "", units: str = "steps",
               accuracy: str | None = None) -> Any:
  """The ``matplotlib.figure.Figure`` of :func:`plot_run` (legend right of the axes)."""
  from matplotlib.figure import Figure

  accuracy = accuracy or default_accuracy(rows)
  drawn_rows = in_units(rows, units, accuracy)
  fig = Figure(figsize=(7.5, 4), layout="constrained")
  ax = fig.subplots()
  _draw(ax, drawn_rows)
  note = _unfinished_note({"": rows}, units)
  ax.set_xlabel(round_axis_label(rows, units) + (f"\n{_wrap(note, 5, 7)}" if note else ""),
                fontsize=9)
  ax.set_ylabel(_YLABEL[accuracy])
  ax.grid(alpha=0.3)
  fig.legend(fontsize=7, loc="outside right center")
  if title:
    fig.suptitle(_wrap(title, 7.5, 9), fontsize=9)
  return fig


def plot_run(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "",
             units: str = "steps", accuracy: str | None = None) -> None:
  """Test accuracy per round, one line per agent (and ensemble / server), into ``path`` (PNG).

  ``units="paper"`` draws the paper's curve instead (:func:`neural.evidence.paper_rounds`: AKD
  rounds of M steps, means over the agents, EKD's even partial sums). ``accuracy``:
  "last" (end of local training) or "best" (best local epoch, the authors' number);
  ``None``: "best" where the rows carry it (runs with ``epoch_eval``).
  """
  fig = run_figure(rows, title, units, accuracy)
  atomic_savefig(fig, path, dpi=120, metadata={PLOT_INFO_KEY: plot_info(units)})


def sweep_figure(results: Mapping[str, Sequence[Mapping[str, Any]]], title: str = "",
                 units: str = "steps") -> Any:
  """The ``matplotlib.figure.Figure`` of :func:`plot_sweep` (one legend, below the panels)."""
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D

  drawn_rows = {name: in_units(rows, units, default_accuracy(rows))
                for name, rows in results.items()}
  panels: dict[str, list[tuple[str, Sequence[Mapping[str, Any]]]]] = {}
  for name, rows in drawn_rows.items():
    head, _, rest = name.partition("__")
    panels.setdefault(head, []).append((rest, rows))
  runs = list(dict.fromkeys(rest for entries in panels.values() for rest, _ in entries))
  n = len(panels)
  cols = min(n, 3)
  nrows = -(-n // cols)
  width = 5.0 * cols
  fig = Figure(figsize=(width, 3.4 * nrows + 1.6), layout="constrained")
  axes = fig.subplots(nrows, cols, squeeze=False, sharey=True)
  # One curve per run in every panel (paper units: the agents' mean): colour by run.
  by_run = all(len(_curves(rows)) == 1 for entries in panels.values() for _, rows in entries)
  legend: dict[str, Any] = {}
  for ax, (head, entries) in zip(axes.ravel(), panels.items()):
    rounds = [int(r["round"]) for _, rows in entries for r in rows]
    span = (min(rounds, default=0), max(rounds, default=0))
    for rest, rows in entries:
      k = runs.index(rest)
      color = _RUN_COLORS[k % len(_RUN_COLORS)] if by_run else None
      for label, artist in _draw(ax, rows, prefix=f"{rest}: " if rest and by_run else "",
                                 marker=_MARKERS[k % len(_MARKERS)], color=color, span=span):
        if by_run or not rest:
          legend.setdefault(label, artist)
        else:   # colour = the agent, marker = the run: one entry per agent, one per run
          legend.setdefault(label, Line2D([], [], color=artist.get_color(), linewidth=2))
    ax.set_title(head, fontsize=9)
    ax.set_xlabel(_wrap(round_axis_label([r for rs in results.values() for r in rs], units),
                        4.5, 8), fontsize=8)
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
  if not by_run and any(runs):
    for k, rest in enumerate(runs):
      single = all(len({r["round"] for r in rows}) == 1
                   for entries in panels.values() for name, rows in entries if name == rest)
      if rest:
        legend.setdefault(f"run {rest}", Line2D([], [], color="gray", linestyle="--")
                          if single else Line2D([], [], color="gray",
                                                marker=_MARKERS[k % len(_MARKERS)]))
  for ax in axes.ravel()[n:]:
    ax.set_visible(False)
  fig.legend(list(legend.values()), list(legend), loc="outside lower center", fontsize=7,
             ncols=max(1, min(len(legend), int(width // 2.4))))
  note = _unfinished_note(results, units)
  heading = title + (f"\n{note}" if note else "")
  if heading:
    fig.suptitle(_wrap(heading, width, 9), fontsize=9)
  return fig


def plot_sweep(results: Mapping[str, Sequence[Mapping[str, Any]]], path: str | os.PathLike,
               title: str = "", units: str = "steps") -> None:
  """The runs of a sweep, one panel per first name component (before ``__``), into ``path``.

  Args:
    results: metric rows by run name; names join the grid axes with ``__``
      (e.g. ``alpha=0.1__avgkd``); the runs sharing the first part share a panel.
    path: the PNG file.
    title: the figure title.
    units: "steps" (as logged) or "paper" (:func:`neural.evidence.paper_rounds`).

  Each run shows its best local epoch where its rows carry it (``epoch_eval``), else
  the end of local training. One legend below the panels: colours name the agents
  and markers the runs, or, where every run has one curve, each colour a run.
  """
  fig = sweep_figure(results, title, units)
  atomic_savefig(fig, path, dpi=110, metadata={PLOT_INFO_KEY: plot_info(units)})


def plot_info(units: str) -> str:
  """What a PNG records about how it was drawn: the version and the units."""
  return f"neural {__version__}; units {units}"


def png_text(path: str | os.PathLike) -> dict[str, str]:
  """The ``tEXt`` chunks of a PNG file before its image data (``{}`` if it is none)."""
  out: dict[str, str] = {}
  try:
    with open(path, "rb") as f:
      if f.read(8) != b"\x89PNG\r\n\x1a\n":
        return {}
      while True:
        head = f.read(8)
        if len(head) < 8:
          return out
        length, kind = struct.unpack(">I4s", head)
        if kind in (b"IDAT", b"IEND"):
          return out
        data = f.read(length)
        f.read(4)   # CRC
        if kind == b"tEXt" and b"\0" in data:
          key, _, value = data.partition(b"\0")
          out[key.decode("latin-1")] = value.decode("latin-1")
  except OSError:
    return {}


def plot_is_current(path: str | os.PathLike, units: str,
                    newer_than: str | os.PathLike | None = None) -> bool:
  """Whether the PNG at ``path`` was drawn by this version in ``units`` (after ``newer_than``).

  A run that finished keeps its figure when run again, unless the figure is missing,
  from another version, in other units, or older than the metrics it shows.
  """
  path = Path(path)
  if png_text(path).get(PLOT_INFO_KEY) != plot_info(units):
    return False
  try:
    return newer_than is None or path.stat().st_mtime >= Path(newer_than).stat().st_mtime
  except OSError:
    return False
