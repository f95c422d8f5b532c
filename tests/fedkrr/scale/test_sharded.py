"""Agents on their own devices: placements, collectives and the numbers of one device.

JAX fixes its number of devices when it starts, so the checks on several devices
run in one child process with 4 host CPU devices
(``--xla_force_host_platform_device_count=4``); it reports what it measured as
JSON and the tests here assert on it. Checks of the arguments run in this process.
"""

from __future__ import annotations

import functools
from pathlib import Path
import textwrap

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import multi_device  # a helper on pytest's pythonpath (pyproject.toml)
import numpy as np
import numpy_reference as ref
import pytest

import fedkrr

REFERENCE = Path(ref.__file__).resolve().parent   # the child imports numpy_reference

CHILD = textwrap.dedent("""
    import json
    import fedkrr
    fedkrr.avoid_cpu_eigh_deadlock()
    import jax
    import numpy as np
    import numpy_reference as ref
    jax.config.update("jax_enable_x64", True)

    devices = jax.devices()
    rng = np.random.default_rng(0)
    sizes = (5, 7, 5, 7)                      # unequal: agents 0 and 2 are padded
    xs = [rng.normal(size=(n, 2)) for n in sizes]
    ys = [np.stack([np.sin(2.0 * x[:, 0]), x[:, 1]], axis=1) for x in xs]   # C = 2
    gammas = (0.5, 0.3, 1.0, 0.6)
    kernels = [fedkrr.RBF(g) if a % 2 == 0 else fedkrr.Laplace(g) for a, g in enumerate(gammas)]
    np_kernels = [ref.make_kernel("rbf" if a % 2 == 0 else "laplace", gamma=g)
                  for a, g in enumerate(gammas)]
    x_eval = rng.normal(size=(6, 2))
    problem = fedkrr.make_problem(xs, ys, kernels, ridge=0.05)
    mesh4, mesh1 = fedkrr.scale.agent_mesh(4), fedkrr.scale.agent_mesh(4, devices[:1])
    blocks = fedkrr.scale.shard_blocks(problem, mesh4)
    report = {"devices": len(devices), "mesh_size": mesh4.size,
              "agent_devices": [d.id for d in fedkrr.scale.agent_devices(mesh4, 4)]}

    # Where each agent's blocks live: (device id, first agent of the shard, shard length).
    report["placement"] = {
        name: sorted((s.device.id, s.index[0].start, s.data.shape[0])
                     for s in getattr(blocks, name).addressable_shards)
        for name in ("cross", "cholesky", "pinv_root", "labels")}
    # The factor on agent 1's device is agent 1's own: L L^T = c I + K^1_11 (unpadded part).
    shard = next(s for s in blocks.cholesky.addressable_shards if s.index[0].start == 1)
    chol = np.asarray(shard.data)[0][:7, :7]
    own = np.asarray(problem.gram(1, problem.xs[1], problem.xs[1])) + 0.05 * np.eye(7)
    report["own_factor_error"] = float(np.max(np.abs(chol @ chol.T - own)))

    report["errors"], report["per_agent_placement"] = {}, {}
    for protocol in fedkrr.scale.SHARDED_PROTOCOLS:
      out = fedkrr.scale.sharded_trajectory(problem, protocol, 4, x_eval, blocks=blocks,
                                            params=fedkrr.ProtocolParams(start=1))
      expected = ref.run(protocol, xs, ys, np_kernels, 0.05, 4, x_eval, start=1)
      report["errors"][protocol] = [list(out.shape), list(expected.shape),
                                    float(np.max(np.abs(np.asarray(out) - expected))
                                          / np.max(np.abs(expected)))]
      if out.ndim == 4:   # (rounds, M, n_eval, C): agent a's predictions on agent a's device
        report["per_agent_placement"][protocol] = sorted(
            (s.device.id, s.index[1].start) for s in out.addressable_shards)
    # The same bits on one device as on four (sums over agents in agent order).
    report["bitwise"] = {
        p: bool(np.array_equal(np.asarray(fedkrr.scale.sharded_trajectory(problem, p, 4, x_eval,
                                                                  blocks=blocks)),
                               np.asarray(fedkrr.scale.sharded_trajectory(problem, p, 4, x_eval,
                                                                  mesh=mesh1))))
        for p in fedkrr.scale.SHARDED_PROTOCOLS}

    def error(fn):
      try:
        fn()
      except fedkrr.scale.DeviceError as e:
        return str(e)
      return None
    report["uneven"] = error(lambda: fedkrr.scale.agent_mesh(4, devices[:3]))
    report["wrong_mesh"] = error(lambda: fedkrr.scale.shard_blocks(problem,
                                                                fedkrr.scale.agent_mesh(3)))
    report["six_agents"] = fedkrr.scale.agent_mesh(6).size
    print(json.dumps(report))
""")


@functools.cache
def _child_report() -> dict:
  """Runs :data:`CHILD` once with 4 host devices; its JSON report."""
  return multi_device.child_report(CHILD, paths=(REFERENCE,))


