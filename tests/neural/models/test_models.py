"""Shapes and parameter counts of the Flax models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import neural

SHAPES = [(28, 28, 1), (32, 32, 3)]


def num_params(variables) -> int:
  return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(variables))


def shapes(model, shape):
  """The variables' shapes and dtypes, without running the initialisers (fast)."""
  return jax.eval_shape(lambda: neural.training.init_variables(model, jax.random.PRNGKey(0), shape))


@pytest.mark.parametrize("name", neural.MODELS)
@pytest.mark.parametrize("shape", SHAPES)
def test_output_shape_and_dtype(name, shape):
  model = neural.get_model(name, 7, tiny=True)
  variables = shapes(model, shape)
  assert set(variables) == {"params"}   # no mutable state (no BatchNorm)
  assert all(a.dtype == jnp.float32 for a in jax.tree_util.tree_leaves(variables))
  x = jax.ShapeDtypeStruct((3, *shape), jnp.float32)
  logits = jax.eval_shape(model.apply, variables, x)
  assert logits.shape == (3, 7)
  assert logits.dtype == jnp.float32


# Cheap models for the numeric check; every model's shapes are checked below.
@pytest.mark.parametrize("name", ["cnn", "mlp", "lenet5", "resnet2", "resnet4"])
def test_num_classes_zero_returns_the_features_of_the_full_model(name):
  """One feature convention: ``get_model(name, 0)`` is the full model without its last layer.

  Initialised from the same key, the headless model's parameters are the full
  model's minus that layer, and it returns the features ``return_features=True`` gives.
  """
  full, headless = neural.get_model(name, 5, tiny=True), neural.get_model(name, 0, tiny=True)
  key, shape = jax.random.PRNGKey(3), (8, 8, 1)
  v_full = neural.training.init_variables(full, key, shape)
  v_head = neural.training.init_variables(headless, key, shape)
  flat_full = dict(jax.tree_util.tree_leaves_with_path(v_full))
  flat_head = dict(jax.tree_util.tree_leaves_with_path(v_head))
  assert set(flat_head) < set(flat_full)
  for path, leaf in flat_head.items():
    np.testing.assert_array_equal(leaf, flat_full[path])
  x = jnp.asarray(np.random.default_rng(0).random((4, *shape)), jnp.float32)
  logits, features = full.apply(v_full, x, return_features=True)
  np.testing.assert_allclose(headless.apply(v_head, x), features, rtol=1e-6, atol=1e-6)
  assert logits.shape == (4, 5)


@pytest.mark.parametrize("name", neural.MODELS)
def test_headless_shapes(name):
  model = neural.get_model(name, 0, tiny=True)
  x = jax.ShapeDtypeStruct((3, 16, 16, 3), jnp.float32)
  out = jax.eval_shape(model.apply, shapes(model, (16, 16, 3)), x)
  assert out.shape[0] == 3 and out.dtype == jnp.float32


