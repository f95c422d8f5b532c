"""The rules that decide the paper's statements, noise-aware, on curves of several seeds.

**How a rule decides.** Every rule reduces its statement to statistics computed
on each seed's curve, all differences of accuracies, and asks whether their mean
over the seeds lies beyond a threshold ``theta`` (0 for a direction: "degrades",
"outperforms", "benefits"; ``TOL`` for no material change: "does not degrade",
"steady"), at a stated confidence:

- *the interval*: mean +- q * sqrt(s^2 / S + se^2), with S seeds, s their sample
  standard deviation of the statistic (training randomness), se the test set's
  binomial standard error sqrt(p (1 - p) / n) of an accuracy p near the ones
  compared on n test points (for the test images the seeds share: at paper scale
  all of them, and the control's one seed has no spread; at small scale each seed
  draws its own test subset, so s holds that noise too and the term counts it
  twice), and q the two-sided ``CONFIDENCE`` quantile of
  Student's t with the Welch-Satterthwaite degrees of freedom (S - 1 when the
  seeds' term dominates, towards the normal's as se does; the normal's for one seed);
- *one seed* (the control: the authors ran one) has no spread of its own: s is
  then the *training-randomness floor*, the seeds' spread of the same statistics
  in the project's own runs at the same setting (:func:`noise_floor`);
- *a minimum effect* ``MIN_EFFECT`` (in accuracy units): a statement "D > 0" is
  **reproduced** when the interval lies above 0 and the mean is at least the
  minimum, **not reproduced** (contradicted) when it lies below 0 and the mean is
  at least the minimum below, **no difference** when the interval lies within
  +- the minimum, and **inconclusive** otherwise. A statement "D <= theta" is
  reproduced when the interval lies at or below theta, not reproduced when it lies
  above and the mean exceeds theta by the minimum;
- *several rounds*: "best of rounds" asks whether some round beats the reference
  (a union: each round's interval widened for the number of rounds, Bonferroni, so
  the best of several noisy rounds is not a gain by chance) and "at every round"
  whether each does (reproduced when every round's plain interval is past the
  threshold; contradicted only by a round that is so at the widened interval, so
  more rounds do not multiply false contradictions). "Degrades" is such a union
  over the levels before the end (round 1 and each two-round mean);
- a statement about several curves or agents holds when each part holds: not
  reproduced if one part is not, else no difference if one part is, else
  inconclusive if one part is.

**The measures** (on each seed's curve v of n paper rounds). A period-2 oscillation
(AvgKD at Alpha 0) is no trend, so levels are means of two consecutive rounds:

- *round 1*: the first value (the local models); *end*: the mean of the last two rounds;
- *peak*: the largest of round 1 and every two-round mean before the end's;
- *drop from the peak*: peak - end (shown for "degrades"; negative when the curve
  ends at its best; the drop from round 1 is shown beside it); *gain*: end - round 1;
- *relative drop*: drop from the peak / (peak - ``FLOOR``): the share of the
  accuracy above chance (0.1 on the paper's 10 classes) that is lost, so a curve
  that starts near the floor (AKD at Alpha 0) is not judged slower for having
  little left to lose. "Degrades faster" compares relative drops.

Verdicts: "reproduced", "not reproduced", "no difference", "inconclusive", or
"not testable here" (no run matches, a run is unfinished, or the statement is
about data these runs do not have).
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence
import contextlib
import contextvars
import dataclasses
from typing import NamedTuple
from typing import Protocol

import numpy as np

from neural._src.evidence.curves import Curve
from neural._src.evidence.curves import Group
from neural._src.evidence.intervals import CONFIDENCE  # noqa: F401 (part of this module's API)
from neural._src.evidence.intervals import MIN_EFFECT  # noqa: F401
from neural._src.evidence.intervals import Evidence
from neural._src.evidence.intervals import binomial_se  # noqa: F401
from neural._src.evidence.intervals import evidence
from neural._src.evidence.intervals import noise_floor  # noqa: F401
from neural._src.evidence.intervals import seed_spreads  # noqa: F401

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NO_DIFFERENCE = "no difference"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable here"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NO_DIFFERENCE, INCONCLUSIVE, NOT_TESTABLE)

TOL = 0.03         # a material change of accuracy (3 points): "no degradation", "steady"
FLOOR = 0.1        # chance on the paper's 10 classes: what a relative drop is measured above
EARLY = 5          # "the early rounds": paper rounds 2..EARLY
# How far the same statistic moves between two machines: the 90th percentile of |A - B|
# over Fig. 5's statistics, each worker on one core against two (benchmarks/
# machine_spread.py; docs/reproduce.md, "The same verdicts on another machine"). A verdict
# whose margin is smaller is "near the threshold".
MACHINE_SPREAD = 0.01


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


# ---------------------------------------------------------------------------
# Measures on one seed's curve, and the decision against the noise


def levels(v: np.ndarray) -> np.ndarray:
  """Means of two consecutive rounds along the last axis (one round: itself)."""
  return v if v.shape[-1] < 2 else (v[..., 1:] + v[..., :-1]) / 2


def end(v: np.ndarray) -> np.ndarray:
  """The level at the end: the mean of the last two rounds."""
  return levels(v)[..., -1]


def before_end(v: np.ndarray) -> np.ndarray:
  """Round 1 and every two-round mean before the end's, on a new last axis."""
  lv = levels(v)
  return v[..., :1] if lv.shape[-1] < 2 else np.concatenate([v[..., :1], lv[..., :-1]], -1)


