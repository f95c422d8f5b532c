"""fedkrr's errors, each written once (fedkrr/_src/metrics.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src.metrics import mean_squared_error
from fedkrr._src.metrics import relative_error


def test_relative_error_traced_and_numpy_agree_to_the_bit_in_float64():
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    for shape in [(7,), (3, 5), (2, 4, 6)]:
      a, b = rng.standard_normal(shape), rng.standard_normal(shape)
      eager = relative_error(a, b)
      traced = jax.jit(relative_error)(jnp.asarray(a), jnp.asarray(b))
      assert isinstance(eager, float) and isinstance(traced, jax.Array)
      assert eager == float(traced)
      assert eager == np.max(np.abs(a - b)) / np.max(np.abs(b))


def test_relative_error_of_concrete_float32_arrays_is_taken_in_float64():
  a = jnp.asarray([1.0, 2.0], jnp.float32)
  b = jnp.asarray([1.0, 2.0 + 2.0 ** -22], jnp.float32)
  # in float32 the difference is one ulp of 2; in float64 the same number exactly
  assert relative_error(a, b) == 2.0 ** -22 / float(b[1])


def test_relative_error_against_zero_is_the_absolute_error_over_the_floor():
  assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
  assert relative_error(np.full(3, 1e-310), np.zeros(3)) == 1e-310 / 1e-300


def test_relative_error_is_differentiable_where_traced():
  a, b = jnp.asarray([1.0, 3.0]), jnp.asarray([1.0, 2.0])
  grad = jax.grad(relative_error)(a, b)
  np.testing.assert_allclose(grad, [0.0, 0.5])


def test_mean_squared_error_has_the_predictions_leading_axes():
  pred = np.arange(12.0).reshape(2, 3, 2)
  target = np.ones((3, 2))
  np.testing.assert_array_equal(mean_squared_error(pred, target),
                                [np.mean((pred[0] - 1) ** 2), np.mean((pred[1] - 1) ** 2)])
