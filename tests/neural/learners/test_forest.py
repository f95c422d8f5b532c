"""ForestLearner: multi-output random-forest regression on soft targets (App. H.4)."""

import jax
import numpy as np
import pytest
from sklearn.datasets import load_digits

import fedkrr
import neural


@pytest.fixture(scope="module")
def digits():
  data = load_digits()
  x = (data.images / 16.0).astype(np.float32)[..., None]
  perm = np.random.default_rng(0).permutation(len(x))
  return x[perm], data.target[perm]


def test_forest_fits_digits_and_stays_in_the_convex_hull(digits):
  x, y = digits
  targets = np.eye(10, dtype=np.float32)[y[:1200]]
  model = neural.ForestLearner(n_estimators=30, seed=0).fit(x[:1200], targets)
  probs = np.asarray(model.predict(x[1200:]))
  assert probs.shape == (len(x) - 1200, 10) and probs.dtype == np.float32
  # every prediction averages one-hot rows: non-negative, rows summing to 1
  assert np.all(probs >= 0)
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
  assert np.mean(np.argmax(probs, axis=1) == y[1200:]) > 0.9


def test_soft_targets_and_seeds(digits):
  x, _ = digits
  rng = np.random.default_rng(1)
  soft = rng.dirichlet(np.ones(4), size=200).astype(np.float32)
  learner = neural.ForestLearner(n_estimators=5, max_depth=4, seed=3)
  a = np.asarray(learner.fit(x[:200], soft).predict(x[200:260]))
  b = np.asarray(learner.fit(x[:200], soft).predict(x[200:260]))
  np.testing.assert_array_equal(a, b)
  assert np.all(a >= soft.min(axis=0) - 1e-6) and np.all(a <= soft.max(axis=0) + 1e-6)
  other = learner.with_key(jax.random.PRNGKey(5))
  assert other.seed != learner.seed and other.seed == learner.with_key(jax.random.PRNGKey(5)).seed
  c = np.asarray(other.fit(x[:200], soft).predict(x[200:260]))
  assert not np.allclose(a, c)


def test_avgkd_with_an_mlp_and_a_forest(digits):
  x, y = digits
  xs = [x[:120], x[120:200]]
  ys = [np.eye(10, dtype=np.float32)[y[:120]], np.eye(10, dtype=np.float32)[y[120:200]]]
  learners = [neural.FlaxLearner(neural.get_model("mlp", 10, width=16), (8, 8, 1),
                                 neural.training.TrainConfig(epochs=1, batch_size=32),
                                 jax.random.PRNGKey(0)),
              neural.ForestLearner(n_estimators=5, seed=0)]
  preds = fedkrr.simulate("avgkd", learners, xs, ys, rounds=2, x_eval=x[1500:1530])
  assert preds.shape == (2, 2, 30, 10)
  np.testing.assert_allclose(np.sum(preds, axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_estimators=0), "n_estimators"), (dict(max_depth=0), "max_depth"),
    # 2^31 - 1 trees would never finish growing; 2.5 and True are not counts
    (dict(n_estimators=2**31 - 1), r"n_estimators: expected an integer in 1\.\.100000"),
    (dict(n_estimators=2.5), "n_estimators"), (dict(n_estimators=True), "n_estimators"),
    (dict(max_depth=1.5), "max_depth"),
])
def test_bad_settings_are_named(kwargs, match):
  with pytest.raises(neural.training.ForestError, match=match):
    neural.ForestLearner(**kwargs)


def test_forest_trees_past_the_limit_name_the_field():
  from neural._src.runtime.config import ConfigError
  with pytest.raises(ConfigError, match=r"^forest_trees: expected an integer in 1\.\.100000"):
    neural.ExperimentConfig(models=("forest",), forest_trees=2**31 - 1)
