"""CPU cores for processes that share a machine: each its own, so XLA's threads hold up.

XLA:CPU gives each process a thread pool of one thread per core the process may use,
and a small program's operations are split over that pool and wait for each other.
When other processes keep the cores busy, a split operation waits for its slowest
thread, which the operating system has pushed off the CPU: on a 2-core machine
``fedkrr.rates.sweep_ridge`` on a small problem (N = 400, 128 ridges) took 0.09 s alone,
0.13 s beside one busy process and 0.71 s beside two (8x), while the same process
allowed onto one core took 0.08, 0.08 and 0.12 s (``benchmarks/busy_cores.py``). A
process restricted to fewer cores sizes its pool (and OpenBLAS its threads) to them.

So processes started side by side can each take their own share of the cores
(:func:`core_shares`) before JAX starts (:func:`use_cores`): ``neural reproduce --jobs J``'s
workers do with ``NEURAL_WORKER_CORES=own``.
A single process keeps every core: on an idle machine the large programs (factorisations
of thousands of points) use them. On a machine busy with other work, run a small job on
fewer cores yourself (``taskset -c 0 fedkrr ...``).

The numbers can change: XLA:CPU compiles some operations for the cores its process has.
Fig. 6's CNN trained on one core and on two gave other metrics (test accuracies up to 0.02
apart after 10 epochs; an MLP's agreed to the byte), so the worker pool keeps every core
unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
import os


def allowed_cores() -> list[int]:
  """The CPU cores this process may run on, in order (all of ``os.cpu_count()`` where the
  platform cannot say)."""
  if hasattr(os, "sched_getaffinity"):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def core_shares(count: int, cores: Iterable[int] | None = None) -> list[list[int]]:
  """The cores of each of ``count`` processes that share ``cores`` (default: this
  process's :func:`allowed_cores`).

  With at least as many cores as processes, each process gets its own contiguous run of
  cores, the first ones one more where they do not divide evenly (5 cores, 2 processes:
  [0, 1, 2] and [3, 4]); with fewer, process i gets core ``i mod len(cores)`` alone.

  Raises:
    ValueError: ``count`` < 1 or no cores.
  """
  cores = sorted(allowed_cores() if cores is None else cores)
  if isinstance(count, bool) or not isinstance(count, int) or count < 1:
    raise ValueError(f"count: expected an integer >= 1, got {count!r}")
  if not cores:
    raise ValueError("cores: expected at least one core")
  if count >= len(cores):
    return [[cores[i % len(cores)]] for i in range(count)]
  size, extra = divmod(len(cores), count)
  shares, first = [], 0
  for i in range(count):
    last = first + size + (1 if i < extra else 0)
    shares.append(cores[first:last])
    first = last
  return shares


def use_cores(cores: Iterable[int]) -> bool:
  """Restricts this process (and the processes it starts) to ``cores``.

  Call it in an entry point before JAX's backend starts: XLA sizes its thread pool once,
  when the backend starts. Returns False (and changes nothing) where the platform cannot
  restrict a process to cores (macOS, Windows) or ``cores`` is empty.
  """
  cores = set(cores)
  if not cores or not hasattr(os, "sched_setaffinity"):
    return False
  os.sched_setaffinity(0, cores)
  return True
