"""Degradation rates (Prop. IV, VIII) and their vmapped sweeps."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from fedkrr._src import rates as fedkrr_rates
from fedkrr._src.paper import rate_plots as fedkrr_plots

RNG = np.random.default_rng(12)


def _problem(sizes=(8, 6), ridge=0.05, kernels=None):
  xs = [RNG.normal(size=(n, 2)) + a for a, n in enumerate(sizes)]
  ys = [RNG.normal(size=n) for n in sizes]
  kernels = kernels or [fedkrr.RBF(0.5)] * len(sizes)
  return fedkrr.make_problem(xs, ys, kernels, ridge), RNG.normal(size=(5, 2))


def test_akd_decays_at_the_predicted_rate(x64):
  # |g_{2t}| ~ rho^t: the ratio of successive cycles tends to rho.
  problem, x_eval = _problem()
  rho = float(fedkrr.rates.degradation_rate(problem))
  traj = np.asarray(fedkrr.trajectory(problem, "akd", 202, x_eval))
  norms = np.linalg.norm(traj[::2], axis=1)
  assert 0.0 < rho < 1.0
  assert abs(norms[-1] / norms[-2] - rho) < 1e-6 * max(rho, 1e-3) + 1e-9


def test_rate_does_not_depend_on_the_start_for_m_agents(x64):
  problem, _ = _problem(sizes=(5, 6, 4), kernels=[fedkrr.RBF(0.5), fedkrr.Laplace(0.4),
                                                  fedkrr.RBF(1.0)])
  rates = [float(fedkrr.rates.degradation_rate(problem, start=s)) for s in range(3)]
  assert max(rates) - min(rates) < 1e-10
  # rho^(1/M) is the spectral radius of the one-round AKD recurrence.
  one_round = fedkrr.rates.recurrence_matrix(problem, fedkrr.rates.recurrence(problem, "akd"))
  assert abs(float(fedkrr.rates.spectral_radius(one_round)) ** 3 - rates[0]) < 1e-10


def test_degradation_rate_matches_numpy_reference(x64):
  problem, _ = _problem(kernels=[fedkrr.RBF(0.5), fedkrr.Laplace(0.3)])
  (x1, x2), c, n = problem.xs, float(problem.ridge), problem.num_points
  k1 = lambda a, b: np.asarray(problem.kernels[0](a, b)) / n
  k2 = lambda a, b: np.asarray(problem.kernels[1](a, b)) / n
  s1 = np.linalg.inv(c * np.eye(len(x1)) + k1(x1, x1))
  s2 = np.linalg.inv(c * np.eye(len(x2)) + k2(x2, x2))
  cycle = s1 @ k2(x1, x2) @ s2 @ k1(x2, x1)   # agent 1 -> agent 2 -> agent 1 on coefficients
  rho = np.max(np.abs(np.linalg.eigvals(cycle)))
  assert abs(float(fedkrr.rates.degradation_rate(problem)) - rho) < 1e-10


def test_sweeps_equal_a_loop(x64):
  problem, _ = _problem()
  ridges = jnp.asarray([1e-3, 1e-2, 0.1, 1.0])
  swept = fedkrr.rates.sweep_ridge(problem, ridges)
  looped = [float(fedkrr.rates.degradation_rate(dataclasses.replace(problem, ridge=c)))
            for c in ridges]
  np.testing.assert_allclose(swept, looped, rtol=1e-10)
  clusters = fedkrr.rates.TwoClusters.draw(0, 10)
  grid = fedkrr.rates.rate_grid(clusters, jnp.asarray([0.01, 0.1]), jnp.asarray([0.0, 0.5, 1.0]))
  assert grid.shape == (2, 3)
  assert abs(float(grid[1, 2]) - float(fedkrr.rates.degradation_rate(clusters.problem(1.0, 0.1)))) \
      < 1e-10


def test_prop4_trend_regularisation(x64):
  problem, _ = _problem()
  rho = np.asarray(fedkrr.rates.sweep_ridge(problem, jnp.logspace(-4, 1, 10)))
  assert np.all(np.diff(rho) < 0) and rho[0] > 0.9 and rho[-1] < 0.1


def test_prop4_trend_kernel_mismatch(x64):
  clusters = fedkrr.rates.TwoClusters.draw(3, 40)
  problem = clusters.problem(0.3, 0.01)
  rho = np.asarray(fedkrr.rates.sweep_bandwidth_ratio(problem, jnp.asarray([0.01, 0.1, 1.0, 10.0,
                                                                            100.0])))
  # A strong mismatch either way degrades faster than equal kernels...
  assert rho[2] > max(rho[0], rho[3], rho[4]) and rho[2] > rho[3] > rho[4]
  # ...but not monotonically: a moderately wider kernel for agent 2 (ratio 0.1) can
  # degrade more slowly than equal kernels (a finding, reported by `fedkrr verify`).
  assert rho[1] > rho[0]


def test_prop4_trend_data_heterogeneity(x64):
  clusters = fedkrr.rates.TwoClusters.draw(3, 40)
  rho = np.asarray(fedkrr.rates.sweep_separation(clusters, jnp.linspace(0.0, 8.0, 9), 0.01))
  assert np.all(np.diff(rho) < 0)
  mixed = np.asarray(fedkrr.rates.sweep_heterogeneity(clusters, jnp.asarray([0.0, 1.0]), 0.01))
  assert mixed[0] < mixed[1]   # disjoint clusters degrade faster than i.i.d. agents


def test_bandwidth_sweep_needs_an_rbf_first_kernel():
  problem, _ = _problem(kernels=[fedkrr.Laplace(0.5), fedkrr.RBF(0.5)])
  with pytest.raises(ValueError, match=r"kernels\[0\]"):
    fedkrr.rates.sweep_bandwidth_ratio(problem, jnp.asarray([1.0]))


@pytest.mark.parametrize("kernels", ["shared", "different"])
def test_each_method_matches_the_dense_route(x64, kernels):
  problem, _ = _problem(kernels=None if kernels == "shared" else [fedkrr.RBF(0.5),
                                                                  fedkrr.Laplace(0.3)])
  dense = float(fedkrr.rates.degradation_rate(problem, method="dense"))
  methods = ["auto", "krylov"] + (["symmetric"] if kernels == "shared" else [])
  for method in methods:
    est = fedkrr.rates.rate_estimate(problem, method=method)
    assert bool(est.converged), method
    assert abs(float(est.radius) - dense) < 1e-12, method


def test_krylov_route_for_m_agents_and_ridge_zero(x64):
  problem, _ = _problem(sizes=(5, 6, 4), kernels=[fedkrr.RBF(0.5), fedkrr.Laplace(0.4),
                                                  fedkrr.RBF(1.0)])
  for start in range(3):
    assert abs(float(fedkrr.rates.degradation_rate(problem, start=start, method="krylov"))
               - float(fedkrr.rates.degradation_rate(problem, start=start, method="dense"))) < 1e-12
  # c = 0: the minimum-norm fits of App. C (the pseudo-inverse root), here rho = 1.
  flat = dataclasses.replace(problem, ridge=jnp.asarray(0.0))
  assert abs(float(fedkrr.rates.degradation_rate(flat, method="krylov"))
             - float(fedkrr.rates.degradation_rate(flat, method="dense"))) < 1e-9


def test_vmapped_rates_equal_each_instance_with_and_without_ridge_zero(x64):
  problem, _ = _problem()
  krylov = lambda p: fedkrr.rates.degradation_rate(p, method="krylov")  # noqa: E731
  for ridges in (jnp.asarray([1e-3, 0.1, 1.0]), jnp.asarray([0.0, 0.1, 1.0])):
    swept = fedkrr.rates.sweep(lambda c: dataclasses.replace(problem, ridge=c), ridges, krylov)
    dense = [float(fedkrr.rates.degradation_rate(dataclasses.replace(problem, ridge=c),
                                                 method="dense")) for c in ridges]
    np.testing.assert_allclose(swept, dense, rtol=1e-10, atol=1e-12)
  chunked = fedkrr.rates.sweep(lambda c: dataclasses.replace(problem, ridge=c), ridges, krylov,
                               batch_size=2)
  np.testing.assert_allclose(chunked, swept, rtol=1e-13)


@pytest.mark.parametrize("kernels", ["shared", "different"])
def test_unconverged_estimates_take_the_blocks_eigen_solver(x64, kernels):
  # Two products cannot converge: rate_estimate says so, and degradation_rate computes the
  # radius from the same blocks by a dense eigen-solver instead (no NaN), alone and vmapped.
  problem, _ = _problem(sizes=(30, 30), ridge=1e-3, kernels=None if kernels == "shared" else
                        [fedkrr.RBF(0.5), fedkrr.Laplace(0.3)])
  dense = float(fedkrr.rates.degradation_rate(problem, method="dense"))
  methods = ["krylov"] + (["symmetric"] if kernels == "shared" else [])
  make = lambda c: dataclasses.replace(problem, ridge=c)  # noqa: E731
  ridges = jnp.asarray([1e-3, 1e-1])
  for method in methods:
    assert not bool(fedkrr.rates.rate_estimate(problem, method=method, steps=2).converged)
    assert abs(float(fedkrr.rates.degradation_rate(problem, method=method, steps=2))
               - dense) < 1e-12
  rate = functools.partial(fedkrr.rates.degradation_rate, method=methods[-1], steps=2)
  swept = jax.jit(functools.partial(fedkrr.rates.sweep, make, rate_fn=rate))(ridges)   # no NaN pass
  np.testing.assert_allclose(swept, [float(fedkrr.rates.degradation_rate(make(c), method="dense"))
                                     for c in ridges], rtol=0, atol=1e-12)
  # small problems: "auto" is the dense route, exact whatever the steps
  assert float(fedkrr.rates.degradation_rate(problem, steps=2)) == dense


def test_where_unconverged_runs_the_fallback_only_where_needed(x64):
  calls = []

  def fallback(x):
    jax.debug.callback(lambda: calls.append(1))
    return -x

  values = jnp.asarray([1.0, 2.0, 3.0, 4.0])
  converged = jnp.asarray([True, False, True, False])
  picked = jax.jit(jax.vmap(lambda v, ok: fedkrr_rates.where_unconverged(v, ok, fallback, v)))
  np.testing.assert_array_equal(picked(values, converged), [1.0, -2.0, 3.0, -4.0])
  jax.effects_barrier()
  assert len(calls) == 2
  single = fedkrr_rates.where_unconverged(values[1], converged[1], fallback, values[1])
  assert float(single) == -2.0


def test_sweep_recomputes_unconverged_entries_on_the_dense_route(x64):
  problem, _ = _problem(sizes=(30, 30), ridge=1e-3)
  make = lambda c: dataclasses.replace(problem, ridge=c)  # noqa: E731
  ridges = jnp.asarray([1e-3, 1e-2, 1e-1])
  flagged = jnp.asarray([0.5, jnp.nan, 0.25])
  filled = fedkrr_rates.dense_where_nan(make, ridges, flagged)
  dense = float(fedkrr.rates.degradation_rate(make(ridges[1]), method="dense"))
  np.testing.assert_array_equal(np.asarray(filled)[[0, 2]], [0.5, 0.25])
  np.testing.assert_allclose(float(filled[1]), dense, rtol=1e-12)   # jit vs eager order


def test_rate_method_errors_name_the_argument():
  problem, _ = _problem(sizes=(3, 3, 3))
  assert fedkrr.rates.RATE_METHODS == ("auto", "symmetric", "krylov", "dense")
  # "auto": dense up to AUTO_DENSE_MAX points, Krylov (Arnoldi for M = 3) above
  big, _ = _problem(sizes=(90, 90, 90))
  assert fedkrr_rates.resolve_rate_method(problem, "auto") == "dense"
  assert fedkrr_rates.resolve_rate_method(big, "auto") == "krylov"
  with pytest.raises(ValueError, match="method"):
    fedkrr.rates.degradation_rate(problem, method="eig")
  with pytest.raises(ValueError, match="two agents"):
    fedkrr.rates.degradation_rate(problem, method="symmetric")
  with pytest.raises(ValueError, match="steps"):
    fedkrr.rates.degradation_rate(problem, steps=0)
  two, _ = _problem(kernels=[fedkrr.RBF(0.5), fedkrr.RBF(0.7)])
  with pytest.raises(ValueError, match="kernel"):
    fedkrr.rates.rate_estimate(two, method="symmetric")
  with pytest.raises(ValueError, match="batch_size"):
    fedkrr.rates.sweep(lambda c: dataclasses.replace(two, ridge=c), jnp.asarray([0.1]),
                       batch_size=0)


def test_rate_grid_reuses_each_mixings_decomposition_and_matches_the_dense_route(x64):
  clusters = fedkrr.rates.TwoClusters.draw(1, 12)
  ridges = jnp.asarray([0.1, 0.0, 1e-3, 1.0])      # unsorted, and c = 0 (pseudo-inverse roots)
  mixings = jnp.asarray([0.0, 0.5, 1.0])
  grid = np.asarray(fedkrr.rates.rate_grid(clusters, ridges, mixings))
  dense = np.asarray([[float(fedkrr.rates.degradation_rate(clusters.problem(p, c), method="dense"))
                       for p in mixings] for c in ridges])
  assert grid.shape == (4, 3) and np.all(np.isfinite(grid))
  np.testing.assert_allclose(grid, dense, rtol=0, atol=1e-10)
  jitted = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(clusters, cs, ps, batch_size=2))
  np.testing.assert_allclose(jitted(ridges, mixings), grid, rtol=1e-12)
  with pytest.raises(ValueError, match="batch_size"):
    fedkrr.rates.rate_grid(clusters, ridges, mixings, batch_size=0)
  with pytest.raises(ValueError, match="steps"):
    fedkrr.rates.rate_grid(clusters, ridges, mixings, steps=0)


def _small_ridge_clusters():
  # Nearly parallel agents (mixing 1) and clustered ones (mixing 0), c down to 1e-8: the
  # top eigenvalues of B B^T crowd within about 1e-6 of each other near 1.
  return fedkrr.rates.TwoClusters.draw(0, 40), jnp.asarray([1.0, 1e-2, 1e-4, 1e-6, 1e-8]), \
      jnp.asarray([0.0, 1.0])


def test_rate_grid_converges_at_small_ridges_and_matches_the_dense_route(x64):
  clusters, ridges, mixings = _small_ridge_clusters()
  dense = np.asarray([[float(fedkrr.rates.degradation_rate(clusters.problem(p, c), method="dense"))
                       for p in mixings] for c in ridges])
  # 30 products per entry: the Krylov route cannot converge at the smallest c; those entries
  # (and every smaller c of their column) take eigvalsh of the same B B^T, inside the call.
  grid, routes = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(clusters, cs, ps, steps=30,
                                                               with_routes=True))(ridges, mixings)
  routes = np.asarray(routes)
  assert np.all(np.isfinite(grid))
  np.testing.assert_allclose(grid, dense, rtol=0, atol=1e-10)
  assert routes[0].tolist() == [0, 0] and routes[-1].tolist() == [1, 1]
  assert set(np.unique(routes)) <= {0, 1}
  # Without the symmetric eigen-solver, the Krylov route leaves NaN (code 2) there.
  bare, bare_routes = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(
      clusters, cs, ps, steps=30, eigh_fallback=False, with_routes=True))(ridges, mixings)
  assert np.all(np.isnan(np.asarray(bare))[np.asarray(bare_routes) == 2])
  assert np.asarray(bare_routes)[-1].tolist() == [2, 2]
  with pytest.raises(ValueError, match="with_routes"):
    fedkrr.rates.rate_grid(clusters, ridges, mixings, rate_fn=fedkrr.rates.degradation_rate,
                           with_routes=True)


@pytest.mark.parametrize("kernels", ["shared", "different", "three"])
def test_sweep_ridge_reuses_the_eigen_bases_and_matches_the_dense_route(x64, kernels):
  sizes = (40, 30, 20) if kernels == "three" else (40, 30)
  family = {"shared": [fedkrr.RBF(0.3)] * 2, "different": [fedkrr.RBF(0.2), fedkrr.RBF(0.5)],
            "three": [fedkrr.RBF(0.2), fedkrr.Laplace(0.4), fedkrr.RBF(0.5)]}[kernels]
  problem, _ = _problem(sizes=sizes, kernels=family)
  ridges = jnp.asarray([1e-2, 1e-8, 1.0, 1e-4, 1e-6, 0.1])     # unsorted, down to 1e-8
  shared = kernels == "shared"      # the symmetric block route; else Arnoldi on the cycle
  swept = np.asarray(fedkrr_rates._ridge_sweep(problem, ridges, 200, shared))   # no NaN pass
  np.testing.assert_allclose(fedkrr.rates.sweep_ridge(problem, ridges), swept, rtol=0, atol=1e-13)
  dense = np.asarray([float(fedkrr.rates.degradation_rate(dataclasses.replace(problem, ridge=c),
                                                          method="dense")) for c in ridges])
  # At c = 1e-8 the cycle map of different kernels is ill-conditioned and the dense route
  # is the less accurate one (on such an instance 4.7e-10 from a 50-digit mpmath reference,
  # this route 9.7e-11): there the two agree to 1e-8.
  tiny = np.asarray(ridges) < 1e-7
  np.testing.assert_allclose(swept[~tiny], dense[~tiny], rtol=0, atol=1e-10)
  np.testing.assert_allclose(swept[tiny], dense[tiny], rtol=0, atol=1e-8)


def test_kernel_sweeps_start_each_ratio_from_the_last(x64):
  # 260 points: above AUTO_DENSE_MAX, so the warm-started Krylov route runs.
  clusters = fedkrr.rates.TwoClusters.draw(2, 130)
  problem = clusters.problem(0.3, 1e-2)
  ratios = jnp.asarray([0.5, 0.8, 1.0, 1.6])
  swept = np.asarray(fedkrr.paper.sweep_kernel_mismatch(problem, ratios))
  dense = [float(fedkrr.rates.degradation_rate(fedkrr_plots._mismatched(problem, r),
                                               method="dense"))
           for r in ratios]
  np.testing.assert_allclose(swept, dense, rtol=0, atol=1e-10)
