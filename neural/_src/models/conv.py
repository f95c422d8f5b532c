"""Convolution and max-pool layers with gradients that are fast on XLA:CPU too.

The models train on CPUs as well as on accelerators, and three parts of a small
CNN's training step are slow on XLA:CPU when written the usual way
(``flax.linen.Conv``, ``flax.linen.max_pool``):

* the gradient of a max-pool is a ``select_and_scatter``, which XLA:CPU expands
  into index arrays, a windowed reduction over them and a scatter: half of the
  paper's CNN step;
* a convolution with one input channel (the first layer on grey images) does
  not reach XLA:CPU's fast convolution kernels and runs on its generic loop
  emitter, 5-10x slower than the same work as 25 fused multiply-adds;
* the weight gradient of a convolution, a convolution over the batch axis, gets
  slow as the batch grows (at batch 512, 2-3x slower than the same sum taken
  over chunks of 32 examples).

So on a CPU, :func:`max_pool` (non-overlapping windows) takes the maximum of a
reshaped array and its gradient goes to the first maximum of each window in
row-major order, exactly the element ``select_and_scatter`` picks: values and
gradients are bit-identical to ``flax.linen.max_pool``'s. :func:`conv2d`
computes a one-channel stride-1 convolution as a sum over the kernel's taps and
the weight gradient as a sum over batch chunks of ``WEIGHT_GRAD_CHUNK`` examples
(the input gradient is JAX's own); these agree with ``lax.conv_general_dilated``
up to float32 rounding (another order of the same sums). On every other backend
both are the reference operations (``impl="auto"`` picks by the platform the
program is compiled for, with ``jax.lax.platform_dependent``).
``benchmarks/train_speed.py`` shows the effect; ``docs/training.md`` the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import functools
from typing import Any
from typing import cast

import flax.linen as nn
from flax.linen.dtypes import promote_dtype
import jax
from jax import lax
import jax.numpy as jnp

Array = jax.Array

IMPLS = ("auto", "cpu", "reference")
# Examples per chunk of the weight gradient on a CPU (see the module docstring).
WEIGHT_GRAD_CHUNK = 32
# Input channels up to which a stride-1 convolution on a CPU is a sum over its taps.
TAPS_MAX_CHANNELS = 1
_DIMENSIONS = ("NHWC", "HWIO", "NHWC")

Padding = str | Sequence[tuple[int, int]]


class ConvError(ValueError):
  """Bad arguments of a convolution or a pool (the message names the argument)."""


def _check_impl(impl: str) -> None:
  if impl not in IMPLS:
    raise ConvError(f"impl: expected one of {IMPLS}, got {impl!r}")


def _by_platform(impl: str, args, cpu: Callable[..., Any], reference: Callable[..., Any]):
  """``cpu(*args)`` or ``reference(*args)``; "auto" picks by the compiling platform."""
  _check_impl(impl)
  if impl == "cpu":
    return cpu(*args)
  if impl == "reference":
    return reference(*args)
  return lax.platform_dependent(*args, cpu=cpu, default=reference)


# ---------------------------------------------------------------------------
# Convolution


def _pads(x_shape, kernel_shape, strides, padding) -> tuple[tuple[int, int], ...]:
  if isinstance(padding, str):
    return tuple(lax.padtype_to_pads(x_shape[1:3], kernel_shape[:2], strides, padding))
  return tuple((int(lo), int(hi)) for lo, hi in padding)


def _lax_conv(x, kernel, strides, pads):
  return lax.conv_general_dilated(x, kernel, strides, pads, dimension_numbers=_DIMENSIONS)


def _stored(x):
  """``x`` (its finite values unchanged), in a form that XLA:CPU computes once and stores.

  XLA fuses a cheap elementwise producer into every consumer, even when that computes
  it again for each: the 25 taps of a one-channel convolution would be recomputed by
  the ReLU, by the max-pool and by their gradients (the tiny CNN's step took 1.5-2x
  as long). A division by an array XLA cannot fold is an op it treats as expensive
  and does not duplicate, so ``x / (1 + 0 x)`` is computed once. The divisor is 1 for
  finite x (an infinite x becomes NaN).
  """
  return x / (1 + 0 * x)


def _taps(x, kernel, pads):
  """Stride-1 convolution as a sum over the kernel's taps and input channels (few channels)."""
  kh, kw, channels, _ = kernel.shape
  xp = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
  oh, ow = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
  out = None
  for i in range(kh):
    for j in range(kw):
      for c in range(channels):
        term = xp[:, i:i + oh, j:j + ow, c:c + 1] * kernel[i, j, c][None, None, None, :]
        out = term if out is None else out + term
  return _stored(out)


