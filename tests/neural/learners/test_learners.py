"""FlaxLearner: fit/predict, warm start, batch keys, vmapped fit_batch, protocols end to end."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.datasets import load_digits

import fedkrr
import neural
from neural import training


def leaves(tree):
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def random_problem(sizes, shape=(6, 6, 1), classes=3, seed=0):
  rng = np.random.default_rng(seed)
  xs = [rng.random((n, *shape)).astype(np.float32) for n in sizes]
  ts = [np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)] for n in sizes]
  return xs, ts


@pytest.fixture(scope="module")
def digits():
  data = load_digits()
  x = (data.images / 16.0).astype(np.float32)[..., None]   # (1797, 8, 8, 1)
  perm = np.random.default_rng(0).permutation(len(x))
  return x[perm], data.target[perm]


@pytest.mark.parametrize("name, sizes", [("cnn", (30, 11)), ("mlp", (21, 16))])
def test_fit_batch_equals_fitting_one_by_one(name, sizes):
  """The vmapped program gives each agent the parameters of its own fit (different n)."""
  model = neural.get_model(name, 3, width=4)
  config = training.TrainConfig(epochs=2, batch_size=8)
  learners = neural.flax_learners([model] * len(sizes), (6, 6, 1), config, jax.random.PRNGKey(7))
  xs, ts = random_problem(sizes)
  batched = neural.FlaxLearner.fit_batch(learners, xs, ts)
  for learner, x, t, got in zip(learners, xs, ts, batched):
    expected = learner.fit(x, t)
    for u, v in zip(leaves(expected.variables), leaves(got.variables)):
      np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5)   # float32, different kernels
  # and the agents really differ (different keys and data)
  assert not np.allclose(leaves(batched[0].variables)[0], leaves(batched[1].variables)[0])


def test_learner_reaches_high_accuracy_on_digits(digits):
  x, y = digits
  learner = neural.FlaxLearner(neural.get_model("mlp", 10, width=128), (8, 8, 1),
                               training.TrainConfig(epochs=15, batch_size=32),
                               jax.random.PRNGKey(0))
  model = learner.fit(x[:1200], np.eye(10, dtype=np.float32)[y[:1200]])
  probs = model.predict(x[1200:])
  assert probs.shape == (len(x) - 1200, 10) and probs.dtype == jnp.float32
  np.testing.assert_allclose(np.sum(probs, axis=1), 1.0, rtol=1e-5)
  accuracy = np.mean(np.argmax(probs, axis=1) == y[1200:])
  assert accuracy > 0.92, accuracy


def test_fit_is_fresh_and_deterministic_per_key():
  xs, ts = random_problem([12])
  learner = neural.FlaxLearner(neural.get_model("mlp", 3, width=8), (6, 6, 1),
                               training.TrainConfig(epochs=1, batch_size=4), jax.random.PRNGKey(0))
  a, b = learner.fit(xs[0], ts[0]), learner.fit(xs[0], ts[0])
  assert all(np.array_equal(u, v) for u, v in zip(leaves(a.variables), leaves(b.variables)))
  c = learner.with_key(jax.random.PRNGKey(1)).fit(xs[0], ts[0])
  assert not all(np.allclose(u, v) for u, v in zip(leaves(a.variables), leaves(c.variables)))


def test_warm_start_starts_from_init():
  xs, ts = random_problem([12])
  model = neural.get_model("mlp", 3, width=8)
  init = training.init_variables(model, jax.random.PRNGKey(42), (6, 6, 1))
  cold = neural.FlaxLearner(model, (6, 6, 1), training.TrainConfig(epochs=0),
                            jax.random.PRNGKey(0), init=init)
  warm = neural.FlaxLearner(model, (6, 6, 1), training.TrainConfig(epochs=0, warm_start=True),
                            jax.random.PRNGKey(0), init=init)
  assert all(np.array_equal(u, v)
             for u, v in zip(leaves(warm.fit(xs[0], ts[0]).variables), leaves(init)))
  assert not all(np.array_equal(u, v)
                 for u, v in zip(leaves(cold.fit(xs[0], ts[0]).variables), leaves(init)))
  assert warm.batch_key != warm.with_init(None).batch_key


def test_batch_key_groups_same_architecture_only():
  config = training.TrainConfig()
  a = neural.FlaxLearner(neural.get_model("cnn", 10), (28, 28, 1), config, jax.random.PRNGKey(0))
  b = a.with_key(jax.random.PRNGKey(1))
  assert a.batch_key == b.batch_key and hash(a.batch_key) == hash(b.batch_key)
  assert a.batch_key != dataclass_replace(a, model=neural.get_model("mlp", 10)).batch_key
  assert a.batch_key != dataclass_replace(a, config=training.TrainConfig(epochs=3)).batch_key
  assert a.batch_key != dataclass_replace(a, input_shape=(32, 32, 3)).batch_key
  with pytest.raises(training.LearnerError, match="batch_key"):
    neural.FlaxLearner.fit_batch([a, dataclass_replace(a, input_shape=(32, 32, 3))],
                                 [None, None], [None, None])


def dataclass_replace(obj, **changes):
  import dataclasses
  return dataclasses.replace(obj, **changes)


def test_bad_input_shape_is_named():
  learner = neural.FlaxLearner(neural.get_model("mlp", 3, width=8), (6, 6, 1),
                               training.TrainConfig(epochs=1), jax.random.PRNGKey(0))
  with pytest.raises(training.LearnerError, match="x: expected shape"):
    learner.fit(np.zeros((4, 5, 5, 1), np.float32), np.zeros((4, 3), np.float32))
  with pytest.raises(training.LearnerError, match="targets"):
    learner.fit(np.zeros((4, 6, 6, 1), np.float32), np.zeros((4,), np.float32))


def test_avgkd_round_with_two_flax_learners_goes_through_fit_batch(digits, monkeypatch):
  x, y = digits
  xs = [x[:150], x[150:250]]
  ys = [np.eye(10, dtype=np.float32)[y[:150]], np.eye(10, dtype=np.float32)[y[150:250]]]
  learners = neural.flax_learners([neural.get_model("mlp", 10, width=16)] * 2, (8, 8, 1),
                                  training.TrainConfig(epochs=1, batch_size=32),
                                  jax.random.PRNGKey(0))

  def no_single_fits(self, x, targets):
    raise AssertionError("fit_all should have called fit_batch")

  monkeypatch.setattr(neural.FlaxLearner, "fit", no_single_fits)
  preds = fedkrr.simulate("avgkd", learners, xs, ys, rounds=2, x_eval=x[1500:1540])
  assert preds.shape == (2, 2, 40, 10)
  assert np.all(np.isfinite(np.asarray(preds)))
  np.testing.assert_allclose(np.sum(preds, axis=-1), 1.0, rtol=1e-5)


def test_epoch_scores_of_a_batch_equal_those_of_single_fits():
  """eval_data scores each agent after every epoch, stacked or alone, vmapped or in turn;
  agents of a batch may score test sets of their own (all or none of them score)."""
  ds = neural.load_dataset("digits", test_fraction=0.25)
  model = neural.get_model("mlp", 10, width=16)
  xs = [ds.x_train[:90], ds.x_train[90:150]]
  ts = [neural.data.one_hot(ds.y_train[:90], 10), neural.data.one_hot(ds.y_train[90:150], 10)]
  eval_data = (ds.x_test[:100], ds.y_test[:100])
  singles = []
  for a in range(2):
    config = training.TrainConfig(epochs=3, batch_size=32, learning_rate=0.01)
    learner = neural.FlaxLearner(model, (8, 8, 1), config, jax.random.PRNGKey(a),
                                 eval_data=eval_data)
    singles.append(learner.fit(xs[a], ts[a]))
    last = float(np.mean(np.argmax(singles[a].predict(eval_data[0]), 1) == eval_data[1]))
    assert len(singles[a].epoch_accuracy) == 3
    assert singles[a].epoch_accuracy[-1] == pytest.approx(last)
  for batching in ("vmap", "sequential"):
    config = training.TrainConfig(epochs=3, batch_size=32, learning_rate=0.01,
                                agent_batching=batching)
    learners = [neural.FlaxLearner(model, (8, 8, 1), config, jax.random.PRNGKey(a),
                                   eval_data=eval_data) for a in range(2)]
    batch = neural.FlaxLearner.fit_batch(learners, xs, ts)
    for a in range(2):
      np.testing.assert_allclose(batch[a].epoch_accuracy, singles[a].epoch_accuracy, atol=0.021)
  own = (ds.x_test[100:110], ds.y_test[100:110])   # runs of a batch: each its own test set
  other = dataclasses.replace(learners[1], eval_data=own)
  alone = other.fit(xs[1], ts[1]).epoch_accuracy
  batch = neural.FlaxLearner.fit_batch([learners[0], other], xs, ts)
  np.testing.assert_allclose(batch[0].epoch_accuracy, singles[0].epoch_accuracy, atol=0.021)
  np.testing.assert_allclose(batch[1].epoch_accuracy, alone, atol=0.11)   # 1 of 10 points
  with pytest.raises(training.LearnerError, match="eval_data"):
    neural.FlaxLearner.fit_batch([learners[0], dataclasses.replace(other, eval_data=None)],
                                 xs, ts)