def test_each_agent_block_and_factor_lives_on_its_own_device():
  report = _child_report()
  assert report["devices"] == 4 and report["mesh_size"] == 4
  assert report["agent_devices"] == [0, 1, 2, 3]
  for name, shards in report["placement"].items():
    assert [tuple(s) for s in shards] == [(a, a, 1) for a in range(4)], name
  assert report["own_factor_error"] < 1e-12
  for protocol, shards in report["per_agent_placement"].items():
    assert [tuple(s) for s in shards] == [(a, a) for a in range(4)], protocol
  assert set(report["per_agent_placement"]) == {"avgkd", "pkd", "pkd-mean"}


def test_sharded_rounds_match_the_literal_reference_and_one_device():
  report = _child_report()
  assert set(report["errors"]) == set(fedkrr.scale.SHARDED_PROTOCOLS)
  for protocol, (shape, expected_shape, err) in report["errors"].items():
    assert shape == expected_shape, protocol
    assert err < 1e-12, (protocol, err)   # float64 rounding: both solve the same fits
  assert report["bitwise"] == {p: True for p in fedkrr.scale.SHARDED_PROTOCOLS}


def test_agents_that_do_not_spread_evenly_are_refused_with_the_argument_named():
  report = _child_report()
  assert "devices: 4 agents cannot spread evenly over 3 devices" in report["uneven"]
  assert "mesh: 4 agents cannot spread evenly over its 3 devices" in report["wrong_mesh"]
  assert report["six_agents"] == 3   # the largest number of the 4 devices that divides 6


def _problem(m: int = 2):
  x = jnp.linspace(-1.0, 1.0, 4 * m)[:, None]
  y = jnp.sin(3.0 * x[:, 0])
  return fedkrr.make_problem([x[4 * a:4 * a + 4] for a in range(m)],
                             [y[4 * a:4 * a + 4] for a in range(m)], fedkrr.RBF(2.0), ridge=0.0)


def test_sequential_and_unknown_protocols_are_refused():
  problem = _problem()
  with pytest.raises(ValueError, match="protocol: backfit-gs is sequential"):
    fedkrr.scale.sharded_trajectory(problem, "backfit-gs", 3, problem.xs[0])
  with pytest.raises(ValueError, match="protocol: expected one of"):
    fedkrr.scale.sharded_trajectory(problem, "fedavg", 3, problem.xs[0])
  with pytest.raises(ValueError, match="rounds"):
    fedkrr.scale.sharded_trajectory(problem, "avgkd", 0, problem.xs[0])


def test_bad_meshes_and_stacks_name_the_argument():
  device = jax.devices()[0]
  with pytest.raises(fedkrr.scale.DeviceError, match="num_agents: expected an integer >= 1"):
    fedkrr.scale.agent_mesh(0)
  with pytest.raises(fedkrr.scale.DeviceError, match="devices: expected at least one device"):
    fedkrr.scale.agent_mesh(2, [])
  with pytest.raises(fedkrr.scale.DeviceError, match="devices: expected distinct devices"):
    fedkrr.scale.agent_mesh(2, [device, device])
  with pytest.raises(fedkrr.scale.DeviceError, match="mesh: expected a jax.sharding.Mesh"):
    fedkrr.scale.check_mesh("gpu", 2)
  with pytest.raises(fedkrr.scale.DeviceError, match="expected one axis named 'agents'"):
    fedkrr.scale.check_mesh(Mesh([device], ("batch",)), 2)
  with pytest.raises(fedkrr.scale.DeviceError, match="tree: expected every leaf to have the same"):
    fedkrr.scale.shard_agents({"a": jnp.zeros((2, 3)), "b": jnp.zeros((3,))},
                              fedkrr.scale.agent_mesh(2))


def test_blocks_are_reused_and_refused_for_another_problem(x64, assert_close):
  """One device, c = 0 (the pseudo-inverse branch of the padded factors): the rounds of the
  literal reference; blocks made for another problem are refused."""
  small, large = _problem(2), _problem(3)
  blocks = fedkrr.scale.shard_blocks(small)
  assert blocks.num_agents == 2 and blocks.cross.shape == (2, 2, 4, 4)
  x_eval = np.linspace(-1.5, 1.5, 5)[:, None]
  sharded = fedkrr.scale.sharded_trajectory(small, "pkd", 3, x_eval, blocks=blocks)
  kernel = ref.make_kernel("rbf", gamma=2.0)
  expected = ref.run("pkd", [np.asarray(x) for x in small.xs], [np.asarray(y) for y in small.ys],
                     [kernel, kernel], 0.0, 3, x_eval)
  assert_close(np.asarray(sharded), expected)
  with pytest.raises(fedkrr.scale.DeviceError, match="blocks: made for agents of sizes"):
    fedkrr.scale.sharded_trajectory(large, "avgkd", 2, large.xs[0], blocks=blocks)
  with pytest.raises(fedkrr.scale.DeviceError, match="rtol: 0.001 differs"):
    fedkrr.scale.sharded_trajectory(small, "avgkd", 2, small.xs[0], rtol=1e-3, blocks=blocks)
