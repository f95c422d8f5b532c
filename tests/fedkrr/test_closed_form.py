"""Closed forms against literal round-by-round simulation, limits and the paper's propositions."""

import dataclasses

import jax
import jax.numpy as jnp
import mp_reference  # a helper on pytest's pythonpath (pyproject.toml)
import mpmath
import numpy as np
import numpy_reference
import pytest

import fedkrr

SIZES = (9, 7, 5)


def _data(m, seed=0, dim=3, outputs=0, shift=0.7):
  rng = np.random.default_rng(seed)
  xs = [rng.normal(size=(n, dim)) + shift * a for a, n in enumerate(SIZES[:m])]
  shape = lambda n: (n, outputs) if outputs else (n,)  # noqa: E731
  ys = [rng.normal(size=shape(n)) for n in SIZES[:m]]
  return xs, ys, rng.normal(size=(6, dim))


def _kernels(m, same):
  if same:
    return fedkrr.RBF(0.5)
  return [fedkrr.RBF(0.5), fedkrr.Laplace(0.4), fedkrr.Polynomial(2, 0.3, 1.0)][:m]


@pytest.mark.parametrize("protocol", fedkrr.PROTOCOLS)
@pytest.mark.parametrize("ridge", [1e-2, 0.0])
@pytest.mark.parametrize("same", [True, False], ids=["same-kernel", "different-kernels"])
@pytest.mark.parametrize("m", [2, 3])
def test_closed_form_equals_literal_runner(m, same, ridge, protocol, assert_close):
  # Runs in the dtype of the test session (float64, or float32 with JAX_ENABLE_X64=0).
  xs, ys, x_eval = _data(m)
  problem = fedkrr.make_problem(xs, ys, _kernels(m, same), ridge)
  start = m - 1
  exact = fedkrr.trajectory(problem, protocol, 7, x_eval, params=fedkrr.ProtocolParams(start=start))
  literal = fedkrr.simulate(protocol, fedkrr.krr_learners(problem), problem.xs, problem.ys, 7,
                            x_eval, params=fedkrr.ProtocolParams(start=start))
  assert exact.dtype == problem.ridge.dtype
  assert_close(exact, literal, dtype=problem.ridge.dtype)


WEIGHTS = {2: (0.3, 0.7), 3: (0.5, 0.2, 0.3)}


@pytest.mark.parametrize("ridge", [1e-2, 0.0])
@pytest.mark.parametrize("same", [True, False], ids=["same-kernel", "different-kernels"])
@pytest.mark.parametrize("m", [2, 3])
def test_weighted_avgkd_closed_form_equals_literal_rounds_and_numpy_reference(
    m, same, ridge, x64, assert_close):
  xs, ys, x_eval = _data(m)
  problem = fedkrr.make_problem(xs, ys, _kernels(m, same), ridge)
  params = fedkrr.ProtocolParams(weights=WEIGHTS[m])
  exact = fedkrr.trajectory(problem, "weighted-avgkd", 7, x_eval, params=params)
  literal = fedkrr.simulate("weighted-avgkd", fedkrr.krr_learners(problem), problem.xs,
                            problem.ys, 7, x_eval, params=params)
  assert exact.shape == (7, m, x_eval.shape[0])
  assert_close(exact, literal)
  ref_kernels = ([numpy_reference.make_kernel("rbf", gamma=0.5)] * m if same else
                 [numpy_reference.make_kernel("rbf", gamma=0.5),
                  numpy_reference.make_kernel("laplace", gamma=0.4),
                  numpy_reference.make_kernel("polynomial", degree=2, gamma=0.3, coef0=1.0)][:m])
  reference = numpy_reference.weighted_avgkd(xs, ys, ref_kernels, ridge, 7, x_eval, WEIGHTS[m])
  assert_close(literal, reference)
  # Unequal weights change the rounds after round 0 (round 0 fits the labels).
  plain = fedkrr.trajectory(problem, "avgkd", 7, x_eval)
  assert_close(exact[0], plain[0])
  assert np.max(np.abs(np.asarray(exact[1:] - plain[1:]))) > 1e-6