def _forward(x, kernel, strides, pads):
  if x.shape[-1] <= TAPS_MAX_CHANNELS and tuple(strides) == (1, 1):
    return _taps(x, kernel, pads)
  return _lax_conv(x, kernel, strides, pads)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _cpu_conv(x, kernel, strides, pads):
  return _forward(x, kernel, strides, pads)


def _cpu_conv_fwd(x, kernel, strides, pads):
  return _forward(x, kernel, strides, pads), (x, kernel)


def _cpu_conv_bwd(strides, pads, residuals, g):
  x, kernel = residuals
  dx = jax.linear_transpose(lambda a: _lax_conv(a, kernel, strides, pads), x)(g)[0]
  zero = jnp.zeros_like(kernel)
  dkernel = None
  for start in range(0, x.shape[0], WEIGHT_GRAD_CHUNK):
    part = slice(start, start + WEIGHT_GRAD_CHUNK)
    d = jax.linear_transpose(lambda k, a=x[part]: _lax_conv(a, k, strides, pads), zero)(g[part])[0]
    dkernel = d if dkernel is None else dkernel + d
  return dx, dkernel


_cpu_conv.defvjp(_cpu_conv_fwd, _cpu_conv_bwd)


def conv2d(x: Array, kernel: Array, strides: Sequence[int] = (1, 1), padding: Padding = "SAME",
           impl: str = "auto") -> Array:
  """2-D convolution (cross-correlation), NHWC input and HWIO kernel.

  ``out[b, p, q, o] = sum_{i, j, c} xpad[b, s_0 p + i, s_1 q + j, c] kernel[i, j, c, o]``,
  the operation of ``lax.conv_general_dilated(x, kernel, strides, padding,
  dimension_numbers=("NHWC", "HWIO", "NHWC"))``.

  Args:
    x: (B, H, W, C) inputs.
    kernel: (kh, kw, C, O) weights.
    strides: the two strides.
    padding: "SAME", "VALID" or two (low, high) pairs.
    impl: "auto" (the CPU path when compiled for a CPU, the reference elsewhere),
      "cpu" or "reference" (``lax.conv_general_dilated``); see the module docstring.

  Returns:
    (B, H', W', O) outputs; the CPU path's values and gradients equal the
    reference's up to float32 rounding.

  Raises:
    ConvError: bad shapes or ``impl``.
  """
  if x.ndim != 4 or kernel.ndim != 4 or x.shape[-1] != kernel.shape[2]:
    raise ConvError(f"x, kernel: expected shapes (B, H, W, C) and (kh, kw, C, O), got "
                    f"{x.shape} and {kernel.shape}")
  strides = tuple(int(s) for s in strides)
  pads = _pads(x.shape, kernel.shape, strides, padding)
  return cast(Array, _by_platform(impl, (x, kernel),
                                  lambda x, k: _cpu_conv(x, k, strides, pads),
                                  lambda x, k: _lax_conv(x, k, strides, pads)))


class Conv(nn.Module):
  """A 2-D convolution layer computed by :func:`conv2d`: ``flax.linen.Conv``'s parameters.

  The parameters, their names ("kernel" (kh, kw, C, features), "bias"
  (features,)), shapes and initialisers are those of ``flax.linen.Conv`` (and
  the layer is auto-named ``Conv_<i>`` like it), so variables move between the two.

  Attributes:
    features: output channels.
    kernel_size: (kh, kw).
    strides: the two strides.
    padding: "SAME", "VALID" or two (low, high) pairs.
    use_bias: whether to add a bias.
    kernel_init: the kernel's initialiser.
    bias_init: the bias's initialiser.
  """

  features: int
  kernel_size: Sequence[int]
  strides: Sequence[int] = (1, 1)
  padding: Padding = "SAME"
  use_bias: bool = True
  kernel_init: Callable[..., Any] = nn.initializers.lecun_normal()
  bias_init: Callable[..., Any] = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, x):
    kh, kw = self.kernel_size
    kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features),
                        jnp.float32)
    bias = (self.param("bias", self.bias_init, (self.features,), jnp.float32)
            if self.use_bias else None)
    x, kernel, bias = promote_dtype(x, kernel, bias)   # as flax.linen.Conv
    y = conv2d(x, kernel, self.strides, self.padding)
    return y if bias is None else y + bias.reshape(1, 1, 1, -1)


# ---------------------------------------------------------------------------
# Max-pool


def _pool_pads(x_shape, window, padding) -> tuple[tuple[int, int], ...]:
  """The padding of ``padding``, its high side cut (negative: cropping into the input) so
  that each padded size is a multiple of its window: the windows of ``nn.max_pool``."""
  if isinstance(padding, str):
    pads = lax.padtype_to_pads(x_shape[1:3], window, window, padding)
  else:
    pads = [(int(lo), int(hi)) for lo, hi in padding]
  return tuple((lo, hi - (n + lo + hi) % w) for n, w, (lo, hi) in zip(x_shape[1:3], window, pads))


