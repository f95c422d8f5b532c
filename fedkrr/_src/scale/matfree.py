"""Matrix-free kernel ridge agents: kernel blocks in tiles, fits by preconditioned CG.

The exact path (:func:`fedkrr.trajectory`) factorises every agent's
``c I + K^a_aa`` and forms the transfer blocks ``S_i K^j_ij``: memory grows as N^2
and time as N^3 (``docs/scale.md``). This module never stores a Gram block:

* :func:`kernel_matvec` computes ``k(x1, x2) @ v`` in row tiles of ``x1``; a tile
  of ``k(x1, x2)`` lives only while it multiplies ``v``. RBF and Laplace tiles take
  their distances from direct differences up to ``DIRECT_MAX_DIM`` input dimensions
  and their exponential from ``exp_nonpositive`` (twice XLA's on a CPU);
* :func:`ridge_solve` solves ``(c I + k(X, X) / N) alpha = t`` by preconditioned
  conjugate gradients, each iteration one tiled product with the symmetric
  ``k(X, X)`` that evaluates about half of its entries (:func:`symmetric_matvec`),
  started from 0 or from a guess (e.g. the agent's previous solution, scaled);
* :func:`nystrom_preconditioner` approximates ``k(X, X) / N`` from m landmark
  points (``K ~ K_nm K_mm^{-1} K_mn``, as Falkon does; Rudi, Carratino & Rosasco
  2017) and preconditions with the randomised-Nystrom form of Frangella, Tropp &
  Udell (2023): with the approximation ``U diag(lam) U^T`` (U orthonormal, n x r),
  ``P^{-1} = (lam_r + c) U (diag(lam) + c I)^{-1} U^T + (I - U U^T)``;
* :class:`MatfreeKRRLearner` is a learner of the protocols' interface
  (``fit`` / ``predict``), so every protocol runs by literal rounds through
  :func:`fedkrr.simulate` (:func:`matfree_trajectory`); a round costs a few CG
  solves and the block matrix-vector products ``k_j(X_i, X_j) alpha_j / N`` of
  the agents' predictions on each other's inputs. Each fit after an agent's first
  starts from the best combination of that agent's latest solutions (``warm_start_from``,
  called by :func:`fedkrr.protocols.iterate`; their products come with them, so the start costs no
  kernel product): as the rounds converge, fewer iterations reach the tolerance.

Memory is O(N (m + d) + tile) instead of O(N^2); the preconditioner changes the
number of iterations, never the solution. The matrix-free path needs ``c > 0``
(the minimum-norm fit of ``c = 0`` is the exact path's). :func:`fedkrr.scale.choose_method`
states when each path is used (``fedkrr.run(..., method="auto")``).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import math
from typing import Any
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp

from fedkrr._src import closed_form
from fedkrr._src import protocols
from fedkrr._src.kernels import RBF
from fedkrr._src.kernels import Laplace
from fedkrr._src.kernels import _sq_distances
from fedkrr._src.linalg import full_matmul
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import check_params
from fedkrr._src.names import make_params
from fedkrr._src.platform.memory import TILE_ELEMENTS
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import ProblemError
from fedkrr._src.problem import check_eval_points
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


def default_tol(dtype) -> float:
  """The CG tolerance on the relative residual: 1e-10 in float64, 1e-5 in float32."""
  return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5


DIRECT_MAX_DIM = 16
"""Up to this input dimension, RBF and Laplace tiles take their squared distances from direct
differences ``sum_k (x_k - y_k)^2``, fused with the exponential into one loop over the tile
(exact at zero distance); above it from ``|x|^2 + |y|^2 - 2 <x, y>``, a matrix product."""


# dtype: (Taylor degree, ln 2 high part (its low mantissa bits zero), low part, the argument
# below which the result is 0 (just above the log of the smallest normal number, so that the
# exponent field stays >= 1), mantissa bits, exponent bias, integer type of the same width).
_EXP_CONSTANTS = {
    jnp.dtype(jnp.float64): (12, 0.6931471803691238, 1.9082149292705877e-10, -708.39, 52, 1023.0,
                             jnp.int64),
    jnp.dtype(jnp.float32): (7, 0.693145751953125, 1.428606765330187e-06, -87.33, 23, 127.0,
                             jnp.int32),
}


def exp_nonpositive(x: Array) -> Array:
  """``exp(x)`` for ``x <= 0`` in float64 or float32, about twice XLA's CPU throughput.

  ``2^k p(r)`` with ``k = round(x / ln 2)``, ``r = x - k ln 2`` (``|r| <= ln(2) / 2``;
  ``ln 2`` split in two so that ``k ln2_hi`` is exact) and ``p`` the Taylor polynomial of
  degree 12 (float64) or 7 (float32), whose remainder is below the dtype's rounding,
  evaluated as ``1 + (r + r^2 E(r))`` with ``E`` by Estrin's scheme (:func:`_estrin`: half
  the dependent steps of Horner's rule, which limited the tiles' throughput);
  ``2^k`` is built from its bits (adding ``k`` to ``1.5 * 2^52``, resp. ``2^23``, puts it
  in the low mantissa bits, which a shift moves into the exponent), with no
  float-to-integer conversion, which AVX2 lacks for 64 bits.
  The relative error is a few units in the last place (``tests/fedkrr/scale/test_matfree.py``
  compares it with NumPy's). Below the smallest normal number's logarithm the result is 0
  (the exact value is below 2.3e-308, resp. 1.2e-38), at ``-inf`` too; NaN gives NaN;
  other dtypes use ``jnp.exp``.
  Only for ``x <= 0``: positive arguments are not range-checked.
  """
  dtype = jnp.result_type(x)
  if dtype not in _EXP_CONSTANTS:
    return jnp.exp(x)
  degree, ln2_hi, ln2_lo, low, bits, bias, int_type = _EXP_CONSTANTS[dtype]
  # No clamp: below ``low`` (-inf included) k, r and the scale's bits may be anything, even
  # NaN, and the final select alone gives 0. A clamp cost a few percent of a tile's
  # throughput (a NaN-propagating maximum is several instructions on the tile's critical
  # path); NaN arguments still give NaN.
  under = x < low
  k = jnp.round(x * (1.0 / math.log(2.0)))
  r = (x - k * ln2_hi) - k * ln2_lo
  # 1 + (r + r^2 E(r)), E by Estrin's scheme: the two largest terms added last, so that
  # their rounding (the result's) dominates, as in Horner's rule.
  r2 = r * r
  p = 1.0 + (r + r2 * _estrin(r, [1.0 / math.factorial(i) for i in range(2, degree + 1)]))
  # k + bias in the low mantissa bits of 1.5 * 2^bits + bias + k, shifted into the exponent.
  field = lax.bitcast_convert_type(k + (1.5 * 2.0 ** bits + bias), int_type)
  scale = lax.bitcast_convert_type(lax.shift_left(field, int_type(bits)), dtype)
  return jnp.where(under, jnp.zeros_like(p), p * scale)


def _pairwise_sum(terms: list) -> Any:
  """``terms[0] + terms[1] + ...`` added in pairs, then pairs of pairs: a chain of
  ``ceil(log2(len(terms)))`` dependent additions instead of ``len(terms) - 1``."""
  while len(terms) > 1:
    terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  return terms[0]


def _estrin(r: Array, coefficients: list) -> Array:
  """``sum_i coefficients[i] r^i`` by Estrin's scheme: pairs ``c_i + c_{i+1} r``, then pairs
  of those with ``r^2``, ``r^4``, ...: about log2(degree) dependent multiply-adds where
  Horner's rule chains ``degree`` of them. In a tile's fused loop the chain, not the
  number of operations, limits the CPU's throughput (the loop's iterations overlap only
  as far as its reorder buffer reaches)."""
  terms = [coefficients[i] + coefficients[i + 1] * r if i + 1 < len(coefficients)
           else jnp.full_like(r, coefficients[i]) for i in range(0, len(coefficients), 2)]
  power = r * r
  while len(terms) > 1:
    terms = [terms[i] + terms[i + 1] * power if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
    power = power * power
  return terms[0]


def _direct_sq_distances(x1: Array, x2_t: Array) -> Array:
  """Squared distances (n1, n2) from direct differences, summed over the d coordinates in
  pairs (:func:`_pairwise_sum`); ``x2_t`` is (d, n2) (columns)."""
  if not x1.shape[1]:
    return jnp.zeros((x1.shape[0], x2_t.shape[1]), x1.dtype)
  squares = []
  for k in range(x1.shape[1]):
    diff = x1[:, k:k + 1] - x2_t[k][None, :]
    squares.append(diff * diff)
  return _pairwise_sum(squares)


class _Tiles(NamedTuple):
  """How a tile of kernel entries is computed: ``fn(x1, columns) -> (n1, n2)`` with the
  columns' points as (d, n2) when ``transposed`` (direct differences), else (n2, d)."""

  transposed: bool
  fn: Callable[[Array, Array], Array]


