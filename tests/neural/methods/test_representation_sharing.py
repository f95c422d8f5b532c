"""Representation sharing (Berdoz 2022): loss terms, payloads, relay, staleness, runs, comm."""

from typing import Any
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from neural._src.methods import representation_sharing as rs
from neural._src.methods.registry import method_config_from_dict
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import run_method
from neural._src.runtime.rundir import read_metrics

TINY: dict[str, Any] = dict(dataset="digits", train_subset=64, test_subset=40, agents=2,
                            rounds=2, backbone="mlp", feature_dim=6, width=8, batch_size=16,
                            n_avg=3, seed=0)


def _config(**changes) -> rs.RepShareConfig:
  """The TINY config of a method, built through the registry as config files are."""
  return cast(rs.RepShareConfig, method_config_from_dict({**TINY, **changes}))


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def test_contrastive_loss_matches_a_loop_over_samples_and_classes():
  rng = np.random.default_rng(0)
  b, c = 5, 4
  z = rng.normal(size=(b, c))
  t = rng.normal(size=(b, c, c))          # per sample: row k = tau_u(t^k)
  y = rng.integers(0, c, size=b)
  got = np.asarray(rs.contrastive_loss(z, t, y, eps=1e-12))
  want = np.zeros(b)
  for i in range(b):
    for k in range(c):
      h = float(_softmax(z[i]) @ _softmax(t[i, k]))
      want[i] += -np.log(h) if k == y[i] else -np.log(1 - h)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # a (C, C) teacher set is shared by the batch; dropped terms are removed
  shared = np.asarray(rs.contrastive_loss(z, t[0], y, eps=1e-12))
  np.testing.assert_allclose(shared, np.asarray(rs.contrastive_loss(
      z, np.broadcast_to(t[:1], t.shape), y, eps=1e-12)), rtol=1e-6)
  valid = np.ones((b, c), bool)
  valid[:, 0] = False
  h = np.asarray(rs.discriminator_scores(z, t))
  dropped = np.asarray(rs.contrastive_loss(z, t, y, valid, eps=1e-12))
  first = np.where(y == 0, -np.log(h[:, 0]), -np.log1p(-h[:, 0]))
  np.testing.assert_allclose(dropped, want - first, rtol=1e-5)
  assert np.all((h >= 0) & (h <= 1))
  with pytest.raises(rs.RepShareError, match="teacher_logits"):
    rs.contrastive_loss(z, t[:, :2], y)


def test_disc_gradient_reaches_the_head_through_the_teacher_branch():
  model = rs.make_client_model("mlp", 3, 4, width=5)
  rng = np.random.default_rng(1)
  head = {"kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
          "bias": jnp.zeros(3, jnp.float32)}
  teacher = jnp.asarray(rng.uniform(size=(3, 4)), jnp.float32)
  student_logits = jnp.asarray(rng.normal(size=(2, 3)), jnp.float32)

  @jax.jit
  def grad(h):   # the student logits held fixed: only tau_u(t^k) depends on the head
    def loss(h):
      t_logits = cast(jax.Array, model.apply({"params": {"head": h}}, teacher,
                                             method=rs.FeatureClassifier.classify))
      return jnp.sum(rs.contrastive_loss(student_logits, t_logits, jnp.array([0, 2])))
    return jax.grad(loss)(h)
  assert float(jnp.sum(jnp.abs(grad(head)["kernel"]))) > 0


def test_feature_matching_term_is_the_squared_distance_to_the_class_mean():
  rng = np.random.default_rng(3)
  s, means, y = rng.normal(size=(6, 5)), rng.normal(size=(3, 5)), rng.integers(0, 3, 6)
  want = np.array([np.sum((s[i] - means[y[i]]) ** 2) for i in range(6)])
  np.testing.assert_allclose(np.asarray(rs.feature_matching_loss(s, y, means)), want, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(rs.feature_matching_loss(s, y, means, "mean")),
                             want / 5, rtol=1e-6)
  with pytest.raises(rs.RepShareError, match="reduction"):
    rs.feature_matching_loss(s, y, means, "max")


