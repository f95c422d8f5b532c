"""Entry-point settings for XLA on CPU (never applied by importing the library).

On small CPUs (2 cores) with jaxlib 0.10, vmapped linear algebra can stall:
batched ``eigh`` under ``vmap`` deadlocked with both workers of XLA's CPU
thread pool waiting inside the batched kernel for sub-tasks queued on the same
pool, and large vmapped rate sweeps sat idle for minutes under the
concurrency-optimised scheduler. Vmapping over the ridge c reaches the first
(the c = 0 branch of :func:`fedkrr.ridge_factor` runs ``eigh`` under ``vmap``),
:func:`fedkrr.rate_grid` the second. Entry points that run fedkrr's linear
algebra (``fedkrr``'s command line, ``neural compare``, the test suite, the
benchmarks and notebooks of the theory) call :func:`avoid_cpu_eigh_deadlock`
before the first computation; it turns both off. ``neural run`` does not: network
training needs neither setting (``benchmarks/train_speed.py`` runs without them).
"""

from __future__ import annotations

import os

# The XLA flags that :func:`avoid_cpu_eigh_deadlock` adds: multi-threaded Eigen and the
# concurrency-optimised CPU scheduler off.
XLA_CPU_FLAGS = ("--xla_cpu_multi_thread_eigen=false",
                 "--xla_cpu_enable_concurrency_optimized_scheduler=false")


def avoid_cpu_eigh_deadlock() -> None:
  """Adds :data:`XLA_CPU_FLAGS` to ``XLA_FLAGS`` (each unless the variable already names it).

  XLA reads the flags when its backend starts, so call this before the first
  JAX computation of the process (``import fedkrr`` runs none). Only the
  environment variable changes; a backend already started keeps its flags.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  for flag in XLA_CPU_FLAGS:
    if flag.split("=")[0] not in flags:
      flags = f"{flags} {flag}".strip()
  os.environ["XLA_FLAGS"] = flags