@pytest.mark.parametrize("m", [2, 3])
def test_weighted_avgkd_with_equal_weights_is_avgkd(m, x64, assert_close):
  xs, ys, x_eval = _data(m)
  problem = fedkrr.make_problem(xs, ys, _kernels(m, False), 1e-2)
  for weights in ((1.0 / m,) * m, None):
    params = fedkrr.ProtocolParams(weights=weights)
    assert_close(fedkrr.trajectory(problem, "weighted-avgkd", 7, x_eval, params=params),
                 fedkrr.trajectory(problem, "avgkd", 7, x_eval), rtol=1e-13)
    assert_close(fedkrr.limit(problem, "weighted-avgkd", x_eval, params=params).predictions,
                 fedkrr.limit(problem, "avgkd", x_eval).predictions, rtol=1e-12)
    assert_close(fedkrr.simulate("weighted-avgkd", fedkrr.krr_learners(problem), problem.xs,
                                 problem.ys, 4, x_eval, params=params),
                 fedkrr.simulate("avgkd", fedkrr.krr_learners(problem), problem.xs,
                                 problem.ys, 4, x_eval), rtol=1e-13)


@pytest.mark.parametrize("m", [2, 3])
def test_weighted_avgkd_limit_is_where_the_rounds_go(m, x64, assert_close):
  xs, ys, x_eval = _data(m, shift=1.5)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.2)
  params = fedkrr.ProtocolParams(weights=WEIGHTS[m])
  lim = fedkrr.limit(problem, "weighted-avgkd", x_eval, params=params)
  assert lim.converges, float(lim.spectral_radius)
  rounds = fedkrr.trajectory(problem, "weighted-avgkd", 3000, x_eval, params=params)
  err = np.max(np.abs(np.asarray(rounds[-1]) - np.asarray(lim.predictions)))
  assert err <= 1e-7 * max(np.max(np.abs(np.asarray(rounds[0]))), 1.0)
  run = fedkrr.run(problem, "weighted-avgkd", 5, x_eval, params=params, limit=True)
  assert_close(run.limit, lim.predictions)
  assert_close(run.predictions, rounds[:5])


@pytest.mark.parametrize("weights, message", [
    ((0.5, 0.5, 0.0), "weights: expected finite weights in (0, 1]"),
    ((0.5, 0.5), "weights: expected one weight per agent (3), got 2"),
    ((0.5, 0.4, 0.4), "weights: expected weights summing to 1"),
    ((0.5, float("nan"), 0.5), "weights: expected finite weights in (0, 1]"),
    (("a", 0.5, 0.5), "weights: expected 3 numbers"),
    # fsum of these overflows: each is checked in (0, 1] first
    ((1e308,) * 3, "weights: expected finite weights in (0, 1]"),
    ((1e308, -1e308, 1.0), "weights: expected finite weights in (0, 1]"),
    ((10**400, 0.5, 0.5), "weights: expected 3 numbers"),
    ((True, 0.5, 0.5), "weights: expected 3 numbers"),
    ("0.5", "weights: expected 3 numbers"),
])
def test_bad_weights_are_named(weights, message):
  xs, ys, x_eval = _data(3)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1)
  params = fedkrr.ProtocolParams(weights=weights)
  for call in (lambda: fedkrr.trajectory(problem, "weighted-avgkd", 3, x_eval, params=params),
               lambda: fedkrr.run(problem, "weighted-avgkd", 3, x_eval, params=params),
               lambda: fedkrr.simulate("weighted-avgkd", fedkrr.krr_learners(problem),
                                       problem.xs, problem.ys, 3, x_eval, params=params)):
    with pytest.raises(ValueError) as info:
      call()
    assert message in str(info.value)
  with pytest.raises(ValueError, match="weights: protocol avgkd takes no weights"):
    fedkrr.trajectory(problem, "avgkd", 3, x_eval, params=fedkrr.ProtocolParams(weights=(1.0,)))