def peak(v: np.ndarray) -> np.ndarray:
  """The largest of round 1 and every two-round mean before the end's."""
  return before_end(v).max(axis=-1)


class Decision(NamedTuple):
  """One verdict a rule reached on a statistic, kept for the check's power and margin."""

  verdict: str
  evidence: Evidence
  theta: float = 0.0
  above: bool = True

  @property
  def margin(self) -> float:
    """How far the statistic (its mean and its interval together) could move before
    this verdict changes: the smallest distance of the interval's ends from the
    threshold (and from +- the minimum effect, for a direction), or of the mean from
    the threshold +- the minimum effect."""
    e, lo, hi = self.evidence, *self.evidence.interval
    edges = [lo - self.theta, hi - self.theta, abs(e.effect - self.theta) - e.minimum]
    if self.above and self.theta == 0:
      edges += [lo + e.minimum, hi - e.minimum]
    return float(min(abs(x) for x in edges))

  @property
  def distance(self) -> float:
    """The measured distance of the statistic from its threshold."""
    return abs(self.evidence.effect - self.theta)


_DECISIONS: contextvars.ContextVar[list[Decision] | None] = contextvars.ContextVar(
    "decisions", default=None)


@contextlib.contextmanager
def decisions() -> Iterator[list[Decision]]:
  """Inside: every verdict a rule reaches on a statistic (:func:`decide`, and the
  verdict of :func:`decide_any` / :func:`decide_all` on its rounds) is appended to the
  list yielded."""
  noted: list[Decision] = []
  token = _DECISIONS.set(noted)
  try:
    yield noted
  finally:
    _DECISIONS.reset(token)


def _noted(verdict: str, e: Evidence, theta: float, above: bool) -> str:
  noted = _DECISIONS.get()
  if noted is not None:
    noted.append(Decision(verdict, e, theta, above))
  return verdict


def _verdict(e: Evidence, theta: float = 0.0, above: bool = True) -> str:
  lo, hi = e.interval
  m = e.minimum
  if not above:
    if hi <= theta:
      return REPRODUCED
    return NOT_REPRODUCED if lo > theta and e.effect - theta >= m else INCONCLUSIVE
  if lo > theta and e.effect - theta >= m:
    return REPRODUCED
  if hi < theta and theta - e.effect >= m:
    return NOT_REPRODUCED
  if theta == 0 and -m < lo and hi < m:
    return NO_DIFFERENCE
  return INCONCLUSIVE


def decide(e: Evidence, theta: float = 0.0, above: bool = True) -> str:
  """A verdict for "effect > theta" (``above``) or "effect <= theta" on the interval.

  "No difference" (the interval within +- the minimum effect) is a verdict of the
  directional statements (theta 0) only.
  """
  return _noted(_verdict(e, theta, above), e, theta, above)


