"""The paper's applications built on fedkrr: the verify table, the counterexample search,
the toy experiment, rate plots and the closed-form demo.

``fedkrr verify``, ``fedkrr search`` and ``fedkrr toy`` are these functions on the
command line; the mathematics they use is ``fedkrr``'s own namespace.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.paper.demo import closed_form_demo
  from fedkrr._src.paper.rate_plots import DegradationReport
  from fedkrr._src.paper.rate_plots import RateCurves
  from fedkrr._src.paper.rate_plots import akd_decay
  from fedkrr._src.paper.rate_plots import degradation_report
  from fedkrr._src.paper.rate_plots import plot_akd_decay
  from fedkrr._src.paper.rate_plots import plot_rate_curves
  from fedkrr._src.paper.rate_plots import plot_rate_heatmap
  from fedkrr._src.paper.rate_plots import rate_curves
  from fedkrr._src.paper.rate_plots import sweep_kernel_mismatch
  from fedkrr._src.paper.search import recheck_finding
  from fedkrr._src.paper.search import search_all
  from fedkrr._src.paper.search import search_claim
  from fedkrr._src.paper.search import search_ids
  from fedkrr._src.paper.shipped_findings import SearchResult
  from fedkrr._src.paper.shipped_findings import findings_dir
  from fedkrr._src.paper.shipped_findings import findings_table
  from fedkrr._src.paper.shipped_findings import known_findings
  from fedkrr._src.paper.toy import ToyConfig
  from fedkrr._src.paper.toy import ToyData
  from fedkrr._src.paper.toy import ToyPanel
  from fedkrr._src.paper.toy import ToyResult
  from fedkrr._src.paper.toy import plot_toy
  from fedkrr._src.paper.toy import toy_curves
  from fedkrr._src.paper.toy import toy_data
  from fedkrr._src.paper.toy import toy_experiment
  from fedkrr._src.paper.toy import toy_problem
  from fedkrr._src.paper.toy import toy_rows
  from fedkrr._src.paper.toy import toy_summary
  from fedkrr._src.paper.toy import write_toy
  from fedkrr._src.paper.verify import CheckRow
  from fedkrr._src.paper.verify import checks_table
  from fedkrr._src.paper.verify import failed_checks
  from fedkrr._src.paper.verify import run_checks
  from fedkrr._src.paper.verify import write_checks
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