@pytest.mark.parametrize("protocol", ["akd", "avgkd", "ekd", "backfit-gs"])
def test_matrix_labels_act_column_wise(protocol, x64, assert_close):
  xs, ys, x_eval = _data(3, outputs=4)
  problem = fedkrr.make_problem(xs, ys, _kernels(3, False), 1e-2)
  exact = fedkrr.trajectory(problem, protocol, 5, x_eval)
  for col in range(4):
    single = fedkrr.make_problem(xs, [y[:, col] for y in ys], _kernels(3, False), 1e-2)
    assert_close(exact[..., col], fedkrr.trajectory(single, protocol, 5, x_eval))


def test_akd_degrades_to_zero(x64):
  """Prop. II: with c > 0 the AKD models tend to 0 at every x."""
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.05)
  preds = np.asarray(fedkrr.trajectory(problem, "akd", 400, x_eval))
  norms = np.linalg.norm(preds, axis=-1)
  assert norms[-1] < 1e-8 * norms[0]
  assert np.all(norms[2::2] <= norms[:-2:2] * (1 + 1e-12))  # every two-round step shrinks
  lim = fedkrr.limit(problem, "akd", x_eval)
  assert lim.converges and np.all(lim.predictions == 0)


def test_self_distillation_without_regularisation_changes_nothing(x64, assert_close):
  """App. C: with c = 0 and identical agents, distillation rounds leave the model unchanged."""
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=(8, 3)), rng.normal(size=8)
  problem = fedkrr.make_problem([x, x], [y, y], fedkrr.Polynomial(2, 0.5, 1.0), 0.0)
  preds = fedkrr.trajectory(problem, "akd", 12, rng.normal(size=(5, 3)))
  assert_close(preds, jnp.broadcast_to(preds[0], preds.shape))
  # ... whereas with c > 0 it shrinks round after round (regularisation is amplified).
  shrinking = fedkrr.trajectory(dataclasses.replace(problem, ridge=jnp.asarray(0.1)), "akd", 12,
                                rng.normal(size=(5, 3)))
  norms = np.linalg.norm(np.asarray(shrinking), axis=-1)
  assert np.all(np.diff(norms) < 0)


def test_ekd_with_a_shared_kernel_recovers_the_central_model_everywhere(x64, assert_close):
  """Prop. VII (DESIGN.md): one kernel, c > 0: the EKD limit is g* at every x."""
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1)
  central = fedkrr.central(problem, x_eval)
  lim = fedkrr.limit(problem, "ekd", x_eval)
  assert lim.converges
  assert_close(lim.predictions, central[0])
  assert_close(central[1], central[0])
  rounds = fedkrr.trajectory(problem, "ekd", 600, x_eval)
  assert_close(rounds[-1], central[0], rtol=1e-7)  # the partial sums converge to it


def test_ekd_limit_reproduces_training_labels_with_different_kernels(x64, assert_close):
  """Prop. VII: with c = 0 the EKD limit predicts y_i on X_i, for different kernels."""
  xs, ys, _ = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.0)
  lim = fedkrr.limit(problem, "ekd", problem.pooled_x())
  assert_close(lim.predictions, problem.pooled_y(), rtol=1e-8)


