"""The one layer rule of both packages' folders (tests/fedkrr/test_import_graph.py,
tests/neural/test_layers.py): each folder of a package's ``_src`` has a layer (FOLDERS),
each flat module its own (FLAT); no import goes from a lower layer to a higher one.

tests/ is no package: pytest puts its folders on sys.path.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping


def layer(name: str, folders: Mapping[str, int], flat: Mapping[str, int]) -> int:
  """The layer of a ``_src`` module (dotted, relative to ``_src``; a folder's
  ``__init__`` is named by its folder)."""
  folder = name.partition(".")[0] if "." in name else name
  if folder in folders:
    return folders[folder]
  return flat[name]


def unlayered(modules: Iterable[str], folders: Mapping[str, int],
              flat: Mapping[str, int]) -> list[str]:
  """What is wrong with the tables: a folder or flat module without a layer, or a name
  in a table that is no folder or module."""
  modules = set(modules)
  found_folders = {m.partition(".")[0] for m in modules if "." in m}
  found_flat = {m for m in modules if "." not in m} - found_folders
  wrong = [f"give folder {f!r} a layer in FOLDERS" for f in sorted(found_folders - set(folders))]
  wrong += [f"FOLDERS names {f!r}, no folder" for f in sorted(set(folders) - found_folders)]
  wrong += [f"give flat module {m!r} a layer in FLAT" for m in sorted(found_flat - set(flat))]
  wrong += [f"FLAT names {m!r}, no flat module" for m in sorted(set(flat) - found_flat)]
  return wrong


def upward_imports(graph: Mapping[str, Iterable[str]], folders: Mapping[str, int],
                   flat: Mapping[str, int]) -> list[str]:
  """Every import (``graph``: module -> the modules it imports) from a lower layer to a
  higher one."""
  return [f"{name} (layer {layer(name, folders, flat)}) imports {target} "
          f"(layer {layer(target, folders, flat)})"
          for name, targets in graph.items() for target in sorted(targets)
          if target != name and layer(target, folders, flat) > layer(name, folders, flat)]
