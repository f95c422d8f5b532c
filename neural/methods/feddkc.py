"""FedDKC (Wu et al. 2023): feature distillation with knowledge refinement; FedGKT.

Uniform entry points of every method module: ``Config`` (its config class),
``init(config, data) -> state``, ``step(config, data, state, t) -> (state, rows)``
and ``load_data(config) -> data``; the rest are the paper's pieces.
"""

from neural._src.methods.feddkc import REFINEMENTS
from neural._src.methods.feddkc import FedDKCConfig
from neural._src.methods.feddkc import FedDKCConfig as Config
from neural._src.methods.feddkc import FedDKCError
from neural._src.methods.feddkc import FedDKCState
from neural._src.methods.feddkc import client_kd_weight
from neural._src.methods.feddkc import communication
from neural._src.methods.feddkc import distillation_loss
from neural._src.methods.feddkc import entropy_bits
from neural._src.methods.feddkc import init
from neural._src.methods.feddkc import kkr
from neural._src.methods.feddkc import kl_to_target
from neural._src.methods.feddkc import load_data
from neural._src.methods.feddkc import refine_logits
from neural._src.methods.feddkc import skr
from neural._src.methods.feddkc import skr_logits
from neural._src.methods.feddkc import skr_temperature
from neural._src.methods.feddkc import step
from neural._src.settings import OPTIMIZERS
