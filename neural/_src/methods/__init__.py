"""The methods of the other papers, one module per paper, on the shared machinery.

Each module keeps only its paper's losses, communication and state, with the
uniform entry points ``init(config, data) -> state``, ``step(config, data,
state, t) -> (state, rows)``, ``load_data(config) -> data`` and its config class,
and registers its method names in :mod:`neural._src.methods.registry` when
imported. Importing this package imports (and so registers) all of them.
"""

from neural._src.methods import ddistillation  # noqa: F401
from neural._src.methods import feddkc  # noqa: F401
from neural._src.methods import mhd  # noqa: F401
from neural._src.methods import representation_sharing  # noqa: F401