# The CNN and the MLP run in the training tests; ResNet-18 shares ResNet-8's code (compiling
# it is slow on a 2-core CPU).
@pytest.mark.parametrize("name", ["vgg", "resnet8"])
def test_tiny_forward_pass_is_finite(name):
  model = neural.get_model(name, 5, tiny=True)
  variables = jax.jit(neural.training.init_variables, static_argnums=(0, 2))(
      model, jax.random.PRNGKey(0), (16, 16, 3))
  x = jnp.asarray(np.random.default_rng(0).random((2, 16, 16, 3)), dtype=jnp.float32)
  logits = jax.jit(model.apply)(variables, x)
  assert logits.shape == (2, 5) and np.all(np.isfinite(np.asarray(logits)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("width", [16, 3])
def test_cnn_parameter_count(shape, width):
  h, w, c = shape
  conv1 = 5 * 5 * c * width + width
  conv2 = 5 * 5 * width * (2 * width) + 2 * width
  dense = (h // 4) * (w // 4) * (2 * width) * 10 + 10   # two 2x2 pools, 'SAME' convs
  model = neural.get_model("cnn", 10, width=width)
  assert num_params(shapes(model, shape)) == (
      conv1 + conv2 + dense)


def test_paper_cnn_on_mnist_has_28938_parameters():
  # 5*5*1*16+16 + 5*5*16*32+32 + 7*7*32*10+10
  assert 5 * 5 * 1 * 16 + 16 + 5 * 5 * 16 * 32 + 32 + 7 * 7 * 32 * 10 + 10 == 28938
  model = neural.get_model("cnn", 10)
  assert num_params(shapes(model, (28, 28, 1))) == 28938


@pytest.mark.parametrize("shape", SHAPES)
def test_mlp_parameter_count(shape):
  d = int(np.prod(shape))
  expected = (d * 512 + 512) + (512 * 512 + 512) + (512 * 10 + 10)
  model = neural.get_model("mlp", 10)
  assert num_params(shapes(model, shape)) == expected


def test_tiny_mlp_parameter_count():
  d = 28 * 28
  expected = (d * 32 + 32) + (32 * 32 + 32) + (32 * 10 + 10)
  model = neural.get_model("mlp", 10, tiny=True)
  assert num_params(shapes(model, (28, 28, 1))) == expected


def _basic_block(c_in, c_out, norm):
  conv = lambda a, b, k: k * k * a * b
  gn = 2 * c_out   # GroupNorm scale and bias
  count = conv(c_in, c_out, 3) + gn + conv(c_out, c_out, 3) + gn
  if c_in != c_out:
    count += conv(c_in, c_out, 1) + gn
  return count


def test_resnet8_parameter_count_with_groupnorm():
  # stem conv + GN, blocks 16->16, 16->32, 32->64, dense 64->10
  w = 16
  expected = (3 * 3 * 3 * w + 2 * w + _basic_block(w, w, "group") + _basic_block(w, 2 * w, "group")
              + _basic_block(2 * w, 4 * w, "group") + 4 * w * 10 + 10)
  model = neural.get_model("resnet8", 10)
  assert num_params(shapes(model, (32, 32, 3))) == expected


def test_vgg16_has_thirteen_conv_layers_and_a_dense_head():
  model = neural.get_model("vgg", 10, width=2)
  params = shapes(model, (32, 32, 3))["params"]
  assert sum(name.startswith("Conv") for name in params) == 13
  assert sum(name.startswith("Dense") for name in params) == 1
  assert sum(name.startswith("GroupNorm") for name in params) == 13


def test_resnet18_has_eight_blocks():
  model = neural.get_model("resnet18", 10, width=2)
  params = shapes(model, (32, 32, 3))["params"]
  assert sum(name.startswith("BasicBlock") for name in params) == 8


def test_norm_none_has_no_groupnorm():
  model = neural.get_model("resnet8", 10, tiny=True, norm="none")
  params = shapes(model, (28, 28, 1))["params"]
  leaves = jax.tree_util.tree_leaves_with_path(params)
  assert not any("GroupNorm" in jax.tree_util.keystr(path) for path, _ in leaves)


def test_mlp_dropout_only_in_training():
  model = neural.get_model("mlp", 4, width=64)
  variables = neural.training.init_variables(model, jax.random.PRNGKey(0), (8, 8, 1))
  x = jnp.ones((5, 8, 8, 1), dtype=jnp.float32)
  a = model.apply(variables, x, train=False)
  assert np.array_equal(a, model.apply(variables, x, train=False))
  b = model.apply(variables, x, train=True, rngs={"dropout": jax.random.PRNGKey(1)})
  c = model.apply(variables, x, train=True, rngs={"dropout": jax.random.PRNGKey(2)})
  assert not np.allclose(b, c)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="lenet"), "name"),
    (dict(name="cnn", width=0), "width"),
    (dict(name="vgg", norm="batch"), "norm"),
    (dict(name="cnn", num_classes=-1), "num_classes"),
])
def test_bad_arguments_are_named(kwargs, match):
  kwargs = {"num_classes": 10, **kwargs}
  name = kwargs.pop("name")
  with pytest.raises(neural.models.ModelError, match=match):
    neural.get_model(name, **kwargs)


def test_vgg9_is_the_authors_cifar_model():
  """8 convs 32-64-128-128-256-256-256-256 (3x3, bias), 5 pools, dense 256 -> 10: 2,308,810."""
  model = neural.get_model("vgg9", 10, norm="none")
  variables = shapes(model, (32, 32, 3))
  channels = [3, 32, 64, 128, 128, 256, 256, 256, 256]
  convs = sum(9 * c_in * c_out + c_out for c_in, c_out in zip(channels, channels[1:]))
  assert num_params(variables) == convs + 256 * 10 + 10 == 2_308_810
  params = neural.training.init_variables(model, jax.random.PRNGKey(0), (32, 32, 3))["params"]
  kernel = np.asarray(params["Conv_7"]["kernel"])            # 3x3x256x256, fan-out 9 * 256
  assert abs(kernel.std() / np.sqrt(2 / (9 * 256)) - 1) < 0.02   # He normal on fan-out
  np.testing.assert_array_equal(params["Conv_7"]["bias"], 0.0)