@pytest.mark.parametrize("ridge", [0.05, 0.0])
def test_avgkd_limit_solves_system_8(ridge, x64, assert_close):
  """Prop. VI / eq. (19): g1 = l_x beta_1 / 2 and g2 = -m_x beta_2 / 2, where
  [[L11 + cI, M12 / 2], [L21 / 2, M22 + cI]] beta = [y1, -y2]."""
  xs, ys, x_eval = _data(2)
  k1, k2 = _kernels(2, False)
  problem = fedkrr.make_problem(xs, ys, [k1, k2], ridge)
  n = problem.num_points
  x1, x2 = np.asarray(problem.xs[0]), np.asarray(problem.xs[1])
  gram = lambda k, a, b: np.asarray(k(a, b)) / n  # noqa: E731
  system = np.block([
      [gram(k1, x1, x1) + ridge * np.eye(len(x1)), gram(k2, x1, x2) / 2],
      [gram(k1, x2, x1) / 2, gram(k2, x2, x2) + ridge * np.eye(len(x2))]])
  beta = np.linalg.solve(system, np.concatenate([ys[0], -ys[1]]))
  g1 = gram(k1, x_eval, x1) @ beta[:len(x1)] / 2
  g2 = -gram(k2, x_eval, x2) @ beta[len(x1):] / 2
  lim = fedkrr.limit(problem, "avgkd", x_eval)
  assert lim.converges
  assert_close(lim.predictions, np.stack([g1, g2]), rtol=1e-8)
  rounds = fedkrr.trajectory(problem, "avgkd", 200, x_eval)
  assert_close(rounds[-1], np.stack([g1, g2]), rtol=1e-8)


@pytest.mark.parametrize("protocol", ["avgkd", "ekd", "backfit-gs", "backfit-jacobi", "pkd",
                                      "pkd-mean"])
def test_limits_are_where_the_rounds_go_for_three_agents(protocol, x64, assert_close):
  xs, ys, x_eval = _data(3, shift=1.5)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.2)
  lim = fedkrr.limit(problem, protocol, x_eval)
  assert lim.converges, float(lim.spectral_radius)
  rounds = fedkrr.trajectory(problem, protocol, 3000, x_eval)
  err = np.max(np.abs(np.asarray(rounds[-1]) - np.asarray(lim.predictions)))
  assert err <= 1e-7 * max(np.max(np.abs(np.asarray(rounds[0]))), 1.0)


def test_backfitting_with_a_shared_kernel_converges_to_the_central_model(x64, assert_close):
  """DESIGN.md: one kernel, c > 0: Gauss-Seidel backfitting reaches g* at every x."""
  xs, ys, x_eval = _data(3)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.05)
  central = fedkrr.central(problem, x_eval)[0]
  assert_close(fedkrr.limit(problem, "backfit-gs", x_eval).predictions, central)
  assert_close(fedkrr.trajectory(problem, "backfit-gs", 800, x_eval)[-1], central, rtol=1e-7)


def test_jacobi_backfitting_partial_sums_equal_ekd_for_two_agents(x64, assert_close):
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 1e-2)
  assert_close(fedkrr.trajectory(problem, "backfit-jacobi", 9, x_eval),
               fedkrr.trajectory(problem, "ekd", 9, x_eval))


def test_pkd_degrades_to_zero(x64):
  """App. E: PKD, like AKD, loses its information round after round."""
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.05)
  lim = fedkrr.limit(problem, "pkd", x_eval)
  preds = np.asarray(fedkrr.trajectory(problem, "pkd", 600, x_eval))
  assert lim.converges
  assert np.max(np.abs(preds[-1])) < 1e-6 * np.max(np.abs(preds[0]))


def test_trajectory_vmaps_over_ridge(x64, assert_close):
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.0)
  ridges = jnp.array([0.0, 1e-3, 1e-1])
  batched = jax.vmap(lambda c: fedkrr.trajectory(dataclasses.replace(problem, ridge=c), "avgkd",
                                                 6, x_eval))(ridges)
  for i, c in enumerate(ridges):
    one = fedkrr.trajectory(dataclasses.replace(problem, ridge=c), "avgkd", 6, x_eval)
    assert_close(batched[i], one)


def test_limit_vmaps_over_ridge(x64, assert_close):
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.1)
  ridges = jnp.array([1e-2, 1e-1, 1.0])
  batched = jax.vmap(lambda c: fedkrr.limit(dataclasses.replace(problem, ridge=c), "ekd",
                                            x_eval))(ridges)
  for i, c in enumerate(ridges):
    one = fedkrr.limit(dataclasses.replace(problem, ridge=c), "ekd", x_eval)
    assert_close(batched.predictions[i], one.predictions)
    assert_close(batched.spectral_radius[i], one.spectral_radius)
  assert np.all(np.diff(np.asarray(batched.spectral_radius)) < 0)  # more ridge, faster decay


