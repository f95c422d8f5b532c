"""The training scaffold: sampling, masks, keys, loops, agents, communication, the optimisers."""

from collections.abc import Callable
import dataclasses
from typing import Any
from typing import cast
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import neural
from neural import training
from neural._src.training import train_loop as tl

SGD1 = training.OptimizerConfig("sgd", 1.0)   # p <- p - grad: a loss -sum w p[id] counts uses


def count_uses(params, batch):
  """Gradient -weights at the points' ids: one SGD step of lr 1 adds each use to params."""
  return -jnp.sum(batch.weights * params[batch.data["id"]])


def leaves(tree):
  return [np.asarray(a) for a in jax.tree.leaves(tree)]


@pytest.mark.parametrize("step_loop", ["scan", "python"])
def test_an_epoch_uses_every_unmasked_point_once_and_masked_points_never(step_loop):
  n, mask = 23, np.arange(23) % 4 != 1
  out = training.train_loop(count_uses, jnp.zeros(n), {"id": jnp.arange(n)}, optimizer=SGD1,
                          key=jax.random.PRNGKey(0), schedule=training.Schedule(5, epochs=3),
                          mask=mask, loop=training.Loop(step_loop))
  np.testing.assert_array_equal(np.asarray(out.params), 3.0 * mask)


def test_a_batch_larger_than_the_data_is_the_whole_data_cut_to_its_size_said_once():
  n, mask = 23, np.arange(23) % 4 != 1                 # 17 points in
  shapes = []
  def uses_and_shapes(params, batch):
    shapes.append(batch.weights.shape[0])               # at trace time: the batch's slots
    return count_uses(params, batch)
  with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("default")
    for batching in ("vmap", "sequential"):              # sequential: each agent alone
      out = training.train_loop(uses_and_shapes, jnp.zeros((2, n)), {"id": jnp.stack(
          [jnp.arange(n)] * 2)}, optimizer=SGD1, key=jnp.stack([jax.random.PRNGKey(0)] * 2),
          schedule=training.Schedule(10**6, epochs=3), mask=np.stack([mask, mask]), stacked=True,
          loop=training.Loop("python", batching))
      np.testing.assert_array_equal(np.asarray(out.params), 3.0 * np.stack([mask, mask]))
  assert set(shapes) == {32}                            # the data's 17 points, in 32 slots
  assert [str(w.message) for w in said if w.category is training.LargeBatchWarning] == [
      "batch_size 1000000 is larger than the data: each epoch is one step on the whole "
      "data (the batch is cut to the data's size)"]


@pytest.mark.parametrize("batch_size, points, expected", [
    (64, 100, 64), (100, 100, 100), (110, 100, 110), (10**6, 100, 128), (10**6, 1, 1),
    (10**6, 129, 256), (5, 0, 5)])
def test_epoch_batch_size_is_the_batch_or_the_whole_data(batch_size, points, expected):
  assert tl.epoch_batch_size(batch_size, points) == expected


def test_steps_draw_with_replacement_from_unmasked_points_only():
  n, mask = 17, np.arange(17) < 9
  out = training.train_loop(count_uses, jnp.zeros(n), {"id": jnp.arange(n)}, optimizer=SGD1,
                          key=jax.random.PRNGKey(1), schedule=training.Schedule(4, steps=50),
                          mask=mask)
  uses = np.asarray(out.params)
  assert uses.sum() == 200 and np.all(uses[~mask] == 0)
  assert np.count_nonzero(uses[mask]) == 9          # 200 draws reach all 9 points


