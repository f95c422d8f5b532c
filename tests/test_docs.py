"""The documentation's promises: every public function and class has a docstring,
and every docstring example runs and prints what it shows.

Examples are run with ``np``, ``jnp``, ``jax``, ``fedkrr`` and ``neural`` in scope
(as the API reference says), in float64 (the suite's default).
"""

import dataclasses
import doctest
import importlib
import inspect
from pathlib import Path
import pkgutil
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
import neural
from neural import data
from neural import evidence
from neural import models
from neural import runs
from neural import training

PAPER_MODULES = ("ddistillation", "mhd", "representation_sharing", "feddkc")
FEDKRR_TIERS = ("learners", "protocols", "public", "rates", "scale")
PUBLIC_MODULES = (fedkrr, *(importlib.import_module(f"fedkrr.{tier}") for tier in FEDKRR_TIERS),
                  neural, training, data, models, evidence, runs, neural.methods,
                  *(getattr(neural.methods, name) for name in PAPER_MODULES))
# Flax calls these itself; they are documented by Flax.
FRAMEWORK_HOOKS = {"setup"}


def public_objects():
  """(qualified name, object) of every public function and class the packages list."""
  for module in PUBLIC_MODULES:
    for name in sorted(dir(module)):   # dir: the lazy packages list names not yet imported
      obj = getattr(module, name)
      if name.startswith("_") or inspect.ismodule(obj):
        continue
      if inspect.isclass(obj) or inspect.isfunction(obj):
        yield f"{module.__name__}.{name}", obj


def own_docstring(obj) -> str | None:
  """The object's own docstring (not a dataclass's generated signature, not inherited)."""
  doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
  if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc and doc.startswith(
      f"{obj.__name__}("):
    return None
  return doc.strip() if doc else None


def undocumented(obj, qualname: str) -> list[str]:
  missing = [] if own_docstring(obj) else [qualname]
  if inspect.isclass(obj):
    # A dataclass field's default may be a function (a Flax layer's initialiser): a
    # value, documented in the class's Attributes, not a method.
    fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
    for name, member in vars(obj).items():
      if name.startswith("_") or name in FRAMEWORK_HOOKS or name in fields:
        continue
      function = member.fget if isinstance(member, property) else getattr(
          member, "__func__", member)
      if inspect.isfunction(function) and not (function.__doc__ or "").strip():
        missing.append(f"{qualname}.{name}")
  return missing


def test_the_check_finds_a_missing_docstring():
  @dataclasses.dataclass
  class Bare:
    x: int

    def method(self):
      return self.x

  assert undocumented(Bare, "Bare") == ["Bare", "Bare.method"]


def test_every_public_function_class_and_method_has_a_docstring():
  objects = dict(public_objects())
  assert len(objects) > 250   # the check sees the whole public surface
  missing = [m for name, obj in objects.items() for m in undocumented(obj, name)]
  assert not missing, f"no docstring: {missing}"


def implementation_modules():
  names = []
  for package in ("fedkrr", "neural"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
      if not info.name.endswith("__main__"):   # importing it runs the command line
        names.append(info.name)
  return sorted(names)


def examples_of(module_name: str):
  module = importlib.import_module(module_name)
  finder = doctest.DocTestFinder(exclude_empty=True)
  globs = {"np": np, "jnp": jnp, "jax": jax, "fedkrr": fedkrr, "neural": neural}
  return [t for t in finder.find(module, module_name, extraglobs=globs) if t.examples]


MODULES_WITH_EXAMPLES = [m for m in implementation_modules() if examples_of(m)]


def test_examples_are_found():
  assert len(MODULES_WITH_EXAMPLES) >= 15


@pytest.mark.parametrize("module_name", MODULES_WITH_EXAMPLES)
def test_docstring_examples_run(module_name):
  if not jax.config.read("jax_enable_x64"):
    pytest.skip("the examples show float64 results")
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  failures = []
  for test in examples_of(module_name):
    runner.run(test, out=failures.append, clear_globs=True)
  assert runner.failures == 0, "".join(failures)


def test_no_tracker_wording_in_what_users_read():
  """Configs, docs, notebooks, code and scripts speak for themselves, not of an issue tracker."""
  root = Path(__file__).resolve().parent.parent
  pattern = re.compile(r"\bissue\s+#?\d+|\bthe issue's\b", re.IGNORECASE)
  found = []
  for folder in ("fedkrr", "neural", "docs", "notebooks", "benchmarks", "scripts", "tests"):
    for path in (root / folder).rglob("*"):
      if path.suffix in (".py", ".md", ".json", ".ipynb", ".sh") and path != Path(__file__):
        found += [f"{path.relative_to(root)}: {m.group(0)}"
                  for m in pattern.finditer(path.read_text(errors="replace"))]
  found += [f"README.md: {m.group(0)}" for m in pattern.finditer((root / "README.md").read_text())]
  assert not found, found
