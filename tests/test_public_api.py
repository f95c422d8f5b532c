"""The public surface imports and lists what it says it does."""

import pytest

import fedkrr
import neural


def test_fedkrr_public_names_import():
  names = [n for n in dir(fedkrr) if not n.startswith("_")]
  for name in ["make_problem", "FederatedProblem", "RBF", "Linear", "Polynomial", "Laplace",
               "KRRLearner", "krr_learners", "BatchLearner", "WarmStartLearner", "has_capability",
               "CapabilityError",
               "ridge_factor", "akd", "avgkd", "pkd", "pkd_mean",
               "ekd", "backfit", "simulate", "iterate", "trajectory", "limit", "central", "local",
               "central_models", "local_models", "PROTOCOLS", "ProblemError", "KernelError",
               "kernel_matvec", "symmetric_matvec", "ridge_solve", "nystrom_preconditioner",
               "NystromPreconditioner", "warm_sweep", "GRID_ROUTES",
               "RidgeSolution", "MatfreeKRRLearner", "MatfreeKRRModel", "ConvergenceError",
               "matfree_learners", "matfree_trajectory", "choose_method",
               "exact_bytes", "matfree_bytes", "memory_limit", "TILE_ELEMENTS",
               "ridge_root", "RidgeRoot", "degradation_rate", "rate_estimate", "RateEstimate",
               "RATE_METHODS", "RADIUS_METHODS", "spectral_radius", "PROTOCOL_TABLE",
               "ProtocolInfo", "ProtocolParams", "protocol_info", "display_name",
               "check_weights"]:
    assert name in names, name
  assert set(fedkrr.PROTOCOLS) == {"akd", "avgkd", "weighted-avgkd", "pkd", "pkd-mean", "ekd",
                                   "backfit-gs", "backfit-jacobi"}
  assert fedkrr.PROTOCOLS == tuple(row.name for row in fedkrr.PROTOCOL_TABLE)


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
  for name in ["ReluNNGP", "ReluNTK", "public_distillation_trajectory",
               "public_distillation_limit", "public_distillation_simulate", "coverage_sweep"]:
    assert hasattr(fedkrr, name), name


def test_fedkrr_device_names_import():
  """Agents across devices (docs/devices.md); ``neural`` places its stacked agents with these."""
  for name in ["AGENT_AXIS", "DeviceError", "agent_mesh", "check_mesh", "agent_devices",
               "agent_sharding", "shard_agents", "AgentBlocks", "shard_blocks",
               "sharded_trajectory", "SHARDED_PROTOCOLS"]:
    assert hasattr(fedkrr, name), name
  assert fedkrr.AGENT_AXIS == "agents"
  assert set(fedkrr.SHARDED_PROTOCOLS) == set(fedkrr.PROTOCOLS) - {"backfit-gs",
                                                                    "weighted-avgkd"}


def test_fedkrr_helpers_for_entry_points_and_neural_import():
  """What users and ``neural`` need, so that nothing outside fedkrr imports ``fedkrr._src``."""
  for name in ["avoid_cpu_eigh_deadlock", "XLA_CPU_FLAGS", "pytree_dataclass",
               "synthetic_regression"]:
    assert hasattr(fedkrr, name), name
  assert all(flag.startswith("--xla_cpu_") for flag in fedkrr.XLA_CPU_FLAGS)


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
