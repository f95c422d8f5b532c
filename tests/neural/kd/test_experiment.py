"""train_and_evaluate: metrics per round and agent, resume, FedAvg, the baselines."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
import neural
from neural._src.datasets.run_data import load_run_data
from neural._src.kd.experiment import build_learners
from neural._src.kd.experiment import round_key
from neural._src.kd.experiment import scores
from neural._src.kd.experiment import train_and_evaluate
from neural._src.learners.fedavg import FedAvgError
from neural._src.learners.fedavg import fedavg
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import read_metrics

# Tiny runs on the 8x8 digits: a 32-unit MLP, one epoch on 120 points.
TINY = dict(dataset="digits", train_subset=120, test_subset=60, models=("mlp",), tiny=True,
            epochs=1, batch_size=32, rounds=3)


class Interrupt(Exception):
  pass


def _config(**changes):
  return ExperimentConfig(**{**TINY, **changes})


# Augmented distillation keeps its teachers in the protocol state (SoftTargets).
AUGMENTED = dict(models=("cnn",), augment="crop-flip", normalize=True)


@pytest.mark.parametrize("protocol, changes", [("ekd", {}), ("avgkd", {}), ("akd", AUGMENTED),
                                               ("pkd", AUGMENTED)])
def test_interrupted_run_resumes_to_the_same_metrics(protocol, changes, tmp_path):
  """Killed after round 1's metrics but before its checkpoint, then resumed: same metrics."""
  config = _config(protocol=protocol, **changes)
  full = train_and_evaluate(config, tmp_path / "full")

  def interrupt(t):
    if t == 1:
      raise Interrupt

  with pytest.raises(Interrupt):
    train_and_evaluate(config, tmp_path / "cut", on_round_end=interrupt)
  cut = read_metrics(tmp_path / "cut")
  assert max(r["round"] for r in cut) == 1   # round 1 was written, not checkpointed
  resumed = train_and_evaluate(config, tmp_path / "cut")
  assert resumed == full
  assert read_metrics(tmp_path / "cut") == full
  assert sorted({r["round"] for r in full}) == [0, 1, 2]
  assert (tmp_path / "cut" / "accuracy.png").exists()


def test_max_rounds_stops_and_a_second_call_finishes(tmp_path):
  config = _config(protocol="akd", start=1)
  full = train_and_evaluate(config, tmp_path / "full")
  first = train_and_evaluate(config, tmp_path / "parts", max_rounds=2)
  assert first == full[:2]
  assert not (tmp_path / "parts" / "accuracy.png").exists()
  assert train_and_evaluate(config, tmp_path / "parts") == full
  assert train_and_evaluate(config, tmp_path / "parts") == full   # finished: nothing to do
  # AKD from agent 1: round t's model belongs to agent (1 + t) mod 2
  assert [r["agent"] for r in full] == [1, 0, 1]


def test_a_different_config_in_the_workdir_is_an_error(tmp_path):
  train_and_evaluate(_config(protocol="akd", rounds=1), tmp_path)
  before = (tmp_path / "metrics.jsonl").read_text()
  with pytest.raises(ExperimentError, match=r"different config \(rounds=1 there, 2 here\)"):
    train_and_evaluate(_config(protocol="akd", rounds=2), tmp_path)
  assert (tmp_path / "metrics.jsonl").read_text() == before
  assert json.loads((tmp_path / "config.json").read_text())["rounds"] == 1


def test_a_run_without_outcomes_resumed_by_a_config_with_them_is_told_how(tmp_path):
  # The shipped paper configs record per-image outcomes; a run started without them has
  # none for its earlier rounds, so it resumes only with record_outcomes off, as said.
  train_and_evaluate(_config(protocol="akd", rounds=1), tmp_path)
  with pytest.raises(ExperimentError, match=r"record_outcomes=False there, True here\); use "
                                            r".* resume it with --set record_outcomes=false\)"):
    train_and_evaluate(_config(protocol="akd", rounds=1, record_outcomes=True), tmp_path)
  with pytest.raises(ExperimentError) as refused:   # another difference: no such hint
    train_and_evaluate(_config(protocol="akd", rounds=2, record_outcomes=True), tmp_path)
  assert "--set record_outcomes" not in str(refused.value)


