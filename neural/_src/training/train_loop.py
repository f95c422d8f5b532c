"""The training scaffold of ``neural``: every method trains through :func:`train_loop`.

A method supplies only its loss (and, if its agents talk during training, its
communication step); the scaffold owns the rest: mini-batch sampling, masks for
padded agents, keys, the optimiser (:func:`neural.training.make_optimizer`), stacking of
agents and the choice of the compiled loop.

**Sampling.** ``epochs=E``: every epoch the masked-in points are shuffled (a key
per epoch, :func:`shuffle`) and cut into ``ceil(n_valid / B)`` mini-batches, the
last one partial (its padding has weight 0, so a loss that averages with
:func:`weighted_mean` averages over its own points, like a PyTorch
``DataLoader``). Masked-out points are never used: a padded agent follows the
schedule of its unpadded run with the same key. A batch larger than the data is
the whole data: one step per epoch, on a batch cut to the data's size
(:func:`epoch_batch_size`; a :class:`LargeBatchWarning` says so once).
``steps=S``: S mini-batches of B points drawn uniformly with replacement from the
masked-in points (B may exceed them: a sample size, not a pass).

**Keys.** ``key`` is split into one key per epoch, each into a shuffle key and a
step key; step b of the epoch gets ``fold_in(step_key, b)`` as ``batch.key``
(dropout, the loss's own draws). With ``steps``, step s draws its indices and its
``batch.key`` from ``fold_in(key, s)``. ``batch.shared_key`` is the same for all
agents of a stacked run (a common public batch, say).

**Agents.** With ``stacked=True`` every leaf of ``params``, ``data``, ``mask``,
``context``, ``opt_state`` and ``key`` has a leading agent axis; ``shared`` has
none. The agents train as one vmapped program (``"vmap"``) or one after the
other (``"sequential"``); the numbers are those of training each agent alone.
A ``communicate`` step runs after every optimiser step on the stacked agents
(D-Distillation's soft-decision gossip, D-SGD's parameter gossip). Agents of
different architectures are stacked by groups (``groups``): each group steps as
a stacked run of its own with its own loss and parameters, and ``communicate``
then sees all agents (D-Distillation with mixed models).

**Which loop.** ``step_loop="scan"`` compiles an epoch (or all ``steps``) into one
``lax.scan``; ``"python"`` calls one jitted step per mini-batch. Both run the same
step function. ``"auto"`` (the default) picks by backend and model: XLA:CPU
canonicalises convolutions into its fast library kernels only in a program's
entry computation (its ``ConvCanonicalization`` pass visits nothing else), so the
gradient convolutions inside a scan's loop body run on its generic loop emitter,
about 10x slower; and vmapped convolutions become grouped ones, 3x slower than
one agent after the other. So on a CPU a step that contains a convolution runs as
a Python loop of jitted steps with the agents one after the other; everything
else (dense models on a CPU, any model on an accelerator) runs as a scan with the
agents vmapped. ``benchmarks/train_speed.py`` shows the effect.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import functools
from typing import Any
from typing import NamedTuple
from typing import cast
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedkrr.scale import host_arrays
from neural._src.choices import AGENT_BATCHING
from neural._src.choices import STEP_LOOPS
from neural._src.settings import TrainingSettings
from neural._src.training.optimizers import Hyperparameters
from neural._src.training.optimizers import OptimizerConfig
from neural._src.training.optimizers import OptimizerError
from neural._src.training.optimizers import make_optimizer
from neural._src.training.optimizers import optimizer_config

Array = jax.Array



class TrainError(ValueError):
  """A bad training setting or bad training data (the message names the argument)."""


class Batch(NamedTuple):
  """What the loss sees at one step (one agent's view).

  Attributes:
    data: the caller's ``data`` PyTree at this step's indices (leaves (B, ...)).
    weights: (B,) float32, 1 for a point of the mini-batch, 0 for padding.
    context: the caller's per-agent constants (or state a ``communicate`` step updates).
    shared: the caller's constants common to all agents.
    key: this agent's PRNG key of this step (dropout, the loss's own draws).
    shared_key: this step's key common to all agents of a stacked run.
    step: the global step index (``first_step`` + steps done in this call), int32.
  """

  data: Any
  weights: Array
  context: Any
  shared: Any
  key: Array
  shared_key: Array
  step: Array


class Exchange(NamedTuple):
  """What a ``communicate`` step sees after the optimiser step of every agent (stacked).

  Attributes:
    params_before: the agents' parameters before this step.
    params: after the optimiser step.
    context: the per-agent context (the communicate step may return it updated).
    shared: the shared constants.
    aux: the stacked auxiliary outputs of the losses (``has_aux=True``), else ``None``.
    shared_key, step: as in :class:`Batch`.
  """

  params_before: Any
  params: Any
  context: Any
  shared: Any
  aux: Any
  shared_key: Array
  step: Array


class TrainResult(NamedTuple):
  """Trained ``params``, the optimiser state to continue from, and the final ``context``."""

  params: Any
  opt_state: Any
  context: Any


def weighted_mean(losses: Array, weights: Array) -> Array:
  """``sum_i w_i l_i / max(sum_i w_i, 1)``: a mini-batch mean over its own (unpadded) points."""
  return jnp.sum(weights * losses) / jnp.maximum(jnp.sum(weights), 1.0)


class LargeBatchWarning(UserWarning):
  """``batch_size`` exceeds the data: each epoch is one step on the whole data."""


def epoch_batch_size(batch_size: int, points: int) -> int:
  """The mini-batch size of an epoch over at most ``points`` points.

  ``batch_size`` when it does not exceed the data; otherwise one step takes all
  the data, in a batch of the smallest power of 2 >= ``points`` (so padding stays
  under 2x and nearby sizes share one compiled program). The schedule is the same
  as with ``batch_size`` (one step per epoch, every point once, the same order),
  without computing a loss on up to ``batch_size`` padding slots.
  """
  if points < 1 or batch_size <= points:
    return batch_size
  return min(batch_size, 1 << (points - 1).bit_length())


def shuffle(key: Array, mask: Array) -> Array:
  """A permutation of 0..n-1 with the masked-in points first, in random order.

  Point i's sort key is drawn from ``fold_in(key, i)``, so the order of the
  points 0..n_a-1 does not depend on how many padded points follow them.
  """
  n = mask.shape[0]
  index = jnp.arange(n, dtype=jnp.int32)
  bits = jax.vmap(lambda i: jax.random.bits(jax.random.fold_in(key, i), dtype=jnp.uint32))(index)
  invalid = jnp.logical_not(mask).astype(jnp.int32)
  return jax.lax.sort((invalid, bits, index), num_keys=3)[2]


# ---------------------------------------------------------------------------
# One step (static plan, traced arrays)


@dataclasses.dataclass(frozen=True)
class _Plan:
  """The static part of a compiled step (hashable: a jit cache key)."""

  loss_fn: Any                      # a callable; with groups a tuple of them, one per group
  optimizer: OptimizerConfig        # its rule() only: lr and weight decay are Hyperparameters
  batch_size: int
  sampling: str                     # "epochs" or "steps"
  has_aux: bool = False
  communicate: Callable[..., Any] | None = None
  stacked: bool = False
  agents: str = "vmap"              # stacked only: "vmap" or "sequential" (the agent_batching)
  num_agents: int = 1
  guard: bool = False               # some agent can meet a mini-batch of padding only
  groups: tuple[tuple[int, ...], ...] | None = None   # stacked only: agents by architecture
  per_agent_hyper: bool = False     # stacked only: a learning rate and decay per agent


class _Inputs(NamedTuple):
  """Arrays of one compiled call: the data and what the sampler needs (per agent if stacked)."""

  data: Any
  shared: Any
  order: Array        # epochs: this epoch's shuffled indices; steps: masked-in points first
  n_valid: Array      # () int32 masked-in points
  key: Array          # epochs: this epoch's step key; steps: the call's key
  shared_key: Array   # the same, common to all agents
  first: Array        # () int32: the global index of this call's step 0


def _sample(plan: _Plan, order, n_valid, key, i):
  """Indices, weights and the loss key of step i (one agent)."""
  b = plan.batch_size
  if plan.sampling == "epochs":
    idx = jax.lax.dynamic_slice(order, (i * b,), (b,))
    weights = ((i * b + jnp.arange(b)) < n_valid).astype(jnp.float32)
    return idx, weights, jax.random.fold_in(key, i)
  draw_key, step_key = jax.random.split(jax.random.fold_in(key, i))
  u = jax.random.uniform(draw_key, (b,))
  j = jnp.minimum((u * n_valid).astype(jnp.int32), n_valid - 1)
  return order[j], jnp.ones((b,), jnp.float32), step_key


def _agent_step(plan: _Plan, tx, params, opt_state, data, context, shared, order, n_valid, key,
                shared_key, step, i):
  idx, weights, step_key = _sample(plan, order, n_valid, key, i)
  batch = Batch(jax.tree.map(lambda a: a[idx], data), weights, context, shared, step_key,
                shared_key, step)
  if plan.has_aux:
    grads, aux = jax.grad(plan.loss_fn, has_aux=True)(params, batch)
  else:
    grads, aux = jax.grad(plan.loss_fn)(params, batch), None
  updates, new_opt_state = tx.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  if plan.guard:   # a mini-batch of padding only makes no step at all
    active = jnp.sum(weights) > 0
    keep = lambda new, old: jnp.where(active, new, old)
    new_params = jax.tree.map(keep, new_params, params)
    new_opt_state = jax.tree.map(keep, new_opt_state, opt_state)
  return new_params, new_opt_state, aux


def _group_view(plan: _Plan, state, inputs: _Inputs, g: int):
  """Group g of a grouped plan as a stacked run of its own: (plan, state, inputs).

  Its loss is ``plan.loss_fn[g]``, its parameters and optimiser state ``params[g]``
  and ``opt_state[g]``; the per-agent context, data and sampler are its members' rows.
  """
  members = np.asarray(cast(tuple, plan.groups)[g])
  pick = lambda tree: jax.tree.map(lambda a: a[members], tree)
  params, opt_state, context = state
  one = dataclasses.replace(plan, loss_fn=plan.loss_fn[g], communicate=None,
                            groups=None, num_agents=len(members))
  return one, (params[g], opt_state[g], pick(context)), inputs._replace(
      data=pick(inputs.data), order=pick(inputs.order), n_valid=pick(inputs.n_valid),
      key=pick(inputs.key))


def _agents_step(plan: _Plan, tx, state, inputs: _Inputs, i):
  """The optimiser step of every agent (no communication): (params, opt_state, aux)."""
  params, opt_state, context = state
  step = inputs.first + i
  shared_key = jax.random.fold_in(inputs.shared_key, i)
  if plan.groups is not None:   # each group its own stacked step; aux back in agent order
    views = [_group_view(plan, state, inputs, g) for g in range(len(plan.groups))]
    outs = [_agents_step(one, tx, one_state, one_inputs, i)
            for one, one_state, one_inputs in views]
    aux = None
    if plan.has_aux:
      order = np.argsort(np.concatenate([np.asarray(m) for m in plan.groups]))
      aux = jax.tree.map(lambda *a: jnp.concatenate(a)[order], *[out[2] for out in outs])
    return tuple(out[0] for out in outs), tuple(out[1] for out in outs), aux
  per_agent = (params, opt_state, inputs.data, context)
  sampler = (inputs.order, inputs.n_valid, inputs.key)
  if plan.stacked and plan.per_agent_hyper:   # tx: the agents' stacked Hyperparameters
    hyper = cast(Hyperparameters, tx)
    if plan.agents == "vmap":
      with_hyper = lambda h, *a: _agent_step(plan, make_optimizer(plan.optimizer, h), *a)
      return jax.vmap(with_hyper, in_axes=(0, 0, 0, 0, 0, None, 0, 0, 0, None, None, None))(
          hyper, *per_agent, inputs.shared, *sampler, shared_key, step, i)
    agents = [functools.partial(_agent_step, plan, make_optimizer(
        plan.optimizer, jax.tree.map(lambda a, m=m: a[m], hyper))) for m in range(plan.num_agents)]
  else:
    agents = [functools.partial(_agent_step, plan, tx)] * max(1, plan.num_agents)
  agent = agents[0]
  if not plan.stacked:
    return agent(*per_agent, inputs.shared, *sampler, shared_key, step, i)
  if plan.agents == "vmap":
    return jax.vmap(agent, in_axes=(0, 0, 0, 0, None, 0, 0, 0, None, None, None))(
        *per_agent, inputs.shared, *sampler, shared_key, step, i)
  # "sequential": one program, one agent after the other (no vmapped convolutions)
  outs = [cast(Callable[..., Any], agents[m])(   # unpacks jax.tree.map results
      *jax.tree.map(lambda a, m=m: a[m], (*per_agent,)), inputs.shared,
      *jax.tree.map(lambda a, m=m: a[m], sampler), shared_key, step, i)
          for m in range(plan.num_agents)]
  return jax.tree.map(lambda *a: jnp.stack(a), *outs)


def _one_step(plan: _Plan, tx, state, inputs: _Inputs, i):
  params, _, context = state
  new_params, new_opt_state, aux = _agents_step(plan, tx, state, inputs, i)
  if plan.communicate is not None:
    new_params, context = plan.communicate(Exchange(
        params, new_params, context, inputs.shared, aux, jax.random.fold_in(inputs.shared_key, i),
        inputs.first + i))
  return new_params, new_opt_state, context


@functools.partial(jax.jit, static_argnames=("plan", "num_steps"))
def _scan_steps(state, inputs, hyper: Hyperparameters, *, plan, num_steps):
  tx = hyper if plan.per_agent_hyper else make_optimizer(plan.optimizer, hyper)
  body = lambda s, i: (_one_step(plan, tx, s, inputs, i), None)
  return jax.lax.scan(body, state, jnp.arange(num_steps, dtype=jnp.int32))[0]


@functools.partial(jax.jit, static_argnames=("plan",))
def _python_step(state, inputs, hyper: Hyperparameters, i, *, plan):
  tx = hyper if plan.per_agent_hyper else make_optimizer(plan.optimizer, hyper)
  return _one_step(plan, tx, state, inputs, i)


# The setup of a call is jitted: run op by op, the optimiser's state (a zeros_like per
# leaf, vmapped for stacked agents) and the key splits cost about as much as a short
# epoch's training (on a GPU, 2x the time of a 1,024-image CNN epoch for one agent).
@functools.partial(jax.jit, static_argnames=("optimizer", "stacked"))
def _optimizer_init(params, *, optimizer, stacked):
  tx = make_optimizer(optimizer)
  return jax.vmap(tx.init)(params) if stacked else tx.init(params)


@functools.partial(jax.jit, static_argnames=("stacked",))
def _shared_key(key, *, stacked):
  return jax.random.fold_in(key[0] if stacked else key, 0x5EED)


@functools.partial(jax.jit, static_argnames=("epochs", "stacked"))
def _epoch_keys(key, shared_key, *, epochs, stacked):
  epoch_keys = (jax.vmap(lambda k: jax.random.split(k, epochs))(key) if stacked
                else jax.random.split(key, epochs))
  return epoch_keys, jax.random.split(shared_key, epochs)


@functools.partial(jax.jit, static_argnames=("stacked", "slots"))
def _epoch_order(mask, epoch_key, *, stacked, slots):
  """(order padded or cut to ``slots``, step key) of one epoch, from its key."""
  def one(mask, epoch_key):
    shuffle_key, step_key = jax.random.split(epoch_key)
    order = shuffle(shuffle_key, mask)
    pad = slots - order.shape[0]
    order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)]) if pad > 0 else order[:slots]
    return order, step_key
  return jax.vmap(one)(mask, epoch_key) if stacked else one(mask, epoch_key)


@functools.partial(jax.jit, static_argnames=("stacked",))
def _valid_first(mask, *, stacked):
  one = lambda m: jnp.argsort(jnp.logical_not(m), stable=True).astype(jnp.int32)
  return jax.vmap(one)(mask) if stacked else one(mask)


# ---------------------------------------------------------------------------
# Which loop (see the module docstring)


def _has_convolution(jaxpr) -> bool:
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "conv_general_dilated":
      return True
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns") and _has_convolution(inner):
          return True
  return False


_CONV_CACHE: dict[Any, bool] = {}


def _step_uses_convolution(plan: _Plan, state, inputs: _Inputs) -> bool:
  """Whether one agent's step contains a convolution (traced once per plan and shapes)."""
  if plan.groups is not None:
    return any(_step_uses_convolution(*_group_view(plan, state, inputs, g))
               for g in range(len(plan.groups)))
  signature = (plan, jax.tree.structure((state, inputs)),
               tuple((np.shape(a), jnp.result_type(a)) for a in jax.tree.leaves((state, inputs))))
  if signature not in _CONV_CACHE:   # slices and traces only the first time
    one = dataclasses.replace(plan, stacked=False, communicate=None, num_agents=1,
                              per_agent_hyper=False)
    if plan.stacked:   # trace one agent's slice
      first = lambda tree: jax.tree.map(lambda a: a[0], tree)
      state = first(state)
      inputs = inputs._replace(data=first(inputs.data), order=inputs.order[0],
                               n_valid=inputs.n_valid[0], key=inputs.key[0])
    tx = make_optimizer(one.optimizer)
    jaxpr = jax.make_jaxpr(lambda s, x: _one_step(one, tx, s, x, jnp.int32(0)))(state, inputs)
    _CONV_CACHE[signature] = _has_convolution(jaxpr.jaxpr)
  return _CONV_CACHE[signature]