def test_stacked_agents_keep_their_own_schedules_and_numbers():
  n, masks = 20, np.stack([np.arange(20) < 20, np.arange(20) < 7])
  keys = jnp.stack([jax.random.PRNGKey(2), jax.random.PRNGKey(3)])
  data = {"id": jnp.stack([jnp.arange(n)] * 2)}
  for batching in ("vmap", "sequential"):
    out = training.train_loop(count_uses, jnp.zeros((2, n)), data, optimizer=SGD1, key=keys,
                            schedule=training.Schedule(6, epochs=2), mask=masks, stacked=True,
                            loop=training.Loop(agent_batching=batching))
    np.testing.assert_array_equal(np.asarray(out.params), 2.0 * masks)
  # drawn steps too: the agents one after the other draw what they draw vmapped
  outs = [training.train_loop(count_uses, jnp.zeros((2, n)), data, optimizer=SGD1, key=keys,
                              schedule=training.Schedule(4, steps=5), mask=masks, stacked=True,
                              loop=training.Loop(agent_batching=batching)).params
          for batching in ("vmap", "sequential")]
  np.testing.assert_array_equal(np.asarray(outs[0]), np.asarray(outs[1]))
  assert np.asarray(outs[0]).sum() == 2 * 5 * 4


@dataclasses.dataclass(frozen=True)
class KeyEcho:
  """Gradient -u: each step adds a uniform draw of the agent's (or the shared) key."""

  shared: bool

  def __call__(self, params, batch):
    key = batch.shared_key if self.shared else batch.key
    return -jnp.sum(params * jax.random.uniform(key, params.shape))


@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_shared_key_is_common_to_agents_and_key_is_not(batching):
  keys = jnp.stack([jax.random.PRNGKey(k) for k in range(3)])
  run = lambda shared: np.asarray(training.train_loop(
      KeyEcho(shared), jnp.zeros((3, 2)), {"id": jnp.zeros((3, 4), jnp.int32)}, optimizer=SGD1,
      key=keys, schedule=training.Schedule(2, epochs=1), stacked=True,
      loop=training.Loop(agent_batching=batching)).params)
  common, own = run(True), run(False)
  assert np.allclose(common[0], common[1]) and np.allclose(common[0], common[2])
  assert not np.allclose(own[0], own[1])


def quadratic(params, batch):
  return jnp.sum(batch.weights * (batch.data["x"] @ params["w"] - batch.data["y"]) ** 2)


@dataclasses.dataclass(frozen=True)
class Average:
  """A communicate step: every agent takes the mean of the agents' parameters."""

  def __call__(self, ex):
    mean = jax.tree.map(lambda a: jnp.broadcast_to(a.mean(axis=0), a.shape), ex.params)
    return mean, ex.context


@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_communicate_acts_on_all_agents_after_every_step(batching):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(3, 12, 2)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(3, 12)), jnp.float32)
  params = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)}
  out = training.train_loop(quadratic, params, {"x": x, "y": y},
                          optimizer=training.OptimizerConfig("sgd", 0.01),
                          key=jax.random.split(jax.random.PRNGKey(0), 3),
                          schedule=training.Schedule(4, epochs=2), stacked=True,
                          communicate=Average(), loop=training.Loop(agent_batching=batching))
  w = np.asarray(out.params["w"])
  np.testing.assert_allclose(w, np.broadcast_to(w[0], w.shape), rtol=1e-6)
  assert not np.allclose(w[0], np.asarray(params["w"]).mean(axis=0))


@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_scan_and_python_loops_give_the_same_numbers(name):
  rng = np.random.default_rng(0)
  x = rng.random((21, 6, 6, 1)).astype(np.float32)
  t = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 21)]
  model = neural.get_model(name, 3, width=4)
  variables = training.init_variables(model, jax.random.PRNGKey(0), (6, 6, 1))
  runs = [training.train(model, variables, x, t, jax.random.PRNGKey(1),
                       training.TrainConfig(epochs=2, batch_size=8, step_loop=loop))
          for loop in ("scan", "python")]
  for u, v in zip(leaves(runs[0]), leaves(runs[1])):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)   # float32, other XLA programs


