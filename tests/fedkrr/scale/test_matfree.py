"""The matrix-free path: tiled kernel products, preconditioned CG, literal rounds, the rule."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from fedkrr._src.scale import matfree

RNG = np.random.default_rng(5)
# Every problem below has agents of 16 points, 10 test points, 8 landmarks and tiles of 4
# rows (several tiles even on tiny problems): the compiled programs are shared by the tests.
TILE = 64
LANDMARKS = 8


def _problem(outputs=0, agents=3, ridge=1e-2):
  data = fedkrr.synthetic_regression(3, sizes=(16,) * agents, dim=2, outputs=outputs, n_test=10)
  kernels = [fedkrr.RBF(0.5), fedkrr.Laplace(0.7), fedkrr.RBF(1.3)][:agents]
  return fedkrr.make_problem(data.xs, data.ys, kernels, ridge), data.x_test


@pytest.mark.parametrize("kernel, shape", [(fedkrr.RBF(0.4), ()), (fedkrr.Laplace(0.9), (3,))])
def test_kernel_matvec_equals_dense_product(kernel, shape, x64, assert_close):
  # 13 rows in tiles of 3 (the last one padded): the same as the stored block times v.
  x1, x2 = RNG.normal(size=(13, 4)), RNG.normal(size=(9, 4))
  v = RNG.normal(size=(9,) + shape)
  got = fedkrr.scale.kernel_matvec(kernel, x1, x2, v, tile_elements=27)
  assert_close(got, kernel(jnp.asarray(x1), jnp.asarray(x2)) @ v)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exp_nonpositive_matches_numpy_to_rounding(dtype, x64):
  # The matrix-free tiles' exponential: a few units in the last place against NumPy's
  # (computed in float64), over the range of kernel arguments; 0 below the smallest
  # normal number's logarithm, where the exact value is below it.
  x = np.concatenate([-np.abs(RNG.normal(size=20000)), -RNG.uniform(0, 800, 20000),
                      [0.0, -0.0, -1e-300, -87.3, -87.4, -708.3, -708.4]]).astype(dtype)
  got = np.asarray(matfree.exp_nonpositive(jnp.asarray(x)))
  assert got.dtype == dtype
  got, exact = got.astype(np.float64), np.exp(x.astype(np.float64))
  tiny = float(np.finfo(dtype).tiny)
  normal = exact >= 1.01 * tiny
  assert np.max(np.abs(got[normal] - exact[normal]) / exact[normal]) <= 2 * np.finfo(dtype).eps
  assert np.all((got[~normal] >= 0) & (got[~normal] <= 1.01 * tiny))
  assert float(matfree.exp_nonpositive(jnp.asarray(0.0, dtype))) == 1.0
  # The underflow range is zeroed by a select, not a clamp: -inf and the most negative
  # numbers give 0, NaN stays NaN.
  edge = jnp.asarray([-np.inf, np.finfo(dtype).min, np.nan], dtype)
  got = np.asarray(matfree.exp_nonpositive(edge))
  assert got[0] == 0.0 and got[1] == 0.0 and np.isnan(got[2])


# RBF and Laplace with direct differences (d <= DIRECT_MAX_DIM) and with the matrix product
# form (d = 20), a kernel of its own (Linear); n = 1 (one tile), odd and even tile counts,
# rows capped at n / 32 (100 points: 3 rows, 34 tiles) or not (101 points: 2 rows, 51
# tiles), the last tile padded in both.
SYMMETRIC_CASES = [(fedkrr.RBF(0.4), 1, 3, 4), (fedkrr.RBF(0.4), 13, 4, 27),
                   (fedkrr.Laplace(0.9), 12, 3, 16), (fedkrr.RBF(0.05), 11, 20, 10),
                   (fedkrr.Linear(), 9, 2, 1000), (fedkrr.Laplace(0.9), 2, 3, 1),
                   (fedkrr.RBF(0.3), 100, 3, 10_000), (fedkrr.RBF(0.3), 101, 3, 101)]


def test_symmetric_rows_keep_the_band_near_half_the_kernel():
  # Tiles of about tile_elements entries, but at least 32 of them where there are as many
  # points: the band's extra entries (about n r / 2) stay near a 32nd of half the kernel.
  for n, tile in [(1, 4), (9, 1000), (100, 10_000), (101, 101), (5_000, 1 << 20),
                  (50_000, 1 << 20), (50_000, 1 << 18)]:
    rows = matfree.symmetric_rows(n, tile)
    assert 1 <= rows <= max(1, 2 * tile // n)
    assert -(-n // rows) >= min(n, matfree.SYMMETRIC_MIN_TILES)
  assert matfree.symmetric_rows(100, 10_000) == 3      # capped: 100 // 32
  assert matfree.symmetric_rows(5_000, 1 << 20) == 156
  assert matfree.symmetric_rows(50_000, 1 << 20) == 41   # not capped: 2 * 2^20 // 50,000


@pytest.mark.parametrize("kernel, n, dim, tile", SYMMETRIC_CASES)
def test_symmetric_matvec_equals_dense_product(kernel, n, dim, tile, x64, assert_close):
  x = RNG.normal(size=(n, dim))
  gram = np.asarray(kernel(jnp.asarray(x), jnp.asarray(x)))
  for v in (RNG.normal(size=n), RNG.normal(size=(n, 3))):
    assert_close(fedkrr.scale.symmetric_matvec(kernel, x, v, tile_elements=tile), gram @ v)
    assert_close(fedkrr.scale.kernel_matvec(kernel, x, x, v, tile_elements=tile), gram @ v)


# Points on a line: the RBF Gram matrix's eigenvalues decay fast, so a few landmarks
# capture the directions that make c I + K ill-conditioned for a small ridge c.
X40, T40 = RNG.normal(size=(40, 1)), RNG.normal(size=(40, 2))
KERNEL, N_TOTAL = fedkrr.RBF(0.3), 60.0


def _system():
  """c I + K / N for X40 and c = 1e-3, dense."""
  return 1e-3 * np.eye(40) + np.asarray(KERNEL(jnp.asarray(X40), jnp.asarray(X40))) / N_TOTAL


def test_ridge_solve_equals_dense_solve(x64, assert_close):
  system = _system()
  pre = fedkrr.scale.nystrom_preconditioner(KERNEL, X40, 1e-3, N_TOTAL, landmarks=10)
  for rhs in (T40, T40[:, 0]):   # columns solved independently, and a single vector
    sol = fedkrr.scale.ridge_solve(KERNEL, X40, rhs, 1e-3, N_TOTAL, pre, tol=1e-12)
    assert bool(sol.converged) and float(sol.residual) <= 1e-12
    assert_close(sol.alpha, np.linalg.solve(system, rhs), rtol=1e-8)


def test_nystrom_preconditioner_is_spd_and_cuts_iterations(x64):
  t, ridge = T40[:, 0], 1e-5   # a small ridge: plain CG needs many steps
  pre = fedkrr.scale.nystrom_preconditioner(KERNEL, X40, ridge, N_TOTAL, landmarks=10)
  inverse = np.asarray(pre.apply(jnp.eye(40)))
  assert np.allclose(inverse, inverse.T, atol=1e-12)
  assert np.linalg.eigvalsh(inverse).min() > 0     # P^{-1} is positive definite
  # tol 1e-10: at 1e-12 plain CG's true residual stops at 1.7e-12 (rounding).
  plain = fedkrr.scale.ridge_solve(KERNEL, X40, t, ridge, N_TOTAL, None, tol=1e-10)
  with_pre = fedkrr.scale.ridge_solve(KERNEL, X40, t, ridge, N_TOTAL, pre, tol=1e-10)
  assert bool(plain.converged) and bool(with_pre.converged)
  assert int(with_pre.iterations) < int(plain.iterations) / 2
  # With every point a landmark the approximation is K itself: P^{-1} (c I + K) is
  # (lam_r + c) I, and conjugate gradients stop after one step (two for rounding).
  full = fedkrr.scale.nystrom_preconditioner(KERNEL, X40, ridge, N_TOTAL, landmarks=40)
  assert int(fedkrr.scale.ridge_solve(KERNEL, X40, t, ridge, N_TOTAL, full,
                                     tol=1e-8).iterations) <= 2


def test_ridge_solve_starts_from_a_scaled_guess(x64, assert_close):
  pre = fedkrr.scale.nystrom_preconditioner(KERNEL, X40, 1e-3, N_TOTAL, landmarks=10)
  cold = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12)
  # From the solution itself: no iteration. From the solution times -3 (a bad guess whose
  # best scale is -1/3): the same. From the solution plus noise: fewer iterations than from 0.
  for guess, most in ((cold.alpha, 0), (-3.0 * cold.alpha, 0),
                      (cold.alpha + 1e-4 * RNG.normal(size=T40.shape), int(cold.iterations) - 1)):
    warm = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12, initial=guess)
    assert bool(warm.converged) and int(warm.iterations) <= most
    assert_close(warm.alpha, cold.alpha, rtol=1e-8)
  with pytest.raises(ValueError, match="initial"):
    fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, initial=cold.alpha[:, 0])


def test_a_start_from_several_guesses_is_their_best_combination_in_the_norm_of_a(x64,
                                                                                  assert_close):
  # The start minimises |x0 - x*|_A over the guesses' span, per column: NumPy's Galerkin
  # projection G (G^T A G)^-1 G^T t. A zero guess and a repeated one add nothing.
  a = _system()
  g = RNG.normal(size=(3, 40, 2))
  guesses = np.concatenate([g[:1], np.zeros((1, 40, 2)), g[1:], g[:1] * 2.0])
  products = np.einsum("ij,hjc->hic", a, guesses)
  x0, ax0, trusted = matfree._start(jnp.asarray(guesses), jnp.asarray(products),
                                    jnp.asarray(T40), 1e-10)
  for c in range(2):
    basis = g[:, :, c].T
    coef = np.linalg.solve(basis.T @ a @ basis, basis.T @ T40[:, c])
    assert_close(x0[:, c], basis @ coef, rtol=1e-9)
  assert_close(ax0, a @ np.asarray(x0), rtol=1e-9)
  assert not bool(trusted)       # several guesses kept: the solve checks the true residual
  one = matfree._start(jnp.asarray(g[:1]), jnp.asarray(products[:1]), jnp.asarray(T40), 1e-10)
  assert bool(one[2])


def test_ridge_solve_counts_its_products_and_starts_free_from_given_ones(x64, assert_close):
  pre = fedkrr.scale.nystrom_preconditioner(KERNEL, X40, 1e-3, N_TOTAL, landmarks=10)
  cold = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12)
  # matvecs: the iterations and at least one true residual; product: (c I + K / N) alpha.
  assert int(cold.matvecs) >= int(cold.iterations) + 1
  assert_close(cold.product, _system() @ np.asarray(cold.alpha), rtol=1e-10)
  # Started from the solution with its product: nothing to compute. Without the product:
  # one product for the start. From the solution and another guess: one true residual.
  free = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12,
                                  initial=cold.alpha, initial_products=cold.product)
  paid = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12,
                                  initial=cold.alpha)
  other = RNG.normal(size=T40.shape)
  two = fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, tol=1e-12,
                                 initial=np.stack([cold.alpha, other]),
                                 initial_products=np.stack([cold.product, _system() @ other]))
  assert [int(s.matvecs) for s in (free, paid, two)] == [0, 1, 1]
  for sol in (free, paid, two):
    assert bool(sol.converged) and int(sol.iterations) == 0
    assert_close(sol.alpha, cold.alpha, rtol=1e-8)
  with pytest.raises(ValueError, match="initial_products"):
    fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, initial=cold.alpha,
                             initial_products=cold.product[:, 0])
  with pytest.raises(ValueError, match="initial_products"):
    fedkrr.scale.ridge_solve(KERNEL, X40, T40, 1e-3, N_TOTAL, pre, initial_products=cold.product)


def test_warm_starts_keep_the_agents_latest_solutions_with_their_products(x64):
  problem, _ = _problem(agents=2)
  learner = fedkrr.scale.matfree_learners(problem, landmarks=4, tile_elements=TILE, history=3)[0]
  x, models = problem.xs[0], []
  for k in range(4):
    model = learner.fit(x, problem.ys[0] * (1.0 + 0.1 * k))
    models.append(model)
    learner = learner.warm_start_from(model)
    kept = models[::-1][:3]
    assert learner.initial.shape == (3,) + model.alpha.shape   # zero-padded to history
    for got, want in zip(learner.initial, kept):
      np.testing.assert_array_equal(got, want.alpha)
    for got, want in zip(learner.initial_products, kept):
      np.testing.assert_array_equal(got, want.product)
    assert not np.any(learner.initial[len(kept):])
  assert int(models[0].matvecs) > 0
  # Other points of the same size: the newest guess alone, its product formed again
  # (one more product than its iterations and true residuals).
  moved = learner.fit(x * 1.5, problem.ys[0])
  assert int(moved.matvecs) >= int(moved.iterations) + 2
  with pytest.raises(ValueError, match="history"):
    fedkrr.scale.matfree_learners(problem, history=0)


class _Cold:
  """A matrix-free learner without its warm start (fedkrr.protocols.iterate finds no
  warm_start_from)."""

  def __init__(self, learner):
    self.learner = learner

  def fit(self, x, targets):
    return self.learner.fit(x, targets)


def test_rounds_warm_start_each_agents_solve(x64, assert_close):
  # fedkrr.protocols.iterate hands each matrix-free learner the model it fitted last: the same
  # rounds up to the CG tolerance, in fewer iterations once the targets settle.
  problem, _ = _problem(agents=2)
  learners = fedkrr.scale.matfree_learners(problem, landmarks=4, tile_elements=TILE)
  runs = {}
  for name, group in (("warm", learners), ("cold", [_Cold(learner) for learner in learners])):
    outs = [out for _, out in fedkrr.protocols.iterate(fedkrr.protocols.avgkd(), group, problem.xs,
                                                       problem.ys, 12)]
    runs[name] = ([int(m.iterations) for out in outs for m in out.models],
                  np.stack([m.alpha for m in outs[-1].models]))
  assert sum(runs["warm"][0][:2]) == sum(runs["cold"][0][:2])   # round 0 starts from 0
  assert sum(runs["warm"][0]) < sum(runs["cold"][0])
  assert_close(runs["warm"][1], runs["cold"][1], rtol=1e-7)
  other = learners[0].warm_start_from(fedkrr.learners.KRRModel(KERNEL, X40, T40[:, 0], N_TOTAL))
  assert other is learners[0]        # a model of another kind leaves the learner as it was


def test_ridge_solve_reports_the_true_residual_up_to_condition_1e8(x64):
  """``converged`` only when the true residual, measured here in extended precision, is
  below the tolerance. Before, CG's recursive residual was reported: at condition 5.5e7
  it read 3e-13 and claimed convergence while the true residual was 2.3e-10; 12 of the
  12 cases below with tol 1e-12 or c <= 1e-8 were claimed converged wrongly."""
  rng = np.random.default_rng(1)
  x, n = rng.normal(size=(300, 1)), 300.0
  t = np.sin(x) + 0.1 * rng.normal(size=(300, 2))
  kernel = fedkrr.RBF(1.0)
  gram = np.asarray(kernel(jnp.asarray(x), jnp.asarray(x))) / n
  conds, outcomes = [], []
  for ridge in (1e-6, 1e-8, 1e-9):
    system = (ridge * np.eye(300) + gram).astype(np.longdouble)
    w = np.linalg.eigvalsh(ridge * np.eye(300) + gram)
    conds.append(w[-1] / w[0])
    for landmarks in (0, 40):
      pre = (fedkrr.scale.nystrom_preconditioner(kernel, x, ridge, n, landmarks) if landmarks
             else None)
      for tol in (1e-10, 1e-12):
        sol = fedkrr.scale.ridge_solve(kernel, x, t, ridge, n, pre, tol=tol, maxiter=3000)
        alpha = np.asarray(sol.alpha).astype(np.longdouble)
        true = float(np.max(np.linalg.norm(t - system @ alpha, axis=0)
                            / np.linalg.norm(t, axis=0)))
        assert not bool(sol.converged) or true <= tol, (ridge, landmarks, tol, true)
        assert float(sol.residual) >= 0.5 * true   # the report does not understate it
        outcomes.append(bool(sol.converged))
  assert max(conds) > 1e8 and any(outcomes) and not all(outcomes)


def test_learner_says_when_rounding_keeps_the_residual_above_tol(x64):
  rng = np.random.default_rng(1)
  x = rng.normal(size=(300, 1))
  learner = fedkrr.scale.MatfreeKRRLearner(fedkrr.RBF(1.0), jnp.asarray(1e-8), jnp.asarray(300.0),
                                           tol=1e-12, maxiter=3000, landmarks=40)
  with pytest.raises(fedkrr.scale.ConvergenceError, match="too ill-conditioned for this tol"):
    learner.fit(x, np.sin(x[:, 0]) + 0.1 * rng.normal(size=300))


@pytest.mark.parametrize("protocol", fedkrr.PROTOCOLS)
def test_matfree_trajectory_equals_exact_rounds(protocol, x64, assert_close):
  # Three agents with different kernels, matrix labels: matrix-free rounds vs the exact
  # learners' rounds (which equal fedkrr.trajectory: test_closed_form.py; compared
  # directly in test_auto_follows_the_memory_rule), equal up to the CG
  # tolerance (1e-10 on the residual).
  problem, x_test = _problem(outputs=2)
  exact = fedkrr.simulate(protocol, fedkrr.krr_learners(problem), problem.xs, problem.ys, 5,
                          x_test, params=fedkrr.ProtocolParams(start=1))
  ours = fedkrr.scale.matfree_trajectory(problem, protocol, 5, x_test,
                                         params=fedkrr.ProtocolParams(start=1),
                                         landmarks=LANDMARKS, tile_elements=TILE)
  assert_close(ours, exact, rtol=1e-8)


def test_matfree_learner_is_a_learner(x64, assert_close):
  # The pooled data of the centralised baseline has another size than the agent's
  # preconditioner: the fit builds its own and gives the exact learner's model.
  problem, x_test = _problem()
  learners = fedkrr.scale.matfree_learners(problem, landmarks=LANDMARKS, tile_elements=TILE)
  ours = fedkrr.protocols.central_models(learners, problem.xs, problem.ys)
  exact = fedkrr.protocols.central_models(fedkrr.krr_learners(problem), problem.xs, problem.ys)
  for mine, theirs in zip(ours, exact):
    assert_close(mine.predict(x_test), theirs.predict(x_test), rtol=1e-8)


def test_auto_follows_the_memory_rule(x64, assert_close):
  problem, x_test = _problem(outputs=2)
  itemsize = jnp.dtype(problem.ridge.dtype).itemsize
  need = fedkrr.scale.exact_bytes("avgkd", problem.sizes, 2, 10, 4, itemsize)
  assert fedkrr.scale.choose_method(problem, "avgkd", 4, 10, available=2 * need) == "closed-form"
  assert fedkrr.scale.choose_method(problem, "avgkd", 4, 10, available=2 * need - 1) == "matfree"
  assert fedkrr.scale.choose_method(problem, "avgkd", 4, 10, available=0,
                                   limit=True) == "closed-form"
  zero = dataclasses.replace(problem, ridge=jnp.asarray(0.0))
  # CG: c > 0
  assert fedkrr.scale.choose_method(zero, "avgkd", 4, 10, available=0) == "closed-form"
  # 48 points fit this machine: "auto" is the closed form; the matrix-free path equals it.
  ours = fedkrr.run(problem, "avgkd", 5, x_test, method="matfree", landmarks=LANDMARKS,
                    tile_elements=TILE)
  auto = fedkrr.run(problem, "avgkd", 5, x_test)
  assert (ours.method, auto.method) == ("matfree", "closed-form")
  assert_close(ours.predictions, auto.predictions, rtol=1e-8)


def test_exact_bytes_grows_as_n_squared():
  small = fedkrr.scale.exact_bytes("avgkd", (1000, 1000), 1, 0, 1, 8)
  large = fedkrr.scale.exact_bytes("avgkd", (2000, 2000), 1, 0, 1, 8)
  assert 3.9 < large / small <= 4.0
  gs = fedkrr.scale.exact_bytes("backfit-gs", (1000, 1000), 1, 0, 1, 8)
  assert gs - small >= 4 * 2000 ** 2 * 8   # plus the whole N x N recurrence matrices


def test_bad_input_is_refused(x64):
  problem, x_test = _problem()
  zero = dataclasses.replace(problem, ridge=jnp.asarray(0.0))
  with pytest.raises(fedkrr.ProblemError, match="ridge"):
    fedkrr.scale.matfree_trajectory(zero, "avgkd", 2, x_test)
  with pytest.raises(ValueError, match="landmarks"):
    fedkrr.scale.matfree_learners(problem, landmarks=-1)
  with pytest.raises(ValueError, match="protocol"):
    fedkrr.scale.matfree_trajectory(problem, "fedavg", 2, x_test)
  with pytest.raises(fedkrr.ProblemError, match="x_eval"):
    fedkrr.scale.matfree_trajectory(problem, "avgkd", 2, x_test[:, :1])
  with pytest.raises(ValueError, match="method"):
    fedkrr.run(problem, "avgkd", 2, x_test, method="dense")
  with pytest.raises(ValueError, match="matfree_options: unknown landmark"):
    fedkrr.run(problem, "avgkd", 2, x_test, method="matfree", landmark=4)
  with pytest.raises(ValueError, match="v: expected"):
    fedkrr.scale.kernel_matvec(fedkrr.RBF(1.0), x_test, x_test, jnp.ones(3))
  x = problem.xs[0]
  pre = fedkrr.scale.nystrom_preconditioner(fedkrr.RBF(1.0), x[:8], 1e-2, 32.0, landmarks=4)
  with pytest.raises(ValueError, match="preconditioner"):
    fedkrr.scale.ridge_solve(fedkrr.RBF(1.0), x, problem.ys[0], 1e-2, 32.0, pre)
  with pytest.raises(ValueError, match="maxiter"):
    fedkrr.scale.ridge_solve(fedkrr.RBF(1.0), x, problem.ys[0], 1e-2, 32.0, maxiter=0)
  learner = fedkrr.scale.MatfreeKRRLearner(fedkrr.RBF(1.0), jnp.asarray(1e-6), jnp.asarray(32.0),
                                           tol=1e-14, maxiter=1, landmarks=0)
  with pytest.raises(fedkrr.scale.ConvergenceError, match="maxiter"):
    learner.fit(x, problem.ys[0])


def test_float32_matches_float64_closed_form():
  # float32 (a GPU's dtype): default tolerance 1e-5 on the residual.
  data = fedkrr.synthetic_regression(3, sizes=(16, 16), dim=2, n_test=10)
  kernels = [fedkrr.RBF(0.5), fedkrr.RBF(1.3)]
  p32 = fedkrr.make_problem(data.xs, data.ys, kernels, 1e-1, dtype=jnp.float32)
  ours = fedkrr.scale.matfree_trajectory(p32, "avgkd", 4, data.x_test, landmarks=LANDMARKS,
                                         tile_elements=TILE)
  assert ours.dtype == jnp.float32
  if jax.config.read("jax_enable_x64"):
    p64 = fedkrr.make_problem(data.xs, data.ys, kernels, 1e-1, dtype=jnp.float64)
    exact = np.asarray(fedkrr.trajectory(p64, "avgkd", 4, data.x_test))
    assert np.max(np.abs(np.asarray(ours) - exact)) / np.max(np.abs(exact)) < 1e-3


def _dot_precisions(jaxpr):
  """The precision of every dot_general in a jaxpr, sub-jaxprs (maps, loops) included."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      yield eqn.params["precision"]
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from _dot_precisions(inner)


