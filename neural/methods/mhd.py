"""Multi-headed distillation (MHD; Zhmoginov et al. 2023) and its baselines.

Uniform entry points of every method module: ``Config`` (its config class),
``init(config, data) -> state``, ``step(config, data, state, t) -> (state, rows)``
and ``load_data(config) -> data``; the rest are the paper's pieces.
"""

from neural._src.methods.mhd import MHD_METHODS
from neural._src.methods.mhd import TARGET_CHOICES
from neural._src.methods.mhd import MHDConfig
from neural._src.methods.mhd import MHDConfig as Config
from neural._src.methods.mhd import MHDData
from neural._src.methods.mhd import MHDError
from neural._src.methods.mhd import MHDState
from neural._src.methods.mhd import MultiHeadModel
from neural._src.methods.mhd import aux_chain_loss
from neural._src.methods.mhd import chain_targets
from neural._src.methods.mhd import confidence
from neural._src.methods.mhd import embedding_loss
from neural._src.methods.mhd import head_probabilities
from neural._src.methods.mhd import init
from neural._src.methods.mhd import initial_pool_owners
from neural._src.methods.mhd import load_data
from neural._src.methods.mhd import mhd_model
from neural._src.methods.mhd import most_confident_target
from neural._src.methods.mhd import prediction_floats
from neural._src.methods.mhd import private_accuracy
from neural._src.methods.mhd import random_target
from neural._src.methods.mhd import reported_head
from neural._src.methods.mhd import step
from neural._src.methods.mhd import teacher_adjacency
from neural._src.methods.mhd import teacher_hops
from neural._src.methods.mhd import update_pools
from neural._src.settings import OPTIMIZERS
