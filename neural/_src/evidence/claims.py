"""The paper's statements about its neural figures, and the noise-aware rules that check them.

Afonin & Karimireddy describe each neural figure in words (Sec. 6.2, Sec. 6.3,
App. H and the captions): "AKD degrades with rounds", "AvgKD does not degrade",
"EKD improves with rounds", ... :data:`CLAIMS` holds them, one line each: the
figure, where the paper says it, the paper's own words (``quote``), the statement in
our words, the runs it compares and the rule that decides it from the numbers.

- **The sentence's reach.** ``scope`` holds the settings the quoted sentence covers,
  ``construction`` why a check holds by construction at this setup, ``horizon`` the
  paper rounds it needs, ``weaker`` where our statement asks less than the sentence.
  :func:`evaluate` gives each :class:`Check` its standing (:data:`STANDINGS`); only
  checks "in scope" count as the paper's successes and failures.

- **Runs** are run-name patterns (``fnmatch``), one per group the rule compares:
  ``"{p}__avgkd"``, where ``{p}`` runs over the claim's ``settings`` (the first grid
  axis of the figure's config: ``same``, ``model-het``, ..., or ``alpha=0.0``, ...;
  ``ALL``: every setting the runs have), gives one check per setting. A pattern may
  match several runs (``"{p}__from-agent*"``: AKD from either agent).
  ``<ekd run>:akd-from-agent<s>`` names the AKD run from agent s inside an EKD run.
  ``"Fig. 6/{p}__pkd"`` names a run of another figure (a cross-figure statement).
- **Curves** (:class:`Curve`) are in the paper's units (``neural.evidence.paper_rounds``):
  rounds from 1, the mean over the agents (EKD: the ensemble), per-agent values
  beside it, **one row per seed**.

The rules and what they measure are in ``neural._src.evidence.rules``; curves in
``neural._src.evidence.curves``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import fnmatch
import math
from typing import Any
from typing import NamedTuple

import numpy as np

from neural._src.evidence import intervals
from neural._src.evidence.curves import Curve
from neural._src.evidence.curves import Group
from neural._src.evidence.rules import INCONCLUSIVE
from neural._src.evidence.rules import MACHINE_SPREAD
from neural._src.evidence.rules import NOT_TESTABLE
from neural._src.evidence.rules import AgentsAlike
from neural._src.evidence.rules import AgentsBenefit
from neural._src.evidence.rules import BelowBaseline
from neural._src.evidence.rules import BestAtRoundOne
from neural._src.evidence.rules import FasterDrop
from neural._src.evidence.rules import Ordered
from neural._src.evidence.rules import Oscillates
from neural._src.evidence.rules import Outperforms
from neural._src.evidence.rules import Rule
from neural._src.evidence.rules import Steady
from neural._src.evidence.rules import Trend
from neural._src.evidence.rules import decisions
from neural._src.evidence.rules import noise_floor
from neural._src.evidence.rules import seed_spreads

ALL = ("*",)   # a claim's settings: every setting the runs have


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
      setting of the runs; ``()``: the patterns name their runs.
    datasets: the data the statement is about (``()``: any); runs on other data
      make it "not testable here".
    quote: the paper's own words the statement stands for (verbatim; fragments of one
      passage joined by `` [...] ``).
    scope: the settings the quoted sentence covers (``ALL``: every one); a check in
      another setting is "out of scope".
    construction: why the check holds by construction at this project's setup, whatever
      the methods do ("": it does not); such a check is "by construction".
    horizon: the paper rounds the statement needs; runs with fewer make the check
      "beyond the horizon".
    weaker: how our statement or rule is weaker than the sentence ("": it is not);
      such a check is listed apart ("weaker than its sentence").
    reading: why this is a second reading of its sentence ("": the primary reading,
      the paper's own setting: the authors' algorithm, the paper's scoring); such a
      check is listed apart, so that each sentence is counted once.
  """

  figure: str
  source: str
  statement: str
  runs: tuple[str, ...]
  rule: Rule
  settings: tuple[str, ...] = ()
  datasets: tuple[str, ...] = ()
  quote: str = ""
  scope: tuple[str, ...] = ALL
  construction: str = ""
  horizon: int = 1
  weaker: str = ""
  reading: str = ""


IN_SCOPE = "in scope"                    # the sentence covers it and these runs decide it
OUT_OF_SCOPE = "out of scope"            # a setting the sentence does not cover
BY_CONSTRUCTION = "by construction"      # holds at this setup whatever the methods do
BEYOND_HORIZON = "beyond the horizon"    # the runs have fewer rounds than it needs
SECOND_READING = "second reading"        # the sentence is counted by its primary reading
WEAKER = "weaker than its sentence"      # our rule asks less than the sentence says
STANDINGS = (IN_SCOPE, OUT_OF_SCOPE, BY_CONSTRUCTION, BEYOND_HORIZON, SECOND_READING, WEAKER)
APART = STANDINGS[1:]   # verdicts computed and shown, not counted as the paper's


