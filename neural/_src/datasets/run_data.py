"""The data of a run: the seeded train/test subsets, split among the agents.

Works for any config with the data fields of ``neural.RunConfig`` (``dataset``,
``data_dir``, ``train_subset``, ``test_subset``, ``partition`` and its
parameters, ``agents``, ``data_seed``): the KD experiments and the methods of the
other papers draw their data the same way.
"""

from __future__ import annotations

from typing import Any
from typing import NamedTuple

import numpy as np

from neural._src.datasets.data import load_dataset
from neural._src.datasets.data import one_hot
from neural._src.datasets.partitions import PartitionError
from neural._src.datasets.partitions import partition

# Per-channel (mean, std) of the authors' code (Afonin & Karimireddy), on [0, 1] inputs.
NORMALIZATION = {
    "mnist": ((0.1307,), (0.3081,)),
    "mnist-subset": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    # CINIC-10's README (its training set's channel means and stds).
    "cinic10": ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
}


def normalization(dataset: str, x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per-channel ``(mean, std)`` of ``normalize``: the authors' constants, else the data's own."""
  if dataset in NORMALIZATION:
    mean, std = NORMALIZATION[dataset]
  else:
    axes = tuple(range(x_train.ndim - 1))
    mean, std = np.mean(x_train, axis=axes), np.maximum(np.std(x_train, axis=axes), 1e-6)
  return np.asarray(mean, np.float32), np.asarray(std, np.float32)


class RunData(NamedTuple):
  """The data of a run: per-agent training sets and the test set.

  Attributes:
    xs: per agent, float32 inputs (N_a, H, W, C).
    ys: per agent, float32 one-hot targets (N_a, C).
    labels: per agent, int labels (N_a,).
    x_test: float32 (n_test, H, W, C).
    y_test: int labels (n_test,).
    num_classes: C.
    black: (C_in,) float32, what an input of 0 (a black pixel) is after the run's
      input standardisation: 0, or ``-mean / std`` with ``normalize`` (augmentation
      pads with it, as torchvision pads images before normalising them).
  """

  xs: tuple[np.ndarray, ...]
  ys: tuple[np.ndarray, ...]
  labels: tuple[np.ndarray, ...]
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  black: np.ndarray | None = None


def load_train_test(config: Any, rng: np.random.Generator | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
  """``(x_train, y_train, x_test, y_test, num_classes)`` with the config's seeded subsets.

  The training subset is drawn from ``rng`` (default ``default_rng(config.data_seed)``),
  the test subset from ``default_rng([config.data_seed, 1])``. With ``config.normalize``
  both are standardised per channel (:func:`normalization`).
  """
  return _train_test(config, rng)[:5]


def _train_test(config: Any, rng: np.random.Generator | None):
  """:func:`load_train_test` and the value of a black pixel after standardisation."""
  seed = config.data_seed
  rng = np.random.default_rng(seed) if rng is None else rng
  ds = load_dataset(config.dataset, config.data_dir, seed=seed)
  x_train, y_train = ds.x_train, ds.y_train
  if config.train_subset is not None and config.train_subset < len(y_train):
    keep = np.sort(rng.choice(len(y_train), size=config.train_subset, replace=False))
    x_train, y_train = x_train[keep], y_train[keep]
  x_test, y_test = ds.x_test, ds.y_test
  if config.test_subset is not None and config.test_subset < len(y_test):
    keep = np.sort(np.random.default_rng([seed, 1]).choice(
        len(y_test), size=config.test_subset, replace=False))
    x_test, y_test = x_test[keep], y_test[keep]
  x_test = np.asarray(x_test, np.float32)
  black = np.zeros(x_test.shape[-1:], np.float32)
  if getattr(config, "normalize", False):
    mean, std = normalization(config.dataset, np.asarray(x_train, np.float32))
    x_train = (np.asarray(x_train, np.float32) - mean) / std
    x_test = (x_test - mean) / std
    black = (black - mean) / std
  return x_train, y_train, x_test, np.asarray(y_test), ds.num_classes, black


def split_agents(config: Any, x_train: np.ndarray, y_train: np.ndarray, num_classes: int,
                 rng: np.random.Generator) -> tuple[tuple[np.ndarray, ...], ...]:
  """``(xs, ys, labels)`` per agent by the config's partition (one-hot float32 ``ys``).

  Raises:
    PartitionError: an agent got no training point.
  """
  parts = partition(config.partition, y_train, config.agents, rng, **config.partition_params)
  for a, idx in enumerate(parts):
    if len(idx) == 0:
      raise PartitionError(f"partition: agent {a} got no training points "
                           f"({config.partition} {config.partition_params}); use more data "
                           f"or another partition")
  xs = tuple(np.asarray(x_train[idx], np.float32) for idx in parts)
  labels = tuple(np.asarray(y_train[idx]) for idx in parts)
  return xs, tuple(one_hot(lab, num_classes) for lab in labels), labels


def load_run_data(config: Any) -> RunData:
  """Loads, subsets and partitions the data of ``config`` (all seeded by ``config.data_seed``)."""
  rng = np.random.default_rng(config.data_seed)
  x_train, y_train, x_test, y_test, num_classes, black = _train_test(config, rng)
  xs, ys, labels = split_agents(config, x_train, y_train, num_classes, rng)
  return RunData(xs, ys, labels, x_test, y_test, num_classes, black)