def resolve_loop(step_loop: str, agent_batching: str, uses_convolution: Callable[[], bool]
                 ) -> tuple[str, str]:
  """``(step_loop, agent_batching)`` with "auto" resolved (see the module docstring)."""
  if "auto" not in (step_loop, agent_batching):
    return step_loop, agent_batching
  slow_conv = jax.default_backend() == "cpu" and uses_convolution()
  if step_loop == "auto":
    step_loop = "python" if slow_conv else "scan"
  if agent_batching == "auto":
    agent_batching = "sequential" if slow_conv else "vmap"
  return step_loop, agent_batching


# ---------------------------------------------------------------------------
# The scaffold


@dataclasses.dataclass(frozen=True)
class Schedule:
  """How many steps a :func:`train_loop` call takes and how its mini-batches are drawn.

  Attributes:
    batch_size: B.
    epochs: E shuffled passes (give exactly one of ``epochs`` and ``steps``).
    steps: S mini-batches drawn with replacement (see the module docstring).
    first_step: the global index of this call's first step (``batch.step``).
  """

  batch_size: int
  epochs: int | None = None
  steps: int | None = None
  first_step: int = 0


@dataclasses.dataclass(frozen=True)
class Loop:
  """Which compiled loop runs the steps (the numbers are the same; see the module docstring).

  Attributes:
    step_loop: "auto", "scan" or "python".
    agent_batching: "auto", "vmap" or "sequential" (stacked agents only).
  """

  step_loop: str = "auto"
  agent_batching: str = "auto"


