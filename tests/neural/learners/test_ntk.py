"""Empirical NTK: brute-force Jacobians, batching, PSD, the infinite-width limit, fedkrr use."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
import neural
from neural._src.learners.ntk import ModelApply
from neural._src.learners.ntk import NTKError

INPUT_SHAPE = (2, 3, 1)


class NTKDense(nn.Module):
  """``sqrt(weight_var / fan_in) W x + sqrt(bias_var) b``, W, b ~ N(0, 1): NTK parametrisation."""

  features: int
  weight_var: float = 2.0
  bias_var: float = 0.1

  @nn.compact
  def __call__(self, x):
    w = self.param("kernel", nn.initializers.normal(1.0), (x.shape[-1], self.features))
    b = self.param("bias", nn.initializers.normal(1.0), (self.features,))
    return (math.sqrt(self.weight_var / x.shape[-1]) * (x @ w)
            + math.sqrt(self.bias_var) * b[None, :])


class NTKMLP(nn.Module):
  """The network of ``fedkrr.ReluNTK(depth, weight_var, bias_var)``: same layers, same variances."""

  width: int
  depth: int = 2
  num_outputs: int = 2

  @nn.compact
  def __call__(self, x, train=False):
    del train
    x = x.reshape((x.shape[0], -1))
    for _ in range(self.depth):
      x = nn.relu(NTKDense(self.width)(x))
    return NTKDense(self.num_outputs)(x)


@pytest.fixture(scope="module")
def mlp():
  """neural's MLP (standard parametrisation, images flattened), tiny; a CNN compiles 2x slower."""
  model = neural.get_model("mlp", 3, width=8)
  variables = jax.jit(neural.training.init_variables, static_argnums=(0, 2))(
      model, jax.random.PRNGKey(0), INPUT_SHAPE)
  rng = np.random.default_rng(0)
  x1 = rng.normal(size=(7,) + INPUT_SHAPE).astype(np.float32)
  x2 = rng.normal(size=(5,) + INPUT_SHAPE).astype(np.float32)
  return model, variables, x1, x2


@functools.partial(jax.jit, static_argnums=0)
def _jacobian(model, params, x):
  return jax.jacrev(lambda p: model.apply({"params": p}, x))(params)


def brute_force(model, params, x):
  """``(1/C) sum_c J_c(x_i) J_c(x_j)^T`` from the full Jacobian on all of ``x``, float64 NumPy."""
  leaves = [np.asarray(a, np.float64).reshape(x.shape[0], a.shape[1], -1)
            for a in jax.tree_util.tree_leaves(_jacobian(model, params, jnp.asarray(x)))]
  jac = np.concatenate(leaves, axis=-1)          # (n, C, P)
  return np.einsum("icp,jcp->ij", jac, jac) / jac.shape[1]


def standard_normal(shapes, seed):
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map(lambda s: jnp.asarray(rng.normal(size=s.shape), jnp.float32),
                                shapes)


@pytest.mark.parametrize("trained", [False, True])
def test_batched_equals_full_jacobian(mlp, trained):
  model, variables, x1, x2 = mlp
  params = variables["params"]
  if trained:   # any other parameters, e.g. after training
    params = jax.tree_util.tree_map(lambda a: np.asarray(a) * np.float32(1.3), params)
  expected = brute_force(model, params, np.concatenate([x1, x2]))[:7, 7:]
  # Blocks of 3 points do not divide 7 or 5: padded blocks are cut off.
  got = np.asarray(neural.training.empirical_ntk(ModelApply(model, INPUT_SHAPE), params, x1, x2,
                                        batch_size=3))
  assert got.shape == (7, 5) and got.dtype == np.float32
  np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5 * np.abs(expected).max())