def test_agents_together_or_one_after_the_other_give_the_same_numbers():
  rng = np.random.default_rng(1)
  xs = rng.random((2, 16, 6, 6, 1)).astype(np.float32)
  ts = np.eye(3, dtype=np.float32)[rng.integers(0, 3, (2, 16))]
  masks = np.stack([np.ones(16, bool), np.arange(16) < 9])
  model = neural.get_model("cnn", 3, width=4)
  variables = jax.tree.map(lambda a: jnp.stack([a, a + 0.01]),
                           training.init_variables(model, jax.random.PRNGKey(0), (6, 6, 1)))
  keys = jnp.stack([jax.random.PRNGKey(5), jax.random.PRNGKey(6)])
  runs = [training.train_batch(model, variables, xs, ts, keys,
                             training.TrainConfig(epochs=2, batch_size=4, agent_batching=mode),
                             masks) for mode in ("vmap", "sequential")]
  for u, v in zip(leaves(runs[0]), leaves(runs[1])):
    np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)   # float32, grouped convolutions


def test_auto_picks_the_loop_by_backend_and_convolution(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  assert tl.resolve_loop("auto", "auto", lambda: True) == ("python", "sequential")
  assert tl.resolve_loop("auto", "auto", lambda: False) == ("scan", "vmap")
  assert tl.resolve_loop("scan", "auto", lambda: True) == ("scan", "sequential")
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert tl.resolve_loop("auto", "auto", lambda: True) == ("scan", "vmap")


@pytest.mark.parametrize("name, expected", [("cnn", True), ("mlp", False)])
def test_a_convolution_in_the_step_is_detected(name, expected):
  model = neural.get_model(name, 3, width=4)
  params = training.init_variables(model, jax.random.PRNGKey(0), (6, 6, 1))["params"]
  plan = tl._Plan(training.SoftmaxLoss(model), training.OptimizerConfig(), 4, "epochs")
  data = {"x": jnp.zeros((8, 6, 6, 1)), "t": jnp.zeros((8, 3))}
  inputs = tl._Inputs(data, None, jnp.arange(8), jnp.int32(8), jax.random.PRNGKey(0),
                      jax.random.PRNGKey(1), jnp.int32(0))
  tx = training.make_optimizer(plan.optimizer)
  assert tl._step_uses_convolution(plan, (params, tx.init(params), None), inputs) is expected


@pytest.mark.parametrize("kwargs, match", [
    (dict(epochs=1, steps=1), "exactly one"),
    (dict(), "exactly one"),
    (dict(epochs=-1), "epochs"),
    (dict(epochs=1, batch_size=0), "batch_size"),
    (dict(epochs=1, mask=np.ones(3, bool)), "mask"),
    (dict(steps=2, mask=np.zeros(5, bool)), "at least one point"),
    (dict(epochs=1, step_loop="fast"), "step_loop"),
    (dict(epochs=1, agent_batching="pmap"), "agent_batching"),
    (dict(epochs=1, communicate=Average()), "stacked"),
    (dict(epochs=1, optimizer="adam"), "OptimizerConfig"),
])
def test_bad_settings_are_named(kwargs, match):
  kwargs = {"batch_size": 2, **kwargs}
  schedule = training.Schedule(**{k: kwargs.pop(k) for k in ("batch_size", "epochs", "steps")
                                if k in kwargs})
  loop = training.Loop(**{k: kwargs.pop(k) for k in ("step_loop", "agent_batching") if k in kwargs})
  settings = {**dict(optimizer=SGD1, key=jax.random.PRNGKey(0), schedule=schedule, loop=loop),
              **kwargs}
  with pytest.raises(training.TrainError, match=match):
    training.train_loop(count_uses, jnp.zeros(5), {"id": jnp.arange(5)}, **settings)


def test_the_keywords_schedule_and_loop_replaced_still_work_for_a_release_with_a_warning():
  data, settings = {"id": jnp.arange(7)}, dict(optimizer=SGD1, key=jax.random.PRNGKey(3))
  new = training.train_loop(count_uses, jnp.zeros(7), data, **settings,
                            schedule=training.Schedule(3, steps=4, first_step=2),
                            loop=training.Loop(step_loop="python"))
  with pytest.warns(DeprecationWarning, match=r"batch_size=, steps=, first_step=, step_loop= "
                                              r"deprecated: pass schedule=Schedule"):
    old = training.train_loop(count_uses, jnp.zeros(7), data, **settings, batch_size=3,
                              steps=4, first_step=2, step_loop="python")
  np.testing.assert_array_equal(old.params, new.params)
  assert float(jnp.sum(new.params)) == 12.0   # 4 steps of 3 points: 12 uses
  with pytest.raises(training.TrainError, match=r"epochs: pass it in schedule= \(not beside"):
    training.train_loop(count_uses, jnp.zeros(7), data, **settings, epochs=1,
                        schedule=training.Schedule(3, epochs=1))
  with pytest.raises(training.TrainError, match="schedule: expected a neural.training.Schedule"):
    training.train_loop(count_uses, jnp.zeros(7), data, **settings)
  with pytest.raises(training.TrainError, match="epoch: not an argument of train_loop"):
    training.train_loop(count_uses, jnp.zeros(7), data, **settings, epoch=1)


def test_data_of_unequal_lengths_is_named():
  with pytest.raises(training.TrainError, match="data"):
    training.train_loop(count_uses, jnp.zeros(5), {"id": jnp.arange(5), "x": jnp.zeros(4)},
                      optimizer=SGD1, key=jax.random.PRNGKey(0),
                      schedule=training.Schedule(2, epochs=1))


def test_opt_state_handed_back_continues_the_schedule():
  """An optimiser state handed back in continues its schedule instead of restarting it."""
  config = training.OptimizerConfig("adam", 0.1, schedule="cosine", decay_steps=10)
  rng = np.random.default_rng(2)
  data = {"x": jnp.asarray(rng.normal(size=(9, 2)), jnp.float32),
          "y": jnp.asarray(rng.normal(size=9), jnp.float32)}
  params = {"w": jnp.zeros(2)}
  first = training.train_loop(quadratic, params, data, optimizer=config, key=jax.random.PRNGKey(0),
                            schedule=training.Schedule(3, steps=5))
  second = training.train_loop(quadratic, first.params, data, optimizer=config,
                             key=jax.random.PRNGKey(1), schedule=training.Schedule(3, steps=5),
                             opt_state=first.opt_state)
  fresh = training.train_loop(quadratic, first.params, data, optimizer=config,
                            key=jax.random.PRNGKey(1), schedule=training.Schedule(3, steps=5))
  count = lambda s: max(int(a) for a in jax.tree.leaves(s) if jnp.issubdtype(a.dtype, jnp.integer))
  assert count(second.opt_state) == 10 and count(fresh.opt_state) == 5
  assert not np.allclose(second.params["w"], fresh.params["w"])   # the schedule went on


def torch_sgd(p, grads_fn, steps, lr, wd, momentum):
  """``torch.optim.SGD(lr, momentum, weight_decay=wd)`` written out in NumPy (float64)."""
  buf = None
  for _ in range(steps):
    g = grads_fn(p) + wd * p
    buf = g if buf is None else momentum * buf + g
    p = p - lr * buf
  return p


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_pytorch_sgd_with_l2(momentum):
  rng = np.random.default_rng(0)
  a = rng.normal(size=(4, 4))
  p0 = rng.normal(size=4).astype(np.float32).astype(np.float64)
  grads_fn = lambda p: a @ p - 1.0
  tx = training.make_optimizer(training.OptimizerConfig("sgd", 0.05, 0.1, momentum))
  p = jnp.asarray(p0, jnp.float32)
  state = tx.init(p)
  for _ in range(3):
    g = jnp.asarray(grads_fn(np.asarray(p, np.float64)), jnp.float32)
    updates, state = tx.update(g, state, p)
    p = optax.apply_updates(p, updates)
  np.testing.assert_allclose(np.asarray(p), torch_sgd(p0, grads_fn, 3, 0.05, 0.1, momentum),
                             rtol=1e-5, atol=1e-6)


def test_schedules_follow_their_formulas():
  poly = training.OptimizerConfig("sgd", 0.2, schedule="polynomial", power=0.6, t0=10.0)
  poly = cast(Callable[[int], Any], poly.learning_rate_at())
  for step in (0, 1, 7, 100):
    np.testing.assert_allclose(float(jnp.asarray(poly(step))),
                               0.2 * (10.0 / (step + 10.0)) ** 0.6, rtol=1e-6)
  cos = cast(Callable[[int], Any], training.OptimizerConfig(
      "adam", 1.0, schedule="cosine", decay_steps=8).learning_rate_at())
  np.testing.assert_allclose([float(jnp.asarray(cos(s))) for s in (0, 4, 8, 20)],
                             [1.0, 0.5, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="rmsprop"), "name"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(weight_decay=-1.0), "weight_decay"),
    (dict(momentum=1.0), "momentum"),
    (dict(schedule="cosine"), "decay_steps"),
    (dict(schedule="step"), "schedule"),
])
def test_bad_optimizer_settings_are_named(kwargs, match):
  with pytest.raises(training.OptimizerError, match=match):
    training.OptimizerConfig(**kwargs)


