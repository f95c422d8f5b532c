"""Tests of D-Distillation, D-SGD and Silo-SGD (neural/_src/methods/ddistillation.py)."""

from typing import Any
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural._src.datasets import graphs
from neural._src.methods import ddistillation as dd
from neural._src.methods.registry import get_method
from neural._src.methods.registry import run_method
from neural._src.runtime.config import ConfigError


def _simplex(rng, shape):
  return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]).astype(np.float32)


def test_z_update_keeps_z_in_the_simplex_under_the_step_condition():
  rng = np.random.default_rng(0)
  graph = graphs.random_bounded_degree(8, 3, rng)
  w = graphs.mixing_matrix(graph).astype(np.float32)
  beta = 2.0
  eta = float(np.min(np.diag(w))) / (2 * beta)      # the largest admissible step
  dd.check_z_step(beta, eta, w)
  z = jnp.asarray(_simplex(rng, (8, 5, 4)))
  for _ in range(20):
    s = jnp.asarray(_simplex(rng, (8, 5, 4)))
    z = dd.z_update(z, s, w, beta, eta)
    np.testing.assert_allclose(np.sum(z, axis=-1), 1.0, atol=1e-5)
    assert float(jnp.min(z)) >= -1e-6


def test_z_update_beyond_the_condition_can_leave_the_simplex():
  w = graphs.mixing_matrix(graphs.ring(4)).astype(np.float32)   # W[n, n] = 1/3
  beta, eta = 1.0, 0.5                                            # 2 beta eta = 1 > 1/3
  with pytest.raises(dd.DDistError, match="eta0"):
    dd.check_z_step(beta, eta, w)
  z = jnp.tile(jnp.array([[[1.0, 0.0]]]), (4, 1, 1))
  z = z.at[0].set(jnp.array([[0.0, 1.0]]))
  s = jnp.tile(jnp.array([[[0.0, 1.0]]]), (4, 1, 1))
  z_new = dd.z_update(z, s, w, beta, eta)
  np.testing.assert_allclose(np.sum(z_new, axis=-1), 1.0, atol=1e-6)   # sums still kept
  assert float(jnp.min(z_new)) < 0


def test_z_mean_follows_the_gradient_step_on_phi():
  # With unit column sums, zbar' = zbar - (2 beta eta / N) sum_n (z^n - s^n) (notes 2.6)
  rng = np.random.default_rng(1)
  w = graphs.mixing_matrix(graphs.random_bounded_degree(6, 3, rng))
  z, s = _simplex(rng, (6, 3, 5)).astype(np.float64), _simplex(rng, (6, 3, 5)).astype(np.float64)
  beta, eta = 0.7, 0.05
  z_new = np.asarray(dd.z_update(z, s, w, beta, eta))
  expected = z.mean(0) - 2 * beta * eta * (z - s).sum(0) / 6
  np.testing.assert_allclose(z_new.mean(0), expected, atol=1e-6)


def test_complete_graph_uniform_mixing_agrees_after_mixing():
  rng = np.random.default_rng(2)
  n = 5
  w = graphs.mixing_matrix(graphs.complete(n), np.full((n, n), 1.0 / n))
  z = _simplex(rng, (n, 3, 4)).astype(np.float64)
  s = _simplex(rng, (n, 3, 4)).astype(np.float64)
  mixed = np.asarray(dd.z_update(z, s, w, 1.0, 0.0))
  np.testing.assert_allclose(mixed, np.broadcast_to(z.mean(0), mixed.shape), atol=1e-6)
  assert float(dd.consensus_error(mixed)) < 1e-10 < float(dd.consensus_error(z))
  params = {"w": jnp.asarray(rng.normal(size=(n, 3, 2)))}
  gossiped = dd.gossip(jnp.asarray(w), params)["w"]
  np.testing.assert_allclose(gossiped, np.broadcast_to(params["w"].mean(0), (n, 3, 2)),
                             atol=1e-6)


def test_surrogate_gradient_equals_the_explicit_form_of_eq5():
  # grad ||s(theta) - z||^2 = 2 (ds/dtheta)^T (s - z) for a linear softmax model
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(4, 3)))
  z = jnp.asarray(_simplex(rng, (4, 5)), dtype=x.dtype)
  theta = jnp.asarray(rng.normal(size=(3, 5)))

  def s_fn(t):
    return jax.nn.softmax(x @ t)

  @jax.jit
  def both(t):
    auto = jax.grad(lambda u: dd.distillation_regulariser(s_fn(u), z))(t)
    jac = jax.jacobian(s_fn)(t)                         # (4, 5, 3, 5)
    return auto, 2 * jnp.einsum("bkij,bk->ij", jac, s_fn(t) - z)

  auto, explicit = both(theta)
  np.testing.assert_allclose(auto, explicit, rtol=1e-5, atol=1e-8)


