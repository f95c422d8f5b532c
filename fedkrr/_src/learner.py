"""The learner interface of the protocols and the exact kernel ridge learner.

A protocol only ever calls ``learner.fit(x, targets) -> model`` and
``model.predict(x) -> predictions`` (the paper's model-agnostic API). Any object
with those two methods is a learner: the kernel ridge learner here, and the
Flax and random-forest learners of ``neural``.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import inspect
from typing import Any
from typing import Protocol
from typing import TypeVar
from typing import runtime_checkable

import jax
import jax.numpy as jnp
import typing_extensions
from typing_extensions import TypeIs

from fedkrr._src import linalg
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


class Model(Protocol):
  """A trained model: ``predict(x)`` returns predictions of shape (n,) or (n, C)."""

  def predict(self, x: ArrayLike) -> Array:
    """The model's predictions at the points ``x``."""
    ...


class Learner(Protocol):
  """Fits a model on inputs ``x`` (n, d) and targets (n,) or (n, C)."""

  def fit(self, x: ArrayLike, targets: ArrayLike) -> Model:
    """Fits a model to ``targets`` at the points ``x``; the protocols call nothing else."""
    ...


@runtime_checkable
class BatchLearner(Protocol):
  """A learner that fits together with others of its class in one call (optional).

  Learners of one class whose ``batch_key`` is equal and not ``None`` (e.g. networks
  of one architecture and training config) are fitted by one
  ``fit_batch(learners, xs, targets)`` call of that class (e.g. one vmapped program)
  in :func:`fit_all`; the others one by one with ``fit``.
  """

  @property
  def batch_key(self) -> Any:
    """A hashable key, equal for learners that can be fitted together; ``None``: alone."""
    ...

  def fit(self, x: ArrayLike, targets: ArrayLike) -> Model:
    """Fits one model, as :meth:`Learner.fit`."""
    ...

  @classmethod
  def fit_batch(cls, learners: Sequence[Any], xs: Sequence[ArrayLike],
                targets: Sequence[ArrayLike]) -> Sequence[Model]:
    """The models of ``learners[k].fit(xs[k], targets[k])`` for every k, in one call."""
    ...


@runtime_checkable
class WarmStartLearner(Protocol):
  """A learner whose next fit can start from its last model (optional).

  After every fit, :func:`fedkrr.protocols.iterate` replaces such a learner by
  ``warm_start_from(model)`` (e.g. conjugate gradients from the last coefficients,
  a network from its last parameters); the fit's result must not depend on it beyond
  the solver's tolerance, or must be what the protocol means (warm-started training).
  """

  def fit(self, x: ArrayLike, targets: ArrayLike) -> Model:
    """Fits one model, as :meth:`Learner.fit`."""
    ...

  def warm_start_from(self, model: Any) -> Learner:
    """The learner whose next fit starts from ``model``."""
    ...


class CapabilityError(TypeError):
  """An object reaches a capability's members only through ``__getattr__`` (see
  :func:`has_capability`): declare them so that every Python sees the same capability."""


_ABSENT = object()
_T = TypeVar("_T")


def has_capability(obj: Any, capability: type[_T], what: str = "learner") -> TypeIs[_T]:
  """Whether ``obj`` offers ``capability``, a ``Protocol`` of optional members such as
  :class:`BatchLearner` or :class:`WarmStartLearner`: the same answer on every Python.

  ``isinstance`` against a runtime-checkable protocol finds the members with ``hasattr``
  on Python 3.11 and with ``inspect.getattr_static`` from 3.12 on, so a wrapper that
  forwards them through ``__getattr__`` has the capability on one Python and not on the
  other: a warm start or a batched fit would be skipped without an error. Here each
  member must be *declared* on the object or its class (an attribute, method or property,
  found without running ``__getattr__``) and *readable* (a declared property that raises
  ``AttributeError``, as a wrapper's forwarding property does when the object it wraps
  lacks the member, means absent). The project's own checks all go through this function.

  Args:
    obj: a learner or model.
    capability: the ``Protocol`` class whose members are asked for.
    what: how error messages name ``obj`` (e.g. ``"learners[2]"``).

  Raises:
    CapabilityError: some member is reachable only through ``__getattr__``; declare it
      (e.g. a property that forwards it) so that the capability is seen, not guessed.
  """
  members = sorted(typing_extensions.get_protocol_members(capability))
  undeclared = [m for m in members if inspect.getattr_static(obj, m, _ABSENT) is _ABSENT]
  hidden = [m for m in undeclared if hasattr(obj, m)]
  if hidden:
    raise CapabilityError(
        f"{what}: {type(obj).__name__} reaches {', '.join(hidden)} of "
        f"{capability.__name__} only through __getattr__, which Python 3.12 and later do not "
        f"see in a capability check; declare {'it' if len(hidden) == 1 else 'them'} on the "
        f"class (a method or a property that forwards {'it' if len(hidden) == 1 else 'them'})")
  return not undeclared and all(hasattr(obj, m) for m in members)


