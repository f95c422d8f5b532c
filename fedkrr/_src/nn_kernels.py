"""Infinite-width kernels of fully connected ReLU networks (NNGP and NTK).

The network (NTK parametrisation; Jacot et al. 2018, eq. 1; Lee et al. 2019,
"Wide neural networks of any depth evolve as linear models", eq. 1) has
``depth`` hidden layers of widths n_1, ..., n_L and a linear read-out:

    h^1 = sqrt(weight_var / d) W^1 x + sqrt(bias_var) b^1
    h^{l+1} = sqrt(weight_var / n_l) W^{l+1} relu(h^l) + sqrt(bias_var) b^{l+1}
    f(x) = h^{L+1}(x),   every entry of W^l and b^l ~ N(0, 1),

with d the input dimension. ``weight_var`` is the variance sigma_w^2 of a weight
times its fan-in (2.0 is He's choice: it keeps E|h^l|^2 constant with depth),
``bias_var`` the variance sigma_b^2 of a bias; the read-out layer uses the same
two numbers. This is the convention of neural-tangents' ``stax.Dense(W_std,
b_std, parameterization="ntk")`` with ``W_std^2 = weight_var``, ``b_std^2 =
bias_var``.

As the widths grow, f at initialisation tends to a Gaussian process with
covariance ``Sigma^{L+1}`` (the NNGP kernel), and the empirical neural tangent
kernel ``sum_theta df(x)/dtheta df(x')/dtheta`` tends to ``Theta^{L+1}`` (the
NTK), both given by the arc-cosine recursion (Cho & Saul 2009; Arora et al.
2019, "On exact computation with an infinitely wide neural net", eq. 7-8):

    Sigma^1(x, x') = weight_var <x, x'> / d + bias_var,       Theta^1 = Sigma^1
    cos u = Sigma^l(x, x') / sqrt(Sigma^l(x, x) Sigma^l(x', x'))
    Sigma^{l+1}(x, x') = weight_var sqrt(Sigma^l(x, x) Sigma^l(x', x'))
                         (sin u + (pi - u) cos u) / (2 pi) + bias_var
    Sigmadot^{l+1}(x, x') = weight_var (pi - u) / (2 pi)
    Theta^{l+1} = Sigma^{l+1} + Theta^l Sigmadot^{l+1}

for l = 1..L. With ``depth = 0`` both kernels are the linear kernel
``Sigma^1``.

Standard parametrisation (``parametrization="standard"``): the layers of Flax's
``nn.Dense`` and PyTorch's ``nn.Linear``, ``h^{l+1} = W^{l+1} relu(h^l) + b^{l+1}``
with weights of variance ``weight_var / fan-in`` at initialisation (Flax's
default: 1) and biases of variance ``bias_var`` (Flax: 0). The forward kernels
Sigma^l are the same, but the gradient with respect to the raw weights of a layer
is not scaled by ``1 / sqrt(fan-in)`` and every bias contributes 1, so the NTK
grows with the hidden ``width`` n (Lee et al. 2019, Sec. 2.3 and App. F) and only
``Theta / n`` has a limit. With all hidden layers of width n, the expected NTK
at initialisation is, as n grows,

    Theta_s^1 = <x, x'> + 1
    Theta_s^{l+1} = n (Sigma^{l+1} - bias_var) / weight_var + 1 + Theta_s^l Sigmadot^{l+1}

(n (Sigma^{l+1} - bias_var) / weight_var is ``<relu(h^l(x)), relu(h^l(x'))>``, the
read-out gradient), and the read-out kernel that :class:`ReluNNGP` gives is that
term alone, ``n (Sigma^{L+1} - bias_var) / weight_var + 1`` (``<x, x'> + 1`` for
depth 0). These are the kernels to compare with the empirical NTK of a
``neural`` MLP (``neural.training.empirical_ntk``) and to match its weight decay with a
ridge.

Numerics. The NTK's ``Sigmadot`` is linear in the angle u, and u taken as
``arccos`` of a cosine computed as ``Sigma / sqrt(Sigma(x, x) Sigma(x', x'))``
is off by sqrt(eps) (1e-8 in float64) where the cosine is 1 - O(eps): on the
diagonal, at repeated and parallel points. So the angles are carried from layer
to layer instead of the cosines. The first layer's angle comes from direct
differences of the normalised inputs wherever the cosine is near +-1 (Kahan's
``2 atan2(|a^ - a'^|, |a^ + a'^|)``), and each next one from

    1 - cos u^{l+1} = (b (sqrt(s) - sqrt(s'))^2 / (R + sqrt(s s') + b)
                       + sqrt(s s') ((pi - u) (1 - cos u) + u - sin u) / pi) / R,

with ``s = weight_var Sigma^l(x, x) / 2``, ``s'`` the same at x', ``b = bias_var``
and ``R = sqrt((s + b)(s' + b))``: non-negative terms, no cancellation, and
``1 - cos u = 2 sin^2(u / 2)``. Every angle is then right to an absolute O(eps)
and both kernels to a few eps relative to ``sqrt(K(x, x) K(x', x'))``, at
coincident points too (tested against 40-digit references). Square roots have
gradient 0 at 0, so the kernels and their gradients are finite at ``x1 == x2``;
a zero input (with ``bias_var = 0``) has zero variance, and its row of the
kernel is 0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp

from fedkrr._src.linalg import full_matmul
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array


def _safe_sqrt(v: Array) -> Array:
  """``sqrt(max(v, 0))`` with value and gradient 0 (not NaN) at v <= 0."""
  positive = v > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, v, 1.0)), 0.0)


# Pairs whose first-layer cosine is within NEAR of +-1 get their angle from direct
# differences; elsewhere arccos of the Gram's cosine is off by O(eps / sin u) <= 4 O(eps).
# Up to NEAR_PER_ROW such pairs a row are gathered; with more in some row, all pairs are.
NEAR = 1.0 / 32
NEAR_PER_ROW = 8


def _first_angles(x1: Array, x2: Array, cos: Array, offset, budget: int = 1 << 25) -> Array:
  """Angles u^1 (n1, n2) between the inputs of the first layer, correct to O(eps).

  The first layer sees ``a = (x, sqrt(offset))`` up to the factor
  ``sqrt(weight_var / d)``, with ``offset = bias_var d / weight_var``; ``cos`` is
  ``<a, a'> / (|a| |a'|)`` from the Gram matrix. Its arccos is off by
  O(eps / sin u), sqrt(eps) at u = 0 or pi. So where ``|cos| > 1 - NEAR`` the
  angle is recomputed as ``2 atan2(|a^ - a'^|, |a^ + a'^|)`` (Kahan) with
  ``a^ = a / |a|`` and the two norms formed coordinate by coordinate: 0 at
  x == x', pi at x == -x', correct to an absolute O(eps) in between. Those pairs
  (the diagonal of a Gram matrix, duplicates, near neighbours) are gathered, the
  ``NEAR_PER_ROW`` largest ``|cos|`` of each row; if some row has more, every pair
  is recomputed, in row batches of at most ``budget`` elements of the (n1, n2, d)
  differences. An input with ``|a| = 0`` is given the angle pi / 2 (its kernel
  row is then ``bias_var`` or 0).
  """
  offset = jnp.asarray(offset, x1.dtype)

  def unit(x):
    sq = jnp.sum(x * x, axis=-1) + offset
    inv = jnp.where(sq > 0, 1.0 / _safe_sqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)
    return x * inv[:, None], jnp.sqrt(offset) * inv, sq > 0

  u1, t1, ok1 = unit(x1)
  u2, t2, ok2 = unit(x2)
  ok = ok1[:, None] & ok2[None, :]

  def kahan(u1, t1, u2, t2):   # (..., d) pairs broadcast against each other
    minus = _safe_sqrt(jnp.sum((u1 - u2) ** 2, axis=-1) + (t1 - t2) ** 2)
    plus = _safe_sqrt(jnp.sum((u1 + u2) ** 2, axis=-1) + (t1 + t2) ** 2)
    return 2.0 * jnp.arctan2(minus, plus)

  def all_pairs(_):
    rows = lambda r: kahan(r[0][None, :], r[1], u2, t2)  # noqa: E731
    return lax.map(rows, (u1, t1), batch_size=max(1, budget // max(n2 * d, 1)))

  n1, n2, d = x1.shape[0], x2.shape[0], x2.shape[1] + 1
  if n1 * n2 * d <= 1 << 16:   # small: every pair directly
    return jnp.where(ok, kahan(u1[:, None, :], t1[:, None], u2[None], t2[None]), math.pi / 2)
  cos = jnp.clip(cos, -1.0, 1.0)
  angle = jnp.arctan2(_safe_sqrt(1.0 - cos * cos), cos)
  near = ok & (jnp.abs(cos) > 1.0 - NEAR)
  k = min(n2, NEAR_PER_ROW)

  def gathered(_):
    j = lax.top_k(jnp.where(ok, jnp.abs(cos), -1.0), k)[1]   # (n1, k): the nearest columns
    i = jnp.broadcast_to(jnp.arange(n1)[:, None], j.shape)
    return angle.at[i, j].set(kahan(u1[i], t1[i], u2[j], t2[j]))

  angle = lax.cond(jnp.any(jnp.sum(near, axis=1) > k), all_pairs, gathered, None)
  return jnp.where(ok, angle, math.pi / 2)


def _relu_step(angle: Array, var1: Array, var2: Array, weight_var, bias_var
               ) -> tuple[Array, Array, Array, Array, Array]:
  """One arc-cosine step: ``(Sigma^{l+1}, Sigmadot^{l+1}, u^{l+1}, var1', var2')``.

  ``angle`` is the angle u^l (n1, n2) of Sigma^l; ``var1`` (n1,) and ``var2``
  (n2,) are Sigma^l at (x1, x1) and (x2, x2). The next angle comes from
  ``1 - cos u^{l+1}`` written as a sum of non-negative terms (module
  docstring), so it keeps an absolute accuracy of O(eps) down to u = 0.
  """
  norms = _safe_sqrt(var1[:, None] * var2[None, :])
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  sigma_next = weight_var * norms * (sin + (math.pi - angle) * cos) / (2 * math.pi) + bias_var
  sigma_dot = weight_var * (math.pi - angle) / (2 * math.pi)
  # On the diagonal u = 0: E[relu(h)^2] = Sigma^l(x, x) / 2.
  s1, s2 = weight_var * var1 / 2, weight_var * var2 / 2
  q = weight_var * norms / 2   # sqrt(s1 s2)
  half = jnp.sin(angle / 2)
  one_minus_j = ((math.pi - angle) * 2 * half * half + (angle - sin)) / math.pi
  root1, root2 = _safe_sqrt(s1 + bias_var), _safe_sqrt(s2 + bias_var)
  den = root1[:, None] * root2[None, :]
  gap = _safe_sqrt(s1)[:, None] - _safe_sqrt(s2)[None, :]
  spread = bias_var * gap * gap / (den + q + bias_var)
  positive = den > 0
  one_minus_cos = jnp.where(positive, (spread + q * one_minus_j) / jnp.where(positive, den, 1.0),
                            1.0)
  angle_next = 2 * jnp.arcsin(_safe_sqrt(jnp.clip(one_minus_cos / 2, 0.0, 0.5)))
  return sigma_next, sigma_dot, angle_next, s1 + bias_var, s2 + bias_var


PARAMETRIZATIONS = ("ntk", "standard")


@functools.partial(jax.jit, static_argnames=("depth", "parametrization", "width"))
def relu_kernels(x1: Array, x2: Array, depth: int, weight_var, bias_var,
                 parametrization: str = "ntk", width: int | None = None
                 ) -> tuple[Array, Array]:
  """The read-out (NNGP) and NTK Gram matrices, each (n1, n2).

  ``(Sigma^{L+1}, Theta^{L+1})`` in the NTK parametrisation; in the standard one
  the read-out kernel ``n (Sigma^{L+1} - bias_var) / weight_var + 1`` and
  ``Theta_s^{L+1}`` (module docstring).

  Args:
    x1: inputs (n1, d).
    x2: inputs (n2, d).
    depth: number of hidden ReLU layers L >= 0.
    weight_var: sigma_w^2 > 0 (weight variance times fan-in).
    bias_var: sigma_b^2 >= 0.
    parametrization: "ntk" or "standard".
    width: the hidden width n (standard parametrisation only).
  """
  d = x1.shape[-1]
  dot = full_matmul(x1, x2.T)
  sigma = weight_var * dot / d + bias_var
  var1 = weight_var * jnp.sum(x1 * x1, axis=-1) / d + bias_var
  var2 = weight_var * jnp.sum(x2 * x2, axis=-1) / d + bias_var
  if depth:
    norms = _safe_sqrt(var1[:, None] * var2[None, :])
    cos = sigma / jnp.where(norms > 0, norms, 1.0)
    angle = _first_angles(x1, x2, cos, bias_var * d / weight_var)
  if parametrization == "ntk":
    theta = sigma
    for _ in range(depth):
      sigma, sigma_dot, angle, var1, var2 = _relu_step(angle, var1, var2, weight_var, bias_var)
      theta = sigma + theta * sigma_dot
    return sigma, theta
  readout = theta = dot + 1.0
  for _ in range(depth):
    sigma, sigma_dot, angle, var1, var2 = _relu_step(angle, var1, var2, weight_var, bias_var)
    readout = width * (sigma - bias_var) / weight_var + 1.0
    theta = readout + theta * sigma_dot
  return readout, theta


@pytree_dataclass
class ReluNNGP:
  """NNGP kernel ``Sigma^{L+1}`` of a ReLU MLP with ``depth`` = L hidden layers.

  The covariance of the output of the randomly initialised network in the
  infinite-width limit (see the module docstring for the parametrisation and
  the recursion; Lee et al. 2018, "Deep neural networks as Gaussian
  processes", eq. 5). ``depth`` is static; ``weight_var > 0`` and
  ``bias_var >= 0`` are leaves. With ``parametrization="standard"`` and the
  hidden ``width`` (static) it is the read-out kernel of a standard-parametrised
  MLP, ``n (Sigma^{L+1} - bias_var) / weight_var + 1``: KRR with it is training
  the last layer alone (module docstring).

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
    >>> fedkrr.ReluNNGP(depth=2)(x, x[:3]).shape   # (n1, n2)
    (4, 3)
  """

  depth: int = dataclasses.field(default=1, metadata=dict(static=True))
  weight_var: float | Array = 2.0
  bias_var: float | Array = 0.0
  parametrization: str = dataclasses.field(default="ntk", metadata=dict(static=True))
  width: int | None = dataclasses.field(default=None, metadata=dict(static=True))

  def __call__(self, x1: Array, x2: Array) -> Array:
    return relu_kernels(x1, x2, self.depth, self.weight_var, self.bias_var,
                        self.parametrization, self.width)[0]

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return _to_dict("relu_nngp", self)


@pytree_dataclass
class ReluNTK:
  """Neural tangent kernel ``Theta^{L+1}`` of a ReLU MLP with ``depth`` = L hidden layers.

  The limit of the empirical NTK ``sum_theta <df(x)/dtheta, df(x')/dtheta>``
  of the network in NTK parametrisation (module docstring) as all widths grow;
  the same for every output logit, with zero cross-logit terms (Jacot et al.
  2018, Theorem 1; Arora et al. 2019, eq. 7-8). Kernel ridge regression with
  it is what the infinitely wide network trained to convergence on the squared
  loss computes. ``depth`` is static; ``weight_var > 0`` and ``bias_var >= 0``
  are leaves. With ``parametrization="standard"`` and the hidden ``width``
  (static) it is the expected NTK at initialisation of a standard-parametrised
  MLP (Flax's ``nn.Dense``), ``Theta_s^{L+1}`` of the module docstring.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> k = fedkrr.ReluNTK(depth=2, weight_var=2.0, bias_var=0.1)
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], k, ridge=1e-3)
    >>> fedkrr.limit(problem, "avgkd", x).converges
    True
  """

  depth: int = dataclasses.field(default=1, metadata=dict(static=True))
  weight_var: float | Array = 2.0
  bias_var: float | Array = 0.0
  parametrization: str = dataclasses.field(default="ntk", metadata=dict(static=True))
  width: int | None = dataclasses.field(default=None, metadata=dict(static=True))

  def __call__(self, x1: Array, x2: Array) -> Array:
    return relu_kernels(x1, x2, self.depth, self.weight_var, self.bias_var,
                        self.parametrization, self.width)[1]

  def to_dict(self) -> dict[str, Any]:
    """The kernel as a JSON-ready dict (:func:`kernel_from_dict` reads it back)."""
    return _to_dict("relu_ntk", self)


def _to_dict(name: str, kernel: Any) -> dict[str, Any]:
  out = {"name": name, "depth": kernel.depth, "weight_var": float(kernel.weight_var),
         "bias_var": float(kernel.bias_var)}
  if kernel.parametrization != "ntk":
    out.update(parametrization=kernel.parametrization, width=kernel.width)
  return out
