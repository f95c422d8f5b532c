"""A reproduced figure's report: the :class:`Reproduction`, its ``reproduce.json`` and
``reproduce.md`` (the runs' table, the statements checked, the verdicts beside the control's).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from neural._src.evidence.authors import authors_curves
from neural._src.evidence.claims import APART
from neural._src.evidence.claims import IN_SCOPE
from neural._src.evidence.claims import WEAKER
from neural._src.evidence.claims import Check
from neural._src.evidence.curves import Curve
from neural._src.evidence.intervals import POWER
from neural._src.evidence.rules import CONFIDENCE
from neural._src.evidence.rules import INCONCLUSIVE
from neural._src.evidence.rules import MACHINE_SPREAD
from neural._src.evidence.rules import MIN_EFFECT
from neural._src.evidence.rules import NO_DIFFERENCE
from neural._src.evidence.rules import NOT_REPRODUCED
from neural._src.evidence.rules import NOT_TESTABLE
from neural._src.evidence.rules import REPRODUCED
from neural._src.evidence.rules import VERDICTS
from neural._src.figures.reproduce_curves import curves_to_mapping
from neural._src.runtime.environment import describe

UNSUPPORTED = "the paper's own runs do not support this at these tolerances"


# ---------------------------------------------------------------------------
# The result


@dataclasses.dataclass(frozen=True)
class ConfigReproduction:
  """One shipped config of a reproduced figure.

  Attributes:
    config: the shipped config's name.
    description: its description.
    workdir: where its runs are (``workdir/seed=k/...`` per seed).
    curves: the runs' curves in the paper's units, by run name, one row per seed.
    checks: the paper's statements, checked.
    control: the same statements checked on the authors' curves matched to these runs
      (cut to their rounds, their seeds' spread as the floor: ``authors.matched_control``),
      by (statement, setting); a check without an entry has no control (a method the
      authors never ran); empty where their logs do not cover the figure. This is
      their one seed with their test set's binomial noise alone (``borrowed=False``).
    figure: the path of the drawn figure (PNG).
    control_at_our_noise: the same with these runs' seed-to-seed spread of each check
      as the floor of the authors' one seed (a separate column, never the control's
      verdict).
  """

  config: str
  description: str
  workdir: str
  curves: dict[str, Curve]
  checks: tuple[Check, ...]
  control: dict[tuple[str, str], Check]
  figure: str
  control_at_our_noise: dict[tuple[str, str], Check] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Reproduction:
  """What :func:`neural.reproduce` ran, drew, checked and wrote.

  Attributes:
    figure: "Fig. N".
    scale: "small" or "paper".
    overrides: the config fields set for every run.
    seeds: the seeds each run ran with.
    configs: one entry per shipped config of the figure at this scale.
    paths: ``{"md": ..., "json": ...}``: the report files.
    seconds: the wall time of this call (resumed runs: only this call's part).
    seconds_total: the wall time of every call that ran in the workdir, this one included
      (``calls.jsonl``).
    calls: how many calls that is.
    environment: where the report was computed (``neural._src.runtime.environment``).
  """

  figure: str
  scale: str
  overrides: dict[str, Any]
  seeds: tuple[int, ...]
  configs: tuple[ConfigReproduction, ...]
  paths: dict[str, str]
  seconds: float = 0.0
  seconds_total: float = 0.0
  calls: int = 1
  environment: dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def checks(self) -> list[Check]:
    """Every check of every config."""
    return [c for config in self.configs for c in config.checks]

  @property
  def counted(self) -> list[Check]:
    """The checks that count as the paper's successes and failures: each sentence by
    its primary reading, in the sentence's scope, not weaker than it (one per setting)."""
    return [c for c in self.checks if c.standing == IN_SCOPE]

  @property
  def sentences(self) -> int:
    """How many of the paper's sentences the counted checks decide."""
    return len({c.quote or c.statement for c in self.counted})

  def counts(self) -> dict[str, int]:
    """How many counted checks (:attr:`counted`) got each verdict."""
    return {v: sum(c.verdict == v for c in self.counted) for v in VERDICTS}

  def apart(self) -> dict[str, list[Check]]:
    """The checks not counted, by standing: "out of scope", "by construction", "beyond
    the horizon", "second reading", "weaker than its sentence" (their verdicts are
    computed and shown)."""
    return {s: [c for c in self.checks if c.standing == s] for s in APART}

  def to_dict(self) -> dict[str, Any]:
    """The content of ``reproduce.json``."""
    return {
        "figure": self.figure, "scale": self.scale, "overrides": self.overrides,
        "seeds": list(self.seeds), "seconds": round(self.seconds, 1),
        "seconds_total": round(self.seconds_total, 1), "calls": self.calls,
        "environment": self.environment, "sentences": self.sentences,
        "counts": self.counts(),
        "apart": {s: len(checks) for s, checks in self.apart().items()},
        "configs": [{
            "config": c.config, "description": c.description, "workdir": c.workdir,
            "figure_png": c.figure,
            "runs": [_run_summary(curve) for curve in c.curves.values()],
            "curves": curves_to_mapping(c.curves),
            "statements": [_check_fields(check) | _control_fields(
                c.control.get((check.statement, check.setting)),
                c.control_at_our_noise.get((check.statement, check.setting)))
                for check in c.checks],
        } for c in self.configs]}


def _finite(value: float) -> float | None:
  return None if value != value else round(float(value), 6)   # NaN: JSON has none


def _check_fields(check: Check) -> dict[str, Any]:
  return check._asdict() | {"runs": list(check.runs), "detectable": _finite(check.detectable),
                            "margin": _finite(check.margin),
                            "near_threshold": check.near_threshold}


def _control_fields(control: Check | None, at_our_noise: Check | None = None) -> dict[str, Any]:
  return {"control": None if control is None else control.verdict,
          "control_numbers": None if control is None else control.numbers,
          "control_at_our_noise": None if at_our_noise is None else at_our_noise.verdict,
          "control_at_our_noise_numbers": None if at_our_noise is None else at_our_noise.numbers}


def _stats(values: np.ndarray) -> dict[str, Any]:
  """Mean and spread over the seeds of a (seeds,) array, rounded for the report."""
  return {"mean": float(values.mean()),
          "spread": float(values.std(ddof=1)) if len(values) > 1 else 0.0}


def _run_summary(curve: Curve) -> dict[str, Any]:
  v = curve.array()
  if not v.size:
    return {"run": curve.name, "setting": curve.setting, "variant": curve.variant,
            "protocol": curve.protocol, "seeds": curve.seeds, "rounds_done": 0,
            "rounds": curve.rounds, "finished": False}
  mean = v.mean(axis=0)
  best = int(np.argmax(mean))
  return {"run": curve.name, "setting": curve.setting, "variant": curve.variant,
          "protocol": curve.protocol, "accuracy": curve.accuracy, "models": list(curve.models),
          "seeds": curve.seeds, "test_points": curve.test_points,
          "rounds_done": curve.done, "rounds": curve.rounds, "finished": curve.finished,
          "round_1": _stats(v[:, 0]), "best_round": best + 1, "best": _stats(v[:, best]),
          "last_round": curve.done, "last": _stats(v[:, -1]),
          "agents": [{"round_1": _stats(a[:, 0]), "last": _stats(a[:, -1])}
                     for a in np.moveaxis(curve.agent_array(), 1, 0)]}


# ---------------------------------------------------------------------------
# The report


def _cell(text: Any) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def _command(result: Reproduction) -> str:
  number = result.figure.split()[-1]
  sets = "".join(f" --set {k}={v if isinstance(v, str) else json.dumps(v)}"
                 for k, v in result.overrides.items())
  return (f"neural reproduce --figure {number} --scale {result.scale} --seeds "
          f"{len(result.seeds)} --workdir DIR{sets}")


def _pm(stats: Mapping[str, float] | None) -> str:
  if not stats:
    return ""
  return f"{stats['mean']:.3f}" + (f" ± {stats['spread']:.3f}" if stats["spread"] else "")


def _duration(seconds: float) -> str:
  return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _stand_in(result: Reproduction) -> list[str]:
  """A warning where the runs use other data than the figure's statements are about."""
  data = {c.dataset for config in result.configs for c in config.curves.values() if c.dataset}
  if result.figure in ("Fig. 9", "Fig. 10") and data and "cifar10" not in data:
    return [f"**An MNIST stand-in.** The paper's {result.figure} is on CIFAR-10 with VGG; "
            f"these runs are on {', '.join(sorted(data))}. They test whether the trends the "
            "paper reports for CIFAR-10 also appear here; the statement that holds for "
            "CIFAR-10 alone (EKD does not improve) is not testable here.", ""]
  return []


def markdown(result: Reproduction, workdir: str | os.PathLike) -> str:
  """``reproduce.md``: the runs' round 1 / best / last, and the statements checked."""
  lines = [*_head(result), *_control_head(result)]
  for config in result.configs:
    lines += _config_section(result, config, Path(workdir))
  return "\n".join(lines)


def _head(result: Reproduction) -> list[str]:
  """The command, its time and environment, how a statement is decided, the headline."""
  counts = result.counts()
  seeds = len(result.seeds)
  took = f"this call took {_duration(result.seconds)}"
  if result.calls > 1:
    took += (f", {result.calls} calls in this workdir {_duration(result.seconds_total)} in "
             "all (`calls.jsonl`)")
  env = describe(result.environment) if result.environment else "not recorded"
  return [
      f"# {result.figure} at {result.scale} scale", "",
      f"`{_command(result)}` ran the shipped config"
      f"{'s' if len(result.configs) > 1 else ''} "
      + ", ".join(f"`{c.config}`" for c in result.configs)
      + f" with {seeds} seed{'s' if seeds > 1 else ''} ({', '.join(map(str, result.seeds))}); "
      f"{took}.", "", f"Computed on: {env} (`environment` in reproduce.json).", "",
      *_stand_in(result),
      "Values are test accuracy in the paper's units (`neural.evidence.paper_rounds`): rounds "
      "numbered from 1, an AKD round is M steps, the mean over the agents, EKD's even "
      "partial sums; from the best local epoch where the run logs it (`epoch_eval`), "
      "else the end of local training (the `accuracy` column); mean ± the seeds' "
      "standard deviation. A run `<ekd run>:akd-from-agent<s>` is the AKD run from agent "
      "s inside an EKD run.", "",
      "**How a statement is decided.** Its rule computes a difference of accuracies on each "
      "seed (a drop below an earlier level, a gain over round 1, a margin between two runs) "
      f"and puts a {CONFIDENCE:.0%} interval around the mean over the seeds (numbers shown "
      "as effect ± the interval's half-width): where each seed drew its own test images, "
      "Student's t on the seeds alone (their spread holds the test set's noise); where "
      "the seeds share the test images, the seeds' t plus the test set's term, paired from "
      "per-image outcomes where the runs recorded them, else the binomial bound (the column "
      "*term*). Past the threshold (0 for a direction, 0.03 for \"no material "
      f"change\") by at least {MIN_EFFECT:g}: reproduced, or not reproduced the other way; "
      f"an interval within ±{MIN_EFFECT:g}: no difference; otherwise inconclusive, with the "
      f"smallest effect these seeds decide at {POWER:.0%} power and the seeds the measured "
      "one needs (the column *power*). \"Best of rounds\" and \"at every round\" are "
      "decided round by round, the interval widened for the number of rounds (Bonferroni). "
      "A verdict whose interval or mean is within "
      f"{MACHINE_SPREAD:g} of a threshold is marked *near the threshold*: the same command "
      "on another machine moves the statistics by about that much. See "
      "docs/reproduce.md.", "",
      "**Each sentence once.** Each statement stands for the paper's own words (the column "
      "*the paper's words*). The headline counts each sentence once per setting, by its "
      "primary reading (the paper's setting: the authors' PKD, FedAvg scored by its "
      "clients). A second reading, a check weaker than its sentence, one in a setting the "
      "sentence does not cover (*out of scope*), one that holds by construction at this "
      "setup (*by construction*), or one whose runs have fewer rounds than the statement "
      "needs (*beyond the horizon*) has its verdict computed and shown apart, not counted.",
      "",
      f"**{result.sentences} sentences of the paper, {len(result.counted)} checks (one per "
      f"setting): {counts[REPRODUCED]} reproduced, {counts[NOT_REPRODUCED]} not reproduced, "
      f"{counts[NO_DIFFERENCE]} no difference, {counts[INCONCLUSIVE]} inconclusive, "
      f"{counts[NOT_TESTABLE]} not testable here"
      f"{_near_count(result.counted)}.** A verdict is about these runs at this scale.", "",
      _apart_line(result), ""]


def _near_count(checks: Sequence[Check]) -> str:
  near = sum(c.near_threshold and c.verdict != NOT_TESTABLE for c in checks)
  return f"; {near} of them near the threshold" if near else ""


def _control_head(result: Reproduction) -> list[str]:
  """What the control is and how the verdicts stand beside it."""
  controlled = [c for c in result.configs if c.control]
  if not controlled:
    return [f"The authors' logs do not cover {result.figure} (they cover Figs. 6, 8, 9 and "
            "10), so there is no control column.", ""]
  control = [c for config in controlled for c in config.control.values()]
  held = sum(c.verdict == REPRODUCED for c in control)
  tally = against_control(result)
  return [f"**The control.** The column *authors' runs* is the same rule on the curves "
          f"the authors logged for {result.figure} (their public logs: one seed, 10,000 "
          f"test images, `scripts/authors_curves.py`), cut to these runs' rounds, with their "
          f"test set's binomial noise alone (their one seed has no spread of its own): "
          f"{held} of {len(control)} checks hold there. The column *at our noise* gives "
          f"their one seed these runs' seed-to-seed spread of the same statistics as well: "
          f"what their curves would show with training as noisy as ours; it is shown, never "
          f"used as the control's verdict. A method they never ran (the paper's PKD; their "
          f"code ran pkd-mean) has no control.", "",
          f"**Beside the control**, of {sum(map(len, tally.values()))} checks: "
          f"{_verb(tally['same'], 'reaches', 'reach')} the control's decided verdict, "
          f"{_verb(tally['inconclusive'], 'is', 'are')} inconclusive here where the control "
          f"decides, {_verb(tally['undecided'], 'is', 'are')} decided here where the "
          f"control is not, {_verb(tally['neither'], 'is', 'are')} decided on neither side "
          f"(not counted as agreement), and {_verb(tally['opposite'], 'reaches', 'reach')} "
          f"another decided verdict (listed, with both sides' numbers, under each config).", ""]


def _runs_table(config: ConfigReproduction) -> list[str]:
  lines = ["| setting | run | protocol | accuracy | seeds | rounds | round 1 | best round | "
           "last round | agents: round 1 -> last |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for curve in config.curves.values():
    s = _run_summary(curve)
    if not s["rounds_done"]:
      lines.append(f"| {curve.setting} | {_cell(curve.variant)} | {curve.protocol} | | "
                   f"{curve.seeds} | 0/{curve.rounds} | | | | |")
      continue
    agents = "; ".join(f"{_pm(a['round_1'])} -> {_pm(a['last'])}" for a in s["agents"])
    lines.append(
        f"| {curve.setting} | {_cell(curve.variant or curve.name)} | {curve.protocol} | "
        f"{curve.accuracy} | {curve.seeds} | {s['rounds_done']}/{curve.rounds} | "
        f"{_pm(s['round_1'])} | {s['best_round']}: {_pm(s['best'])} | {s['last_round']}: "
        f"{_pm(s['last'])} | {agents} |")
  return lines


def _local_table(local: Mapping[str, tuple[float, float]]) -> list[str]:
  if not local:
    return []
  return ["", "### The local models beside the authors'", "",
          "Round 1 (each agent on its own labels, the agents' mean) here and in the "
          "authors' runs at each setting: where they differ by more than "
          f"{LOCAL_GAP:g}, the data split is not the authors' (e.g. fewer images per "
          "agent put fewer images of the other classes at a small Alpha), and the "
          "control's verdicts there are marked so.", "",
          "| setting | here | the authors' | difference |", "| --- | --- | --- | --- |",
          *[f"| {setting} | {ours:.3f} | {theirs:.3f} | {ours - theirs:+.3f}"
            + (" (settings differ)" if abs(ours - theirs) > LOCAL_GAP else "") + " |"
            for setting, (ours, theirs) in local.items()]]


def power_text(check: Check) -> str:
  """What an inconclusive check's seeds could decide and what its effect would need."""
  if check.verdict != INCONCLUSIVE or check.detectable != check.detectable:
    return ""
  why = ("it is below the minimum effect" if check.term == "seeds" else
         "it is below the minimum effect, or the test set's term alone is wider")
  needed = (f"no number of seeds ({why})" if check.seeds_needed < 0 else
            f"{check.seeds_needed} seeds")
  return (f"decides ±{check.detectable:.3f} at {POWER:.0%} with {check.seeds} seeds; "
          f"the measured effect needs {needed}")


def _verdict_text(check: Check) -> str:
  near = check.near_threshold and check.verdict != NOT_TESTABLE
  return check.verdict + (" (near the threshold)" if near else "")


def _config_section(result: Reproduction, config: ConfigReproduction, root: Path) -> list[str]:
  """One config: its figure, runs, local models and statements, and the lists apart."""
  png = os.path.relpath(config.figure, root)
  local = local_models(config, result.figure) if config.control else {}
  lines = [f"## {config.config}", "", config.description, "",
           f"![{result.figure}]({png})", "", "### Runs", "", *_runs_table(config),
           *_local_table(local),
           "", "### The paper's statements", "",
           "| # | statement (our words) | the paper's words | paper | setting | standing | "
           "rule | numbers | term | verdict | power | authors' runs | at our noise |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  unsupported, opposite, apart = [], [], []
  for i, c in enumerate(config.checks, 1):
    key = (c.statement, c.setting)
    ctrl = config.control.get(key)
    noisy = config.control_at_our_noise.get(key)
    mark = ("no control" if config.control else "") if ctrl is None else ctrl.verdict
    if ctrl is not None and c.setting in local and abs(
        local[c.setting][0] - local[c.setting][1]) > LOCAL_GAP:
      ours, theirs = local[c.setting]
      mark += f" (settings differ: local models {ours:.3f} here, {theirs:.3f} theirs)"
    if ctrl is not None and ctrl.verdict != REPRODUCED:
      mark += " (see below)"
      unsupported.append((i, c, ctrl))
    if _side(c, ctrl) == "opposite":
      opposite.append((i, c, ctrl))
    if c.standing != IN_SCOPE:
      apart.append((i, c))
    lines.append(f"| {i} | {_cell(c.statement)} | {_cell(_quoted(c.quote))} | "
                 f"{_cell(c.source)} | {_cell(c.setting)} | {c.standing} | {_cell(c.rule)} "
                 f"| {_cell(c.numbers)} | {c.term} | {_verdict_text(c)} | "
                 f"{_cell(power_text(c))} | {mark} | {'' if noisy is None else noisy.verdict} |")
  if apart:
    lines += ["", "### Checks apart from the headline (shown, not counted)", ""]
    lines += [f"- #{i} {c.statement}" + (f" [{c.setting}]" if c.setting else "")
              + f": {c.standing} ({c.why}): {c.verdict}: {c.numbers}" for i, c in apart]
  if unsupported:
    lines += ["", "### Where the authors' own runs do not support the statement", "",
              f"Their logged curves, through the same rules: {UNSUPPORTED}.", ""]
    lines += [f"- #{i} {c.statement}" + (f" [{c.setting}]" if c.setting else "")
              + f": {ctrl.verdict}: {ctrl.numbers}" for i, c, ctrl in unsupported]
  if opposite:
    lines += ["", "### Where these runs and the authors' reach different decided verdicts", ""]
    lines += [f"- #{i} {c.statement}" + (f" [{c.setting}]" if c.setting else "")
              + f": here {c.verdict}: {c.numbers}; the authors' runs {ctrl.verdict}: "
              f"{ctrl.numbers}" for i, c, ctrl in opposite]
  return lines + [""]


def _quoted(quote: str) -> str:
  return f"“{quote}”" if quote else ""


def _apart_line(result: Reproduction) -> str:
  """How many checks stand apart from the counts, by standing."""
  apart = result.apart()
  n = sum(map(len, apart.values()))
  if not n:
    return "No check stands apart: every one is counted."
  parts = ", ".join(f"{len(checks)} {standing}" for standing, checks in apart.items() if checks)
  failed = sum(c.verdict == NOT_REPRODUCED for c in apart[WEAKER])
  note = (f" Of the checks weaker than their sentence, {failed} {'is' if failed == 1 else 'are'}"
          " not reproduced: where a weaker statement fails, its sentence fails too."
          if failed else "")
  return (f"**{n} more {'check is' if n == 1 else 'checks are'} reported apart and not "
          f"counted** as the paper's: {parts} (listed under each config).{note}")


LOCAL_GAP = 0.05   # local models this far from the authors': another split, said beside the control


def local_models(config: ConfigReproduction, figure: str) -> dict[str, tuple[float, float]]:
  """Per setting, the local models' accuracy (round 1 of AvgKD, else of a PKD run: the
  agents' mean, mean over the seeds) here and in the authors' runs, where both exist."""
  theirs = authors_curves(figure)
  out: dict[str, tuple[float, float]] = {}
  for variant in ("avgkd", "pkd-mean", "pkd"):
    for name, curve in config.curves.items():
      other = theirs.get(name)
      if (curve.variant != variant or curve.setting in out or other is None
          or not curve.done or not other.done):
        continue
      out[curve.setting] = (float(curve.array()[:, 0].mean()), float(other.array()[0, 0]))
  return out


def _verb(items: Sequence[Any], one: str, many: str) -> str:
  return f"{len(items)} {one if len(items) == 1 else many}"


def _side(check: Check, control: Check | None) -> str | None:
  """How a check's verdict stands beside the control's (None: no control for it)."""
  if control is None:
    return None
  decided = (REPRODUCED, NOT_REPRODUCED, NO_DIFFERENCE)
  here, there = check.verdict in decided, control.verdict in decided
  if here and there:
    return "same" if check.verdict == control.verdict else "opposite"
  if here:
    return "undecided"
  return "inconclusive" if there else "neither"


def against_control(result: Reproduction) -> dict[str, list[Check]]:
  """The checks of a reproduction by how their verdicts stand beside the control's.

  Returns:
    ``"same"`` (both decide, the same verdict), ``"inconclusive"`` (here, where the
    control decides), ``"undecided"`` (decided here, the control is not), ``"neither"``
    (neither side decides: not agreement) and ``"opposite"`` (both decide, different
    verdicts); checks with no control are left out.
  """
  out: dict[str, list[Check]] = {"same": [], "inconclusive": [], "undecided": [], "neither": [],
                                 "opposite": []}
  for config in result.configs:
    for c in config.checks:
      side = _side(c, config.control.get((c.statement, c.setting)))
      if side is not None:
        out[side].append(c)
  return out
