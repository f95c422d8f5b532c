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
"""

from __future__ import annotations

from typing import NamedTuple

import jax
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
