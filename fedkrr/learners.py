"""Bring your own learner: the interface the protocols call, and its optional capabilities.

A protocol only calls ``fit`` and ``predict``: a :class:`Learner` fits a
:class:`Model`. A learner may also offer batched fits over the agents
(:class:`BatchLearner`) or fits that start from the previous model
(:class:`WarmStartLearner`); :func:`has_capability` says which it offers (and
:class:`CapabilityError` why a member does not count), :func:`fit_all` fits every
agent with the fastest route it has. The exact learner is at the top:
:class:`fedkrr.KRRLearner`, :func:`fedkrr.krr_learners`.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.learner import BatchLearner
  from fedkrr._src.learner import CapabilityError
  from fedkrr._src.learner import KRRModel
  from fedkrr._src.learner import Learner
  from fedkrr._src.learner import Model
  from fedkrr._src.learner import WarmStartLearner
  from fedkrr._src.learner import fit_all
  from fedkrr._src.learner import has_capability
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