@pytest.mark.parametrize("what", ["linear", "polynomial", "rbf-d20", "relu-ntk", "kernel_matvec",
                                  "symmetric_matvec", "nystrom", "ridge_solve"])
def test_every_matrix_product_runs_at_full_precision(what):
  """On GPUs with tensor cores JAX's default float32 precision is TF32 (about 1e-3): the
  kernels' inner products and CG's products must ask for HIGHEST (on a CPU the bits are
  the same either way, so the program is what can be checked here)."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(12, 20)), jnp.float32)
  v = jnp.asarray(rng.normal(size=12), jnp.float32)
  rbf = fedkrr.RBF(0.1)
  fn = {"linear": lambda: fedkrr.Linear()(x, x),
        "polynomial": lambda: fedkrr.Polynomial(2, 0.5, 1.0)(x, x),
        "rbf-d20": lambda: rbf(x, x),
        "relu-ntk": lambda: fedkrr.ReluNTK(depth=2)(x, x),
        "kernel_matvec": lambda: fedkrr.scale.kernel_matvec(rbf, x, x, v, tile_elements=48),
        "symmetric_matvec": lambda: fedkrr.scale.symmetric_matvec(rbf, x, v, tile_elements=48),
        "nystrom": lambda: fedkrr.scale.nystrom_preconditioner(rbf, x, 1e-2, 12.0, 4).apply(v),
        "ridge_solve": lambda: fedkrr.scale.ridge_solve(rbf, x, v, 1e-2, 12.0,
                                                        tile_elements=48).alpha,
        }[what]
  precisions = list(_dot_precisions(jax.make_jaxpr(fn)().jaxpr))
  assert precisions, "no matrix product found"
  highest = jax.lax.Precision.HIGHEST
  assert all(p == (highest, highest) for p in precisions), precisions