class _Checked(NamedTuple):
  """The arguments of :func:`train_loop` checked and normalised by :func:`_check`."""

  loss_fn: Any
  params: Any
  data: Any
  optimizer: OptimizerConfig
  hyper: Hyperparameters        # per agent ((M,) leaves) when ``per_agent_hyper``
  groups: tuple[tuple[int, ...], ...] | None
  mask: np.ndarray              # read on the host
  spread: jax.Array | None      # the mask as given when it spans several processes
  n_valid: np.ndarray
  key: Array
  num_agents: int
  per_agent_hyper: bool


# The keywords that Schedule and Loop took over, by the group each belongs to.
_FORMER = {"batch_size": "schedule", "epochs": "schedule", "steps": "schedule",
           "first_step": "schedule", "step_loop": "loop", "agent_batching": "loop"}


def _grouped(schedule: Schedule | None, loop: Loop | None,
             former: dict[str, Any]) -> tuple[Schedule, Loop]:
  """``schedule`` and ``loop``, built from the keywords they replaced where those are given
  (with a ``DeprecationWarning``; a :class:`TrainError` names a keyword given twice or
  unknown)."""
  unknown = sorted(set(former) - set(_FORMER))
  if unknown:
    raise TrainError(f"{unknown[0]}: not an argument of train_loop")
  given = {group: {k: v for k, v in former.items() if _FORMER[k] == group}
           for group in ("schedule", "loop")}
  for group, value in (("schedule", schedule), ("loop", loop)):
    if value is not None and given[group]:
      raise TrainError(f"{next(iter(given[group]))}: pass it in {group}= (not beside it)")
  if former:
    names = ", ".join(f"{k}=" for k in former)
    warnings.warn(f"train_loop: {names} deprecated: pass schedule=Schedule(batch_size=..., "
                  f"epochs=... or steps=..., first_step=...) and loop=Loop(step_loop=..., "
                  f"agent_batching=...) (neural.training); the old keywords go in the next "
                  f"release", DeprecationWarning, stacklevel=3)
  if schedule is None:
    if "batch_size" not in given["schedule"]:
      raise TrainError("schedule: expected a neural.training.Schedule (batch size, epochs or "
                       "steps)")
    schedule = Schedule(**given["schedule"])
  return schedule, loop if loop is not None else Loop(**given["loop"])