def test_step_size_conditions():
  eta = dd.polynomial_step_size(0.1, 0.75, 10.0)
  assert eta(0) == pytest.approx(0.1)
  values = np.array([eta(t) for t in range(0, 10000, 100)])
  assert np.all(np.diff(values) < 0)
  assert eta(10**6 + 1) / eta(10**6) == pytest.approx(1.0, abs=1e-6)
  for bad, field in [((0.1, 0.5, 1.0), "eta_power"), ((0.1, 1.2, 1.0), "eta_power"),
                     ((0.0, 0.7, 1.0), "eta0"), ((0.1, 0.7, 0.0), "eta_t0")]:
    with pytest.raises(dd.DDistError, match=field):
      dd.polynomial_step_size(*bad)
  with pytest.raises(ConfigError, match="eta_power"):
    dd.DDistConfig(eta_power=0.4)
  with pytest.raises(ConfigError, match="reference_fraction"):
    dd.DDistConfig(reference_fraction=1.0)


def test_comm_counts_follow_shapes():
  degrees = np.array([1, 2, 3])
  np.testing.assert_array_equal(
      dd.comm_floats("d-distillation", degrees, network_batch_size=8, num_classes=10,
                     params_per_device=999, steps=2), 2 * 8 * 10 * degrees)
  np.testing.assert_array_equal(
      dd.comm_floats("d-sgd", degrees, network_batch_size=8, num_classes=10,
                     params_per_device=999), 999 * degrees)
  assert not dd.comm_floats("silo-sgd", degrees, network_batch_size=8, num_classes=10,
                            params_per_device=999).any()
  stacked = {"a": np.zeros((4, 3, 2)), "b": np.zeros((4, 5))}
  assert dd.num_params(stacked) == 11


TINY: dict[str, Any] = dict(
    dataset="digits", agents=4, graph="ring", train_subset=120, test_subset=30, rounds=2,
    steps_per_round=2, batch_size=8, network_batch_size=4, model="mlp", tiny=True, width=8,
    eta0=0.01, distill_beta=2.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  out = {}
  for method in dd.METHODS:
    config = dd.DDistConfig(method=method, **TINY)
    out[method] = (config, run_method(config, tmp_path_factory.mktemp(method)))
  return out


@pytest.mark.parametrize("method", dd.METHODS)
def test_one_round_smoke_run_with_comm_counts(runs, method):
  config, rows = runs[method]
  assert get_method(method).config_cls is dd.DDistConfig
  per_agent = [r for r in rows if r["round"] == 0 and isinstance(r["agent"], int)]
  assert len(per_agent) == config.agents
  for r in per_agent:
    assert 0 <= r["test_accuracy"] <= 1 and np.isfinite(r["test_loss"])
  sent = np.array([r["comm_floats"] for r in per_agent])
  degree = 2   # ring
  if method == "d-distillation":
    assert np.all(sent == config.steps_per_round * config.network_batch_size * 10 * degree)
  elif method == "d-sgd":
    params = dd.init(config, dd.load_data(config)).params
    assert np.all(sent == config.steps_per_round * dd.num_params(params) * degree)
  else:
    assert not sent.any()
  totals = [r["comm_floats_total"] for r in rows if r["agent"] == 0]
  assert totals == [sent[0], 2 * sent[0]]


def test_resume_gives_the_same_numbers(runs, tmp_path):
  config, rows = runs["d-distillation"]
  run_method(config, tmp_path, max_rounds=1)
  again = run_method(config, tmp_path)
  key = [(r["round"], r["agent"], r["test_loss"]) for r in rows]
  assert [(r["round"], r["agent"], r["test_loss"]) for r in again] == key


def test_data_split_and_graph():
  config = dd.DDistConfig(**{**TINY, "graph": "random", "graph_degree": 2})
  data = dd.load_data(config)
  q = data.x_ref.shape[0]
  assert q == round(0.4 * 120) and int(data.sizes.sum()) == 120 - q
  assert data.weights.shape == (1, 4, 4) and data.adjacency.shape == (1, 4, 4)
  np.testing.assert_allclose(data.weights[0].sum(0), 1.0, atol=1e-6)
  assert data.adjacency[0].sum(1).max() <= 2
  with pytest.raises(dd.DDistError, match="eta0"):
    dd.load_data(config.replace(eta0=0.2, distill_beta=5.0))


def test_time_varying_graph_uses_one_part_of_the_edges_a_round(tmp_path):
  """graph_window = 3: three rounds' graphs partition the 6 edges of K_4; W_t doubly stochastic."""
  config = dd.DDistConfig(**{**TINY, "graph": "complete", "graph_window": 3})
  data = dd.load_data(config)
  assert data.weights.shape == (3, 4, 4)
  np.testing.assert_array_equal(data.adjacency.sum(0), ~np.eye(4, dtype=bool))   # disjoint, all
  for w in data.weights:
    np.testing.assert_allclose(w.sum(0), 1.0, atol=1e-6)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-6)
  # 2 edges < 3 a round
  assert not any(neural.data.is_strongly_connected(a) for a in data.adjacency)
  rows = run_method(config.replace(rounds=2), tmp_path)
  sent = {r["round"]: r["comm_floats"] for r in rows if r["agent"] == "mean"}
  per_link = config.steps_per_round * config.network_batch_size * data.num_classes
  for t in (0, 1):   # round t sends over round t's edges only
    assert sent[t] == pytest.approx(per_link * data.adjacency[t].sum() / 4)
  with pytest.raises(ConfigError, match="graph_window"):
    dd.DDistConfig(**{**TINY, "graph": "directed-ring", "graph_window": 2})


