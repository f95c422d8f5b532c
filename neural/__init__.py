"""neural: the distillation protocols of fedkrr, replayed with neural networks.

The protocols live in ``fedkrr`` and only call ``fit``/``predict``; this package
provides the learners (Flax networks trained with Optax, and a random forest),
the data and partitions, FedAvg and the baselines, and resumable experiments
with the paper's configurations. Public names are listed here by hand; the
implementation lives in ``neural._src``.
"""

from neural._src.config import RUN_PROTOCOLS
from neural._src.config import ConfigError
from neural._src.config import ConfigSpec
from neural._src.config import ExperimentConfig
from neural._src.config import load_spec
from neural._src.config import shipped_configs
from neural._src.data import DATASETS
from neural._src.data import DataError
from neural._src.data import Dataset
from neural._src.data import load_dataset
from neural._src.data import one_hot
from neural._src.experiment import ExperimentError
from neural._src.experiment import load_run_data
from neural._src.experiment import read_metrics
from neural._src.experiment import run_configs
from neural._src.experiment import train_and_evaluate
from neural._src.fedavg import FedAvgError
from neural._src.fedavg import FedAvgState
from neural._src.fedavg import fedavg
from neural._src.forest import ForestError
from neural._src.forest import ForestLearner
from neural._src.forest import ForestModel
from neural._src.learners import FlaxLearner
from neural._src.learners import FlaxModel
from neural._src.learners import LearnerError
from neural._src.learners import flax_learners
from neural._src.models import CNN
from neural._src.models import MLP
from neural._src.models import MODELS
from neural._src.models import VGG
from neural._src.models import ModelError
from neural._src.models import ResNet
from neural._src.models import get_model
from neural._src.partitions import PARTITIONS
from neural._src.partitions import PartitionError
from neural._src.partitions import dirichlet_classes
from neural._src.partitions import dirichlet_clients
from neural._src.partitions import iid
from neural._src.partitions import label_counts
from neural._src.partitions import label_groups
from neural._src.partitions import label_split
from neural._src.partitions import partition
from neural._src.partitions import shards
from neural._src.plots import plot_run
from neural._src.plots import plot_sweep
from neural._src.training import LOSSES
from neural._src.training import TrainConfig
from neural._src.training import TrainError
from neural._src.training import init_variables
from neural._src.training import make_optimizer
from neural._src.training import per_example_loss
from neural._src.training import predict_proba
from neural._src.training import train
from neural._src.training import train_batch

__version__ = "0.1.0"
