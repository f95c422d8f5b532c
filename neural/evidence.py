"""neural's evidence: the paper's statements, how a seeded difference is judged, theory curves.

:data:`neural.CLAIMS` (at the top) lists the statements; :class:`Claim` and
:class:`Check` hold one, :func:`judge` and :class:`Effect` decide a difference over
seeds with its interval, :func:`check_claims` and :func:`paper_curves` read a
reproduction's runs, and :func:`theory_problem` and :func:`matched_ridge` build the
kernel-ridge theory that :func:`neural.compare` puts beside an experiment.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from neural._src.evidence.authors import authors_curves
  from neural._src.evidence.authors import control_checks
  from neural._src.evidence.claims import Check
  from neural._src.evidence.claims import Claim
  from neural._src.evidence.curves import Curve
  from neural._src.evidence.paper_units import paper_rounds
  from neural._src.evidence.seeded import Effect
  from neural._src.evidence.seeded import Judgement
  from neural._src.evidence.seeded import count_verdicts
  from neural._src.evidence.seeded import difference
  from neural._src.evidence.seeded import judge
  from neural._src.evidence.seeded import judgement_table
  from neural._src.figures.reproduce_curves import check_claims
  from neural._src.figures.reproduce_curves import check_statements
  from neural._src.figures.reproduce_curves import paper_curves
  from neural._src.figures.reproduce_report import ConfigReproduction
  from neural._src.kd.compare import TheoryCurves
  from neural._src.kd.compare import TheoryProblem
  from neural._src.kd.compare import geometric_rate
  from neural._src.kd.compare import matched_ridge
  from neural._src.kd.compare import mlp_ntk
  from neural._src.kd.compare import theory_problem
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
