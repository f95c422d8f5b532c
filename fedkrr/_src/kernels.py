"""Positive semi-definite kernels with traced hyper-parameters.

Every kernel is a frozen dataclass registered as a JAX PyTree: its numeric
hyper-parameters are leaves (so they can be traced, differentiated and vmapped)
and nothing else is. Calling a kernel on two batches of points returns the raw
Gram matrix ``k(x1_i, x2_j)``; the scaling by the total number of points N of
the federated problem is applied by the problem, not by the kernel.

The parametrisations follow scikit-learn's ``pairwise_kernels`` (so that
``KernelRidge`` can serve as a reference), except the Laplace kernel, which uses
the Euclidean norm (the kernel of the ML-theory literature, positive definite in
every dimension); scikit-learn's ``laplacian_kernel`` uses the L1 norm.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import math
from typing import Any

import jax
from jax import lax
import jax.core
import jax.numpy as jnp

from fedkrr._src.io.reading import ReadError
from fedkrr._src.io.reading import parse_json
from fedkrr._src.linalg import full_matmul
from fedkrr._src.nn_kernels import PARAMETRIZATIONS
from fedkrr._src.nn_kernels import ReluNNGP
from fedkrr._src.nn_kernels import ReluNTK
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array


class KernelError(ValueError):
  """A kernel specification is invalid (unknown name, bad hyper-parameter)."""


def _sq_distances(x1: Array, x2: Array) -> Array:
  """Squared Euclidean distances, shape (n1, n2), clipped at 0."""
  sq1 = jnp.sum(x1 * x1, axis=-1)[:, None]
  sq2 = jnp.sum(x2 * x2, axis=-1)[None, :]
  return jnp.maximum(sq1 + sq2 - 2.0 * full_matmul(x1, x2.T), 0.0)


def _distances(x1: Array, x2: Array, budget: int = 1 << 25) -> Array:
  """Euclidean distances from direct differences, shape (n1, n2).

  Unlike ``sqrt(|x|^2 + |x'|^2 - 2 <x, x'>)``, which turns rounding errors of
  order eps into distances of order sqrt(eps) near zero, this is exact at zero
  distance. The (n1, n2, d) differences are formed in row batches of at most
  ``budget`` elements. The square root is safe: its gradient at 0 is 0, not NaN.
  """

  def safe_sqrt(sq):
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)

  n1, n2, d = x1.shape[0], x2.shape[0], x2.shape[1]
  if n1 * n2 * d <= budget:
    return safe_sqrt(jnp.sum((x1[:, None, :] - x2[None, :, :]) ** 2, axis=-1))
  row = lambda x: safe_sqrt(jnp.sum((x2 - x[None, :]) ** 2, axis=-1))  # noqa: E731
  return lax.map(row, x1, batch_size=max(1, budget // max(n2 * d, 1)))


@pytree_dataclass
class Linear:
  """Linear kernel ``k(x, x') = <x, x'>``."""

  def __call__(self, x1: Array, x2: Array) -> Array:
    return full_matmul(x1, x2.T)

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return {"name": "linear"}


@pytree_dataclass
class Polynomial:
  """Polynomial kernel ``k(x, x') = (gamma <x, x'> + coef0) ** degree``.

  ``degree`` is a positive integer (static: it is structure, not a number to
  vmap over); ``gamma > 0`` and ``coef0 >= 0`` keep the kernel positive
  semi-definite.
  """

  degree: int = dataclasses.field(default=2, metadata=dict(static=True))
  gamma: float | Array = 1.0
  coef0: float | Array = 1.0

  def __call__(self, x1: Array, x2: Array) -> Array:
    return (self.gamma * full_matmul(x1, x2.T) + self.coef0) ** self.degree

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return {"name": "polynomial", "degree": self.degree,
            "gamma": float(self.gamma), "coef0": float(self.coef0)}


@pytree_dataclass
class RBF:
  """Gaussian kernel ``k(x, x') = exp(-gamma ||x - x'||^2)``, ``gamma > 0``."""

  gamma: float | Array = 1.0

  def __call__(self, x1: Array, x2: Array) -> Array:
    return jnp.exp(-self.gamma * _sq_distances(x1, x2))

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return {"name": "rbf", "gamma": float(self.gamma)}


@pytree_dataclass
class Laplace:
  """Laplace kernel ``k(x, x') = exp(-gamma ||x - x'||_2)``, ``gamma > 0``."""

  gamma: float | Array = 1.0

  def __call__(self, x1: Array, x2: Array) -> Array:
    return jnp.exp(-self.gamma * _distances(x1, x2))

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return {"name": "laplace", "gamma": float(self.gamma)}


@pytree_dataclass
class CustomKernel:
  """Wraps a user callable ``fn(x1, x2) -> Gram matrix`` as a PyTree kernel.

  The callable is static (part of the tree structure), so a problem holding it
  can be jitted. :func:`fedkrr.make_problem` checks on each agent's data that
  its Gram matrix is symmetric positive semi-definite.
  """

  fn: Callable[[Array, Array], Array] = dataclasses.field(metadata=dict(static=True))

  def __call__(self, x1: Array, x2: Array) -> Array:
    return jnp.asarray(self.fn(x1, x2))

  def to_dict(self) -> dict[str, Any]:
    """Names the kernel's function (for reports: a custom kernel cannot be read back)."""
    return {"name": "custom", "fn": getattr(self.fn, "__name__", repr(self.fn))}


Kernel = Linear | Polynomial | RBF | Laplace | ReluNNGP | ReluNTK | CustomKernel

BUILTIN_KERNELS: Mapping[str, type] = {
    "linear": Linear,
    "polynomial": Polynomial,
    "rbf": RBF,
    "laplace": Laplace,
    "relu_nngp": ReluNNGP,
    "relu_ntk": ReluNTK,
}


def _check_positive(where: str, name: str, value: Any) -> None:
  if isinstance(value, jax.core.Tracer):
    return
  v = jnp.asarray(value)
  if not bool(jnp.all(jnp.isfinite(v))) or not bool(jnp.all(v > 0)):
    raise KernelError(f"{where}: {name} must be a finite number > 0, got {value!r}")


def as_kernel(kernel: Any, where: str = "kernel") -> Kernel:
  """Validates a kernel and wraps a plain callable into :class:`CustomKernel`.

  Raises:
    KernelError: naming ``where`` and what was expected.
  """
  validate_kernel(kernel, where)
  if isinstance(kernel, tuple(BUILTIN_KERNELS.values()) + (CustomKernel,)):
    return kernel
  return CustomKernel(kernel)


# The deepest ReLU NNGP / NTK kernel: the recursion is unrolled layer by layer in the
# compiled program, so a depth of 10^9 would build (and hang on) a program of 10^9 steps.
MAX_RELU_DEPTH = 1000


def validate_kernel(kernel: Any, where: str = "kernel") -> None:
  """Checks a built-in kernel's hyper-parameters; callables are checked on data.

  Raises:
    KernelError: naming ``where`` and what was expected.
  """
  if isinstance(kernel, (RBF, Laplace)):
    _check_positive(where, "gamma", kernel.gamma)
  elif isinstance(kernel, Polynomial):
    if not isinstance(kernel.degree, int) or isinstance(kernel.degree, bool) or kernel.degree < 1:
      raise KernelError(f"{where}: degree must be an integer >= 1, got {kernel.degree!r}")
    _check_positive(where, "gamma", kernel.gamma)
    if not isinstance(kernel.coef0, jax.core.Tracer):
      c0 = jnp.asarray(kernel.coef0)
      if not bool(jnp.all(jnp.isfinite(c0))) or not bool(jnp.all(c0 >= 0)):
        raise KernelError(
            f"{where}: coef0 must be a finite number >= 0 (a negative offset does not "
            f"give a positive semi-definite kernel), got {kernel.coef0!r}")
  elif isinstance(kernel, (ReluNNGP, ReluNTK)):
    if (not isinstance(kernel.depth, int) or isinstance(kernel.depth, bool)
        or not 0 <= kernel.depth <= MAX_RELU_DEPTH):
      raise KernelError(f"{where}: depth must be an integer in 0..{MAX_RELU_DEPTH} (each "
                        f"layer is one step of the compiled recursion), got {kernel.depth!r}")
    _check_positive(where, "weight_var", kernel.weight_var)
    if kernel.parametrization not in PARAMETRIZATIONS:
      raise KernelError(f"{where}: parametrization must be one of {PARAMETRIZATIONS}, "
                        f"got {kernel.parametrization!r}")
    if kernel.parametrization == "standard" and (
        not isinstance(kernel.width, int) or isinstance(kernel.width, bool) or kernel.width < 1):
      raise KernelError(f"{where}: width must be the hidden width, an integer >= 1, in the "
                        f"standard parametrisation, got {kernel.width!r}")
    if not isinstance(kernel.bias_var, jax.core.Tracer):
      b = jnp.asarray(kernel.bias_var)
      if not bool(jnp.all(jnp.isfinite(b))) or not bool(jnp.all(b >= 0)):
        raise KernelError(f"{where}: bias_var must be a finite number >= 0, "
                          f"got {kernel.bias_var!r}")
  elif isinstance(kernel, (Linear, CustomKernel)):
    pass
  elif not callable(kernel):
    raise KernelError(
        f"{where}: expected a kernel (fedkrr.RBF(...), fedkrr.Linear(), ... or a "
        f"callable k(x1, x2) -> Gram matrix), got {type(kernel).__name__}")


def kernel_from_dict(spec: Mapping[str, Any], where: str = "kernel") -> Any:
  """Builds a kernel from a dict such as ``{"name": "rbf", "gamma": 0.5}``."""
  if not isinstance(spec, Mapping) or "name" not in spec:
    raise KernelError(f'{where}: expected an object with a "name" key, got {spec!r}')
  name = spec["name"]
  if name not in BUILTIN_KERNELS:
    raise KernelError(
        f"{where}: unknown kernel {name!r}; expected one of {sorted(BUILTIN_KERNELS)}")
  cls = BUILTIN_KERNELS[name]
  allowed = {f.name for f in dataclasses.fields(cls)}
  params = {k: v for k, v in spec.items() if k != "name"}
  unknown = sorted(set(params) - allowed)
  if unknown:
    raise KernelError(
        f"{where}: kernel {name!r} takes {sorted(allowed) or 'no parameters'}, "
        f"got unexpected {unknown}")
  for key, value in params.items():
    if key == "parametrization":
      if value not in PARAMETRIZATIONS:
        raise KernelError(f"{where}: parametrization must be one of {PARAMETRIZATIONS}, "
                          f"got {value!r}")
    elif key == "width" and value is None:
      pass
    elif key in ("degree", "depth", "width"):
      if not isinstance(value, int) or isinstance(value, bool):
        if isinstance(value, float) and value.is_integer():
          value = int(value)
        else:
          least = 0 if key == "depth" else 1
          raise KernelError(f"{where}: {key} must be an integer >= {least}, got {value!r}")
      params[key] = value
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise KernelError(f"{where}: {key} must be a finite number, got {value!r}")
    else:
      params[key] = float(value)
  kernel = cls(**params)
  validate_kernel(kernel, where)
  return kernel


def kernel_from_json(text: str, where: str = "kernel") -> Any:
  """Builds a kernel from a JSON string such as ``'{"name": "linear"}'``."""
  try:
    spec = parse_json(text, where, max_depth=8)
  except ReadError as e:
    raise KernelError(f"{e} in {text[:80]!r}") from None
  return kernel_from_dict(spec, where)
