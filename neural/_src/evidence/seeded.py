"""Statements about numbers measured once per seed, decided as the figures' statements are.

The other papers' tables (FedDKC, multi-headed distillation, representation sharing,
D-Distillation) compare numbers after the last round, one per seed, rather than
curves. Each of their statements is reduced to one or more :class:`Effect` s, a
statistic per seed that the statement says is above (or at most) a threshold, most
often a difference of two accuracies, and :func:`judge` decides it with the
interval, the minimum effect and the verdicts of :mod:`neural._src.evidence.rules`
(docs/reproduce.md, "How a statement is decided"):

- each effect's 95% interval is mean +- q * sqrt(s^2 / S + se^2) over S seeds (s: the
  seeds' sample standard deviation; se: the binomial error of the accuracies compared
  on n test points; q: Student's t at the Welch-Satterthwaite degrees of freedom);
- an effect is reproduced when its interval is past the threshold and its mean is at
  least ``MIN_EFFECT`` past it; not reproduced when the interval is on the wrong side
  by the minimum; "no difference" when the interval lies within +- the minimum (for a
  direction, threshold 0); inconclusive otherwise;
- a statement of several effects holds when every effect does (each at its plain
  interval), and is contradicted only by an effect that is so at the interval widened
  for the number of effects (Bonferroni), as "at every round" is for the figures.

One seed has no spread of its own: pass ``floor`` (a seeds' spread measured at the
same setting) or read its verdict as resting on the test set's noise alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import numpy as np

from neural._src.evidence import rules


class Effect(NamedTuple):
  """A statistic per seed that a statement says is past a threshold.

  Attributes:
    label: what it measures, e.g. ``"KKR - FedGKT, Top-1"``.
    per_seed: the statistic, one value per seed (accuracy units unless ``scale``).
    accuracies: the accuracies it compares (their mean sets the binomial error).
    n: the test points each accuracy is measured on (0: no binomial term, e.g. a
      count or a fraction of clients).
    theta: the threshold (0: a direction, "A beats B").
    above: the statement says statistic > theta (else statistic <= theta).
    scale: the statistic's units per accuracy unit (100 for percentage points).
  """

  label: str
  per_seed: Any
  accuracies: Any = ()
  n: int = 0
  theta: float = 0.0
  above: bool = True
  scale: float = 1.0


def difference(label: str, a: Any, b: Any, n: int, scale: float = 1.0) -> Effect:
  """The effect "a > b", per seed: a - b, with the binomial error of both."""
  a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
  if a.shape != b.shape:
    raise ValueError(f"difference {label!r}: a and b need one value per seed each, got "
                     f"shapes {a.shape} and {b.shape}")
  return Effect(label, a - b, np.concatenate([a.ravel(), b.ravel()]) / scale, n, scale=scale)


class Judgement(NamedTuple):
  """A statement's verdict and, per effect, its evidence and its own verdict."""

  verdict: str
  effects: tuple[tuple[Effect, rules.Evidence, str], ...]

  @property
  def seeds(self) -> int:
    """The fewest seeds any of its effects is measured over."""
    return min((e.seeds for _, e, _ in self.effects), default=0)

  def measured(self) -> str:
    """``label +0.149 ± 0.041`` per effect (the mean and the interval's half-width
    it was decided on), with the threshold where it is not 0."""
    out = []
    for effect, e, _ in self.effects:
      bound = "" if effect.theta == 0 and effect.above else \
          f" (vs {'>' if effect.above else '<='} {effect.theta:g})"
      out.append(f"{effect.label} {e}{bound}")
    return "; ".join(out)


def _evidence(effect: Effect) -> rules.Evidence:
  values = np.ravel(np.asarray(effect.per_seed, dtype=float))
  if values.size == 0 or not np.all(np.isfinite(values)):
    raise ValueError(f"effect {effect.label!r}: per_seed: expected one finite value per "
                     f"seed, got {values}")
  accuracies = np.ravel(np.asarray(effect.accuracies, dtype=float))
  if effect.n < 0:
    raise ValueError(f"effect {effect.label!r}: n: expected test points >= 0, got {effect.n}")
  if effect.n and (accuracies.size == 0 or np.any((accuracies < 0) | (accuracies > 1))):
    raise ValueError(f"effect {effect.label!r}: accuracies: expected values in [0, 1] "
                     f"(fractions) for the binomial error of n = {effect.n}, got {accuracies}")
  return rules.evidence(values, accuracies if effect.n else 0.5, effect.n, effect.scale)


def judge(effects: Sequence[Effect] | Effect, floor: float = 0.0) -> Judgement:
  """The verdict of a statement that every one of ``effects`` holds.

  Args:
    effects: one effect, or the effects that must all hold.
    floor: the seeds' spread used for an effect of one seed (accuracy units).

  Returns:
    the :class:`Judgement`: reproduced when every effect's interval is past its
    threshold by the minimum effect; not reproduced (or no difference) when one
    effect's interval, widened for the number of effects, says so; else inconclusive.
  """
  effects = (effects,) if isinstance(effects, Effect) else tuple(effects)
  if not effects:
    raise ValueError("judge: effects: expected at least one Effect")
  with rules.noise_floor(floor):
    evidence = [_evidence(effect) for effect in effects]
  k = len(effects)
  plain = [rules.decide(e, f.theta, f.above) for f, e in zip(effects, evidence)]
  if k == 1:
    return Judgement(plain[0], ((effects[0], evidence[0], plain[0]),))
  widened = [e._replace(tests=k) for e in evidence]
  wide = [rules.decide(e, f.theta, f.above) for f, e in zip(effects, widened)]
  against = (rules.NOT_REPRODUCED, rules.NO_DIFFERENCE)
  for verdict in against:
    if verdict in wide:
      return Judgement(verdict, tuple(
          (f, w, v) if v in against else (f, e, p)
          for f, e, w, v, p in zip(effects, evidence, widened, wide, plain)))
  parts = tuple((f, e, v) for f, e, v in zip(effects, evidence, plain))
  return Judgement(rules.REPRODUCED if all(v == rules.REPRODUCED for v in plain)
                   else rules.INCONCLUSIVE, parts)


def count_verdicts(verdicts: Sequence[str]) -> str:
  """``"5 reproduced, 1 no difference, 2 inconclusive, 0 not reproduced"``."""
  order = (rules.REPRODUCED, rules.NO_DIFFERENCE, rules.INCONCLUSIVE, rules.NOT_REPRODUCED)
  counts = [f"{sum(v == verdict for v in verdicts)} {verdict}" for verdict in order]
  other = len(verdicts) - sum(v in order for v in verdicts)
  return ", ".join(counts + ([f"{other} other"] if other else []))


def judgement_table(rows: Sequence[tuple[str, str, Judgement]]) -> str:
  """A markdown table: statement | paper | measured (mean ± 95% half-width over S seeds)
  | verdict, one row per ``(statement, the paper's words or numbers, judgement)``,
  and the count of verdicts under it."""
  lines = ["| statement | paper | measured: mean ± 95% half-width over the seeds | seeds "
           "| verdict |", "| --- | --- | --- | --- | --- |"]
  for text, paper, j in rows:
    lines.append(f"| {text} | {paper} | {j.measured()} | {j.seeds} | {j.verdict} |")
  lines += ["", count_verdicts([j.verdict for _, _, j in rows]) + "."]
  return "\n".join(lines)
