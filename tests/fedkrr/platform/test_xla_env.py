"""The XLA setting importing fedkrr applies, and the sweeps that stalled without a setup call.

Each test starts a fresh Python: XLA reads ``XLA_FLAGS`` once, when its backend starts.
The environment of these processes has no ``XLA_FLAGS`` (the suite's conftest sets some).
"""

import os
import subprocess
import sys
import textwrap

import pytest

from fedkrr._src.platform.xla_env import SCHEDULER_FLAG


def _python(code, flags=None, timeout=120):
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  if flags is not None:
    env["XLA_FLAGS"] = flags
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_import_adds_the_scheduler_flag_before_a_backend_starts():
  code = "import os, fedkrr; print(os.environ.get('XLA_FLAGS'))"
  assert _python(code).stdout.strip() == SCHEDULER_FLAG
  mine = ("--xla_cpu_enable_concurrency_optimized_scheduler=true "
          "--xla_force_host_platform_device_count=2")
  assert _python(code, flags=mine).stdout.strip() == mine          # the user's choice stays


def test_a_backend_started_before_the_import_is_left_alone_and_the_sweeps_warn():
  proc = _python("""
      import os, warnings
      import jax, jax.numpy as jnp
      jax.config.update("jax_enable_x64", True)
      jnp.zeros(1).block_until_ready()          # the backend starts without the flag
      import fedkrr
      assert "XLA_FLAGS" not in os.environ
      problem = fedkrr.make_problem([[[0.0], [1.0]], [[0.5], [2.0]]], [[1.0, 0.0], [0.0, 1.0]],
                                    fedkrr.RBF(1.0), 0.1)
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fedkrr.rates.sweep_ridge(problem, jnp.asarray([0.1, 1.0]))
      print([str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
      """)
  assert proc.returncode == 0, proc.stderr
  assert "import fedkrr before the first jax computation" in proc.stdout.lower(), proc.stdout


@pytest.mark.parametrize("attempt", [0, 1])
def test_jitted_sweeps_finish_without_a_setup_call(attempt):
  """Without the scheduler flag this program hung at 0% CPU in 2 of 3 fresh processes on the
  2-core CPU: a vmapped eigen-decomposition over ridges that include c = 0, and
  ``jax.jit(fedkrr.rates.rate_grid)`` with c = 0 in the grid. No avoid_cpu_eigh_deadlock here."""
  proc = _python("""
      import jax, jax.numpy as jnp, numpy as np
      jax.config.update("jax_enable_x64", True)
      import fedkrr
      clusters = fedkrr.rates.TwoClusters.draw(0, 250)
      ridges = jnp.asarray([0.0, 0.0, 1e-3, 0.0, 1e-2, 0.0, 0.1, 0.0])
      rate = jax.jit(jax.vmap(lambda c: fedkrr.rates.degradation_rate(clusters.problem(0.5, c),
                                                                      method="dense")))
      assert np.all(np.isfinite(np.asarray(rate(ridges))))
      grid = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(clusters, cs, ps))
      assert np.asarray(grid(jnp.asarray([1.0, 0.1, 0.0]), jnp.linspace(0, 1, 16))).shape \\
          == (3, 16)
      print("finished")
      """, timeout=400)
  assert proc.returncode == 0 and "finished" in proc.stdout, proc.stderr


def test_deterministic_ops_adds_its_flag_before_a_backend_starts_and_keeps_the_user_s():
  code = """
      import os, fedkrr
      started = fedkrr.deterministic_ops()
      import jax.numpy as jnp
      print(started, float(jnp.ones(3).sum()), os.environ['XLA_FLAGS'])
      """
  proc = _python(code)
  assert proc.returncode == 0, proc.stderr
  started, total, *flags = proc.stdout.split()
  assert started == "True" and total == "3.0"   # the CPU backend accepts the GPU flag
  assert "--xla_gpu_deterministic_ops=true" in flags
  proc = _python(code, flags="--xla_gpu_deterministic_ops=false")
  assert proc.stdout.split()[2:] == ["--xla_gpu_deterministic_ops=false", SCHEDULER_FLAG]
  late = _python("""
      import jax.numpy as jnp, fedkrr
      jnp.zeros(1).block_until_ready()
      print(fedkrr.deterministic_ops())
      """)
  assert late.stdout.strip() == "False"   # the backend's flags were fixed before the call
