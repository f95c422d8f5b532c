"""The paper's statements about its neural figures, and the noise-aware rules that check them.

Afonin & Karimireddy describe each neural figure in words (Sec. 6.2, Sec. 6.3,
App. H and the captions): "AKD degrades with rounds", "AvgKD does not degrade",
"EKD improves with rounds", ... :data:`CLAIMS` holds them, one line each: the
figure, where the paper says it, the statement in our words, the runs it compares
and the rule that decides it from the numbers.

- **Runs** are run-name patterns (``fnmatch``), one per group the rule compares:
  ``"{p}__avgkd"``, where ``{p}`` runs over the claim's ``settings`` (the first grid
  axis of the figure's config: ``same``, ``model-het``, ..., or ``alpha=0.0``, ...;
  ``ALL``: every setting the runs have), gives one check per setting. A pattern may
  match several runs (``"{p}__from-agent*"``: AKD from either agent).
  ``<ekd run>:akd-from-agent<s>`` names the AKD run from agent s inside an EKD run.
  ``"Fig. 6/{p}__pkd"`` names a run of another figure (a cross-figure statement).
- **Curves** (:class:`Curve`) are in the paper's units (``neural.paper_rounds``):
  rounds from 1, the mean over the agents (EKD: the ensemble), per-agent values
  beside it, **one row per seed**.

The rules and what they measure are in ``neural._src.rules``; curves in
``neural._src.curves``.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import fnmatch
from typing import NamedTuple

from neural._src.curves import Curve
from neural._src.curves import Group
from neural._src.rules import NOT_TESTABLE
from neural._src.rules import AgentsAlike
from neural._src.rules import AgentsBenefit
from neural._src.rules import BelowBaseline
from neural._src.rules import BestAtRoundOne
from neural._src.rules import FasterDrop
from neural._src.rules import Ordered
from neural._src.rules import Oscillates
from neural._src.rules import Outperforms
from neural._src.rules import Rule
from neural._src.rules import Steady
from neural._src.rules import Trend
from neural._src.rules import noise_floor
from neural._src.rules import seed_spreads

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
  """

  figure: str
  source: str
  statement: str
  runs: tuple[str, ...]
  rule: Rule
  settings: tuple[str, ...] = ()
  datasets: tuple[str, ...] = ()


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


_ALPHAS = ("alpha=0.0", "alpha=0.01", "alpha=0.1", "alpha=1.0")   # most heterogeneous first
_HIGH = _ALPHAS[:2]   # the paper's "small Alphas", "Alpha < 0.05"
_AKD = "{p}__from-agent*"
_EKD_AKD = "{p}__ekd:akd-from-agent*"
_CIFAR = ("cifar10",)


def _by_alpha(variant: str = "") -> tuple[str, ...]:
  """One pattern per Alpha, most heterogeneous first: ``alpha=0.0__<variant>``, ..."""
  return tuple(f"{a}__{variant}" if variant else a for a in _ALPHAS)


