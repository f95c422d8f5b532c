"""Agents across processes: ``jax.distributed`` on 127.0.0.1, two processes of 2 CPU devices.

Two child processes connect through :func:`fedkrr.scale.initialize_distributed` (the
environment variables of its convention; tests/multi_device.py starts them), build
the same problem, and run :func:`fedkrr.scale.sharded_trajectory` on one agent mesh over
their 4 devices. Each reports its numbers as JSON; they must agree with each other
and, bit for bit, with one process of 4 devices running the same program (and with
the single-device closed form up to float64 rounding, as tests/fedkrr/scale/test_sharded.py
allows). A hang fails the test after the children's timeout.
"""

from __future__ import annotations

import functools
from pathlib import Path
import textwrap

import multi_device  # a helper on pytest's pythonpath (pyproject.toml)
import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main

HERE = Path(__file__).resolve().parent

CHILD = textwrap.dedent("""
    import json
    import fedkrr
    fedkrr.avoid_cpu_eigh_deadlock()
    connected = fedkrr.scale.initialize_distributed()   # $JAX_COORDINATOR_ADDRESS, ... if set
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)

    rng = np.random.default_rng(0)            # every process: the same host data
    sizes = (5, 7, 5, 7)                      # unequal: agents 0 and 2 are padded
    xs = [rng.normal(size=(n, 2)) for n in sizes]
    ys = [np.stack([np.sin(2.0 * x[:, 0]), x[:, 1]], axis=1) for x in xs]   # C = 2
    kernels = [fedkrr.RBF(0.5), fedkrr.Laplace(0.3), fedkrr.RBF(1.0), fedkrr.Laplace(0.6)]
    x_eval = rng.normal(size=(6, 2))
    problem = fedkrr.make_problem(xs, ys, kernels, ridge=0.05)
    mesh = fedkrr.scale.agent_mesh(4)
    blocks = fedkrr.scale.shard_blocks(problem, mesh)
    report = {"connected": connected, "process": jax.process_index(),
              "processes": jax.process_count(), "mesh_size": mesh.size,
              "spans": fedkrr.scale.spans_processes(mesh),
              "mesh_processes": [d.process_index for d in mesh.devices.flat],
              # the agents whose labels this process's devices hold
              "own_agents": sorted(s.index[0].start for s in blocks.labels.addressable_shards),
              "labels": fedkrr.scale.host_arrays(blocks.labels).tolist()}

    def error(fn):
      try:
        fn()
      except fedkrr.scale.DeviceError as e:
        return str(e)
      return None
    # default meshes take as many devices of every process; a mesh on another process's
    # devices alone is refused there
    report["mesh2_processes"] = [d.process_index for d in fedkrr.scale.agent_mesh(2).devices.flat]
    report["mesh3"] = error(lambda: fedkrr.scale.agent_mesh(3))
    first = jax.sharding.Mesh(jax.devices()[:2], (fedkrr.scale.AGENT_AXIS,))   # process 0's
    report["first_two"] = error(lambda: fedkrr.scale.check_mesh(first, 2))
    # typed PRNG keys and an array already spread over the processes place too
    keys = jax.random.split(jax.random.key(0), 4)
    placed = fedkrr.scale.shard_agents({"keys": keys, "x": np.arange(8.0).reshape(4, 2)}, mesh)
    draw = jax.vmap(lambda k: jax.random.normal(k, ()))
    report["draws"] = fedkrr.scale.host_arrays(jax.jit(draw)(placed["keys"])).tolist()
    report["draws_here"] = np.asarray(draw(keys)).tolist()
    report["moved"] = fedkrr.scale.host_arrays(
        fedkrr.scale.shard_agents(placed["x"], fedkrr.scale.agent_mesh(2))).tolist()
    report["out"], report["reference_error"] = {}, {}
    for protocol in fedkrr.scale.SHARDED_PROTOCOLS:
      out = fedkrr.scale.sharded_trajectory(problem, protocol, 4, x_eval, blocks=blocks,
                                            params=fedkrr.ProtocolParams(start=1))
      out = np.asarray(out)   # whole on every process (per-agent outputs gathered)
      report["out"][protocol] = out.tolist()
      expected = np.asarray(fedkrr.trajectory(problem, protocol, 4, x_eval,
                                               params=fedkrr.ProtocolParams(start=1)))
      report["reference_error"][protocol] = float(np.max(np.abs(out - expected))
                                                  / np.max(np.abs(expected)))
    print(json.dumps(report))
""")


