"""Every docstring of both packages parsed the way the API reference parses it, first.

Run by ``gen_pages.py`` at the start of the site's build, so a docstring that griffe
cannot parse (a parameter that is not in the signature, a malformed section) fails
``mkdocs build --strict`` within seconds rather than after the notebooks have run.
Also runs alone: ``python docs/check_docstrings.py`` prints each warning and exits 1.
"""

from __future__ import annotations

import logging
import sys

from api_names import ROOT
import griffe

PACKAGES = ("fedkrr", "neural")
# The options of mkdocs.yml's python handler that change how docstrings are parsed.
PARSER_OPTIONS = {"warn_missing_types": False}


class _Collect(logging.Handler):
  def __init__(self) -> None:
    super().__init__(logging.WARNING)
    self.messages: list[str] = []

  def emit(self, record: logging.LogRecord) -> None:
    self.messages.append(record.getMessage())


def _parse_all(obj: griffe.Object) -> None:
  if obj.docstring is not None:
    obj.docstring.parse(griffe.Parser.google, **PARSER_OPTIONS)
  for member in obj.members.values():
    if not member.is_alias:
      _parse_all(member)   # type: ignore[arg-type]


def docstring_warnings() -> list[str]:
  """griffe's warnings on every docstring of ``fedkrr`` and ``neural`` (private ones too)."""
  collect = _Collect()
  logger = logging.getLogger("griffe")
  logger.addHandler(collect)
  try:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for package in PACKAGES:
      _parse_all(loader.load(package))
  finally:
    logger.removeHandler(collect)
  return collect.messages


if __name__ == "__main__":
  found = docstring_warnings()
  print("\n".join(found) or "every docstring parses")
  sys.exit(1 if found else 0)
