"""fedkrr: exact dynamics of federated kernel ridge regression by knowledge distillation.

Theory toolkit for "Towards Model-Agnostic Federated Learning Using Knowledge
Distillation" (Afonin & Karimireddy, ICLR 2022). Public names are listed here
by hand; the implementation lives in ``fedkrr._src``. This namespace holds the
mathematics (kernels, problems, protocols, closed forms, rates, the matrix-free and
sharded paths); two submodules hold the rest: :mod:`fedkrr.io` (atomic writes, bounded
readers, signal exits) and :mod:`fedkrr.paper` (the verify table, the counterexample
search, the toy experiment, rate plots, the closed-form demo). The library never changes
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
  from fedkrr import paper
  from fedkrr._src.closed_form import RADIUS_METHODS
  from fedkrr._src.closed_form import Limit
  from fedkrr._src.closed_form import Recurrence
  from fedkrr._src.closed_form import central
  from fedkrr._src.closed_form import factors
  from fedkrr._src.closed_form import limit
  from fedkrr._src.closed_form import local
  from fedkrr._src.closed_form import recurrence
  from fedkrr._src.closed_form import recurrence_matrix
  from fedkrr._src.closed_form import spectral_radius
  from fedkrr._src.closed_form import trajectory
  from fedkrr._src.closed_form import transfer
  from fedkrr._src.geometry import Geometry
  from fedkrr._src.geometry import akd_by_projections
  from fedkrr._src.geometry import geometry
  from fedkrr._src.geometry import principal_cosines
  from fedkrr._src.geometry import stacked_gram
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
  from fedkrr._src.learner import BatchLearner
  from fedkrr._src.learner import CapabilityError
  from fedkrr._src.learner import KRRLearner
  from fedkrr._src.learner import KRRModel
  from fedkrr._src.learner import Learner
  from fedkrr._src.learner import Model
  from fedkrr._src.learner import WarmStartLearner
  from fedkrr._src.learner import fit_all
  from fedkrr._src.learner import has_capability
  from fedkrr._src.learner import krr_learners
  from fedkrr._src.linalg import RidgeFactor
  from fedkrr._src.linalg import RidgeRoot
  from fedkrr._src.linalg import ridge_factor
  from fedkrr._src.linalg import ridge_root
  from fedkrr._src.names import BASELINES
  from fedkrr._src.names import PROTOCOL_TABLE
  from fedkrr._src.names import PROTOCOLS
  from fedkrr._src.names import RUN_METHODS
  from fedkrr._src.names import ProtocolInfo
  from fedkrr._src.names import ProtocolParams
  from fedkrr._src.names import check_weights
  from fedkrr._src.names import display_name
  from fedkrr._src.names import protocol_info
  from fedkrr._src.nn_kernels import ReluNNGP
  from fedkrr._src.nn_kernels import ReluNTK
  from fedkrr._src.platform.devices import AGENT_AXIS
  from fedkrr._src.platform.devices import DeviceError
  from fedkrr._src.platform.devices import agent_devices
  from fedkrr._src.platform.devices import agent_mesh
  from fedkrr._src.platform.devices import agent_sharding
  from fedkrr._src.platform.devices import check_mesh
  from fedkrr._src.platform.devices import host_arrays
  from fedkrr._src.platform.devices import shard_agents
  from fedkrr._src.platform.devices import spans_processes
  from fedkrr._src.platform.distributed import distributed_settings
  from fedkrr._src.platform.distributed import initialize_distributed
  from fedkrr._src.platform.memory import TILE_ELEMENTS
  from fedkrr._src.platform.memory import exact_bytes
  from fedkrr._src.platform.memory import matfree_bytes
  from fedkrr._src.platform.memory import memory_limit
  from fedkrr._src.platform.xla_env import XLA_CPU_FLAGS
  from fedkrr._src.platform.xla_env import avoid_cpu_eigh_deadlock
  from fedkrr._src.platform.xla_env import deterministic_ops
  from fedkrr._src.problem import FederatedProblem
  from fedkrr._src.problem import ProblemError
  from fedkrr._src.problem import make_problem
  from fedkrr._src.problem_io import load_problem
  from fedkrr._src.problem_io import save_problem
  from fedkrr._src.protocols import Protocol
  from fedkrr._src.protocols import RoundOutput
  from fedkrr._src.protocols import akd
  from fedkrr._src.protocols import avgkd
  from fedkrr._src.protocols import backfit
  from fedkrr._src.protocols import central_models
  from fedkrr._src.protocols import ekd
  from fedkrr._src.protocols import get_protocol
  from fedkrr._src.protocols import iterate
  from fedkrr._src.protocols import local_models
  from fedkrr._src.protocols import pkd
  from fedkrr._src.protocols import pkd_mean
  from fedkrr._src.protocols import simulate
  from fedkrr._src.public_distillation import CoverageSweep
  from fedkrr._src.public_distillation import PublicDistillation
  from fedkrr._src.public_distillation import WeightedKRRLearner
  from fedkrr._src.public_distillation import coverage_sweep
  from fedkrr._src.public_distillation import plot_coverage
  from fedkrr._src.public_distillation import public_distillation
  from fedkrr._src.public_distillation import public_distillation_limit
  from fedkrr._src.public_distillation import public_distillation_round
  from fedkrr._src.public_distillation import public_distillation_simulate
  from fedkrr._src.public_distillation import public_distillation_trajectory
  from fedkrr._src.public_distillation import weighted_krr_learners
  from fedkrr._src.pytree import pytree_dataclass
  from fedkrr._src.rates import GRID_ROUTES
  from fedkrr._src.rates import RATE_METHODS
  from fedkrr._src.rates import RateEstimate
  from fedkrr._src.rates import TwoClusters
  from fedkrr._src.rates import cycle_operator
  from fedkrr._src.rates import degradation_rate
  from fedkrr._src.rates import degradation_rate_per_cycle
  from fedkrr._src.rates import rate_estimate
  from fedkrr._src.rates import rate_grid
  from fedkrr._src.rates import shared_kernel_rate
  from fedkrr._src.rates import sweep
  from fedkrr._src.rates import sweep_bandwidth_ratio
  from fedkrr._src.rates import sweep_heterogeneity
  from fedkrr._src.rates import sweep_ridge
  from fedkrr._src.rates import sweep_separation
  from fedkrr._src.rates import warm_sweep
  from fedkrr._src.registry import register_protocol
  from fedkrr._src.registry import unregister_protocol
  from fedkrr._src.runner import RunResult
  from fedkrr._src.runner import choose_method
  from fedkrr._src.runner import run
  from fedkrr._src.scale.matfree import ConvergenceError
  from fedkrr._src.scale.matfree import MatfreeKRRLearner
  from fedkrr._src.scale.matfree import MatfreeKRRModel
  from fedkrr._src.scale.matfree import NystromPreconditioner
  from fedkrr._src.scale.matfree import RidgeSolution
  from fedkrr._src.scale.matfree import kernel_matvec
  from fedkrr._src.scale.matfree import matfree_learners
  from fedkrr._src.scale.matfree import matfree_trajectory
  from fedkrr._src.scale.matfree import nystrom_preconditioner
  from fedkrr._src.scale.matfree import ridge_solve
  from fedkrr._src.scale.matfree import symmetric_matvec
  from fedkrr._src.scale.sharded import SHARDED_PROTOCOLS
  from fedkrr._src.scale.sharded import AgentBlocks
  from fedkrr._src.scale.sharded import shard_blocks
  from fedkrr._src.scale.sharded import sharded_trajectory
  from fedkrr._src.special_cases import avgkd_by_projections
  from fedkrr._src.special_cases import avgkd_limit_by_projections
  from fedkrr._src.special_cases import avgkd_limit_by_system
  from fedkrr._src.special_cases import avgkd_partial_sums_as_printed
  from fedkrr._src.special_cases import block_system_predictions
  from fedkrr._src.special_cases import intersection_limit_linear
  from fedkrr._src.special_cases import pkd_by_projections
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
