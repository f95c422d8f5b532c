"""The figures of the degradation rates (Prop. IV) and the trends in the numbers they draw."""

import json

from matplotlib.collections import QuadMesh
from matplotlib.colors import LogNorm
import numpy as np
import pytest

import fedkrr

RATIOS = (0.1, 0.3, 1.0, 3.0, 10.0)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def clusters():
  return fedkrr.rates.TwoClusters.draw(0, 50)


@pytest.fixture(scope="module")
def curves(clusters):
  return fedkrr.paper.rate_curves(clusters, ridge=1e-2, mixing=0.0, ridges=np.logspace(-4, 0, 9),
                            ratios=RATIOS, mixings=np.linspace(0.0, 1.0, 6),
                            separations=np.linspace(0.0, 6.0, 7))


def _png(path):
  with open(path, "rb") as f:
    return f.read(8) == PNG_MAGIC


def test_trend_1_rho_decreases_with_the_ridge(curves):
  """Prop. IV, first trend: a larger c degrades faster (smaller rho)."""
  assert np.all(np.diff(curves.rho_ridge) < 0), curves.rho_ridge
  assert curves.rho_ridge[0] > 0.99 and curves.rho_ridge[-1] < 0.01


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mixing", [0.0, 0.5])
def test_trend_2_symmetric_mismatch_is_slowest_at_ratio_one(seed, mixing):
  """Prop. IV, second trend: with the geometric mean of the bandwidths fixed, rho is
  maximal for the shared kernel (ratio 1) and falls on both sides."""
  problem = fedkrr.rates.TwoClusters.draw(seed, 50).problem(mixing, 1e-2)
  rho = np.asarray(fedkrr.paper.sweep_kernel_mismatch(problem, np.asarray(RATIOS)))
  assert int(np.argmax(rho)) == RATIOS.index(1.0), rho
  assert np.all(np.diff(rho[:3]) > 0) and np.all(np.diff(rho[2:]) < 0), rho


def test_trend_2_in_the_plotted_data(curves):
  # The symmetric sweep peaks at 1; the one-sided sweep (agent 2's bandwidth only)
  # falls for every ratio >= 1 (narrower kernel 2) ...
  assert int(np.argmax(curves.rho_mismatch)) == RATIOS.index(1.0), curves.rho_mismatch
  assert np.all(np.diff(curves.rho_ratio[2:]) < 0), curves.rho_ratio
  # ... but a wider kernel for agent 2 alone degrades slower than the shared kernel
  # here: bandwidth mismatch and smoothness are confounded in that sweep (a finding).
  assert curves.rho_ratio[1] > curves.rho_ratio[2], curves.rho_ratio


def test_shared_kernel_is_ratio_one_in_both_sweeps(clusters, curves, assert_close, x64):
  rho = fedkrr.rates.degradation_rate(clusters.problem(0.0, 1e-2))
  assert_close(curves.rho_ratio[2], rho)
  assert_close(curves.rho_mismatch[2], rho)


def test_trend_3_rho_decreases_with_separation(curves):
  """Prop. IV, third trend: more different data sets (farther clusters) degrade faster."""
  assert np.all(np.diff(curves.rho_separation) < 0), curves.rho_separation


def test_trend_3_rho_increases_with_mixing(curves):
  # Less heterogeneous (more mixed) agents degrade slower. The mixing of one draw is
  # noisy from point to point, so the check is on the ends and the least-squares slope.
  assert curves.rho_mixing[-1] > curves.rho_mixing[0] + 0.05, curves.rho_mixing
  assert np.polyfit(curves.mixings, curves.rho_mixing, 1)[0] > 0.05


def test_plot_rate_curves_draws_the_sweeps(curves, tmp_path):
  path = tmp_path / "curves.png"
  fig = fedkrr.paper.plot_rate_curves(curves, path=path)
  assert _png(path)
  ax_c, ax_r, ax_p, ax_s = fig.axes
  assert [ax.get_xscale() for ax in fig.axes] == ["log", "log", "linear", "linear"]
  assert "c" in ax_c.get_xlabel() and "ratio" in ax_r.get_xlabel()
  assert "mixing" in ax_p.get_xlabel() and "centres" in ax_s.get_xlabel()
  assert all("rho" in ax.get_ylabel() for ax in fig.axes)
  pairs = [(ax_c.lines[0], curves.ridges, curves.rho_ridge),
           (ax_r.lines[0], curves.ratios, curves.rho_ratio),
           (ax_r.lines[1], curves.ratios, curves.rho_mismatch),
           (ax_p.lines[0], curves.mixings, curves.rho_mixing),
           (ax_s.lines[0], curves.separations, curves.rho_separation)]
  for line, x, y in pairs:
    np.testing.assert_array_equal(line.get_xdata(), x)
    np.testing.assert_array_equal(line.get_ydata(), y)


