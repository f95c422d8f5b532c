"""Krylov spectral radii (fedkrr/_src/krylov.py) against NumPy's dense eigen-solvers."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from fedkrr._src import krylov


@functools.partial(jax.jit, static_argnames=("method", "steps"))
def _radius(a, method, steps=200):
  v0 = krylov.start_vector(a.shape[0], a.dtype)
  fn = krylov.lanczos_radius if method == "lanczos" else krylov.arnoldi_radius
  return fn(lambda v: a @ v, v0, steps)


def _with_spectrum(rng, block_diagonal):
  """Q D Q^{-1} for a random well-conditioned Q: D's spectrum, no symmetry."""
  n = block_diagonal.shape[0]
  q = np.linalg.qr(rng.normal(size=(n, n)))[0] + 0.3 * rng.normal(size=(n, n)) / np.sqrt(n)
  return q @ block_diagonal @ np.linalg.inv(q)


@pytest.mark.parametrize("n", [1, 30])
def test_lanczos_matches_eigvalsh(x64, n):
  a = np.random.default_rng(n).normal(size=(n, n))
  for sym in (a + a.T, a @ a.T):   # indefinite, and positive semi-definite
    result = _radius(jnp.asarray(sym), "lanczos")
    expected = np.max(np.abs(np.linalg.eigvalsh(sym)))
    assert bool(result.converged)
    assert abs(float(result.radius) - expected) < 1e-12 * expected


@pytest.mark.parametrize("n", [1, 30])
def test_arnoldi_matches_eigvals(x64, n):
  a = np.random.default_rng(n).normal(size=(n, n))
  result = _radius(jnp.asarray(a), "arnoldi")
  expected = np.max(np.abs(np.linalg.eigvals(a)))
  assert bool(result.converged)
  assert abs(float(result.radius) - expected) < 1e-12 * expected


@pytest.mark.parametrize("pair", [(0.8, 0.6), (0.9, 0.0)])
def test_arnoldi_finds_a_dominant_pair(x64, pair):
  # A complex pair 0.8 +- 0.6i (modulus 1), or a real pair +-0.9, above the rest.
  re, im = pair
  rng = np.random.default_rng(3)
  d = np.diag(np.concatenate([[0.0, 0.0], rng.uniform(-0.5, 0.5, 28)]))
  if im:
    d[:2, :2] = [[re, im], [-im, re]]
  else:
    d[0, 0], d[1, 1] = re, -re
  result = _radius(jnp.asarray(_with_spectrum(rng, d)), "arnoldi")
  assert bool(result.converged)
  assert abs(float(result.radius) - np.hypot(re, im)) < 1e-12


def test_too_few_steps_are_flagged(x64):
  # Eigenvalues 0, 1/29, ..., 1 (spread evenly): five steps cannot resolve the top one.
  diag = jnp.diag(jnp.linspace(0.0, 1.0, 30))
  for method in ("lanczos", "arnoldi"):
    result = _radius(diag, method, steps=5)
    assert not bool(result.converged)
    assert float(result.residual) > 1e-3


def test_rank_deficient_and_zero_maps(x64):
  u = np.random.default_rng(4).normal(size=(30, 3))
  low_rank = u @ u.T   # an invariant Krylov space of dimension 3: Lanczos breaks down
  result = _radius(jnp.asarray(low_rank), "lanczos")
  expected = np.max(np.linalg.eigvalsh(low_rank))
  assert bool(result.converged)
  assert abs(float(result.radius) - expected) < 1e-12 * expected
  for method in ("lanczos", "arnoldi"):
    result = _radius(jnp.zeros((30, 30)), method)
    assert float(result.radius) == 0.0 and np.isfinite(float(result.residual))


def test_vmapped_batch_equals_each_instance(x64):
  mats = jnp.asarray(np.random.default_rng(5).normal(size=(3, 30, 30)))
  batched = jax.vmap(lambda a: _radius(a, "arnoldi"))(mats)
  for i in range(3):
    one = _radius(mats[i], "arnoldi")
    assert abs(float(batched.radius[i]) - float(one.radius)) < 1e-13


