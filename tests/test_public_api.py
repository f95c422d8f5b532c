"""The public surface imports and lists what it says it does."""

import pytest

import fedkrr
import neural


def test_fedkrr_public_names_import():
  names = [n for n in dir(fedkrr) if not n.startswith("_")]
  for name in ["make_problem", "FederatedProblem", "RBF", "Linear", "Polynomial", "Laplace",
               "KRRLearner", "krr_learners", "ridge_factor", "ridge_root", "simulate",
               "trajectory", "limit", "Limit", "central", "local", "run", "RunResult",
               "PROTOCOLS", "ProblemError", "KernelError", "PROTOCOL_TABLE", "ProtocolInfo",
               "ProtocolParams", "protocol_info", "display_name", "check_weights",
               "load_problem", "save_problem", "avoid_cpu_eigh_deadlock", "lazy_exports",
               "io", "paper", "learners", "protocols", "public", "rates", "scale"]:
    assert name in names, name
  assert set(fedkrr.PROTOCOLS) == {"akd", "avgkd", "weighted-avgkd", "pkd", "pkd-mean", "ekd",
                                   "backfit-gs", "backfit-jacobi"}
  assert fedkrr.PROTOCOLS == tuple(row.name for row in fedkrr.PROTOCOL_TABLE)


# The tiers below the top level: what a user does with them, a few names each.
TIERS = {
    "learners": ["Learner", "Model", "KRRModel", "BatchLearner", "WarmStartLearner", "fit_all",
                 "has_capability", "CapabilityError"],
    "protocols": ["Protocol", "RoundOutput", "get_protocol", "iterate", "akd", "avgkd", "pkd",
                  "pkd_mean", "ekd", "backfit", "central_models", "local_models",
                  "register_protocol", "unregister_protocol", "Recurrence"],
    "rates": ["degradation_rate", "degradation_rate_per_cycle", "rate_estimate", "rate_grid",
              "RATE_METHODS", "GRID_ROUTES", "warm_sweep", "sweep", "TwoClusters",
              "recurrence", "recurrence_matrix", "factors", "transfer", "spectral_radius",
              "RADIUS_METHODS", "geometry", "principal_cosines", "akd_by_projections",
              "avgkd_by_projections", "intersection_limit_linear"],
    "scale": ["kernel_matvec", "symmetric_matvec", "ridge_solve", "nystrom_preconditioner",
              "RidgeSolution", "MatfreeKRRLearner", "ConvergenceError", "matfree_learners",
              "matfree_trajectory", "choose_method", "exact_bytes", "matfree_bytes",
              "memory_limit", "TILE_ELEMENTS", "initialize_distributed",
              "distributed_settings"],
    "public": ["public_distillation_trajectory", "public_distillation_limit",
               "public_distillation_simulate", "coverage_sweep"],
}
# What left the top level for a tier or became private (names used only inside fedkrr).
FORMER_TOP_LEVEL_PRIVATE = ["MatfreeKRRModel", "NystromPreconditioner", "RUN_METHODS",
                            "RateEstimate", "RidgeFactor", "RidgeRoot",
                            "XLA_CPU_FLAGS", "agent_sharding", "stacked_gram"]


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_fedkrr_tiers_hold_their_names_once(tier):
  """Each tier's names resolve there, and none of them is also at the top level."""
  import importlib
  module = importlib.import_module(f"fedkrr.{tier}")
  names = {n for n in dir(module) if not n.startswith("_")} - {"TYPE_CHECKING"}
  assert set(TIERS[tier]) <= names, sorted(set(TIERS[tier]) - names)
  top = {n for n in dir(fedkrr) if not n.startswith("_")}
  assert not names & top, sorted(names & top)
  for name in sorted(names):
    getattr(module, name)


def test_fedkrr_top_level_has_at_most_60_names():
  top = {n for n in dir(fedkrr) if not n.startswith("_")} - {"TYPE_CHECKING"}
  assert len(top) <= 60, len(top)


def test_former_top_level_names_resolve_with_a_deprecation_warning():
  """For one release the old ``fedkrr.NAME`` is the same object, with a warning naming the
  new place; a name that never was at the top level still raises AttributeError."""
  import importlib

  from fedkrr._src.lazy import listed_imports
  for tier in TIERS:
    module = importlib.import_module(f"fedkrr.{tier}")
    for name in listed_imports(module.__file__):
      with pytest.warns(DeprecationWarning, match=rf"fedkrr\.{name} moved to "
                        rf"fedkrr\.{tier}\.{name}; the old name goes in the next release"):
        old = getattr(fedkrr, name)
      assert old is getattr(module, name), name
  for name in FORMER_TOP_LEVEL_PRIVATE:
    with pytest.warns(DeprecationWarning, match=rf"fedkrr\.{name} is private now"):
      getattr(fedkrr, name)
    assert name not in dir(fedkrr)
  with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
    fedkrr.no_such_name  # noqa: B018