@pytest.mark.parametrize("name", ["ddist_small", "ddist_paper"])
def test_shipped_configs_compare_the_three_methods(name):
  from neural._src.jobs.specs import load_spec
  runs = [(label, cast(dd.DDistConfig, config)) for label, config in load_spec(name).expand()]
  assert sorted(config.method for _, config in runs) == sorted(dd.METHODS)
  assert all(config.agents == 16 and config.graph == "random" and config.graph_degree == 3
             and config.reference_fraction == 0.4 for _, config in runs)



@pytest.mark.parametrize("name", ["ddist_fig3_small", "ddist_fig3_paper"])
def test_fig3_configs_mix_two_and_four_architectures(name):
  from neural._src.jobs.specs import load_spec
  runs = [(label, cast(dd.DDistConfig, config)) for label, config in load_spec(name).expand()]
  assert sorted(config.method for _, config in runs) == sorted(dd.METHODS * 2)
  sizes = {label.split("__")[0]: [len(d) for _, d in config.groups] for label, config in runs}
  assert sizes == {"two_models": [4, 4], "four_models": [2, 2, 2, 2]}
  for _, config in runs:   # each reference z drawn many times in the run
    assert config.agents == 8 and config.rounds * config.steps_per_round * \
        config.network_batch_size >= 20 * 0.4 * (1437 if config.dataset == "digits" else 50000)


def test_paper_config_draws_every_reference_point_many_times():
  from neural._src.jobs.specs import load_spec
  _, config = load_spec("ddist_paper").expand()[0]
  config = cast(dd.DDistConfig, config)
  q = 0.4 * 60000    # MNIST's reference set
  assert config.rounds * config.steps_per_round * config.network_batch_size / q == 40

MIXED = ("mlp", "cnn", "mlp", "cnn")


def test_mixed_models_are_grouped_by_architecture_and_checked():
  assert dd.architecture_groups(MIXED) == (("mlp", (0, 2)), ("cnn", (1, 3)))
  config = dd.DDistConfig(**{**TINY, "models": MIXED})
  assert config.device_models == MIXED and config.groups == dd.architecture_groups(MIXED)
  assert dd.DDistConfig(**TINY).groups == (("mlp", (0, 1, 2, 3)),)
  assert dd.DDistConfig(**{**TINY, "models": ("cnn",)}).groups == (("cnn", (0, 1, 2, 3)),)
  for bad in [("mlp", "cnn"), ("mlp", "cnn", "mlp", "nope")]:
    with pytest.raises(ConfigError, match="models"):
      dd.DDistConfig(**{**TINY, "models": bad})
  with pytest.raises(ConfigError, match="graph_window"):
    dd.DDistConfig(**{**TINY, "models": MIXED, "method": "d-sgd", "graph": "complete",
                      "graph_window": 2})


def test_d_sgd_with_mixed_models_gossips_within_each_group_only():
  config = dd.DDistConfig(**{**TINY, "models": MIXED, "method": "d-sgd", "graph": "complete"})
  w = dd.make_graph_and_weights(config)[1][0]
  across = np.ix_([0, 2], [1, 3])
  assert not w[across].any() and not w.T[across].any()           # block diagonal
  np.testing.assert_allclose(w[np.ix_([0, 2], [0, 2])], 0.5)       # K_2's Metropolis W
  whole = dd.make_graph_and_weights(config.replace(method="d-distillation"))[1][0]
  assert whole[across].all()                                      # z travels across groups


def test_mixed_models_keep_z_in_device_order():
  # per-group stacks (z_0 = s(theta_0) of each group, test probabilities) go back in device
  # order, so that eq. 6 mixes device n's row with its neighbours' rows
  groups = dd.architecture_groups(MIXED)
  rows = np.arange(4.0)[:, None] * np.ones((1, 3))
  parts = [rows[np.asarray(devices)] for _, devices in groups]
  np.testing.assert_array_equal(dd._in_device_order(parts, groups), rows)
