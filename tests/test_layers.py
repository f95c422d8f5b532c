"""`neural` imports one way (docs/architecture.md); no package reaches into another's `_src`."""

import ast
from pathlib import Path

import layers
import pytest

ROOT = Path(__file__).resolve().parents[1]

# The rank of every module of neural/_src: a module imports only modules of lower rank.
# Layers: data and partitions < models < training < learners < the paper's evidence <
# run infrastructure < experiment and methods < config files and jobs < figures and the
# main job < command line. A folder's ``__init__`` (which imports nothing) ranks with it.
RANKS = {
    "choices": 0, "capabilities": 0, "settings": 0,
    "datasets": 0.5, "datasets.data": 0.5, "datasets.partitions": 0.5, "datasets.graphs": 0.5,
    "datasets.run_data": 1, "datasets.download": 1,
    "models": 1.5, "models.conv": 1.5, "models.models": 2, "models.repshare_models": 2.5,
    "training": 3, "training.optimizers": 3, "training.train_loop": 4,
    "training.augment": 4, "training.training": 5, "training.soft_targets": 5,
    "learners": 6, "learners.learners": 6, "learners.forest": 6, "learners.ntk": 6,
    "learners.fedavg": 6, "learners.linearized": 7,
    "evidence": 7.1, "evidence.paper_units": 7.1, "evidence.curves": 7.1,
    "evidence.intervals": 7.15, "evidence.rules": 7.2, "evidence.seeded": 7.3,
    "evidence.claims": 7.4, "evidence.authors": 7.6,
    "runtime": 8, "runtime.config": 8, "runtime.checkpoint": 8, "runtime.plots": 8,
    "runtime.environment": 8, "runtime.outcomes": 8, "runtime.tensorboard": 8.5,
    "runtime.rundir": 9, "runtime.rounds": 9.5,
    "kd": 10, "kd.experiment": 10, "methods.registry": 10,
    "methods.ddistillation": 11, "methods.mhd": 11, "methods.representation_sharing": 11,
    "methods.feddkc": 11, "methods": 12, "kd.compare": 12,
    "jobs": 13, "jobs.specs": 13, "jobs.readback": 13.2, "jobs.runs": 13, "jobs.batched": 13.2,
    "jobs.workers": 13.5, "jobs.ray_executor": 13.55, "jobs.executors": 13.58,
    "figures": 13.6, "figures.reproduce_curves": 13.6, "figures.reproduce_plot": 13.6,
    "figures.reproduce_report": 13.7, "figures.report": 14, "figures.reproduce": 14,
    "cli": 15,
}

# The folders' layers, lowest first (tests/layers.py holds the rule for both packages):
# every module of a folder sits in its folder's layer, the flat modules of neural/_src/ in
# the layer FLAT names; no import goes from a lower layer to a higher one, and the ranks
# above agree with the layers.
FOLDERS = {"datasets": 1, "models": 2, "training": 3, "learners": 4, "evidence": 5,
           "runtime": 6, "kd": 7, "methods": 7, "jobs": 8, "figures": 9}
FLAT = {"choices": 0, "capabilities": 0, "settings": 0,   # no imports
        "cli": 10}                                          # command line


def _modules():
  src = ROOT / "neural" / "_src"
  for path in sorted(src.rglob("*.py")):
    rel = path.relative_to(src).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    if parts:
      yield ".".join(parts), path


def _imports(path: Path):
  """``(module, line, at top level or deferred)`` of every import in the file.

  An import inside a function counts as top level when its line says why it is
  deferred (``# deferred: ...``): the command line and the config files import JAX's
  side only when a command needs it, so that ``neural --help`` starts at once.
  """
  text = path.read_text()
  lines = text.splitlines()
  tree = ast.parse(text)
  top = set(map(id, tree.body))
  for node in ast.walk(tree):
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    ok = id(node) in top or "# deferred:" in lines[node.lineno - 1]
    if isinstance(node, ast.ImportFrom) and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
      yield names, node.lineno, ok
    elif isinstance(node, ast.Import):
      yield [a.name for a in node.names], node.lineno, ok


