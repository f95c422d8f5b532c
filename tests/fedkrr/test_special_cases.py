"""Prop. V-VII, App. C and App. E closed forms against the protocols' literal rounds."""

import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr

RNG = np.random.default_rng(13)
XS = [RNG.normal(size=(6, 2)), RNG.normal(size=(5, 2)) + 1.0]
YS = [RNG.normal(size=6), RNG.normal(size=5)]
X_EVAL = RNG.normal(size=(4, 2))
KERNELS = {"same": [fedkrr.RBF(0.5)] * 2, "different": [fedkrr.RBF(0.5), fedkrr.Laplace(0.3)]}


def _problem(kernels="different", ridge=0.1):
  return fedkrr.make_problem(XS, YS, KERNELS[kernels], ridge)


def _simulate(problem, name, rounds, x_eval=X_EVAL):
  return fedkrr.simulate(name, fedkrr.krr_learners(problem), problem.xs, problem.ys, rounds,
                         x_eval)


@pytest.mark.parametrize("ridge", [0.1, 0.0])
def test_avgkd_by_projections_equals_literal_rounds(ridge, x64, assert_close):
  problem = _problem("different", ridge)
  assert_close(fedkrr.rates.avgkd_by_projections(problem, 6, X_EVAL),
               _simulate(problem, "avgkd", 6), rtol=1e-8)


def test_prop5_finite_sums_as_printed_miss_early_rounds_and_agree_late(x64):
  # A finding: the printed sums are not round t (e.g. round 0 is F z_1, the sums
  # never give it), but their difference vanishes as t grows (same limit).
  problem = _problem("different", 0.1)
  traj = fedkrr.trajectory(problem, "avgkd", 30, X_EVAL)
  err = [float(jnp.max(jnp.abs(fedkrr.rates.avgkd_partial_sums_as_printed(problem, t, X_EVAL)
                               - traj[t, 0])) / float(jnp.max(jnp.abs(traj[t, 0]))))
         for t in (1, 29)]
  assert err[0] > 1e-2
  assert err[1] < 1e-8


@pytest.mark.parametrize("ridge", [0.1, 0.0])
def test_avgkd_limit_formulas_agree(ridge, x64, assert_close):
  problem = _problem("different", ridge)
  lim = fedkrr.limit(problem, "avgkd", X_EVAL)
  assert lim.converges
  assert_close(fedkrr.rates.avgkd_limit_by_projections(problem, X_EVAL), lim.predictions, rtol=1e-8)
  assert_close(fedkrr.rates.avgkd_limit_by_system(problem, X_EVAL), lim.predictions, rtol=1e-8)
  assert_close(_simulate(problem, "avgkd", 60)[-1], lim.predictions, rtol=1e-7)


def test_prop7_ekd_with_different_kernels_and_no_ridge_reproduces_labels(x64, assert_close):
  problem = _problem("different", 0.0)
  for x, y in zip(XS, YS):
    assert_close(fedkrr.limit(problem, "ekd", x).predictions, y, rtol=1e-6)
    assert_close(fedkrr.rates.block_system_predictions(problem, x), y, rtol=1e-6)
  # ... and the predictor is not either agent's centralised model away from the data.
  central = fedkrr.central(problem, X_EVAL)
  ekd = fedkrr.rates.block_system_predictions(problem, X_EVAL)
  assert float(jnp.min(jnp.max(jnp.abs(central - ekd[None]), axis=1))) > 1e-3


def test_appc_self_distillation_without_ridge_changes_nothing(x64, assert_close):
  problem = fedkrr.make_problem([XS[0], XS[0]], [YS[0], YS[0]], KERNELS["same"], 0.0)
  traj = _simulate(problem, "akd", 5)
  assert_close(traj, jnp.broadcast_to(traj[0], traj.shape), rtol=1e-7)
  with_ridge = fedkrr.make_problem([XS[0], XS[0]], [YS[0], YS[0]], KERNELS["same"], 0.1)
  traj = fedkrr.trajectory(with_ridge, "akd", 5, X_EVAL)
  assert float(jnp.max(jnp.abs(traj[4]))) < 0.9 * float(jnp.max(jnp.abs(traj[0])))


def test_appc_positive_definite_kernel_degrades(x64):
  problem = _problem("same", 0.0)
  assert 0.0 < float(fedkrr.rates.degradation_rate(problem)) < 1.0


def test_appc_singular_kernel_converges_to_the_intersection(x64, assert_close):
  x1 = np.zeros((4, 3))
  x1[:, :2] = RNG.normal(size=(4, 2))
  x2 = np.zeros((5, 3))
  x2[:, 1:] = RNG.normal(size=(5, 2))
  problem = fedkrr.make_problem([x1, x2], [RNG.normal(size=4), RNG.normal(size=5)],
                                [fedkrr.Linear()] * 2, 0.0)
  x_eval = RNG.normal(size=(5, 3))
  target = fedkrr.rates.intersection_limit_linear(problem, x_eval)
  assert float(jnp.max(jnp.abs(target))) > 1e-2          # a non-zero point
  assert_close(fedkrr.trajectory(problem, "akd", 300, x_eval)[-1], target, rtol=1e-8)
  assert float(fedkrr.limit(problem, "akd", x_eval).spectral_radius) > 1 - 1e-9   # rho = 1


def test_appe_pkd_is_an_averaged_projection(x64, assert_close):
  problem = _problem("same", 0.0)
  assert_close(fedkrr.rates.pkd_by_projections(problem, 6, X_EVAL), _simulate(problem, "pkd", 6),
               rtol=1e-7)


def test_ekd_equals_block_system_for_two_agents_not_for_three(x64, assert_close):
  problem = _problem("same", 0.1)
  assert_close(fedkrr.limit(problem, "ekd", X_EVAL).predictions,
               fedkrr.rates.block_system_predictions(problem, X_EVAL), rtol=1e-8)
  three = fedkrr.make_problem(XS + [RNG.normal(size=(4, 2)) - 1.0], YS + [RNG.normal(size=4)],
                              [fedkrr.RBF(0.5)] * 3, 0.1)
  ekd = fedkrr.limit(three, "ekd", X_EVAL).predictions
  block = fedkrr.rates.block_system_predictions(three, X_EVAL)
  assert_close(block, fedkrr.central(three, X_EVAL)[0], rtol=1e-8)
  assert float(jnp.max(jnp.abs(ekd - block)) / jnp.max(jnp.abs(block))) > 1e-2