def test_client_payload_means_counts_and_observations():
  n, c = 12, 3
  labels = jnp.asarray([0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 0, 1])
  mask = jnp.asarray([True] * 10 + [False] * 2)          # last two are padding
  values = jnp.eye(n, dtype=jnp.float32)                 # point i's value marks point i
  p = jax.jit(lambda v, k: rs.client_payload(v, labels, mask, k, num_classes=c, n_avg=3,
                                             num_upload=2))(values, jax.random.PRNGKey(0))
  lab, m = np.asarray(labels), np.asarray(mask)
  for k in range(c):
    members = m & (lab == k)
    np.testing.assert_allclose(np.asarray(p.means[k]), members / members.sum(), atol=1e-7)
    assert float(p.counts[k]) == members.sum()
    for j in range(2):
      obs, cnt = np.asarray(p.observations[j, k]), int(p.observation_counts[j, k])
      assert cnt == min(3, members.sum())
      support = obs > 0
      assert support.sum() == cnt and np.all(members[support])      # distinct class points
      np.testing.assert_allclose(obs[support], 1 / cnt, rtol=1e-6)


def _payloads(rng, n=4, c=3, d=2, m_up=1):
  counts = rng.integers(1, 5, size=(n, c)).astype(np.float32)
  counts[0, 2] = 0.0
  obs_counts = np.full((n, m_up, c), 3.0, np.float32)
  obs_counts[1, 0, 1] = 0.0                                # client 1 lacks class 1 there
  return rs.Payload(rng.normal(size=(n, c, d)).astype(np.float32), counts,
                    rng.normal(size=(n, m_up, c, d)).astype(np.float32), obs_counts)


def test_relay_averages_by_counts_and_forwards_other_clients_observations():
  rng = np.random.default_rng(4)
  p = _payloads(rng)
  n, c, d = p.means.shape
  out = rs.relay(p, jax.random.PRNGKey(0), num_download=2)
  want = np.einsum("vc,vcd->cd", p.counts, p.means) / p.counts.sum(0)[:, None]
  for u in range(n):
    np.testing.assert_allclose(np.asarray(out.means[u]), want, rtol=1e-5)
  loo = rs.relay(p, jax.random.PRNGKey(0), num_download=2, exclude_self=True)
  for u in range(n):
    others = [v for v in range(n) if v != u]
    w = p.counts[others]
    np.testing.assert_allclose(np.asarray(loo.means[u]),
                               np.einsum("vc,vcd->cd", w, p.means[others])
                               / w.sum(0)[:, None], rtol=1e-5)
  for seed in range(5):
    out = rs.relay(p, jax.random.PRNGKey(seed), num_download=2)
    for u in range(n):
      for m in range(2):
        got = np.asarray(out.observations[u, m])
        owners = [v for v in range(n) if np.allclose(got[0], p.observations[v, 0, 0])]
        assert owners and owners[0] != u                      # another client's set
        v = owners[0]
        for k in range(c):
          expect = p.observations[v, 0, k] if p.observation_counts[v, 0, k] > 0 else want[k]
          np.testing.assert_allclose(got[k], expect, rtol=1e-5)
      first = [np.asarray(out.observations[u, m, 0]) for m in range(2)]
      assert not np.allclose(first[0], first[1])            # without replacement
  with pytest.raises(TypeError, match="Payload"):
    rs.relay(cast(Any, dict(p._asdict())), jax.random.PRNGKey(0))
  with pytest.raises(rs.RepShareError, match="num_download"):
    rs.relay(p, jax.random.PRNGKey(0), num_download=n)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
  runs = {}
  for method in rs.METHODS:
    config = _config(method=method)
    workdir = tmp_path_factory.mktemp(method)
    run_method(config, workdir, max_rounds=1)   # one round through the runner (no plot)
    runs[method] = (config, read_metrics(workdir))
  return runs


def test_one_round_of_each_method_runs_and_counts_its_communication(tiny_runs):
  c, d, n = 10, TINY["feature_dim"], TINY["agents"]
  for method, (_, rows) in tiny_runs.items():
    assert len(rows) == n and {r["agent"] for r in rows} == set(range(n))
    for r in rows:
      assert r["method"] == method and r["round"] == 0 and 0 <= r["test_accuracy"] <= 1
      assert np.isfinite(r["test_loss"])
  model = rs.make_client_model("mlp", c, d, width=TINY["width"])
  num_params = rs.tree_size(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                            jnp.zeros((1, 8, 8, 1))))
  expected = {  # (uploaded, downloaded) numbers per client in round 0
      "repshare": ((1 + 1) * c * (d + 1), (1 + 1) * c * (d + 1)),   # means+counts, obs+counts
      "repshare-fd": (c * c + c, 0),                # mean logits + counts; no teacher yet
      "repshare-fedavg": (num_params, num_params),
      "repshare-independent": (0, 0),
  }
  for method, (up, down) in expected.items():
    for r in tiny_runs[method][1]:
      assert (r["comm_floats"], r["comm_down_floats"]) == (up, down), method
  fedavg = tiny_runs["repshare-fedavg"][1]
  assert fedavg[0]["test_accuracy"] == fedavg[1]["test_accuracy"]   # one global model