def _neural_module(names):
  """The neural._src module an import refers to (the longest known prefix), else None."""
  for name in sorted(names, key=len, reverse=True):
    if name.startswith("neural._src."):
      rest = name[len("neural._src."):]
      while rest and rest not in RANKS:
        rest = rest.rpartition(".")[0]
      if rest:
        return rest
  return None


def test_every_module_has_a_layer():
  missing = [name for name, _ in _modules() if name not in RANKS]
  assert not missing, f"add these modules to RANKS (and docs/architecture.md): {missing}"


@pytest.mark.parametrize("name,path", list(_modules()), ids=[n for n, _ in _modules()])
def test_imports_go_down_the_layers_at_the_top_of_the_module(name, path):
  for names, line, at_top in _imports(path):
    target = _neural_module(names)
    if target is None or target == name:
      continue
    assert RANKS[target] < RANKS[name], \
        f"{path.name}:{line} imports {target} (rank {RANKS[target]} >= {RANKS[name]})"
    assert at_top, (f"{path.name}:{line} imports {target} inside a function (say why with "
                    f"`# deferred: ...` if it is for start-up time)")


def _graph():
  return {name: {t for names, _, _ in _imports(path) if (t := _neural_module(names))}
          for name, path in _modules()}


def test_every_folder_and_flat_module_has_a_layer():
  wrong = layers.unlayered((name for name, _ in _modules()), FOLDERS, FLAT)
  assert not wrong, wrong


def test_no_import_goes_from_a_lower_folder_to_a_higher_one():
  wrong = layers.upward_imports(_graph(), FOLDERS, FLAT)
  assert not wrong, wrong


def test_the_ranks_agree_with_the_folders():
  """A module of a higher layer ranks above every module of a lower one."""
  def layer(name):
    return layers.layer(name, FOLDERS, FLAT)
  wrong = [f"{low} (layer {layer(low)}, rank {RANKS[low]}) >= "
           f"{high} (layer {layer(high)}, rank {RANKS[high]})"
           for low in RANKS for high in RANKS
           if layer(low) < layer(high) and RANKS[low] >= RANKS[high]]
  assert not wrong, wrong


def _python_files(*dirs):
  for d in dirs:
    yield from sorted((ROOT / d).rglob("*.py"))


def test_no_package_imports_another_packages_private_modules():
  for path in _python_files("neural", "benchmarks"):
    for names, line, _ in _imports(path):
      assert not any(n.startswith("fedkrr._src") for n in names), f"{path}:{line}"
  for path in _python_files("fedkrr", "benchmarks"):
    for names, line, _ in _imports(path):
      assert not any(n.startswith("neural._src") for n in names), f"{path}:{line}"
  for path in [*(ROOT / "docs").glob("*.md"), *(ROOT / "notebooks").glob("*.ipynb"),
               ROOT / "README.md"]:
    text = path.read_text()
    for private in ("from fedkrr._src", "import fedkrr._src", "from neural._src",
                    "import neural._src"):
      assert private not in text, f"{path.name} sends users into a private module: {private}"


def test_fedkrr_never_imports_neural_or_flax():
  """fedkrr, its command line included, stands alone: the main job is ``neural demo``."""
  for path in _python_files("fedkrr"):
    for names, line, _ in _imports(path):
      assert not any(n.split(".")[0] in ("neural", "flax") for n in names), f"{path}:{line}"


def test_library_code_never_switches_the_matplotlib_backend():
  for path in _python_files("fedkrr", "neural"):
    text = path.read_text()
    assert "matplotlib.use(" not in text, path
    for names, line, _ in _imports(path):
      assert "matplotlib.pyplot" not in names, f"{path}:{line} uses pyplot's global state"
