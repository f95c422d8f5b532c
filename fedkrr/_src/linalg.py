"""Ridge solves: factorise ``c I + K`` once, solve many right-hand sides.

``ridge_factor(gram, ridge)`` returns a :class:`RidgeFactor`, explicit state
holding a square root ``R`` with ``(c I + K)^+ = R R^T``:

* ``c > 0``: ``R = L^{-T}`` from the Cholesky factor ``c I + K = L L^T``;
* ``c = 0``: ``R = U diag(w^{-1/2})`` from the eigendecomposition ``K = U diag(w) U^T``
  with eigenvalues ``w <= rtol * max(w)`` dropped: the minimum-norm
  (pseudo-inverse) solution of the paper's Appendix C.

The branch is chosen with ``lax.cond`` on the traced ridge, so the factor is
jit-compatible and vmappable over ``c`` (under vmap both branches run).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

Array = jax.Array


class RidgeFactor(NamedTuple):
  """Square root ``root`` of ``(c I + K)^+``: ``(c I + K)^+ = root @ root.T``."""

  root: Array

  def solve(self, rhs: Array) -> Array:
    """``(c I + K)^+ rhs`` for ``rhs`` of shape (n,) or (n, k)."""
    return self.root @ (self.root.T @ rhs)

  def matrix(self) -> Array:
    """The (pseudo-)inverse ``(c I + K)^+`` itself, shape (n, n)."""
    return self.root @ self.root.T


def default_rtol(n: int, dtype) -> float:
  """Relative eigenvalue cut-off of the pseudo-inverse: ``n * eps(dtype)``."""
  return n * float(jnp.finfo(dtype).eps)


def _cholesky_root(gram: Array, ridge: Array) -> Array:
  n = gram.shape[0]
  eye = jnp.eye(n, dtype=gram.dtype)
  chol = jnp.linalg.cholesky(gram + ridge * eye)
  # R = L^{-T}: solve L^T R = I (upper triangular system).
  return jax.scipy.linalg.solve_triangular(chol.T, eye, lower=False)


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
  """
  gram = jnp.asarray(gram)
  ridge = jnp.asarray(ridge, dtype=gram.dtype)
  if rtol is None:
    rtol = default_rtol(gram.shape[0], gram.dtype)
  root = lax.cond(ridge > 0,
                  lambda g, c: _cholesky_root(g, c),
                  lambda g, c: _pinv_root(g, rtol),
                  gram, ridge)
  return RidgeFactor(root)
