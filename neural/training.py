"""neural's training: the one scaffold (:func:`train_loop`), its optimisers, the learners.

:func:`train_loop` trains every method of ``neural`` (its :class:`Schedule` and
:class:`Loop`, the :class:`Batch` a loss sees, the :class:`Exchange` of a communication
step); :func:`make_optimizer` and :class:`OptimizerConfig` are the one optimiser
factory; :func:`train` and :func:`train_batch` fit a softmax classifier; the learners'
models, FedAvg's state and the NTK of the linearised learners are here too
(:class:`neural.FlaxLearner`, :class:`neural.ForestLearner` and :func:`neural.fedavg`
are at the top). ``docs/training.md`` describes the scaffold.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from neural._src.choices import AGENT_BATCHING
  from neural._src.choices import AUGMENTS
  from neural._src.choices import LOSSES
  from neural._src.choices import STEP_LOOPS
  from neural._src.learners.fedavg import FedAvgError
  from neural._src.learners.fedavg import FedAvgState
  from neural._src.learners.forest import ForestError
  from neural._src.learners.forest import ForestModel
  from neural._src.learners.learners import FlaxModel
  from neural._src.learners.learners import LearnerError
  from neural._src.learners.linearized import LinearizedError
  from neural._src.learners.linearized import LinearizedModel
  from neural._src.learners.ntk import NTKError
  from neural._src.learners.ntk import empirical_ntk
  from neural._src.learners.ntk import ntk_kernel
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
