"""fedkrr's import graph: no circle among its modules, and imports at the top of the module.

(That fedkrr never imports neural or Flax is held by tests/neural/test_layers.py.)
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "fedkrr" / "_src"


def _module_name(path: Path) -> str:
  return path.relative_to(SRC).with_suffix("").as_posix().replace("/", ".")


def _own_imports(path: Path):
  """``(fedkrr._src module, line, at the module's top)`` of every import of fedkrr's own."""
  tree = ast.parse(path.read_text())
  top = set(map(id, tree.body))
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module == "fedkrr._src":
        targets = [a.name for a in node.names]
      elif node.module.startswith("fedkrr._src."):
        targets = [node.module[len("fedkrr._src."):]]
      else:
        continue
    elif isinstance(node, ast.Import):
      targets = [a.name[len("fedkrr._src."):] for a in node.names
                 if a.name.startswith("fedkrr._src.")]
    else:
      continue
    for target in targets:
      yield target, node.lineno, id(node) in top


def _graph() -> dict[str, set[str]]:
  modules = {_module_name(p): p for p in SRC.rglob("*.py") if p.name != "__init__.py"}
  return {name: {t for t, _, _ in _own_imports(path) if t in modules and t != name}
          for name, path in modules.items()}


def test_the_graph_sees_the_modules_and_their_imports():
  graph = _graph()
  assert "verify" in graph["search"] and "shipped_findings" in graph["verify"]


def test_no_circle_among_fedkrr_modules_deferred_imports_included():
  graph, done, path = _graph(), set(), []

  def visit(name):
    if name in path:
      raise AssertionError("import circle: " + " -> ".join(path[path.index(name):] + [name]))
    if name in done:
      return
    path.append(name)
    for target in sorted(graph[name]):
      visit(target)
    path.pop()
    done.add(name)

  for name in sorted(graph):
    visit(name)


def test_library_modules_import_their_own_at_the_top():
  """Only the command line defers imports (so that ``fedkrr --help`` starts at once)."""
  inside = [f"{path.name}:{line} imports {target}" for path in sorted(SRC.rglob("*.py"))
            if path.name != "cli.py" for target, line, at_top in _own_imports(path)
            if not at_top]
  assert not inside, inside


def test_the_command_line_defers_at_most_five_imports():
  """``cli`` defers the parser's choices and the one module that runs the commands
  (``commands``, which imports the rest at its top): no more than 5 deferred imports."""
  deferred = [f"{target} (line {line})" for target, line, at_top in _own_imports(SRC / "cli.py")
              if not at_top]
  assert "commands" in [d.split()[0] for d in deferred]
  assert len(deferred) <= 5, deferred
