"""Representation sharing (Berdoz et al. 2022) and its baselines FD, FedAvg, independent.

Uniform entry points of every method module: ``Config`` (its config class),
``init(config, data) -> state``, ``step(config, data, state, t) -> (state, rows)``
and ``load_data(config) -> data``; the rest are the paper's pieces.
"""

from neural._src.methods.representation_sharing import BACKBONES
from neural._src.methods.representation_sharing import FD_LOSSES
from neural._src.methods.representation_sharing import INITIAL_TARGETS
from neural._src.methods.representation_sharing import METHODS
from neural._src.methods.representation_sharing import REDUCTIONS
from neural._src.methods.representation_sharing import Download
from neural._src.methods.representation_sharing import FeatureClassifier
from neural._src.methods.representation_sharing import Payload
from neural._src.methods.representation_sharing import RepShareConfig
from neural._src.methods.representation_sharing import RepShareConfig as Config
from neural._src.methods.representation_sharing import RepShareData
from neural._src.methods.representation_sharing import RepShareError
from neural._src.methods.representation_sharing import RepShareState
from neural._src.methods.representation_sharing import class_mean_spread
from neural._src.methods.representation_sharing import class_means
from neural._src.methods.representation_sharing import client_payload
from neural._src.methods.representation_sharing import contrastive_loss
from neural._src.methods.representation_sharing import discriminator_scores
from neural._src.methods.representation_sharing import distillation_loss
from neural._src.methods.representation_sharing import feature_matching_loss
from neural._src.methods.representation_sharing import init
from neural._src.methods.representation_sharing import initial_download
from neural._src.methods.representation_sharing import load_data
from neural._src.methods.representation_sharing import local_loss
from neural._src.methods.representation_sharing import predict_all
from neural._src.methods.representation_sharing import relay
from neural._src.methods.representation_sharing import step
from neural._src.methods.representation_sharing import tree_size
from neural._src.models.repshare_models import LeNet5Trunk
from neural._src.models.repshare_models import ResNet9Trunk
from neural._src.models.repshare_models import make_client_model