def test_former_top_level_names_import_from_the_package():
  with pytest.warns(DeprecationWarning, match="moved to fedkrr.scale.sharded_trajectory"):
    from fedkrr import sharded_trajectory
  import fedkrr.scale
  assert sharded_trajectory is fedkrr.scale.sharded_trajectory


def test_fedkrr_does_not_import_neural_or_flax():
  import subprocess
  import sys
  code = ("import fedkrr, sys; "
          "print(any(m.split('.')[0] in ('neural', 'flax') for m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "False"


def test_importing_fedkrr_leaves_x64_alone():
  import subprocess
  import sys
  code = "import jax, fedkrr; print(jax.config.read('jax_enable_x64'))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PATH": "", "JAX_PLATFORMS": "cpu"})
  assert out.stdout.strip() == "False"


def test_neural_public_names_import():
  assert neural.__version__
  names = [n for n in dir(neural) if not n.startswith("_")]
  for name in ["get_model", "train_and_evaluate", "fedavg", "flax_learners", "ForestLearner",
               "LinearizedLearner", "compare", "Config", "RunConfig",
               "ExperimentConfig", "load_spec", "run_configs", "load_run_data", "run_main_job",
               "MainJobSettings", "methods", "load_run_checkpoint", "read_outcomes"]:
    assert name in names, name
  # Subset: tests may register methods of their own (tests/neural/methods/test_registry.py).
  assert {"d-distillation", "d-sgd", "silo-sgd", "mhd", "mhd-isolated", "mhd-fedavg", "repshare",
          "repshare-fd", "repshare-fedavg", "repshare-independent", "feddkc"} <= set(
              neural.methods.registered_methods())


@pytest.mark.parametrize("module", ["ddistillation", "mhd", "representation_sharing", "feddkc"])
def test_each_method_module_has_the_uniform_entry_points(module):
  """``neural.methods.<paper>``: ``Config``, ``init``, ``step``, ``load_data``, registered."""
  mod = getattr(neural.methods, module)
  assert issubclass(mod.Config, neural.methods.MethodConfig)
  registered = [neural.methods.get_method(name) for name in neural.methods.registered_methods()]
  mine = [m for m in registered if m.config_cls is mod.Config]
  assert mine, f"{module} registers no method"
  for method in mine:
    assert (method.init, method.step, method.load_data) == (mod.init, mod.step, mod.load_data)


def test_fedkrr_bridge_and_twin_names_import():
  import fedkrr.public
  for name in ["ReluNNGP", "ReluNTK"]:
    assert hasattr(fedkrr, name), name
  for name in ["public_distillation_trajectory", "public_distillation_limit",
               "public_distillation_simulate", "coverage_sweep"]:
    assert hasattr(fedkrr.public, name), name


def test_fedkrr_device_names_import():
  """Agents across devices (docs/devices.md); ``neural`` places its stacked agents with these."""
  import fedkrr.scale
  for name in ["AGENT_AXIS", "DeviceError", "agent_mesh", "check_mesh", "agent_devices",
               "shard_agents", "AgentBlocks", "shard_blocks", "sharded_trajectory",
               "SHARDED_PROTOCOLS"]:
    assert hasattr(fedkrr.scale, name), name
  assert fedkrr.scale.AGENT_AXIS == "agents"
  assert set(fedkrr.scale.SHARDED_PROTOCOLS) == set(fedkrr.PROTOCOLS) - {"backfit-gs",
                                                                          "weighted-avgkd"}


def test_fedkrr_helpers_for_entry_points_and_neural_import():
  """What users and ``neural`` need, so that nothing outside fedkrr imports ``fedkrr._src``."""
  from fedkrr._src.platform.xla_env import XLA_CPU_FLAGS
  for name in ["avoid_cpu_eigh_deadlock", "pytree_dataclass", "synthetic_regression"]:
    assert hasattr(fedkrr, name), name
  assert all(flag.startswith("--xla_cpu_") for flag in XLA_CPU_FLAGS)


