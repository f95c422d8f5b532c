"""The timer the benchmark scripts share (imported as a sibling module)."""

import time

import jax


def best_time(fn, repeats: int) -> float:
  """The best wall time of ``repeats`` calls of ``fn``, waiting for its result each time."""
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - t0)
  return best
