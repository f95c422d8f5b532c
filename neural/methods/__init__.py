"""The federated distillation methods of the other papers, one module per paper.

Like ``optax.contrib``: each module (:mod:`neural.methods.ddistillation`,
:mod:`neural.methods.mhd`, :mod:`neural.methods.representation_sharing`,
:mod:`neural.methods.feddkc`) keeps only its paper's losses, communication and
state, with the same entry points (``Config``, ``init``, ``step``,
``load_data``), and shares the data, partitions, models, training scaffold and
run directories of ``neural``. Each registers its method names, so that a
config file with ``"method": NAME`` runs through :func:`run_method` (and
``neural run``). ``docs/architecture.md`` shows how to add a method.
"""

from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import get_method
from neural._src.methods.registry import load_method_data
from neural._src.methods.registry import method_config_from_dict
from neural._src.methods.registry import method_configs
from neural._src.methods.registry import register_method
from neural._src.methods.registry import registered_methods
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import run_method
from neural._src.methods.registry import test_scores
from neural.methods import ddistillation
from neural.methods import feddkc
from neural.methods import mhd
from neural.methods import representation_sharing
