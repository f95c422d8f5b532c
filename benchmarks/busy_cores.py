"""A small JAX program alone and beside busy processes, under XLA:CPU's thread settings.

    python benchmarks/busy_cores.py                 # sweep_ridge, 0 / 1 / 2 busy processes
    python benchmarks/busy_cores.py --calls 20 --busy 0 1 2 3

The small program is ``fedkrr.rates.sweep_ridge`` on one problem (N = 400, two agents with
RBF kernels, 128 ridges, float64), timed warm: the median of ``--calls`` calls after
one that compiles. Each setting runs it in a fresh child process (XLA reads its
settings when its backend starts), while ``k`` other processes spin on the CPU (plain
Python loops, the "other work" of a shared machine). The settings:

- ``entry point``: what fedkrr's entry points run with (``fedkrr.avoid_cpu_eigh_deadlock``:
  multi-threaded Eigen and the concurrency-optimised scheduler off); XLA's own thread
  pool has one thread per core the process may use.
- ``one core``: the same, with the process allowed onto one core
  (``os.sched_setaffinity``): XLA then sizes its pool to one thread, so no thread waits
  on a sibling that the busy processes pushed off the CPU.

Printed: each setting's median seconds per call with 0, 1, 2 ... busy processes, and the
slowdown against the same setting alone; the last column is the ratio of the two
settings under the most load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = """
import json, os, sys, time
cores = json.loads(sys.argv[1])
if cores:
  os.sched_setaffinity(0, cores)
import jax
jax.config.update("jax_enable_x64", True)
import fedkrr
import jax.numpy as jnp
fedkrr.avoid_cpu_eigh_deadlock()
key = jax.random.key(0)
x = jax.random.uniform(key, (400, 3), minval=-1.0, maxval=1.0)
y = jnp.sin(3.0 * x[:, 0]) + x[:, 1] ** 2
problem = fedkrr.make_problem([x[:200], x[200:]], [y[:200], y[200:]],
                              [fedkrr.RBF(gamma=0.5), fedkrr.RBF(gamma=2.0)], ridge=1e-3)
ridges = jnp.logspace(-4, 0, 128)
fedkrr.rates.sweep_ridge(problem, ridges).block_until_ready()
times = []
for _ in range(int(sys.argv[2])):
  started = time.perf_counter()
  fedkrr.rates.sweep_ridge(problem, ridges).block_until_ready()
  times.append(time.perf_counter() - started)
print(json.dumps(times))
"""

SPIN = "while True:\n  pass\n"


def _child_times(cores: list[int], calls: int) -> list[float]:
  """The warm call times of the small program in a fresh process on ``cores`` (all: [])."""
  out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cores), str(calls)],
                       check=True, capture_output=True, text=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def measure(settings: dict[str, list[int]], busy: list[int], calls: int
            ) -> dict[str, dict[int, float]]:
  """Median seconds per call of each setting beside each number of busy processes."""
  medians: dict[str, dict[int, float]] = {name: {} for name in settings}
  for k in busy:
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(k)]
    try:
      time.sleep(0.5)
      for name, cores in settings.items():
        medians[name][k] = statistics.median(_child_times(cores, calls))
    finally:
      for spinner in spinners:
        spinner.kill()
        spinner.wait()
  return medians


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--calls", type=int, default=10, help="timed calls per setting (10)")
  parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2],
                      help="numbers of busy processes beside the program (0 1 2)")
  args = parser.parse_args()
  allowed = sorted(os.sched_getaffinity(0))
  settings = {"entry point": [], "one core": allowed[:1]}
  print(f"fedkrr.rates.sweep_ridge (N = 400, 128 ridges, warm), {len(allowed)} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the start; median of {args.calls} calls", flush=True)
  medians = measure(settings, args.busy, args.calls)
  header = "".join(f"{f'{k} busy':>16s}" for k in args.busy)
  print(f"{'setting':14s}{header}")
  for name, by_busy in medians.items():
    alone = by_busy[args.busy[0]]
    cells = "".join(f"{t:8.3f} s {t / alone:4.1f}x" for t in by_busy.values())
    print(f"{name:14s}{cells}")
  worst = args.busy[-1]
  ratio = medians["entry point"][worst] / medians["one core"][worst]
  print(f"with {worst} busy: entry point / one core = {ratio:.2f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