def test_wide_mlp_approaches_the_analytic_ntk():
  """Relative error of the empirical NTK of NTKMLP at init vs fedkrr.ReluNTK, over widths.

  The error of one draw is O(1 / sqrt(width)); it is averaged over 3 seeds.
  """
  rng = np.random.default_rng(1)
  x = rng.normal(size=(6, 5)).astype(np.float32)
  analytic = np.asarray(fedkrr.ReluNTK(depth=2, weight_var=2.0, bias_var=0.1)(
      jnp.asarray(x, jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32),
      jnp.asarray(x)), np.float64)
  errors = []
  for width in (16, 128, 1024):
    model = NTKMLP(width)
    apply_fn = ModelApply(model, (5,))
    err = 0.0
    for seed in range(3):
      shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.asarray(x))["params"]
      params = standard_normal(shapes, seed)   # as model.init draws them
      gram = np.asarray(neural.training.empirical_ntk(apply_fn, params, x), np.float64)
      err += np.linalg.norm(gram - analytic) / np.linalg.norm(analytic) / 3
    errors.append(err)
  assert errors[0] > errors[1] > errors[2], errors
  assert errors[2] < 0.1, errors


def test_ntk_kernel_in_a_fedkrr_problem(mlp):
  """Flat inputs in the problem's dtype (float64 with x64: a float64 kernel), symmetric PSD."""
  model, variables, x1, _ = mlp
  kernel = neural.training.ntk_kernel(model, variables, INPUT_SHAPE, batch_size=3)
  assert isinstance(kernel, fedkrr.CustomKernel)
  xs = [x1[:4].reshape(4, -1), x1[3:].reshape(4, -1)]
  problem = fedkrr.make_problem(xs, [np.ones((4, 2)), np.zeros((4, 2))], kernel, ridge=1e-2)
  gram = np.asarray(problem.kernels[0](problem.xs[0], problem.xs[0]))
  cross = np.asarray(problem.kernels[1](problem.xs[0], problem.xs[1]))
  assert gram.dtype == cross.dtype == problem.ridge.dtype
  np.testing.assert_array_equal(gram, gram.T)
  assert np.linalg.eigvalsh(gram.astype(np.float64))[0] > -1e-6 * np.abs(gram).max()
  x = np.concatenate([x1, np.zeros((5,) + INPUT_SHAPE, np.float32)])   # the shape used above
  expected = brute_force(model, variables["params"], x)[:4, 3:7]
  np.testing.assert_allclose(cross, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
  np.testing.assert_allclose(gram[3], cross[:, 0], rtol=1e-4, atol=1e-5 * np.abs(gram).max())
  with pytest.raises(NTKError, match="x1: expected shape"):
    kernel(np.zeros((2, 5)), np.zeros((2, 5)))
  with pytest.raises(NTKError, match="batch_size"):
    neural.training.ntk_kernel(model, variables, INPUT_SHAPE, batch_size=0)


def test_neural_mlp_ntk_approaches_the_standard_parametrisation_kernel():
  """neural's MLP (Flax nn.Dense: weights 1/fan-in, zero biases) against
  fedkrr.ReluNTK / ReluNNGP(parametrization="standard", width=n): the empirical NTK and
  the read-out kernel <relu(h(x)), relu(h(x'))> + 1 approach them as n grows (the
  relative gap shrinks like n^-1/2: about 0.17 at n = 128, 0.02 at n = 8192 here)."""
  from neural._src.kd.compare import mlp_ntk
  x = np.random.default_rng(0).normal(size=(10, 16)).astype(np.float32)
  x64 = np.asarray(x, np.float64)
  gaps = {}
  for width in (128, 8192):
    ntk = fedkrr.ReluNTK(1, 1.0, 0.0, parametrization="standard", width=width)
    readout = fedkrr.ReluNNGP(1, 1.0, 0.0, parametrization="standard", width=width)
    ntk, readout = np.asarray(ntk(x64, x64)), np.asarray(readout(x64, x64))
    for seed in range(2):
      model = neural.models.MLP(3, width=width, depth=1, dropout=0.0)
      params = neural.training.init_variables(model, jax.random.PRNGKey(seed), (16,))["params"]
      emp = np.asarray(mlp_ntk(model, params, x, x), np.float64)
      hidden = np.maximum(x @ np.asarray(params["Dense_0"]["kernel"]), 0).astype(np.float64)
      gaps.setdefault(width, []).append(
          (np.linalg.norm(emp - ntk) / np.linalg.norm(ntk),
           np.linalg.norm(hidden @ hidden.T + 1 - readout) / np.linalg.norm(readout)))
  small, large = np.mean(gaps[128], axis=0), np.mean(gaps[8192], axis=0)
  assert np.all(large < 0.06) and np.all(large < 0.4 * small), (small, large)
