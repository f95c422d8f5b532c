"""The one mean squared error of fedkrr's reports (the toy experiment, public distillation,
the closed-form demo)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def mean_squared_error(pred: Any, target: Any) -> Any:
  """``mean((pred - target)^2)`` over the target's axes, aligned to ``pred``'s last ones.

  ``target`` (n,) or (n, C) broadcasts against ``pred`` (..., n) or (..., n, C): the
  result has ``pred``'s leading axes (one error per round, agent, ...). NumPy arrays
  give a NumPy float64 result; JAX arrays (traced too) a JAX one.
  """
  xp = np if isinstance(pred, np.ndarray) and isinstance(target, np.ndarray) else jnp
  axes = tuple(range(pred.ndim - target.ndim, pred.ndim))
  diff = pred - xp.broadcast_to(target, pred.shape)   # explicit: no implicit rank promotion
  return xp.mean(diff * diff, axis=axes)