CLI_CHILD = textwrap.dedent("""
    import json
    import os
    from fedkrr._src.cli import main

    {flags_from_env}
    status = main(["run", "--problem", {problem!r}, "--protocol", "avgkd", "--rounds", "3",
                   "--method", "sharded", "--no-progress", "--out", {out!r}, *flags])
    import jax
    print(json.dumps({{"status": status, "process": jax.process_index(),
                      "devices": len(jax.devices())}}))
""")


def _cli_problem():
  rng = np.random.default_rng(1)
  xs = [rng.normal(size=(n, 2)) for n in (4, 6, 4, 6)]
  ys = [np.sin(x[:, 0]) + x[:, 1] for x in xs]
  kernels = [fedkrr.RBF(0.5), fedkrr.Laplace(0.3), fedkrr.RBF(1.0), fedkrr.Laplace(0.6)]
  return fedkrr.make_problem(xs, ys, kernels, ridge=0.1), rng.normal(size=(5, 2))


@functools.cache
def _reports() -> tuple[list[dict], dict]:
  """The two connected processes' reports and that of one process with 4 devices."""
  two = multi_device.distributed_reports(CHILD, processes=2, devices=2, timeout=100)
  one = multi_device.child_report(CHILD, devices=4, timeout=100)
  return two, one


def test_one_mesh_spans_both_processes_and_each_holds_its_own_agents():
  two, one = _reports()
  assert [r["process"] for r in two] == [0, 1]
  for r in two:
    assert r["connected"] and r["processes"] == 2 and r["mesh_size"] == 4 and r["spans"]
    assert r["mesh_processes"] == [0, 0, 1, 1]
  assert two[0]["own_agents"] == [0, 1] and two[1]["own_agents"] == [2, 3]
  # host_arrays gathers the labels sharded over both processes, whole on each
  assert two[0]["labels"] == two[1]["labels"] == one["labels"]
  assert not one["connected"] and not one["spans"] and one["processes"] == 1


def test_default_meshes_take_devices_of_every_process_and_foreign_meshes_are_refused():
  two, one = _reports()
  assert two[0]["mesh2_processes"] == two[1]["mesh2_processes"] == [0, 1]
  assert one["mesh2_processes"] == [0, 0] and one["mesh3"] is None
  for r in two:
    assert "num_agents: 3 agents cannot spread evenly over 2 processes" in r["mesh3"]
  assert two[0]["first_two"] is None and one["first_two"] is None   # its own devices
  assert "mesh: holds devices of processes [0] only" in two[1]["first_two"]


def test_keys_and_spread_arrays_are_placed_across_processes():
  two, one = _reports()
  for r in (*two, one):
    assert r["draws"] == r["draws_here"] == one["draws_here"]
    assert r["moved"] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


def test_every_process_gets_the_numbers_of_one_process():
  two, one = _reports()
  assert set(one["out"]) == set(fedkrr.scale.SHARDED_PROTOCOLS)
  for protocol in fedkrr.scale.SHARDED_PROTOCOLS:
    # the same program on the same 4 devices: the same bits, wherever the devices live
    assert two[0]["out"][protocol] == two[1]["out"][protocol] == one["out"][protocol], protocol
    for r in (*two, one):   # float64 rounding against the single-device closed form
      assert r["reference_error"][protocol] < 1e-12, (protocol, r["reference_error"])


CACHE_CHILD = textwrap.dedent("""
    import json
    import warnings
    import fedkrr
    fedkrr.avoid_cpu_eigh_deadlock()
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      fedkrr.scale.initialize_distributed()
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(4, 2)) for _ in range(4)]
    problem = fedkrr.make_problem(xs, [np.sin(x[:, 0]) for x in xs],
                                  [fedkrr.RBF(0.5), fedkrr.Laplace(0.3)] * 2, ridge=0.1)
    out = fedkrr.scale.sharded_trajectory(problem, "avgkd", 2, rng.normal(size=(3, 2)),
                                          mesh=fedkrr.scale.agent_mesh(4))
    print(json.dumps({"cache": jax.config.jax_enable_compilation_cache,
                      "warnings": [str(w.message) for w in caught],
                      "out": np.asarray(out).tolist()}))
""")