def decide_any(es: Sequence[Evidence], theta: float = 0.0) -> tuple[str, Evidence]:
  """"Some round: effect > theta" over the rounds' evidence: reproduced when one round's
  interval, widened for all of them, is past theta; not reproduced (no difference)
  when every round's plain interval says so (or says one of the two); else inconclusive.
  Returns the verdict and the deciding (else the largest) round's evidence."""
  verdict, e = _decide_any(es, theta)
  _noted(verdict, e, theta, True)
  return verdict, e


def _decide_any(es: Sequence[Evidence], theta: float) -> tuple[str, Evidence]:
  widened = [e._replace(tests=len(es)) for e in es]
  best = max(range(len(es)), key=lambda i: es[i].effect)
  won = [i for i, e in enumerate(widened) if _verdict(e, theta) == REPRODUCED]
  if won:
    i = max(won, key=lambda i: es[i].effect)
    return REPRODUCED, widened[i]
  plain = [_verdict(e, theta) for e in es]
  if all(v == NOT_REPRODUCED for v in plain):
    return NOT_REPRODUCED, es[best]
  if all(v in (NOT_REPRODUCED, NO_DIFFERENCE) for v in plain):
    return NO_DIFFERENCE, es[best]
  return INCONCLUSIVE, widened[best]


def decide_all(es: Sequence[Evidence], theta: float = 0.0,
               above: bool = True) -> tuple[str, Evidence]:
  """"Every round: effect > theta" (``above``; else "<= theta") over the rounds'
  evidence: reproduced when every round's plain interval says so; not reproduced (no
  difference) when one round's interval, widened for all of them, says so; else
  inconclusive. Returns the verdict and the deciding (else the worst) round's evidence."""
  verdict, e = _decide_all(es, theta, above)
  _noted(verdict, e, theta, above)
  return verdict, e


def _decide_all(es: Sequence[Evidence], theta: float, above: bool) -> tuple[str, Evidence]:
  sign = 1.0 if above else -1.0
  worst = min(range(len(es)), key=lambda i: sign * es[i].effect)
  widened = [_verdict(e._replace(tests=len(es)), theta, above) for e in es]
  for verdict in (NOT_REPRODUCED, NO_DIFFERENCE):
    if verdict in widened:
      i = min((i for i, v in enumerate(widened) if v == verdict),
              key=lambda i: sign * es[i].effect)
      return verdict, es[i]._replace(tests=len(es))
  open_rounds = [i for i, e in enumerate(es) if _verdict(e, theta, above) != REPRODUCED]
  if not open_rounds:
    return REPRODUCED, es[worst]
  # The round that keeps it open (the worst of those short of the threshold).
  return INCONCLUSIVE, es[min(open_rounds, key=lambda i: sign * es[i].effect)]


def combine(verdicts: Sequence[str]) -> str:
  """All parts must hold: not reproduced if one is not, else no difference if one shows
  none, else inconclusive if one is."""
  for verdict in (NOT_REPRODUCED, NO_DIFFERENCE, INCONCLUSIVE):
    if verdict in verdicts:
      return verdict
  return REPRODUCED


def _points(curves: Sequence[Curve]) -> int:
  return min((c.test_points for c in curves), default=0)


def _common(curves: Sequence[Curve]) -> tuple[int, int]:
  """The seeds and the rounds every curve has."""
  return min(c.seeds for c in curves), min(c.done for c in curves)


def _stack(group: Group, seeds: int, rounds: int) -> np.ndarray:
  """The group's curves as (curves, seeds, rounds)."""
  return np.stack([c.array()[:seeds, :rounds] for c in group.curves])


def _series(curve: Curve, per_agent: bool) -> list[tuple[str, np.ndarray]]:
  """``(label, (seeds, rounds) array)``: the agent mean, or each agent's curve."""
  if per_agent and curve.agents:
    a = curve.agent_array()
    return [(f"{curve.name} agent {i + 1}", a[:, i, :]) for i in range(a.shape[1])]
  return [(curve.name, curve.array())]