def test_importing_fedkrr_starts_no_backend():
  """``fedkrr.avoid_cpu_eigh_deadlock()`` after ``import fedkrr`` still reaches XLA."""
  import subprocess
  import sys
  code = ("import fedkrr; from jax._src import xla_bridge; "
          "print(xla_bridge.backends_are_initialized())")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PATH": "", "JAX_PLATFORMS": "cpu"})
  assert out.stdout.strip() == "False"


def test_version_is_defined_once_by_the_installed_distribution():
  from importlib import metadata
  assert fedkrr.__version__ == neural.__version__ == metadata.version("fedkrr")


@pytest.mark.parametrize("program", ["fedkrr", "neural"])
def test_version_flag_prints_the_version(program, capsys):
  from fedkrr._src import cli as fedkrr_cli
  from neural._src import cli as neural_cli
  main = {"fedkrr": fedkrr_cli.main, "neural": neural_cli.main}[program]
  with pytest.raises(SystemExit) as exit_info:
    main(["--version"])
  assert exit_info.value.code == 0
  assert capsys.readouterr().out.strip() == f"{program} {fedkrr.__version__}"


def test_every_listed_public_name_resolves_and_importing_loads_no_jax():
  """The packages import their modules on first use: each listed name must resolve (an
  import the linter dropped would only show here), and importing them loads nothing."""
  import subprocess
  import sys
  for package in (fedkrr, neural):
    for name in dir(package):
      if not name.startswith("_"):
        getattr(package, name)
  code = "import sys, fedkrr, neural; print(sorted(m for m in ('jax', 'flax') if m in sys.modules))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


def test_fedkrr_io_and_paper_hold_the_file_helpers_and_the_applications():
  """``fedkrr.io`` (files) and ``fedkrr.paper`` (the paper's applications), each name in one
  namespace: none of them is also at fedkrr's top level."""
  import fedkrr.io
  import fedkrr.paper
  io = {n for n in dir(fedkrr.io) if not n.startswith("_")}
  paper = {n for n in dir(fedkrr.paper) if not n.startswith("_")}
  assert {"NpzError", "ReadError", "WriteError", "atomic_savefig", "atomic_savez", "atomic_write",
          "check_output", "exits_on_signals", "parse_json", "read_bytes", "read_json", "read_npz",
          "savez_bytes", "write_files"} <= io
  assert {"CheckRow", "checks_table", "closed_form_demo", "failed_checks", "run_checks",
          "write_checks", "search_claim", "toy_experiment", "rate_curves"} <= paper
  top = {n for n in dir(fedkrr) if not n.startswith("_")}
  assert not (io | paper) & top - {"TYPE_CHECKING"}, sorted((io | paper) & top)
  assert {"io", "paper", "load_problem", "save_problem", "synthetic_regression"} <= top
  for name in sorted(io):
    getattr(fedkrr.io, name)
  for name in sorted(paper):
    getattr(fedkrr.paper, name)


NEURAL_SUBMODULES = ("data", "evidence", "models", "runs", "training")


def test_neural_names_in_tiers():
  """At most 60 names at ``neural``'s top; the rest in submodules by what a user does, each
  name in one namespace; a name that moved from the top still resolves there, warning."""
  import importlib
  import warnings
  top = {n for n in dir(neural) if not n.startswith("_")} - {"TYPE_CHECKING"}
  assert len(top) <= 60, len(top)
  assert set(NEURAL_SUBMODULES) <= top
  seen: dict[str, str] = {}
  for place in NEURAL_SUBMODULES:
    module = importlib.import_module(f"neural.{place}")
    names = {n for n in dir(module) if not n.startswith("_")} - {"TYPE_CHECKING"}
    assert names and not names & top, sorted(names & top)
    assert not names & set(seen), sorted(names & set(seen))
    seen.update(dict.fromkeys(names, place))
    for name in sorted(names):
      getattr(module, name)
  assert {"train_loop", "Schedule", "Loop", "make_optimizer"} <= {
      n for n, p in seen.items() if p == "training"}
  assert {"make_graph", "iid", "RunData"} <= {n for n, p in seen.items() if p == "data"}
  for name, place in (("train_loop", "training"), ("make_graph", "data"), ("judge", "evidence"),
                      ("CNN", "models"), ("save_checkpoint", "runs")):
    with pytest.warns(DeprecationWarning, match=f"neural.{place}.{name}"):
      assert getattr(neural, name) is getattr(importlib.import_module(f"neural.{place}"), name)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    with pytest.raises(AttributeError):
      _ = neural.no_such_name  # pyright: ignore[reportAttributeAccessIssue]
