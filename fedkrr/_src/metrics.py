"""The errors fedkrr reports, each written once: the mean squared error (the toy
experiment, public distillation, the closed-form demo) and the relative error of every
exact comparison (``fedkrr verify``, the search's claims and their replays)."""

from __future__ import annotations

from typing import Any

import jax
import jax.core
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


def relative_error(a: Any, b: Any) -> Any:
  """``max |a - b| / max |b|`` (``max |b|`` floored at 1e-300): the residual of an exact
  comparison.

  Traced arrays (inside ``jit``, ``vmap``, ``grad``: the search's objectives) give a
  traced scalar in their dtype; anything else is compared in NumPy float64 and gives a
  Python float (``fedkrr verify`` and the replays, whatever the dtype of their routes).
  The two agree to the bit on float64 inputs (a subtraction, absolute values, maxima and
  one division).
  """
  if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
    return jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1e-300)
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
