"""The protocols' rounds as values: build, inspect or write your own.

Each protocol is a :class:`Protocol`, an ``(init, step)`` pair whose step returns a
:class:`RoundOutput` (the round's models and how they combine); :func:`get_protocol`
builds one by name, the factories (:func:`akd`, :func:`avgkd`, :func:`pkd`,
:func:`pkd_mean`, :func:`ekd`, :func:`backfit`) by hand, and :func:`iterate` runs its
rounds with any learners. The baselines are :func:`central_models` and
:func:`local_models`. A protocol of your own joins every layer with
:func:`register_protocol` (docs/adding_a_protocol.md). Running a protocol by name is at the top
(:func:`fedkrr.run`, :func:`fedkrr.simulate`).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.closed_form import Recurrence
  from fedkrr._src.protocols import Protocol
  from fedkrr._src.protocols import RoundOutput
  from fedkrr._src.protocols import akd
  from fedkrr._src.protocols import avgkd
  from fedkrr._src.protocols import backfit
  from fedkrr._src.protocols import central_models
  from fedkrr._src.protocols import ekd
  from fedkrr._src.protocols import get_protocol
  from fedkrr._src.protocols import iterate
  from fedkrr._src.protocols import local_models
  from fedkrr._src.protocols import pkd
  from fedkrr._src.protocols import pkd_mean
  from fedkrr._src.registry import register_protocol
  from fedkrr._src.registry import unregister_protocol
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
