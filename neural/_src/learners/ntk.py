"""The empirical neural tangent kernel of a Flax model, in memory-bounded batches.

For a network ``f(x; theta)`` with C output logits, the empirical NTK is the
C x C matrix-valued kernel ``Theta_cc'(x, x') = <df_c(x)/dtheta, df_c'(x')/dtheta>``
(Jacot et al. 2018, eq. 2; Lee et al. 2019, eq. 3). ``fedkrr`` applies one
scalar kernel to every label column, so we use its trace over the logits,

    k(x, x') = (1 / C) sum_c sum_theta df_c(x)/dtheta  df_c(x')/dtheta,

as neural-tangents does with ``trace_axes=(-1,)``. In the infinite-width
limit the matrix-valued kernel is ``k(x, x') I_C`` (no cross-logit terms,
the same kernel for every logit), so nothing is lost there; at finite width
the trace keeps the per-logit kernels' mean and drops the cross-logit terms
(see :class:`neural.LinearizedLearner` for what that means for training).

The kernel is computed block by block: for a block of at most ``batch_size``
rows of ``x1`` and each logit c, the per-example gradients of ``f_c`` on that
block are formed once (one ``jax.jacrev``) and contracted with those of each
block of ``x2``. Memory is about ``2 * batch_size * P`` numbers for P
parameters, whatever the number of points and logits.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import math
from typing import Any
from typing import cast

import flax.linen as nn
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from fedkrr import CustomKernel

Array = jax.Array


class NTKError(ValueError):
  """Bad input to the empirical NTK (shapes, batch size)."""


def _float_dtype(x: Array):
  dtype = jnp.result_type(x)
  return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _cast(tree: Any, dtype) -> Any:
  return jax.tree_util.tree_map(
      lambda a: a.astype(dtype) if jnp.issubdtype(jnp.result_type(a), jnp.floating) else a, tree)


def _blocks(x: Array, size: int) -> Array:
  """``x`` (n, ...) zero-padded to a multiple of ``size`` and cut into (n_blocks, size, ...)."""
  n = x.shape[0]
  count = -(-n // size)
  pad = [(0, count * size - n)] + [(0, 0)] * (x.ndim - 1)
  return jnp.pad(x, pad).reshape((count, size) + x.shape[1:])


def _outputs(apply_fn: Callable, params: Any, x: Array) -> Array:
  out = apply_fn(params, x)
  return out.reshape(out.shape[0], -1)   # (n,) -> (n, 1); (n, C) unchanged


@functools.partial(jax.jit, static_argnames=("apply_fn", "batch_size"))
def _ntk(apply_fn: Callable, params: Any, x1: Array, x2: Array, batch_size: int) -> Array:
  n1, n2 = x1.shape[0], x2.shape[0]
  b1, b2 = min(batch_size, n1), min(batch_size, n2)
  xb1, xb2 = _blocks(x1, b1), _blocks(x2, b2)
  num_logits = math.prod(jax.eval_shape(lambda x: _outputs(apply_fn, params, x),
                                        x1[:1]).shape[1:])

  def grads(xb, c):
    """Per-example gradients of logit c on one block: leaves (B, *leaf shape)."""
    return jax.jacrev(lambda p: _outputs(apply_fn, p, xb)[:, c])(params)

  def contract(g1, g2):
    leaves = zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2))
    return sum(a.reshape(a.shape[0], -1) @ b.reshape(b.shape[0], -1).T for a, b in leaves)

  def row_block(xa):
    def add_logit(acc, c):
      g1 = grads(xa, c)
      cols = lax.map(lambda xb: contract(g1, grads(xb, c)), xb2)   # (n_blocks2, b1, b2)
      return acc + jnp.swapaxes(cols, 0, 1).reshape(b1, -1), None

    zeros = jnp.zeros((b1, xb2.shape[0] * b2), dtype=x1.dtype)
    acc, _ = lax.scan(add_logit, zeros, jnp.arange(num_logits))
    return acc / num_logits

  rows = lax.map(row_block, xb1)
  return rows.reshape(-1, rows.shape[-1])[:n1, :n2]


def empirical_ntk(apply_fn: Callable[[Any, Array], Array], params: Any, x1: Array,
                  x2: Array | None = None, *, batch_size: int = 64) -> Array:
  """The logit-averaged empirical NTK ``(1/C) sum_c J_c(x1) J_c(x2)^T``, shape (n1, n2).

  ``J_c(x)`` is the gradient of logit c at x with respect to every leaf of
  ``params`` (module docstring; Jacot et al. 2018, eq. 2). It is computed in
  the floating dtype of ``x1``: float32 inputs give float32 as the rest of
  ``neural``; float64 inputs (x64 on) give a float64 kernel of the float32
  parameters, so that ``fedkrr``'s float64 checks of symmetry and positive
  semi-definiteness hold. With ``x2`` omitted the result is exactly symmetric.

  Args:
    apply_fn: ``apply_fn(params, x) -> outputs`` of shape (n, C) or (n,), one
      row per point, each row depending only on its own input (no batch
      statistics). It is a static argument: pass a stable callable (not a new
      lambda per call) to reuse the compiled program.
    params: the parameters theta (any PyTree), at initialisation or trained.
    x1: inputs (n1, ...) as ``apply_fn`` takes them.
    x2: inputs (n2, ...); ``None`` for ``x1``.
    batch_size: points per block; memory is about ``2 * batch_size * P``.

  Returns:
    The kernel matrix (n1, n2).

  Raises:
    NTKError: for a batch size < 1 or inputs whose trailing shapes differ.

  Example:
    >>> mlp = neural.get_model("mlp", 10, width=16)
    >>> x = jax.random.normal(jax.random.PRNGKey(1), (6, 8, 8, 1))
    >>> variables = mlp.init(jax.random.PRNGKey(0), x)
    >>> apply_fn = lambda p, x: mlp.apply({"params": p}, x)
    >>> k = neural.training.empirical_ntk(apply_fn, variables["params"], x)
    >>> k.shape, bool(jnp.allclose(k, k.T))
    ((6, 6), True)
  """
  if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise NTKError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
  x1 = jnp.asarray(x1)
  symmetric = x2 is None or x2 is x1
  x2 = x1 if x2 is None else jnp.asarray(x2)
  if x1.ndim < 1 or x2.ndim < 1 or x1.shape[1:] != x2.shape[1:]:
    raise NTKError(f"x1, x2: expected arrays (n1, ...) and (n2, ...) with the same "
                   f"trailing shape, got {x1.shape} and {x2.shape}")
  dtype = _float_dtype(x1)
  x1, x2 = x1.astype(dtype), x2.astype(dtype)
  if x1.shape[0] == 0 or x2.shape[0] == 0:
    return jnp.zeros((x1.shape[0], x2.shape[0]), dtype=dtype)
  gram = _ntk(apply_fn, _cast(params, dtype), x1, x2, int(batch_size))
  return 0.5 * (gram + gram.T) if symmetric else gram


@dataclasses.dataclass(frozen=True)
class ModelApply:
  """``(params, x_flat) -> logits``: a Flax model on flat inputs, hashable for ``jax.jit``.

  Attributes:
    model: the Flax module (evaluated with ``train=False``).
    input_shape: the shape of one input, e.g. (8, 8, 1); inputs (n, prod(shape))
      or (n, *shape) are reshaped to (n, *shape).
  """

  model: nn.Module
  input_shape: tuple[int, ...]

  def __call__(self, params: Any, x: Array) -> Array:
    x = x.reshape((x.shape[0],) + self.input_shape)
    return cast(Array, self.model.apply({"params": params}, x, train=False))


def check_flat_inputs(x: Any, input_shape: tuple[int, ...], name: str = "x") -> Array:
  """``x`` as (n, prod(input_shape)) or (n, *input_shape); raises NTKError otherwise."""
  x = jnp.asarray(x)
  d = math.prod(input_shape)
  if not (x.ndim == 2 and x.shape[1] == d) and tuple(x.shape[1:]) != tuple(input_shape):
    raise NTKError(f"{name}: expected shape (n, {d}) or (n, {', '.join(map(str, input_shape))})"
                   f", got {x.shape}")
  return x


@dataclasses.dataclass(frozen=True, eq=False)
class _NTKFunction:
  """``k(x1, x2)`` of one model's parameters (hashed by identity: a static jit argument)."""

  apply_fn: ModelApply
  params: Any
  batch_size: int

  @property
  def __name__(self) -> str:   # for CustomKernel.to_dict
    return f"empirical_ntk({type(self.apply_fn.model).__name__})"

  def __call__(self, x1: Array, x2: Array) -> Array:
    shape = self.apply_fn.input_shape
    same = x2 is x1
    flat1 = check_flat_inputs(x1, shape, "x1")
    flat2 = None if same else check_flat_inputs(x2, shape, "x2")
    return empirical_ntk(self.apply_fn, self.params, flat1, flat2, batch_size=self.batch_size)


