"""Spectral radius of a linear map from its matrix-vector products (Krylov methods).

The functions take a closure ``matvec(v) -> A v`` on vectors of shape (n,). The
first two run a fixed number of steps, so that they jit and vmap (a vmapped call
is a batch of small matrix products, no per-instance control flow); the third
stops once converged:

* :func:`lanczos_radius` for symmetric ``A``: ``k = min(steps, n)`` steps of the
  three-term Lanczos recurrence (without re-orthogonalisation; the k vectors are kept
  only to form the Ritz vector) give a tridiagonal ``T``; its extreme eigenvalues come
  from bisection (:func:`jax.scipy.linalg.eigh_tridiagonal`), their eigenvector ``s``
  from inverse iteration on ``T``, and the Ritz vector is ``x = Q s``. In floating
  point the Lanczos vectors lose orthogonality once a Ritz value converges, which
  only repeats it; whatever ``x`` is, for symmetric A some eigenvalue lies within
  ``r = ||A x - theta x|| / ||x||`` of ``theta``, and within ``r^2 / gap`` when the
  others are ``gap`` away.
* :func:`arnoldi_radius` for any real ``A``: Arnoldi with explicit restarts
  (``restart`` vectors per cycle). The dominant eigenvalue of each small Hessenberg
  matrix ``H`` is found without a general eigen-solver: repeated squaring of
  ``H`` (``H^(2^40)``, normalised) leaves its dominant invariant subspace, of
  dimension 1 (a real eigenvalue) or 2 (a complex pair, or a real pair ``+-lambda``),
  and a Rayleigh-Ritz step on that subspace gives the eigenvalue's modulus. The
  next cycle starts from that subspace; the cycle with the smallest residual is
  the result (a restart from an almost invariant subspace can make the next one worse).
* :func:`block_top_eigen` for symmetric positive semi-definite ``A`` in a sweep of
  close matrices: a block of Ritz vectors (from the previous matrix) extended by
  products, Rayleigh-Ritz, thick restart; it returns the block for the next matrix.

Each returns a :class:`KrylovResult` whose ``converged`` flag compares the
residual with ``rtol`` times a norm estimate of ``A``; callers turn an
unconverged estimate into NaN rather than a silently wrong number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

Array = jax.Array

# Squarings of the small Hessenberg matrix: H^(2^40) suppresses every eigenvalue whose
# modulus is below the dominant one's by more than a relative 1e-11.
_SQUARINGS = 40


class KrylovResult(NamedTuple):
  """A spectral radius estimate and its certificate.

  Attributes:
    radius: the estimate of ``max |eig(A)|``.
    residual: ``||A X - X C|| / ||A||`` of the Ritz vector(s) ``X`` (one, or two for a
      complex pair), relative to a norm estimate of ``A`` from the Krylov space.
    converged: ``residual <= rtol`` and, for Arnoldi, ``condition * max(residual, eps)
      <= rtol`` with ``condition`` the estimated condition number of the dominant
      eigenvalue (or pair): ``1 / cos`` of the angle between its left and right Ritz
      vectors (subspaces), infinite for a defective one. The radius is then certified
      to about ``rtol`` relative to ``||A||``.
  """

  radius: Array
  residual: Array
  converged: Array


def default_rtol(dtype, symmetric: bool = False) -> float:
  """Residual tolerance of the convergence flag, relative to ``||A||``.

  Symmetric ``A``: ``sqrt(eps(dtype))`` (1.5e-8 in float64, 3.5e-4 in float32); the
  Ritz value's error is then at most ``residual^2 / gap`` (Kato-Temple), the gap
  being the distance to the rest of the spectrum, and at most ``residual``
  whatever the gap. General ``A``: ``eps(dtype) ** (2/3)`` (4e-11 in float64, 2e-5 in
  float32), since an eigenvalue's error is about its condition number times the
  residual.
  """
  eps = float(jnp.finfo(dtype).eps)
  return eps ** 0.5 if symmetric else eps ** (2.0 / 3.0)


def start_vector(n: int, dtype, seed: int = 0) -> Array:
  """A fixed pseudo-random start vector of length n (the same for every instance of a vmap)."""
  return jax.random.normal(jax.random.key(seed), (n,), dtype)


def check_steps(steps: int) -> None:
  """Raises ``ValueError`` naming ``steps`` unless it is an integer >= 1 (a static count of
  matrix-vector products; shared by the callers that take one)."""
  if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
    raise ValueError(f"steps: expected an integer >= 1, got {steps!r}")


def _check(steps: int, v0: Array) -> None:
  check_steps(steps)
  if v0.ndim != 1 or v0.shape[0] < 1:
    raise ValueError(f"v0: expected a non-empty vector of shape (n,), got {v0.shape}")


def _orthogonalise(basis: Array, w: Array) -> tuple[Array, Array, Array]:
  """Classical Gram-Schmidt twice against the rows of ``basis`` (rows not yet set are 0).

  Returns the orthogonalised ``w``, its coefficients in the basis, and whether it
  is numerically in the span (the second pass still cancelled more than a factor
  1/sqrt(2): the criterion of Daniel, Gragg, Kaufman and Stewart).
  """
  h1 = basis @ w
  w1 = w - basis.T @ h1
  h2 = basis @ w1
  w2 = w1 - basis.T @ h2
  dependent = jnp.linalg.norm(w2) <= jnp.sqrt(0.5) * jnp.linalg.norm(w1)
  return w2, h1 + h2, dependent


def _next_vector(basis: Array, w: Array, dependent: Array, j: int | Array,
                 key: Array) -> tuple[Array, Array]:
  """Row j + 1 of the basis from the orthogonalised ``w`` and its norm (0 at a breakdown).

  When ``w`` is numerically in the span (the Krylov space is invariant), a
  pseudo-random vector orthogonal to the basis continues it and the coupling is 0.
  """
  beta = jnp.linalg.norm(w)
  fresh = jax.random.normal(jax.random.fold_in(key, j), w.shape, w.dtype)
  fresh, _, _ = _orthogonalise(basis, fresh)
  broke = dependent | (beta <= jnp.sqrt(jnp.finfo(w.dtype).tiny))
  w = jnp.where(broke, fresh, w)
  return w / jnp.linalg.norm(w), jnp.where(broke, 0.0, beta).astype(w.dtype)


def lanczos_radius(matvec: Callable[[Array], Array], v0: Array, steps: int = 200,
                   rtol: float | None = None) -> KrylovResult:
  """``max |eig(A)|`` of a symmetric ``A`` by ``min(steps, n)`` Lanczos steps.

  Args:
    matvec: ``v -> A v`` for v of shape (n,); A must be symmetric.
    v0: start vector, shape (n,) (e.g. :func:`start_vector`).
    steps: Lanczos steps (static); at most n are taken (then the result is exact).
    rtol: tolerance of the convergence flag; default :func:`default_rtol`.

  Returns:
    A :class:`KrylovResult`.
  """
  _check(steps, v0)
  dtype = v0.dtype
  rtol = default_rtol(dtype, symmetric=True) if rtol is None else rtol
  n = v0.shape[0]
  k = min(steps, n)
  key = jax.random.key(1)
  tiny = jnp.sqrt(jnp.finfo(dtype).tiny)

  def step(j, carry):
    q_prev, q, beta_prev, alphas, betas, basis = carry
    basis = basis.at[j].set(q)
    w = matvec(q) - beta_prev * q_prev
    alpha = q @ w
    w = w - alpha * q
    beta = jnp.linalg.norm(w)
    # An exact breakdown (an invariant Krylov space) continues from a fresh vector with
    # coupling 0; the tridiagonal matrix then splits and keeps every Ritz value valid.
    broke = beta <= tiny
    fresh = jax.random.normal(jax.random.fold_in(key, j), (n,), dtype)
    q_next = jnp.where(broke, fresh / jnp.linalg.norm(fresh), w / jnp.where(broke, 1.0, beta))
    beta = jnp.where(broke, 0.0, beta).astype(dtype)
    return q, q_next, beta, alphas.at[j].set(alpha), betas.at[j].set(beta), basis

  zeros = jnp.zeros((k,), dtype)
  q0 = v0 / jnp.linalg.norm(v0)
  init = (jnp.zeros_like(q0), q0, jnp.zeros((), dtype), zeros, zeros, jnp.zeros((k, n), dtype))
  alphas, betas, basis = lax.fori_loop(0, k, step, init)[3:]
  scale = jnp.max(jnp.abs(alphas) + betas + jnp.concatenate([jnp.zeros((1,), dtype), betas[:-1]]))
  # The Ritz pair of the leading j x j block of T at a few j: once the top Ritz value has
  # converged, later steps only add copies of it, which make its Ritz vector ill-determined,
  # so the level with the smallest residual estimate beta_j |s_j| is kept.
  levels = sorted({k} | {k >> i for i in (1, 2) if k >> i >= 8})
  pairs = [_ritz_pair(alphas[:j], betas[:j], scale, k) for j in levels]
  best = jnp.argmin(jnp.stack([est for _, _, est in pairs]))
  theta = jnp.stack([theta for theta, _, _ in pairs])[best]
  s = jnp.stack([s for _, s, _ in pairs])[best]
  # The Ritz vector x = Q s and its true residual: for symmetric A some eigenvalue lies
  # within ||A x - theta x|| / ||x|| of theta, however orthogonal Q still is.
  x = s @ basis
  x_norm = jnp.maximum(jnp.linalg.norm(x), jnp.finfo(dtype).tiny)
  residual = jnp.linalg.norm(matvec(x) - theta * x) / x_norm
  return _result(jnp.abs(theta), residual, scale, rtol)


def _ritz_pair(alphas: Array, betas: Array, scale: Array, k: int) -> tuple[Array, Array, Array]:
  """The extreme Ritz value theta of the tridiagonal (``alphas``, ``betas[:-1]``) with the
  larger modulus, its eigenvector s padded with zeros to length k, and the residual
  estimate ``|betas[-1] s[-1]| + ||T s - theta s||``."""
  dtype = alphas.dtype
  j = alphas.shape[0]
  off = betas[:-1]
  if j == 1:
    top = bottom = alphas[0]
  else:
    eigs = jax.scipy.linalg.eigh_tridiagonal(alphas, off, eigvals_only=True)
    top, bottom = eigs[-1], eigs[0]
  theta = jnp.where(jnp.abs(top) >= jnp.abs(bottom), top, bottom)
  # Two steps of inverse iteration with a shift just off theta.
  shift = theta + 64 * jnp.finfo(dtype).eps * jnp.maximum(scale, jnp.finfo(dtype).tiny)
  lower = jnp.concatenate([jnp.zeros((1,), dtype), off])
  upper = jnp.concatenate([off, jnp.zeros((1,), dtype)])
  s = jnp.ones((j, 1), dtype)
  for _ in range(2):
    s = lax.linalg.tridiagonal_solve(lower, alphas - shift, upper, s)
    s = s / jnp.maximum(jnp.linalg.norm(s), jnp.finfo(dtype).tiny)
  s = s[:, 0]
  t_s = alphas * s + lower * jnp.roll(s, 1) + upper * jnp.roll(s, -1)
  est = jnp.abs(betas[-1] * s[-1]) + jnp.linalg.norm(t_s - theta * s)
  return theta, jnp.pad(s, (0, k - j)), est


def _result(radius: Array, residual: Array, scale: Array, rtol: float) -> KrylovResult:
  # scale = 0: A vanishes on the Krylov space of a generic vector, so A = 0 (radius 0).
  relative = jnp.where(scale > 0, residual / jnp.where(scale > 0, scale, 1.0), 0.0)
  return KrylovResult(radius, relative, relative <= rtol)


def _dominant(h: Array, h_last: Array) -> tuple[Array, Array, Array]:
  """Dominant eigenvalue modulus of the Hessenberg ``h`` (m, m), its Arnoldi residual
  (``h_last`` couples the next basis vector) and a restart vector in R^m."""
  return _dominant_conditioned(h, h_last)[:3]


def _dominant_conditioned(h: Array, h_last: Array) -> tuple[Array, Array, Array, Array]:
  """:func:`_dominant` and the eigenvalue's (or pair's) condition number estimate."""
  dtype = h.dtype
  tiny = jnp.finfo(dtype).tiny
  p = h / jnp.maximum(jnp.linalg.norm(h), tiny)

  def square(_, p):
    p = p @ p
    return p / jnp.maximum(jnp.linalg.norm(p), tiny)

  p = lax.fori_loop(0, _SQUARINGS, square, p)
  m = h.shape[0]
  v1, v2 = jax.random.normal(jax.random.key(2), (2, m), dtype)

  def subspace(p):   # an orthonormal basis (u, w) of the range of p; w = 0 if it has one
    u = p @ v1
    u = u / jnp.maximum(jnp.linalg.norm(u), tiny)
    w = p @ v2
    w_norm = jnp.linalg.norm(w)
    w = w - (u @ w) * u
    w = w - (u @ w) * u
    two = jnp.linalg.norm(w) > jnp.sqrt(jnp.finfo(dtype).eps) * w_norm
    return u, jnp.where(two, w / jnp.maximum(jnp.linalg.norm(w), tiny), 0.0), two

  u, w, two = subspace(p)
  # The left dominant subspace is the range of p^T = (h^T)^(2^40). The cosines between the
  # left and right subspaces bound the eigenvalue's sensitivity: an error of about
  # ``condition * ||h perturbation||``; a defective eigenvalue (a Jordan block) has
  # orthogonal left and right eigenvectors, and a tiny residual says nothing of its error.
  u_left, w_left, _ = subspace(p.T)
  cos1 = jnp.abs(u_left @ u)
  cross = jnp.stack([u_left, w_left]) @ jnp.stack([u, w], axis=1)   # 2 x 2
  det = jnp.abs(cross[0, 0] * cross[1, 1] - cross[0, 1] * cross[1, 0])
  # ||cross^{-1}||_F = ||cross||_F / |det| for a 2 x 2 matrix: within sqrt(2) of 1 / sigma_min.
  cond2 = jnp.where(det > 0, jnp.linalg.norm(cross) / jnp.where(det > 0, det, 1.0), jnp.inf)
  cond1 = jnp.where(cos1 > 0, 1.0 / jnp.where(cos1 > 0, cos1, 1.0), jnp.inf)
  # One dimension: a real dominant eigenvalue.
  theta = u @ h @ u
  res1 = jnp.hypot(jnp.linalg.norm(h @ u - theta * u), h_last * u[-1])
  # Two dimensions: the eigenvalues of the 2 x 2 Rayleigh quotient C = Y^T h Y.
  y = jnp.stack([u, w], axis=1)
  c = y.T @ h @ y
  half_trace = 0.5 * (c[0, 0] + c[1, 1])
  det = c[0, 0] * c[1, 1] - c[0, 1] * c[1, 0]
  # half_trace^2 - det, written without their cancellation: with two (nearly) equal
  # eigenvalues (a repeated one, as the power of a cyclic map has) the difference of the
  # two squares lost half the digits (a radius off by about sqrt(eps)).
  disc = (0.5 * (c[0, 0] - c[1, 1])) ** 2 + c[0, 1] * c[1, 0]
  radius2 = jnp.where(disc < 0, jnp.sqrt(jnp.abs(det)),
                      jnp.abs(half_trace) + jnp.sqrt(jnp.maximum(disc, 0.0)))
  res2 = jnp.hypot(jnp.linalg.norm(h @ y - y @ c), h_last * jnp.linalg.norm(y[-1]))
  return (jnp.where(two, radius2, jnp.abs(theta)), jnp.where(two, res2, res1),
          jnp.where(two, u + w, u), jnp.where(two, cond2, cond1))


def arnoldi_radius(matvec: Callable[[Array], Array], v0: Array, steps: int = 200,
                   rtol: float | None = None, restart: int = 40) -> KrylovResult:
  """``max |eig(A)|`` of any real ``A`` by restarted Arnoldi, about ``steps`` products.

  Args:
    matvec: ``v -> A v`` for v of shape (n,).
    v0: start vector, shape (n,) (e.g. :func:`start_vector`).
    steps: matrix-vector products in all (static), in ``ceil(steps / m)`` cycles of
      ``m = min(restart, n, steps)``.
    rtol: tolerance of the convergence flag; default :func:`default_rtol`.
    restart: Krylov vectors per cycle (static).

  Returns:
    A :class:`KrylovResult` of the cycle with the smallest relative residual. A
    dominant eigenvalue that is neither simple and real nor one complex pair (or
    ``+-lambda``) leaves the residual large: not converged. Neither is an estimate
    whose condition number times its residual (at least eps) exceeds ``rtol``: a
    defective dominant eigenvalue (a Jordan block) can have a Ritz vector of residual
    4e-17 and a radius off by 6e-8, and its condition number estimate is about 1e15.
  """
  _check(steps, v0)
  if not isinstance(restart, int) or restart < 1:
    raise ValueError(f"restart: expected an integer >= 1, got {restart!r}")
  dtype = v0.dtype
  rtol = default_rtol(dtype) if rtol is None else rtol
  n = v0.shape[0]
  m = min(restart, n, steps)
  key = jax.random.key(1)

  def cycle(v, _):
    basis = jnp.zeros((m + 1, n), dtype).at[0].set(v / jnp.maximum(jnp.linalg.norm(v),
                                                                     jnp.finfo(dtype).tiny))

    def step(j, carry):
      basis, hess = carry
      w, coeffs, dependent = _orthogonalise(basis, matvec(basis[j]))
      q_next, beta = _next_vector(basis, w, dependent, j, key)
      return basis.at[j + 1].set(q_next), hess.at[:, j].set(coeffs.at[j + 1].set(beta))

    basis, hess = lax.fori_loop(0, m, step, (basis, jnp.zeros((m + 1, m), dtype)))
    radius, residual, y, condition = _dominant_conditioned(hess[:m], hess[m, m - 1])
    return basis[:m].T @ y, (radius, residual, jnp.linalg.norm(hess), condition)

  _, (radii, residuals, scales, conditions) = lax.scan(cycle, v0, None, length=-(-steps // m))
  # Every cycle certifies its own estimate; a restart from an almost invariant subspace
  # can lose accuracy (the next Krylov space is filled with fresh random directions),
  # so the cycle with the smallest relative residual is returned, not the last.
  relative = residuals / jnp.maximum(scales, jnp.finfo(dtype).tiny)
  best = jnp.argmin(jnp.where(scales > 0, relative, 0.0))
  result = _result(radii[best], residuals[best], scales[best], rtol)
  # The residual bounds the error of a well-conditioned eigenvalue only: the estimated
  # error ``condition * max(residual, eps)`` (eps: the rounding of the products) must
  # also be below rtol. A defective or nearly defective dominant eigenvalue fails it.
  condition = jnp.where(scales[best] > 0, conditions[best], 1.0)
  error = condition * jnp.maximum(result.residual, jnp.finfo(dtype).eps)
  return result._replace(converged=result.converged & (error <= rtol))


def block_top_eigen(matvec: Callable[[Array], Array], start: Array, steps: int = 200,
                    rtol: float | None = None, restart: int = 24, active: Array | None = None
                    ) -> tuple[KrylovResult, Array]:
  """The largest eigenvalue of a symmetric positive semi-definite ``A`` by a Krylov
  method restarted from a block of Ritz vectors, stopping as soon as it has converged.

  Made for sweeps over close matrices: started from the previous matrix's Ritz
  block it usually converges within one cycle. A cycle extends the ``p`` start
  vectors (rows of ``start``; the last should be the best guess of the top
  eigenvector) to an orthonormal basis ``Q`` of ``m = min(restart, n)`` vectors by
  products with ``A`` from the top Ritz vector (full re-orthogonalisation), then
  takes the Rayleigh-Ritz pairs of ``Q A Q^T`` (an m x m symmetric eigen-problem); the
  top ``p`` Ritz vectors start the next cycle (a thick restart, which keeps a
  cluster of top eigenvalues converging). It stops when the top pair's residual
  ``||A x - theta x||`` (exact, from the stored products) is at most ``rtol * theta``,
  or after ``ceil(steps / (m - p))`` cycles. Under ``vmap`` the cycles run until every
  instance of the batch has stopped (``lax.while_loop``).

  Args:
    matvec: ``v -> A v`` for v of shape (n,); A symmetric positive semi-definite.
    start: (p, n) start block with p < min(restart, n) (or p = n: then the result is
      exact); its rows must be independent and should not all be orthogonal to the
      top eigenvector.
    steps: about this many products at most (static).
    rtol: tolerance of the convergence flag; default :func:`default_rtol` (symmetric).
    restart: basis vectors per cycle (static).
    active: a traced boolean; false runs no cycle (the block comes back orthonormalised,
      the result unconverged): a sweep skips what another route will compute.

  Returns:
    ``(result, block)``: a :class:`KrylovResult` (residual relative to ``theta``) and
    the (p, n) Ritz block (top vector last) to start the next, nearby, matrix from.
  """
  if start.ndim != 2:
    raise ValueError(f"start: expected a (p, n) block, got shape {start.shape}")
  _check(steps, start[0])
  p, n = start.shape
  m = min(restart, n) if isinstance(restart, int) and not isinstance(restart, bool) else 0
  if not (p < m or p == m == n):
    raise ValueError(f"restart: expected an integer above the block size {p} (or a block "
                     f"of all n = {n} dimensions), got {restart!r}")
  dtype = start.dtype
  rtol = default_rtol(dtype, symmetric=True) if rtol is None else rtol
  cycles = 1 if p == m else -(-steps // (m - p))   # p = m = n: one exact Rayleigh-Ritz
  tiny = jnp.finfo(dtype).tiny
  small = jnp.sqrt(tiny)
  apply = jax.vmap(matvec)

  def cycle(block, block_products):
    basis = jnp.zeros((m, n), dtype).at[:p].set(block)
    products = jnp.zeros((m, n), dtype).at[:p].set(block_products)

    def extend(j, carry):                 # basis row j from the product of row j - 1
      basis, products = carry
      w = products[j - 1]
      w = w - basis.T @ (basis @ w)
      w = w - basis.T @ (basis @ w)       # twice is enough (Kahan)
      norm = jnp.linalg.norm(w)
      q = jnp.where(norm <= small, 0.0, w / jnp.where(norm <= small, 1.0, norm))
      return basis.at[j].set(q), products.at[j].set(matvec(q))

    basis, products = lax.fori_loop(p, m, extend, (basis, products))
    projected = basis @ products.T
    values, vectors = jnp.linalg.eigh(0.5 * (projected + projected.T))
    top = vectors[:, -p:].T               # ascending: the top vector last
    ritz, ritz_products = top @ basis, top @ products
    theta = values[-1]
    residual = jnp.linalg.norm(ritz_products[-1] - theta * ritz[-1])
    return ritz, ritz_products, theta, residual

  live = jnp.ones((), bool) if active is None else jnp.asarray(active, bool)

  def more(state):
    i, _, _, theta, residual = state
    return (i < cycles) & live & ((i == 0) | (residual > rtol * jnp.abs(theta)))

  def body(state):
    i, block, block_products, _, _ = state
    return (i + 1,) + cycle(block, block_products)

  block = jnp.linalg.qr(start.T)[0].T     # orthonormal rows, spanning the start rows
  zero = jnp.zeros((), dtype)
  _, block, _, theta, residual = lax.while_loop(
      more, body, (jnp.zeros((), jnp.int32), block, apply(block), zero, zero))
  relative = residual / jnp.maximum(jnp.abs(theta), tiny)
  return KrylovResult(jnp.abs(theta), relative, live & (relative <= rtol)), block


def arnoldi_continued(matvec: Callable[[Array], Array], start: Array, steps: int = 200,
                      rtol: float | None = None, restart: int = 20,
                      active: Array | None = None) -> tuple[KrylovResult, Array]:
  """``max |eig(A)|`` of any real ``A`` by restarted Arnoldi from ``start``, stopping as
  soon as it has converged; for sweeps over close matrices.

  The cycles are those of :func:`arnoldi_radius` (``m = min(restart, n, steps)`` Arnoldi
  vectors, the small Hessenberg matrix's dominant eigenvalue by repeated squaring, the
  next cycle started from its Ritz vector, or the sum of the two of a complex pair), run
  in a ``lax.while_loop`` until the relative residual is at most ``rtol`` or
  ``ceil(steps / m)`` cycles have run. Started from the previous matrix's Ritz vector
  (returned), a nearby matrix usually needs one cycle instead of the fixed
  ``steps`` products of :func:`arnoldi_radius`. Under ``vmap`` the cycles run until every
  instance has stopped.

  Args:
    matvec: ``v -> A v`` for v of shape (n,).
    start: start vector, shape (n,) (e.g. :func:`start_vector`, or the vector returned for
      the previous matrix of a sweep).
    steps: about this many products at most (static).
    rtol: tolerance of the convergence flag; default :func:`default_rtol`.
    restart: Krylov vectors per cycle (static).
    active: a traced boolean; false runs no cycle (the result unconverged).

  Returns:
    ``(result, vector)``: the :class:`KrylovResult` of the cycle with the smallest relative
    residual, and that cycle's Ritz vector (in R^n) to start the next matrix from.
  """
  _check(steps, start)
  if not isinstance(restart, int) or isinstance(restart, bool) or restart < 1:
    raise ValueError(f"restart: expected an integer >= 1, got {restart!r}")
  dtype = start.dtype
  rtol = default_rtol(dtype) if rtol is None else rtol
  n = start.shape[0]
  m = min(restart, n, steps)
  cycles = -(-steps // m)
  key = jax.random.key(1)
  tiny = jnp.finfo(dtype).tiny
  live = jnp.ones((), bool) if active is None else jnp.asarray(active, bool)

  small = jnp.sqrt(tiny)

  def cycle(v):
    basis = jnp.zeros((m + 1, n), dtype).at[0].set(v / jnp.maximum(jnp.linalg.norm(v), tiny))

    def step(j, carry):
      basis, hess = carry
      w, coeffs, dependent = _orthogonalise(basis, matvec(basis[j]))
      beta = jnp.linalg.norm(w)
      broke = dependent | (beta <= small)
      # A fresh vector only at a breakdown (a lax.cond: this runs once per product).
      q_next = lax.cond(broke, lambda w: _next_vector(basis, w, broke, j, key)[0],
                        lambda w: w / jnp.where(broke, 1.0, beta), w)
      beta = jnp.where(broke, 0.0, beta).astype(dtype)
      return basis.at[j + 1].set(q_next), hess.at[:, j].set(coeffs.at[j + 1].set(beta))

    basis, hess = lax.fori_loop(0, m, step, (basis, jnp.zeros((m + 1, m), dtype)))
    radius, residual, y = _dominant(hess[:m], hess[m, m - 1])
    scale = jnp.linalg.norm(hess)
    relative = jnp.where(scale > 0, residual / jnp.where(scale > 0, scale, 1.0), 0.0)
    return basis[:m].T @ y, radius, relative

  def more(state):
    i, _, _, _, best_relative, _ = state
    return (i < cycles) & live & (best_relative > rtol)

  def body(state):
    i, v, best_v, best_radius, best_relative, _ = state
    nxt, radius, relative = cycle(v)
    better = relative < best_relative
    return (i + 1, nxt, jnp.where(better, nxt, best_v), jnp.where(better, radius, best_radius),
            jnp.where(better, relative, best_relative), relative)

  inf = jnp.asarray(jnp.inf, dtype)
  init = (jnp.zeros((), jnp.int32), start, start, jnp.zeros((), dtype), inf, inf)
  _, _, best_v, radius, relative, _ = lax.while_loop(more, body, init)
  relative = jnp.where(jnp.isfinite(relative), relative, jnp.asarray(1.0, dtype))
  return KrylovResult(radius, relative, live & (relative <= rtol)), best_v
