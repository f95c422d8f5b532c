"""Seeded synthetic federated regression problems (for the demo, tests and benchmarks)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SyntheticData(NamedTuple):
  xs: list[np.ndarray]      # per-agent inputs (N_a, d)
  ys: list[np.ndarray]      # per-agent targets (N_a,) or (N_a, C)
  x_test: np.ndarray        # (n_test, d)
  y_test: np.ndarray        # noiseless targets at x_test


def _target(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  return np.sin(x @ w) + 0.5 * np.cos(2.0 * x[:, :1] @ np.ones((1, w.shape[1])))


def synthetic_regression(seed: int, sizes: tuple[int, ...] = (60, 40), dim: int = 2,
                         heterogeneity: float = 1.0, noise: float = 0.1, outputs: int = 0,
                         n_test: int = 200) -> SyntheticData:
  """Agents whose inputs sit in different regions of a shared smooth regression task.

  Agent a draws its inputs from ``N(mu_a, I)``, with the means spread by
  ``heterogeneity`` along the first axis (0: i.i.d. agents); every agent sees
  the same target function plus Gaussian noise. Test points cover all agents.

  Args:
    seed: the integer seed (the same seed gives the same data).
    sizes: the number of points of each agent (at least 2 agents).
    dim: the input dimension d.
    heterogeneity: distance between neighbouring agents' input means.
    noise: the standard deviation of the label noise.
    outputs: 0 for vector labels (N_a,), C > 0 for matrix labels (N_a, C).
    n_test: the number of test points.
  """
  if len(sizes) < 2 or min(sizes) < 1:
    raise ValueError(f"sizes: expected at least 2 positive agent sizes, got {sizes}")
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(dim, max(outputs, 1))) / np.sqrt(dim)
  m = len(sizes)
  centres = (np.arange(m) - (m - 1) / 2.0) * heterogeneity
  xs, ys = [], []
  for a, n in enumerate(sizes):
    x = rng.normal(size=(n, dim))
    x[:, 0] += centres[a]
    y = _target(x, w) + noise * rng.normal(size=(n, max(outputs, 1)))
    xs.append(x)
    ys.append(y if outputs else y[:, 0])
  x_test = rng.normal(size=(n_test, dim))
  x_test[:, 0] += rng.choice(centres, size=n_test)
  y_test = _target(x_test, w)
  return SyntheticData(xs, ys, x_test, y_test if outputs else y_test[:, 0])