def test_float32_converges_to_its_tolerance():
  a = np.random.default_rng(6).normal(size=(30, 30)).astype(np.float32)
  result = _radius(jnp.asarray(a @ a.T), "lanczos")
  assert result.radius.dtype == jnp.float32 and bool(result.converged)
  top = np.max(np.linalg.eigvalsh((a @ a.T).astype(np.float64)))
  assert abs(float(result.radius) - top) < 1e-4 * top


def test_bad_arguments_are_named():
  v0 = jnp.ones(3)
  with pytest.raises(ValueError, match="steps"):
    krylov.lanczos_radius(lambda v: v, v0, 0)
  with pytest.raises(ValueError, match="restart"):
    krylov.arnoldi_radius(lambda v: v, v0, 10, restart=0)
  with pytest.raises(ValueError, match="v0"):
    krylov.arnoldi_radius(lambda v: v, jnp.ones((2, 2)), 10)


def _clustered_psd(rng, n=60):
  """Q diag(w) Q^T with a cluster of three top eigenvalues 1, 0.999, 0.998 over [0, 0.9]."""
  w = np.concatenate([[1.0, 0.999, 0.998], rng.uniform(0.0, 0.9, n - 3)])
  q = np.linalg.qr(rng.normal(size=(n, n)))[0]
  return (q * w) @ q.T, q[:, 0]


@functools.partial(jax.jit, static_argnames=("steps", "restart"))
def _block_top(a, start, steps=200, restart=24):
  return krylov.block_top_eigen(lambda v: a @ v, start, steps, restart=restart)


def test_block_method_finds_the_top_of_a_cluster_and_restarts_from_its_block(x64):
  rng = np.random.default_rng(7)
  a, top_vector = _clustered_psd(rng)
  start = jnp.asarray(rng.normal(size=(4, 60)))
  result, block = _block_top(jnp.asarray(a), start)
  assert bool(result.converged) and float(result.residual) <= krylov.default_rtol(
      jnp.float64, symmetric=True)
  assert abs(float(result.radius) - np.max(np.linalg.eigvalsh(a))) < 1e-12
  assert block.shape == (4, 60) and abs(abs(float(block[-1] @ top_vector)) - 1.0) < 1e-6
  np.testing.assert_allclose(block @ block.T, np.eye(4), atol=1e-12)
  # a nearby matrix from that block: one cycle of 20 new vectors is enough
  e = rng.normal(size=(60, 60))
  nearby = a + 1e-7 * (e + e.T)
  again, _ = _block_top(jnp.asarray(nearby), block, steps=20)
  assert bool(again.converged)
  assert abs(float(again.radius) - np.max(np.linalg.eigvalsh(nearby))) < 1e-12


def test_block_method_flags_too_few_steps_and_handles_zero_and_full_blocks(x64):
  diag = jnp.diag(jnp.linspace(0.0, 1.0, 30))
  result, _ = _block_top(diag, jnp.ones((2, 30)), steps=3, restart=5)
  assert not bool(result.converged) and float(result.residual) > 1e-3
  zero, _ = _block_top(jnp.zeros((30, 30)), jnp.ones((2, 30)) + jnp.eye(2, 30))
  assert float(zero.radius) == 0.0 and bool(zero.converged)
  small = jnp.asarray([[2.0, 1.0], [1.0, 2.0]])   # p = n: Rayleigh-Ritz on the whole space
  exact, _ = _block_top(small, jnp.eye(2), restart=2)
  assert abs(float(exact.radius) - 3.0) < 1e-14 and bool(exact.converged)


def test_block_method_names_bad_arguments():
  with pytest.raises(ValueError, match="start"):
    krylov.block_top_eigen(lambda v: v, jnp.ones(3), 10)
  with pytest.raises(ValueError, match="restart"):
    krylov.block_top_eigen(lambda v: v, jnp.ones((4, 30)), 10, restart=4)


@functools.partial(jax.jit, static_argnames=("steps", "restart"))
def _continued(a, start, active=True, steps=200, restart=20):
  return krylov.arnoldi_continued(lambda v: a @ v, start, steps, restart=restart,
                                  active=active)


