"""How fast distillation degrades: rates, the linear map behind the rounds, its geometry.

Every protocol's rounds are one linear recurrence (:func:`recurrence`,
:func:`recurrence_matrix`); its spectral radius is the rate at which the rounds
contract (:func:`spectral_radius`, :func:`degradation_rate`, per cycle
:func:`degradation_rate_per_cycle`), swept over the ridge, the separation, the
heterogeneity and the bandwidths (:func:`sweep`, :func:`rate_grid`). For two
agents the rounds are oblique projections (:func:`geometry`,
:func:`principal_cosines`, :func:`akd_by_projections`), and the paper's printed
special cases have closed forms of their own (:func:`avgkd_by_projections`,
:func:`intersection_limit_linear`, ...). The derivations: ``docs/closed_forms.md``
and ``docs/theory.md``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.closed_form import RADIUS_METHODS
  from fedkrr._src.closed_form import factors
  from fedkrr._src.closed_form import recurrence
  from fedkrr._src.closed_form import recurrence_matrix
  from fedkrr._src.closed_form import spectral_radius
  from fedkrr._src.closed_form import transfer
  from fedkrr._src.geometry import Geometry
  from fedkrr._src.geometry import akd_by_projections
  from fedkrr._src.geometry import geometry
  from fedkrr._src.geometry import principal_cosines
  from fedkrr._src.rates import GRID_ROUTES
  from fedkrr._src.rates import RATE_METHODS
  from fedkrr._src.rates import TwoClusters
  from fedkrr._src.rates import cycle_operator
  from fedkrr._src.rates import degradation_rate
  from fedkrr._src.rates import degradation_rate_per_cycle
  from fedkrr._src.rates import rate_estimate
  from fedkrr._src.rates import rate_grid
  from fedkrr._src.rates import shared_kernel_rate
  from fedkrr._src.rates import sweep
  from fedkrr._src.rates import sweep_bandwidth_ratio
  from fedkrr._src.rates import sweep_heterogeneity
  from fedkrr._src.rates import sweep_ridge
  from fedkrr._src.rates import sweep_separation
  from fedkrr._src.rates import warm_sweep
  from fedkrr._src.special_cases import avgkd_by_projections
  from fedkrr._src.special_cases import avgkd_limit_by_projections
  from fedkrr._src.special_cases import avgkd_limit_by_system
  from fedkrr._src.special_cases import avgkd_partial_sums_as_printed
  from fedkrr._src.special_cases import block_system_predictions
  from fedkrr._src.special_cases import intersection_limit_linear
  from fedkrr._src.special_cases import pkd_by_projections
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
