"""The optimiser (PyTorch-style Adam), the losses and the jitted training loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import neural
from neural import training


def torch_adam(params, grads_fn, steps, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
  """``torch.optim.Adam(lr, weight_decay=wd)`` written out in NumPy (float64)."""
  p = np.asarray(params, dtype=np.float64)
  m, v = np.zeros_like(p), np.zeros_like(p)
  for t in range(1, steps + 1):
    g = grads_fn(p) + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
  return p


@pytest.mark.parametrize("steps", [1, 2])
def test_optimizer_matches_pytorch_adam_with_l2(steps):
  rng = np.random.default_rng(0)
  a = rng.normal(size=(5, 5))
  p0 = rng.normal(size=5).astype(np.float32).astype(np.float64)   # exact in float32
  grads_fn = lambda p: a @ p + 1.0   # any gradient field will do
  config = training.TrainConfig(learning_rate=0.1, weight_decay=0.3)   # large: visible effects
  tx = training.make_optimizer(config)
  p = jnp.asarray(p0, dtype=jnp.float32)
  state = tx.init(p)
  for _ in range(steps):
    g = jnp.asarray(grads_fn(np.asarray(p, dtype=np.float64)), dtype=jnp.float32)
    updates, state = tx.update(g, state, p)
    p = optax.apply_updates(p, updates)
  expected = torch_adam(p0, grads_fn, steps, 0.1, 0.3)
  # float32 steps of size ~lr: errors of a few float32 ulps of the parameters
  np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-5, atol=1e-5)
  if steps == 1:   # decoupled decay (AdamW) would be different: the test can fail
    adamw = torch_adam(p0, grads_fn, 1, 0.1, 0.0) - 0.1 * 0.3 * p0
    assert np.max(np.abs(adamw - np.asarray(p))) > 1e-3


def test_losses_by_hand():
  logits = jnp.asarray([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]], dtype=jnp.float32)
  targets = jnp.asarray([[0.0, 0.0, 1.0], [0.2, 0.3, 0.5]], dtype=jnp.float32)
  e = np.exp([0.0, 1.0, 2.0])
  s0, s1 = e / e.sum(), np.full(3, 1 / 3)
  mse = training.per_example_loss(logits, targets, "mse")
  np.testing.assert_allclose(mse, [np.mean((s0 - [0, 0, 1]) ** 2),
                                   np.mean((s1 - [0.2, 0.3, 0.5]) ** 2)], rtol=1e-6)
  ce = training.per_example_loss(logits, targets, "ce")
  np.testing.assert_allclose(ce, [-np.log(s0[2]), -np.sum([0.2, 0.3, 0.5] * np.log(s1))],
                             rtol=1e-6)


@pytest.fixture(scope="module")
def problem():
  rng = np.random.default_rng(1)
  x = rng.random((23, 6, 6, 1)).astype(np.float32)   # 23 points: not a multiple of 8
  t = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 23)]
  model = neural.get_model("cnn", 3, width=2)
  variables = training.init_variables(model, jax.random.PRNGKey(0), (6, 6, 1))
  return model, variables, x, t


def leaves(tree):
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def test_train_is_float32_deterministic_and_moves(problem):
  model, variables, x, t = problem
  config = training.TrainConfig(epochs=2, batch_size=8)
  key = jax.random.PRNGKey(3)
  a = training.train(model, variables, x, t.astype(np.float64), key, config)
  b = training.train(model, variables, x, t, key, config)
  assert all(v.dtype == np.float32 for v in leaves(a))
  assert all(np.array_equal(u, v) for u, v in zip(leaves(a), leaves(b)))
  assert any(not np.allclose(u, v) for u, v in zip(leaves(a), leaves(variables)))
  c = training.train(model, variables, x, t, jax.random.PRNGKey(4), config)
  assert any(not np.allclose(u, v) for u, v in zip(leaves(a), leaves(c)))


def test_padding_with_a_mask_equals_the_unpadded_run(problem):
  model, variables, x, t = problem
  config = training.TrainConfig(epochs=2, batch_size=8)
  key = jax.random.PRNGKey(5)
  plain = training.train(model, variables, x, t, key, config)
  pad = 10   # one more mini-batch per epoch that holds padding only
  x_pad = np.concatenate([x, np.ones((pad, *x.shape[1:]), np.float32)])
  t_pad = np.concatenate([t, np.full((pad, 3), 7.0, np.float32)])
  mask = np.arange(len(x_pad)) < len(x)
  padded = training.train(model, variables, x_pad, t_pad, key, config, mask=mask)
  for u, v in zip(leaves(plain), leaves(padded)):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_a_batch_larger_than_the_data_trains_as_the_whole_data(problem):
  model, variables, x, t = problem
  key = jax.random.PRNGKey(5)
  whole = training.train(model, variables, x, t, key, training.TrainConfig(epochs=2, batch_size=23))
  with pytest.warns(training.LargeBatchWarning, match="batch_size 1000000 is larger"):
    large = training.train(model, variables, x, t, key,
                         training.TrainConfig(epochs=2, batch_size=10**6))
  for u, v in zip(leaves(whole), leaves(large)):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_zero_epochs_returns_the_start(problem):
  model, variables, x, t = problem
  out = training.train(model, variables, x, t, jax.random.PRNGKey(0),
                     training.TrainConfig(epochs=0, batch_size=8))
  assert all(np.array_equal(u, v) for u, v in zip(leaves(out), leaves(variables)))


def test_train_batch_equals_train_per_agent(problem):
  model, variables, x, t = problem
  config = training.TrainConfig(epochs=1, batch_size=8)
  keys = jnp.stack([jax.random.PRNGKey(k) for k in range(2)])
  stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, a + 0.01]), variables)
  masks = np.stack([np.ones(23, bool), np.arange(23) < 15])
  out = training.train_batch(model, stacked, np.stack([x, x]), np.stack([t, t]), keys, config,
                           masks)
  for k, n in enumerate([23, 15]):
    start = jax.tree_util.tree_map(lambda a, k=k: a[k], stacked)
    one = training.train(model, start, x[:n], t[:n], keys[k], config)
    for u, v in zip(leaves(one), leaves(jax.tree_util.tree_map(lambda a, k=k: a[k], out))):
      np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)


def test_predict_proba_rows_are_distributions_in_chunks(problem):
  model, variables, x, _ = problem
  whole = training.predict_proba(model, variables, x)
  chunked = training.predict_proba(model, variables, x, batch_size=10)
  assert whole.shape == (23, 3) and whole.dtype == jnp.float32
  np.testing.assert_allclose(np.sum(whole, axis=1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(whole, chunked, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(loss="hinge"), "loss"),
    (dict(batch_size=0), "batch_size"),
    (dict(epochs=-1), "epochs"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(weight_decay=-1.0), "weight_decay"),
])
def test_bad_config_is_named(kwargs, match):
  with pytest.raises(training.TrainError, match=match):
    training.TrainConfig(**kwargs)


def test_bad_shapes_are_named(problem):
  model, variables, x, t = problem
  with pytest.raises(training.TrainError, match="x, targets"):
    training.train(model, variables, x, t[:5], jax.random.PRNGKey(0), training.TrainConfig())
  with pytest.raises(training.TrainError, match="mask"):
    training.train(model, variables, x, t, jax.random.PRNGKey(0), training.TrainConfig(),
                 mask=np.ones(3, bool))