@pytree_dataclass
class KRRModel:
  """``g(x) = k(x, X) alpha / N``: a kernel ridge model on the points ``X``."""

  kernel: Any
  x_train: Array
  alpha: Array
  num_points: Array

  def predict(self, x: ArrayLike) -> Array:
    """The fitted function at the points ``x``: ``k(x, X) alpha``."""
    return _krr_predict(self, jnp.asarray(x, dtype=self.alpha.dtype))


@pytree_dataclass
class KRRLearner:
  """Exact kernel ridge regression in the paper's convention.

  Fitting on ``(X, t)`` solves ``alpha = (c I + k(X, X) / N)^{-1} t`` (Cholesky)
  or, with ``c = 0``, the minimum-norm solution ``alpha = (k(X, X) / N)^+ t``
  (Appendix C); the model predicts ``g(x) = k(x, X) alpha / N``. ``N`` is the
  total number of points of the federated problem, not the size of ``X``
  (Sec. 3, eq. 4). In scikit-learn terms this is ``KernelRidge`` with
  ``alpha = c * N``.

  Attributes:
    kernel: the agent's kernel.
    ridge: the regularisation constant c >= 0.
    num_points: N, the scale of every Gram block.
    rtol: eigenvalue cut-off of the pseudo-inverse (c = 0), relative to the
      largest eigenvalue; ``None`` for ``n * eps(dtype)``.
  """

  kernel: Any
  ridge: Array
  num_points: Array
  rtol: float | None = dataclasses.field(default=None, metadata=dict(static=True))

  def fit(self, x: ArrayLike, targets: ArrayLike) -> KRRModel:
    """Kernel ridge regression of ``targets`` on ``x`` (cast to the ridge's dtype)."""
    dtype = jnp.asarray(self.ridge).dtype
    return _krr_fit(self, jnp.asarray(x, dtype=dtype), jnp.asarray(targets, dtype=dtype))


@jax.jit
def _krr_fit(learner: KRRLearner, x: Array, targets: Array) -> KRRModel:
  gram = learner.kernel(x, x) / learner.num_points
  alpha = linalg.ridge_factor(gram, learner.ridge, learner.rtol).solve(targets)
  return KRRModel(learner.kernel, x, alpha, learner.num_points)


@jax.jit
def _krr_predict(model: KRRModel, x: Array) -> Array:
  return (model.kernel(x, model.x_train) / model.num_points) @ model.alpha


def krr_learners(problem: FederatedProblem, rtol: float | None = None) -> tuple[KRRLearner, ...]:
  """One :class:`KRRLearner` per agent, with its kernel, the ridge and N."""
  n = jnp.asarray(problem.num_points, dtype=problem.ridge.dtype)
  return tuple(KRRLearner(k, problem.ridge, n, rtol) for k in problem.kernels)


def fit_all(learners: Sequence[Learner], xs: Sequence[ArrayLike],
            targets: Sequence[ArrayLike]) -> tuple[Model, ...]:
  """Fits ``learners[k]`` on ``(xs[k], targets[k])`` for every k: the fits of one round.

  The fits are independent, so learners may train them together. Learners whose
  ``batch_key`` attribute is equal and not ``None`` (e.g. same-architecture
  networks) form a group, fitted by one call of their class's
  ``fit_batch(learners, xs, targets) -> models`` (e.g. one vmapped program);
  every other learner is fitted alone. The result is in the order of the input.
  """
  if not len(learners) == len(xs) == len(targets):
    raise ValueError(f"learners, xs, targets: expected equal lengths, got "
                     f"{len(learners)}, {len(xs)} and {len(targets)}")
  groups: dict[Any, list[int]] = {}
  models: list[Any] = [None] * len(learners)
  for k, learner in enumerate(learners):
    key = learner.batch_key if has_capability(learner, BatchLearner, f"learners[{k}]") else None
    if key is None:
      models[k] = learner.fit(xs[k], targets[k])
    else:
      groups.setdefault((type(learner), key), []).append(k)
  for (cls, _), members in groups.items():
    if len(members) == 1:
      k, = members
      models[k] = learners[k].fit(xs[k], targets[k])
      continue
    fitted = cls.fit_batch([learners[k] for k in members], [xs[k] for k in members],
                           [targets[k] for k in members])
    for k, model in zip(members, fitted, strict=True):
      models[k] = model
  return tuple(models)


def check_learners(learners: Sequence[Any], num_agents: int) -> None:
  """Raises ``ValueError`` unless there is one learner with ``fit`` per agent."""
  if len(learners) != num_agents:
    raise ValueError(f"learners: expected one learner per agent ({num_agents}), "
                     f"got {len(learners)}")
  for a, learner in enumerate(learners):
    if not callable(getattr(learner, "fit", None)):
      raise ValueError(f"learners[{a}]: expected an object with a fit(x, targets) method, "
                       f"got {type(learner).__name__}")