def test_relay_sees_only_the_payload_and_means_are_one_round_stale(monkeypatch):
  config = _config(method="repshare")
  data = rs.load_data(config)
  seen, updates = [], []
  relay, update = rs.relay, rs._update_all

  def spy_relay(*args, **kwargs):
    seen.append((args, kwargs))
    out = relay(*args, **kwargs)
    seen[-1] += (out,)
    return out

  def spy_update(params, opt_state, x, labels, mask, downloads, keys, **kw):
    out = update(params, opt_state, x, labels, mask, downloads, keys, **kw)
    updates.append((downloads, out[0]))
    return out

  monkeypatch.setattr(rs, "relay", spy_relay)
  monkeypatch.setattr(rs, "_update_all", spy_update)
  state = rs.init(config, data)
  first = state.downloads
  for t in range(2):
    state, _ = rs.step(config, data, state, t)
  n, c, d = 2, data.num_classes, config.feature_dim
  for args, kwargs, _ in seen:               # only the agreed payload reaches the server
    payload, key = args
    assert isinstance(payload, rs.Payload) and set(kwargs) == {"num_download", "exclude_self"}
    assert [np.shape(a) for a in payload] == [(n, c, d), (n, c), (n, 1, c, d), (n, 1, c)]
    assert np.shape(key) == np.shape(jax.random.PRNGKey(0))
  # round 0 trains on the relay's initialisation, round 1 on what the relay sent after round 0
  _same = lambda a, b: jax.tree_util.tree_all(jax.tree_util.tree_map(
      lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)), a, b))
  assert _same(updates[0][0], first)
  assert _same(updates[1][0], seen[0][2])
  # ... which was computed from the parameters after round 0's local update
  k_up = jax.random.split(round_rng(config.seed, 0), 3)[1]
  model = rs._model_of(config, c)
  payload = rs._payload_all(updates[0][1], data.x, data.labels, data.mask,
                            jax.random.split(k_up, n), model=model,
                            chunk=rs._eval_chunk(data.x.shape[1], config.batch_size),
                            num_classes=c, n_avg=config.n_avg, num_upload=1, share="features")
  assert _same(payload, seen[0][0][0])
  assert _same(state.downloads, seen[1][2])


def test_config_checks_its_fields():
  from neural._src.runtime.config import ConfigError
  with pytest.raises(ConfigError, match="num_download"):
    _config(method="repshare", num_download=2)
  with pytest.raises(ConfigError, match="backbone"):
    _config(method="repshare", backbone="vit")
  config = cast(rs.RepShareConfig, method_config_from_dict({"method": "repshare"}))
  assert (config.lambda_kd, config.lambda_disc, config.n_avg) == (10.0, 1.0, 10)
  # The baselines download nothing: num_download is not checked for them.
  fd = _config(method="repshare-fd", num_download=5)
  assert fd.method == "repshare-fd"


def test_fd_without_a_teacher_is_cross_entropy_alone():
  """FedAvg and IL train with FD's program and every teacher flagged invalid."""
  model = rs.make_client_model("mlp", 10, TINY["feature_dim"], width=TINY["width"])
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.uniform(size=(6, 8, 8, 1)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 10, 6))
  w = jnp.asarray([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])

  @jax.jit
  def losses(params, key):
    no_teacher = jax.tree_util.tree_map(lambda a: a[0], rs._no_teacher(1, 10))
    fd = rs.local_loss(model, rs._Loss("fd", lambda_fd=1.0), params, x, y, w, no_teacher, key)
    z = cast(jax.Array, model.apply({"params": params}, x))
    ce = -jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], axis=1)[:, 0]
    return fd, jnp.sum(w * ce) / jnp.sum(w)
  params = rs._init_one(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1), jnp.float32),
                        model=model)                  # the runs' compiled init
  fd, ce = losses(params, jax.random.PRNGKey(1))
  np.testing.assert_allclose(float(fd), float(ce), rtol=1e-6)


@pytest.mark.parametrize("backbone,shape,dim", [("lenet5", (28, 28, 1), 84),
                                                ("mlp", (8, 8, 1), 16),
                                                ("resnet9", (32, 32, 3), 128),
                                                ("resnet18", (32, 32, 3), 256)])