def test_plot_rate_heatmap(clusters, tmp_path):
  ridges, mixings = np.logspace(-3, 0, 4), np.linspace(0.0, 1.0, 3)
  grid = np.asarray(fedkrr.rates.rate_grid(clusters, ridges, mixings))
  assert grid.shape == (4, 3)
  # Along c (the first trend) on every row of the grid.
  assert np.all(np.diff(grid, axis=0) < 0), grid
  path = tmp_path / "heat.png"
  fig = fedkrr.paper.plot_rate_heatmap(grid, ridges, mixings, path=path)
  assert _png(path)
  ax, bar = fig.axes
  assert ax.get_xscale() == "log" and "c" in ax.get_xlabel() and "mixing" in ax.get_ylabel()
  assert "rho" in bar.get_ylabel()
  (mesh,) = [c for c in ax.collections if isinstance(c, QuadMesh)]
  np.testing.assert_array_equal(np.asarray(mesh.get_array()).reshape(3, 4), grid.T)
  # The cells are centred on the grid's values (geometric centres on the log axis).
  left, right = ax.get_xlim()
  assert left < ridges[0] < ridges[-1] < right
  assert np.isclose(np.sqrt(left * 10 ** (-2.5)), ridges[0])
  log_fig = fedkrr.paper.plot_rate_heatmap(grid, ridges, mixings, log_scale=True)
  assert isinstance(log_fig.axes[0].collections[0].norm, LogNorm)


def test_plot_rate_heatmap_rejects_mismatched_shapes():
  with pytest.raises(ValueError, match="grid: expected shape \\(4, 3\\)"):
    fedkrr.paper.plot_rate_heatmap(np.zeros((3, 4)), np.logspace(-3, 0, 4), np.linspace(0, 1, 3))


def test_sweep_kernel_mismatch_needs_an_rbf_kernel():
  rng = np.random.default_rng(0)
  problem = fedkrr.make_problem([rng.normal(size=(4, 2)), rng.normal(size=(3, 2))],
                                [rng.normal(size=4), rng.normal(size=3)], fedkrr.Linear(), 0.1)
  with pytest.raises(ValueError, match="expected an RBF kernel"):
    fedkrr.paper.sweep_kernel_mismatch(problem, np.ones(2))


def test_akd_decays_at_the_predicted_rate(clusters, x64):
  """Prop. II/IV: |g_t| ~ C rho^(t/2) for M = 2; measured on agent 1's rounds (even t)."""
  problem = clusters.problem(0.0, 1e-2)
  x_eval = problem.pooled_x()
  rounds = 80
  norms, rho = fedkrr.paper.akd_decay(problem, rounds, x_eval)
  assert norms.shape == (rounds,) and 0.0 < rho < 1.0
  t = np.arange(rounds)
  even_late = (t % 2 == 0) & (t >= rounds // 2)
  slope = np.polyfit(t[even_late], np.log(norms[even_late]), 1)[0]
  assert abs(slope - np.log(rho) / 2) < 1e-3 * abs(np.log(rho)), (slope, np.log(rho) / 2)
  fig = fedkrr.paper.plot_akd_decay(problem, rounds, x_eval)
  measured, predicted = fig.axes[0].lines
  np.testing.assert_allclose(measured.get_ydata(), np.log(norms))
  np.testing.assert_allclose(np.diff(predicted.get_ydata()), np.log(rho) / 2)


def test_degradation_report_writes_figures_and_numbers(tmp_path):
  report = fedkrr.paper.degradation_report(1, tmp_path / "rates", points_per_agent=20, grid_size=3)
  assert set(report.paths) == {"curves", "heatmap", "numbers"}
  assert _png(report.paths["curves"]) and _png(report.paths["heatmap"])
  with open(report.paths["numbers"]) as f:
    numbers = json.load(f)
  assert numbers["seed"] == 1 and numbers["points_per_agent"] == 20
  np.testing.assert_array_equal(numbers["grid"]["rho"], report.grid)
  np.testing.assert_array_equal(numbers["rho_ridge"], report.curves.rho_ridge)
  assert report.grid.shape == (3, 3) and np.all((report.grid >= 0) & (report.grid < 1))
