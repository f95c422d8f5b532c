"""The CPU path of ``models.conv2d`` and ``models.max_pool`` against the reference operations.

The max-pool's CPU path is exact (the same maxima, the gradient to the same element);
the convolution's sums run in another order, so values and gradients agree to float32
rounding. The paper's CNN, built on both, gives the reference network's loss and
gradients to float32 rounding.
"""

import flax.linen as nn
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural import models
from neural import training

# Float32 sums of up to a few thousand terms taken in another order (taps, batch chunks).
RTOL = 2e-5


def relative_error(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def random(shape, seed=0, ties=False):
  rng = np.random.default_rng(seed)
  values = rng.integers(-2, 3, shape) if ties else rng.normal(size=shape)
  return jnp.asarray(values, jnp.float32)


@pytest.mark.parametrize("x_shape,kernel_shape,strides,padding", [
    ((4, 12, 12, 1), (5, 5, 1, 6), (1, 1), "SAME"),        # one channel: the taps
    ((70, 9, 9, 1), (3, 3, 1, 4), (1, 1), "VALID"),        # taps, three weight chunks
    ((40, 9, 9, 3), (3, 3, 3, 5), (2, 2), "SAME"),         # strided: the reference forward
    ((5, 8, 8, 4), (3, 3, 4, 6), (1, 2), ((1, 0), (0, 2))),  # explicit padding
])
def test_cpu_convolution_matches_the_reference_with_its_gradients(x_shape, kernel_shape, strides,
                                                                  padding):
  x, kernel = random(x_shape, 0), random(kernel_shape, 1)
  out = {}
  for impl in ("cpu", "reference"):
    y, vjp = jax.vjp(lambda a, k, impl=impl: models.conv2d(a, k, strides, padding, impl), x, kernel)
    out[impl] = (y, *vjp(random(y.shape, 2)))
  for fast, ref in zip(out["cpu"], out["reference"]):
    assert fast.shape == ref.shape
    assert relative_error(fast, ref) <= RTOL
  expected = lax.conv_general_dilated(x, kernel, strides, padding,
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))
  np.testing.assert_array_equal(out["reference"][0], expected)


def test_auto_is_the_cpu_path_on_a_cpu():
  x, kernel = random((3, 8, 8, 1), 0), random((5, 5, 1, 2), 1)
  grad = lambda impl: jax.grad(lambda k: jnp.sum(models.conv2d(x, k, impl=impl) ** 2))(kernel)
  jitted = jax.jit(grad, static_argnums=0)
  if jax.default_backend() == "cpu":
    np.testing.assert_array_equal(jitted("auto"), jitted("cpu"))
  else:
    np.testing.assert_array_equal(jitted("auto"), jitted("reference"))


@pytest.mark.parametrize("shape,window,padding", [
    ((3, 8, 8, 2), (2, 2), "VALID"),
    ((3, 7, 9, 2), (2, 2), "VALID"),     # odd sizes: the last row and column are dropped
    ((3, 7, 9, 2), (2, 2), "SAME"),      # odd sizes: padded with -inf
    ((2, 9, 9, 3), (3, 3), "SAME"),
    ((2, 6, 6, 1), (2, 2), ((1, 1), (0, 1))),
])
def test_cpu_max_pool_is_bit_identical_to_flax_with_ties(shape, window, padding):
  x = random(shape, 0, ties=True)   # integers in [-2, 2]: most windows hold a tie
  y, vjp = jax.vjp(lambda a: models.max_pool(a, window, window, padding, impl="cpu"), x)
  y_ref, vjp_ref = jax.vjp(lambda a: nn.max_pool(a, window, window, padding), x)
  g = random(y.shape, 1)
  np.testing.assert_array_equal(y, y_ref)
  np.testing.assert_array_equal(vjp(g)[0], vjp_ref(g)[0])
  np.testing.assert_array_equal(models.max_pool(x, window, window, padding, impl="reference"),
                                y_ref)