@pytest.mark.parametrize("pair", [(0.8, 0.6), (0.9, 0.0), (0.95, None)])
def test_continued_arnoldi_matches_eigvals_and_restarts_a_nearby_matrix(x64, pair):
  # A complex pair, a real pair +-0.9, or one real eigenvalue on top of 38 others.
  re, im = pair
  rng = np.random.default_rng(4)
  d = np.diag(np.concatenate([[0.0, 0.0], rng.uniform(-0.5, 0.5, 38)]))
  if im is None:
    d[0, 0] = re
  elif im:
    d[:2, :2] = [[re, im], [-im, re]]
  else:
    d[0, 0], d[1, 1] = re, -re
  a = _with_spectrum(rng, d)
  result, vector = _continued(jnp.asarray(a), krylov.start_vector(40, jnp.float64))
  expected = np.max(np.abs(np.linalg.eigvals(a)))
  # (the eigenvalue's error is its condition number, here up to about 100, times the
  # residual's tolerance eps^(2/3))
  assert bool(result.converged) and float(result.residual) <= krylov.default_rtol(jnp.float64)
  assert abs(float(result.radius) - expected) < 1e-11
  # a nearby matrix from the returned vector: at most two cycles of 20 products
  nearby = a + 1e-6 * rng.normal(size=a.shape)
  again, _ = _continued(jnp.asarray(nearby), vector, steps=40)
  assert bool(again.converged)
  assert abs(float(again.radius) - np.max(np.abs(np.linalg.eigvals(nearby)))) < 1e-11
  skipped, same = _continued(jnp.asarray(a), vector, active=False)
  assert not bool(skipped.converged)
  np.testing.assert_array_equal(same, vector)


def test_arnoldi_returns_its_best_cycle(x64):
  # An AKD-like round map [[0, P], [I, 0]] (eigenvalues +-sqrt(eig P), a real pair on top).
  # Once a cycle has found the pair, a restart from the almost invariant subspace refills the
  # Krylov space with fresh directions, and a later cycle can be worse (here the last of ten
  # had a relative residual of 5e-6 after 5e-12 at 200 steps): more steps must not lose it.
  rng = np.random.default_rng(4)
  h = 30
  p = _with_spectrum(rng, np.diag(np.sort(rng.uniform(0.0, 0.98, h))[::-1]))
  a = np.zeros((2 * h, 2 * h))
  a[:h, h:], a[h:, :h] = p, np.eye(h)
  expected = np.max(np.abs(np.linalg.eigvals(a)))
  few, many = _radius(jnp.asarray(a), "arnoldi", 200), _radius(jnp.asarray(a), "arnoldi", 400)
  assert bool(few.converged) and bool(many.converged)
  assert float(many.residual) <= float(few.residual)
  assert abs(float(many.radius) - expected) < 1e-12 * expected


@pytest.mark.parametrize("kind", ["real", "pair"])
def test_spectral_radius_routes_agree_with_numpy(x64, kind):
  # 300 rows: above AUTO_DENSE_MAX, so "auto" runs Arnoldi (and its dense fallback only if
  # Arnoldi did not converge, which the "krylov" route shows it did).
  rng = np.random.default_rng(11)
  d = np.diag(np.concatenate([[0.95, 0.0], rng.uniform(-0.8, 0.8, 298)]))
  if kind == "pair":
    d[:2, :2] = [[0.6, 0.7], [-0.7, 0.6]]
  a = _with_spectrum(rng, d)
  expected = np.max(np.abs(np.linalg.eigvals(a)))
  for method in fedkrr.rates.RADIUS_METHODS:
    got = float(fedkrr.rates.spectral_radius(jnp.asarray(a), method))
    assert abs(got - expected) < 1e-10 * expected, method


