"""Child Python processes that see several host CPU devices, for the tests of sharding.

JAX fixes its number of devices when it starts, so a test process cannot grow
more of them; the checks on several devices run their code in a child started
with ``--xla_force_host_platform_device_count`` and assert on the JSON report the
child prints as the last line of its output. The checks across processes start
several children connected by ``jax.distributed`` on 127.0.0.1
(:func:`distributed_reports`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import socket
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parent.parent


# A child's lines that pass the convention's variables (JAX_COORDINATOR_ADDRESS, ...) on to
# a command line as its flags (--coordinator, ...), in a list named ``flags``.
FLAGS_FROM_ENV = """
flags = []   # the convention's variables, passed on as the command's flags
for flag, var in (("--coordinator", "JAX_COORDINATOR_ADDRESS"),
                  ("--num-processes", "JAX_NUM_PROCESSES"),
                  ("--process-id", "JAX_PROCESS_ID")):
  if var in os.environ:
    flags += [flag, os.environ.pop(var)]
"""


def _child_env(devices: int, paths: tuple[Path, ...]) -> dict[str, str]:
  """The environment of a child with ``devices`` host CPU devices, this checkout and
  ``paths`` first on its import path."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      f" --xla_force_host_platform_device_count={devices}")
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, paths), env.get("PYTHONPATH", "")])
  return env


def child_report(code: str, devices: int = 4, paths: tuple[Path, ...] = (),
                 timeout: float = 300) -> dict:
  """Runs ``code`` with ``devices`` host CPU devices and returns its JSON report.

  Args:
    code: Python source whose last line of output is a JSON object.
    devices: host CPU devices the child sees.
    paths: folders put on the child's import path after the repository root.
    timeout: seconds before the child is stopped (the test then fails).
  """
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=_child_env(devices, paths),
                       timeout=timeout)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
  """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def distributed_reports(code: str, processes: int = 2, devices: int = 2,
                        paths: tuple[Path, ...] = (), timeout: float = 100,
                        env: dict[str, str] | None = None) -> list[dict]:
  """Runs ``code`` in ``processes`` processes connected by ``jax.distributed``; their reports.

  Each child sees ``devices`` host CPU devices and the convention of
  :func:`fedkrr.scale.initialize_distributed`: ``JAX_COORDINATOR_ADDRESS`` (a free port on
  127.0.0.1), ``JAX_NUM_PROCESSES`` and its own ``JAX_PROCESS_ID``; ``code`` calls
  ``fedkrr.scale.initialize_distributed()``.
  Children still running after ``timeout`` seconds, or after another child failed,
  are killed, and the test fails with their output.

  Args:
    code: Python source whose last line of output is a JSON object.
    processes: the number of processes.
    devices: host CPU devices each child sees.
    paths: folders put on the children's import path after the repository root.
    timeout: seconds before the children are killed (the test then fails).
    env: variables set in every child besides (and over) the convention's.
  """
  env = _child_env(devices, paths) | (env or {})
  env["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{free_port()}"
  env["JAX_NUM_PROCESSES"] = str(processes)
  command = [sys.executable, "-c", code]
  children = []
  with tempfile.TemporaryDirectory() as logs:
    try:
      for i in range(processes):
        out = open(os.path.join(logs, f"{i}.out"), "w+")
        err = open(os.path.join(logs, f"{i}.err"), "w+")
        children.append((subprocess.Popen(command, stdout=out, stderr=err,
                                          env=env | {"JAX_PROCESS_ID": str(i)}), out, err))
      deadline = time.monotonic() + timeout
      while any(p.poll() is None for p, _, _ in children):
        failed = [p for p, _, _ in children if p.poll() not in (None, 0)]
        assert not failed and time.monotonic() < deadline, _outputs(children, timeout)
        time.sleep(0.2)
      assert all(p.returncode == 0 for p, _, _ in children), _outputs(children, timeout)
      reports = []
      for _, out, _ in children:
        out.seek(0)
        reports.append(json.loads(out.read().strip().splitlines()[-1]))
      return reports
    finally:
      for p, out, err in children:
        if p.poll() is None:
          p.kill()
          p.wait()
        out.close()
        err.close()


def _outputs(children, timeout: float) -> str:
  lines = [f"children: exit statuses {[p.poll() for p, _, _ in children]} (None: still "
           f"running after {timeout} s or after another one failed)"]
  for i, (_, out, err) in enumerate(children):
    for name, stream in (("stdout", out), ("stderr", err)):
      stream.flush()
      stream.seek(0)
      lines.append(f"--- process {i} {name} ---\n{stream.read()[-2000:]}")
  return "\n".join(lines)
