"""A griffe extension for the API reference: the docstrings' Sphinx roles as links.

The docstrings write cross-references the Sphinx way (``:func:`make_problem```,
``:class:`fedkrr.RBF```). This turns each into a link to the API reference when
it names a documented public name (``fedkrr.X``, ``fedkrr.rates.X`` and fedkrr's other
tiers, ``neural.X``, ``neural.training.X`` and neural's other tiers, or a bare ``X`` that
one of them exports), and into code otherwise.
"""

from __future__ import annotations

from pathlib import Path
import re
import sys

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))   # docs/, for api_names
from api_names import public_names  # noqa: E402

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`")
# Bare names link to these namespaces' names only (the paper modules share init, step, ...).
LINKED = {"fedkrr": "fedkrr/__init__.py", "neural": "neural/__init__.py",
          **{f"neural.{place}": f"neural/{place}.py"
             for place in ("training", "data", "models", "evidence", "runs")},
          "neural.methods": "neural/methods/__init__.py",
          **{f"fedkrr.{tier}": f"fedkrr/{tier}.py"
             for tier in ("rates", "scale", "protocols", "learners", "public")}}


def documented_names() -> dict[str, str]:
  """Every public name of those pages: full identifier -> itself, bare name -> first owner."""
  names: dict[str, str] = {}
  for namespace, init_file in LINKED.items():
    for _, group in public_names(init_file):
      for name in group:
        names[f"{namespace}.{name}"] = f"{namespace}.{name}"
        names.setdefault(name, f"{namespace}.{name}")
  return names


class SphinxRoles(griffe.Extension):
  """Rewrites ``:role:`target``` in every docstring griffe loads."""

  def __init__(self) -> None:
    super().__init__()
    self.names = documented_names()

  def link(self, match: re.Match) -> str:
    target = match.group(1)
    identifier = self.names.get(target)
    return f"[`{target}`][{identifier}]" if identifier else f"`{target}`"

  def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
    del kwargs
    if obj.docstring is not None:
      obj.docstring.value = ROLE.sub(self.link, obj.docstring.value)
