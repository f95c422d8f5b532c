"""The federated kernel ridge regression problem and its validation.

Conventions (DESIGN.md; Afonin & Karimireddy, Sec. 3): agents a = 0..M-1 hold
``(X_a, y_a)`` with ``N_a`` points, ``N = sum_a N_a``; agent a has its own
kernel ``k_a``; every Gram block is scaled by the total ``N``:
``K^a[X, X'] = k_a(X, X') / N``. Labels are a vector (N_a,) or a matrix
(N_a, C); every formula acts column-wise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import kernels as kernels_lib
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


class ProblemError(ValueError):
  """Invalid input to a federated problem; the message names the argument."""


@pytree_dataclass
class FederatedProblem:
  """M agents' data, their kernels and the ridge constant c >= 0.

  Build it with :func:`make_problem`, which validates the input. The problem is
  a PyTree (inputs, labels, kernel hyper-parameters and the ridge are leaves),
  so functions of it can be jitted and vmapped over ``ridge`` or kernel
  hyper-parameters (``dataclasses.replace(problem, ridge=c)``).

  Attributes:
    xs: per-agent inputs, ``xs[a]`` of shape (N_a, d).
    ys: per-agent labels, ``ys[a]`` of shape (N_a,) or (N_a, C).
    kernels: per-agent kernels ``k_a``.
    ridge: the regularisation constant c >= 0 (a scalar).
  """

  xs: tuple[Array, ...]
  ys: tuple[Array, ...]
  kernels: tuple[Any, ...]
  ridge: Array

  @property
  def num_agents(self) -> int:
    """The number of agents M."""
    return len(self.xs)

  @property
  def sizes(self) -> tuple[int, ...]:
    """Each agent's number of training points."""
    return tuple(int(x.shape[0]) for x in self.xs)

  @property
  def num_points(self) -> int:
    """The total number of points N that scales every Gram block."""
    return sum(self.sizes)

  @property
  def offsets(self) -> tuple[int, ...]:
    """Start index of each agent's block in the stacked (N,) ordering."""
    return tuple(int(o) for o in np.cumsum((0,) + self.sizes[:-1]))

  def gram(self, kernel_of: int, x1: ArrayLike, x2: ArrayLike) -> Array:
    """``k_a(x1, x2) / N`` with ``a = kernel_of``, shape (n1, n2), in the problem's dtype."""
    dtype = self.ridge.dtype
    x1, x2 = jnp.asarray(x1, dtype), jnp.asarray(x2, dtype)
    return (self.kernels[kernel_of](x1, x2) / self.num_points).astype(dtype)

  def pooled_x(self) -> Array:
    """All agents' inputs stacked in agent order (the centralised problem's inputs)."""
    return jnp.concatenate(self.xs, axis=0)

  def pooled_y(self) -> Array:
    """All agents' targets stacked in agent order (the centralised problem's targets)."""
    return jnp.concatenate(self.ys, axis=0)


def _as_float_array(value: Any, name: str, dtype) -> Array:
  try:
    arr = np.asarray(value)
  except Exception as e:  # noqa: BLE001 - any conversion failure is a bad argument
    raise ProblemError(
        f"{name}: expected a numeric array, got {type(value).__name__} ({e})") from None
  if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
    raise ProblemError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
  if np.iscomplexobj(arr):
    raise ProblemError(f"{name}: expected real numbers, got complex dtype {arr.dtype}")
  if not np.all(np.isfinite(arr)):
    bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
    raise ProblemError(f"{name}: contains {bad} NaN or infinite value(s)")
  return jnp.asarray(arr, dtype=dtype)


def _check_gram(problem: FederatedProblem, a: int, where: str) -> None:
  """A user-supplied callable must give a symmetric PSD Gram matrix on X_a."""
  x = problem.xs[a]
  try:
    g = np.asarray(problem.kernels[a](x, x), dtype=np.float64)
  except Exception as e:  # noqa: BLE001
    raise kernels_lib.KernelError(f"{where}: calling the kernel on xs[{a}] failed: {e}") from e
  n = x.shape[0]
  if g.shape != (n, n):
    raise kernels_lib.KernelError(
        f"{where}: k(xs[{a}], xs[{a}]) must have shape ({n}, {n}), got {g.shape}")
  if not np.all(np.isfinite(g)):
    raise kernels_lib.KernelError(f"{where}: the Gram matrix on xs[{a}] has NaN or inf entries")
  scale = max(float(np.max(np.abs(g))), 1e-300)
  tol = 1e-6 * scale if problem.ridge.dtype == jnp.float32 else 1e-9 * scale
  asym = float(np.max(np.abs(g - g.T)))
  if asym > tol:
    raise kernels_lib.KernelError(
        f"{where}: not a kernel: its Gram matrix on xs[{a}] is not symmetric "
        f"(max |K - K^T| = {asym:.3g})")
  lam_min = float(np.linalg.eigvalsh(0.5 * (g + g.T))[0])
  if lam_min < -n * tol:
    raise kernels_lib.KernelError(
        f"{where}: not a kernel: its Gram matrix on xs[{a}] is not positive "
        f"semi-definite (smallest eigenvalue {lam_min:.3g})")