def test_trajectory_vmaps_over_kernel_bandwidth(x64, assert_close):
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(1.0), 1e-2)

  def run(gamma):
    kernels = (fedkrr.RBF(gamma), fedkrr.RBF(2.0 * gamma))
    return fedkrr.trajectory(dataclasses.replace(problem, kernels=kernels), "ekd", 6, x_eval)

  gammas = jnp.array([0.2, 0.5, 1.0])
  batched = jax.vmap(run)(gammas)
  for i, g in enumerate(gammas):
    assert_close(batched[i], run(g))


@pytest.mark.parametrize("protocol", fedkrr.PROTOCOLS)
def test_float32_path_within_documented_tolerance(protocol, x64, assert_close):
  xs, ys, x_eval = _data(2)
  f64 = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.05)
  f32 = fedkrr.make_problem(xs, ys, _kernels(2, False), 0.05, dtype=jnp.float32)
  pred32 = fedkrr.trajectory(f32, protocol, 10, x_eval)
  assert pred32.dtype == jnp.float32
  assert_close(pred32, fedkrr.trajectory(f64, protocol, 10, x_eval), dtype=np.float32)


def test_baselines_match_their_runners(x64, assert_close):
  xs, ys, x_eval = _data(3)
  problem = fedkrr.make_problem(xs, ys, _kernels(3, False), 1e-2)
  learners = fedkrr.krr_learners(problem)
  for closed, runner in [(fedkrr.central, fedkrr.protocols.central_models),
                         (fedkrr.local, fedkrr.protocols.local_models)]:
    models = runner(learners, problem.xs, problem.ys)
    assert_close(closed(problem, x_eval), jnp.stack([m.predict(x_eval) for m in models]))


def test_runner_rejects_bad_arguments():
  xs, ys, _ = _data(2)
  learners = fedkrr.krr_learners(fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1))
  with pytest.raises(ValueError, match="start: expected an agent index in 0..1, got 2"):
    list(fedkrr.protocols.iterate(fedkrr.protocols.akd(start=2), learners, xs, ys, 3))
  with pytest.raises(ValueError, match="rounds: expected an integer >= 1"):
    list(fedkrr.protocols.iterate(fedkrr.protocols.avgkd(), learners, xs, ys, 0))
  with pytest.raises(ValueError, match="learners: expected one learner per agent \\(2\\), got 1"):
    list(fedkrr.protocols.iterate(fedkrr.protocols.avgkd(), learners[:1], xs, ys, 3))
  with pytest.raises(ValueError, match="protocol: expected one of"):
    fedkrr.protocols.get_protocol("fedavg")
  with pytest.raises(ValueError, match="order: expected"):
    fedkrr.protocols.backfit("random")


def test_closed_forms_reject_bad_arguments():
  xs, ys, x_eval = _data(2)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1)
  with pytest.raises(ValueError, match="start: expected an agent index in 0..1, got 2"):
    fedkrr.trajectory(problem, "akd", 3, x_eval, params=fedkrr.ProtocolParams(start=2))
  with pytest.raises(ValueError, match="rounds: expected an integer >= 1, got 0"):
    fedkrr.trajectory(problem, "ekd", 0, x_eval)
  with pytest.raises(ValueError, match="protocol: expected one of akd, avgkd"):
    fedkrr.limit(problem, "fedavg", x_eval)