class Check(NamedTuple):
  """The outcome of one claim in one setting.

  Attributes:
    figure: the claim's figure.
    source: where the paper says it.
    statement: the claim in our words.
    setting: the setting ``{p}`` stood for ("" for a claim naming its runs).
    runs: the runs compared (the patterns where none matched).
    rule: the rule in words.
    verdict: "reproduced", "not reproduced", "no difference", "inconclusive" or "not
      testable here".
    numbers: the numbers the rule used.
    seeds: the seeds the verdict rests on (the fewest of the runs compared).
    spread: the largest seed-to-seed standard deviation (accuracy units) of the
      statistics the rule decided on (0 for one seed): the training randomness the
      control of the same statement takes as its floor.
    standing: :data:`IN_SCOPE` (counted as the paper's success or failure) or one of
      :data:`APART` (the verdict is shown, not counted).
    quote: the paper's words the statement stands for.
    why: why the check stands apart ("" in scope).
    weaker: how the statement or its rule asks less than the sentence ("": it does not).
    term: the test set's term of its intervals ("seeds": own test images, none;
      "paired": from per-image outcomes; "binomial": the unpaired bound).
    detectable: for an inconclusive verdict, the smallest true distance from the
      threshold these seeds decide with 80% probability (the statistic's units; NaN
      where not computed).
    seeds_needed: for an inconclusive verdict, the seeds that the measured distance
      would need at 80% power (0: not computed or one seed; -1: no number of seeds
      up to 1,000 decides it: below the minimum effect, or the test set too small).
    margin: how far the statistics could move before the verdict changes (NaN where
      not decided on numbers): a verdict with a margin below the spread measured
      across machines (``rules.MACHINE_SPREAD``) is "near the threshold".
    evidence: each statistic the verdict rests on, ``effect ± half-width`` ("; "-joined).
  """

  figure: str
  source: str
  statement: str
  setting: str
  runs: tuple[str, ...]
  rule: str
  verdict: str
  numbers: str
  seeds: int = 0
  spread: float = 0.0
  standing: str = IN_SCOPE
  quote: str = ""
  why: str = ""
  weaker: str = ""
  term: str = ""
  detectable: float = math.nan
  seeds_needed: int = 0
  margin: float = math.nan
  evidence: str = ""

  @property
  def near_threshold(self) -> bool:
    """Whether the verdict could change on another machine: its margin is below the
    spread of the same statistics measured across machines."""
    return bool(self.margin < MACHINE_SPREAD)


_ALPHAS = ("alpha=0.0", "alpha=0.01", "alpha=0.1", "alpha=1.0")   # most heterogeneous first
_HIGH = _ALPHAS[:2]   # the paper's "small Alphas", "Alpha < 0.05"
_AKD = "{p}__from-agent*"
_EKD_AKD = "{p}__ekd:akd-from-agent*"
_CIFAR = ("cifar10",)
LONG = 20   # the paper's rounds: what a statement about the long run needs

# The paper's words (verbatim; " [...] " joins fragments of one passage).
_Q_AKD_DEGRADES = "In all cases, performance degrades with increasing rounds"
_Q_AKD_FASTER = ("degradation speeding up with the increase in regularization, model "
                 "heterogeneity, or data heterogeneity")
_Q_AKD_MOST = ("AKD degrades faster if there is regularization used, model heterogeneity or "
               "data heterogeneity between agents, and the last plays the most significant "
               "role")
_Q_AVGKD_NO_DEGRADATION = "In all cases, there is no degradation of performance"
_Q_BEST_ROUND_ONE = "the best accuracy is obtained by agent 1 in round 1 with only local training"
_Q_AVGKD_CONVERGES = ("AvgKD, on the other hand, quickly converges in a few rounds and does "
                      "not degrade")
_Q_AVGKD_BELOW = "However, it fails to match the centralized accuracy as well."
_Q_HETEROGENEITY = ("both data and model heterogeneity degraded the performance of AKD, PKD "
                    "(Parallel KD introduced in App. E) and AvgKD")
_Q_DATA_STRONGER = "However, data heterogeneity has a much stronger effect."
_Q_AVGKD_OVER_AKD = ("the performance of AKD significantly degrades whereas that of AvgKD "
                     "stabilizes")
_Q_FIG6_BENEFIT = ("In case of high data heterogeneity (small Alphas), both agents benefit from "
                   "the AvgKD, PKD and EKD schemes.")
_Q_FIG6_FEDAVG = ("In case of high data heterogeneity (small Alphas) [...] Moreover, AvgKD and "
                  "EKD consistently outperform FedAvg scheme.")
_Q_FASTER_ALPHA = ("Indeed, the higher data heterogeneity the faster speed of degradation for "
                   "the AKD and PKD schemes.")
