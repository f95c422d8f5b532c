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
  from neural._src.choices import AGENT_BATCHING
  from neural._src.choices import AUGMENTS
  from neural._src.choices import LOSSES
  from neural._src.choices import MODELS
  from neural._src.choices import SPLIT_RESNETS
  from neural._src.choices import STEP_LOOPS
  from neural._src.datasets.data import DATASETS
  from neural._src.datasets.data import DataError
  from neural._src.datasets.data import Dataset
  from neural._src.datasets.data import load_dataset
  from neural._src.datasets.data import one_hot
  from neural._src.datasets.graphs import ALL_GRAPHS
  from neural._src.datasets.graphs import GRAPHS
  from neural._src.datasets.graphs import Graph
  from neural._src.datasets.graphs import GraphError
  from neural._src.datasets.graphs import TimeVaryingGraph
  from neural._src.datasets.graphs import check_mixing_matrix
  from neural._src.datasets.graphs import complete
  from neural._src.datasets.graphs import directed_ring
  from neural._src.datasets.graphs import edge_schedule
  from neural._src.datasets.graphs import from_adjacency
  from neural._src.datasets.graphs import hop_distances
  from neural._src.datasets.graphs import is_strongly_connected
  from neural._src.datasets.graphs import islands
  from neural._src.datasets.graphs import make_graph
  from neural._src.datasets.graphs import metropolis_weights
  from neural._src.datasets.graphs import mix
  from neural._src.datasets.graphs import mixing_matrix
  from neural._src.datasets.graphs import mixing_rate
  from neural._src.datasets.graphs import random_bounded_degree
  from neural._src.datasets.graphs import ring
  from neural._src.datasets.graphs import spectral_gap
  from neural._src.datasets.graphs import time_varying
  from neural._src.datasets.graphs import uniform_regular_weights
  from neural._src.datasets.graphs import union
  from neural._src.datasets.partitions import PARTITIONS
  from neural._src.datasets.partitions import PartitionError
  from neural._src.datasets.partitions import SkewedSplit
  from neural._src.datasets.partitions import assignment_probabilities
  from neural._src.datasets.partitions import dirichlet_classes
  from neural._src.datasets.partitions import dirichlet_clients
  from neural._src.datasets.partitions import iid
  from neural._src.datasets.partitions import label_counts
  from neural._src.datasets.partitions import label_groups
  from neural._src.datasets.partitions import label_split
  from neural._src.datasets.partitions import partition
  from neural._src.datasets.partitions import primary_labels
  from neural._src.datasets.partitions import shards
  from neural._src.datasets.partitions import skewed_label_split
  from neural._src.datasets.run_data import RunData
  from neural._src.datasets.run_data import load_run_data
  from neural._src.datasets.run_data import load_train_test
  from neural._src.datasets.run_data import split_agents
  from neural._src.evidence.authors import authors_curves
  from neural._src.evidence.authors import control_checks
  from neural._src.evidence.claims import CLAIMS
  from neural._src.evidence.claims import Check
  from neural._src.evidence.claims import Claim
  from neural._src.evidence.curves import Curve
  from neural._src.evidence.paper_units import paper_rounds
  from neural._src.evidence.seeded import Effect
  from neural._src.evidence.seeded import Judgement
  from neural._src.evidence.seeded import count_verdicts
  from neural._src.evidence.seeded import difference
  from neural._src.evidence.seeded import judge
  from neural._src.evidence.seeded import judgement_table
  from neural._src.figures.report import MainJobSettings
  from neural._src.figures.report import run_main_job
  from neural._src.figures.reproduce import figure_configs
  from neural._src.figures.reproduce import reproduce
  from neural._src.figures.reproduce_curves import check_claims
  from neural._src.figures.reproduce_curves import check_statements
  from neural._src.figures.reproduce_curves import paper_curves
  from neural._src.figures.reproduce_report import ConfigReproduction
  from neural._src.figures.reproduce_report import Reproduction
  from neural._src.jobs.readback import RunRecord
  from neural._src.jobs.readback import read_run
  from neural._src.jobs.readback import read_seeds
  from neural._src.jobs.readback import seed_folders
  from neural._src.jobs.runs import load_run_checkpoint
  from neural._src.jobs.runs import run_configs
  from neural._src.jobs.specs import ConfigSpec
  from neural._src.jobs.specs import load_spec
  from neural._src.jobs.specs import shipped_configs
  from neural._src.kd.compare import CompareError
  from neural._src.kd.compare import Comparison
  from neural._src.kd.compare import TheoryCurves
  from neural._src.kd.compare import TheoryProblem
  from neural._src.kd.compare import compare
  from neural._src.kd.compare import geometric_rate
  from neural._src.kd.compare import matched_ridge
  from neural._src.kd.compare import mlp_ntk
  from neural._src.kd.compare import theory_curves
  from neural._src.kd.compare import theory_problem
  from neural._src.kd.experiment import train_and_evaluate
  from neural._src.learners.fedavg import FedAvgError
  from neural._src.learners.fedavg import FedAvgState
  from neural._src.learners.fedavg import fedavg
  from neural._src.learners.forest import ForestError
  from neural._src.learners.forest import ForestLearner
  from neural._src.learners.forest import ForestModel
  from neural._src.learners.learners import FlaxLearner
  from neural._src.learners.learners import FlaxModel
  from neural._src.learners.learners import LearnerError
  from neural._src.learners.learners import flax_learners
  from neural._src.learners.linearized import LinearizedError
  from neural._src.learners.linearized import LinearizedLearner
  from neural._src.learners.linearized import LinearizedModel
  from neural._src.learners.ntk import NTKError
  from neural._src.learners.ntk import empirical_ntk
  from neural._src.learners.ntk import ntk_kernel
  from neural._src.models.conv import Conv
  from neural._src.models.conv import ConvError
  from neural._src.models.conv import conv2d
  from neural._src.models.conv import max_pool
  from neural._src.models.models import CNN
  from neural._src.models.models import MLP
  from neural._src.models.models import VGG
  from neural._src.models.models import ConvStem
  from neural._src.models.models import LeNet5
  from neural._src.models.models import ModelError
  from neural._src.models.models import ResNet
  from neural._src.models.models import ResNetHead
  from neural._src.models.models import SplitResNet
  from neural._src.models.models import get_head
  from neural._src.models.models import get_model
  from neural._src.runtime.checkpoint import CheckpointError
  from neural._src.runtime.checkpoint import ModelSlot
  from neural._src.runtime.checkpoint import load_checkpoint
  from neural._src.runtime.checkpoint import read_checkpoint
  from neural._src.runtime.checkpoint import restore_checkpoint
  from neural._src.runtime.checkpoint import save_checkpoint
  from neural._src.runtime.config import KD_PROTOCOLS
  from neural._src.runtime.config import RUN_PROTOCOLS
  from neural._src.runtime.config import Config
  from neural._src.runtime.config import ConfigError
  from neural._src.runtime.config import ExperimentConfig
  from neural._src.runtime.config import RunConfig
  from neural._src.runtime.config import field_help
  from neural._src.runtime.outcomes import read_outcomes
  from neural._src.runtime.plots import plot_run
  from neural._src.runtime.plots import plot_sweep
  from neural._src.runtime.rundir import ExperimentError
  from neural._src.runtime.rundir import read_metrics
  from neural._src.settings import OPTIMIZERS
  from neural._src.settings import SCHEDULES
  from neural._src.settings import EpochSettings
  from neural._src.settings import OptimizerChoice
  from neural._src.settings import TrainingSettings
  from neural._src.training.augment import Augment
  from neural._src.training.optimizers import Hyperparameters
  from neural._src.training.optimizers import OptimizerConfig
  from neural._src.training.optimizers import OptimizerError
  from neural._src.training.optimizers import make_optimizer
  from neural._src.training.optimizers import optimizer_config
  from neural._src.training.soft_targets import SoftTargets
  from neural._src.training.soft_targets import Teacher
  from neural._src.training.train_loop import Batch
  from neural._src.training.train_loop import Exchange
  from neural._src.training.train_loop import LargeBatchWarning
  from neural._src.training.train_loop import Loop
  from neural._src.training.train_loop import Schedule
  from neural._src.training.train_loop import TrainError
  from neural._src.training.train_loop import TrainResult
  from neural._src.training.train_loop import resolve_loop
  from neural._src.training.train_loop import train_loop
  from neural._src.training.train_loop import weighted_mean
  from neural._src.training.training import LossContext
  from neural._src.training.training import SoftmaxLoss
  from neural._src.training.training import Teachers
  from neural._src.training.training import TrainConfig
  from neural._src.training.training import accuracy
  from neural._src.training.training import init_variables
  from neural._src.training.training import per_example_loss
  from neural._src.training.training import predict_proba
  from neural._src.training.training import train
  from neural._src.training.training import train_batch
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