@pytest.mark.parametrize("m", [3, 4])
def test_cyclic_ekd_for_more_than_two_agents_is_not_the_central_model(m, x64, assert_close):
  """A finding (App. G, eq. 32): with one kernel and c > 0, the cyclic EKD limit couples
  each agent only to its predecessor and misses g*, which Gauss-Seidel backfitting reaches."""
  rng = np.random.default_rng(0)
  xs = [rng.normal(size=(10, 3)) + a for a in range(m)]
  ys = [rng.normal(size=10) for _ in range(m)]
  x_eval = rng.normal(size=(20, 3))
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.05)
  central = fedkrr.central(problem, x_eval)[0]
  ekd = fedkrr.limit(problem, "ekd", x_eval)
  gap = np.max(np.abs(np.asarray(ekd.predictions - central))) / np.max(np.abs(np.asarray(central)))
  print(f"M = {m}: cyclic EKD limit vs central, relative gap {gap:.3f}")
  assert ekd.converges and gap > 0.01  # rounding is ~1e-14; the gap is structural
  assert_close(fedkrr.limit(problem, "backfit-gs", x_eval).predictions, central)


@pytest.mark.parametrize("protocol, every", [("avgkd", 3), ("pkd", 2), ("pkd-mean", 3),
                                             ("ekd", 4), ("akd", 2), ("akd", 4),
                                             ("backfit-gs", 3), ("backfit-jacobi", 5)])