def _linear_loss(params, batch):
  pred = batch.data["x"] @ params["w"]
  return training.weighted_mean((pred - batch.data["y"]) ** 2, batch.weights)


def test_on_epoch_watches_every_epoch_without_changing_training():
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 40, 3))
  y = x @ jnp.array([1.0, -2.0, 0.5])
  seen = []
  common: dict[str, Any] = dict(optimizer=training.OptimizerConfig("adam", 0.05),
                                key=jax.random.split(jax.random.PRNGKey(0), 2),
                                schedule=training.Schedule(16, epochs=4), stacked=True)
  params = {"w": jnp.zeros((2, 3))}
  plain = training.train_loop(_linear_loss, params, {"x": x, "y": y}, **common)
  for batching in ("vmap", "sequential"):
    seen.clear()
    out = training.train_loop(_linear_loss, params, {"x": x, "y": y},
                            loop=training.Loop(agent_batching=batching),
                     on_epoch=lambda e, p, agent: seen.append((e, agent, p["w"])), **common)
    np.testing.assert_allclose(out.params["w"], plain.params["w"], rtol=1e-6)
    if batching == "vmap":
      assert [(e, agent) for e, agent, _ in seen] == [(e, None) for e in range(4)]
      np.testing.assert_allclose(seen[-1][2], plain.params["w"], rtol=1e-6)
    else:
      assert [(e, agent) for e, agent, _ in seen] == [(e, m) for m in range(2) for e in range(4)]
      np.testing.assert_allclose(seen[-1][2], plain.params["w"][1], rtol=1e-6)


