"""The public names of the API reference, read from the packages' files without importing them.

Shared by ``gen_pages.py`` (the API pages) and ``griffe_roles.py`` (the links).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (namespace, the file that lists its public names); each gets the page api/<namespace>.md
NAMESPACES = (
    ("fedkrr", "fedkrr/__init__.py"),
    ("fedkrr.io", "fedkrr/io.py"),
    ("fedkrr.paper", "fedkrr/paper.py"),
    ("fedkrr.rates", "fedkrr/rates.py"),
    ("fedkrr.scale", "fedkrr/scale.py"),
    ("fedkrr.protocols", "fedkrr/protocols.py"),
    ("fedkrr.learners", "fedkrr/learners.py"),
    ("fedkrr.public", "fedkrr/public.py"),
    ("neural", "neural/__init__.py"),
    ("neural.training", "neural/training.py"),
    ("neural.data", "neural/data.py"),
    ("neural.models", "neural/models.py"),
    ("neural.evidence", "neural/evidence.py"),
    ("neural.runs", "neural/runs.py"),
    ("neural.methods", "neural/methods/__init__.py"),
    ("neural.methods.ddistillation", "neural/methods/ddistillation.py"),
    ("neural.methods.mhd", "neural/methods/mhd.py"),
    ("neural.methods.representation_sharing", "neural/methods/representation_sharing.py"),
    ("neural.methods.feddkc", "neural/methods/feddkc.py"),
)


def public_names(init_file: str) -> list[tuple[str, list[str]]]:
  """(implementation module, [public names]) in the order ``init_file`` imports them.

  Only names imported from ``fedkrr._src`` or ``neural._src`` count: submodules
  (``neural.methods``) have pages of their own and the version is no API entry.
  """
  groups: dict[str, list[str]] = {}
  body = []
  for node in ast.parse((ROOT / init_file).read_text()).body:
    # Lazy packages list their names under `if TYPE_CHECKING:` (fedkrr.lazy_exports).
    lazy = isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    body.extend(node.body if lazy else [node])
  for node in body:
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
        ("fedkrr._src.", "neural._src.")):
      for alias in node.names:
        name = alias.asname or alias.name
        if not name.startswith("_"):
          groups.setdefault(node.module, []).append(name)
  return list(groups.items())
