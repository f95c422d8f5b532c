"""Jitted training of one Flax model, or of many same-architecture models as one vmapped program.

The paper's setting (Afonin & Karimireddy, App. A): Adam, learning rate 1e-3,
L2 weight decay 3e-4 added to the gradient *before* Adam, as PyTorch's
``torch.optim.Adam(weight_decay=...)`` does (not AdamW's decoupled decay):

    g <- grad + wd * p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

Losses, on per-example softmax probabilities ``s = softmax(logits)`` (C classes):

* ``"mse"``: ``mean_c (s_c - t_c)^2``, averaged over the batch: PyTorch's
  ``MSELoss()(softmax(out), targets)`` with its default mean over batch *and*
  classes, as the paper's code uses (Sec. 6: "squared loss since it is closer
  to the theoretical setting");
* ``"ce"``: soft cross-entropy ``-sum_c t_c log s_c``, averaged over the batch.

The data are shuffled every epoch from an explicit key and cut into
``ceil(n / batch_size)`` mini-batches (the last one partial, averaged over its
own points like a PyTorch ``DataLoader``). A per-example ``mask`` removes points:
they are shuffled to the end and never used, and a mini-batch without any point
makes no optimiser step at all. So an agent whose data are padded to a larger n
with a mask follows exactly the schedule of the unpadded run with the same key,
which is what lets :func:`train_batch` stack agents with different numbers of points.

Everything is float32, whether or not JAX's x64 mode is on.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

Array = jax.Array
Variables = Any   # a Flax variables dict {"params": ...}

LOSSES = ("mse", "ce")


class TrainError(ValueError):
  """A bad training setting or bad training data."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Settings of local training (static: part of the compiled program).

  Attributes:
    epochs: passes over the data.
    batch_size: points per mini-batch.
    learning_rate: Adam's step size (1e-3 in the paper).
    weight_decay: L2 coefficient added to the gradient before Adam (3e-4 in the
      paper, 0 for its 'no regularisation' runs).
    loss: "mse" (squared error of the softmax output, the paper's default) or
      "ce" (soft cross-entropy, App. H.3).
    warm_start: if true, a learner with ``init`` variables starts from them
      instead of a fresh initialisation.
  """

  epochs: int = 20
  batch_size: int = 64
  learning_rate: float = 1e-3
  weight_decay: float = 3e-4
  loss: str = "mse"
  warm_start: bool = False

  def __post_init__(self):
    if int(self.epochs) < 0:
      raise TrainError(f"epochs: expected an int >= 0, got {self.epochs}")
    if int(self.batch_size) < 1:
      raise TrainError(f"batch_size: expected a positive int, got {self.batch_size}")
    if not float(self.learning_rate) > 0:
      raise TrainError(f"learning_rate: expected a positive number, got {self.learning_rate}")
    if not float(self.weight_decay) >= 0:
      raise TrainError(f"weight_decay: expected a number >= 0, got {self.weight_decay}")
    if self.loss not in LOSSES:
      raise TrainError(f"loss: expected one of {LOSSES}, got {self.loss!r}")


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
  """PyTorch-style Adam with L2 weight decay added to the gradient (see module docstring)."""
  return optax.chain(
      optax.add_decayed_weights(config.weight_decay),
      optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8),
      optax.scale(-config.learning_rate),
  )


def per_example_loss(logits: Array, targets: Array, loss: str) -> Array:
  """Loss of each example, shape (B,), from logits (B, C) and targets (B, C)."""
  if loss == "mse":
    return jnp.mean((jax.nn.softmax(logits) - targets) ** 2, axis=-1)
  if loss == "ce":
    return -jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1)
  raise TrainError(f"loss: expected one of {LOSSES}, got {loss!r}")


def _float32(tree):
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=jnp.float32), tree)


def init_variables(model: nn.Module, key: Array, input_shape: tuple[int, ...]) -> Variables:
  """Fresh float32 variables of ``model`` for inputs of shape ``(B,) + input_shape``."""
  x = jnp.zeros((1, *tuple(input_shape)), dtype=jnp.float32)
  return _float32(model.init({"params": key}, x, train=False))


def _shuffle(key: Array, mask: Array) -> Array:
  """A permutation of 0..n-1 with the masked-in points first, in random order.

  Point i's sort key is drawn from ``fold_in(key, i)``, so the order of the
  points 0..n_a-1 does not depend on how many padded points follow them.
  """
  n = mask.shape[0]
  index = jnp.arange(n, dtype=jnp.int32)
  bits = jax.vmap(lambda i: jax.random.bits(jax.random.fold_in(key, i), dtype=jnp.uint32))(index)
  invalid = jnp.logical_not(mask).astype(jnp.int32)
  return jax.lax.sort((invalid, bits, index), num_keys=3)[2]


def _train_one(model: nn.Module, config: TrainConfig, variables: Variables, x: Array,
               targets: Array, mask: Array, key: Array) -> Variables:
  """Trains one model (a pure function of arrays; ``model``, ``config`` static)."""
  n = x.shape[0]
  batch_size = int(config.batch_size)
  num_batches = -(-n // batch_size)
  slots = num_batches * batch_size
  tx = make_optimizer(config)
  params = variables["params"]
  others = {k: v for k, v in variables.items() if k != "params"}

  def batch_loss(p, xb, tb, wb, dropout_key):
    logits = model.apply({"params": p, **others}, xb, train=True, rngs={"dropout": dropout_key})
    losses = per_example_loss(logits.astype(jnp.float32), tb, config.loss)
    return jnp.sum(wb * losses) / jnp.maximum(jnp.sum(wb), 1.0)

  def step(carry, batch):
    p, opt_state = carry
    idx, wb, dropout_key = batch
    grads = jax.grad(batch_loss)(p, x[idx], targets[idx], wb, dropout_key)
    updates, new_opt_state = tx.update(grads, opt_state, p)
    new_p = optax.apply_updates(p, updates)
    active = jnp.sum(wb) > 0   # an empty mini-batch (padding only) makes no step
    keep = lambda new, old: jnp.where(active, new, old)
    return (jax.tree_util.tree_map(keep, new_p, p),
            jax.tree_util.tree_map(keep, new_opt_state, opt_state)), None

  def epoch(carry, epoch_key):
    shuffle_key, dropout_key = jax.random.split(epoch_key)
    order = _shuffle(shuffle_key, mask)
    order = jnp.concatenate([order, jnp.zeros((slots - n,), dtype=order.dtype)])
    weights = jnp.where(jnp.arange(slots) < n, mask[order], False).astype(jnp.float32)
    dropout_keys = jax.vmap(lambda b: jax.random.fold_in(dropout_key, b))(
        jnp.arange(num_batches))
    batches = (order.reshape(num_batches, batch_size),
               weights.reshape(num_batches, batch_size), dropout_keys)
    carry, _ = jax.lax.scan(step, carry, batches)
    return carry, None

  carry = (params, tx.init(params))
  if config.epochs > 0:
    carry, _ = jax.lax.scan(epoch, carry, jax.random.split(key, config.epochs))
  return {**others, "params": carry[0]}


@functools.partial(jax.jit, static_argnames=("model", "config"))
def _train_jit(variables, x, targets, mask, key, *, model, config):
  return _train_one(model, config, variables, x, targets, mask, key)


@functools.partial(jax.jit, static_argnames=("model", "config"))
def _train_vmap_jit(variables, x, targets, mask, key, *, model, config):
  return jax.vmap(functools.partial(_train_one, model, config))(variables, x, targets, mask, key)


def _check_data(x, targets, mask, batch_axes: int):
  x = jnp.asarray(x, dtype=jnp.float32)
  targets = jnp.asarray(targets, dtype=jnp.float32)
  if x.ndim < batch_axes + 1 or targets.ndim != batch_axes + 1:
    raise TrainError(f"x, targets: expected shapes (n, ...) and (n, C), got {x.shape} "
                     f"and {targets.shape}")
  if x.shape[:batch_axes] != targets.shape[:batch_axes]:
    raise TrainError(f"x, targets: expected the same number of points, got shapes "
                     f"{x.shape} and {targets.shape}")
  if mask is None:
    mask = jnp.ones(targets.shape[:-1], dtype=bool)
  mask = jnp.asarray(mask).astype(bool)
  if mask.shape != targets.shape[:-1]:
    raise TrainError(f"mask: expected shape {targets.shape[:-1]}, got {mask.shape}")
  return x, targets, mask


def _pad_to_batches(x, targets, mask, batch_size: int, axis: int):
  """Pads the points axis to a multiple of ``batch_size`` (masked out): the same schedule,
  and one compiled program for every n with the same number of mini-batches."""
  n = x.shape[axis]
  pad = -(-n // batch_size) * batch_size - n
  if pad == 0:
    return x, targets, mask
  widths = lambda a: [(0, pad) if i == axis else (0, 0) for i in range(a.ndim)]
  return (jnp.pad(x, widths(x)), jnp.pad(targets, widths(targets)),
          jnp.pad(mask, widths(mask), constant_values=False))


def train(model: nn.Module, variables: Variables, x: Array, targets: Array, key: Array,
          config: TrainConfig, mask: Array | None = None) -> Variables:
  """Trains ``model`` from ``variables`` on ``(x, targets)``: one jitted program.

  Args:
    model: a Flax module ``(B, H, W, C) -> logits (B, C)`` (see :func:`get_model`).
    variables: its starting variables (e.g. from :func:`init_variables`).
    x: inputs, shape (n, H, W, C); cast to float32.
    targets: class-probability-like targets, shape (n, C); cast to float32.
    key: PRNG key of the shuffles and dropout (split per epoch).
    config: the optimiser, loss, epochs and batch size.
    mask: optional (n,) booleans; masked-out points are never used (see the
      module docstring: the run equals the unpadded run with the same key).

  Returns:
    The trained float32 variables.
  """
  x, targets, mask = _check_data(x, targets, mask, 1)
  x, targets, mask = _pad_to_batches(x, targets, mask, config.batch_size, 0)
  return _train_jit(_float32(variables), x, targets, mask, key, model=model, config=config)


def train_batch(model: nn.Module, variables: Variables, xs: Array, targets: Array, keys: Array,
                config: TrainConfig, masks: Array | None = None) -> Variables:
  """:func:`train` vmapped over a leading agent axis: one jitted program for all agents.

  Args:
    model, config: shared by all agents (static).
    variables: stacked variables, every leaf with a leading axis of size M.
    xs: (M, n, H, W, C) inputs; agents with fewer points are padded and masked.
    targets: (M, n, C).
    keys: (M,) stacked PRNG keys, one per agent.
    masks: (M, n) booleans, or ``None`` for all points.

  Returns:
    The stacked trained variables; agent k's equal ``train`` on its own unpadded
    data with ``keys[k]`` (up to float32 rounding).
  """
  xs, targets, masks = _check_data(xs, targets, masks, 2)
  xs, targets, masks = _pad_to_batches(xs, targets, masks, config.batch_size, 1)
  return _train_vmap_jit(_float32(variables), xs, targets, masks, keys, model=model,
                         config=config)


@functools.partial(jax.jit, static_argnames=("model",))
def _proba_jit(variables, x, *, model):
  return jax.nn.softmax(model.apply(variables, x, train=False).astype(jnp.float32))


def predict_proba(model: nn.Module, variables: Variables, x: Array,
                  batch_size: int = 1024) -> Array:
  """Class probabilities ``softmax(model(x))``, shape (n, C) float32, in chunks of ``batch_size``.

  Chunks all have ``batch_size`` rows (the last is padded), so one compiled
  program serves every n > batch_size; smaller inputs are padded to a power of 2.
  """
  x = jnp.asarray(x, dtype=jnp.float32)
  n = x.shape[0]
  variables = _float32(variables)
  if n <= batch_size:
    size = max(16, 1 << (n - 1).bit_length())
    x = jnp.concatenate([x, jnp.zeros((size - n, *x.shape[1:]), dtype=x.dtype)])
    return _proba_jit(variables, x, model=model)[:n]
  num_chunks = -(-n // batch_size)
  pad = num_chunks * batch_size - n
  x = jnp.concatenate([x, jnp.zeros((pad, *x.shape[1:]), dtype=x.dtype)])
  chunks = [_proba_jit(variables, x[i * batch_size:(i + 1) * batch_size], model=model)
            for i in range(num_chunks)]
  return jnp.concatenate(chunks)[:n]


def stack(trees) -> Any:
  """Stacks a sequence of PyTrees with equal structure along a new leading axis."""
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def unstack(tree, num: int) -> list[Any]:
  """The inverse of :func:`stack`: ``num`` PyTrees, slices of the leading axis."""
  return [jax.tree_util.tree_map(lambda a, k=k: a[k], tree) for k in range(num)]


def pad_to(a, n: int):
  """Pads the leading axis of a NumPy/JAX array with zeros to length ``n``."""
  a = np.asarray(a)
  return np.concatenate([a, np.zeros((n - a.shape[0], *a.shape[1:]), dtype=a.dtype)])
