"""The interval a statistic over seeds is decided on, the test set's term in it, and its power.

A statistic (a difference of accuracies, a drop, a gain) is measured once per seed;
its 95% interval is mean +- q * sqrt(s^2 / S + se^2) over the S seeds, with s the
seeds' sample standard deviation and q Student's t quantile at the Welch-Satterthwaite
degrees of freedom (se^2 is taken as known). What ``se``, the test set's term, is
depends on how the seeds' test images were drawn (:func:`with_test_term`):

- **own test images** (each seed drew its own test subset, as at small scale): the
  seeds' spread already holds the test set's noise, so se = 0 and the interval is the
  seeds' own t-interval on S - 1 degrees of freedom;
- **shared test images with per-image outcomes** (paper scale: every seed scored on
  the same images): se is the *paired* test-set term, the part of the seeds' mean
  statistic's variance that comes from which images make up the test set, measured by
  resampling the images with the same weights for every run compared, so both sides
  of a difference are scored on the same images (:func:`paired_terms`);
- **shared test images without outcomes** (the authors' logged curves, anyone's
  plain numbers): the unpaired binomial error sqrt(p (1 - p) / n) of an accuracy p
  near the ones compared, a cautious bound.

One seed (the control: the authors ran one) has no spread of its own: s is then the
*training-randomness floor* of :func:`noise_floor`, 0 unless given.

**Power.** :meth:`Evidence.detectable` is the smallest distance from the threshold
that the interval decides with probability ``POWER`` (80%) at these seeds, and
:meth:`Evidence.seeds_for` the seeds a given distance needs; the reports show both
beside an inconclusive verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
import contextlib
import contextvars
import math
from typing import Any
from typing import NamedTuple

import numpy as np
from scipy import stats

CONFIDENCE = 0.95  # two-sided: each interval leaves 2.5% on either side
MIN_EFFECT = 0.01  # the smallest effect a verdict rests on (1 point of accuracy)
POWER = 0.8        # the chance to decide that "detectable" refers to
DRAWS = 300        # resamples of the test images (of each kind) for a paired term
MOST_SEEDS = 1000  # the most seeds :meth:`Evidence.seeds_for` looks at

SEEDS_ONLY = "seeds"          # own test images: the seeds' t-interval alone
PAIRED = "paired"             # shared test images: + the paired term from per-image outcomes
BINOMIAL = "binomial"         # shared (or unknown) test images: + the unpaired binomial error


def binomial_se(p: float, n: int) -> float:
  """The standard error of an accuracy ``p`` measured on ``n`` test points (0 if n is 0)."""
  if n <= 0:
    return 0.0
  p = min(max(float(p), 0.0), 1.0)
  return math.sqrt(max(p * (1.0 - p), 0.25 / n) / n)


def _quantile(tail: float, seeds_part: float, test_part: float, seeds: int | np.ndarray
              ) -> Any:
  """Student's t at upper ``tail`` with the Welch-Satterthwaite degrees of freedom of
  seeds_part (on seeds - 1) plus a known test_part (the normal's where seeds_part is 0)."""
  seeds = np.asarray(seeds)
  with np.errstate(divide="ignore", invalid="ignore"):
    df = np.where((seeds > 1) & (seeds_part > 0),
                  (seeds_part + test_part) ** 2
                  / np.maximum(seeds_part ** 2 / np.maximum(seeds - 1, 1), 1e-300), np.inf)
  return stats.t.isf(tail, df)


class Evidence(NamedTuple):
  """A statistic over the seeds and the interval it is decided on.

  Attributes:
    effect: the mean over the seeds.
    spread: the seeds' standard deviation (the floor's for one seed).
    se: the test set's term, in the statistic's units (0 for own test images).
    seeds: how many seeds the mean is over.
    minimum: ``MIN_EFFECT`` in the statistic's units.
    tests: the rounds the interval is widened for (Bonferroni; 1: none).
    term: how ``se`` was found: :data:`SEEDS_ONLY`, :data:`PAIRED` or :data:`BINOMIAL`.
  """

  effect: float
  spread: float
  se: float
  seeds: int = 1
  minimum: float = MIN_EFFECT
  tests: int = 1
  term: str = BINOMIAL

  @property
  def tail(self) -> float:
    """The upper tail of each side of the interval (widened for ``tests``)."""
    return (1.0 - CONFIDENCE) / (2 * max(self.tests, 1))

  def _sem(self, seeds: Any) -> tuple[Any, Any]:
    seeds_part = self.spread ** 2 / np.maximum(seeds, 1)
    return seeds_part, self.se ** 2

  @property
  def noise(self) -> float:
    """The interval's half-width q * sqrt(spread^2 / seeds + se^2)."""
    seeds_part, test_part = self._sem(self.seeds)
    q = _quantile(self.tail, seeds_part, test_part, self.seeds)
    return float(q * math.sqrt(seeds_part + test_part))

  @property
  def interval(self) -> tuple[float, float]:
    """(low, high) at ``CONFIDENCE`` (widened for ``tests``)."""
    h = self.noise
    return self.effect - h, self.effect + h

  def _reach(self, seeds: Any, power: float) -> Any:
    """The true distance from the threshold decided with probability ``power``."""
    seeds_part, test_part = self._sem(seeds)
    q = _quantile(self.tail, seeds_part, test_part, seeds)
    z = _quantile(1.0 - power, seeds_part, test_part, seeds)
    return np.maximum((q + z) * np.sqrt(seeds_part + test_part), self.minimum)

  def detectable(self, power: float = POWER) -> float:
    """The smallest true distance of the statistic from its threshold that these seeds
    decide with probability ``power`` (at least the minimum effect): q + z_power
    standard errors, on the same degrees of freedom as the interval."""
    return float(self._reach(self.seeds, power))

  def seeds_for(self, distance: float, power: float = POWER) -> int | None:
    """The fewest seeds (>= 2) at this spread and test-set term that decide a true
    ``distance`` from the threshold with probability ``power``; None where no number
    up to :data:`MOST_SEEDS` does (the distance is below the minimum effect, or the
    test set's term alone is too wide: only more test images help)."""
    distance = abs(float(distance))
    if not math.isfinite(distance) or distance < self.minimum:
      return None
    if self.spread <= 0 and self.se <= 0:
      return 2
    seeds = np.arange(2, MOST_SEEDS + 1)
    ok = np.nonzero(self._reach(seeds, power) <= distance)[0]
    return int(seeds[ok[0]]) if ok.size else None

  def __str__(self) -> str:
    return f"{self.effect:+.3f} ± {self.noise:.3f}"


# ---------------------------------------------------------------------------
# How a rule's statistics get their test-set term, and what it decided


_FLOOR: contextvars.ContextVar[float] = contextvars.ContextVar("noise_floor", default=0.0)
_SPREADS: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "seed_spreads", default=None)
_TERM: contextvars.ContextVar[tuple[str, list[float]]] = contextvars.ContextVar(
    "test_term", default=(BINOMIAL, []))