def shifted(params, batch):
  """A quadratic loss on targets shifted by the agent's context; aux: its mean prediction."""
  pred = batch.data["x"] @ params["w"] + params.get("b", 0.0)
  loss = jnp.sum(batch.weights * (pred - batch.data["y"] - batch.context["c"]) ** 2)
  return loss, jnp.mean(pred)


@dataclasses.dataclass(frozen=True)
class Accumulate:
  """A communicate step on the context alone: c^n += mean over agents of the aux, + aux^n."""

  def __call__(self, ex):
    return ex.params, {"c": ex.context["c"] + ex.aux.mean() + ex.aux}


def test_groups_of_agents_give_the_numbers_of_one_stack():
  # the same loss in two groups ((0, 2), (1,)): each agent's numbers are those of the
  # ungrouped run, and communicate sees aux and context in agent order
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(3, 12, 2)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(3, 12)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
  settings: dict[str, Any] = dict(optimizer=training.OptimizerConfig("sgd", 0.01),
                  schedule=training.Schedule(4, steps=3),
                  key=jax.random.split(jax.random.PRNGKey(0), 3), stacked=True, has_aux=True,
                  context={"c": jnp.asarray([0.0, 1.0, -1.0])}, communicate=Accumulate())
  one = training.train_loop(shifted, {"w": w}, {"x": x, "y": y}, **settings)
  first, second = np.array([0, 2]), np.array([1])
  grouped = training.train_loop((shifted, shifted), ({"w": w[first]}, {"w": w[second]}),
                              {"x": x, "y": y}, groups=((0, 2), (1,)), **settings)
  np.testing.assert_allclose(grouped.params[0]["w"], one.params["w"][first], rtol=1e-6)
  np.testing.assert_allclose(grouped.params[1]["w"], one.params["w"][second], rtol=1e-6)
  np.testing.assert_allclose(grouped.context["c"], one.context["c"], rtol=1e-6)
  assert len(set(np.round(np.asarray(one.context["c"]), 4))) == 3   # the order mattered


