"""Kernels: values against scikit-learn / NumPy, PSD Gram matrices, vmap over hyper-parameters."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import pairwise

import fedkrr

RNG = np.random.default_rng(0)
X1 = RNG.normal(size=(7, 3))
X2 = RNG.normal(size=(5, 3))


@pytest.mark.parametrize("kernel, reference", [
    (fedkrr.Linear(), lambda a, b: pairwise.linear_kernel(a, b)),
    (fedkrr.Polynomial(degree=3, gamma=0.5, coef0=2.0),
     lambda a, b: pairwise.polynomial_kernel(a, b, degree=3, gamma=0.5, coef0=2.0)),
    (fedkrr.RBF(gamma=0.7), lambda a, b: pairwise.rbf_kernel(a, b, gamma=0.7)),
    # Euclidean-norm Laplace kernel (scikit-learn's laplacian_kernel uses the L1 norm).
    (fedkrr.Laplace(gamma=0.7),
     lambda a, b: np.exp(-0.7 * np.linalg.norm(a[:, None] - b[None], axis=-1))),
])
def test_kernel_values_match_reference(kernel, reference, x64, assert_close):
  assert_close(kernel(jnp.asarray(X1), jnp.asarray(X2)), reference(X1, X2))


@pytest.mark.parametrize("kernel", [fedkrr.Linear(), fedkrr.Polynomial(2, 1.0, 1.0),
                                    fedkrr.RBF(0.5), fedkrr.Laplace(0.5)])
def test_gram_is_symmetric_psd(kernel, x64):
  g = np.asarray(kernel(jnp.asarray(X1), jnp.asarray(X1)))
  np.testing.assert_allclose(g, g.T, atol=1e-12)
  assert np.linalg.eigvalsh(g)[0] > -1e-10


def test_kernels_vmap_over_hyperparameters(x64):
  gammas = jnp.array([0.1, 0.5, 2.0])
  batched = jax.vmap(lambda g: fedkrr.RBF(g)(X1, X2))(gammas)
  for i, g in enumerate(gammas):
    np.testing.assert_allclose(batched[i], fedkrr.RBF(float(g))(X1, X2), rtol=1e-12)


def test_laplace_gradient_is_finite_at_zero_distance(x64):
  grad = jax.grad(lambda x: fedkrr.Laplace(1.0)(x, x).sum())(jnp.asarray(X1))
  assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("spec", [
    {"name": "linear"}, {"name": "rbf", "gamma": 0.5}, {"name": "laplace", "gamma": 0.5},
    {"name": "polynomial", "degree": 2, "coef0": 1.0}])
def test_kernel_from_json_round_trip(spec):
  kernel = fedkrr.kernel_from_json(json.dumps(spec))
  again = fedkrr.kernel_from_dict(kernel.to_dict())
  assert type(again) is type(kernel)
  assert dataclasses.asdict(again) == dataclasses.asdict(kernel)
  for key, value in spec.items():
    if key != "name":
      assert getattr(kernel, key) == value


@pytest.mark.parametrize("spec, match", [
    ('{"name": "sigmoid"}', "unknown kernel 'sigmoid'"),
    ('{"gamma": 1}', 'expected an object with a "name" key'),
    ('{"name": "rbf", "gamma": -1}', "gamma must be a finite number > 0"),
    ('{"name": "rbf", "gamma": 0}', "gamma must be a finite number > 0"),
    ('{"name": "rbf", "sigma": 1}', "unexpected \\['sigma'\\]"),
    ('{"name": "polynomial", "degree": 0}', "degree must be an integer >= 1"),
    ('{"name": "polynomial", "degree": 1.5}', "degree must be an integer >= 1"),
    ('{"name": "polynomial", "coef0": -1}', "coef0 must be a finite number >= 0"),
    ('{"name": "rbf", "gamma": "big"}', "gamma must be a finite number"),
    ('{"name": "rbf", ', "not valid JSON"),
])
def test_bad_kernel_specs_name_the_problem(spec, match):
  with pytest.raises(fedkrr.KernelError, match=match):
    fedkrr.kernel_from_json(spec, "kernel_1")
