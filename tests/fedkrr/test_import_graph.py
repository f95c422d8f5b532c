"""fedkrr's import graph: no circle among its modules, and imports at the top of the module.

(That fedkrr never imports neural or Flax is held by tests/neural/test_layers.py.)
"""

import ast
from pathlib import Path

import layers

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
# modules of lower rank. The folders show them (FOLDERS): io/ and platform/ under the
# mathematics, which is flat in fedkrr/_src/ with the plumbing below it; scale/ above the
# closed forms, paper/ above all of the library, the command line on top.
RANKS = {
    "names": 0, "metrics": 0, "lazy": 0, "version": 0, "pytree": 0,
    "io.reading": 1, "io.interrupts": 1, "io.synthetic": 1, "io.files": 2,
    "platform.devices": 3, "platform.xla_env": 3, "platform.cores": 3, "platform.memory": 4,
    "platform.distributed": 4,
    "linalg": 5, "krylov": 5, "nn_kernels": 6, "kernels": 7, "problem": 8,
    "learner": 9, "geometry": 9, "problem_io": 9, "special_cases": 10, "protocols": 10,
    "closed_form": 11, "rates": 12, "public_distillation": 12,
    "scale.matfree": 13, "scale.sharded": 13,
    "runner": 14, "registry": 14,
    "paper.shipped_findings": 15, "paper.search_space": 15, "paper.toy": 15,
    "paper.rate_plots": 15, "paper.demo": 15, "paper.verify": 16, "paper.search_claims": 17,
    "paper.search": 18,
    "commands": 19, "cli": 20,
}

# The folders' layers, lowest first: every module of a folder sits in its folder's layer;
# the flat modules of fedkrr/_src/ sit in the layer FLAT names. No import goes from a
# lower layer to a higher one, and the ranks above agree with the layers.
FOLDERS = {"io": 0, "platform": 1, "scale": 3, "paper": 5}
FLAT = {
    "names": 0, "metrics": 0, "lazy": 0, "version": 0, "pytree": 0,   # plumbing
    "linalg": 2, "krylov": 2, "nn_kernels": 2, "kernels": 2, "problem": 2,   # mathematics
    "problem_io": 2, "learner": 2, "geometry": 2, "special_cases": 2, "protocols": 2,
    "closed_form": 2, "rates": 2, "public_distillation": 2,
    "runner": 4, "registry": 4,                                         # front door
    "commands": 6, "cli": 6,                                            # command line
}


def _layer(name: str) -> int:
  return layers.layer(name, FOLDERS, FLAT)


def test_every_fedkrr_module_has_a_layer():
  missing = sorted(set(_modules()) - set(RANKS))
  assert not missing, f"add these modules to RANKS (and docs/architecture.md): {missing}"
  assert not set(RANKS) - set(_modules()), sorted(set(RANKS) - set(_modules()))


def test_fedkrr_imports_go_down_the_layers():
  wrong = [f"{name} (rank {RANKS[name]}) imports {target} (rank {RANKS[target]})"
           for name, targets in _graph().items() for target in targets
           if RANKS[target] >= RANKS[name]]
  assert not wrong, wrong


def test_every_folder_and_flat_module_has_a_layer():
  wrong = layers.unlayered(_modules(), FOLDERS, FLAT)
  assert not wrong, wrong


def test_no_import_goes_from_a_lower_folder_to_a_higher_one():
  wrong = layers.upward_imports(_graph(), FOLDERS, FLAT)
  assert not wrong, wrong


def test_the_ranks_agree_with_the_folders():
  """A module of a higher layer ranks above every module of a lower one."""
  wrong = [f"{low} (layer {_layer(low)}, rank {RANKS[low]}) >= "
           f"{high} (layer {_layer(high)}, rank {RANKS[high]})"
           for low in RANKS for high in RANKS
           if _layer(low) < _layer(high) and RANKS[low] >= RANKS[high]]
  assert not wrong, wrong
