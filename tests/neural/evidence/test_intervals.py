"""The interval each way the test images can be drawn, checked against simulations with a
known answer: its coverage at the nominal 95% (each tail near 2.5%), and its power."""

import math

import numpy as np
import pytest
from scipy import stats

from neural._src.evidence import intervals
from neural._src.evidence.intervals import BINOMIAL
from neural._src.evidence.intervals import PAIRED
from neural._src.evidence.intervals import SEEDS_ONLY
from neural._src.evidence.intervals import Evidence
from neural._src.evidence.intervals import evidence
from neural._src.evidence.intervals import paired_terms
from neural._src.evidence.intervals import with_test_term

TOLERANCE = 0.015   # coverage within 1.5 points of 95%


def _coverage(lows, highs, truth):
  lows, highs = np.asarray(lows), np.asarray(highs)
  return float(np.mean((lows <= truth) & (truth <= highs))), float(np.mean(lows > truth)), \
      float(np.mean(highs < truth))


def _accuracies(rng, skill, difficulty):
  """Per-image correctness of models of the given skill (..., 1) on images of the given
  difficulty (n,): right when a standard normal draw falls below skill - difficulty."""
  return (rng.standard_normal(np.broadcast_shapes(skill.shape, difficulty.shape))
          < skill - difficulty).astype(float)


def _truth(alpha, tau):
  """The expected accuracy over images (difficulty ~ N(0, 1)) and training (skill ~
  N(alpha, tau^2)): P(Z < skill - difficulty) = Phi(alpha / sqrt(2 + tau^2))."""
  return stats.norm.cdf(alpha / math.sqrt(2 + tau ** 2))


@pytest.mark.parametrize("seeds", [3, 10])
def test_own_test_images_give_the_seeds_t_interval_at_95_percent(seeds):
  """Each seed draws its own test images: the seeds' spread holds the test set's noise,
  so the seeds' t-interval alone covers the expected difference 95% of the time."""
  rng = np.random.default_rng(0)
  sims, n, tau = 2500, 300, 0.15
  truth = _truth(1.2, tau) - _truth(1.0, tau)
  lows, highs, terms = [], [], set()
  for _ in range(sims):
    difficulty = rng.standard_normal((seeds, n))        # each seed its own images
    a = _accuracies(rng, 1.2 + tau * rng.standard_normal((seeds, 1)), difficulty)
    b = _accuracies(rng, 1.0 + tau * rng.standard_normal((seeds, 1)), difficulty)
    with with_test_term(SEEDS_ONLY):
      e = evidence(a.mean(1) - b.mean(1), [a.mean(1), b.mean(1)], n)
    assert e.se == 0.0
    terms.add(e.term)
    lows.append(e.interval[0])
    highs.append(e.interval[1])
  covered, below, above = _coverage(lows, highs, truth)
  assert terms == {SEEDS_ONLY}
  assert abs(covered - 0.95) <= TOLERANCE, covered
  assert max(below, above) <= 0.025 + TOLERANCE, (below, above)   # each tail near 2.5%


def _paired_evidence(a, b, n, draws=150, seed=0):
  """The evidence of "a > b" for runs scored on the same images: outcomes (seeds, n)."""
  outcomes = [a[:, None, :], b[:, None, :]]

  def decide(values):
    evidence(values(0)[:, 0] - values(1)[:, 0], [], n)

  terms = paired_terms(decide, outcomes, draws=draws, seed=seed)
  with with_test_term(PAIRED, terms):
    return evidence(a.mean(1) - b.mean(1), [a.mean(1), b.mean(1)], n)


@pytest.mark.parametrize("seeds", [3, 8])
def test_shared_test_images_give_the_seeds_t_plus_the_paired_term_at_95_percent(seeds):
  """Every seed is scored on one test set drawn once, whose images favour one model or
  the other (an image effect h): the seeds' spread cannot hold which images were drawn,
  the paired term adds it (and only it), and the interval covers 95% of the time."""
  rng = np.random.default_rng(1)
  sims, n, tau, h = 800, 300, 0.05, 1.0
  scale = math.sqrt(2 + h ** 2 + tau ** 2)   # skill - difficulty +- h, less a normal draw
  truth = stats.norm.cdf(1.2 / scale) - stats.norm.cdf(1.0 / scale)
  lows, highs, plain = [], [], []
  for k in range(sims):
    difficulty, favour = rng.standard_normal(n), h * rng.standard_normal(n)   # one test set
    a = _accuracies(rng, 1.2 + tau * rng.standard_normal((seeds, 1)), difficulty - favour)
    b = _accuracies(rng, 1.0 + tau * rng.standard_normal((seeds, 1)), difficulty + favour)
    e = _paired_evidence(a, b, n, draws=300, seed=k)
    assert e.term == PAIRED
    lows.append(e.interval[0])
    highs.append(e.interval[1])
    with with_test_term(SEEDS_ONLY):
      alone = evidence(a.mean(1) - b.mean(1), [], n)
    plain.append(alone.interval[0] <= truth <= alone.interval[1])
  covered, below, above = _coverage(lows, highs, truth)
  assert abs(covered - 0.95) <= TOLERANCE, (covered, below, above)
  assert max(below, above) <= 0.025 + TOLERANCE, (below, above)   # each tail near 2.5%
  # Without the term the seeds' interval misses the test set's draw: it covers less.
  assert np.mean(plain) < covered - 0.05