_RECORD: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "record_effects", default=None)


@contextlib.contextmanager
def _set(var: contextvars.ContextVar, value: Any) -> Iterator[Any]:
  token = var.set(value)
  try:
    yield value
  finally:
    var.reset(token)


def noise_floor(floor: float) -> contextlib.AbstractContextManager[Any]:
  """Inside: a statistic of one seed takes ``floor`` (accuracy units, scaled with the
  statistic) as its seeds' standard deviation (the control's training randomness)."""
  return _set(_FLOOR, max(float(floor), 0.0))


def seed_spreads() -> contextlib.AbstractContextManager[list[float]]:
  """Inside: the seeds' standard deviation (accuracy units) of every statistic of two
  or more seeds a rule decides is appended to the list yielded: the floor of
  :func:`noise_floor` for the control of the same statement."""
  return _set(_SPREADS, [])


def with_test_term(term: str, paired: Sequence[float] = ()
                   ) -> contextlib.AbstractContextManager[Any]:
  """Inside: every statistic gets the test-set term ``term``: :data:`SEEDS_ONLY` (none),
  :data:`BINOMIAL`, or :data:`PAIRED` with ``paired`` the terms of the statistics in
  the order they are computed (:func:`paired_terms`; a NaN or a missing one falls back
  to the binomial error)."""
  if term not in (SEEDS_ONLY, PAIRED, BINOMIAL):
    raise ValueError(f"with_test_term: term: expected {SEEDS_ONLY!r}, {PAIRED!r} or {BINOMIAL!r}, "
                     f"got {term!r}")
  return _set(_TERM, (term, list(paired)))


def _flat(values: Any) -> np.ndarray:
  """Every number of ``values`` (arrays of any shapes, lists of them, scalars) in one vector."""
  if isinstance(values, (list, tuple)):
    return np.concatenate([_flat(v) for v in values]) if values else np.zeros(0)
  return np.ravel(np.asarray(values, dtype=float))