def test_groups_may_hold_different_architectures_and_bad_groups_are_named():
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(3, 8, 2)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(3, 8)), jnp.float32)
  params = ({"w": jnp.zeros((2, 2))}, {"w": jnp.zeros((1, 2)), "b": jnp.zeros((1,))})
  settings: dict[str, Any] = dict(optimizer=training.OptimizerConfig("sgd", 0.01),
                  schedule=training.Schedule(4, steps=3),
                  key=jax.random.split(jax.random.PRNGKey(0), 3), stacked=True, has_aux=True,
                  context={"c": jnp.zeros(3)}, communicate=Accumulate())
  out = training.train_loop((shifted, shifted), params, {"x": x, "y": y}, groups=((0, 1), (2,)),
                          **settings)
  assert jax.tree.map(np.shape, out.params) == jax.tree.map(np.shape, params)
  assert float(jnp.abs(out.params[1]["b"]).sum()) > 0   # the bias of group 1 trained
  for groups, match in [(((0, 1), (1,)), "groups"), (((0, 1),), "loss_fn")]:
    with pytest.raises(tl.TrainError, match=match):
      training.train_loop((shifted, shifted), params, {"x": x, "y": y}, groups=groups, **settings)


# ---------------------------------------------------------------------------
# The learning rate and weight decay are data: one compiled step, vmappable


def _regression(n=48):
  x = jax.random.normal(jax.random.PRNGKey(3), (n, 3))
  return {"x": x, "y": x @ jnp.array([1.0, -2.0, 0.5])}


@pytest.mark.parametrize("step_loop, jitted", [("scan", tl._scan_steps),
                                                ("python", tl._python_step)])
def test_a_new_learning_rate_or_weight_decay_compiles_nothing(step_loop, jitted):
  def run(lr, wd):
    return tl.train_loop(_linear_loss, {"w": jnp.zeros(3)}, _regression(),
                         optimizer=training.OptimizerConfig("adam", lr, weight_decay=wd),
                         key=jax.random.PRNGKey(0), schedule=training.Schedule(16, epochs=2),
                         loop=training.Loop(step_loop)).params
  first = run(0.01, 3e-4)
  compiled = jitted._cache_size()
  second = run(0.2, 5e-2)
  assert jitted._cache_size() == compiled   # the same program, other numbers
  assert not np.allclose(first["w"], second["w"])