_Q_AVGKD_IMPROVES = "we see that agents do improve over their local models"
_Q_AVGKD_GAIN_LARGER = "this improvement is larger with more data heterogeneity"
_Q_EKD_IMPROVES = "EKD is also the only method that improves with subsequent rounds."
_Q_EKD_BELOW = ("in the real world setting (Fig. 6) the improvement is slower and it does not "
                "match centralized performance")
_Q_OVER_FEDAVG = "is outperformed by the AvgKD scheme at highly data heterogeneous regimes"
_Q_OVER_ALL = ("AvgKD consistently outperforms all the methods at highly data heterogeneous "
               "regimes")
_Q_FIG8_DEGRADE = ("Performance of PKD and AKD degrade with degradation speeding up with the "
                   "increase in data heterogeneity.")
_Q_MODEL_FASTER = ("There is a faster degradation trend for both AKD and PKD schemes if "
                   "different models for agents are used")
_Q_FIG8_EKD = "EKD does not improve with subsequent rounds in the setting of ’different models’."
_Q_FIG8_OVER = "AvgKD scheme outperforms both PKD and AKD in all settings."
_Q_FIG8_STEADY = ("Performance of AvgKD scheme converges to steady behavior at any regime of "
                  "data heterogeneity.")
_Q_OSCILLATES = ("its convergence is not stable in extremely high heterogeneous settings, "
                 "showing large oscillations")
_Q_FIG8_BENEFIT = ("Both agents benefit from AvgKD, PKD and EKD schemes in the early rounds of "
                   "communication.")
_Q_FIG9 = ("As on MNIST: performance of PKD and AKD degrade with degradation speeding up with "
           "the increase in data heterogeneity; performance of AvgKD scheme converges to "
           "steady behavior; both agents benefit from AvgKD, PKD and EKD schemes in early "
           "rounds of communication.")
_Q_FIG10 = "All the schemes behave similarly to the ’same model’ setting."
_Q_CIFAR_EKD = "EKD does not improve in subsequent rounds in the ’same model’ setting."
_Q_CIFAR_TRENDS = "All the trends we saw on the MNIST dataset are repeated here except one"
_Q_MODEL_FASTER_10 = ("speed of degradation is higher if there is the model heterogeneity "
                      "(Figs. 8, 10)")
_Q_FIG13_AKD = "For AKD performance degrades with increasing rounds."
_Q_FIG13_FASTER = "Degradation is speeding up with the increase in data heterogeneity."
_Q_FIG13_AVGKD = "For AvgKD there is no degradation of performance."
_Q_FIG13_OVER = ("Our conclusions also hold [...] for highly heterogeneous model case with MLP "
                 "and Random Forests (Figs. 13, 14)")
_Q_FIG13_DEPENDS = ("the performance of both agents in AvgKD scheme is highly dependent on data "
                    "heterogeneity")
_Q_FIG14_LOWERS = "The increase in data heterogeneity lowers the performance of both agents"
_Q_FIG14_STEADY = "without degradation trend through rounds"
_Q_FIG15_BENEFIT = ("All agents can benefit from the distilled knowledge in early rounds of "
                    "communication.")
_Q_FIG15_ALIKE = ("We see that all the agents repeat the behavior pattern in all cases of data "
                  "heterogeneity.")
_Q_FIG15_EARLY = "(high data heterogeneity) early stopping is beneficial"
_Q_FIG15_NO_DEGRADATION = ("The AvgKD scheme does not degrade in comparison with AKD and PKD "
                           "schemes")

# Why a check holds by construction, is short of its horizon, or is weaker than its sentence.
_EKD_ENSEMBLE = ("EKD's round 1 is already the ensemble of the two local models (at high "
                 "heterogeneity two half-experts), which beats each of them before any "
                 "distillation")
_LONG_RUN = ("the sentence is about the long run (the paper's 20 rounds): a slow trend, or "
             "where a run settles, cannot be told in a few rounds")
_ORDER = ("the order along Alpha allows a step back of 0.03 between neighbours; the sentence "
          "says every step of heterogeneity")
_AT_THE_END = "tested at the end; the sentence says consistently (every round)"
_ANY_DROP = "a drop of 0.01 suffices; the sentence says the performance significantly degrades"
_FEW_ROUNDS = "no degradation over the runs' rounds; the paper shows 20"
_OTHER_FIGURES = ("the sentence is about Figs. 3-5; no sentence of the paper compares AvgKD "
                  "with AKD in Fig. 6")


def _by_alpha(variant: str = "") -> tuple[str, ...]:
  """One pattern per Alpha, most heterogeneous first: ``alpha=0.0__<variant>``, ..."""
  return tuple(f"{a}__{variant}" if variant else a for a in _ALPHAS)


