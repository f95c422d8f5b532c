"""Both packages' layers (docs/architecture.md), held by one import walker (tests/layers.py).

For ``fedkrr`` and ``neural`` alike: every module of ``_src`` has a rank (RANKS) and
imports only modules of lower rank; every folder has a layer and every flat module its
own (FOLDERS, FLAT), no import goes from a lower layer to a higher one and the ranks agree
with the layers; no import circle, in a package or inside a folder (deferred imports
included); an import of either package inside a function says why (``# deferred: ...``,
for start-up time), and in fedkrr only the command line defers its own. No package
reaches into another's ``_src``; fedkrr never imports neural or Flax.

Each ``_src`` module has a test module of its name (``tests/<package>/<folder>/
test_<module>.py``) or a line in TESTED_BY naming the files that test it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import layers
from layers import ROOT
import pytest


class Tables(NamedTuple):
  """One package's layers: the rank of each module, the layer of each folder and flat
  module (dotted names under ``_src``; a folder's ``__init__`` named by its folder)."""

  ranks: dict[str, float]
  folders: dict[str, int]
  flat: dict[str, int]


# fedkrr's layers, lowest first: io/ and platform/ under the mathematics, which is flat in
# fedkrr/_src/ with the plumbing below it; scale/ above the closed forms, paper/ above all
# of the library, the command line on top. A folder's ``__init__`` (which imports nothing)
# ranks with its lowest module.
FEDKRR = Tables(
    ranks={
        "names": 0, "metrics": 0, "lazy": 0, "version": 0, "pytree": 0,
        "io": 1, "io.reading": 1, "io.interrupts": 1, "io.synthetic": 1, "io.files": 2,
        "platform": 3, "platform.devices": 3, "platform.xla_env": 3, "platform.cores": 3,
        "platform.memory": 4, "platform.distributed": 4,
        "linalg": 5, "krylov": 5, "nn_kernels": 6, "kernels": 7, "problem": 8,
        "learner": 9, "geometry": 9, "problem_io": 9, "special_cases": 10, "protocols": 10,
        "closed_form": 11, "rates": 12, "public_distillation": 12,
        "scale": 13, "scale.matfree": 13, "scale.sharded": 13,
        "runner": 14, "registry": 14,
        "paper": 15, "paper.shipped_findings": 15, "paper.search_space": 15, "paper.toy": 15,
        "paper.rate_plots": 15, "paper.demo": 15, "paper.verify": 16,
        "paper.search_claims": 17, "paper.search": 18,
        "commands": 19, "cli": 20,
    },
    folders={"io": 0, "platform": 1, "scale": 3, "paper": 5},
    flat={
        "names": 0, "metrics": 0, "lazy": 0, "version": 0, "pytree": 0,   # plumbing
        "linalg": 2, "krylov": 2, "nn_kernels": 2, "kernels": 2, "problem": 2,   # mathematics
        "problem_io": 2, "learner": 2, "geometry": 2, "special_cases": 2, "protocols": 2,
        "closed_form": 2, "rates": 2, "public_distillation": 2,
        "runner": 4, "registry": 4,                                         # front door
        "commands": 6, "cli": 6,                                            # command line
    },
)

# neural's layers: data and partitions < models < training < learners < the paper's
# evidence < run infrastructure < experiment and methods < config files and jobs < figures
# and the main job < command line. A folder's ``__init__`` ranks with its folder.
NEURAL = Tables(
    ranks={
        "choices": 0, "capabilities": 0, "settings": 0,
        "datasets": 0.5, "datasets.data": 0.5, "datasets.partitions": 0.5,
        "datasets.graphs": 0.5, "datasets.run_data": 1, "datasets.download": 1,
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
        "jobs": 13, "jobs.specs": 13, "jobs.readback": 13.2, "jobs.runs": 13,
        "jobs.batched": 13.2, "jobs.workers": 13.5, "jobs.ray_executor": 13.55,
        "jobs.executors": 13.58,
        "figures": 13.6, "figures.reproduce_curves": 13.6, "figures.reproduce_plot": 13.6,
        "figures.reproduce_report": 13.7, "figures.report": 14, "figures.reproduce": 14,
        "cli": 15,
    },
    folders={"datasets": 1, "models": 2, "training": 3, "learners": 4, "evidence": 5,
             "runtime": 6, "kd": 7, "methods": 7, "jobs": 8, "figures": 9},
    flat={"choices": 0, "capabilities": 0, "settings": 0,   # no imports
          "cli": 10},                                         # command line
)

PACKAGES = {"fedkrr": FEDKRR, "neural": NEURAL}

# The files that test a ``_src`` module without a test module of its name
# (tests/<package>/<folder>/test_<module>.py), each named from tests/.
TESTED_BY = {
    "fedkrr": {
        "commands": ["fedkrr/test_cli.py", "fedkrr/paper/test_toy.py",
                     "fedkrr/paper/test_verify.py"],   # the commands run through main()
        "io.files": ["fedkrr/io/test_reading.py", "neural/runtime/test_rundir.py"],
        "linalg": ["fedkrr/test_learner.py", "fedkrr/test_closed_form.py"],
        "names": ["fedkrr/test_closed_form.py", "test_public_api.py"],   # weights, the table
        "paper.search_claims": ["fedkrr/paper/test_search.py",
                                "fedkrr/paper/test_search_finds.py"],
        "paper.search_space": ["fedkrr/paper/test_search.py"],
        "paper.shipped_findings": ["fedkrr/paper/test_search.py", "fedkrr/paper/test_verify.py"],
        "platform.devices": ["fedkrr/scale/test_sharded.py", "fedkrr/platform/test_distributed.py"],
        "platform.memory": ["fedkrr/scale/test_matfree.py", "fedkrr/test_runner.py"],
        "problem_io": ["fedkrr/test_cli.py", "fedkrr/paper/test_search_finds.py"],
        "protocols": ["fedkrr/test_closed_form.py", "fedkrr/test_runner.py",
                      "fedkrr/test_numpy_reference.py"],
        "version": ["test_public_api.py"],   # fedkrr.__version__ is the installed version
    },
    "neural": {
        "choices": ["neural/test_cli.py"],   # the command line's choices
        "evidence.authors": ["neural/evidence/test_claims.py", "neural/figures/test_reproduce.py"],
        "evidence.curves": ["neural/evidence/test_rules.py", "neural/evidence/test_intervals.py"],
        "figures.reproduce_curves": ["neural/figures/test_reproduce.py"],
        "figures.reproduce_report": ["neural/figures/test_reproduce.py",
                                     "neural/evidence/test_claims.py"],
        "jobs.executors": ["neural/test_cli.py", "neural/jobs/test_ray_executor.py"],
        "jobs.readback": ["benchmarks/test_claim_scripts.py", "benchmarks/test_paper_claims.py"],
        "jobs.runs": ["neural/jobs/test_specs.py", "neural/jobs/test_workers.py",
                      "neural/jobs/test_batched.py"],
        "models.repshare_models": ["neural/methods/test_representation_sharing.py"],
        "runtime.checkpoint": ["neural/runtime/test_rundir.py", "neural/test_capabilities.py"],
        "settings": ["neural/runtime/test_config.py"],
        "training.optimizers": ["neural/training/test_train_loop.py",
                                "neural/runtime/test_config.py"],
        "training.soft_targets": ["neural/test_capabilities.py", "neural/training/test_augment.py"],
    },
}

TESTS = ROOT / "tests"
_PACKAGES = pytest.mark.parametrize("package", sorted(PACKAGES))


def _layer(package: str, name: str) -> int:
  tables = PACKAGES[package]
  return layers.layer(name, tables.folders, tables.flat)


def test_the_walker_sees_the_modules_and_their_imports():
  fedkrr, neural = layers.graph("fedkrr"), layers.graph("neural")
  assert "paper.verify" in fedkrr["paper.search"]          # from fedkrr._src.paper import
  assert "paper.shipped_findings" in fedkrr["paper.verify"]
  assert "commands" in fedkrr["cli"]                        # deferred, from fedkrr._src import
  assert "jobs.runs" in neural["cli"]                       # from neural._src.jobs.runs import
  assert "methods.registry" in neural["cli"]                # deferred
  assert "methods.mhd" in neural["methods"]                 # a folder's __init__


@_PACKAGES
def test_every_module_has_a_rank(package):
  modules, ranks = set(layers.modules(package)), set(PACKAGES[package].ranks)
  assert not modules - ranks, (f"add these modules to {package.upper()}'s ranks (and "
                               f"docs/architecture.md): {sorted(modules - ranks)}")
  assert not ranks - modules, f"no such modules: {sorted(ranks - modules)}"


@_PACKAGES
def test_imports_go_down_the_ranks(package):
  """Deferred imports included."""
  ranks = PACKAGES[package].ranks
  wrong = [f"{name} (rank {ranks[name]}) imports {target} (rank {ranks[target]})"
           for name, targets in layers.graph(package).items() for target in sorted(targets)
           if ranks[target] >= ranks[name]]
  assert not wrong, wrong


@_PACKAGES
def test_every_folder_and_flat_module_has_a_layer(package):
  tables = PACKAGES[package]
  wrong = layers.unlayered(layers.modules(package), tables.folders, tables.flat)
  assert not wrong, wrong


@_PACKAGES
def test_no_import_goes_from_a_lower_folder_to_a_higher_one(package):
  tables = PACKAGES[package]
  wrong = layers.upward_imports(layers.graph(package), tables.folders, tables.flat)
  assert not wrong, wrong


@_PACKAGES
def test_the_ranks_agree_with_the_folders(package):
  """A module of a higher layer ranks above every module of a lower one."""
  ranks = PACKAGES[package].ranks
  wrong = [f"{low} (layer {_layer(package, low)}, rank {ranks[low]}) >= "
           f"{high} (layer {_layer(package, high)}, rank {ranks[high]})"
           for low in ranks for high in ranks
           if _layer(package, low) < _layer(package, high) and ranks[low] >= ranks[high]]
  assert not wrong, wrong


@_PACKAGES
def test_no_import_circle_in_the_package_nor_inside_a_folder(package):
  """Deferred imports included; the circles inside one folder are named apart."""
  edges = layers.graph(package)
  assert not layers.circles(edges), layers.circles(edges)
  for folder in sorted(PACKAGES[package].folders):
    inside = {name: {t for t in targets if layers.folder(t) == folder}
              for name, targets in edges.items() if layers.folder(name) == folder}
    assert not layers.circles(inside), (folder, layers.circles(inside))


def test_the_circle_finder_finds_a_circle():
  assert layers.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
      ["a", "b", "c", "a"]]
  assert layers.circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


