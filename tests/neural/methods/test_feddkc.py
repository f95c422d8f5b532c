"""FedDKC (Wu et al. 2023): KKR / SKR refinement (the properties of App. A's theorems),
the distillation loss, the split models and one round of each variant through run_method."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural import models
from neural import training
from neural._src.jobs.specs import load_spec
from neural._src.methods import feddkc
from neural._src.methods.registry import load_method_data

C = 10


def rtol():
  """Exact comparisons: float64 when x64 is on (the default), float32 otherwise."""
  return 1e-9 if jax.config.read("jax_enable_x64") else 1e-5


def random_probs(seed, batch=64, c=C, scale=3.0):
  logits = np.random.default_rng(seed).normal(scale=scale, size=(batch, c))
  return np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32)))


def assert_order_kept(probs, refined):
  """Eq. 5 (Theorems 5, 6): u_i >= u_j implies phi_i >= phi_j, and the argmax is kept."""
  order = np.argsort(-probs, axis=1, kind="stable")
  resorted = np.take_along_axis(np.asarray(refined, np.float64), order, axis=1)
  assert np.all(np.diff(resorted, axis=1) <= 1e-6)
  assert np.array_equal(np.argmax(refined, axis=1), np.argmax(probs, axis=1))


def assert_in_simplex(refined):
  """Eq. 3-4 (Theorems 3, 4)."""
  refined = np.asarray(refined, np.float64)
  assert np.all(refined >= 0) and np.all(refined <= 1)
  np.testing.assert_allclose(refined.sum(axis=1), 1.0, atol=1e-5)


# ---------------------------------------------------------------------------
# KKR


@pytest.mark.parametrize("T", [0.3, 0.6, 0.95])
def test_kkr_is_a_probability_with_peak_T_and_the_same_order(T):
  probs = random_probs(0)
  refined = np.asarray(neural.methods.feddkc.kkr(probs, T))
  assert refined.shape == probs.shape
  assert_in_simplex(refined)
  assert_order_kept(probs, refined)
  np.testing.assert_allclose(refined.max(axis=1), T, atol=1e-6)      # Theorem 7


def test_kkr_equals_eq14_where_no_entry_is_negative_and_the_kernel_form_eq9():
  probs = random_probs(1).astype(np.float64)
  probs /= probs.sum(axis=1, keepdims=True)    # rows summing to 1 in float64 (Eq. 14 uses it)
  T = 0.6
  v_m = probs.max(axis=1, keepdims=True)
  eq14 = ((C * T - 1) * probs + v_m - T) / (C * v_m - 1)
  ok = np.all(eq14 >= 0, axis=1)
  assert 0 < ok.sum() < len(ok)          # both branches occur in this batch
  refined = np.asarray(neural.methods.feddkc.kkr(probs, T))
  np.testing.assert_allclose(refined[ok], eq14[ok], rtol=rtol())
  # Eq. 9 with sigma(x) = k x + b: Eq. 10 gives t = (k / b) times Eq. 13's t (k = b = 1),
  # and then k and b cancel.
  t = (v_m - T) / (v_m * (C * T - 1))
  for k, b in [(1.0, 1.0), (2.5, 0.3)]:
    sigma = k * probs / (t * k / b * v_m) + b
    np.testing.assert_allclose(refined[ok], (sigma / sigma.sum(axis=1, keepdims=True))[ok],
                               rtol=rtol())


def test_kkr_rectifies_theorem_1s_counterexample():
  # Theorem 1: v_m < T and a tiny v_i make Eq. 14 negative; the row becomes T / uniform.
  z = np.array([[2.0, 1.9, 1.8] + [-10.0] * 7])
  probs = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  T = 0.5
  v_m = probs.max()
  assert v_m < T
  assert np.any(((C * T - 1) * probs + v_m - T) / (C * v_m - 1) < 0)
  expected = np.full((1, C), (1 - T) / (C - 1))
  expected[0, 0] = T
  np.testing.assert_allclose(neural.methods.feddkc.kkr(probs, T), expected, rtol=1e-6)


def test_kkr_uniform_row_is_rectified_not_divided_by_zero():
  refined = np.asarray(neural.methods.feddkc.kkr(np.full((2, 4), 0.25), 0.7))
  assert np.all(np.isfinite(refined))
  np.testing.assert_allclose(refined.max(axis=1), 0.7)
  assert_in_simplex(refined)


def test_kkr_is_jit_and_vmap_friendly():
  probs = random_probs(2, batch=8)
  Ts = jnp.array([0.2, 0.5, 0.9])
  out = jax.jit(jax.vmap(neural.methods.feddkc.kkr, in_axes=(None, 0)))(probs, Ts)
  np.testing.assert_allclose(out.max(axis=2), np.broadcast_to(Ts[:, None], (3, 8)), atol=1e-6)
  np.testing.assert_allclose(out[1], neural.methods.feddkc.kkr(probs, 0.5), atol=1e-6)


# ---------------------------------------------------------------------------
# SKR


@pytest.mark.parametrize("E, eps", [(0.5, 1e-3), (2.0, 1e-2), (3.2, 1e-3)])
def test_skr_hits_the_entropy_within_eps_and_keeps_the_order(E, eps):
  probs = random_probs(3, scale=4.0)
  refined = np.asarray(neural.methods.feddkc.skr(probs, E, eps))
  assert_in_simplex(refined)
  assert_order_kept(probs, refined)
  H = np.asarray(feddkc.entropy_bits(jnp.asarray(refined, jnp.float64)))
  assert np.all(np.abs(H - E) < eps / 2)                                  # Eq. 17
  assert np.max(H) - np.min(H) < eps                                      # Theorem 8


def test_skr_is_the_tempered_softmax_of_the_logits_and_jits():
  z = np.random.default_rng(4).normal(size=(64, C)).astype(np.float32)
  probs = np.asarray(jax.nn.softmax(jnp.asarray(z)))
  theta = np.asarray(feddkc.skr_temperature(probs, 1.5, 1e-4))
  assert np.all(theta > 0)
  expected = jax.nn.softmax(jnp.asarray(z / theta[:, None]))               # Eq. 18, 20
  skr = jax.jit(neural.methods.feddkc.skr)
  np.testing.assert_allclose(skr(probs, 1.5, 1e-4), expected, atol=1e-5)


def test_skr_from_logits_meets_the_entropy_on_confident_rows():
  # A logit gap of 120 (or 1000) rounds softmax(z) to one-hot in float32 (exp(-120) = 0), whose
  # entropy is 0 at every temperature; tempering the logits reaches E all the same.
  dtype = np.float32
  z = np.zeros((3, C), dtype)
  z[0, 0], z[1, 0], z[2, 3] = 120.0, 1000.0, -50.0
  z[2, :3] = (40.0, 39.0, 1.0)
  E, eps = 1.0, 1e-3
  refined = np.asarray(neural.methods.feddkc.skr_logits(z, E, eps))
  H = np.asarray(feddkc.entropy_bits(jnp.asarray(refined, jnp.float64)))
  assert np.all(np.abs(H - E) < eps / 2)
  assert_in_simplex(refined)
  assert_order_kept(z, refined)
  # it is softmax(z / theta*) (Eq. 18, 20): log q - max log q is a positive multiple of z - max z
  theta = np.asarray(feddkc.skr_temperature(None, E, eps, logits=z), np.float64)
  expected = jax.nn.softmax(jnp.asarray(z, jnp.float64) / theta[:, None])
  np.testing.assert_allclose(refined, expected, atol=1e-5)
  # where softmax(z) has no zero, the probability path gives the same refinement
  mild = np.random.default_rng(12).normal(scale=3.0, size=z.shape).astype(dtype)   # one compile
  np.testing.assert_allclose(neural.methods.feddkc.skr_logits(mild, E, eps),
                             neural.methods.feddkc.skr(jax.nn.softmax(mild), E, eps), atol=1e-5)


def test_entropy_increases_with_the_temperature():
  probs = jnp.asarray(random_probs(5, batch=4))
  thetas = jnp.geomspace(1e-2, 1e2, 30)
  H = np.asarray(jax.jit(jax.vmap(
      lambda th: feddkc.entropy_bits(jax.nn.softmax(jnp.log(probs) / th))))(thetas))
  assert np.all(np.diff(H, axis=0) >= -1e-5)
  assert np.all(H[0] < 0.1) and np.all(H[-1] > math.log2(C) - 0.01)


@pytest.mark.parametrize("call, match", [
    (lambda p: neural.methods.feddkc.kkr(p, 0.05), "T"),               # T <= 1/C
    (lambda p: neural.methods.feddkc.kkr(p, 1.0), "T"),
    (lambda p: neural.methods.feddkc.skr(p, 0.0, 1e-3), "E"),
    (lambda p: neural.methods.feddkc.skr(p, math.log2(C), 1e-3), "E"),
    (lambda p: neural.methods.feddkc.skr(p, 1.0, 0.0), "eps"),
    (lambda p: neural.methods.feddkc.kkr(np.log(p), 0.5), "probs"),    # logits, not probabilities
    (lambda p: neural.methods.feddkc.skr(2 * p, 1.0, 1e-3), "probs"),  # rows do not sum to 1
    (lambda p: neural.methods.feddkc.kkr(p[0], 0.5), "probs"),         # not (B, C)
    (lambda p: neural.methods.feddkc.skr_logits(np.log(p[0]), 1.0, 1e-3), "logits"),
    (lambda p: neural.methods.feddkc.skr_logits(np.full_like(p, np.inf), 1.0, 1e-3), "logits"),
    (lambda p: neural.methods.feddkc.skr_temperature(p, 1.0, 1e-3, logits=p), "probs, logits"),
])
def test_bad_arguments_are_named(call, match):
  with pytest.raises(neural.methods.feddkc.FedDKCError, match=match):
    call(random_probs(7, batch=3))


# ---------------------------------------------------------------------------
# Losses and models


def test_distillation_loss_against_a_direct_computation():
  rng = np.random.default_rng(8)
  logits = rng.normal(size=(5, C))
  target = random_probs(9, batch=5).astype(np.float64)
  target[0, 3] = 0.0                       # 0 log 0 = 0
  target[0] /= target[0].sum()
  labels = rng.integers(0, C, size=5)
  onehot = np.eye(C)[labels]
  q = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  with np.errstate(divide="ignore", invalid="ignore"):
    kl = np.nansum(np.where(target > 0, target * np.log(target / q), 0.0), axis=1)
  expected = -np.log(q[np.arange(5), labels]) + 1.5 * kl
  got = feddkc.distillation_loss(jnp.asarray(logits), jnp.asarray(onehot), jnp.asarray(target),
                                 1.5)
  np.testing.assert_allclose(got, expected, rtol=rtol())
  np.testing.assert_allclose(feddkc.kl_to_target(jnp.asarray(logits), jnp.asarray(target)), kl,
                             rtol=rtol())


def _num_params(tree):
  return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("name, table3", [("resnet2", 0.63), ("resnet4", 5.31),
                                          ("resnet6", 19.99), ("resnet10", 43.23),
                                          ("resnet12", 61.79)])
def test_split_resnets_match_table_3_parameter_counts(name, table3):
  model = neural.get_model(name, 10)
  variables = jax.eval_shape(lambda: training.init_variables(model, jax.random.PRNGKey(0),
                                                           (32, 32, 3)))
  assert abs(_num_params(variables) / 1000 - table3) < 0.015


def test_resnet20_server_head_matches_table_3():
  # Table 3: the server's ResNet20 (a predictor on the 16x16x16 features of 32x32x3 inputs)
  # has 167.31K parameters: six bottleneck blocks (3 x 6 convs + extractor conv + dense = 20).
  head = models.get_head("resnet20", 10)
  variables = jax.eval_shape(lambda: training.init_variables(head, jax.random.PRNGKey(0),
                                                           (16, 16, 16)))
  assert abs(_num_params(variables) / 1000 - 167.31) < 0.005
  blocks = [name for name in variables["params"] if name.startswith("Bottleneck_")]
  assert len(blocks) == 6 and "BasicBlock_0" not in variables["params"]
  with pytest.raises(models.ModelError, match="block"):
    jax.eval_shape(lambda: training.init_variables(models.ResNetHead(10, (1,), block="wide"),
                                                 jax.random.PRNGKey(0), (4, 4, 4)))


@pytest.mark.parametrize("name", list(models.SPLIT_RESNETS) + ["lenet5", "cnn"])
def test_features_and_head_shapes(name):
  model = neural.get_model(name, 7, tiny=True)
  variables = jax.eval_shape(lambda: training.init_variables(model, jax.random.PRNGKey(0),
                                                           (8, 8, 1)))
  x = jax.ShapeDtypeStruct((3, 8, 8, 1), jnp.float32)
  logits, h = jax.eval_shape(lambda v, x: model.apply(v, x, return_features=True), variables, x)
  assert logits.shape == (3, 7)
  if name in models.SPLIT_RESNETS:
    assert h.shape == (3, 4, 4, 4)           # ConvStem: width 4, one 2x2 pool
    assert set(variables["params"]) == {"extractor", "predictor"}
    head = models.get_head(name, 7, tiny=True)
    hv = jax.eval_shape(lambda: training.init_variables(head, jax.random.PRNGKey(0), (4, 4, 4)))
    assert jax.tree_util.tree_map(lambda a: a.shape, hv["params"]) == jax.tree_util.tree_map(
        lambda a: a.shape, variables["params"]["predictor"])
  else:
    assert h.ndim == 2 and h.shape[0] == 3


def test_get_head_needs_a_split_resnet():
  with pytest.raises(models.ModelError, match="name"):
    models.get_head("cnn", 10)


# ---------------------------------------------------------------------------
# One round of each variant through run_method


def tiny_config(refinement):
  return neural.methods.feddkc.FedDKCConfig(
      refinement=refinement, agents=2, client_models=("resnet2",), server_model="resnet2",
      tiny=True, norm="none", train_subset=60, test_subset=30, rounds=2, batch_size=16,
      beta=1.0, T=0.5, E=1.0, eps=0.01, seed=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  # Round 0 only (max_rounds=1: no final plot, which the runner's own tests cover).
  return {r: neural.methods.run_method(tiny_config(r), tmp_path_factory.mktemp(r), max_rounds=1)
          for r in neural.methods.feddkc.REFINEMENTS}


def test_one_round_of_each_variant(runs):
  for refinement, rows in runs.items():
    assert [row["agent"] for row in rows] == [0, 1, "server"]
    for row in rows:
      assert row["method"] == "feddkc" and row["refinement"] == refinement
      assert 0 <= row["test_accuracy"] <= 1 and np.isfinite(row["test_loss"])


def test_refinement_only_changes_the_server(runs):
  # Round 0: clients distil from z^S = 0 before the server trains, so every variant's
  # clients are the same; the server's KL target (and so the server) differs.
  clients = {r: [row["test_loss"] for row in rows[:2]] for r, rows in runs.items()}
  assert clients["kkr"] == clients["skr"] == clients["none"]
  servers = {r: rows[2]["test_loss"] for r, rows in runs.items()}
  assert len(set(servers.values())) == 3


def test_round_0_clients_train_on_ce_alone_as_in_fedgkt(runs, tmp_path):
  # FedGKT: no server knowledge before the server has trained, so round 0's clients use CE
  # alone; the same clients as with kd_weight = 0. client_kd_round0 puts the KL term towards
  # the uniform p^S (z^S = 0) back.
  config = tiny_config("none")
  assert feddkc.client_kd_weight(config, 0) == 0.0 and feddkc.client_kd_weight(config, 1) == 1.5
  assert feddkc.client_kd_weight(config.replace(client_kd_round0=True), 0) == 1.5
  def clients(cfg, name):
    rows = neural.methods.run_method(cfg, tmp_path / name, max_rounds=1)
    return [row["test_loss"] for row in rows[:2]]
  default = [row["test_loss"] for row in runs["none"][:2]]
  assert clients(config.replace(kd_weight=0.0), "no-kd") == default
  assert clients(config.replace(client_kd_round0=True), "kd-round0") != default


def test_communication_is_counted_per_client(runs):
  config = tiny_config("kkr")
  data = load_method_data(config)
  feature_size = 4 * 4 * 4                     # 8x8 digits -> ConvStem (width 4, pool 2)
  for k, row in enumerate(runs["kkr"][:2]):
    n = len(data.labels[k])
    assert row["num_train"] == n
    assert row["comm_up_floats"] == n * (feature_size + C + 1)   # H^k, z^k, y^k
    assert row["comm_down_floats"] == n * C                      # z^S
    assert row["comm_floats"] == row["comm_up_floats"] + row["comm_down_floats"]


def test_refine_logits_follows_the_config():
  logits = np.random.default_rng(10).normal(size=(6, C))
  probs = jax.nn.softmax(jnp.asarray(logits, jnp.float32))
  np.testing.assert_allclose(feddkc.refine_logits(logits, tiny_config("kkr")),
                             neural.methods.feddkc.kkr(probs, 0.5), atol=1e-6)
  np.testing.assert_allclose(feddkc.refine_logits(logits, tiny_config("none")), probs, atol=1e-6)
  confident = np.zeros((1, C))
  confident[0, 0] = 120.0               # SKR reads the logits: the row is not one-hot
  refined = feddkc.refine_logits(confident, tiny_config("skr"))
  assert abs(float(feddkc.entropy_bits(refined)[0]) - 1.0) < 0.005
  with pytest.raises(neural.methods.feddkc.FedDKCError, match="T"):
    feddkc.refine_logits(np.zeros((2, 20)), tiny_config("kkr").replace(T=0.04))
  # Two classes: only the chosen refinement's bound applies (E = 1 bit is log2 2, out of range
  # for SKR, but KKR and FedGKT do not read E).
  two = np.random.default_rng(11).normal(size=(4, 2))
  assert feddkc.refine_logits(two, tiny_config("kkr").replace(T=0.9)).shape == (4, 2)
  np.testing.assert_allclose(feddkc.refine_logits(two, tiny_config("none")),
                             jax.nn.softmax(jnp.asarray(two, jnp.float32)), atol=1e-6)
  with pytest.raises(neural.methods.feddkc.FedDKCError, match="E"):
    feddkc.refine_logits(two, tiny_config("skr").replace(E=1.0))


@pytest.mark.parametrize("changes, match", [
    (dict(refinement="ekd"), "refinement"), (dict(client_models=("cnn",)), "client_models"),
    (dict(server_model="vgg"), "server_model"), (dict(T=1.5), "T"), (dict(eps=0.0), "eps"),
])
def test_bad_config_fields_are_named(changes, match):
  with pytest.raises(neural.ConfigError, match=match):
    tiny_config("kkr").replace(**changes)


def feddkc_runs(name: str) -> list[feddkc.FedDKCConfig]:
  """The runs of a shipped config, each checked to be a FedDKC config."""
  runs = []
  for _, config in load_spec(name).expand():
    assert isinstance(config, feddkc.FedDKCConfig)
    runs.append(config)
  return runs


def test_paper_configs_share_the_papers_settings_on_each_dataset():
  # Tables 5-7: MNIST, CIFAR-10, CINIC-10 under the same settings (Sec. 4.1), 4 levels x 3 variants.
  datasets = {}
  for name, table in [("feddkc_mnist_paper", "5"), ("feddkc_paper", "6"),
                      ("feddkc_cinic10_paper", "7")]:
    assert load_spec(name).figure == f"FedDKC Tab. {table}"
    runs = feddkc_runs(name)
    assert len(runs) == 12 and {c.refinement for c in runs} == set(feddkc.REFINEMENTS)
    assert {c.beta for c in runs} == {3.0, 1.0, 0.5, 0.1}
    for c in runs:
      assert (c.optimizer, c.learning_rate, c.batch_size, c.weight_decay, c.kd_weight) == (
          "sgd", 0.03, 1024, 5e-4, 1.5)
      assert c.normalize and c.server_model == "resnet20" and c.agents == 5
    datasets[name] = runs[0].dataset
  assert datasets == {"feddkc_mnist_paper": "mnist", "feddkc_paper": "cifar10",
                      "feddkc_cinic10_paper": "cinic10"}
  assert {c.dataset for c in feddkc_runs("feddkc_mnist_small")} == {"mnist-subset"}
