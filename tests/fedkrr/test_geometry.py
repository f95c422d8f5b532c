"""App. B geometry: projections, contractions, Prop. III, principal angles."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr

RNG = np.random.default_rng(11)
XS = [RNG.normal(size=(7, 2)), RNG.normal(size=(5, 2)) + 1.0]
YS = [RNG.normal(size=7), RNG.normal(size=5)]
X_EVAL = RNG.normal(size=(4, 2))
KERNELS = {"same": [fedkrr.RBF(0.5)] * 2, "different": [fedkrr.RBF(0.5), fedkrr.Laplace(0.3)]}


def _problem(kernels="different", ridge=0.1, ys=YS):
  return fedkrr.make_problem(XS, ys, KERNELS[kernels], ridge)


def _numpy_two_round_operator(problem):
  # Independent route: App. B's formulas with NumPy, from the stacked Gram matrix.
  n1, n2 = problem.sizes
  x = np.concatenate([np.asarray(v) for v in problem.xs])
  n = n1 + n2
  grams = [np.asarray(problem.kernels[a](x, x)) / n for a in range(2)]
  k = np.block([[grams[0], np.zeros((n, n))], [np.zeros((n, n)), grams[1]]])
  d, q = np.linalg.eigh(k)
  v = q.T
  g = float(problem.ridge) + d
  v1, v2, v2t = v[:, :n1], v[:, n1:n], v[:, n + n1:]
  v1t = v[:, n:n + n1]

  def proj(b):
    return b @ np.linalg.pinv(b.T @ (g[:, None] * b)) @ (b.T * g[None, :])

  return (v1 @ v1t.T) @ proj(v2t).T @ (v2t @ v2.T) @ proj(v1).T


@pytest.mark.parametrize("kernels", ["same", "different"])
@pytest.mark.parametrize("ridge", [0.1, 0.0])
def test_prop3_reconstruction_equals_literal_rounds(kernels, ridge, x64, assert_close):
  problem = _problem(kernels, ridge)
  expected = fedkrr.simulate("akd", fedkrr.krr_learners(problem), problem.xs, problem.ys, 7,
                             X_EVAL)
  assert_close(fedkrr.rates.akd_by_projections(problem, 7, X_EVAL), expected, rtol=1e-8)


@pytest.mark.parametrize("ridge", [0.1, 0.0])
def test_projections_are_idempotent_and_contractions_contract(ridge, x64):
  geo = fedkrr.rates.geometry(_problem("different", ridge))
  for p in (geo.p1, geo.p2, geo.p1_tilde, geo.p2_tilde):
    np.testing.assert_allclose(p @ p, p, atol=1e-10)
    assert not np.allclose(p, p.T, atol=1e-6)  # oblique, not orthogonal, projections
  for c in (geo.c1, geo.c2_tilde):
    assert float(jnp.linalg.norm(c, 2)) <= 1.0 + 1e-12
  # P_1 projects onto range(V_1): it fixes V_1 and kills the G-complement.
  np.testing.assert_allclose(geo.p1 @ geo.v1, geo.v1, atol=1e-10)


def test_only_zero_is_fixed_by_both_projections(x64):
  geo = fedkrr.rates.geometry(_problem("same", 0.1))
  product = geo.p1.T @ geo.p2.T
  smallest = jnp.linalg.svd(jnp.eye(product.shape[0]) - product, compute_uv=False)[-1]
  assert float(smallest) > 1e-3
  assert float(fedkrr.rates.spectral_radius(product)) < 1.0


@pytest.mark.parametrize("kernels", ["same", "different"])
def test_two_round_operator_matches_numpy_reference_and_transfer_cycle(kernels, x64):
  problem = _problem(kernels)
  ours = np.asarray(fedkrr.rates.geometry(problem).two_round_operator())
  ref = _numpy_two_round_operator(problem)
  rho_ref = np.max(np.abs(np.linalg.eigvals(ref)))
  assert abs(np.max(np.abs(np.linalg.eigvals(ours))) - rho_ref) < 1e-10
  assert abs(float(fedkrr.rates.degradation_rate(problem)) - rho_ref) < 1e-10


def test_rate_is_cos_squared_of_smallest_angle_with_shared_kernel(x64):
  problem = _problem("same")
  cosines = fedkrr.rates.principal_cosines(problem)
  assert cosines.shape == (5,)
  assert np.all(np.diff(np.asarray(cosines)) <= 1e-12) and 0 <= float(cosines[-1])
  assert float(cosines[0]) < 1.0
  assert abs(float(fedkrr.rates.degradation_rate(problem)) - float(cosines[0]) ** 2) < 1e-12


def test_geometry_vmaps_over_ridge(x64):
  problem = _problem("different")
  ridges = jnp.asarray([0.01, 0.1, 1.0])
  rho = jax.vmap(lambda c: fedkrr.rates.spectral_radius(
      fedkrr.rates.geometry(dataclasses.replace(problem, ridge=c)).two_round_operator()))(ridges)
  for c, r in zip(ridges, rho):
    assert abs(float(r) - float(fedkrr.rates.degradation_rate(dataclasses.replace(problem,
                                                                           ridge=c)))) < 1e-10


def test_geometry_needs_two_agents():
  problem = fedkrr.make_problem(XS + [XS[0]], YS + [YS[0]], [fedkrr.RBF(0.5)] * 3, 0.1)
  with pytest.raises(fedkrr.ProblemError, match="two agents"):
    fedkrr.rates.geometry(problem)