def test_spectral_radius_auto_falls_back_to_dense_and_krylov_says_nan(x64):
  # Eigenvalues spread evenly over [0, 1]: three products cannot resolve the top one.
  a = jnp.diag(jnp.linspace(0.0, 1.0, 300))
  assert np.isnan(float(fedkrr.rates.spectral_radius(a, "krylov", steps=3)))
  assert float(fedkrr.rates.spectral_radius(a, "auto", steps=3)) == pytest.approx(1.0, rel=1e-14)
  jitted = jax.jit(lambda m: fedkrr.rates.spectral_radius(m, "auto", steps=3))
  assert float(jitted(a)) == pytest.approx(1.0, rel=1e-14)


def test_spectral_radius_of_a_cyclic_map_needs_its_cycle(x64):
  # A state moved around three blocks, [[0, 0, C], [A, 0, 0], [0, B, 0]]: its eigenvalues
  # are the cube roots of eig(C B A), three of each modulus. Arnoldi resolves one real
  # eigenvalue or one pair, so it needs the cube of the map (cycle=3).
  rng = np.random.default_rng(2)
  h = 40
  blocks = [_with_spectrum(rng, np.diag(rng.uniform(0.1, 0.9, h))) for _ in range(3)]
  a = np.zeros((3 * h, 3 * h))
  a[h:2 * h, :h], a[2 * h:, h:2 * h], a[:h, 2 * h:] = blocks
  expected = np.max(np.abs(np.linalg.eigvals(a)))
  assert np.isnan(float(fedkrr.rates.spectral_radius(jnp.asarray(a), "krylov")))
  got = float(fedkrr.rates.spectral_radius(jnp.asarray(a), "krylov", cycle=3))
  assert abs(got - expected) < 1e-10 * expected


def test_spectral_radius_names_bad_arguments():
  with pytest.raises(ValueError, match="method: expected one of auto, krylov, dense"):
    fedkrr.rates.spectral_radius(jnp.eye(3), "eig")
  with pytest.raises(ValueError, match="steps: expected an integer >= 1"):
    fedkrr.rates.spectral_radius(jnp.eye(3), "krylov", steps=0)
  with pytest.raises(ValueError, match="cycle: expected an integer >= 1"):
    fedkrr.rates.spectral_radius(jnp.eye(3), "krylov", cycle=0)
  with pytest.raises(ValueError, match=r"matrix: expected a square \(n, n\) matrix, got shape "
                                       r"\(3, 2\)"):
    fedkrr.rates.spectral_radius(jnp.ones((3, 2)))


def _jordan(rng, n, size, top=0.9):
  """A top eigenvalue ``top`` in a Jordan block of ``size`` (1: simple), the rest in
  [-0.5, 0.5], in a random well-conditioned basis."""
  d = np.diag(np.concatenate([np.full(size, top), rng.uniform(-0.5, 0.5, n - size)]))
  d[np.arange(size - 1), np.arange(1, size)] = 1.0
  return _with_spectrum(rng, d)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_arnoldi_does_not_certify_a_defective_top_eigenvalue(x64, size):
  # A Jordan block of size k moves the eigenvalue by about eps^(1/k) under rounding while the
  # Ritz vector's residual stays at rounding level (4e-17 with k = 3, the radius 6.2e-8 too
  # high, and it was reported converged). Its left and right eigenvectors are orthogonal:
  # the condition number estimate flags it.
  result = _radius(jnp.asarray(_jordan(np.random.default_rng(size), 30, size)), "arnoldi")
  # the residual alone would certify every one of them; the condition estimate does not
  assert float(result.residual) <= krylov.default_rtol(jnp.float64)
  if size == 1:
    assert bool(result.converged) and abs(float(result.radius) - 0.9) < 1e-13
  else:
    assert not bool(result.converged) and abs(float(result.radius) - 0.9) > 1e-10


def test_spectral_radius_auto_takes_the_dense_route_for_a_jordan_block(x64):
  a = jnp.asarray(_jordan(np.random.default_rng(8), 300, 3))
  assert np.isnan(float(fedkrr.rates.spectral_radius(a, "krylov")))
  assert (float(fedkrr.rates.spectral_radius(a, "auto"))
          == float(fedkrr.rates.spectral_radius(a, "dense")))