def _tiles(kernel: Any, dim: int) -> _Tiles:
  if isinstance(kernel, (RBF, Laplace)) and dim <= DIRECT_MAX_DIM:
    def direct(x1, x2_t):
      sq = _direct_sq_distances(x1, x2_t)
      if isinstance(kernel, Laplace):
        positive = sq > 0
        sq = jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)
      return exp_nonpositive(-kernel.gamma * sq)
    return _Tiles(True, direct)
  if isinstance(kernel, RBF):
    return _Tiles(False, lambda x1, x2: exp_nonpositive(-kernel.gamma * _sq_distances(x1, x2)))
  return _Tiles(False, kernel)


def _pad_rows(x: Array, n: int) -> Array:
  """``x`` with rows appended up to n: copies of its first row (a valid point for any kernel)."""
  pad = n - x.shape[0]
  if not pad:
    return x
  return jnp.concatenate([x, jnp.broadcast_to(x[:1], (pad,) + x.shape[1:])], axis=0)


def _row_tiles(fn, x: Array, n_cols: int, tile_elements: int) -> Array:
  """``fn`` applied to row tiles of ``x`` (each at most ``tile_elements / n_cols`` rows),
  one after the other (``lax.map``), the results stacked back in row order."""
  n, rest = x.shape[0], x.shape[1:]
  rows = max(1, min(n, tile_elements // max(n_cols, 1)))
  tiles = -(-n // rows)
  x = _pad_rows(x, tiles * rows)   # the padding rows' results are dropped
  out = lax.map(fn, x.reshape((tiles, rows) + rest))
  return out.reshape((tiles * rows,) + out.shape[2:])[:n]


def kernel_matvec(kernel: Any, x1: ArrayLike, x2: ArrayLike, v: ArrayLike,
                  tile_elements: int = TILE_ELEMENTS) -> Array:
  """``k(x1, x2) @ v`` without storing ``k(x1, x2)``: row tiles of x1, one at a time.

  Args:
    kernel: a kernel ``k(x1, x2) -> (n1, n2)`` (e.g. :class:`fedkrr.RBF`).
    x1: (n1, d) points (the rows).
    x2: (n2, d) points (the columns).
    v: (n2,) or (n2, C).
    tile_elements: kernel entries per tile (rows per tile: ``tile_elements // n2``,
      at least 1); memory is about a few tiles, never n1 x n2.

  Returns:
    (n1,) or (n1, C), in v's dtype.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> v = jnp.ones(8)
    >>> k = fedkrr.RBF(gamma=2.0)
    >>> bool(jnp.allclose(fedkrr.scale.kernel_matvec(k, x, x, v, tile_elements=16), k(x, x) @ v))
    True
  """
  v = jnp.asarray(v)
  x1, x2 = jnp.asarray(x1, v.dtype), jnp.asarray(x2, v.dtype)
  if x1.ndim != 2 or x2.ndim != 2 or x1.shape[1] != x2.shape[1]:
    raise ValueError(f"x1, x2: expected shapes (n1, d) and (n2, d), got {x1.shape} and "
                     f"{x2.shape}")
  if v.ndim not in (1, 2) or v.shape[0] != x2.shape[0]:
    raise ValueError(f"v: expected shape ({x2.shape[0]},) or ({x2.shape[0]}, C) to match x2, "
                     f"got {v.shape}")
  return _kernel_matvec(kernel, x1, x2, v, tile_elements)


def _kernel_matvec_impl(kernel, x1, x2, v, tile_elements):
  tiles = _tiles(kernel, x2.shape[1])
  columns = x2.T if tiles.transposed else x2
  return _row_tiles(lambda tile: full_matmul(tiles.fn(tile, columns).astype(v.dtype), v), x1,
                    x2.shape[0], tile_elements)


_kernel_matvec = jax.jit(_kernel_matvec_impl, static_argnames=("tile_elements",))


SYMMETRIC_MIN_TILES = 32
""":func:`symmetric_matvec` cuts the points into at least this many row tiles (where there
are as many points): its band of ``(T / 2 + 1) r`` columns evaluates about ``n r / 2``
entries more than half of the kernel, at most about a 32nd more with ``T >= 32``."""


def symmetric_rows(n: int, tile_elements: int) -> int:
  """The points per row tile of :func:`symmetric_matvec` over n points: ``2 tile_elements /
  n`` (a tile of about ``tile_elements`` entries), at most ``floor(n /
  SYMMETRIC_MIN_TILES)``, at least 1."""
  return max(1, min((2 * tile_elements) // max(n, 1), n // SYMMETRIC_MIN_TILES))


def symmetric_matvec(kernel: Any, x: ArrayLike, v: ArrayLike,
                     tile_elements: int = TILE_ELEMENTS) -> Array:
  """``k(x, x) @ v`` from about half of the kernel's entries (k is symmetric).

  The n points are cut into T row tiles of r points (``r = 2 tile_elements / n``, at
  most ``n / 32``, at least 1: :func:`symmetric_rows`; the last tile padded), and row
  tile i meets the column tiles ``i, i + 1, ..., i + floor(T / 2)`` (mod T): a band of
  ``(floor(T / 2) + 1) r`` columns, so that every unordered pair of tiles {i, j} is met
  once. Its tile ``K_ij`` gives both ``K_ij v_j`` and ``K_ji v_i = K_ij^T v_i``; the
  diagonal tile gives ``K_ii v_i`` only, and for even T the pairs at offset T / 2, met
  from both ends, give only their first product. About ``n (n + r) / 2`` kernel entries
  in all, against ``n^2`` for :func:`kernel_matvec`.

  Args:
    kernel: a symmetric kernel ``k(x1, x2) -> (n1, n2)``.
    x: (n, d) points.
    v: (n,) or (n, C).
    tile_elements: kernel entries per tile (``r`` times the band).

  Returns:
    (n,) or (n, C), in v's dtype.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 9)[:, None]
    >>> v = jnp.arange(9.0)
    >>> k = fedkrr.RBF(gamma=2.0)
    >>> got = fedkrr.scale.symmetric_matvec(k, x, v, tile_elements=9)
    >>> bool(jnp.allclose(got, k(x, x) @ v))
    True
  """
  v = jnp.asarray(v)
  x = jnp.asarray(x, v.dtype)
  if x.ndim != 2 or v.ndim not in (1, 2) or v.shape[0] != x.shape[0]:
    raise ValueError(f"x, v: expected shapes (n, d) and (n,) or (n, C) with the same n, got "
                     f"{x.shape} and {v.shape}")
  return _symmetric_matvec(kernel, x, v, tile_elements)


def _symmetric_matvec_impl(kernel, x, v, tile_elements):
  n = x.shape[0]
  column = v.ndim == 1
  v = v[:, None] if column else v
  rows = symmetric_rows(n, tile_elements)
  tiles = -(-n // rows)
  half = tiles // 2 + 1
  width, n_pad = half * rows, tiles * rows
  extra = width - rows
  spec = _tiles(kernel, x.shape[1])
  xp = _pad_rows(x, n_pad)
  vp = jnp.concatenate([v, jnp.zeros((n_pad - n, v.shape[1]), v.dtype)])   # padding: no mass
  # The points and v continued cyclically, so that every band is one contiguous slice.
  columns = jnp.concatenate([xp, xp[:extra]])
  columns = columns.T if spec.transposed else columns
  axis = 1 if spec.transposed else 0
  ve = jnp.concatenate([vp, vp[:extra]])
  offset = jnp.arange(width) // rows
  back = (offset > 0) & ~((tiles % 2 == 0) & (offset == half - 1))
  back = back.astype(v.dtype)[:, None]

  def body(i, carry):
    forward, backward, band = carry
    start = i * rows
    k = spec.fn(lax.dynamic_slice_in_dim(xp, start, rows), band).astype(v.dtype)
    forward = lax.dynamic_update_slice_in_dim(
        forward, full_matmul(k, lax.dynamic_slice_in_dim(ve, start, width)), start, 0)
    v_i = lax.dynamic_slice_in_dim(vp, start, rows)
    update = lax.dynamic_slice_in_dim(backward, start, width) + full_matmul(v_i.T, k).T * back
    backward = lax.dynamic_update_slice_in_dim(backward, update, start, 0)
    # The next band is sliced here, into a buffer of its own: sliced inside the tile's
    # fused loop (direct differences), the dynamic offset made that loop about 4x slower.
    band = lax.dynamic_slice_in_dim(columns, start + rows, width, axis)
    return forward, backward, band

  init = (jnp.zeros_like(vp), jnp.zeros_like(ve), lax.slice_in_dim(columns, 0, width, axis=axis))
  forward, backward, _ = lax.fori_loop(0, tiles, body, init)
  out = forward + backward[:n_pad]
  out = out.at[:extra].add(backward[n_pad:])[:n]
  return out[:, 0] if column else out


_symmetric_matvec = jax.jit(_symmetric_matvec_impl, static_argnames=("tile_elements",))


class NystromPreconditioner(NamedTuple):
  """``P^{-1} = (lam_r + c) U (diag(lam) + c I)^{-1} U^T + (I - U U^T)`` for ``c I + K``.

  ``U diag(lam) U^T`` is a Nystrom approximation of the scaled Gram matrix K (n x n):
  P agrees with ``c I + K`` on the range of U, scaled so that the remaining
  directions (eigenvalues at most about ``lam_r``) stay near 1. P is symmetric
  positive definite whatever the approximation's quality: it only changes how fast
  conjugate gradients converge.

  Attributes:
    basis: U, (n, m): its first ``last + 1`` columns orthonormal, the others zero.
    eigenvalues: lam, (m,) in decreasing order, >= 0 (0 past ``last``).
    ridge: c > 0.
    last: the index r - 1 of the smallest eigenvalue kept (``lam_r``).
  """

  basis: Array
  eigenvalues: Array
  ridge: Array
  last: Array

  def apply(self, r: Array) -> Array:
    """``P^{-1} r`` for r of shape (n,) or (n, C)."""
    lam = self.eigenvalues
    scale = (lam[self.last] + self.ridge) / (lam + self.ridge) - 1.0
    scale = jnp.where(jnp.arange(lam.shape[0]) <= self.last, scale, 0.0)
    # (r^T U)^T, not U^T r: for U^T r, XLA:CPU copied the transpose of U (n x m) at every
    # application, several times the cost of the two products at n = 50,000, m = 500.
    coef = full_matmul(r.T, self.basis).T
    scale = scale.reshape(scale.shape + (1,) * (r.ndim - 1))
    return r + full_matmul(self.basis, scale * coef)


def landmark_indices(n: int, landmarks: int, key: Array | None = None) -> Array:
  """``min(landmarks, n)`` distinct row indices: evenly spaced, or uniform without
  replacement when a PRNG ``key`` is given (Falkon's uniform Nystrom centres)."""
  m = min(int(landmarks), n)
  if key is None:
    return jnp.asarray((jnp.arange(m) * n) // m, jnp.int32)
  return jax.random.choice(key, n, (m,), replace=False)


def nystrom_preconditioner(kernel: Any, x: ArrayLike, ridge: ArrayLike, num_points: ArrayLike,
                           landmarks: int = 500, key: Array | None = None,
                           tile_elements: int = TILE_ELEMENTS) -> NystromPreconditioner:
  """The Nystrom preconditioner of ``c I + k(X, X) / N`` from m landmark points.

  With Z the landmarks (rows of X), ``K_nm = k(X, Z) / N`` and ``K_mm = k(Z, Z) / N``,
  ``K ~ K_nm K_mm^{-1} K_mn = B B^T`` with ``B = K_nm L^{-T}`` (``L L^T`` the
  Cholesky factor of ``K_mm`` plus a jitter of ``m eps max(diag)``); the thin SVD
  ``B = U S V^T`` gives ``lam = S^2`` (Frangella, Tropp & Udell 2023, Alg. 2.1
  with landmark columns in place of a random sketch), here from the eigenvectors
  of the m x m matrix ``B^T B``. Cost: ``n m`` kernel entries, ``n m^2`` flops and
  an m x m eigenproblem; memory a few n x m arrays.

  Args:
    kernel: the agent's kernel.
    x: (n, d) the agent's points.
    ridge: c > 0.
    num_points: N, the scale of the Gram blocks.
    landmarks: m, the number of landmark points (at most n).
    key: a PRNG key for uniform landmarks; ``None`` for evenly spaced rows.
    tile_elements: kernel entries per tile of ``K_nm``.

  Returns:
    A :class:`NystromPreconditioner` of rank at most ``min(m, n)``.
  """
  ridge = jnp.asarray(ridge)
  x = jnp.asarray(x, ridge.dtype)
  if not isinstance(landmarks, int) or isinstance(landmarks, bool) or landmarks < 1:
    raise ValueError(f"landmarks: expected an integer >= 1, got {landmarks!r}")
  idx = landmark_indices(x.shape[0], landmarks, key)
  return _nystrom(kernel, x, x[idx], ridge, jnp.asarray(num_points, ridge.dtype), tile_elements)


@functools.partial(jax.jit, static_argnames=("tile_elements",))
def _nystrom(kernel, x, z, ridge, num_points, tile_elements) -> NystromPreconditioner:
  dtype = x.dtype
  m = z.shape[0]
  eps = jnp.finfo(dtype).eps
  k_nm = _row_tiles(lambda t: kernel(t, z).astype(dtype), x, m, tile_elements) / num_points
  k_mm = kernel(z, z).astype(dtype) / num_points
  k_mm = 0.5 * (k_mm + k_mm.T)
  jitter = m * eps * jnp.maximum(jnp.max(jnp.diag(k_mm)), jnp.finfo(dtype).tiny)
  chol = jnp.linalg.cholesky(k_mm + jitter * jnp.eye(m, dtype=dtype))
  b = jax.scipy.linalg.solve_triangular(chol, k_nm.T, lower=True).T   # K_nm L^{-T}
  # B = U S V^T from the m x m eigenproblem of B^T B (an n x m SVD is far slower on a
  # CPU); U = B V / S keeps orthonormal columns to about eps s_max^2 / s^2, so the
  # directions with s^2 below 1e4 eps s_max^2 are dropped (weight 0 in apply).
  w, v = jnp.linalg.eigh(full_matmul(b.T, b))
  w, v = w[::-1], v[:, ::-1]
  keep = w > 1e4 * eps * jnp.maximum(w[0], jnp.finfo(dtype).tiny)
  u = full_matmul(b, v) * jnp.where(keep, lax.rsqrt(jnp.where(keep, w, 1.0)), 0.0)[None, :]
  lam = jnp.where(keep, w, 0.0)
  return NystromPreconditioner(u, lam, ridge, jnp.sum(keep) - 1)


class RidgeSolution(NamedTuple):
  """The result of :func:`ridge_solve`.

  Attributes:
    alpha: the coefficients, shape of the right-hand side.
    iterations: conjugate-gradient iterations run.
    residual: the largest relative residual ``|t - (c I + K) alpha| / |t|`` over the
      right-hand side's columns: the true residual, formed from alpha with one more
      product (CG's recursively updated residual can drift far below it when
      ``c I + K`` is ill-conditioned).
    converged: whether every column's true residual reached the tolerance within
      ``maxiter`` iterations.
    product: ``(c I + K) alpha`` as formed for the residual (the start's, from the
      guesses' products, when CG had nothing to do): with the solution, a free start for
      the next solve on the same points (``initial_products``).
    matvecs: the kernel products the solve made: the start's (one per guess whose
      product was not given), one per iteration, one per true residual.
  """

  alpha: Array
  iterations: Array
  residual: Array
  converged: Array
  product: Array
  matvecs: Array


PASSES = 8
"""The most passes of conjugate gradients in one solve: each pass after the first restarts
from the current solution and its true residual (iterative refinement)."""


def _column_dot(a: Array, b: Array) -> Array:
  """The inner products of the columns of two (n, C) arrays: (C,)."""
  return jnp.sum(a * b, axis=0)


def _cg(matvec, precondition, rhs: Array, tol, maxiter, start=None
        ) -> tuple[Array, Array, Array, Array, Array, Array]:
  """Preconditioned conjugate gradients, column by column of a (n, C) right-hand side
  (each column its own step sizes), until every column's TRUE residual
  ``|rhs - A x|`` is below ``tol |rhs|``.

  A pass runs CG until the recursively updated residual is below the target (or
  ``maxiter`` iterations in all); that residual drifts from the true one by rounding
  errors of order ``eps |A| |x|``, so the true residual is then formed with one more
  product. Where it is still above the target, the next pass restarts CG from ``x``
  on it (iterative refinement), up to ``PASSES`` passes, while a pass still halves
  the true residual of some column that has not converged. Returns the solution with
  the smallest true residual of each column, ``A x`` as formed for it, the iterations
  of all passes, the passes, the largest relative true residual and whether every
  column reached the target. CG starts from ``start = (x0, A x0, trusted)`` if given
  (``A x0`` formed by the caller; when not ``trusted`` the first pass forms the true
  residual whatever ``rhs - A x0`` reads), else from 0.
  """
  dot = _column_dot
  rhs_norm = jnp.sqrt(dot(rhs, rhs))
  target = tol * rhs_norm

  def one_pass(x, r, k):
    z = precondition(r)

    def going(state):
      _, r, _, _, _, k = state
      return (k < maxiter) & jnp.any(jnp.sqrt(dot(r, r)) > target)

    def step(state):
      x, r, _, p, rz, k = state
      q = matvec(p)
      pq = dot(p, q)
      a = jnp.where(pq > 0, rz / jnp.where(pq > 0, pq, 1.0), 0.0)
      x = x + a[None, :] * p
      r = r - a[None, :] * q
      z = precondition(r)
      rz_new = dot(r, z)
      beta = jnp.where(rz > 0, rz_new / jnp.where(rz > 0, rz, 1.0), 0.0)
      return x, r, z, z + beta[None, :] * p, rz_new, k + 1

    x, _, _, _, _, k = lax.while_loop(going, step, (x, r, z, z, dot(r, z), k))
    return x, k

  def refining(state):
    _, _, _, norm, k, passes, improved = state
    return (k < maxiter) & (passes < PASSES) & improved & jnp.any(norm > target)

  def refine(state):
    x, ax, r, norm, k, passes, _ = state
    x_new, k = one_pass(x, r, k)
    ax_new = matvec(x_new)
    r_new = rhs - ax_new
    norm_new = jnp.sqrt(dot(r_new, r_new))
    better = norm_new < norm
    improved = jnp.any((norm > target) & (norm_new < 0.5 * norm))
    keep = lambda new, old: jnp.where(better[None, :], new, old)  # noqa: E731
    return (keep(x_new, x), keep(ax_new, ax), keep(r_new, r), jnp.where(better, norm_new, norm),
            k, passes + 1, improved)

  if start is None:
    x, ax, trusted = jnp.zeros_like(rhs), jnp.zeros_like(rhs), True
  else:
    x, ax, trusted = start
  r = rhs - ax
  norm = jnp.sqrt(dot(r, r))
  # An untrusted start's residual is CG's to reduce, but not the one to stop on: the first
  # pass always forms the true residual (an infinite norm makes it run and be kept).
  norm_state = jnp.where(trusted, norm, jnp.inf)
  state = (x, ax, r, norm_state, jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32),
           jnp.asarray(True))
  x, ax, _, norm, k, passes, _ = lax.while_loop(refining, refine, state)
  residual = jnp.max(norm / jnp.maximum(rhs_norm, jnp.finfo(rhs.dtype).tiny))
  return x, ax, k, passes, residual, jnp.all(norm <= target)


def _start(guesses: Array, products: Array, rhs: Array, tol) -> tuple[Array, Array, Array]:
  """The combination of the guesses closest to the solution of ``A x = rhs`` in A's norm.

  ``guesses`` and ``products`` (their ``A g``) are (h, n, C), the most important first; each
  column of ``rhs`` (n, C) gets its own combination. The guesses are made A-orthonormal in
  their order by Gram-Schmidt (twice) on the pairs (g, A g), so no kernel product is
  needed; a guess whose part outside the span of those before is below ``drop`` of its
  A-norm adds nothing (zero guesses included). ``drop = min(1, 10 eps / tol)`` bounds the
  growth of the coefficients by ``1 / drop``, so that the cancellation error of
  ``A x0 = sum_j coef_j A g_j`` stays near ``tol / 10`` of ``|rhs|``. Returns ``x0``,
  ``A x0`` and whether it may be trusted as a true residual: only where one guess
  was kept in every column (a scaled guess, as exact as its product); otherwise the
  solve forms the true residual before it stops.
  """
  dot = _column_dot
  drop = jnp.minimum(1.0, 10.0 * jnp.finfo(rhs.dtype).eps / tol)
  basis: list[tuple[Array, Array]] = []
  kept = jnp.zeros(rhs.shape[1], jnp.int32)
  for g, ag in zip(guesses, products):
    norm0 = jnp.sqrt(jnp.maximum(dot(g, ag), 0.0))
    for _ in range(2):
      for q, aq in basis:
        c = dot(g, aq)[None, :]
        g, ag = g - c * q, ag - c * aq
    norm = jnp.sqrt(jnp.maximum(dot(g, ag), 0.0))
    keep = (norm0 > 0) & (norm > drop * norm0)
    inverse = jnp.where(keep, 1.0 / jnp.where(keep, norm, 1.0), 0.0)[None, :]
    basis.append((g * inverse, ag * inverse))
    kept = kept + keep.astype(jnp.int32)
  x0, ax0 = jnp.zeros_like(rhs), jnp.zeros_like(rhs)
  for q, aq in basis:
    c = dot(q, rhs)[None, :]
    x0, ax0 = x0 + c * q, ax0 + c * aq
  return x0, ax0, jnp.all(kept <= 1)


def ridge_solve(kernel: Any, x: ArrayLike, rhs: ArrayLike, ridge: ArrayLike,
                num_points: ArrayLike, preconditioner: NystromPreconditioner | None = None,
                tol: float | None = None, maxiter: int = 1000,
                tile_elements: int = TILE_ELEMENTS, initial: ArrayLike | None = None,
                initial_products: ArrayLike | None = None) -> RidgeSolution:
  """Solves ``(c I + k(X, X) / N) alpha = t`` by (preconditioned) conjugate gradients.

  Each iteration is one :func:`symmetric_matvec` (tiles, never the n x n block; about
  half the kernel's entries) and one application of the preconditioner. Columns of a
  matrix right-hand side are solved independently, each with its own step sizes.

  With ``initial`` guesses (e.g. the same agent's solutions of the previous rounds), CG
  starts from their combination closest to the solution in the norm of
  ``A = c I + K`` (each column its own; for one guess a, ``s a`` with
  ``s = <a, t> / <a, A a>``), so never a worse start than 0 or than any one guess in
  that norm. It needs ``A g`` for every guess g: given as ``initial_products`` (a
  solution's :attr:`RidgeSolution.product`: no kernel product), else one product each.
  A start from one guess is as exact as its product and may stop the solve at once;
  from several, the solve forms the true residual before it stops. The stopping rule
  is the same either way.

  Args:
    kernel: the kernel k.
    x: (n, d) the points X.
    rhs: t, (n,) or (n, C); its dtype is the solve's.
    ridge: c > 0.
    num_points: N.
    preconditioner: a :class:`NystromPreconditioner` for these points (``None``:
      plain conjugate gradients).
    tol: stop when every column's true residual is below ``tol |t|``; default
      :func:`default_tol` of the dtype. Rounding errors keep the true residual above
      about ``eps |c I + K| |alpha| / |t|`` (some 1e-10 in float64 at a condition
      number of 5e7): below that, ``converged`` is False.
    maxiter: the most iterations.
    tile_elements: kernel entries per tile.
    initial: a guess of alpha (the shape of t), or h guesses stacked on a leading axis
      ((h,) + t's shape; zero guesses are ignored); ``None``: start from 0.
    initial_products: ``(c I + k(X, X) / N) g`` for each guess g, the shape of
      ``initial``; ``None``: computed. They must be these products on these points:
      a start trusted from them is not checked again.

  Returns:
    A :class:`RidgeSolution` (``iterations`` does not count the products of the start
    and of the true residuals; ``matvecs`` does).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> t = jnp.sin(3.0 * x[:, 0])
    >>> k = fedkrr.RBF(gamma=2.0)
    >>> sol = fedkrr.scale.ridge_solve(k, x, t, 1e-2, 8.0, tol=1e-6)
    >>> bool(jnp.allclose((1e-2 * jnp.eye(8) + k(x, x) / 8.0) @ sol.alpha, t, atol=1e-5))
    True
  """
  rhs = jnp.asarray(rhs)
  if not jnp.issubdtype(rhs.dtype, jnp.floating):
    rhs = rhs.astype(jnp.asarray(ridge, dtype=float).dtype)
  x = jnp.asarray(x, rhs.dtype)
  if x.ndim != 2 or rhs.ndim not in (1, 2) or rhs.shape[0] != x.shape[0]:
    raise ValueError(f"x, rhs: expected shapes (n, d) and (n,) or (n, C) with the same n, "
                     f"got {x.shape} and {rhs.shape}")
  if not isinstance(maxiter, int) or isinstance(maxiter, bool) or maxiter < 1:
    raise ValueError(f"maxiter: expected an integer >= 1, got {maxiter!r}")
  if preconditioner is not None and preconditioner.basis.shape[0] != x.shape[0]:
    raise ValueError(f"preconditioner: built for {preconditioner.basis.shape[0]} points, "
                     f"but x has {x.shape[0]}")
  if initial is None and initial_products is not None:
    raise ValueError("initial_products: given without initial")
  if initial is not None:
    initial = jnp.asarray(initial, rhs.dtype)
    if initial.shape == rhs.shape:
      initial = initial[None]
    if initial.ndim != rhs.ndim + 1 or initial.shape[1:] != rhs.shape:
      raise ValueError(f"initial: expected the shape of rhs {rhs.shape}, or guesses stacked "
                       f"(h,) + {rhs.shape}, got {initial.shape}")
    if initial_products is not None:
      initial_products = jnp.asarray(initial_products, rhs.dtype)
      if initial_products.shape == rhs.shape:
        initial_products = initial_products[None]
      if initial_products.shape != initial.shape:
        raise ValueError(f"initial_products: expected the shape of initial {initial.shape}, "
                         f"got {initial_products.shape}")
  tol = default_tol(rhs.dtype) if tol is None else tol
  return _ridge_solve(kernel, x, rhs, jnp.asarray(ridge, rhs.dtype),
                      jnp.asarray(num_points, rhs.dtype), preconditioner,
                      jnp.asarray(tol, rhs.dtype), maxiter, tile_elements, initial,
                      initial_products)


def _ridge_solve_impl(kernel, x, rhs, ridge, num_points, preconditioner, tol, maxiter,
                      tile_elements, initial=None, initial_products=None) -> RidgeSolution:
  column = rhs.ndim == 1
  t = rhs[:, None] if column else rhs

  def matvec(v):
    return ridge * v + _symmetric_matvec_impl(kernel, x, v, tile_elements) / num_points

  start, start_products = None, 0
  if initial is not None:
    guesses = initial[..., None] if column else initial
    if initial_products is None:
      products = lax.map(matvec, guesses)
      start_products = guesses.shape[0]
    else:
      products = initial_products[..., None] if column else initial_products
    start = _start(guesses, products, t, tol)
  precondition = (lambda r: r) if preconditioner is None else preconditioner.apply
  alpha, product, iterations, passes, residual, converged = _cg(
      matvec, precondition, t, tol, maxiter, start)
  shape = (lambda a: a[:, 0]) if column else (lambda a: a)  # noqa: E731
  return RidgeSolution(shape(alpha), iterations, residual, converged, shape(product),
                       iterations + passes + start_products)


_ridge_solve = jax.jit(_ridge_solve_impl, static_argnames=("maxiter", "tile_elements"))


@pytree_dataclass
class MatfreeKRRModel:
  """``g(x) = k(x, X) alpha / N``, predicted in tiles (:func:`kernel_matvec`).

  Attributes:
    kernel: the agent's kernel.
    x_train: X, (n, d).
    alpha: the coefficients, (n,) or (n, C).
    num_points: N.
    iterations: the conjugate-gradient iterations of the fit.
    residual: the fit's relative residual (:class:`RidgeSolution`).
    tile_elements: kernel entries per tile.
    product: ``(c I + k(X, X) / N) alpha`` as the fit formed it (``None``: unknown), for
      the next fit's start (:meth:`MatfreeKRRLearner.warm_start_from`).
    matvecs: the kernel products of the fit (:class:`RidgeSolution`; ``None``: unknown).
  """

  kernel: Any
  x_train: Array
  alpha: Array
  num_points: Array
  iterations: Array
  residual: Array
  tile_elements: int = dataclasses.field(default=TILE_ELEMENTS, metadata=dict(static=True))
  product: Array | None = None
  matvecs: Array | None = None

  def predict(self, x: ArrayLike) -> Array:
    """The fitted function at the points ``x``."""
    return _predict(self, jnp.asarray(x, self.alpha.dtype))


@jax.jit
def _predict(model: MatfreeKRRModel, x: Array) -> Array:
  return _kernel_matvec_impl(model.kernel, x, model.x_train, model.alpha,
                            model.tile_elements) / model.num_points


class ConvergenceError(RuntimeError):
  """Conjugate gradients did not reach the tolerance within ``maxiter`` iterations."""


@pytree_dataclass
class MatfreeKRRLearner:
  """Kernel ridge regression in the paper's convention, solved without Gram matrices.

  Fitting on ``(X, t)`` solves ``(c I + k(X, X) / N) alpha = t`` by
  :func:`ridge_solve` (c > 0) and returns a :class:`MatfreeKRRModel`. Its
  predictions equal :class:`fedkrr.KRRLearner`'s up to the CG tolerance.

  Attributes:
    kernel: the agent's kernel.
    ridge: c > 0.
    num_points: N.
    preconditioner: a :class:`NystromPreconditioner` built for the agent's points
      (explicit state: built once by :func:`matfree_learners`, used by every fit on
      as many points); a fit on a different number of points (e.g. the pooled data
      of :func:`fedkrr.protocols.central_models`) builds its own, and ``None`` builds one per fit.
    tol: CG tolerance (``None``: :func:`default_tol`).
    maxiter: the most CG iterations; a fit that needs more raises
      :class:`ConvergenceError`.
    landmarks: m, for preconditioners built by the fit (0: no preconditioner).
    tile_elements: kernel entries per tile.
    initial: the coefficients a fit starts CG from (see :func:`ridge_solve`): one guess of
      the targets' shape, or guesses stacked on a leading axis; ``None``: from 0. Set by
      :meth:`warm_start_from`.
    initial_products: ``(c I + k(X, X) / N)`` times each of ``initial`` on
      ``initial_points`` (``None``: the fit computes them, one kernel product each).
    initial_points: the points the products were formed on; a fit on other points
      starts from the newest guess alone and computes its product.
    history: how many of the agent's latest solutions :meth:`warm_start_from` keeps as
      guesses (1: the last one, scaled).
  """

  kernel: Any
  ridge: Array
  num_points: Array
  preconditioner: NystromPreconditioner | None = None
  tol: float | None = dataclasses.field(default=None, metadata=dict(static=True))
  maxiter: int = dataclasses.field(default=1000, metadata=dict(static=True))
  landmarks: int = dataclasses.field(default=500, metadata=dict(static=True))
  tile_elements: int = dataclasses.field(default=TILE_ELEMENTS, metadata=dict(static=True))
  initial: Array | None = None
  initial_products: Array | None = None
  initial_points: Array | None = None
  history: int = dataclasses.field(default=8, metadata=dict(static=True))

  def warm_start_from(self, model: Any) -> MatfreeKRRLearner:
    """The same learner, its next fit started from ``model``'s coefficients and the
    ``history - 1`` solutions before them (a model of another kind: unchanged).

    :func:`fedkrr.protocols.iterate` calls it with each agent's latest model, so that a protocol's
    rounds warm-start CG from the best combination of the agent's latest solutions (as
    the rounds converge geometrically, a few of them predict the next one well). The
    solutions' products come with them (:attr:`MatfreeKRRModel.product`): the start
    costs no kernel product. The solution is the same up to the tolerance, the number of
    iterations smaller as the targets converge. The guesses are zero-padded to
    ``history``, so that every warm fit runs one compiled solve.
    """
    if not isinstance(model, MatfreeKRRModel):
      return self
    if model.product is None:
      return dataclasses.replace(self, initial=model.alpha, initial_products=None,
                                 initial_points=None)
    alphas, products = model.alpha[None], model.product[None]
    if (self.initial_products is not None and self.initial_points is not None
        and self.initial is not None and self.initial.shape[1:] == model.alpha.shape
        and _same_points(self.initial_points, model.x_train)):
      alphas = jnp.concatenate([alphas, self.initial[:self.history - 1]])
      products = jnp.concatenate([products, self.initial_products[:self.history - 1]])
    pad = [(0, self.history - alphas.shape[0])] + [(0, 0)] * model.alpha.ndim
    return dataclasses.replace(self, initial=jnp.pad(alphas, pad),
                               initial_products=jnp.pad(products, pad),
                               initial_points=model.x_train)

  def fit(self, x: ArrayLike, targets: ArrayLike) -> MatfreeKRRModel:
    """Kernel ridge regression of ``targets`` on ``x`` (cast to the ridge's dtype).

    Raises:
      ConvergenceError: CG's true residual did not reach the tolerance: it needed more
        than ``maxiter`` iterations, or rounding errors keep it above (``_cg``).
    """
    dtype = jnp.asarray(self.ridge).dtype
    x, targets = jnp.asarray(x, dtype), jnp.asarray(targets, dtype)
    pre = self.preconditioner
    if pre is None or pre.basis.shape[0] != x.shape[0]:
      pre = None if self.landmarks == 0 else nystrom_preconditioner(
          self.kernel, x, self.ridge, self.num_points, self.landmarks,
          tile_elements=self.tile_elements)
    tol = default_tol(dtype) if self.tol is None else self.tol
    initial, products = self.initial, self.initial_products
    if initial is not None and jnp.shape(initial)[-targets.ndim:] != targets.shape:
      initial = products = None
    if initial is not None and products is not None and (
        self.initial_points is None or not _same_points(self.initial_points, x)):
      # Other points: the newest guess alone, its product formed again.
      initial = initial[0] if jnp.ndim(initial) > targets.ndim else initial
      products = None
    sol = ridge_solve(self.kernel, x, targets, self.ridge, self.num_points, pre, tol,
                      self.maxiter, self.tile_elements, initial, products)
    if not bool(sol.converged):
      where = (f"after maxiter = {self.maxiter} iterations on {x.shape[0]} points; raise "
               f"maxiter or landmarks, or use a larger ridge")
      if int(sol.iterations) < self.maxiter:   # refinement stopped improving: rounding
        where = (f"after {int(sol.iterations)} iterations (maxiter = {self.maxiter}) on "
                 f"{x.shape[0]} points, where restarts from the true residual stopped "
                 f"improving it: c I + K is too ill-conditioned for this tol in "
                 f"{jnp.dtype(dtype).name}; use a larger tol or ridge")
      raise ConvergenceError(f"conjugate gradients reached true relative residual "
                             f"{float(sol.residual):.3g} > tol {tol:.3g} {where}")
    return MatfreeKRRModel(self.kernel, x, sol.alpha, jnp.asarray(self.num_points, dtype),
                           sol.iterations, sol.residual, self.tile_elements, sol.product,
                           sol.matvecs)


def _same_points(a: Array, b: Array) -> bool:
  """Whether two point sets are the same (the same array, or equal values)."""
  return a is b or (a.shape == b.shape and bool(jnp.array_equal(a, b)))


def check_matfree_problem(problem: FederatedProblem) -> None:
  """Raises :class:`ProblemError` unless the problem's ridge is > 0 (CG needs c I + K
  positive definite)."""
  if not float(problem.ridge) > 0:
    raise ProblemError(f"ridge: the matrix-free path needs c > 0 (conjugate gradients on "
                       f"c I + K), got {float(problem.ridge)!r}; use the exact path for c = 0")


def matfree_learners(problem: FederatedProblem, landmarks: int = 500, tol: float | None = None,
                     maxiter: int = 1000, key: Array | None = None,
                     tile_elements: int = TILE_ELEMENTS, history: int = 8
                     ) -> tuple[MatfreeKRRLearner, ...]:
  """One :class:`MatfreeKRRLearner` per agent, its preconditioner built once on its points.

  Args:
    problem: the federated problem (ridge c > 0).
    landmarks: m per agent (0: plain conjugate gradients).
    tol: CG tolerance (``None``: :func:`default_tol`).
    maxiter: the most CG iterations per fit.
    key: PRNG key for uniform landmarks (split per agent); ``None``: evenly spaced.
    tile_elements: kernel entries per tile.
    history: the latest solutions a warm start combines (:class:`MatfreeKRRLearner`).

  Raises:
    ProblemError: c = 0. ValueError: a bad ``landmarks``, ``maxiter`` or ``history``.
  """
  check_matfree_problem(problem)
  if not isinstance(landmarks, int) or isinstance(landmarks, bool) or landmarks < 0:
    raise ValueError(f"landmarks: expected an integer >= 0, got {landmarks!r}")
  if not isinstance(maxiter, int) or isinstance(maxiter, bool) or maxiter < 1:
    raise ValueError(f"maxiter: expected an integer >= 1, got {maxiter!r}")
  if not isinstance(history, int) or isinstance(history, bool) or history < 1:
    raise ValueError(f"history: expected an integer >= 1, got {history!r}")
  n = jnp.asarray(problem.num_points, problem.ridge.dtype)
  keys = [None] * problem.num_agents if key is None else list(
      jax.random.split(key, problem.num_agents))
  learners = []
  for a, (kernel, x) in enumerate(zip(problem.kernels, problem.xs)):
    pre = None if landmarks == 0 else nystrom_preconditioner(
        kernel, x, problem.ridge, n, landmarks, keys[a], tile_elements)
    learners.append(MatfreeKRRLearner(kernel, problem.ridge, n, pre, tol, maxiter, landmarks,
                                      tile_elements, history=history))
  return tuple(learners)


def matfree_trajectory(problem: FederatedProblem, protocol: str, rounds: int, x_eval: ArrayLike,
                       start: int | None = None, every: int = 1, landmarks: int = 500,
                       tol: float | None = None, maxiter: int = 1000, key: Array | None = None,
                       tile_elements: int = TILE_ELEMENTS, progress: bool = False,
                       history: int = 8, params: ProtocolParams | None = None) -> Array:
  """:func:`fedkrr.trajectory` without N x N matrices: every round run literally.

  The protocol runs round by round through :func:`fedkrr.simulate` with
  :func:`matfree_learners`, so every fit is a preconditioned CG solve and every
  prediction a tiled block matrix-vector product. The result has the layout of
  :func:`fedkrr.trajectory` and equals it up to the CG tolerance.

  Args:
    problem: the federated problem (c > 0).
    protocol: one of ``fedkrr.PROTOCOLS``.
    rounds: T >= 1.
    x_eval: (n_eval, d) evaluation points.
    start: deprecated: ``params=ProtocolParams(start=...)`` (AKD's starting agent).
    every: keep rounds 0, k, 2k, ... (all rounds still run).
    landmarks: m per agent (see :func:`matfree_learners`).
    tol: CG tolerance (see :func:`matfree_learners`).
    maxiter: the most CG iterations per fit.
    key: PRNG key for the landmarks (see :func:`matfree_learners`).
    tile_elements: kernel entries per tile.
    progress: a progress bar over the rounds.
    history: the latest solutions each warm start combines (see :func:`matfree_learners`).

  Returns:
    The predictions, in the problem's dtype.

  Raises:
    ProblemError: c = 0 or bad evaluation points. ValueError: a bad protocol,
      start, rounds or every. ConvergenceError: a fit did not converge.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> fedkrr.scale.matfree_trajectory(problem, "avgkd", 5, x).shape
    (5, 2, 8)
  """
  protocols.check_protocol_name(protocol)
  params = make_params(params, start)
  check_params(protocol, params, problem.num_agents)
  protocols.check_rounds(rounds)
  closed_form.check_every(every, protocol, problem.num_agents)
  x_eval = check_eval_points(problem, x_eval)
  learners = matfree_learners(problem, landmarks, tol, maxiter, key, tile_elements, history)
  return protocols.simulate(protocol, learners, problem.xs, problem.ys, rounds, x_eval,
                            progress=progress, every=every, params=params)