def test_the_paired_term_is_the_test_sets_share_alone():
  """With no image effects (every image alike) the term is about 0 however noisy each
  seed's outcomes are; with one seed it is the whole resampling spread."""
  rng = np.random.default_rng(2)
  n = 2000
  a = (rng.random((4, n)) < 0.8).astype(float)
  b = (rng.random((4, n)) < 0.7).astype(float)
  e = _paired_evidence(a, b, n, draws=300)
  assert e.se < 0.25 * math.sqrt(0.8 * 0.2 / n)
  one = _paired_evidence(a[:1], b[:1], n, draws=300)
  binomial = math.sqrt((0.8 * 0.2 + 0.7 * 0.3) / n)      # two independent accuracies
  assert one.se == pytest.approx(binomial, rel=0.15)


def test_paired_scoring_is_narrower_than_two_unpaired_accuracies():
  """Two models right on nearly the same images: their difference on one test set is far
  more precise than the accuracies' binomial errors say."""
  rng = np.random.default_rng(3)
  n = 5000
  difficulty = rng.standard_normal(n)
  a = (0.3 * rng.standard_normal((1, n)) < 1.3 - difficulty).astype(float)
  b = (0.3 * rng.standard_normal((1, n)) < 1.2 - difficulty).astype(float)
  e = _paired_evidence(a, b, n, draws=300)
  unpaired = math.hypot(intervals.binomial_se(float(a.mean()), n),
                        intervals.binomial_se(float(b.mean()), n))
  assert e.se < 0.7 * unpaired


def test_a_run_without_outcomes_falls_back_to_the_binomial_bound():
  rng = np.random.default_rng(4)
  a = (rng.random((3, 1, 100)) < 0.8).astype(float)

  def decide(values):
    evidence(values(0)[:, 0], [], 100)
    assert values(1) is None
    evidence(np.full(3, np.nan), [], 100)     # a statistic of the run without outcomes

  terms = paired_terms(decide, [a, None], draws=20)
  assert len(terms) == 2 and math.isfinite(terms[0]) and math.isnan(terms[1])
  with with_test_term(PAIRED, terms):
    first = evidence([0.1, 0.2, 0.3], [0.8], 100)
    second = evidence([0.1, 0.2, 0.3], [0.8], 100)
  assert first.term == PAIRED and second.term == BINOMIAL
  assert second.se == pytest.approx(intervals.binomial_se(0.8, 100))
  with pytest.raises(ValueError, match="outcomes: expected one test set size"):
    paired_terms(decide, [a, a[..., :50]])
  with pytest.raises(ValueError, match="term: expected"):
    with_test_term("other")


def test_power_is_what_a_simulation_of_the_same_noise_decides():
  """``detectable`` is the true distance decided 80% of the time: simulated seeds of that
  spread at that true effect reach "reproduced" about 80% of the time."""
  from neural._src.evidence.rules import decide

  spread, seeds = 0.02, 3
  reach = Evidence(0.0, spread, 0.0, seeds, term=SEEDS_ONLY).detectable()
  assert reach == pytest.approx((stats.t.isf(0.025, 2) + stats.t.ppf(0.8, 2))
                                * spread / math.sqrt(seeds))
  rng = np.random.default_rng(5)
  decided = 0
  for _ in range(4000):
    values = reach + spread * rng.standard_normal(seeds)
    with with_test_term(SEEDS_ONLY):
      decided += decide(evidence(values, [], 1000)) == "reproduced"
  # The t-quantile approximation of the noncentral t is conservative at 2 degrees of freedom.
  assert 0.75 <= decided / 4000 <= 0.9
  e = Evidence(0.02, spread, 0.0, seeds, term=SEEDS_ONLY)
  needed = e.seeds_for(0.02)
  assert needed is not None and Evidence(0, spread, 0, needed).detectable() <= 0.02 < Evidence(
      0, spread, 0, needed - 1).detectable()
  assert e.seeds_for(0.005) is None                       # below the minimum effect
  assert Evidence(0.02, spread, 0.015, 3).seeds_for(0.02) is None   # the test set too small


