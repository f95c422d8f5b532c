"""Tests of multi-headed distillation (Zhmoginov et al., 2023): heads, targets, losses, split."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import neural
from neural._src.methods import mhd


def _probs(rng, shape):
  logits = rng.normal(size=shape) * 2.0
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def test_multi_head_model_shapes_and_heads():
  # the smoke runs' model (mlp, width 8, 2 aux heads): its init program is shared with them
  model = mhd.mhd_model("mlp", 10, 2, width=8, tiny=True)
  params = mhd._init_jit(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1), jnp.float32),
                         model=model)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 8, 1)), jnp.float32)
  emb, logits = jax.jit(lambda p, x: model.apply({"params": p}, x))(params, x)
  assert logits.shape == (3, 4, 10)
  assert emb.shape == (4, 8)   # the MLP's last hidden layer feeds the heads
  assert {"main_head", "aux_head_1", "aux_head_2"} <= set(params)
  # every head is linear in the same embedding
  p = params["aux_head_2"]
  np.testing.assert_allclose(logits[2], emb @ p["kernel"] + p["bias"][None, :], rtol=1e-4,
                             atol=1e-5)


def test_most_confident_target_matches_numpy():
  rng = np.random.default_rng(0)
  cands = _probs(rng, (4, 30, 6))
  valid = np.array([True, False, True, True])
  targets, choice = jax.jit(mhd.most_confident_target)(jnp.asarray(cands), jnp.asarray(valid))
  conf = np.where(valid[:, None], cands.max(-1), -np.inf)
  expected = np.argmax(conf, axis=0)
  np.testing.assert_array_equal(np.asarray(choice), expected)
  np.testing.assert_allclose(np.asarray(targets), cands[expected, np.arange(30)])
  assert not np.any(np.asarray(choice) == 1)   # an invalid candidate is never chosen


def test_chain_targets_come_from_previous_level_heads():
  rng = np.random.default_rng(1)
  m, b, c, d = 3, 25, 5, 2
  own = _probs(rng, (m + 1, b, c))
  teachers = _probs(rng, (d, m + 1, b, c))
  valid = np.array([True, True])
  chain = jax.jit(mhd.chain_targets)
  targets, chosen = chain(jnp.asarray(own), jnp.asarray(teachers), jnp.asarray(valid))
  assert targets.shape == (m, b, c)
  for k in range(1, m + 1):
    cands = np.concatenate([own[k - 1][None], teachers[:, k - 1]])   # level k-1 only
    pick = np.argmax(cands.max(-1), axis=0)
    np.testing.assert_array_equal(np.asarray(chosen[k - 1]), pick)
    np.testing.assert_allclose(np.asarray(targets[k - 1]), cands[pick, np.arange(b)])
  # a teacher from an empty pool slot is never a target: only the client itself is left
  targets, chosen = chain(jnp.asarray(own), jnp.asarray(teachers), jnp.zeros(d, bool))
  np.testing.assert_array_equal(np.asarray(chosen), 0)
  np.testing.assert_allclose(np.asarray(targets), own[:m])


def test_random_choice_picks_valid_candidates():
  rng = np.random.default_rng(2)
  own = _probs(rng, (3, 40, 4))
  teachers = _probs(rng, (3, 3, 40, 4))
  chain = jax.jit(lambda o, t, v, k: mhd.chain_targets(o, t, v, choice="random", key=k))
  _, chosen = chain(jnp.asarray(own), jnp.asarray(teachers), jnp.asarray([True, False, True]),
                    jax.random.PRNGKey(0))
  chosen = np.asarray(chosen)
  assert set(np.unique(chosen)) <= {0, 1, 3} and len(np.unique(chosen)) == 3


def test_aux_chain_and_embedding_losses_match_numpy():
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(2, 7, 4)).astype(np.float32)
  targets = _probs(rng, (2, 7, 4))
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = sum(np.mean(-(targets[k] * logp[k]).sum(-1)) for k in range(2))
  got = jax.jit(mhd.aux_chain_loss)(jnp.asarray(logits), jnp.asarray(targets))
  np.testing.assert_allclose(float(got), expected, rtol=1e-5)
  emb = rng.normal(size=(7, 5)).astype(np.float32) * 3.0
  teach = rng.normal(size=(3, 7, 5)).astype(np.float32)
  valid = np.array([True, False, True])
  unit = lambda e: e / np.linalg.norm(e, axis=-1, keepdims=True)
  expected = np.mean(sum(np.sum((unit(emb) - unit(teach[j])) ** 2, -1)
                         for j in range(3) if valid[j]))
  got = jax.jit(mhd.embedding_loss)(jnp.asarray(emb), jnp.asarray(teach), jnp.asarray(valid))
  np.testing.assert_allclose(float(got), expected, rtol=1e-5)
  # no gradient flows into the teachers' embeddings
  g = jax.jit(jax.grad(lambda t: mhd.embedding_loss(jnp.asarray(emb), t)))(jnp.asarray(teach))
  np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_update_pools_takes_neighbour_snapshots():
  k, pool = 4, 2
  params = {"w": np.arange(k, dtype=np.float32)[:, None] * np.ones((k, 3), np.float32)}
  pool_params = {"w": np.zeros((k, pool, 3), np.float32)}
  owner = -np.ones((k, pool), np.int64)
  ring = np.zeros((k, k), bool)
  ring[np.arange(k), (np.arange(k) + 1) % k] = True    # i may learn from i + 1 only
  rng = np.random.default_rng(0)
  pool_params, owner, rounds, sources = mhd.update_pools(pool_params, owner, owner.copy(),
                                                         params, ring, 0, rng)
  np.testing.assert_array_equal(sources, (np.arange(k) + 1) % k)
  np.testing.assert_array_equal(owner[:, 0], sources)    # the first empty slot is filled
  np.testing.assert_array_equal(owner[:, 1], -1)
  np.testing.assert_array_equal(pool_params["w"][:, 0, 0], sources)
  np.testing.assert_array_equal(rounds[:, 0], 0)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
  from neural._src.methods.registry import run_method
  runs = {}
  for method, rounds in (("mhd", 2), ("mhd-isolated", 1), ("mhd-fedavg", 1)):
    config = mhd.MHDConfig(method=method, dataset="digits", train_subset=240, test_subset=60,
                           agents=3, rounds=rounds, model="mlp", width=8, tiny=True,
                           aux_heads=2, public_fraction=0.25, skew=5.0, labels_per_client=3,
                           graph="complete", steps_per_round=2, batch_size=8,
                           public_batch_size=8, optimizer="sgd", momentum=0.0,
                           cosine=False, learning_rate=1e-2)
    workdir = tmp_path_factory.mktemp(method)
    rows = run_method(config, workdir)
    runs[method] = (config, rows, neural.load_run_checkpoint(config, workdir)["state"])
  return runs


@pytest.mark.parametrize("method", ["mhd", "mhd-isolated", "mhd-fedavg"])
def test_one_round_of_each_method(smoke_runs, method):
  config, rows, state = smoke_runs[method]
  assert len(rows) == config.rounds * config.agents
  n_params = sum(np.size(a[0]) for a in jax.tree.leaves(state.params))
  last = [r for r in rows if r["round"] == config.rounds - 1]
  for row in last:
    assert len(row["head_accuracies"]) == len(row["private_accuracies"]) == 3
    # the reported head: the last aux head of mhd (Table 1), the main head of the baselines
    report = 2 if method == "mhd" else 0
    assert row["reported_head"] == report
    assert row["test_accuracy"] == row["head_accuracies"][report]
    assert row["main_accuracy"] == row["head_accuracies"][0]
    assert 0 <= row["test_loss"] < np.inf and 0 <= row["main_loss"] < np.inf
    # peer_accuracies[h][j]: head h on client j's private distribution; j = i is beta_priv
    peers = np.array(row["peer_accuracies"])
    assert peers.shape == (3, config.agents)
    np.testing.assert_array_equal(peers[:, row["agent"]], row["private_accuracies"])
  comm = np.array([r["comm_floats"] for r in last])
  if method == "mhd-isolated":
    np.testing.assert_array_equal(comm, 0)
  elif method == "mhd-fedavg":
    np.testing.assert_array_equal(comm, 2 * n_params)
    for leaf in jax.tree.leaves(state.params):     # every client holds the average
      np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape))
  else:
    assert comm.sum() == 2 * config.agents * n_params   # each client receives one snapshot
    # full pools of neighbours (never the client itself); two rounds replaced at most two
    # initial models per pool by snapshots of rounds 0 and 1
    assert np.all(state.pool_owner >= 0)
    assert np.all(state.pool_owner != np.arange(config.agents)[:, None])
    assert set(np.unique(state.pool_round)) <= {-1, 0, 1}
    assert np.all((state.pool_round >= 0).sum(axis=1) <= 2)
    assert np.all((state.pool_round == 1).sum(axis=1) == 1)
    assert last[0]["best_aux_accuracy"] == max(last[0]["head_accuracies"][1:])
    hops = np.array([r["peer_hops"] for r in last])
    np.testing.assert_array_equal(hops, 1 - np.eye(config.agents, dtype=int))   # complete
  if method != "mhd":
    assert all(r["peer_hops"] is None for r in last)


def test_teachers_follow_the_graph_edges():
  # directed ring i -> i + 1: client i + 1 learns from client i, and from no one else
  config = mhd.MHDConfig(method="mhd", agents=5, labels_per_client=2, graph="directed-ring")
  teachers = mhd.teacher_adjacency(config)
  expected = np.zeros((5, 5), bool)
  expected[(np.arange(5) + 1) % 5, np.arange(5)] = True
  np.testing.assert_array_equal(teachers, expected)
  with pytest.raises(Exception, match="graph"):
    mhd.MHDConfig(method="mhd", agents=5, labels_per_client=2, graph="star")


def test_teacher_hops_of_the_topology_study():
  # directed ring: client i's direct teacher is i - 1, its teacher's teacher i - 2 (Cycle-2)
  ring = mhd.MHDConfig(method="mhd", agents=4, labels_per_client=2, graph="directed-ring")
  idx = np.arange(4)
  np.testing.assert_array_equal(mhd.teacher_hops(ring), (idx[:, None] - idx[None, :]) % 4)
  # two islands of two: the partner is one hop away, the other island unreachable
  isl = ring.replace(graph="islands", num_islands=2)
  np.testing.assert_array_equal(mhd.teacher_hops(isl), [[0, 1, -1, -1], [1, 0, -1, -1],
                                                        [-1, -1, 0, 1], [-1, -1, 1, 0]])
  np.testing.assert_array_equal(mhd.teacher_adjacency(isl), mhd.teacher_hops(isl) == 1)
  with pytest.raises(Exception, match="num_islands"):
    ring.replace(graph="islands", num_islands=5)


def test_pools_start_full_of_the_neighbours_initial_models():
  teachers = np.zeros((4, 4), bool)
  teachers[0, [1, 3]] = teachers[1, 2] = teachers[2, [0, 1, 3]] = True   # client 3: no one
  owners = mhd.initial_pool_owners(teachers, 4)
  np.testing.assert_array_equal(owners, [[1, 3, 1, 3], [2, 2, 2, 2], [0, 1, 3, 0],
                                         [-1, -1, -1, -1]])
  config = mhd.MHDConfig(method="mhd", dataset="digits", train_subset=120, test_subset=30,
                         agents=3, model="mlp", width=8, tiny=True, aux_heads=2,
                         public_fraction=0.25, skew=5.0, labels_per_client=3,
                         graph="directed-ring")
  state = mhd.init(config, mhd.load_data(config))
  np.testing.assert_array_equal(state.pool_owner, [[2] * 3, [0] * 3, [1] * 3])
  np.testing.assert_array_equal(state.pool_round, -1)   # before any round
  for pool, params in zip(jax.tree.leaves(state.pool_params), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(pool, params[state.pool_owner])


def test_reported_head_is_the_last_trained_aux_head():
  config = mhd.MHDConfig(method="mhd", agents=4, labels_per_client=2, aux_heads=3)
  assert mhd.reported_head(config) == 3              # Table 1's head
  assert mhd.reported_head(config.replace(nu_aux=0.0)) == 0   # aux heads never trained
  assert mhd.reported_head(config.replace(aux_heads=0)) == 0
  assert mhd.reported_head(config.replace(method="mhd-isolated")) == 0
