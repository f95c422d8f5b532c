"""``neural run --devices all`` across processes: two processes of 2 CPU devices on 127.0.0.1.

Two child processes run the same command with ``--coordinator``, ``--num-processes``
and ``--process-id`` (tests/multi_device.py gives them a free port), stopped after
round 0 (``--max-rounds 1``) and resumed; the agents' training mesh spans both. Each
writes its own run directory (process 0 ``--workdir``, process 1 ``WORKDIR.process-1``)
and reports its metric rows as JSON: they must equal each other and those of one
process with 4 devices, and those of one device up to float32 rounding as
tests/neural/learners/test_sharded_training.py allows. A hang fails the test after the
children's timeout.
"""

from __future__ import annotations

import functools
from pathlib import Path
import tempfile
import textwrap

import multi_device  # a helper on pytest's pythonpath (pyproject.toml)

from neural._src.cli import main

FLAGS = ["--dataset", "digits", "--train-subset", "400", "--test-subset", "200",
         "--agents", "4", "--models", "mlp", "--tiny", "--protocol", "avgkd", "--rounds", "2",
         "--epochs", "1", "--batch-size", "32", "--no-progress"]

CHILD = textwrap.dedent("""
    import json
    import os
    from pathlib import Path
    import jax
    from neural._src.cli import main

    {flags_from_env}
    report = {{"runs": {{}}}}
    for devices in {devices}:
      workdir = Path({workdir!r}) / devices
      command = ["run", *{flags!r}, "--devices", devices, *flags, "--workdir", str(workdir)]
      if {resume!r}:   # stopped after round 0, then resumed by the same command
        assert main([*command, "--max-rounds", "1"]) == 0
      status = main(command)
      index = jax.process_index()
      mine = workdir if index == 0 else workdir.with_name(f"{{workdir.name}}.process-{{index}}")
      rows = [json.loads(line) for line in (mine / "metrics.jsonl").read_text().splitlines()]
      report["runs"][devices] = {{"status": status, "files": sorted(os.listdir(mine)),
                                 "rows": rows}}
    report.update(process=jax.process_index(), processes=jax.process_count(),
                  devices=len(jax.devices()), local=len(jax.local_devices()),
                  siblings=sorted(os.listdir({workdir!r})))
    print(json.dumps(report))
""")


def _child(workdir: str, devices: tuple[str, ...], resume: bool) -> str:
  return CHILD.format(workdir=workdir, devices=devices, flags=FLAGS, resume=resume,
                      flags_from_env=multi_device.FLAGS_FROM_ENV)


@functools.cache
def _reports() -> tuple[list[dict], dict]:
  """The two connected processes' reports (a run stopped after round 0 and resumed) and
  that of one process (uninterrupted runs on 4 devices, then on one)."""
  with tempfile.TemporaryDirectory() as two_dir, tempfile.TemporaryDirectory() as one_dir:
    two = multi_device.distributed_reports(_child(two_dir, ("all",), resume=True), processes=2,
                                           devices=2, timeout=110)
    one = multi_device.child_report(_child(one_dir, ("all", "one"), resume=False), devices=4,
                                    timeout=110)
  return two, one


def _numbers(rows: list[dict]) -> list[dict]:
  return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_each_process_writes_its_own_run_directory():
  two, _ = _reports()
  assert [r["process"] for r in two] == [0, 1]
  for r in two:
    assert (r["processes"], r["devices"], r["local"]) == (2, 4, 2)
    assert r["runs"]["all"]["status"] == 0
    assert {"config.json", "metrics.jsonl", "checkpoint.npz", "accuracy.png"} <= set(
        r["runs"]["all"]["files"])
  assert two[0]["siblings"] == ["all", "all.process-1"]


def test_two_processes_resumed_give_the_rows_of_one_process_with_four_devices():
  two, one = _reports()
  rows = [_numbers(r["runs"]["all"]["rows"]) for r in two]
  assert len(rows[0]) == 8   # 2 rounds x 4 agents
  # the same program on the same 4 devices, wherever they live: the same numbers
  assert rows[0] == rows[1] == _numbers(one["runs"]["all"]["rows"])
  for a, b in zip(rows[0], one["runs"]["one"]["rows"]):   # one device: float32 rounding
    for key, value in a.items():
      if isinstance(value, float):
        assert abs(value - b[key]) <= 1e-4 * max(1.0, abs(value)), key
      else:
        assert value == b[key], key


def test_incomplete_distributed_flags_name_the_flag(tmp_path, capsys, monkeypatch):
  for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
    monkeypatch.delenv(name, raising=False)
  workdir = str(tmp_path / "run")
  assert main(["run", *FLAGS, "--num-processes", "2", "--process-id", "0",
               "--workdir", workdir]) == 2
  assert "neural: error: --coordinator: missing" in capsys.readouterr().err
  assert main(["run", *FLAGS, "--coordinator", "127.0.0.1:1", "--num-processes", "2",
               "--process-id", "2", "--workdir", workdir]) == 2
  assert "--process-id: expected 0 .. 1 for 2 processes, got 2" in capsys.readouterr().err
  assert not Path(workdir).exists()