# ---------------------------------------------------------------------------
# evaluate: the term each check gets, its power and its margin


def _pair(rng, seeds, n, test_sets, outcomes, gap=0.02, tau=0.01, rounds=3):
  """Two runs "s__a" and "s__b" of ``rounds`` rounds, a ahead of b by about ``gap``."""
  from neural._src.evidence.curves import Curve

  difficulty = rng.standard_normal(n)
  curves = {}
  for name, skill in (("s__a", 1.3 + gap * 4), ("s__b", 1.3)):
    scores = np.stack([_accuracies(rng, skill + tau * rng.standard_normal((seeds, 1)),
                                   difficulty) for _ in range(rounds)], axis=1)   # (S, R, n)
    values = tuple(tuple(float(x) for x in row) for row in scores.mean(axis=2))
    curves[name] = Curve(name, "avgkd", values, rounds=rounds, test_points=n,
                         test_sets=test_sets, outcomes=tuple(scores) if outcomes else ())
  return curves


def test_evaluate_gives_each_check_the_term_of_how_its_test_images_were_drawn():
  from neural._src.evidence.claims import Claim
  from neural._src.evidence.claims import evaluate
  from neural._src.evidence.rules import Outperforms

  claim = Claim("Fig. T", "test", "a outperforms b", ("s__a", "s__b"), Outperforms())
  rng = np.random.default_rng(6)
  own = evaluate([claim], _pair(rng, 3, 1000, ("x:0", "x:1", "x:2"), False))[0]
  shared = _pair(rng, 3, 1000, ("x:all",) * 3, True)
  unpaired = evaluate([claim], {k: c._replace(outcomes=()) for k, c in shared.items()})[0]
  paired = evaluate([claim], shared)[0]
  assert (own.term, unpaired.term, paired.term) == (SEEDS_ONLY, BINOMIAL, PAIRED)
  assert paired.numbers.split(": ")[-1] != unpaired.numbers.split(": ")[-1]
  # Unknown test sets are read as shared (the cautious reading), as are plain numbers.
  unknown = evaluate([claim], {k: c._replace(test_sets=(), outcomes=()) for k, c in
                               shared.items()})[0]
  assert unknown.term == BINOMIAL


def test_an_inconclusive_check_says_what_its_seeds_could_decide():
  from neural._src.evidence.claims import Claim
  from neural._src.evidence.claims import evaluate
  from neural._src.evidence.rules import Outperforms
  from neural._src.figures.reproduce_report import power_text

  claim = Claim("Fig. T", "test", "a outperforms b", ("s__a", "s__b"), Outperforms())
  rng = np.random.default_rng(7)
  curves = _pair(rng, 3, 400, ("x:0", "x:1", "x:2"), False, gap=0.004, tau=0.3)
  (check,) = evaluate([claim], curves)
  assert check.verdict == "inconclusive" and check.detectable > 0.01
  text = power_text(check)
  assert text.startswith(f"decides ±{check.detectable:.3f} at 80% with 3 seeds; the measured "
                         "effect needs ")
  assert check.seeds_needed == -1 or check.seeds_needed > 3
  far = _pair(rng, 3, 2000, ("x:0", "x:1", "x:2"), False, gap=0.1, tau=0.01)
  (decided,) = evaluate([claim], far)
  assert decided.verdict == "reproduced" and power_text(decided) == ""
  assert decided.margin > 0.01 and not decided.near_threshold


def test_plain_numbers_say_how_their_test_images_were_drawn():
  import neural

  runs = {"mean": [[0.5, 0.6, 0.7, 0.75, 0.8], [0.52, 0.61, 0.69, 0.74, 0.79],
                   [0.49, 0.62, 0.7, 0.76, 0.81]], "test_points": 1000}
  own = neural.evidence.check_claims(6, {"alpha=0.0": {"ekd": {**runs, "test_sets": "own"}}})
  shared = neural.evidence.check_claims(6, {"alpha=0.0": {"ekd": runs}})
  improves = [[c for c in checks if c.statement == "EKD improves with rounds"][0]
              for checks in (own, shared)]
  assert [c.term for c in improves] == [SEEDS_ONLY, BINOMIAL]
  with pytest.raises(ValueError, match=r"\['test_sets'\]: expected 'own', 'shared' or one "
                                       r"string per seed \(3\)"):
    neural.evidence.check_claims(6, {"alpha=0.0": {"ekd": {**runs, "test_sets": ["a"]}}})
