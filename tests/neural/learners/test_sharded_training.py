"""Stacked network agents spread over devices: ``FlaxLearner(mesh=...)`` in fit_batch and FedAvg.

JAX fixes its number of devices when it starts, so the checks run in one child
process with 4 host CPU devices (``--xla_force_host_platform_device_count=4``)
that reports what it saw as JSON.
"""

from __future__ import annotations

import functools
import textwrap
from typing import Any

import jax
import multi_device  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr
import neural
from neural import training

CHILD = textwrap.dedent("""
    import json
    import jax
    import numpy as np
    import fedkrr
    import neural
    from neural._src.training import training

    seen = {}
    plain_train_batch = training.train_batch

    def spy(model, variables, xs, targets, keys, config, masks=None, **kw):
      def shards(tree):
        leaf = jax.tree.leaves(tree)[0]
        return sorted((s.device.id, s.index[0].start or 0) for s in leaf.addressable_shards)
      trained = plain_train_batch(model, variables, xs, targets, keys, config, masks, **kw)
      seen.setdefault("inputs", []).append([shards(t) for t in (variables, xs, targets, keys)])
      seen.setdefault("trained", []).append(shards(trained))
      return trained

    training.train_batch = spy
    rng = np.random.default_rng(0)
    xs = [rng.random((n, 2, 2, 1), dtype=np.float32) for n in (8, 6, 8, 5)]
    ys = [np.eye(3, dtype=np.float32)[rng.integers(0, 3, len(x))] for x in xs]
    import flax.linen as nn

    class Softmax(nn.Module):   # the smallest network: one dense layer (compiles fastest)
      @nn.compact
      def __call__(self, x, train=False):
        return nn.Dense(3)(x.reshape((x.shape[0], -1)))

    model = Softmax()
    config = training.TrainConfig(epochs=1, batch_size=4, warm_start=True)
    start = training.init_variables(model, jax.random.PRNGKey(1), (2, 2, 1))
    key = jax.random.PRNGKey(0)
    report = {}
    runs = {}
    for name, mesh in (("one", None), ("four", "auto")):
      learners = neural.flax_learners([model] * 4, (2, 2, 1), config, key, mesh=mesh)
      protocol = neural.fedavg(start)
      state, out = protocol.step(protocol.init(ys), learners, xs, ys)
      runs[name] = (state, out)
      report[name + "_mesh"] = None if learners[0].mesh is None else learners[0].mesh.size
    leaves = lambda tree: [np.asarray(a) for a in jax.tree.leaves(tree)]
    diff = lambda a, b: max(float(np.max(np.abs(x - y))) for x, y in zip(leaves(a), leaves(b)))
    report["local_diff"] = max(diff(a.variables, b.variables) for a, b in
                               zip(runs["one"][1].models, runs["four"][1].models))
    report["global_diff"] = diff(runs["one"][0].variables, runs["four"][0].variables)
    report["moved"] = diff(start, runs["four"][0].variables)
    report["returned_devices"] = sorted({d.id for m in runs["four"][1].models
                                         for a in jax.tree.leaves(m.variables)
                                         for d in a.devices()})
    report["predict_shape"] = list(runs["four"][0].model.predict(xs[0]).shape)
    report["seen"] = {k: list(v) for k, v in seen.items()}
    try:
      three = neural.flax_learners([model] * 3, (2, 2, 1), config, key,
                                   mesh=fedkrr.scale.agent_mesh(4))
      fedkrr.learners.fit_all(three, xs[:3], ys[:3])
      report["uneven"] = None
    except fedkrr.scale.DeviceError as e:
      report["uneven"] = str(e)
    # config.devices = "all": each architecture's agents on the mesh of their number
    from neural._src.kd.experiment import build_learners
    mixed = neural.ExperimentConfig(models=("mlp", "cnn", "mlp", "mlp", "cnn", "forest"),
                                    agents=6, tiny=True, devices="all")
    report["meshes"] = [None if getattr(l, "mesh", None) is None else l.mesh.size
                        for l in build_learners(mixed, (8, 8, 1), 10)]
    import tempfile
    report["rows"] = {}
    for devices in ("one", "all"):
      run = neural.ExperimentConfig(dataset="digits", models=("mlp",), agents=4, rounds=2,
                                    epochs=1, tiny=True, train_subset=400, test_subset=200,
                                    protocol="avgkd", devices=devices)
      seen.clear()
      with tempfile.TemporaryDirectory() as workdir:
        report["rows"][devices] = neural.train_and_evaluate(run, workdir)
      report.setdefault("run_inputs", {})[devices] = seen.get("inputs", [])
    print(json.dumps(report))
""")