@_PACKAGES
def test_an_import_of_either_package_inside_a_function_says_why(package):
  """Only for start-up time: the command lines (and neural's config files and checkpoint
  reader) import JAX's side when a command needs it, marked ``# deferred: ...``; that
  includes neural's imports of fedkrr."""
  wrong = [f"{path.relative_to(ROOT)}:{statement.line} imports {statement.names[0]} "
           f"inside a function (say why with `# deferred: ...` if it is for start-up time)"
           for path in layers.modules(package).values() for statement in layers.imports(path)
           if not statement.at_top and not statement.says_deferred
           and any(n.split(".")[0] in PACKAGES for n in statement.names)]
  assert not wrong, wrong


def test_only_fedkrrs_command_line_imports_its_own_inside_a_function():
  """fedkrr's library modules import their own at the top."""
  modules = layers.modules("fedkrr")
  inside = [f"{path.name}:{statement.line} imports {target}"
            for name, path in modules.items() if name != "cli"
            for statement in layers.imports(path)
            if not statement.at_top
            and (target := layers.target(statement, "fedkrr", modules)) is not None]
  assert not inside, inside


def test_fedkrrs_command_line_defers_at_most_five_imports():
  """``cli`` defers the parser's choices and the one module that runs the commands
  (``commands``, which imports the rest at its top): no more than 5 deferred imports."""
  modules = layers.modules("fedkrr")
  deferred = [layers.target(s, "fedkrr", modules) for s in layers.imports(modules["cli"])
              if not s.at_top]
  deferred = [t for t in deferred if t is not None]
  assert "commands" in deferred
  assert len(deferred) <= 5, deferred


