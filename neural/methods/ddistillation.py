"""Distributed distillation (D-Distillation; Bistritz et al. 2020), D-SGD and Silo-SGD.

Uniform entry points of every method module: ``Config`` (its config class),
``init(config, data) -> state``, ``step(config, data, state, t) -> (state, rows)``
and ``load_data(config) -> data``; the rest are the paper's pieces.
"""

from neural._src.methods.ddistillation import METHODS
from neural._src.methods.ddistillation import Z_INITS
from neural._src.methods.ddistillation import DDistConfig
from neural._src.methods.ddistillation import DDistConfig as Config
from neural._src.methods.ddistillation import DDistData
from neural._src.methods.ddistillation import DDistError
from neural._src.methods.ddistillation import DDistState
from neural._src.methods.ddistillation import architecture_groups
from neural._src.methods.ddistillation import check_step_size
from neural._src.methods.ddistillation import check_z_step
from neural._src.methods.ddistillation import comm_floats
from neural._src.methods.ddistillation import consensus_error
from neural._src.methods.ddistillation import distillation_regulariser
from neural._src.methods.ddistillation import gossip
from neural._src.methods.ddistillation import init
from neural._src.methods.ddistillation import load_data
from neural._src.methods.ddistillation import make_graph_and_weights
from neural._src.methods.ddistillation import num_params
from neural._src.methods.ddistillation import polynomial_step_size
from neural._src.methods.ddistillation import step
from neural._src.methods.ddistillation import z_update