def test_processes_on_cpus_turn_the_compilation_cache_off_and_a_second_run_completes(tmp_path):
  # JAX 0.12.1: process 0 of a CPU run across processes hung in its first collective when it
  # read back an executable it had cached in an earlier run; every program is cached here
  # (no minimum compile time), so without the switch the second run would read them.
  cache = tmp_path / "cache"
  env = {"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_ENABLE_COMPILATION_CACHE": "true",
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
         "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
  first, second = (multi_device.distributed_reports(CACHE_CHILD, processes=2, devices=2,
                                                    timeout=60, env=env) for _ in range(2))
  for r in (*first, *second):
    assert r["cache"] is False
    assert any("persistent compilation cache" in w and str(cache) in w for w in r["warnings"])
  assert not cache.exists() or not any(cache.iterdir())   # nothing written
  assert first[0]["out"] == first[1]["out"] == second[0]["out"] == second[1]["out"]


def test_distributed_settings_read_arguments_then_variables(monkeypatch):
  for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
    monkeypatch.delenv(name, raising=False)
  assert fedkrr.scale.distributed_settings() is None
  assert fedkrr.scale.initialize_distributed() is False   # nothing set: one process, no change
  assert fedkrr.scale.distributed_settings("h:1", 1) is None   # one process: nothing to connect
  assert fedkrr.scale.distributed_settings("h:1", 2, 1) == ("h:1", 2, 1)
  monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
  monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
  monkeypatch.setenv("JAX_PROCESS_ID", "3")
  assert fedkrr.scale.distributed_settings() == ("10.0.0.1:1234", 4, 3)
  assert fedkrr.scale.distributed_settings(process_id=0) == ("10.0.0.1:1234", 4, 0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_processes=2, process_id=0), r"coordinator: missing \(pass it or set "
                                          r"\$JAX_COORDINATOR_ADDRESS\)"),
    (dict(coordinator="h:1", process_id=0), r"num_processes: missing"),
    (dict(coordinator="h:1", num_processes=2), r"process_id: missing"),
    (dict(coordinator="h:1", num_processes=2, process_id=2), r"process_id: expected 0 .. 1"),
    (dict(coordinator="h:1", num_processes=0, process_id=0), r"num_processes: expected an "
                                                             r"integer >= 1"),
    (dict(coordinator="h", num_processes=2, process_id=0), r"coordinator: expected HOST:PORT"),
    (dict(coordinator="h:1", num_processes=2.0, process_id=0), r"num_processes: expected an "
                                                               r"integer, got 2.0"),
])
def test_bad_distributed_settings_name_the_argument(monkeypatch, kwargs, match):
  for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
    monkeypatch.delenv(name, raising=False)
  with pytest.raises(ValueError, match=match):
    fedkrr.scale.distributed_settings(**kwargs)


def test_a_bad_variable_names_it(monkeypatch):
  monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
  with pytest.raises(ValueError, match=r"num_processes: expected an integer in "
                                               r"\$JAX_NUM_PROCESSES, got 'two'"):
    fedkrr.scale.distributed_settings("h:1", process_id=0)


def test_fedkrr_run_sharded_across_processes_writes_the_closed_form_s_rounds_once(tmp_path, x64):
  problem, x_eval = _cli_problem()
  fedkrr.save_problem(tmp_path / "p.npz", problem, x_eval)
  out = tmp_path / "out.npz"
  code = CLI_CHILD.format(problem=str(tmp_path / "p.npz"), out=str(out),
                          flags_from_env=multi_device.FLAGS_FROM_ENV)
  reports = multi_device.distributed_reports(code, processes=2, devices=2, timeout=100)
  assert [(r["status"], r["process"], r["devices"]) for r in reports] == [(0, 0, 4), (0, 1, 4)]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz", "p.npz"]   # process 0's
  predictions = np.load(out)["predictions"]
  expected = fedkrr.run(problem, "avgkd", 3, x_eval, method="closed-form").predictions
  assert predictions.shape == expected.shape == (3, 4, 5)
  assert np.max(np.abs(predictions - expected)) / np.max(np.abs(expected)) < 1e-12


def test_fedkrr_run_refuses_processes_without_the_sharded_method(tmp_path, x64, capsys,
                                                                  monkeypatch):
  for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
    monkeypatch.delenv(name, raising=False)
  problem, x_eval = _cli_problem()
  fedkrr.save_problem(tmp_path / "p.npz", problem, x_eval)
  run = ["run", "--problem", str(tmp_path / "p.npz"), "--protocol", "avgkd", "--rounds", "2",
         "--out", str(tmp_path / "out.npz")]
  assert main([*run, "--coordinator", "127.0.0.1:1", "--num-processes", "2",
               "--process-id", "0"]) == 2
  assert ("fedkrr: error: --coordinator: only --method sharded runs across processes, not "
          "--method closed-form") in capsys.readouterr().err
  assert main([*run, "--method", "sharded", "--num-processes", "2", "--process-id", "0"]) == 2
  assert "fedkrr: error: --coordinator: missing" in capsys.readouterr().err
  assert not (tmp_path / "out.npz").exists()
