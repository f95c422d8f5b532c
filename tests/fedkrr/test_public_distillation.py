"""Distillation through a public reference set: closed forms vs the literal runner and NumPy.

jit compiles once per shape and kernel structure, so the tests share one problem
(three agents with RBF kernels of different bandwidths: the same PyTree structure,
hence one compilation of each agent's fit) and use reference sets and evaluation
points of N = 18 points each, so that Z = the pooled inputs has the same shapes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import numpy_reference as ref  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr
from fedkrr import ProblemError

SIZES = (6, 6, 6)  # equal sizes: one compilation of the literal runner's fits per shape
GAMMAS = (0.5, 1.0, 0.3)
RIDGE = 1e-2
WEIGHT = 0.8
ROUNDS = 5
N = sum(SIZES)   # the size of every reference set and evaluation set below
# A directed cycle with self-loops: doubly stochastic, not symmetric, so W and W^T differ.
RING = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])


def _target(x):
  return np.stack([np.sin(x[:, 0]) + 0.5 * x[:, 1], np.cos(x[:, 1]) - 0.3 * x[:, 2]], axis=1)


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  xs = [rng.normal(size=(n, 3)) + 0.8 * a for a, n in enumerate(SIZES)]
  ys = [_target(x) + 0.1 * rng.normal(size=(len(x), 2)) for x in xs]   # matrix labels (N_a, 2)
  reference = rng.normal(size=(N, 3)) + 0.8
  x_eval = rng.normal(size=(N, 3)) + 0.8
  kernels = [fedkrr.RBF(g) for g in GAMMAS]
  problem = fedkrr.make_problem(xs, ys, kernels, RIDGE)
  return problem, reference, x_eval


@pytest.fixture(scope="module")
def long_run(data):
  problem, reference, x_eval = data
  return {key: fedkrr.public.public_distillation_trajectory(problem, reference, 300, x_eval,
                                                            WEIGHT, w)
          for key, w in (("average", None), ("ring", RING))}


def _eps(problem):
  return float(jnp.finfo(problem.ridge.dtype).eps)


def _mixing(key):
  return None if key == "average" else RING


@pytest.mark.parametrize("key", ["average", "ring"])
def test_closed_form_equals_literal_runner_round_by_round(data, long_run, key, assert_close):
  problem, reference, x_eval = data
  literal = fedkrr.public.public_distillation_simulate(problem, reference, ROUNDS, x_eval, WEIGHT,
                                                       _mixing(key))
  exact = long_run[key][:ROUNDS]
  assert exact.dtype == problem.ridge.dtype and exact.shape == (ROUNDS, 3, N, 2)
  assert_close(exact, literal, dtype=problem.ridge.dtype)
  assert np.max(np.abs(np.asarray(exact[1] - exact[0]))) > 1e-2  # distillation moves the models


@pytest.mark.parametrize("key", ["average", "ring"])
def test_closed_form_equals_numpy_reference(data, long_run, key, x64, assert_close):
  problem, reference, x_eval = data
  expected = ref.public_distillation(
      [np.asarray(x) for x in problem.xs], [np.asarray(y) for y in problem.ys],
      [ref.make_kernel("rbf", gamma=g) for g in GAMMAS], RIDGE, reference, WEIGHT, ROUNDS,
      x_eval, _mixing(key))
  assert_close(long_run[key][:ROUNDS], expected)


def test_the_mixing_matrix_is_read_by_columns(data, long_run, x64):
  """Agent a averages sum_b W[b, a] g_b (neural's graphs, Bistritz et al. eq. 6), not W^T."""
  problem, reference, x_eval = data
  transposed = fedkrr.public.public_distillation_trajectory(problem, reference, ROUNDS, x_eval,
                                                            WEIGHT, RING.T)
  assert np.max(np.abs(np.asarray(transposed[2] - long_run["ring"][2]))) > 1e-4


def test_fixed_point_is_d_distillations_only_for_full_averaging(data, assert_close):
  """D-Distillation's stationary points (z at consensus, z = mean_b g_b(Z)) solve
  v_a = b_a + H_a mean_b v_b, whatever W: the twin's fixed point with W = 11^T/M does,
  the ring's does not (it depends on W)."""
  problem, reference, _ = data
  d_dist = fedkrr.public.public_distillation(problem, reference, WEIGHT)   # v -> b + H mean(v)
  full = fedkrr.public.public_distillation_limit(problem, reference, reference, WEIGHT).predictions
  ring = fedkrr.public.public_distillation_limit(problem, reference, reference, WEIGHT,
                                                 RING).predictions
  assert_close(d_dist.step(full), full, dtype=problem.ridge.dtype)
  residual = float(jnp.max(jnp.abs(d_dist.step(ring) - ring)))
  gap = float(jnp.max(jnp.abs(ring - full)))
  scale = float(jnp.max(jnp.abs(full)))
  assert min(residual, gap) > 1e4 * _eps(problem) * scale   # far above rounding
  print(f"ring vs full averaging: fixed points differ by {gap:.3g} (predictions up to "
        f"{scale:.3g}); the ring's is off D-Distillation's stationary set by {residual:.3g}")


def test_round_in_one_shot_equals_the_iteration(data, long_run, assert_close):
  problem, reference, x_eval = data
  rounds = [0, 1, 2, 4, 37, 299]
  one_shot = jnp.stack([fedkrr.public.public_distillation_round(problem, reference, t, x_eval,
                                                                WEIGHT)
                        for t in rounds])
  # float32: 299 rounds of rounding against log2(299) squarings; the error does not grow.
  assert_close(one_shot, long_run["average"][np.asarray(rounds)], dtype=problem.ridge.dtype)
  assert_close(fedkrr.public.public_distillation_round(problem, reference, 4, x_eval, WEIGHT, RING),
               long_run["ring"][4], dtype=problem.ridge.dtype)


@pytest.mark.parametrize("key", ["average", "ring"])
def test_limit_is_reached_by_iteration_and_contracts(data, long_run, key, assert_close):
  problem, reference, x_eval = data
  lim = fedkrr.public.public_distillation_limit(problem, reference, x_eval, WEIGHT, _mixing(key))
  # c > 0: each H_a is symmetric PSD with ||H_a|| < 1 and ||W||_2 <= 1, so rho(A) <= max ||H_a||.
  rec = fedkrr.public.public_distillation(problem, reference, WEIGHT, _mixing(key))
  h = np.asarray(rec.transfer, np.float64)
  assert np.allclose(h, np.swapaxes(h, 1, 2), atol=10 * _eps(problem))
  bound = max(np.max(np.abs(np.linalg.eigvalsh(0.5 * (m + m.T)))) for m in h)
  assert lim.converges and float(lim.spectral_radius) <= bound + 10 * _eps(problem) < 1
  print(f"{key}: rho(A) = {float(lim.spectral_radius):.4f} <= max ||H_a|| = {bound:.4f}")
  assert_close(long_run[key][-1], lim.predictions, dtype=problem.ridge.dtype)
  v = rec.step(rec.step(rec.initial))
  flat = (np.asarray(rec.matrix()) @ np.asarray(v).reshape(-1, 2)
          + np.asarray(rec.offset).reshape(-1, 2))
  assert_close(flat, np.asarray(rec.step(v)).reshape(-1, 2), dtype=problem.ridge.dtype)


def test_zero_weight_gives_the_local_fits(data, assert_close):
  problem, reference, x_eval = data
  local = fedkrr.local(problem, x_eval)
  rounds = fedkrr.public.public_distillation_trajectory(problem, reference, ROUNDS, x_eval, 0.0,
                                                        RING)
  assert_close(rounds, jnp.broadcast_to(local, rounds.shape), dtype=problem.ridge.dtype)
  literal = fedkrr.public.public_distillation_simulate(problem, reference, 2, x_eval, 0.0)
  assert_close(literal[1], local, dtype=problem.ridge.dtype)


def test_unit_weight_is_a_plain_krr_fit_on_the_stacked_data(data, assert_close):
  """lambda = 1: agent a's round-1 model is fedkrr.KRRLearner on [X_a; Z] (N unchanged)."""
  problem, reference, x_eval = data
  z = jnp.asarray(reference, problem.ridge.dtype)
  consensus = jnp.mean(fedkrr.local(problem, z), axis=0)   # the local fits' average on Z
  learner = fedkrr.krr_learners(problem)[0]
  model = learner.fit(jnp.concatenate([problem.xs[0], z]),
                      jnp.concatenate([problem.ys[0], consensus]))
  assert_close(fedkrr.public.public_distillation_round(problem, reference, 1, x_eval, 1.0)[0],
               model.predict(x_eval), dtype=problem.ridge.dtype)


@pytest.fixture(scope="module")
def pooled(data):
  """One shared kernel and Z = X, all the pooled private inputs."""
  problem, _, x_eval = data
  shared = dataclasses.replace(problem, kernels=(fedkrr.RBF(0.5),) * 3)
  return shared, shared.pooled_x(), x_eval


def _shared_gram(x1, x2):
  return np.asarray(ref.make_kernel("rbf", gamma=0.5)(np.asarray(x1), np.asarray(x2))) / N


@pytest.mark.parametrize("weight", [0.5, 3.0])
def test_full_coverage_without_ridge_reaches_the_central_interpolant(pooled, weight, x64,
                                                                     assert_close):
  """c = 0, Z = X pooled, one kernel: H_a = diag(lambda/(1+lambda) on X_a, 1 elsewhere), so
  the averaged consensus contracts by 1 - 1/(M (1 + lambda)) and every agent's fixed
  point interpolates all the labels: the centralised model at every x."""
  shared, x_all, x_eval = pooled
  problem = dataclasses.replace(shared, ridge=jnp.asarray(0.0, shared.ridge.dtype))
  lim = fedkrr.public.public_distillation_limit(problem, x_all, x_eval, weight)
  m = problem.num_agents
  assert_close(lim.spectral_radius, 1 - 1 / (m * (1 + weight)), rtol=1e-9)
  y = np.asarray(problem.pooled_y())
  central = _shared_gram(x_eval, x_all) @ np.linalg.solve(_shared_gram(x_all, x_all), y)
  # Every agent equals it; c = 0 takes a pseudo-inverse of an RBF Gram matrix.
  assert_close(lim.predictions, np.broadcast_to(central, lim.predictions.shape), rtol=1e-7)
  on_x = fedkrr.public.public_distillation_limit(problem, x_all, x_all, weight).predictions
  assert_close(on_x, np.broadcast_to(y, on_x.shape), rtol=1e-7)


def test_full_coverage_with_ridge_tends_to_the_central_model_with_ridge_m_c(pooled, x64,
                                                                           assert_close):
  """c > 0, one kernel, any Z: the consensus terms cancel in the sum of the agents'
  stationarity conditions, c sum_a g_a(x) = (1/N) sum_i k(x, x_i) (y_i - g_{a(i)}(x_i)).
  With Z = X and lambda -> infinity the agents agree, so this is the centralised fit
  with ridge M c (not c): the ridge is paid once per agent."""
  shared, x_all, x_eval = pooled
  m, c = shared.num_agents, 0.05
  problem = dataclasses.replace(shared, ridge=jnp.asarray(c, shared.ridge.dtype))
  y = np.asarray(problem.pooled_y())
  gram = _shared_gram(x_eval, x_all)
  central_mc = gram @ np.linalg.solve(_shared_gram(x_all, x_all) + m * c * np.eye(N), y)
  gaps = []
  for weight in (1.0, 10.0, 1e4):
    g = np.asarray(fedkrr.public.public_distillation_limit(problem, x_all, x_eval,
                                                           weight).predictions)
    on_x = np.asarray(fedkrr.public.public_distillation_limit(problem, x_all, x_all,
                                                              weight).predictions)
    own = np.concatenate([on_x[a, o:o + s] for a, (o, s) in
                          enumerate(zip(problem.offsets, problem.sizes))])
    assert_close(c * g.sum(axis=0), gram @ (y - own), rtol=1e-9)
    gaps.append(np.max(np.abs(g - central_mc[None])) / np.max(np.abs(central_mc)))
  assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3, gaps
  central_c = gram @ np.linalg.solve(_shared_gram(x_all, x_all) + c * np.eye(N), y)
  assert np.max(np.abs(central_c - central_mc)) > 100 * gaps[2] * np.max(np.abs(central_mc))


def test_coverage_sweep_far_reference_changes_nothing_covering_one_helps(data, tmp_path):
  problem, reference, x_eval = data
  rng = np.random.default_rng(1)
  references = [np.asarray(reference) + 30.0,                     # beyond every kernel's reach
                rng.normal(size=(N, 3)),                          # around agent 0's inputs
                np.asarray(problem.pooled_x())]                   # every agent's inputs
  y_test = _target(np.asarray(x_eval))
  sweep = fedkrr.public.coverage_sweep(problem, references, x_eval, y_test, 5.0)
  assert sweep.test_mse.shape == sweep.central_gap.shape == (3, 3)
  assert np.all(np.asarray(sweep.spectral_radius) < 1)
  print("coverage: central gap per agent", np.round(np.asarray(sweep.central_gap), 3).tolist())
  # A reference set beyond every kernel's reach leaves the local fits: no distillation.
  local = np.asarray(fedkrr.local(problem, x_eval))
  lim_far = fedkrr.public.public_distillation_limit(problem, references[0], x_eval, 5.0)
  assert np.max(np.abs(np.asarray(lim_far.predictions) - local)) <= 1e-5 * np.max(np.abs(local))
  np.testing.assert_allclose(sweep.test_mse[0], sweep.local_mse, rtol=1e-4)
  # Covering the pooled inputs pulls the agents toward the pooled model.
  assert np.mean(np.asarray(sweep.central_gap[2])) < np.mean(np.asarray(sweep.central_gap[0]))
  fedkrr.public.plot_coverage(sweep, ["far", "agent 0", "pooled"], tmp_path / "coverage.png")
  assert (tmp_path / "coverage.png").stat().st_size > 0



# Draws the coverage figure in a fresh process whose backend is "pdf" (no Agg forced on it).
_PLOT_COVERAGE = """
import sys
import numpy as np
import fedkrr
r = np.random.default_rng(0).random
sweep = fedkrr.public.CoverageSweep(r((3, 2)), r(3), r((3, 2)), r(3), r(2), r(2))
fig = fedkrr.public.plot_coverage(sweep, ["a", "b", "c"], sys.argv[1])
print(type(fig).__module__, "matplotlib.pyplot" in sys.modules)
import matplotlib
print(matplotlib.get_backend())
"""


def test_plot_coverage_leaves_the_backend_alone_and_imports_no_pyplot(tmp_path):
  path = tmp_path / "coverage.png"
  out = subprocess.run([sys.executable, "-c", _PLOT_COVERAGE, str(path)], capture_output=True,
                       text=True, check=True, env={**os.environ, "MPLBACKEND": "pdf"})
  assert out.stdout.split() == ["matplotlib.figure", "False", "pdf"]
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

def test_limit_vmaps_over_the_weight_and_float32_is_within_tolerance(data, x64, assert_close):
  """One compilation for both: the float32 limit, vmapped over lambda, against float64."""
  problem, reference, x_eval = data
  f32 = fedkrr.make_problem(problem.xs, problem.ys, problem.kernels, RIDGE, dtype=jnp.float32)
  weights = [0.0, WEIGHT, 4.0]
  batched = jax.vmap(lambda lam: fedkrr.public.public_distillation_limit(f32, reference, x_eval,
                                                                         lam)
                     )(jnp.asarray(weights, jnp.float32))
  assert batched.predictions.dtype == jnp.float32
  for i, lam in enumerate(weights):
    exact = fedkrr.public.public_distillation_limit(problem, reference, x_eval, lam)
    assert_close(batched.predictions[i], exact.predictions, dtype=np.float32)
    assert_close(batched.spectral_radius[i], exact.spectral_radius, dtype=np.float32)
  assert np.all(np.diff(np.asarray(batched.spectral_radius)) > 0)  # more weight, slower rounds


def test_bad_input_is_rejected_with_the_argument_named(data):
  problem, reference, x_eval = data
  run = fedkrr.public.public_distillation_trajectory
  with pytest.raises(ProblemError, match=r"reference: expected shape \(n, 3\)"):
    run(problem, reference[:, :2], 3, x_eval, 1.0)
  with pytest.raises(ProblemError, match=r"reference: expected shape"):
    run(problem, reference[0], 3, x_eval, 1.0)
  with pytest.raises(ProblemError, match="reference: expected at least one public point"):
    run(problem, reference[:0], 3, x_eval, 1.0)
  with pytest.raises(ProblemError, match=r"x_eval: expected shape \(n, 3\)"):
    run(problem, reference, 3, x_eval[:, :1], 1.0)
  with pytest.raises(ProblemError, match="weight: expected a finite number >= 0, got -0.5"):
    run(problem, reference, 3, x_eval, -0.5)
  with pytest.raises(ProblemError, match="weight: expected a finite number >= 0"):
    fedkrr.public.public_distillation_limit(problem, reference, x_eval, float("nan"))
  with pytest.raises(ProblemError, match="weight: expected a number >= 0"):
    run(problem, reference, 3, x_eval, cast(Any, "big"))   # a bad type on purpose
  with pytest.raises(ProblemError, match=r"mixing: expected an \(3, 3\) matrix"):
    run(problem, reference, 3, x_eval, 1.0, np.eye(2))
  with pytest.raises(ProblemError, match="mixing: expected a doubly stochastic matrix, got "
                                         "column sums"):
    run(problem, reference, 3, x_eval, 1.0, np.array([[1.0, 0, 0], [1.0, 0, 0], [1.0, 0, 0]]))
  with pytest.raises(ProblemError, match="mixing: expected a doubly stochastic matrix, got row"):
    fedkrr.public.public_distillation(problem, reference, 1.0, 0.5 * np.eye(3))
  with pytest.raises(ProblemError, match="mixing: expected nonnegative entries"):
    fedkrr.public.public_distillation_simulate(
        problem, reference, 2, x_eval, 1.0, np.array([[1.5, -0.5, 0], [-0.5, 1.5, 0], [0, 0, 1.0]]))
  with pytest.raises(ValueError, match="rounds: expected an integer >= 1, got 0"):
    run(problem, reference, 0, x_eval, 1.0)
  with pytest.raises(ProblemError, match=r"t: expected an integer round in \[0, 2\^31\)"):
    fedkrr.public.public_distillation_round(problem, reference, -1, x_eval, 1.0)
  with pytest.raises(ProblemError, match=r"learners: expected one learner per agent \(3\)"):
    fedkrr.public.public_distillation_simulate(problem, reference, 2, x_eval, 1.0,
                                               learners=fedkrr.public.weighted_krr_learners(problem)[:2])
  with pytest.raises(ProblemError, match="y_test: expected shape"):
    fedkrr.public.coverage_sweep(problem, [reference], x_eval, np.zeros(N), 1.0)
