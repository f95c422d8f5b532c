"""Training of a Flax classifier on soft targets: the paper's neural agent (App. A).

The paper's setting (Afonin & Karimireddy, App. A): Adam, learning rate 1e-3,
L2 weight decay 3e-4 added to the gradient *before* Adam, as PyTorch's
``torch.optim.Adam(weight_decay=...)`` does (see :func:`neural.training.make_optimizer`).
Losses, on per-example softmax probabilities ``s = softmax(logits)`` (C classes):

* ``"mse"``: ``mean_c (s_c - t_c)^2``, averaged over the batch: PyTorch's
  ``MSELoss()(softmax(out), targets)`` with its default mean over batch *and*
  classes, as the paper's code uses (Sec. 6: "squared loss since it is closer
  to the theoretical setting");
* ``"ce"``: soft cross-entropy ``-sum_c t_c log s_c``, averaged over the batch.

:func:`train` and :func:`train_batch` run :func:`neural.training.train_loop` (the one
training scaffold) with :class:`SoftmaxLoss`: shuffled epochs of mini-batches,
the last one partial, a per-example ``mask`` that removes points (a padded agent
follows the schedule of its unpadded run with the same key), and agents stacked
on a leading axis trained together or one after the other.

Everything is float32, whether or not JAX's x64 mode is on.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any
from typing import ClassVar
from typing import NamedTuple
from typing import cast

import flax.linen as nn
import jax
from jax.core import Tracer
import jax.numpy as jnp
import numpy as np

from neural._src.choices import LOSSES
from neural._src.settings import EpochSettings
from neural._src.settings import OptimizerChoice
from neural._src.training.augment import Augment
from neural._src.training.optimizers import Hyperparameters
from neural._src.training.optimizers import optimizer_config
from neural._src.training.train_loop import AGENT_BATCHING
from neural._src.training.train_loop import STEP_LOOPS
from neural._src.training.train_loop import Batch
from neural._src.training.train_loop import Loop
from neural._src.training.train_loop import Schedule
from neural._src.training.train_loop import TrainError
from neural._src.training.train_loop import epoch_batch_size
from neural._src.training.train_loop import train_loop
from neural._src.training.train_loop import weighted_mean

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
Variables = Any   # a Flax variables dict {"params": ...}



@dataclasses.dataclass(frozen=True)
class TrainConfig(EpochSettings, OptimizerChoice):
  """Settings of local training (``neural.training.EpochSettings`` and
  ``neural.training.OptimizerChoice``).

  The loss, the loop and the rule are static (part of the compiled program); the
  learning rate and the weight decay are data (one program serves every value).

  Attributes:
    epochs: passes over the data.
    learning_rate: the optimiser's step size (1e-3 in the paper).
    weight_decay: L2 coefficient added to the gradient before the optimiser (3e-4
      in the paper, 0 for its 'no regularisation' runs).
    loss: "mse" (squared error of the softmax output, the paper's default) or
      "ce" (soft cross-entropy, App. H.3).
    warm_start: if true, a learner with ``init`` variables starts from them
      instead of a fresh initialisation.
    step_loop, agent_batching: how :func:`neural.training.train_loop` runs the steps and
      stacked agents ("auto": by backend and model; the numbers do not depend on it).
    augment: augmentation of every training batch (:class:`neural.training.Augment`), or
      ``None``.
  """

  loss: str = "mse"
  warm_start: bool = False
  step_loop: str = "auto"
  agent_batching: str = "auto"
  augment: Augment | None = None
  epochs_range: ClassVar[tuple[int, int | None]] = (0, None)   # 0 epochs: no training

  def __post_init__(self):
    if self.augment is not None and not isinstance(self.augment, Augment):
      raise TrainError(f"augment: expected a neural.training.Augment or None, got "
                       f"{type(self.augment).__name__}")
    for name, expected in self.training_problems():
      raise TrainError(f"{name}: expected {expected}, got {getattr(self, name)!r}")
    if self.loss not in LOSSES:
      raise TrainError(f"loss: expected one of {LOSSES}, got {self.loss!r}")
    if self.step_loop not in STEP_LOOPS:
      raise TrainError(f"step_loop: expected one of {STEP_LOOPS}, got {self.step_loop!r}")
    if self.agent_batching not in AGENT_BATCHING:
      raise TrainError(f"agent_batching: expected one of {AGENT_BATCHING}, got "
                       f"{self.agent_batching!r}")


def per_example_loss(logits: Array, targets: Array, loss: str) -> Array:
  """Loss of each example, shape (B,), from logits (B, C) and targets (B, C)."""
  if loss == "mse":
    return jnp.mean((jax.nn.softmax(logits) - targets) ** 2, axis=-1)
  if loss == "ce":
    return -jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1)
  raise TrainError(f"loss: expected one of {LOSSES}, got {loss!r}")


class Teachers(NamedTuple):
  """Networks evaluated on every training batch: the targets gain ``sum_k w_k softmax(m_k(x))``.

  Attributes:
    modules: the teachers' Flax modules (static: part of the compiled step).
    variables: their variables, one entry per module (leaves stacked on a leading
      agent axis in :func:`train_batch`).
    weights: (K,) weights w_k ((M, K) in :func:`train_batch`).
  """

  modules: tuple[nn.Module, ...]
  variables: tuple[Variables, ...]
  weights: Any


class LossContext(NamedTuple):
  """The per-agent constants :class:`SoftmaxLoss` reads from ``batch.context``.

  Attributes:
    variables: the model's variables other than its parameters (``None``: none).
    teachers: the teachers' variables, one entry per module of ``SoftmaxLoss.teachers``.
    weights: (K,) float32 weights of the teachers' softmax outputs.
  """

  variables: Any = None
  teachers: tuple[Any, ...] = ()
  weights: Any = ()


@dataclasses.dataclass(frozen=True)
class SoftmaxLoss:
  """The loss of :func:`train`: the mini-batch mean of :func:`per_example_loss`.

  ``batch.data`` holds ``"x"`` (inputs) and ``"t"`` (targets); ``batch.context`` a
  :class:`LossContext` (``None``: no other variables, no teachers); dropout draws
  from ``batch.key``. With ``augment`` every step trains on an augmented batch
  (drawn from ``fold_in(batch.key, 1)``), and with ``teachers`` the targets are
  ``t + sum_k w_k softmax(teacher_k(x))`` on the batch the student sees (the
  teachers in evaluation mode, no gradient).

  Attributes:
    model: the student network.
    loss: "mse" or "ce".
    augment: an :class:`neural.training.Augment`, or ``None``.
    teachers: the teachers' modules (their variables and weights are in the context).
  """

  model: nn.Module
  loss: str = "mse"
  augment: Augment | None = None
  teachers: tuple[nn.Module, ...] = ()

  def __call__(self, params, batch: Batch) -> Array:
    context = LossContext() if batch.context is None else batch.context
    x, targets = batch.data["x"], batch.data["t"]
    if self.augment is not None:
      x = self.augment(jax.random.fold_in(batch.key, 1), x)
    for k, teacher in enumerate(self.teachers):
      logits = cast(Array, teacher.apply(context.teachers[k], x, train=False))
      targets = targets + context.weights[k] * jax.nn.softmax(logits.astype(jnp.float32))
    targets = jax.lax.stop_gradient(targets)
    variables = {"params": params, **(context.variables or {})}
    logits = cast(Array, self.model.apply(variables, x, train=True,
                                          rngs={"dropout": batch.key}))
    return weighted_mean(per_example_loss(logits.astype(jnp.float32), targets, self.loss),
                         batch.weights)


def _float32(tree):
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=jnp.float32), tree)


# XLA:CPU's LLVM pipeline at its default level (3) takes 4-15 s to compile the random draw
# of one small 4-D weight tensor (the tiny CNN's initialisation took 35 s, op by op);
# at level 2 one program initialises the whole model in a few seconds, and its numbers
# are those of the op-by-op initialisation (bit-identical for the CNN, MLP and ResNets;
# a few float32 ulps elsewhere). A compiler option of this one program: nothing global.
_INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 2}


def _init_plain(model: nn.Module, key: Array, input_shape: tuple[int, ...]) -> Variables:
  x = jnp.zeros((1, *input_shape), dtype=jnp.float32)
  return _float32(model.init({"params": key}, x, train=False))


@functools.partial(jax.jit, static_argnames=("model", "input_shape", "batched"),
                   compiler_options=_INIT_COMPILER_OPTIONS)
def _init(key, *, model, input_shape, batched):
  init = functools.partial(_init_plain, model, input_shape=input_shape)
  return jax.vmap(init)(key) if batched else init(key)


def init_variables(model: nn.Module, key: Array, input_shape: tuple[int, ...]) -> Variables:
  """Fresh float32 variables of ``model`` for inputs of shape ``(B,) + input_shape``.

  Called eagerly: one jitted program per model and input shape (compiled with LLVM at
  level 2, which compiles the random draws of small weight tensors 5-10x faster than
  the default). Called inside a transformation (``jit``, ``vmap``, ``eval_shape``): part
  of the caller's program.
  """
  shape = tuple(int(d) for d in input_shape)
  if isinstance(key, Tracer):
    return _init_plain(model, key, shape)
  return _init(key, model=model, input_shape=shape, batched=False)


def init_variables_batch(model: nn.Module, keys: Array,
                         input_shape: tuple[int, ...]) -> Variables:
  """Stacked :func:`init_variables`, one per key along the leading axis of ``keys``
  (vmapped: the same numbers per key)."""
  shape = tuple(int(d) for d in input_shape)
  if isinstance(keys, Tracer):
    return jax.vmap(lambda k: _init_plain(model, k, shape))(keys)
  return _init(keys, model=model, input_shape=shape, batched=True)


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
  batch_size = epoch_batch_size(batch_size, n)   # a batch beyond the data is the data
  pad = -(-n // batch_size) * batch_size - n
  if pad == 0:
    return x, targets, mask
  widths = lambda a: [(0, pad) if i == axis else (0, 0) for i in range(a.ndim)]
  return (jnp.pad(x, widths(x)), jnp.pad(targets, widths(targets)),
          jnp.pad(mask, widths(mask), constant_values=False))


EpochHook = Callable[[int, Variables, "int | None"], None]


def _fit(model, variables, x, targets, mask, key, config: TrainConfig, stacked: bool,
         on_epoch: EpochHook | None, teachers: Teachers | None,
         hyperparameters: Hyperparameters | None = None):
  variables = _float32(variables)
  params = variables["params"]
  others = {k: v for k, v in variables.items() if k != "params"} or None
  modules, context = (), LossContext(others)
  if teachers is not None and teachers.modules:
    modules = tuple(teachers.modules)
    context = LossContext(others, tuple(_float32(v) for v in teachers.variables),
                          jnp.asarray(teachers.weights, jnp.float32))
  def hook(epoch, params, agent):   # the hook sees whole variables, as training returns them
    rest = others if agent is None or others is None else jax.tree.map(lambda a: a[agent],
                                                                        others)
    cast(EpochHook, on_epoch)(epoch, {**(rest or {}), "params": params}, agent)
  optimizer: Any = config
  if hyperparameters is not None:   # per agent (the decay term stays config's: on or off)
    optimizer = dataclasses.replace(
        optimizer_config(config), learning_rate=jnp.asarray(hyperparameters.learning_rate),
        weight_decay=jnp.asarray(hyperparameters.weight_decay) if config.weight_decay else 0.0)
  out = train_loop(SoftmaxLoss(model, config.loss, config.augment, modules), params,
                   {"x": x, "t": targets},
                   optimizer=optimizer, key=key,
                   schedule=Schedule(config.batch_size, epochs=config.epochs),
                   loop=Loop(config.step_loop, config.agent_batching), mask=mask,
                   context=context, stacked=stacked,
                   on_epoch=None if on_epoch is None else hook)
  return {**(others or {}), "params": out.params}


def train(model: nn.Module, variables: Variables, x: ArrayLike, targets: ArrayLike, key: Array,
          config: TrainConfig, mask: ArrayLike | None = None,
          on_epoch: EpochHook | None = None, teachers: Teachers | None = None) -> Variables:
  """Trains ``model`` from ``variables`` on ``(x, targets)`` with :class:`SoftmaxLoss`.

  Args:
    model: a Flax module ``(B, H, W, C) -> logits (B, C)`` (see :func:`get_model`).
    variables: its starting variables (e.g. from :func:`init_variables`).
    x: inputs, shape (n, H, W, C); cast to float32.
    targets: class-probability-like targets, shape (n, C); cast to float32.
    key: PRNG key of the shuffles and dropout (split per epoch).
    config: the optimiser, loss, epochs and batch size.
    mask: optional (n,) booleans; masked-out points are never used (see the
      module docstring: the run equals the unpadded run with the same key).
    on_epoch: ``on_epoch(epoch, variables, None)`` after every epoch, with the
      variables of that moment (it only watches: training is the same with or without).
    teachers: networks whose weighted softmax outputs on each training batch are
      added to ``targets`` (:class:`Teachers`; with ``config.augment``, on the
      augmented batch).

  Returns:
    The trained float32 variables.
  """
  x, targets, mask = _check_data(x, targets, mask, 1)
  x, targets, mask = _pad_to_batches(x, targets, mask, config.batch_size, 0)
  return _fit(model, variables, x, targets, mask, key, config, False, on_epoch, teachers)


def train_batch(model: nn.Module, variables: Variables, xs: ArrayLike, targets: ArrayLike,
                keys: Array, config: TrainConfig, masks: ArrayLike | None = None,
                on_epoch: EpochHook | None = None,
                teachers: Teachers | None = None,
                hyperparameters: Hyperparameters | None = None) -> Variables:
  """:func:`train` for M agents of one architecture, stacked on a leading agent axis.

  The agents train as one vmapped program or one after the other
  (``config.agent_batching``; "auto" picks the faster for the backend and model).

  Args:
    model: shared by all agents (static).
    config: shared by all agents (static).
    variables: stacked variables, every leaf with a leading axis of size M.
    xs: (M, n, H, W, C) inputs; agents with fewer points are padded and masked.
    targets: (M, n, C).
    keys: (M,) stacked PRNG keys, one per agent.
    masks: (M, n) booleans, or ``None`` for all points.
    on_epoch: ``on_epoch(epoch, variables, agent)`` after every epoch: ``agent`` is
      ``None`` with the stacked variables of all agents, or m with agent m's alone
      (when the agents train one after the other).
    teachers: as in :func:`train`, with every agent's teachers' variables and
      weights stacked on a leading axis (the same modules for all agents).
    hyperparameters: each agent's learning rate and weight decay, shape (M,) each, in
      place of ``config``'s (data of the one program); ``None``: ``config``'s for all.
      Whether a decay term is added at all stays ``config``'s (``weight_decay`` 0 or not).

  Returns:
    The stacked trained variables; agent k's equal ``train`` on its own unpadded
    data with ``keys[k]`` (and its own learning rate and weight decay), up to float32
    rounding.
  """
  xs, targets, masks = _check_data(xs, targets, masks, 2)
  xs, targets, masks = _pad_to_batches(xs, targets, masks, config.batch_size, 1)
  return _fit(model, variables, xs, targets, masks, keys, config, True, on_epoch, teachers,
              hyperparameters)


@functools.partial(jax.jit, static_argnames=("model",))
def _proba_jit(variables, x, *, model):
  return jax.nn.softmax(model.apply(variables, x, train=False).astype(jnp.float32))


def predict_proba(model: nn.Module, variables: Variables, x: ArrayLike,
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


def scores(probs: ArrayLike, labels: ArrayLike, targets: ArrayLike | None,
           loss: str) -> tuple[float, float]:
  """``(accuracy, loss)`` of predictions ``probs`` (n, C) against int ``labels`` (n,), in float64.

  ``loss``: "mse", the mean squared error against ``targets`` (n, C) (for kernel
  predictions too); "ce", the cross-entropy of the labels' probabilities, clipped at
  1e-7 (``targets`` unused). Every run of ``neural`` scores its test rows with this.
  """
  probs = np.asarray(probs, dtype=np.float64)
  labels = np.asarray(labels)
  if probs.ndim != 2 or probs.shape[0] != labels.shape[0]:
    raise ValueError(f"probs: expected shape ({labels.shape[0]}, C), got {probs.shape}")
  accuracy = float(np.mean(right(probs, labels)))
  if loss == "mse":
    return accuracy, float(np.mean((probs - np.asarray(targets)) ** 2))
  if loss != "ce":
    raise ValueError(f"loss: expected 'mse' or 'ce', got {loss!r}")
  picked = np.clip(probs[np.arange(labels.shape[0]), labels], 1e-7, 1.0)
  return accuracy, float(-np.mean(np.log(picked)))


def right(probs: ArrayLike, labels: ArrayLike) -> np.ndarray:
  """Per point, whether its most probable class in ``probs`` (n, C) is its int label: (n,) bool.

  The accuracy of :func:`scores` and :func:`accuracy` is its mean.
  """
  return np.argmax(np.asarray(probs), axis=1) == np.asarray(labels)


def accuracy(model: nn.Module, variables: Variables, x: ArrayLike, labels: ArrayLike) -> float:
  """The fraction of ``x`` whose most probable class under ``model`` is its int label."""
  return float(np.mean(right_points(model, variables, x, labels)))


def right_points(model: nn.Module, variables: Variables, x: ArrayLike,
                 labels: ArrayLike) -> np.ndarray:
  """Per point of ``x``, whether ``model``'s most probable class is its int label: (n,) bool."""
  return right(np.asarray(predict_proba(model, variables, x)), labels)


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