def _akd_figure(f: str, where: str) -> tuple[Claim, ...]:
  """Figs. 4 and 11: AKD from either agent in four settings."""
  return (
      Claim(f, where, "AKD degrades with rounds", (_AKD,), Trend("degrades"), ALL,
            quote=_Q_AKD_DEGRADES, weaker=_ANY_DROP),
      Claim(f, where, "AKD degrades faster with regularisation",
            ("same__from-agent*", "same-no-reg__from-agent*"), FasterDrop(),
            quote=_Q_AKD_FASTER),
      Claim(f, where, "AKD degrades faster with model heterogeneity",
            ("model-het__from-agent*", "same__from-agent*"), FasterDrop(), quote=_Q_AKD_FASTER),
      Claim(f, where, "AKD degrades faster with data heterogeneity",
            ("data-het__from-agent*", "same__from-agent*"), FasterDrop(), quote=_Q_AKD_FASTER),
      Claim(f, "Sec. 6.2" if f == "Fig. 4" else "Sec. 6.3 (as Fig. 4)",
            "data heterogeneity speeds AKD's degradation the most",
            ("data-het__from-agent*", "same-no-reg__from-agent*", "same__from-agent*",
             "model-het__from-agent*"), FasterDrop(), quote=_Q_AKD_MOST),
  )


def _avgkd_figure(f: str, caption: str, text: str) -> tuple[Claim, ...]:
  """Figs. 5 and 12: AvgKD and centralised in three settings, drawn per agent."""
  return (
      Claim(f, caption, "AvgKD does not degrade (either agent)", ("{p}__avgkd",),
            Trend("no-degradation", per_agent=True), ALL, quote=_Q_AVGKD_NO_DEGRADATION,
            weaker=_FEW_ROUNDS),
      Claim(f, caption, "the best accuracy is agent 1's at round 1 (local training)",
            ("{p}__avgkd",), BestAtRoundOne(), ALL, quote=_Q_BEST_ROUND_ONE),
      Claim(f, text, "AvgKD converges within a few rounds", ("{p}__avgkd",), Steady(), ALL,
            quote=_Q_AVGKD_CONVERGES, horizon=5),
      Claim(f, text, "AvgKD stays below the centralised model",
            ("{p}__avgkd", "{p}__central"), BelowBaseline(), ALL, quote=_Q_AVGKD_BELOW),
      Claim(f, text, "model heterogeneity lowers AvgKD's accuracy",
            ("same__avgkd", "model-het__avgkd"), Outperforms(), quote=_Q_HETEROGENEITY),
      Claim(f, text, "data heterogeneity lowers it more than model heterogeneity",
            ("model-het__avgkd", "data-het__avgkd"), Outperforms(), quote=_Q_DATA_STRONGER),
  )


def _alpha_sweep(f: str, where: str, same_model: bool) -> tuple[Claim, ...]:
  """Figs. 9 and 10 (App. H.2): CIFAR-10 as on MNIST, but EKD does not improve."""
  caption = _Q_FIG9 if same_model else f"{_Q_FIG10} [...] {_Q_FIG9}"
  claims = (
      Claim(f, where, "PKD degrades with rounds", ("{p}__pkd",), Trend("degrades"), ALL,
            quote=caption),
      Claim(f, where, "AKD degrades with rounds", (_EKD_AKD,), Trend("degrades"), ALL,
            quote=caption),
      Claim(f, where, "PKD degrades faster with more data heterogeneity", _by_alpha("pkd"),
            Ordered("relative drop"), quote=caption, weaker=_ORDER),
      Claim(f, where, "AKD degrades faster with more data heterogeneity",
            _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop"), quote=caption,
            weaker=_ORDER),
      Claim(f, where, "AvgKD converges to a steady level", ("{p}__avgkd",), Steady(), ALL,
            quote=caption, horizon=LONG),
      Claim(f, where, "both agents benefit from AvgKD in the early rounds", ("{p}__avgkd",),
            AgentsBenefit(), ALL, quote=caption),
      Claim(f, where, "both agents benefit from PKD in the early rounds", ("{p}__pkd",),
            AgentsBenefit(), ALL, quote=caption),
      Claim(f, where, "both agents benefit from EKD in the early rounds", ("{p}__ekd",),
            AgentsBenefit(), ALL, quote=caption, construction=_EKD_ENSEMBLE),
      Claim(f, "App. H.2", "EKD does not improve with rounds (CIFAR-10, unlike MNIST)",
            ("{p}__ekd",), Trend("no-improvement"), ALL, _CIFAR, quote=_Q_CIFAR_EKD,
            horizon=LONG),
      Claim(f, "Sec. 6.2 (as on MNIST)", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
            Outperforms(), ALL, quote=_Q_CIFAR_TRENDS),
      Claim(f, "Sec. 6.3", "AvgKD outperforms all the methods at high data "
            "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD)
            + (("{p}__fedavg",) if same_model else ()), Outperforms(), _HIGH,
            quote=_Q_OVER_ALL, scope=_HIGH, weaker=_AT_THE_END),
  )
  if same_model:
    return claims + (
        Claim(f, "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
              ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH, quote=_Q_OVER_FEDAVG,
              scope=_HIGH),)
  return claims + _model_heterogeneity(f, "Fig. 9", "Sec. 6.3", _Q_MODEL_FASTER_10)