def _check(loss_fn, params, data, *, optimizer, key, schedule: Schedule, loop: Loop, mask,
           opt_state, stacked: bool, communicate, groups) -> _Checked:
  """:func:`train_loop`'s arguments checked (a :class:`TrainError` names a bad one)."""
  epochs, steps, batch_size = schedule.epochs, schedule.steps, schedule.batch_size
  if (epochs is None) == (steps is None):
    raise TrainError(f"epochs, steps: expected exactly one of them, got {epochs!r} and {steps!r}")
  count = epochs if steps is None else steps
  if not isinstance(count, (int, np.integer)) or count < 0:
    raise TrainError(f"{'epochs' if steps is None else 'steps'}: expected an int >= 0, got "
                     f"{count!r}")
  if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise TrainError(f"batch_size: expected a positive int, got {batch_size!r}")
  try:
    optimizer = optimizer_config(optimizer)
  except OptimizerError:
    raise TrainError(f"optimizer: expected a neural.training.OptimizerConfig, got "
                     f"{type(optimizer).__name__}") from None
  hyper = optimizer.hyperparameters()
  if loop.step_loop not in STEP_LOOPS:
    raise TrainError(f"step_loop: expected one of {STEP_LOOPS}, got {loop.step_loop!r}")
  if loop.agent_batching not in AGENT_BATCHING:
    raise TrainError(f"agent_batching: expected one of {AGENT_BATCHING}, got "
                     f"{loop.agent_batching!r}")
  if communicate is not None and not stacked:
    raise TrainError("communicate: needs stacked=True (it acts on all agents at once)")
  if groups is not None:
    groups = tuple(tuple(int(a) for a in members) for members in groups)
    if not stacked:
      raise TrainError("groups: needs stacked=True (it groups the stacked agents)")
    for name, value in (("loss_fn", loss_fn), ("params", params), ("opt_state", opt_state)):
      if value is not None and not (isinstance(value, (tuple, list)) and
                                    len(value) == len(groups)):
        raise TrainError(f"{name}: expected a tuple with one entry per group "
                         f"({len(groups)} groups), got {type(value).__name__}")
    loss_fn, params = tuple(cast(Sequence[Callable[..., Any]], loss_fn)), tuple(params)
  data = jax.tree.map(jnp.asarray, data)
  leaves = jax.tree.leaves(data)
  if not leaves:
    raise TrainError("data: expected a PyTree with at least one array")
  lead = 2 if stacked else 1
  shape = leaves[0].shape[:lead]
  if len(shape) < lead or any(a.shape[:lead] != shape for a in leaves):
    raise TrainError(f"data: expected every array to have the leading axes "
                     f"{'(agents, n)' if stacked else '(n,)'} in common, got shapes "
                     f"{[a.shape for a in leaves]}")
  # A mask sharded over several processes' devices (agents across hosts, fedkrr's
  # spans_processes) is read whole on each host for the checks; the steps take it as it is.
  spread = mask if isinstance(mask, jax.Array) and not mask.is_fully_addressable else None
  mask = np.ones(shape, bool) if mask is None else host_arrays(mask).astype(bool)
  if mask.shape != shape:
    raise TrainError(f"mask: expected shape {shape}, got {mask.shape}")
  n_valid = mask.sum(axis=-1)
  key = jnp.asarray(key)
  num_agents = shape[0] if stacked else 1
  if groups is not None and sorted(a for members in groups for a in members) != list(
      range(num_agents)):
    raise TrainError(f"groups: expected every agent 0..{num_agents - 1} in exactly one group, "
                     f"got {groups}")
  per_agent_hyper = stacked and any(np.ndim(h) > 0 for h in hyper)
  if per_agent_hyper:   # one learning rate and decay per agent: data of one program
    if groups is not None or any(np.ndim(h) > 1 or np.ndim(h) == 1 and np.shape(h) != (
        num_agents,) for h in hyper):
      raise TrainError(f"optimizer: per-agent learning rates and weight decays need shape "
                       f"({num_agents},) and no groups, got shapes "
                       f"{[np.shape(h) for h in hyper]}")
    hyper = Hyperparameters(*(jnp.broadcast_to(jnp.asarray(h, jnp.float32), (num_agents,))
                              for h in hyper))
  if stacked and (key.ndim == 0 or key.shape[0] != num_agents):
    raise TrainError(f"key: expected {num_agents} stacked keys (one per agent), got shape "
                     f"{key.shape}")
  if steps is not None and np.any(n_valid == 0):
    raise TrainError("mask: every agent needs at least one point to draw mini-batches from")
  return _Checked(loss_fn, params, data, optimizer, hyper, groups, mask, spread, n_valid, key,
                  num_agents, per_agent_hyper)


