"""The linearised learner solves KRR with the empirical NTK (total-N scaling), round by round.

Tolerance: the fit is float32 conjugate gradient stopped at |grad| <= 1e-5 |grad_0|;
against fedkrr's exact solve (float64 with x64 on) its predictions agree to ~1e-6
relative, asserted at 2e-4 (1e-3 in float32 mode, where the KRR solve is float32 too).
"""

import jax
import numpy as np
import pytest

import fedkrr
import neural
from neural._src.learners.linearized import LinearizedError

SHAPE = (5,)
RIDGE = 1e-2
RNG = np.random.default_rng(0)
XS = [RNG.normal(size=(8, 5)).astype(np.float32) for _ in range(2)]
YS = [np.sin(x[:, 0]) + 0.5 * x[:, 1] for x in XS]
X_EVAL = RNG.normal(size=(6, 5)).astype(np.float32)
NUM_TOTAL = 16


def rtol():
  return 2e-4 if jax.config.read("jax_enable_x64") else 1e-3


def assert_close(actual, expected, tol):
  actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  err = np.max(np.abs(actual - expected)) / np.max(np.abs(expected))
  assert err <= tol, f"relative error {err:.3g} > {tol:.1g}"


@pytest.fixture(scope="module")
def agents():
  """One single-output MLP architecture, two initialisations (two agents' kernels)."""
  model = neural.get_model("mlp", 1, width=16)
  init = jax.jit(neural.training.init_variables, static_argnums=(0, 2))
  return model, [init(model, jax.random.PRNGKey(a), SHAPE) for a in range(2)]


def test_multi_output_is_krr_with_the_matrix_valued_ntk():
  """C = 3: the minimiser is KRR with the (nC, nC) NTK J J^T and ridge N c (derivation check)."""
  model = neural.get_model("mlp", 3, width=8)
  variables = jax.jit(neural.training.init_variables, static_argnums=(0, 2))(
      model, jax.random.PRNGKey(3), SHAPE)
  targets = RNG.normal(size=(8, 3))
  fitted = neural.LinearizedLearner(model, variables, SHAPE, RIDGE, NUM_TOTAL).fit(XS[0], targets)

  def jac(x):   # (n C, P) in float64
    tree = jax.jit(jax.jacrev(lambda p, x: model.apply({"params": p}, x)))(variables["params"], x)
    return np.concatenate([np.asarray(a, np.float64).reshape(x.shape[0] * 3, -1)
                           for a in jax.tree_util.tree_leaves(tree)], axis=1)

  jacobian = jac(np.concatenate([XS[0], X_EVAL]))
  j_train, j_eval = jacobian[:24], jacobian[24:]
  coef = np.linalg.solve(j_train @ j_train.T + NUM_TOTAL * RIDGE * np.eye(24),
                         targets.reshape(-1))
  assert_close(fitted.predict(X_EVAL), (j_eval @ j_train.T @ coef).reshape(6, 3), 1e-3)


def test_avgkd_with_linearised_learners_matches_the_closed_form(agents):
  """Three AvgKD rounds, agent-by-agent fits vs fedkrr.trajectory with each agent's NTK.

  Round 0 is each agent's fit on its own labels: the linearised learner against
  fedkrr's KRR with the empirical NTK, ridge c and the total N.
  """
  model, variables = agents
  learners = [neural.LinearizedLearner(model, v, SHAPE, RIDGE, NUM_TOTAL) for v in variables]
  fitted = learners[0].fit(XS[0], YS[0])
  assert 0 < int(fitted.steps) < learners[0].max_steps
  assert fitted.predict(X_EVAL).shape == (6,)
  # The centred function starts at zero; the fit moves it towards the labels.
  residual = np.asarray(fitted.predict(XS[0])) - YS[0]
  assert np.linalg.norm(residual) < 0.5 * np.linalg.norm(YS[0])
  simulated = fedkrr.simulate("avgkd", learners, XS, YS, 3, X_EVAL)
  kernels = [neural.training.ntk_kernel(model, v, SHAPE) for v in variables]
  problem = fedkrr.make_problem(XS, YS, kernels, RIDGE)
  closed = fedkrr.trajectory(problem, "avgkd", 3, X_EVAL)
  assert simulated.shape == closed.shape == (3, 2, 6)
  for t in range(3):
    assert_close(simulated[t], closed[t], rtol())
  # The two agents' kernels differ, so their models do too.
  assert np.abs(np.asarray(closed[0, 0] - closed[0, 1])).max() > 1e-3


def test_bad_input_names_the_argument(agents):
  model, variables = agents
  with pytest.raises(LinearizedError, match="ridge"):
    neural.LinearizedLearner(model, variables[0], SHAPE, -1.0, NUM_TOTAL)
  with pytest.raises(LinearizedError, match="num_total"):
    neural.LinearizedLearner(model, variables[0], SHAPE, RIDGE, 0)
  learner = neural.LinearizedLearner(model, variables[0], SHAPE, RIDGE, NUM_TOTAL)
  with pytest.raises(LinearizedError, match="targets: the network has 1 outputs"):
    learner.fit(XS[0], np.zeros((8, 2)))
  with pytest.raises(neural.training.NTKError, match="expected shape"):
    learner.fit(np.zeros((8, 4)), YS[0])