@functools.cache
def _child_report() -> dict:
  """Runs :data:`CHILD` once with 4 host devices; its JSON report."""
  return multi_device.child_report(CHILD)


def test_stacked_agents_train_each_on_its_own_device():
  report = _child_report()
  assert report["one_mesh"] is None and report["four_mesh"] == 4
  one, four = report["seen"]["inputs"]   # the run without a mesh, then the one with
  assert all(shards == [[0, 0]] for shards in one)
  # parameters, inputs, targets and keys: agent a's slice on device a ...
  assert all(shards == [[a, a] for a in range(4)] for shards in four)
  # ... and so are the trained parameters, before they come back
  assert report["seen"]["trained"][1] == [[a, a] for a in range(4)]
  assert report["returned_devices"] == [0]
  assert report["predict_shape"] == [8, 3]


def test_fedavg_on_four_devices_gives_the_numbers_of_one():
  report = _child_report()
  assert report["moved"] > 1e-4   # training did change the parameters
  # float32: the same per-agent program, compiled for a slice of the agents
  assert report["local_diff"] < 1e-5
  assert report["global_diff"] < 1e-5


def test_agents_that_do_not_spread_over_the_mesh_are_refused():
  assert "learners[0].mesh: 3 agents cannot spread evenly over its 4 devices" in (
      _child_report()["uneven"])


def test_a_learner_mesh_must_be_a_mesh():
  model = neural.get_model("mlp", 3, width=4)
  not_a_mesh: Any = "gpu"
  with pytest.raises(training.LearnerError, match="mesh: expected a jax.sharding.Mesh"):
    neural.FlaxLearner(model, (2, 2, 1), training.TrainConfig(), jax.random.PRNGKey(0),
                       mesh=not_a_mesh)
  with pytest.raises(training.LearnerError, match="mesh: expected a jax.sharding.Mesh, 'auto'"):
    neural.flax_learners([model], (2, 2, 1), training.TrainConfig(), jax.random.PRNGKey(0),
                         mesh="gpus")
  mesh = fedkrr.scale.agent_mesh(2, jax.devices()[:1])
  learner = neural.FlaxLearner(model, (2, 2, 1), training.TrainConfig(), jax.random.PRNGKey(0),
                               mesh=mesh)
  assert learner.batch_key[-1] is mesh   # learners on other meshes train apart


def test_a_run_with_devices_all_spreads_each_architecture_and_keeps_the_numbers():
  report = _child_report()
  # 3 MLP agents on 3 of the 4 devices, 2 CNN agents on 2; the forest is no network
  assert report["meshes"] == [3, 2, 3, 3, 2, None]
  # every round's 4 agents trained as one program: on device 0, or agent a on device a
  assert all(shards == [[0, 0]] for call in report["run_inputs"]["one"] for shards in call)
  assert len(report["run_inputs"]["all"]) == 2   # rounds
  assert all(shards == [[a, a] for a in range(4)]
             for call in report["run_inputs"]["all"] for shards in call)
  one, four = report["rows"]["one"], report["rows"]["all"]
  assert len(one) == len(four) > 0
  for a, b in zip(one, four):
    assert a.keys() == b.keys()
    for key, value in a.items():
      if isinstance(value, float) and key != "seconds":
        assert abs(value - b[key]) <= 1e-4 * max(1.0, abs(value)), key
      elif not isinstance(value, float):
        assert value == b[key], key
