"""The control: the paper's statements checked on the authors' own logged curves.

``data/authors_curves.json`` holds the per-round test accuracies that Afonin &
Karimireddy logged for their Figs. 6, 8, 9 and 10 (MNIST and CIFAR-10, Alpha in
{0, 0.01, 0.1, 1}, one seed, 10,000 test images; derived from their public logs by
``scripts/authors_curves.py``, which says which log feeds which curve). The same
rules that judge a reproduction judge these curves: a statement the authors' own
runs do not support is a statement about the paper, not about a reproduction.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import json
from pathlib import Path
from typing import Any

from neural._src.claims import Check
from neural._src.claims import Claim
from neural._src.claims import evaluate
from neural._src.claims import figure_claims
from neural._src.curves import Curve
from neural._src.curves import curves_from_mapping
from neural._src.rules import REPRODUCED
from neural._src.rules import VERDICTS

DATA = Path(__file__).resolve().parent / "data" / "authors_curves.json"


@functools.lru_cache(maxsize=1)
def authors_table() -> dict[str, Any]:
  """The shipped table: ``{"source", "accuracy", "figures": {"Fig. N": {"dataset",
  "test_points", "curves": {setting: {variant: {"mean", "agents", ...}}}}}}``."""
  return json.loads(DATA.read_text())


def authors_figures() -> tuple[str, ...]:
  """The figures the authors' logs cover ("Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10")."""
  return tuple(authors_table()["figures"])


def _figure_curves(figure: str, prefix: str = "") -> dict[str, Curve]:
  entry = authors_table()["figures"][figure]
  return curves_from_mapping(entry["curves"], test_points=int(entry["test_points"]),
                             dataset=str(entry["dataset"]), accuracy="best", prefix=prefix)


def referenced_figures(claims: Sequence[Claim]) -> list[str]:
  """The other figures whose runs the claims compare with (``"Fig. 6/..."`` patterns)."""
  out: list[str] = []
  for claim in claims:
    for pattern in claim.runs:
      if "/" in pattern and pattern.partition("/")[0] not in out:
        out.append(pattern.partition("/")[0])
  return out


def authors_curves(figure: str) -> dict[str, Curve]:
  """The authors' curves of ``figure`` ("Fig. N"), with those of the figures its statements
  compare with (named ``"Fig. M/<run>"``); ``{}`` for a figure their logs do not cover."""
  if figure not in authors_table()["figures"]:
    return {}
  curves = _figure_curves(figure)
  for other in referenced_figures(figure_claims(figure)):
    if other in authors_table()["figures"]:
      curves.update(_figure_curves(other, prefix=f"{other}/"))
  return curves


def control_checks(figure: str) -> list[Check]:
  """Every statement about ``figure`` checked on the authors' curves (``[]``: no logs)."""
  curves = authors_curves(figure)
  return evaluate(figure_claims(figure), curves) if curves else []


def control_table() -> str:
  """The control as Markdown: per figure and statement, the settings where the authors'
  curves support it and where they do not (the table ``docs/reproduce.md`` shows)."""
  lines = []
  for figure in authors_figures():
    checks = control_checks(figure)
    held = sum(c.verdict == REPRODUCED for c in checks)
    lines += [f"#### {figure}: {held} of {len(checks)} checks hold on the authors' curves", "",
              "| statement | holds | does not hold | inconclusive | not testable |",
              "| --- | --- | --- | --- | --- |"]
    statements: dict[str, dict[str, list[str]]] = {}
    for c in checks:
      cells = statements.setdefault(c.statement, {v: [] for v in VERDICTS})
      cells[c.verdict].append(c.setting or "all")
    for statement, cells in statements.items():
      lines.append(f"| {statement} | " + " | ".join(", ".join(cells[v]) for v in VERDICTS)
                   + " |")
    lines.append("")
  return "\n".join(lines)