def test_max_pool_with_overlapping_windows_is_flax_s():
  x = random((2, 7, 7, 3), 0, ties=True)
  np.testing.assert_array_equal(models.max_pool(x, (3, 3), (2, 2), "SAME", impl="cpu"),
                                nn.max_pool(x, (3, 3), (2, 2), "SAME"))


class ReferenceCNN(nn.Module):
  """The paper's CNN written with ``flax.linen.Conv`` and ``flax.linen.max_pool``."""

  width: int

  @nn.compact
  def __call__(self, x, train=False):
    for channels in (self.width, 2 * self.width):
      x = nn.Conv(channels, (5, 5), padding="SAME")(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    return nn.Dense(10)(x.reshape((x.shape[0], -1)))


@pytest.mark.parametrize("tiny", [True, False])
def test_cnn_loss_and_gradients_equal_the_reference_network(tiny):
  """The paper's CNN on its fast path: the reference's variables, loss and gradients.

  40 MNIST-like images with constant borders (ties in the pools, as in MNIST's background).
  """
  model = neural.get_model("cnn", 10, tiny=tiny)
  reference = ReferenceCNN(model.width)
  variables = training.init_variables(model, jax.random.PRNGKey(0), (28, 28, 1))
  np.testing.assert_equal(jax.tree.map(np.asarray, variables), jax.tree.map(
      np.asarray, training.init_variables(reference, jax.random.PRNGKey(0), (28, 28, 1))))
  x = np.full((40, 28, 28, 1), -0.42, np.float32)
  x[:, 6:22, 6:22] = np.random.default_rng(0).random((40, 16, 16, 1))
  targets = jax.nn.one_hot(jnp.arange(40) % 10, 10)
  loss = lambda net: jax.jit(jax.value_and_grad(lambda v: jnp.mean(training.per_example_loss(
      net.apply(v, jnp.asarray(x)), targets, "mse"))))
  (value, grads), (value_ref, grads_ref) = loss(model)(variables), loss(reference)(variables)
  assert relative_error(value, value_ref) <= RTOL
  for g, g_ref in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_ref)):
    assert relative_error(g, g_ref) <= RTOL


def test_cpu_path_under_vmap_gives_each_agent_its_own_gradient():
  xs, kernels = random((3, 6, 8, 8, 1), 0), random((3, 5, 5, 1, 4), 1)
  def grads(x, k):
    f = lambda x, k: jnp.sum(models.max_pool(jnp.tanh(models.conv2d(x, k, impl="cpu")), (2, 2),
                                             (2, 2), impl="cpu") ** 2)
    return jax.grad(f, argnums=(0, 1))(x, k)
  stacked = jax.vmap(grads)(xs, kernels)
  for m in range(3):
    for a, b in zip(stacked, grads(xs[m], kernels[m])):
      assert relative_error(a[m], b) <= RTOL


def test_conv_layer_has_flax_conv_s_variables():
  x = jnp.zeros((1, 10, 10, 3))
  ours = models.Conv(4, (3, 3), strides=(2, 2)).init(jax.random.PRNGKey(0), x)
  flax = nn.Conv(4, (3, 3), strides=(2, 2)).init(jax.random.PRNGKey(0), x)
  np.testing.assert_equal(jax.tree.map(np.asarray, ours), jax.tree.map(np.asarray, flax))
  no_bias = models.Conv(4, (3, 3), use_bias=False).init(jax.random.PRNGKey(0), x)
  assert set(no_bias["params"]) == {"kernel"}


def test_bad_arguments_are_named():
  x, kernel = jnp.zeros((1, 4, 4, 2)), jnp.zeros((3, 3, 3, 1))
  with pytest.raises(models.ConvError, match="x, kernel"):
    models.conv2d(x, kernel)
  with pytest.raises(models.ConvError, match="impl"):
    models.conv2d(x, jnp.zeros((3, 3, 2, 1)), impl="fast")
  with pytest.raises(models.ConvError, match="impl"):
    models.max_pool(x, (2, 2), (2, 2), impl="fast")
  with pytest.raises(models.ConvError, match="window_shape"):
    models.max_pool(x, (2,), (2,))
