"""A learner that trains the first-order Taylor expansion of a network: kernel ridge regression.

Around fixed initial parameters theta0, the linearised network (Lee et al.
2019, "Wide neural networks of any depth evolve as linear models", eq. 6) is,
centred,

    f_lin(x; theta) = J(x) (theta - theta0),   J(x) = df(x; theta0)/dtheta,

i.e. the first-order expansion ``f(x; theta0) + J(x)(theta - theta0)`` minus its
value at initialisation. Centring makes the function start at exactly zero, as
kernel ridge regression's ``g(x) = k(x, X) alpha / N`` does for zero targets,
and as the protocols' closed forms assume; without it every fit would carry the
random function ``f(x; theta0)`` along. :class:`LinearizedLearner` minimises,
full batch,

    L(theta) = 1/(2N) sum_i ||f_lin(x_i; theta) - t_i||^2 + c/2 ||theta - theta0||^2

over the agent's n points, with N the TOTAL number of points of the federated
problem (``num_total``) and c the ridge. Why that scaling: with J the (nC, P)
Jacobian on the data and T the targets stacked the same way, the gradient is
``J^T (J delta - T) / N + c delta`` for ``delta = theta - theta0``, so the
minimiser is ``delta = J^T a`` with ``(J J^T + N c I) a = T``. Writing
``alpha = N a`` this is ``(c I + Theta / N) alpha = T`` with ``Theta = J J^T``,
and the prediction is ``J(x) delta = Theta(x, X) alpha / N``: fedkrr's kernel
ridge regression with the total-N convention (DESIGN.md), the kernel being the
empirical NTK ``Theta``. With c = 0 the iterates start at delta = 0 and stay
in the row space of J, so they converge to the minimum-norm solution, fedkrr's
pseudo-inverse fit.

With C > 1 outputs ``Theta`` is the C x C matrix-valued NTK: the minimiser is
exactly fedkrr's ``KRRLearner(neural.training.ntk_kernel(...))`` (one scalar kernel,
the logit average, for every label column) when C = 1, and in the infinite-
width limit, where ``Theta_cc'(x, x') = delta_cc' k(x, x')``; at finite width
and C > 1 the cross-logit terms make the two differ, by O(1 / sqrt(width)).
Measured for neural's MLP (C = 3, 10 training points, c = 1e-2): the largest
difference of predictions relative to the largest prediction is 0.98 at
width 16, 0.18 at width 128 and 0.09 at width 1024. To compare with fedkrr
exactly, use one output per label column (C = 1) or a wide network.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from typing import cast

import flax.linen as nn
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from fedkrr import pytree_dataclass
from neural._src.learners.ntk import ModelApply
from neural._src.learners.ntk import _outputs
from neural._src.learners.ntk import check_flat_inputs

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


class LinearizedError(ValueError):
  """Bad settings or data of a :class:`LinearizedLearner`."""


@functools.partial(jax.jit, static_argnames="apply_fn")
def _linear_predict(apply_fn: ModelApply, params0: Any, delta: Any, x: Array) -> Array:
  return jax.jvp(lambda p: _outputs(apply_fn, p, x), (params0,), (delta,))[1]


@pytree_dataclass
class LinearizedModel:
  """``f_lin(x) = J(x) delta``: a trained linearised network.

  Attributes:
    apply_fn: the network on flat inputs (static).
    params0: theta0, the expansion point (float32).
    delta: theta - theta0 after training (float32).
    steps: the number of conjugate-gradient steps the fit took.
    scalar: if true, predictions are (n,) (the targets were a vector).
  """

  apply_fn: ModelApply = dataclasses.field(metadata=dict(static=True))
  params0: Any
  delta: Any
  steps: Array
  scalar: bool = dataclasses.field(default=False, metadata=dict(static=True))

  def predict(self, x: ArrayLike) -> Array:
    """Predictions (n, C) float32, or (n,) for vector targets; ``x`` flat (n, d) or (n, *shape)."""
    x = check_flat_inputs(x, self.apply_fn.input_shape).astype(jnp.float32)
    out = _linear_predict(self.apply_fn, self.params0, self.delta, x)
    return out[:, 0] if self.scalar else out


def _dot(u: Any, v: Any) -> Array:
  return cast(Array, sum(jnp.vdot(a, b) for a, b in zip(jax.tree_util.tree_leaves(u),
                                                        jax.tree_util.tree_leaves(v))))


def _axpy(alpha: Array, u: Any, v: Any) -> Any:
  """``alpha u + v`` for parameter trees."""
  return jax.tree_util.tree_map(lambda a, b: alpha * a + b, u, v)


@functools.partial(jax.jit, static_argnames=("apply_fn", "max_steps"))
def _fit_delta(apply_fn: ModelApply, params0: Any, x: Array, targets: Array, ridge: Array,
               num_total: Array, max_steps: int, tol: Array) -> tuple[Any, Array]:
  """Conjugate-gradient descent on the centred linearised loss from delta = 0.

  The loss is quadratic with Hessian ``H = J^T J / N + c I`` and
  ``grad L(delta) = H delta - J^T T / N``; each step moves along a direction
  conjugate to the previous ones with the exact line search, and the loop stops
  when ``|grad L| <= tol |grad L(0)|`` or after ``max_steps`` steps.
  """
  _, jvp_fn = jax.linearize(lambda p: _outputs(apply_fn, p, x), params0)   # delta -> J delta
  vjp_fn = jax.linear_transpose(jvp_fn, params0)                            # r -> J^T r

  def hessian(d):
    (jtjd,) = vjp_fn(jvp_fn(d))
    return jax.tree_util.tree_map(lambda a, b: a / num_total + ridge * b, jtjd, d)

  (b,) = vjp_fn(targets)
  b = jax.tree_util.tree_map(lambda a: a / num_total, b)    # -grad L(0)
  stop = tol * tol * _dot(b, b)

  def going(state):
    k, _, _, _, rr = state
    return (k < max_steps) & (rr > stop)

  def step(state):
    k, delta, r, p, rr = state          # r = -grad L(delta); p the search direction
    hp = hessian(p)
    php = _dot(p, hp)
    alpha = jnp.where(php > 0, rr / jnp.where(php > 0, php, 1.0), 0.0)
    delta, r = _axpy(alpha, p, delta), _axpy(-alpha, hp, r)
    rr_next = _dot(r, r)
    p = _axpy(rr_next / jnp.where(rr > 0, rr, 1.0), p, r)
    return k + 1, delta, r, p, rr_next

  zeros = jax.tree_util.tree_map(jnp.zeros_like, params0)
  state = (jnp.asarray(0, jnp.int32), zeros, b, b, _dot(b, b))
  steps, delta, _, _, _ = lax.while_loop(going, step, state)
  return delta, steps


@dataclasses.dataclass(frozen=True, eq=False)
class LinearizedLearner:
  """Trains the centred linearisation of a network around ``variables``: KRR with its NTK.

  ``fit(x, targets)`` minimises ``1/(2N) sum_i ||J(x_i) delta - t_i||^2 +
  c/2 ||delta||^2`` over ``delta = theta - theta0``, full batch, from
  ``delta = 0``, by conjugate-gradient steps (the loss is quadratic in delta, so
  this is gradient descent with conjugate directions and exact line search,
  needing one Jacobian-vector and one vector-Jacobian product per step) until
  the gradient norm falls below ``tol`` times its initial value (or
  ``max_steps``). The minimiser predicts like
  ``fedkrr.KRRLearner(neural.training.ntk_kernel(model, variables, input_shape), c, N)``
  (exactly for one output; module docstring for C > 1). Every fit starts from
  the same theta0, so the agent's kernel is the same in every round, as in the
  closed forms. Computes in float32.

  Attributes:
    model: the Flax module (evaluated with ``train=False``).
    variables: theta0, its variables ``{"params": ...}``.
    input_shape: the shape of one input; ``fit``/``predict`` take flat inputs
      (n, prod(input_shape)) or (n, *input_shape).
    ridge: the regularisation constant c >= 0.
    num_total: N, the total number of points of the federated problem.
    max_steps: the most conjugate-gradient steps of one fit.
    tol: stop when ``|grad L| <= tol |grad L(theta0)|``.

  Raises:
    LinearizedError: for bad settings (at construction) or data (in ``fit``).

  Example:
    >>> ds = neural.load_dataset("digits", test_fraction=0.25)
    >>> x = ds.x_train[:200].reshape(200, -1)   # flat inputs, as fedkrr passes them
    >>> mlp = neural.get_model("mlp", 10, width=16)
    >>> variables = mlp.init(jax.random.PRNGKey(0), ds.x_train[:1])
    >>> learner = neural.LinearizedLearner(mlp, variables, (8, 8, 1), ridge=1e-2, num_total=200)
    >>> model = learner.fit(x, neural.data.one_hot(ds.y_train[:200], 10))
    >>> model.predict(ds.x_test[:5].reshape(5, -1)).shape
    (5, 10)
  """

  model: nn.Module
  variables: Any
  input_shape: tuple[int, ...]
  ridge: float
  num_total: int
  max_steps: int = 500
  tol: float = 1e-5

  def __post_init__(self):
    object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))
    if not hasattr(self.variables, "keys") or set(self.variables) != {"params"}:
      raise LinearizedError("variables: expected a Flax variables dict {'params': ...}")
    if not np.isfinite(float(self.ridge)) or float(self.ridge) < 0:
      raise LinearizedError(f"ridge: expected a finite number >= 0, got {self.ridge!r}")
    if int(self.num_total) < 1:
      raise LinearizedError(f"num_total: expected a positive int, got {self.num_total!r}")
    if int(self.max_steps) < 1:
      raise LinearizedError(f"max_steps: expected a positive int, got {self.max_steps!r}")
    if not float(self.tol) >= 0:
      raise LinearizedError(f"tol: expected a number >= 0, got {self.tol!r}")

  @property
  def apply_fn(self) -> ModelApply:
    """The network's apply function of (params, x), as the NTK and the linearisation use it."""
    return ModelApply(self.model, self.input_shape)

  @property
  def params0(self) -> Any:
    """The parameters at initialisation, the point of linearisation (float32)."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), self.variables["params"])

  def fit(self, x: ArrayLike, targets: ArrayLike) -> LinearizedModel:
    """Trains on ``x`` (n, d) and ``targets`` (n,) or (n, C); returns the linearised model."""
    x = check_flat_inputs(x, self.input_shape).astype(jnp.float32)
    t = jnp.asarray(targets, jnp.float32)
    params0 = self.params0
    num_outputs = jax.eval_shape(lambda v: _outputs(self.apply_fn, params0, v), x[:1]).shape[1]
    scalar = t.ndim == 1
    if t.ndim not in (1, 2) or t.shape[0] != x.shape[0]:
      raise LinearizedError(f"targets: expected shape ({x.shape[0]},) or ({x.shape[0]}, C), "
                            f"got {t.shape}")
    t = t.reshape(x.shape[0], -1)
    if t.shape[1] != num_outputs:
      raise LinearizedError(f"targets: the network has {num_outputs} outputs, got "
                            f"{t.shape[1]} target column(s)")
    delta, steps = _fit_delta(self.apply_fn, params0, x, t, jnp.float32(self.ridge),
                              jnp.float32(self.num_total), int(self.max_steps),
                              jnp.float32(self.tol))
    return LinearizedModel(self.apply_fn, params0, delta, steps, scalar)
