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
        base = node.module[len("fedkrr._src."):]
        # `from fedkrr._src.scale import matfree` imports the module scale.matfree
        targets = [base] if (SRC / (base.replace(".", "/") + ".py")).exists() else [
            f"{base}.{a.name}" for a in node.names]
      else:
        continue
    elif isinstance(node, ast.Import):
      targets = [a.name[len("fedkrr._src."):] for a in node.names
                 if a.name.startswith("fedkrr._src.")]
    else:
      continue
    for target in targets:
      yield target, node.lineno, id(node) in top


def _modules() -> dict[str, Path]:
  return {_module_name(p): p for p in SRC.rglob("*.py") if p.name != "__init__.py"}


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: {t for t, _, _ in _own_imports(path) if t in modules and t != name}
          for name, path in modules.items()}


def test_the_graph_sees_the_modules_and_their_imports():
  graph = _graph()
  assert "paper.verify" in graph["paper.search"]
  assert "paper.shipped_findings" in graph["paper.verify"]


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


# fedkrr's layers, lowest first (docs/architecture.md, "fedkrr"): a module imports only
# modules of lower rank. The folders show them: io/ and the plumbing at the bottom, the
# mathematics flat in fedkrr/_src/, scale/ above the closed forms, paper/ above all of
# the library, the command line on top.
RANKS = {
    "names": 0, "metrics": 0, "lazy": 0, "version": 0, "pytree": 0, "io.reading": 0,
    "io.interrupts": 0, "io.synthetic": 0, "scale.devices": 0, "scale.xla_env": 0,
    "io.files": 1, "linalg": 1, "krylov": 1, "scale.memory": 1,
    "nn_kernels": 2, "kernels": 3, "problem": 4,
    "learner": 5, "geometry": 5, "special_cases": 6, "io.problem_io": 5,
    "protocols": 6, "closed_form": 7,
    "rates": 8, "public_distillation": 8, "scale.matfree": 8, "scale.sharded": 8,
    "runner": 9,
    "paper.shipped_findings": 10, "paper.search_space": 10, "paper.toy": 10,
    "paper.rate_plots": 10, "paper.demo": 10, "paper.verify": 11, "paper.search_claims": 12,
    "paper.search": 13,
    "commands": 14, "cli": 15,
}


def test_every_fedkrr_module_has_a_layer():
  missing = sorted(set(_modules()) - set(RANKS))
  assert not missing, f"add these modules to RANKS (and docs/architecture.md): {missing}"
  assert not set(RANKS) - set(_modules()), sorted(set(RANKS) - set(_modules()))


def test_fedkrr_imports_go_down_the_layers():
  wrong = [f"{name} (rank {RANKS[name]}) imports {target} (rank {RANKS[target]})"
           for name, targets in _graph().items() for target in targets
           if RANKS[target] >= RANKS[name]]
  assert not wrong, wrong
