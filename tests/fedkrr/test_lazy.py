"""Public names imported on first use (``fedkrr.lazy_exports``), on a package made here."""

import sys
import textwrap

import pytest

from fedkrr import lazy_exports
from fedkrr._src.lazy import listed_imports

INIT = textwrap.dedent("""
    from typing import TYPE_CHECKING

    from lazy_pkg_under_test.eager import EAGER   # imported at once, not listed

    if TYPE_CHECKING:
      from lazy_pkg_under_test import sub
      from lazy_pkg_under_test.core import solve
      from lazy_pkg_under_test.core import solve as solve_again
      from .core import relative   # relative: not listed
    else:
      from fedkrr import lazy_exports
      __getattr__, __dir__ = lazy_exports(__name__, __file__)
""")


@pytest.fixture
def package(tmp_path, monkeypatch):
  """A package ``lazy_pkg_under_test`` whose modules ``core`` and ``sub`` say when they
  are imported (``IMPORTED``), removed from ``sys.modules`` afterwards."""
  root = tmp_path / "lazy_pkg_under_test"
  root.mkdir()
  (root / "__init__.py").write_text(INIT)
  (root / "eager.py").write_text("EAGER = 1\n")
  (root / "core.py").write_text("IMPORTED = True\n\ndef solve(x):\n  return 2 * x\n\n"
                                "relative = 0\n")
  (root / "sub.py").write_text("IMPORTED = True\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  yield root
  for name in [n for n in sys.modules if n.split(".")[0] == "lazy_pkg_under_test"]:
    del sys.modules[name]


def test_listed_imports_reads_the_type_checking_block_only(package):
  assert listed_imports(package / "__init__.py") == {
      "sub": ("lazy_pkg_under_test", "sub"),
      "solve": ("lazy_pkg_under_test.core", "solve"),
      "solve_again": ("lazy_pkg_under_test.core", "solve"),
  }


def test_a_name_imports_its_module_on_first_use_only(package):
  import lazy_pkg_under_test as pkg

  assert "lazy_pkg_under_test.core" not in sys.modules
  assert "lazy_pkg_under_test.sub" not in sys.modules
  assert pkg.solve(3) == 6
  assert "lazy_pkg_under_test.core" in sys.modules
  assert "solve" in vars(pkg)                      # an ordinary attribute from now on
  assert pkg.solve_again is pkg.solve
  assert "lazy_pkg_under_test.sub" not in sys.modules
  assert pkg.sub is sys.modules["lazy_pkg_under_test.sub"] and pkg.sub.IMPORTED


def test_dir_lists_every_name_and_an_unlisted_one_is_an_attribute_error(package):
  import lazy_pkg_under_test as pkg

  assert {"sub", "solve", "solve_again", "EAGER"} <= set(dir(pkg))
  assert "relative" not in dir(pkg)
  with pytest.raises(AttributeError, match="'lazy_pkg_under_test' has no attribute 'relative'"):
    pkg.relative  # noqa: B018


def test_lazy_exports_returns_the_pair_for_a_package(package):
  getattr_, dir_ = lazy_exports("lazy_pkg_under_test", package / "__init__.py")
  import lazy_pkg_under_test as pkg

  assert getattr_("solve") is pkg.solve
  assert "solve_again" in dir_()


def test_names_that_left_the_top_level_resolve_with_a_warning_naming_their_place(package):
  (package / "tier.py").write_text(textwrap.dedent("""
      from typing import TYPE_CHECKING
      if TYPE_CHECKING:
        from lazy_pkg_under_test.core import solve
      else:
        from fedkrr import lazy_exports
        __getattr__, __dir__ = lazy_exports(__name__, __file__)
  """))
  (package / "__init__.py").write_text(INIT.replace(
      "lazy_exports(__name__, __file__)",
      "lazy_exports(__name__, __file__, moved_to=('tier',),\n"
      "                                   private={'relative': 'lazy_pkg_under_test.core'})")
      .replace("  from lazy_pkg_under_test.core import solve\n", ""))
  import lazy_pkg_under_test as pkg

  with pytest.warns(DeprecationWarning, match=r"^lazy_pkg_under_test\.solve moved to "
                                              r"lazy_pkg_under_test\.tier\.solve; the old"):
    assert pkg.solve(4) == 8
  with pytest.warns(DeprecationWarning, match="relative is private now"):
    assert pkg.relative == 0
  assert "solve" not in dir(pkg) and "solve" not in vars(pkg)   # warns at every use
  with pytest.warns(DeprecationWarning):
    pkg.solve  # noqa: B018
  with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
    pkg.nothing  # noqa: B018
