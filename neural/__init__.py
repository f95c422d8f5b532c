"""neural: the distillation protocols of fedkrr, replayed with neural networks.

The protocols live in ``fedkrr`` and only call ``fit``/``predict``; this package
provides the learners (Flax networks trained with Optax, and a random forest),
the data and partitions, FedAvg and the baselines, and resumable experiments
with the paper's configurations. The methods of the other papers live in
:mod:`neural.methods`, one module per paper. Public names are listed here by
hand; the implementation lives in ``neural._src`` (its layers and where to add a
method: ``docs/architecture.md``).

At the top: what a first experiment needs (run one, its configs, the learners, the
data, compare with the theory, reproduce the paper, read the runs back). The rest is
grouped by what a user does with it: :mod:`neural.training` (the training scaffold,
optimisers, learners' pieces), :mod:`neural.data` (datasets, partitions, graphs),
:mod:`neural.models`, :mod:`neural.evidence` (statements, judgements, theory curves) and
:mod:`neural.runs` (checkpoints, seeds). A name that moved from the top to a submodule
still works there for one release, with a ``DeprecationWarning`` naming its new place.

Importing ``neural`` imports none of its modules (nor JAX, Flax or Optax): each
public name's module is imported when the name is first used
(``fedkrr.lazy_exports``); the names are the imports listed below.
"""

from typing import TYPE_CHECKING

from fedkrr import __version__  # one distribution, one version

if TYPE_CHECKING:
  from neural import data
  from neural import evidence
  from neural import methods
  from neural import models
  from neural import runs
  from neural import training
  from neural._src.choices import MODELS
  from neural._src.datasets.data import DATASETS
  from neural._src.datasets.data import load_dataset
  from neural._src.datasets.partitions import PARTITIONS
  from neural._src.datasets.partitions import partition
  from neural._src.datasets.run_data import load_run_data
  from neural._src.evidence.claims import CLAIMS
  from neural._src.figures.report import MainJobSettings
  from neural._src.figures.report import run_main_job
  from neural._src.figures.reproduce import figure_configs
  from neural._src.figures.reproduce import reproduce
  from neural._src.figures.reproduce_report import Reproduction
  from neural._src.jobs.readback import RunRecord
  from neural._src.jobs.readback import read_run
  from neural._src.jobs.runs import load_run_checkpoint
  from neural._src.jobs.runs import run_configs
  from neural._src.jobs.specs import ConfigSpec
  from neural._src.jobs.specs import load_spec
  from neural._src.jobs.specs import shipped_configs
  from neural._src.kd.compare import CompareError
  from neural._src.kd.compare import Comparison
  from neural._src.kd.compare import compare
  from neural._src.kd.compare import theory_curves
  from neural._src.kd.experiment import train_and_evaluate
  from neural._src.learners.fedavg import fedavg
  from neural._src.learners.forest import ForestLearner
  from neural._src.learners.learners import FlaxLearner
  from neural._src.learners.learners import flax_learners
  from neural._src.learners.linearized import LinearizedLearner
  from neural._src.models.models import get_model
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
else:
  from fedkrr import lazy_exports as _lazy_exports
  # the names that left the top level resolve there for one release, with a warning
  __getattr__, __dir__ = _lazy_exports(
      __name__, __file__, moved_to=("data", "evidence", "models", "runs", "training"))
