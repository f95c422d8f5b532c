"""The one FedAvg average (FedAvg, MHD's and representation sharing's baselines)."""

import ast
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural._src.learners.fedavg import FedAvgError
from neural._src.learners.fedavg import average
from neural._src.learners.fedavg import stack


def test_average_is_the_weighted_sum_within_float32_rounding():
  rng = np.random.default_rng(0)
  for m in (1, 2, 5, 10):
    tree = {"w": rng.standard_normal((m, 7, 3)).astype(np.float32),
            "b": rng.standard_normal((m, 3)).astype(np.float32)}
    sizes = rng.integers(1, 500, m)
    weights = sizes / sizes.sum()
    out = average(tree, weights)
    for name, leaf in tree.items():
      exact = np.tensordot(weights, leaf.astype(np.float64), axes=1)
      assert out[name].shape == leaf.shape[1:] and out[name].dtype == jnp.float32
      # m rounded products and sums: within m + 1 float32 ulps of the largest term
      bound = (m + 1) * np.finfo(np.float32).eps * np.max(np.abs(leaf), axis=0)
      assert np.all(np.abs(np.asarray(out[name], np.float64) - exact) <= bound)


def test_average_of_stacked_trees_weights_each_agent():
  trees = [{"w": jnp.ones(2, jnp.float32)}, {"w": 3 * jnp.ones(2, jnp.float32)}]
  out = average(stack(trees), [0.25, 0.75])
  np.testing.assert_array_equal(out["w"], [2.5, 2.5])
  assert out["w"].dtype == jnp.float32


def test_average_refuses_weights_that_do_not_match_the_agents():
  tree = {"w": np.ones((3, 2), np.float32)}
  with pytest.raises(FedAvgError, match="stacked: expected leaves with a leading axis of 2"):
    average(tree, [0.5, 0.5])
  with pytest.raises(FedAvgError, match="weights: expected a vector of finite non-negative"):
    average(tree, [0.5, np.nan, 0.5])
  with pytest.raises(FedAvgError, match="weights: expected a vector of finite non-negative"):
    average(tree, [1.5, -0.25, -0.25])


def test_every_fedavg_baseline_uses_the_one_average():
  """MHD's and representation sharing's FedAvg call ``fedavg.average``; no other copy."""
  root = Path(neural.__file__).parent / "_src"
  for path in (root / "methods" / "mhd.py", root / "methods" / "representation_sharing.py"):
    tree = ast.parse(path.read_text())
    imported = {(node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert ("neural._src.learners.fedavg", "average") in imported, path.name
    called = {node.func.attr for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert "tensordot" not in called, f"{path.name} averages parameters itself"
