"""neural: the distillation protocols of fedkrr, replayed with neural networks.

The protocols live in ``fedkrr`` and only call ``fit``/``predict``; this package
provides the learners (Flax networks trained with Optax, and a random forest),
the data and partitions, FedAvg and the baselines, and resumable experiments
with the paper's configurations. The methods of the other papers live in
:mod:`neural.methods`, one module per paper. Public names are listed here by
hand; the implementation lives in ``neural._src`` (its layers and where to add a
method: ``docs/architecture.md``).

Importing ``neural`` imports none of its modules (nor JAX, Flax or Optax): each
public name's module is imported when the name is first used
(``fedkrr.lazy_exports``); the names are the imports listed below.
"""

from typing import TYPE_CHECKING

from fedkrr import __version__  # one distribution, one version

if TYPE_CHECKING:
  from neural import methods
  from neural._src.augment import Augment
  from neural._src.authors import authors_curves
  from neural._src.authors import control_checks
  from neural._src.checkpoint import CheckpointError
  from neural._src.checkpoint import ModelSlot
  from neural._src.checkpoint import load_checkpoint
  from neural._src.checkpoint import read_checkpoint
  from neural._src.checkpoint import restore_checkpoint
  from neural._src.checkpoint import save_checkpoint
  from neural._src.choices import AGENT_BATCHING
  from neural._src.choices import AUGMENTS
  from neural._src.choices import LOSSES
  from neural._src.choices import MODELS
  from neural._src.choices import SPLIT_RESNETS
  from neural._src.choices import STEP_LOOPS
  from neural._src.claims import CLAIMS
  from neural._src.claims import Check
  from neural._src.claims import Claim
  from neural._src.compare import CompareError
  from neural._src.compare import Comparison
  from neural._src.compare import TheoryCurves
  from neural._src.compare import TheoryProblem
  from neural._src.compare import compare
  from neural._src.compare import geometric_rate
  from neural._src.compare import matched_ridge
  from neural._src.compare import mlp_ntk
  from neural._src.compare import theory_curves
  from neural._src.compare import theory_problem
  from neural._src.config import KD_PROTOCOLS
  from neural._src.config import RUN_PROTOCOLS
  from neural._src.config import Config
  from neural._src.config import ConfigError
  from neural._src.config import ExperimentConfig
  from neural._src.config import RunConfig
  from neural._src.config import field_help
  from neural._src.conv import Conv
  from neural._src.conv import ConvError
  from neural._src.conv import conv2d
  from neural._src.conv import max_pool
  from neural._src.curves import Curve
  from neural._src.data import DATASETS
  from neural._src.data import DataError
  from neural._src.data import Dataset
  from neural._src.data import load_dataset
  from neural._src.data import one_hot
  from neural._src.experiment import train_and_evaluate
  from neural._src.fedavg import FedAvgError
  from neural._src.fedavg import FedAvgState
  from neural._src.fedavg import fedavg
  from neural._src.forest import ForestError
  from neural._src.forest import ForestLearner
  from neural._src.forest import ForestModel
  from neural._src.graphs import ALL_GRAPHS
  from neural._src.graphs import GRAPHS
  from neural._src.graphs import Graph
  from neural._src.graphs import GraphError
  from neural._src.graphs import TimeVaryingGraph
  from neural._src.graphs import check_mixing_matrix
  from neural._src.graphs import complete
  from neural._src.graphs import directed_ring
  from neural._src.graphs import edge_schedule
  from neural._src.graphs import from_adjacency
  from neural._src.graphs import hop_distances
  from neural._src.graphs import is_strongly_connected
  from neural._src.graphs import islands
  from neural._src.graphs import make_graph
  from neural._src.graphs import metropolis_weights
  from neural._src.graphs import mix
  from neural._src.graphs import mixing_matrix
  from neural._src.graphs import mixing_rate
  from neural._src.graphs import random_bounded_degree
  from neural._src.graphs import ring
  from neural._src.graphs import spectral_gap
  from neural._src.graphs import time_varying
  from neural._src.graphs import uniform_regular_weights
  from neural._src.graphs import union
  from neural._src.learners import FlaxLearner
  from neural._src.learners import FlaxModel
  from neural._src.learners import LearnerError
  from neural._src.learners import flax_learners
  from neural._src.linearized import LinearizedError
  from neural._src.linearized import LinearizedLearner
  from neural._src.linearized import LinearizedModel
  from neural._src.models import CNN
  from neural._src.models import MLP
  from neural._src.models import VGG
  from neural._src.models import ConvStem
  from neural._src.models import LeNet5
  from neural._src.models import ModelError
  from neural._src.models import ResNet
  from neural._src.models import ResNetHead
  from neural._src.models import SplitResNet
  from neural._src.models import get_head
  from neural._src.models import get_model
  from neural._src.ntk import NTKError
  from neural._src.ntk import empirical_ntk
  from neural._src.ntk import ntk_kernel
  from neural._src.optimizers import Hyperparameters
  from neural._src.optimizers import OptimizerConfig
  from neural._src.optimizers import OptimizerError
  from neural._src.optimizers import make_optimizer
  from neural._src.optimizers import optimizer_config
  from neural._src.paper_units import paper_rounds
  from neural._src.partitions import PARTITIONS
  from neural._src.partitions import PartitionError
  from neural._src.partitions import SkewedSplit
  from neural._src.partitions import assignment_probabilities
  from neural._src.partitions import dirichlet_classes
  from neural._src.partitions import dirichlet_clients
  from neural._src.partitions import iid
  from neural._src.partitions import label_counts
  from neural._src.partitions import label_groups
  from neural._src.partitions import label_split
  from neural._src.partitions import partition
  from neural._src.partitions import primary_labels
  from neural._src.partitions import shards
  from neural._src.partitions import skewed_label_split
  from neural._src.plots import plot_run
  from neural._src.plots import plot_sweep
  from neural._src.report import MainJobSettings
  from neural._src.report import run_main_job
  from neural._src.reproduce import figure_configs
  from neural._src.reproduce import reproduce
  from neural._src.reproduce_curves import check_claims
  from neural._src.reproduce_curves import check_statements
  from neural._src.reproduce_curves import paper_curves
  from neural._src.reproduce_report import ConfigReproduction
  from neural._src.reproduce_report import Reproduction
  from neural._src.run_data import RunData
  from neural._src.run_data import load_run_data
  from neural._src.run_data import load_train_test
  from neural._src.run_data import split_agents
  from neural._src.rundir import ExperimentError
  from neural._src.rundir import read_metrics
  from neural._src.runs import load_run_checkpoint
  from neural._src.runs import run_configs
  from neural._src.settings import OPTIMIZERS
  from neural._src.settings import SCHEDULES
  from neural._src.settings import EpochSettings
  from neural._src.settings import OptimizerChoice
  from neural._src.settings import TrainingSettings
  from neural._src.soft_targets import SoftTargets
  from neural._src.soft_targets import Teacher
  from neural._src.specs import ConfigSpec
  from neural._src.specs import load_spec
  from neural._src.specs import shipped_configs
  from neural._src.train_loop import Batch
  from neural._src.train_loop import Exchange
  from neural._src.train_loop import LargeBatchWarning
  from neural._src.train_loop import TrainError
  from neural._src.train_loop import TrainResult
  from neural._src.train_loop import resolve_loop
  from neural._src.train_loop import train_loop
  from neural._src.train_loop import weighted_mean
  from neural._src.training import LossContext
  from neural._src.training import SoftmaxLoss
  from neural._src.training import Teachers
  from neural._src.training import TrainConfig
  from neural._src.training import accuracy
  from neural._src.training import init_variables
  from neural._src.training import per_example_loss
  from neural._src.training import predict_proba
  from neural._src.training import train
  from neural._src.training import train_batch
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