def make_problem(xs: Sequence[Any], ys: Sequence[Any], kernels: Any, ridge: float,
                 dtype=None) -> FederatedProblem:
  """Validates M agents' data and returns a :class:`FederatedProblem`.

  Args:
    xs: M arrays, ``xs[a]`` of shape (N_a, d) with the same d for all agents.
    ys: M arrays, ``ys[a]`` of shape (N_a,) or (N_a, C), all of the same ndim and C.
    kernels: one kernel for all agents, or a sequence of M kernels.
    ridge: the regularisation constant c >= 0.
    dtype: floating dtype; default float64 if x64 is enabled, else float32.

  Returns:
    The validated problem, arrays converted to ``dtype``.

  Raises:
    ProblemError: an argument has the wrong shape, NaN/inf, fewer than two
      agents, an agent with no points, or a negative ridge.
    KernelError: a kernel is not a kernel (unknown, bad hyper-parameters,
      or a callable whose Gram matrix is not symmetric positive semi-definite).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> p = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=0.5), ridge=1e-3)
    >>> p.num_agents, p.sizes
    (2, (4, 4))
  """
  if dtype is None:
    dtype = jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32
  if isinstance(xs, (np.ndarray, jax.Array)) or isinstance(ys, (np.ndarray, jax.Array)):
    raise ProblemError("xs, ys: expected a list with one array per agent, got a single array")
  xs, ys = list(xs), list(ys)
  if len(xs) < 2:
    raise ProblemError(f"xs: a federated problem needs at least 2 agents, got {len(xs)}")
  if len(ys) != len(xs):
    raise ProblemError(f"ys: expected one label array per agent ({len(xs)}), got {len(ys)}")
  m = len(xs)
  if isinstance(kernels, (list, tuple)):
    kernels = tuple(kernels)
    if len(kernels) != m:
      raise ProblemError(f"kernels: expected one kernel per agent ({m}), got {len(kernels)}")
  else:
    kernels = (kernels,) * m
  kernels = tuple(kernels_lib.as_kernel(k, f"kernels[{a}]") for a, k in enumerate(kernels))

  c = check_nonnegative(ridge, "ridge")

  x_arrays, y_arrays = [], []
  for a in range(m):
    x = _as_float_array(xs[a], f"xs[{a}]", dtype)
    if x.ndim != 2:
      raise ProblemError(
          f"xs[{a}]: expected shape (N_{a}, d), got {x.shape}"
          + (" (reshape a 1-D input with x.reshape(-1, 1))" if x.ndim == 1 else ""))
    if x.shape[0] == 0:
      raise ProblemError(f"xs[{a}]: agent {a} has no points")
    if x.shape[1] != _first_dim(x_arrays, x):
      raise ProblemError(
          f"xs[{a}]: expected {x_arrays[0].shape[1]} features like xs[0], got {x.shape[1]}")
    y = _as_float_array(ys[a], f"ys[{a}]", dtype)
    if y.ndim not in (1, 2) or y.shape[0] != x.shape[0]:
      raise ProblemError(
          f"ys[{a}]: expected shape ({x.shape[0]},) or ({x.shape[0]}, C) to match "
          f"xs[{a}], got {y.shape}")
    if y_arrays and y.shape[1:] != y_arrays[0].shape[1:]:
      raise ProblemError(
          f"ys[{a}]: expected trailing shape {y_arrays[0].shape[1:]} like ys[0], "
          f"got {y.shape[1:]}")
    x_arrays.append(x)
    y_arrays.append(y)

  problem = FederatedProblem(tuple(x_arrays), tuple(y_arrays), kernels,
                             jnp.asarray(c, dtype=dtype))
  for a, k in enumerate(kernels):
    if isinstance(k, kernels_lib.CustomKernel):
      _check_gram(problem, a, f"kernels[{a}]")
  return problem


def check_nonnegative(value: Any, name: str) -> float:
  """``value`` as a float; ``ProblemError`` naming ``name`` unless a finite number >= 0."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    raise ProblemError(f"{name}: expected a number >= 0, got {value!r}") from None
  if not np.isfinite(number) or number < 0:
    raise ProblemError(f"{name}: expected a finite number >= 0, got {value!r}")
  return number


def _first_dim(previous: list, x: Array) -> int:
  return previous[0].shape[1] if previous else x.shape[1]


def check_eval_points(problem: FederatedProblem, x_eval: Any, name: str = "x_eval") -> Array:
  """Validates evaluation points: shape (n, d) with the problem's d, finite."""
  x = _as_float_array(x_eval, name, problem.ridge.dtype)
  d = problem.xs[0].shape[1]
  if x.ndim != 2 or x.shape[1] != d:
    raise ProblemError(f"{name}: expected shape (n, {d}), got {x.shape}")
  return x
