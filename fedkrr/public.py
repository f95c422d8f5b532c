"""Distillation through a shared public reference set, in closed form (after D-Distillation).

The exact, kernel ridge version of distilling through shared unlabelled inputs, the
mechanism of D-Distillation (Bistritz, Mann & Bambos 2020): every round is linear
in the targets, so the rounds have closed forms (:func:`public_distillation`,
:func:`public_distillation_trajectory`, :func:`public_distillation_round`, the fixed
point :func:`public_distillation_limit`) beside the literal rounds
(:func:`public_distillation_simulate`), and :func:`coverage_sweep` shows what the
reference set's coverage of the agents' data does to the limit. The derivation:
``docs/public_distillation.md``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.public_distillation import CoverageSweep
  from fedkrr._src.public_distillation import PublicDistillation
  from fedkrr._src.public_distillation import WeightedKRRLearner
  from fedkrr._src.public_distillation import coverage_sweep
  from fedkrr._src.public_distillation import plot_coverage
  from fedkrr._src.public_distillation import public_distillation
  from fedkrr._src.public_distillation import public_distillation_limit
  from fedkrr._src.public_distillation import public_distillation_round
  from fedkrr._src.public_distillation import public_distillation_simulate
  from fedkrr._src.public_distillation import public_distillation_trajectory
  from fedkrr._src.public_distillation import weighted_krr_learners
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