def _windows(x, window, pads):
  """(B, H', wh, W', ww, C): x padded with -inf (or cropped), its windows on axes 2 and 4."""
  x = lax.pad(x, jnp.array(-jnp.inf, x.dtype), ((0, 0, 0), (*pads[0], 0), (*pads[1], 0),
                                                  (0, 0, 0)))
  b, h, w, c = x.shape
  return x.reshape(b, h // window[0], window[0], w // window[1], window[1], c)


def _max_and_first(x, window, pads):
  """The window maxima and the row-major rank of each window's first maximum.

  Written elementwise (no reduction), so XLA fuses the producer of ``x`` into one
  loop that computes each input element once.
  """
  xw = _windows(x, window, pads)
  parts = [xw[:, :, i, :, j, :] for i in range(window[0]) for j in range(window[1])]
  y = functools.reduce(jnp.maximum, parts)
  first = jnp.full(y.shape, len(parts) - 1, jnp.int32)
  for k in range(len(parts) - 2, -1, -1):
    first = jnp.where(parts[k] == y, k, first)
  return y, first


def _stored_ranks(ranks):
  """``ranks`` (ints in [0, 127]) as int8, in a form that XLA:CPU computes once and stores.

  The pool's gradient reads each window's rank once per window element; XLA would fuse
  the ranks' computation (and what lies beneath it) into that read, once per element.
  Dividing by ``1 + min(ranks[0, 0, 0, 0], 0)``, which is 1 but not a constant, stores
  them (see :func:`_stored`).
  """
  small = ranks.astype(jnp.int8)
  return lax.div(small, (1 + jnp.minimum(ranks[0, 0, 0, 0], 0)).astype(jnp.int8))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _cpu_pool(x, window, pads):
  return _max_and_first(x, window, pads)[0]


def _cpu_pool_fwd(x, window, pads):
  y, first = _max_and_first(x, window, pads)
  if window[0] * window[1] <= 127:   # int8 ranks
    first = _stored_ranks(first)
  return y, (first, x.shape)


def _cpu_pool_bwd(window, pads, residuals, g):
  first, shape = residuals
  b, h, w, c = g.shape
  spread = (b, h, window[0], w, window[1], c)
  rank = (lax.broadcasted_iota(jnp.int32, spread, 2) * window[1]
          + lax.broadcasted_iota(jnp.int32, spread, 4))
  hit = first.astype(jnp.int32)[:, :, None, :, None, :] == rank
  gx = jnp.where(hit, g[:, :, None, :, None, :], jnp.zeros((), g.dtype))
  gx = gx.reshape(b, h * window[0], w * window[1], c)
  unpad = tuple((-lo, -hi) for lo, hi in pads)   # undo the padding (re-pad what was cropped)
  gx = lax.pad(gx, jnp.zeros((), g.dtype), ((0, 0, 0), (*unpad[0], 0), (*unpad[1], 0),
                                           (0, 0, 0)))
  assert gx.shape == shape
  return (gx,)


_cpu_pool.defvjp(_cpu_pool_fwd, _cpu_pool_bwd)


def max_pool(x: Array, window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Padding = "VALID", impl: str = "auto") -> Array:
  """``flax.linen.max_pool`` on (B, H, W, C) inputs, with a fast gradient on a CPU.

  Args:
    x: (B, H, W, C) inputs.
    window_shape: (wh, ww).
    strides: the two strides (default: 1, as ``flax.linen.max_pool``).
    padding: "VALID", "SAME" or two (low, high) pairs (padding counts as -inf).
    impl: "auto", "cpu" or "reference" (``flax.linen.max_pool``). The CPU path
      serves non-overlapping windows (strides equal to the window) and falls back
      to the reference otherwise.

  Returns:
    (B, H', W', C) window maxima; on every path the values and gradients are
    bit-identical to ``flax.linen.max_pool``'s (the gradient goes to the first
    maximum of each window).

  Raises:
    ConvError: bad shapes or ``impl``.
  """
  _check_impl(impl)
  if x.ndim != 4 or len(window_shape) != 2:
    raise ConvError(f"x, window_shape: expected (B, H, W, C) inputs and two window sizes, got "
                    f"shape {x.shape} and {window_shape}")
  window = tuple(int(w) for w in window_shape)
  steps = (1, 1) if strides is None else tuple(int(s) for s in strides)
  reference = lambda x: nn.max_pool(x, window, steps, cast(Any, padding))
  if steps != window:
    return reference(x)
  pads = _pool_pads(x.shape, window, padding)
  return cast(Array, _by_platform(impl, (x,), lambda x: _cpu_pool(x, window, pads), reference))