def test_metrics_rows_of_each_protocol(tmp_path):
  ekd = train_and_evaluate(_config(protocol="ekd", rounds=2), tmp_path / "ekd")
  assert [(r["round"], r["agent"]) for r in ekd] == [
      (0, "ensemble"), (0, 0), (0, 1), (1, "ensemble"), (1, 1), (1, 0)]
  per_model = [r for r in ekd if r["agent"] != "ensemble"]
  assert [r["start"] for r in per_model] == [0, 1, 0, 1]
  assert all("train_accuracy" in r and r["num_train"] > 0 for r in per_model)
  for r in ekd:
    assert set(r) >= {"round", "agent", "protocol", "test_accuracy", "test_loss"}
    assert 0.0 <= r["test_accuracy"] <= 1.0 and r["test_loss"] >= 0.0
  # Round 0 of EKD is local training: the per-model rows equal the local baseline's.
  local = train_and_evaluate(_config(protocol="local"), tmp_path / "local")
  assert [(r["agent"], r["test_accuracy"]) for r in local] == [
      (r["agent"], r["test_accuracy"]) for r in per_model[:2]]
  assert sum(r["num_train"] for r in local) == TINY["train_subset"]
  central = train_and_evaluate(_config(protocol="central", rounds=5), tmp_path / "central")
  assert [(r["round"], r["agent"]) for r in central] == [(0, 0), (0, 1)]   # one round
  gs = train_and_evaluate(_config(protocol="backfit-gs", rounds=2), tmp_path / "gs")
  assert [r["agent"] for r in gs] == ["ensemble", "ensemble"]


def test_pkd_mean_run_and_its_round_one_targets(tmp_path, assert_close):
  """pkd-mean (the authors' code's PKD) runs; round 1's targets average both networks."""
  config = _config(protocol="pkd-mean", rounds=2)
  rows = train_and_evaluate(config, tmp_path)
  assert [(r["round"], r["agent"], r["protocol"]) for r in rows] == [
      (0, 0, "pkd-mean"), (0, 1, "pkd-mean"), (1, 0, "pkd-mean"), (1, 1, "pkd-mean")]
  assert read_metrics(tmp_path) == rows
  paper = neural.evidence.paper_rounds(rows)   # as PKD: one round per step, the mean of the agents
  assert [r["round"] for r in paper] == [1, 2]
  assert paper[1]["test_accuracy"] == pytest.approx((rows[2]["test_accuracy"]
                                                     + rows[3]["test_accuracy"]) / 2)
  # Round 0 through fedkrr.protocols.iterate with the run's Flax learners: each agent's next
  # targets are the mean of both models' predictions on its inputs, its own included.
  data = load_run_data(config)
  learners = build_learners(config, data.xs[0].shape[1:], data.num_classes)
  (state, out), = fedkrr.protocols.iterate(fedkrr.protocols.get_protocol("pkd-mean"), learners,
                                           data.xs, data.ys, 1)
  for i, x in enumerate(data.xs):
    preds = [np.asarray(model.predict(x)) for model in out.models]
    assert_close(state.targets[i], (preds[0] + preds[1]) / 2, rtol=1e-6)   # float32 networks
    # ... not the labels in its place (round 1 of pkd and of AvgKD)
    assert not np.allclose(state.targets[i], (data.ys[i] + preds[1 - i]) / 2)


def test_warm_start_and_forest_agent(tmp_path):
  config = _config(protocol="avgkd", models=("mlp", "forest"), forest_trees=5,
                   forest_max_depth=4, warm_start=True, rounds=2)
  rows = train_and_evaluate(config, tmp_path)
  assert [(r["round"], r["agent"], r["model"]) for r in rows] == [
      (0, 0, "mlp"), (0, 1, "forest"), (1, 0, "mlp"), (1, 1, "forest")]
  # An easy signal: the forest learns the digits well above chance (0.1).
  assert rows[1]["train_accuracy"] > 0.5


def test_fedavg_run_has_server_rows_and_learns(tmp_path):
  config = _config(protocol="fedavg", epochs=5, rounds=3, loss="ce", learning_rate=1e-2)
  rows = train_and_evaluate(config, tmp_path)
  server = [r for r in rows if r["agent"] == "server"]
  assert [r["round"] for r in server] == [0, 1, 2]
  assert [r["agent"] for r in rows[:3]] == [0, 1, "server"]
  # the averaged model keeps learning over the rounds, well above chance (0.1)
  assert server[-1]["test_accuracy"] > max(0.5, server[0]["test_accuracy"])