def _python_files(*dirs):
  for d in dirs:
    yield from sorted((ROOT / d).rglob("*.py"))


def test_no_package_imports_another_packages_private_modules():
  for path in _python_files("neural", "benchmarks"):
    for statement in layers.imports(path):
      assert not any(n.startswith("fedkrr._src") for n in statement.names), \
          f"{path}:{statement.line}"
  for path in _python_files("fedkrr", "benchmarks"):
    for statement in layers.imports(path):
      assert not any(n.startswith("neural._src") for n in statement.names), \
          f"{path}:{statement.line}"
  for path in [*(ROOT / "docs").glob("*.md"), *(ROOT / "notebooks").glob("*.ipynb"),
               ROOT / "README.md"]:
    text = path.read_text()
    for private in ("from fedkrr._src", "import fedkrr._src", "from neural._src",
                    "import neural._src"):
      assert private not in text, f"{path.name} sends users into a private module: {private}"


def test_fedkrr_never_imports_neural_or_flax():
  """fedkrr, its command line included, stands alone: the main job is ``neural demo``."""
  for path in _python_files("fedkrr"):
    for statement in layers.imports(path):
      assert not any(n.split(".")[0] in ("neural", "flax") for n in statement.names), \
          f"{path}:{statement.line}"


def test_library_code_never_switches_the_matplotlib_backend():
  for path in _python_files("fedkrr", "neural"):
    text = path.read_text()
    assert "matplotlib.use(" not in text, path
    for statement in layers.imports(path):
      assert "matplotlib.pyplot" not in statement.names, \
          f"{path}:{statement.line} uses pyplot's global state"


