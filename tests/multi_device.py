"""A child Python process that sees several host CPU devices, for the tests of sharding.

JAX fixes its number of devices when it starts, so a test process cannot grow
more of them; the checks on several devices run their code in a child started
with ``--xla_force_host_platform_device_count`` and assert on the JSON report the
child prints as the last line of its output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

ROOT = Path(__file__).resolve().parent.parent


def child_report(code: str, devices: int = 4, paths: tuple[Path, ...] = (),
                 timeout: float = 300) -> dict:
  """Runs ``code`` with ``devices`` host CPU devices and returns its JSON report.

  Args:
    code: Python source whose last line of output is a JSON object.
    devices: host CPU devices the child sees.
    paths: folders put on the child's import path after the repository root.
    timeout: seconds before the child is stopped (the test then fails).
  """
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                      f" --xla_force_host_platform_device_count={devices}")
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, paths), env.get("PYTHONPATH", "")])
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=timeout)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])
