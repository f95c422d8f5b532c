"""Sizes checked before allocation: a computation that cannot fit is refused with its number.

XLA aborts the whole process (a C++ check failure, exit 134) or raises an
out-of-memory error deep in a computation when a buffer does not fit; the
command lines estimate the largest buffers first and refuse with the estimate,
the limit and what to change.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from fedkrr._src.io.reading import available_memory
from fedkrr._src.io.reading import format_size
from fedkrr._src.names import BASELINES
from fedkrr._src.names import protocol_info

TILE_ELEMENTS = 1 << 20
"""Default number of kernel entries in one tile of the matrix-free products (8 MiB in
float64). Longer tiles mean fewer of them, and :func:`fedkrr.scale.symmetric_matvec` copies its
band of columns once per tile; tiles beyond the cache are slower again. On the 2-core CPU
``python benchmarks/scale.py --throughput N_A --tiles 262144,1048576,4194304`` compares
(docs/scale.md, "Longer tiles")."""


class SizeError(ValueError):
  """A computation needs more memory than the machine has (the message says how much)."""


def memory_limit() -> int:
  """Bytes a computation may use: the accelerator's memory, or the host's available memory."""
  device = jax.devices()[0]
  if device.platform != "cpu":
    stats = device.memory_stats() or {}
    if "bytes_limit" in stats:
      return int(stats["bytes_limit"])
  return available_memory()


def format_bytes(n: float) -> str:
  """``n`` bytes in the largest binary unit that keeps it >= 1 (e.g. "7.5 GiB")."""
  return format_size(n)


def check_memory(nbytes: float, what: str, hint: str, limit: int | None = None) -> None:
  """Raises :class:`SizeError` if ``nbytes`` exceed ``limit`` (default :func:`memory_limit`)."""
  limit = memory_limit() if limit is None else limit
  if nbytes > limit:
    raise SizeError(f"{what} needs about {format_bytes(nbytes)}, more than the "
                    f"{format_bytes(limit)} this machine has free; {hint}")


def _per_agent(protocol: str) -> bool:
  """Whether a round of ``protocol`` (or a baseline) gives M predictions, one per agent."""
  return protocol in BASELINES or protocol_info(protocol).per_agent


def trajectory_bytes(protocol: str, num_points: int, num_agents: int, outputs: int,
                     n_eval: int, rounds_kept: int, itemsize: int) -> int:
  """The largest buffers of ``fedkrr.trajectory``: per kept round, the stacked coefficients
  and the predictions (M x n_eval x C for AvgKD / PKD / pkd-mean, n_eval x C otherwise),
  twice: the result and its host copy."""
  # Copies of the stacked coefficients (N x C per kept round) held at once: the table's
  # (none for AKD, which keeps predictions only; two for EKD's partial sums and PKD's solves).
  predictions = (num_agents if _per_agent(protocol) else 1) * n_eval
  copies = protocol_info(protocol).coefficient_copies
  return rounds_kept * outputs * itemsize * (copies * num_points + 2 * predictions)


def _transfer_pairs(protocol: str, num_agents: int) -> list[tuple[int, int]]:
  """The transfer blocks ``(i, j)`` the closed form of ``protocol`` forms."""
  m = num_agents
  transfers = protocol_info(protocol).transfers
  if transfers == "ring":
    return [((j + 1) % m, j) for j in range(m)]
  if transfers == "all":
    return [(i, j) for i in range(m) for j in range(m)]
  return [(i, j) for i in range(m) for j in range(m) if i != j]


SQUARE_MATRICES: dict[str, int] = {"backfit-gs": 4}
"""The N x N matrices a protocol's closed form forms beyond its transfer blocks, by name
(backfit-gs: the whole recurrence matrix and a triangular solve with it): the memory
planner's one mapping from the protocol to its own terms (the others are the row's
``coefficient_copies`` and ``transfers``; ``fedkrr.protocols.register_protocol`` adds to it)."""


def exact_bytes(protocol: str, sizes: Sequence[int], outputs: int, n_eval: int,
                rounds_kept: int, itemsize: int) -> int:
  """About the peak memory of ``fedkrr.trajectory`` (the exact path), in bytes.

  Counted in entries of ``itemsize`` bytes, with N_a the agents' sizes and N their sum:
  every agent's two factor slots (Cholesky factor and pseudo-inverse root, both held
  under ``lax.cond``: ``2 N_a^2``), the transfer blocks ``S_i K^j_ij`` the protocol
  uses (``N_i N_j`` each), one more block of the largest size (the Gram block being
  solved), the read-out ``n_eval x N``, four N x N matrices for backfit-gs (it
  forms the whole recurrence matrix and a triangular solve with it), and
  :func:`trajectory_bytes`. ``docs/scale.md`` compares it with measured peaks.
  """
  sizes = [int(n) for n in sizes]
  n = sum(sizes)
  blocks = [sizes[i] * sizes[j] for i, j in _transfer_pairs(protocol, len(sizes))]
  entries = 2 * sum(s * s for s in sizes) + sum(blocks) + max(blocks) + n_eval * n
  entries += SQUARE_MATRICES.get(protocol, 0) * n * n
  return entries * itemsize + trajectory_bytes(protocol, n, len(sizes), outputs, n_eval,
                                               rounds_kept, itemsize)


def matfree_bytes(protocol: str, sizes: Sequence[int], dim: int, outputs: int, n_eval: int,
                  rounds_kept: int, itemsize: int, landmarks: int = 500,
                  tile_elements: int = TILE_ELEMENTS) -> int:
  """About the peak memory of the matrix-free path (``fedkrr.scale.matfree_trajectory``), in bytes.

  Counted in entries of ``itemsize`` bytes, with N_a the agents' sizes, N their
  sum, m_a = min(landmarks, N_a) and C the outputs: the problem's points and
  labels and the evaluation points (``N d + N C + n_eval d``); every agent's
  Nystrom basis (``N_a m_a``, kept) and the construction of the largest (two
  more ``N_a m_a`` and four ``m_a^2``); conjugate gradients' six vectors of the
  largest agent (``6 N_a C``) and four kernel tiles (``tile_elements``); the
  models and targets a round holds (``3 N C``); and the predictions gathered over
  the kept rounds, four times (the rounds' list, the stacked result, its host copy
  and the output file's buffer): ``4 T_kept P C``, P the predictions of a round
  (``M n_eval`` for AvgKD, PKD and pkd-mean, ``n_eval`` otherwise). For the
  baselines ``central`` (one fit on the pooled N points) and ``local``, one round.
  """
  sizes = [int(n) for n in sizes]
  n, m = sum(sizes), len(sizes)
  fits = [n] if protocol == "central" else sizes
  ranks = [min(int(landmarks), s) for s in fits]
  per_round = (m if _per_agent(protocol) else 1) * n_eval
  entries = (n * dim + n * outputs + n_eval * dim
             + sum(s * r for s, r in zip(fits, ranks))
             + max(2 * s * r + 4 * r * r for s, r in zip(fits, ranks))
             + 6 * max(fits) * outputs + 4 * int(tile_elements) + 3 * n * outputs
             + 4 * max(int(rounds_kept), 1) * per_round * outputs)
  return entries * itemsize


def baseline_bytes(protocol: str, sizes: Sequence[int], outputs: int, n_eval: int,
                   itemsize: int) -> int:
  """About the peak memory of the closed-form baselines ``central`` and ``local``: the
  largest Gram block fitted (``N^2`` or ``max N_a^2``) twice (matrix and factor), plus the
  M agents' predictions at the ``n_eval`` points, twice."""
  sizes = [int(s) for s in sizes]
  n = sum(sizes) if protocol == "central" else max(sizes)
  return (2 * n * n + 2 * len(sizes) * n_eval * outputs) * itemsize
