"""evidence.judge: the other papers' statements about per-seed numbers, decided by the rules'
interval, minimum effect and verdicts (each verdict reached, the Bonferroni widening of a
statement of several effects, the one-seed floor, bad input)."""

import re

import numpy as np
import pytest
from scipy import stats

from neural import evidence
from neural._src.evidence import rules


def test_one_effect_reaches_each_verdict():
  n = 1000
  assert evidence.judge(evidence.difference("a - b", [0.90, 0.91, 0.92], [0.80, 0.81, 0.80], n)
                      ).verdict == rules.REPRODUCED
  assert evidence.judge(evidence.difference("a - b", [0.80, 0.81, 0.80], [0.90, 0.91, 0.92], n)
                      ).verdict == rules.NOT_REPRODUCED
  # a tie on a large test set: the interval lies within +- MIN_EFFECT
  tie = evidence.difference("a - b", [0.900, 0.901, 0.899], [0.900, 0.900, 0.900], 10**6)
  assert evidence.judge(tie).verdict == rules.NO_DIFFERENCE
  # a real-looking gain inside the seeds' noise
  noisy = evidence.difference("a - b", [0.95, 0.80, 0.90], [0.85, 0.86, 0.84], n)
  assert evidence.judge(noisy).verdict == rules.INCONCLUSIVE


