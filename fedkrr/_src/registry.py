"""A protocol of one's own: its row and its behaviour in each layer, registered at once.

A protocol is a row of facts (:class:`fedkrr.ProtocolInfo`) and, per layer, one entry
in that layer's mapping from the protocol's name to what the layer does with it: the
literal rounds (``protocols.ROUNDS``), the recurrence of the closed form
(``closed_form.RECURRENCES``), the target rule of the sharded path
(``sharded.TARGET_RULES``) and the memory planner's extra terms
(``memory.SQUARE_MATRICES``). The protocols of ``fedkrr.PROTOCOLS`` are listed there;
:func:`register_protocol` adds one more to every layer, and then ``fedkrr.run``,
``fedkrr.simulate``, ``fedkrr.trajectory`` and ``fedkrr.limit`` take its name
(``docs/adding_a_protocol.md``).
"""

from __future__ import annotations

from collections.abc import Callable

from fedkrr._src import closed_form
from fedkrr._src import names
from fedkrr._src import protocols
from fedkrr._src.names import ProtocolInfo
from fedkrr._src.names import ProtocolParams
from fedkrr._src.platform import memory
from fedkrr._src.scale import sharded


def register_protocol(row: ProtocolInfo, *, rounds: Callable[[ProtocolParams], protocols.Protocol],
                      recurrence: closed_form.RecurrenceFn | None = None,
                      target_rule: Callable[[int], tuple] | None = None,
                      square_matrices: int = 0) -> None:
  """Adds a protocol: its row and its behaviour in every layer.

  Args:
    row: its facts (:class:`fedkrr.ProtocolInfo`); ``row.name`` is the name users pass.
    rounds: ``params -> Protocol``, its literal rounds (:class:`fedkrr.protocols.Protocol`, an
      ``(init, step)`` pair) for its parameters (:class:`fedkrr.ProtocolParams`).
    recurrence: its affine recurrence for the closed form,
      ``(problem, params, fs, block, own) -> fedkrr.protocols.Recurrence`` (``closed_form``'s
      module docstring); needed where ``row.closed_form``, refused otherwise.
    target_rule: ``M -> (labels_w, own_w, sign, divisor, with_own)``: its next targets
      ``(labels_w y_i + own_w tau_i + sign R_i) / divisor`` on sharded agents; needed
      where ``row.sharded`` and the protocol does not relay (``row.cycles``).
    square_matrices: the N x N matrices its closed form forms beyond the transfer blocks
      (the memory planner's term).

  Raises:
    ValueError: a name already taken, or a behaviour missing for what ``row`` says.

  Example: ``tests/fedkrr/test_registry.py`` registers a toy protocol and runs it through
  ``fedkrr.run``; ``docs/adding_a_protocol.md`` walks through it.
  """
  names.check_new_row(row)   # first: a name taken is said before a missing behaviour
  if row.closed_form != (recurrence is not None):
    raise ValueError(f"recurrence: expected one exactly where row.closed_form "
                     f"({row.closed_form}), got {recurrence!r}")
  if row.sharded and not row.cycles and target_rule is None:
    raise ValueError(f"target_rule: row.sharded is true for {row.name}, so its sharded "
                     f"targets are needed (or sharded=False)")
  names.add_row(row)
  protocols.ROUNDS[row.name] = rounds
  if recurrence is not None:
    closed_form.RECURRENCES[row.name] = recurrence
  if target_rule is not None:
    sharded.TARGET_RULES[row.name] = target_rule
  if square_matrices:
    memory.SQUARE_MATRICES[row.name] = int(square_matrices)


def unregister_protocol(name: str) -> None:
  """Forgets a protocol :func:`register_protocol` added, in every layer.

  Raises:
    ValueError: ``name`` is one of ``fedkrr.PROTOCOLS``.
  """
  names.remove_row(name)
  for mapping in (protocols.ROUNDS, closed_form.RECURRENCES, sharded.TARGET_RULES,
                  memory.SQUARE_MATRICES):
    mapping.pop(name, None)
