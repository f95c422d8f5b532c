"""Ridge solves: factorise ``c I + K`` once, solve many right-hand sides.

``ridge_factor(gram, ridge)`` returns a :class:`RidgeFactor`, explicit state
(no hidden cache) from which ``(c I + K)^+ t`` is solved for any ``t``:

* ``c > 0``: the Cholesky factor ``L`` of ``c I + K = L L^T`` (two triangular solves);
* ``c = 0``: the minimum-norm (pseudo-inverse) solution of the paper's Appendix C,
  from the eigendecomposition ``K = U diag(w) U^T`` with eigenvalues
  ``w <= rtol * max(w)`` dropped, kept as ``R = U diag(w^{-1/2})`` so that
  ``K^+ = R R^T``.

The branch is chosen with ``lax.cond`` on the traced ridge, so factors are
jit-compatible and vmappable over ``c`` (under vmap both branches run, and the
unused slot holds the identity).

``ridge_root(gram, ridge)`` returns a :class:`RidgeRoot`, the explicit matrix
``R^T`` with ``(c I + K)^+ = R R^T`` (``L^{-1}`` from the Cholesky factor, or
``diag(w^{-1/2}) U^T``), so that products with ``R^T K R`` are matrix products
(the degradation rate's Krylov routes). Under vmap it runs the ``c = 0`` branch
(an ``eigh``) only when some ridge of the batch is 0.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
from jax import custom_batching
from jax import lax
import jax.numpy as jnp

Array = jax.Array


class RidgeFactor(NamedTuple):
  """A factorisation of ``c I + K`` from which ``(c I + K)^+ rhs`` is solved.

  Attributes:
    ridge: the regularisation constant c.
    cholesky: lower Cholesky factor of ``c I + K`` when ``c > 0`` (else the identity).
    pinv_root: ``R`` with ``K^+ = R R^T`` when ``c = 0`` (else the identity).
  """

  ridge: Array
  cholesky: Array
  pinv_root: Array

  def solve(self, rhs: Array) -> Array:
    """``(c I + K)^+ rhs`` for ``rhs`` of shape (n,) or (n, k)."""
    return lax.cond(
        self.ridge > 0,
        lambda r: jax.scipy.linalg.cho_solve((self.cholesky, True), r),
        lambda r: self.pinv_root @ (self.pinv_root.T @ r),
        rhs)

  def matrix(self) -> Array:
    """The (pseudo-)inverse ``(c I + K)^+`` itself, shape (n, n)."""
    return self.solve(jnp.eye(self.cholesky.shape[0], dtype=self.cholesky.dtype))


def full_matmul(a: Array, b: Array) -> Array:
  """``a @ b`` at the full precision of its dtype on every backend.

  At JAX's default precision, GPUs with tensor cores (NVIDIA Ampere and later) multiply
  float32 matrices in TF32 (about 3 decimal digits): enough to break the cancellation in
  ``|x|^2 + |x'|^2 - 2 <x, x'>`` and to stall conjugate gradients near a relative residual
  of 1e-3. CPUs compute the same bits either way.
  """
  return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def default_rtol(n: int, dtype) -> float:
  """Relative eigenvalue cut-off of the pseudo-inverse: ``n * eps(dtype)``."""
  return n * float(jnp.finfo(dtype).eps)


def _pinv_root(gram: Array, rtol: float) -> Array:
  sym = 0.5 * (gram + gram.T)
  w, u = jnp.linalg.eigh(sym)
  keep = w > rtol * jnp.max(jnp.abs(w))
  scale = jnp.where(keep, lax.rsqrt(jnp.where(keep, w, 1.0)), 0.0)
  return u * scale[None, :]


def ridge_factor(gram: Array, ridge: Array | float, rtol: float | None = None) -> RidgeFactor:
  """Factorises ``c I + K`` (Cholesky) or ``K`` (minimum-norm, when ``c == 0``).

  Args:
    gram: symmetric positive semi-definite matrix K, shape (n, n).
    ridge: the regularisation constant c >= 0 (may be traced).
    rtol: eigenvalue cut-off for the pseudo-inverse, relative to the largest
      eigenvalue; default ``n * eps(dtype)``.

  Returns:
    A :class:`RidgeFactor` ``F`` with ``F.solve(t) = (c I + K)^+ t``.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> gram = fedkrr.RBF(gamma=2.0)(x, x)
    >>> alpha = fedkrr.ridge_factor(gram, 1e-2).solve(y)   # (c I + K)^+ y
    >>> bool(jnp.allclose((1e-2 * jnp.eye(8) + gram) @ alpha, y))
    True
  """
  gram = jnp.asarray(gram)
  ridge = jnp.asarray(ridge, dtype=gram.dtype)
  if rtol is None:
    rtol = default_rtol(gram.shape[0], gram.dtype)
  eye = jnp.eye(gram.shape[0], dtype=gram.dtype)
  chol, root = lax.cond(ridge > 0,
                        lambda g, c: (jnp.linalg.cholesky(g + c * eye), eye),
                        lambda g, c: (eye, _pinv_root(g, rtol)),
                        gram, ridge)
  return RidgeFactor(ridge, chol, root)


class RidgeRoot(NamedTuple):
  """``R^T`` with ``(c I + K)^+ = R R^T``, as an explicit (n, n) matrix.

  Attributes:
    ridge: the regularisation constant c.
    root_t: ``L^{-1}`` for the Cholesky factor ``c I + K = L L^T`` when ``c > 0``;
      ``diag(w^{-1/2}) U^T`` (eigenvalues ``w`` of K above the cut-off, the others'
      rows zero) when ``c = 0``.
  """

  ridge: Array
  root_t: Array

  def solve(self, rhs: Array) -> Array:
    """``(c I + K)^+ rhs = R (R^T rhs)`` for ``rhs`` of shape (n,) or (n, k)."""
    return self.root_t.T @ (self.root_t @ rhs)


def _cholesky_root_t(gram: Array, ridge: Array) -> Array:
  eye = jnp.eye(gram.shape[0], dtype=gram.dtype)
  chol = jnp.linalg.cholesky(gram + ridge * eye)
  return jax.scipy.linalg.solve_triangular(chol, eye, lower=True)


def ridge_root(gram: Array, ridge: Array | float, rtol: float | None = None) -> RidgeRoot:
  """The explicit root ``R^T`` of ``(c I + K)^+ = R R^T`` (Cholesky, or eigh when ``c == 0``).

  Args:
    gram: symmetric positive semi-definite matrix K, shape (n, n).
    ridge: the regularisation constant c >= 0 (may be traced).
    rtol: eigenvalue cut-off for ``c = 0``, relative to the largest eigenvalue;
      default ``n * eps(dtype)``.

  Returns:
    A :class:`RidgeRoot`. Under ``vmap`` over c the ``eigh`` of the ``c = 0`` branch
    runs only when some c of the batch is 0 (a plain ``lax.cond`` would run both
    branches for every instance).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> gram = fedkrr.RBF(gamma=2.0)(x, x)
    >>> root = fedkrr.ridge_root(gram, 1e-2)
    >>> bool(jnp.allclose(root.solve(jnp.eye(8)), fedkrr.ridge_factor(gram, 1e-2).matrix()))
    True
  """
  gram = jnp.asarray(gram)
  ridge = jnp.asarray(ridge, dtype=gram.dtype)
  cut = default_rtol(gram.shape[0], gram.dtype) if rtol is None else rtol

  def either(g, c):
    return lax.cond(c > 0, _cholesky_root_t, lambda g, _: _pinv_root(g, cut).T, g, c)

  @custom_batching.custom_vmap
  def root_t(g, c):
    return either(g, c)

  @root_t.def_vmap
  def _root_t_vmap(axis_size, in_batched, g, c):
    g_batched, c_batched = in_batched
    g = g if g_batched else jnp.broadcast_to(g, (axis_size,) + g.shape)
    c = c if c_batched else jnp.broadcast_to(c, (axis_size,) + c.shape)
    out = lax.cond(jnp.all(c > 0), jax.vmap(_cholesky_root_t), jax.vmap(either), g, c)
    return out, True

  return RidgeRoot(ridge, root_t(gram, ridge))
