"""fedkrr's closed forms and literal simulations against an independent NumPy reference.

The reference (``numpy_reference``) is written from the conventions alone, with
explicit loops over rounds and explicit fits. ``jit`` compiles once per shape
and kernel structure, so the settings below are a fractional factorial design
over (M, kernels, labels): every pair of levels of those three factors occurs
in some setting, and each setting runs with both ridges and all protocols.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy_reference as ref  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr

# Everything here compares float64 computations (the conftest's x64 fixture skips otherwise).
pytestmark = pytest.mark.usefixtures("x64")

ROUNDS = 8
DIM = 3

# name -> (fedkrr kernel, reference kernel)
KERNELS = {
    "rbf": (fedkrr.RBF(gamma=0.5), ref.make_kernel("rbf", gamma=0.5)),
    "laplace": (fedkrr.Laplace(gamma=0.7), ref.make_kernel("laplace", gamma=0.7)),
    "poly": (fedkrr.Polynomial(degree=2, gamma=0.5, coef0=1.0),
             ref.make_kernel("polynomial", degree=2, gamma=0.5, coef0=1.0)),
    "linear": (fedkrr.Linear(), ref.make_kernel("linear")),
}

# (M, kernel names, label columns or None for vector labels): a 2^(3-1) design.
SETTINGS = {
    "M2-same-vector": (2, ("rbf", "rbf"), None),
    "M2-mixed-matrix": (2, ("rbf", "poly"), 3),
    "M3-same-matrix": (3, ("rbf", "rbf", "rbf"), 3),
    "M3-mixed-vector": (3, ("rbf", "laplace", "poly"), None),
}
SIZES = {2: (7, 11), 3: (6, 9, 12)}
RIDGES = (1e-2, 0.0)


@functools.cache
def _data(setting: str):
  """Seeded inputs, labels and evaluation points of ``setting``."""
  m, _, cols = SETTINGS[setting]
  rng = np.random.default_rng(sorted(SETTINGS).index(setting))
  xs = [rng.normal(size=(n, DIM)) for n in SIZES[m]]
  ys = [rng.normal(size=(n,) if cols is None else (n, cols)) for n in SIZES[m]]
  x_eval = rng.normal(size=(5, DIM))
  return xs, ys, x_eval


def _case(setting: str, ridge: float):
  """The fedkrr problem, the reference kernels, data and evaluation points."""
  _, names, _ = SETTINGS[setting]
  xs, ys, x_eval = _data(setting)
  problem = fedkrr.make_problem(xs, ys, [KERNELS[n][0] for n in names], ridge)
  ref_kernels = [KERNELS[n][1] for n in names]
  return problem, ref_kernels, xs, ys, x_eval


@functools.cache
def _reference_run(setting: str, ridge: float, protocol: str, rounds: int, start: int = 0):
  _, ref_kernels, xs, ys, x_eval = _case(setting, ridge)
  return ref.run(protocol, xs, ys, ref_kernels, ridge, rounds, x_eval, start=start)


def _expected_shape(setting: str, protocol: str, rounds: int) -> tuple[int, ...]:
  m, _, cols = SETTINGS[setting]
  trailing = () if cols is None else (cols,)
  agents = (m,) if fedkrr.protocol_info(protocol).per_agent else ()
  return (rounds,) + agents + (5,) + trailing


@pytest.mark.parametrize("method", ["closed-form", "simulate"])
@pytest.mark.parametrize("protocol", fedkrr.PROTOCOLS)
@pytest.mark.parametrize("ridge", RIDGES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_matches_reference(setting, ridge, protocol, method, assert_close):
  problem, _, _, _, x_eval = _case(setting, ridge)
  expected = _reference_run(setting, ridge, protocol, ROUNDS)
  assert expected.shape == _expected_shape(setting, protocol, ROUNDS)
  if method == "closed-form":
    actual = fedkrr.trajectory(problem, protocol, ROUNDS, x_eval)
  else:
    actual = fedkrr.simulate(protocol, fedkrr.krr_learners(problem), problem.xs, problem.ys,
                             ROUNDS, x_eval)
  assert_close(actual, expected)


@pytest.mark.parametrize("setting", ["M2-mixed-matrix", "M3-same-matrix"])
def test_akd_from_another_start_matches_reference(setting, assert_close):
  ridge = 1e-2
  problem, _, _, _, x_eval = _case(setting, ridge)
  start = problem.num_agents - 1
  expected = _reference_run(setting, ridge, "akd", ROUNDS, start)
  actual = fedkrr.trajectory(problem, "akd", ROUNDS, x_eval,
                             params=fedkrr.ProtocolParams(start=start))
  assert_close(actual, expected)
  simulated = fedkrr.simulate("akd", fedkrr.krr_learners(problem), problem.xs, problem.ys,
                              ROUNDS, x_eval, params=fedkrr.ProtocolParams(start=start))
  assert_close(simulated, expected)


@pytest.mark.parametrize("baseline", ["central", "local"])
@pytest.mark.parametrize("ridge", RIDGES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_baseline_matches_reference(setting, ridge, baseline, assert_close):
  problem, ref_kernels, xs, ys, x_eval = _case(setting, ridge)
  expected = getattr(ref, baseline)(xs, ys, ref_kernels, ridge, x_eval)
  m, _, cols = SETTINGS[setting]
  assert expected.shape == (m, 5) + (() if cols is None else (cols,))
  assert_close(getattr(fedkrr, baseline)(problem, x_eval), expected)


@pytest.mark.parametrize("setting", ["M2-mixed-matrix", "M3-same-matrix"])
def test_avgkd_limit_matches_long_reference_run(setting, assert_close):
  ridge = 1e-2
  problem, _, _, _, x_eval = _case(setting, ridge)
  result = fedkrr.limit(problem, "avgkd", x_eval)
  assert result.converges
  assert float(result.spectral_radius) < 0.9  # so 400 rounds are well past 1e-8
  expected = _reference_run(setting, ridge, "avgkd", 400)[-1]
  assert_close(result.predictions, expected, 1e-8)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_gram_matches_reference(name, assert_close):
  """Gram matrices on all the points used above, the diagonal (x = x') included."""
  fk, rk = KERNELS[name]
  x = np.concatenate([np.concatenate(_data(s)[0] + [_data(s)[2]]) for s in SETTINGS])
  np.testing.assert_allclose(np.diag(np.asarray(fk(x, x))), np.diag(rk(x, x)), rtol=1e-13,
                             err_msg=f"{name}: k(x, x) on the diagonal")
  assert_close(fk(x, x), rk(x, x), 1e-13)


def test_reference_fit_reproduces_sklearn_convention():
  """Sanity check of the reference itself: a fit is KernelRidge with alpha = c * N."""
  kernel_ridge = pytest.importorskip("sklearn.kernel_ridge")
  xs, ys, x_eval = _data("M2-same-vector")
  n_total = 30
  c = 1e-2
  model = ref.fit(KERNELS["rbf"][1], xs[0], ys[0], c, n_total)
  sk = kernel_ridge.KernelRidge(alpha=c * n_total, kernel="rbf", gamma=0.5).fit(xs[0], ys[0])
  np.testing.assert_allclose(model.predict(x_eval), sk.predict(x_eval), rtol=1e-10, atol=1e-12)
