"""The data of a run (``neural._src.datasets.run_data``): seeded subsets and the split among
agents."""

import types

import numpy as np
import pytest

import neural


def _config(**changes):
  return neural.ExperimentConfig(**{**dict(models=("mlp",), train_subset=200, test_subset=50,
                                           partition="label-split", alpha=0.0), **changes})


def test_the_split_is_disjoint_covers_the_subset_and_follows_data_seed():
  config = _config(data_seed=3)
  data = neural.load_run_data(config)
  assert sum(len(lab) for lab in data.labels) == 200 and len(data.y_test) == 50
  for ys, labels in zip(data.ys, data.labels):
    np.testing.assert_array_equal(np.argmax(ys, axis=1), labels)
  # alpha = 0: disjoint label groups
  assert not set(data.labels[0].tolist()) & set(data.labels[1].tolist())
  again = neural.load_run_data(config.replace(init_seed=8))
  for a in range(2):
    np.testing.assert_array_equal(again.xs[a], data.xs[a])
  other = neural.load_run_data(config.replace(data_seed=4))
  assert not np.array_equal(other.x_test, data.x_test)


def test_an_agent_without_points_is_a_partition_error_naming_it():
  # Any object with the data fields will do: the KD experiments and the methods share this.
  config = types.SimpleNamespace(partition="iid", agents=3,
                                 partition_params={"proportions": (0.98, 0.01, 0.01)})
  x, y = np.zeros((3, 8, 8, 1), np.float32), np.array([0, 1, 2])
  with pytest.raises(neural.data.PartitionError, match="no (training )?points"):
    neural.data.split_agents(config, x, y, 10, np.random.default_rng(0))


def test_normalize_standardises_with_the_authors_constants_or_the_datas_own():
  config = _config(dataset="mnist-subset", normalize=True)
  raw = neural.load_run_data(config.replace(normalize=False))
  data = neural.load_run_data(config)
  np.testing.assert_allclose(data.xs[0], (raw.xs[0] - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(data.x_test, (raw.x_test - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)
  digits = neural.load_run_data(_config(normalize=True))   # no published constants: its own
  pooled = np.concatenate(digits.xs)
  assert abs(float(pooled.mean())) < 1e-4 and abs(float(pooled.std()) - 1) < 1e-3