def _akd_figure(f: str, where: str) -> tuple[Claim, ...]:
  """Figs. 4 and 11: AKD from either agent in four settings."""
  return (
      Claim(f, where, "AKD degrades with rounds", (_AKD,), Trend("degrades"), ALL),
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
  """Figs. 5 and 12: AvgKD and centralised in three settings, drawn per agent."""
  return (
      Claim(f, caption, "AvgKD does not degrade (either agent)", ("{p}__avgkd",),
            Trend("no-degradation", per_agent=True), ALL),
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


def _alpha_sweep(f: str, where: str, same_model: bool) -> tuple[Claim, ...]:
  """Figs. 9 and 10 (App. H.2): CIFAR-10 as on MNIST, but EKD does not improve."""
  claims = (
      Claim(f, where, "PKD degrades with rounds", ("{p}__pkd",), Trend("degrades"), ALL),
      Claim(f, where, "AKD degrades with rounds", (_EKD_AKD,), Trend("degrades"), ALL),
      Claim(f, where, "PKD degrades faster with more data heterogeneity", _by_alpha("pkd"),
            Ordered("relative drop")),
      Claim(f, where, "AKD degrades faster with more data heterogeneity",
            _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop")),
      Claim(f, where, "AvgKD converges to a steady level", ("{p}__avgkd",), Steady(), ALL),
      Claim(f, where, "both agents benefit from AvgKD in the early rounds", ("{p}__avgkd",),
            AgentsBenefit(), ALL),
      Claim(f, where, "both agents benefit from PKD in the early rounds", ("{p}__pkd",),
            AgentsBenefit(), ALL),
      Claim(f, where, "both agents benefit from EKD in the early rounds", ("{p}__ekd",),
            AgentsBenefit(), ALL),
      Claim(f, "App. H.2", "EKD does not improve with rounds (CIFAR-10, unlike MNIST)",
            ("{p}__ekd",), Trend("no-improvement"), ALL, _CIFAR),
      Claim(f, "Sec. 6.2 (as on MNIST)", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
            Outperforms(), ALL),
      Claim(f, "Sec. 6.3", "AvgKD outperforms all the methods at high data "
            "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD)
            + (("{p}__fedavg",) if same_model else ()), Outperforms(), _HIGH),
  )
  if same_model:
    return claims + (
        Claim(f, "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
              ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH),)
  return claims + _model_heterogeneity(f, "Fig. 9", "Sec. 6.3")


def _model_heterogeneity(f: str, same: str, where: str) -> tuple[Claim, ...]:
  """AKD and PKD with two models degrade faster than with one (the ``same`` figure)."""
  return (
      Claim(f, where, f"PKD degrades faster than with one model ({same})",
            ("{p}__pkd-mean", f"{same}/{{p}}__pkd-mean"), FasterDrop(), ALL),
      Claim(f, where, f"AKD degrades faster than with one model ({same})",
            (_EKD_AKD, f"{same}/{_EKD_AKD}"), FasterDrop(), ALL),
  )


def _fedavg_both_ways(claims: tuple[Claim, ...]) -> tuple[Claim, ...]:
  """Each claim comparing with FedAvg (scored, as in the paper, by its clients after local
  training), then the same claim against FedAvg's averaged model (``<run>:server``)."""
  out: list[Claim] = []
  for claim in claims:
    out.append(claim)
    if any(r.endswith("__fedavg") for r in claim.runs):
      runs = tuple(r + ":server" if r.endswith("__fedavg") else r for r in claim.runs)
      out.append(dataclasses.replace(claim, runs=runs, statement=(
          f"{claim.statement} (FedAvg's averaged model; the paper scored its clients)")))
  return tuple(out)


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


CLAIMS: tuple[Claim, ...] = _fedavg_both_ways(_authors_pkd((
    *_akd_figure("Fig. 4", "Fig. 4 caption; Sec. 6.2"),
    *_avgkd_figure("Fig. 5", "Fig. 5 caption; Sec. 6.2", "Sec. 6.2"),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from AvgKD",
          ("{p}__avgkd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from PKD",
          ("{p}__pkd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "at small Alpha both agents benefit from EKD",
          ("{p}__ekd",), AgentsBenefit(), _HIGH),
    Claim("Fig. 6", "Fig. 6 caption", "AvgKD consistently outperforms FedAvg",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(consistently=True), ALL),
    Claim("Fig. 6", "Fig. 6 caption", "EKD consistently outperforms FedAvg",
          ("{p}__ekd", "{p}__fedavg"), Outperforms(consistently=True), ALL),
    Claim("Fig. 6", "Sec. 6.2", "AKD degrades with rounds", (_EKD_AKD,), Trend("degrades"),
          ALL),
    Claim("Fig. 6", "Sec. 6.2", "PKD degrades with rounds", ("{p}__pkd",), Trend("degrades"),
          ALL),
    Claim("Fig. 6", "Sec. 6.2", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop")),
    Claim("Fig. 6", "Sec. 6.2", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("relative drop")),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD improves over the local models", ("{p}__avgkd",),
          Trend("improves"), ALL),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD's improvement is larger with more data heterogeneity",
          _by_alpha("avgkd"), Ordered("gain")),
    Claim("Fig. 6", "Sec. 6.2", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
          Outperforms(), ALL),
    Claim("Fig. 6", "Sec. 6.2", "EKD improves with rounds", ("{p}__ekd",), Trend("improves"),
          ALL),
    Claim("Fig. 6", "Sec. 6.2", "EKD does not reach the centralised model",
          ("{p}__ekd", "{p}__central"), BelowBaseline(), ALL),
    Claim("Fig. 6", "Sec. 6.3", "AvgKD outperforms FedAvg at high data heterogeneity",
          ("{p}__avgkd", "{p}__fedavg"), Outperforms(), _HIGH),
    Claim("Fig. 6", "Sec. 6.3", "AvgKD outperforms all the methods at high data "
          "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD, "{p}__fedavg"),
          Outperforms(), _HIGH),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "PKD degrades with rounds", ("{p}__pkd",),
          Trend("degrades"), ALL),
    Claim("Fig. 8", "Fig. 8 caption; App. H.1", "AKD degrades with rounds", (_EKD_AKD,),
          Trend("degrades"), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "PKD degrades faster with more data heterogeneity",
          _by_alpha("pkd"), Ordered("relative drop")),
    Claim("Fig. 8", "Fig. 8 caption", "AKD degrades faster with more data heterogeneity",
          _by_alpha("ekd:akd-from-agent*"), Ordered("relative drop")),
    *_model_heterogeneity("Fig. 8", "Fig. 6", "App. H.1; Sec. 6.3"),
    Claim("Fig. 8", "App. H.1; Sec. 6.3", "EKD does not improve with rounds", ("{p}__ekd",),
          Trend("no-improvement"), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms PKD", ("{p}__avgkd", "{p}__pkd"),
          Outperforms(), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD outperforms AKD", ("{p}__avgkd", _EKD_AKD),
          Outperforms(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "AvgKD converges to a steady level", ("{p}__avgkd",),
          Steady(), ALL),
    Claim("Fig. 8", "App. H.1", "AvgKD oscillates at the highest data heterogeneity "
          "(early rounds)", ("alpha=0.0__avgkd",), Oscillates()),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from AvgKD in the early rounds",
          ("{p}__avgkd",), AgentsBenefit(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from PKD in the early rounds",
          ("{p}__pkd",), AgentsBenefit(), ALL),
    Claim("Fig. 8", "Fig. 8 caption", "both agents benefit from EKD in the early rounds",
          ("{p}__ekd",), AgentsBenefit(), ALL),
    Claim("Fig. 8", "Sec. 6.3", "AvgKD outperforms all the methods at high data "
          "heterogeneity", ("{p}__avgkd", "{p}__pkd-mean", "{p}__ekd", _EKD_AKD),
          Outperforms(), _HIGH),
    *_alpha_sweep("Fig. 9", "Fig. 9 caption; App. H.2", same_model=True),
    *_alpha_sweep("Fig. 10", "Fig. 10 caption (as Fig. 9); App. H.2", same_model=False),
    *_akd_figure("Fig. 11", "Fig. 11 caption; App. H.3"),
    *_avgkd_figure("Fig. 12", "Fig. 12 caption; App. H.3", "Sec. 6.3 (as Fig. 5)"),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades with rounds", ("{p}__akd",),
          Trend("degrades"), ALL),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AKD degrades faster with more data "
          "heterogeneity", _by_alpha("akd"), Ordered("relative drop")),
    Claim("Fig. 13", "Fig. 13 caption; App. H.4", "AvgKD does not degrade", ("{p}__avgkd",),
          Trend("no-degradation"), ALL),
    Claim("Fig. 13", "Sec. 6.2 (as on CNNs)", "AvgKD outperforms AKD",
          ("{p}__avgkd", "{p}__akd"), Outperforms(), ALL),
    Claim("Fig. 13", "App. H.4", "AvgKD's accuracy depends strongly on data heterogeneity",
          _by_alpha("avgkd"), Ordered("end", shrinks=False)),
    Claim("Fig. 14", "Fig. 14 caption", "more data heterogeneity lowers both agents' accuracy",
          _by_alpha(), Ordered("end", shrinks=False, per_agent=True)),
    Claim("Fig. 14", "Fig. 14 caption", "neither agent degrades through the rounds", ("{p}",),
          Trend("no-degradation", per_agent=True), ALL),
    Claim("Fig. 15", "Fig. 15 caption", "all agents benefit in the early rounds", ("{p}",),
          AgentsBenefit(), ALL),
    Claim("Fig. 15", "App. H.5", "all agents repeat the same behaviour pattern", ("{p}",),
          AgentsAlike(), ALL),
    Claim("Fig. 15", "App. H.5", "at Alpha < 0.05 early stopping helps (the peak beats the end)",
          ("{p}",), Trend("degrades"), _HIGH),
    Claim("Fig. 15", "Sec. 6.3; App. H.5", "AvgKD with M agents does not degrade", ("{p}",),
          Trend("no-degradation"), ALL),
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
  the claim's rule decides. ``floors``: by (statement, setting), the seeds' spread
  a statistic of one seed is given (:func:`neural._src.rules.noise_floor`; the
  control takes the runs' :attr:`Check.spread`).
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
        with seed_spreads() as spreads, noise_floor(floor):
          verdict, numbers = claim.rule(groups)
        spread = max(spreads, default=0.0)
      checks.append(Check(claim.figure, claim.source, claim.statement, setting, names,
                          claim.rule.text, verdict, numbers, seeds, spread))
  return checks


