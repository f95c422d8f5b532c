"""The paper's statements about its neural figures, and the rules that check them.

Afonin & Karimireddy describe each neural figure in words (Sec. 6.2, Sec. 6.3,
App. H and the captions): "AKD degrades with rounds", "AvgKD does not degrade",
"EKD improves with rounds", ... :data:`CLAIMS` holds them, one line each: the
figure, where the paper says it, the statement in our words, the runs it compares
and the rule that decides it from the numbers.

- **Runs** are run-name patterns (``fnmatch``), one per group the rule compares:
  ``"{p}__avgkd"``, where ``{p}`` runs over the claim's ``settings`` (the first grid
  axis of the figure's config: ``same``, ``model-het``, ..., or ``alpha=0.0``, ...;
  ``ALL``: every setting the config has), gives one check per setting. A pattern
  may match several runs (``"{p}__from-agent*"``: AKD from either agent).
  ``<ekd run>:akd-from-agent<s>`` names the AKD run from agent s inside an EKD run
  (its per-model rows).
- **Curves** (:class:`Curve`) are the paper's units (``neural.paper_rounds``):
  rounds from 1, the mean over the agents (EKD: the ensemble), per-agent values
  beside it.
- **Verdicts**: "reproduced", "not reproduced", or "not testable here" (no run
  matches at this scale, a run is unfinished, or the statement compares with
  another figure's runs). A statement that does not reproduce is reported with its
  numbers like any other.

Tolerances (accuracy is a fraction, the test sets hold 1,000 points and more):
``TOL`` = 0.02 decides "degrades", "improves", "steady" and "benefits"; ``MARGIN``
= 0.01 decides "faster" and "larger" between settings; ``TIE`` = 0.005 decides
"the best value is agent 1's at round 1".
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import fnmatch
from typing import NamedTuple
from typing import Protocol

import numpy as np

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable here"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE)

TOL = 0.02
MARGIN = 0.01
TIE = 0.005
ALL = ("*",)   # a claim's settings: every setting of the figure's config


class Curve(NamedTuple):
  """One run's test accuracy in the paper's units.

  Attributes:
    name: the run's name (``setting__variant``; ``<ekd run>:akd-from-agent<s>`` for
      an AKD run inside an EKD run).
    protocol: akd, avgkd, pkd, ekd, fedavg, central, ...
    values: per paper round (round 1 first): the mean over the agents (EKD: the
      even partial sums of the ensemble).
    agents: per agent, per paper round (``agents[a][r]``); empty for EKD's ensemble.
    local: each agent's model trained on its own labels (the paper's round 1).
    rounds: the paper rounds of the finished run.
    accuracy: "best" (best local epoch, where logged) or "last" (end of training).
    models: each agent's model name.
  """

  name: str
  protocol: str
  values: tuple[float, ...]
  agents: tuple[tuple[float, ...], ...] = ()
  local: tuple[float, ...] = ()
  rounds: int = 0
  accuracy: str = "last"
  models: tuple[str, ...] = ()

  @property
  def finished(self) -> bool:
    """Whether the run has all its rounds."""
    return len(self.values) >= max(self.rounds, 1)

  @property
  def setting(self) -> str:
    """The first part of the name (the figure's setting, e.g. ``alpha=0.1``)."""
    return self.name.partition("__")[0]

  @property
  def variant(self) -> str:
    """The rest of the name (e.g. ``avgkd``, ``from-agent1``); "" for a one-axis sweep."""
    return self.name.partition("__")[2]


class Group(NamedTuple):
  """The curves one pattern of a claim matched."""

  pattern: str
  curves: tuple[Curve, ...]


Verdict = tuple[str, str]   # (verdict, the numbers used)


class Rule(Protocol):
  """Decides a claim from the groups of curves its patterns matched."""

  @property
  def text(self) -> str:
    """The rule in words (for the report)."""
    ...

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    """``(verdict, the numbers used)``."""
    ...


def _verdict(ok: bool, numbers: str) -> Verdict:
  return (REPRODUCED if ok else NOT_REPRODUCED), numbers


def _series(curve: Curve, per_agent: bool) -> list[tuple[str, tuple[float, ...]]]:
  """``(label, values)``: the agent mean, or each agent's curve."""
  if per_agent and curve.agents:
    return [(f"{curve.name} agent {a + 1}", v) for a, v in enumerate(curve.agents)]
  return [(curve.name, curve.values)]


def _mean_values(group: Group) -> np.ndarray:
  """The group's curves averaged round by round (over the rounds all of them have)."""
  n = min(len(c.values) for c in group.curves)
  return np.mean([c.values[:n] for c in group.curves], axis=0)


def _ends(values: Sequence[float]) -> str:
  return f"{values[0]:.3f} -> {values[-1]:.3f}"


# ---------------------------------------------------------------------------
# Rules: small frozen dataclasses, called with the groups of a claim


@dataclasses.dataclass(frozen=True)
class Change:
  """Round 1 against the last round, for every curve of the first group.

  ``kind``: "degrades" (last < round 1 - tol), "no-degradation" (last >= round 1 -
  tol), "improves" (last > round 1 + tol), "no-improvement" (last <= round 1 + tol).
  ``per_agent``: check each agent's curve instead of the agents' mean.
  """

  kind: str
  tol: float = TOL
  per_agent: bool = False

  @property
  def text(self) -> str:
    """The rule in words."""
    what = {"degrades": f"last < round 1 - {self.tol:g}",
            "no-degradation": f"last >= round 1 - {self.tol:g}",
            "improves": f"last > round 1 + {self.tol:g}",
            "no-improvement": f"last <= round 1 + {self.tol:g}"}[self.kind]
    return what + (", every agent" if self.per_agent else "")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    tests = {"degrades": lambda d: d < -self.tol, "no-degradation": lambda d: d >= -self.tol,
             "improves": lambda d: d > self.tol, "no-improvement": lambda d: d <= self.tol}
    ok, parts = True, []
    for curve in groups[0].curves:
      for label, v in _series(curve, self.per_agent):
        ok &= bool(tests[self.kind](v[-1] - v[0]))
        parts.append(f"{label} {_ends(v)} ({v[-1] - v[0]:+.3f})")
    return _verdict(ok, "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class Steady:
  """The last ``last`` rounds of each curve stay within ``tol`` (``steady=False``: they do not)."""

  last: int = 3
  tol: float = TOL
  steady: bool = True

  @property
  def text(self) -> str:
    """The rule in words."""
    op = "<=" if self.steady else ">"
    return f"max - min of the last {self.last} rounds {op} {self.tol:g}"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    ok, parts = True, []
    for curve in groups[0].curves:
      if len(curve.values) < 2:
        return NOT_TESTABLE, f"{curve.name} has {len(curve.values)} round"
      tail = curve.values[-self.last:]
      spread = max(tail) - min(tail)
      ok &= (spread <= self.tol) == self.steady
      parts.append(f"{curve.name} rounds {len(curve.values) - len(tail) + 1}-"
                   f"{len(curve.values)}: {min(tail):.3f}..{max(tail):.3f} (spread {spread:.3f})")
    return _verdict(ok, "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class BelowBaseline:
  """Every round of every curve of the first group is below the second group's value.

  The baseline (the centralised run, one round) is the mean of its agents' models.
  """

  @property
  def text(self) -> str:
    """The rule in words."""
    return "every round < centralised"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    baseline = float(np.mean([c.values[0] for c in groups[1].curves]))
    ok, parts = True, []
    for curve in groups[0].curves:
      top = int(np.argmax(curve.values))
      ok &= curve.values[top] < baseline
      parts.append(f"{curve.name} max {curve.values[top]:.3f} (round {top + 1})")
    return _verdict(ok, "; ".join(parts) + f" vs centralised {baseline:.3f}")


@dataclasses.dataclass(frozen=True)
class FasterDrop:
  """The first group's drop (round 1 - last, mean over its curves) exceeds every other
  group's by more than ``margin``."""

  margin: float = MARGIN

  @property
  def text(self) -> str:
    """The rule in words."""
    return f"drop (round 1 - last) of the first > each other's + {self.margin:g}"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    drops = [float(np.mean([c.values[0] - c.values[-1] for c in g.curves])) for g in groups]
    ok = all(drops[0] > d + self.margin for d in drops[1:])
    return _verdict(ok, "drop " + ", ".join(f"{g.pattern} {d:+.3f}"
                                            for g, d in zip(groups, drops)))


_MEASURES: dict[str, Callable[[Sequence[float]], float]] = {
    "drop": lambda v: v[0] - v[-1], "gain": lambda v: v[-1] - v[0], "last": lambda v: v[-1]}


@dataclasses.dataclass(frozen=True)
class Ordered:
  """A measure of each group, groups ordered from the most heterogeneous (Alpha 0) on.

  ``measure``: "drop" (round 1 - last), "gain" (last - round 1) or "last" (the last
  round), averaged over a group's curves. ``shrinks``: the measure falls along the
  groups (else it grows): each step at most ``tol`` the wrong way, and the first and
  the last group apart by more than ``margin`` the right way. ``per_agent``: the
  order must hold for each agent.
  """

  measure: str
  shrinks: bool = True
  tol: float = TOL
  margin: float = MARGIN
  per_agent: bool = False

  @property
  def text(self) -> str:
    """The rule in words."""
    way = "falls" if self.shrinks else "rises"
    return (f"{self.measure} {way} from the first run to the last: steps at most "
            f"{self.tol:g} the other way, ends apart by > {self.margin:g}"
            + (", every agent" if self.per_agent else ""))

  def _holds(self, values: Sequence[float]) -> bool:
    s = [-v for v in values] if self.shrinks else list(values)   # should rise
    steps_ok = all(b >= a - self.tol for a, b in zip(s, s[1:]))
    return steps_ok and s[-1] > s[0] + self.margin

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    f = _MEASURES[self.measure]
    agents = len(groups[0].curves[0].agents) if self.per_agent else 0
    indices: list[int | None] = list(range(agents)) if agents else [None]
    ok, parts = True, []
    for a in indices:
      values = [float(np.mean([f(c.values if a is None else c.agents[a]) for c in g.curves]))
                for g in groups]
      ok &= self._holds(values)
      who = "" if a is None else f"agent {a + 1}: "
      parts.append(who + ", ".join(f"{g.pattern} {v:+.3f}" if self.measure != "last"
                                   else f"{g.pattern} {v:.3f}" for g, v in zip(groups, values)))
    return _verdict(ok, f"{self.measure} " + "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class Outperforms:
  """The first group above the second: at the last round, or at every common round."""

  every_round: bool = False
  margin: float = 0.0

  @property
  def text(self) -> str:
    """The rule in words."""
    when = "every round" if self.every_round else "last round"
    return f"first > second at the {when}" + (f" + {self.margin:g}" if self.margin else "")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    a, b = _mean_values(groups[0]), _mean_values(groups[1])
    if self.every_round:
      n = min(len(a), len(b))
      diff = a[:n] - b[:n]
      worst = int(np.argmin(diff))
      return _verdict(bool(np.all(diff > self.margin)),
                      f"{groups[0].pattern} - {groups[1].pattern}: min {diff[worst]:+.3f} "
                      f"(round {worst + 1}), max {np.max(diff):+.3f} over rounds 1-{n}")
    return _verdict(bool(a[-1] > b[-1] + self.margin),
                    f"last round {groups[0].pattern} {a[-1]:.3f} (round {len(a)}) vs "
                    f"{groups[1].pattern} {b[-1]:.3f} (round {len(b)})")


@dataclasses.dataclass(frozen=True)
class AgentsBenefit:
  """Every agent gains over its local model in the early rounds.

  For each curve of the first group and each agent: the agent's best value over
  paper rounds 2..``early`` exceeds its round-1 value (its model on its own labels)
  by more than ``tol``. EKD has no per-agent curve: its ensemble's best over rounds
  1..``early`` must exceed each agent's local model by more than ``tol``.
  """

  tol: float = TOL
  early: int = 5

  @property
  def text(self) -> str:
    """The rule in words."""
    return (f"each agent's best of rounds 2-{self.early} > its round 1 + {self.tol:g} "
            f"(EKD: the ensemble's best of rounds 1-{self.early} > each local model + "
            f"{self.tol:g})")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    ok, parts = True, []
    for curve in groups[0].curves:
      if curve.agents:
        if len(curve.values) < 2:
          return NOT_TESTABLE, f"{curve.name} has 1 round"
        for a, v in enumerate(curve.agents):
          best = max(v[1:self.early])
          ok &= best > v[0] + self.tol
          parts.append(f"agent {a + 1} {v[0]:.3f} -> best {best:.3f}")
      else:
        best = max(curve.values[:self.early])
        ok &= all(best > x + self.tol for x in curve.local)
        parts.append("local " + ", ".join(f"{x:.3f}" for x in curve.local)
                     + f" -> ensemble best {best:.3f}")
    return _verdict(ok, "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class BestAtRoundOne:
  """Agent ``agent``'s round-1 value is the best of all agents and rounds (within ``tol``)."""

  agent: int = 0
  tol: float = TIE

  @property
  def text(self) -> str:
    """The rule in words."""
    return (f"agent {self.agent + 1} at round 1 >= every agent at every round - {self.tol:g}")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    ok, parts = True, []
    for curve in groups[0].curves:
      mine = curve.agents[self.agent][0]
      others = [(v, a, r) for a, vs in enumerate(curve.agents) for r, v in enumerate(vs)
                if (a, r) != (self.agent, 0)]
      top, a, r = max(others)
      ok &= mine >= top - self.tol
      parts.append(f"agent {self.agent + 1} round 1 {mine:.3f}; best other: agent {a + 1} "
                   f"round {r + 1} {top:.3f}")
    return _verdict(ok, "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
  """Each curve's best round beats its last round by more than ``tol``."""

  tol: float = TOL

  @property
  def text(self) -> str:
    """The rule in words."""
    return f"best round > last round + {self.tol:g}"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    ok, parts = True, []
    for curve in groups[0].curves:
      top = int(np.argmax(curve.values))
      ok &= curve.values[top] > curve.values[-1] + self.tol
      parts.append(f"{curve.name} best {curve.values[top]:.3f} (round {top + 1}), last "
                   f"{curve.values[-1]:.3f} (round {len(curve.values)})")
    return _verdict(ok, "; ".join(parts))


@dataclasses.dataclass(frozen=True)
class OtherFigure:
  """A comparison with another figure's runs, which one reproduction does not hold."""

  figure: str

  @property
  def text(self) -> str:
    """The rule in words."""
    return f"compares with {self.figure}"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    return NOT_TESTABLE, f"needs the runs of {self.figure} beside these"


# ---------------------------------------------------------------------------
# The statements


@dataclasses.dataclass(frozen=True)
class Claim:
  """A statement the paper makes about a figure, and how it is checked.

  Attributes:
    figure: "Fig. N".
    source: where the paper says it (section, caption).
    statement: the claim, briefly, in our words.
    runs: run-name patterns, one per group the rule compares (``{p}``: the setting).
    rule: called with the groups of curves; returns ``(verdict, numbers)``.
    settings: the settings ``{p}`` runs over (one check each); ``ALL``: every
      setting of the config; ``()``: the patterns name their runs.
  """

  figure: str
  source: str
  statement: str
  runs: tuple[str, ...]
  rule: Rule
  settings: tuple[str, ...] = ()


class Check(NamedTuple):
  """The outcome of one claim in one setting.

  Attributes:
    figure, source, statement: the claim's.
    setting: the setting ``{p}`` stood for ("" for a claim naming its runs).
    runs: the runs compared (the patterns where none matched).
    rule: the rule in words.
    verdict: "reproduced", "not reproduced" or "not testable here".
    numbers: the numbers the rule used.
  """

  figure: str
  source: str
  statement: str
  setting: str
  runs: tuple[str, ...]
  rule: str
  verdict: str
  numbers: str


_ALPHAS = ("alpha=0.0", "alpha=0.01", "alpha=0.1", "alpha=1.0")   # most heterogeneous first
_HIGH = _ALPHAS[:2]   # the paper's "small Alphas", "Alpha < 0.05"
_AKD = "{p}__from-agent*"
_EKD_AKD = "{p}__ekd:akd-from-agent*"


def _by_alpha(variant: str = "") -> tuple[str, ...]:
  """One pattern per Alpha, most heterogeneous first: ``alpha=0.0__<variant>``, ..."""
  return tuple(f"{a}__{variant}" if variant else a for a in _ALPHAS)


def _akd_figure(f: str, where: str) -> tuple[Claim, ...]:
  """Figs. 4 and 11: AKD from either agent in four settings."""
  return (
      Claim(f, where, "AKD degrades with rounds", (_AKD,), Change("degrades"), ALL),
      Claim(f, where, "AKD degrades faster with regularisation",
            ("same__from-agent*", "same-no-reg__from-agent*"), FasterDrop()),
      Claim(f, where, "AKD degrades faster with model heterogeneity",
            ("model-het__from-agent*", "same__from-agent*"), FasterDrop()),
      Claim(f, where, "AKD degrades faster with data heterogeneity",
            ("data-het__from-agent*", "same__from-agent*"), FasterDrop()),
      Claim(f, "Sec. 6.2" if f == "Fig. 4" else "Sec. 6.3 (as Fig. 4)",
            "data heterogeneity speeds AKD's degradation the most",
            ("data-het__from-agent*", "same-no-reg__from-agent*", "same__from-agent*",
             "model-het__from-agent*"), FasterDrop()),
  )


def _avgkd_figure(f: str, caption: str, text: str) -> tuple[Claim, ...]:
  """Figs. 5 and 12: AvgKD and centralised in three settings."""
  return (
      Claim(f, caption, "AvgKD does not degrade", ("{p}__avgkd",), Change("no-degradation"),
            ALL),
      Claim(f, caption, "the best accuracy is agent 1's at round 1 (local training)",
            ("{p}__avgkd",), BestAtRoundOne(), ALL),
      Claim(f, text, "AvgKD converges within a few rounds", ("{p}__avgkd",), Steady(), ALL),
      Claim(f, text, "AvgKD stays below the centralised model",
            ("{p}__avgkd", "{p}__central"), BelowBaseline(), ALL),
      Claim(f, text, "model heterogeneity lowers AvgKD's accuracy",
            ("same__avgkd", "model-het__avgkd"), Outperforms()),
      Claim(f, text, "data heterogeneity lowers it more than model heterogeneity",
            ("model-het__avgkd", "data-het__avgkd"), Outperforms()),
  )


def _alpha_sweep(f: str, where: str, fedavg: bool) -> tuple[Claim, ...]:
  """Figs. 9 and 10 (App. H.2): as on MNIST, but EKD does not improve."""
  claims = (
      Claim(f, where, "PKD degrades with rounds", ("{p}__pkd",), Change("degrades"), ALL),
      Claim(f, where, "AKD degrades with rounds", (_EKD_AKD,), Change("degrades"), ALL),
      Claim(f, where, "PKD degrades faster with more data heterogeneity", _by_alpha("pkd"),
            Ordered("drop")),
      Claim(f, where, "AKD degrades faster with more data heterogeneity",
            _by_alpha("ekd:akd-from-agent*"), Ordered("drop")),
      Claim(f, where, "AvgKD converges to a steady level", ("{p}__avgkd",), Steady(), ALL),
      Claim(f, where, "both agents benefit from AvgKD in the early rounds", ("{p}__avgkd",),
            AgentsBenefit(), ALL),
      Claim(f, where, "both agents benefit from PKD in the early rounds", ("{p}__pkd",),
            AgentsBenefit(), ALL),
      Claim(f, where, "both agents benefit from EKD in the early rounds", ("{p}__ekd",),
            AgentsBenefit(), ALL),
      Claim(f, "App. H.2", "EKD does not improve with rounds", ("{p}__ekd",),
            Change("no-improvement"), ALL),
  )
  if fedavg:
    return claims + (
        Claim(f, "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
              ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH),)
  return claims + (
      Claim(f, "Sec. 6.3", "AKD and PKD degrade faster than with one model (Fig. 9)", (),
            OtherFigure("Fig. 9")),)


def _authors_pkd(claims: tuple[Claim, ...]) -> tuple[Claim, ...]:
  """Each claim about PKD, then the same claim about ``pkd-mean``, the PKD of the authors'
  code (which drew the figures; ``pkd`` follows the paper's equations)."""
  out: list[Claim] = []
  for claim in claims:
    out.append(claim)
    if any(r.endswith("__pkd") for r in claim.runs):
      runs = tuple(r + "-mean" if r.endswith("__pkd") else r for r in claim.runs)
      out.append(dataclasses.replace(claim, runs=runs,
                                     statement=f"{claim.statement} (pkd-mean)"))
  return tuple(out)


CLAIMS: tuple[Claim, ...] = _authors_pkd((
    *_akd_figure("Fig. 4", "Fig. 4 caption; Sec. 6.2"),
    *_avgkd_figure("Fig. 5", "Fig. 5 caption; Sec. 6.2", "Sec. 6.2"),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from AvgKD",
          ("{p}__avgkd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from PKD",
          ("{p}__pkd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from EKD",
          ("{p}__ekd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "AvgKD consistently outperforms FedAvg",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(every_round=True), ALL),
    Claim("Fig. 6", "Fig. 6 caption", "EKD consistently outperforms FedAvg",
          ("{p}__ekd", "{p}__fedavg"), Outperforms(every_round=True), ALL),
    Claim("Fig. 6", "Sec. 6.2", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("drop")),
    Claim("Fig. 6", "Sec. 6.2", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("drop")),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD improves over the local models", ("{p}__avgkd",),
          Change("improves"), ALL),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD's improvement is larger with more data heterogeneity",
          _by_alpha("avgkd"), Ordered("gain")),
    Claim("Fig. 6", "Sec. 6.2", "EKD improves with rounds", ("{p}__ekd",), Change("improves"),
          ALL),
    Claim("Fig. 6", "Sec. 6.2", "EKD does not reach the centralised model",
          ("{p}__ekd", "{p}__central"), BelowBaseline(), ALL),
    Claim("Fig. 6", "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "PKD degrades with rounds", ("{p}__pkd",),
          Change("degrades"), ALL),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "AKD degrades with rounds", (_EKD_AKD,),
          Change("degrades"), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("drop")),
    Claim("Fig. 8", "Fig. 8 caption", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("drop")),
    Claim("Fig. 8", "App. H.1; Sec. 6.3", "AKD and PKD degrade faster than with one model "
          "(Fig. 6)", (), OtherFigure("Fig. 6")),
    Claim("Fig. 8", "App. H.1; Sec. 6.3", "EKD does not improve with rounds", ("{p}__ekd",),
          Change("no-improvement"), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms PKD", ("{p}__avgkd", "{p}__pkd"),
          Outperforms(), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
          Outperforms(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "AvgKD converges to a steady level", ("{p}__avgkd",),
          Steady(), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD oscillates at the highest data heterogeneity",
          ("alpha=0.0__avgkd",), Steady(steady=False)),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from AvgKD in the early rounds",
          ("{p}__avgkd",), AgentsBenefit(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from PKD in the early rounds",
          ("{p}__pkd",), AgentsBenefit(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from EKD in the early rounds",
          ("{p}__ekd",), AgentsBenefit(), ALL),
    *_alpha_sweep("Fig. 9", "Fig. 9 caption; App. H.2", fedavg=True),
    *_alpha_sweep("Fig. 10", "Fig. 10 caption (as Fig. 9); App. H.2", fedavg=False),
    *_akd_figure("Fig. 11", "Fig. 11 caption; App. H.3"),
    *_avgkd_figure("Fig. 12", "Fig. 12 caption; App. H.3", "Sec. 6.3 (as Fig. 5)"),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades with rounds", ("{p}__akd",),
          Change("degrades"), ALL),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades faster with more data "
          "heterogeneity", _by_alpha("akd"), Ordered("drop")),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AvgKD does not degrade", ("{p}__avgkd",),
          Change("no-degradation"), ALL),
    Claim("Fig. 13", "App. H.4", "AvgKD's accuracy depends strongly on data heterogeneity",
          _by_alpha("avgkd"), Ordered("last", shrinks=False, margin=TOL)),
    Claim("Fig. 14", "Fig. 14 caption", "more data heterogeneity lowers both agents' accuracy",
          _by_alpha(), Ordered("last", shrinks=False, per_agent=True)),
    Claim("Fig. 14", "Fig. 14 caption", "neither agent degrades through the rounds", ("{p}",),
          Change("no-degradation", per_agent=True), ALL),
    Claim("Fig. 15", "Fig. 15 caption", "all agents benefit in the early rounds", ("{p}",),
          AgentsBenefit(), ALL),
    Claim("Fig. 15", "App. H.5", "at Alpha < 0.05 early stopping helps", ("{p}",),
          EarlyStopping(), _HIGH),
    Claim("Fig. 15", "Sec. 6.3; App. H.5", "AvgKD with M agents does not degrade", ("{p}",),
          Change("no-degradation"), ALL),
))
"""The paper's statements about its neural figures, one :class:`Claim` each."""


def figure_claims(figure: str) -> tuple[Claim, ...]:
  """The claims of ``figure`` ("Fig. N") in :data:`CLAIMS`."""
  return tuple(c for c in CLAIMS if c.figure == figure)


def _settings_of(names: Sequence[str]) -> list[str]:
  out: list[str] = []
  for name in names:
    head = name.partition("__")[0]
    if head not in out:
      out.append(head)
  return out


def evaluate(claims: Sequence[Claim], curves: Mapping[str, Curve]) -> list[Check]:
  """Checks every claim against the curves (by run name), one check per setting.

  A pattern that matches no curve, or a matched run that is unfinished, makes the
  check "not testable here"; otherwise the claim's rule decides.
  """
  checks = []
  settings = _settings_of([n for n in curves if ":" not in n])
  for claim in claims:
    for setting in (settings if claim.settings == ALL else claim.settings or ("",)):
      patterns = tuple(p.replace("{p}", setting) for p in claim.runs)
      groups = [Group(p, tuple(c for n, c in curves.items() if fnmatch.fnmatchcase(n, p)))
                for p in patterns]
      names = tuple(c.name for g in groups for c in g.curves)
      missing = [g.pattern for g in groups if not g.curves]
      unfinished = [c for g in groups for c in g.curves if not c.finished]
      rule_text = claim.rule.text
      if missing:
        verdict, numbers = NOT_TESTABLE, "no run " + ", ".join(missing) + " here"
        names = patterns
      elif unfinished:
        verdict, numbers = NOT_TESTABLE, "unfinished: " + ", ".join(
            f"{c.name} ({len(c.values)} of {c.rounds} rounds)" for c in unfinished)
      else:
        verdict, numbers = claim.rule(groups)
      checks.append(Check(claim.figure, claim.source, claim.statement, setting, names,
                          rule_text, verdict, numbers))
  return checks