def _model_heterogeneity(f: str, same: str, where: str, quote: str) -> tuple[Claim, ...]:
  """AKD and PKD with two models degrade faster than with one (the ``same`` figure)."""
  return (
      Claim(f, where, f"PKD degrades faster than with one model ({same})",
            ("{p}__pkd-mean", f"{same}/{{p}}__pkd-mean"), FasterDrop(), ALL, quote=quote),
      Claim(f, where, f"AKD degrades faster than with one model ({same})",
            (_EKD_AKD, f"{same}/{_EKD_AKD}"), FasterDrop(), ALL, quote=quote),
  )


def _with_twins(claims: tuple[Claim, ...], run: str, twin: str, note: str,
                twin_primary: bool, reading: str) -> tuple[Claim, ...]:
  """Each claim, then, where it compares a run ending in ``run``, the same claim with that
  run's name extended by ``twin`` and ``note`` added to the statement. ``twin_primary``:
  the twin is the sentence's primary reading and the claim the second one (else the
  other way round); the second gets ``reading``."""
  out: list[Claim] = []
  for claim in claims:
    if not any(r.endswith(run) for r in claim.runs):
      out.append(claim)
      continue
    runs = tuple(r + twin if r.endswith(run) else r for r in claim.runs)
    other = dataclasses.replace(claim, runs=runs, statement=f"{claim.statement} ({note})")
    if twin_primary:
      out += [dataclasses.replace(claim, reading=reading), other]
    else:
      out += [claim, dataclasses.replace(other, reading=reading)]
  return tuple(out)


def _fedavg_both_ways(claims: tuple[Claim, ...]) -> tuple[Claim, ...]:
  """Each claim comparing with FedAvg (scored, as in the paper, by its clients after local
  training: the primary reading), then the same claim against FedAvg's averaged model
  (``<run>:server``: a second reading)."""
  return _with_twins(claims, "__fedavg", ":server",
                     "FedAvg's averaged model; the paper scored its clients", False,
                     "FedAvg's averaged model: the paper scored FedAvg by its clients after "
                     "local training")


def _authors_pkd(claims: tuple[Claim, ...]) -> tuple[Claim, ...]:
  """Each claim about PKD (the paper's equations: a second reading), then the same claim
  about ``pkd-mean``, the PKD of the authors' code, which drew the figures (the primary
  reading)."""
  return _with_twins(claims, "__pkd", "-mean", "pkd-mean", True,
                     "PKD by the paper's equations: the authors' code, which drew the "
                     "figures, ran pkd-mean")


