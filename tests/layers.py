"""The one import walker of both packages' layer test (tests/test_layers.py).

Each package's ``_src`` is read as source (nothing is imported): its modules, named by
their dotted path under ``_src`` (a folder's ``__init__`` by its folder), and every
import statement of a file, with where it stands (at the module's top, or inside a
function) and whether it says why it is deferred (``# deferred: ...``). The layer rule of
both packages' folders: each folder of ``_src`` has a layer (``folders``), each flat
module its own (``flat``); no import goes from a lower layer to a higher one.

A helper on pytest's pythonpath (pyproject.toml).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Import:
  """One import statement of a file.

  Attributes:
    names: the dotted names it may refer to: ``a.b`` for ``import a.b``; ``a.b`` and
      ``a.b.c`` for ``from a.b import c`` (``c`` may be a module or a name in ``a.b``).
    line: its first line (1-based).
    at_top: whether it stands in the module's top level (not inside a function, a class
      or an ``if``).
    says_deferred: whether one of its lines says why it is deferred (``# deferred: ...``).
  """

  names: tuple[str, ...]
  line: int
  at_top: bool
  says_deferred: bool


def imports(path: Path) -> Iterator[Import]:
  """Every import statement of the Python file ``path`` (relative imports skipped)."""
  text = path.read_text()
  lines = text.splitlines()
  tree = ast.parse(text)
  top = set(map(id, tree.body))
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      if not node.module or node.level:
        continue
      names = (node.module, *(f"{node.module}.{a.name}" for a in node.names))
    elif isinstance(node, ast.Import):
      names = tuple(a.name for a in node.names)
    else:
      continue
    end = node.end_lineno or node.lineno
    says = any("# deferred:" in line for line in lines[node.lineno - 1:end])
    yield Import(names, node.lineno, id(node) in top, says)


def src(package: str) -> Path:
  """The ``_src`` folder of ``package`` in this checkout."""
  return ROOT / package / "_src"


def modules(package: str) -> dict[str, Path]:
  """Every module of ``package``'s ``_src``: its dotted name under ``_src`` (a folder's
  ``__init__`` named by its folder; ``_src/__init__.py`` left out) -> its file."""
  found = {}
  for path in sorted(src(package).rglob("*.py")):
    rel = path.relative_to(src(package)).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    if parts:
      found[".".join(parts)] = path
  return found


def target(statement: Import, package: str, known: Iterable[str]) -> str | None:
  """The module of ``package``'s ``_src`` that ``statement`` imports (the longest of its
  names that is a module, else the module that holds the name), or None."""
  known = set(known)
  prefix = f"{package}._src."
  for name in sorted(statement.names, key=len, reverse=True):
    if name.startswith(prefix):
      rest = name[len(prefix):]
      while rest and rest not in known:
        rest = rest.rpartition(".")[0]
      if rest:
        return rest
  return None


def graph(package: str) -> dict[str, set[str]]:
  """``package``'s import graph: each ``_src`` module -> the modules of its ``_src`` it
  imports (deferred imports included; itself left out)."""
  found = modules(package)
  edges = {}
  for name, path in found.items():
    targets = {target(s, package, found) for s in imports(path)}
    edges[name] = targets - {None, name}
  return edges


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
  """One circle (``a -> b -> ... -> a``) through each strongly connected part of ``edges``
  that has one, found by depth-first search; empty when the graph has none."""
  found, done, path = [], set(), []

  def visit(name: str) -> None:
    if name in path:
      found.append(path[path.index(name):] + [name])
      return
    if name in done:
      return
    path.append(name)
    for nxt in sorted(edges.get(name, ())):
      visit(nxt)
    path.pop()
    done.add(name)

  for name in sorted(edges):
    visit(name)
  return found


def folder(name: str) -> str:
  """The folder of a ``_src`` module (``""`` for a flat one)."""
  return name.partition(".")[0] if "." in name else ""


def layer(name: str, folders: Mapping[str, int], flat: Mapping[str, int]) -> int:
  """The layer of a ``_src`` module (dotted, relative to ``_src``; a folder's
  ``__init__`` is named by its folder)."""
  first = name.partition(".")[0]
  if first in folders:
    return folders[first]
  return flat[name]


def unlayered(names: Iterable[str], folders: Mapping[str, int],
              flat: Mapping[str, int]) -> list[str]:
  """What is wrong with the tables: a folder or flat module without a layer, or a name
  in a table that is no folder or module."""
  names = set(names)
  found_folders = {m.partition(".")[0] for m in names if "." in m}
  found_flat = {m for m in names if "." not in m} - found_folders
  wrong = [f"give folder {f!r} a layer in FOLDERS" for f in sorted(found_folders - set(folders))]
  wrong += [f"FOLDERS names {f!r}, no folder" for f in sorted(set(folders) - found_folders)]
  wrong += [f"give flat module {m!r} a layer in FLAT" for m in sorted(found_flat - set(flat))]
  wrong += [f"FLAT names {m!r}, no flat module" for m in sorted(set(flat) - found_flat)]
  return wrong


def upward_imports(edges: Mapping[str, Iterable[str]], folders: Mapping[str, int],
                   flat: Mapping[str, int]) -> list[str]:
  """Every import (``edges``: module -> the modules it imports) from a lower layer to a
  higher one."""
  return [f"{name} (layer {layer(name, folders, flat)}) imports {t} "
          f"(layer {layer(t, folders, flat)})"
          for name, targets in edges.items() for t in sorted(targets)
          if t != name and layer(t, folders, flat) > layer(name, folders, flat)]