def evidence(per_seed: Any, accuracies: Any, n: int, scale: float = 1.0) -> Evidence:
  """The :class:`Evidence` of a statistic given per seed.

  Args:
    per_seed: the statistic, one value per seed.
    accuracies: the accuracies it compares (arrays or lists of them; their mean sets
      the binomial error).
    n: the test points (0: no test-set term).
    scale: the statistic's units per accuracy unit (a relative drop: 1 / headroom).
  """
  d = _flat(per_seed)
  scale = abs(scale)
  recorded = _RECORD.get()
  if recorded is not None:       # a resample of the test images: its mean only
    recorded.append(float(d.mean()))
    return Evidence(float(d.mean()), 0.0, 0.0, int(d.size), MIN_EFFECT * scale)
  if d.size > 1:
    spread = float(d.std(ddof=1))
    collected = _SPREADS.get()
    if collected is not None:
      collected.append(spread / scale if scale else 0.0)
  else:
    spread = _FLOOR.get() * scale
  term, paired = _TERM.get()
  if term == PAIRED:
    value = paired.pop(0) if paired else math.nan
    term = PAIRED if math.isfinite(value) else BINOMIAL
  elif term == SEEDS_ONLY:
    term = SEEDS_ONLY if d.size > 1 else BINOMIAL
  if term == PAIRED:
    se = value
  elif term == SEEDS_ONLY:
    se = 0.0
  else:
    flat = _flat(accuracies)
    se = binomial_se(float(flat.mean()), n) * scale if n and flat.size else 0.0
  return Evidence(float(d.mean()), spread, se, int(d.size), MIN_EFFECT * scale, term=term)


def paired_terms(decide: Callable[[Callable[[int], Any]], Any], outcomes: Sequence[Any],
                 draws: int = DRAWS, seed: int = 0) -> list[float]:
  """The paired test-set term of each statistic a decision computes.

  The seeds' mean statistic over S seeds scored on the same n test images varies by
  training (seed effects), by which images make up the test set (image effects) and by
  their interplay; the seeds' spread holds the first and the last, so the term is the
  image effects' share alone. Two resamplings of the images measure it: with the same
  Poisson(1) weights for every seed and run (V_shared: image effects + interplay / S)
  and with each seed's own weights (V_own: (image effects + interplay) / S), so the
  image effects' variance is (V_shared - V_own) * S / (S - 1) (at least 0; V_shared for
  one seed, which has no spread to hold the rest). Every run compared gets the same
  weights, so both sides of a difference are scored on the same resampled images.

  Args:
    decide: called once per resample with a function ``values(i)`` that gives the
      i-th run's (seeds, rounds) accuracies on the resampled test images (None for a
      run without outcomes); it must compute its statistics in the same order on every
      call, through :func:`evidence`.
    outcomes: per run, its (seeds, rounds, test points) per-image scores, or None.
    draws: the resamples of each kind.
    seed: the resampling seed (fixed: the same report every time).

  Returns:
    per statistic, in the order computed, its paired test-set term (a standard
    deviation in the statistic's units; NaN where it involves a run without outcomes).
  """
  shapes = [np.shape(o) for o in outcomes if o is not None]
  if len({s[-1] for s in shapes}) > 1 or len({s[0] for s in shapes}) > 1:
    raise ValueError(f"paired_terms: outcomes: expected one test set size and seed count, got "
                     f"shapes {shapes}")
  if not shapes:
    return []
  seeds, n = shapes[0][0], shapes[0][-1]
  rng = np.random.default_rng(seed)
  shared = np.broadcast_to(rng.poisson(1.0, size=(draws, 1, n)), (draws, seeds, n))
  own = rng.poisson(1.0, size=(draws, seeds, n))
  variances = [_resampled_variance(decide, outcomes, w.astype(float)) for w in (shared, own)]
  width = min(len(v) for v in variances)
  v_shared, v_own = (np.asarray(v[:width]) for v in variances)
  if seeds == 1:
    return [float(math.sqrt(x)) if math.isfinite(x) else math.nan for x in v_shared]
  images = np.maximum(v_shared - v_own, 0.0) * seeds / (seeds - 1)
  return [float(math.sqrt(x)) if math.isfinite(x) else math.nan for x in images]


def _resampled_variance(decide: Callable[[Callable[[int], Any]], Any], outcomes: Sequence[Any],
                        weights: np.ndarray) -> list[float]:
  """Per statistic, its variance over the resamples weighted by ``weights`` (draws, seeds,
  test points)."""
  total = np.maximum(weights.sum(axis=2), 1.0)   # (draws, seeds)
  resampled = [None if o is None else
               np.einsum("srn,bsn->bsr", np.asarray(o, dtype=float), weights) / total[..., None]
               for o in outcomes]
  rows = []
  for b in range(len(weights)):
    def values(i: int, b: int = b) -> Any:
      r = resampled[i]
      return None if r is None else r[b]
    with _set(_RECORD, []) as recorded:
      decide(values)
    rows.append(recorded)
  width = min(len(r) for r in rows)
  table = np.array([r[:width] for r in rows], dtype=float)
  with np.errstate(invalid="ignore"):
    return [float(x) for x in np.var(table, axis=0, ddof=1)]
