"""The project's dataclass PyTrees: distinct classes never share a tree structure.

Regression test: with ``jax.tree_util.register_dataclass``, ``RBF(gamma)`` and
``Laplace(gamma)`` had structures that compared equal (while hashing
differently), so jit caches could run a Laplace learner with the program
compiled for an RBF learner in some processes (a flaky, order-dependent failure
of the closed-form-vs-runner tests).
"""

import itertools

import jax
import jax.numpy as jnp

import fedkrr

KERNELS = [fedkrr.RBF(0.5), fedkrr.Laplace(0.5), fedkrr.Linear(), fedkrr.Polynomial(2),
           fedkrr.Polynomial(3), fedkrr.CustomKernel(lambda a, b: a @ b.T)]


def test_different_kernels_have_different_structures():
  for k1, k2 in itertools.combinations(KERNELS, 2):
    s1, s2 = jax.tree_util.tree_structure(k1), jax.tree_util.tree_structure(k2)
    assert s1 != s2, (k1, k2)


def test_learners_with_different_kernels_have_different_structures():
  c, n = jnp.asarray(0.1), jnp.asarray(10.0)
  for k1, k2 in itertools.combinations(KERNELS, 2):
    assert (jax.tree_util.tree_structure(fedkrr.KRRLearner(k1, c, n))
            != jax.tree_util.tree_structure(fedkrr.KRRLearner(k2, c, n)))


def test_equal_structures_for_equal_classes_and_static_fields():
  assert (jax.tree_util.tree_structure(fedkrr.RBF(0.1))
          == jax.tree_util.tree_structure(fedkrr.RBF(2.0)))


def test_flatten_unflatten_round_trip_keeps_fields_and_paths():
  kernel = fedkrr.Polynomial(degree=3, gamma=0.5, coef0=2.0)
  leaves, structure = jax.tree_util.tree_flatten(kernel)
  assert leaves == [0.5, 2.0]
  assert jax.tree_util.tree_unflatten(structure, leaves) == kernel
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(kernel)[0]]
  assert paths == [".gamma", ".coef0"]