def _steps_per_epoch(schedule: Schedule, n_valid: np.ndarray) -> tuple[int, int, bool]:
  """``(batch size, steps per call or epoch, guard)`` of a checked schedule.

  With ``epochs`` a batch larger than the data is cut to it (:func:`epoch_batch_size`,
  warned once); ``guard``: some agent meets a mini-batch of padding only.
  """
  batch_size = schedule.batch_size
  if schedule.steps is not None:
    return int(batch_size), int(schedule.steps), False
  largest = int(n_valid.max(initial=0))
  if batch_size > largest > 0:   # warned from here: the registry says it once per size
    warnings.warn(f"batch_size {batch_size} is larger than the data: each epoch is one "
                  f"step on the whole data (the batch is cut to the data's size)",
                  LargeBatchWarning, stacklevel=1)
  batch_size = epoch_batch_size(int(batch_size), largest)
  steps_per_epoch = int(-(-int(n_valid.max()) // batch_size))
  sizes = set(-(-np.atleast_1d(n_valid) // batch_size))
  return int(batch_size), steps_per_epoch, len(sizes) > 1


def train_loop(loss_fn: Callable[..., Any] | Sequence[Callable[..., Any]], params: Any,
               data: Any, *,
               optimizer: OptimizerConfig | TrainingSettings, key: Array,
               schedule: Schedule | None = None, loop: Loop | None = None, mask: Any = None,
               context: Any = None, shared: Any = None, opt_state: Any = None,
               stacked: bool = False, groups: Sequence[Sequence[int]] | None = None,
               shared_key: Array | None = None,
               communicate: Callable[[Exchange], tuple[Any, Any]] | None = None,
               has_aux: bool = False,
               on_epoch: Callable[[int, Any, int | None], None] | None = None,
               **former: Any) -> TrainResult:
  """Trains ``params`` on mini-batches of ``data`` with the loss ``loss_fn``.

  Each step: ``grads = grad(loss_fn)(params, batch)`` (a :class:`Batch`), one
  update of ``make_optimizer(optimizer)``, then ``communicate`` if given.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar`` (``(scalar, aux)`` with
      ``has_aux``). It is a static setting: pass a module-level function or a
      frozen dataclass with ``__call__`` (equal values reuse the compiled step).
    params: the parameters (a PyTree; leading agent axis if ``stacked``).
    data: a PyTree of arrays with ``n`` points on axis 0 (axis 1 if ``stacked``).
    optimizer: an :class:`neural.training.OptimizerConfig`, or a config's training
      settings (``neural.training.optimizer_config`` converts them). Its rule and schedule
      are static; its learning rate and weight decay reach the compiled step as data, so
      one program serves every value, and they may be arrays: ``jax.vmap`` of a function
      that calls ``train_loop`` trains over a batch of learning rates at once. With
      ``stacked`` (and no ``groups``) either may have shape (M,): one value per agent.
    key: PRNG key of the sampling and of ``batch.key`` ((M,) keys if ``stacked``).
    schedule: the batch size, ``epochs`` or ``steps``, and the first step's index
      (a :class:`Schedule`).
    loop: which compiled loop runs the steps (a :class:`Loop`; ``None``: "auto").
    mask: (n,) booleans ((M, n) if ``stacked``), ``None`` for all points.
    context: per-agent PyTree handed to the loss (and updated by ``communicate``).
    shared: PyTree common to all agents, handed to the loss and ``communicate``.
    opt_state: the optimiser state to continue from (``None``: a fresh one).
    stacked: the leading axis of params, data, mask, context, opt_state and key
      is an agent axis.
    groups: stacked agents of different architectures, grouped: ``groups[g]`` lists
      the agents of group g (every agent in exactly one group). Then ``loss_fn[g]``
      is group g's loss, and ``params`` and ``opt_state`` are tuples whose entry g
      is stacked over ``groups[g]`` in that order; data, mask, context, key and the
      aux that ``communicate`` sees stay stacked over all agents in agent order.
      Each group steps as a stacked run of its own, then ``communicate`` acts on all.
    shared_key: the key of ``batch.shared_key`` (default: derived from ``key``).
    communicate: ``communicate(exchange) -> (params, context)`` after every step
      of the stacked agents (static, like ``loss_fn``); needs ``stacked``.
    has_aux: ``loss_fn`` returns ``(loss, aux)``; aux reaches ``communicate``.
    on_epoch: ``on_epoch(epoch, params, agent)`` after every epoch (``epochs`` only),
      to watch training without changing it (e.g. the test accuracy per epoch).
      ``agent`` is ``None`` when ``params`` are all of this call's (stacked if
      ``stacked``), or the index m when stacked agents train one after the other
      and ``params`` are agent m's alone.
    **former: the keywords ``schedule`` and ``loop`` replaced (``batch_size``,
      ``epochs``, ``steps``, ``first_step``, ``step_loop``, ``agent_batching``): still
      taken for one release, with a ``DeprecationWarning``.

  Returns:
    A :class:`TrainResult` (params, optimiser state, context).

  Raises:
    TrainError: bad settings or shapes, named.

  Example:
    >>> def loss_fn(params, batch):
    ...   pred = batch.data["x"] @ params["w"]
    ...   return weighted_mean((pred - batch.data["y"]) ** 2, batch.weights)
    >>> x = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
    >>> y = x @ jnp.array([1.0, -2.0, 0.5])
    >>> out = train_loop(loss_fn, {"w": jnp.zeros(3)}, {"x": x, "y": y},
    ...                  optimizer=OptimizerConfig("sgd", 0.1), key=jax.random.PRNGKey(0),
    ...                  schedule=Schedule(batch_size=16, epochs=50))
    >>> out.params["w"].round(2).tolist()
    [1.0, -2.0, 0.5]
  """
  schedule, loop = _grouped(schedule, loop, former)
  checked = _check(loss_fn, params, data, optimizer=optimizer, key=key, schedule=schedule,
                   loop=loop, mask=mask, opt_state=opt_state, stacked=stacked,
                   communicate=communicate, groups=groups)
  loss_fn, params, data, key = checked.loss_fn, checked.params, checked.data, checked.key
  groups, hyper, n_valid = checked.groups, checked.hyper, checked.n_valid
  rule = checked.optimizer.rule()
  if opt_state is None and groups is not None:
    opt_state = tuple(_optimizer_init(p, optimizer=rule, stacked=True) for p in params)
  elif opt_state is None:
    opt_state = _optimizer_init(params, optimizer=rule, stacked=stacked)
  epochs = schedule.epochs
  if (schedule.steps if epochs is None else epochs) == 0:
    return TrainResult(params, opt_state, context)
  if shared_key is None:
    shared_key = cast(jax.Array, _shared_key(key, stacked=stacked))   # jit's result: untyped
  batch_size, steps_per_epoch, guard = _steps_per_epoch(schedule, n_valid)
  plan = _Plan(loss_fn, rule, batch_size, "epochs" if epochs is not None else "steps",
               has_aux, communicate, stacked, "vmap", checked.num_agents, guard=guard,
               groups=groups, per_agent_hyper=checked.per_agent_hyper)
  state = (params, opt_state, context)
  mask = jnp.asarray(checked.mask) if checked.spread is None else checked.spread.astype(bool)
  first_step, valid = schedule.first_step, jnp.asarray(n_valid, jnp.int32)
  if epochs is not None:
    epoch_keys, shared_keys = _epoch_keys(key, shared_key, epochs=epochs, stacked=stacked)

    def inputs_of(e):
      order, step_key = _epoch_order(mask, epoch_keys[:, e] if stacked else epoch_keys[e],
                                     stacked=stacked, slots=steps_per_epoch * batch_size)
      return _Inputs(data, shared, order, valid, step_key, shared_keys[e],
                     jnp.int32(first_step + e * steps_per_epoch))
  else:
    order = _valid_first(mask, stacked=stacked)
    inputs_of = lambda e: _Inputs(data, shared, order, valid, key, shared_key,
                                  jnp.int32(first_step))

  first_inputs = inputs_of(0)
  step_loop, agent_batching = resolve_loop(
      loop.step_loop, loop.agent_batching,
      lambda: _step_uses_convolution(plan, state, first_inputs))
  if stacked and agent_batching == "sequential":
    if communicate is None and groups is None:   # independent agents: each trains alone
      return _one_by_one(loss_fn, state, data, mask, key, shared_key, shared,
                         dict(optimizer=checked.optimizer, schedule=schedule,
                              loop=Loop(step_loop, "vmap"), has_aux=has_aux), on_epoch,
                         hyper if checked.per_agent_hyper else None)
    plan = dataclasses.replace(plan, agents="sequential")   # one program (they communicate)
  for e in range(1 if epochs is None else epochs):
    inputs = first_inputs if e == 0 else inputs_of(e)
    if step_loop == "scan":
      state = _scan_steps(state, inputs, hyper, plan=plan, num_steps=steps_per_epoch)
    else:
      for i in range(steps_per_epoch):
        state = _python_step(state, inputs, hyper, jnp.int32(i), plan=plan)
    if on_epoch is not None and epochs is not None:
      on_epoch(e, state[0], None)
  return TrainResult(*state)


def _one_by_one(loss_fn, state, data, mask, key, shared_key, shared, settings,
                on_epoch, hyper: Hyperparameters | None = None) -> TrainResult:
  """Stacked agents trained one after the other (same keys and numbers as alone), restacked;
  ``hyper``: each agent's learning rate and weight decay (else the optimiser's)."""
  params, opt_state, context = state
  rule = settings["optimizer"]
  outs = []
  for m in range(mask.shape[0]):
    pick = lambda tree, m=m: jax.tree.map(lambda a: a[m], tree)
    hook = None if on_epoch is None else (lambda e, p, _, m=m: on_epoch(e, p, m))
    if hyper is not None:   # agent m's own numbers (no decay stays no term at all, as alone)
      settings = {**settings, "optimizer": dataclasses.replace(
          rule, learning_rate=float(hyper.learning_rate[m]),
          weight_decay=float(hyper.weight_decay[m]) if rule.decays else 0.0)}
    outs.append(train_loop(loss_fn, pick(params), pick(data), key=key[m], mask=mask[m],
                           context=pick(context), shared=shared, opt_state=pick(opt_state),
                           shared_key=shared_key, on_epoch=hook, **settings))
  return TrainResult(*jax.tree.map(lambda *a: jnp.stack(a), *outs))
