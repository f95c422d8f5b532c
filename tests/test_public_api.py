"""The public surface imports and lists what it says it does."""

import fedkrr
import neural


def test_fedkrr_public_names_import():
  names = [n for n in dir(fedkrr) if not n.startswith("_")]
  for name in ["make_problem", "FederatedProblem", "RBF", "Linear", "Polynomial", "Laplace",
               "KRRLearner", "krr_learners", "ridge_factor", "akd", "avgkd", "pkd", "ekd",
               "backfit", "simulate", "iterate", "trajectory", "limit", "central", "local",
               "central_models", "local_models", "PROTOCOLS", "ProblemError", "KernelError"]:
    assert name in names, name
  assert set(fedkrr.PROTOCOLS) == {"akd", "avgkd", "pkd", "ekd", "backfit-gs", "backfit-jacobi"}


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
               "empirical_ntk", "ntk_kernel", "LinearizedLearner", "compare", "kkr", "skr",
               "make_graph", "metropolis_weights", "most_confident_target", "contrastive_loss",
               "relay", "run_method", "registered_methods"]:
    assert name in names, name
  # Subset: tests may register methods of their own (tests/neural/test_methods.py).
  assert {"d-distillation", "d-sgd", "silo-sgd", "mhd", "mhd-isolated", "mhd-fedavg", "repshare",
          "repshare-fd", "repshare-fedavg", "repshare-independent", "feddkc"} <= set(
              neural.registered_methods())


def test_fedkrr_bridge_and_twin_names_import():
  for name in ["ReluNNGP", "ReluNTK", "public_distillation_trajectory",
               "public_distillation_limit", "public_distillation_simulate", "coverage_sweep"]:
    assert hasattr(fedkrr, name), name
