"""The search results shipped with the toolkit: what ``fedkrr search`` found for each claim.

``fedkrr verify`` reads them to say, per statement, what the search found, and ``fedkrr
search`` writes them; this module holds the record and its reading, so that the checks and
the search import it and not each other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fedkrr._src.io.reading import read_json

# The findings shipped with the toolkit: `fedkrr search` output (summary.json and the
# counterexamples' problem files). FINDINGS_COMMAND made the rows of the paper's 17 claims; the
# two pkd-mean rows were added with `--claim pkd-mean-shared` and `--claim pkd-mean-different`
# (90 s each, seed 0, on a loaded 2-core CPU; summary.json keeps each row's budget).
FINDINGS_DIR = Path(__file__).with_name("findings")
FINDINGS_COMMAND = (
    "fedkrr search --all --budget-seconds 510 --seed 0 --out fedkrr/_src/paper/findings")


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What a search found (the JSON object ``fedkrr search`` writes as ``ID.json``).

  Attributes:
    claim: the statement's ``fedkrr verify`` id.
    statement: the statement, in words (from ``fedkrr verify``).
    source: where the paper states it.
    kind: ``"claim"`` or ``"identity"`` (as in ``fedkrr verify``).
    measure: what the residual is.
    tolerance: the statement holds on an instance iff its residual is at most this.
    holds: False when a confirmed counterexample was found.
    searched: the number of valid instances evaluated (random and gradient steps).
    worst_residual: the largest residual seen over the instances searched
      (violations the replay rejected left out).
    counterexample: the problem file's name inside the output directory, or None.
    description: one line: the counterexample (kernels, ridge, sizes, the
      violating number), or what was searched.
    counterexample_residual: the saved counterexample's residual (None if none).
    replay_residual: the counterexample's residual by the independent route.
    replay_route: the independent route, in words.
    replay_command: a ``fedkrr run`` command that replays the counterexample, or None.
    rejected: violations found but not confirmed by the replay (numerical artefacts).
    space: the instances searched (:meth:`Space.describe`).
    seed: the search's seed.
    budget_seconds: the time budget.
    elapsed_seconds: the time taken (with shrinking and replay).
  """

  claim: str
  statement: str
  source: str
  kind: str
  measure: str
  tolerance: float
  holds: bool
  searched: int
  worst_residual: float
  counterexample: str | None
  description: str
  counterexample_residual: float | None
  replay_residual: float | None
  replay_route: str
  replay_command: str | None
  rejected: int
  space: dict[str, Any]
  seed: int
  budget_seconds: float
  elapsed_seconds: float

  def as_dict(self) -> dict[str, Any]:
    """The result as a JSON-ready dict."""
    return dataclasses.asdict(self)


def findings_table(results: list[SearchResult]) -> str:
  """The results as a Markdown table (claim, holds, searched, worst residual, counterexample)."""
  lines = ["| claim | source | holds on all searched | searched | worst residual | tolerance "
           "| counterexample |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for r in results:
    found = "—" if r.holds else f"`{r.counterexample or '(not saved)'}`: " + r.description.replace(
        "|", "\\|")
    lines.append(f"| {r.claim} | {r.source} | {'yes' if r.holds else 'NO'} | {r.searched} | "
                 f"{r.worst_residual:.3e} | {r.tolerance:.1e} | {found} |")
  return "\n".join(lines)


def known_findings() -> list[SearchResult]:
  """The search results shipped with the toolkit (``FINDINGS_COMMAND`` made them).

  A result's ``counterexample`` names a problem file in :func:`findings_dir`.
  """
  path = FINDINGS_DIR / "summary.json"
  if not path.exists():
    return []
  return [SearchResult(**record) for record in read_json(path, "findings summary")]


def findings_dir() -> Path:
  """The directory of the shipped counterexamples' problem files."""
  return FINDINGS_DIR


def search_note(result: SearchResult | None) -> str:
  """A few words for ``fedkrr verify``'s table: what the shipped search found."""
  if result is None:
    return "not searched"
  if result.holds:
    return f"held on {result.searched} searched"
  return f"counterexample ({result.counterexample})"
