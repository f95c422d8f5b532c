"""Infinite-width ReLU kernels: a per-pair NumPy recursion, Monte Carlo, PSD, edge cases."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import fedkrr

RNG = np.random.default_rng(0)
X1 = RNG.normal(size=(6, 4))
X2 = RNG.normal(size=(5, 4))


def reference(a, b, depth, weight_var, bias_var):
  """(NNGP, NTK) of one pair of points by the recursion written with math.acos."""
  d = a.shape[0]
  s_ab = weight_var * float(a @ b) / d + bias_var
  s_aa = weight_var * float(a @ a) / d + bias_var
  s_bb = weight_var * float(b @ b) / d + bias_var
  ntk = s_ab
  for _ in range(depth):
    cos = min(1.0, max(-1.0, s_ab / math.sqrt(s_aa * s_bb)))
    u = math.acos(cos)
    s_ab = (weight_var * math.sqrt(s_aa * s_bb) * (math.sin(u) + (math.pi - u) * cos)
            / (2 * math.pi) + bias_var)
    ntk = s_ab + ntk * weight_var * (math.pi - u) / (2 * math.pi)
    s_aa = weight_var * s_aa / 2 + bias_var
    s_bb = weight_var * s_bb / 2 + bias_var
  return s_ab, ntk


def tol(*arrays):
  return 1e-10 if all(np.asarray(a).dtype == np.float64 for a in arrays) else 1e-5


@pytest.mark.parametrize("depth, weight_var, bias_var", [(0, 2.0, 0.0), (1, 2.0, 0.0),
                                                         (3, 2.0, 0.1), (2, 1.3, 0.5)])
def test_recursion_matches_per_pair_reference(depth, weight_var, bias_var):
  x1, x2 = jnp.asarray(X1), jnp.asarray(X2)
  nngp = fedkrr.ReluNNGP(depth, weight_var, bias_var)(x1, x2)
  ntk = fedkrr.ReluNTK(depth, weight_var, bias_var)(x1, x2)
  ref = np.array([[reference(a, b, depth, weight_var, bias_var) for b in X2] for a in X1])
  assert nngp.shape == ntk.shape == (6, 5)
  np.testing.assert_allclose(nngp, ref[..., 0], rtol=tol(nngp), atol=tol(nngp))
  np.testing.assert_allclose(ntk, ref[..., 1], rtol=tol(ntk), atol=tol(ntk))


def test_one_layer_matches_monte_carlo():
  """Depth 1: E[relu(u) relu(v)] and E[relu'(u) relu'(v)] over (u, v) ~ N(0, Sigma^1)."""
  weight_var, bias_var = 2.0, 0.3
  a, b = X1[0], X1[1]
  d = a.shape[0]
  rng = np.random.default_rng(1)
  w, beta = rng.normal(size=(400_000, d)), rng.normal(size=400_000)   # one hidden unit each
  u = np.sqrt(weight_var / d) * w @ a + np.sqrt(bias_var) * beta
  v = np.sqrt(weight_var / d) * w @ b + np.sqrt(bias_var) * beta
  nngp_mc = weight_var * np.mean(np.maximum(u, 0) * np.maximum(v, 0)) + bias_var
  dot_mc = weight_var * np.mean((u > 0) & (v > 0))
  sigma1 = weight_var * float(a @ b) / d + bias_var
  ntk_mc = nngp_mc + sigma1 * dot_mc
  pair = jnp.asarray(np.stack([a, b]))
  nngp = np.asarray(fedkrr.ReluNNGP(1, weight_var, bias_var)(pair, pair))[0, 1]
  ntk = np.asarray(fedkrr.ReluNTK(1, weight_var, bias_var)(pair, pair))[0, 1]
  # Monte-Carlo standard error ~ 1 / sqrt(4e5) relative: allow 1.5 %.
  assert abs(nngp - nngp_mc) <= 0.015 * abs(nngp_mc)
  assert abs(ntk - ntk_mc) <= 0.015 * abs(ntk_mc)


@pytest.mark.parametrize("cls", [fedkrr.ReluNNGP, fedkrr.ReluNTK])
def test_gram_is_symmetric_psd_and_finite_at_equal_and_zero_inputs(cls):
  x = jnp.asarray(np.concatenate([X1, X1[:2], np.zeros((1, 4))]))   # duplicates, a zero
  g = np.asarray(cls(depth=3)(x, x), dtype=np.float64)
  assert np.all(np.isfinite(g))
  np.testing.assert_allclose(g, g.T, atol=1e-6 * np.max(np.abs(g)))
  assert np.linalg.eigvalsh(g)[0] > -1e-5 * np.max(np.abs(g))
  np.testing.assert_allclose(g[-1], 0.0, atol=1e-12)   # zero input, no bias: zero variance
  # With weight_var = 2 and no bias every layer keeps Sigma^1(x, x) = 2 |x|^2 / d, and
  # Theta^{L+1}(x, x) = (L + 1) Sigma^1(x, x) (Sigmadot = 1 on the diagonal).
  sigma1 = 2 * np.sum(np.asarray(x[:6], np.float64) ** 2, -1) / 4
  expected = sigma1 if cls is fedkrr.ReluNNGP else 4 * sigma1
  rtol = 1e-14 if x.dtype == jnp.float64 else 1e-6
  np.testing.assert_allclose(np.diag(g)[:6], expected, rtol=rtol)
  np.testing.assert_allclose(g[6:8, 6:8], g[:2, :2], rtol=rtol)   # duplicates


@pytest.mark.parametrize("n", [6, 160])   # every pair directly; the near pairs gathered
def test_gradients_are_finite_at_equal_inputs(n):
  x = jnp.asarray(np.concatenate([X1, np.random.default_rng(2).normal(size=(n - 6, 4))]))
  grads = jax.jit(jax.grad(lambda x, w: fedkrr.ReluNTK(2, w, 0.1)(x, x).sum(), (0, 1)))(
      x, jnp.asarray(2.0, x.dtype))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)


def test_vmap_over_weight_var():
  x = jnp.asarray(X1)
  ws = jnp.asarray([1.0, 2.0, 3.0])
  batched = jax.vmap(lambda w: fedkrr.ReluNTK(2, w, 0.1)(x, x))(ws)
  for i, w in enumerate(np.asarray(ws)):
    np.testing.assert_allclose(batched[i], fedkrr.ReluNTK(2, float(w), 0.1)(x, x),
                               rtol=tol(batched))


@pytest.mark.parametrize("spec", [{"name": "relu_ntk", "depth": 2, "weight_var": 1.5,
                                   "bias_var": 0.2},
                                  {"name": "relu_nngp", "depth": 0}, {"name": "relu_ntk"}])
def test_kernel_from_dict_round_trip(spec):
  kernel = fedkrr.kernel_from_dict(spec)
  again = fedkrr.kernel_from_dict(kernel.to_dict())
  assert type(again) is type(kernel)
  assert dataclasses.asdict(again) == dataclasses.asdict(kernel)
  assert isinstance(again.depth, int)


@pytest.mark.parametrize("spec, match", [
    ({"name": "relu_ntk", "depth": -1}, "depth must be an integer"),
    ({"name": "relu_ntk", "depth": 1.5}, "depth must be an integer"),
    ({"name": "relu_nngp", "weight_var": 0.0}, "weight_var must be a finite number > 0"),
    ({"name": "relu_nngp", "bias_var": -1.0}, "bias_var must be a finite number >= 0"),
])
def test_bad_specs_name_the_problem(spec, match):
  with pytest.raises(fedkrr.KernelError, match=match):
    fedkrr.kernel_from_dict(spec, "kernel_0")


def test_usable_in_a_problem():
  xs = [X1, X2]
  ys = [np.sin(X1[:, 0]), np.cos(X2[:, 1])]
  problem = fedkrr.make_problem(xs, ys, fedkrr.ReluNTK(depth=2), ridge=1e-2)
  model = fedkrr.krr_learners(problem)[0].fit(problem.xs[0], problem.ys[0])
  assert np.all(np.isfinite(np.asarray(model.predict(problem.xs[1]))))


def test_standard_parametrisation_depth_zero_and_one_by_hand():
  """Depth 0: the linear model's NTK <x, x'> + 1 (weights and bias); depth 1 with width n:
  read-out n Sigma^2 / w + 1 and NTK = read-out + (<x, x'> + 1) Sigmadot^2."""
  x1, x2 = jnp.asarray(X1), jnp.asarray(X2)
  linear = np.asarray(X1 @ X2.T + 1.0)
  for cls in (fedkrr.ReluNNGP, fedkrr.ReluNTK):
    np.testing.assert_allclose(cls(0, 1.0, 0.0, "standard", 7)(x1, x2), linear, rtol=1e-6)
  n, w = 64, 1.5
  sigma2 = np.asarray(fedkrr.ReluNNGP(1, w, 0.0)(x1, x2))   # NTK parametrisation: Sigma^2
  theta_ntk = np.asarray(fedkrr.ReluNTK(1, w, 0.0)(x1, x2))   # Sigma^2 + Sigma^1 Sigmadot^2
  sigma1 = w * np.asarray(X1 @ X2.T) / X1.shape[1]
  sigma_dot = (theta_ntk - sigma2) / sigma1
  readout = np.asarray(fedkrr.ReluNNGP(1, w, 0.0, "standard", n)(x1, x2))
  np.testing.assert_allclose(readout, n * sigma2 / w + 1.0, rtol=1e-5)
  np.testing.assert_allclose(fedkrr.ReluNTK(1, w, 0.0, "standard", n)(x1, x2),
                             readout + linear * sigma_dot, rtol=1e-5)


def test_standard_parametrisation_spec_round_trip_and_errors():
  spec = {"name": "relu_ntk", "depth": 2, "parametrization": "standard", "width": 256}
  kernel = fedkrr.kernel_from_dict(spec)
  assert kernel.to_dict() == {**spec, "weight_var": 2.0, "bias_var": 0.0}
  assert fedkrr.kernel_from_dict(kernel.to_dict()) == kernel
  with pytest.raises(fedkrr.KernelError, match="width must be the hidden width"):
    fedkrr.kernel_from_dict({"name": "relu_ntk", "parametrization": "standard"}, "kernel_0")
  with pytest.raises(fedkrr.KernelError, match="parametrization must be one of"):
    fedkrr.kernel_from_dict({"name": "relu_nngp", "parametrization": "mup"}, "kernel_0")


def mp_reference(a, b, depth, weight_var, bias_var):
  """(NNGP, NTK) of one pair at depths 0..depth, (depth + 1, 2), by the recursion in
  40-digit arithmetic (mpmath.acos)."""
  with mpmath.workdps(40):
    w, bias = mpmath.mpf(weight_var), mpmath.mpf(bias_var)
    a, b = [mpmath.mpf(float(t)) for t in a], [mpmath.mpf(float(t)) for t in b]
    dot = lambda p, q: mpmath.fsum(s * t for s, t in zip(p, q))  # noqa: E731
    s_ab, s_aa, s_bb = (w * dot(p, q) / len(a) + bias for p, q in ((a, b), (a, a), (b, b)))
    ntk = s_ab
    out = [(float(s_ab), float(ntk))]
    for _ in range(depth):
      norm = mpmath.sqrt(s_aa * s_bb)
      u = mpmath.acos(min(1, max(-1, s_ab / norm))) if norm > 0 else mpmath.pi / 2
      s_ab = w * norm * (mpmath.sin(u) + (mpmath.pi - u) * mpmath.cos(u)) / (2 * mpmath.pi) + bias
      ntk = s_ab + ntk * w * (mpmath.pi - u) / (2 * mpmath.pi)
      s_aa, s_bb = w * s_aa / 2 + bias, w * s_bb / 2 + bias
      out.append((float(s_ab), float(ntk)))
    return np.array(out)


def hard_points(rng, d):
  """Coincident, near-coincident, parallel, anti-parallel, generic, scaled and zero points."""
  x = rng.normal(size=(4, d))
  return np.stack([x[0], x[0], x[0] + 1e-12 * rng.normal(size=d), x[0] + 1e-8 * rng.normal(size=d),
                   x[0] + 1e-4 * rng.normal(size=d), 2 * x[0], 3 * x[0], -x[0], x[1],
                   1e3 * x[2], 1e-3 * x[3], np.zeros(d)])


def max_scaled_error(gram, ref):
  """max |gram - ref| / sqrt(ref_ii ref_jj) over the pairs with a nonzero diagonal."""
  scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
  return float(np.max(np.abs(gram - ref)[scale > 0] / scale[scale > 0]))


@pytest.mark.parametrize("weight_var, bias_var", [(2.0, 0.0), (1.3, 0.5), (2.0, 1e-3)])
def test_every_depth_matches_a_40_digit_reference_at_hard_points(weight_var, bias_var):
  """Each entry within 1e-14 of mpmath, scaled by sqrt(Theta(x, x) Theta(x', x')).

  Before the angle was taken from direct differences, the NTK was off by up to 1.3e-8
  at coincident and parallel points (arccos of a cosine of 1 - O(eps)).
  """
  x = jnp.asarray(hard_points(np.random.default_rng(5), 6))
  points = np.asarray(x, np.float64)   # the inputs as the kernel sees them
  tol = 1e-14 if x.dtype == jnp.float64 else 1e-6
  ref = np.array([[mp_reference(a, b, 4, weight_var, bias_var) for b in points]
                  for a in points])   # (n, n, depth + 1, 2)
  for depth in range(5):
    for i, cls in enumerate((fedkrr.ReluNNGP, fedkrr.ReluNTK)):
      gram = np.asarray(cls(depth, weight_var, bias_var)(x, x), np.float64)
      assert max_scaled_error(gram, ref[:, :, depth, i]) <= tol, (depth, cls.__name__)


@pytest.mark.parametrize("cone", [False, True])
def test_large_grams_keep_the_digits_near_coincident_pairs(cone):
  """Beyond the small-input shortcut: the near pairs gathered (a few duplicates, a near
  copy, a negated and a doubled point) or, when every pair is near (a narrow cone of
  inputs), all pairs recomputed."""
  rng = np.random.default_rng(3)
  if cone:
    x = np.ones(10) + 1e-3 * rng.normal(size=(200, 10))
  else:
    base = rng.normal(size=(150, 10))
    x = np.concatenate([base, base[:5] + 1e-9 * rng.normal(size=(5, 10)), -base[5:8],
                        2 * base[8:10], base[10:12]])
  x = jnp.asarray(x)
  points = np.asarray(x, np.float64)
  tol = 1e-14 if x.dtype == jnp.float64 else 1e-6
  pick = [0, 5, 8, 10] + list(range(len(points) - 10, len(points)))
  ref = np.array([[mp_reference(points[i], points[j], 3, 2.0, 0.0)[:, 1] for j in pick]
                  for i in pick])
  for depth in (1, 3):
    gram = np.asarray(fedkrr.ReluNTK(depth, 2.0, 0.0)(x, x), np.float64)[np.ix_(pick, pick)]
    assert max_scaled_error(gram, ref[:, :, depth]) <= tol
    sq = np.sum(points[pick] ** 2, -1)
    np.testing.assert_allclose(np.diag(gram), (depth + 1) * 2 * sq / 10, rtol=tol)


@pytest.mark.parametrize("depth", [10**9, 1001, -1])
def test_a_depth_past_the_bound_is_one_error_before_any_program_is_built(depth):
  """A problem file's {"name": "relu_ntk", "depth": 10^9} hung while memory grew (the
  recursion is unrolled in the compiled program); now the kernel is refused as read."""
  for name in ("relu_ntk", "relu_nngp"):
    with pytest.raises(fedkrr.KernelError, match=r"kernel_0: depth must be an integer in "
                       r"0\.\.1000"):
      fedkrr.kernel_from_dict({"name": name, "depth": depth}, "kernel_0")
  assert fedkrr.kernel_from_dict({"name": "relu_ntk", "depth": 1000}).depth == 1000