def ntk_kernel(model: nn.Module, variables: Any, input_shape: tuple[int, ...], *,
               batch_size: int = 64) -> CustomKernel:
  """The empirical NTK of ``model`` at ``variables`` as a ``fedkrr`` kernel on flat inputs.

  Args:
    model: a Flax module of :mod:`neural` (``__call__(x, train=False)`` -> logits).
    variables: its variables ``{"params": ...}`` (at initialisation or trained).
    input_shape: the shape of one input; the kernel takes (n, prod(input_shape)).
    batch_size: points per block of :func:`empirical_ntk`.

  Returns:
    A :class:`fedkrr.CustomKernel` computing :func:`empirical_ntk` (logit-averaged),
    usable in :func:`fedkrr.make_problem` and :class:`fedkrr.KRRLearner`.

  Raises:
    NTKError: if ``variables`` has no ``"params"`` or a bad batch size.

  Example:
    >>> mlp = neural.get_model("mlp", 10, width=16)
    >>> variables = mlp.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))
    >>> kernel = neural.training.ntk_kernel(mlp, variables, (8, 8, 1))
    >>> x = jax.random.normal(jax.random.PRNGKey(1), (20, 64))   # flat inputs
    >>> y = neural.data.one_hot(jnp.arange(20) % 10, 10)
    >>> problem = fedkrr.make_problem([x[:10], x[10:]], [y[:10], y[10:]], kernel, ridge=1e-3)
    >>> problem.sizes
    (10, 10)
  """
  if not isinstance(variables, dict) and not hasattr(variables, "keys"):
    raise NTKError(f"variables: expected a Flax variables dict, got {type(variables).__name__}")
  if "params" not in variables or set(variables) != {"params"}:
    raise NTKError(f"variables: expected {{'params': ...}} only, got keys {sorted(variables)}")
  if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise NTKError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
  shape = tuple(int(d) for d in input_shape)
  params = jax.tree_util.tree_map(jnp.asarray, variables["params"])
  return CustomKernel(_NTKFunction(ModelApply(model, shape), params, int(batch_size)))
