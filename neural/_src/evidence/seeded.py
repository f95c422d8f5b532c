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
  on n test points, for seeds scored on one shared test set; q: Student's t at the
  Welch-Satterthwaite degrees of freedom). Seeds that each drew their own test images
  already hold the test set's noise in s: give ``n=0`` and the interval is the seeds'
  own t-interval (``neural._src.evidence.intervals``);
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
import numbers
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
  for name, value in (("a", a), ("b", b)):
    if _numbers(value) is None:
      raise ValueError(f"difference {_shown(label)}: {name}: expected numbers, one per seed, "
                       f"got {_shown(value)}")
  _check_number(f"difference {_shown(label)}", "scale", scale, _real(scale) and scale > 0,
                "a finite number > 0")
  a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
  if a.shape != b.shape:
    raise ValueError(f"difference {_shown(label)}: a and b need one value per seed each, got "
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


def _shown(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 80 else text[:77] + "..."


def _real(value: Any) -> bool:
  """A finite real number (a Python or NumPy one), not a bool."""
  return (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
          and bool(np.isfinite(float(value))))


def _numbers(value: Any) -> np.ndarray | None:
  """``value`` as a float array if it holds numbers only (no bools, strings, None)."""
  try:
    array = np.asarray(value)
  except (ValueError, TypeError):   # ragged
    return None
  if array.dtype.kind not in "iuf" and not (array.size == 0 and array.dtype.kind == "f"):
    return None
  try:
    return array.astype(float)
  except OverflowError:
    return None


def _check_number(where: str, name: str, value: Any, ok: bool, expected: str) -> None:
  if not ok:
    raise ValueError(f"{where}: {name}: expected {expected}, got {_shown(value)}")


def _check_effect(effect: Effect) -> None:
  """Raises ``ValueError`` (one line naming the effect and the argument) unless every
  argument of ``effect`` has its type and range: a 1-D ``per_seed`` of finite numbers,
  finite accuracies in [0, 1] when ``n`` > 0, ``n`` an integer >= 0, ``theta`` finite,
  ``above`` a bool, ``scale`` finite and > 0 (booleans are not numbers here)."""
  where = f"effect {_shown(effect.label)}"
  if not isinstance(effect, Effect):
    raise ValueError(f"judge: effects: expected Effects, got {_shown(effect)}")
  _check_number("effect", "label", effect.label, isinstance(effect.label, str), "a string")
  values = _numbers(effect.per_seed)
  _check_number(where, "per_seed", effect.per_seed,
                values is not None and values.ndim == 1 and values.size > 0
                and bool(np.all(np.isfinite(values))),
                "a 1-D array of finite numbers, one per seed")
  n = effect.n
  _check_number(where, "n", n, isinstance(n, numbers.Integral) and not isinstance(
      n, (bool, np.bool_)) and n >= 0, "an integer >= 0 (test points)")
  accuracies = _numbers(effect.accuracies)
  _check_number(where, "accuracies", effect.accuracies,
                accuracies is not None and bool(np.all(np.isfinite(accuracies))),
                "finite numbers")
  assert accuracies is not None
  if n and (accuracies.size == 0 or np.any((accuracies < 0) | (accuracies > 1))):
    raise ValueError(f"{where}: accuracies: expected values in [0, 1] (fractions) for the "
                     f"binomial error of n = {n}, got {_shown(effect.accuracies)}")
  _check_number(where, "theta", effect.theta, _real(effect.theta), "a finite number")
  _check_number(where, "above", effect.above, isinstance(effect.above, (bool, np.bool_)),
                "True or False")
  _check_number(where, "scale", effect.scale, _real(effect.scale) and effect.scale > 0,
                "a finite number > 0")


def _evidence(effect: Effect) -> rules.Evidence:
  _check_effect(effect)
  values = np.asarray(effect.per_seed, dtype=float)
  accuracies = np.ravel(np.asarray(effect.accuracies, dtype=float))
  return rules.evidence(values, accuracies if effect.n else 0.5, int(effect.n),
                        float(effect.scale))


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
  if not _real(floor) or floor < 0:
    raise ValueError(f"judge: floor: expected a finite number >= 0, got {_shown(floor)}")
  for effect in effects:
    _check_effect(effect)
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


def _cell(text: str) -> str:
  """``text`` as one markdown table cell: ``|`` escaped, line breaks as spaces."""
  flat = str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
  return flat.replace("\\|", "|").replace("|", "\\|")


def judgement_table(rows: Sequence[tuple[str, str, Judgement]]) -> str:
  """A markdown table: statement | paper | measured (mean ± 95% half-width over S seeds)
  | verdict, one row per ``(statement, the paper's words or numbers, judgement)``,
  and the count of verdicts under it. A ``|`` in a cell is escaped (``\\|``) and a line
  break becomes a space, so every row keeps its five cells."""
  lines = ["| statement | paper | measured: mean ± 95% half-width over the seeds | seeds "
           "| verdict |", "| --- | --- | --- | --- | --- |"]
  for text, paper, j in rows:
    cells = (text, paper, j.measured(), str(j.seeds), j.verdict)
    lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
  lines += ["", count_verdicts([j.verdict for _, _, j in rows]) + "."]
  return "\n".join(lines)