def test_the_interval_is_the_t_interval_of_the_per_seed_differences():
  a, b = np.array([0.62, 0.60, 0.65, 0.61]), np.array([0.50, 0.52, 0.49, 0.55])
  j = evidence.judge(evidence.difference("a - b", a, b, 0))   # no binomial term
  (_, e, _), = j.effects
  d = a - b
  half = stats.t.isf(0.025, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
  assert e.effect == pytest.approx(d.mean())
  assert e.noise == pytest.approx(half)
  assert j.seeds == 4


def test_an_effect_below_the_minimum_is_never_reproduced():
  # 0.005 above, interval far from 0 (huge test set, identical seeds): not a finding
  small = evidence.difference("a - b", [0.905] * 3, [0.900] * 3, 10**7)
  assert evidence.judge(small).verdict == rules.NO_DIFFERENCE
  assert evidence.judge(small._replace(theta=0.0)).verdict != rules.REPRODUCED


def test_every_effect_must_hold_and_a_contradiction_needs_the_widened_interval():
  n = 0
  good = evidence.difference("x", [0.10, 0.12, 0.11], [0.0, 0.0, 0.0], n)
  bad = evidence.difference("y", [0.0, 0.0, 0.0], [0.10, 0.12, 0.11], n)
  assert evidence.judge([good, good]).verdict == rules.REPRODUCED
  assert evidence.judge([good, bad]).verdict == rules.NOT_REPRODUCED
  # an effect contradicted at its plain interval but not at the one widened for 8
  # effects does not contradict the statement: inconclusive
  d = np.array([-0.030, -0.020, -0.040])
  e = rules.evidence(d, 0.5, 0)
  assert rules.decide(e) == rules.NOT_REPRODUCED
  assert rules.decide(e._replace(tests=8)) != rules.NOT_REPRODUCED
  weak = evidence.Effect("z", d)
  assert evidence.judge([good] * 7 + [weak]).verdict == rules.INCONCLUSIVE
  assert evidence.judge(weak).verdict == rules.NOT_REPRODUCED


def test_a_threshold_statement_and_a_scaled_one():
  within = evidence.Effect("|a - b|", [0.004, 0.006, 0.005], theta=0.03, above=False)
  assert evidence.judge(within).verdict == rules.REPRODUCED
  beyond = evidence.Effect("|a - b|", [0.10, 0.11, 0.12], theta=0.03, above=False)
  assert evidence.judge(beyond).verdict == rules.NOT_REPRODUCED
  # percentage points: the same numbers in percent give the same verdict and interval
  frac = evidence.difference("a - b", [0.50, 0.52, 0.51], [0.48, 0.47, 0.50], 600)
  pct = evidence.difference("a - b", [50, 52, 51], [48, 47, 50], 600, scale=100)
  jf, jp = evidence.judge(frac), evidence.judge(pct)
  assert jf.verdict == jp.verdict
  assert jp.effects[0][1].noise == pytest.approx(100 * jf.effects[0][1].noise)


def test_one_seed_uses_the_floor():
  one = evidence.difference("a - b", [0.93], [0.90], 0)
  assert evidence.judge(one).verdict == rules.REPRODUCED          # no noise at all
  assert evidence.judge(one, floor=0.05).verdict == rules.INCONCLUSIVE


def test_table_and_counts():
  j = evidence.judge(evidence.difference("a - b", [0.9, 0.91, 0.92], [0.8, 0.81, 0.8], 1000))
  table = evidence.judgement_table([("A beats B", "Table 1", j)])
  assert "| A beats B | Table 1 | a - b +0.107 ± " in table
  assert "| 3 | reproduced |" in table
  assert table.endswith("1 reproduced, 0 no difference, 0 inconclusive, 0 not reproduced.")


@pytest.mark.parametrize("effect, match", [
    (evidence.Effect("e", []), "per_seed"),
    (evidence.Effect("e", [0.1, float("nan")]), "per_seed"),
    (evidence.Effect("e", [0.1], accuracies=[1.5], n=10), "accuracies"),
    (evidence.Effect("e", [0.1], accuracies=[0.5], n=-1), "n: expected"),
])
def test_bad_input_names_the_argument(effect, match):
  with pytest.raises(ValueError, match=match):
    evidence.judge(effect)


def test_mismatched_seeds_and_no_effects():
  with pytest.raises(ValueError, match="one value per seed"):
    evidence.difference("a - b", [0.1, 0.2], [0.1], 10)
  with pytest.raises(ValueError, match="at least one Effect"):
    evidence.judge([])


_GOOD = dict(label="e", per_seed=[0.05, 0.06, 0.05], accuracies=[0.5, 0.6], n=360, theta=0.0,
             above=True, scale=1.0)


@pytest.mark.parametrize("field, bad", [
    # scale 0 divided the error away (inconclusive became reproduced); < 0, NaN, a bool
    ("scale", 0), ("scale", -1.0), ("scale", float("nan")), ("scale", True), ("scale", "1"),
    # NaN was reported as "± nan"
    ("n", float("nan")), ("n", 0.5), ("n", True), ("n", "360"), ("n", None), ("n", -1),
    ("theta", float("nan")), ("theta", float("inf")), ("theta", None), ("theta", False),
    ("accuracies", [0.5, float("nan")]), ("accuracies", [True, False]), ("accuracies", "ab"),
    ("accuracies", [[0.5], [0.6, 0.7]]),
    # "False" is a true string: it decided the opposite statement
    ("above", "False"), ("above", 0), ("above", None),
    ("per_seed", [[0.05, 0.06], [0.05, 0.04]]), ("per_seed", 0.05), ("per_seed", [True, False]),
    ("per_seed", ["0.05"]), ("per_seed", None), ("per_seed", [10**400]),
    ("label", None),
])
def test_every_argument_of_an_effect_is_checked(field, bad):
  effect = evidence.Effect(**{**_GOOD, field: bad})
  with pytest.raises(ValueError, match=f": {field}: expected") as info:
    evidence.judge(effect)
  assert "\n" not in str(info.value) and len(str(info.value)) < 300
  with pytest.raises(ValueError, match=f": {field}: expected"):   # among others too
    evidence.judge([evidence.Effect(**_GOOD), effect])


@pytest.mark.parametrize("floor", [-0.01, float("nan"), float("inf"), True, "0.01", None])
def test_judge_checks_its_floor(floor):
  with pytest.raises(ValueError, match="judge: floor: expected"):
    evidence.judge(evidence.Effect(**_GOOD), floor=floor)


@pytest.mark.parametrize("a, b, scale, match", [
    ([0.5, "x"], [0.4, 0.4], 1.0, "a: expected"), ([0.5, 0.5], [True, False], 1.0, "b: expected"),
    ([0.5, 0.5], [0.4, 0.4], 0.0, "scale: expected"),
])
def test_difference_checks_its_arguments(a, b, scale, match):
  with pytest.raises(ValueError, match=match):
    evidence.difference("a - b", a, b, 10, scale)


def test_numpy_scalars_are_numbers():
  effect = evidence.Effect("e", np.array([0.05, 0.06, 0.05]), np.array([0.5, 0.6]), np.int64(360),
                         np.float64(0.0), np.bool_(True), np.float32(1.0))
  assert evidence.judge(effect).verdict == evidence.judge(evidence.Effect(**_GOOD)).verdict


def test_a_bar_or_a_line_break_in_a_cell_keeps_the_table_s_columns():
  j = evidence.judge(evidence.Effect("|a| - |b|", [0.05, 0.06, 0.05], [0.5, 0.6], 360))
  table = evidence.judgement_table([("A | B beats C\nat every round", "\"p|q\" \\| r", j)])
  row = table.splitlines()[2]
  # five cells: six unescaped bars
  assert len(re.findall(r"(?<!\\)\|", row)) == 6, row
  assert "A \\| B beats C at every round" in row and "\\|a\\| - \\|b\\|" in row
  assert "\"p\\|q\" \\| r" in row
