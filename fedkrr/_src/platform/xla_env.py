"""Settings for XLA on CPU: one applied by importing fedkrr, both by entry points.

On small CPUs (2 cores) with jaxlib 0.10, vmapped linear algebra can stall:
batched ``eigh`` under ``vmap`` deadlocked with both workers of XLA's CPU
thread pool waiting inside the batched kernel for sub-tasks queued on the same
pool, and large vmapped rate sweeps sat idle for minutes under the
concurrency-optimised scheduler. Vmapping over the ridge c reaches the first
(the c = 0 branch of :func:`fedkrr.ridge_factor` runs ``eigh`` under ``vmap``),
:func:`fedkrr.rates.rate_grid` the second. Entry points that run fedkrr's linear
algebra (``fedkrr``'s command line, ``neural compare``, the test suite, the
benchmarks and notebooks of the theory) call :func:`avoid_cpu_eigh_deadlock`
before the first computation; it turns both off. ``neural run`` does not: network
training needs neither setting (``benchmarks/train_speed.py`` runs without them).

The scheduler is what stalls: with it off, ``jax.jit`` of a sweep that vmaps an
``eigh`` over ridges including c = 0 finished in 3 of 3 fresh processes, with only
multi-threaded Eigen off it hung in 2 of 3 (the 2-core CPU, jaxlib 0.10). So importing
``fedkrr`` adds :data:`SCHEDULER_FLAG` to ``XLA_FLAGS`` when no XLA backend has started
in the process yet and the variable does not name the flag (name it, ``=true``, to keep
the scheduler): a library function then terminates without a setup call. Where a backend
started before ``fedkrr`` was imported without it, the sweeps warn once
(:func:`warn_if_backend_started_unsafe`). ``neural`` imports fedkrr, so network training
runs with the scheduler off too: one epoch of the paper's CNN on 4,000 images took
1.32-1.64 s with it off and 1.25-1.58 s with it on (two runs each, width 8, on a loaded
2-core CPU: within the noise).
"""

from __future__ import annotations

import os
import sys
import warnings

# The flag without which vmapped eigen-decompositions can stall XLA's CPU thread pool.
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
# The XLA flags that :func:`avoid_cpu_eigh_deadlock` adds: multi-threaded Eigen and the
# concurrency-optimised CPU scheduler off.
XLA_CPU_FLAGS = ("--xla_cpu_multi_thread_eigen=false", SCHEDULER_FLAG)
_warned = False


def _named(flag: str, flags: str) -> bool:
  """Whether ``flags`` names ``flag``'s option (whatever value it gives it)."""
  return flag.split("=")[0] in flags


def _add_flags(new_flags) -> None:
  """Adds each of ``new_flags`` to ``XLA_FLAGS`` unless the variable already names it."""
  flags = os.environ.get("XLA_FLAGS", "")
  for flag in new_flags:
    if not _named(flag, flags):
      flags = f"{flags} {flag}".strip()
  os.environ["XLA_FLAGS"] = flags


def _backend_started() -> bool:
  bridge = sys.modules.get("jax._src.xla_bridge")
  return bool(getattr(bridge, "_backends", None))


def apply_import_defaults() -> bool:
  """Adds :data:`SCHEDULER_FLAG` to ``XLA_FLAGS`` unless it is named there or a backend runs.

  Called by ``import fedkrr``; imports nothing (not JAX). Returns whether the flag is in
  ``XLA_FLAGS`` for the backend to come (False once a backend has started).
  """
  if _backend_started():
    return False
  _add_flags((SCHEDULER_FLAG,))
  return True


def warn_if_backend_started_unsafe() -> None:
  """Warns once if XLA_FLAGS does not name the scheduler flag (a backend started before
  ``import fedkrr`` may then stall in vmapped eigen-decompositions on a small CPU)."""
  global _warned
  if _warned or _named(SCHEDULER_FLAG, os.environ.get("XLA_FLAGS", "")):
    return
  _warned = True
  warnings.warn("XLA's backend started before fedkrr was imported, without "
                f"{SCHEDULER_FLAG}: on a small CPU, vmapped eigen-decompositions (rate "
                "sweeps, ridge sweeps reaching c = 0) can stall. Import fedkrr before the "
                "first JAX computation, or call fedkrr.avoid_cpu_eigh_deadlock() there.",
                RuntimeWarning, stacklevel=3)


def avoid_cpu_eigh_deadlock() -> None:
  """Adds :data:`XLA_CPU_FLAGS` to ``XLA_FLAGS`` (each unless the variable already names it).

  XLA reads the flags when its backend starts, so call this before the first
  JAX computation of the process (``import fedkrr`` runs none). Only the
  environment variable changes; a backend already started keeps its flags.
  """
  _add_flags(XLA_CPU_FLAGS)


# XLA's switch for run-to-run determinism on GPUs: deterministic algorithms for scatters,
# reductions and convolutions (and no autotuning among non-deterministic ones). The CPU
# backend is deterministic already; it accepts and ignores the flag.
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"


def deterministic_ops() -> bool:
  """Adds :data:`DETERMINISTIC_FLAG` to ``XLA_FLAGS`` (unless the variable names it already).

  Call it before the first JAX computation of the process (``neural run --deterministic``
  and the other commands' flag do): the same program then gives the same bits from run to
  run on a GPU, as it does on a CPU, at some cost in speed (docs/devices.md). Processes
  started afterwards (``--jobs`` workers) inherit it. Programs that differ (other batch
  groupings, another number of agents vmapped together) may still round differently.

  Returns:
    False when an XLA backend had already started in this process: its flags are fixed,
    so the setting reaches only processes started from now on.
  """
  _add_flags((DETERMINISTIC_FLAG,))
  return not _backend_started()
