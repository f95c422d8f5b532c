"""fedkrr: exact dynamics of federated kernel ridge regression by knowledge distillation.

Theory toolkit for "Towards Model-Agnostic Federated Learning Using Knowledge
Distillation" (Afonin & Karimireddy, ICLR 2022). Public names are listed here
by hand; the implementation lives in ``fedkrr._src``. This namespace holds what a
first hour needs: problems and kernels, the protocols' names and parameters,
:func:`run`, :func:`simulate`, :func:`trajectory`, :func:`limit` and the baselines.
The rest is grouped by what you do with it:

- :mod:`fedkrr.rates`: degradation rates, the recurrence behind the rounds, its
  spectral radius and the two-agent projection geometry;
- :mod:`fedkrr.scale`: large N and many devices (matrix-free learners, the sharded
  closed form, agent meshes, memory estimates, a cluster's start-up);
- :mod:`fedkrr.protocols`: the rounds as ``(init, step)`` values, to build your own;
- :mod:`fedkrr.learners`: the learner interface the protocols call;
- :mod:`fedkrr.public`: distillation through a shared public reference set;
- :mod:`fedkrr.io` (atomic writes, bounded readers, signal exits) and
  :mod:`fedkrr.paper` (the verify table, the counterexample search, the toy
  experiment, rate plots, the closed-form demo).

The names that left the top level still resolve there for one release, with a
``DeprecationWarning`` naming their new place. The library never changes
``jax.config``: enable float64 in your entry point with
``jax.config.update("jax_enable_x64", True)``. One XLA setting is applied on import:
before any XLA backend has started, ``XLA_FLAGS`` gains the CPU scheduler flag without
which vmapped eigen-decompositions can stall (naming the flag
in ``XLA_FLAGS`` yourself keeps your choice). Entry points on small CPUs also call
:func:`avoid_cpu_eigh_deadlock` before the first computation.

Importing ``fedkrr`` imports none of its modules (nor JAX): each public name's
module is imported when the name is first used (:func:`lazy_exports`); the names
are the imports listed below.
"""

from typing import TYPE_CHECKING

from fedkrr._src.platform.xla_env import apply_import_defaults as _apply_import_defaults
from fedkrr._src.version import installed_version as _installed_version

_apply_import_defaults()

__version__ = _installed_version()

if TYPE_CHECKING:
  from fedkrr import io
  from fedkrr import learners
  from fedkrr import paper
  from fedkrr import protocols
  from fedkrr import public
  from fedkrr import rates
  from fedkrr import scale
  from fedkrr._src.closed_form import Limit
  from fedkrr._src.closed_form import central
  from fedkrr._src.closed_form import limit
  from fedkrr._src.closed_form import local
  from fedkrr._src.closed_form import trajectory
  from fedkrr._src.io.synthetic import synthetic_regression
  from fedkrr._src.kernels import RBF
  from fedkrr._src.kernels import CustomKernel
  from fedkrr._src.kernels import KernelError
  from fedkrr._src.kernels import Laplace
  from fedkrr._src.kernels import Linear
  from fedkrr._src.kernels import Polynomial
  from fedkrr._src.kernels import kernel_from_dict
  from fedkrr._src.kernels import kernel_from_json
  from fedkrr._src.lazy import lazy_exports
  from fedkrr._src.learner import KRRLearner
  from fedkrr._src.learner import krr_learners
  from fedkrr._src.linalg import ridge_factor
  from fedkrr._src.linalg import ridge_root
  from fedkrr._src.names import BASELINES
  from fedkrr._src.names import PROTOCOL_TABLE
  from fedkrr._src.names import PROTOCOLS
  from fedkrr._src.names import ProtocolInfo
  from fedkrr._src.names import ProtocolParams
  from fedkrr._src.names import check_weights
  from fedkrr._src.names import display_name
  from fedkrr._src.names import protocol_info
  from fedkrr._src.nn_kernels import ReluNNGP
  from fedkrr._src.nn_kernels import ReluNTK
  from fedkrr._src.platform.xla_env import avoid_cpu_eigh_deadlock
  from fedkrr._src.platform.xla_env import deterministic_ops
  from fedkrr._src.problem import FederatedProblem
  from fedkrr._src.problem import ProblemError
  from fedkrr._src.problem import make_problem
  from fedkrr._src.problem_io import load_problem
  from fedkrr._src.problem_io import save_problem
  from fedkrr._src.protocols import simulate
  from fedkrr._src.pytree import pytree_dataclass
  from fedkrr._src.runner import RunResult
  from fedkrr._src.runner import run
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports

  # The names that left the top level, kept for one release: each tier's names moved
  # there (read from the tier's file), and these became private.
  __getattr__, __dir__ = _lazy_exports(
      __name__, __file__, moved_to=("learners", "protocols", "public", "rates", "scale"),
      private={"MatfreeKRRModel": "fedkrr._src.scale.matfree",
               "NystromPreconditioner": "fedkrr._src.scale.matfree",
               "RUN_METHODS": "fedkrr._src.names",
               "RateEstimate": "fedkrr._src.rates",
               "RidgeFactor": "fedkrr._src.linalg",
               "RidgeRoot": "fedkrr._src.linalg",
               "XLA_CPU_FLAGS": "fedkrr._src.platform.xla_env",
               "agent_sharding": "fedkrr._src.platform.devices",
               "stacked_gram": "fedkrr._src.geometry"})