CLAIMS: tuple[Claim, ...] = _fedavg_both_ways(_authors_pkd((
    *_akd_figure("Fig. 4", "Fig. 4 caption; Sec. 6.2"),
    *_avgkd_figure("Fig. 5", "Fig. 5 caption; Sec. 6.2", "Sec. 6.2"),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from AvgKD",
          ("{p}__avgkd",), AgentsBenefit(), _HIGH, quote=_Q_FIG6_BENEFIT, scope=_HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from PKD",
          ("{p}__pkd",), AgentsBenefit(), _HIGH, quote=_Q_FIG6_BENEFIT, scope=_HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from EKD",
          ("{p}__ekd",), AgentsBenefit(), _HIGH, quote=_Q_FIG6_BENEFIT, scope=_HIGH,
          construction=_EKD_ENSEMBLE),
    # The caption's "Moreover" follows its small-Alpha sentence, and Sec. 6.3 has AvgKD
    # outperform FedAvg "at highly data heterogeneous regimes": Alpha 0.1 and 1 are outside.
    Claim("Fig. 6", "Fig. 6 caption", "AvgKD consistently outperforms FedAvg",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(consistently=True), ALL,
          quote=_Q_FIG6_FEDAVG, scope=_HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "EKD consistently outperforms FedAvg",
          ("{p}__ekd", "{p}__fedavg"), Outperforms(consistently=True), ALL,
          quote=_Q_FIG6_FEDAVG, scope=_HIGH),
    Claim("Fig. 6", "Sec. 6.2", "AKD degrades with rounds", (_EKD_AKD,), Trend("degrades"),
          ALL, quote=_Q_FASTER_ALPHA),
    Claim("Fig. 6", "Sec. 6.2", "PKD degrades with rounds", ("{p}__pkd",), Trend("degrades"),
          ALL, quote=_Q_FASTER_ALPHA),
    Claim("Fig. 6", "Sec. 6.2", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop"), quote=_Q_FASTER_ALPHA,
          weaker=_ORDER),
    Claim("Fig. 6", "Sec. 6.2", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("relative drop"), quote=_Q_FASTER_ALPHA, weaker=_ORDER),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD improves over the local models", ("{p}__avgkd",),
          Trend("improves"), ALL, quote=_Q_AVGKD_IMPROVES,
          weaker="the agents' mean gains; the sentence says the agents (each) improve"),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD's improvement is larger with more data heterogeneity",
          _by_alpha("avgkd"), Ordered("gain"), quote=_Q_AVGKD_GAIN_LARGER, weaker=_ORDER),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
          Outperforms(), ALL, quote=_Q_AVGKD_OVER_AKD, reading=_OTHER_FIGURES),
    Claim("Fig. 6", "Sec. 6.2", "EKD improves with rounds", ("{p}__ekd",), Trend("improves"),
          ALL, quote=_Q_EKD_IMPROVES, horizon=LONG),
    Claim("Fig. 6", "Sec. 6.2", "EKD does not reach the centralised model",
          ("{p}__ekd", "{p}__central"), BelowBaseline(), ALL, quote=_Q_EKD_BELOW),
    Claim("Fig. 6", "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH, quote=_Q_OVER_FEDAVG,
          scope=_HIGH),
    Claim("Fig. 6", "Sec. 6.3", "AvgKD outperforms all the methods at high data "
          "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD, "{p}__fedavg"),
          Outperforms(), _HIGH, quote=_Q_OVER_ALL, scope=_HIGH, weaker=_AT_THE_END),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "PKD degrades with rounds", ("{p}__pkd",),
          Trend("degrades"), ALL, quote=_Q_FIG8_DEGRADE),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "AKD degrades with rounds", (_EKD_AKD,),
          Trend("degrades"), ALL, quote=_Q_FIG8_DEGRADE),
    Claim("Fig. 8", "Fig. 8 caption", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("relative drop"), quote=_Q_FIG8_DEGRADE, weaker=_ORDER),
    Claim("Fig. 8", "Fig. 8 caption", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop"), quote=_Q_FIG8_DEGRADE,
          weaker=_ORDER),
    *_model_heterogeneity("Fig. 8", "Fig. 6", "App. H.1; Sec. 6.3", _Q_MODEL_FASTER),
    Claim("Fig. 8", "App. H.1; Sec. 6.3", "EKD does not improve with rounds", ("{p}__ekd",),
          Trend("no-improvement"), ALL, quote=_Q_FIG8_EKD, horizon=LONG),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms PKD", ("{p}__avgkd", "{p}__pkd"),
          Outperforms(), ALL, quote=_Q_FIG8_OVER),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
          Outperforms(), ALL, quote=_Q_FIG8_OVER),
    Claim("Fig. 8", "Fig. 8 caption", "AvgKD converges to a steady level", ("{p}__avgkd",),
          Steady(), ALL, quote=_Q_FIG8_STEADY, horizon=LONG),
    Claim("Fig. 8", "App. H.1", "AvgKD oscillates at the highest data heterogeneity "
          "(early rounds)", ("alpha=0.0__avgkd",), Oscillates(), quote=_Q_OSCILLATES),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from AvgKD in the early rounds",
          ("{p}__avgkd",), AgentsBenefit(), ALL, quote=_Q_FIG8_BENEFIT),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from PKD in the early rounds",
          ("{p}__pkd",), AgentsBenefit(), ALL, quote=_Q_FIG8_BENEFIT),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from EKD in the early rounds",
          ("{p}__ekd",), AgentsBenefit(), ALL, quote=_Q_FIG8_BENEFIT,
          construction=_EKD_ENSEMBLE),
    Claim("Fig. 8", "Sec. 6.3", "AvgKD outperforms all the methods at high data "
          "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD),
          Outperforms(), _HIGH, quote=_Q_OVER_ALL, scope=_HIGH, weaker=_AT_THE_END),
    *_alpha_sweep("Fig. 9", "Fig. 9 caption; App. H.2", same_model=True),
    *_alpha_sweep("Fig. 10", "Fig. 10 caption (as Fig. 9); App. H.2", same_model=False),
    *_akd_figure("Fig. 11", "Fig. 11 caption; App. H.3"),
    *_avgkd_figure("Fig. 12", "Fig. 12 caption; App. H.3", "Sec. 6.3 (as Fig. 5)"),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades with rounds", ("{p}__akd",),
          Trend("degrades"), ALL, quote=_Q_FIG13_AKD),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades faster with more data "
          "heterogeneity", _by_alpha("akd"), Ordered("relative drop"), quote=_Q_FIG13_FASTER,
          weaker=_ORDER),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AvgKD does not degrade", ("{p}__avgkd",),
          Trend("no-degradation"), ALL, quote=_Q_FIG13_AVGKD, weaker=_FEW_ROUNDS),
    Claim("Fig. 13", "Sec. 6.2 (as on CNNs)", "AvgKD outperforms AKD",
          ("{p}__avgkd", "{p}__akd"), Outperforms(), ALL, quote=_Q_FIG13_OVER),
    Claim("Fig. 13", "App. H.4", "AvgKD's accuracy depends strongly on data heterogeneity",
          _by_alpha("avgkd"), Ordered("end", shrinks=False), quote=_Q_FIG13_DEPENDS,
          weaker=_ORDER),
    Claim("Fig. 14", "Fig. 14 caption", "more data heterogeneity lowers both agents' accuracy",
          _by_alpha(), Ordered("end", shrinks=False, per_agent=True), quote=_Q_FIG14_LOWERS,
          weaker=_ORDER),
    Claim("Fig. 14", "Fig. 14 caption", "neither agent degrades through the rounds", ("{p}",),
          Trend("no-degradation", per_agent=True), ALL, quote=_Q_FIG14_STEADY,
          weaker=_FEW_ROUNDS),
    Claim("Fig. 15", "Fig. 15 caption", "all agents benefit in the early rounds", ("{p}",),
          AgentsBenefit(), ALL, quote=_Q_FIG15_BENEFIT),
    Claim("Fig. 15", "App. H.5", "all agents repeat the same behaviour pattern", ("{p}",),
          AgentsAlike(), ALL, quote=_Q_FIG15_ALIKE),
    Claim("Fig. 15", "App. H.5", "at Alpha < 0.05 early stopping helps (the peak beats the end)",
          ("{p}",), Trend("degrades"), _HIGH, quote=_Q_FIG15_EARLY, scope=_HIGH,
          weaker="the peak against the runs' last round; the paper's runs end at round 20"),
    Claim("Fig. 15", "Sec. 6.3; App. H.5", "AvgKD with M agents does not degrade", ("{p}",),
          Trend("no-degradation"), ALL, quote=_Q_FIG15_NO_DEGRADATION, weaker=_FEW_ROUNDS),
)))
"""The paper's statements about its neural figures, one :class:`Claim` each."""


