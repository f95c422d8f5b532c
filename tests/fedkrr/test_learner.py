"""The kernel ridge learner and the ridge factorisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge

import fedkrr

RNG = np.random.default_rng(2)
X = RNG.normal(size=(20, 3))
Y = RNG.normal(size=(20, 2))
X_TEST = RNG.normal(size=(9, 3))
N_TOTAL = 50  # the federated problem's N: Gram blocks are scaled by it, not by len(X)


@pytest.mark.parametrize("kernel, sk_kwargs", [
    (fedkrr.RBF(0.4), dict(kernel="rbf", gamma=0.4)),
    (fedkrr.Polynomial(degree=2, gamma=0.5, coef0=1.0),
     dict(kernel="polynomial", degree=2, gamma=0.5, coef0=1.0)),
    (fedkrr.Linear(), dict(kernel="linear")),
])
@pytest.mark.parametrize("ridge", [1e-3, 0.3])
def test_krr_learner_equals_sklearn_kernel_ridge(kernel, sk_kwargs, ridge, x64, assert_close):
  # (c I + K/N)^{-1} t with predictions k(x, X)/N alpha  ==  KernelRidge with alpha = c N.
  learner = fedkrr.KRRLearner(kernel, jnp.asarray(ridge), jnp.asarray(float(N_TOTAL)))
  ours = learner.fit(X, Y).predict(X_TEST)
  sk = KernelRidge(alpha=ridge * N_TOTAL, **sk_kwargs).fit(X, Y).predict(X_TEST)
  assert_close(ours, sk)


def test_zero_ridge_gives_minimum_norm_solution(x64, assert_close):
  # A linear kernel on 20 points in 3 dimensions has rank 3: (K/N)^+ t is the
  # minimum-norm solution (App. C), which a ridge c -> 0 approaches.
  learner = fedkrr.KRRLearner(fedkrr.Linear(), jnp.asarray(0.0), jnp.asarray(float(N_TOTAL)))
  model = learner.fit(X, Y)
  gram = X @ X.T / N_TOTAL
  assert_close(model.alpha, np.linalg.pinv(gram, hermitian=True) @ Y, rtol=1e-8)
  tiny = fedkrr.KRRLearner(fedkrr.Linear(), jnp.asarray(1e-10), jnp.asarray(float(N_TOTAL)))
  # Looser: the ridge path differs from the limit by O(c / smallest eigenvalue).
  assert_close(tiny.fit(X, Y).predict(X_TEST), model.predict(X_TEST), rtol=1e-6)


def test_zero_ridge_interpolates_with_a_full_rank_kernel(x64, assert_close):
  model = fedkrr.KRRLearner(fedkrr.RBF(0.5), jnp.asarray(0.0), jnp.asarray(20.0)).fit(X, Y)
  assert_close(model.predict(X), Y, rtol=1e-7)  # cond(K) ~ 1e3 here


@pytest.mark.parametrize("ridge", [0.0, 0.1])
def test_ridge_factor_solves(ridge, x64, assert_close):
  a = RNG.normal(size=(8, 5))
  gram = a @ a.T  # rank 5
  factor = fedkrr.ridge_factor(gram, ridge)
  expected = np.linalg.pinv(gram + ridge * np.eye(8), hermitian=True)
  assert_close(factor.matrix(), expected, rtol=1e-8)
  assert_close(factor.solve(Y[:8]), expected @ Y[:8], rtol=1e-8)


def test_learner_vmaps_over_ridge(x64, assert_close):
  ridges = jnp.array([0.0, 1e-3, 1e-1])

  def fit_predict(c):
    return fedkrr.KRRLearner(fedkrr.RBF(0.5), c, jnp.asarray(20.0)).fit(X, Y).predict(X_TEST)

  batched = jax.vmap(fit_predict)(ridges)
  for i, c in enumerate(ridges):
    assert_close(batched[i], fit_predict(c), rtol=1e-10)


def test_float32_learner_within_tolerance(x64, assert_close):
  f64 = fedkrr.KRRLearner(fedkrr.RBF(0.5), jnp.asarray(0.1), jnp.asarray(20.0))
  f32 = fedkrr.KRRLearner(fedkrr.RBF(0.5), jnp.asarray(0.1, jnp.float32),
                          jnp.asarray(20.0, jnp.float32))
  pred32 = f32.fit(X, Y).predict(X_TEST)
  assert pred32.dtype == jnp.float32
  assert_close(pred32, f64.fit(X, Y).predict(X_TEST), dtype=np.float32)


class _BatchedKRR:
  """A KRR learner that declares a batch key and records its batched fits."""

  calls: list = []
  batch_key = "krr"

  def __init__(self, *args):
    self.inner = fedkrr.KRRLearner(*args)

  def fit(self, x, targets):
    return self.inner.fit(x, targets)

  @classmethod
  def fit_batch(cls, learners, xs, targets):
    cls.calls.append(len(learners))
    return tuple(learner.fit(x, t) for learner, x, t in zip(learners, xs, targets))


@pytest.mark.parametrize("name", ["avgkd", "pkd", "pkd-mean", "ekd", "backfit-jacobi",
                                  "backfit-gs"])
def test_fit_all_groups_batchable_learners_without_changing_results(name, x64, assert_close):
  # Protocol rounds with independent fits hand them to fit_batch as one group; the
  # trajectory is the one of plain learners that are fitted one by one.
  xs = [RNG.normal(size=(6 + a, 3)) for a in range(3)]
  ys = [RNG.normal(size=(6 + a,)) for a in range(3)]
  ridge, n = jnp.asarray(0.1), jnp.asarray(21.0)
  plain = [fedkrr.KRRLearner(fedkrr.RBF(0.5), ridge, n) for _ in range(3)]
  batched = [_BatchedKRR(fedkrr.RBF(0.5), ridge, n) for _ in range(2)] + plain[2:]
  _BatchedKRR.calls.clear()
  expected = fedkrr.simulate(name, plain, xs, ys, 3, X_TEST)
  actual = fedkrr.simulate(name, batched, xs, ys, 3, X_TEST)
  assert_close(actual, expected)
  if name == "backfit-gs":   # sequential by definition: never batched
    assert _BatchedKRR.calls == []
  else:
    assert _BatchedKRR.calls == [2, 2, 2]


def test_fit_all_checks_lengths():
  with pytest.raises(ValueError, match="learners, xs, targets"):
    fedkrr.learners.fit_all([object()], [X, X], [Y, Y])