def _own_test(package: str, name: str) -> Path:
  """``tests/<package>/<folder>/test_<module>.py`` for the module ``<folder>.<module>``."""
  *folders, module = name.split(".")
  return TESTS.joinpath(package, *folders, f"test_{module}.py")


def _modules_with_tests(package: str) -> list[str]:
  """The modules of ``package``'s ``_src`` that need a test (a folder's ``__init__``,
  which only imports, does not)."""
  return [name for name, path in layers.modules(package).items() if path.name != "__init__.py"]


@_PACKAGES
def test_every_module_has_a_test_module_of_its_name_or_a_line_in_tested_by(package):
  table = TESTED_BY[package]
  missing = [f"{name}: write {_own_test(package, name).relative_to(ROOT)} or name its tests "
             f"in TESTED_BY" for name in _modules_with_tests(package)
             if not _own_test(package, name).exists() and name not in table]
  assert not missing, missing


@_PACKAGES
def test_tested_by_names_modules_and_test_files_that_exist(package):
  modules = set(_modules_with_tests(package))
  wrong = [f"TESTED_BY names {name!r}, no module" for name in TESTED_BY[package]
           if name not in modules]
  wrong += [f"{name}: no test file {file}" for name, files in TESTED_BY[package].items()
            for file in files if not (TESTS / file).is_file()]
  wrong += [f"{name} has {_own_test(package, name).relative_to(ROOT)}: drop its TESTED_BY line"
            for name in TESTED_BY[package] if _own_test(package, name).exists()]
  assert not wrong, wrong