def figure_claims(figure: str) -> tuple[Claim, ...]:
  """The claims of ``figure`` ("Fig. N") in :data:`CLAIMS`."""
  return tuple(c for c in CLAIMS if c.figure == figure)


def _settings_of(names: Sequence[str]) -> list[str]:
  out: list[str] = []
  for name in names:
    if ":" in name or "/" in name:
      continue
    head = name.partition("__")[0]
    if head not in out:
      out.append(head)
  return out


def evaluate(claims: Sequence[Claim], curves: Mapping[str, Curve],
             floors: Mapping[tuple[str, str], float] | None = None) -> list[Check]:
  """Checks every claim against the curves (by run name), one check per setting.

  A pattern that matches no curve, a matched run that is unfinished, or runs on
  data the statement is not about make the check "not testable here"; otherwise
  the claim's rule decides. Each check also gets its standing (:data:`STANDINGS`): a
  setting outside the claim's ``scope`` is "out of scope", a claim holding by
  ``construction`` is "by construction", runs with fewer paper rounds than its
  ``horizon`` are "beyond the horizon"; their verdicts are computed all the same.
  ``floors``: by (statement, setting), the seeds' spread a statistic of one seed is given
  (:func:`neural._src.evidence.rules.noise_floor`; the control takes the runs'
  :attr:`Check.spread`).
  """
  checks = []
  settings = _settings_of(list(curves))
  for claim in claims:
    for setting in (settings if claim.settings == ALL else claim.settings or ("",)):
      patterns = tuple(p.replace("{p}", setting) for p in claim.runs)
      groups = [Group(p, tuple(c for n, c in curves.items() if fnmatch.fnmatchcase(n, p)))
                for p in patterns]
      names = tuple(c.name for g in groups for c in g.curves)
      missing = [g.pattern for g in groups if not g.curves]
      unfinished = [c for g in groups for c in g.curves if not c.finished]
      data = sorted({c.dataset for g in groups for c in g.curves if c.dataset})
      seeds = min((c.seeds for g in groups for c in g.curves), default=0)
      spread = 0.0
      power: dict[str, Any] = {}
      if missing:
        verdict, numbers = NOT_TESTABLE, "no run " + ", ".join(missing) + " here"
        names = patterns
      elif unfinished:
        verdict, numbers = NOT_TESTABLE, "unfinished: " + ", ".join(
            f"{c.name} ({c.done} of {c.rounds} rounds)" for c in unfinished)
      elif claim.datasets and data and not set(data) <= set(claim.datasets):
        verdict, numbers = NOT_TESTABLE, (
            f"a statement about {', '.join(claim.datasets)}; these runs are on "
            f"{', '.join(data)}")
      else:
        floor = (floors or {}).get((claim.statement, setting), 0.0)
        term, paired = _test_term(claim, groups)
        with seed_spreads() as spreads, noise_floor(floor), \
            intervals.with_test_term(term, paired), decisions() as decided:
          verdict, numbers = claim.rule(groups)
        spread = max(spreads, default=0.0)
        power = _power(decided, seeds)
      curves_compared = [c for g in groups for c in g.curves]
      standing, why = _standing(claim, setting, curves_compared)
      checks.append(Check(claim.figure, claim.source, claim.statement, setting, names,
                          claim.rule.text, verdict, numbers, seeds, spread, standing,
                          claim.quote, why, claim.weaker, **power))
  return checks


