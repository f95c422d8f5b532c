"""Sizes checked before allocation: a computation that cannot fit is refused with its number.

XLA aborts the whole process (a C++ check failure, exit 134) or raises an
out-of-memory error deep in a computation when a buffer does not fit; the
command lines estimate the largest buffers first and refuse with the estimate,
the limit and what to change.
"""

from __future__ import annotations

import os

import jax


class SizeError(ValueError):
  """A computation needs more memory than the machine has (the message says how much)."""


def memory_limit() -> int:
  """Bytes a computation may use: the accelerator's memory, or the host's available memory."""
  device = jax.devices()[0]
  if device.platform != "cpu":
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
      return int(stats["bytes_limit"])
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_bytes(n: float) -> str:
  """``n`` bytes in the largest binary unit that keeps it >= 1 (e.g. "7.5 GiB")."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
    if n < 1024 or unit == "PiB":
      return f"{n:.3g} {unit}"
    n /= 1024
  return f"{n:.3g} PiB"


def check_memory(nbytes: float, what: str, hint: str, limit: int | None = None) -> None:
  """Raises :class:`SizeError` if ``nbytes`` exceed ``limit`` (default :func:`memory_limit`)."""
  limit = memory_limit() if limit is None else limit
  if nbytes > limit:
    raise SizeError(f"{what} needs about {format_bytes(nbytes)}, more than the "
                    f"{format_bytes(limit)} this machine has free; {hint}")


# Copies of the stacked coefficients (N x C per kept round) that a closed-form trajectory
# holds at once: none for AKD (it keeps predictions only), the scan's output, and a second
# array for EKD's partial sums and PKD's solves.
_COEFFICIENT_COPIES = {"akd": 0, "avgkd": 1, "backfit-gs": 1, "backfit-jacobi": 1, "ekd": 2,
                       "pkd": 2, "pkd-mean": 1}


def trajectory_bytes(protocol: str, num_points: int, num_agents: int, outputs: int,
                     n_eval: int, rounds_kept: int, itemsize: int) -> int:
  """The largest buffers of ``fedkrr.trajectory``: per kept round, the stacked coefficients
  and the predictions (M x n_eval x C for AvgKD / PKD / pkd-mean, n_eval x C otherwise),
  twice: the result and its host copy."""
  predictions = (num_agents if protocol in ("avgkd", "pkd", "pkd-mean") else 1) * n_eval
  copies = _COEFFICIENT_COPIES.get(protocol, 2)
  return rounds_kept * outputs * itemsize * (copies * num_points + 2 * predictions)