def test_fedavg_server_is_the_weighted_average_of_the_local_models():
  from neural._src.learners.learners import FlaxLearner
  from neural._src.models.models import get_model
  from neural._src.training.training import TrainConfig
  from neural._src.training.training import init_variables

  model = get_model("mlp", 3, tiny=True)
  config = TrainConfig(epochs=1, batch_size=8, warm_start=True)
  learners = [FlaxLearner(model, (4, 4, 1), config, round_key(0, 0, a)) for a in range(2)]
  rng = np.random.default_rng(0)
  xs = [rng.random((n, 4, 4, 1), dtype=np.float32) for n in (12, 4)]
  ys = [np.eye(3, dtype=np.float32)[rng.integers(0, 3, len(x))] for x in xs]
  start = init_variables(model, jax.random.PRNGKey(1), (4, 4, 1))
  protocol = fedavg(start)
  state, out = protocol.step(protocol.init(ys), learners, xs, ys)
  expected = jax.tree.map(lambda a, b: 0.75 * a + 0.25 * b, out.models[0].variables,
                          out.models[1].variables)
  for got, want in zip(jax.tree.leaves(state.variables), jax.tree.leaves(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got.dtype == jnp.float32
  # local training started from the global variables: each agent equals a warm fit
  warm = learners[0].with_init(start).fit(xs[0], ys[0])
  for got, want in zip(jax.tree.leaves(out.models[0].variables), jax.tree.leaves(warm.variables)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  cold = [FlaxLearner(model, (4, 4, 1), TrainConfig(epochs=1), round_key(0, 0, 0))] * 2
  with pytest.raises(FedAvgError, match="warm_start=True"):
    protocol.step(protocol.init(ys), cold, xs, ys)
  other = FlaxLearner(get_model("cnn", 3, tiny=True), (4, 4, 1), config, round_key(0, 0, 1))
  with pytest.raises(FedAvgError, match="one architecture"):
    protocol.step(protocol.init(ys), [learners[0], other], xs, ys)
  # the authors' code averages with equal weights
  state, out = fedavg(start, "equal").step(protocol.init(ys), learners, xs, ys)
  expected = jax.tree.map(lambda a, b: 0.5 * a + 0.5 * b, out.models[0].variables,
                          out.models[1].variables)
  for got, want in zip(jax.tree.leaves(state.variables), jax.tree.leaves(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  with pytest.raises(FedAvgError, match="weighting: expected one of size, equal"):
    fedavg(start, "median")


def test_each_agent_gets_its_own_width():
  from neural._src.kd.experiment import build_learners
  learners = build_learners(_config(models=("cnn", "mlp"), width=(3, 7)), (8, 8, 1), 10)
  assert [learner.model.width for learner in learners] == [3, 7]


def test_fedavg_can_start_from_the_mean_of_independent_initialisations():
  """fedavg_init="mean" (the authors' code): round 0 starts from the average of M inits."""
  from neural._src.kd.experiment import build_learners
  from neural._src.kd.experiment import make_protocol
  from neural._src.training.training import init_variables

  config = _config(protocol="fedavg", fedavg_init="mean")
  learners = build_learners(config, (8, 8, 1), 10)
  start = make_protocol(config, learners).init([None, None]).variables
  key = jax.random.split(jax.random.PRNGKey(config.init_seed))[1]
  inits = [init_variables(learners[0].model, k, (8, 8, 1)) for k in jax.random.split(key, 2)]
  for got, a, b in zip(*(jax.tree.leaves(t) for t in (start, *inits))):
    np.testing.assert_allclose(got, (a + b) / 2, rtol=1e-6)
  assert not all(np.allclose(a, b) for a, b in zip(*(jax.tree.leaves(t) for t in inits)))
  one = make_protocol(config.replace(fedavg_init="one"), learners).init([None, None]).variables
  assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(start)))
  with pytest.raises(neural.ConfigError, match="fedavg_init: expected 'one' or 'mean'"):
    config.replace(fedavg_init="two")


def test_scores():
  probs = np.array([[0.8, 0.2], [0.4, 0.6], [0.5, 0.5]], np.float32)
  labels = np.array([0, 0, 1])
  targets = np.eye(2, dtype=np.float32)[labels]
  acc, mse = scores(probs, labels, targets, "mse")
  assert acc == pytest.approx(1 / 3)   # the tie [0.5, 0.5] goes to class 0
  assert mse == pytest.approx((2 * 0.04 + 2 * 0.36 + 2 * 0.25) / 6, rel=1e-6)
  _, ce = scores(probs, labels, targets, "ce")
  assert ce == pytest.approx(-(np.log(0.8) + np.log(0.4) + np.log(0.5)) / 3, rel=1e-6)


def test_round_keys_differ_by_round_and_agent():
  keys = {tuple(np.asarray(jax.random.key_data(round_key(0, t, a))).tolist())
          for t in range(3) for a in range(3)}
  assert len(keys) == 9


def test_epoch_eval_logs_every_epoch_and_changes_nothing_else(tmp_path):
  """The best local epoch is logged beside the last one; the models and metrics are the same."""
  plain = train_and_evaluate(_config(protocol="avgkd", epochs=3, rounds=2), tmp_path / "plain")
  scored = train_and_evaluate(_config(protocol="avgkd", epochs=3, rounds=2, epoch_eval=True),
                              tmp_path / "scored")
  assert len(plain) == len(scored) == 4
  for a, b in zip(plain, scored):
    epochs = b.pop("epoch_test_accuracy")
    best = b.pop("best_epoch_test_accuracy")
    assert a == b   # same training: the test set only watches
    assert len(epochs) == 3 and best == max(epochs)
    assert epochs[-1] == pytest.approx(a["test_accuracy"])   # the model passed on: the last epoch