def _test_term(claim: Claim, groups: Sequence[Group]) -> tuple[str, list[float]]:
  """How the test set enters the intervals of a check: none where every run compared
  has several seeds that each drew their own test images; a paired term where the
  seeds share the test images and the runs recorded per-image outcomes; else the
  binomial bound."""
  curves = list({c.name: c for g in groups for c in g.curves}.values())
  if all(c.seeds > 1 and not c.shares_test for c in curves):
    return intervals.SEEDS_ONLY, []
  series: list[tuple[int, int | None]] = []   # (curve, agent or None for the mean)
  outcomes: list[np.ndarray | None] = []
  for i, c in enumerate(curves):
    series.append((i, None))
    outcomes.append(c.outcome_array())
    per_agent = c.agent_outcome_array()
    for a in range(len(c.agents[0]) if c.agents else 0):
      series.append((i, a))
      outcomes.append(None if per_agent is None else per_agent[:, a])
  shapes = {(o.shape[0], o.shape[2]) for o in outcomes if o is not None}
  if len(shapes) != 1:   # none recorded, or other seeds / test sets: the binomial bound
    return intervals.BINOMIAL, []
  where = {key: k for k, key in enumerate(series)}
  index = {c.name: i for i, c in enumerate(curves)}
  blank = {c.name: _blank(c) for c in curves}

  def resampled(values: Any) -> None:
    def rows(v: Any, shape: tuple[int, int]) -> tuple[tuple[float, ...], ...]:
      return tuple(tuple(float(x) for x in r) for r in (np.full(shape, np.nan) if v is None
                                                        else v))

    def swap(c: Curve) -> Curve:
      i, shape = index[c.name], (c.seeds, c.done)
      agents = tuple(zip(*[rows(values(where[(i, a)]), shape)
                           for a in range(len(c.agents[0]) if c.agents else 0)]))
      return blank[c.name]._replace(values=rows(values(where[(i, None)]), shape),
                                    **({"agents": agents} if agents else {}))
    claim.rule([Group(g.pattern, tuple(swap(c) for c in g.curves)) for g in groups])

  return intervals.PAIRED, intervals.paired_terms(resampled, outcomes)


def _blank(c: Curve) -> Curve:
  """``c`` with its per-agent and local values unknown (NaN): a resample of the test
  images moves only the values it has per-image outcomes for."""
  nan = math.nan
  return c._replace(agents=tuple(tuple(tuple(nan for _ in a) for a in seed) for seed in c.agents),
                    local=tuple(tuple(nan for _ in seed) for seed in c.local))


def _power(decided: Sequence[Any], seeds: int) -> dict[str, Any]:
  """A check's power and margin from the verdicts its rule reached: for an inconclusive
  part, the smallest distance these seeds decide at 80% power and the seeds its
  measured distance needs (the largest over such parts); the smallest margin of all."""
  out: dict[str, Any] = {"term": ", ".join(sorted({d.evidence.term for d in decided})),
                         "evidence": "; ".join(str(d.evidence) for d in decided)}
  if decided:
    out["margin"] = min(d.margin for d in decided)
  open_parts = [d for d in decided if d.verdict == INCONCLUSIVE]
  if open_parts and seeds > 1:
    out["detectable"] = max(d.evidence.detectable() for d in open_parts)
    needed = [d.evidence.seeds_for(d.distance) for d in open_parts]
    out["seeds_needed"] = -1 if None in needed else max(n for n in needed if n is not None)
  return out


def _standing(claim: Claim, setting: str, curves: Sequence[Curve]) -> tuple[str, str]:
  """Where a check of ``claim`` in ``setting`` on ``curves`` stands, and why: out of the
  sentence's scope, by construction, beyond the horizon, a second reading, weaker than
  its sentence (in that order), or in scope."""
  if setting and claim.scope != ALL and setting not in claim.scope:
    return OUT_OF_SCOPE, f"the sentence covers {', '.join(claim.scope)}"
  if claim.construction:
    return BY_CONSTRUCTION, claim.construction
  # Centralised training has one round: the horizon is the other runs'.
  rounds = [c.done for c in curves if c.protocol != "central"]
  if rounds and min(rounds) < claim.horizon:
    return BEYOND_HORIZON, (f"the statement needs {claim.horizon} paper rounds; these runs "
                            f"have {min(rounds)}")
  if claim.reading:
    return SECOND_READING, claim.reading
  if claim.weaker:
    return WEAKER, claim.weaker
  return IN_SCOPE, ""


