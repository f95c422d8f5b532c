"""The names of fedkrr's protocols, baselines and run methods, in a module that imports nothing.

``neural``'s configs and both command lines offer and check these names before they
import JAX (``neural --help`` and ``fedkrr --help`` start at once); :mod:`protocols`,
which implements them, takes them from here, so there is one copy of each.
"""

PROTOCOLS = ("akd", "avgkd", "pkd", "pkd-mean", "ekd", "backfit-gs", "backfit-jacobi")
BASELINES = ("central", "local")
# The paths of fedkrr.run (and `fedkrr run --method`): closed form, literal rounds,
# conjugate gradients without an N x N matrix, or the memory rule's choice.
RUN_METHODS = ("closed-form", "simulate", "matfree", "auto")
