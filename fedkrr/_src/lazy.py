"""Public names imported on first use: a package's ``__init__`` that costs no start-up.

A package ``__init__`` lists its public names once, as ``from MODULE import NAME``
lines inside ``if TYPE_CHECKING:`` (what type checkers, linters and the API
reference read). :func:`lazy_exports` reads those lines from the file without
running them and returns the package's ``__getattr__`` and ``__dir__`` (PEP 562):
the module behind a name is imported the first time the name is used, and the
name is then an ordinary attribute. ``import fedkrr`` and ``import neural`` so
cost milliseconds instead of JAX's start-up, and a command's ``--help`` is
immediate; what a name does is unchanged.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from collections.abc import Mapping
import importlib
from pathlib import Path
import sys
from typing import Any
import warnings


def _is_type_checking(test: ast.expr) -> bool:
  return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
          or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def listed_imports(init_file: str | Path) -> dict[str, tuple[str, str]]:
  """``name -> (module, attribute)`` of the imports under ``if TYPE_CHECKING:`` in a file.

  Only absolute ``from MODULE import NAME [as ALIAS]`` lines count, in file order.
  """
  tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
  names: dict[str, tuple[str, str]] = {}
  for node in tree.body:
    if isinstance(node, ast.If) and _is_type_checking(node.test):
      for stmt in node.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
          for alias in stmt.names:
            names[alias.asname or alias.name] = (stmt.module, alias.name)
  return names


def lazy_exports(package: str, init_file: str | Path, *, moved_to: tuple[str, ...] = (),
                 private: Mapping[str, str] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
  """``(__getattr__, __dir__)`` for package ``package`` whose ``__init__`` is ``init_file``.

  Args:
    package: the package's ``__name__``.
    init_file: its ``__file__``; the names are the imports listed under
      ``if TYPE_CHECKING:`` there (:func:`listed_imports`).
    moved_to: the package's submodules (files beside ``init_file`` that list their
      names the same way) whose names left the top level: for one release each still
      resolves there, with a ``DeprecationWarning`` naming its new place.
    private: names that left the top level to become private, each with the module
      that holds it: they resolve the same way, with a warning that says so.

  Returns:
    ``__getattr__(name)``, which imports the name's module, stores the name in the
    package and returns it (``AttributeError`` for a name not listed), and
    ``__dir__()``, the package's attributes and every listed name (not the former
    ones: they are stored nowhere, and warn at every use).

  Example:
    In ``mypackage/__init__.py``::

      from typing import TYPE_CHECKING

      if TYPE_CHECKING:
        from mypackage._src.core import solve
      else:
        from fedkrr import lazy_exports
        __getattr__, __dir__ = lazy_exports(__name__, __file__)
  """
  names = listed_imports(init_file)
  private = dict(private or {})
  moved: dict[str, str] = {}   # name -> submodule, read on the first name not listed

  def _former(name: str) -> Any:
    if moved_to and not moved:
      for place in moved_to:
        moved.update(dict.fromkeys(listed_imports(Path(init_file).parent / f"{place}.py"),
                                   place))
    if name in moved:
      new = f"{package}.{moved[name]}"
      said = f"moved to {new}.{name}"
    elif name in private:
      new, said = private[name], f"is private now (it was used only inside {package})"
    else:
      raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    warnings.warn(f"{package}.{name} {said}; the old name goes in the next release",
                  DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(new), name)

  def __getattr__(name: str) -> Any:
    try:
      source, attribute = names[name]
    except KeyError:
      return _former(name)
    if source == package:   # `from package import submodule`
      value = importlib.import_module(f"{package}.{attribute}")
    else:
      value = getattr(importlib.import_module(source), attribute)
    setattr(sys.modules[package], name, value)
    return value

  def __dir__() -> list[str]:
    return sorted(set(vars(sys.modules[package])) | set(names))

  return __getattr__, __dir__
