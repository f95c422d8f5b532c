"""The control: the paper's statements checked on the authors' own logged curves.

``data/authors_curves.json`` holds the per-round test accuracies that Afonin &
Karimireddy logged for their Figs. 6, 8, 9 and 10 (MNIST and CIFAR-10, Alpha in
{0, 0.01, 0.1, 1}, one seed, 10,000 test images; derived from their public logs by
``scripts/authors_curves.py``, which says which log feeds which curve). The same
rules that judge a reproduction judge these curves: a statement the authors' own
runs do not support is a statement about the paper, not about a reproduction.

Beside a reproduction the control is matched to its runs: each curve is cut to the
paper rounds of the run it stands beside (the whole 20 where the run has 20), a
statistic of the authors' one seed takes the seeds' spread of the same statement in
the runs as its training-randomness floor, and a method the authors never ran has no
control: the paper's PKD (``pkd``; their code ran ``pkd-mean``, which the figures draw
as PKD) is "no control", not ``pkd-mean``'s verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import functools
import json
from pathlib import Path
from typing import Any

from neural._src.evidence.claims import APART
from neural._src.evidence.claims import IN_SCOPE
from neural._src.evidence.claims import Check
from neural._src.evidence.claims import Claim
from neural._src.evidence.claims import evaluate
from neural._src.evidence.claims import figure_claims
from neural._src.evidence.curves import Curve
from neural._src.evidence.curves import curves_from_mapping
from neural._src.evidence.rules import NOT_TESTABLE
from neural._src.evidence.rules import REPRODUCED
from neural._src.evidence.rules import VERDICTS

DATA = Path(__file__).resolve().parent.parent / "data" / "authors_curves.json"
NOT_RUN = ("pkd",)   # methods the authors' code never ran (its PKD is pkd-mean)


@functools.lru_cache(maxsize=1)
def authors_table() -> dict[str, Any]:
  """The shipped table: ``{"source", "accuracy", "figures": {"Fig. N": {"dataset",
  "test_points", "curves": {setting: {variant: {"mean", "agents", ...}}}}}}``."""
  return json.loads(DATA.read_text())


def authors_figures() -> tuple[str, ...]:
  """The figures the authors' logs cover ("Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10")."""
  return tuple(authors_table()["figures"])


def _figure_curves(figure: str, prefix: str = "",
                   horizons: Mapping[str, int] | None = None) -> dict[str, Curve]:
  entry = authors_table()["figures"][figure]
  curves = curves_from_mapping(entry["curves"], test_points=int(entry["test_points"]),
                               dataset=str(entry["dataset"]), accuracy="best", prefix=prefix)
  horizons = horizons or {}
  return {name: c.cut(horizons[name]) if name in horizons else c
          for name, c in curves.items() if c.variant not in NOT_RUN}


def referenced_figures(claims: Sequence[Claim]) -> list[str]:
  """The other figures whose runs the claims compare with (``"Fig. 6/..."`` patterns)."""
  out: list[str] = []
  for claim in claims:
    for pattern in claim.runs:
      if "/" in pattern and pattern.partition("/")[0] not in out:
        out.append(pattern.partition("/")[0])
  return out


def authors_curves(figure: str, horizons: Mapping[str, int] | None = None) -> dict[str, Curve]:
  """The authors' curves of ``figure`` ("Fig. N"), with those of the figures its statements
  compare with (named ``"Fig. M/<run>"``); ``{}`` for a figure their logs do not cover.
  Methods they never ran (:data:`NOT_RUN`) are left out; ``horizons`` cuts the curve of
  each run named there to that many paper rounds."""
  if figure not in authors_table()["figures"]:
    return {}
  curves = _figure_curves(figure, horizons=horizons)
  for other in referenced_figures(figure_claims(figure)):
    if other in authors_table()["figures"]:
      curves.update(_figure_curves(other, prefix=f"{other}/", horizons=horizons))
  return curves


def control_checks(figure: str, horizons: Mapping[str, int] | None = None,
                   floors: Mapping[tuple[str, str], float] | None = None) -> list[Check]:
  """Every statement about ``figure`` checked on the authors' curves (``[]``: no logs).

  Args:
    figure: "Fig. N".
    horizons: run name -> the paper rounds of the run the control stands beside
      (each authors' curve of that name is cut to them; unnamed: all 20).
    floors: (statement, setting) -> the runs' seed spread of that check
      (:attr:`Check.spread`), the training-randomness floor of the authors' one seed.
  """
  curves = authors_curves(figure, horizons)
  return evaluate(figure_claims(figure), curves, floors) if curves else []


def matched_control(figure: str, checks: Sequence[Check], curves: Mapping[str, Curve],
                    borrowed: bool = False) -> dict[tuple[str, str], Check]:
  """The control of a reproduction's ``checks`` on its ``curves``: the authors' curves cut
  to the runs' rounds, by (statement, setting); a check the authors' runs cannot decide
  (a method they never ran) has no entry: "no control".

  Args:
    borrowed: False: their one seed with their test set's binomial noise alone (the
      control's verdict); True: with the runs' seed-to-seed spread of each check as the
      floor of their one seed's training randomness (the "at our noise" column).
  """
  horizons = {name: c.done for name, c in curves.items()}
  floors = {(c.statement, c.setting): c.spread for c in checks} if borrowed else None
  return {(c.statement, c.setting): c for c in control_checks(figure, horizons, floors)
          if c.verdict != NOT_TESTABLE}


def control_table() -> str:
  """The control as Markdown: per figure and statement, the settings where the authors'
  curves support it and where they do not (the table ``docs/reproduce.md`` shows).

  Only checks in their sentence's scope are counted; the others (out of scope, by
  construction, beyond the horizon) are listed in the last column with their verdicts."""
  lines = []
  for figure in authors_figures():
    checks = control_checks(figure)
    counted = [c for c in checks if c.standing == IN_SCOPE]
    held = sum(c.verdict == REPRODUCED for c in counted)
    apart = len(checks) - len(counted)
    lines += [f"#### {figure}: {held} of {len(counted)} checks hold on the authors' curves"
              + (f" ({apart} more not counted)" if apart else ""), "",
              "| statement | holds | does not hold | no difference | inconclusive | not "
              "testable | not counted |", "| --- | --- | --- | --- | --- | --- | --- |"]
    statements: dict[str, dict[str, list[str]]] = {}
    for c in checks:
      cells = statements.setdefault(c.statement, {v: [] for v in (*VERDICTS, *APART)})
      where = c.setting or "all"
      if c.standing == IN_SCOPE:
        cells[c.verdict].append(where)
      else:
        cells[c.standing].append(f"{where}: {c.verdict}")
    for statement, cells in statements.items():
      aside = "; ".join(f"{', '.join(cells[s])} ({s})" for s in APART if cells[s])
      lines.append(f"| {statement} | " + " | ".join(", ".join(cells[v]) for v in VERDICTS)
                   + f" | {aside} |")
    lines.append("")
  return "\n".join(lines)
