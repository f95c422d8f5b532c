"""Augmentation in the training step, and teachers evaluated on the augmented batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural import training
from neural._src.kd.experiment import train_and_evaluate
from neural._src.runtime.config import ExperimentConfig


def _images(b=6, h=5, w=7, c=2):
  return jnp.arange(b * h * w * c, dtype=jnp.float32).reshape(b, h, w, c) + 1.0


def test_each_image_is_a_window_of_its_padded_or_flipped_self():
  x = _images()
  aug = training.Augment(pad=2, fill=(-1.0, -2.0))
  out = np.asarray(aug(jax.random.PRNGKey(3), x))
  assert out.shape == x.shape
  flips = 0
  for image, got in zip(np.asarray(x), out):
    found = False
    for flipped in (False, True):
      src = image[:, ::-1] if flipped else image
      canvas = np.empty((9, 11, 2), np.float32)
      canvas[...] = [-1.0, -2.0]   # the fill, per channel
      canvas[2:7, 2:9] = src
      for i in range(5):
        for j in range(5):
          if np.array_equal(canvas[i:i + 5, j:j + 7], got):
            found = True
            flips += flipped
    assert found
  assert 0 < flips < len(out)   # some flipped, some not (this key)
  np.testing.assert_array_equal(aug(jax.random.PRNGKey(3), x), out)   # the key decides
  identity = training.Augment(pad=0, flip=False)
  np.testing.assert_array_equal(identity(jax.random.PRNGKey(3), x), x)
  with pytest.raises(ValueError, match="pad: expected an int >= 0"):
    training.Augment(pad=-1)


def _teacher(seed=0, width=8):
  model = neural.get_model("mlp", 3, width=width)
  variables = training.init_variables(model, jax.random.PRNGKey(seed), (4, 4, 1))
  return training.FlaxModel(model, variables)


def test_soft_targets_follow_the_protocols_arithmetic():
  rng = np.random.default_rng(0)
  x = rng.random((5, 4, 4, 1), dtype=np.float32)
  y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 5)]
  a, b = training.Teacher(_teacher(0)), training.Teacher(_teacher(1))
  p_a, p_b = (np.asarray(t.network.predict(x)) for t in (a, b))
  avg = (y + sum(t.predict(x) for t in (a, b))) / 3   # AvgKD with M = 3
  assert isinstance(avg, training.SoftTargets)
  assert [w for w, _ in avg.teachers] == pytest.approx([1 / 3, 1 / 3])
  np.testing.assert_allclose(avg.on(x), (y + p_a + p_b) / 3, rtol=1e-6)
  backfit = jnp.asarray(y) - a.predict(x)             # a JAX array defers to SoftTargets too
  np.testing.assert_allclose(backfit.on(x), y - p_a, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose((2 * a.predict(x) - b.predict(x)).on(x), 2 * p_a - p_b, rtol=1e-6,
                             atol=1e-7)
  with pytest.raises(TypeError, match="expected a number"):
    a.predict(x) * y
  with pytest.raises(ValueError, match="no fixed part and no teachers"):
    training.SoftTargets(None, ()).on(x)


def test_the_loss_sees_the_teachers_on_the_augmented_batch():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.random((4, 4, 4, 1), dtype=np.float32))
  t = jnp.asarray(np.eye(3, dtype=np.float32)[[0, 1, 2, 0]] * 0.5)
  student, teacher = _teacher(2, width=6), _teacher(3)
  aug = training.Augment(pad=1)
  loss = training.SoftmaxLoss(student.model, "mse", aug, (teacher.model,))
  key = jax.random.PRNGKey(7)
  batch = training.Batch({"x": x, "t": t}, jnp.ones(4), training.LossContext(
      None, (teacher.variables,), jnp.asarray([0.5])), None, key, key, jnp.int32(0))
  got = loss(student.variables["params"], batch)
  x_aug = aug(jax.random.fold_in(key, 1), x)   # the draw the loss makes
  target = t + 0.5 * teacher.predict(x_aug)
  logits = student.model.apply(student.variables, x_aug, train=True, rngs={"dropout": key})
  want = jnp.mean((jax.nn.softmax(logits) - target) ** 2)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  clean = t + 0.5 * teacher.predict(x)   # and not on the clean batch
  assert not np.allclose(np.asarray(target), np.asarray(clean))


def test_teachers_in_the_step_equal_precomputed_targets_without_augmentation():
  """With an identity augmentation the in-step teachers give the model of precomputed targets."""
  rng = np.random.default_rng(2)
  x = rng.random((40, 4, 4, 1), dtype=np.float32)
  y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 40)]
  targets = (y + training.Teacher(_teacher(4)).predict(x)) / 2
  config = training.TrainConfig(epochs=2, batch_size=16, augment=training.Augment(0, flip=False))
  student = neural.get_model("mlp", 3, width=8)
  learner = neural.FlaxLearner(student, (4, 4, 1), config, jax.random.PRNGKey(0))
  in_step = learner.fit(x, targets)
  precomputed = learner.fit(x, targets.on(x))
  for a, b in zip(jax.tree.leaves(in_step.variables), jax.tree.leaves(precomputed.variables)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)
  batch = neural.FlaxLearner.fit_batch([learner, learner.with_key(jax.random.PRNGKey(1))],
                                       [x, x[:30]], [targets, (y[:30] + training.Teacher(
                                           _teacher(5)).predict(x[:30])) / 2])
  alone = learner.with_key(jax.random.PRNGKey(1)).fit(
      x[:30], (y[:30] + training.Teacher(_teacher(5)).predict(x[:30])) / 2)
  for a, b in zip(jax.tree.leaves(batch[1].variables), jax.tree.leaves(alone.variables)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


TINY = dict(dataset="digits", train_subset=120, test_subset=60, models=("cnn",), tiny=True,
            epochs=1, batch_size=32, rounds=2, augment="crop-flip", normalize=True)


def test_augmentation_changes_the_run(tmp_path):
  """The run with augmentation differs from the plain one (its resumption: test_experiment)."""
  config = ExperimentConfig(**TINY, protocol="akd")
  augmented = train_and_evaluate(config, tmp_path / "augmented")
  plain = train_and_evaluate(config.replace(augment="none"), tmp_path / "plain")
  assert [r["test_accuracy"] for r in plain] != [r["test_accuracy"] for r in augmented]


def test_augmentation_needs_networks():
  with pytest.raises(neural.ConfigError, match="augment: expected 'none' with a random forest"):
    ExperimentConfig(**{**TINY, "models": ("cnn", "forest")})
  with pytest.raises(neural.ConfigError, match="augment: expected one of none, crop-flip"):
    ExperimentConfig(**{**TINY, "augment": "mixup"})