def _relative_drop(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(relative drop from the peak, headroom above the floor), per seed."""
  top = peak(v)
  room = np.maximum(top - FLOOR, 1e-3)
  return (top - end(v)) / room, room


# ---------------------------------------------------------------------------
# Rules: small frozen dataclasses, called with the groups of a claim


@dataclasses.dataclass(frozen=True)
class Trend:
  """A curve's direction over the rounds, for every curve of the first group.

  ``kind``: "degrades" (some level before the end above the end: round 1 and each
  two-round mean, tested one by one with widened intervals, :func:`decide_any`),
  "no-degradation" (every such level minus the end <= ``TOL``, :func:`decide_all`),
  "improves" (gain over round 1 > 0) or "no-improvement" (gain <= ``TOL``).
  ``per_agent``: each agent's curve instead of the agents' mean.
  """

  kind: str
  per_agent: bool = False

  @property
  def text(self) -> str:
    """The rule in words."""
    what = {"degrades": "some level before the end - the end > 0 (best of the levels)",
            "no-degradation": f"every level before the end - the end <= {TOL:g}",
            "improves": "gain over round 1 > 0",
            "no-improvement": f"gain over round 1 <= {TOL:g}"}[self.kind]
    return what + " beyond the noise" + (", every agent" if self.per_agent else "")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      for label, v in _series(curve, self.per_agent):
        drop, from_one, gain = peak(v) - end(v), v[:, 0] - end(v), end(v) - v[:, 0]
        n = curve.test_points
        if self.kind in ("degrades", "no-degradation"):   # each level before the end
          levels_before = before_end(v)
          drops = [evidence(levels_before[:, j] - end(v), [levels_before[:, j], end(v)], n)
                   for j in range(levels_before.shape[1])]
          verdict, e = (decide_any(drops) if self.kind == "degrades" else
                        decide_all(drops, TOL, above=False))
        else:
          e = evidence(gain, [v[:, 0], end(v)], n)
          theta, above = (0.0, True) if self.kind == "improves" else (TOL, False)
          verdict = decide(e, theta, above)
        verdicts.append(verdict)
        parts.append(f"{label}: round 1 {v[:, 0].mean():.3f}, peak {peak(v).mean():.3f}, end "
                     f"{end(v).mean():.3f}; drop from the peak {drop.mean():+.3f}, from round 1 "
                     f"{from_one.mean():+.3f}, gain {gain.mean():+.3f}; "
                     f"{'drop' if 'degrad' in self.kind else 'gain'} {e}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class Steady:
  """Each curve's level (two-round means) over its last ``share`` of the rounds varies
  by at most ``TOL`` (max - min, beyond the noise)."""

  share: float = 0.5

  @property
  def text(self) -> str:
    """The rule in words."""
    return (f"two-round means over the last {self.share:.0%} of the rounds within {TOL:g} "
            "(max - min) beyond the noise")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      v = curve.array()
      if v.shape[1] < 3:
        return NOT_TESTABLE, f"{curve.name} has {v.shape[1]} rounds"
      lv = levels(v)
      first = min(int(len(v[0]) * (1 - self.share)), lv.shape[1] - 2)
      window = lv[:, first:]
      width = window.max(axis=1) - window.min(axis=1)
      e = evidence(width, window, curve.test_points)
      verdicts.append(decide(e, TOL, above=False))
      parts.append(f"{curve.name} rounds {first + 1}-{v.shape[1]}: levels "
                   f"{window.mean(axis=0).min():.3f}..{window.mean(axis=0).max():.3f}, "
                   f"width {e}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class Oscillates:
  """Each curve swings between consecutive rounds within paper rounds ``first..last``:
  some |v[t+1] - v[t]| there exceeds ``swing`` (pair by pair, the intervals widened for
  the number of pairs: :func:`decide_any`)."""

  first: int = 2
  last: int = 6
  swing: float = 0.1

  @property
  def text(self) -> str:
    """The rule in words."""
    return (f"largest change between consecutive rounds {self.first}-{self.last} > "
            f"{self.swing:g} beyond the noise")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      v = curve.array()[:, self.first - 1:self.last]
      if v.shape[1] < 2:
        return NOT_TESTABLE, f"{curve.name} has {curve.done} rounds"
      swings = np.abs(np.diff(v, axis=1))
      verdict, e = decide_any([evidence(swings[:, r], v[:, r:r + 2], curve.test_points)
                               for r in range(swings.shape[1])], self.swing)
      verdicts.append(verdict)
      parts.append(f"{curve.name} rounds {self.first}-{self.first + v.shape[1] - 1}: "
                   + ", ".join(f"{x:.3f}" for x in v.mean(axis=0)) + f"; largest swing {e}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class BelowBaseline:
  """Every round of every curve of the first group below the second group's value (the
  centralised run: one round, the mean of its agents' models), round by round
  (:func:`decide_all`)."""

  @property
  def text(self) -> str:
    """The rule in words."""
    return "centralised - each round > 0 (every round)"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    baseline = _stack(groups[1], *_common(groups[1].curves))[:, :, 0].mean(axis=0)
    verdicts, parts = [], []
    for curve in groups[0].curves:
      v = curve.array()
      k = min(len(v), len(baseline))
      best = v[:k].max(axis=1)
      verdict, e = decide_all([evidence(baseline[:k] - v[:k, r], [v[:k, r], baseline[:k]],
                                        _points([curve])) for r in range(v.shape[1])])
      verdicts.append(verdict)
      top = int(np.argmax(v.mean(axis=0)))
      parts.append(f"{curve.name} best {best.mean():.3f} (round {top + 1}); centralised "
                   f"{baseline.mean():.3f}; margin {e}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class FasterDrop:
  """The first group's relative drop from the peak exceeds each other group's (the mean over
  each group's curves, seed by seed), and the first group degrades at all."""

  @property
  def text(self) -> str:
    """The rule in words."""
    return ("relative drop from the peak of the first > each other's, beyond the noise "
            "(and the first degrades)")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    curves = [c for g in groups for c in g.curves]
    seeds, rounds = _common(curves)
    n = _points(curves)
    arrays = [_stack(g, seeds, rounds) for g in groups]   # (curves, seeds, rounds) each
    relative = [_relative_drop(v) for v in arrays]        # per (curve, seed)
    v0, (rel0, room0) = arrays[0], relative[0]
    premise = evidence((peak(v0) - end(v0)).mean(axis=0), [peak(v0), end(v0)], n)
    verdicts, parts = [decide(premise)], [f"{groups[0].pattern} drop {premise}"]
    for g, v, (rel, room) in zip(groups[1:], arrays[1:], relative[1:]):
      e = evidence(rel0.mean(axis=0) - rel.mean(axis=0), [peak(v0), end(v0), peak(v), end(v)],
                   n, scale=1 / float(min(room0.mean(), room.mean())))
      verdicts.append(decide(e))
      parts.append(f"relative drop {groups[0].pattern} {rel0.mean():.3f} vs {g.pattern} "
                   f"{rel.mean():.3f}: {e}")
    return combine(verdicts), "; ".join(parts)


_MEASURES = ("relative drop", "gain", "end")


@dataclasses.dataclass(frozen=True)
class Ordered:
  """A measure of each group, the groups ordered from the most heterogeneous (Alpha 0) on.

  ``measure``: "relative drop" (from the peak), "gain" (end - round 1) or "end" (the
  level at the end), averaged over a group's curves seed by seed. ``shrinks``: the
  measure falls along the groups (else it rises). It holds when the first and the last
  group are apart the right way beyond the noise, no step between neighbours goes the
  wrong way by more than ``TOL`` beyond the noise, and the premise holds: for "relative
  drop", the first group degrades; for "gain", the first group improves.
  ``per_agent``: the order must hold for each agent.
  """

  measure: str
  shrinks: bool = True
  per_agent: bool = False

  @property
  def text(self) -> str:
    """The rule in words."""
    way = "falls" if self.shrinks else "rises"
    premise = {"relative drop": "; the first degrades", "gain": "; the first improves",
               "end": ""}[self.measure]
    return (f"{self.measure} {way} from the first group to the last beyond the noise, no step "
            f"back by more than {TOL:g}{premise}" + (", every agent" if self.per_agent else ""))

  def _per_seed(self, v: np.ndarray) -> tuple[np.ndarray, float]:
    """(measure per seed, its units per accuracy unit) of (curves, seeds, rounds)."""
    if self.measure == "relative drop":
      rel, room = _relative_drop(v)
      return rel.mean(axis=0), 1 / float(room.mean())
    if self.measure == "gain":
      return (end(v) - v[..., 0]).mean(axis=0), 1.0
    return end(v).mean(axis=0), 1.0

  def _premise(self, v: np.ndarray, n: int) -> tuple[str, Evidence] | None:
    """The first group's own effect that the ordering presupposes (a drop, a gain)."""
    if self.measure == "relative drop":
      return "drop", evidence((peak(v) - end(v)).mean(axis=0), [peak(v), end(v)], n)
    if self.measure == "gain":
      return "gain", evidence((end(v) - v[..., 0]).mean(axis=0), [end(v), v[..., 0]], n)
    return None

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    curves = [c for g in groups for c in g.curves]
    seeds, rounds = _common(curves)
    n = _points(curves)
    agents = min((len(c.agents[0]) for c in curves if c.agents), default=0)
    indices: list[int | None] = list(range(agents)) if self.per_agent and agents else [None]
    sign = -1.0 if self.shrinks else 1.0
    verdicts, parts = [], []
    for a in indices:
      arrays = [np.stack([c.array()[:seeds, :rounds] if a is None else
                          c.agent_array()[:seeds, a, :rounds] for c in g.curves])
                for g in groups]
      measured = [self._per_seed(v) for v in arrays]
      scale = max(s for _, s in measured)
      ends = evidence(sign * (measured[-1][0] - measured[0][0]), arrays, n, scale)
      verdicts.append(decide(ends))
      for (m0, _), (m1, _), v0, v1 in zip(measured, measured[1:], arrays, arrays[1:]):
        back = evidence(-sign * (m1 - m0), [v0, v1], n, scale)
        if _verdict(back, TOL) == REPRODUCED:   # a step clearly the wrong way
          verdicts.append(NOT_REPRODUCED)
      text = (("" if a is None else f"agent {a + 1}: ")
              + ", ".join(f"{g.pattern} {m.mean():.3f}" for g, (m, _) in zip(groups, measured))
              + f"; ends apart {ends}")
      premise = self._premise(arrays[0], n)
      if premise:
        verdicts.append(decide(premise[1]))
        text += f"; premise: {groups[0].pattern} {premise[0]} {premise[1]}"
      parts.append(text)
    return combine(verdicts), f"{self.measure} " + "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class Outperforms:
  """The first group above each other group.

  ``consistently``: at every paper round from 2 on (round 1 is local training in
  both), beyond the noise at each round; else at the end (the mean of the last two
  rounds).
  """

  consistently: bool = False

  @property
  def text(self) -> str:
    """The rule in words."""
    when = "at every round from 2" if self.consistently else "at the end"
    return f"first - each other > 0 {when}"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    curves = [c for g in groups for c in g.curves]
    seeds, rounds = _common(curves)
    n = _points(curves)
    a = _stack(groups[0], seeds, rounds).mean(axis=0)
    verdicts, parts = [], []
    for g in groups[1:]:
      b = _stack(g, seeds, rounds).mean(axis=0)
      if not self.consistently:
        e = evidence(end(a) - end(b), [end(a), end(b)], n)
        verdicts.append(decide(e))
        parts.append(f"end {groups[0].pattern} {end(a).mean():.3f} vs {g.pattern} "
                     f"{end(b).mean():.3f}: {e}")
        continue
      if rounds < 2:
        return NOT_TESTABLE, f"{rounds} round: nothing after round 1"
      per_round = [evidence(a[:, r] - b[:, r], [a[:, r], b[:, r]], n)
                   for r in range(1, rounds)]
      verdict, e = decide_all(per_round)
      verdicts.append(verdict)
      worst = per_round.index(min(per_round, key=lambda x: x.effect))
      parts.append(f"{groups[0].pattern} - {g.pattern} over rounds 2-{rounds}: smallest "
                   f"{e} (round {worst + 2}), mean "
                   f"{np.mean([x.effect for x in per_round]):+.3f}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class AgentsBenefit:
  """Every agent gains over its local model in the early rounds.

  For each curve of the first group and each agent: some paper round of 2..``EARLY``
  exceeds the agent's round 1 (its model on its own labels), round by round with the
  intervals widened for the number of rounds (:func:`decide_any`; the best of them is
  shown). EKD has no per-agent curve: some round of its ensemble's 1..``EARLY`` must
  exceed each agent's local model.
  """

  @property
  def text(self) -> str:
    """The rule in words."""
    return (f"each agent: some round of 2-{EARLY} - its round 1 > 0 (best of the rounds; EKD: "
            f"some round of the ensemble's 1-{EARLY} - each local model > 0)")

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      n = curve.test_points
      if curve.agents:
        a = curve.agent_array()
        if a.shape[2] < 2:
          return NOT_TESTABLE, f"{curve.name} has 1 round"
        for i in range(a.shape[1]):
          best = a[:, i, 1:EARLY].max(axis=1)
          verdict, e = decide_any([evidence(a[:, i, r] - a[:, i, 0], [a[:, i, r], a[:, i, 0]], n)
                                   for r in range(1, min(EARLY, a.shape[2]))])
          verdicts.append(verdict)
          parts.append(f"agent {i + 1} {a[:, i, 0].mean():.3f} -> best {best.mean():.3f}: {e}")
      elif not curve.local:
        return NOT_TESTABLE, f"{curve.name} has no per-agent values"
      else:
        v = curve.array()[:, :EARLY]
        best = v.max(axis=1)
        local = np.array(curve.local, dtype=float)[:len(best)]
        for i in range(local.shape[1]):
          verdicts.append(decide_any([evidence(v[:, r] - local[:, i], [v[:, r], local[:, i]], n)
                                      for r in range(v.shape[1])])[0])
        parts.append("local " + ", ".join(f"{x:.3f}" for x in local.mean(axis=0))
                     + f" -> ensemble best {best.mean():.3f}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class BestAtRoundOne:
  """Agent ``agent``'s round-1 value above every other agent's value at every round and its
  own later rounds, each comparison its own (:func:`decide_all`)."""

  agent: int = 0

  @property
  def text(self) -> str:
    """The rule in words."""
    return f"agent {self.agent + 1} at round 1 - each other value > 0 (every value)"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      a = curve.agent_array()
      mine = a[:, self.agent, 0]
      flat = a.reshape(len(a), -1)
      own = self.agent * a.shape[2]   # its round 1, in the flattened (agent, round) order
      verdict, e = decide_all([evidence(mine - flat[:, j], [mine, flat[:, j]], curve.test_points)
                               for j in range(flat.shape[1]) if j != own])
      verdicts.append(verdict)
      means = flat.mean(axis=0)
      means[own] = -np.inf
      where = int(np.argmax(means))
      agent, r = divmod(where, a.shape[2])
      parts.append(f"agent {self.agent + 1} round 1 {mine.mean():.3f}; best other: agent "
                   f"{agent + 1} round {r + 1} {flat.mean(axis=0)[where]:.3f}; margin {e}")
    return combine(verdicts), "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class AgentsAlike:
  """All agents repeat one pattern: each agent's curve, less its own mean over the rounds,
  stays within ``TOL`` of the agents' mean curve less its mean (largest gap, beyond the
  noise)."""

  @property
  def text(self) -> str:
    """The rule in words."""
    return f"each agent's centred curve within {TOL:g} of the agents' centred mean"

  def __call__(self, groups: Sequence[Group]) -> Verdict:
    verdicts, parts = [], []
    for curve in groups[0].curves:
      a = curve.agent_array()
      if a.shape[1] < 2:
        return NOT_TESTABLE, f"{curve.name} has no per-agent curves"
      centred = a - a.mean(axis=2, keepdims=True)
      gap = np.abs(centred - centred.mean(axis=1, keepdims=True)).max(axis=(1, 2))
      e = evidence(gap, a, curve.test_points)
      verdicts.append(decide(e, TOL, above=False))
      parts.append(f"{curve.name}: largest gap {e}")
    return combine(verdicts), "; ".join(parts)


