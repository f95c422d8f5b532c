"""Reproducing a figure of the paper: ``neural reproduce --figure N``.

:func:`reproduce` finds the shipped config(s) of a figure of Afonin & Karimireddy
(Sec. 6, App. H) at a scale ("small": the ``*_small`` config, embedded data, a
CPU; "paper": the full-size config and, for Figs. 9-10, its ``*_text`` variant),
runs (or resumes) every run with :func:`neural.run_configs`, and writes into the
work directory:

- ``reproduce.png``: the figure as the paper draws it: one panel per setting,
  the paper's rounds and curves (:func:`neural.paper_rounds`: AKD rounds of M
  steps, the mean of the agents, EKD's even partial sums; the best local epoch
  where the run logs it); per agent for the figures the paper draws per agent;
- ``reproduce.md`` and its twin ``reproduce.json``: per run, round 1, the best
  round and the last round; then each statement the paper makes about the figure
  (``neural._src.claims``), checked against these numbers by its rule:
  "reproduced", "not reproduced" or "not testable here", with the numbers used.

With one config the runs go to ``workdir/<run>/`` as with ``neural run``; with two
(Figs. 9-10 at paper scale) to ``workdir/<config>/<run>/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import json
import os
from pathlib import Path
import re
from typing import Any

from matplotlib.figure import Figure
import numpy as np

from fedkrr import atomic_savefig
from fedkrr import atomic_write
from neural._src.claims import VERDICTS
from neural._src.claims import Check
from neural._src.claims import Curve
from neural._src.claims import evaluate
from neural._src.claims import figure_claims
from neural._src.config import ConfigError
from neural._src.config import ExperimentConfig
from neural._src.config import RunConfig
from neural._src.experiment import total_rounds
from neural._src.paper_units import BEST
from neural._src.paper_units import default_accuracy
from neural._src.paper_units import paper_round_count
from neural._src.paper_units import paper_rounds
from neural._src.specs import load_spec
from neural._src.specs import run_configs
from neural._src.specs import shipped_configs

SCALES = ("small", "paper")
REPORT_MD = "reproduce.md"
REPORT_JSON = "reproduce.json"
FIGURE_PNG = "reproduce.png"
# The figures the paper draws per agent (agent 1 blue, agent 2 red); the others show
# one curve per protocol (the agents' mean).
PER_AGENT = frozenset({"Fig. 5", "Fig. 12", "Fig. 13", "Fig. 14", "Fig. 15"})


# ---------------------------------------------------------------------------
# Which configs


def figure_label(figure: int | str) -> str:
  """"Fig. N" for ``N``, ``"N"`` or ``"Fig. N"``.

  Raises:
    ConfigError: not a figure number.
  """
  match = re.fullmatch(r"\s*(?:fig(?:ure)?\.?\s*)?(\d+)\s*", str(figure), re.IGNORECASE)
  if not match:
    raise ConfigError(f"figure: expected a figure number such as 4, got {figure!r}")
  return f"Fig. {int(match.group(1))}"


def shipped_figures() -> dict[str, dict[str, list[str]]]:
  """``{"Fig. N": {"small": [config names], "paper": [...]}}`` of the shipped configs.

  The figures of Afonin & Karimireddy: configs of the KD protocols whose ``figure``
  is "Fig. N" (the other papers' methods have configs of their own). Paper scale
  lists the full-size config first, then its ``_text`` variant.
  """
  figures: dict[str, dict[str, list[str]]] = {}
  for name, path in shipped_configs().items():
    spec = load_spec(path)
    if re.fullmatch(r"Fig\. \d+", spec.figure) and "method" not in spec.base:
      scale = "small" if name.endswith("_small") else "paper"
      figures.setdefault(spec.figure, {"small": [], "paper": []})[scale].append(name)
  for scales in figures.values():
    scales["paper"].sort(key=lambda n: (n.endswith("_text"), n))
  return dict(sorted(figures.items(), key=lambda kv: int(kv[0].split()[-1])))


def figure_configs(figure: int | str, scale: str = "small") -> list[str]:
  """The shipped configs that reproduce ``figure`` at ``scale`` ("small" or "paper").

  Raises:
    ConfigError: an unknown scale, or a figure no shipped config has (the message
      names the figures there are).
  """
  if scale not in SCALES:
    raise ConfigError(f"scale: expected one of {', '.join(SCALES)}, got {scale!r}")
  label = figure_label(figure)
  figures = shipped_figures()
  if label not in figures or not figures[label][scale]:
    numbers = ", ".join(f.split()[-1] for f in figures)
    raise ConfigError(f"figure: no shipped config reproduces {label}; the figures are "
                      f"{numbers}")
  return list(figures[label][scale])


# ---------------------------------------------------------------------------
# Curves in the paper's units


def _curve(name: str, rows: Sequence[Mapping[str, Any]], accuracy: str,
           steps: int | None) -> Curve:
  protocol = str(rows[0]["protocol"])
  paper = paper_rounds(rows, accuracy)
  agent_rows = [r for r in rows if isinstance(r["agent"], int)]
  agents = max(r["agent"] for r in agent_rows) + 1
  models = {int(r["agent"]): str(r.get("model", "?")) for r in agent_rows}
  per_agent = tuple(tuple(float(v) for v in vs)
                    for vs in zip(*[r["agent_accuracies"] for r in paper]))
  return Curve(name, protocol, tuple(float(r["test_accuracy"]) for r in paper), per_agent,
               tuple(v[0] for v in per_agent),
               len(paper) if steps is None else paper_round_count(protocol, steps, agents),
               accuracy, tuple(models[a] for a in sorted(models)))


def _run_curves(name: str, rows: Sequence[Mapping[str, Any]],
                config: RunConfig | None) -> list[Curve]:
  steps = total_rounds(config) if isinstance(config, ExperimentConfig) else None
  if not rows:
    protocol = getattr(config, "protocol", "?")
    agents = config.agents if config is not None else 1
    return [Curve(name, protocol, (), rounds=paper_round_count(protocol, steps or 1, agents))]
  accuracy = default_accuracy(rows)
  if rows[0].get("protocol") != "ekd":
    return [_curve(name, rows, accuracy, steps)]
  key = BEST if accuracy == "best" else "test_accuracy"
  local_rows = sorted((r for r in rows if r["round"] == 0 and isinstance(r["agent"], int)),
                      key=lambda r: r["agent"])
  paper = paper_rounds(rows, accuracy)
  curves = [Curve(name, "ekd", tuple(float(r["test_accuracy"]) for r in paper), (),
                  tuple(float(r.get(key, r["test_accuracy"])) for r in local_rows),
                  len(paper) if steps is None else paper_round_count("ekd", steps, 1), accuracy,
                  tuple(str(r.get("model", "?")) for r in local_rows))]
  for start in sorted({int(r["start"]) for r in rows if "start" in r}):
    akd = [{**r, "protocol": "akd"} for r in rows if r.get("start") == start]
    curves.append(_curve(f"{name}:akd-from-agent{start + 1}", akd, accuracy, steps))
  return curves


def paper_curves(results: Mapping[str, Sequence[Mapping[str, Any]]],
                 configs: Mapping[str, RunConfig] | None = None) -> dict[str, Curve]:
  """The runs' test accuracy in the paper's units, by run name.

  Args:
    results: metric rows by run name (as :func:`neural.run_configs` returns them;
      names ``setting__variant``).
    configs: each run's config, to tell an unfinished run from a finished one
      (without it, every run counts as finished).

  Returns:
    A :class:`neural.Curve` per run: the agents' mean per paper round (EKD: its
    even partial sums) and each agent's values, from the best local epoch where
    the run logs it, else the end of local training. An EKD run adds the AKD run
    from each agent that it holds (``<name>:akd-from-agent<s>``).
  """
  curves: dict[str, Curve] = {}
  for name, rows in results.items():
    for curve in _run_curves(name, list(rows), (configs or {}).get(name)):
      curves[curve.name] = curve
  return curves


def check_statements(figure: int | str, results: Mapping[str, Sequence[Mapping[str, Any]]],
                     configs: Mapping[str, RunConfig] | None = None) -> list[Check]:
  """Checks the paper's statements about ``figure`` against runs' metric rows.

  Args:
    figure: the figure (4, "4" or "Fig. 4").
    results: metric rows by run name, named as the figure's shipped config names
      its runs (e.g. ``same__from-agent1``, ``alpha=0.1__avgkd``).
    configs: the runs' configs (see :func:`paper_curves`).

  Returns:
    One :class:`neural.Check` per statement and setting (:data:`neural.CLAIMS`).

  Example:
    >>> rows = [{"round": t, "agent": t % 2, "protocol": "akd", "model": "cnn",
    ...          "test_accuracy": 0.9 - 0.05 * t, "test_loss": 0.0} for t in range(4)]
    >>> checks = neural.check_statements(4, {"same__from-agent1": rows})
    >>> check = next(c for c in checks if c.setting == "same")
    >>> check.statement, check.verdict, check.numbers
    ('AKD degrades with rounds', 'reproduced', 'same__from-agent1 0.875 -> 0.775 (-0.100)')
  """
  return evaluate(figure_claims(figure_label(figure)), paper_curves(results, configs))


# ---------------------------------------------------------------------------
# The result


@dataclasses.dataclass(frozen=True)
class ConfigReproduction:
  """One shipped config of a reproduced figure.

  Attributes:
    config: the shipped config's name.
    description: its description.
    workdir: where its runs are.
    curves: the runs' curves in the paper's units, by run name.
    checks: the paper's statements, checked.
    figure: the path of the drawn figure (PNG).
  """

  config: str
  description: str
  workdir: str
  curves: dict[str, Curve]
  checks: tuple[Check, ...]
  figure: str


@dataclasses.dataclass(frozen=True)
class Reproduction:
  """What :func:`neural.reproduce` ran, drew, checked and wrote.

  Attributes:
    figure: "Fig. N".
    scale: "small" or "paper".
    overrides: the config fields set for every run.
    configs: one entry per shipped config of the figure at this scale.
    paths: ``{"md": ..., "json": ...}``: the report files.
  """

  figure: str
  scale: str
  overrides: dict[str, Any]
  configs: tuple[ConfigReproduction, ...]
  paths: dict[str, str]

  @property
  def checks(self) -> list[Check]:
    """Every check of every config."""
    return [c for config in self.configs for c in config.checks]

  def counts(self) -> dict[str, int]:
    """How many checks got each verdict."""
    return {v: sum(c.verdict == v for c in self.checks) for v in VERDICTS}

  def to_dict(self) -> dict[str, Any]:
    """The content of ``reproduce.json``."""
    return {
        "figure": self.figure, "scale": self.scale, "overrides": self.overrides,
        "counts": self.counts(),
        "configs": [{
            "config": c.config, "description": c.description, "workdir": c.workdir,
            "figure_png": c.figure,
            "runs": [_run_summary(curve) for curve in c.curves.values()],
            "statements": [c_._asdict() | {"runs": list(c_.runs)} for c_ in c.checks],
        } for c in self.configs]}


def _run_summary(curve: Curve) -> dict[str, Any]:
  v = curve.values
  best = int(np.argmax(v)) if v else None
  return {"run": curve.name, "setting": curve.setting, "variant": curve.variant,
          "protocol": curve.protocol, "accuracy": curve.accuracy, "models": list(curve.models),
          "rounds_done": len(v), "rounds": curve.rounds, "finished": curve.finished,
          "round_1": v[0] if v else None,
          "best_round": None if best is None else best + 1,
          "best": None if best is None else v[best],
          "last_round": len(v) or None, "last": v[-1] if v else None,
          "curve": list(v), "agents": [list(a) for a in curve.agents],
          "local": list(curve.local)}


# ---------------------------------------------------------------------------
# Running


def reproduce(figure: int | str, workdir: str | os.PathLike, scale: str = "small",
              overrides: Mapping[str, Any] | None = None, *, progress: bool = False,
              max_rounds: int | None = None) -> Reproduction:
  """Runs (or resumes) a figure's shipped config(s), draws it and checks its statements.

  Args:
    figure: the figure (4, "4" or "Fig. 4"); ``neural configs`` lists the configs
      and their figures.
    workdir: the directory; the runs go to ``workdir/<run>/`` (two configs:
      ``workdir/<config>/<run>/``). Called again, finished runs are read and
      unfinished ones resume, as with ``neural run``.
    scale: "small" (the ``*_small`` config: embedded data, a CPU) or "paper" (the
      full-size config(s): MNIST / CIFAR-10 files in ``data_dir``, a GPU).
    overrides: config fields set in every run (e.g. ``{"data_dir": "~/data"}``,
      or ``{"rounds": 2, "epochs": 1}`` for a quick look).
    progress: progress bars and the name of each run.
    max_rounds: do at most this many rounds of each run in this call (a later
      call resumes); the report then marks the unfinished runs.

  Returns:
    The :class:`neural.Reproduction`; ``reproduce.md``, ``reproduce.json`` and
    ``reproduce.png`` are written (atomically) into ``workdir`` (the PNG into each
    config's directory).

  Raises:
    ConfigError: an unknown figure or scale, or a bad override. ``DataError``: the
      paper-scale data is missing. ``ExperimentError``: a workdir holding other runs.
  """
  label = figure_label(figure)
  names = figure_configs(label, scale)
  overrides = dict(overrides or {})
  if max_rounds is not None and max_rounds < 1:
    raise ConfigError(f"max_rounds: expected an integer >= 1, got {max_rounds}")
  workdir = Path(workdir)
  specs = [(name, load_spec(name)) for name in names]
  planned = [(name, spec, spec.expand(overrides)) for name, spec in specs]   # validate all
  results = []
  for name, spec, runs in planned:
    where = workdir if len(planned) == 1 else workdir / name
    if progress:
      print(f"{label}: {name} ({len(runs)} runs) in {where}", flush=True)
    rows = run_configs(runs, where, progress=progress, description=spec.description,
                       max_rounds=max_rounds)
    curves = paper_curves(rows, dict(runs))
    checks = tuple(evaluate(figure_claims(label), curves))
    png = where / FIGURE_PNG
    plot_reproduction(label, curves, png, title=f"{label}: {name}",
                      per_agent=label in PER_AGENT)
    results.append(ConfigReproduction(name, spec.description, str(where), curves, checks,
                                      str(png)))
  result = Reproduction(label, scale, overrides, tuple(results),
                        {"md": str(workdir / REPORT_MD), "json": str(workdir / REPORT_JSON)})
  atomic_write(workdir / REPORT_JSON, json.dumps(result.to_dict(), indent=2) + "\n")
  atomic_write(workdir / REPORT_MD, markdown(result, workdir))
  return result


# ---------------------------------------------------------------------------
# The report


def _cell(text: Any) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def _command(result: Reproduction) -> str:
  number = result.figure.split()[-1]
  sets = "".join(f" --set {k}={v if isinstance(v, str) else json.dumps(v)}"
                 for k, v in result.overrides.items())
  return f"neural reproduce --figure {number} --scale {result.scale} --workdir DIR{sets}"


def markdown(result: Reproduction, workdir: str | os.PathLike) -> str:
  """``reproduce.md``: the runs' round 1 / best / last, and the statements checked."""
  counts = result.counts()
  lines = [
      f"# {result.figure} at {result.scale} scale", "",
      f"`{_command(result)}` ran the shipped config"
      f"{'s' if len(result.configs) > 1 else ''} "
      + ", ".join(f"`{c.config}`" for c in result.configs) + ".", "",
      "Values are test accuracy in the paper's units (`neural.paper_rounds`): rounds "
      "numbered from 1, an AKD round is M steps, the mean over the agents, EKD's even "
      "partial sums; from the best local epoch where the run logs it (`epoch_eval`), "
      "else the end of local training (the `accuracy` column). A run "
      "`<ekd run>:akd-from-agent<s>` is the AKD run from agent s inside an EKD run (its "
      "per-model rows).", "",
      f"**{len(result.checks)} statements checked: {counts['reproduced']} reproduced, "
      f"{counts['not reproduced']} not reproduced, {counts['not testable here']} not "
      f"testable here.** A verdict is about these runs at this scale, not the paper's "
      f"own runs.", ""]
  root = Path(workdir)
  for config in result.configs:
    png = os.path.relpath(config.figure, root)
    lines += [f"## {config.config}", "", config.description, "",
              f"![{result.figure}]({png})", "", "### Runs", "",
              "| setting | run | protocol | accuracy | rounds | round 1 | best round | "
              "last round | agents: round 1 -> last |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for curve in config.curves.values():
      s = _run_summary(curve)
      if not curve.values:
        lines.append(f"| {curve.setting} | {_cell(curve.variant)} | {curve.protocol} | | "
                     f"0/{curve.rounds} | | | | |")
        continue
      agents = "; ".join(f"{a[0]:.3f} -> {a[-1]:.3f}" for a in curve.agents)
      lines.append(
          f"| {curve.setting} | {_cell(curve.variant or curve.name)} | {curve.protocol} | "
          f"{curve.accuracy} | {s['rounds_done']}/{curve.rounds} | {s['round_1']:.3f} | "
          f"{s['best_round']}: {s['best']:.3f} | {s['last_round']}: {s['last']:.3f} | "
          f"{agents} |")
    lines += ["", "### The paper's statements", "",
              "| # | statement (our words) | paper | setting | runs | rule | numbers | "
              "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, c in enumerate(config.checks, 1):
      runs = ", ".join(f"`{r}`" for r in c.runs)
      lines.append(f"| {i} | {_cell(c.statement)} | {_cell(c.source)} | {_cell(c.setting)} "
                   f"| {_cell(runs)} | {_cell(c.rule)} | {_cell(c.numbers)} | {c.verdict} |")
    lines.append("")
  return "\n".join(lines)


# ---------------------------------------------------------------------------
# The figure

_AGENT_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
                 "tab:olive", "tab:cyan", "tab:gray", "gold")
_PROTOCOL_COLORS = {"avgkd": "tab:blue", "pkd": "tab:orange", "ekd": "black",
                    "fedavg": "tab:purple", "akd": "tab:red"}
_NAMES = {"akd": "AKD", "avgkd": "AvgKD", "pkd": "PKD", "ekd": "EKD", "fedavg": "FedAvg"}
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


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
          for a in range(len(curve.agents))]


def _draw_panel(ax: Any, curves: Sequence[Curve], per_agent: bool) -> None:
  from matplotlib.ticker import MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  lines = [c for c in curves if not _baseline(c) and c.values]
  last = max((len(c.values) for c in lines), default=1)
  akd_only = all(c.protocol == "akd" for c in lines)
  for i, curve in enumerate(lines):
    rounds = np.arange(1, len(curve.values) + 1)
    start = re.search(r"agent(\d+)$", curve.variant)
    if per_agent and curve.agents:
      for a, (values, label) in enumerate(zip(curve.agents, _agent_labels(curve))):
        ax.plot(rounds, values, marker=_MARKERS[i % len(_MARKERS)], markersize=3,
                color=_AGENT_COLORS[a % len(_AGENT_COLORS)], linewidth=1.2, label=label)
      continue
    if akd_only and start:
      color = _AGENT_COLORS[(int(start.group(1)) - 1) % len(_AGENT_COLORS)]
      label = f"AKD from agent {start.group(1)}"
    elif start and ":" in curve.variant:   # an AKD run inside an EKD run
      color, label = _PROTOCOL_COLORS["akd"], f"AKD from agent {start.group(1)} (EKD's)"
    else:
      color = _PROTOCOL_COLORS.get(curve.protocol, "tab:gray")
      name = _NAMES.get(curve.protocol, curve.protocol)
      label = name if curve.variant in ("", curve.protocol) else f"{name} ({curve.variant})"
    style = ":" if ":" in curve.variant else "-"
    ax.plot(rounds, curve.values, marker=_MARKERS[i % len(_MARKERS)], markersize=3,
            color=color, linestyle=style, linewidth=1.6, label=label)
  for curve in curves:
    if _baseline(curve) and curve.values:
      ax.hlines(curve.values[0], 1, max(last, 2), linestyles="dashed", color="tab:green",
                linewidth=1.2, label=f"{'centralised' if curve.protocol == 'central' else 'local'}")


def plot_reproduction(figure: str, curves: Mapping[str, Curve], path: str | os.PathLike,
                      title: str = "", per_agent: bool = False) -> None:
  """Draws a figure's runs like the paper, one panel per setting, into ``path`` (PNG).

  Args:
    figure: "Fig. N" (the y-axis names the accuracy the curves use).
    curves: the runs' curves (:func:`paper_curves`), by run name.
    path: the PNG file (written atomically).
    title: the figure's title.
    per_agent: one line per agent (colour: agent 1 blue, agent 2 red) and a panel
      per setting and protocol run, as the paper's Figs. 5, 12-15; else one line per
      run (the agents' mean; AKD from agent 1 blue, from agent 2 red).
  """
  panels = _panels(curves, per_agent)
  settings = len({c.setting for c in curves.values()})
  cols = max(1, min(settings, 4, len(panels)))
  rows = -(-len(panels) // cols)
  fig = Figure(figsize=(4.2 * cols, 3.3 * rows))
  axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharey=True)).ravel()
  accuracy = {c.accuracy for c in curves.values() if c.values}
  for ax, (name, group) in zip(axes, panels):
    _draw_panel(ax, group, per_agent)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("round (the paper's)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
  axes[0].set_ylabel("test accuracy (" + ("best local epoch" if accuracy == {"best"} else
                                          "end of local training" if accuracy == {"last"}
                                          else "best local epoch where logged") + ")")
  for ax in axes[len(panels):]:
    ax.set_visible(False)
  fig.suptitle(title or figure, fontsize=10)
  fig.tight_layout()
  atomic_savefig(fig, path, dpi=110)
