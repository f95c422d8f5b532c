"""A random-forest learner: the paper's non-gradient agent (App. H.4, MLP + random forest).

scikit-learn's ``RandomForestRegressor`` on flattened inputs, one multi-output
regression on the soft targets (n, C). A regression tree predicts the mean of
the targets in a leaf and the forest averages its trees, so every prediction is
a convex combination of training targets: with one-hot (or probability) targets
the predicted rows are non-negative and sum to 1.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.ensemble import RandomForestRegressor

from neural._src.choices import MAX_FOREST_TREES

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


class ForestError(ValueError):
  """A bad forest setting or data of the wrong shape."""


@dataclasses.dataclass(frozen=True, eq=False)
class ForestModel:
  """A fitted forest: ``predict(x)`` gives (n, C) float32 predictions."""

  forest: RandomForestRegressor
  num_outputs: int

  def predict(self, x: ArrayLike) -> Array:
    """The forest's predictions at ``x`` (flattened per example), shape ``(n, num_outputs)``."""
    x = np.asarray(x, dtype=np.float32)
    out = self.forest.predict(x.reshape(x.shape[0], -1))
    return jnp.asarray(np.reshape(out, (x.shape[0], self.num_outputs)), dtype=jnp.float32)


@dataclasses.dataclass(frozen=True)
class ForestLearner:
  """Random-forest regression on flattened inputs and soft targets (App. H.4).

  Attributes:
    n_estimators: number of trees.
    max_depth: maximum tree depth (``None``: grow until leaves are pure).
    seed: the forest's ``random_state``; :meth:`with_key` derives it from a PRNG key.
    n_jobs: scikit-learn's parallelism (the result does not depend on it).

  Example:
    >>> ds = neural.load_dataset("digits", test_fraction=0.25)
    >>> learner = neural.ForestLearner(n_estimators=20, seed=0)
    >>> model = learner.fit(ds.x_train[:200], neural.data.one_hot(ds.y_train[:200], 10))
    >>> model.predict(ds.x_test).shape   # (n_test, 10)
    (450, 10)
  """

  n_estimators: int = 100
  max_depth: int | None = None
  seed: int = 0
  n_jobs: int | None = None

  def __post_init__(self):
    def whole(value: Any) -> bool:
      return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))

    if not whole(self.n_estimators) or not 1 <= self.n_estimators <= MAX_FOREST_TREES:
      raise ForestError(f"n_estimators: expected an integer in 1..{MAX_FOREST_TREES}, got "
                        f"{self.n_estimators!r}")
    if self.max_depth is not None and (not whole(self.max_depth) or self.max_depth < 1):
      raise ForestError(f"max_depth: expected None or a positive int, got {self.max_depth!r}")

  def with_key(self, key: Array) -> ForestLearner:
    """The same learner with ``seed`` drawn from a PRNG key (one per round and agent)."""
    seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
    return dataclasses.replace(self, seed=seed)

  def fit(self, x: ArrayLike, targets: ArrayLike) -> ForestModel:
    """Fits the forest on ``x`` (n, ...) flattened to (n, d) and ``targets`` (n, C)."""
    x = np.asarray(x, dtype=np.float32)
    targets = np.asarray(targets, dtype=np.float32)
    if targets.ndim != 2 or targets.shape[0] != x.shape[0]:
      raise ForestError(f"targets: expected shape ({x.shape[0]}, C), got {targets.shape}")
    forest = RandomForestRegressor(n_estimators=int(self.n_estimators), max_depth=self.max_depth,
                                   random_state=int(self.seed), n_jobs=self.n_jobs)
    forest.fit(x.reshape(x.shape[0], -1), targets)
    return ForestModel(forest, targets.shape[1])