def test_training_vmapped_over_learning_rates_equals_training_each_alone():
  data = _regression()

  def run(lr):
    return tl.train_loop(_linear_loss, {"w": jnp.zeros(3)}, data,
                         optimizer=training.OptimizerConfig("sgd", lr, weight_decay=1e-2,
                                                          momentum=0.9),
                         key=jax.random.PRNGKey(0), schedule=training.Schedule(16, epochs=3),
                         loop=training.Loop("scan")).params["w"]
  lrs = np.array([0.003, 0.03, 0.1], np.float32)
  together = jax.vmap(run)(jnp.asarray(lrs))
  assert together.shape == (3, 3)
  for lr, w in zip(lrs, together):
    # vmap batches the dot products: float32 rounding of another summation order
    np.testing.assert_allclose(np.asarray(w), np.asarray(run(float(lr))), rtol=1e-5, atol=1e-6)


def test_the_static_rule_drops_the_numbers_but_keeps_whether_there_is_a_decay():
  a = training.OptimizerConfig("sgd", 0.1, weight_decay=5e-4, momentum=0.9)
  b = training.OptimizerConfig("sgd", 0.3, weight_decay=1e-2, momentum=0.9)
  assert a.rule() == b.rule() and hash(a.rule()) == hash(b.rule())
  assert training.OptimizerConfig("sgd", 0.1).rule() != a.rule()   # no decay: no term at all
  lr, wd = a.hyperparameters()
  assert float(lr) == np.float32(0.1) and float(wd) == np.float32(5e-4)


def test_a_weakly_typed_learning_rate_gives_the_bits_of_the_float():
  config = training.OptimizerConfig("adam", 1e-3, weight_decay=3e-4)
  params = {"w": jnp.linspace(-1.0, 1.0, 7)}
  grads = {"w": jnp.cos(jnp.arange(7.0))}
  plain = training.make_optimizer(config)   # lr and decay compiled in as Python floats
  out_plain = jax.jit(lambda g, p: plain.update(g, plain.init(p), p)[0])(grads, params)
  out_data = jax.jit(lambda g, p, h: training.make_optimizer(config.rule(), h).update(
      g, plain.init(p), p)[0])(grads, params, config.hyperparameters())
  np.testing.assert_array_equal(np.asarray(out_plain["w"]), np.asarray(out_data["w"]))


@pytest.mark.parametrize("batching", ["vmap", "sequential"])
def test_stacked_agents_take_a_learning_rate_and_weight_decay_each(batching):
  """Per-agent (M,) rates in one program: agent m's numbers are those of training it alone
  with its own rate and decay (rtol 1e-6: vmapped float32 sums round in another order)."""
  x = jax.random.normal(jax.random.PRNGKey(1), (3, 40, 3))
  y = x @ jnp.array([1.0, -2.0, 0.5])
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  lrs, wds = (0.05, 0.01, 0.2), (1e-3, 0.0, 0.1)
  out = training.train_loop(
      _linear_loss, {"w": jnp.zeros((3, 3))}, {"x": x, "y": y},
      optimizer=training.OptimizerConfig("adam", jnp.asarray(lrs, jnp.float32),
                                       jnp.asarray(wds, jnp.float32)),
      key=keys, schedule=training.Schedule(16, epochs=3), stacked=True,
      loop=training.Loop(agent_batching=batching))
  for m in range(3):
    alone = training.train_loop(_linear_loss, {"w": jnp.zeros(3)}, {"x": x[m], "y": y[m]},
                              optimizer=training.OptimizerConfig("adam", lrs[m], wds[m]),
                              key=keys[m], schedule=training.Schedule(16, epochs=3))
    np.testing.assert_allclose(out.params["w"][m], alone.params["w"], rtol=1e-6, atol=1e-7)
  with pytest.raises(training.TrainError, match="optimizer: per-agent learning rates"):
    training.train_loop(_linear_loss, {"w": jnp.zeros((3, 3))}, {"x": x, "y": y},
                      optimizer=training.OptimizerConfig("adam", jnp.ones(2)), key=keys,
                      schedule=training.Schedule(16, epochs=1), stacked=True)