def test_client_models_give_features_of_dimension_d_and_logits(backbone, shape, dim):
  model = rs.make_client_model(backbone, 10, dim)
  x = jax.ShapeDtypeStruct((3, *shape), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)   # traced, not compiled
  s, z = jax.eval_shape(lambda v, x: model.apply(v, x, method=rs.FeatureClassifier.features_logits),
                        variables, x)
  assert s.shape == (3, dim) and z.shape == (3, 10)
  assert variables["params"]["head"]["kernel"].shape == (dim, 10)
  with pytest.raises(rs.RepShareError, match="backbone"):
    rs.make_client_model("vit", 10, dim)


def _conv(k, c_in, c_out, bias=True):
  return k * k * c_in * c_out + (c_out if bias else 0)


def _dense(d_in, d_out):
  return d_in * d_out + d_out


# Layer by layer from the thesis's code (models.py of github.com/fberdoz/MIT-master-thesis),
# each norm with a scale and a bias per channel; "stated": Sec. 4 of the thesis.
_LENET5 = _conv(5, 1, 6) + _conv(5, 6, 16) + _conv(3, 16, 120) + _dense(120, 84) + _dense(84, 10)
_RESNET9 = (_conv(3, 1, 64, False) + _conv(3, 64, 128, False) + 2 * _conv(3, 128, 128, False)
            + _conv(3, 128, 256, False) + _conv(3, 256, 256, False) + 2 * _conv(3, 256, 256, False)
            + 2 * (64 + 128 + 2 * 128 + 256 + 256 + 2 * 256) + _dense(256, 128) + _dense(128, 10))
_BLOCK = lambda c: 2 * _conv(3, c, c, False) + 4 * c                 # identity shortcut
_DOWN = lambda c: (_conv(3, c // 2, c, False) + _conv(3, c, c, False)   # 1x1-conv shortcut
                   + _conv(1, c // 2, c, False) + 6 * c)
_RESNET18_BLOCKS = 2 * _BLOCK(64) + sum(_DOWN(c) + _BLOCK(c) for c in (128, 256, 512))
_RESNET18 = _conv(3, 3, 64, False) + 2 * 64 + _RESNET18_BLOCKS + _dense(512, 256) + _dense(256, 10)


@pytest.mark.parametrize("backbone,shape,dim,count,stated", [
    ("lenet5", (28, 28, 1), 84, _LENET5, 30e3),          # MNIST, "~30K parameters"
    ("resnet9", (28, 28, 1), 128, _RESNET9, 2.4e6),      # Fashion-MNIST, "~2,4M"
    ("resnet18", (32, 32, 3), 256, _RESNET18, 11.3e6),   # CIFAR-10, "~11.3M"
])
def test_client_models_have_the_thesis_parameter_counts(backbone, shape, dim, count, stated):
  model = rs.make_client_model(backbone, 10, dim)
  x = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  assert rs.tree_size(variables) == count
  assert abs(count / stated - 1) < 0.05
  assert (backbone, count) in {("lenet5", 30_986), ("resnet9", 2_470_730),
                               ("resnet18", 11_302_730)}


@pytest.mark.parametrize("backbone", ["lenet5", "resnet9"])
def test_thesis_models_end_their_features_with_tanh_and_work_on_digits(backbone):
  model = rs.make_client_model(backbone, 10, 12, width=4)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 8, 8, 1)) * 50, jnp.float32)
  params = model.init(jax.random.PRNGKey(0), x)["params"]
  s, z = cast(tuple[jax.Array, jax.Array], model.apply(
      {"params": params}, x, method=rs.FeatureClassifier.features_logits))
  pre = cast(jax.Array, model.apply({"params": params}, x,
                                    method=lambda m, x: m.projection(m.backbone(x))))
  np.testing.assert_allclose(np.asarray(s), np.tanh(np.asarray(pre)), rtol=1e-5, atol=1e-6)
  assert s.shape == (3, 12) and z.shape == (3, 10)