def test_every_kth_round_equals_the_full_trajectory_sliced(protocol, every, assert_close, x64):
  rng = np.random.default_rng(3)
  problem = fedkrr.make_problem([rng.normal(size=(7, 2)), rng.normal(size=(5, 2))],
                                [rng.normal(size=7), rng.normal(size=5)],
                                [fedkrr.RBF(0.7), fedkrr.Laplace(0.4)], 1e-2)
  x = rng.normal(size=(4, 2))
  params = fedkrr.ProtocolParams(start=1)
  full = fedkrr.trajectory(problem, protocol, 11, x, params=params)
  kept = fedkrr.trajectory(problem, protocol, 11, x, params=params, every=every)
  assert kept.shape[0] == -(-11 // every)
  assert_close(kept, full[::every])


@pytest.mark.parametrize("every", [0, 3, 1.5])
def test_bad_every_is_named(every):
  rng = np.random.default_rng(0)
  problem = fedkrr.make_problem([rng.normal(size=(3, 1))] * 2, [rng.normal(size=3)] * 2,
                                fedkrr.RBF(1.0), 0.1)
  with pytest.raises(ValueError, match="every"):
    fedkrr.trajectory(problem, "akd", 5, rng.normal(size=(2, 1)), every=every)


@pytest.mark.parametrize("m, same", [(2, True), (2, False), (3, False)],
                         ids=["two-same-kernel", "two-different-kernels", "three-agents"])
def test_limit_radius_by_arnoldi_equals_the_dense_one(m, same, x64):
  # 300 points (above AUTO_DENSE_MAX): "auto" and "krylov" run Arnoldi on the recurrence
  # matrix; "dense" is the general eigen-solver. The fixed points do not depend on the route.
  # With three agents AKD's and EKD's top eigenvalues are three of one modulus: Arnoldi
  # runs on the cube of the map (spectral_radius's cycle), else "krylov" would be NaN.
  # "auto" is "krylov" with a dense fallback: every protocol in one case (each limit call
  # compiles a program of its own, the suite's cost), AKD and EKD in the others.
  rng = np.random.default_rng(5)
  xs = [rng.normal(size=(300 // m, 3)) + 0.5 * a for a in range(m)]
  ys = [np.sin(x[:, 0]) for x in xs]
  kernels = fedkrr.RBF(0.5) if same else [fedkrr.RBF(0.5), fedkrr.RBF(0.2), fedkrr.RBF(0.8)][:m]
  problem = fedkrr.make_problem(xs, ys, kernels, 1e-2)
  x_eval = rng.normal(size=(4, 3))
  for protocol in fedkrr.PROTOCOLS:
    dense = fedkrr.limit(problem, protocol, x_eval, method="dense")
    for method in ("auto", "krylov") if m == 3 or protocol in ("akd", "ekd") else ("krylov",):
      lim = fedkrr.limit(problem, protocol, x_eval, method=method)
      rho, expected = float(lim.spectral_radius), float(dense.spectral_radius)
      assert abs(rho - expected) < 1e-10 * expected, (protocol, method)
      np.testing.assert_array_equal(np.asarray(lim.predictions), np.asarray(dense.predictions))


def _ill_conditioned(ridge=2.9e-6):
  """Two agents, a linear kernel (rank 2 on 14 points in 2 dimensions) and an RBF: with a
  small c the linear agent's coefficients are of size |y| / c (cond 2.9e5 at 2.9e-6)."""
  data = fedkrr.synthetic_regression(0, sizes=(14, 12), dim=2, n_test=8)
  kernels = [fedkrr.Linear(), fedkrr.RBF(0.1)]
  mp_kernels = [mp_reference.make_kernel("linear"), mp_reference.make_kernel("rbf", gamma=0.1)]
  problem = fedkrr.make_problem(data.xs, data.ys, kernels, ridge)
  cond = max(np.linalg.cond(ridge * np.eye(x.shape[0]) + np.asarray(problem.gram(a, x, x)))
             for a, x in enumerate(problem.xs))
  return problem, data, mp_kernels, cond


def test_closed_form_keeps_the_digits_of_literal_refits_when_ill_conditioned(x64):
  """Against the rounds in 50-digit arithmetic: the closed form within 10x the literal refits'
  error. With explicit transfer blocks S_i K_ij on coefficients it was up to 3,300x
  (Gauss-Seidel backfitting 1.0e-7, literal 3.2e-11; AvgKD 1.7e-9 against 5.7e-12)."""
  problem, data, mp_kernels, cond = _ill_conditioned()
  assert 1e5 < cond < 1e6
  learners = fedkrr.krr_learners(problem)
  for protocol in fedkrr.PROTOCOLS:
    with mpmath.workdps(50):
      truth = mp_reference.to_float(numpy_reference.run(
          protocol, data.xs, data.ys, mp_kernels, float(problem.ridge), 6, data.x_test))
    error = lambda got, truth=truth: float(  # noqa: E731
        np.max(np.abs(np.asarray(got) - truth)) / np.max(np.abs(truth)))
    closed = error(fedkrr.trajectory(problem, protocol, 6, data.x_test))
    literal = error(fedkrr.simulate(protocol, learners, problem.xs, problem.ys, 6, data.x_test))
    assert closed <= 10 * literal, (protocol, closed, literal)


@pytest.mark.parametrize("protocol", ["avgkd", "backfit-gs"])
def test_limits_are_accurate_to_the_conditioning(x64, protocol):
  """The fixed point within 10 eps cond of the 50-digit formula (was 1.2e-9 for AvgKD and
  4.2e-7 for Gauss-Seidel backfitting, 19 and 6,500 eps cond)."""
  problem, data, mp_kernels, cond = _ill_conditioned()
  with mpmath.workdps(50):
    truth = mp_reference.to_float(mp_reference.fixed_point(
        protocol, data.xs, data.ys, mp_kernels, float(problem.ridge), data.x_test))
  got = np.asarray(fedkrr.limit(problem, protocol, data.x_test).predictions)
  error = np.max(np.abs(got - truth)) / np.max(np.abs(truth))
  assert error <= 10 * np.finfo(np.float64).eps * cond, error


@pytest.mark.parametrize("kind", [list, np.asarray, tuple])
def test_weights_as_a_list_or_an_array_work_on_every_path(kind, x64, assert_close):
  """A list of weights was an unhashable static argument in the closed form only."""
  xs, ys, x_eval = _data(3)
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1)
  params = fedkrr.ProtocolParams(weights=kind([0.5, 0.3, 0.2]))
  assert params.weights == (0.5, 0.3, 0.2) and hash(params) == hash(
      fedkrr.ProtocolParams(weights=(0.5, 0.3, 0.2)))
  closed = fedkrr.trajectory(problem, "weighted-avgkd", 3, x_eval, params=params)
  literal = fedkrr.simulate("weighted-avgkd", fedkrr.krr_learners(problem), problem.xs,
                            problem.ys, 3, x_eval, params=params)
  assert_close(closed, literal)