def test_fd_losses_match_a_direct_computation():
  """Jeong et al.'s CE to the teacher's softmax, and the thesis code's MSE on logits."""
  model = rs.make_client_model("mlp", 10, TINY["feature_dim"], width=TINY["width"])
  rng = np.random.default_rng(6)
  x = jnp.asarray(rng.uniform(size=(5, 8, 8, 1)), jnp.float32)
  y = np.asarray([0, 3, 3, 7, 9])
  w = np.asarray([1.0, 1.0, 0.0, 1.0, 1.0])
  teacher = rng.normal(size=(10, 10)).astype(np.float32)
  valid = np.ones(10, bool)
  valid[9] = False                                        # no client had class 9
  download = rs.Download(teacher, valid, np.zeros((0, 10, 10), np.float32),
                         np.zeros((0, 10), bool))
  params = rs._init_one(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)), model=model)
  z = np.asarray(model.apply({"params": params}, x), np.float64)
  log_p = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
  ce = -log_p[np.arange(5), y]
  t = teacher[y].astype(np.float64)
  soft = np.exp(t) / np.sum(np.exp(t), axis=1, keepdims=True)
  terms = {"ce": -np.sum(soft * log_p, axis=1), "mse": np.mean((z - t) ** 2, axis=1)}
  for kind, lam in (("ce", 1.0), ("mse", 10.0)):
    got = rs.local_loss(model, rs._Loss("fd", lambda_fd=lam, fd_loss=kind), params, x,
                        jnp.asarray(y), jnp.asarray(w), download, jax.random.PRNGKey(1))
    want = np.sum(w * (ce + lam * np.where(valid[y], terms[kind], 0.0))) / np.sum(w)
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


@pytest.mark.parametrize("include_self", [False, True])
def test_fd_teacher_from_the_untrained_models_with_or_without_the_own_client(include_self):
  """initial_targets="models": round 0's teacher is the class means of the initial logits."""
  config = _config(agents=3, method="repshare-fd", initial_targets="models",
                   fd_include_self=include_self)
  data = rs.load_data(config)
  state = rs.init(config, data)
  model = rs._model_of(config, data.num_classes)
  n, c = 3, data.num_classes
  sums, counts = np.zeros((n, c, c)), np.zeros((n, c))
  for u in range(n):
    p = jax.tree_util.tree_map(lambda a, u=u: a[u], state.params)
    keep = data.mask[u]
    z = np.asarray(model.apply({"params": p}, data.x[u][keep]), np.float64)
    for k in range(c):
      sums[u, k] = z[data.labels[u][keep] == k].sum(0)
      counts[u, k] = np.sum(data.labels[u][keep] == k)
  for u in range(n):
    pool = range(n) if include_self else [v for v in range(n) if v != u]
    want = sums[list(pool)].sum(0) / np.maximum(counts[list(pool)].sum(0), 1)[:, None]
    np.testing.assert_allclose(np.asarray(state.downloads.means[u]), want, rtol=2e-4, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(state.downloads.valid[u]),
                                  counts[list(pool)].sum(0) > 0)


def test_one_client_is_the_centralised_baseline(tmp_path):
  from neural._src.runtime.config import ConfigError
  config = _config(agents=1, method="repshare-independent")
  rows = run_method(config, tmp_path, max_rounds=1)
  assert len(rows) == 1 and rows[0]["agent"] == 0 and 0 <= rows[0]["test_accuracy"] <= 1
  assert (rows[0]["comm_floats"], rows[0]["comm_down_floats"]) == (0, 0)
  assert len(rs.load_data(config).sizes) == 1 and rs.load_data(config).mask.sum() == 64
  with pytest.raises(ConfigError, match="agents"):
    _config(agents=1, method="repshare")
  with pytest.raises(ConfigError, match="agents"):
    _config(agents=0, method="repshare-independent")


@pytest.mark.parametrize("method", ["repshare", "repshare-fd"])
def test_targets_from_the_untrained_models_count_their_upload_in_round_0(method, tmp_path):
  c, d = 10, TINY["feature_dim"]
  rows = run_method(_config(method=method, initial_targets="models"), tmp_path, max_rounds=1)
  sent = (1 + 1) * c * (d + 1) if method == "repshare" else c * c + c
  for r in rows:   # the untrained models' means, then the trained ones; the relay's answer
    assert (r["comm_floats"], r["comm_down_floats"]) == (2 * sent, sent)


def test_class_mean_spread_is_the_mean_distance_to_the_centre_of_the_valid_classes():
  means = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [9.0, 9.0]])
  valid = np.array([True, True, True, False])
  centre = np.array([2.0, 2.0]) / 3
  want = float(np.mean([np.linalg.norm(m - centre) for m in means[:3]]))
  spread, norm = rs.class_mean_spread(means, valid)
  np.testing.assert_allclose([spread, norm], [want, 4.0 / 3], rtol=1e-12)
  assert rs.class_mean_spread(np.ones((4, 3)))[0] == 0.0               # collapsed classes
  with pytest.raises(rs.RepShareError, match="valid"):
    rs.class_mean_spread(means, valid[:2])
